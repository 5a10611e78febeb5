"""Training over processes (torch.distributed, gloo on CPU; ``metadp.training.engines.distributed``).

What must hold: N processes release exactly what one process releases (the same sampled tasks, the
same inner and central noise: parameters equal to float rounding, for every kind of noise the algorithms
draw, with chunking); each step's tasks are split across the ranks without overlap or loss, and the tasks
computed pass the sampler fidelity test for the plan's Poisson rate; ``metadp train --nproc 2`` reports
exactly ``metadp plan --json`` and says 2 processes; a rank killed with SIGKILL stops the run with one
line and ``--resume`` continues it with every release on the ledger; bad ``--nproc`` use is refused.
"""

import importlib.util
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from metadp.cli import main  # noqa: E402
from metadp.training.engines.distributed import share  # noqa: E402
from metadp.training.run.state import stream_seed  # noqa: E402
from metadp.training.run.trainer import train  # noqa: E402
from metadp.training.data.samplers import sampler_for  # noqa: E402
from metadp.sampling import of_lot  # noqa: E402
from metadp.verify.fidelity import poisson_inclusion_test  # noqa: E402

HERE = Path(__file__).parent
CASE = HERE / "distributed_case.py"
ENV = dict(os.environ, OMP_NUM_THREADS="1", METADP_HEARTBEAT_SECONDS="0")

PLAN = """\
name = "sinusoid, {steps} steps"
unit = "task"
relation = "add_remove"
delta = 1e-5
steps = {steps}

[sampling]
scheme = "poisson"
population = 2000
batch_size = 40

[noise]
mechanism = "gaussian"
multiplier = 1.0
"""


