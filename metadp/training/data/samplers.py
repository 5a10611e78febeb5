"""Samplers that realise the sampling laws the accountant assumes, and name the event they realise.

Each sampler draws on a ``torch.Generator`` (its device decides where the tensors live: CPU or CUDA),
in a few vectorised operations per step, never a Python loop over units, and states the event of one
step (or one pass) for the unit it protects, so that what the ledger composes is what was sampled
(DESIGN.md 3.2, 3.3, 3.6-3.9; their inclusion laws are tested with ``metadp.verify.fidelity``):

=====================  ========================  ==========================================  ==========
sampler                one step returns          event                                       relation
=====================  ========================  ==========================================  ==========
PoissonSampler         mask [pool]               PoissonSampled(q, inner) per step           add_remove
FixedSizeSampler       indices [batch]           FixedSizeSampled(m, n, inner) per step      substitute
BallsInBinsSampler     mask [pool]               inner per pass (one step per unit a pass)   add_remove
ShuffleSampler         indices [<= batch]        inner per pass (one step per unit a pass)   either
EverySampler           indices [pool]            inner per step (no sampling)                either
EpisodicSampler        indices per level         EpisodicSampled(L, P_U, r, inner, shift)    add_remove
=====================  ========================  ==========================================  ==========

The cross-device participation schemes' samplers (cyclic Poisson, min-separation) are in
``metadp.training.data.participation``.

Exactness. Uniforms are float64 (53 random bits), so a Poisson inclusion probability is within 2^-53
of q and a uniform choice among j items within about 2^-53 of 1/j: far below anything an accountant
resolves. Subsets are drawn by ``metadp.training.data.subsets`` (Floyd's algorithm or uniform keys), which
gives every k-subset, in every order, the same probability.

Randomness. ``torch.Generator`` is a pseudo-random generator (Mersenne Twister on CPU, Philox on
CUDA), not a cryptographic one; the accounting assumes the sampling is unpredictable to an adversary,
the usual assumption of DP training libraries (Opacus offers a CSPRNG under ``secure_mode``). Without
a generator a fresh one is seeded from the operating system; pass a seeded one to reproduce a run,
and save ``state_dict()`` with checkpoints so a resumed run does not replay the same samples.
"""

from __future__ import annotations

import dataclasses
from fractions import Fraction
from typing import Any, Dict, Optional, Tuple

import torch

from metadp.core.validation import check_count, check_probability
from metadp.core import events as ev
from metadp.amplification.multistage import Hierarchy, MultistageBound, multistage_amplification
from metadp.sampling import BallsInBins, CyclicPoisson, Episodic, FixedSize, MinSeparation, NoSampling, Poisson, Shuffle
from metadp.training.data.participation import CyclicPoissonSampler, MinSeparationSampler
from metadp.training.data.sampler_base import _Sampler, _check_event
from metadp.training.data.subsets import random_subsets, uniform as _uniform

__all__ = ["sampler_for", "CyclicPoissonSampler", "MinSeparationSampler", "PoissonSampler", "FixedSizeSampler", "BallsInBinsSampler", "ShuffleSampler", "EverySampler",
           "EpisodicSampler", "Episodes", "random_subsets"]

class PoissonSampler(_Sampler):
    """Poisson sampling: each of ``pool_size`` units independently with probability ``rate`` each step.

    The trainer computes every unit and masks (static shapes); the noise is calibrated to the clipped
    sum, whose add/remove sensitivity is C (DESIGN.md 3.2; Mironov, Talwar & Zhang 2019,
    arXiv:1908.10530).

    Args:
        pool_size: number of units, >= 1.
        rate: q in [0, 1].
        generator: the random source (module docstring).
    """

    relation = "add_remove"

    def __init__(self, pool_size: int, rate: float, generator: Optional[torch.Generator] = None):
        super().__init__(generator)
        self.pool_size = check_count("pool_size", pool_size, minimum=1)
        self.rate = check_probability("rate", rate)

    def sample(self) -> torch.Tensor:
        """bool [pool_size]: True for the units in this step's sample."""
        return _uniform((self.pool_size,), self._generator) < self.rate

    def step_event(self, inner: ev.Event) -> ev.PoissonSampled:
        """One step for one unit: ``PoissonSampled(rate, inner)``."""
        return Poisson(self.rate, self.pool_size).step_event(_check_event("inner", inner))


