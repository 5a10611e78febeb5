"""Plot a plan's certified epsilon over training steps, per accountant and per privacy unit.

``plot_plan`` draws what ``metadp plan`` reports, as a curve: the certified epsilon (an upper bound)
at the plan's delta after t training steps, for log-spaced t up to the plan's steps.

* Left panel: the plan's own unit, one line per accountant that handles it (RDP, PLD), and the
  report's headline epsilon marked at the last step.
* Right panel, when the report has other units (a plan with a ``[[hierarchy]]`` reports the record
  level beside the task level, ``metadp.units``): one line per unit view, each with the accountant the
  report used for that unit.

Every point is a certified upper bound. The curves come from the accountants' ``trajectory`` (one
pass over many step counts); the point at the plan's steps is replaced by the report's epsilon for
that unit and accountant (where the report gives none, the full plan's epsilon computed as the report
computes it: ``compose(step, steps).get_epsilon(delta)``, the largest over a view's alternative
events), so each curve ends on the reported number. A trajectory and a full
computation can differ in the last digits (another PLD lattice spacing, another set of Renyi orders):
each point t is then lowered to the smallest bound at any t' >= t. That is still a certified bound,
because the optimal epsilon does not decrease with the number of steps (the first t outputs are a
post-processing of the first t' outputs), and it makes every curve non-decreasing. For the same
reason curves are drawn as staircases: between two computed step counts the level is the later
count's bound, which holds there too, so the drawn line is an upper bound at every step, not only at
the markers.

Training steps map to each unit's releases through ``metadp.units`` (the plan with ``steps = t``):
under shuffled passes a unit is released once per pass, so its curve is a staircase in steps.

matplotlib is optional (``pip install "metadp[plot]"``) and imported only when a plot is drawn. The
figure is rendered with the Agg canvas directly (no pyplot), so the caller's backend and global pyplot
state are untouched. Regenerate the documentation's figure with one command::

    python -m metadp.plan_plot docs/figures/plan_default.png --overwrite
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple, Union, cast

import numpy as np

from metadp.core.validation import check_count, check_delta
from metadp.plan_risk import view_risk
from metadp.accounting.certify import accountant_names, certify
from metadp.accounting.registry import ACCOUNTANTS
from metadp.accounting.rdp_accountant import UnsupportedEventError
from metadp.plan import Plan, default_plan, load_plan, plan_epsilon
from metadp.report import Report, format_upper
from metadp.sampling import Guarantee
from metadp.units import unit_views

__all__ = ["plot_plan"]

_FORMATS = {".png": "png", ".pdf": "pdf"}
_RELATION = {"add_remove": "add/remove", "substitute": "substitution"}


def require_matplotlib():
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError as exc:
        raise ValueError('plot_plan needs matplotlib, the optional "plot" extra: pip install "metadp[plot]" '
                         "(or pip install matplotlib)") from exc
    return Figure, FigureCanvasAgg


def check_plot_path(path, overwrite: bool) -> Tuple[Path, str]:
    path = Path(path)
    fmt = _FORMATS.get(path.suffix.lower())
    if fmt is None:
        raise ValueError(f"path must end in .png or .pdf, got {str(path)!r}")
    if path.exists() and not overwrite:
        raise ValueError(f"path {str(path)!r} already exists: pass overwrite=True (--overwrite) to replace it")
    if not path.parent.is_dir():
        raise ValueError(f"path {str(path)!r}: the folder {str(path.parent)!r} does not exist")
    return path, fmt


def _step_grid(steps: int, points: int) -> np.ndarray:
    """Log-spaced training step counts from 1 to ``steps`` (both included, at most ``points``)."""
    grid = np.round(np.geomspace(1, steps, min(points, steps))).astype(int)
    return np.unique(np.concatenate([grid, [steps]]))


def _releases(plan: Plan, view: Guarantee, grid: np.ndarray) -> List[int]:
    """The number of releases of ``view``'s step event after each training step count in ``grid``."""
    counts = []
    for t in grid:
        at_t = [v for v in unit_views(dataclasses.replace(plan, steps=int(t))) if v.unit == view.unit]
        if len(at_t) != 1 or at_t[0].events != view.events or at_t[0].relation != view.relation:
            raise RuntimeError(f"the {view.unit}-level view of {plan.name!r} changes its events with the number "
                               "of steps: it has no trajectory (please report this plan)")
        counts.append(cast(int, at_t[0].steps))  # (a plan's views count their charges)
    return counts


def _reported(report: Report, unit: str, name: str) -> Optional[float]:
    """The epsilon the report gives for ``unit`` with accountant ``name`` (None if it gives none)."""
    if unit == report.unit:
        found = [a["epsilon"] for a in report.alternatives if a["accountant"] == name]
        return found[0] if found else (report.epsilon if report.accountant == name else None)
    found = [o["epsilon"] for o in report.other_units if o["unit"] == unit and o["accountant"] == name]
    return found[0] if found else None


