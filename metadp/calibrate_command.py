"""``metadp calibrate``: the noise, steps or rate that meets a target epsilon or attack TPR, for a plan given by flags
or by a plan file (``metadp calibrate PLAN.toml --target-epsilon 2``: every scheme and noise a plan states, banded
noise included). Either way the question is one plan's (``metadp.plan_solve.calibrate_plan``,
``metadp.plan_risk.calibrate_for_tpr``), and the printed report is that plan's certified one."""

from __future__ import annotations

import json
import math
import sys
import tomllib
from pathlib import Path
from typing import Any, Dict, cast

from tqdm import tqdm

from metadp.accounting.risk import FPRS as RISK_FPRS
from metadp.cli_flags import check_sampling_flags, number, output_options, plan_dict, plan_options
from metadp.plan import load_plan, plan_epsilon
from metadp.plan_risk import calibrate_for_tpr, with_risk
from metadp.plan_solve import Unreachable, calibrate_plan
from metadp.report import format_upper

__all__ = ["add_calibrate_parser", "run_calibrate"]

# the flags a plan file states (refused beside one: never two sources for one value)
_PLAN_FLAGS = ("--sampling", "--rate", "--batch", "--population", "--noise", "--delta", "--unit", "--steps")


def add_calibrate_parser(sub, examples: str, formatter) -> None:
    c = sub.add_parser("calibrate", help="solve for the noise, steps or rate that meets a target epsilon or attack TPR",
                       epilog=examples, formatter_class=formatter)
    c.add_argument("file", nargs="?", help="a TOML plan file (docs/plan-format.md) whose noise, steps or rate to "
                   "solve; omitted: the plan the flags give")
    c.add_argument("--target-epsilon", type=number("--target-epsilon", float), help="the epsilon to meet (or "
                   "--target-tpr)")
    c.add_argument("--target-tpr", type=number("--target-tpr", float),
                   help="instead of an epsilon: the most TPR the best membership test may reach at --at-fpr "
                        "(certified; solves what --solve names)")
    c.add_argument("--at-fpr", type=number("--at-fpr", float), help="the false-positive rate of --target-tpr")
    plan_options(c, noise_required=False, calibrate=True)
    c.add_argument("--steps", type=number("--steps", int), help="number of noisy steps (solved for with --solve steps)")
    c.add_argument("--solve", choices=("noise", "steps", "rate"), default="noise", help="what to solve for (default noise)")
    output_options(c, latex=False)


def _given(args, flag: str):
    return getattr(args, flag[2:].replace("-", "_"))


def _question(args) -> dict:
    """The plan to solve, as a plan file's table: the file's (checked by loading it first), or the flags'."""
    if args.file is None:
        for flag in ("--sampling", "--delta"):
            if _given(args, flag) is None:
                raise ValueError(f"{flag} is required (or give a plan file)")
        args.unit, args.accountant = args.unit or "record", args.accountant or "pld"
        check_sampling_flags(args)
        _check_solved_flags(args)
        return plan_dict(args, args.noise, args.steps)
    for flag in _PLAN_FLAGS:
        if _given(args, flag) is not None:
            raise ValueError(f"{flag} does not go with a plan file: the file states it (edit the file, or give the "
                             "plan by flags alone)")
    plan = load_plan(Path(args.file))  # every refusal of the plan, with its file's name
    table = tomllib.loads(Path(args.file).read_text(encoding="utf-8"))
    if args.accountant is not None:
        table["accountant"] = args.accountant
    if args.solve == "rate" and plan.sampling.scheme != "poisson":
        raise ValueError(f"--solve rate needs sampling.scheme = 'poisson' (the plan's is '{plan.sampling.scheme}')")
    return table


_DIRECTION = {"noise": "smallest noise multiplier", "steps": "largest number of steps", "rate": "largest sampling rate"}
_SHOWN = {"steps": "{:,.0f} steps", "noise": "noise {:.4g}", "rate": "rate {:.4g}"}


def _solve_bar(solve: str, measure: str):
    """(progress bar, progress callback) of a calibration: each evaluation certifies a bound (up to a few seconds
    each at extreme values), so the bar shows from the first one."""
    bar = tqdm(desc=f"calibrate: solving for {solve}", unit=" bounds", file=sys.stderr, leave=False,
               mininterval=0.5, disable=None)

    def progress(value, found):
        bar.set_postfix_str(f"{_SHOWN[solve].format(value)}: {measure} <= {found:.4g}", refresh=False)
        bar.update(1)

    return bar, progress