class FixedSizeSampler(_Sampler):
    """Fixed-size sampling: a uniformly random subset of exactly ``batch`` of the ``pool_size`` units.

    Valid under the **substitution** relation only (Balle, Barthe & Gaboardi 2018, arXiv:1807.01647),
    where a clipped sum moves by 2C (``FixedSizeSampled.sensitivity_factor``; DESIGN.md 3.3).

    Args:
        pool_size: n >= 1.
        batch: m in [0, n].
        generator: the random source (module docstring).
    """

    relation = "substitute"

    def __init__(self, pool_size: int, batch: int, generator: Optional[torch.Generator] = None):
        super().__init__(generator)
        self.pool_size = check_count("pool_size", pool_size, minimum=1)
        self.batch = check_count("batch", batch)
        if self.batch > self.pool_size:
            raise ValueError(f"batch must be in [0, {self.pool_size}] (pool_size), got {batch!r}")

    def sample(self) -> torch.Tensor:
        """int64 [batch]: distinct unit indices, a uniformly random subset in uniformly random order."""
        return random_subsets(1, self.pool_size, self.batch, self._generator)[0]

    def step_event(self, inner: ev.Event, sensitivity_factor: float = 2.0) -> ev.FixedSizeSampled:
        """One step for one unit: ``FixedSizeSampled(batch, pool_size, inner, sensitivity_factor)``."""
        return FixedSize(self.batch, self.pool_size).step_event(_check_event("inner", inner), sensitivity_factor)


class BallsInBinsSampler(_Sampler):
    """One pass of ``steps`` steps per draw: each unit independently goes to a uniformly random step
    (random allocation, DESIGN.md 3.9(a)), so every unit is in exactly one step per pass.

    Accounting: each pass is charged ``RandomAllocation(steps, inner)`` (Feldman & Shenfeld 2025,
    arXiv:2502.08202; Chua et al. 2025, arXiv:2412.16802), the allocation this sampler executes, as a
    ``balls_in_bins`` plan charges it (``metadp.sampling.BallsInBins.charge_event``); :meth:`pass_event` keeps
    the single-Gaussian bound (valid whatever the allocation) for comparison. A pass is not a per-step event,
    so :meth:`step_event` raises. Compose the pass's event when a pass starts (``step_in_pass == 0`` before
    ``sample``).

    Args:
        pool_size: number of units, >= 1.
        steps: steps per pass, >= 1.
        generator: the random source (module docstring).
        selected: k, the steps of a pass each unit is in (k distinct, a uniformly random k-subset of the pass's
            steps, independently across units: k-of-t random allocation, ``BallsInBins.selected``).
    """

    relation = "add_remove"

    def __init__(self, pool_size: int, steps: int, generator: Optional[torch.Generator] = None, selected: int = 1):
        super().__init__(generator)
        self.pool_size = check_count("pool_size", pool_size, minimum=1)
        self.steps = check_count("steps", steps, minimum=1)
        self.selected = check_count("selected", selected, minimum=1, maximum=self.steps)
        # int64 [pool_size] (k = 1) or [pool_size, k]: each unit's step(s) in this pass
        self._assignment: Optional[torch.Tensor] = None
        self._position = 0

    @property
    def step_in_pass(self) -> int:
        """The position in the pass of the next ``sample`` (0: it starts a new pass)."""
        return self._position

    @property
    def assignment(self) -> Optional[torch.Tensor]:
        """The current pass's step of every unit (None before the first pass)."""
        return None if self._assignment is None else self._assignment.clone()

    def sample(self) -> torch.Tensor:
        """bool [pool_size]: the units allocated to this step of the pass."""
        if self._position == 0 and self.selected == 1:
            u = _uniform((self.pool_size,), self._generator)
            self._assignment = (u * self.steps).long().clamp_(max=self.steps - 1)
        elif self._position == 0:  # the first k of a uniformly random order of the steps: a uniform k-subset
            u = _uniform((self.pool_size, self.steps), self._generator)
            self._assignment = torch.argsort(u, dim=1)[:, :self.selected]
        mask = self._assignment == self._position
        if self.selected > 1:
            mask = mask.any(dim=1)
        self._position = (self._position + 1) % self.steps
        return mask

    def pass_event(self, inner: ev.Event) -> ev.Event:
        """One pass for one unit: ``inner`` itself (it is in exactly one release of the pass)."""
        return BallsInBins(self.pool_size, self.steps, self.selected).pass_event(_check_event("inner", inner))

    def step_event(self, inner: ev.Event):
        """Raises: one step of a pass has no event of its own (see the class docstring)."""
        return BallsInBins(self.pool_size, self.steps, self.selected).step_event(inner)

    def state_dict(self) -> Dict[str, Any]:
        return {"generator": self._generator.get_state(), "position": self._position,
                "assignment": None if self._assignment is None else self._assignment.clone()}

    def load_state_dict(self, state: Dict[str, Any]) -> None:
        super().load_state_dict(state)
        position = check_count("position", state["position"])
        if position >= self.steps or (position > 0 and state["assignment"] is None):
            raise ValueError(f"state['position'] must be in [0, {self.steps - 1}] (0 before the first pass), "
                             f"got {position}")
        self._position = position
        self._assignment = None if state["assignment"] is None else state["assignment"].to(self.device).clone()


