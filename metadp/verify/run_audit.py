"""``metadp verify run``: trains the audited run and prints the audit (needs torch: the CLI loads this module
through its torch gate, ``metadp.cli``; its argument checks, which need no torch, are in ``run_command``)."""

from __future__ import annotations

import json
import sys

from metadp.training.run.size import say_estimate
from metadp.verify.canaries import run_canary_audit
from metadp.verify.run_command import audit_table, plot_canary_audits
from metadp.verify.support_canaries import run_support_audit

__all__ = ["run_audit_command"]


def run_audit_command(args) -> int:
    """Trains, audits and prints (table or ``--json``; ``--plot``); returns the exit status."""
    say_estimate(args.run_size, f"metadp verify run {args.file} --plan {args.plan} (trains the audited run)", sys.stderr)
    if args.file == "dp-maml-sample":
        settings = {k: v for k, v in (("inner_lr", args.inner_lr), ("inner_noise", args.inner_noise),
                                      ("inner_steps", args.inner_steps)) if v is not None}
        width = args.hidden or 16
        result = run_support_audit(args.loaded_plan, canaries=args.canaries, defect=args.plant_defect,
                                           beta=args.alpha, seed=args.seed, outer_lr=args.outer_lr,
                                           sizes=(1, width, width, 1), **settings)
        return _print_audit(args, result)
    result = run_canary_audit(args.loaded_plan, args.file, canaries=args.canaries, view=args.view or "task",
                                       defect=args.plant_defect, kind=args.canary_kind or "gradient",
                                       beta=args.alpha, seed=args.seed,
                                       outer_lr=args.outer_lr,
                                       sizes=(1, args.hidden or 40, args.hidden or 40, 1))
    return _print_audit(args, result)


def _print_audit(args, result: dict) -> int:
    result["plan_file"] = args.plan
    if args.plot:
        plot_canary_audits([result], args.plot)
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print(audit_table(result))
        if args.plot:
            print(f"plot written to {args.plot}")
    return 1 if result["verdict"] == "VIOLATION" else 0
