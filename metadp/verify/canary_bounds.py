"""The certified side of a one-run canary audit (``metadp.verify.canaries``): the run's certified epsilon
for the audited view, the record bounds metadp can give for the plan, and the power the idealised game
predicts for a planted control. No torch here.

Record bounds (the record view of a Poisson-sampled plan whose records each sit in one task, k = 1,
per-task clipping at C, noise multiplier z; ``metadp.releases``, ``metadp.sampling.schemes``):

* **pool substitution** (``Poisson.pooled_task_record(z, 1)``: ``PoolSubstitution(q, Gaussian(z))``,
  ``metadp.mechanisms.pooled``): the task stays in the pool and its clipped contribution is replaced
  inside the C-ball; task sampling amplifies epsilon. This is the view the trainer certifies.
* **sampled tasks revealed** (``Poisson.pooled_record(2 / z, 1)``: ``EpisodicSampled(1, q, 1,
  Gaussian(z / 2), 1)``, ``metadp.mechanisms.episodic``): valid but loose (which of the record's tasks
  were sampled is granted to the adversary, so sampling amplifies delta only); the older bound.

Both are composed over the run's steps by the PLD accountant (``certified_epsilon``); the empirical lower
bound of a correct run must be at or below both.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Dict, List, Optional, Tuple, cast

import numpy as np

from metadp.accounting.calibration import certified_epsilon
from metadp.plan import Plan, check_plan_certifies
from metadp.plan_risk import view_risk
from metadp.units import unit_views
from metadp.core import events as ev
from metadp.report import format_upper
from metadp.sampling import Poisson
from metadp.verify.one_run import mixture_llr, simulated_power
from metadp.verify.one_run_fdp import curve_g, curve_rejects

__all__ = ["certified_view", "check_audit_plan", "record_bounds", "certified_curve", "predicted_power"]


def check_audit_plan(plan: Plan, canaries: int) -> None:
    """Refuses (ValueError naming the key) a plan a canary audit cannot train: it runs Poisson task sampling
    without [[hierarchy]] levels, task-level plans with a Gaussian noise multiplier and a fixed clip, and
    at most half the plan's tasks as canaries."""
    if plan.sampling.scheme != "poisson" or plan.hierarchy is not None:
        raise ValueError(f"--plan: the canary audit runs Poisson task sampling without [[hierarchy]] levels, got "
                         f"sampling.scheme = '{plan.sampling.scheme}'")
    if plan.unit != "task" or plan.noise.mechanism != "gaussian" or plan.noise.count_noise is not None:
        raise ValueError("--plan: the canary audit runs task-level plans with a Gaussian noise.multiplier and a fixed "
                         "clip (no count_noise)")
    check_plan_certifies(plan)
    population = cast(Poisson, plan.sampling).population  # (checked Poisson above)
    if population is None:
        raise ValueError("--plan: the canary audit needs the plan's sampling.population (it plants its canaries among "
                         "the plan's tasks and counts them against it); a plan given by sampling.rate alone has none: "
                         "add sampling.population")
    if population < 4:  # [2, population // 2] is empty: no --canaries would do
        raise ValueError(f"--plan: the canary audit needs a sampling.population of at least 4 tasks (at least 2 "
                         f"canaries, at most half the population), got {population}: raise sampling.population")
    if not 2 <= canaries <= population // 2:
        raise ValueError(f"--canaries must be in [2, {population // 2}] (at most half the plan's sampling."
                         f"population), got {canaries}")


def certified_view(report: Dict[str, Any],
                   view: str) -> Tuple[Optional[float], Optional[str], Optional[Dict[str, Any]]]:
    """(epsilon, accountant, the view's entry or None) of ``view`` in a run's ``privacy_report.json``
    (epsilon None: no such guarantee)."""
    entry = next((v for v in report.get("views", ()) if v.get("view") == view), None)
    if report.get("unit") == view and report.get("epsilon") is not None:
        return float(report["epsilon"]), report.get("accountant"), entry
    for other in report.get("other_units", ()):
        if other.get("unit") == view and other.get("epsilon") is not None:
            return float(other["epsilon"]), other.get("accountant"), entry
    if entry is not None and entry.get("epsilon") is not None:
        return float(entry["epsilon"]), entry.get("accountant"), entry
    return None, None, entry


