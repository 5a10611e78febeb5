"""The state of one training run: its sampler, privacy views and their ledgers, budget schedule,
clipping policy and record visits (``_Run``, driven by ``metadp.training.run.trainer.train``), and what
depends only on the configuration and the pool: the sampling, the views and noise calibration.
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
from typing import Optional

import torch

from metadp.accounting import NonPrivate
from metadp.accounting.calibration import calibrate_noise, max_steps
from metadp.accounting.ledger import Ledger
from metadp.core import events as ev
from metadp.sampling import Sampling, of_lot
from metadp.training import algorithms
from metadp.training.run.budget import budget_schedule
from metadp.training.algorithms.clipping import ClipPolicy, clip_rule
from metadp.training.run.config import TrainConfig
from metadp.training.run.plan_run import fresh_episodes, plan_report, plan_run_report, plan_views
from metadp.training.run.report import run_report, view_entry
from metadp.training.run.ledgers import ViewLedgers
from metadp.training.data.samplers import EpisodicSampler, sampler_for
from metadp.training.data.tasks import FreshEpisodes

__all__ = ["stream_seed", "run_views", "calibrate"]


def sampled_rows(mask: torch.Tensor, capacity: int):
    """Indices of the sampled rows padded to ``capacity`` (or more, never dropping one) and their weights."""
    idx = torch.nonzero(mask).flatten()
    size = max(capacity, int(idx.numel()))
    weights = torch.zeros(size, device=mask.device)
    weights[: idx.numel()] = 1.0
    return torch.cat([idx, idx.new_zeros(size - idx.numel())]), weights


def stream_seed(seed: int, stream: str) -> int:
    """A seed for one random stream of a run, derived from ``seed`` and the stream's name.

    The data generators (``SinusoidPool``, ``EpisodePool``) seed Mersenne Twister with the run's seed
    too: the sampler on the same stream would draw the very uniforms that made the tasks (its first
    Poisson step would take exactly the tasks with the smallest amplitudes). Hashing keeps the streams
    apart.
    """
    digest = hashlib.sha256(f"metadp:{stream}:{seed}".encode()).digest()
    return int.from_bytes(digest[:8], "little") >> 1


def _sampling(pool, c: TrainConfig):
    """(sampler, scheme, expected batch) of a run: the ``metadp.sampling`` scheme of ``--sampler`` over the
    pool, and the sampler that executes it."""
    n = pool.size
    if c.meta_batch > n:  # a rate above 1 is no Poisson rate: refused, never clamped
        raise ValueError(f"meta_batch must be <= the pool's {n} tasks, got {c.meta_batch:g}")
    scheme = of_lot(c.sampling, n, c.meta_batch)
    gen = torch.Generator(device=_device_of(pool)).manual_seed(stream_seed(c.seed, "sampler"))
    return sampler_for(scheme, gen), scheme, float(scheme.expected_batch)


def steps_per_pass(scheme: Sampling) -> int:
    """Steps in one pass of a pass-wise scheme (one-pass sampling); 1 for the others."""
    return getattr(scheme, "steps_per_pass", 1)


def _device_of(pool) -> torch.device:
    """Where the pool's tensors live (``EpisodePool.images``, or ``SinusoidPool.device``)."""
    images = getattr(pool, "images", None)
    return images.device if images is not None else torch.device(pool.device)


