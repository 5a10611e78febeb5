"""Solve a plan for the noise, the steps or the sampling rate that meets a target epsilon
(``metadp calibrate``; the library side of the command).

``calibrate_plan(plan_dict, solve, target_epsilon)`` takes a plan in the form of a plan file (a dict,
as ``Plan.from_dict`` reads it), with the quantity to solve for left out or to be overwritten, and returns
the value and the completed plan. The value is verified by the accountant the plan names (bisection in
``metadp.accounting.calibration``), so the plan's report meets the target.
"""

from __future__ import annotations

import copy
import dataclasses
from typing import Any, Callable, Dict, List, Mapping, Optional, Tuple, TypeVar, cast

from metadp.accounting import calibration
from metadp.accounting.rdp_accountant import UnsupportedEventError
from metadp.accounting.registry import ACCOUNTANTS
from metadp.plan import Plan
from metadp.releases import noise_keys as release_noise_keys

__all__ = ["SOLVABLE", "Solved", "Unreachable", "calibrate_plan", "noise_keys"]

SOLVABLE = ("noise", "steps", "rate")
_T = TypeVar("_T")


class Unreachable(ValueError):
    """No plan of the asked form meets the target (one step already exceeds it)."""


@dataclasses.dataclass(frozen=True)
class Solved:
    """The solved quantity (``solve``), its ``value``, and the completed ``plan``."""

    solve: str
    value: float
    plan: Plan


def noise_keys(d: Mapping[str, Any]) -> Tuple[str, ...]:
    """The plan keys that "the noise" of plan ``d`` (a plan file's table) sets for its own unit's guarantee
    (``metadp.releases.noise_keys`` of its release's form and its unit's view)."""
    release = d.get("release")
    form = release.get("form", "task_clip") if isinstance(release, Mapping) else "task_clip"
    return release_noise_keys(form, "record-vs-server" if d.get("against") == "server" else cast(str, d.get("unit")))


def _with(d: Mapping[str, Any], *, noise: Optional[float] = None, steps: Optional[int] = None,
          rate: Optional[float] = None) -> Plan:
    table = copy.deepcopy(dict(d))
    if noise is not None:
        for key in noise_keys(table):
            part, name = key.split(".")
            table[part] = dict(table.get(part, {"mechanism": "gaussian"} if part == "noise" else {}), **{name: noise})
    if steps is not None:
        table["steps"] = steps
    if rate is not None:
        table["sampling"] = dict(table["sampling"], rate=rate)
    return Plan.from_dict(table)


def _best(template: Plan, solve_with: Callable[[str], _T], pick: Callable[[List[_T]], _T]) -> _T:
    """``solve_with(accountant)`` for the plan's accountant; for ``accountant = "all"`` (the report takes the
    tightest accountant's bound) for each accountant that handles the plan, the best by ``pick`` (min or
    max): the report at that value is within the target, since its own accountant's bound is."""
    if template.accountant != "all":
        return solve_with(template.accountant)
    found: List[_T] = []
    errors: List[str] = []
    for name in ACCOUNTANTS:
        try:
            found.append(solve_with(name))
        except UnsupportedEventError as err:
            errors.append(f"{name}: {err}")
    if not found:
        raise ValueError(f"no accountant handles this plan: {'; '.join(errors)}")
    return pick(found)


def calibrate_plan(plan_dict: Mapping[str, Any], solve: str, target_epsilon: float,
                   progress: Optional[Callable[[float, float], None]] = None) -> Solved:
    """The smallest noise multiplier, the largest number of steps or the largest Poisson rate (``solve``)
    for which the plan's epsilon at its delta is at most ``target_epsilon`` (``progress``: called with
    (value tried, its certified epsilon) after each evaluation of the search).

    Raises:
        ValueError: an unknown ``solve`` or a rate asked of a plan that is not Poisson-sampled;
            ``Unreachable`` (a ValueError) for a target no step count meets (one step already exceeds it).
    """
    if solve not in SOLVABLE:
        raise ValueError(f"solve must be one of {', '.join(SOLVABLE)}, got {solve!r}")
    if solve == "noise":
        # the plan's own question at each noise: with accountant = "all", the tightest accountant's bound at that
        # noise (an accountant that handles only part of the searched range, such as the allocation lattice, still
        # counts where it does), as the plan's report certifies it
        template = _with(plan_dict, noise=1.0)
        value = calibration.calibrate_noise(
            lambda z: _with(plan_dict, noise=z).event(), target_epsilon, template.delta, relation=template.relation,
            accountant=template.accountant, progress=progress)
        return Solved(solve, value, _with(plan_dict, noise=value))
    if solve == "steps":
        given = _with(plan_dict)  # the plan as stated: how its own unit is charged (banded noise: once, or a pass)
        if given.units()[0].charge != "step" or given.unit == "group":
            raise ValueError(f"solving for the steps needs a plan charged per step for one unit (sampling.scheme = "
                             f"'{given.sampling.scheme}', noise.correlation = '{given.noise.correlation}', unit = "
                             f"'{given.unit}'): solve for the noise instead")
        template = _with(plan_dict, steps=1)
        value = _best(template, lambda name: calibration.max_steps(
            template.step_event(), target_epsilon, template.delta, relation=template.relation, accountant=name,
            progress=progress), max)
        if value == 0:  # a true answer of the library (no step fits), not a usable plan
            raise Unreachable(f"target epsilon {target_epsilon:g} is unreachable: one step already exceeds it")
        return Solved(solve, value, _with(plan_dict, steps=value))
    if plan_dict["sampling"].get("scheme") != "poisson":
        raise ValueError("solving for the rate needs Poisson sampling (sampling.scheme = 'poisson')")
    template = _with(plan_dict, rate=0.5)
    value = _best(template, lambda name: calibration.max_rate(
        lambda q: _with(plan_dict, rate=q).event(), target_epsilon, template.delta, relation=template.relation,
        accountant=name, progress=progress), max)
    return Solved(solve, value, _with(plan_dict, rate=value))
