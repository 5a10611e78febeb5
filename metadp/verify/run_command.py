"""``metadp verify run ALGO --plan FILE --data NAME --canaries M [--canary-kind gradient|data] [--view record]``:
audit a real training run with canaries (``metadp.verify.canaries``; torch, loaded only when the command runs;
gradient canaries by default, ``metadp.verify.gradient_canaries``). Exit status: 0 consistent,
1 VIOLATION (the empirical lower bound exceeds the run's certified epsilon; for a ``--plant-defect``
control, that is the control being caught), 2 bad input.
"""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path

from metadp.plan import load_plan
from metadp.verify.canary_bounds import check_audit_plan
from metadp.report import format_lower
from metadp.training.run.size import check_run_size, plan_run_size

__all__ = ["add_run_arguments", "check_run_input", "RUN_FLAGS", "plot_canary_audits"]

DEFECT_NAMES = ("low-noise", "no-clipping", "fixed-order")  # metadp.verify.canaries.DEFECTS (torch-free copy)
SUPPORT_DEFECT = "second-order"  # metadp.verify.support_canaries.DEFECT (torch-free copy)
KIND_NAMES = ("gradient", "data")  # metadp.verify.canaries.KINDS (torch-free copy)
ALGORITHMS = ("dp-maml", "dp-agr", "dp-maml-sample")
RUN_FLAGS = ("--plan", "--data", "--canaries", "--view", "--canary-kind", "--plant-defect", "--outer-lr", "--hidden",
             "--inner-lr", "--inner-noise", "--inner-steps")
SUPPORT_ONLY = ("--inner-lr", "--inner-noise", "--inner-steps")


def add_run_arguments(v, number) -> None:
    v.add_argument("--plan", metavar="FILE", help="run: the plan file the audited run trains (Poisson task sampling)")
    v.add_argument("--data", help="run: the data set (sinusoid)")
    v.add_argument("--canaries", type=number("--canaries", int), help="run: M canaries, each included with "
                   "probability 1/2 (a whole task at --view task, one record inside a task at --view record)")
    v.add_argument("--view", choices=("task", "record"), help="run: the privacy unit audited (default task)")
    v.add_argument("--canary-kind", choices=KIND_NAMES, help="run: gradient (default): Dirac canaries, each a pool "
                   "row whose contribution before the trainer's clip is a fixed vector along one parameter coordinate "
                   "(at --view record: + it with the record, - it without); data: a whole sinusoid task (--view task) "
                   "or one support record (--view record)")
    v.add_argument("--plant-defect", choices=DEFECT_NAMES + (SUPPORT_DEFECT,), help="run: a CONTROL, for testing the "
                   "audit: plant a defect (noise 5x below the ledger's, clipping off, a fixed order instead of Poisson "
                   "sampling; for dp-maml-sample, second-order: second-order meta-gradients accounted as first-order, "
                   "docs/findings.md, Finding 4); the run's guarantee is then void and the audit should flag it")
    v.add_argument("--inner-lr", type=number("--inner-lr", float), help="run, dp-maml-sample: the inner learning rate "
                   "(default 1)")
    v.add_argument("--inner-noise", type=number("--inner-noise", float), help="run, dp-maml-sample: the inner noise "
                   "multiplier z_in (default 40: the support record's claim must be below what M canaries can show)")
    v.add_argument("--inner-steps", type=number("--inner-steps", int), help="run, dp-maml-sample: the inner DP-SGD "
                   "steps S (default 1)")
    v.add_argument("--outer-lr", type=number("--outer-lr", float), help="run: the meta-learning rate (default: "
                   "the algorithm's)")
    v.add_argument("--hidden", type=number("--hidden", int), help="run: the sinusoid MLP's hidden width, 1-W-W-1 "
                   "(default 40, the trainer's model; 16 for dp-maml-sample)")


