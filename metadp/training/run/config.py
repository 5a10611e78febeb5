"""The settings of a training run (``TrainConfig``, validated on construction) and its result.

Which algorithm runs is a name in the registry (``metadp.training.algorithms``); what it reads and what
it guarantees come from there.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Optional

from metadp.core.validation import check_count, check_delta, check_positive, check_real
from metadp.sampling import RUN_SCHEMES
from metadp.training import algorithms
from metadp.training.algorithms import functional as F
from metadp.training.algorithms import Algorithm
from metadp.training.algorithms.clipping import clip_rule

__all__ = ["TrainConfig", "TrainResult", "ALGORITHMS", "SAMPLERS", "UNITS"]

ALGORITHMS = algorithms.names(meta_loop=True)  # those registered with metadp at import (the registry may grow)
SAMPLERS = tuple(RUN_SCHEMES)  # the task-sampling schemes of metadp.sampling the trainer runs (--sampler)
UNITS = ("task", "record", "record-vs-server", "group")  # the views' Guarantee keys (group: plan runs only)


def _check_optimizer(name: Optional[str], momentum: float, alg: Algorithm) -> None:
    """The outer optimiser's settings: 'adam', 'sgd' or None (the algorithm's), momentum for SGD only."""
    if name not in (None, "adam", "sgd"):
        raise ValueError(f"outer_optimizer must be 'adam', 'sgd' or None, got {name!r}")
    check_real("outer_momentum", momentum, low=0.0, high=1.0, high_open=True)
    if momentum and (name or alg.optimizer) != "sgd":
        raise ValueError("outer_momentum is SGD's heavy-ball momentum: it needs outer_optimizer 'sgd'")


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
    # the outer optimiser (None: the algorithm's, Adam or SGD) and SGD's heavy-ball momentum (DP-FTRL's BandMF is
    # optimised for SGD's iterates: noise.momentum names the workload)
    outer_optimizer: Optional[str] = None
    outer_momentum: float = 0.0
    first_order: bool = False  # first-order meta-gradients
    clip: float = 1.0  # C: per-task threshold (dp-maml, dp-agr*), per-example query threshold (dp-maml-sample)
    clip_mode: str = "flat"  # "flat" or "per_layer" (functional.clip) for the clips outside the inner loop
    noise_multiplier: float = 1.0  # z: noise std z C on the released sum
    inner_clip: float = 1.0  # C_in: per-example threshold inside tasks (dp-maml-sample, dp-agrlr, dp-reptile)
    inner_noise: float = 1.0  # z_in: noise std z_in C_in on each inner sum (and dp-agrlr's local query sum)
    clip_policy: str = "fixed"  # metadp.training.algorithms.clipping.POLICIES (per-task clip of dp-maml, dp-agr*)
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
        _check_optimizer(self.outer_optimizer, self.outer_momentum, alg)
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
        rule = clip_rule(self.clip_policy)
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
        if rule.adapts and not alg.central_clip:
            raise ValueError(f"clip_policy {self.clip_policy!r} adapts the per-task clip of "
                             f"{algorithms.names(central_clip=True)}; "
                             f"{self.algorithm} clips per example with fixed thresholds")
        if rule.reads_raw_norms and math.isfinite(self.epsilon):
            raise ValueError("clip_policy 'raw-percentile' (dp-maml.txt Sec. 5.2.1) computes thresholds from raw "
                             "gradient norms: the run has no privacy guarantee, so it cannot have a budget (set "
                             "epsilon = inf to reproduce the published method explicitly)")
        if rule.releases_count and self.bounded and 2 * self.quantile_count_noise <= self.noise_multiplier:
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