def _full_epsilon(name: str, view: Guarantee, delta: float) -> Tuple[float, List[str]]:
    """The certified epsilon of the whole view, as ``metadp.plan.plan_epsilon`` computes it (``certify``: the
    largest over the view's alternative events), with its notes."""
    found = certify(view.events, delta, steps=cast(int, view.steps), relation=view.relation, accountant=name).tightest
    return found.epsilon, [f"{view.unit}, {name.upper()}: {n}" for n in found.notes]


def _series(name: str, view: Guarantee, counts: Sequence[int], delta: float,
            final: Optional[float]) -> Tuple[np.ndarray, List[str]]:
    """Certified epsilon after each count of ``view``'s releases, ending on ``final`` (the full view's
    epsilon; computed when None), made non-decreasing (module docstring). Raises
    ``UnsupportedEventError`` when the accountant cannot handle the view."""
    out = np.zeros(len(counts))
    for event in view.events:  # alternatives (the worst record of a hierarchy): the largest bound holds
        values = ACCOUNTANTS[name](relation=view.relation).trajectory(counts, delta, step_event=event)
        out = np.maximum(out, np.asarray(values, dtype=np.float64))
    notes: List[str] = []
    if final is None:
        final, notes = _full_epsilon(name, view, delta)
    out[-1] = final
    return np.minimum.accumulate(out[::-1])[::-1], notes  # epsilon(t) <= epsilon(t') <= bound(t'), t <= t'


def _draw(ax, steps: np.ndarray, values: np.ndarray, label: str, notes: List[str], **style) -> None:
    """One curve; points that a log axis cannot show (0, inf) are left out and said so in ``notes``."""
    shown = np.isfinite(values) & (values > 0)
    if not shown.any():
        what = "epsilon = inf: no finite bound" if np.isinf(values).any() else "epsilon = 0 at every step count"
        notes.append(f"{label}: nothing to draw on a log axis ({what})")
        ax.plot([], [], " ", label=f"{label}: {what}")  # a legend entry, no line
        return
    if not shown.all():
        notes.append(f"{label}: {int((~shown).sum())} of {len(values)} points not drawn "
                     f"(epsilon 0 or inf, which a log axis cannot show)")
    # steps-pre: the level between two computed counts is the later one's bound, which holds there too
    ax.plot(steps[shown], values[shown], label=label, drawstyle="steps-pre", **style)


def _relation_label(unit: str, relation: str, group_size: Optional[int]) -> str:
    group = f" of {group_size}" if unit == "group" and group_size else ""
    return f"unit: {unit}{group}, relation: {_RELATION[relation]}"


def _left_panel(ax, plan, report, steps, series, delta, notes) -> None:
    styles = {"rdp": dict(color="tab:orange", ls="--"), "pld": dict(color="tab:blue", ls="-")}
    for name, values in series.items():
        _draw(ax, steps, values, f"{name.upper()} accountant", notes, marker=".", **styles.get(name, {}))
    if math.isfinite(report.epsilon) and report.epsilon > 0:
        ax.plot([plan.steps], [report.epsilon], "*", color="black", ms=12, zorder=5,
                label=f"plan: epsilon <= {format_upper(report.epsilon)} ({report.accountant.upper()}) "
                      f"after {plan.steps:,} steps")
    ax.set_title(f"certified upper bound on epsilon at delta = {delta:g}\n"
                 f"{_relation_label(plan.unit, plan.relation, plan.group_size)}", fontsize="medium")
    ax.set_ylabel("epsilon (certified upper bound)")


def _right_panel(ax, steps, units, delta, notes) -> None:
    for (unit, entry), color in zip(units.items(), ("tab:blue", "tab:red", "tab:green")):
        label = (f"{unit} ({_RELATION[entry['relation']]}, {entry['accountant'].upper()})"
                 + (", the plan's unit" if entry["primary"] else ""))
        _draw(ax, steps, np.asarray(entry["epsilon"]), label, notes, marker=".", color=color)
    ax.set_ylabel("epsilon (certified upper bound)")
    ax.set_title(f"certified upper bound on epsilon at delta = {delta:g}\nper privacy unit (unit, relation, "
                 "accountant)", fontsize="medium")


_TRADEOFF_FPRS = tuple(np.geomspace(1e-4, 0.5, 25))  # the trade-off panel's false-positive rates


