"""The certified (epsilon, delta) of a bare event (one read from a dp-accounting JSON file).

A plan file's report (``metadp.report.Report``) describes a plan's sampling and noise; an event tree
from another library has no such fields, so its report names the event, the relation, the unit and
the assumptions of the conversion instead. The epsilon is the tightest certified upper bound among the
accountants that handle the event; printed, it is rounded up (a lower bound, down).
"""

from __future__ import annotations

import dataclasses
import json
import math
from typing import Any, Dict, Optional, Tuple

from metadp.accounting import Event
from metadp.accounting.certify import accountant_names, certify
from metadp.report import format_lower, format_upper, interval_width, interval_width_text, json_epsilon

__all__ = ["EventReport", "event_report"]

_UNITS = ("record", "task")
_RELATIONS = {"add_remove": "add/remove: neighbouring datasets differ by one {unit} added or removed",
              "substitute": "substitution: neighbouring datasets differ by one {unit} replaced by another"}


@dataclasses.dataclass(frozen=True)
class EventReport:
    """The certified guarantee of one event (``epsilon`` is an upper bound)."""

    name: str
    event: str  # the event's one-line description
    epsilon: float
    epsilon_lower: Optional[float]  # certified lower bound on the optimal epsilon (PLD), if it ran
    delta: float
    unit: str
    relation: str
    accountant: str  # the accountant whose bound is ``epsilon``
    alternatives: Tuple[Dict[str, Any], ...]  # every accountant that ran: accountant, epsilon, epsilon_lower
    assumptions: Tuple[str, ...]
    warnings: Tuple[str, ...] = ()

    bound = "upper"

    def headline(self) -> str:
        return (f"epsilon <= {format_upper(self.epsilon)} (upper bound, {self.accountant.upper()} accountant) "
                f"at delta = {self.delta:g}, unit {self.unit}, relation {self.relation}")

    def to_dict(self) -> Dict[str, Any]:
        d = dataclasses.asdict(self)
        d.update(bound=self.bound, epsilon=json_epsilon(self.epsilon),
                 epsilon_display=format_upper(self.epsilon),
                 epsilon_interval_width=interval_width(self.epsilon_lower, self.epsilon), alternatives=[
                     dict(a, epsilon=json_epsilon(a["epsilon"])) for a in self.alternatives])
        return d

    def to_json(self, indent: int = 2) -> str:
        return json.dumps(self.to_dict(), indent=indent)

    def to_table(self) -> str:
        lower = "" if self.epsilon_lower is None else f", certified interval [{_lower(self.epsilon_lower)}, " \
                                                      f"{format_upper(self.epsilon)}]" \
                                                      f"{interval_width_text(self.epsilon_lower, self.epsilon)}"
        rows = [("epsilon", f"<= {format_upper(self.epsilon)}   (upper bound; {self.accountant.upper()} "
                            f"accountant{lower})"),
                ("delta", f"{self.delta:g}"),
                ("unit", self.unit),
                ("relation", _RELATIONS[self.relation].format(unit=self.unit)),
                ("event", self.event)]
        for alt in self.alternatives:
            low = "" if alt["epsilon_lower"] is None else f", lower bound {_lower(alt['epsilon_lower'])}"
            mark = "  <- tightest" if alt["accountant"] == self.accountant and len(self.alternatives) > 1 else ""
            rows.append((f"  {alt['accountant']}", f"<= {format_upper(alt['epsilon'])}{low}{mark}"))
        width = max(len(k) for k, _ in rows)
        lines = [f"privacy report: {self.name}", ""] + [f"  {k.ljust(width)}  {v}" for k, v in rows]
        lines += ["", "Assumptions (the bound holds only if all of these are true):"]
        lines += [f"  - {a}" for a in self.assumptions]
        if self.warnings:
            lines += ["", "WARNINGS:"] + [f"  ! {w}" for w in self.warnings]
        return "\n".join(lines)


def _lower(x: float) -> str:
    return "0" if x <= 0 else format_lower(x)


def event_report(event: Event, delta: float, *, unit: str = "record", relation: str = "add_remove",
                 accountant: str = "all", name: str = "event", assumptions=()) -> EventReport:
    """Certifies ``event`` at ``delta`` with the named accountant (``"all"``: every one that handles it,
    the tightest reported).

    Raises:
        ValueError: for an unknown unit, relation or accountant, or (``UnsupportedEventError``) when no
            accountant asked for can handle the event (the message names the sub-event).
    """
    if unit not in _UNITS:
        raise ValueError(f"unit must be one of {_UNITS}, got {unit!r}")
    if relation not in _RELATIONS:
        raise ValueError(f"relation must be one of {tuple(_RELATIONS)}, got {relation!r}")
    # the PLD accountant refines without a time limit (its point budget bounds it): the same event gives the
    # same number on any machine
    found = certify(event, delta, relation=relation, accountant=accountant_names(accountant), max_seconds=math.inf)
    best = found.tightest
    lowers = [c.epsilon_lower for c in found.certificates if c.epsilon_lower is not None]
    notes = [n for c in found.certificates for n in c.notes]
    every = [f"every release in the event is made as described: {event.describe()}",
             "composition is adaptive; all outputs may be released"]
    alternatives = tuple({"accountant": c.accountant, "epsilon": c.epsilon, "epsilon_lower": c.epsilon_lower}
                         for c in found.certificates)
    return EventReport(name=name, event=event.describe(), epsilon=best.epsilon,
                       epsilon_lower=max(lowers) if lowers else None, delta=delta, unit=unit, relation=relation,
                       accountant=best.accountant, alternatives=alternatives,
                       assumptions=tuple(assumptions) + tuple(every), warnings=tuple(notes))
