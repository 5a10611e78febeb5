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

Flag runs are plans too: ``train`` compiles a configuration into the plan it executes
(``plan_command.config_table``), so every run takes this one path.

Algorithms: a private algorithm runs a plan whose ``[release]`` is its own form (``metadp.releases``:
``task_clip`` for dp-maml and dp-agr, a plan's default; ``example_clip`` for dp-maml-sample,
``local_noise`` for dp-agrlr, ``inner_dp`` for dp-reptile); the non-private ones (maml, reptile) run
any plan's sampling and steps without clipping or noise and report no guarantee (a same-sampling
baseline).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Dict, Mapping, Optional, Tuple

from metadp.accounting.adaptive_clipping import combined_noise_multiplier
from metadp.plan import Plan, plan_epsilon
from metadp.plan_risk import with_risk
from metadp.sampling import Episodic, Guarantee
from metadp.sampling.participation import min_separation_blocks
from metadp.training import algorithms
from metadp.training.algorithms import Algorithm
from metadp.training.run.report import run_report, view_entry

__all__ = ["plan_algorithm_refusal", "check_plan", "plan_settings", "settings_refusal", "plan_views", "plan_report", "fresh_episodes",
           "plan_run_report", "expected_tasks", "ledger_charges", "charged_once",
           "pass_steps", "prefix_plan"]


def plan_algorithm_refusal(alg: Algorithm, plan: Optional[Plan] = None) -> Optional[str]:
    """Why ``alg`` cannot run ``plan`` (None: it can): a loop of its own (protonet), or a private algorithm whose
    release is not the plan's (``[release]``; a plan without one releases ``task_clip``)."""
    if not alg.meta_loop:
        fits = ", ".join(a.name for a in algorithms.REGISTRY.values() if a.meta_loop)
        return f"--plan: {alg.name} trains on obfuscated images in its own loop; plans run {fits}"
    form = plan.release.form if plan is not None and plan.release is not None else "task_clip"
    if plan is None or not alg.private or alg.form == form:
        return None
    fits = ", ".join(a.name for a in algorithms.REGISTRY.values() if a.meta_loop and a.private and a.form == form)
    return (f"--plan: {alg.name} releases release.form = '{alg.form}' (metadp.releases), the plan "
            f"release.form = '{form}': its guarantees would not be this run's. The plan runs {fits or 'no algorithm'}; "
            f"for {alg.name}, write the plan's [release] table (metadp train {alg.name} ... --save-plan writes one)")


def fresh_episodes(plan: Plan) -> bool:
    """The plan's tasks are episodes drawn afresh (episodic sampling, or task sampling with a hierarchy)."""
    return plan.hierarchy is not None


def check_plan(plan: Plan, alg: Algorithm, *, images: bool) -> None:
    """Every refusal of running ``plan`` with ``alg`` on a data set (``images``: image classification, else
    generated regression tasks), before any data is loaded.

    Raises:
        ValueError: one line naming the plan key and why the trainer cannot execute it.
    """
    refusal = plan_algorithm_refusal(alg, plan)
    if refusal is not None:
        raise ValueError(refusal)
    if plan.noise.mechanism == "laplace":
        raise ValueError(f"--plan: noise.mechanism = '{plan.noise.mechanism}': the trainer adds Gaussian noise to the "
                         "clipped sum (a Laplace plan describes another mechanism)")
    if alg.private and not plan.noise.private:
        raise ValueError(f"--plan: noise.clip = '{plan.noise.clip}' describes a run without a guarantee; train it with "
                         "flags (--clip-policy raw-percentile, or --clip inf)")
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


def charged_once(plan: Plan) -> bool:
    """The plan's guarantee is charged once for the whole run (one release of the run's event, at its first step):
    min-separation participation, or banded noise without sampling (``metadp.banded_noise``)."""
    scheme = plan.sampling.scheme
    return scheme == "min_separation" or (plan.noise.correlation == "banded" and scheme == "none")


