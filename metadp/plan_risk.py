"""Certified attack risk beside epsilon, for each unit of a plan's report (issue 33; ``metadp.accounting.risk``).

``with_risk(report, plan)`` composes each unit's events with the accountant that certified its epsilon (the PLD
accountant where it handles them, else RDP) and adds, per unit, upper bounds on the best membership attack's TPR
at FPR 0.1%, 1% and 10% and on its advantage (``Report.risk`` for the plan's unit, ``"risk"`` in each other unit's
record). ``metadp plan`` prints them; the library adds them on request (about 0.5 s a unit).
"""

from __future__ import annotations

import dataclasses
from typing import Optional, Sequence

from metadp.accounting._rdp_events import UnsupportedEventError
from metadp.accounting.registry import make_accountant
from metadp.accounting.risk import FPRS, attack_risk
from metadp.core import events as ev
from metadp.units import unit_views

__all__ = ["with_risk", "view_risk"]


def view_risk(events, steps: int, relation: str, accountant: str, fprs: Sequence[float] = FPRS) -> Optional[dict]:
    """The attack risk (``AttackRisk.to_dict()``) of ``steps`` charges of ``events``, by ``accountant``'s route
    (PLD, falling back to RDP where the PLD accountant cannot compose them or its lattice leaves float64's range);
    None where neither can (the report then has no attack row for the unit)."""
    for name in dict.fromkeys((accountant if accountant in ("pld", "rdp") else "pld", "rdp")):
        acc = make_accountant(name, relation)
        try:
            for event in events:
                acc.compose(event, steps)
            return attack_risk(acc, fprs).to_dict()
        except (UnsupportedEventError, ArithmeticError, MemoryError):  # beyond this accountant's range: the next
            continue
    return None


def with_risk(report, plan, fprs: Sequence[float] = FPRS):
    """``report`` (``plan_epsilon(plan)``) with each unit's certified attack risk (module docstring)."""
    views = {v.key: v for v in unit_views(plan)}
    primary = next(iter(views.values()))
    events = primary.events or (ev.NonPrivate(),)
    risk = view_risk(events, primary.steps, primary.relation, report.accountant, fprs)
    others = []
    for other in report.other_units:
        view = views.get(other.get("view") or other["unit"])
        found = None if view is None or not view.events else view_risk(view.events, view.steps, view.relation,
                                                                       other["accountant"], fprs)
        others.append(dict(other, risk=found))
    return dataclasses.replace(report, risk=risk, other_units=tuple(others))
