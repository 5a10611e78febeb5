"""Privacy events: immutable descriptions of what a training plan releases.

An event only describes; accountants (``RdpAccountant``, later ``PldAccountant``) interpret it. The
meaning of an event class never changes: a new meaning is a new class. Every event validates its
fields at construction and raises ``ValueError`` naming the field and the allowed range.

Conventions (DESIGN.md sec. 2-3):

* A noise multiplier ``z`` is sigma divided by the sensitivity of the released query to **adding or
  removing one privacy unit** (for a sum of contributions clipped to L2 norm C, the sensitivity is C
  and ``z = sigma / C``).
* Under the **substitution** relation (replace one unit by another) the same clipped sum moves by up to
  2C: the accountant analyses the inner Gaussian with multiplier ``z / 2`` (scale ``b / 2`` for
  Laplace). ``FixedSizeSampled`` is only meaningful under substitution (Balle, Barthe & Gaboardi 2018,
  arXiv:1807.01647), and carries this factor as its ``sensitivity_factor`` field so that it is
  visible in the plan and in the report.
"""

from __future__ import annotations

import dataclasses
import math
from typing import TYPE_CHECKING, Any, ClassVar, Dict, Tuple

from metadp.core.validation import check_count, check_positive, check_probability, check_real

__all__ = [
    "Event",
    "NoOp",
    "NonPrivate",
    "Gaussian",
    "Laplace",
    "PoissonSampled",
    "ReplacementSampled",
    "FixedSizeSampled",
    "SelfComposed",
    "Composed",
    "EpisodicSampled",
    "PoolSubstitution",
    "Group",
    "RandomAllocation",
]

# The largest count (compositions, group size, episodes) an event or accountant accepts: every whole
# number up to 2^53 is exact in float64, where the accountants multiply counts into RDP curves.
MAX_COUNT = 2**53


class Event:
    """Base class of all privacy events (frozen dataclasses)."""

    if TYPE_CHECKING:  # every event class is a dataclass: dataclasses.fields() reads any event
        __dataclass_fields__: ClassVar[Dict[str, dataclasses.Field[Any]]]

    def describe(self) -> str:
        """A one-line human-readable description."""
        return repr(self)


@dataclasses.dataclass(frozen=True)
class NoOp(Event):
    """A step that releases nothing about the data (epsilon 0)."""

    def describe(self) -> str:
        return "no-op (no privacy cost)"


@dataclasses.dataclass(frozen=True)
class NonPrivate(Event):
    """A release with no privacy guarantee (epsilon infinite)."""

    def describe(self) -> str:
        return "non-private release (no guarantee)"


@dataclasses.dataclass(frozen=True)
class Gaussian(Event):
    """Gaussian mechanism: query + N(0, sigma^2 I) with ``noise_multiplier = sigma / sensitivity``.

    Sensitivity is the L2 sensitivity to adding or removing one unit (see module docstring).
    ``noise_multiplier = inf`` releases pure noise.
    """

    noise_multiplier: float

    def __post_init__(self) -> None:
        object.__setattr__(
            self, "noise_multiplier", check_positive("noise_multiplier", self.noise_multiplier, allow_inf=True)
        )

    def describe(self) -> str:
        z = self.noise_multiplier
        return "Gaussian(noise multiplier infinity: releases nothing)" if math.isinf(z) else f"Gaussian(noise multiplier {z:g})"


@dataclasses.dataclass(frozen=True)
class Laplace(Event):
    """Laplace mechanism: query + Lap(b) per coordinate with ``scale = b / L1 sensitivity``."""

    scale: float

    def __post_init__(self) -> None:
        object.__setattr__(self, "scale", check_positive("scale", self.scale, allow_inf=True))

    def describe(self) -> str:
        return f"Laplace(scale {self.scale:g})"


# Events nest (sampling of a composition of ...); every accountant walks them recursively, so the depth is
# bounded where an event is built: a plan nests a few levels, and 100 is far beyond any mechanism described
MAX_DEPTH = 100


def nesting_depth(event: "Event") -> int:
    """How many events deep ``event`` nests (1 for a leaf), walked without recursion."""
    deepest, stack = 0, [(event, 1)]
    while stack:
        node, depth = stack.pop()
        deepest = max(deepest, depth)
        for field in dataclasses.fields(node):
            value = getattr(node, field.name)
            children = value if isinstance(value, tuple) else (value,)
            stack.extend((child, depth + 1) for child in children if isinstance(child, Event))
    return deepest


def _check_inner(name: str, inner: object) -> None:
    if not isinstance(inner, Event):
        raise ValueError(f"{name} must be an Event, got {type(inner).__name__}")
    if nesting_depth(inner) >= MAX_DEPTH:
        raise ValueError(f"{name} nests events {MAX_DEPTH} or more levels deep; at most {MAX_DEPTH} levels are accepted "
                         "(flatten it: SelfComposed(e, n) instead of n nested compositions)")


