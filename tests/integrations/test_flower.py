"""DP-FedMeta on Flower (`metadp train ALGO --engine flower --plan FILE`, metadp.training.engines.flower).

Most tests drive the server's strategy through an in-process stand-in for Flower's Grid that calls the
real ClientApp directly (no Ray): the strategy, the clients and the trainer's loop are the ones a
simulation runs, only the transport differs. Slow tests run the real thing: `flwr run` of metadp's Flower App on a
simulation of 20 clients for 3 rounds from the command line, whose report must equal `metadp plan --json` and whose
model must equal the local engine's on the same seed (noise on: both draw the same noise).

What must hold: the clients asked each step are exactly the plan sampler's draw (and pass the sampler
fidelity test for Poisson selection); with the noise off the Flower engine trains the local engine's
model; a client that fails, times out or sends garbage contributes a zero update, the step is still
charged and the report counts the dropout; an interrupted server resumes without losing a release;
whatever the engine cannot run is refused with one line before anything is written.
"""

import json
import math
import time
from types import SimpleNamespace

import pytest

torch = pytest.importorskip("torch")

from metadp.accounting.ledger import Ledger  # noqa: E402
from metadp.cli import main  # noqa: E402
from metadp.plan import loads_plan, plan_epsilon  # noqa: E402
from metadp.training.engines import federated  # noqa: E402
from metadp.training.algorithms import models  # noqa: E402
from metadp.training.data import tasks  # noqa: E402
from metadp.training.algorithms import functional as F  # noqa: E402
from metadp.training.run.config import TrainConfig  # noqa: E402
from metadp.training.run.state import stream_seed  # noqa: E402
from metadp.training.data.samplers import sampler_for  # noqa: E402
from metadp.training.run.trainer import TrainingInterrupted, train  # noqa: E402
from metadp.verify.fidelity import poisson_inclusion_test  # noqa: E402

from flower_grid import InProcessGrid, Tasks, _config, _model, _mse  # noqa: E402

PLAN = """\
name = "DP-AGR, {population} sinusoid clients"
unit = "task"
delta = 1e-5
steps = {steps}

[sampling]
scheme = "{scheme}"
population = {population}
batch_size = {batch}

[noise]
mechanism = "gaussian"
multiplier = 0.9
"""


def _plan_text(population=20, batch=5, steps=3, scheme="poisson"):
    return PLAN.format(population=population, batch=batch, steps=steps, scheme=scheme)


def _engine(flower, population, timeout=5.0, **faults):
    silent, garbage = faults.pop("silent", ()), faults.pop("garbage", None)
    grid = InProcessGrid(flower.client_app(Tasks(population, **faults)), population, silent=silent, garbage=garbage)
    return grid, flower.DpFedMetaStrategy(timeout=timeout).connect(grid, population)


def _clients(population):
    """All the server knows of the population (the data stay with the clients: the server never reads it)."""
    return SimpleNamespace(size=population, query_per_task=None)


# -- the server's strategy, in process ----------------------------------------------------------------
@pytest.mark.parametrize("scheme, population, batch", [("poisson", 20, 5), ("fixed", 20, 5), ("shuffle", 12, 4)])
def test_each_step_asks_exactly_the_plans_sampler_draw(flower, tmp_path, scheme, population, batch):
    plan = loads_plan(_plan_text(population, batch, steps=6, scheme=scheme))
    grid, strategy = _engine(flower, population)
    train(_model(), _clients(population), None, _config("dp-agr", plan), tmp_path / "run", plan=plan, engine=strategy)
    sampler = sampler_for(plan.sampling, torch.Generator().manual_seed(stream_seed(0, "sampler")))
    for step in range(1, 7):
        drawn = sampler.sample()
        expected = torch.nonzero(drawn).flatten() if drawn.dtype == torch.bool else drawn
        assert grid.asked.get(step, []) == expected.tolist(), step


def test_the_realised_poisson_selection_passes_the_fidelity_test(flower, tmp_path):
    population, rate, steps = 20, 0.25, 120
    plan = loads_plan(_plan_text(population, 5, steps=steps))
    grid, strategy = _engine(flower, population)
    config = _config("maml", plan, inner_steps=0)
    train(models.MLP((1, 4, 1)), _clients(population), None, config, tmp_path / "run", plan=plan, engine=strategy)
    mask = torch.zeros((steps, population), dtype=torch.bool)
    for step, asked in grid.asked.items():
        mask[step - 1, asked] = True
    result = poisson_inclusion_test(mask.numpy(), rate, 1e-3)
    assert result.passed, result.detail
    assert sum(r["selected"] for r in strategy.rounds) == int(mask.sum())
    # a draw of exactly 5 clients a step (what a fixed-size selection would give) fails the same test
    fixed = torch.zeros((steps, population), dtype=torch.bool)
    for t in range(steps):
        fixed[t, torch.randperm(population, generator=torch.Generator().manual_seed(t))[:5]] = True
    assert not poisson_inclusion_test(fixed.numpy(), rate, 1e-3).passed


