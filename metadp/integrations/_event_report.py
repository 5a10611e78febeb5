"""The certified (epsilon, delta) of a bare event (one read from a dp-accounting JSON file).

The report is the one ``metadp.report.Report``: a plan's describes its sampling, noise and steps; an event
tree from another library has no such fields, so its report names the event (``Report.event``), the
relation, the unit and the assumptions of the conversion instead. The epsilon is the tightest certified upper bound among the
accountants that handle the event; printed, it is rounded up (a lower bound, down).
"""

from __future__ import annotations

import math
from typing import Sequence

from metadp.accounting import Event
from metadp.accounting.certify import accountant_names, certify
from metadp.report import Report

__all__ = ["event_report"]

_UNITS = ("record", "task")
_RELATIONS = ("add_remove", "substitute")


def event_report(event: Event, delta: float, *, unit: str = "record", relation: str = "add_remove",
                 accountant: str = "all", name: str = "event", assumptions: Sequence[str] = ()) -> Report:
    """Certifies ``event`` at ``delta`` with the named accountant (``"all"``: every one that handles it,
    the tightest reported).

    Raises:
        ValueError: for an unknown unit, relation or accountant, or (``UnsupportedEventError``) when no
            accountant asked for can handle the event (the message names the sub-event).
    """
    if unit not in _UNITS:
        raise ValueError(f"unit must be one of {_UNITS}, got {unit!r}")
    if relation not in _RELATIONS:
        raise ValueError(f"relation must be one of {_RELATIONS}, got {relation!r}")
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
    citations = [key for c in found.certificates for key in c.citations]
    return Report(name=name, epsilon=best.epsilon, delta=delta, unit=unit, relation=relation, sampling=None,
                  noise=None, steps=None, accountant=best.accountant, order=best.order, conversion=best.conversion,
                  assumptions=tuple(assumptions) + tuple(every) + best.assumptions,
                  citations=tuple(dict.fromkeys(citations)), warnings=tuple(notes),
                  epsilon_lower=max(lowers) if lowers else None, alternatives=alternatives, event=event.describe())
