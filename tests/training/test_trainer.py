"""The training loop: DP path = non-private path at zero noise, budget stop, ledger, SIGKILL + resume."""

import json
import math
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
from metadp.accounting.ledger import Ledger  # noqa: E402
from metadp.training.algorithms.models import MLP  # noqa: E402
from metadp.training.data.tasks import SinusoidPool  # noqa: E402
from metadp.training.run.trainer import TrainConfig, train  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


def mse(out, y):
    return ((out - y) ** 2).mean()


def run(config, tmp, pool=None, **kwargs):
    torch.manual_seed(0)
    return train(MLP(), pool or SinusoidPool(400, 5, 5, seed=1), mse, config, tmp, **kwargs)


def test_zero_noise_no_clipping_reproduces_non_private_maml(tmp_path):
    common = dict(steps=12, meta_batch=8, seed=3, first_order=False)
    plain = run(TrainConfig(algorithm="maml", **common), tmp_path / "a")
    dp = run(TrainConfig(algorithm="dp-maml", clip=math.inf, noise_multiplier=0.0, **common), tmp_path / "b")
    for k in plain.params:
        assert torch.equal(plain.params[k], dp.params[k]), k
    assert plain.losses == dp.losses
    # ... and the ledger says what that run was: non-private releases, infinite epsilon
    assert dp.epsilon_spent == math.inf
    assert len(Ledger.open(tmp_path / "b" / "ledger-task.jsonl", readonly=True).entries) == 12


def test_noise_changes_the_update_and_clipping_bounds_it(tmp_path):
    a = run(TrainConfig(algorithm="dp-maml", steps=3, meta_batch=8, clip=1.0, noise_multiplier=1.0), tmp_path / "a")
    b = run(TrainConfig(algorithm="maml", steps=3, meta_batch=8), tmp_path / "b")
    assert any(not torch.equal(a.params[k], b.params[k]) for k in a.params)


def test_stops_at_the_scheduled_last_step_and_reports_its_epsilon(tmp_path):
    # one step costs 2.73 at delta 1e-5 (rate 0.1, z 0.8): a budget of 4 allows some, not all 400
    config = TrainConfig(algorithm="dp-maml", steps=400, meta_batch=40, clip=1.0, noise_multiplier=0.8,
                         epsilon=4.0, delta=1e-5)
    result = run(config, tmp_path)
    step = PoissonSampled(40 / 400, Gaussian(0.8))
    assert 0 < result.last_step < 400 and result.steps_done == result.last_step
    assert PldAccountant().compose(step, result.last_step).get_epsilon(1e-5) <= 4.0
    assert PldAccountant().compose(step, result.last_step + 1).get_epsilon(1e-5) > 4.0
    assert result.epsilon_spent <= 4.0
    report = json.loads((tmp_path / "privacy_report.json").read_text())
    task = next(v for v in report["views"] if v["view"] == "task")
    assert report["budget_unit"] == "task" and task["guarantee"] == "upper bound"
    assert task["epsilon"] == result.epsilon_spent and task["charges"] == result.last_step


_CHILD = r"""
import sys, torch
from metadp.training.algorithms.models import MLP
from metadp.training.data.tasks import SinusoidPool
from metadp.training.run.trainer import TrainConfig, train
torch.manual_seed(0)
config = TrainConfig(algorithm="dp-maml", steps=2000, meta_batch=8, clip=1.0, noise_multiplier=1.0,
                     epsilon=1.4, delta=1e-5, checkpoint_every=5)
train(MLP(), SinusoidPool(400, 5, 5, seed=1), lambda o, y: ((o - y) ** 2).mean(), config, sys.argv[1])
"""


@pytest.mark.slow  # the command-level twin, tests/training/test_train_faults.py, runs by default
def test_sigkill_and_resume_keep_the_ledger_and_the_spent_budget(tmp_path):
    out = tmp_path / "run"
    child = subprocess.Popen([sys.executable, "-c", _CHILD, str(out)], cwd=ROOT,
                             env={**os.environ, "PYTHONPATH": str(ROOT)})
    ledger = out / "ledger-task.jsonl"
    deadline = time.time() + 120
    while time.time() < deadline:  # wait until some releases (and a checkpoint) are on disk
        if (out / "checkpoint.pt").exists() and ledger.exists() and ledger.read_text().count("\n") > 12:
            break
        time.sleep(0.05)
    child.send_signal(signal.SIGKILL)
    child.wait()
    before = Ledger.open(ledger, repair=True)
    released = len(before.entries)
    assert released > 10
    before.close()
    config = TrainConfig(algorithm="dp-maml", steps=2000, meta_batch=8, clip=1.0, noise_multiplier=1.0,
                         epsilon=1.4, delta=1e-5, checkpoint_every=5)  # 94 steps fit epsilon 1.4 (PLD)
    result = run(config, out, resume=True)
    after = Ledger.open(ledger, readonly=True)
    # nothing released before the kill is forgotten, and the run stops at the budget's last step
    assert [e.hash for e in after.entries[:released]] == [e.hash for e in before.entries]
    assert len(after.entries) == result.last_step == 94 >= released
    step = PoissonSampled(8 / 400, Gaussian(1.0))
    assert result.epsilon_spent == pytest.approx(PldAccountant().compose(step, result.last_step).get_epsilon(1e-5),
                                                 rel=1e-6)
    assert result.epsilon_spent <= 1.4
    task = next(v for v in json.loads((out / "privacy_report.json").read_text())["views"] if v["view"] == "task")
    assert task["charges"] == 94 and task["epsilon"] == result.epsilon_spent