@pytest.mark.parametrize("algorithm", ["maml", "dp-agr"])
def test_the_flower_engine_trains_the_local_engines_model(flower, tmp_path, algorithm):
    # maml: no clipping and no noise (the plan's sampling only); dp-agr: both engines draw the same noise
    plan = loads_plan(_plan_text(20, 5, steps=5))
    config = _config(algorithm, plan, clip=0.5)
    local = train(_model(), tasks.SinusoidPool(20, 10, 10, seed=0), _mse, config, tmp_path / "local", plan=plan)
    _, strategy = _engine(flower, 20)
    fed = train(_model(), _clients(20), None, config, tmp_path / "fed", plan=plan, engine=strategy)
    assert fed.losses == pytest.approx(local.losses, rel=1e-5)
    moved = 0.0
    for name, value in local.params.items():
        torch.testing.assert_close(fed.params[name], value, rtol=1e-5, atol=1e-7)
        moved = max(moved, float((value - _model().state_dict()[name]).abs().max()))
    assert moved > 1e-3  # the model did train: equality is not that of two untouched models
    assert fed.report["engine"] == "flower" and local.report["engine"] == "local"
    assert fed.report["epsilon"] == local.report["epsilon"]


def test_a_banded_plan_on_flower_trains_the_local_engines_model(flower, tmp_path):
    # DP-FTRL's banded noise is the server's: both engines stream the same C^-1 Z (issue 34)
    plan = loads_plan(PLAN.format(population=20, batch=5, steps=6, scheme="cyclic_poisson").replace(
        "batch_size = 5", "batch_size = 5\ngroups = 2") + 'correlation = "banded"\nbands = 2\n')
    config = _config("dp-agr", plan, clip=0.5)
    local = train(_model(), tasks.SinusoidPool(20, 10, 10, seed=0), _mse, config, tmp_path / "local", plan=plan)
    _, strategy = _engine(flower, 20)
    fed = train(_model(), _clients(20), None, config, tmp_path / "fed", plan=plan, engine=strategy)
    for name, value in local.params.items():
        torch.testing.assert_close(fed.params[name], value, rtol=1e-5, atol=1e-7)
    assert fed.report["epsilon"] == local.report["epsilon"] == pytest.approx(plan_epsilon(plan).epsilon, rel=1e-12)
    assert fed.report["views"][0]["charges"] == 3  # one charge a pass of 2 groups


def _wrong_shape(arrays):
    from flwr.app import ArrayRecord

    state = arrays.to_torch_state_dict()
    return ArrayRecord(torch_state_dict={k: torch.zeros(v.numel() + 1) for k, v in state.items()})


def _missing_tensor(arrays):
    from flwr.app import ArrayRecord

    state = arrays.to_torch_state_dict()
    state.pop(next(iter(state)))
    return ArrayRecord(torch_state_dict=state)


