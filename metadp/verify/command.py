"""``metadp verify``: audit a claimed privacy profile against the mechanism's own samples, or cross-check
the accountants on a plan (DESIGN.md sec. 6). A thin layer over ``audit``, ``sizing``, ``pipelines`` and
``crosscheck``; the CLI (``metadp.cli``) only parses arguments and calls ``run_verify``, whose return
value is the exit status:

    0  consistent: no violation found, with at least the draws the planner needs for the power asked
    1  VIOLATION: a lower confidence bound exceeds the claim (false alarm probability <= --alpha);
       --crosscheck: the libraries disagree
    2  bad input (one line on stderr, nothing sampled or written)
    3  inconclusive: no violation found, but fewer draws than the planner needs (or none would do);
       --crosscheck: nothing to compare with (neither dp-accounting nor prv-accountant ran)
"""

from __future__ import annotations

import importlib.util
import json
import math
import sys
import tomllib
from pathlib import Path
from typing import List

import numpy as np

from metadp.accounting import Gaussian, PldAccountant, PoissonSampled
from metadp.mechanisms.dp_pix import dp_pix_event
from metadp.mechanisms.gaussian import gaussian_pair
from metadp.mechanisms.laplace import LaplacePair
from metadp.plan import load_plan
from metadp.report import format_lower
from metadp.verify.audit import audit
from metadp.verify.claims import accountant_profile, tightest_accountant
from metadp.verify.crosscheck import crosscheck_dp_event, crosscheck_plan
from metadp.verify.banded_pipeline import banded_pipeline
from metadp.verify.pipelines import NoPipelineError, dp_pix_pipeline, pipeline_for, poisson_pipeline
from metadp.verify.plot import plot_audit
from metadp.training.run.size import LIMIT_HOURS
from metadp.verify.run_command import add_run_arguments, check_run_input
from metadp.verify.sizing import cached_profile, check_resources, explore_draws, plan_audit

__all__ = ["add_verify_parser", "run_verify"]

_EXIT = {"consistent": 0, "VIOLATION": 1, "INCONCLUSIVE": 3}
_EXAMPLES = ("examples (each well under a minute on 2 cores):\n"
             "  metadp verify gaussian --noise 1 --epsilons 0.5,1,2 --plot verify.png\n"
             "  metadp verify gaussian --noise 0.8 --claim-noise 1 --epsilons 0.5,1,2        (VIOLATION)\n"
             "  metadp verify laplace --scale 1 --epsilons 0.5,1\n"
             "  metadp verify dp-pix --epsilon 1 --cell 4 --m 1 --samples 200000\n"
             "  metadp verify dp-pix --epsilon 1 --cell 4 --claim-epsilon 0.5 --samples 200000   (VIOLATION)\n"
             "  metadp verify poisson --rate 0.5 --noise 1 --steps 3 --epsilons 0.5,1\n"
             "  metadp verify plan examples/dp_fedmeta_one_pass_shuffle.toml --samples 100000\n"
             "  metadp verify --crosscheck examples/dp_sgd_mnist.toml\n"
             "  metadp verify run dp-maml --plan benchmarks/audit_sinusoid.toml --data sinusoid --canaries 100 --hidden 16\n"
             "      (trains the real run with canaries; --plant-defect low-noise: a control it must flag)\n"
             "  metadp verify run dp-maml-sample --plan benchmarks/audit_sinusoid_support.toml --data sinusoid "
             "--canaries 100 --plant-defect second-order\n"
             "      (VIOLATION: second-order meta-gradients accounted as first-order, docs/findings.md, Finding 4)\n"
             "  metadp verify --crosscheck examples/dp_sgd_mnist_dp_event.json --delta 1e-5   (a dp-accounting event)\n\n"
             "exit status: 0 consistent (no violation found, with at least the draws the planner needs for\n"
             "  --power); 1 VIOLATION (or --crosscheck: the libraries disagree); 2 bad input; 3 inconclusive\n"
             "  (no violation found with fewer draws than the planner needs, or --crosscheck: nothing was\n"
             "  compared). An audit estimated to take over an hour is refused unless --force-long; one\n"
             "  whose exploration sample (n/10 draws per side, at most 2^24) needs over half the memory,\n"
             "  always; metadp verify run: one whose training is estimated (from the plan alone) to take\n"
             f"  over {LIMIT_HOURS:g} hours is refused unless --force-long.")

