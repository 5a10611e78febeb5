"""The ``metadp`` command: a thin wrapper over the library.

Each subcommand calls one library function and prints the bound with its direction. Bad input exits
with status 2 and one line on stderr naming the parameter and the allowed range.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from pathlib import Path
from typing import List, Optional

from metadp import __version__
from metadp.calibrate_command import add_calibrate_parser, run_calibrate
from metadp.cite import cite
from metadp.cli_flags import check_sampling_flags, emit, number, output_options, plan_dict, plan_options
from metadp.heartbeat import Heartbeat
from metadp.integrations._event_report import event_report
from metadp.plan_risk import with_risk
from metadp.integrations.dp_accounting import conversion_assumptions, default_relation, from_dp_event, load_dp_event
from metadp.plan import Plan, default_plan, load_plan, plan_epsilon
from metadp.plan_plot import check_plot_path, plot_plan, require_matplotlib
from metadp.training.run.parser import add_train_parser
from metadp.verify.command import add_verify_parser, run_verify

_EXAMPLES = {
    "plan": ("examples:\n  metadp plan\n  metadp plan examples/dp_sgd_mnist.toml --json\n  metadp plan my_plan.toml --latex\n"
             "  metadp plan --accountant all\n"
             "  metadp plan --dp-event examples/dp_sgd_mnist_dp_event.json --delta 1e-5     (a dp-accounting DpEvent as JSON)"),
    "epsilon": ("examples:\n  metadp epsilon --sampling poisson --rate 0.004 --noise 1 --steps 250 --delta 1e-6\n"
                "  metadp epsilon --sampling fixed --batch 256 --population 60000 --noise 1.1 --steps 14062 --delta 1e-5"),
    "calibrate": ("examples:\n  metadp calibrate --target-epsilon 1 --delta 1e-6 --sampling poisson --rate 0.004 --steps 250\n"
                  "  metadp calibrate --target-epsilon 2 --delta 1e-6 --sampling poisson --rate 0.004 --noise 1 --solve steps\n"
                  "  metadp calibrate --target-tpr 0.05 --at-fpr 0.01 --delta 1e-5 --sampling poisson --rate 0.01 "
                  "--steps 1000"),
    "cite": ("examples:\n  metadp cite\n  metadp cite examples/dp_sgd_mnist.toml --format latex\n"
             "  metadp cite examples/dp_sgd_mnist.toml --format bibtex --out refs.bib"),
}


class _UsageError(Exception):
    """Raised instead of argparse's multi-line usage exit."""


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one line, exit 2 (handled in main)
        raise _UsageError(message)