def test_a_failed_silent_or_garbage_client_counts_as_a_zero_update(flower):
    # of the drawn 2, 3, 5, 7, 9, 10, 11: 3 raises, 5 sends NaN, 9 never answers, 10 and 11 send updates of
    # other shapes or names; they count as zero. The rows after them are the trainer's Poisson pads (weight 0),
    # never asked
    grid, strategy = _engine(flower, 12, timeout=0.5, fail={3}, nan={5}, silent={9},
                             garbage={10: _wrong_shape, 11: _missing_tensor})
    params = dict(_model().named_parameters())
    params = {k: v.detach() for k, v in params.items()}
    rows, weights = torch.tensor([2, 3, 5, 7, 9, 10, 11, 0, 0]), torch.tensor([1.0, 1, 1, 1, 1, 1, 1, 0, 0])
    config = TrainConfig(algorithm="dp-agr", first_order=True, inner_lr=0.01)
    total, norms, losses = strategy.clipped_sum(None, None, params, None, rows, weights, None, config, None, None,
                                                0.3, False)
    assert grid.asked == {1: [2, 3, 5, 7, 9, 10, 11]}
    pool = tasks.SinusoidPool(12, 10, 10, seed=0)
    expected = {k: torch.zeros_like(v) for k, v in params.items()}
    for pid in (2, 7):
        update, _ = flower.client_update(flower.ClientTask(models.MLP(), pool, pid, _mse), params, algorithm="dp-agr",
                                         inner_steps=1, inner_lr=0.01, first_order=True)
        clipped, _ = F.clip({k: v.unsqueeze(0) for k, v in update.items()}, 0.3)
        expected = {k: expected[k] + clipped[k][0] for k in expected}
    for k in expected:
        torch.testing.assert_close(total[k], expected[k], rtol=1e-6, atol=1e-8)
    assert norms[[1, 2, 4, 5, 6, 7, 8]].tolist() == [0.0] * 7 and bool((norms[[0, 3]] > 0).all())
    assert losses[[1, 2, 4, 5, 6]].tolist() == [0.0] * 5 and bool((losses[[0, 3]] > 0).all())
    assert strategy.rounds == [{"selected": 7, "dropped": 5}]


def test_a_run_with_dropouts_charges_every_step_and_reports_the_dropouts(flower, tmp_path):
    plan = loads_plan(_plan_text(20, 5, steps=6))
    grid, strategy = _engine(flower, 20, timeout=0.5, fail={1, 4, 6, 11, 17}, silent={2, 8})
    result = train(_model(), _clients(20), None, _config("dp-agr", plan), tmp_path / "run", plan=plan,
                   engine=strategy)
    asked = [p for step in grid.asked.values() for p in step]
    dropped = sum(p in {1, 4, 6, 11, 17, 2, 8} for p in asked)
    assert dropped > 0 and len(asked) > dropped  # the seed draws both kinds
    fed = result.report["federated"]
    assert (fed["updates_asked"], fed["updates_dropped"]) == (len(asked), dropped)
    assert sum(r["dropped"] for r in fed["rounds_with_dropouts"]) == dropped
    assert len(Ledger.open(tmp_path / "run" / "ledger-task.jsonl", readonly=True).entries) == 6
    assert result.report["epsilon"] == pytest.approx(plan_epsilon(plan).epsilon, rel=1e-9)


