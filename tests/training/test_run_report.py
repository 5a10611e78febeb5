"""privacy_report.json has the schema of `metadp plan --json` (issue 15): the budget unit's guarantee at the
top level, every other view in other_units, plus the run's own record."""

import dataclasses
import json

import pytest

pytest.importorskip("torch")

from metadp.accounting import FixedSizeSampled, Gaussian, PoissonSampled  # noqa: E402
from metadp.accounting.pld import PldAccountant  # noqa: E402
from metadp.accounting.rdp_accountant import RdpAccountant  # noqa: E402
from metadp.cli import main  # noqa: E402
from metadp.plan import default_plan, plan_epsilon  # noqa: E402
from metadp.report import Report  # noqa: E402

TINY = ["--data", "sinusoid", "--steps", "3", "--meta-batch", "4", "--pool", "40", "--eval-tasks", "5",
        "--seed", "1"]


@pytest.fixture(scope="module")
def plan_json():
    return plan_epsilon(default_plan()).to_dict()


def _run(tmp_path, *argv):
    out = tmp_path / "run"
    assert main(["train", *argv, *TINY, "--out", str(out)]) == 0
    return json.loads((out / "privacy_report.json").read_text())


def _same_schema(run, plan_json):
    missing = set(plan_json) - set(run)
    assert not missing, f"privacy_report.json lacks keys of metadp plan --json: {missing}"
    for key, value in plan_json.items():
        if value is not None and run[key] is not None:
            assert type(run[key]) is type(value), key
    for other in run["other_units"]:
        assert set(plan_json["other_units"][0]) <= set(other)


def test_a_private_run_reports_its_budget_unit_like_a_plan(tmp_path, plan_json, capsys):
    run = _run(tmp_path, "dp-maml", "--noise", "1.0")
    _same_schema(run, plan_json)
    views = {v["view"]: v for v in run["views"]}
    assert run["unit"] == "task" and run["view"] == "task" and run["bound"] == "upper"
    assert run["epsilon"] == views["task"]["epsilon"] > 0 and run["accountant"] == views["task"]["accountant"]
    # the oracle: 3 steps of Poisson rate 4/40 over a Gaussian of multiplier 1, composed afresh
    bounds = PldAccountant().compose(PoissonSampled(0.1, Gaussian(1.0)), 3).get_epsilon_bounds(1e-5)
    assert run["epsilon"] == pytest.approx(bounds.epsilon_upper, rel=1e-9) and run["delta"] == 1e-5
    assert run["epsilon_lower"] == pytest.approx(bounds.epsilon_lower, rel=1e-9)
    assert 0 < run["epsilon_lower"] <= run["epsilon"]
    assert run["relation"] == "add_remove" and run["sampling"]["scheme"] == "poisson"
    assert [o["view"] for o in run["other_units"]] == ["record"]
    assert run["other_units"][0]["epsilon"] == views["record"]["epsilon"]
    assert "mironov2019sampled" in run["citations"] and run["engine"] == "local"
    # the plan's Report type reads it back and renders it, as it renders a plan's report
    fields = {f.name for f in dataclasses.fields(Report)}
    table = Report(**{k: (tuple(v) if isinstance(v, list) else v) for k, v in run.items() if k in fields}).to_table()
    assert "Poisson, rate 0.1" in table and run["epsilon_display"] in table


def test_fixed_size_batches_report_substitution_and_the_tightest_accountant(tmp_path, plan_json):
    run = _run(tmp_path, "dp-maml", "--noise", "1.0", "--sampler", "fixed")
    _same_schema(run, plan_json)
    assert run["relation"] == "substitute" and run["sampling"]["scheme"] == "fixed"
    assert run["sampling"]["batch_size"] == 4
    # the oracle: 3 steps of 4 of 40 without replacement, substitution (sensitivity 2C); every accountant, the
    # tightest reported, as ``metadp plan`` does (issue 29: the flag run used RDP only, 12.34 instead of 8.665)
    event = FixedSizeSampled(4, 40, Gaussian(1.0), 2.0)
    rdp = RdpAccountant("substitute").compose(event, 3).get_epsilon(1e-5)
    pld = PldAccountant("substitute").compose(event, 3).get_epsilon_bounds(1e-5)
    assert pld.epsilon_upper < rdp
    assert run["accountant"] == "pld" and run["epsilon"] == pytest.approx(pld.epsilon_upper, rel=1e-9)
    assert run["epsilon_lower"] == pytest.approx(pld.epsilon_lower, rel=1e-9)


def test_a_non_private_run_has_the_keys_and_no_epsilon(tmp_path, plan_json):
    run = _run(tmp_path, "maml")
    assert set(plan_json) <= set(run)
    assert run["epsilon"] is None and run["bound"] == "none" and run["other_units"] == []
    assert run["warnings"] == ["non-private: no privacy guarantee"]
