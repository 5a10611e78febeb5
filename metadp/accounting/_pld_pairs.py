"""Event -> dominating pairs for the PLD accountant (``metadp.accounting.pld``): a dispatch table over
the event classes; an event it cannot pair raises ``UnsupportedEventError`` naming it.
"""

from __future__ import annotations

import functools
import math
from typing import Any, List, Optional, Tuple, Union

from metadp.accounting._pld_lattice import Pair, PairItem
from metadp.accounting._rdp_events import UnsupportedEventError, effective_noise_multiplier
from metadp.accounting.allocation_pld import allocation_pairs, pld_resolves
from metadp.amplification.group import poisson_group_pairs
from metadp.core import events as ev
from metadp.mechanisms.episodic import episodic_record_pairs
from metadp.mechanisms.gaussian import gaussian_pair, poisson_gaussian_pairs
from metadp.mechanisms.laplace import LaplacePair
from metadp.mechanisms.pooled import pooled_record_pair
from metadp.mechanisms.replacement import replacement_pairs
from metadp.mechanisms.wor import wor_gaussian_pair

__all__ = ["event_pairs"]

# ---------------------------------------------------------------------------------------------
# Event -> dominating pairs (dispatch table). Each item: (pairs, count), pairs = (add, remove) or a
# single pair when both directions share one PLD.


@functools.singledispatch
def event_pairs(event: ev.Event, relation: str) -> List[PairItem]:
    """The dominating pairs of ``event`` with their multiplicities."""
    raise _pld_unsupported(event, f"no dominating pair for {type(event).__name__}")


def _pld_unsupported(event: ev.Event, reason: str) -> UnsupportedEventError:
    return UnsupportedEventError(event, reason, accountant="PLD")


@event_pairs.register
def _(event: ev.NoOp, relation: str) -> List[PairItem]:
    return []


@event_pairs.register
def _(event: ev.NonPrivate, relation: str) -> List[PairItem]:
    return [(None, 1)]


def _factor(relation: str) -> float:
    return 2.0 if relation == "substitute" else 1.0


# The noise multipliers (and Laplace scales, relative to the sensitivity) whose pairs float64 can
# represent: below, the privacy losses (about 1/(2 z^2)) and their squares in the lattice's moments
# overflow (seen from z = 1e-80); above, z^2 overflows in the pair's constructor (from 1e154) and the
# losses vanish below the lattice's resolution. The RDP accountant bounds both ends.
_NOISE_RANGE = (1e-50, 1e50)


def _check_noise(event: ev.Event, noise: float, what: str = "noise multiplier") -> float:
    low, high = _NOISE_RANGE
    if not low <= noise <= high:
        raise _pld_unsupported(event, f"the PLD accountant needs a {what} in [{low:g}, {high:g}] relative to the "
                                      f"sensitivity, got {noise:g} (float64 cannot hold its privacy losses); "
                                      "the RDP accountant bounds it")
    return noise


# Where the random-allocation lattice (accounting.allocation_pld) is built: its layout needs exp(1/z^2) and a
# window of ~c t / Delta points; outside (z ~ 0.04 overflows, t = 10^8 gave NaN) the RDP accountant bounds a pass
_ALLOCATION_PLD_Z = (0.05, 1e3)
_ALLOCATION_PLD_STEPS = 10**6


@functools.lru_cache(maxsize=256)
def _cached_pairs(kind: str, *args: Any) -> Tuple[Pair, ...]:
    """One pair object per distinct mechanism, so repeated compositions of it merge into one power
    (and its lattice is built once)."""
    if kind == "gaussian":
        return (gaussian_pair(*args),)
    if kind == "laplace":
        return (LaplacePair(*args),)
    if kind == "pool":
        return (pooled_record_pair(*args),)
    if kind == "wor":
        return (wor_gaussian_pair(*args),)
    if kind == "replacement":
        return replacement_pairs(*args)
    return tuple(poisson_gaussian_pairs(*args))


@event_pairs.register
def _(event: ev.Gaussian, relation: str) -> List[PairItem]:
    if math.isinf(event.noise_multiplier):
        return []
    return [(_cached_pairs("gaussian", _check_noise(event, event.noise_multiplier / _factor(relation))), 1)]