def test_an_interrupted_server_resumes_without_losing_a_release(flower, tmp_path):
    plan = loads_plan(_plan_text(20, 5, steps=5))
    config = _config("dp-agr", plan, checkpoint_every=1)
    out = tmp_path / "run"

    def stop_at_three(step, loss, spent):
        if step == 3:
            raise KeyboardInterrupt

    with pytest.raises(TrainingInterrupted):
        train(_model(), _clients(20), None, config, out, plan=plan, engine=_engine(flower, 20)[1],
              progress=stop_at_three)
    assert len(Ledger.open(out / "ledger-task.jsonl", readonly=True).entries) == 3
    result = train(_model(), _clients(20), None, config, out, plan=plan, engine=_engine(flower, 20)[1], resume=True)
    assert len(Ledger.open(out / "ledger-task.jsonl", readonly=True).entries) == 5  # two more, not five
    assert result.report["epsilon"] == pytest.approx(plan_epsilon(plan).epsilon, rel=1e-9)
    assert result.report["federated"]["rounds_run"] == 2 and result.report["engine"] == "flower"
    # the local engine, interrupted and resumed alike, ends with the same model (the step drawn again after the
    # checkpoint at step 2 is charged twice in both)
    pool, local = tasks.SinusoidPool(20, 10, 10, seed=0), tmp_path / "local"
    with pytest.raises(TrainingInterrupted):
        train(_model(), pool, _mse, config, local, plan=plan, progress=stop_at_three)
    again = train(_model(), pool, _mse, config, local, plan=plan, resume=True)
    assert len(again.losses) == len(result.losses)
    for name, value in again.params.items():
        torch.testing.assert_close(result.params[name], value, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("nodes, words", [
    ({"extra": 1}, "population is 4 clients, but 5 are connected"),
    ({"duplicate": 1}, "two client nodes say partition-id 0"),
])
def test_clients_that_do_not_match_the_population_are_refused_before_any_step(flower, nodes, words):
    grid = InProcessGrid(flower.client_app(Tasks(5)), 5)
    if "duplicate" in nodes:
        first, second = list(grid.partition_of)[:2]
        grid.partition_of[second] = grid.partition_of[first]
        grid.partition_of.pop(next(n for n, p in grid.partition_of.items() if p == 4))
    with pytest.raises(ValueError, match=words):
        flower.DpFedMetaStrategy(timeout=0.2).connect(grid, 4)
    assert grid.asked == {}


# -- the command: refusals (no simulation starts) -----------------------------------------------------
def _write(tmp_path, text, name="plan.toml"):
    path = tmp_path / name
    path.write_text(text)
    return str(path)


EPISODIC = """\
name = "episodes"
unit = "record"
delta = 1e-6
steps = 2

[sampling]
scheme = "episodic"
episodes = 3

[noise]
mechanism = "gaussian"
multiplier = 1.0
clipping = "per_episode"

[[hierarchy]]
name = "class"
draw = "fixed"
size = 5
units = 150

[[hierarchy]]
name = "drawing"
draw = "fixed"
size = 2
units = 20
"""


@pytest.mark.parametrize("algorithm, plan, flags, words", [
    ("dp-agr", None, ["--noise", "1"], "--engine flower runs plan files: give --plan FILE"),
    ("dp-agrlr", "poisson", [], "dp-agrlr releases release.form = 'local_noise'"),
    ("dp-agr", "poisson", ["--chunk-size", "2"], "--chunk-size does not apply to --engine flower"),
    ("dp-agr", "episodic", ["--data", "glyphs"], "a client holds one fixed task of the population"),
    ("protonet", None, ["--data", "glyphs"], "--engine do not apply to protonet"),
    ("dp-agr", "poisson", ["--clients", "20"], "--clients is the number of SuperNodes --deployment local starts"),
    ("dp-agr", "poisson", ["--deployment", "local", "--clients", "3"], "the plan's sampling.population is 20"),
    ("dp-agr", "poisson", ["--deployment", "local", "--superlink", "1.2.3.4:9"], "give one of them"),
    ("dp-agr", "poisson", ["--root-certificates", "ca.pem"], "--root-certificates applies to --superlink"),
    ("dp-agr", "poisson", ["--client-timeout", "0"], "--client-timeout must be"),
])
def test_what_the_flower_engine_cannot_run_is_refused_in_one_line(tmp_path, capsys, algorithm, plan, flags, words):
    out = tmp_path / "run"
    argv = ["train", algorithm, "--engine", "flower", "--out", str(out)]
    if plan is not None:
        argv += ["--plan", _write(tmp_path, EPISODIC if plan == "episodic" else _plan_text())]
    if "--data" not in flags:
        argv += ["--data", "sinusoid"]
    assert main(argv + flags) == 2
    err = capsys.readouterr().err.strip()
    assert words in err and err.count("\n") == 0 and err.startswith("metadp: error:")
    assert not out.exists()


@pytest.mark.parametrize("flags", [["--deployment", "local"], ["--superlink", "host:9092"], ["--clients", "3"]])
def test_flower_flags_without_the_flower_engine_are_refused(tmp_path, capsys, flags):
    out = tmp_path / "run"
    assert main(["train", "dp-agr", "--plan", _write(tmp_path, _plan_text()), "--data", "sinusoid", "--out", str(out),
                 *flags]) == 2
    err = capsys.readouterr().err.strip()
    assert f"{flags[0]} applies to --engine flower" in err and err.count("\n") == 0 and not out.exists()


def test_without_flower_the_engine_is_refused_with_the_install_hint(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(federated, "flower_installed", lambda: False)
    out = tmp_path / "run"
    assert main(["train", "dp-agr", "--engine", "flower", "--plan", _write(tmp_path, _plan_text()), "--data",
                 "sinusoid", "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert "pip install 'metadp[federated]'" in err and err.count("\n") == 0
    assert not out.exists()


def test_a_folder_holding_a_run_is_refused_before_the_simulation_starts(flower, tmp_path, monkeypatch):
    import tomllib

    from metadp.training.engines import flower_launch, flower_run

    text = _plan_text()
    plan = loads_plan(text)
    out = tmp_path / "run"
    train(_model(), tasks.SinusoidPool(20, 10, 10, seed=0), _mse, _config("dp-agr", plan), out, plan=plan)
    before = sorted((p.name, p.stat().st_mtime_ns) for p in out.iterdir())
    monkeypatch.setattr(flower_launch.Federation, "start", lambda self: pytest.fail("a Flower process started"))
    with pytest.raises(ValueError, match="holds a run"):
        flower_run.run_plan(_config("dp-agr", plan), out, plan=plan, table=tomllib.loads(text),
                            tasks=flower.SimulatedTasks("sinusoid", 20, 0))
    assert sorted((p.name, p.stat().st_mtime_ns) for p in out.iterdir()) == before


# -- a real Flower simulation (Ray) --------------------------------------------------------------------
@pytest.mark.slow  # ~25 s, mostly Ray starting: CI runs it with the slow sweeps (and the README's Flower command)
def test_a_flower_simulation_of_20_clients_reports_the_plans_epsilon_and_trains_the_local_model(flower, tmp_path,
                                                                                                capsys):
    plan = _write(tmp_path, _plan_text(20, 5, steps=3))
    fed, local = tmp_path / "fed", tmp_path / "local"
    common = ["--plan", plan, "--data", "sinusoid", "--first-order", "--eval-tasks", "10", "--seed", "3"]
    start = time.monotonic()
    assert main(["train", "dp-agr", "--engine", "flower", *common, "--out", str(fed)]) == 0
    seconds = time.monotonic() - start
    printed = capsys.readouterr().out
    assert "engine flower (Flower simulation via flwr run" in printed and "): 20 clients" in printed
    assert "0 of " in printed
    assert seconds < 180, seconds  # a hang guard (about 25 s alone): CI runs it beside the other slow tests
    report = json.loads((fed / "privacy_report.json").read_text())
    assert main(["plan", plan, "--json"]) == 0
    expected = json.loads(capsys.readouterr().out)
    assert report["engine"] == "flower" and report["steps_done"] == 3
    assert report["epsilon"] == pytest.approx(expected["epsilon"], rel=1e-9) and math.isfinite(report["epsilon"])
    assert report["sampling"] == expected["sampling"] and report["federated"]["clients"] == 20
    assert all(v["ledger_matches_plan"] for v in report["views"])
    assert main(["train", "dp-agr", *common, "--out", str(local)]) == 0
    mine = torch.load(fed / "checkpoint.pt", weights_only=False)["params"]
    theirs = torch.load(local / "checkpoint.pt", weights_only=False)["params"]
    for name, value in theirs.items():
        torch.testing.assert_close(mine[name], value, rtol=1e-5, atol=1e-7)
    assert json.loads((local / "privacy_report.json").read_text())["epsilon"] == report["epsilon"]


@pytest.mark.slow
def test_a_killed_server_resumes_its_ledger_without_losing_a_release(flower, tmp_path, capsys):
    import os
    import signal
    import subprocess
    import sys

    plan = _write(tmp_path, _plan_text(20, 5, steps=60))
    out = tmp_path / "run"
    argv = ["train", "dp-agr", "--engine", "flower", "--plan", plan, "--data", "sinusoid", "--first-order",
            "--eval-tasks", "10", "--checkpoint-every", "7", "--out", str(out)]
    server = subprocess.Popen([sys.executable, "-m", "metadp", *argv], stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL, env=dict(os.environ, FLWR_TELEMETRY_ENABLED="0"))
    ledger_path, deadline = out / "ledger-task.jsonl", time.monotonic() + 240
    try:
        while time.monotonic() < deadline and server.poll() is None:
            if ledger_path.exists() and len(Ledger.open(ledger_path, readonly=True).entries) >= 10:
                break
            time.sleep(0.2)
        assert server.poll() is None, "the run ended before it could be killed"
        server.send_signal(signal.SIGKILL)
    finally:
        server.kill()
        server.wait()
    before = Ledger.open(ledger_path, readonly=True).entries
    assert 10 <= len(before) < 60
    from metadp.training.run import folder as run_folder

    deadline = time.monotonic() + 30  # the server process stops when it sees its launcher gone (within ~1 s)
    while True:
        try:
            run_folder.check_unlocked(out)
            break
        except run_folder.RunLockedError:
            assert time.monotonic() < deadline, "the killed run's server still holds the run folder after 30 s"
            time.sleep(0.2)
    assert main(argv + ["--resume"]) == 0
    after = Ledger.open(ledger_path, readonly=True).entries
    assert len(after) == 60 and [e.hash for e in after[:len(before)]] == [e.hash for e in before]
    report = json.loads((out / "privacy_report.json").read_text())
    capsys.readouterr()
    assert main(["plan", plan, "--json"]) == 0
    assert report["engine"] == "flower"
    assert report["epsilon"] == pytest.approx(json.loads(capsys.readouterr().out)["epsilon"], rel=1e-9)