def pass_steps(plan: Plan) -> int:
    """The steps of one charged pass: the whole run for a run charged once, a pass of the one-pass schemes, the
    groups of cyclic Poisson participation, else 1."""
    return plan.steps if charged_once(plan) else plan.sampling.pass_steps(plan.steps)


def prefix_plan(plan: Plan, steps: int) -> Plan:
    """``plan`` over its first ``steps`` steps, with the run's noise: a banded plan keeps the coefficients of the
    whole plan (``noise.horizon``), which the run used."""
    if plan.noise.correlation == "banded" and plan.noise.horizon is None and steps != plan.steps:
        plan = dataclasses.replace(plan, noise=dataclasses.replace(plan.noise, horizon=plan.steps))
    return dataclasses.replace(plan, steps=steps)


def plan_settings(plan: Plan, alg: Algorithm) -> Dict[str, Any]:
    """The ``TrainConfig`` fields the plan sets (its unit, delta, steps, noise, clip policy, release)."""
    settings: Dict[str, Any] = {"steps": plan.steps, "delta": plan.delta, "epsilon": math.inf}
    expected = expected_tasks(plan)
    settings["meta_batch"] = expected
    if not alg.private:
        return settings
    z = plan.noise.multiplier if plan.noise.mechanism == "gaussian" else 0.0
    settings.update(unit=plan.units()[0].key, noise_multiplier=z)
    if plan.noise.count_noise is not None:  # the trainer's z is the sum and the count together, as the plan's
        settings.update(clip_policy="quantile", count_noise=plan.noise.count_noise,
                        noise_multiplier=combined_noise_multiplier(z, plan.noise.count_noise))
    if plan.release is not None:
        settings.update(inner_noise=plan.release.inner_noise, inner_steps=plan.release.inner_steps)
        if plan.release.per_example_queries:
            settings["first_order"] = plan.release.first_order
    return settings


def settings_refusal(plan: Plan, alg: Algorithm, config) -> Optional[str]:
    """Why a run of ``config`` is not the run ``plan`` certifies (None: it is): less noise (z, z_in, the
    count's sigma_b) than the plan's, more steps, or another inner loop (steps, order) than its release.
    More noise than planned is allowed: the plan's epsilon still bounds it. The command line compiles the
    config from the plan (:func:`plan_settings`); this guards ``train(..., plan=plan)`` called directly."""
    planned = plan_settings(plan, alg)
    if config.steps > planned["steps"]:
        return f"the run asks {config.steps} steps, the plan certifies {planned['steps']}"
    if not alg.private:
        return None
    less = [("noise_multiplier", "noise.multiplier"), ("inner_noise", "release.inner_noise"),
            ("count_noise", "noise.count_noise")]
    for field, key in less:
        want, got = planned.get(field), getattr(config, field, None)
        if want is not None and (got is None or got < want * (1 - 1e-12)):
            return (f"the run's {field} is {got}, the plan's {key} gives {want:.12g}: the run would add less noise "
                    "than the plan certifies")
    for field in ("inner_steps", "first_order"):
        if field in planned and getattr(config, field) != planned[field]:
            return (f"the run's {field} is {getattr(config, field)}, the plan's release says {planned[field]}: its "
                    "inner loop is not the one the plan certifies")
    return None


def expected_tasks(plan: Plan) -> float:
    """The tasks a step of ``plan`` takes (expected): its episodes, batch, or every task."""
    scheme = plan.sampling
    if isinstance(scheme, Episodic):
        return float(scheme.episodes)
    if scheme.scheme == "min_separation":  # a block of the schedule (training.data.participation)
        return scheme.population / min_separation_blocks(plan.steps, scheme.participations, scheme.separation)
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


def plan_report(plan: Plan, steps: int, charges: Optional[Mapping[str, int]] = None) -> Dict[str, Any]:
    """The report of ``plan`` over its first ``steps`` steps: ``metadp plan --json``'s (the attack risk included),
    for the prefix; ``charges``
    (view key -> count): where a run's budget capped a view below the plan's count (the visits of any record,
    which the run's budget stops at)."""
    prefix = prefix_plan(plan, steps)
    return with_risk(plan_epsilon(prefix, charges=charges), prefix, charges=charges).to_dict()


