"""Episodes drawn through a hierarchy: the plan's ``[[hierarchy]]`` tables, how far one affected episode
moves the released sum, and the events of the worst record (DESIGN.md 3.6-3.7).
"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Mapping, Sequence, Tuple, cast

from metadp.core import events as ev
from metadp.amplification.levels import Units
from metadp.amplification.multistage import Hierarchy, Level, multistage_amplification

__all__ = ["LEVEL_KEYS", "parse_hierarchy", "episode_shift", "top_unit_shift", "record_events", "top_unit_event",
           "top_rate", "inclusion_facts"]

LEVEL_KEYS = ("name", "draw", "size", "rate", "units")


def parse_hierarchy(levels: object) -> Hierarchy:
    """A ``Hierarchy`` from the plan's ``[[hierarchy]]`` tables (top level first)."""
    if not isinstance(levels, Sequence) or isinstance(levels, (str, bytes)) or not levels:
        raise ValueError("hierarchy must be a non-empty array of tables ([[hierarchy]] entries), top level first")
    parsed = []
    for i, d in enumerate(levels):
        if not isinstance(d, Mapping):
            raise ValueError(f"hierarchy[{i}] must be a table, got {type(d).__name__}")
        unknown = [k for k in d if k not in LEVEL_KEYS]
        if unknown:
            raise ValueError(f"hierarchy[{i}].{unknown[0]} is not a known key; allowed keys: {', '.join(LEVEL_KEYS)}")
        units = d.get("units")
        try:
            parsed.append(Level(str(d.get("name", f"level {i + 1}")), d.get("draw", "fixed"), size=d.get("size"),
                                rate=d.get("rate"),
                                units=cast(Units, tuple(units) if isinstance(units, list) else units)))  # checked
        except ValueError as err:
            raise ValueError(f"hierarchy[{i}]: {err}") from None
    return Hierarchy(tuple(parsed))


def top_unit_shift(hierarchy: Hierarchy, clipping: str) -> float:
    """How far one episode that selects a top-level unit moves the sum when the whole unit changes, over C."""
    if clipping == "per_episode":
        return 2.0
    if any(level.draw != "fixed" for level in hierarchy.levels[1:]):
        return math.inf  # a Poisson level below the top: the unit's records in one episode are unbounded
    # its records in one episode, 2C each (every level below the top is fixed: it has a size)
    return 2.0 * math.prod(cast(int, level.size) for level in hierarchy.levels[1:])


def episode_shift(hierarchy: Hierarchy, clipping: str) -> float:
    """How far one affected episode moves the released sum, over C (DESIGN.md 3.7)."""
    if clipping == "per_episode":
        return 2.0  # the episode exists either way: one member replaced, its clipped gradient moves <= 2C
    return 2.0 if hierarchy.levels[-1].draw == "fixed" else 1.0


def inclusion_facts(hierarchy: Hierarchy, episodes_per_step: float, steps: int) -> str:
    """eta (exact), where it is attained, and the expected number of episodes per record."""
    bound = multistage_amplification(hierarchy)
    where = " -> ".join(f"{level.name} {i + 1}" for level, i in zip(hierarchy.levels, bound.path))
    per_step = float(bound.eta) * episodes_per_step
    return (f"eta = {bound.eta} (the largest probability that one episode contains a given record, at {where}); "
            f"expected episodes per record: {per_step:.4g} per step, {per_step * steps:,.4g} over training")


def record_events(hierarchy: Hierarchy, slots: int, slot_rate: float, shift: float,
                  inner: ev.Gaussian) -> Tuple[ev.Event, ...]:
    """One EpisodicSampled per Pareto-maximal (P_U, r) of the hierarchy (the worst record decides):
    ``slots`` episodes a step, each drawn with probability ``slot_rate``; P_U = weight / rate."""
    bound = multistage_amplification(hierarchy)
    out = []
    for weight, rate in bound.pairs:
        p_unit = Fraction(weight) / Fraction(rate)
        out.append(ev.EpisodicSampled(slots, float(p_unit) * slot_rate, float(rate), inner, shift))
    return tuple(out)


def top_unit_event(hierarchy: Hierarchy, episodes: int, inner: ev.Gaussian, shift: float) -> ev.Event:
    """One step for a top-level unit (class, task, user): each episode selects it with the top level's rate
    and moves the sum by at most ``shift`` C; ``NonPrivate`` where the shift is unbounded."""
    if math.isinf(shift):
        return ev.NonPrivate()
    return ev.EpisodicSampled(episodes, 1.0, top_rate(hierarchy), inner, shift)


def top_rate(hierarchy: Hierarchy) -> float:
    """The probability that one episode selects a given top-level unit (its first parent's, if several)."""
    top = hierarchy.levels[0]
    return float(top.factor(top.units if isinstance(top.units, int) else top.units[0]))