def _check_solved_flags(args) -> None:
    """Refuses a flag that ``--solve`` computes, and the flags a solve needs but lacks."""
    solved = {"noise": [("--noise", args.noise)], "steps": [("--steps", args.steps)],
              "rate": [("--rate", args.rate), ("--batch", args.batch)]}[args.solve]
    for flag, given in solved:
        if given is not None:
            raise ValueError(f"{flag} is what --solve {args.solve} computes: leave {flag} out (or solve for "
                             "something else)")
    if args.solve == "noise" and args.steps is None:
        raise ValueError("--steps is required to solve for the noise")
    if args.solve == "steps" and args.noise is None:
        raise ValueError("--noise is required to solve for the steps")
    if args.solve == "rate":
        if args.sampling != "poisson":
            raise ValueError("--solve rate needs --sampling poisson")
        if args.noise is None or args.steps is None:
            raise ValueError("--noise and --steps are required to solve for the rate")


def run_calibrate(args) -> None:
    """``metadp calibrate``: one line naming what was solved and its value, then the solved plan's report."""
    if (args.target_epsilon is None) == (args.target_tpr is None):
        raise ValueError("give one target: --target-epsilon, or --target-tpr with --at-fpr")
    if (args.target_tpr is None) != (args.at_fpr is None):
        raise ValueError("--target-tpr and --at-fpr go together")
    question = _question(args)
    if args.target_tpr is not None:
        return _calibrate_tpr(args, question)
    bar, progress = _solve_bar(args.solve, "epsilon")
    try:
        solved = calibrate_plan(question, args.solve, args.target_epsilon, progress=progress)
    except Unreachable:
        raise ValueError(f"--target-epsilon {args.target_epsilon:g} is unreachable: one step already exceeds "
                         "it") from None
    finally:
        bar.close()
    value, plan = solved.value, solved.plan
    # The library verified `value` with a bound that refines without a time limit; the report uses the
    # same bound, so the printed epsilon meets the target however slow or loaded the machine is.
    report = plan_epsilon(plan, max_seconds=math.inf)
    if args.json:
        print(json.dumps({"solved": args.solve, "value": value, "target_epsilon": args.target_epsilon,
                          "report": report.to_dict()}, indent=2))
    else:
        print(f"{_DIRECTION[args.solve]} meeting epsilon <= {args.target_epsilon:g} at delta = {report.delta:g}: "
              f"{value:.6g}")
        print(report.headline())
        for warning in report.warnings:
            print(f"  ! {warning}")


def _calibrate_tpr(args, question: dict) -> None:
    """``metadp calibrate --target-tpr T --at-fpr A``: the smallest noise, the most steps or the largest rate
    (``--solve``) whose certified TPR bound at A is <= T."""
    bar, progress = _solve_bar(args.solve, "TPR")
    try:
        solved = calibrate_for_tpr(question, args.solve, args.target_tpr, args.at_fpr, progress)
    except Unreachable as err:
        raise ValueError(f"--target-tpr: {err}") from None
    finally:
        bar.close()
    report = with_risk(plan_epsilon(solved.plan, max_seconds=math.inf), solved.plan,
                       fprs=sorted({args.at_fpr, *RISK_FPRS}))
    risk = cast(Dict[str, Any], report.risk)  # (with_risk gives the plan's unit its risk)
    tpr = dict(zip(risk["fpr"], risk["tpr"]))[args.at_fpr]
    if args.json:
        print(json.dumps({"solved": args.solve, "value": solved.value, "target_tpr": args.target_tpr,
                          "at_fpr": args.at_fpr, "tpr": tpr, "report": report.to_dict()}, indent=2))
        return
    print(f"{_DIRECTION[args.solve]} meeting TPR <= {args.target_tpr:g} at FPR {args.at_fpr:g} (the best membership "
          f"test against one {report.unit}, certified): {solved.value:.6g}")
    print(f"  TPR <= {format_upper(tpr)} at FPR {args.at_fpr:g}; {report.headline()}")
    for warning in report.warnings:
        print(f"  ! {warning}")