def _build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="metadp", description="Certified differential-privacy accounting for (meta-) learning.",
                     epilog="Run 'metadp COMMAND --help' for a command's options and examples.",
                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"metadp {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    sub.required = True

    p = sub.add_parser("plan", help="report the certified (epsilon, delta) of a plan file (default: built-in DP-MAML plan)",
                       epilog=_EXAMPLES["plan"], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("file", nargs="?", help="TOML plan file (docs/plan-format.md); omitted: the built-in default plan")
    output_options(p)
    p.add_argument("--plot", metavar="FILE", help="also draw epsilon over steps (and over units) to FILE (.png or .pdf; "
                   "needs matplotlib: pip install \"metadp[plot]\")")
    p.add_argument("--overwrite", action="store_true", help="replace an existing --plot file")
    d = p.add_argument_group("a dp-accounting event instead of a plan file (metadp.integrations.dp_accounting)")
    d.add_argument("--dp-event", metavar="FILE", help="JSON of a DpEvent's named-tuple form (module_name, class_name, "
                   "fields; nested events as objects)")
    d.add_argument("--delta", type=number("--delta", float), help="target delta in (0, 1) (required with --dp-event)")
    d.add_argument("--unit", choices=("record", "task"), help="the privacy unit the event's sensitivity is per "
                   "(default record)")
    d.add_argument("--relation", choices=("add_remove", "substitute"), help="neighbouring relation (default: "
                   "substitute if the event samples without replacement, else add_remove)")
    d.add_argument("--noise-relative-to", choices=("norm_bound", "replace_one_sensitivity"),
                   help="what the event's noise multipliers are relative to: the per-record norm bound C, as "
                        "dp-accounting documents (default), or the replace-one sensitivity 2C, as its REPLACE_ONE "
                        "accountants compute with (dp-accounting issue #378)")

    t = sub.add_parser("cite", help="BibTeX for every theorem a plan's report uses, and LaTeX stating its guarantee",
                       epilog=_EXAMPLES["cite"], formatter_class=argparse.RawDescriptionHelpFormatter)
    t.add_argument("file", nargs="?", help="TOML plan file (docs/plan-format.md); omitted: the built-in default plan")
    t.add_argument("--format", choices=("all", "bibtex", "latex"), default="all",
                   help="bibtex (a .bib file), latex (a sentence and a table) or all (default)")
    t.add_argument("--accountant", choices=("rdp", "pld", "all"), default=None,
                   help="override the plan's accountant, as in 'metadp plan'")
    t.add_argument("--out", metavar="FILE", help="write to FILE instead of printing (an existing FILE needs --force)")
    t.add_argument("--force", action="store_true", help="overwrite an existing --out FILE")
    t.add_argument("--no-risk", action="store_true", help="leave out the certified attack risk sentence")

    e = sub.add_parser("epsilon", help="certified epsilon of a sampled Gaussian plan given on the command line",
                       epilog=_EXAMPLES["epsilon"], formatter_class=argparse.RawDescriptionHelpFormatter)
    plan_options(e, noise_required=True)
    e.add_argument("--steps", type=number("--steps", int), required=True, help="number of noisy steps")
    output_options(e)

    add_calibrate_parser(sub, _EXAMPLES["calibrate"], argparse.RawDescriptionHelpFormatter)

    add_verify_parser(sub, number, argparse.RawDescriptionHelpFormatter)


    add_train_parser(sub, number, argparse.RawDescriptionHelpFormatter)
    return parser


def _check_file_flags(args, *flags: str) -> None:
    """An empty file name is refused, not read as "not given" (``--plot ''`` printed the report and no figure)."""
    for flag in flags:
        if getattr(args, flag[2:].replace("-", "_"), None) == "":
            raise ValueError(f"{flag} needs a file name, got ''")


def _cmd_plan(args) -> None:
    _check_file_flags(args, "--plot", "--dp-event")
    if args.dp_event is not None:
        return _cmd_plan_dp_event(args)
    for flag in ("--delta", "--unit", "--relation", "--noise-relative-to"):
        if getattr(args, flag[2:].replace("-", "_")) is not None:
            raise ValueError(f"{flag} applies only with --dp-event FILE (a plan file states it)")
    if args.overwrite and not args.plot:
        raise ValueError("--overwrite applies only with --plot FILE")
    if args.plot:  # before the accounting and the printed report, not after

        try:
            check_plot_path(args.plot, args.overwrite)
        except ValueError as err:
            raise ValueError(f"--plot: {err}") from None
        require_matplotlib()
    plan = load_plan(Path(args.file)) if args.file else default_plan()  # always a path, even with '='
    report = plan_epsilon(plan, accountant=args.accountant)
    if not args.no_risk:
        report = with_risk(report, plan)
    emit(report, args)
    if args.plot:
        plot_plan(plan, args.plot, report=report, overwrite=args.overwrite)
        print(f"figure: {args.plot} (certified epsilon over steps{' and units' if report.other_units else ''}; the "
              "best membership test's certified TPR over FPR)",
              file=sys.stderr)


def _cmd_plan_dp_event(args) -> None:
    for given, flag in ((args.file, "a plan FILE"), (args.plot, "--plot"), (args.overwrite, "--overwrite"),
                        (args.latex, "--latex")):
        if given:
            raise ValueError(f"{flag} does not go with --dp-event (give a plan file or a dp-accounting event)")
    if args.delta is None:
        raise ValueError("--delta is required with --dp-event (a dp-accounting event carries no delta)")
    if not 0.0 < args.delta < 1.0:
        raise ValueError(f"--delta must be in (0, 1), got {args.delta:g}")
    reading = args.noise_relative_to or "norm_bound"
    try:
        event = from_dp_event(load_dp_event(args.dp_event), noise_relative_to=reading)
    except ValueError as err:
        raise ValueError(f"--dp-event: {err}") from None
    relation = args.relation or default_relation(event)
    report = event_report(event, args.delta, unit=args.unit or "record", relation=relation,
                          accountant=args.accountant or "all", name=f"dp-accounting event {args.dp_event}",
                          assumptions=conversion_assumptions(reading, relation))
    print(report.to_json() if args.json else report.to_table())


def _cmd_cite(args) -> None:
    _check_file_flags(args, "--out")
    if args.force and not args.out:
        raise ValueError("--force applies only with --out FILE")
    out = Path(args.out) if args.out else None
    if out is not None:  # checked before the (slow) accounting
        if out.is_dir():
            raise ValueError(f"--out {args.out!r} cannot be written: it is a folder (give a file name)")
        if out.exists() and not args.force:
            raise ValueError(f"--out {args.out!r} already exists; pass --force to overwrite it")
        if not out.parent.is_dir():
            raise ValueError(f"--out {args.out!r} cannot be written: the folder {str(out.parent)!r} does not exist")
    plan = load_plan(Path(args.file)) if args.file else default_plan()  # always a path, even with '='
    report = plan_epsilon(plan, accountant=args.accountant)
    text = cite(report if args.no_risk else with_risk(report, plan)).render(args.format)
    if out is None:
        print(text, end="")
        return
    try:
        with open(out, "w" if args.force else "x", encoding="utf-8") as handle:  # "x": never clobber
            handle.write(text)
    except FileExistsError:
        raise ValueError(f"--out {args.out!r} already exists; pass --force to overwrite it") from None
    except OSError as err:
        raise ValueError(f"--out {args.out!r} cannot be written: {err.strerror or err}") from None
    what = {"all": "BibTeX and LaTeX", "bibtex": "BibTeX", "latex": "LaTeX"}[args.format]
    print(f"metadp: wrote the {what} citing {plan.name!r} to {args.out}", file=sys.stderr)


def _cmd_epsilon(args) -> None:
    check_sampling_flags(args)
    plan = Plan.from_dict(plan_dict(args, args.noise, args.steps))
    emit(plan_epsilon(plan, accountant=args.accountant), args)


def _cmd_verify(args) -> int:
    # 0 consistent, 1 VIOLATION, 3 inconclusive (metadp verify --help); ``verify run`` trains: torch, gated
    return run_verify(args, load_run_audit=lambda: _needs_torch("metadp.verify.run_audit", "metadp verify run"))


def _needs_torch(module: str, command: str):
    """The torch gate: the one place metadp loads one of its modules on demand. The trainer and the run audit
    need torch, an optional dependency, and every other command (and their --help) must work without it."""
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as err:
        if err.name != "torch":
            raise
        raise ValueError(f'{command} needs torch: pip install "metadp[train]" (CPU build first: '
                         "pip install torch==2.13.0, or the build for your machine)") from None


def _cmd_train(args) -> None:
    return _needs_torch("metadp.training.run.command", "metadp train").run_train(args)


_COMMANDS = {"plan": _cmd_plan, "cite": _cmd_cite, "epsilon": _cmd_epsilon, "calibrate": run_calibrate,
             "verify": _cmd_verify, "train": _cmd_train}
# what a command still working says it is doing (metadp.heartbeat)
_WORK = {"plan": "certifying the plan", "cite": "certifying the plan", "epsilon": "certifying the bound",
         "calibrate": "calibrating: each try certifies a bound", "verify": "verifying", "train": "training"}


def main(argv: Optional[List[str]] = None) -> int:
    """Entry point; returns the exit status: 0 ok, 2 bad input, 130 interrupted (Ctrl-C); a command may return
    its own (verify: 1 VIOLATION, 3 inconclusive)."""
    parser = _build_parser()
    status = 0
    try:
        args = parser.parse_args(argv)
        args.argv = list(sys.argv[1:] if argv is None else argv)  # as given (metadp train --nproc starts it again)
        with Heartbeat(_WORK[args.command]):
            status = _COMMANDS[args.command](args) or 0
    except (_UsageError, ValueError) as err:
        message = " ".join(str(err).split())  # exactly one line
        print(f"metadp: error: {message}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as err:  # Ctrl-C: one line (the trainer says where it stopped), status 130
        print(f"metadp: {' '.join(str(err).split()) or 'interrupted'}", file=sys.stderr)
        return 130
    except BrokenPipeError:  # output piped into e.g. `head`: not an error of ours
        sys.stderr.close()
    return status


if __name__ == "__main__":
    sys.exit(main())
