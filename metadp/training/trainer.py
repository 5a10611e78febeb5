"""One readable loop for MAML, Reptile and their private forms, that stops exactly when the planned
budget is spent (DESIGN.md sec. 4 and 7).

Algorithms (``TrainConfig.algorithm``):

==================  ==================================================================  ======================
algorithm           a step                                                              released with noise
==================  ==================================================================  ======================
maml                per-task meta-gradients (first or second order), averaged, Adam     nothing (non-private)
reptile             per-task SGD updates theta_i - theta, averaged, SGD on them          nothing (non-private)
dp-maml             dp-maml.txt Alg. 1: per-task meta-gradients clipped to C, summed,     the sum, N(0, (zC)^2)
                    noise once, Adam
dp-maml-sample      dp-maml.txt Alg. 2: DP inner loop (per-example clip C_in, noise       inner sums; the sum
                    z_in C_in), per-example query gradients clipped to C, summed over
                    all tasks, noise once, Adam
dp-reptile          dp-meta-learning-task-global.txt Alg. 1 (batched): full-batch DP-SGD  each task's update
                    inside each task, updates averaged without further noise, SGD
dp-agr              dp-fedmeta.txt Alg. 1-2: clients' meta-gradients clipped by the       the sum, N(0, (zC)^2)
                    server, summed, noise once, Adam; one pass over clients by default
dp-agrlr            dp-fedmeta.txt Alg. 2-3: each client runs the sample-level DP         clients' updates;
                    computation and adds its own noise; the server as in dp-agr           the sum
==================  ==================================================================  ======================

The privacy of a run is a set of *views* (``metadp.training.privacy``): task or client, record, and
record against the party that sees the clients' updates. Before step 1 the chosen view (``unit``)
gives the schedule: the last step within the budget (per step, per pass, or the visit cap per
record); the loop stops there. Every release is appended to each view's hash-chained ledger
(``ledger-<view>.jsonl``, fsync) *before* the update uses it; checkpoints hold the parameters,
optimiser, sampler, generator and clipping states and each ledger's length and head; a resumed run
counts every ledger entry, including releases after the last checkpoint (or all of them, from step 0,
when the checkpoint is lost), and never resets spent budget. At the end ``privacy_report.json`` gives
every view's certified epsilon from its ledger (PLD; RDP for fixed-size batches, which PLD has no
dominating pair for).

The run folder (``metadp.training.run_folder``): ``run.json`` keeps the configuration, and a resumed
run must match it; one run writes at a time (a lock); every refusal comes before anything is written.

Samplers: Poisson over the fixed pool of tasks (static shapes: the sampled rows padded, pads
weighted 0; an empty sample still releases noise), fixed-size batches (substitution relation), and
one pass (each task in exactly one step of a pass, balls in bins). The update divides by the
*expected* batch size (the realised size of a Poisson sample is private).

Non-private runs use the same loop with no clipping and no noise, so with z = 0 and C = inf each DP
path reproduces its non-private path. No clipping threshold is computed from raw gradient norms unless
``clip_policy="raw-percentile"``, which exists only to reproduce dp-maml.txt and voids every guarantee.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import os
import time
import warnings
from pathlib import Path
from typing import Callable, Dict, Optional

import torch

from metadp.core.validation import check_count, check_delta, check_positive, check_real
from metadp.accounting import NonPrivate
from metadp.accounting.adaptive_clipping import sum_noise_multiplier
from metadp.core import events as ev
from metadp.accounting.calibration import calibrate_noise, max_steps
from metadp.report import format_upper
from metadp.training import functional as F
from metadp.training import run_folder
from metadp.training.budget import budget_schedule
from metadp.training.clipping import POLICIES, ClipPolicy
from metadp.accounting.ledger import Ledger
from metadp.training import algorithms
from metadp.training.algorithms import Algorithm
from metadp.training.contributions import resolve as contribution_of
from metadp.training.privacy import SamplingPlan
from metadp.training.samplers import BallsInBinsSampler, FixedSizeSampler, PoissonSampler

__all__ = ["TrainConfig", "TrainResult", "train", "calibrate", "run_views", "ALGORITHMS", "SAMPLERS", "ResumeWarning",
           "TrainingInterrupted"]

ALGORITHMS = algorithms.names(meta_loop=True)  # those registered with metadp at import (the registry may grow)
SAMPLERS = ("poisson", "fixed", "one-pass")
UNITS = ("task", "record", "record-vs-server")  # privacy.View keys


@dataclasses.dataclass(frozen=True)
class TrainConfig:
    algorithm: str = "dp-maml"  # a registered meta-learning algorithm (metadp.training.algorithms)
    unit: Optional[str] = None  # the view whose budget stops the run: one of UNITS (None: the algorithm's default)
    sampler: Optional[str] = None  # "poisson", "fixed" or "one-pass" (None: one pass for dp-agr*, dp-reptile)
    steps: int = 1000  # steps asked for; a DP run stops earlier if the budget says so
    meta_batch: float = 32.0  # expected tasks per step (Poisson rate = meta_batch / pool size)
    inner_steps: int = 1  # inner SGD steps on each task
    inner_lr: float = 0.01
    outer_lr: float = 1e-3  # Adam (MAML family) or SGD (Reptile family) on the averaged update
    first_order: bool = False  # first-order meta-gradients
    clip: float = 1.0  # C: per-task threshold (dp-maml, dp-agr*), per-example query threshold (dp-maml-sample)
    clip_mode: str = "flat"  # "flat" or "per_layer" (functional.clip) for the clips outside the inner loop
    noise_multiplier: float = 1.0  # z: noise std z C on the released sum
    inner_clip: float = 1.0  # C_in: per-example threshold inside tasks (dp-maml-sample, dp-agrlr, dp-reptile)
    inner_noise: float = 1.0  # z_in: noise std z_in C_in on each inner sum (and dp-agrlr's local query sum)
    clip_policy: str = "fixed"  # metadp.training.clipping.POLICIES (per-task clip of dp-maml, dp-agr*)
    clip_window: int = 64
    clip_percentile: float = 50.0
    clip_target: float = 0.5  # quantile policy: target fraction unclipped
    clip_lr: float = 0.2  # quantile policy: geometric learning rate
    count_noise: Optional[float] = None  # quantile policy: sigma_b (None: meta_batch / 20, Andrew et al.)
    epsilon: float = math.inf  # budget at delta for ``unit``: the run stops at the last step within it
    delta: float = 1e-5
    seed: int = 0
    checkpoint_every: int = 50  # steps between checkpoints (and metric lines)
    chunk_size: Optional[int] = None  # tasks per vmap chunk (memory bound; same result)

    def __post_init__(self):
        if not algorithms.get(self.algorithm).meta_loop:
            raise ValueError(f"algorithm must be one of {algorithms.names(meta_loop=True)}, got {self.algorithm!r}")
        alg = self.family
        check_count("steps", self.steps, minimum=1)
        check_positive("meta_batch", self.meta_batch)
        check_count("inner_steps", self.inner_steps, minimum=alg.min_inner_steps)
        check_positive("inner_lr", self.inner_lr)
        check_positive("outer_lr", self.outer_lr)
        check_positive("clip", self.clip, allow_inf=True)
        check_positive("inner_clip", self.inner_clip, allow_inf=True)
        check_real("noise_multiplier", self.noise_multiplier, low=0.0)
        check_real("inner_noise", self.inner_noise, low=0.0)
        if self.count_noise is not None:
            check_positive("count_noise", self.count_noise)
        check_count("clip_window", self.clip_window, minimum=1)
        check_real("clip_percentile", self.clip_percentile, low=0.0, high=100.0)
        check_real("clip_target", self.clip_target, low=0.0, high=1.0)
        check_positive("clip_lr", self.clip_lr)
        check_positive("epsilon", self.epsilon, allow_inf=True)  # inf: no budget; NaN and <= 0 are refused
        check_delta("delta", self.delta)
        check_count("seed", self.seed)
        check_count("checkpoint_every", self.checkpoint_every, minimum=1)
        if self.chunk_size is not None:
            check_count("chunk_size", self.chunk_size, minimum=1)
        if self.sampler is not None and self.sampler not in SAMPLERS:
            raise ValueError(f"sampler must be one of {SAMPLERS}, got {self.sampler!r}")
        if self.unit is not None and self.unit not in UNITS:
            raise ValueError(f"unit must be one of {UNITS}, got {self.unit!r}")
        if self.unit == "record-vs-server" and "record-vs-server" not in alg.units:
            owners = ", ".join(a.name for a in algorithms.REGISTRY.values() if "record-vs-server" in a.units)
            raise ValueError("unit 'record-vs-server' (the record against the server that sees each client's "
                             f"update) exists for {owners} only")
        if self.clip_policy not in POLICIES:
            raise ValueError(f"clip_policy must be one of {POLICIES}, got {self.clip_policy!r}")
        if self.clip_mode not in F.CLIP_MODES:
            raise ValueError(f"clip_mode must be one of {F.CLIP_MODES}, got {self.clip_mode!r}")
        if not self.private:
            return
        if not (self.clip > 0 and self.noise_multiplier >= 0 and self.inner_clip > 0 and self.inner_noise >= 0):
            raise ValueError("a private algorithm needs clip > 0, inner_clip > 0, noise_multiplier >= 0 and "
                             "inner_noise >= 0")
        if not self.bounded and math.isfinite(self.epsilon):
            raise ValueError("noise 0 or a clip of inf spends an infinite budget: fix both, or set epsilon = inf")
        for name, c, z in (("clip", self.clip, self.noise_multiplier), ("inner_clip", self.inner_clip, self.inner_noise)):
            if math.isinf(c) and z > 0:
                raise ValueError(f"{name} = inf (no clipping) has unbounded sensitivity: noise cannot be calibrated to it")
        if self.clip_policy != "fixed" and not alg.central_clip:
            raise ValueError(f"clip_policy {self.clip_policy!r} adapts the per-task clip of "
                             f"{algorithms.names(central_clip=True)}; "
                             f"{self.algorithm} clips per example with fixed thresholds")
        if self.clip_policy == "raw-percentile" and math.isfinite(self.epsilon):
            raise ValueError("clip_policy 'raw-percentile' (dp-maml.txt Sec. 5.2.1) computes thresholds from raw "
                             "gradient norms: the run has no privacy guarantee, so it cannot have a budget (set "
                             "epsilon = inf to reproduce the published method explicitly)")
        if self.clip_policy == "quantile" and self.bounded and 2 * self.quantile_count_noise <= self.noise_multiplier:
            raise ValueError(f"the quantile clip policy needs count_noise > z / 2 = {self.noise_multiplier / 2:.4g} (the "
                             f"count's noise is part of the step's budget), got {self.quantile_count_noise:.4g}; "
                             "raise --count-noise (default: meta-batch / 20)")

    @property
    def family(self) -> Algorithm:
        """The registered algorithm (``metadp.training.algorithms``)."""
        return algorithms.get(self.algorithm)

    @property
    def private(self) -> bool:
        return self.family.private

    @property
    def bounded(self) -> bool:
        """Every release this algorithm makes has positive noise on a finite clip."""
        return self.family.bounded(self)

    @property
    def quantile_count_noise(self) -> float:
        return self.count_noise if self.count_noise is not None else self.meta_batch / 20.0

    @property
    def sampling(self) -> str:
        if self.sampler is not None:
            return self.sampler
        return self.family.default_sampler

    @property
    def budget_unit(self) -> str:
        return self.unit or self.family.default_unit


@dataclasses.dataclass(frozen=True)
class TrainResult:
    params: dict
    steps_done: int  # releases on record for the budget's view (DP with a step charge) or steps taken
    last_step: int  # the schedule's last step within budget (steps asked for otherwise)
    epsilon_spent: float  # certified, for the budget's view (0 for non-private runs: they have no guarantee)
    losses: tuple  # mean query loss of the sampled tasks per step (pre-update; diagnostics only)
    report: dict  # privacy_report.json


def _sampled_rows(mask: torch.Tensor, capacity: int):
    """Indices of the sampled rows padded to ``capacity`` (or more, never dropping one) and their weights."""
    idx = torch.nonzero(mask).flatten()
    size = max(capacity, int(idx.numel()))
    weights = torch.zeros(size, device=mask.device)
    weights[: idx.numel()] = 1.0
    return torch.cat([idx, idx.new_zeros(size - idx.numel())]), weights


def _json_safe(d: dict) -> dict:
    return {k: (repr(v) if isinstance(v, float) and not math.isfinite(v) else v) for k, v in d.items()}


def _save(path: Path, state: dict) -> None:
    tmp = path.with_suffix(".tmp")
    torch.save(state, tmp)
    with open(tmp, "rb") as f:
        os.fsync(f.fileno())
    os.replace(tmp, path)  # atomic: a crash leaves the previous checkpoint


def _flat_norm(tensors: Dict[str, torch.Tensor]) -> float:
    return math.sqrt(sum(float(t.double().square().sum()) for t in tensors.values()))


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
    """(sampler, SamplingPlan, expected batch) of a run."""
    n = pool.size
    if c.meta_batch > n:  # a rate above 1 is no Poisson rate: refused, never clamped
        raise ValueError(f"meta_batch must be <= the pool's {n} tasks, got {c.meta_batch:g}")
    if c.sampling == "fixed" and c.meta_batch != int(c.meta_batch):
        raise ValueError(f"fixed-size batches need a whole meta_batch, got {c.meta_batch:g}")
    gen = torch.Generator(device=_device_of(pool)).manual_seed(stream_seed(c.seed, "sampler"))
    if c.sampling == "poisson":
        sampler = PoissonSampler(n, min(1.0, c.meta_batch / n), generator=gen)
        return sampler, SamplingPlan("poisson", n, rate=sampler.rate), sampler.rate * n
    if c.sampling == "fixed":
        batch = int(c.meta_batch)
        return FixedSizeSampler(n, batch, generator=gen), SamplingPlan("fixed", n, batch=batch), float(batch)
    per_pass = max(1, round(n / c.meta_batch))
    return BallsInBinsSampler(n, per_pass, generator=gen), SamplingPlan("one-pass", n, steps_per_pass=per_pass), n / per_pass


def _device_of(pool) -> torch.device:
    """Where the pool's tensors live (``EpisodePool.images``, or ``SinusoidPool.device``)."""
    images = getattr(pool, "images", None)
    return images.device if images is not None else torch.device(pool.device)


