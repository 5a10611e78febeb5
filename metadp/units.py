"""Privacy units of a plan: the event each unit's guarantee composes (DESIGN.md sec. 2, 3.6-3.9, 4).

A plan names one unit (``record``, ``task`` or ``group``); where the plan also says how tasks are
built from records (a ``[[hierarchy]]`` of episodic levels), the other meaningful unit is reported
beside it, because a task-level number says nothing about one record that appears in many episodes.

Views (one step's event, the relation, and why):

* task or record, Poisson / fixed-size / no sampling: the plan's own step (``PoissonSampled``,
  ``FixedSizeSampled``, or the bare mechanism); ``group``: the same inside ``Group(k, .)``.
* ``episodic`` sampling (L fresh episodes per step, drawn level by level): the record is protected by
  ``EpisodicSampled`` (which episodes select the record's unit may show; only the last draw is
  hidden: ``metadp.mechanisms.episodic``); the top-level unit (``task``: a class, user or client) by
  a hidden Binomial(L, rate of the top level) count of affected episodes.
* a hierarchy under Poisson or fixed-size task sampling (each sampled task is a fresh episode): the
  record view is ``EpisodicSampled`` with one slot per task of the population (Poisson: each slot
  kept with the task rate, so the count of episodes that select the record's unit is Binomial(N, q
  P_U)) or the batch (fixed).
* ``shuffle`` (one pass over an equal partition, per epoch): one Gaussian per epoch, no amplification;
  ``balls_in_bins``: the random-allocation pair, certified by Monte Carlo (``amplification.one_pass``).
"""

from __future__ import annotations

import dataclasses
import math
from fractions import Fraction
from typing import Mapping, Optional, Sequence, Tuple

from metadp.core import events as ev
from metadp.amplification.multistage import Hierarchy, Level, multistage_amplification

__all__ = ["UnitView", "parse_hierarchy", "unit_views", "episode_shift", "top_unit_shift", "LEVEL_KEYS"]

LEVEL_KEYS = ("name", "draw", "size", "rate", "units")


@dataclasses.dataclass(frozen=True)
class UnitView:
    """One privacy unit's analysis of a plan: a step event (or several, the worst is reported)."""

    unit: str  # "record", "task" or "group"
    relation: str
    events: Tuple[ev.Event, ...]  # one step; several = alternatives, the largest epsilon is reported
    steps: int
    how: str  # the derivation, for the report's assumptions
    primary: bool = False


def parse_hierarchy(levels) -> Hierarchy:
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
                                rate=d.get("rate"), units=tuple(units) if isinstance(units, list) else units))
        except ValueError as err:
            raise ValueError(f"hierarchy[{i}]: {err}") from None
    return Hierarchy(tuple(parsed))


def top_unit_shift(hierarchy: Hierarchy, clipping: str) -> float:
    """How far one episode that selects a top-level unit moves the sum when the whole unit changes, over C."""
    if clipping == "per_episode":
        return 2.0
    if any(level.draw != "fixed" for level in hierarchy.levels[1:]):
        return math.inf  # a Poisson level below the top: the unit's records in one episode are unbounded
    return 2.0 * math.prod(level.size for level in hierarchy.levels[1:])  # its records in one episode, 2C each


def episode_shift(hierarchy: Hierarchy, clipping: str) -> float:
    """How far one affected episode moves the released sum, over C (DESIGN.md 3.7)."""
    if clipping == "per_episode":
        return 2.0  # the episode exists either way: one member replaced, its clipped gradient moves <= 2C
    return 2.0 if hierarchy.levels[-1].draw == "fixed" else 1.0


def _inclusion_facts(hierarchy: Hierarchy, episodes_per_step: float, steps: int) -> str:
    """eta (exact), where it is attained, and the expected number of episodes per record."""
    bound = multistage_amplification(hierarchy)
    where = " -> ".join(f"{level.name} {i + 1}" for level, i in zip(hierarchy.levels, bound.path))
    per_step = float(bound.eta) * episodes_per_step
    return (f"eta = {bound.eta} (the largest probability that one episode contains a given record, at {where}); "
            f"expected episodes per record: {per_step:.4g} per step, {per_step * steps:,.4g} over training")