def _plan_sampling(plan, data, c: TrainConfig, device):
    """(sampler, episode drawer or None, expected tasks a step) of a plan run over ``data`` (a task pool, or
    ``tasks.EpisodeImages`` for fresh episodes, checked against the plan's hierarchy)."""
    if fresh_episodes(plan):
        data.check(plan.hierarchy)
    elif data.size != plan.sampling.population:
        raise ValueError(f"the task pool has {data.size} tasks, the plan's sampling.population is "
                         f"{plan.sampling.population}")
    elif plan.record_multiplicity is not None and hasattr(data, "record_multiplicity") \
            and data.record_multiplicity() > plan.record_multiplicity:
        # (a federated population's records stay with its clients: there the plan's k is the assumption its
        # record-level bound states, not something the server can count)
        raise ValueError(f"a record is in up to {data.record_multiplicity()} tasks of this pool, the plan's "
                         f"record_multiplicity is {plan.record_multiplicity}: its record-level bound would not hold "
                         "(raise record_multiplicity in the plan)")
    gen = torch.Generator(device=device).manual_seed(stream_seed(c.seed, "sampler"))
    sampler = sampler_for(plan.sampling, gen)
    drawer = None
    if fresh_episodes(plan) and not isinstance(sampler, EpisodicSampler):  # a fresh episode per sampled task slot
        drawer = EpisodicSampler(plan.hierarchy, 1, torch.Generator(device=device).manual_seed(
            stream_seed(c.seed, "episodes")))
    return sampler, drawer, float(c.meta_batch)


def run_views(pool, c: TrainConfig, private_clipping: bool = True, *, plan: Optional[Sampling] = None,
              multiplicity: Optional[int] = None):
    """The privacy views of ``c`` on ``pool`` (``metadp.releases.views``) and the sampling plan.

    ``plan`` and ``multiplicity`` (the pool's ``record_multiplicity()``) depend on the pool and the
    sampling only: callers that ask for many configurations of one pool pass them in once.
    """
    plan = plan if plan is not None else _sampling(pool, c)[1]
    if not c.private:
        return plan, ()
    k = multiplicity if multiplicity is not None else pool.record_multiplicity()
    found = algorithms.views(c.algorithm, plan, noise=c.noise_multiplier if c.noise_multiplier > 0 else 1.0,
                  inner_noise=c.inner_noise if c.inner_noise > 0 else 1.0, inner_steps=c.inner_steps,
                  query_per_task=pool.query_per_task, record_multiplicity=k,
                  first_order=c.first_order, private_clipping=private_clipping)
    if not c.bounded:  # no noise or no clipping: each release is non-private (infinite epsilon)
        found = tuple(dataclasses.replace(v, event=NonPrivate()) if v.event is not None else v for v in found)
    return plan, found


def calibrate(pool, c: TrainConfig, *, rtol: float = 1e-3) -> TrainConfig:
    """``c`` with its noise set so that ``c.steps`` steps spend the budget ``c.epsilon`` of its unit (PLD,
    certified). Which noise: z for a view of the released sum; z_in for DP-Reptile's and DP-AGRLR's
    record-vs-server views; both equal (as dp-maml.txt Alg. 2 uses one z) for sample-level DP-MAML's
    record view. Per-visit views are calibrated for one-pass sampling (visits = passes x the record's
    multiplicity); with Poisson sampling their visits are random: give the noise instead.

    Raises:
        ValueError: on a non-private algorithm, an infinite budget, or a per-visit view under Poisson
            or fixed-size sampling.
    """
    if not c.private or not math.isfinite(c.epsilon):
        raise ValueError("calibration needs a private algorithm and a finite epsilon")
    _, plan, _ = _sampling(pool, c)
    key = c.budget_unit
    fields = c.family.calibrated_noise(key)

    def configured(z: float, base: TrainConfig = dataclasses.replace(c, clip_policy="fixed")) -> TrainConfig:
        # the views do not depend on the clip policy (the quantile policy keeps the accounted z)
        return dataclasses.replace(base, **{name: z for name in fields})

    k = pool.record_multiplicity()
    view = next(v for v in run_views(pool, c, plan=plan, multiplicity=k)[1] if v.key == key)
    passes = math.ceil(c.steps / steps_per_pass(plan))
    if view.charge == "visit":
        if plan.charge != "pass":
            raise ValueError(f"the {key} view is charged per visit, which is random under {c.sampling} sampling: "
                             "give the noise multiplier instead of calibrating it")
        count = passes * k
    else:
        count = c.steps if view.charge == "step" else passes

    def event(z: float):
        v = next(v for v in run_views(pool, configured(z), plan=plan, multiplicity=k)[1] if v.key == key)
        return ev.SelfComposed(v.event, count)

    z = calibrate_noise(event, c.epsilon, c.delta, relation=view.relation, accountant="all", rtol=rtol)
    return configured(z, c)