def run_views(pool, c: TrainConfig, private_clipping: bool = True, *, plan: Optional[SamplingPlan] = None,
              multiplicity: Optional[int] = None):
    """The privacy views of ``c`` on ``pool`` (``metadp.training.privacy.views``) and the sampling plan.

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
    passes = math.ceil(c.steps / plan.steps_per_pass)
    if view.charge == "visit":
        if plan.scheme != "one-pass":
            raise ValueError(f"the {key} view is charged per visit, which is random under {plan.scheme} sampling: "
                             "give the noise multiplier instead of calibrating it")
        count = passes * k
    else:
        count = c.steps if view.charge == "step" else passes

    def event(z: float):
        v = next(v for v in run_views(pool, configured(z), plan=plan, multiplicity=k)[1] if v.key == key)
        return ev.SelfComposed(v.event, count)

    z = calibrate_noise(event, c.epsilon, c.delta, relation=view.relation, accountant=_accountant_for(view.event),
                        rtol=rtol)
    return configured(z, c)


def _accountant_for(event) -> str:
    """The accountant of a view's event: PLD (tight) unless it has no dominating pair for the event
    (fixed-size batches, ``FixedSizeSampled``: RDP, Wang, Balle & Kasiviswanathan 2019, arXiv:1808.00087)."""
    return "rdp" if isinstance(event, ev.FixedSizeSampled) else "pld"


class _Run:
    """The state of one run: sampler, views and their ledgers, clipping, visits (``train`` drives it).

    Construction does no I/O and raises every refusal of the configuration (no guarantee to budget, a
    budget that does not cover one release); :meth:`open_ledgers` then opens or creates the files.
    """

    def __init__(self, pool, config: TrainConfig, device: str):
        self.pool, self.config = pool, config
        c = config
        self.sampler, plan, self.expected = _sampling(pool, c)
        self.plan = plan
        self.capacity = int(math.ceil(self.expected + 6 * math.sqrt(self.expected) + 1))
        self.noise_gen = torch.Generator(device=device).manual_seed(stream_seed(c.seed, "noise"))
        self.policy = ClipPolicy(c.clip_policy, c.clip, window=c.clip_window, percentile=c.clip_percentile,
                                 target=c.clip_target, learning_rate=c.clip_lr,
                                 count_noise=c.quantile_count_noise if c.clip_policy == "quantile" else None)
        self.multiplicity = pool.record_multiplicity() if c.private else 1
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
        self.ledgers: Dict[str, Ledger] = {}
        self.last_step, self.visit_cap, self.pass_cap, self.schedule = c.steps, math.inf, math.inf, None
        p = self.primary
        if p is not None and p.event is not None and not isinstance(p.event, NonPrivate) and math.isfinite(c.epsilon):
            kind = _accountant_for(p.event)
            if p.charge == "step":
                self.schedule = budget_schedule(p.event, c.steps, c.epsilon, c.delta, relation=p.relation,
                                                accountant=kind)
                self.last_step = self.schedule.last_step
            elif p.charge == "pass":
                passes = math.ceil(c.steps / plan.steps_per_pass)
                self.pass_cap = max_steps(p.event, c.epsilon, c.delta, relation=p.relation, accountant=kind,
                                          limit=passes)
                self.last_step = min(c.steps, self.pass_cap * plan.steps_per_pass)
            else:
                self.visit_cap = max_steps(p.event, c.epsilon, c.delta, relation=p.relation, accountant=kind,
                                           limit=c.steps * max(1, self.multiplicity))  # k visits a step at most
        if p is not None and p.event is not None and (self.last_step == 0 or self.visit_cap == 0):
            raise ValueError(f"the budget epsilon <= {c.epsilon:g} at delta {c.delta:g} does not cover one "
                             f"{p.charge} of the {p.key} view ({p.event.describe()}): raise the noise (--noise) or the "
                             "budget (--epsilon)")
        self._spent_cache = (None, 0.0)

    def ledger_mismatch(self, found: Dict[str, Ledger]) -> Optional[str]:
        """Why the ledgers already in a run folder (file name -> ledger) cannot be continued by this run,
        or None: each must belong to one of this run's views, under its relation and unit, and hold only
        that view's event (the budget schedule composes one event; mixing would mis-state the spent
        budget)."""
        expected = {f"ledger-{v.key}.jsonl": v for v in self.views if v.event is not None}
        missing = sorted(set(expected) - set(found))
        if found and missing:  # a run creates all its ledgers at once: one is gone, with its spent budget
            return (f"{', '.join(missing)} is missing while {', '.join(sorted(found))} is there: the releases it "
                    "recorded would be forgotten (restore it)")
        for name, ledger in found.items():
            v = expected.get(name)
            if v is None:
                return f"{name} belongs to a view this run does not have ({', '.join(expected) or 'none'})"
            if (ledger.relation, ledger.unit) != (v.relation, v.unit):
                return (f"{name} is a {ledger.unit} ledger under the {ledger.relation} relation, this run's {v.key} "
                        f"view is {v.unit} under {v.relation}")
            other = next((r for r in ledger.entries if r.event != v.event), None)
            if other is not None:
                return (f"{name} entry {other.index} released {other.event.describe()}, this run's {v.key} view "
                        f"releases {v.event.describe()}")
        return None

    def open_ledgers(self, out: Path, resume: bool) -> None:
        """Opens each view's ledger in ``out`` (repairing a torn final line when resuming) or creates it."""
        c = self.config
        for v in self.views:
            if v.event is None:
                continue
            path = out / f"ledger-{v.key}.jsonl"
            meta = {"config": _json_safe(dataclasses.asdict(c)), "view": v.key, "adversary": v.adversary,
                    "charge": v.charge, "basis": v.basis, "note": v.reason}
            self.ledgers[v.key] = (Ledger.open(path, repair=True) if resume and path.exists()
                                   else Ledger.create(path, v.relation, v.unit, c.delta, metadata=meta))

    def _views(self):
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

    def spent(self) -> float:
        """The budget view's certified epsilon so far (the schedule's, or recomputed when the ledger grows)."""
        ledger = self.primary_ledger
        if ledger is None:
            return 0.0
        if self.schedule is not None and len(ledger.entries) <= self.schedule.checkpoints[-1]:
            return self.schedule.epsilon_after(len(ledger.entries))
        if self._spent_cache[0] != len(ledger.entries):
            self._spent_cache = (len(ledger.entries),
                                 ledger.spent(self.config.delta, kind=_accountant_for(self.primary.event)))
        return self._spent_cache[1]

    def visits_on_record(self) -> int:
        """The visits charged to a visit-charged budget view's ledger: after a resume from an older (or a
        lost) checkpoint they exceed the checkpoint's count, and the budget must count them all."""
        ledger = self.primary_ledger
        if ledger is None or self.primary.charge != "visit":
            return self.max_visits
        return sum(r.count for r in ledger.entries)

    def charge(self, step: int, new_pass: bool, visits_added: int) -> None:
        """Appends this step's releases to every view's ledger (before anything uses them)."""
        for v in self.views:
            ledger = self.ledgers.get(v.key)
            if ledger is None:
                continue
            if v.charge == "step" or (v.charge == "pass" and new_pass):
                ledger.append(v.event, step=step)
            elif v.charge == "visit" and visits_added > 0:
                ledger.append(v.event, visits_added, step=step)

    def count_visits(self, rows: torch.Tensor, weights: torch.Tensor) -> Optional[torch.Tensor]:
        """The record visits after this step (not yet committed), or None when no view counts visits."""
        if self.record_visits is None:
            return None
        ids = self.pool.record_ids(rows[weights > 0]).reshape(-1)
        return self.record_visits + torch.bincount(ids, minlength=self.record_visits.numel())

    def report(self, steps: int) -> dict:
        c = self.config
        entries = []
        for v in self.views:
            ledger = self.ledgers.get(v.key)
            kind = _accountant_for(v.event)
            eps = ledger.spent(c.delta, kind=kind) if ledger is not None else None
            entries.append({"view": v.key, "unit": v.unit, "adversary": v.adversary, "relation": v.relation,
                            "charged_per": v.charge, "charges": len(ledger.entries) if ledger is not None else 0,
                            "epsilon": eps if eps is not None and math.isfinite(eps) else None,
                            "guarantee": ("none" if eps is None or not math.isfinite(eps) else "upper bound"),
                            "event": v.event.describe() if v.event is not None else None, "basis": v.basis,
                            "accountant": kind if ledger is not None else None, "note": v.reason})
        plan = self.plan
        return {
            "algorithm": c.algorithm, "private": c.private, "budget_unit": c.budget_unit if c.private else None,
            "delta": c.delta if c.private else None, "target_epsilon": c.epsilon if math.isfinite(c.epsilon) else None,
            "steps": steps, "last_step_within_budget": self.last_step,
            "sampling": {"scheme": plan.scheme, "pool": plan.pool, "rate": plan.rate or None,
                         "batch": plan.batch or None, "steps_per_pass": plan.steps_per_pass,
                         "expected_batch": self.expected},
            "record_multiplicity": self.multiplicity, "max_record_visits": self.max_visits or None,
            "clip_policy": c.clip_policy, "final_clip": self.policy.threshold,
            "accountant": ("certified upper bound from each view's ledger: pld, or rdp where pld has no dominating "
                           "pair (fixed-size batches)") if c.private else None,
            "views": entries,
            "note": None if c.private else "non-private: no privacy guarantee",
        }

    def state(self) -> dict:
        return {"sampler": self.sampler.state_dict(), "noise_generator": self.noise_gen.get_state(),
                "policy": self.policy.state_dict(), "max_visits": self.max_visits,
                "record_visits": None if self.record_visits is None else self.record_visits.cpu(),
                "ledgers": {k: (len(l.entries), l.head) for k, l in self.ledgers.items()}}

    def load(self, state: dict) -> None:
        self.sampler.load_state_dict(state["sampler"])
        self.noise_gen.set_state(state["noise_generator"])
        self.policy.load_state_dict(state["policy"])
        self.max_visits = state["max_visits"]
        if self.record_visits is not None:
            self.record_visits.copy_(state["record_visits"])
        for key, (length, head) in state["ledgers"].items():  # raises unless each ledger extends what was saved
            self.ledgers[key].check_prefix(length, head)

    def close(self) -> None:
        for ledger in self.ledgers.values():
            ledger.close()