def _record_events(hierarchy: Hierarchy, slots: int, slot_rate: float, shift: float,
                   inner: ev.Gaussian) -> Tuple[ev.Event, ...]:
    """One EpisodicSampled per Pareto-maximal (P_U, r) of the hierarchy (the worst record decides)."""
    bound = multistage_amplification(hierarchy)
    out = []
    for weight, rate in bound.pairs:
        p_unit = Fraction(weight) / Fraction(rate)
        out.append(ev.EpisodicSampled(slots, float(p_unit) * slot_rate, float(rate), inner, shift))
    return tuple(out)


def unit_views(plan) -> Tuple[UnitView, ...]:
    """Every meaningful unit's view of ``plan``, the plan's own unit first (``primary``)."""
    s, inner = plan.sampling, plan.noise.event()
    h: Optional[Hierarchy] = plan.hierarchy
    views = []
    if s.scheme == "episodic":
        shift = episode_shift(h, plan.noise.clipping)
        top = h.levels[0]
        top_rate = float(top.factor(top.units if isinstance(top.units, int) else top.units[0]))
        record = UnitView("record", "add_remove", _record_events(h, s.episodes, 1.0, shift, inner), plan.steps,
                          f"each step draws {s.episodes:,} episodes independently through the hierarchy; a record's "
                          f"affected episodes each move the sum by <= {shift:g}C; which episodes select the record's "
                          "unit may show (metadp.mechanisms.episodic); " + _inclusion_facts(h, s.episodes, plan.steps),
                          plan.unit == "record")
        top_shift = top_unit_shift(h, plan.noise.clipping)
        if math.isinf(top_shift):
            task = UnitView("task", "add_remove", (ev.NonPrivate(),), plan.steps,
                            f"no bound for a whole top-level unit ({top.name}): with per-example clipping and a Poisson "
                            "level below it, the number of its records in one episode is unbounded (use per-episode "
                            "clipping)", plan.unit == "task")
        else:
            task = UnitView("task", "add_remove", (ev.EpisodicSampled(s.episodes, 1.0, top_rate, inner, top_shift),),
                            plan.steps, f"a top-level unit ({top.name}) is in each episode with probability "
                            f"{top_rate:.6g}; each such episode moves the sum by <= {top_shift:g}C", plan.unit == "task")
        views = [record, task] if plan.unit == "record" else [task, record]
    elif s.scheme == "shuffle":
        passes = math.ceil(plan.steps * s.batch_size / s.population - 1e-9)
        step = inner if plan.unit != "group" else ev.Group(plan.group_size, inner)
        views = [UnitView(plan.unit, plan.relation, (step,), passes, f"{plan.steps:,} steps of {s.batch_size:,} cut "
                          f"from shuffled passes over {s.population:,}: each unit is in one step per pass, so "
                          f"{passes:,} Gaussian release(s), no amplification", True)]
    else:
        step = plan.step_event()
        if plan.unit == "group":
            step = ev.Group(plan.group_size, step)
        views.append(UnitView(plan.unit, plan.relation, (step,), plan.steps, "the plan's step", True))
        if h is not None and plan.unit == "task" and isinstance(inner, ev.Gaussian) and s.scheme in ("poisson", "fixed"):
            shift = episode_shift(h, plan.noise.clipping)
            slots, rate = (s.population, s.rate) if s.scheme == "poisson" else (s.batch_size, 1.0)
            how = (f"each sampled task is a fresh episode drawn through the hierarchy ({slots:,} task slots"
                   + (f", each kept with probability {rate:.6g}" if s.scheme == "poisson" else "")
                   + f"); a record's affected episodes each move the sum by <= {shift:g}C; which episodes select "
                   "the record's unit may show (metadp.mechanisms.episodic); "
                   + _inclusion_facts(h, slots * rate, plan.steps))
            views.append(UnitView("record", "add_remove", _record_events(h, slots, rate, shift, inner), plan.steps, how))
    return tuple(views)