def record_bounds(plan: Plan, noise_multiplier: float, steps: int, delta: float,
                  run_view: Optional[Dict[str, Any]]) -> List[Dict[str, Any]]:
    """Both certified record bounds for ``plan`` (module docstring), each an upper bound from the PLD
    accountant over ``steps`` steps. Where the run's own record view (``run_view``, its report entry)
    composed the same event, its ledger's epsilon is used instead of composing it again."""
    scheme = plan.sampling
    out: List[Dict[str, Any]] = []
    for name, (_, pooled, basis, _) in (("pool substitution", scheme.pooled_task_record(noise_multiplier, 1)),
                                       ("sampled tasks revealed", scheme.pooled_record(2.0 / noise_multiplier, 1))):
        event = cast(ev.Event, pooled)  # (Poisson sampling has both record bounds)
        same = (run_view is not None and run_view.get("event") == event.describe()
                and run_view.get("charges") == steps and run_view.get("epsilon") is not None)
        relation = run_view.get("relation", "add_remove") if run_view is not None else "add_remove"
        eps = float(cast(Dict[str, Any], run_view)["epsilon"]) if same else certified_epsilon(  # (same: a run view)
            ev.SelfComposed(event, steps), delta, relation=relation, accountant="pld")
        out.append({"bound": name, "epsilon": eps, "epsilon_display": format_upper(eps), "event": repr(event),
                    "description": event.describe(), "steps": steps, "relation": relation, "basis": basis,
                    "accountant": "pld", "certified_by_the_run": same})
    return out


# the FPRs at which the audited unit's certified curve is read for the f-DP test of the claim (``certified_curve``):
# dense where the recursion's g is evaluated (x from about tau v / m up to r / m)
CURVE_FPRS = tuple(np.concatenate([np.geomspace(1e-9, 0.1, 28), np.linspace(0.1, 0.99, 13)[1:]]))


def certified_curve(plan: Plan, steps: int) -> Optional[Tuple[np.ndarray, np.ndarray]]:
    """(FPRs, certified upper bounds on the best test's TPR at each) against the plan's own unit over ``steps`` steps
    (``metadp.plan_risk.view_risk``, upper end only): the claim the f-DP audit tests (``one_run_fdp.fdp_audit``);
    None where no curve is certified."""
    view = unit_views(dataclasses.replace(plan, steps=steps))[0]
    found = view_risk(view.events, cast(int, view.steps), view.relation, "pld", CURVE_FPRS,
                      lower=False) if view.events else None
    return None if found is None else (np.asarray(found["fpr"]), np.asarray(found["tpr"]))


def predicted_power(plan: Plan, noise_multiplier: float, clip: float, m: int, defect: str, certified: float, *,
                    beta: float, runs: int, seed: int, shift_in: float, shift_out: float, noise_factor: float,
                    scorers: int = 2, curve: Optional[Tuple[np.ndarray, np.ndarray]] = None) -> float:
    """The probability that the game flags ``certified`` in the idealised canary mechanism of ``defect``:
    each canary's per-step projection is ``shift_in`` (included) or ``shift_out`` (excluded) when
    sampled, plus N(0, sigma^2) with the noise as applied (``noise_factor`` times below the ledger's
    for ``low-noise``), scored by the same likelihood ratio; other rows' contributions are ignored
    (they only add variance: the run's power is at most this). ``curve``: the certified curve the verdict also
    tests (``certified_curve``), each game then flagged by either test, as the audit's verdict is."""
    steps, z = plan.steps, noise_multiplier
    scheme = cast(Poisson, plan.sampling)  # (check_audit_plan: Poisson, with a population)
    q = cast(float, scheme.expected_batch) / cast(int, scheme.population)
    sigma = z * clip / (noise_factor if defect == "low-noise" else 1.0)
    n = cast(int, scheme.population)
    batch = max(1, round(q * n))
    cover = np.arange(steps) * batch  # step t of the cyclic order: rows cover[t], ..., cover[t] + batch - 1 (mod n)

    def scores(count: int, rng: np.random.Generator, present: bool) -> np.ndarray:
        shift = shift_in if present else shift_out
        if defect == "fixed-order":  # the auditor scores the steps that hold the canary's slot
            slots = rng.integers(0, n, count)
            hits = (((slots[:, None] - cover[None, :]) % n) < batch).sum(axis=1)
            total = rng.standard_normal(count) * sigma * np.sqrt(hits) + shift * hits
            return cast(np.ndarray,
                        ((shift_in - shift_out) * total - 0.5 * (shift_in**2 - shift_out**2) * hits) / sigma**2)
        sampled = rng.random((count, steps)) < q
        x = rng.standard_normal((count, steps)) * sigma + shift * sampled
        return cast(np.ndarray, mixture_llr(x, np.full(x.shape, q), shift_in, shift_out, sigma**2).sum(axis=1))

    g = None if curve is None else curve_g(*curve)  # the verdict's second test: the f-DP recursion on the curve
    also = None if g is None else (lambda m_, r, v, level: curve_rejects(m_, r, v, g, level))
    return simulated_power(lambda c, rng: scores(c, rng, True), lambda c, rng: scores(c, rng, False), m, certified,
                           beta=beta, delta=plan.delta, scorers=scorers, runs=runs, seed=seed, also=also)