class ResumeWarning(UserWarning):
    """A resumed run goes on in a way the user should know about (a lost checkpoint: restart from step 0)."""


class TrainingInterrupted(KeyboardInterrupt):
    """Ctrl-C (SIGINT) stopped the loop; the message says where, and that ``resume=True`` continues it.

    The ledgers hold every release made (each is fsynced before it is used) and the last checkpoint is
    intact (checkpoints are replaced atomically), so a resumed run forgets no spent budget.
    """


def _check_ledgers(out: Path, state, changed, run: _Run, warn) -> None:
    """Refuses ledgers in ``out`` this run cannot continue; says (``warn``) when a lost checkpoint makes
    the resumed run restart from step 0. Reads only."""
    if not state.holds_run:
        return
    mismatch = run.ledger_mismatch(state.ledgers)
    if mismatch is not None:
        why = f" (changed: {'; '.join(changed)})" if changed else ""
        raise ValueError(f"--resume: this run cannot continue the ledgers in {out}{why}: {mismatch}; a ledger holds "
                         "one view's releases of one event (change no setting that changes the noise, the sampling "
                         "or the algorithm), or choose another --out")
    if state.checkpoint or warn is None:
        return
    primary = state.ledgers.get(f"ledger-{run.primary.key}.jsonl") if run.primary is not None else None
    spent = (f"the {run.primary.key} view has spent epsilon <= "
             f"{format_upper(primary.spent(run.config.delta, kind=_accountant_for(run.primary.event)))} at delta "
             f"{run.config.delta:g}" if primary is not None and len(primary) else None)
    warn(run_folder.lost_checkpoint_note(out, state, spent))