# --alpha: the confidence bounds are computed for false-alarm probabilities down to 1e-12 (1e-300 overflowed them)
_ALPHA_RANGE = "in [1e-12, 1) (a false-alarm probability; the confidence bounds are computed down to 1e-12)"

# flags that describe one mechanism, and the mechanisms they apply to
_MECHANISM_FLAGS = {"--noise": ("gaussian", "poisson"), "--claim-noise": ("gaussian", "poisson"),
                    "--scale": ("laplace",), "--claim-scale": ("laplace",), "--epsilon": ("dp-pix",),
                    "--claim-epsilon": ("dp-pix",), "--cell": ("dp-pix",), "--m": ("dp-pix",),
                    "--partial-cell": ("dp-pix",), "--rate": ("poisson",), "--steps": ("poisson",)}
_DEFAULTS = {"samples": 1_000_000, "power": 0.9}
_POSITIVE = ("--noise", "--claim-noise", "--scale", "--claim-scale", "--epsilon", "--claim-epsilon")
# the noise an audit's pairs can hold (the PLD accountant's range, metadp.accounting._pld_pairs): beyond it the
# losses overflow float64 (1e300 raised OverflowError, 1e-300 printed divide-by-zero warnings)
_NOISE_FLAGS = ("--noise", "--claim-noise", "--scale", "--claim-scale")
_NOISE_RANGE = (1e-50, 1e50)


def add_verify_parser(sub, number, formatter) -> None:
    """Adds the ``verify`` subcommand to the CLI's subparsers (``number(flag, kind)`` parses numbers)."""
    v = sub.add_parser("verify", help="audit a claimed privacy profile on the mechanism's samples, or cross-check a plan",
                       epilog=_EXAMPLES, formatter_class=formatter)
    v.add_argument("mechanism", nargs="?", choices=("gaussian", "laplace", "dp-pix", "poisson", "plan", "run"),
                   help="the mechanism to run (true parameters below; the claim defaults to the same), or 'plan FILE': "
                        "the plan's sampled, composed pipeline with a canary against the plan's certified profile, or "
                        "'run ALGO': train ALGO on --plan with --canaries and audit the real run (one-run audit)")
    v.add_argument("file", nargs="?", help="plan: the TOML plan file; run: the algorithm (dp-maml, dp-agr)")
    v.add_argument("--crosscheck", metavar="PLAN", help="run every accountant and library on a plan file (.toml) or a "
                   "dp-accounting event (.json, its named-tuple form; needs --delta) and compare")
    v.add_argument("--delta", type=number("--delta", float), help="--crosscheck EVENT.json: the delta to compare at")
    v.add_argument("--noise", type=number("--noise", float), help="true Gaussian noise multiplier")
    v.add_argument("--claim-noise", type=number("--claim-noise", float), help="claimed noise multiplier (default: --noise)")
    v.add_argument("--scale", type=number("--scale", float), help="true Laplace scale (sensitivity 1)")
    v.add_argument("--claim-scale", type=number("--claim-scale", float), help="claimed Laplace scale (default: --scale)")
    v.add_argument("--epsilon", type=number("--epsilon", float), help="dp-pix: true DP-Pix epsilon")
    v.add_argument("--claim-epsilon", type=number("--claim-epsilon", float),
                   help="dp-pix: claimed epsilon (default: --epsilon)")
    v.add_argument("--cell", type=number("--cell", int), help="dp-pix: cell side b in pixels")
    v.add_argument("--m", type=number("--m", int),
                   help="dp-pix: pixel values the neighbours differ in, all in one cell, <= b^2 (default 1)")
    v.add_argument("--partial-cell", action="store_true", default=None,
                   help="dp-pix: change pixels of the partial r x r corner cell (r = b // 2) of a (b + r)-pixel "
                        "square image instead of a full cell (checks the edge calibration; needs m <= r^2)")
    v.add_argument("--rate", type=number("--rate", float), help="poisson: sampling rate in (0, 1] (true and claimed)")
    v.add_argument("--steps", type=number("--steps", int), help="poisson: composed steps (default 1)")
    v.add_argument("--epsilons", help="comma-separated epsilon grid (default 0.5,1,2; dp-pix: 0.25, 0.5, 0.75 and 1 "
                                      "times the claimed epsilon)")
    v.add_argument("--samples", type=number("--samples", int), default=1_000_000,
                   help="confirmation draws per side (default 1,000,000)")
    v.add_argument("--alpha", type=number("--alpha", float), default=0.01,
                   help="family-wise error level of a VIOLATION, in (0, 1) (default 0.01)")
    v.add_argument("--power", type=number("--power", float), default=0.9,
                   help="the probability of seeing the planned violation that a 'consistent' verdict needs, in "
                        "(0, 1) (default 0.9); with fewer draws than that takes, finding nothing is inconclusive")
    v.add_argument("--violation", type=number("--violation", float),
                   help="planner: the delta excess to see, in (0, 1) (default: gaussian, laplace and dp-pix plan for "
                        "the mechanism 20%% noisier than claimed; poisson and plan for 10%% of the claim, at least "
                        "1e-4), at the tested epsilon where it is cheapest")
    v.add_argument("--seed", type=number("--seed", int), default=0, help="random seed, >= 0 (default 0)")
    v.add_argument("--plot", metavar="PATH", help="write the claimed-vs-empirical plot (.png or .svg) into an existing "
                                                  "folder")
    v.add_argument("--overwrite", action="store_true", help="replace an existing --plot file")
    v.add_argument("--force-long", action="store_true",
                   help="run an audit estimated to take over an hour, or a 'run' whose training is estimated "
                        f"to take over {LIMIT_HOURS:g} hours (refused otherwise)")
    v.add_argument("--json", action="store_true", help="print the result as JSON")
    v.add_argument("--quiet", action="store_true", help="no plan line and no progress bar")
    add_run_arguments(v, number)