@dataclasses.dataclass(frozen=True)
class PoissonSampled(Event):
    """Each unit is included independently with probability ``rate``; ``inner`` runs on the sample.

    Neighbouring relation: add/remove one unit.
    """

    rate: float
    inner: Event

    def __post_init__(self) -> None:
        object.__setattr__(self, "rate", check_probability("rate", self.rate))
        _check_inner("inner", self.inner)

    def describe(self) -> str:
        return f"Poisson sampling (rate {self.rate:g}) of {self.inner.describe()}"


@dataclasses.dataclass(frozen=True)
class FixedSizeSampled(Event):
    """A uniformly random subset of exactly ``batch`` of ``population`` units (without replacement).

    Neighbouring relation: substitution (replace one unit). The inner mechanism's sensitivity under
    substitution is ``sensitivity_factor`` times its add/remove sensitivity: 2 for a sum of clipped
    contributions (one contribution of norm <= C leaves, another enters). Set it to 1 only when the
    inner noise multiplier is already stated relative to the substitution sensitivity.
    """

    batch: int
    population: int
    inner: Event
    sensitivity_factor: float = 2.0

    def __post_init__(self) -> None:
        population = check_count("population", self.population, minimum=1, maximum=MAX_COUNT)
        batch = check_count("batch", self.batch, minimum=0)
        if batch > population:
            raise ValueError(f"batch must be <= population ({population}), got {batch}")
        object.__setattr__(self, "population", population)
        object.__setattr__(self, "batch", batch)
        object.__setattr__(
            self, "sensitivity_factor", check_real("sensitivity_factor", self.sensitivity_factor, low=1.0, high=2.0)
        )
        _check_inner("inner", self.inner)

    @property
    def rate(self) -> float:
        """The sampling fraction batch / population."""
        return self.batch / self.population

    def describe(self) -> str:
        return (
            f"fixed-size sampling ({self.batch} of {self.population}, substitution, "
            f"sensitivity x{self.sensitivity_factor:g}) of {self.inner.describe()}"
        )


@dataclasses.dataclass(frozen=True)
class ReplacementSampled(Event):
    """Each step draws ``draws`` units independently and uniformly, with replacement, from the
    ``population`` units (a unit may be drawn several times, each copy contributing); ``inner`` (a
    Gaussian) runs on the sum of the copies' clipped contributions.

    Neighbouring relation: add/remove one unit. A draw that picks the unit picks another unit on the
    neighbour, so each copy moves the clipped sum by up to 2C: ``metadp.mechanisms.replacement`` proves the
    dominating pair (a binomial mixture of Gaussians) and that it is attained.
    """

    draws: int
    population: int
    inner: Event

    def __post_init__(self) -> None:
        object.__setattr__(self, "population", check_count("population", self.population, minimum=1,
                                                           maximum=MAX_COUNT))
        object.__setattr__(self, "draws", check_count("draws", self.draws, minimum=0, maximum=MAX_COUNT))
        _check_inner("inner", self.inner)

    @property
    def rate(self) -> float:
        """The probability that one draw picks a given unit, 1 / population."""
        return 1.0 / self.population

    def describe(self) -> str:
        return (f"sampling with replacement ({self.draws} draws from {self.population}, add/remove, each copy "
                f"moving the sum by up to 2C) of {self.inner.describe()}")


@dataclasses.dataclass(frozen=True)
class SelfComposed(Event):
    """``count`` adaptive compositions of ``inner`` (count 0 is a no-op)."""

    inner: Event
    count: int

    def __post_init__(self) -> None:
        _check_inner("inner", self.inner)
        object.__setattr__(self, "count", check_count("count", self.count, minimum=0, maximum=MAX_COUNT))

    def describe(self) -> str:
        return f"{self.count} x [{self.inner.describe()}]"


@dataclasses.dataclass(frozen=True)
class Composed(Event):
    """Adaptive composition of a sequence of events."""

    events: Tuple[Event, ...]

    def __post_init__(self) -> None:
        events = tuple(self.events)
        for i, e in enumerate(events):
            _check_inner(f"events[{i}]", e)
        object.__setattr__(self, "events", events)

    def describe(self) -> str:
        return "composition of [" + "; ".join(e.describe() for e in self.events) + "]"


