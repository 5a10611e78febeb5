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
from metadp.plan_solve import calibrate_plan
from metadp.sampling import RUN_SCHEMES, of_lot
from metadp.training.algorithms.clipping import clip_rule
from metadp.training import algorithms
from metadp.training.data import datasets
from metadp.training.run.plan_run import check_plan, fresh_episodes

__all__ = ["load_run_plan", "check_plan_flags", "calibrated", "flags_plan", "flags_plan_refusal", "save_plan", "PLAN_FLAGS"]

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
    if args.shots is not None and not fresh_episodes(plan):
        raise ValueError("--shots applies to plans with [[hierarchy]] levels (support examples per class of a fresh "
                         "episode); drop it")
    if args.epsilon is not None and not alg.private:
        raise ValueError(f"--epsilon: {args.algorithm} is non-private; a plan run of it has no budget")


def calibrated(table: Dict[str, Any], epsilon: float) -> Tuple[Plan, Dict[str, Any], float]:
    """The plan with its noise multiplier calibrated so that its unit's epsilon at its delta is at most
    ``epsilon`` (certified): (plan, table, multiplier)."""
    solved = calibrate_plan(table, "noise", epsilon)
    table = copy.deepcopy(table)
    table["noise"] = dict(table["noise"], multiplier=solved.value)
    return solved.plan, table, solved.value


def flags_plan_refusal(alg, unit: str, sampler: str, pool: Optional[int] = None,
                       meta_batch: Optional[float] = None) -> Optional[str]:
    """Why no plan file expresses a flag run of ``alg`` budgeting ``unit`` under ``--sampler sampler`` (with
    ``pool`` and ``meta_batch`` where known: the scheme they make must have an exact plan form,
    ``Sampling.plan_table``)."""
    why = None
    if not alg.private:
        why = f"{alg.name} is non-private"
    elif not (alg.central_clip and alg.central_noise and not alg.inner_dp):
        why = f"{alg.name} adds noise inside each task, which a plan file does not describe"
    elif unit != "task":
        why = (f"the {unit} view of a fixed task pool (records shared between tasks) has no plan form; a plan with "
               "[[hierarchy]] levels draws fresh episodes instead")
    elif pool is not None and meta_batch is not None and of_lot(sampler, pool, meta_batch).plan_table() is None:
        scheme = of_lot(sampler, pool, meta_batch)
        why = (f"--sampler {sampler} over --pool {pool} with --meta-batch {meta_batch:g} ({scheme.text('task')}) has "
               f"no exact plan form: no sampling.scheme = '{scheme.scheme}' table states it (one-pass: choose a "
               "--meta-batch whose passes cut the pool evenly)")
    return None if why is None else f"--save-plan: {why}"


def flags_plan(args, config, record_multiplicity: int) -> Dict[str, Any]:
    """The plan table a flag run describes (``--save-plan`` without ``--plan``): its scheme's own plan table
    (``Sampling.plan_table``), relation, noise, steps and the pool's ``record_multiplicity`` (each record in at
    most that many of its tasks: the plan then reports the run's record view too); raises where no plan file
    expresses the run (:func:`flags_plan_refusal`)."""
    why = flags_plan_refusal(config.family, config.budget_unit, config.sampling, args.pool, config.meta_batch)
    if why is not None:
        raise ValueError(why)
    scheme = of_lot(config.sampling, args.pool, config.meta_batch)
    noise = {"mechanism": "gaussian", "multiplier": config.noise_multiplier}
    if clip_rule(config.clip_policy).releases_count:
        # the trainer's z is the sum's and the count's together; the plan's multiplier is the sum's
        noise = {"mechanism": "gaussian",
                 "multiplier": sum_noise_multiplier(config.noise_multiplier, config.quantile_count_noise),
                 "count_noise": config.quantile_count_noise}
    return {"name": f"metadp train {args.algorithm} --data {args.data}", "unit": "task", "relation": scheme.relation,
            "delta": config.delta, "steps": config.steps, "sampling": scheme.plan_table(), "noise": noise,
            "record_multiplicity": record_multiplicity}


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
