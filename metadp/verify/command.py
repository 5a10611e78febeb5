"""``metadp verify``: audit a claimed privacy profile against the mechanism's own samples, or cross-check
the accountants on a plan (DESIGN.md sec. 6). A thin layer over ``audit``, ``pipelines``, ``planner``
and ``crosscheck``; the CLI (``metadp.cli``) only parses arguments and calls ``run_verify``.

    metadp verify gaussian --noise 1 --epsilons 0.5,1,2 --plot verify.png
    metadp verify gaussian --noise 0.8 --claim-noise 1 --epsilons 0.5,1,2        (a positive control)
    metadp verify laplace --scale 1 --epsilons 0.5,1
    metadp verify dp-pix --epsilon 1 --cell 4 --m 1 --samples 200000
    metadp verify dp-pix --epsilon 1 --cell 4 --claim-epsilon 0.5 --samples 200000   (a positive control)
    metadp verify poisson --rate 0.01 --noise 1 --steps 10 --epsilons 1,2
    metadp verify plan examples/dp_maml_record_episodic.toml --samples 100000
    metadp verify --crosscheck examples/dp_sgd_mnist.toml
"""

from __future__ import annotations

import json
import math
import sys
from typing import List, Optional

import numpy as np

__all__ = ["add_verify_parser", "run_verify"]

_EXAMPLES = ("examples:\n  metadp verify gaussian --noise 1 --epsilons 0.5,1,2 --plot verify.png\n"
             "  metadp verify gaussian --noise 0.8 --claim-noise 1 --epsilons 0.5,1,2\n"
             "  metadp verify laplace --scale 1 --epsilons 0.5,1\n"
             "  metadp verify dp-pix --epsilon 1 --cell 4 --m 1 --samples 200000\n"
             "  metadp verify dp-pix --epsilon 1 --cell 4 --claim-epsilon 0.5 --samples 200000\n"
             "  metadp verify poisson --rate 0.01 --noise 1 --steps 10 --epsilons 1,2\n"
             "  metadp verify plan examples/dp_fedmeta_one_pass_shuffle.toml --epsilons 2,4 --samples 100000\n"
             "  metadp verify --crosscheck examples/dp_sgd_mnist.toml")


def add_verify_parser(sub, number, formatter) -> None:
    """Adds the ``verify`` subcommand to the CLI's subparsers (``number(flag, kind)`` parses numbers)."""
    v = sub.add_parser("verify", help="audit a claimed privacy profile on the mechanism's samples, or cross-check a plan",
                       epilog=_EXAMPLES, formatter_class=formatter)
    v.add_argument("mechanism", nargs="?", choices=("gaussian", "laplace", "dp-pix", "poisson", "plan"),
                   help="the mechanism to run (true parameters below; the claim defaults to the same), or 'plan FILE': "
                        "the plan's sampled, composed pipeline with a canary against the plan's certified profile")
    v.add_argument("file", nargs="?", help="plan: the TOML plan file")
    v.add_argument("--crosscheck", metavar="PLAN", help="run every accountant and library on a plan file and compare")
    v.add_argument("--noise", type=number("--noise", float), help="true Gaussian noise multiplier")
    v.add_argument("--claim-noise", type=number("--claim-noise", float), help="claimed noise multiplier (default: --noise)")
    v.add_argument("--scale", type=number("--scale", float), help="true Laplace scale (sensitivity 1)")
    v.add_argument("--claim-scale", type=number("--claim-scale", float), help="claimed Laplace scale (default: --scale)")
    v.add_argument("--epsilon", type=number("--epsilon", float), help="dp-pix: true DP-Pix epsilon")
    v.add_argument("--claim-epsilon", type=number("--claim-epsilon", float),
                   help="dp-pix: claimed epsilon (default: --epsilon)")
    v.add_argument("--cell", type=number("--cell", int), help="dp-pix: cell side b in pixels")
    v.add_argument("--m", type=number("--m", int), default=1,
                   help="dp-pix: pixel values the neighbours differ in, all in one cell, <= b^2 (default 1)")
    v.add_argument("--partial-cell", action="store_true",
                   help="dp-pix: change pixels of the partial r x r corner cell (r = b // 2) of a (b + r)-pixel "
                        "square image instead of a full cell (checks the edge calibration; needs m <= r^2)")
    v.add_argument("--rate", type=number("--rate", float), help="poisson: sampling rate (true and claimed)")
    v.add_argument("--steps", type=number("--steps", int), default=1, help="poisson: composed steps (default 1)")
    v.add_argument("--epsilons", help="comma-separated epsilon grid (default 0.5,1,2; dp-pix: 0.25, 0.5, 0.75 and 1 "
                                      "times the claimed epsilon)")
    v.add_argument("--samples", type=number("--samples", int), default=1_000_000,
                   help="confirmation draws per side (default 1,000,000)")
    v.add_argument("--alpha", type=number("--alpha", float), default=0.01, help="family-wise error level (default 0.01)")
    v.add_argument("--violation", type=number("--violation", float),
                   help="planner: the delta excess to detect at the middle epsilon (default: 10%% of the claim, "
                        "at least 1e-4); gaussian plans for noise 20%% below the claim instead")
    v.add_argument("--seed", type=number("--seed", int), default=0, help="random seed (default 0)")
    v.add_argument("--plot", metavar="PATH", help="write the claimed-vs-empirical plot (.png or .svg)")
    v.add_argument("--json", action="store_true", help="print the result as JSON")
    v.add_argument("--quiet", action="store_true", help="no plan line and no progress bar")