def _check_plan_text(path: str) -> None:
    """Refuses a --crosscheck file that is not TOML (a plan) before it is read as a plan: a Markdown or text
    file is neither a plan nor a dp-accounting event (EVENT.json), and saying 'not valid TOML at line 3'
    would read as if it were a broken plan."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (UnicodeDecodeError, OSError):
        text = None
    if text is not None:
        try:
            tomllib.loads(text)
            return
        except tomllib.TOMLDecodeError:
            pass
        except RecursionError:
            return  # the plan loader says it is nested too deeply
        try:
            json.loads(text)
        except (json.JSONDecodeError, RecursionError):
            pass
        else:
            raise ValueError(f"--crosscheck {path!r} holds JSON: a dp-accounting event is read from a file named "
                             "*.json (with --delta); a plan is a TOML file")
    raise ValueError(f"--crosscheck {path!r} is neither a plan (a TOML file, e.g. examples/dp_sgd_mnist.toml) nor a "
                     "dp-accounting event (EVENT.json with --delta)")


def _epsilons(text: str) -> List[float]:
    try:
        values = [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise ValueError(f"--epsilons must be comma-separated numbers, got {text!r}") from None
    if not values:
        raise ValueError(f"--epsilons must list at least one epsilon, got {text!r}")
    for value in values:
        if not (math.isfinite(value) and 0.0 <= value <= 700.0):
            raise ValueError(f"--epsilons must be numbers in [0, 700], got {value:g} in {text!r}")
    if len(set(values)) != len(values):
        raise ValueError(f"--epsilons must be distinct, got {text!r}")
    return values


def _check_input(args) -> None:
    """Every check that needs no sampling, before anything runs (ValueError naming the flag)."""
    check_run_input(args)
    if args.mechanism == "run":
        _check_plot(args)
        for flag, value, ok, allowed in (("--alpha", args.alpha, lambda x: 1e-12 <= x < 1, _ALPHA_RANGE),
                                         ("--seed", args.seed, lambda x: x >= 0, ">= 0")):
            if not (math.isfinite(value) and ok(value)):
                raise ValueError(f"{flag} must be {allowed}, got {value:g}")
        for flag in ("--samples", "--power", "--violation", "--epsilons", "--crosscheck"):
            name = flag[2:].replace("-", "_")
            given = getattr(args, name)
            if given not in (None, False) and given != _DEFAULTS.get(name):
                raise ValueError(f"{flag} does not apply to metadp verify run (it trains once and plays the guessing game)")
        return
    if args.file and args.mechanism != "plan":
        raise ValueError(f"a file argument goes with 'metadp verify plan FILE', not with {args.mechanism or '--crosscheck'}")
    if args.crosscheck and args.mechanism:
        raise ValueError("give either a mechanism to audit or --crosscheck PLAN, not both")
    if not args.crosscheck and not args.mechanism:
        raise ValueError("metadp verify needs a mechanism (gaussian, laplace, dp-pix, poisson, plan FILE) or "
                         "--crosscheck PLAN")
    what = args.mechanism or "--crosscheck"
    for flag, mechanisms in _MECHANISM_FLAGS.items():
        if getattr(args, flag[2:].replace("-", "_")) is not None and args.mechanism not in mechanisms:
            raise ValueError(f"{flag} applies to metadp verify {' and '.join(mechanisms)}, not to {what}")
    event_file = bool(args.crosscheck) and args.crosscheck.lower().endswith(".json")
    if args.delta is not None and not event_file:
        raise ValueError("--delta applies only to --crosscheck EVENT.json (a plan file states its delta)")
    if args.crosscheck:
        if not Path(args.crosscheck).is_file():
            raise ValueError(f"--crosscheck {args.crosscheck!r}: no such {'file' if event_file else 'plan file'}")
        if not event_file:
            _check_plan_text(args.crosscheck)
        if event_file and (args.delta is None or not 0.0 < args.delta < 1.0):
            given = "is missing" if args.delta is None else f"must be in (0, 1), got {args.delta:g}"
            raise ValueError(f"--delta {given}: --crosscheck EVENT.json needs the delta to compare at")
        return
    if args.mechanism == "plan":
        if not args.file:
            raise ValueError("metadp verify plan needs a plan file: metadp verify plan FILE")
        if not Path(args.file).is_file():
            raise ValueError(f"metadp verify plan FILE: {args.file!r} is not a file")
    for flag in _POSITIVE:
        value = getattr(args, flag[2:].replace("-", "_"))
        if value is not None and not (math.isfinite(value) and value > 0):
            raise ValueError(f"{flag} must be a finite number > 0, got {value:g}")
        if value is not None and flag in _NOISE_FLAGS and not _NOISE_RANGE[0] <= value <= _NOISE_RANGE[1]:
            raise ValueError(f"{flag} must be in [{_NOISE_RANGE[0]:g}, {_NOISE_RANGE[1]:g}] for an audit (its "
                             f"privacy losses must fit float64), got {value:g}")
    checks = (("--rate", args.rate, lambda x: 0 < x <= 1, "in (0, 1]"),
              ("--steps", args.steps, lambda x: x >= 1, ">= 1"),
              ("--cell", args.cell, lambda x: x >= 1, ">= 1"),
              ("--m", args.m, lambda x: x >= 1, ">= 1"),
              ("--samples", args.samples, lambda x: x >= 1, ">= 1"),
              ("--alpha", args.alpha, lambda x: 1e-12 <= x < 1, _ALPHA_RANGE),
              ("--power", args.power, lambda x: 0 < x < 1, "in (0, 1)"),
              ("--violation", args.violation, lambda x: 0 < x < 1, "in (0, 1)"),
              ("--seed", args.seed, lambda x: x >= 0, ">= 0"))
    for flag, value, ok, allowed in checks:
        if value is not None and not (math.isfinite(value) and ok(value)):
            raise ValueError(f"{flag} must be {allowed}, got {value:g}")
    if args.epsilons is not None:
        _epsilons(args.epsilons)
    _check_plot(args)


def _check_plot(args) -> None:
    if args.plot is None:
        if args.overwrite:
            raise ValueError("--overwrite applies only with --plot PATH")
        return
    path = Path(args.plot)
    if path.suffix.lower() not in (".png", ".svg"):
        raise ValueError(f"--plot must name a .png or .svg file, got {args.plot!r}")
    if not path.parent.is_dir():
        raise ValueError(f"--plot {args.plot!r}: the folder {str(path.parent)!r} does not exist")
    if path.is_dir() or (path.exists() and not args.overwrite):
        raise ValueError(f"--plot {args.plot!r} already exists; pass --overwrite to replace it")
    if importlib.util.find_spec("matplotlib") is None:
        raise ValueError('--plot needs matplotlib: pip install "metadp[plot]"')


def _default_epsilons(args) -> List[float]:
    if args.mechanism == "dp-pix":  # below the claim, where its delta is positive, and at the claim (delta 0)
        claim = args.claim_epsilon if args.claim_epsilon is not None else args.epsilon
        if claim is not None and math.isfinite(claim) and claim > 0:
            return [f * claim for f in (0.25, 0.5, 0.75, 1.0)]
    return [0.5, 1.0, 2.0]


def _require(args, *flags):
    for flag in flags:
        if getattr(args, flag.strip("-").replace("-", "_")) is None:
            raise ValueError(f"{flag} is required for metadp verify {args.mechanism}")


def _claim_and_samplers(args):
    """(sample_d, sample_d_prime, claimed profile, description, alternative) for the mechanism.

    ``alternative`` is what the planner sizes the audit for, (words, true pair): the mechanism 20%
    noisier than claimed, for single mechanisms; None for pipelines (a delta excess, ``--violation``).
    """
    if args.mechanism in ("gaussian", "laplace"):  # one release of a single mechanism, sensitivity 1
        gaussian = args.mechanism == "gaussian"
        _require(args, "--noise" if gaussian else "--scale")
        true_value = args.noise if gaussian else args.scale
        claimed = args.claim_noise if gaussian else args.claim_scale
        claimed = true_value if claimed is None else claimed
        make = gaussian_pair if gaussian else LaplacePair
        true, claim = make(true_value), make(claimed)
        what = "noise" if gaussian else "scale"
        return (lambda k, rng: true.sample(k, rng, "P"), lambda k, rng: true.sample(k, rng, "Q"), claim.profile,
                f"{args.mechanism.capitalize()} mechanism, {what} {true_value:g}, claimed {claimed:g} (sensitivity 1, "
                "one release)", (f"{what} 20% below the claim", make(0.8 * claimed)))
    if args.mechanism == "plan":
        return _plan_pipeline(args)
    if args.mechanism == "dp-pix":
        return _dp_pix_pipeline(args)

    _require(args, "--noise", "--rate")
    claim_z = args.claim_noise if args.claim_noise is not None else args.noise
    steps = 1 if args.steps is None else args.steps
    pipeline = poisson_pipeline(args.rate, args.noise, steps)
    profile = accountant_profile(PldAccountant().compose(PoissonSampled(args.rate, Gaussian(claim_z)), steps))
    return (pipeline.sample_d, pipeline.sample_d_prime, profile,
            f"{pipeline.description}; claimed: PLD upper bound at noise {claim_z:g}", None)


def _dp_pix_pipeline(args):
    """DP-Pix on its worst-case pair of images (``dp_pix_pipeline``) against the PLD bound of the claim."""
    _require(args, "--epsilon", "--cell")
    b, m = args.cell, 1 if args.m is None else args.m
    claim = args.epsilon if args.claim_epsilon is None else args.claim_epsilon
    if args.partial_cell and b < 2:
        raise ValueError("--partial-cell needs --cell >= 2 (a 1-pixel grid has no partial cells)")
    side = b // 2 if args.partial_cell else b
    if not 1 <= m <= side * side:
        raise ValueError(f"--m must be in [1, {side * side}] (the pixels of one {side} x {side} cell), got {m}")
    pipe = dp_pix_pipeline(args.epsilon, b, m, partial_cell=bool(args.partial_cell))
    profile = accountant_profile(PldAccountant().compose(dp_pix_event(claim)))
    return (pipe.sample_d, pipe.sample_d_prime, profile,
            f"{pipe.description}; claimed: metadp's PLD bound for dp_pix_event({claim:g})",
            ("epsilon 25% above the claim (Laplace scale 20% below)", LaplacePair(0.8 / claim)))


def _plan_pipeline(args):
    """The plan's own unit view as a pipeline with a canary, and its certified profile as the claim."""
    plan = load_plan(args.file)
    view = plan.units()[0]
    step, s = view.events[0], plan.sampling
    if len(view.events) > 1 or plan.noise.mechanism != "gaussian" or plan.unit == "group":
        raise ValueError("metadp verify plan covers Gaussian plans with one record type (not groups or uneven units)")
    if not 1e-50 <= plan.noise.multiplier <= 1e50:  # as for --noise: the audit's log-ratios overflow outside it
        raise ValueError(f"noise.multiplier must be in [1e-50, 1e50] for an audit, got {plan.noise.multiplier:g} (outside "
                         "it the per-step log-likelihood ratios overflow float64)")
    shuffle = (s.population, s.batch_size) if s.scheme == "shuffle" else None
    try:  # banded noise: the correlated mechanism itself (its claim is the view's Gaussian or DP-SGD reduction)
        pipe = banded_pipeline(plan) if plan.noise.correlation == "banded" else pipeline_for(step, view.steps,
                                                                                            shuffle=shuffle)
    except NoPipelineError:
        raise ValueError(f"metadp verify plan: no pipeline for sampling.scheme = '{s.scheme}' yet") from None
    try:
        accountant = tightest_accountant(step, view.steps, relation=view.relation)
    except ValueError as err:
        raise ValueError(f"metadp verify plan: {err}") from None
    profile = accountant_profile(accountant)

    return (pipe.sample_d, pipe.sample_d_prime, profile,
            f"{plan.name}: {pipe.description}; claimed: metadp's {accountant.name.upper()} bound for the plan's "
            f"{view.unit} level", None)


