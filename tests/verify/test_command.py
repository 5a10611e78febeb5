"""`metadp verify`: the audit command (negative and positive controls, plot) and --crosscheck."""

import json
from pathlib import Path

import pytest

from metadp.cli import main

from clirun import metadp

ROOT = Path(__file__).resolve().parents[2]


def run(*args):
    """In this process (tests/clirun.py); the real process's exit statuses and single error line are checked
    by tests/verify/test_verify_bad_input.py and tests/test_invalid_inputs.py."""
    return metadp(*args)


def test_gaussian_audit_prints_the_verdict_table_and_writes_the_plot(tmp_path):
    pytest.importorskip("matplotlib")
    plot = tmp_path / "verify.png"
    result = run("verify", "gaussian", "--noise", "1", "--epsilons", "0.5,1,2", "--samples", "200000",
                 "--plot", str(plot))
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "audit: consistent" in out and "planner:" in out and "delta_L" in out
    assert out.count("\n") >= 6 and "VIOLATION" not in out
    assert plot.is_file() and plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_noise_lower_than_claimed_is_flagged_in_json():
    result = run("verify", "gaussian", "--noise", "0.8", "--claim-noise", "1", "--epsilons", "0.5,1,2",
                 "--samples", "200000", "--json")
    assert result.returncode == 1, result.stderr  # a VIOLATION exits 1 (it exited 0)
    d = json.loads(result.stdout)
    assert d["verdict"] == "VIOLATION" and d["worst_margin"] > 0
    assert all(row["delta_lower"] > row["claimed"] for row in d["rows"])


def test_laplace_and_poisson_pipeline_audits_are_consistent_with_true_claims():
    laplace = run("verify", "laplace", "--scale", "1", "--epsilons", "0.5", "--samples", "100000", "--quiet")
    assert laplace.returncode == 0 and "audit: consistent" in laplace.stdout, laplace.stderr
    # 100,000 draws see a delta excess of 0.03 (the planner: ~25,000); 10% of the claim would need ~3e7
    poisson = run("verify", "poisson", "--rate", "0.2", "--noise", "1", "--steps", "3", "--epsilons", "0.5,1",
                  "--samples", "100000", "--violation", "0.03", "--quiet")
    assert poisson.returncode == 0 and "audit: consistent" in poisson.stdout, poisson.stderr


def test_crosscheck_agrees_on_the_dp_sgd_example():
    pytest.importorskip("dp_accounting")
    pytest.importorskip("prv_accountant")
    result = run("verify", "--crosscheck", "examples/dp_sgd_mnist.toml")
    assert result.returncode == 0, result.stderr
    assert "all agree" in result.stdout and "DISAGREE" not in result.stdout
    assert "dp-accounting PLD" in result.stdout and "prv-accountant" in result.stdout


@pytest.mark.parametrize("argv, needle", [
    (["verify"], "needs a mechanism"),
    (["verify", "gaussian"], "--noise is required"),
    (["verify", "gaussian", "--noise", "1", "--epsilons", "a,b"], "--epsilons"),
    (["verify", "poisson", "--noise", "1"], "--rate is required"),
    (["verify", "gaussian", "--noise", "1", "--crosscheck", "x.toml"], "not both"),
    (["verify", "--crosscheck", "examples/dp_maml_record_episodic.toml"], "--crosscheck covers"),
])
def test_bad_input_exits_2_with_one_line(argv, needle, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert needle in err and err.count("\n") == 1


def test_verify_plan_audits_the_plans_pipeline_against_its_bound(tmp_path, capsys):
    # in-process (metadp.cli.main); the real process's exit statuses are checked by the tests around it
    plan = tmp_path / "shuffle.toml"
    plan.write_text('unit = "task"\nrelation = "add_remove"\ndelta = 1e-6\nsteps = 10\n[sampling]\n'
                    'scheme = "shuffle"\npopulation = 100\nbatch_size = 10\n[noise]\nmultiplier = 1.0\n')
    code = main(["verify", "plan", str(plan), "--epsilons", "1,2", "--samples", "100000", "--violation", "0.03",
                 "--quiet"])
    out = capsys.readouterr()
    assert code == 0 and "audit: consistent" in out.out, out.err
    # 2,000 runs of an episodic pipeline (a small one: the example plan's record bound takes seconds) find
    # nothing, but cannot see a 10% excess at eps 15-30 (the plan's record epsilon is about 40) either
    episodic = tmp_path / "episodic.toml"
    episodic.write_text('unit = "record"\nrelation = "add_remove"\ndelta = 1e-6\nsteps = 20\n[sampling]\n'
                        'scheme = "episodic"\nepisodes = 16\n[noise]\nmultiplier = 1.0\nclipping = "per_episode"\n'
                        '[[hierarchy]]\nname = "class"\ndraw = "fixed"\nsize = 5\nunits = 100\n'
                        '[[hierarchy]]\nname = "drawing"\ndraw = "fixed"\nsize = 2\nunits = 20\n')
    code = main(["verify", "plan", str(episodic), "--epsilons", "15,30", "--samples", "2000", "--quiet", "--json"])
    out = capsys.readouterr()
    assert code == 3, out.err
    assert json.loads(out.out)["verdict"] == "INCONCLUSIVE"


def test_verify_plan_needs_a_file(capsys):
    assert main(["verify", "plan"]) == 2
    assert "needs a plan file" in capsys.readouterr().err