def _tradeoff(views) -> Dict[str, Dict]:
    """{unit: {fpr, tpr, method}}: each unit's certified upper bound on the best membership test's TPR
    (``metadp.plan_risk.view_risk``), where one can be computed."""
    out = {}
    for view in views:
        found = view_risk(view.events, view.steps, view.relation, "pld", _TRADEOFF_FPRS) if view.events else None
        if found is not None:
            out[view.key] = {"fpr": found["fpr"], "tpr": found["tpr"], "method": found["method"],
                             "relation": view.relation, "tpr_lower": found.get("tpr_lower")}
    return out


def _tradeoff_panel(ax, curves: Dict[str, Dict]) -> None:
    for (unit, curve), color in zip(curves.items(), ("tab:blue", "tab:red", "tab:green")):
        ax.plot(curve["fpr"], curve["tpr"], marker=".", color=color,
                label=f"{unit} ({_RELATION[curve['relation']]}, {curve['method']})")
        if curve.get("tpr_lower") is not None:  # the bracket's lower end: a test on named datasets does this well
            ax.plot(curve["fpr"], curve["tpr_lower"], color=color, ls="--", lw=1.0, label=f"{unit}: certified lower end")
    fpr = np.asarray(_TRADEOFF_FPRS)
    ax.plot(fpr, fpr, color="gray", ls=":", label="random guessing (TPR = FPR)")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("false-positive rate")
    ax.set_ylabel("true-positive rate (certified bracket)")
    ax.set_title("best membership test against one unit\n(certified bracket on its TPR: upper solid, lower dashed)",
                 fontsize="medium")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize="small")


def _figure(plan, report, grid, series, units, delta, notes, curves=None):
    Figure, FigureCanvasAgg = require_matplotlib()
    from matplotlib.ticker import FuncFormatter, NullFormatter

    panels = (2 if units else 1) + (1 if curves else 0)
    fig = Figure(figsize=(6.0 * panels + 0.6, 4.8))
    FigureCanvasAgg(fig)
    axes = [fig.add_subplot(1, panels, i + 1) for i in range(panels)]
    _left_panel(axes[0], plan, report, grid, series, delta, notes)
    if units:
        _right_panel(axes[1], grid, units, delta, notes)
    if curves:
        _tradeoff_panel(axes[-1], curves)
        axes = axes[:-1]
    for ax in axes:
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("training steps")
        ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _: f"{x:,.0f}" if x >= 1 else f"{x:g}"))
        ax.yaxis.set_major_formatter(FuncFormatter(lambda y, _: f"{y:g}"))  # 0.5, not 5 x 10^-1
        lo, hi = ax.get_ylim()  # fewer than two powers of ten in view: label the minor ticks too
        few = math.floor(math.log10(hi)) - math.ceil(math.log10(lo)) + 1 < 2
        ax.yaxis.set_minor_formatter(FuncFormatter(lambda y, _: f"{y:g}") if few else NullFormatter())
        ax.grid(True, which="both", alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize="small")
    fig.suptitle(plan.name, fontsize="medium")
    fig.tight_layout()
    return fig