def _warn(message: str) -> None:
    warnings.warn(message, ResumeWarning, stacklevel=3)


def train(model: torch.nn.Module, pool, loss_fn: Callable, config: TrainConfig, out_dir, *,
          device: str = "cpu", progress: Optional[Callable[[int, float, float], None]] = None,
          resume: bool = False, resume_changed: bool = False, setup: Optional[dict] = None,
          warn: Optional[Callable[[str], None]] = None) -> TrainResult:
    """Trains ``model`` on the task ``pool`` (``tasks.SinusoidPool`` or ``tasks.EpisodePool``).

    ``out_dir`` receives ``run.json`` (the configuration and ``setup``), one ``ledger-<view>.jsonl`` per
    privacy view, ``checkpoint.pt``, ``metrics.jsonl`` and, at the end, ``privacy_report.json``
    (``metadp.training.run_folder``). ``progress(step, loss, epsilon)`` is called after each step with
    the budget view's certified epsilon so far.

    Every refusal comes before anything is written: the configuration's (no guarantee to budget, a
    budget that does not cover one release), an output path that cannot be a folder, a folder that holds
    a run when ``resume`` is False, and with ``resume`` a run started on other ``setup`` (data, model) or
    with another algorithm, a run started with other settings unless ``resume_changed`` (learning rates
    and ``chunk_size`` may change freely), and ledgers holding another event than this run would release
    (another noise, sampling or view: one ledger composes one event). ``resume=True`` on a folder with
    no run starts one. A resumed run continues from ``checkpoint.pt`` and counts every ledger entry,
    including releases after the checkpoint; with the checkpoint lost it restarts from step 0 with every
    release still charged, and says so through ``warn`` (default: a ``ResumeWarning``). Two runs never
    write into one folder at once (``run_folder.locked``).

    Raises:
        ValueError: every refusal above (``LedgerError`` names a corrupt ledger's file and line).
        TrainingInterrupted: on Ctrl-C (a ``KeyboardInterrupt``), with where the run stopped.
    """
    c = config
    out = run_folder.check_out_path(out_dir)
    record = {"config": _json_safe(dataclasses.asdict(c)), "setup": dict(setup or {})}
    state, changed = run_folder.check_folder(out, record, resume, resume_changed)
    run = _Run(pool, c, device)
    _check_ledgers(out, state, changed, run, _warn if warn is None else warn)
    run_folder.create(out)
    with run_folder.locked(out):
        if run_folder.inspect(out).run_files != state.run_files:  # another run wrote here after the first check
            state, changed = run_folder.check_folder(out, record, resume, resume_changed)
            _check_ledgers(out, state, changed, run, None)
        stored = state.stored
        if stored is None or "setup" not in stored or stored["config"] != record["config"]:
            history = list(stored.get("history", [])) if stored is not None and "setup" in stored else []
            if stored is not None:
                history.append({"config": stored["config"], "releases_before": state.releases, "until": time.time()})
            run_folder.write_run_file(out, dict(record, history=history))
        run.open_ledgers(out, resume)
        try:
            return _loop(model, pool, loss_fn, c, out, run, device, progress, resume)
        finally:
            run.close()