def _progress(total: int, quiet: bool):
    if quiet:
        return None, None
    from tqdm import tqdm

    bar = tqdm(total=total, unit="draws", unit_scale=True, file=sys.stderr, desc="sampling", leave=False)

    def update(done: int, _total: int) -> None:
        bar.update(done - bar.n)

    return update, bar


def _audit_command(args) -> int:
    epsilons = _default_epsilons(args) if args.epsilons is None else _epsilons(args.epsilons)
    sample_d, sample_dp, profile, description, alternative = _claim_and_samplers(args)
    profile = cached_profile(profile)  # a PLD claim takes up to seconds an epsilon: evaluated once each
    plan = plan_audit(profile, epsilons, alternative, samples=args.samples, alpha=args.alpha, power=args.power,
                      violation=args.violation)
    seconds = check_resources(sample_d, sample_dp, args.samples, seed=args.seed, force_long=args.force_long)
    if not args.quiet and not args.json:
        print(f"auditing: {description}")
        print(f"{plan.line()}; running {args.samples:,} (about {_duration(seconds)} here)")
    if seconds > 600 and not args.json:
        print(f"metadp: note: this audit will take about {_duration(seconds)}", file=sys.stderr)
    update, bar = _progress(args.samples, args.quiet or args.json)
    try:
        result = audit(sample_d, sample_dp, profile, epsilons, n=args.samples, n_explore=explore_draws(args.samples),
                       alpha=args.alpha, rng=np.random.default_rng(args.seed), progress=update,
                       n_required=plan.n_required)
    finally:
        if bar is not None:
            bar.close()
    if args.plot:
        plot_audit(result, args.plot, claimed_profile=profile if args.mechanism != "poisson" else None)
    if args.json:
        out = result.to_dict()
        out.update(mechanism=args.mechanism, description=description, planner=plan.to_dict(),
                   estimated_seconds=seconds)
        print(json.dumps(out, indent=2, default=float))
        return _EXIT[result.verdict]
    print(result.to_table())
    delta = float(profile(np.array([max(epsilons)]))[0])
    print(f"implied lower bound on epsilon at delta = claimed delta at eps={max(epsilons):g}: "
          f"{format_lower(result.epsilon_lower(delta))} (confidence {1 - args.alpha:g}, rounded down)")
    print(plan.verdict_line(result))
    if args.plot:
        print(f"plot written to {args.plot}")
    return _EXIT[result.verdict]