def check_run_input(args) -> None:
    """Refusals of ``metadp verify run`` that need no training (ValueError naming the flag)."""
    if args.mechanism != "run":
        for flag in RUN_FLAGS:
            if getattr(args, flag[2:].replace("-", "_")) is not None:
                raise ValueError(f"{flag} applies to metadp verify run, not to {args.mechanism or '--crosscheck'}")
        return
    if args.file not in ALGORITHMS:
        raise ValueError(f"metadp verify run needs an algorithm: one of {', '.join(ALGORITHMS)} (e.g. metadp verify run "
                         f"dp-maml --plan FILE --data sinusoid --canaries 100), got {args.file!r}")
    support = args.file == "dp-maml-sample"
    if support:
        if (args.view or "record") != "record" or (args.canary_kind or "data") != "data":
            raise ValueError("metadp verify run dp-maml-sample audits support records: --view record --canary-kind data "
                             "(the defaults for it)")
        if args.plant_defect not in (None, SUPPORT_DEFECT):
            raise ValueError(f"--plant-defect {args.plant_defect} applies to dp-maml and dp-agr; dp-maml-sample's "
                             f"control is {SUPPORT_DEFECT}")
        for flag, low, high in (("--inner-lr", 0.0, 1e4), ("--inner-noise", 1e-50, 1e50)):
            value = getattr(args, flag[2:].replace("-", "_"))
            if value is not None and not (math.isfinite(value) and low < value <= high):
                # (1e-300 divided by zero in the run's accounting, after training had started)
                raise ValueError(f"{flag} must be in ({low:g}, {high:g}], got {value:g}")
        if args.inner_steps is not None and not 1 <= args.inner_steps <= 100:
            raise ValueError(f"--inner-steps must be in [1, 100], got {args.inner_steps}")
    else:
        if args.plant_defect == SUPPORT_DEFECT:
            raise ValueError(f"--plant-defect {SUPPORT_DEFECT} is dp-maml-sample's control (metadp verify run "
                             "dp-maml-sample ...)")
        for flag in SUPPORT_ONLY:
            if getattr(args, flag[2:].replace("-", "_")) is not None:
                raise ValueError(f"{flag} applies to metadp verify run dp-maml-sample, not to {args.file}")
    for flag in ("--plan", "--data", "--canaries"):
        if getattr(args, flag[2:]) is None:
            raise ValueError(f"{flag} is required for metadp verify run")
    if args.data != "sinusoid":
        raise ValueError(f"--data must be sinusoid for metadp verify run (the canary tasks are sinusoids), got "
                         f"{args.data!r}")
    if not Path(args.plan).is_file():
        raise ValueError(f"--plan {args.plan!r}: no such file")
    try:
        plan = load_plan(Path(args.plan))
    except ValueError as err:
        raise ValueError(f"--plan: {err}") from None
    check_audit_plan(plan, args.canaries)
    size = plan_run_size(plan, "sinusoid", args.inner_steps or 1)
    check_run_size(size, force_long=args.force_long, steps_name="the plan's steps", pool_name="sampling.population",
                   batch_name="its tasks a step (sampling.batch_size or rate)")
    args.run_size = size
    if args.hidden is not None and not 1 <= args.hidden <= 4096:
        raise ValueError(f"--hidden must be in [1, 4096], got {args.hidden}")
    width = args.hidden or 40
    parameters = width * width + 4 * width + 1  # the 1-W-W-1 MLP's parameters
    if not support and (args.canary_kind or "gradient") == "gradient" and args.canaries > parameters:
        raise ValueError(f"--canaries: gradient canaries take one parameter coordinate each, at most {parameters} with "
                         f"--hidden {width}, got {args.canaries} (use a wider --hidden or --canary-kind data)")
    if args.outer_lr is not None and not (math.isfinite(args.outer_lr) and 0 < args.outer_lr <= 1e4):
        # (1e300 overflowed torch's float32 after training had started)
        raise ValueError(f"--outer-lr must be in (0, 10000], got {args.outer_lr:g}")
    if importlib.util.find_spec("torch") is None:
        raise ValueError('metadp verify run trains a model: install torch (pip install torch==2.13.0, then '
                         '"metadp[train]")')
    args.loaded_plan = plan


