"""A run that cannot end in any lifetime is refused before any data is loaded, naming the setting, the floor
of its time and the limit; a pool larger than memory is refused before it is built; a long run says so
before loading data (issue 28, class 4). Every test here ends in well under a second: nothing trains."""

from __future__ import annotations

import pytest

pytest.importorskip("torch")

from clirun import metadp  # noqa: E402
from metadp.training.run import command  # noqa: E402
from metadp.training.data import setups as data_setups  # noqa: E402
from metadp.training.run.size import LIMIT_HOURS, estimate_run, say_estimate  # noqa: E402

PLAN = """name = "never ends"
unit = "task"
relation = "add_remove"
delta = 1e-5
steps = {steps}
[sampling]
scheme = "poisson"
population = {population}
batch_size = {batch}
[noise]
mechanism = "gaussian"
multiplier = 1.0
"""

NEVER = [dict(steps=10**12, population=100, batch=5),  # 10^12 steps
         dict(steps=1000, population=10**7, batch=10**6),  # 10^6 tasks a step
         dict(steps=10**9, population=10**4, batch=32)]


@pytest.fixture
def no_data(monkeypatch):
    """Fails the test if any data set is built (the refusal must come first)."""
    def loaded(*args, **kwargs):
        raise AssertionError("data loaded before the run's size was checked")

    for name in ("sinusoid_setup", "glyphs_setup", "omniglot_setup"):
        monkeypatch.setattr(data_setups, name, loaded)


def _plan(tmp_path, **kw):
    path = tmp_path / "plan.toml"
    path.write_text(PLAN.format(**kw))
    return path


def _refused(result, *words):
    assert result.returncode == 2, (result.stdout, result.stderr)
    lines = [x for x in result.stderr.splitlines() if x.strip()]
    assert len(lines) == 1 and lines[0].startswith("metadp: error:"), result.stderr
    assert "Traceback" not in result.stderr
    for word in words:
        assert word in lines[0], lines[0]


@pytest.mark.parametrize("shape", NEVER)
@pytest.mark.parametrize("algorithm", ["dp-maml", "dp-agr", "maml"])
def test_a_plan_run_that_cannot_end_is_refused_before_data(tmp_path, no_data, shape, algorithm):
    out = tmp_path / "run"
    result = metadp("train", algorithm, "--plan", _plan(tmp_path, **shape), "--data", "sinusoid", "--out", out)
    _refused(result, f"{shape['steps']:,} steps", "--force-long")
    assert not out.exists()


@pytest.mark.parametrize("flags", [("--steps", "1000000000000"), ("--steps", "100000000", "--meta-batch", "5"),
                                   ("--pool", "10000000", "--meta-batch", "1000000", "--steps", "1000")])
@pytest.mark.parametrize("algorithm", ["dp-maml", "dp-maml-sample", "dp-reptile", "dp-agr", "dp-agrlr", "reptile"])
def test_a_flag_run_that_cannot_end_is_refused_before_data(tmp_path, no_data, flags, algorithm):
    result = metadp("train", algorithm, "--data", "sinusoid", "--noise" if algorithm.startswith("dp") else "--seed",
                    "1", *flags, "--out", tmp_path / "run")
    _refused(result, "--steps", f"limit of {LIMIT_HOURS:g} hours", "--force-long")


def test_protonet_that_cannot_end_is_refused(tmp_path, no_data):
    result = metadp("train", "protonet", "--data", "glyphs", "--steps", "1000000000000", "--out", tmp_path / "run")
    _refused(result, "--steps", "--force-long")


@pytest.mark.parametrize("population", [10**15, 10**12])
def test_a_population_beyond_memory_is_refused_before_the_pool_is_built(tmp_path, no_data, population):
    result = metadp("train", "dp-maml", "--plan", _plan(tmp_path, steps=5, population=population, batch=5),
                    "--data", "sinusoid", "--out", tmp_path / "run", "--force-long")
    _refused(result, f"sampling.population = {population:,}", "GiB")
    flags = metadp("train", "dp-maml", "--data", "sinusoid", "--noise", "1", "--pool", str(population), "--steps", "5",
                   "--out", tmp_path / "run", "--force-long")
    _refused(flags, f"--pool = {population:,}", "GiB")


@pytest.mark.parametrize("shape", NEVER)
def test_verify_run_refuses_a_run_that_cannot_end(tmp_path, no_data, shape):
    result = metadp("verify", "run", "dp-maml", "--plan", _plan(tmp_path, **shape), "--data", "sinusoid",
                    "--canaries", "2")
    _refused(result, "the plan's steps", "--force-long")


def test_verify_run_refuses_a_population_beyond_memory(tmp_path, no_data):
    result = metadp("verify", "run", "dp-maml", "--plan", _plan(tmp_path, steps=5, population=10**15, batch=5),
                    "--data", "sinusoid", "--canaries", "2", "--force-long")
    _refused(result, "sampling.population", "GiB")


def test_force_long_runs_it_and_says_so_before_loading_data(tmp_path, monkeypatch):
    seen = {}

    def stop(args):  # data loading is where the run would start its work: stop there
        seen["called"] = True
        raise ValueError("stopped at data loading")

    monkeypatch.setattr(command, "_setup", stop)
    result = metadp("train", "dp-maml", "--plan", _plan(tmp_path, **NEVER[0]), "--data", "sinusoid",
                    "--out", tmp_path / "run", "--force-long")
    assert seen and result.returncode == 2
    first, last = [x for x in result.stderr.splitlines() if x.strip()]
    assert first.startswith("metadp: metadp train dp-maml --plan") and "estimated at least" in first
    assert "years" in first and "loading data" in first and "stopped at data loading" in last


def test_a_short_run_prints_no_estimate():
    import io
    out = io.StringIO()
    assert not say_estimate(estimate_run("sinusoid", 2, 4.0, 40), "metadp train dp-maml", out)
    assert out.getvalue() == ""
    assert say_estimate(estimate_run("sinusoid", 10**4, 32.0, 10**4), "metadp train dp-maml", out)
    assert "estimated at least" in out.getvalue() and out.getvalue().count("\n") == 1


def test_the_estimate_is_a_floor_that_grows_with_the_run():
    base = estimate_run("sinusoid", 100, 10.0, 1000)
    assert estimate_run("sinusoid", 200, 10.0, 1000).seconds > base.seconds
    assert estimate_run("sinusoid", 100, 100.0, 1000).seconds > base.seconds
    assert estimate_run("glyphs", 100, 10.0, 1000).seconds > base.seconds
    assert estimate_run("sinusoid", 100, 10.0, 1000, device="cuda").seconds < base.seconds
    # a floor: 10^12 steps are over a year even on an accelerator
    assert estimate_run("sinusoid", 10**12, 1.0, 10, device="cuda").seconds > 365 * 86400


def test_help_states_the_limit():
    result = metadp("train", "--help")
    assert "--force-long" in result.stdout and f"{LIMIT_HOURS:g} hours" in result.stdout