def _epsilons(text: str) -> List[float]:
    try:
        values = [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise ValueError(f"--epsilons must be comma-separated numbers, got {text!r}") from None
    if not values:
        raise ValueError("--epsilons must list at least one epsilon")
    return values


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
    """(sample_d, sample_d_prime, claimed profile, description, planning note) for the mechanism."""
    from metadp.mechanisms.gaussian import gaussian_pair
    from metadp.mechanisms.laplace import LaplacePair

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
                "one release)", claimed if gaussian else None)
    if args.mechanism == "plan":
        return _plan_pipeline(args)
    if args.mechanism == "dp-pix":
        return _dp_pix_pipeline(args)
    from metadp.accounting import Gaussian, PoissonSampled
    from metadp.accounting.pld import PldAccountant
    from metadp.verify.pipelines import poisson_pipeline

    _require(args, "--noise", "--rate")
    claim_z = args.claim_noise if args.claim_noise is not None else args.noise
    pipeline = poisson_pipeline(args.rate, args.noise, args.steps)
    accountant = PldAccountant().compose(PoissonSampled(args.rate, Gaussian(claim_z)), args.steps)

    def profile(eps):
        return np.array([accountant.get_delta(float(e)) for e in np.atleast_1d(eps)])

    return (pipeline.sample_d, pipeline.sample_d_prime, profile,
            f"{pipeline.description}; claimed: PLD upper bound at noise {claim_z:g}", None)