def _finite(epsilon) -> Optional[float]:
    """A report's JSON epsilon as a view's: the number, or None where nothing finite is certified ("inf")."""
    return epsilon if isinstance(epsilon, (int, float)) and math.isfinite(epsilon) else None


def ledger_charges(view: Guarantee, ledger) -> int:
    """The charges ``ledger`` holds for ``view``: its entries, or for a per-visit view the visits they count."""
    if ledger is None:
        return 0
    return sum(r.count for r in ledger.entries) if view.charge == "visit" else len(ledger.entries)


def plan_run_report(plan: Plan, c, views, ledgers, steps: int, prefix: int, run_fields: Mapping[str, Any],
                    caps: Optional[Mapping[str, float]] = None) -> Dict[str, Any]:
    """A run's ``privacy_report.json``: the plan's report over ``prefix`` steps (the releases on record;
    ``metadp plan --json``'s for a run that completes its plan) and the run's record (``run_fields``, and each
    view's ledger checked against the plan: ``ledger_matches_plan``).

    A view charged per visit is certified for the visits the plan allows over the steps run (the record's k
    tasks visited in every pass, or every step), or ``caps[key]`` where the run's budget stopped any record
    there: a bound for every sampling outcome. The visits the worst record happened to get (the ledger's,
    ``max_record_visits``) are fewer in a partial pass, but a number computed from them is an ex-post
    (odometer) figure, not a DP guarantee, so the report does not use it."""
    prefix_counts = {g.key: g.steps for g in plan_views(prefix_plan(plan, prefix))} if c.private else {}
    charges = {key: int(min(prefix_counts[key], cap)) for key, cap in (caps or {}).items()
               if key in prefix_counts and cap < prefix_counts[key]}
    for v in views:  # a run charged once and resumed holds more charges than its plan: every one is reported
        held = ledger_charges(v, ledgers.get(v.key))
        if v.charge == "pass" and v.key in prefix_counts and held > prefix_counts[v.key]:
            charges[v.key] = held
    if c.private:
        out = plan_report(plan, prefix, charges)
    else:
        out = run_report(f"metadp train {c.algorithm} (plan: {plan.name})", None, (), plan.sampling, None, steps,
                         None)
    certified = {}
    if c.private:
        out["view"] = views[0].key
        for o in out["other_units"]:
            o.setdefault("view", o["unit"])
        certified[views[0].key] = (out["epsilon"], out["accountant"])
        certified.update({o.get("view", o["unit"]): (o["epsilon"], o["accountant"]) for o in out["other_units"]})
    entries = []
    for v in views:
        ledger = ledgers.get(v.key)
        done = ledger_charges(v, ledger)
        planned = charges.get(v.key, prefix_counts.get(v.key))
        epsilon, accountant = certified.get(v.key, (None, None))
        within = planned is not None and (done <= planned if v.charge == "visit" else done == planned)
        entries.append(view_entry(v, ledger, _finite(epsilon), accountant, planned=planned, matches=(
            ledger is not None and within and all(r.event == v.event for r in ledger.entries))))
    out.update({"engine": "local", "algorithm": c.algorithm, "private": c.private, "plan": plan.name,
                "steps_done": steps, "plan_steps": plan.steps, "plan_prefix_steps": prefix,
                "budget_unit": views[0].key if c.private and views else None})
    out.update(run_fields)
    out.update({
        "accountant_note": ("the plan's report (metadp.plan.plan_epsilon) over the releases on record; each "
                            "view's ledger holds the plan's event once per charge") if c.private else None,
        "views": entries,
        "note": None if c.private else ("non-private: no privacy guarantee (the plan's sampling and steps, without "
                                        "clipping or noise)"),
    })
    return out
