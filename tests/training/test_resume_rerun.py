"""A run interrupted between checkpoints re-releases the steps after its last checkpoint when resumed: every
release is charged (the ledger's count equals the releases made), and the messages say exactly that instead
of promising `metadp plan`'s numbers (issue 28, class 6)."""

from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")

from clirun import metadp  # noqa: E402
from metadp.accounting import Gaussian, PoissonSampled  # noqa: E402
from metadp.accounting.ledger import Ledger  # noqa: E402
from metadp.accounting.pld import PldAccountant  # noqa: E402
from metadp.training.algorithms import functional  # noqa: E402

PLAN = """name = "resume"
unit = "task"
relation = "add_remove"
delta = 1e-5
steps = 8
[sampling]
scheme = "poisson"
population = 50
batch_size = 5
[noise]
mechanism = "gaussian"
multiplier = 1.0
"""


def test_interrupted_plan_run_charges_every_release_and_says_so(tmp_path, monkeypatch):
    plan = tmp_path / "plan.toml"
    plan.write_text(PLAN)
    out = tmp_path / "run"
    made = {"n": 0, "stop_at": 6}
    real = functional.noisy_sum

    def counted(*args, **kwargs):  # one call per release; the stop_at-th call is interrupted before its release
        if made["n"] + 1 == made["stop_at"]:
            made["stop_at"] = None
            raise KeyboardInterrupt
        made["n"] += 1
        return real(*args, **kwargs)

    monkeypatch.setattr(functional, "noisy_sum", counted)
    argv = ["train", "dp-maml", "--plan", plan, "--data", "sinusoid", "--out", out, "--eval-tasks", "5",
            "--checkpoint-every", "3"]
    first = metadp(*argv)
    assert first.returncode == 130, first.stderr
    message = first.stderr.strip().splitlines()[-1]
    # 5 steps done, the checkpoint at step 3: steps 4-5 are run again on --resume, and said to be
    assert "checkpoint at step 3" in message and "steps 4-5 are run again and charged again" in message
    assert made["n"] == 5 and len(Ledger.open(out / "ledger-task.jsonl", readonly=True)) == 5

    second = metadp(*argv, "--resume")
    assert second.returncode == 0, second.stderr
    # said in one line on stderr, as the command's other warnings are
    said = [line for line in second.stderr.splitlines() if line.startswith("metadp: warning: ")]
    assert len(said) == 1 and "steps 4-5) by the interrupted run; those steps run again and are charged" in said[0]
    made_total = made["n"]
    # the plan's budget is 8 releases: the resumed run re-runs steps 4-6 and stops there, the releases of the
    # interrupted steps 4-5 still charged
    assert made_total == 8
    ledger = Ledger.open(out / "ledger-task.jsonl", readonly=True)
    assert len(ledger) == made_total  # every release made is charged, no more, no fewer
    assert [e.step for e in ledger.entries] == [0, 1, 2, 3, 4, 3, 4, 5]
    report = json.loads((out / "privacy_report.json").read_text())
    task = next(v for v in report["views"] if v["view"] == "task")
    assert task["charges"] == made_total and report["steps_done"] == 6
    step = PoissonSampled(0.1, Gaussian(1.0))
    assert report["epsilon"] == pytest.approx(PldAccountant().compose(step, made_total).get_epsilon(1e-5), rel=1e-3)
    assert "8 releases charged for 6 steps" in second.stdout and "the same numbers as" not in second.stdout


def test_an_uninterrupted_plan_run_keeps_its_promise(tmp_path):
    plan = tmp_path / "plan.toml"
    plan.write_text(PLAN.replace("steps = 8", "steps = 3"))
    result = metadp("train", "dp-maml", "--plan", plan, "--data", "sinusoid", "--out", tmp_path / "run",
                    "--eval-tasks", "5")
    assert result.returncode == 0, result.stderr
    assert f"the same numbers as `metadp plan {plan}` for the steps run" in result.stdout