def audit_table(r: dict) -> str:
    """The audit as text: the certified upper bound beside the empirical lower bound (rounded down)."""
    cert = r["certified"]
    lines = [f"one-run canary audit of metadp train {r['algorithm']} --plan {r.get('plan_file', r['plan'])} "
             f"({r['view']} level)"]
    if r["control"] is not None:
        c = r["control"]
        lines.append(f"  CONTROL: planted defect '{c['defect']}' ({c['what']}); the certified epsilon below does not "
                     "hold for this run")
    lines += [f"  canaries      {r['canaries']:,} {r.get('canary_kind', 'data')} canaries ({r['canaries_included']:,} "
              f"included, each with probability 1/2), {r['steps']:,} steps",
              f"  certified     epsilon <= {cert['epsilon_display'] or 'none'} (upper bound, {str(cert['accountant']).upper()}) "
              f"at delta = {r['delta']:g}" + (f", neighbours: {cert['relation']}" if cert.get("relation") else "")
              + (f"; the claim: {cert['claim']}" if cert.get("claim") else "")]
    for b in r.get("record_bounds", ()):
        run = f"; {b['note']}" if b.get("note") else ("; the run's record view" if b["certified_by_the_run"] else "")
        lines.append(f"    record bound, {b['bound']:<22} epsilon <= {b['epsilon_display']} (upper bound, "
                     f"{b['accountant'].upper()}: {b['event']}{run})")
    lines.append(f"  empirical     epsilon >= {r['epsilon_lower_display']} (lower bound at confidence "
                 f"{r['confidence']:g}, rounded down; {r['tests']} tests, Bonferroni)")
    for s in r["scorers"]:
        lines.append(f"    {s['scorer']:<11} {s['correct']}/{s['guesses']} guesses correct (top and bottom {s['k']}): "
                     f"epsilon >= {format_lower(s['epsilon_lower'])}")
    fdp = r.get("fdp")
    if fdp is not None:
        gauss = fdp["gaussian"]
        lines.append(f"  f-DP          mu >= {format_lower(gauss['mu_lower'])}, epsilon >= "
                     f"{format_lower(gauss['epsilon_lower'])} at delta = {r['delta']:g} (Gaussian trade-off, Mahloujifar "
                     f"et al. 2024; a lower bound only if the run's curve is Gaussian; {gauss['tests']} tests)")
        claim = fdp.get("claim")
        if claim is not None:
            lines.append(f"    the claim as a curve: p = {claim['p_value']:.3g} for the certified trade-off curve "
                         f"({claim['scorer']}, {claim['correct']}/{claim['guesses']} correct; level {claim['level']:.3g}, "
                         f"{claim['tests']} tests){': REJECTED' if claim['flagged'] else ''}")
        if gauss["epsilon_lower"] > r["epsilon_lower"]:
            lines.append("    the f-DP figure is the tighter of the two empirical ones here (under its Gaussian "
                         "assumption)")
    if r.get("level_shared"):
        lines.append(f"  the verdict's two tests (epsilon and curve) each run at half the level: confidence "
                     f"{r['confidence']:g} in all")
    if r["control"] is not None and "predicted_power" in r["control"]:
        lines.append(f"  predicted power to flag this control: {r['control']['predicted_power']:.2f} (idealised game)")
    verdict = r["verdict"]
    if r["control"] is not None:
        verdict += " (control caught)" if verdict == "VIOLATION" else " (control MISSED)"
    lines.append(f"verdict: {verdict}")
    lines.append(f"method: {r['method']}")
    return "\n".join(lines)


def plot_canary_audits(results, path, title: str = "One-run canary audits of real training runs") -> None:
    """Certified epsilon (upper bound) and the empirical lower bound of each audit, one row each."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    height = 1.6 + 0.55 * len(results)
    fig, ax = plt.subplots(figsize=(7.5, height))
    colour = {"VIOLATION": "tab:red", "consistent": "tab:green"}
    for i, r in enumerate(results):
        ax.barh(i, r["epsilon_lower"], color=colour[r["verdict"]], alpha=0.7)
        if r["certified"]["epsilon"] is not None:
            ax.plot([r["certified"]["epsilon"]] * 2, [i - 0.4, i + 0.4], color="k", lw=2)
        ax.text(max(r["epsilon_lower"], r["certified"]["epsilon"] or 0) + 0.05, i, f"{r['verdict']}", va="center",
                fontsize=8)
    ax.set_yticks(range(len(results)), [
        f"{r['view']}, {r.get('canary_kind', 'data')}: " + (f"control {r['control']['defect']}" if r["control"]
                                                             else "correct run")
        for r in results])
    handles: list = [Line2D([], [], color="k", lw=2, label="certified upper bound")]
    handles += [Patch(color=colour[v], alpha=0.7, label=f"empirical lower bound ({v})")
                for v in colour if any(r["verdict"] == v for r in results)]
    widest = max(max(r["epsilon_lower"], r["certified"]["epsilon"] or 0) for r in results)
    if max((r["certified"]["epsilon"] or 0) for r in results) > 10:  # a record bound beside task bounds
        ax.set_xscale("symlog", linthresh=1.0)
        ax.set_xlim(0, 3 * widest)
    else:
        ax.set_xlim(0, 1.25 * max(widest, 0.1))  # room for the verdicts
    ax.set_xlabel(f"epsilon (delta = {results[0]['delta']:g}; lower bounds at confidence {results[0]['confidence']:g})")
    ax.set_title(title, fontsize=10)
    fig.legend(handles=handles, loc="lower center", ncol=len(handles), fontsize=8, frameon=False)
    fig.tight_layout(rect=(0, 0.35 / height, 1, 1))  # room for the legend below the axes
    fig.savefig(path, dpi=120)
    plt.close(fig)
