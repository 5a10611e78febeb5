"""``metadp train ALGO --plan FILE``: the command side of a plan run (``metadp.training.run.plan_run``), and
``--save-plan FILE``, which writes the plan a run executes (a plan file's run, with its calibrated noise,
or the plan the flags describe).

A flag the plan also sets (``--unit``, ``--delta``, ``--steps``, ``--noise``, ``--sampler``,
``--meta-batch``, ``--pool``, ``--clip-policy``, ``--count-noise``) is refused when it says otherwise,
naming both; ``--epsilon`` calibrates the plan's noise multiplier to that budget of the plan's unit
(``metadp.plan_solve.calibrate_plan``, certified by the plan's accountants). Every refusal comes before
any data is loaded or anything is written. No torch here.
"""

from __future__ import annotations

import copy
import math
import tomllib
from pathlib import Path
from typing import Any, Dict, Optional, Tuple

from metadp.accounting.adaptive_clipping import sum_noise_multiplier
from metadp.plan import Plan, load_plan
from metadp.plan_solve import calibrate_plan, noise_keys
from metadp.sampling import RUN_SCHEMES, of_lot
from metadp.training.algorithms.clipping import clip_rule
from metadp.training import algorithms
from metadp.training.data import datasets
from metadp.training.run.plan_run import check_plan, fresh_episodes

__all__ = ["load_run_plan", "check_plan_flags", "calibrated", "config_table", "save_plan", "PLAN_FLAGS"]

PLAN_FLAGS = ("unit", "delta", "steps", "noise", "sampler", "meta_batch", "pool", "clip_policy", "count_noise")
"""The flags whose value a plan file decides (given with ``--plan``, they must agree with it)."""


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def load_run_plan(path: str) -> Tuple[Plan, Dict[str, Any]]:
    """(plan, its table as the file holds it) of ``--plan``; refusals name ``--plan``."""
    try:
        plan = load_plan(Path(path))
    except ValueError as err:
        raise ValueError(f"--plan: {err}") from None
    return plan, tomllib.loads(Path(path).read_text(encoding="utf-8"))


def _plan_value(plan: Plan, name: str):
    """What the plan says for flag ``name`` (None: the plan has no such value)."""
    scheme = plan.sampling
    if name == "unit":
        return plan.unit
    if name == "delta":
        return plan.delta
    if name == "steps":
        return plan.steps
    if name == "noise":
        return plan.noise.multiplier
    if name == "sampler":
        return next((run for run, cls in RUN_SCHEMES.items() if cls.scheme == scheme.scheme), None)
    if name == "meta_batch":
        return getattr(scheme, "episodes", None) or scheme.expected_batch
    if name == "pool":
        return getattr(scheme, "population", None)
    if name == "clip_policy":
        return "quantile" if plan.noise.count_noise is not None else "fixed"
    return plan.noise.count_noise


def _key(plan: Plan, name: str) -> str:
    return {"unit": "unit", "delta": "delta", "steps": "steps", "noise": "noise.multiplier",
            "sampler": "sampling.scheme", "meta_batch": "sampling.batch_size", "pool": "sampling.population",
            "clip_policy": "noise.count_noise", "count_noise": "noise.count_noise"}[name]


def check_plan_flags(args, plan: Plan) -> None:
    """Refuses a flag that contradicts the plan (module docstring), and a plan the algorithm or the data
    cannot run (``plan_run.check_plan``)."""
    alg = algorithms.get(args.algorithm)
    check_plan(plan, alg, images=datasets.get(args.data).images)
    for name in PLAN_FLAGS:
        given = getattr(args, name, None)
        if given is None:
            continue
        if name == "noise" and args.epsilon is not None:
            raise ValueError("--noise and --epsilon: with --plan, --epsilon calibrates the plan's noise.multiplier; "
                             "give one of them")
        if name == "clip_policy" and clip_rule(given).from_released and plan.noise.count_noise is None:
            continue  # thresholds from the released noisy sums: post-processing, the plan's accounting holds
        want = _plan_value(plan, name)
        if want is None or (given != want if isinstance(given, str) else not math.isclose(given, want, rel_tol=1e-12)):
            said = want if want is not None else "nothing of the kind"
            if name == "sampler" and want is None:
                said = f"'{plan.sampling.scheme}'"
            raise ValueError(f"{_flag(name)} {given} contradicts the plan ({_key(plan, name)} = {said} in "
                             f"{args.plan}): drop {_flag(name)}, or edit the plan")
    check_release_flags(args, plan)
    if args.shots is not None and not fresh_episodes(plan):
        raise ValueError("--shots applies to plans with [[hierarchy]] levels (support examples per class of a fresh "
                         "episode); drop it")
    if args.epsilon is not None and not alg.private:
        raise ValueError(f"--epsilon: {args.algorithm} is non-private; a plan run of it has no budget")


def calibrated(table: Dict[str, Any], epsilon: float) -> Tuple[Plan, Dict[str, Any], float]:
    """The plan with its noise calibrated so that its unit's epsilon at its delta is at most ``epsilon``
    (certified; ``plan_solve.noise_keys``: the sum's multiplier, the inner noise, or both): (plan, table,
    noise)."""
    solved = calibrate_plan(table, "noise", epsilon)
    table = copy.deepcopy(table)
    for key in noise_keys(table):
        part, name = key.split(".")
        table[part] = dict(table[part], **{name: solved.value})
    return solved.plan, table, solved.value