@dataclasses.dataclass(frozen=True)
class EpisodicSampled(Event):
    """One step of episodic training, seen from one record (DESIGN.md 3.7, with the 3.6 correction).

    The step draws ``episodes`` episodes independently; each selects the record's unit with
    probability ``unit_rate`` (P_U) and, given that, includes the record with probability
    ``within_rate`` (r). One affected episode moves the released sum by at most ``shift`` times the
    clip norm (2 with per-episode clipping: the episode exists either way; with per-example clipping,
    1 for a Poisson last level and 2 for a fixed-size one). ``inner`` is the Gaussian on the sum.

    Neighbouring relation: add/remove one record. Which episodes selected the record's unit may show
    in the output, so the accountants condition on it (``metadp.mechanisms.episodic``).
    """

    episodes: int
    unit_rate: float
    within_rate: float
    inner: Gaussian  # checked at construction
    shift: float = 2.0

    def __post_init__(self) -> None:
        object.__setattr__(self, "episodes", check_count("episodes", self.episodes, minimum=1, maximum=MAX_COUNT))
        object.__setattr__(self, "unit_rate", check_probability("unit_rate", self.unit_rate))
        object.__setattr__(self, "within_rate", check_probability("within_rate", self.within_rate))
        object.__setattr__(self, "shift", check_real("shift", self.shift, low=0.0, low_open=True))
        _check_inner("inner", self.inner)
        if not isinstance(self.inner, Gaussian):
            raise ValueError(f"inner must be a Gaussian event for episodic sampling, got {type(self.inner).__name__}")

    @property
    def inclusion(self) -> float:
        """eta = P_U r, the probability that one episode contains the record."""
        return self.unit_rate * self.within_rate

    def describe(self) -> str:
        return (f"episodic sampling ({self.episodes} episodes, unit rate {self.unit_rate:.4g}, within-unit "
                f"rate {self.within_rate:.4g}, shift {self.shift:g} C per episode) of {self.inner.describe()}")


@dataclasses.dataclass(frozen=True)
class PoolSubstitution(Event):
    """One step of a Poisson-sampled clipped sum, seen from a unit whose *contribution is replaced*, not
    removed: a task of a persistent pool holding the record (``metadp.mechanisms.pooled``).

    The unit joins the step with probability ``rate`` under both neighbouring data sets (it stays in
    the pool); its contribution is clipped to norm C under both, so one neighbour's contribution g and
    the other's g' both lie in the ball of radius C around the not-sampled output 0 (not merely
    ||g - g'|| <= 2C). ``inner`` is the Gaussian on the sum, multiplier z = sigma / C.

    Neighbouring relation: whatever changes the unit's content but not its membership (one record of the
    task added, removed or replaced); the accountants take the same pair for either record relation.
    """

    rate: float
    inner: Gaussian  # checked at construction

    def __post_init__(self) -> None:
        object.__setattr__(self, "rate", check_probability("rate", self.rate))
        _check_inner("inner", self.inner)
        if not isinstance(self.inner, Gaussian):
            raise ValueError(f"inner must be a Gaussian event for a pool substitution, got {type(self.inner).__name__}")

    def describe(self) -> str:
        return (f"pool substitution (a clipped contribution replaced within a unit sampled at rate "
                f"{self.rate:.4g}) of {self.inner.describe()}")


@dataclasses.dataclass(frozen=True)
class Group(Event):
    """``inner``, with the guarantee stated for a group of ``size`` units instead of one (DESIGN.md 3.8).

    Neighbouring relation: as ``inner``'s, applied to ``size`` units at once (added or removed
    together). Accountants use the exact group pair where one exists (Gaussian: sensitivity times
    ``size``; Poisson-subsampled Gaussian: the binomial mixture), else a generic group rule.
    """

    size: int
    inner: Event

    def __post_init__(self) -> None:
        object.__setattr__(self, "size", check_count("size", self.size, minimum=1, maximum=MAX_COUNT))
        _check_inner("inner", self.inner)

    def describe(self) -> str:
        return f"group of {self.size}: {self.inner.describe()}"


@dataclasses.dataclass(frozen=True)
class RandomAllocation(Event):
    """One pass of ``steps`` releases of ``inner`` in which each unit is used in exactly ``selected`` of the
    steps (default one), chosen uniformly at random and independently of the other units (random allocation,
    "balls in bins", k of t; DESIGN.md 3.9(a)). Neighbouring relation: add/remove one unit.
    ``metadp.amplification.allocation_bounds`` derives its RDP (Gaussian ``inner``); for k > 1 the accountants
    bound it by k one-step allocations over floor(t / k) steps each (the reduction proved there)."""

    steps: int
    inner: Event
    selected: int = 1

    def __post_init__(self) -> None:
        object.__setattr__(self, "steps", check_count("steps", self.steps, minimum=1, maximum=MAX_COUNT))
        object.__setattr__(self, "selected", check_count("selected", self.selected, minimum=1, maximum=self.steps))
        _check_inner("inner", self.inner)

    def reduced(self) -> "Event":
        """The event the accountants bound a k-of-t allocation by: k compositions of a one-step allocation over
        floor(t / k) steps (``inner`` itself where that block is one step); the event itself for k = 1."""
        if self.selected == 1:
            return self
        block = self.steps // self.selected
        return SelfComposed(self.inner if block == 1 else RandomAllocation(block, self.inner), self.selected)

    def describe(self) -> str:
        which = "one uniformly random step" if self.selected == 1 else f"{self.selected} distinct uniformly random steps"
        return f"random allocation (each unit in {which} of {self.steps}) of {self.inner.describe()}"