@event_pairs.register
def _(event: ev.Laplace, relation: str) -> List[PairItem]:
    if math.isinf(event.scale):
        return []
    return [(_cached_pairs("laplace", _check_noise(event, event.scale / _factor(relation), "Laplace scale")), 1)]


def _sampled_noise(event: Union[ev.PoissonSampled, ev.FixedSizeSampled, ev.ReplacementSampled], relation: str,
                   wanted: str, why: str, empty: bool) -> Optional[float]:
    """The inner Gaussian's multiplier of a sampled step analysed under ``wanted`` only (else refused, ``why``);
    None where the step releases nothing (``empty``: nobody sampled, or no noise bound at all: infinite noise)."""
    if relation != wanted:
        raise _pld_unsupported(event, why)
    z = effective_noise_multiplier(event.inner, "PLD")
    return None if empty or math.isinf(z) else z


@event_pairs.register
def _(event: ev.PoissonSampled, relation: str) -> List[PairItem]:
    z = _sampled_noise(event, relation, "add_remove", "Poisson sampling is analysed under the add_remove relation",
                       event.rate == 0.0)
    return [] if z is None else [(_cached_pairs("poisson", event.rate, _check_noise(event, z)), 1)]


@event_pairs.register
def _(event: ev.FixedSizeSampled, relation: str) -> List[PairItem]:
    # the symmetric pair of metadp.mechanisms.wor (Balle, Barthe & Gaboardi 2018, Thm 9, both orderings)
    z = _sampled_noise(event, relation, "substitute", "fixed-size sampling is only analysed under the substitute "
                       "relation (Balle, Barthe & Gaboardi 2018); set relation = 'substitute'", event.batch == 0)
    return [] if z is None else [(_cached_pairs("wor", event.rate, _check_noise(event, z / event.sensitivity_factor)),
                                  1)]


@event_pairs.register
def _(event: ev.ReplacementSampled, relation: str) -> List[PairItem]:
    # the binomial mixture of metadp.mechanisms.replacement: each copy moves the sum by up to 2C, attained
    z = _sampled_noise(event, relation, "add_remove", "sampling with replacement is analysed under the add_remove "
                       "relation (a copy of the unit replaces another unit's draw)", event.draws == 0)
    if z is None:
        return []
    if event.draws > _MAX_DRAWS:
        raise _pld_unsupported(event, f"the binomial mixture holds a component for each of 0..{event.draws:,} copies "
                                      f"(the PLD pairs take at most {_MAX_DRAWS:,} draws a step)")
    _check_noise(event, z / (2.0 * event.draws))  # the largest shift: every draw a copy
    return [(_cached_pairs("replacement", event.draws, event.population, z), 1)]


_MAX_DRAWS = 100_000  # draws a step of sampling with replacement (one mixture component each)
_MAX_SPREAD = 1_000  # values of the selecting count with mass (EpisodicSampled pairs: a component each)
_MAX_EPISODES = 10**7  # episodes a step (the binomial support is built over 0..episodes)


@event_pairs.register
def _(event: ev.EpisodicSampled, relation: str) -> List[PairItem]:
    if relation != "add_remove":
        raise _pld_unsupported(event, "episodic sampling is analysed under the add_remove relation (one record)")
    if math.isinf(event.inner.noise_multiplier) or event.unit_rate == 0.0 or event.within_rate == 0.0:
        return []
    _check_noise(event, event.inner.noise_multiplier / (event.shift * event.episodes))  # largest shift: all episodes
    # the revealed mixture holds a component (and a binomial) for each count j of episodes selecting the unit
    # that has mass: about 24 standard deviations of Bin(L, P_U) wide; and its support is built from 0..L
    spread = 24.0 * math.sqrt(event.episodes * event.unit_rate * (1.0 - event.unit_rate)) + 1.0
    if spread > _MAX_SPREAD or event.episodes > _MAX_EPISODES:
        raise _pld_unsupported(event, f"the count of episodes a step that select the record's unit spreads over "
                                      f"~{spread:,.0f} values with {event.episodes:,} episodes (the PLD pairs take at "
                                      f"most {_MAX_SPREAD:,} values and {_MAX_EPISODES:,} episodes): the RDP "
                                      "accountant bounds it")
    return [(episodic_record_pairs(event.episodes, event.unit_rate, event.within_rate,
                                   event.inner.noise_multiplier, event.shift), 1)]