def plot_plan(plan: Plan, path: Union[str, Path], *, delta: Optional[float] = None, points: int = 40,
              accountants: Sequence[str] = ("rdp", "pld"), overwrite: bool = False,
              report: Optional[Report] = None, tradeoff: bool = True) -> Dict:
    """Draw the certified epsilon of ``plan`` over training steps and save it to ``path``.

    Each point is a certified upper bound on epsilon at ``delta`` for the unit and neighbouring relation
    named in the panel; each curve is non-decreasing and ends on the report's number for that unit and
    accountant (module docstring).

    Args:
        plan: a parsed plan (``metadp.plan.load_plan`` or ``default_plan``).
        path: the file to write; its suffix picks the format (``.png`` or ``.pdf``).
        delta: in (0, 1); default: the plan's delta.
        points: at most this many log-spaced step counts (>= 2), the plan's steps always included.
        accountants: the accountants drawn in the left panel; one that cannot handle the plan's unit is
            left out and named in ``skipped`` (never drawn from a fallback).
        overwrite: replace an existing file at ``path``.
        report: ``plan_epsilon(plan)`` at ``delta`` if the caller has it (``metadp plan --plot``), so it
            is not computed twice; its headline is marked and its accountant per unit is drawn.
        tradeoff: draw the last panel (each unit's certified trade-off; about 0.5 s a unit).

    Returns:
        A dict: ``steps`` (the training step counts), ``accountants`` ({name: epsilons} for the plan's
        unit), ``units`` ({unit: {relation, accountant, primary, releases, epsilon}}, the right panel;
        empty when the report has no other unit), ``report`` (the headline epsilon and accountant),
        ``skipped`` ({name: why}), ``notes``, ``delta``, ``unit``, ``relation``, ``path``, ``tradeoff``
        ({unit: {fpr, tpr, method}}: the last panel, each unit's certified upper bound on the best membership
        test's TPR over FPR from 1e-4 to 0.5, beside random guessing).

    Raises:
        ValueError: on a bad argument, an existing ``path`` without ``overwrite``, a ``report`` of another
            plan or delta, no accountant among ``accountants`` handling the plan's unit, or matplotlib
            missing.
    """
    if not isinstance(plan, Plan):
        raise ValueError(f"plan must be a metadp Plan, got {type(plan).__name__}")
    delta = plan.delta if delta is None else check_delta("delta", delta)
    points = check_count("points", points, minimum=2)
    names = accountant_names(accountants)
    path, fmt = check_plot_path(path, overwrite)
    _check_report(report, plan, delta)
    require_matplotlib()  # fail before the accounting, not after

    at_delta = dataclasses.replace(plan, delta=delta)
    report = report or plan_epsilon(at_delta)
    views = unit_views(at_delta)
    grid = _step_grid(plan.steps, points)
    releases = {v.unit: _releases(at_delta, v, grid) for v in views}
    notes: List[str] = []
    series, skipped = {}, {}
    for name in names:
        try:
            series[name], found = _series(name, views[0], releases[views[0].unit], delta,
                                          _reported(report, plan.unit, name))
            notes += found
        except UnsupportedEventError as err:
            skipped[name] = str(err)
    if not series:
        raise ValueError(f"no accountant among {names} handles the {plan.unit}-level view of {plan.name!r}: "
                         + "; ".join(f"{k}: {v}" for k, v in skipped.items()))
    units = _unit_series(views, report, series, releases, delta, notes) if report.other_units else {}

    curves = _tradeoff(views) if tradeoff else {}
    fig = _figure(plan, report, grid, series, units, delta, notes, curves)
    fig.savefig(path, format=fmt, dpi=120)
    return {
        "path": str(path), "delta": delta, "unit": plan.unit, "relation": plan.relation,
        "steps": [int(t) for t in grid],
        "accountants": {k: v.tolist() for k, v in series.items()},
        "units": {u: dict(e, epsilon=np.asarray(e["epsilon"]).tolist()) for u, e in units.items()},
        "report": {"epsilon": report.epsilon, "accountant": report.accountant},
        "skipped": skipped, "notes": notes, "tradeoff": curves,
    }


def _check_report(report, plan: Plan, delta: float) -> None:
    if report is None:
        return
    if not isinstance(report, Report):
        raise ValueError(f"report must be a metadp Report (plan_epsilon), got {type(report).__name__}")
    if (report.name, report.unit, report.steps, report.delta) != (plan.name, plan.unit, plan.steps, delta):
        raise ValueError(f"report is of {report.name!r} ({report.unit}, {report.steps} steps, delta "
                         f"{report.delta:g}), not of this plan at delta = {delta:g}: leave report out")


def _unit_series(views, report, series, releases, delta, notes) -> Dict[str, Dict]:
    """The right panel: every unit view with the accountant the report used for it."""
    used = {report.unit: report.accountant}
    used.update({o["unit"]: o["accountant"] for o in report.other_units})
    units = {}
    for view in views:
        if view.unit not in used:  # no accountant handles this view: the report leaves it out too
            notes.append(f"{view.unit}-level view not drawn: no accountant of the report handles it")
            continue
        name = used[view.unit]
        if view.primary and name in series:
            values = series[name]
        else:
            values, found = _series(name, view, releases[view.unit], delta, _reported(report, view.unit, name))
            notes += found
        units[view.unit] = {"relation": view.relation, "accountant": name, "primary": view.primary,
                            "releases": releases[view.unit], "epsilon": values}
    return units


def _main(argv=None) -> None:
    import argparse


    parser = argparse.ArgumentParser(prog="python -m metadp.plan_plot",
                                     description="Plot a plan's certified epsilon over training steps.")
    parser.add_argument("path", help="output file (.png or .pdf)")
    parser.add_argument("plan", nargs="?", help="TOML plan file (default: the built-in default plan)")
    parser.add_argument("--overwrite", action="store_true", help="replace an existing output file")
    args = parser.parse_args(argv)
    try:
        plan = load_plan(args.plan) if args.plan else default_plan()
        out = plot_plan(plan, args.path, overwrite=args.overwrite)
    except ValueError as err:  # bad input: the message and a non-zero exit, no traceback
        parser.error(str(err))
    print(f"wrote {out['path']}: epsilon <= {format_upper(out['report']['epsilon'])} (upper bound, "
          f"{out['report']['accountant'].upper()}) at delta = {out['delta']:g}, unit {out['unit']}, "
          f"relation {out['relation']}, after {out['steps'][-1]:,} steps")
    for line in [f"skipped {k}: {v}" for k, v in out["skipped"].items()] + out["notes"]:
        print(f"  note: {line}")


if __name__ == "__main__":
    _main()