def _duration(seconds: float) -> str:
    if seconds < 90:
        return f"{max(seconds, 1.0):.0f} s"
    return f"{seconds / 60:.0f} min" if seconds < 5400 else f"{seconds / 3600:.1f} h"


def run_verify(args, load_run_audit=None) -> int:
    """Runs ``metadp verify`` for parsed ``args`` and returns the exit status (module docstring).

    ``load_run_audit``: returns the module that runs ``metadp verify run`` (``metadp.verify.run_audit``, which
    needs torch: the CLI passes its torch gate).

    Raises:
        ValueError: on bad input (the CLI prints it as one line and exits 2), before anything is
            sampled or written.
    """
    _check_input(args)
    if args.crosscheck:
        table = (crosscheck_dp_event(args.crosscheck, args.delta) if args.crosscheck.lower().endswith(".json")
                 else crosscheck_plan(args.crosscheck))
        print(json.dumps(table.to_dict(), indent=2) if args.json else table.to_table())
        return {"all agree": 0, "DISAGREEMENT": 1}.get(table.verdict, 3)
    if args.mechanism == "run":
        if load_run_audit is None:
            raise ValueError("metadp verify run trains a model: run it through the metadp command, or call "
                             "metadp.verify.run_audit.run_audit_command")
        return load_run_audit().run_audit_command(args)
    return _audit_command(args)