@event_pairs.register
def _(event: ev.PoolSubstitution, relation: str) -> List[PairItem]:
    # the event carries the replacement itself: a record added, removed or replaced all replace the
    # task's clipped contribution by another of norm <= C (metadp.mechanisms.pooled)
    if math.isinf(event.inner.noise_multiplier) or event.rate == 0.0:
        return []
    z = _check_noise(event, event.inner.noise_multiplier / 2.0)  # the largest shift is 2C
    return [(_cached_pairs("pool", event.rate, 2.0 * z), 1)]


@event_pairs.register
def _(event: ev.RandomAllocation, relation: str) -> List[PairItem]:
    # one pass as a discrete pair that dominates the allocation pair, upper bound only (allocation_pld)
    if relation != "add_remove":
        raise _pld_unsupported(event, "random allocation is analysed under the add_remove relation")
    if not isinstance(event.inner, ev.Gaussian):
        raise _pld_unsupported(event, "random allocation is analysed for a Gaussian inner mechanism only")
    if math.isinf(event.inner.noise_multiplier):
        return []
    if event.selected > 1:  # k of t: k one-step allocations of floor(t / k) steps (allocation_bounds' reduction)
        return event_pairs(event.reduced(), relation)
    if event.steps == 1:
        return event_pairs(event.inner, relation)
    z = _check_noise(event, event.inner.noise_multiplier)
    low, high = _ALLOCATION_PLD_Z
    if not low <= z <= high or event.steps > _ALLOCATION_PLD_STEPS:
        raise _pld_unsupported(event, f"the allocation lattice is built for noise in [{low:g}, {high:g}] and at most "
                                      f"{_ALLOCATION_PLD_STEPS:,} steps a pass, got z = {z:g}, t = {event.steps:,}; "
                                      "the RDP accountant bounds it")
    if not pld_resolves(z, event.steps):
        raise _pld_unsupported(event, f"the allocation lattice does not resolve t = {event.steps} steps at noise {z:g} "
                                      "(its bound would be infinite) and the log lattice would be too large; the RDP "
                                      "accountant bounds it")
    return [(allocation_pairs(z, event.steps), 1)]


@event_pairs.register
def _(event: ev.Group, relation: str) -> List[PairItem]:
    inner, k = event.inner, event.size
    if k == 1:
        return event_pairs(inner, relation)
    if isinstance(inner, (ev.SelfComposed, ev.Composed)):  # a group's guarantee composes step by step
        parts = [inner.inner] if isinstance(inner, ev.SelfComposed) else list(inner.events)
        times = inner.count if isinstance(inner, ev.SelfComposed) else 1
        return [(pairs, c * times) for e in parts for pairs, c in event_pairs(ev.Group(k, e), relation)]
    if isinstance(inner, ev.Gaussian):
        return event_pairs(ev.Gaussian(inner.noise_multiplier / k), relation)
    if isinstance(inner, ev.PoissonSampled) and isinstance(inner.inner, ev.Gaussian) and relation == "add_remove":
        if inner.rate == 0.0 or math.isinf(inner.inner.noise_multiplier):
            return []
        _check_noise(event, inner.inner.noise_multiplier / k)  # the group's largest shift is k
        return [(poisson_group_pairs(inner.rate, inner.inner.noise_multiplier, k), 1)]
    raise _pld_unsupported(event, "exact group pairs exist for Gaussian and Poisson-subsampled Gaussian "
                                  "(add_remove) steps only")


@event_pairs.register
def _(event: ev.SelfComposed, relation: str) -> List[PairItem]:
    return [(pairs, count * event.count) for pairs, count in event_pairs(event.inner, relation)
            if count * event.count > 0]


@event_pairs.register
def _(event: ev.Composed, relation: str) -> List[PairItem]:
    return [item for e in event.events for item in event_pairs(e, relation)]
