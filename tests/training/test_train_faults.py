"""Faults around `metadp train`'s files: SIGKILL and Ctrl-C mid-run, a tampered ledger, a lost checkpoint,
two runs into one folder. Spent budget is never forgotten, and nothing is corrupted.

Runs are tiny sinusoid runs (a pool of 50 tasks, 5 a step, noise 1): each step costs epsilon as
``PoissonSampled(0.1, Gaussian(1))`` for the task view, so a budget bounds the run's length.
"""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from metadp.accounting import Gaussian, PoissonSampled  # noqa: E402
from metadp.accounting.pld import PldAccountant  # noqa: E402
from metadp.cli import main  # noqa: E402
from metadp.accounting.ledger import Ledger  # noqa: E402
from metadp.training.algorithms.models import MLP  # noqa: E402
from metadp.training.data.tasks import SinusoidPool  # noqa: E402
from metadp.training.run.trainer import ResumeWarning, TrainConfig, train  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
SMALL = ["dp-maml", "--data", "sinusoid", "--noise", "1", "--pool", "50", "--meta-batch", "5", "--eval-tasks", "5"]
STEP = PoissonSampled(0.1, Gaussian(1.0))  # the task view's event per step of SMALL


def start(out: Path, *extra):
    """The real command in a child process; its stderr goes to a file (a pipe nobody reads could fill up)."""
    log = open(out.parent / f"{out.name}.stderr", "w+")
    # Ctrl-C's default action restored in the child: a shell without job control starts background commands
    # (e.g. a CI script run with &) with SIGINT ignored, which the child would inherit and never see SIGINT.
    child = subprocess.Popen([sys.executable, "-m", "metadp", "train", *SMALL, *extra, "--out", str(out)], cwd=ROOT,
                             env={**os.environ, "PYTHONPATH": str(ROOT)}, stdout=subprocess.DEVNULL, stderr=log,
                             text=True, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    child.log = log
    return child


def finish(child, timeout: float = 120.0) -> str:
    """Waits for the child (killed if it outlives ``timeout``: a failing test leaves no run behind); returns
    its stderr."""
    try:
        child.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        child.kill()
        child.wait()
        pytest.fail(f"the run did not end within {timeout:g} s")
    child.log.seek(0)
    text = child.log.read()
    child.log.close()
    return text


def wait_for(condition, child, what: str, timeout: float = 240.0) -> None:
    deadline = time.time() + timeout
    while not condition():
        if child.poll() is not None:
            pytest.fail(f"the run ended (status {child.returncode}) before {what}: {finish(child)}")
        if time.time() > deadline:
            child.kill()
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(0.01)


def lines(path: Path) -> int:
    return path.read_bytes().count(b"\n") if path.exists() else 0


def verified(path: Path) -> Ledger:
    """The ledger, opened without repair: its hash chain and every line verify."""
    return Ledger.open(path, readonly=True)


@pytest.mark.slow  # a real process, killed mid-run (~20 s): with the slow sweeps in CI
def test_sigkill_mid_run_then_resume_keeps_every_release(tmp_path):
    out = tmp_path / "run"
    ledger = out / "ledger-task.jsonl"
    # epsilon 4.2 allows 30 steps (4.178 after 30, PLD); checkpoints every 3 steps
    argv = [*SMALL, "--epsilon", "4.2", "--steps", "1000", "--checkpoint-every", "3"]
    child = start(out, *argv[len(SMALL):])
    wait_for(lambda: (out / "checkpoint.pt").exists() and lines(ledger) > 8, child, "a checkpoint and 7 releases")
    child.send_signal(signal.SIGKILL)
    finish(child)
    before = Ledger.open(ledger, readonly=True, allow_torn=True)  # a torn last line is the kill's, repaired on resume
    released = len(before)
    assert released >= 7
    assert main(["train", *argv, "--out", str(out), "--resume"]) == 0
    after = verified(ledger)
    assert [r.hash for r in after.entries[:released]] == [r.hash for r in before.entries]  # nothing forgotten
    report = json.loads((out / "privacy_report.json").read_text())
    task = next(v for v in report["views"] if v["view"] == "task")
    last = report["last_step_within_budget"]
    # the run stops at the budget's last step, counting the releases made before the kill
    assert len(after) == task["charges"] == last == 30
    assert task["epsilon"] == pytest.approx(PldAccountant().compose(STEP, last).get_epsilon(1e-5), rel=1e-6)
    assert task["epsilon"] <= 4.2
    # each step appends to the task ledger, then the record ledger, then uses the release: a kill between
    # the two appends leaves the task ledger one charge ahead (a release charged but never made)
    assert len(after) - 1 <= len(verified(out / "ledger-record.jsonl")) <= len(after)


@pytest.mark.slow  # a real process, killed mid-run (~20 s): with the slow sweeps in CI
def test_ctrl_c_stops_with_one_line_and_status_130(tmp_path):
    out = tmp_path / "run"
    ledger = out / "ledger-task.jsonl"
    child = start(out, "--epsilon", "1000", "--steps", "100000", "--checkpoint-every", "5")
    wait_for(lambda: (out / "checkpoint.pt").exists() and lines(ledger) > 8, child, "a checkpoint and releases")
    child.send_signal(signal.SIGINT)
    stderr = finish(child)
    assert child.returncode == 130, stderr
    assert "Traceback" not in stderr and "KeyboardInterrupt" not in stderr
    last = stderr.strip().splitlines()[-1].split("\r")[-1].strip()
    assert last.startswith("metadp: interrupted at step ") and "--resume" in last and "ledger" in last, last
    # the ledgers and the checkpoint are consistent: every line verifies, the checkpoint is a prefix of them
    released = len(verified(ledger))
    state = torch.load(out / "checkpoint.pt", weights_only=False)
    length, head = state["run"]["ledgers"]["task"]
    verified(ledger).check_prefix(length, head)
    assert state["step"] <= released and f"{released} releases" in last
    # and the run resumes from there, with the budget spent so far kept
    assert main(["train", *SMALL, "--epsilon", "1000", "--steps", str(released + 3), "--out", str(out), "--resume",
                 "--resume-changed"]) == 0
    assert len(verified(ledger)) >= released


@pytest.mark.slow  # a real process held mid-run while a second one is refused (~10 s): with the slow sweeps in CI
def test_two_runs_into_one_folder_one_refuses(tmp_path, capsys):
    out = tmp_path / "run"
    ledger = out / "ledger-task.jsonl"
    args = [*SMALL, "--epsilon", "1000", "--steps", "100000", "--checkpoint-every", "2"]
    child = start(out, *args[len(SMALL):])
    wait_for(lambda: (out / "checkpoint.pt").exists() and lines(ledger) > 3, child, "a checkpoint and releases")
    # a second run into the folder, with or without --resume: the running one holds the lock
    for extra in ([], ["--resume"]):
        assert main(["train", *args, "--out", str(out), *extra]) == 2
        said = [line for line in capsys.readouterr().err.strip().splitlines() if line.strip()]
        # a run estimated over 5 s says so before loading data and shows its bar from step 0 (training/run/size.py):
        # progress, then the refusal
        status = [line for line in said if line.startswith("metadp: metadp train dp-maml: ") or "it/s]" in line]
        assert len(status) <= 2 and all("estimated at least" in line or "0/100000" in line for line in status)
        err = "\n".join(line for line in said if line not in status)
        assert err.startswith("metadp: error: ") and "in use" in err and f"pid {child.pid}" in err
        assert len(err.splitlines()) == 1
    child.send_signal(signal.SIGINT)
    finish(child)
    assert child.returncode == 130
    # nothing corrupted: the running run's ledgers verify and extend its checkpoint
    length, head = torch.load(out / "checkpoint.pt", weights_only=False)["run"]["ledgers"]["task"]
    verified(ledger).check_prefix(length, head)
    verified(out / "ledger-record.jsonl")


def test_a_tampered_ledger_line_is_refused_naming_file_and_line(tmp_path, capsys):
    out = tmp_path / "run"
    argv = ["train", *SMALL, "--epsilon", "6", "--steps", "4", "--out", str(out)]
    assert main(argv) == 0
    path = out / "ledger-task.jsonl"
    text = path.read_text().splitlines(keepends=True)
    assert '"step":1,' in text[2]
    text[2] = text[2].replace('"step":1,', '"step":7,')  # line 3 (entry 1): canonical JSON, wrong hash
    path.write_text("".join(text))
    files = {p.name: p.read_bytes() for p in out.iterdir()}
    capsys.readouterr()
    assert main([*argv, "--resume"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("metadp: error: ")
    assert "ledger-task.jsonl" in err[0] and "line 3" in err[0]
    assert {p.name: p.read_bytes() for p in out.iterdir()} == files  # refused before anything was written


def test_a_lost_ledger_is_refused_before_anything_is_written(tmp_path, capsys):
    out = tmp_path / "run"
    argv = ["train", *SMALL, "--epsilon", "6", "--steps", "3", "--out", str(out)]
    assert main(argv) == 0
    (out / "ledger-record.jsonl").unlink()  # its releases would be forgotten if a new one were started
    files = {p.name: p.read_bytes() for p in out.iterdir()}
    capsys.readouterr()
    assert main([*argv, "--resume"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "ledger-record.jsonl is missing" in err[0]
    assert {p.name: p.read_bytes() for p in out.iterdir()} == files


def test_a_lost_checkpoint_restarts_from_step_0_loudly_with_the_budget_kept(tmp_path, capsys):
    out = tmp_path / "run"
    # epsilon 2.9 allows 10 steps of 20 (2.855 after 10, PLD)
    argv = ["train", *SMALL, "--epsilon", "2.9", "--steps", "20", "--out", str(out)]
    assert main(argv) == 0
    assert len(verified(out / "ledger-task.jsonl")) == 10
    (out / "checkpoint.pt").unlink()
    capsys.readouterr()
    assert main(argv) == 2  # without --resume: the folder holds a run
    assert "holds a run" in capsys.readouterr().err
    assert main([*argv, "--resume"]) == 0
    err = capsys.readouterr().err
    warning = next(line for line in err.splitlines() if line.startswith("metadp: warning: "))
    assert "checkpoint.pt is missing" in warning and "ledger-task.jsonl: 10" in warning and "step 0" in warning
    # no release beyond the budget: the 10 on record already spend it
    assert len(verified(out / "ledger-task.jsonl")) == 10
    report = json.loads((out / "privacy_report.json").read_text())
    task = next(v for v in report["views"] if v["view"] == "task")
    assert task["charges"] == 10 and task["epsilon"] <= 2.9


def test_a_lost_checkpoint_never_lets_a_visit_charged_budget_overrun(tmp_path):
    # DP-Reptile's record view is charged per visit: one pass of 4 steps visits each record once (k = 1);
    # G(2) composed 3 times costs 3.709 at delta 1e-5 and 4 times 4.377: a budget of 4 allows 3 visits
    config = TrainConfig(algorithm="dp-reptile", steps=40, meta_batch=5, inner_noise=2.0, epsilon=4.0, delta=1e-5,
                         inner_lr=0.02)
    pool = SinusoidPool(20, 5, 5, seed=1)
    mse = lambda o, y: ((o - y) ** 2).mean()  # noqa: E731
    first = train(MLP(), pool, mse, config, tmp_path)
    ledger = tmp_path / "ledger-record.jsonl"
    visits = sum(r.count for r in verified(ledger).entries)
    assert visits == 3 and len(first.losses) == 12
    (tmp_path / "checkpoint.pt").unlink()
    with pytest.warns(ResumeWarning, match="checkpoint.pt is missing"):
        second = train(MLP(), pool, mse, config, tmp_path, resume=True)
    assert sum(r.count for r in verified(ledger).entries) == 3  # the restart released nothing more
    assert second.epsilon_spent <= 4.0 and len(second.losses) == 0
