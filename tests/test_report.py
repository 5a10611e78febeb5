"""Report rendering: the printed epsilon never understates the bound; JSON/LaTeX carry every field."""

import json
import math
import re

import pytest
from hypothesis import given, settings, strategies as st

from metadp.plan import Plan, default_plan, plan_epsilon
from metadp.report import format_upper


@given(st.floats(min_value=1e-300, max_value=1e300, allow_nan=False, allow_infinity=False))
@settings(max_examples=500, deadline=None)
def test_format_upper_never_understates(x):
    assert float(format_upper(x)) >= x


@pytest.mark.parametrize("x, text", [
    (1.1464128985898663, "1.147"),  # rounded up, not to nearest (1.146)
    (2.0, "2.000"),
    (0.49826, "0.4983"),
    (24.0814, "24.09"),
    (1234567.0, "1.235e+06"),
    (0.0, "0"),
    (math.inf, "infinity"),  # in words (issue 28: a bare "inf" reads as a glitch)
])
def test_format_upper_examples(x, text):
    assert format_upper(x) == text


def test_default_report_json_keys_and_values():
    report = plan_epsilon(default_plan(), accountant="rdp")
    d = json.loads(report.to_json())
    for key in ("epsilon", "delta", "accountant", "unit", "relation", "sampling", "assumptions", "citations",
                "warnings", "bound", "steps", "noise"):
        assert key in d, key
    assert d["bound"] == "upper"
    assert d["unit"] == "task" and d["relation"] == "add_remove" and d["accountant"] == "rdp"
    assert d["sampling"] == {"scheme": "poisson", "population": 400000, "batch_size": 1600, "rate": 0.004}
    assert d["delta"] == 1e-6 and d["steps"] == 250
    # The figure for this plan: RDP epsilon 1.15 (dp-accounting prints 1.1466 on its grid).
    assert 1.14 < d["epsilon"] < 1.147
    assert {"mironov2017renyi", "mironov2019sampled", "canonne2020discrete"} <= set(d["citations"])


def test_table_states_unit_relation_direction_and_citations():
    text = plan_epsilon(default_plan(), accountant="rdp").to_table()
    for needle in ("upper bound", "add/remove", "Poisson, rate 0.004", "[mironov2019sampled]", "WARNINGS"):
        assert needle in text, needle
    for label, value in (("epsilon", "<= 1.147"), ("unit", "task"), ("delta", "1e-06")):  # any column width
        assert re.search(rf"^  {label} +{re.escape(value)}", text, re.M), (label, value)


def test_latex_row_has_nine_cells_and_escapes():
    plan = Plan.from_dict({"name": "a_b & 50%", "unit": "record", "delta": 1e-5, "steps": 10,
                           "sampling": {"scheme": "fixed", "batch_size": 10, "population": 100},
                           "noise": {"multiplier": 2.0}})
    row = plan_epsilon(plan).to_latex().splitlines()[1]
    assert row.endswith("\\\\")
    assert row.startswith("a\\_b \\& 50\\%")
    assert row.count(" & ") == 8
    assert "substitution" in row and "$10^{-5}$" in row


def test_claim_below_certified_bound_is_flagged():
    d = {"name": "claim", "delta": 1e-6, "steps": 250, "unit": "task",
         "sampling": {"scheme": "poisson", "rate": 0.004}, "noise": {"multiplier": 1.0},
         "claim": {"epsilon": 0.3, "source": "a paper"}}
    report = plan_epsilon(Plan.from_dict(d))
    assert any("BELOW the certified upper bound" in w for w in report.warnings)
    d["claim"]["epsilon"] = 5.0
    assert not any("BELOW" in w for w in plan_epsilon(Plan.from_dict(d)).warnings)


def test_fixed_size_report_states_sensitivity_doubling():
    plan = Plan.from_dict({"unit": "record", "delta": 1e-5, "steps": 100, "sampling": {"scheme": "fixed", "batch_size": 256,
                           "population": 60000}, "noise": {"multiplier": 1.1}})
    report = plan_epsilon(plan)
    assert report.relation == "substitute"
    assert any("2C" in a for a in report.assumptions)
    assert "wang2019subsampled" in report.citations and "balle2018privacy" in report.citations
