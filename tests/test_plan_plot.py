"""``plot_plan``: the figure is written, and its series are the certified numbers of the plan.

Plans: the built-in default (what ``metadp plan`` uses with no file: task-level DP-MAML with a
hierarchy, so the report also gives the record level, which only the PLD accountant reads), the
DP-SGD example (14,040 steps, one unit) and the shuffled one-pass example (each unit is released once
per pass). The fixed-batch example checks that an accountant that cannot read a plan (PLD, for
fixed-size sampling) is skipped, not drawn.

What is asserted, and why it is a theorem rather than a coincidence:

* each curve ends on the full plan's epsilon computed independently, one fresh accountant per
  (unit, accountant): ``compose(step, steps).get_epsilon(delta)``, the largest over the view's
  alternative events, as ``plan_epsilon`` does. The PLD accountant stops refining its lattice after
  ``max_seconds``; on a loaded machine two computations of one plan can then stop at different
  spacings and differ by up to its tolerance (both still certified). Only then is the equality
  replaced by the theorem below;
* every upper bound (RDP or PLD) is >= PLD's certified lower bound on the optimal epsilon at the same
  number of steps: both bound the same number from either side;
* curves are non-decreasing in steps (the module makes them so, by a step that keeps them certified).

Nothing here assumes RDP >= PLD: both are upper bounds, neither dominates by construction.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np
import pytest

from metadp.accounting.registry import ACCOUNTANTS
from metadp.core import events as ev
from metadp.accounting.pld import PldAccountant
from metadp.plan import default_plan, load_plan, plan_epsilon
from metadp.plan_plot import plot_plan

matplotlib = pytest.importorskip("matplotlib")

ROOT = Path(__file__).resolve().parents[1]
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
PLANS = {
    "default": default_plan,
    "dp_sgd": lambda: load_plan(ROOT / "examples" / "dp_sgd_mnist.toml"),
    "one_pass_shuffle": lambda: load_plan(ROOT / "examples" / "dp_fedmeta_one_pass_shuffle.toml"),
}
_CACHE = {}


def _plotted(key, tmp_path_factory):
    """(plan, report, plot_plan's dict, the PNG path), computed once per plan for the whole module."""
    if key not in _CACHE:
        plan = PLANS[key]()
        path = tmp_path_factory.mktemp("plots") / f"{key}.png"
        report = plan_epsilon(plan)
        # both ways; the trade-off panel on the default plan's two units (its own test covers one unit's curve)
        out = plot_plan(plan, path, report=report if key == "default" else None, tradeoff=key == "default")
        _CACHE[key] = (plan, report, out, path)
    return _CACHE[key]


@pytest.fixture(params=[pytest.param(k, marks=pytest.mark.slow) if k == "default" else k for k in PLANS])
def plotted(request, tmp_path_factory):  # the default plan's two units (~20 s of PLD) under -m slow
    return _plotted(request.param, tmp_path_factory)


def _independent(plan, unit, name):
    """(epsilon, certified lower bound or None, notes) of the whole plan for ``unit`` with fresh accountants."""
    view = next(v for v in plan.units() if v.unit == unit)
    values, lowers, notes = [], [], []
    for event in view.events:
        acc = ACCOUNTANTS[name](relation=view.relation).compose(event, view.steps)
        if name == "pld":
            bounds = acc.get_epsilon_bounds(plan.delta)
            values.append(bounds.epsilon_upper)
            lowers.append(bounds.epsilon_lower)
            notes += bounds.notes
        else:
            values.append(acc.get_epsilon(plan.delta))
    return max(values), (max(lowers) if lowers else None), notes


def _all_series(out):
    series = {("accountant", k): v for k, v in out["accountants"].items()}
    series.update({("unit", u): e["epsilon"] for u, e in out["units"].items()})
    return series


# -- the file ------------------------------------------------------------------------------------

def test_writes_a_png_that_matplotlib_reads_back(plotted):
    _, _, out, path = plotted
    assert out["path"] == str(path)
    assert path.read_bytes()[:8] == PNG_SIGNATURE
    image = matplotlib.image.imread(path)
    assert image.ndim == 3 and image.shape[0] > 200 and image.shape[1] > 400
    assert image.std() > 0.01  # something is drawn


def test_a_units_panel_exactly_when_the_report_has_other_units_and_a_tradeoff_panel(plotted):
    plan, report, out, path = plotted
    width = matplotlib.image.imread(path).shape[1]
    panels = (2 if report.other_units else 1) + (1 if out["tradeoff"] else 0)
    assert abs(width - (6.0 * panels + 0.6) * 120) < 30  # 6 inches a panel at 120 dpi
    if report.other_units:
        assert set(out["units"]) == {plan.unit} | {o["unit"] for o in report.other_units}
    else:
        assert out["units"] == {}
    if out["tradeoff"]:  # drawn (the default plan here): a curve for every unit the report has
        assert set(out["tradeoff"]) == {plan.unit} | {o["unit"] for o in report.other_units}


# -- the numbers ---------------------------------------------------------------------------------

def test_step_grid_is_log_spaced_and_ends_at_the_plan(plotted):
    plan, _, out, _ = plotted
    steps = out["steps"]
    assert steps[0] == 1 and steps[-1] == plan.steps
    assert all(b > a for a, b in zip(steps, steps[1:])) and len(steps) <= 40
    for values in _all_series(out).values():
        assert len(values) == len(steps)


def test_series_are_non_decreasing_in_steps(plotted):
    _, _, out, _ = plotted
    for key, values in _all_series(out).items():
        v = np.asarray(values)
        assert np.all(v[1:] >= v[:-1] * (1 - 1e-9)), key


def test_last_points_are_the_reports_epsilons(plotted):
    # The curves end on the report's own numbers (taken from it, not recomputed): exact equality.
    plan, report, out, _ = plotted
    by_accountant = {a["accountant"]: a["epsilon"] for a in report.alternatives}
    for name, values in out["accountants"].items():
        assert values[-1] == pytest.approx(by_accountant[name], rel=1e-12)
    assert out["report"] == {"epsilon": report.epsilon, "accountant": report.accountant}
    for other in report.other_units:
        entry = out["units"][other["unit"]]
        assert entry["accountant"] == other["accountant"]
        assert entry["epsilon"][-1] == pytest.approx(other["epsilon"], rel=1e-12)
    if out["units"]:
        assert out["units"][plan.unit]["epsilon"][-1] == pytest.approx(report.epsilon, rel=1e-12)


def test_last_points_equal_independent_full_plan_epsilons(plotted):
    plan, report, out, _ = plotted
    checks = {(plan.unit, name): values for name, values in out["accountants"].items()}
    checks.update({(unit, e["accountant"]): e["epsilon"] for unit, e in out["units"].items()})
    for (unit, name), values in checks.items():
        epsilon, lower, notes = _independent(plan, unit, name)
        reported_notes = list(report.warnings) + [n for o in report.other_units for n in o["notes"]]
        if lower is not None:  # a certified upper bound is never below a certified lower bound
            assert values[-1] >= lower * (1 - 1e-12), (unit, name)
        if any("time budget" in n for n in list(notes) + reported_notes):
            continue  # two lattices stopped at different spacings: both certified, equal only to the tolerance
        assert values[-1] == pytest.approx(epsilon, rel=1e-6), (unit, name)


def test_every_point_is_above_the_pld_lower_bound_at_its_step_count(tmp_path_factory):
    # RDP and PLD upper bounds against PLD's certified lower bound on the same optimal epsilon, at a
    # few step counts of the default plan's task view (Poisson-sampled Gaussian: fast lattices).
    plan, _, out, _ = _plotted("default", tmp_path_factory)
    step = plan.units()[0].events[0]
    for i in (0, len(out["steps"]) // 2, len(out["steps"]) - 2):
        t = out["steps"][i]  # a coarse lattice (tolerance 5e-2) is enough for a certified lower bound
        lower = PldAccountant(tolerance=5e-2).compose(step, t).get_epsilon_bounds(plan.delta).epsilon_lower
        assert lower > 0
        for name, values in out["accountants"].items():
            assert values[i] >= lower * (1 - 1e-12), (name, t)


def test_record_view_of_the_default_plan_is_drawn_with_the_reports_accountant(tmp_path_factory):
    # the record level comes from PLD (RDP bounds EpisodicSampled too, far more loosely), as in the report.
    plan, report, out, _ = _plotted("default", tmp_path_factory)
    assert set(out["units"]) == {"task", "record"}
    assert out["units"]["task"]["primary"] and not out["units"]["record"]["primary"]
    assert out["units"]["record"]["accountant"] == "pld"
    assert out["units"]["record"]["epsilon"][-1] > 100 * out["units"]["task"]["epsilon"][-1]


def test_fixed_size_plan_has_both_curves(tmp_path):
    plan = load_plan(ROOT / "examples" / "dp_maml_fixed_batches.toml")
    out = plot_plan(plan, tmp_path / "fixed.png", points=12)
    assert set(out["accountants"]) == {"rdp", "pld"}  # the PLD pairs fixed-size sampling (metadp.mechanisms.wor)
    assert all(p <= r * (1 + 1e-9) for p, r in zip(out["accountants"]["pld"], out["accountants"]["rdp"]))
    assert out["relation"] == "substitute"


def test_shuffled_passes_are_a_staircase_of_gaussians(tmp_path, tmp_path_factory):
    # 1,000 steps of 1,600 from 400,000: 4 passes, each unit released once per pass (metadp.units).
    _, _, one_pass, _ = _plotted("one_pass_shuffle", tmp_path_factory)
    assert len(set(one_pass["accountants"]["rdp"])) == 1  # one pass: one release at every step count
    text = (ROOT / "examples" / "dp_fedmeta_one_pass_shuffle.toml").read_text().replace("steps = 250", "steps = 1000")
    plan = load_plan(text)
    out = plot_plan(plan, tmp_path / "passes.png", accountants=("rdp",))
    passes = [math.ceil(t / 250) for t in out["steps"]]
    for t, k, value in zip(out["steps"], passes, out["accountants"]["rdp"]):
        exact = ACCOUNTANTS["rdp"]().compose(ev.Gaussian(1.0), k).get_epsilon(plan.delta)
        # the full plan exactly; other counts from the trajectory, within 5e-3 of get_epsilon (its docstring)
        assert value == pytest.approx(exact, rel=1e-6 if t == plan.steps else 5e-3), t
    assert len(set(out["accountants"]["rdp"])) == 4


# -- arguments and files -------------------------------------------------------------------------

def _small_plan():
    return load_plan(ROOT / "examples" / "dp_reptile_task_global.toml")  # 2 steps, unsampled Gaussian


def test_refuses_to_overwrite_unless_asked(tmp_path):
    path = tmp_path / "plan.png"
    path.write_bytes(b"keep me")
    with pytest.raises(ValueError, match="already exists.*overwrite=True"):
        plot_plan(_small_plan(), path)
    assert path.read_bytes() == b"keep me"
    plot_plan(_small_plan(), path, overwrite=True)
    assert path.read_bytes()[:8] == PNG_SIGNATURE


def test_pdf_by_suffix_and_other_suffixes_refused(tmp_path):
    out = plot_plan(_small_plan(), tmp_path / "plan.pdf")
    assert Path(out["path"]).read_bytes()[:5] == b"%PDF-"
    for name in ("plan.jpg", "plan"):
        with pytest.raises(ValueError, match=r"\.png or \.pdf"):
            plot_plan(_small_plan(), tmp_path / name)
    with pytest.raises(ValueError, match="does not exist"):
        plot_plan(_small_plan(), tmp_path / "missing" / "plan.png")


@pytest.mark.parametrize("kwargs, match", [
    ({"points": 1}, "points"),
    ({"accountants": ("rdp", "prv")}, "accountants"),
    ({"accountants": ()}, "accountants"),
    ({"delta": 1.5}, "delta"),
])
def test_bad_arguments_raise_value_error(tmp_path, kwargs, match):
    with pytest.raises(ValueError, match=match):
        plot_plan(_small_plan(), tmp_path / "plan.png", **kwargs)
    assert not (tmp_path / "plan.png").exists()


def test_not_a_plan_and_a_report_of_another_plan_are_refused(tmp_path):
    with pytest.raises(ValueError, match="Plan"):
        plot_plan({"unit": "task"}, tmp_path / "plan.png")
    other = plan_epsilon(load_plan(ROOT / "examples" / "dp_reptile_group.toml"))
    with pytest.raises(ValueError, match="report"):
        plot_plan(_small_plan(), tmp_path / "plan.png", report=other)


def test_given_report_and_own_report_give_the_same_series(tmp_path):
    plan = _small_plan()
    a = plot_plan(plan, tmp_path / "a.png")
    b = plot_plan(plan, tmp_path / "b.png", report=plan_epsilon(plan))
    assert a["accountants"] == b["accountants"] and a["report"] == b["report"]


def test_delta_argument_moves_every_curve(tmp_path):
    plan = _small_plan()
    base = plot_plan(plan, tmp_path / "a.png")
    looser = plot_plan(plan, tmp_path / "b.png", delta=1e-2)
    assert looser["delta"] == 1e-2
    for name in base["accountants"]:  # a larger delta never needs a larger epsilon
        assert all(x <= y * (1 + 1e-9) for x, y in zip(looser["accountants"][name], base["accountants"][name]))
    assert looser["report"]["epsilon"] == plan_epsilon(load_plan(
        (ROOT / "examples" / "dp_reptile_task_global.toml").read_text().replace("delta = 1e-3", "delta = 1e-2"))).epsilon


def test_without_matplotlib_says_how_to_install(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib.figure", None)
    monkeypatch.setitem(sys.modules, "matplotlib.backends.backend_agg", None)
    with pytest.raises(ValueError, match=r'pip install "metadp\[plot\]"'):
        plot_plan(default_plan(), tmp_path / "plan.png")  # raised before any accounting
    assert not (tmp_path / "plan.png").exists()


def test_cli_plan_plot_writes_the_figure_and_refuses_to_overwrite(tmp_path, capsys):
    from metadp.cli import main

    path = tmp_path / "eps.png"
    assert main(["plan", str(ROOT / "examples/dp_sgd_mnist.toml"), "--plot", str(path)]) == 0
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "figure:" in capsys.readouterr().err
    before = path.stat().st_mtime_ns
    assert main(["plan", str(ROOT / "examples/dp_sgd_mnist.toml"), "--plot", str(path)]) == 2
    assert "--overwrite" in capsys.readouterr().err and path.stat().st_mtime_ns == before
    assert main(["plan", str(ROOT / "examples/dp_sgd_mnist.toml"), "--plot", str(path), "--overwrite"]) == 0


def test_the_last_panel_is_each_units_certified_tradeoff_beside_random_guessing(tmp_path):
    pytest.importorskip("matplotlib")
    from metadp.accounting.risk import gaussian_tpr
    from metadp.plan import load_plan
    from metadp.plan_plot import plot_plan

    plan = load_plan(Path(__file__).resolve().parents[1] / "examples" / "dp_reptile_task_global.toml")
    out = plot_plan(plan, tmp_path / "p.png")
    curves = out["tradeoff"]
    assert set(curves) == {"record"} and curves["record"]["method"] == "exact mu-GDP"
    fpr, tpr = np.array(curves["record"]["fpr"]), np.array(curves["record"]["tpr"])
    from metadp.plan_risk import view_risk
    from metadp.units import unit_views

    mu = view_risk(unit_views(plan)[0].events, plan.steps, plan.relation, "pld", (0.01,))["mu"]
    assert np.all(tpr >= gaussian_tpr(mu, fpr)) and np.allclose(tpr, gaussian_tpr(mu, fpr), rtol=0, atol=1e-6)
    assert np.all(np.diff(tpr) >= 0) and np.all(tpr >= fpr)  # a trade-off curve: rising, above guessing
    lower = np.array(curves["record"]["tpr_lower"])  # the bracket's other end, drawn dashed
    assert np.all(lower <= gaussian_tpr(mu, fpr)) and np.allclose(lower, gaussian_tpr(mu, fpr), rtol=0, atol=1e-6)
