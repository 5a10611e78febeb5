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
from metadp.plan_solve import Solved, _with
from metadp.units import unit_views

__all__ = ["with_risk", "view_risk", "plan_tpr", "calibrate_noise_for_tpr"]


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


def plan_tpr(plan, at_fpr: float) -> float:
    """The certified upper bound on the best membership test's TPR at FPR ``at_fpr`` against the plan's own unit."""
    view = unit_views(plan)[0]
    found = view_risk(view.events or (ev.NonPrivate(),), view.steps, view.relation,
                      plan.accountant if plan.accountant in ("pld", "rdp") else "pld", (at_fpr,))
    return 1.0 if found is None else found["tpr"][0]


def calibrate_noise_for_tpr(plan_dict, target_tpr: float, at_fpr: float, progress=None, rel_tol: float = 1e-3):
    """The smallest noise multiplier (to ``rel_tol``, rounded towards more noise) at which the plan's certified
    TPR bound at ``at_fpr`` is at most ``target_tpr``: a bisection on the noise, each try certified (the TPR
    bound falls as the noise grows); returns ``metadp.plan_solve.Solved``. ``progress``: called with (noise,
    its TPR bound) after each try.

    Raises:
        ValueError: ``target_tpr`` not in (at_fpr, 1) (no test does worse than guessing, TPR = FPR), or
            ``at_fpr`` not in (0, 1); or no noise up to 1e6 meets the target.
    """
    if not 0.0 < at_fpr < 1.0:
        raise ValueError(f"--at-fpr must be in (0, 1), got {at_fpr:g}")
    if not at_fpr < target_tpr < 1.0:
        raise ValueError(f"--target-tpr must be in ({at_fpr:g}, 1): guessing already has TPR = FPR = {at_fpr:g}, "
                         f"got {target_tpr:g}")

    def tpr(z):
        value = plan_tpr(_with(plan_dict, noise=z), at_fpr)
        if progress is not None:
            progress(z, value)
        return value

    low, high = 0.0, 1.0
    while tpr(high) > target_tpr:
        low, high = high, high * 4.0
        if high > 1e6:
            raise ValueError(f"no noise multiplier up to 1e6 brings the TPR bound at FPR {at_fpr:g} to "
                             f"{target_tpr:g}")
    while high - low > rel_tol * high:
        mid = 0.5 * (low + high) if low > 0 else high / 4.0
        if tpr(mid) <= target_tpr:
            high = mid
        else:
            low = mid
    return Solved("noise", high, _with(plan_dict, noise=high))