def _dp_pix_pipeline(args):
    """DP-Pix on a neighbouring pair of images; the statistic is the released value of the changed cell.

    D is a black image, D' the same with m pixel values set to 1 in one cell (all of them in one cell
    is the worst case: the cell mean moves by m / s, its noise scale is m / (s eps), so the loss
    reaches eps). The other cells are identical in law under D and D' and are left out. The release
    is clipped to [0, 1], which keeps the half-lines {x < t}, 0 < t <= m / s, that attain the profile.
    """
    from metadp.accounting.pld import PldAccountant
    from metadp.mechanisms.image import dp_pix, dp_pix_event

    _require(args, "--epsilon", "--cell")
    eps, b, m = args.epsilon, args.cell, args.m
    claim = eps if args.claim_epsilon is None else args.claim_epsilon
    for flag, value in (("--epsilon", eps), ("--claim-epsilon", claim)):
        if not (math.isfinite(value) and value > 0):
            raise ValueError(f"{flag} must be a finite number > 0, got {value:g}")
    if b < 1:
        raise ValueError(f"--cell must be >= 1, got {b}")
    if args.partial_cell:
        if b < 2:
            raise ValueError("--partial-cell needs --cell >= 2 (a 1-pixel grid has no partial cells)")
        side, top = b // 2, b  # the corner cell: rows and columns b .. b + side - 1
        size = b + side
    else:
        side, top, size = b, 0, 2 * b
    if not 1 <= m <= side * side:
        raise ValueError(f"--m must be in [1, {side * side}] (the pixels of one {side} x {side} cell), got {m}")
    image = np.zeros((size, size))
    neighbour = image.copy()
    for i in range(m):
        neighbour[top + i // side, top + i % side] = 1.0

    def sampler(base):
        def draw(k, rng):
            out = np.empty(k)
            for start in range(0, k, 1 << 16):  # bounded memory: 65,536 images per call
                count = min(1 << 16, k - start)
                batch = np.broadcast_to(base, (count,) + base.shape)
                out[start:start + count] = dp_pix(batch, eps, b, m, rng=rng)[:, top, top]
            return out
        return draw

    accountant = PldAccountant().compose(dp_pix_event(claim))

    def profile(e):
        return np.array([accountant.get_delta(float(x)) for x in np.atleast_1d(e)])

    where = f"the {side}x{side} partial corner cell" if args.partial_cell else f"one {b}x{b} cell"
    return (sampler(image), sampler(neighbour), profile,
            f"DP-Pix, epsilon {eps:g}, cell {b}, m {m}: the released value of {where} of a {size}x{size} image, "
            f"{m} pixel value(s) 0 -> 1; claimed: metadp's PLD bound for dp_pix_event({claim:g})", None)


def _plan_pipeline(args):
    """The plan's own unit view as a pipeline with a canary, and its certified profile as the claim."""
    from metadp.accounting import events as ev
    from metadp.accounting.calibration import ACCOUNTANTS
    from metadp.accounting.rdp_accountant import UnsupportedEventError
    from metadp.plan import load_plan
    from metadp.verify import pipelines as pl

    if not args.file:
        raise ValueError("metadp verify plan needs a plan file")
    plan = load_plan(args.file)
    view = plan.units()[0]
    step, s = view.events[0], plan.sampling
    if len(view.events) > 1 or plan.noise.mechanism != "gaussian" or plan.unit == "group":
        raise ValueError("metadp verify plan covers Gaussian plans with one record type (not groups or uneven units)")
    if isinstance(step, ev.PoissonSampled):
        pipe = pl.poisson_pipeline(step.rate, step.inner.noise_multiplier, view.steps)
    elif isinstance(step, ev.FixedSizeSampled):
        pipe = pl.fixed_size_pipeline(step.batch, step.population, step.inner.noise_multiplier, view.steps)
    elif isinstance(step, ev.EpisodicSampled):
        pipe = pl.episodic_pipeline(step.episodes, step.unit_rate, step.within_rate, step.inner.noise_multiplier,
                                    view.steps, shift=step.shift, reveal_unit=step.unit_rate < 1.0)
    elif s.scheme == "shuffle":
        pipe = pl.shuffle_pipeline(s.population, s.batch_size, plan.noise.multiplier, view.steps, background=-1.0)
    else:
        raise ValueError(f"metadp verify plan: no pipeline for sampling.scheme = '{s.scheme}' yet")
    for name in ("pld", "rdp"):  # the tightest accountant that reads the step
        try:
            accountant = ACCOUNTANTS[name](relation=view.relation).compose(step, view.steps)
            break
        except UnsupportedEventError:
            continue
    else:
        raise ValueError(f"metadp verify plan: no accountant can analyse {step.describe()}")

    def profile(eps):
        return np.array([accountant.get_delta(float(e)) for e in np.atleast_1d(eps)])

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


def _plan_line(args, epsilons, profile, claim_z) -> str:
    """The planner's sample size for this audit, printed before sampling starts."""
    from metadp.verify.planner import gaussian_audit_plan, samples_needed

    middle = sorted(epsilons)[len(epsilons) // 2]
    tests = len(epsilons)
    how = f"power 0.9, alpha {args.alpha:g}, {tests} tests, best event known; exploration adds n/10"
    if claim_z is not None and args.violation is None:
        need = gaussian_audit_plan(0.8 * claim_z, claim_z, middle, alpha=args.alpha, tests=tests)
        return f"planner: {need:,} draws per side detect noise 20% below the claim at eps={middle:g} ({how}); " \
               f"running {args.samples:,}"
    claimed = float(np.asarray(profile(np.array([middle])))[0])
    excess = args.violation if args.violation is not None else max(0.1 * claimed, 1e-4)
    if claimed + excess >= 1.0:
        return "planner: the claim leaves no room for a violation of that size at the middle epsilon"
    need = samples_needed(profile, middle, excess, alpha=args.alpha, tests=tests)
    return (f"planner: {need:,} draws per side detect a true delta {excess:.3g} above the claim ({claimed:.3g}) at "
            f"eps={middle:g}, whatever event attains it ({how}); running {args.samples:,}")


def _audit_command(args) -> None:
    from metadp.verify.audit import audit

    epsilons = _default_epsilons(args) if args.epsilons is None else _epsilons(args.epsilons)
    sample_d, sample_dp, profile, description, claim_z = _claim_and_samplers(args)
    if not args.quiet and not args.json:
        print(f"auditing: {description}")
        print(_plan_line(args, epsilons, profile, claim_z))
    update, bar = _progress(args.samples, args.quiet or args.json)
    try:
        result = audit(sample_d, sample_dp, profile, epsilons, n=args.samples, alpha=args.alpha,
                       rng=np.random.default_rng(args.seed), progress=update)
    finally:
        if bar is not None:
            bar.close()
    if args.plot:
        from metadp.verify.plot import plot_audit

        plot_audit(result, args.plot, claimed_profile=profile if args.mechanism != "poisson" else None)
    if args.json:
        out = result.to_dict()
        out["mechanism"], out["description"] = args.mechanism, description
        print(json.dumps(out, indent=2, default=float))
        return
    print(result.to_table())
    print(f"implied lower bound on epsilon at delta = claimed delta at eps={max(epsilons):g}: "
          f"{result.epsilon_lower(float(profile(np.array([max(epsilons)]))[0])):.4g} (confidence {1 - args.alpha:g})")
    if args.plot:
        print(f"plot written to {args.plot}")


def run_verify(args) -> None:
    """Runs ``metadp verify`` for parsed ``args`` (ValueError on bad input: the CLI prints one line)."""
    if args.file and args.mechanism != "plan":
        raise ValueError(f"a file argument goes with 'metadp verify plan FILE', not with {args.mechanism or '--crosscheck'}")
    if args.crosscheck and args.mechanism:
        raise ValueError("give either a mechanism to audit or --crosscheck PLAN, not both")
    if args.crosscheck:
        from metadp.verify.crosscheck import crosscheck_plan

        table = crosscheck_plan(args.crosscheck)
        print(json.dumps(table.to_dict(), indent=2) if args.json else table.to_table())
        return
    if not args.mechanism:
        raise ValueError("metadp verify needs a mechanism (gaussian, laplace, dp-pix, poisson, plan FILE) or "
                         "--crosscheck PLAN")
    if not math.isfinite(args.samples) or args.samples < 1:
        raise ValueError(f"--samples must be >= 1, got {args.samples}")
    _audit_command(args)
