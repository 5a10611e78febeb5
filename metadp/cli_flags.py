"""The command line's shared flags: how ``metadp epsilon`` and ``metadp calibrate`` compile flags to a plan (one
engine: a flag run is a plan, ``Plan.from_dict`` of :func:`plan_dict`), the output formats, and the number
parsers whose errors name the flag."""

from __future__ import annotations

import argparse
import math
from typing import Optional

__all__ = ["number", "plan_options", "output_options", "check_sampling_flags", "plan_dict", "emit"]


def number(flag: str, kind):
    def parse(text: str):
        try:
            return kind(text) if kind is float else _parse_int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{flag} must be a {'number' if kind is float else 'whole number'}, got {text!r}")
    return parse


def _parse_int(text: str) -> int:
    value = float(text)
    if not math.isfinite(value) or value != int(value):
        raise ValueError(text)
    return int(value)


def plan_options(p: argparse.ArgumentParser, noise_required: bool, calibrate: bool = False) -> None:
    # (calibrate: a plan file may state them instead: the command checks they are given without one)
    p.add_argument("--sampling", choices=("poisson", "fixed", "none"), required=not calibrate,
                   help="how units are sampled per step")
    p.add_argument("--rate", type=number("--rate", float), help="Poisson sampling probability in [0, 1]")
    p.add_argument("--batch", type=number("--batch", int), help="batch size (fixed; or expected size for poisson)")
    p.add_argument("--population", type=number("--population", int), help="number of units sampled from")
    p.add_argument("--noise", type=number("--noise", float), required=noise_required, help="noise multiplier sigma / clip norm")
    p.add_argument("--delta", type=number("--delta", float), required=not calibrate, help="target delta in (0, 1)")
    p.add_argument("--unit", choices=("record", "task"), default=None if calibrate else "record",
                   help="privacy unit (default record)")
    if calibrate:
        p.add_argument("--accountant", choices=("rdp", "pld"), default=None,
                       help="accountant whose certified bound must meet the target (default pld, the tight one; "
                            "with a plan file, the plan's)")
    else:
        p.add_argument("--accountant", choices=("rdp", "pld", "all"), default="all",
                       help="rdp, pld (tight, with a certified lower bound) or all (default: every accountant "
                            "that handles the plan, the tightest reported)")


def output_options(p: argparse.ArgumentParser, latex: bool = True) -> None:
    formats = p.add_mutually_exclusive_group()  # one output format: "--json --latex" is refused
    formats.add_argument("--json", action="store_true", help="print the report as JSON")
    if latex:
        formats.add_argument("--latex", action="store_true", help="print the report as a LaTeX table row")
    if p.prog.endswith("plan"):
        p.add_argument("--accountant", choices=("rdp", "pld", "all"), default=None,
                       help="override the plan's accountant (pld: tight, with a lower bound; all: every one)")
        p.add_argument("--no-risk", action="store_true",
                       help="leave out the certified attack risk (TPR at FPR 0.1%%, 1%%, 10%%; advantage) per unit")


def check_sampling_flags(args) -> None:
    """Refuses flags that would contradict each other (never drop one silently)."""
    if args.sampling == "poisson" and args.rate is not None and args.batch is not None:
        raise ValueError(f"--rate {args.rate:g} and --batch {args.batch} both set the poisson sampling rate "
                         "(rate = batch / population): give one of them")


def plan_dict(args, noise: Optional[float], steps: Optional[int], rate: Optional[float] = None) -> dict:
    sampling = {"scheme": args.sampling}
    rate = args.rate if rate is None else rate
    if rate is not None:
        sampling["rate"] = rate
    if args.batch is not None:
        sampling["batch_size"] = args.batch
    if args.population is not None:
        sampling["population"] = args.population
    accountant = args.accountant
    d = {"name": "command-line plan", "unit": args.unit, "delta": args.delta, "accountant": accountant,
         "sampling": sampling, "noise": {"mechanism": "gaussian", "multiplier": noise if noise is not None else 1.0}}
    d["steps"] = steps if steps is not None else 1
    return d


def emit(report, args) -> None:
    if getattr(args, "json", False):
        print(report.to_json())
    elif getattr(args, "latex", False):
        print(report.to_latex())
    else:
        print(report.to_table())
