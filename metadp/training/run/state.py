"""The state of one training run: its sampler, privacy views and their ledgers, budget schedule,
clipping policy and record visits (``_Run``, driven by ``metadp.training.run.trainer.train``), and what
depends only on the configuration and the pool: the plan a flag run executes (``config_plan``), its
views and noise calibration. Every run is a run of a plan: ``_Run`` has one path.
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
from typing import Optional

import torch

from metadp.accounting import NonPrivate
from metadp.accounting.adaptive_clipping import combined_noise_multiplier
from metadp.accounting.calibration import max_steps
from metadp.accounting.certify import certify
from metadp.accounting.ledger import Ledger
from metadp.banded_noise import plan_coefficients
from metadp.plan import Plan
from metadp.plan_solve import calibrate_plan, noise_keys
from metadp.sampling import RUN_SCHEMES, Sampling
from metadp.training.run.budget import budget_schedule
from metadp.training.algorithms import functional as F
from metadp.training.algorithms.clipping import ClipPolicy, clip_rule
from metadp.training.algorithms.correlated import BandedSumNoise
from metadp.training.run.config import TrainConfig
from metadp.training.run.plan_command import config_table
from metadp.training.run.plan_run import (charged_once, expected_tasks, fresh_episodes, pass_steps, plan_run_report,
                                         plan_views, settings_refusal)
from metadp.training.run.ledgers import ViewLedgers
from metadp.training.data.samplers import EpisodicSampler, sampler_for
from metadp.training.data.tasks import FreshEpisodes

__all__ = ["stream_seed", "run_views", "calibrate", "config_plan", "outer_optimizer"]


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


def outer_optimizer(params, c: TrainConfig) -> torch.optim.Optimizer:
    """The run's outer optimiser on ``params``: ``c.outer_optimizer`` (None: the algorithm's, Adam for the MAML
    family, SGD for Reptile's) at ``c.outer_lr``, SGD with heavy-ball ``c.outer_momentum``."""
    if (c.outer_optimizer or c.family.optimizer) == "sgd":
        return torch.optim.SGD(params, lr=c.outer_lr, momentum=c.outer_momentum)
    return torch.optim.Adam(params, lr=c.outer_lr)


def config_plan(pool, c: TrainConfig) -> Plan:
    """The plan a flag run of ``c`` on ``pool`` executes (``plan_command.config_table``): its sampling over the
    pool, steps, noise, release and budget unit, each record in at most ``pool.record_multiplicity()`` tasks."""
    if c.meta_batch > pool.size:  # a rate above 1 is no Poisson rate: refused, never clamped
        raise ValueError(f"meta_batch must be <= the pool's {pool.size} tasks, got {c.meta_batch:g}")
    table = config_table(c, pool.size, pool.record_multiplicity(), pool.query_per_task)
    return Plan.from_dict(table)