def _case_module():
    spec = importlib.util.spec_from_file_location("distributed_case", CASE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _max_difference(a, b) -> float:
    assert set(a) == set(b)
    return max(float((a[k].cpu() - b[k].cpu()).abs().max()) for k in a)


def test_share_splits_a_chunk_into_contiguous_parts_that_cover_it():
    for n in range(0, 23):
        for size in range(1, 6):
            parts = [share(n, size, r) for r in range(size)]
            covered = [i for p in parts for i in range(n)[p]]
            assert covered == list(range(n))
            lengths = [p.stop - p.start for p in parts]
            assert max(lengths) - min(lengths) <= 1
            if n:
                assert lengths[0] >= 1  # rank 0 always computes (and so draws the chunk's inner noise)


@pytest.mark.parametrize("algorithm, nproc, steps", [
    ("dp-maml", 2, 10),  # central noise only
    pytest.param("dp-maml", 2, 30, marks=pytest.mark.slow),  # ... and the realised sampling checked (30 steps)
    # inner noise, the clients' local noise and the central noise; uneven shares of 7-task chunks
    pytest.param("dp-agrlr", 3, 4, marks=pytest.mark.slow),
])
def test_processes_release_what_one_process_releases(tmp_path, algorithm, nproc, steps):
    subprocess.run([sys.executable, str(CASE), str(tmp_path), str(nproc), algorithm, str(steps)], check=True,
                   env=ENV, timeout=600)
    case = _case_module()
    model, pool, config = case.setup(algorithm, steps)
    one = train(model, pool, case._loss, config, tmp_path / "one")
    many = torch.load(tmp_path / "params.pt")
    assert _max_difference(one.params, many) < 1e-5
    assert _max_difference(one.params, {k: v.detach() for k, v in model.named_parameters()}) > 1e-3  # it trained
    ranks = [json.loads((tmp_path / f"rows-{r}.json").read_text()) for r in range(nproc)]
    assert all(len(r) == steps for r in ranks)
    sampler = sampler_for(of_lot("poisson", 200, config.meta_batch),
                          torch.Generator().manual_seed(stream_seed(config.seed, "sampler")))
    mask = torch.zeros((steps, 200), dtype=torch.bool)
    for step in range(steps):
        computed = [row for r in ranks for row in r[step]]
        assert len(computed) == len(set(computed)), "a task computed by two processes"
        drawn = torch.nonzero(sampler.sample()).flatten().tolist()
        assert sorted(computed) == drawn, "the processes computed other tasks than the sampler drew"
        mask[step, computed] = True
    if steps >= 30:
        result = poisson_inclusion_test(mask.numpy(), config.meta_batch / 200, 1e-3)
        assert result.passed, result.detail
        assert all(sum(len(s) for s in r) > 0 for r in ranks)  # every rank computed tasks


def _train(args, out, *, check=True, **kwargs):
    return subprocess.run([sys.executable, "-m", "metadp", "train", *args, "--out", str(out)], env=ENV,
                          capture_output=True, text=True, timeout=600, check=check, **kwargs)


@pytest.mark.slow
def test_nproc_2_reports_the_plan_and_says_two_processes(tmp_path):
    plan = tmp_path / "plan.toml"
    plan.write_text(PLAN.format(steps=6))
    common = ["dp-maml", "--plan", str(plan), "--data", "sinusoid", "--eval-tasks", "20"]
    two = _train([*common, "--nproc", "2"], tmp_path / "two")
    _train(common, tmp_path / "one")
    assert "2 processes (torch.distributed, gloo)" in two.stdout
    assert two.stdout.count("dp-maml ran the plan") == 1  # rank 0 alone prints
    report = json.loads((tmp_path / "two" / "privacy_report.json").read_text())
    planned = json.loads(subprocess.run([sys.executable, "-m", "metadp", "plan", str(plan), "--json"], env=ENV,
                                        capture_output=True, text=True, check=True).stdout)
    assert {k: report[k] for k in planned} == planned
    assert (report["processes"], report["backend"]) == (2, "gloo")
    single = json.loads((tmp_path / "one" / "privacy_report.json").read_text())
    assert {k: v for k, v in report.items() if k not in ("processes", "backend")} == single
    params = [torch.load(tmp_path / d / "checkpoint.pt", weights_only=False)["params"] for d in ("one", "two")]
    assert _max_difference(*params) < 1e-6
    assert sorted(p.name for p in (tmp_path / "two").iterdir()) == sorted(p.name for p in (tmp_path / "one").iterdir())


BANDED = """\
name = "banded DP-AGR on two processes"
unit = "task"
delta = 1e-5
steps = 8

[sampling]
scheme = "cyclic_poisson"
population = 40
batch_size = 5
groups = 4

[noise]
mechanism = "gaussian"
multiplier = 1.0
correlation = "banded"
bands = 3
"""


@pytest.mark.slow
def test_a_banded_plan_on_two_processes_is_the_one_process_run(tmp_path):
    # DP-FTRL's banded noise is rank 0's (it streams C^-1 Z): the model is the one-process run's, bit for bit here
    plan = tmp_path / "plan.toml"
    plan.write_text(BANDED)
    common = ["dp-agr", "--plan", str(plan), "--data", "sinusoid", "--first-order", "--eval-tasks", "5"]
    _train([*common, "--nproc", "2"], tmp_path / "two")
    _train(common, tmp_path / "one")
    params = [torch.load(tmp_path / d / "checkpoint.pt", weights_only=False)["params"] for d in ("one", "two")]
    assert _max_difference(*params) < 1e-6
    reports = [json.loads((tmp_path / d / "privacy_report.json").read_text()) for d in ("one", "two")]
    assert reports[1]["epsilon"] == reports[0]["epsilon"] and reports[1]["views"][0]["charges"] == 2


def _ledger_lines(out: Path) -> int:
    path = out / "ledger-task.jsonl"
    return len(path.read_text().splitlines()) if path.exists() else 0


@pytest.mark.slow
def test_a_killed_rank_stops_the_run_and_resume_loses_no_release(tmp_path):
    plan = tmp_path / "plan.toml"
    plan.write_text(PLAN.format(steps=150))
    out = tmp_path / "run"
    args = ["dp-maml", "--plan", str(plan), "--data", "sinusoid", "--eval-tasks", "20", "--checkpoint-every", "7",
            "--nproc", "2"]
    log = tmp_path / "stderr.txt"
    with open(log, "w") as stderr:
        proc = subprocess.Popen([sys.executable, "-m", "metadp", "train", *args, "--out", str(out)], env=ENV,
                                stdout=subprocess.DEVNULL, stderr=stderr, text=True)
    deadline = time.monotonic() + 300
    while "pids " not in log.read_text() and time.monotonic() < deadline:
        time.sleep(0.05)
    # "metadp: 2 processes (torch.distributed; pids A, B, ranks 0-1); ..."
    worker = int(log.read_text().split("pids ")[1].split(",")[1])
    while _ledger_lines(out) < 20 and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert proc.poll() is None, "the run ended before the kill"
    os.kill(worker, signal.SIGKILL)
    proc.wait(timeout=120)
    err = log.read_text()
    assert proc.returncode == 1
    assert f"process rank 1 (pid {worker}) was killed by SIGKILL" in err and "--resume" in err
    assert "Traceback" not in err
    released = _ledger_lines(out) - 1  # a header line, then one line per release
    saved = torch.load(out / "checkpoint.pt", weights_only=False)["step"]
    assert 0 < saved <= released < 150
    resumed = _train([*args, "--resume"], out)
    # every release of the killed run stays charged; the steps after its checkpoint are released again, and the
    # run stops when the plan's 150 releases are spent
    assert _ledger_lines(out) - 1 == 150
    report = json.loads((out / "privacy_report.json").read_text())
    assert report["steps_done"] == 150 - (released - saved)
    assert "releases charged for" in resumed.stdout and report["processes"] == 2


@pytest.mark.parametrize("args, message", [
    (["dp-agr", "--nproc", "0"], "--nproc must be"),
    (["dp-agr", "--nproc", "2", "--engine", "flower"], "choose one"),
    (["protonet", "--nproc", "2"], "--nproc applies to the meta-learning algorithms"),
])
def test_bad_nproc_is_refused_before_anything_starts(tmp_path, capsys, args, message):
    plan = tmp_path / "plan.toml"
    plan.write_text(PLAN.format(steps=3))
    algorithm, *rest = args
    where = ["--plan", str(plan), "--data", "sinusoid"] if algorithm != "protonet" else ["--data", "glyphs"]
    assert main(["train", algorithm, *where, *rest, "--out", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "run").exists()


def test_nproc_other_than_torchruns_is_refused(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "3")
    monkeypatch.setenv("RANK", "0")
    assert main(["train", "maml", "--data", "sinusoid", "--steps", "2", "--nproc", "2", "--out",
                 str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err
    assert "WORLD_SIZE" in err and "torchrun" in err, err


@pytest.mark.slow
def test_torchrun_runs_the_same_command(tmp_path):
    plan = tmp_path / "plan.toml"
    plan.write_text(PLAN.format(steps=6))
    common = ["train", "dp-maml", "--plan", str(plan), "--data", "sinusoid", "--eval-tasks", "20"]
    subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2", "-m",
                    "metadp", *common, "--out", str(tmp_path / "torchrun")], env=ENV, capture_output=True, text=True,
                   timeout=600, check=True)
    _train(common[1:], tmp_path / "one")
    report = json.loads((tmp_path / "torchrun" / "privacy_report.json").read_text())
    assert report["processes"] == 2
    params = [torch.load(tmp_path / d / "checkpoint.pt", weights_only=False)["params"] for d in ("one", "torchrun")]
    assert _max_difference(*params) < 1e-6