def check_release_flags(args, plan: Plan) -> None:
    """Refuses ``--inner-noise``, ``--inner-steps`` or ``--first-order`` where they contradict the plan's
    ``[release]`` (which then sets them)."""
    release = plan.release
    if release is None:
        return
    for name, want in (("inner_noise", release.inner_noise), ("inner_steps", release.inner_steps)):
        given = getattr(args, name, None)
        if given is not None and name == "inner_noise" and args.epsilon is not None:
            raise ValueError("--inner-noise and --epsilon: with --plan, --epsilon calibrates the plan's noise; give one "
                             "of them")
        if given is not None and not math.isclose(given, want, rel_tol=1e-12):
            raise ValueError(f"{_flag(name)} {given} contradicts the plan (release.{name} = {want:g} in {args.plan}): "
                             f"drop {_flag(name)}, or edit the plan")
    if args.first_order and release.per_example_queries and not release.first_order:
        raise ValueError(f"--first-order contradicts the plan (release.first_order = false in {args.plan}): its "
                         "guarantees are for second-order meta-gradients; drop --first-order, or edit the plan")


def config_table(config, population: int, record_multiplicity: int, query_per_task: int = 1,
                 name: Optional[str] = None) -> Dict[str, Any]:
    """The plan a flag run executes (its TOML table): ``config``'s sampling over a pool of ``population`` tasks
    (each record in at most ``record_multiplicity`` of them, ``query_per_task`` query examples each), its
    steps, delta, budget unit, noise, clip policy and release (``metadp.releases``), so that ``metadp train``
    runs every configuration as a plan (``metadp.training.run.trainer.train``) and ``--save-plan`` writes it.

    A non-private algorithm's plan has no noise (``noise.mechanism = 'none'``: its report certifies nothing);
    so does a private one run without noise. Thresholds from raw gradient norms are ``noise.clip =
    'raw_norms'``, an unbounded contribution (no clip, or no noise inside the tasks) ``noise.clip = 'none'``:
    the plan then says NOT PRIVATE, as the run does."""
    c, alg = config, config.family
    scheme = of_lot(c.sampling, population, c.meta_batch)
    sampling = scheme.plan_table()
    if sampling is None:  # every scheme the trainer runs has one (tested); a new one must add it
        raise ValueError(f"--sampler {c.sampling}: {scheme.text('task')} has no plan form (Sampling.plan_table)")
    key = c.budget_unit if alg.private else "task"
    table: Dict[str, Any] = {"name": name or f"metadp train {c.algorithm}", "unit": "record" if key != "task" else "task",
                             "relation": scheme.relation, "delta": c.delta, "steps": c.steps, "sampling": sampling,
                             "record_multiplicity": record_multiplicity}
    if key == "record-vs-server":
        table["against"] = "server"
    table["noise"] = _config_noise(c)
    if alg.private:
        release = alg.release(inner_noise=c.inner_noise, inner_steps=max(c.inner_steps, 1),
                              query_per_task=query_per_task, first_order=c.first_order).to_table()
        if release is not None:
            table["release"] = release
    return table


def _config_noise(c) -> Dict[str, Any]:
    """The ``[noise]`` table of configuration ``c`` (:func:`config_table`)."""
    alg = c.family
    if not alg.private or not alg.central_noise or c.noise_multiplier == 0:
        noise: Dict[str, Any] = {"mechanism": "none"}
    elif clip_rule(c.clip_policy).releases_count:  # the trainer's z is the sum's and the count's together
        noise = {"mechanism": "gaussian", "multiplier": sum_noise_multiplier(c.noise_multiplier, c.quantile_count_noise),
                 "count_noise": c.quantile_count_noise}
    else:
        noise = {"mechanism": "gaussian", "multiplier": c.noise_multiplier}
    if alg.private and clip_rule(c.clip_policy).reads_raw_norms:
        noise["clip"] = "raw_norms"
    elif alg.private and not c.bounded:
        noise["clip"] = "none"
    return noise


def save_plan(path: str, table: Dict[str, Any]) -> None:
    """Writes ``table`` as a TOML plan file (refuses an existing file or a missing folder); the written file
    loads back to the same plan."""
    import tomli_w

    out = Path(path)
    if out.exists():
        raise ValueError(f"--save-plan {path!r} exists: choose another file (it is never overwritten)")
    if not out.parent.is_dir():
        raise ValueError(f"--save-plan {path!r}: the folder {str(out.parent)!r} does not exist")
    top = {k: v for k, v in table.items() if not isinstance(v, (dict, list)) or k == "references"}
    rest = {k: v for k, v in table.items() if k not in top}
    text = tomli_w.dumps(top) + "\n" + tomli_w.dumps(rest)  # top-level keys before the first table
    Plan.from_dict(tomllib.loads(text))  # what is written must load back
    out.write_text(text, encoding="utf-8")