class _Run:
    """The state of one run: sampler, views and their ledgers, clipping, visits (``train`` drives it).

    Construction does no I/O and raises every refusal of the configuration (no guarantee to budget, a
    budget that does not cover one release); :meth:`open_ledgers` then opens or creates the files.
    """

    def __init__(self, pool, config: TrainConfig, device: str, plan_file=None):
        self.pool, self.config, self.plan_file = pool, config, plan_file
        c = config
        self.drawer = None
        if plan_file is None:
            self.sampler, plan, self.expected = _sampling(pool, c)
        else:
            self.sampler, self.drawer, self.expected = _plan_sampling(plan_file, pool, c, device)
            plan = None
        self.plan = plan
        self.capacity = int(math.ceil(self.expected + 6 * math.sqrt(self.expected) + 1))
        self.noise_gen = torch.Generator(device=device).manual_seed(stream_seed(c.seed, "noise"))
        self.policy = ClipPolicy(c.clip_policy, c.clip, window=c.clip_window, percentile=c.clip_percentile,
                                 target=c.clip_target, learning_rate=c.clip_lr,
                                 count_noise=c.quantile_count_noise if clip_rule(c.clip_policy).releases_count else None)
        self.multiplicity = pool.record_multiplicity() if c.private and plan_file is None else 1
        self.views = self._views()
        self.primary = next((v for v in self.views if v.key == c.budget_unit), None)
        if c.private and (self.primary is None or (self.primary.event is None and math.isfinite(c.epsilon))):
            why = f": {self.primary.reason}" if self.primary is not None else ""
            raise ValueError(f"{c.algorithm} has no {c.budget_unit}-level guarantee to budget{why}")
        self.record_visits = None
        if any(v.charge == "visit" for v in self.views):
            ids = pool.record_ids(torch.arange(pool.size, device=device))
            self.record_visits = torch.zeros(int(ids.max()) + 1, dtype=torch.int64, device=device)
        self.max_visits = 0
        self.ledgers = ViewLedgers(self.views, c)
        self.last_step, self.pass_cap, self.visit_cap, self.schedule = budget_caps(self.primary, c, plan,
                                                                                  self.multiplicity)
        self._spent_cache = (None, 0.0)

    def _views(self):
        if self.plan_file is not None:
            return plan_views(self.plan_file) if self.config.private else ()
        return run_views(self.pool, self.config, self.policy.private, plan=self.plan, multiplicity=self.multiplicity)[1]

    # -- budget ------------------------------------------------------------------------------------
    @property
    def primary_ledger(self) -> Optional[Ledger]:
        return self.ledgers.get(self.primary.key) if self.primary is not None else None

    def releases(self, done: int) -> int:
        """Steps on record for the budget: the primary ledger's entries for a per-step charge, else ``done``."""
        ledger = self.primary_ledger
        if ledger is not None and self.primary.charge == "step":
            return len(ledger.entries)
        return done

    def spent(self, fresh: bool = False) -> float:
        """The budget view's certified epsilon so far (the schedule's, or recomputed when the ledger grows).
        A plan run's is the plan's report over the releases on record, recomputed only when ``fresh`` (at
        checkpoints: one report can take a second), else the last one computed."""
        ledger = self.primary_ledger
        if ledger is None:
            return 0.0
        if self.plan_file is not None:
            if fresh or self._spent_cache[0] is None:
                prefix = self.plan_prefix(0)
                self._spent_cache = (prefix, plan_report(self.plan_file, prefix)["epsilon"] if prefix else 0.0)
            return self._spent_cache[1]
        if self.schedule is not None and len(ledger.entries) <= self.schedule.checkpoints[-1]:
            return self.schedule.epsilon_after(len(ledger.entries))
        if self._spent_cache[0] != len(ledger.entries):
            self._spent_cache = (len(ledger.entries), ledger.spent(self.config.delta))
        return self._spent_cache[1]

    def visits_on_record(self) -> int:
        """The visits charged to a visit-charged budget view's ledger: after a resume from an older (or a
        lost) checkpoint they exceed the checkpoint's count, and the budget must count them all."""
        ledger = self.primary_ledger
        if ledger is None or self.primary.charge != "visit":
            return self.max_visits
        return sum(r.count for r in ledger.entries)

    def step_tasks(self, drawn):
        """(tasks, rows, weights) of a step from the sampler's draw: the pool's sampled rows (a Poisson mask
        padded to the capacity, pads weighted 0), or this step's fresh episodes."""
        if isinstance(drawn, torch.Tensor) and drawn.dtype == torch.bool:
            rows, weights = sampled_rows(drawn, self.capacity)
        elif isinstance(drawn, torch.Tensor):
            rows, weights = drawn, torch.ones(drawn.numel(), device=drawn.device)
        else:  # the episodic sampler's episodes
            rows = torch.arange(drawn.indices[0].shape[0], device=drawn.indices[0].device)
            return FreshEpisodes.of(self.pool, drawn), rows, torch.ones(rows.numel(), device=rows.device)
        if self.drawer is None:
            return self.pool, rows, weights
        episodes = self.drawer.sample(rows.numel())  # a fresh episode for each sampled slot (and each pad)
        return FreshEpisodes.of(self.pool, episodes), torch.arange(rows.numel(), device=rows.device), weights

    def count_visits(self, rows: torch.Tensor, weights: torch.Tensor) -> Optional[torch.Tensor]:
        """The record visits after this step (not yet committed), or None when no view counts visits."""
        if self.record_visits is None:
            return None
        ids = self.pool.record_ids(rows[weights > 0]).reshape(-1)
        return self.record_visits + torch.bincount(ids, minlength=self.record_visits.numel())

    def report(self, steps: int) -> dict:
        """``privacy_report.json``: the schema of ``metadp plan --json`` (``run_report``) plus the run's own
        record (algorithm, every view with its charges, budget, sampling realised, clipping)."""
        c = self.config
        if self.plan_file is not None:
            return self._plan_report(steps)
        entries, certified = [], {}
        for v in self.views:
            ledger = self.ledgers.get(v.key)
            eps = kind = None
            if ledger is not None:  # every accountant that interprets the releases; the tightest is reported
                found = ledger.certify(c.delta)
                kind = found.tightest.accountant
                eps = found.epsilon if math.isfinite(found.epsilon) else None
                lowers = [x.epsilon_lower for x in found.certificates if x.epsilon_lower is not None]
                if eps is not None:
                    certified[v.key] = v.certified(eps, max(lowers) if lowers and ledger.entries else None, kind)
            entries.append(view_entry(v, ledger, eps, kind))
        scheme = self.plan
        name = f"metadp train {c.algorithm}"
        noise = {"mechanism": "gaussian", "multiplier": c.noise_multiplier} if c.private else None
        primary = certified.get(c.budget_unit) if c.private else None
        others = [g for key, g in certified.items() if g is not primary]
        out = run_report(name, primary, others, scheme, noise, steps, c.delta if c.private else None)
        out["sampling"].update({"run_scheme": c.sampling, "pool": scheme.population,
                                "batch": getattr(scheme, "batch_size", None) or None,
                                "steps_per_pass": steps_per_pass(scheme), "expected_batch": self.expected})
        out.update({
            "engine": "local", "algorithm": c.algorithm, "private": c.private,
            "budget_unit": c.budget_unit if c.private else None,
            "target_epsilon": c.epsilon if math.isfinite(c.epsilon) else None,
            "last_step_within_budget": self.last_step,
            "record_multiplicity": self.multiplicity, "max_record_visits": self.max_visits or None,
            "clip_policy": c.clip_policy, "final_clip": self.policy.threshold,
            "accountant_note": ("the tightest certified upper bound of every accountant that interprets each view's "
                                "ledger (metadp.accounting.certify)") if c.private else None,
            "views": entries,
            "note": None if c.private else "non-private: no privacy guarantee",
        })
        return out

    def plan_prefix(self, steps: int) -> int:
        """The plan's steps that the releases on record amount to: the primary ledger's entries for a step
        charge; for a pass charge, the fewest steps whose passes cover the passes on record (a resume after
        a lost checkpoint restarts at step 0 with earlier passes still charged)."""
        ledger = self.primary_ledger
        if ledger is None:
            return steps
        if self.primary.charge == "step":
            return len(ledger.entries)
        scheme, passes = self.plan_file.sampling, len(ledger.entries)
        per_pass = getattr(scheme, "steps_per_pass", None) or scheme.population // scheme.batch_size
        covering = 0 if passes == 0 else (passes - 1) * per_pass + 1
        return max(steps, covering)

    def _plan_report(self, steps: int) -> dict:
        """A plan run's report (``plan_run.plan_run_report``)."""
        return plan_run_report(self.plan_file, self.config, self.views, self.ledgers, steps, self.plan_prefix(steps),
                               self.last_step, self.policy.threshold, self.expected)

    def state(self) -> dict:
        return {"sampler": self.sampler.state_dict(), "noise_generator": self.noise_gen.get_state(),
                "policy": self.policy.state_dict(), "max_visits": self.max_visits,
                "record_visits": None if self.record_visits is None else self.record_visits.cpu(),
                "ledgers": self.ledgers.state(),
                "drawer": None if self.drawer is None else self.drawer.state_dict()}

    def load(self, state: dict) -> None:
        self.sampler.load_state_dict(state["sampler"])
        if self.drawer is not None:
            self.drawer.load_state_dict(state["drawer"])
        self.noise_gen.set_state(state["noise_generator"])
        self.policy.load_state_dict(state["policy"])
        self.max_visits = state["max_visits"]
        if self.record_visits is not None:
            self.record_visits.copy_(state["record_visits"])
        self.ledgers.check(state["ledgers"])

    def close(self) -> None:
        self.ledgers.close()