def _plan_sampling(plan, data, c: TrainConfig, device):
    """(sampler, episode drawer or None) of a run of ``plan`` over ``data`` (a task pool, or
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
    if plan.release is not None and plan.release.per_example_queries \
            and data.query_per_task != plan.release.query_per_task:
        raise ValueError(f"the tasks have {data.query_per_task} query examples each, the plan's "
                         f"release.query_per_task is {plan.release.query_per_task}: its guarantees would not hold")
    gen = torch.Generator(device=device).manual_seed(stream_seed(c.seed, "sampler"))
    sampler = sampler_for(plan.sampling, gen, steps=plan.steps)
    drawer = None
    if fresh_episodes(plan) and not isinstance(sampler, EpisodicSampler):  # a fresh episode per sampled task slot
        drawer = EpisodicSampler(plan.hierarchy, 1, torch.Generator(device=device).manual_seed(
            stream_seed(c.seed, "episodes")))
    return sampler, drawer


def run_views(pool, c: TrainConfig):
    """(the run's sampling scheme, its privacy views): those of the plan a flag run of ``c`` on ``pool``
    executes (:func:`config_plan`; ``metadp.releases``), its budget unit first; none for a non-private
    algorithm."""
    plan = config_plan(pool, c)
    return plan.sampling, (plan_views(plan) if c.private else ())


def calibrate(pool, c: TrainConfig) -> TrainConfig:
    """``c`` with its noise set so that ``c.steps`` steps spend the budget ``c.epsilon`` of its unit, certified:
    the plan of the run (:func:`config_plan`) calibrated by ``metadp.plan_solve.calibrate_plan``, as ``metadp
    train --plan FILE --epsilon`` and ``metadp calibrate`` calibrate. Which noise: z for a view of the
    released sum; z_in for DP-Reptile's and DP-AGRLR's record-vs-server views; both equal (as dp-maml.txt
    Alg. 2 uses one z) for sample-level DP-MAML's record view (``plan_solve.noise_keys``). Per-visit views are
    calibrated for one-pass sampling (visits = passes x the record's multiplicity); with Poisson sampling
    their visits are random: give the noise instead.

    Raises:
        ValueError: on a non-private algorithm, an infinite budget, or a per-visit view under Poisson
            or fixed-size sampling.
    """
    if not c.private or not math.isfinite(c.epsilon):
        raise ValueError("calibration needs a private algorithm and a finite epsilon")
    base = dataclasses.replace(c, clip_policy="fixed" if not clip_rule(c.clip_policy).releases_count else c.clip_policy)
    table = config_table(base, pool.size, pool.record_multiplicity(), pool.query_per_task)
    plan = Plan.from_dict(table)
    if plan.units()[0].charge == "visit" and plan.sampling.charge != "pass":
        raise ValueError(f"the {c.budget_unit} view is charged per visit, which is random under {c.sampling} "
                         "sampling: give the noise multiplier instead of calibrating it")
    z = calibrate_plan(table, "noise", c.epsilon).value
    keys = noise_keys(table)
    fields = {}
    if "noise.multiplier" in keys:
        fields["noise_multiplier"] = (combined_noise_multiplier(z, c.quantile_count_noise)
                                      if clip_rule(c.clip_policy).releases_count else z)
    if "release.inner_noise" in keys:
        fields["inner_noise"] = z
    return dataclasses.replace(c, **fields)


class _Run:
    """The state of one run of a plan (a plan file's, or the plan a flag run compiles to: ``config_plan``):
    sampler, views and their ledgers, clipping, visits (``train`` drives it).

    Construction does no I/O and raises every refusal of the configuration (no guarantee to budget, a
    budget that does not cover one release); :meth:`open_ledgers` then opens or creates the files.
    """

    def __init__(self, pool, config: TrainConfig, device: str, plan: Plan):
        self.pool, self.config, self.plan = pool, config, plan
        c = config
        why = settings_refusal(plan, c.family, c)
        if why is not None:
            raise ValueError(f"--plan: {why}")
        self.sampler, self.drawer = _plan_sampling(plan, pool, c, device)
        self.expected = expected_tasks(plan)
        self.capacity = int(math.ceil(self.expected + 6 * math.sqrt(self.expected) + 1))
        self.noise_gen = torch.Generator(device=device).manual_seed(stream_seed(c.seed, "noise"))
        # DP-FTRL's banded noise (training.algorithms.correlated), else each release's own
        self.banded = (BandedSumNoise(plan_coefficients(plan)) if c.private and plan.noise.correlation == "banded"
                       else None)
        self.once, self.pass_steps = charged_once(plan), pass_steps(plan)
        self.first_step = 0  # where this process's loop started (a run charged once is charged there)
        self.policy = ClipPolicy(c.clip_policy, c.clip, window=c.clip_window, percentile=c.clip_percentile,
                                 target=c.clip_target, learning_rate=c.clip_lr,
                                 count_noise=c.quantile_count_noise if clip_rule(c.clip_policy).releases_count else None)
        self.multiplicity = plan.record_multiplicity or 1
        self.views = plan_views(plan) if c.private else ()
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
        self.last_step, self.pass_cap, self.visit_cap, self.schedule = budget_caps(self.primary, c, self.pass_steps,
                                                                                  self.multiplicity)
        self._spent_cache = (None, 0.0)

    def new_pass(self, done: int) -> bool:
        """Whether the step after ``done`` starts a charged pass: a pass-wise sampler's first step of a pass, or for a
        run charged once the first step of this process's loop (a resumed run is charged again: what it re-runs
        after its checkpoint is not covered by the first charge)."""
        if self.once:
            return done == self.first_step
        return getattr(self.sampler, "step_in_pass", None) == 0

    def add_noise(self, total, std: float):
        """The released sum: ``total`` plus the run's Gaussian noise of std ``std``, independent or banded."""
        if self.banded is not None:
            return self.banded.add(total, std, self.noise_gen)
        return F.noisy_sum({k: v.unsqueeze(0) for k, v in total.items()}, None, std, generator=self.noise_gen)

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

    def spent(self, done: int, fresh: bool = False) -> float:
        """The budget view's certified epsilon after ``done`` steps: the budget schedule's, or the plan's bound
        for the charges on record (``Ledger.spent``, the tightest accountant; for a per-visit view the visits the
        plan allows in ``done`` steps, at most the visit cap: ``plan_run.plan_run_report`` says why), recomputed
        only when ``fresh`` (at checkpoints: it can take a second) or not yet computed, else the last one."""
        ledger = self.primary_ledger
        if ledger is None:
            return 0.0
        n = len(ledger.entries)
        if self.schedule is not None and n <= self.schedule.checkpoints[-1]:
            return self.schedule.epsilon_after(n)
        key = (n, done)
        if self._spent_cache[0] is None or (fresh and self._spent_cache[0] != key):
            if self.primary.charge != "visit":
                value = ledger.spent(self.config.delta) if n else 0.0
            else:
                count = min(self._allowed_visits(done), self.visit_cap)
                value = certify(self.primary.events, self.config.delta, steps=int(count),
                                relation=self.primary.relation, lower=False).epsilon if count else 0.0
            self._spent_cache = (key, value)
        return self._spent_cache[1]

    def _allowed_visits(self, done: int) -> int:
        """The visits of any record the plan allows in ``done`` steps (its a-priori count for that prefix)."""
        view = next(g for g in plan_views(dataclasses.replace(self.plan, steps=done)) if g.key == self.primary.key)
        return view.steps

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
        """``privacy_report.json``: the plan's report over the releases on record (``plan_run.plan_run_report``:
        ``metadp plan --json``'s for a run that completes its plan) and the run's own record (algorithm, every
        view with its charges, budget, sampling realised, clipping)."""
        c, scheme = self.config, self.plan.sampling
        out = plan_run_report(self.plan, c, self.views, self.ledgers, steps, self.plan_prefix(steps), {
            "target_epsilon": c.epsilon if math.isfinite(c.epsilon) else None,
            "last_step_within_budget": self.last_step, "record_multiplicity": self.plan.record_multiplicity,
            "max_record_visits": self.max_visits or None, "clip_policy": c.clip_policy,
            "final_clip": self.policy.threshold, "expected_tasks": self.expected},
            caps={self.primary.key: self.visit_cap} if self.primary is not None and self.primary.charge == "visit" else None)
        population = getattr(scheme, "population", None)
        # what the sampler ran (``sampling`` is the plan's, as ``metadp plan --json`` prints it)
        out["sampling_run"] = {"sampler": run_scheme_name(scheme), "pool": population,
                               "batch": getattr(scheme, "batch_size", None) or None,
                               "steps_per_pass": self.pass_steps, "expected_batch": self.expected}
        return out

    def plan_prefix(self, steps: int) -> int:
        """The plan's steps that the releases on record amount to: the primary ledger's entries for a step
        charge; for a pass charge, the fewest steps whose passes cover the passes on record (a resume after
        a lost checkpoint restarts at step 0 with earlier passes still charged)."""
        ledger = self.primary_ledger
        if ledger is None or self.primary.charge == "visit":
            return steps
        if self.primary.charge == "step":
            return len(ledger.entries)
        passes = len(ledger.entries)
        if self.once:  # the whole run's event is charged at its first step
            return self.plan.steps if passes else steps
        covering = 0 if passes == 0 else (passes - 1) * self.pass_steps + 1
        return max(steps, covering)

    def state(self) -> dict:
        return {"sampler": self.sampler.state_dict(), "noise_generator": self.noise_gen.get_state(),
                "policy": self.policy.state_dict(), "max_visits": self.max_visits,
                "record_visits": None if self.record_visits is None else self.record_visits.cpu(),
                "ledgers": self.ledgers.state(),
                "drawer": None if self.drawer is None else self.drawer.state_dict(),
                "banded": None if self.banded is None else self.banded.state_dict()}

    def load(self, state: dict) -> None:
        self.sampler.load_state_dict(state["sampler"])
        if self.drawer is not None:
            self.drawer.load_state_dict(state["drawer"])
        self.noise_gen.set_state(state["noise_generator"])
        if self.banded is not None:
            if state.get("banded") is None:
                raise ValueError("the checkpoint holds no banded-noise state, this run's plan adds banded noise: its "
                                 "noise cannot be continued")
            self.banded.load_state_dict(state["banded"], self.noise_gen.device)
        self.policy.load_state_dict(state["policy"])
        self.max_visits = state["max_visits"]
        if self.record_visits is not None:
            self.record_visits.copy_(state["record_visits"])
        self.ledgers.check(state["ledgers"])

    def close(self) -> None:
        self.ledgers.close()


def run_scheme_name(scheme: Sampling) -> Optional[str]:
    """The ``--sampler`` name that runs ``scheme`` (None: a scheme only plans name)."""
    return next((run for run, cls in RUN_SCHEMES.items() if cls.scheme == scheme.scheme), None)


def budget_caps(p, c: TrainConfig, per_pass: int, multiplicity: int):
    """(last step, pass cap, visit cap, step schedule or None) of a run whose budget view is ``p``: the last step
    (passes, visits) within ``c.epsilon`` at ``c.delta``, the tightest of every accountant that interprets the
    view's event, as plans are certified. Raises ValueError where the budget does not cover one charge."""
    last_step, pass_cap, visit_cap, schedule = c.steps, math.inf, math.inf, None
    if p is not None and p.event is not None and not isinstance(p.event, NonPrivate) and math.isfinite(c.epsilon):
        if p.charge == "step":
            schedule = budget_schedule(p.event, c.steps, c.epsilon, c.delta, relation=p.relation, accountant="all")
            last_step = schedule.last_step
        elif p.charge == "pass":
            passes = math.ceil(c.steps / per_pass)
            pass_cap = max_steps(p.event, c.epsilon, c.delta, relation=p.relation, accountant="all", limit=passes)
            last_step = min(c.steps, pass_cap * per_pass)
        else:
            visit_cap = max_steps(p.event, c.epsilon, c.delta, relation=p.relation, accountant="all",
                                  limit=c.steps * max(1, multiplicity))  # k visits a step at most
    if p is not None and p.event is not None and (last_step == 0 or visit_cap == 0):
        raise ValueError(f"the budget epsilon <= {c.epsilon:g} at delta {c.delta:g} does not cover one "
                         f"{p.charge} of the {p.key} view ({p.event.describe()}): raise the noise (--noise) or the "
                         "budget (--epsilon)")
    return last_step, pass_cap, visit_cap, schedule
