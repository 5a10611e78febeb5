"""A plan file, run by the trainer: the plan's unit, relation, delta, sampling, noise, clipping and steps
are what the run executes, and its ``privacy_report.json`` is the plan's report (issue 16).

``metadp train ALGO --plan FILE`` reads a plan (``metadp.plan``). What each part becomes:

* **sampling**: the scheme's own sampler (``samplers.sampler_for``): Poisson, fixed-size, shuffled
  passes or no sampling over ``population`` tasks, or ``episodes`` fresh episodes a step drawn through
  the plan's ``[[hierarchy]]`` (``samplers.EpisodicSampler``). Task sampling with a hierarchy draws a
  fresh episode for each sampled task slot, as the plan's record guarantee assumes. Without a hierarchy
  the tasks are a fixed pool of ``population`` tasks (``tasks.SinusoidPool`` or ``tasks.EpisodePool``).
* **noise**: ``noise.multiplier`` is the run's z on the released sum of per-task (per-episode) clipped
  contributions; ``noise.count_noise`` runs the quantile clip policy (Andrew et al. 2021) with that
  count noise, accounted as the plan accounts it (one Gaussian).
* **guarantees**: the plan's, one ledger each (``ledger-<unit>.jsonl``), charged per step or per pass
  as the plan charges them. The report is ``metadp.plan.plan_epsilon`` of the plan over the releases
  on record: for a run that completes, the very report ``metadp plan FILE --json`` prints; for a run
  stopped early, the prefix it spent.

Algorithms: those whose one release per step is the plan's noisy sum of clipped per-task contributions
(``PLAN_ALGORITHMS``: dp-maml, dp-agr), and the non-private ones (maml, reptile), which run the plan's
sampling and steps without clipping or noise and report no guarantee (a same-sampling baseline).
Algorithms with releases a plan does not describe (an inner DP loop) are refused.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Dict, Optional, Tuple

from metadp.accounting.adaptive_clipping import combined_noise_multiplier
from metadp.plan import Plan, plan_epsilon
from metadp.sampling import Episodic, Guarantee
from metadp.training import algorithms
from metadp.training.algorithms import Algorithm
from metadp.training.run.report import run_report, view_entry

__all__ = ["plan_algorithm_refusal", "check_plan", "plan_settings", "plan_views", "plan_report", "fresh_episodes",
           "plan_run_report", "PLAN_ALGORITHMS"]


def _reads_plan(alg: Algorithm) -> bool:
    return alg.meta_loop and (not alg.private or (alg.central_clip and alg.central_noise and not alg.inner_dp))


PLAN_ALGORITHMS = tuple(a.name for a in algorithms.REGISTRY.values() if _reads_plan(a))
"""The algorithms a plan can describe (at the registry's import; :func:`plan_algorithm_refusal` reads it live)."""


def plan_algorithm_refusal(alg: Algorithm) -> Optional[str]:
    """Why ``alg`` cannot run a plan (None: it can)."""
    if _reads_plan(alg):
        return None
    fits = ", ".join(a.name for a in algorithms.REGISTRY.values() if _reads_plan(a))
    if not alg.meta_loop:
        return f"--plan: {alg.name} trains on obfuscated images in its own loop; plans run {fits}"
    return (f"--plan: {alg.name} makes releases a plan file does not describe (per-example noise inside each task); "
            f"a plan's guarantee would not be this run's. Plans run {fits}; train {alg.name} with flags")


def fresh_episodes(plan: Plan) -> bool:
    """The plan's tasks are episodes drawn afresh (episodic sampling, or task sampling with a hierarchy)."""
    return plan.hierarchy is not None


def check_plan(plan: Plan, alg: Algorithm, *, images: bool) -> None:
    """Every refusal of running ``plan`` with ``alg`` on a data set (``images``: image classification, else
    generated regression tasks), before any data is loaded.

    Raises:
        ValueError: one line naming the plan key and why the trainer cannot execute it.
    """
    refusal = plan_algorithm_refusal(alg)
    if refusal is not None:
        raise ValueError(refusal)
    if plan.noise.mechanism != "gaussian":
        raise ValueError(f"--plan: noise.mechanism = '{plan.noise.mechanism}': the trainer adds Gaussian noise to the "
                         "clipped sum (a Laplace plan describes another mechanism)")
    if alg.private and plan.hierarchy is not None and plan.noise.clipping != "per_episode":
        raise ValueError(f"--plan: noise.clipping = '{plan.noise.clipping}', but {alg.name} clips each task's "
                         "(episode's) meta-gradient: the plan must say clipping = 'per_episode'")
    if fresh_episodes(plan) and not images:
        raise ValueError("--plan: the plan draws episodes from records through [[hierarchy]] levels (classes, then "
                         "examples); generated regression tasks have no such records: use image data (--data glyphs "
                         "or omniglot), or a plan without [[hierarchy]]")
    scheme = plan.sampling
    if not fresh_episodes(plan) and getattr(scheme, "population", None) is None:
        raise ValueError(f"--plan: sampling.population is needed: the trainer builds that many tasks for "
                         f"sampling.scheme = '{scheme.scheme}' (give population with the rate or batch_size)")
    if plan.steps == 0:
        raise ValueError("--plan: steps = 0: there is nothing to train")


def plan_settings(plan: Plan, alg: Algorithm) -> Dict[str, Any]:
    """The ``TrainConfig`` fields the plan sets (its unit, delta, steps, noise, clip policy)."""
    settings: Dict[str, Any] = {"steps": plan.steps, "delta": plan.delta, "epsilon": math.inf}
    expected = _expected_tasks(plan)
    settings["meta_batch"] = expected
    if not alg.private:
        return settings
    settings.update(unit=plan.unit, noise_multiplier=plan.noise.multiplier)
    if plan.noise.count_noise is not None:  # the trainer's z is the sum and the count together, as the plan's
        settings.update(clip_policy="quantile", count_noise=plan.noise.count_noise,
                        noise_multiplier=combined_noise_multiplier(plan.noise.multiplier, plan.noise.count_noise))
    return settings


def _expected_tasks(plan: Plan) -> float:
    scheme = plan.sampling
    if isinstance(scheme, Episodic):
        return float(scheme.episodes)
    expected = scheme.expected_batch
    if expected is None:  # no sampling: every task
        expected = scheme.population
    return float(expected)


def plan_views(plan: Plan) -> Tuple[Guarantee, ...]:
    """The plan's guarantees as the run's views (one ledger each), its own unit first.

    Raises:
        ValueError: for a guarantee whose bound is the worst of several events (a ledger holds one event).
    """
    views = []
    for g in plan.units():
        if g.alternatives:
            raise ValueError(f"--plan: the {g.unit}-level bound of this plan is the worst of {len(g.events)} events "
                             "(levels with per-parent unit counts); the trainer's ledger holds one event per charge")
        views.append(g)
    return tuple(views)


def plan_report(plan: Plan, steps: int) -> Dict[str, Any]:
    """The report of ``plan`` over its first ``steps`` steps: ``metadp plan --json``'s, for the prefix."""
    return plan_epsilon(dataclasses.replace(plan, steps=steps)).to_dict()


def _finite(epsilon) -> Optional[float]:
    """A report's JSON epsilon as a view's: the number, or None where nothing finite is certified ("inf")."""
    return epsilon if isinstance(epsilon, (int, float)) and math.isfinite(epsilon) else None


def plan_run_report(plan: Plan, c, views, ledgers, steps: int, prefix: int, last_step: int, threshold: float,
                    expected: float) -> Dict[str, Any]:
    """A plan run's ``privacy_report.json``: the plan's report over ``prefix`` steps (the releases on record;
    ``metadp plan --json``'s for a run that completes) and the run's record, each view's ledger checked
    against the plan's events (``ledger_matches_plan``)."""
    if c.private:
        out = plan_report(plan, prefix)
    else:
        noise = None
        out = run_report(f"metadp train {c.algorithm} (plan: {plan.name})", None, (), plan.sampling, noise, steps,
                         None)
    prefix_views = {g.key: g for g in plan_views(dataclasses.replace(plan, steps=prefix))} if c.private else {}
    certified = {out["unit"]: (out["epsilon"], out["accountant"])} if c.private else {}
    certified.update({o["unit"]: (o["epsilon"], o["accountant"]) for o in out.get("other_units", ())})
    entries = []
    for v in views:
        ledger = ledgers.get(v.key)
        charges = len(ledger.entries) if ledger is not None else 0
        planned = prefix_views[v.key].steps if v.key in prefix_views else None
        epsilon, accountant = certified.get(v.unit, (None, None))
        entries.append(view_entry(v, ledger, _finite(epsilon), accountant, planned=planned, matches=(
            ledger is not None and charges == planned and all(r.event == v.event for r in ledger.entries))))
    out.update({
        "engine": "local", "algorithm": c.algorithm, "private": c.private, "plan": plan.name,
        "steps_done": steps, "plan_steps": plan.steps, "plan_prefix_steps": prefix,
        "budget_unit": plan.unit if c.private else None, "last_step_within_budget": last_step,
        "clip_policy": c.clip_policy, "final_clip": threshold, "expected_tasks": expected,
        "accountant_note": ("the plan's report (metadp.plan.plan_epsilon) over the releases on record; each "
                            "view's ledger holds the plan's event once per charge") if c.private else None,
        "views": entries,
        "note": None if c.private else ("non-private: no privacy guarantee (the plan's sampling and steps, without "
                                        "clipping or noise)"),
    })
    return out
