"""Certified attack risk beside epsilon, for each unit of a plan's report (issue 33; ``metadp.accounting.risk``).

``with_risk(report, plan)`` composes each unit's events with the accountant that certified its epsilon (the PLD
accountant where it handles them, else RDP) and adds, per unit, upper bounds on the best membership attack's TPR
at FPR 0.1%, 1% and 10% and on its advantage (``Report.risk`` for the plan's unit, ``"risk"`` in each other unit's
record). ``metadp plan`` prints them; the library adds them on request (about 0.5 s a unit).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Dict, Mapping, Optional, Sequence, cast

from metadp.accounting._rdp_events import UnsupportedEventError
from metadp.accounting.registry import make_accountant
from metadp.accounting.risk import FPRS, attack_risk, bracket
from metadp.plan import Plan
from metadp.report import Report
from metadp.banded_noise import banded_lower
from metadp.core import events as ev
from metadp.plan_solve import Solved, Unreachable, _with
from metadp.units import unit_views

__all__ = ["with_risk", "view_risk", "plan_tpr", "calibrate_for_tpr"]

def view_risk(events: Sequence[ev.Event], steps: int, relation: str, accountant: str, fprs: Sequence[float] = FPRS,
              lower: bool = True) -> Optional[Dict[str, Any]]:
    """The attack risk (``AttackRisk.to_dict()``) of ``steps`` charges of ``events``, by ``accountant``'s route
    (PLD, falling back to RDP where the PLD accountant cannot compose them or its lattice leaves float64's range);
    None where neither can (the report then has no attack row for the unit)."""
    for name in dict.fromkeys((accountant if accountant in ("pld", "rdp") else "pld", "rdp")):
        acc = make_accountant(name, relation)
        try:
            for event in events:
                acc.compose(event, steps)
            return attack_risk(acc, fprs, lower).to_dict()
        except (UnsupportedEventError, ArithmeticError, MemoryError):  # beyond this accountant's range: the next
            continue
    return None

def with_risk(report: Report, plan: Plan, fprs: Sequence[float] = FPRS,
              charges: Optional[Mapping[str, int]] = None) -> Report:
    """``report`` (``plan_epsilon(plan)``, or with ``charges``: a run's counts by view key, as ``plan_epsilon``
    takes them) with each unit's certified attack risk (module docstring)."""
    views = {v.key: (dataclasses.replace(v, steps=charges[v.key]) if charges and v.key in charges else v)
             for v in unit_views(plan)}
    primary = next(iter(views.values()))
    events = primary.events or (ev.NonPrivate(),)
    lowered = banded_lower(plan) if plan.noise.correlation == "banded" else None
    risk = view_risk(events, cast(int, primary.steps), primary.relation, report.accountant, fprs,  # (a plan's)
                     lower=lowered is None)
    if lowered is not None and lowered[0] is not None and risk is not None:
        # the lower ends of the composition named datasets attain (metadp.banded_noise.banded_lower), as the epsilon's
        event, count = lowered[0]
        low = view_risk((event,), count, primary.relation, report.accountant, fprs)
        try:  # crossed ends (ArithmeticError): no lower end is certified, as view_risk treats its own
            if low is not None and low["tpr_lower"] is not None:
                tpr_low, advantage_low = bracket(low["tpr_lower"], low["advantage_lower"], risk["tpr"],
                                                 risk["advantage"])
                risk = dict(risk, tpr_lower=list(tpr_low), advantage_lower=advantage_low)
        except ArithmeticError:
            pass
    others = []
    for other in report.other_units:
        view = views.get(other.get("view") or other["unit"])
        found = None if view is None or not view.events else view_risk(
            view.events, cast(int, view.steps), view.relation, other["accountant"], fprs)
        others.append(dict(other, risk=found))
    return dataclasses.replace(report, risk=risk, other_units=tuple(others))

def plan_tpr(plan: Plan, at_fpr: float) -> float:
    """The certified upper bound on the best membership test's TPR at FPR ``at_fpr`` against the plan's own unit."""
    view = unit_views(plan)[0]
    found = view_risk(view.events or (ev.NonPrivate(),), cast(int, view.steps), view.relation,
                      plan.accountant if plan.accountant in ("pld", "rdp") else "pld", (at_fpr,), lower=False)
    return 1.0 if found is None else cast(float, found["tpr"][0])

def calibrate_for_tpr(plan_dict: Mapping[str, Any], solve: str, target_tpr: float, at_fpr: float,
                      progress: Optional[Callable[[float, float], None]] = None, rel_tol: float = 1e-3) -> Solved:
    """The smallest noise multiplier, the largest number of steps or the largest Poisson rate (``solve``) at which
    the plan's certified TPR bound at ``at_fpr`` is at most ``target_tpr``, as ``metadp.plan_solve.calibrate_plan``
    does for epsilon: each try certified, the answer on the side that meets the target (noise to ``rel_tol``
    rounded up, steps exact, rate to ``rel_tol`` rounded down). ``progress``: called with (value, its TPR bound)
    after each try.

    Raises:
        ValueError: ``target_tpr`` not in (at_fpr, 1) (no test does worse than guessing, TPR = FPR), or ``at_fpr``
            not in (0, 1); an unknown ``solve``; steps for a plan not charged per step, or a rate for a plan not
            Poisson-sampled; ``Unreachable`` where one step (or the smallest rate tried) already exceeds the target,
            or no noise up to 1e6 meets it.
    """
    if not 0.0 < at_fpr < 1.0:
        raise ValueError(f"--at-fpr must be in (0, 1), got {at_fpr:g}")
    if not at_fpr < target_tpr < 1.0:
        raise ValueError(f"--target-tpr must be in ({at_fpr:g}, 1): guessing already has TPR = FPR = {at_fpr:g}, "
                         f"got {target_tpr:g}")
    if solve not in ("noise", "steps", "rate"):
        raise ValueError(f"solve must be one of noise, steps, rate, got {solve!r}")

    def meets(**value: Any) -> bool:
        plan = _with(plan_dict, **value)
        found = plan_tpr(plan, at_fpr)
        if progress is not None:
            progress(next(iter(value.values())), found)
        return found <= target_tpr

    if solve == "noise":
        value = _search(lambda z: meets(noise=z), 1.0, rel_tol=rel_tol, limit=1e6)
        if value is None:
            raise Unreachable(f"no noise multiplier up to 1e6 brings the TPR bound at FPR {at_fpr:g} to {target_tpr:g}")
        return Solved("noise", value, _with(plan_dict, noise=value))
    if solve == "steps":
        template = _with(plan_dict, steps=1)
        if template.sampling.charge != "step" or template.unit == "group":
            raise ValueError(f"solving for the steps needs a plan charged per step for one unit (sampling.scheme = "
                             f"'{template.sampling.scheme}', unit = '{template.unit}'): solve for the noise instead")
        if not meets(steps=1):
            raise Unreachable(f"target TPR {target_tpr:g} at FPR {at_fpr:g} is unreachable: one step already "
                              "exceeds it")
        low, high = 1, 2  # low meets the target; double until high does not, then bisect on the integers
        while meets(steps=high):
            low, high = high, high * 2
            if high > 10**9:
                raise Unreachable(f"more than 10^9 steps meet TPR {target_tpr:g} at FPR {at_fpr:g}: no limit to solve")
        while high - low > 1:
            mid = (low + high) // 2
            low, high = (mid, high) if meets(steps=mid) else (low, mid)
        return Solved("steps", low, _with(plan_dict, steps=low))
    if plan_dict["sampling"].get("scheme") != "poisson":
        raise ValueError("solving for the rate needs Poisson sampling (sampling.scheme = 'poisson')")
    if meets(rate=1.0):
        return Solved("rate", 1.0, _with(plan_dict, rate=1.0))
    q_low, q_high = 0.0, 1.0  # q_high fails; halve until one meets the target, then bisect
    while True:
        q_mid = q_high / 2.0
        if q_mid < 1e-9:
            raise Unreachable(f"no sampling rate down to 1e-9 brings the TPR bound at FPR {at_fpr:g} to {target_tpr:g}")
        if meets(rate=q_mid):
            q_low = q_mid
            break
        q_high = q_mid
    while q_high - q_low > rel_tol * q_low:
        q_mid = 0.5 * (q_low + q_high)
        q_low, q_high = (q_mid, q_high) if meets(rate=q_mid) else (q_low, q_mid)
    return Solved("rate", q_low, _with(plan_dict, rate=q_low))

def _search(ok: Callable[[float], bool], start: float, rel_tol: float, limit: float) -> Optional[float]:
    """The smallest x > 0 (to ``rel_tol``, returned where ``ok``) with ok(x), for ok false below and true above."""
    low, high = 0.0, start
    while not ok(high):
        low, high = high, high * 4.0
        if high > limit:
            return None
    while high - low > rel_tol * high:
        mid = 0.5 * (low + high) if low > 0 else high / 4.0
        low, high = (low, mid) if ok(mid) else (mid, high)
    return high
