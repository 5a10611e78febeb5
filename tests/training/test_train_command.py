"""`metadp train`: a budgeted DP-MAML run and a non-private one end to end, with their files."""

import json
from pathlib import Path

import pytest

pytest.importorskip("torch")

from metadp.cli import main  # noqa: E402

from clirun import metadp  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


def test_dp_maml_sinusoid_spends_exactly_its_budget(tmp_path):
    # in-process (tests/clirun.py); a real process's output and files are checked by test_train_faults.py
    out = tmp_path / "sin"
    result = metadp("train", "dp-maml", "--data", "sinusoid", "--epsilon", "2", "--delta", "1e-5", "--steps", "10",
                 "--meta-batch", "5", "--pool", "100", "--eval-tasks", "20", "--out", str(out))
    assert result.returncode == 0, result.stderr
    assert "noise calibrated" in result.stdout and "task [budget]: epsilon <=" in result.stdout
    report = json.loads((out / "privacy_report.json").read_text())
    task = next(v for v in report["views"] if v["view"] == "task")
    assert report["budget_unit"] == "task" and report["steps"] == 10 and 1.9 < task["epsilon"] <= 2.0
    record = next(v for v in report["views"] if v["view"] == "record")
    assert record["epsilon"] > task["epsilon"]  # a record moves its task's clipped gradient by up to 2C
    evaluation = json.loads((out / "evaluation.json").read_text())
    assert evaluation["metric"] == "mse" and evaluation["tasks"] == 20
    assert (out / "ledger-task.jsonl").read_text().count("\n") == 11  # header + one line per release
    assert (out / "ledger-record.jsonl").read_text().count("\n") == 11


def test_maml_glyphs_runs_and_evaluates(tmp_path, capsys):
    # in-process (a real process's output is checked by the fault tests)
    out = tmp_path / "glyphs"
    assert main(["train", "maml", "--data", "glyphs", "--steps", "1", "--meta-batch", "4", "--pool", "40",
                 "--eval-tasks", "5", "--out", str(out)]) == 0
    assert "non-private: no privacy guarantee" in capsys.readouterr().out
    assert json.loads((out / "evaluation.json").read_text())["metric"] == "accuracy"
    assert not list(out.glob("ledger*.jsonl"))


def test_dp_maml_needs_a_budget_or_a_noise(capsys, tmp_path):
    assert main(["train", "dp-maml", "--out", str(tmp_path / "x")]) == 2
    assert "--epsilon" in capsys.readouterr().err


def test_dp_maml_with_fixed_size_batches_is_accounted_under_substitution(tmp_path, capsys):
    # fixed batches of 5 of 50 tasks: FixedSizeSampled under substitution (sensitivity 2C); the budget and the
    # report use every accountant that interprets it, the tightest reported (PLD's pair, mechanisms/wor.py)
    from metadp.accounting import FixedSizeSampled, Gaussian
    from metadp.accounting.certify import certify
    from metadp.accounting.ledger import Ledger

    out = tmp_path / "fixed"
    assert main(["train", "dp-maml", "--data", "sinusoid", "--sampler", "fixed", "--epsilon", "2", "--steps", "4",
                 "--pool", "50", "--meta-batch", "5", "--eval-tasks", "5", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "task [budget]: epsilon <=" in printed and "(upper bound, PLD)" in printed and "substitute" in printed
    report = json.loads((out / "privacy_report.json").read_text())
    task = next(v for v in report["views"] if v["view"] == "task")
    assert report["sampling"]["scheme"] == "fixed" and report["sampling_run"]["batch"] == 5 and report["steps"] == 4
    assert task["relation"] == "substitute" and task["accountant"] == "pld" and task["charges"] == 4
    ledger = Ledger.open(out / "ledger-task.jsonl", readonly=True)
    assert ledger.relation == "substitute" and len({e.event for e in ledger.entries}) == 1
    event = ledger.entries[0].event
    assert isinstance(event, FixedSizeSampled) and (event.batch, event.population) == (5, 50)
    assert event.sensitivity_factor == 2.0
    expected = certify(event, 1e-5, steps=4, relation="substitute").epsilon
    assert task["epsilon"] == pytest.approx(expected, rel=1e-9) and 1.9 < task["epsilon"] <= 2.0
    z = event.inner.noise_multiplier
    assert certify(FixedSizeSampled(5, 50, Gaussian(z * 0.99), 2.0), 1e-5, steps=4, relation="substitute").epsilon > 2
    # the record view has no bound for fixed batches: reported as such, never budgeted
    record = next(v for v in report["views"] if v["view"] == "record")
    assert record["epsilon"] is None and not (out / "ledger-record.jsonl").exists()


def test_the_same_seed_gives_the_same_run(tmp_path):
    """--seed fixes the model's initial weights too (it did not: two runs with one seed differed)."""
    args = ["train", "maml", "--data", "sinusoid", "--steps", "2", "--meta-batch", "2", "--pool", "10",
            "--eval-tasks", "5", "--seed", "3"]
    results = []
    for name in ("a", "b"):
        assert main(args + ["--out", str(tmp_path / name)]) == 0
        results.append(json.loads((tmp_path / name / "evaluation.json").read_text()))
    assert results[0] == results[1]
