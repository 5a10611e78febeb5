"""A degenerate guarantee is refused before any work (one line, exit 2) or reported as what it is: never a
traceback after training, never a null epsilon (issue 28, class 1)."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("torch")

from clirun import metadp  # noqa: E402

PLAN = """name = "vanishing noise"
unit = "task"
relation = "add_remove"
delta = 1e-5
steps = {steps}
[sampling]
scheme = "poisson"
population = {population}
{size}
[noise]
mechanism = "gaussian"
multiplier = {multiplier}
"""


def _plan(tmp_path, multiplier, steps=5, population=100, size="batch_size = 5"):
    path = tmp_path / "plan.toml"
    path.write_text(PLAN.format(multiplier=multiplier, steps=steps, population=population, size=size))
    return path


def _refused(result, *words):
    assert result.returncode == 2, (result.stdout, result.stderr)
    assert "Traceback" not in result.stderr + result.stdout
    lines = [x for x in result.stderr.splitlines() if x.strip()]
    assert len(lines) == 1 and lines[0].startswith("metadp: error:"), result.stderr
    for word in words:
        assert word in lines[0]


@pytest.mark.parametrize("multiplier", ["1e-300", "1e-200", "5e-170"])
@pytest.mark.parametrize("algorithm", ["dp-maml", "dp-agr"])
def test_plan_run_with_vanishing_noise_is_refused_before_training(tmp_path, multiplier, algorithm):
    out = tmp_path / "run"
    result = metadp("train", algorithm, "--plan", _plan(tmp_path, multiplier), "--data", "sinusoid", "--out", out)
    _refused(result, "certifies no finite epsilon", "[noise]")
    assert not out.exists()  # refused before anything was written


@pytest.mark.parametrize("algorithm", ["dp-maml", "dp-maml-sample", "dp-reptile", "dp-agr", "dp-agrlr"])
@pytest.mark.parametrize("flag, value", [("--noise", "1e-300"), ("--noise", "4.9e-324"), ("--noise", "1e-51")])
def test_flag_run_with_vanishing_noise_names_the_flag(tmp_path, algorithm, flag, value):
    result = metadp("train", algorithm, "--data", "sinusoid", flag, value, "--steps", "2", "--meta-batch", "4",
                    "--pool", "40", "--out", tmp_path / "run")
    _refused(result, flag, "at least 1e-50")


def test_vanishing_inner_noise_names_the_flag(tmp_path):
    result = metadp("train", "dp-maml-sample", "--data", "sinusoid", "--noise", "1", "--inner-noise", "1e-60",
                    "--steps", "2", "--meta-batch", "4", "--pool", "40", "--out", tmp_path / "run")
    _refused(result, "--inner-noise")


def test_verify_run_refuses_a_degenerate_plan(tmp_path):
    result = metadp("verify", "run", "dp-maml", "--plan", _plan(tmp_path, "1e-300", population=40, size="batch_size = 4"),
                    "--data", "sinusoid", "--canaries", "10")
    _refused(result, "certifies no finite epsilon")


def test_canary_audit_of_a_plan_given_by_rate_names_the_population(tmp_path):
    path = tmp_path / "rate.toml"
    path.write_text(PLAN.format(multiplier=1.0, steps=5, population=100, size="").replace("population = 100\n", "")
                    .replace('scheme = "poisson"\n', 'scheme = "poisson"\nrate = 0.1\n'))
    result = metadp("verify", "run", "dp-maml", "--plan", path, "--data", "sinusoid", "--canaries", "10")
    _refused(result, "sampling.population")
    assert "[2, 0]" not in result.stderr


def test_plan_report_says_infinity_in_words_and_never_null(tmp_path):
    result = metadp("plan", _plan(tmp_path, "1e-300"), "--json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["epsilon"] == "inf" and float(report["epsilon"]) == float("inf")
    assert all(a["epsilon"] == "inf" for a in report["alternatives"])
    assert report["warnings"][0].startswith("no finite epsilon is certified")
    table = metadp("plan", _plan(tmp_path, "1e-300"))
    assert "epsilon   <= infinity" in table.stdout and "no finite epsilon is certified" in table.stdout


def test_huge_but_finite_epsilon_trains_and_reports_the_number(tmp_path):
    out = tmp_path / "run"
    result = metadp("train", "dp-maml", "--plan", _plan(tmp_path, "1e-100", steps=2), "--data", "sinusoid",
                    "--out", out, "--eval-tasks", "5")
    assert result.returncode == 0, result.stderr
    report = json.loads((out / "privacy_report.json").read_text())
    assert isinstance(report["epsilon"], float) and 1e199 < report["epsilon"] < 1e202
    assert "epsilon <= 1.001e+200 (upper bound, RDP)" in result.stdout  # 2 steps of alpha / (2 z^2)


@pytest.mark.parametrize("steps, size", [("1000000000000", "batch_size = 5"), ("1000000", "batch_size = 100000")])
def test_a_run_that_cannot_end_is_refused_before_data_is_loaded(tmp_path, steps, size):
    out = tmp_path / "run"
    plan = _plan(tmp_path, "1.0", population=10**6, size=size)
    plan.write_text(plan.read_text().replace("steps = 5", f"steps = {steps}"))
    result = metadp("train", "dp-maml", "--plan", plan, "--data", "sinusoid", "--out", out)
    _refused(result, "--force-long", "limit of 24 hours")
    assert not out.exists()


def test_force_long_lets_the_estimate_pass():
    from metadp.plan import Plan
    from metadp.training.run.size import check_run_size, plan_run_size

    plan = Plan.from_dict({"name": "long", "unit": "task", "delta": 1e-5, "steps": 10**12,
                           "sampling": {"scheme": "poisson", "population": 100, "batch_size": 5},
                           "noise": {"mechanism": "gaussian", "multiplier": 1.0}})
    size = plan_run_size(plan, "sinusoid")
    with pytest.raises(ValueError, match="years"):
        check_run_size(size, force_long=False, steps_name="steps", pool_name="population", batch_name=None)
    check_run_size(size, force_long=True, steps_name="steps", pool_name="population", batch_name=None)  # allowed


def test_a_corrupt_checkpoint_is_refused_naming_the_file(tmp_path):
    out = tmp_path / "run"
    flags = ["--data", "sinusoid", "--noise", "1", "--meta-batch", "4", "--pool", "40", "--eval-tasks", "5",
             "--out", out]
    assert metadp("train", "dp-maml", "--steps", "2", *flags).returncode == 0
    (out / "checkpoint.pt").write_bytes(b"not a checkpoint\n")
    result = metadp("train", "dp-maml", "--steps", "4", *flags, "--resume", "--resume-changed")
    _refused(result, "checkpoint.pt cannot be read as a checkpoint", "move it away")

@pytest.mark.parametrize("algorithm", ["dp-maml", "dp-maml-sample", "dp-reptile", "dp-agr", "dp-agrlr"])
@pytest.mark.parametrize("flag", ["--noise", "--inner-noise"])
def test_flag_run_without_noise_is_refused_never_reported_null(tmp_path, algorithm, flag):
    # --noise 0 used to train and write "epsilon": null for every view
    out = tmp_path / "run"
    other = ["--noise", "1"] if flag == "--inner-noise" else []
    if flag == "--inner-noise" and algorithm in ("dp-maml", "dp-agr"):
        pytest.skip("no inner noise")
    result = metadp("train", algorithm, "--data", "sinusoid", *other, flag, "0", "--steps", "2", "--meta-batch", "4",
                    "--pool", "40", "--out", out)
    _refused(result, flag, "at least 1e-50", "maml, reptile")
    assert not out.exists()


@pytest.mark.parametrize("population", [1, 2, 3])
def test_canary_audit_of_a_tiny_population_says_so(tmp_path, population):
    path = _plan(tmp_path, "1.0", population=population, size="batch_size = 1")
    result = metadp("verify", "run", "dp-maml", "--plan", path, "--data", "sinusoid", "--canaries", "2")
    _refused(result, "sampling.population of at least 4")
    assert "must be in [2, " not in result.stderr
