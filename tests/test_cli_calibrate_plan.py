"""`metadp calibrate PLAN.toml`: a plan file's noise (or steps, or rate) solved for a target epsilon or attack TPR.

What must hold: the answer is the plan's own question (the solved plan, loaded from the file with the value put
in, certifies the target, and a little less noise does not); banded plans and the participation schemes calibrate
like any plan (a banded plan's mu-GDP closed form checked); the plan's accountant is used unless overridden; the
flags a file states are refused beside it, and the flag path still needs its flags.
"""

import json
import math
from pathlib import Path

import pytest
from scipy.stats import norm

from metadp.cli import main
from metadp.plan import load_plan, plan_epsilon

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def _solved(capsys, argv):
    capsys.readouterr()
    assert main(["calibrate", *argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def _gdp_delta(mu: float, eps: float) -> float:
    return norm.cdf(-eps / mu + mu / 2) - math.exp(eps) * norm.cdf(-eps / mu - mu / 2)


def test_a_banded_min_separation_plan_calibrates_to_the_gaussian_closed_form(capsys):
    # separation >= bands: sensitivity sqrt(k) ||c|| = 2 exactly, so the run is mu-GDP with mu = 2 / z
    path = EXAMPLES / "dp_fedmeta_bandmf_min_separation.toml"
    out = _solved(capsys, [str(path), "--target-epsilon", "1"])
    z = out["value"]
    assert out["report"]["epsilon"] <= 1.0
    plan = load_plan(path)
    # the mu at which epsilon 1 is met exactly at the plan's delta, by bisection on the closed form
    lo, hi = 1e-3, 10.0
    for _ in range(200):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if _gdp_delta(mid, 1.0) <= plan.delta else (lo, mid)
    assert z == pytest.approx(2.0 / lo, rel=2e-3)
    smaller = load_plan(path)
    import dataclasses

    less = dataclasses.replace(smaller, noise=dataclasses.replace(smaller.noise, multiplier=z * 0.99))
    assert plan_epsilon(less).epsilon > 1.0  # the answer is the smallest, within the search's tolerance


def test_a_cyclic_banded_plan_calibrates_and_the_report_is_the_solved_plans(capsys):
    path = EXAMPLES / "dp_fedmeta_bandmf_cyclic.toml"
    out = _solved(capsys, [str(path), "--target-epsilon", "2"])
    import dataclasses

    plan = load_plan(path)
    solved = dataclasses.replace(plan, noise=dataclasses.replace(plan.noise, multiplier=out["value"]))
    assert out["report"]["epsilon"] == pytest.approx(plan_epsilon(solved).epsilon, rel=1e-12)
    assert out["report"]["epsilon"] <= 2.0
    assert out["report"]["noise"]["correlation"] == "banded" and out["report"]["noise"]["bands"] == 4


def test_a_plan_file_meets_a_risk_target(capsys):
    path = EXAMPLES / "dp_fedmeta_bandmf_min_separation.toml"
    out = _solved(capsys, [str(path), "--target-tpr", "0.05", "--at-fpr", "0.01"])
    mu = 2.0 / out["value"]  # mu-GDP: TPR = Phi(Phi^-1(FPR) + mu)
    assert norm.cdf(norm.ppf(0.01) + mu) == pytest.approx(0.05, rel=1e-3)
    assert out["tpr"] <= 0.05


def test_the_plans_accountant_is_kept_unless_overridden(tmp_path, capsys):
    text = (EXAMPLES / "dp_sgd_mnist.toml").read_text()
    path = tmp_path / "plan.toml"
    path.write_text(text)
    base = _solved(capsys, [str(path), "--target-epsilon", "3"])
    rdp = _solved(capsys, [str(path), "--target-epsilon", "3", "--accountant", "rdp"])
    assert rdp["report"]["accountant"].lower().startswith("rdp")
    assert rdp["value"] >= base["value"] * (1 - 1e-6)  # RDP is looser: it needs at least as much noise


@pytest.mark.parametrize("flag, value", [("--noise", "1"), ("--steps", "10"), ("--delta", "1e-5"),
                                         ("--sampling", "poisson"), ("--unit", "task")])
def test_a_flag_the_file_states_is_refused(capsys, flag, value):
    path = EXAMPLES / "dp_fedmeta_bandmf_cyclic.toml"
    assert main(["calibrate", str(path), "--target-epsilon", "2", flag, value]) == 2
    assert f"{flag} does not go with a plan file" in capsys.readouterr().err


def test_solving_a_banded_plans_steps_or_rate_is_refused_with_the_reason(capsys):
    path = EXAMPLES / "dp_fedmeta_bandmf_cyclic.toml"
    assert main(["calibrate", str(path), "--target-epsilon", "2", "--solve", "steps"]) == 2
    assert "solve for the noise instead" in capsys.readouterr().err
    assert main(["calibrate", str(path), "--target-epsilon", "2", "--solve", "rate"]) == 2
    assert "sampling.scheme = 'poisson'" in capsys.readouterr().err


def test_without_a_file_the_flags_are_required(capsys):
    assert main(["calibrate", "--target-epsilon", "1", "--steps", "10"]) == 2
    assert "--sampling is required (or give a plan file)" in capsys.readouterr().err
    assert main(["calibrate", "--target-epsilon", "1", "--steps", "10", "--sampling", "none"]) == 2
    assert "--delta is required" in capsys.readouterr().err


def test_a_missing_plan_file_is_one_line(capsys, tmp_path):
    assert main(["calibrate", str(tmp_path / "nope.toml"), "--target-epsilon", "1"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "nope.toml" in err