def budget_caps(p, c: TrainConfig, scheme, multiplicity: int):
    """(last step, pass cap, visit cap, step schedule or None) of a run whose budget view is ``p``: the last step
    (passes, visits) within ``c.epsilon`` at ``c.delta``, the tightest of every accountant that interprets the
    view's event, as plans are certified. Raises ValueError where the budget does not cover one charge."""
    last_step, pass_cap, visit_cap, schedule = c.steps, math.inf, math.inf, None
    if p is not None and p.event is not None and not isinstance(p.event, NonPrivate) and math.isfinite(c.epsilon):
        if p.charge == "step":
            schedule = budget_schedule(p.event, c.steps, c.epsilon, c.delta, relation=p.relation, accountant="all")
            last_step = schedule.last_step
        elif p.charge == "pass":
            passes = math.ceil(c.steps / steps_per_pass(scheme))
            pass_cap = max_steps(p.event, c.epsilon, c.delta, relation=p.relation, accountant="all", limit=passes)
            last_step = min(c.steps, pass_cap * steps_per_pass(scheme))
        else:
            visit_cap = max_steps(p.event, c.epsilon, c.delta, relation=p.relation, accountant="all",
                                  limit=c.steps * max(1, multiplicity))  # k visits a step at most
    if p is not None and p.event is not None and (last_step == 0 or visit_cap == 0):
        raise ValueError(f"the budget epsilon <= {c.epsilon:g} at delta {c.delta:g} does not cover one "
                         f"{p.charge} of the {p.key} view ({p.event.describe()}): raise the noise (--noise) or the "
                         "budget (--epsilon)")
    return last_step, pass_cap, visit_cap, schedule