class ShuffleSampler(_Sampler):
    """Shuffled passes (``metadp.sampling.Shuffle``): each pass shuffles the ``pool_size`` units and cuts
    them into ``ceil(pool_size / batch)`` consecutive batches of ``batch`` (the last one shorter where
    ``batch`` does not divide the pool), so every unit is in exactly one step per pass.

    Accounting: one ``inner`` per pass for each unit (no amplification is known, Chua et al. 2024);
    :attr:`step_in_pass` is 0 when the next ``sample`` starts a pass.

    Args:
        pool_size: number of units, >= 1.
        batch: units per step, in [1, pool_size].
        generator: the random source (module docstring).
    """

    relation = "add_remove"

    def __init__(self, pool_size: int, batch: int, generator: Optional[torch.Generator] = None):
        super().__init__(generator)
        self.pool_size = check_count("pool_size", pool_size, minimum=1)
        self.batch = check_count("batch", batch, minimum=1)
        if self.batch > self.pool_size:
            raise ValueError(f"batch must be in [1, {self.pool_size}] (pool_size), got {batch!r}")
        self.steps = -(-self.pool_size // self.batch)
        self._order: Optional[torch.Tensor] = None
        self._position = 0

    @property
    def step_in_pass(self) -> int:
        return self._position

    def sample(self) -> torch.Tensor:
        """int64 [batch] (the pass's last step: the rest): this step's units."""
        if self._position == 0:
            self._order = _uniform((self.pool_size,), self._generator).argsort()
        start = self._position * self.batch
        self._position = (self._position + 1) % self.steps
        return self._order[start:start + self.batch]

    def pass_event(self, inner: ev.Event) -> ev.Event:
        return Shuffle(self.batch, self.pool_size).charge_event(_check_event("inner", inner))

    def state_dict(self) -> Dict[str, Any]:
        return {"generator": self._generator.get_state(), "position": self._position,
                "order": None if self._order is None else self._order.clone()}

    def load_state_dict(self, state: Dict[str, Any]) -> None:
        super().load_state_dict(state)
        self._position = check_count("position", state["position"], maximum=self.steps - 1)
        self._order = None if state["order"] is None else state["order"].to(self.device).clone()


class EverySampler(_Sampler):
    """No sampling (``metadp.sampling.NoSampling``): every one of the ``pool_size`` units, every step."""

    relation = "add_remove"

    def __init__(self, pool_size: int, generator: Optional[torch.Generator] = None):
        super().__init__(generator)
        self.pool_size = check_count("pool_size", pool_size, minimum=1)

    def sample(self) -> torch.Tensor:
        return torch.arange(self.pool_size, device=self.device)


@dataclasses.dataclass(frozen=True)
class Episodes:
    """One step's episodes, level by level (top first).

    Attributes:
        indices: per level j, int64 [L, m_1, ..., m_j]: the global index of each drawn unit (units of a
            level numbered in order, parent by parent, as ``Hierarchy.element_of``), with m_j the draw
            size of a fixed level or the level's unit count for a Poisson one (every child listed).
            E.g. 5 of 1,150 classes then 2 of 20 drawings: classes [L, 5], drawings [L, 5, 2];
            ``indices[1] % 20`` is a drawing's position within its class.
        masks: per level, bool of the same shape (True where the unit is in the episode; read-only
            views), or None while every level so far is fixed-size (every entry is in).
    """

    indices: Tuple[torch.Tensor, ...]
    masks: Tuple[Optional[torch.Tensor], ...]


class EpisodicSampler(_Sampler):
    """Episodic (multistage) sampling: ``episodes`` independent episodes per step, each drawn level by
    level through ``hierarchy`` (DESIGN.md 3.6-3.7; Tombs, Kotevska & Young 2022, Algorithm 1).

    Supported: every level with one unit count for all its parents (``Level.units`` an int, the common
    case of equal classes, tasks or users); fixed-size levels draw ``size`` of their units under each
    drawn parent, Poisson levels keep each with probability ``rate``, so their children are all listed
    with a mask (static shapes). Cost per step: the number of entries listed, L x prod over the levels
    of (draw size, or unit count for a Poisson level); random draws are made only under selected
    parents. 1,600 episodes of 5 of 1,150 classes and 2 of 20 drawings: about 1 ms on 2 CPU cores;
    with a Poisson class level (rate 5/1,150) instead, 1,600 x 1,150 x 2 listed entries, about 90 ms.

    Args:
        hierarchy: the levels, top first (``metadp.amplification.multistage.Hierarchy``).
        episodes: L >= 1 episodes per step.
        generator: the random source (module docstring).

    Raises:
        ValueError: if a level has per-parent unit counts (a tuple), or ``episodes`` < 1.
    """

    relation = "add_remove"  # one record (the record view; the top-level unit view is unit_event)

    def __init__(self, hierarchy: Hierarchy, episodes: int, generator: Optional[torch.Generator] = None):
        super().__init__(generator)
        if not isinstance(hierarchy, Hierarchy):
            raise ValueError(f"hierarchy must be a metadp Hierarchy, got {type(hierarchy).__name__}")
        for level in hierarchy.levels:
            if not isinstance(level.units, int):
                raise ValueError(f"EpisodicSampler needs one unit count per level; level {level.name!r} has "
                                 f"per-parent counts {level.units!r} (pad the units to a common count, or split "
                                 "the hierarchy)")
        self.hierarchy = hierarchy
        self.episodes = check_count("episodes", episodes, minimum=1)
        self.bound: MultistageBound = multistage_amplification(hierarchy)

    @property
    def eta(self) -> Fraction:
        """The largest probability that one episode contains a given record (exact)."""
        return self.bound.eta

    @property
    def elements(self) -> int:
        """Number of records (units of the last level)."""
        return self.hierarchy.unit_counts()[-1]

    def sample(self, episodes: Optional[int] = None) -> Episodes:
        """Draws this step's ``episodes`` episodes (see :class:`Episodes`); ``episodes`` overrides the
        count (fresh episodes for the task slots a task sampler picked)."""
        g = self._generator
        count = self.episodes if episodes is None else check_count("episodes", episodes)
        parents = torch.zeros((count,), dtype=torch.int64, device=self.device)  # the dataset
        parent_mask: Optional[torch.Tensor] = None
        indices, masks = [], []
        for level in self.hierarchy.levels:
            n = level.units
            if level.draw == "fixed" and parent_mask is None:
                local = random_subsets(parents.numel(), n, level.size, g).reshape(*parents.shape, level.size)
                mask = None
            elif level.draw == "fixed":  # draw under the selected parents only; the others list children 0..m-1
                local = torch.arange(level.size, device=self.device).repeat(*parents.shape, 1)
                local[parent_mask] = random_subsets(int(parent_mask.sum()), n, level.size, g)
                mask = parent_mask.unsqueeze(-1).expand(local.shape)
            else:
                local = torch.arange(n, device=self.device).expand(*parents.shape, n)
                keep = _uniform((*parents.shape, n), g) < float(level.rate)
                mask = keep if parent_mask is None else parent_mask.unsqueeze(-1) & keep
            parents = parents.unsqueeze(-1) * n + local
            parent_mask = mask
            indices.append(parents)
            masks.append(mask)
        return Episodes(tuple(indices), tuple(masks))

    def element_counts(self, episodes: Episodes) -> torch.Tensor:
        """int64 [elements]: how many of the step's episodes contain each record."""
        index, mask = episodes.indices[-1], episodes.masks[-1]
        picked = index.reshape(-1) if mask is None else index[mask]
        return torch.bincount(picked, minlength=self.elements)

    def record_event(self, inner: ev.Gaussian, shift: float) -> ev.EpisodicSampled:
        """One step for the worst record: ``EpisodicSampled(L, P_U, r, inner, shift)`` with P_U the
        probability that an episode selects the record's unit and r its last level's rate, from
        ``multistage_amplification(hierarchy).pairs`` (P_U = weight / rate); as ``metadp.units`` plans it.

        Args:
            inner: the Gaussian on the step's sum.
            shift: how far one affected episode moves the sum, over C (``metadp.units.episode_shift``:
                2 with per-episode clipping; per-example clipping 2 for a fixed last level, 1 Poisson).
        """
        event, = Episodic(self.episodes, self.hierarchy).record_events(inner, shift)  # equal unit counts: one
        return event

    def unit_event(self, inner: ev.Gaussian, shift: float = 2.0) -> ev.Event:
        """One step for a top-level unit (class, task, user): each episode selects it with the top level's
        rate, and each such episode moves the sum by at most ``shift`` C (``metadp.units.top_unit_shift``:
        2 with per-episode clipping, 2 x the records per unit per episode with per-example clipping,
        infinite, hence ``NonPrivate``, below a Poisson level with per-example clipping).
        """
        return Episodic(self.episodes, self.hierarchy).unit_event(inner, shift)


def _population(scheme) -> int:
    if scheme.population is None:
        raise ValueError(f"the trainer needs sampling.population for sampling.scheme = {scheme.scheme!r} (it builds "
                         "that many tasks); give population with the rate or batch_size")
    return scheme.population


_EXECUTES = {
    Poisson: lambda s, gen, steps: PoissonSampler(_population(s), s.rate, generator=gen),
    FixedSize: lambda s, gen, steps: FixedSizeSampler(s.population, s.batch_size, generator=gen),
    BallsInBins: lambda s, gen, steps: BallsInBinsSampler(s.population, s.steps_per_pass, generator=gen, selected=s.selected),
    Shuffle: lambda s, gen, steps: ShuffleSampler(s.population, s.batch_size, generator=gen),
    NoSampling: lambda s, gen, steps: EverySampler(_population(s), generator=gen),
    Episodic: lambda s, gen, steps: EpisodicSampler(s.hierarchy, s.episodes, generator=gen),
    CyclicPoisson: lambda s, gen, steps: CyclicPoissonSampler(_population(s), s.groups, s.rate, generator=gen),
    MinSeparation: lambda s, gen, steps: MinSeparationSampler(_population(s), s.participations, s.separation,
                                                             _steps(s, steps), generator=gen),
}


def _steps(scheme, steps: Optional[int]) -> int:
    if steps is None:
        raise ValueError(f"sampling.scheme = {scheme.scheme!r}: its schedule needs the run's steps (sampler_for(..., "
                         "steps=n))")
    return steps


def sampler_for(scheme, generator: Optional[torch.Generator] = None, steps: Optional[int] = None) -> "_Sampler":
    """The sampler that executes a sampling scheme of ``metadp.sampling`` (a new scheme adds its sampler
    class here); ``steps``: the run's, which a schedule fixed in advance needs (min-separation).

    Raises:
        ValueError: for a scheme the trainer cannot execute, or one without the population it needs.
    """
    make = _EXECUTES.get(type(scheme))
    if make is None:
        raise ValueError(f"the trainer cannot execute sampling.scheme = {scheme.scheme!r} "
                         f"(it runs {', '.join(repr(t.scheme) for t in _EXECUTES)})")
    return make(scheme, generator, steps)