def _loop(model, pool, loss_fn, c: TrainConfig, out: Path, run: _Run, device, progress, resume) -> TrainResult:
    params = {k: v.to(device).requires_grad_(True) for k, v in F.param_dict(model).items()}
    alg = c.family
    contribution = contribution_of(alg)
    optimizer = _OPTIMIZERS[alg.optimizer](params.values(), lr=c.outer_lr)
    done, losses = 0, []
    if resume and (out / "checkpoint.pt").exists():
        state = torch.load(out / "checkpoint.pt", weights_only=False)
        with torch.no_grad():
            for k, v in state["params"].items():
                params[k].copy_(v)
        optimizer.load_state_dict(state["optimizer"])
        run.load(state["run"])
        done, losses = state["step"], list(state["losses"])
    central = c.private and alg.central_clip  # per-task clip, then noise on the sum
    quantile = c.clip_policy == "quantile" and central and c.bounded
    z_sum = sum_noise_multiplier(c.noise_multiplier, c.quantile_count_noise) if quantile else c.noise_multiplier
    scale = alg.update_scale(run.expected, pool.query_per_task)
    sign = alg.update_sign  # Reptile moves towards the adapted parameters
    saved = done
    ledger_passes = lambda: len(run.primary_ledger.entries) if run.primary_ledger is not None else 0  # noqa: E731
    try:
        while done < c.steps and run.releases(done) < run.last_step:
            new_pass = isinstance(run.sampler, BallsInBinsSampler) and run.sampler.step_in_pass == 0
            if new_pass and run.primary is not None and run.primary.charge == "pass" and ledger_passes() >= run.pass_cap:
                break
            drawn = run.sampler.sample()
            if drawn.dtype == torch.bool:
                rows, weights = _sampled_rows(drawn, run.capacity)
            else:
                rows, weights = drawn, torch.ones(drawn.numel(), device=drawn.device)
            visits = run.count_visits(rows, weights)
            added = 0
            if visits is not None:
                top = int(visits.max()) if visits.numel() else 0
                added = top - run.max_visits
                if run.visits_on_record() + added > run.visit_cap:  # a record would pass the budget: stop first
                    break
            detached = {k: v.detach() for k, v in params.items()}
            contributions, task_losses = contribution(alg, model, detached, pool, rows, loss_fn, c, run.noise_gen)
            threshold = run.policy.threshold
            norms = None
            if central and math.isfinite(threshold) and c.bounded:
                contributions, norms = F.clip(contributions, threshold, c.clip_mode)
            elif central and c.clip_policy == "raw-percentile":
                norms = F.flat_norms(contributions)
            std = alg.release_std(c, threshold, z_sum)
            total = F.noisy_sum(contributions, weights, std, generator=run.noise_gen)
            count = None
            if quantile:
                unclipped = ((norms <= threshold).to(weights.dtype) - 0.5) * weights
                count = float(unclipped.sum()) + c.quantile_count_noise * float(
                    torch.randn((), generator=run.noise_gen, device=weights.device, dtype=torch.float64))
            run.charge(done, new_pass, added)  # every release is on record before it is used
            if visits is not None:
                run.record_visits, run.max_visits = visits, run.max_visits + added
            optimizer.zero_grad()
            for k, p in params.items():
                p.grad = sign * total[k] / scale
            optimizer.step()
            run.policy.after_release(_flat_norm(total) / run.expected)
            if count is not None:
                run.policy.after_count(count, run.expected)
            if c.clip_policy == "raw-percentile" and norms is not None:
                run.policy.after_raw_norms(norms[weights > 0].tolist())
            done += 1
            losses.append(float((task_losses.detach() * weights).sum() / weights.sum().clamp(min=1.0)))
            if progress is not None:
                progress(done, losses[-1], run.spent())
            if done % c.checkpoint_every == 0 or done >= c.steps or run.releases(done) >= run.last_step:
                _checkpoint(out, params, optimizer, run, done, losses)
                saved = done
    except KeyboardInterrupt:
        ledger = run.primary_ledger
        held = f"; {len(ledger.entries)} releases of the {run.primary.key} view on record" if ledger is not None else ""
        raise TrainingInterrupted(
            f"interrupted at step {done + 1} ({done} steps done; checkpoint at step {saved}); the ledgers hold "
            f"every release{held}; continue with --resume") from None
    if saved != done or not (out / "checkpoint.pt").exists():
        _checkpoint(out, params, optimizer, run, done, losses)
    report = run.report(done)
    (out / "privacy_report.json").write_text(json.dumps(report, indent=2), encoding="utf-8")
    primary = next((v for v in report["views"] if v["view"] == run.primary.key), None) if run.primary else None
    if primary is None:
        epsilon = 0.0 if not c.private else math.inf
    else:
        epsilon = primary["epsilon"] if primary["epsilon"] is not None else math.inf
    with torch.no_grad():
        final = {k: v.detach().clone() for k, v in params.items()}
    return TrainResult(final, run.releases(done), run.last_step, epsilon, tuple(losses), report)


_OPTIMIZERS = {"adam": torch.optim.Adam, "sgd": torch.optim.SGD}


def _checkpoint(out, params, optimizer, run: _Run, step, losses) -> None:
    _save(out / "checkpoint.pt", {
        "params": {k: v.detach().cpu() for k, v in params.items()}, "optimizer": optimizer.state_dict(),
        "run": run.state(), "step": step, "losses": list(losses)})
    with open(out / "metrics.jsonl", "a", encoding="utf-8") as f:
        f.write(json.dumps({"step": step, "loss": losses[-1] if losses else None,
                            # the budget view's certified upper bound so far (PLD), at the run's delta
                            "epsilon": run.spent(), "epsilon_view": run.primary.key if run.primary else None,
                            "delta": run.config.delta if run.primary else None,
                            "clip": run.policy.threshold}) + "\n")
