"""The prepared GPU check (``benchmarks/gpu_check.sh``) and the throughput benchmark, dry-run on the CPU.

What must hold: the script runs every part end to end with ``--device cpu`` (the equivalence check passes,
the throughput benchmark writes its rates and the task-level ratio, the Omniglot plan runs and is
evaluated on the official one-shot runs), and the epsilons it reports are ``metadp plan``'s for the
steps it ran. So the day a GPU is lent, the script is known to work up to the device itself.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")

from metadp.training.data import sources as data  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


def _equivalence_module():
    import importlib.util

    spec = importlib.util.spec_from_file_location("gpu_equivalence", ROOT / "benchmarks" / "gpu_equivalence.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_noise_check_tells_the_right_noise_from_a_wrong_one():
    # the GPU draws another stream than the CPU, so the check is of the noise's law: it must catch a noise 3%
    # too small or too large, or off-centre by a tenth of its std, at Conv-4's 112,261 coordinates
    import torch

    agrees = _equivalence_module().noise_agrees
    draws = torch.randn(112_261, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    assert agrees(draws, 1.0) and agrees(3.0 * draws, 3.0)
    assert not agrees(0.97 * draws, 1.0) and not agrees(1.03 * draws, 1.0)
    assert not agrees(draws + 0.1, 1.0)


@pytest.mark.slow
def test_gpu_check_dry_run_on_cpu(tmp_path):
    try:
        data.check_omniglot_folder(data.data_dir(None), one_shot=True)
    except (FileNotFoundError, ValueError) as err:
        pytest.skip(f"Omniglot data not available: {err}")
    env = dict(os.environ, RESULTS=str(tmp_path), PYTHON=sys.executable, OMNIGLOT_SECONDS="5")
    done = subprocess.run(["bash", str(ROOT / "benchmarks" / "gpu_check.sh"), "--device", "cpu"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    equivalence = json.loads((tmp_path / "equivalence.json").read_text())
    assert equivalence["passed"] and equivalence["first order"]["sum_relative"] == 0.0
    speed = json.loads((tmp_path / "train_speed.json").read_text())
    rates = {c["name"]: c for c in speed["cases"]}
    assert rates["MAML, first order"]["tasks_per_second"] > 0
    assert rates["DP-MAML task-level, first order"]["ratio"] > 0
    report = json.loads((tmp_path / "omniglot" / "privacy_report.json").read_text())
    plan = json.loads(subprocess.run([sys.executable, "-m", "metadp", "plan", str(tmp_path / "omniglot.toml"),
                                      "--json"], capture_output=True, text=True, check=True).stdout)
    assert report["epsilon"] == plan["epsilon"] and report["steps_done"] == plan["steps"] >= 1
    score = json.loads((tmp_path / "omniglot" / "evaluation.json").read_text())
    assert score["tasks"] == 80 and 0.0 <= score["mean"] <= 1.0
    assert "Omniglot:" in done.stdout and "accuracy" in done.stdout
