"""One-run canary audits of real training runs (issue 20): the trainer itself, with canaries, scored
after training, against the run's certified epsilon; and the controls an audit must catch."""

from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")

from metadp.cli import main  # noqa: E402
from metadp.plan import Plan  # noqa: E402
from metadp.verify.canaries import run_canary_audit  # noqa: E402


def _plan(population, batch, z, steps, delta=1e-5):
    return Plan.from_dict({"name": "audit", "unit": "task", "relation": "add_remove", "delta": delta, "steps": steps,
                           "sampling": {"scheme": "poisson", "population": population, "batch_size": batch},
                           "noise": {"mechanism": "gaussian", "multiplier": z}})


TINY = dict(sizes=(1, 8, 1), power_runs=20)


def test_correct_run_is_consistent_task_level():
    r = run_canary_audit(_plan(60, 6, 1.0, 6), canaries=20, seed=0, **TINY)
    assert r["verdict"] == "consistent" and r["control"] is None
    assert r["certified"]["epsilon"] > 0 and r["epsilon_lower"] <= r["certified"]["epsilon"]
    assert r["steps"] == 6 and r["canaries"] == 20 and {s["scorer"] for s in r["scorers"]} == {"white-box", "black-box"}


def test_correct_run_is_consistent_record_level():
    r = run_canary_audit(_plan(60, 6, 1.0, 6), canaries=20, view="record", seed=0, **TINY)
    assert r["verdict"] == "consistent" and r["certified"]["unit"] == "record"
    assert r["epsilon_lower"] <= r["certified"]["epsilon"]


def test_cli_run_json_and_refusals(tmp_path, capsys):
    plan = tmp_path / "p.toml"
    plan.write_text('name = "a"\nunit = "task"\ndelta = 1e-5\nsteps = 4\n[sampling]\nscheme = "poisson"\n'
                    'population = 40\nbatch_size = 4\n[noise]\nmechanism = "gaussian"\nmultiplier = 1.0\n')
    assert main(["verify", "run", "dp-maml", "--plan", str(plan), "--data", "sinusoid", "--canaries", "10",
                 "--hidden", "8", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["verdict"] == "consistent" and out["bound"] == "lower" and out["certified"]["bound"] == "upper"
    for argv, flag in ((["--canaries", "30"], "--canaries"), (["--data", "glyphs"], "--data"),
                       (["--samples", "10"], "--samples")):
        base = ["verify", "run", "dp-maml", "--plan", str(plan), "--data", "sinusoid", "--canaries", "10"]
        args = base + argv
        assert main(args) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("metadp: error:") and flag in err[0]
    assert main(["verify", "gaussian", "--noise", "1", "--canaries", "5"]) == 2
    assert "--canaries" in capsys.readouterr().err


AUDIT_PLAN = dict(population=200, batch=2, z=1.0, steps=300)  # benchmarks/audit_sinusoid.toml


_LOW_NOISE_GAP = pytest.mark.xfail(strict=True, reason=(
    "observed (seed 0): the low-noise control is missed (white box 16/20 correct at k = 10, lower bound 0 < 1.069) "
    "although the idealised game, which ignores the other tasks' gradients along the canary's, predicts power "
    "1.00: in the 321-parameter MLP the tasks' meta-gradients share a few directions and the whitened score "
    "cannot separate them at rate 0.01"))


@pytest.mark.slow
@pytest.mark.parametrize("view,defect", [("task", None), ("record", None),
                                         pytest.param("task", "low-noise", marks=_LOW_NOISE_GAP),
                                         ("task", "no-clipping"), ("task", "fixed-order")])
def test_audit_plan_correct_runs_consistent_controls_flagged(view, defect):
    """The README's audits (seed 0): the correct runs consistent, each planted defect flagged; the idealised
    game predicts power 1.00 (no-clipping) and 0.89 (fixed-order) for them (observed, seed 0: both flagged)."""
    p = AUDIT_PLAN
    r = run_canary_audit(_plan(p["population"], p["batch"], p["z"], p["steps"]), canaries=100, view=view,
                         defect=defect, seed=0, beta=0.05, sizes=(1, 16, 16, 1))
    if defect is None:
        assert r["verdict"] == "consistent" and r["epsilon_lower"] <= r["certified"]["epsilon"]
    else:
        assert r["control"]["defect"] == defect and r["control"]["predicted_power"] >= 0.85
        assert r["verdict"] == "VIOLATION" and r["epsilon_lower"] > r["certified"]["epsilon"]
