"""DP-AGRLR on Flower, and DpFedMetaStrategy as a Flower `Strategy` (metadp.training.engines.flower,
flower_client).

What must hold. A DP-AGRLR client replies with exactly what the local engine computes for its task on the
same noise (the DP inner loop, the per-example clip C_in, the local noise z_in C_in, the mean over m), and
in a deployment it draws that noise from a generator seeded by the operating system (the server cannot
replay it: that is what the record-vs-server view assumes); with the local noise off, the Flower engine
computes a DP-AGRLR step as the local engine does; a DP-AGRLR run's report equals the plan's for every
view, the visits of the record-vs-server view counted per client. The strategy is a `flwr.serverapp.strategy.Strategy`
whose `start` runs the trainer and returns Flower's `Result`; Flower's arguments that would change the
certified run are refused. Slow: `metadp train dp-agrlr --engine flower` in a real simulation.
"""

import json

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("flwr")

from flwr.app import ArrayRecord, ConfigRecord, MetricRecord  # noqa: E402
from flwr.serverapp.strategy import Result, Strategy  # noqa: E402

from metadp.cli import main  # noqa: E402
from metadp.plan import loads_plan, plan_epsilon  # noqa: E402
from metadp.training import algorithms  # noqa: E402
from metadp.training.algorithms import contributions, models  # noqa: E402
from metadp.training.data import tasks  # noqa: E402
from metadp.training.engines import federated, flower_client  # noqa: E402
from metadp.training.run.config import TrainConfig  # noqa: E402
from metadp.training.run.trainer import train  # noqa: E402

from flower_grid import InProcessGrid, Tasks, _config, _model, _mse  # noqa: E402

AGRLR = """\
name = "DP-AGRLR, {population} sinusoid clients"
unit = "task"
delta = 1e-5
steps = {steps}
record_multiplicity = {k}

[sampling]
scheme = "poisson"
population = {population}
rate = 0.5

[noise]
mechanism = "gaussian"
multiplier = {z}

[release]
form = "local_noise"
inner_steps = 1
inner_noise = {z_in}
query_per_task = 10
first_order = true
"""


def _agrlr(population=8, steps=4, z=1.0, z_in=3.0, k=1):
    return AGRLR.format(population=population, steps=steps, z=z, z_in=z_in, k=k)


def _params():
    return {k: v.detach() for k, v in _model().named_parameters()}


# -- the DP-AGRLR client ---------------------------------------------------------------------------
def test_a_dp_agrlr_client_replies_the_local_engines_noisy_mean_of_its_task():
    pool, params = tasks.SinusoidPool(6, 10, 10, seed=0), _params()
    config = TrainConfig(algorithm="dp-agrlr", first_order=True, inner_lr=0.01, inner_clip=0.7, inner_noise=2.0)
    alg = algorithms.get("dp-agrlr")
    for pid in (0, 4):
        mine, loss = flower_client.client_update(
            flower_client.ClientTask(models.MLP(), pool, pid, _mse), params, algorithm="dp-agrlr", inner_steps=1,
            inner_lr=0.01, first_order=True, inner_clip=0.7, inner_noise=2.0,
            noise_gen=torch.Generator().manual_seed(11))
        local, losses = contributions.query_sums(alg, models.MLP(), params, pool, torch.tensor([pid]), _mse, config,
                                                 torch.Generator().manual_seed(11))
        for name, value in local.items():
            torch.testing.assert_close(mine[name], value[0], rtol=0, atol=0)
        assert loss == pytest.approx(float(losses[0]))
        # the local noise is there: the same task without it is another update, by about z_in C_in / m per coordinate
        quiet, _ = contributions.query_sums(alg, models.MLP(), params, pool, torch.tensor([pid]), _mse,
                                            TrainConfig(algorithm="dp-agrlr", first_order=True, inner_lr=0.01,
                                                        inner_clip=0.7, inner_noise=0.0), None)
        gap = torch.cat([(mine[k] - quiet[k][0]).flatten() for k in mine])
        assert 0.5 * 2.0 * 0.7 / 10 < float(gap.std()) < 2.0 * 2.0 * 0.7 / 10


def test_a_deployed_dp_agrlr_client_seeds_its_noise_from_the_operating_system(flower, monkeypatch):
    grid = InProcessGrid(flower.client_app(Tasks(4)), 4)
    strategy = flower.DpFedMetaStrategy(timeout=5.0).connect(grid, 4)
    config = TrainConfig(algorithm="dp-agrlr", first_order=True, inner_lr=0.01, inner_clip=0.7, inner_noise=2.0)
    params, rows, weights = _params(), torch.tensor([2]), torch.tensor([1.0])

    def reply():
        total, _, _ = strategy.clipped_sum(None, None, params, None, rows, weights, None, config, None, None,
                                           1e6, False)  # a threshold no update reaches
        return total

    first, second = reply(), reply()
    assert any(not torch.equal(first[k], second[k]) for k in first)  # fresh noise for every message
    seeds = []
    monkeypatch.setattr(flower_client.secrets, "randbits", lambda bits: seeds.append(bits) or 123_456_789)
    replayed = reply()
    assert seeds == [63]
    expected, _ = flower.client_update(Tasks(4)(2), params, algorithm="dp-agrlr", inner_steps=1, inner_lr=0.01,
                                       first_order=True, inner_clip=0.7, inner_noise=2.0,
                                       noise_gen=torch.Generator().manual_seed(123_456_789))
    for name, value in expected.items():
        torch.testing.assert_close(replayed[name], value, rtol=0, atol=0)


def test_with_the_local_noise_off_a_flower_step_of_dp_agrlr_is_the_local_engines(flower):
    # z_in = 0: the per-example clip C_in, the clients' means over m, the server's clip C and the sum are all
    # that is left of a step, and both engines must compute them alike, pads (weight 0) included (the noise itself
    # is tested above; a whole run cannot be compared: Adam turns noise of 1e-9 into sign flips of near-zero
    # coordinates, and a plan has noise)
    from metadp.training.engines.local import LOCAL

    alg = algorithms.get("dp-agrlr")
    config = TrainConfig(algorithm="dp-agrlr", first_order=True, inner_lr=0.01, inner_clip=0.5, inner_noise=0.0)
    params, pool = _params(), tasks.SinusoidPool(8, 10, 10, seed=0)
    rows, weights = torch.tensor([1, 4, 6, 7, 0]), torch.tensor([1.0, 1, 1, 1, 0])
    run = type("Run", (), {"noise_gen": torch.Generator().manual_seed(0)})()
    local, local_norms, local_losses = LOCAL.clipped_sum(alg, models.MLP(), params, pool, rows, weights, _mse, config,
                                                         run, contributions.query_sums, 0.05, False)
    strategy = flower.DpFedMetaStrategy(timeout=5.0).connect(InProcessGrid(flower.client_app(Tasks(8)), 8), 8)
    mine, norms, losses = strategy.clipped_sum(alg, None, params, None, rows, weights, None, config, None, None,
                                               0.05, False)
    for name, value in local.items():
        torch.testing.assert_close(mine[name], value, rtol=1e-5, atol=1e-7)
    torch.testing.assert_close(norms[:4], local_norms[:4], rtol=1e-5, atol=1e-7)
    assert bool((norms[:4] > 0.05).all())  # the server's clip bit: C = 0.05 is below every client's mean
    torch.testing.assert_close(losses[:4], local_losses[:4], rtol=1e-5, atol=1e-7)


def test_a_dp_agrlr_run_on_flower_reports_the_plans_views_and_counts_visits_per_client(flower, tmp_path):
    plan = loads_plan(_agrlr(population=8, steps=5))
    grid = InProcessGrid(flower.client_app(Tasks(8)), 8)
    strategy = flower.DpFedMetaStrategy(timeout=5.0)
    strategy.start(grid, model=_model(), config=_config("dp-agrlr", plan), out_dir=tmp_path / "run", plan=plan)
    report = strategy.result.report
    expected = plan_epsilon(plan)
    assert report["epsilon"] == pytest.approx(expected.epsilon, rel=1e-9)
    views = {v["view"]: v for v in report["views"]}
    assert set(views) == {"task", "record", "record-vs-server"} and all(v["ledger_matches_plan"] for v in views.values())
    flat = [p for step in grid.asked.values() for p in step]
    visits = max(flat.count(p) for p in range(8))
    assert report["max_record_visits"] == visits == views["record-vs-server"]["charges"]
    assert "record-vs-server: also the server" in report["federated"]["adversary"]


@pytest.mark.parametrize("text, words", [
    (_agrlr(k=2), "the server cannot see which records clients share"),
    (_agrlr().replace('form = "local_noise"', 'form = "example_clip"'), "no Flower client computes"),
])
def test_what_a_flower_client_cannot_account_for_is_refused(text, words):
    alg = algorithms.get("dp-agrlr" if "local_noise" in text else "dp-maml-sample")
    why = federated.flower_refusal(alg, loads_plan(text))
    assert why is not None and words in why and "\n" not in why


def test_the_server_refuses_clients_whose_query_size_is_not_one(flower):
    class Mixed(Tasks):
        def __call__(self, pid):
            task = super().__call__(pid)
            return task._replace(tasks=tasks.SinusoidPool(4, 10, 12 if pid == 3 else 10, seed=0))

    with pytest.raises(ValueError, match=r"\[10, 12\] query examples"):
        flower.DpFedMetaStrategy(timeout=1.0).connect(InProcessGrid(flower.client_app(Mixed(4)), 4), 4)
    said = flower.DpFedMetaStrategy(timeout=1.0).connect(InProcessGrid(flower.client_app(Tasks(4)), 4), 4)
    assert said.population == flower.Population(4, 10)


# -- the strategy as a Flower Strategy -------------------------------------------------------------
def test_the_strategy_is_a_flower_strategy_whose_start_returns_flowers_result(flower, tmp_path):
    plan = loads_plan(_agrlr(population=8, steps=3).replace("local_noise", "task_clip").split("[release]")[0])
    config = _config("dp-agr", plan)
    start = {k: torch.zeros_like(v) for k, v in _model().state_dict().items()}
    seen = []
    strategy = flower.DpFedMetaStrategy(timeout=5.0)
    assert isinstance(strategy, Strategy)
    result = strategy.start(InProcessGrid(flower.client_app(Tasks(8)), 8), ArrayRecord(torch_state_dict=start),
                            num_rounds=3, model=_model(), config=config, out_dir=tmp_path / "run", plan=plan,
                            evaluate_fn=lambda rnd, arrays: seen.append((rnd, arrays)) or MetricRecord({"r": rnd}))
    final = result.arrays.to_torch_state_dict()
    for name, value in strategy.result.params.items():
        torch.testing.assert_close(final[name], value)
    assert [r for r, _ in seen] == [0, 3] and sorted(result.evaluate_metrics_serverapp) == [0, 3]
    assert all(torch.equal(seen[0][1].to_torch_state_dict()[k], v) for k, v in start.items())
    rounds = [dict(result.train_metrics_clientapp[i]) for i in (1, 2, 3)]
    assert [(r["selected"], r["dropped"]) for r in rounds] == [(c["selected"], c["dropped"]) for c in strategy.rounds]
    assert all(r["loss"] > 0 for r in rounds if r["selected"])
    assert strategy.configure_evaluate(1, result.arrays, ConfigRecord(), None) == []
    assert strategy.result.report["epsilon"] == pytest.approx(plan_epsilon(plan).epsilon, rel=1e-9)


@pytest.mark.parametrize("given, words", [
    ({"num_rounds": 5}, "num_rounds is 5, but the run's steps are 3"),
    ({"train_config": {"lr": 0.1}}, "train_config: the clients' settings come from the run's TrainConfig"),
    ({"timeout": 0}, "timeout must be a finite number of seconds > 0"),
])
def test_flowers_start_arguments_that_would_change_the_run_are_refused(flower, tmp_path, given, words):
    plan = loads_plan(_agrlr(population=4, steps=3).split("[release]")[0])
    if "train_config" in given:
        given = {"train_config": ConfigRecord(given["train_config"])}
    grid = InProcessGrid(flower.client_app(Tasks(4)), 4)
    with pytest.raises(ValueError, match=words):
        flower.DpFedMetaStrategy(timeout=5.0).start(grid, model=_model(), config=_config("dp-agr", plan),
                                                    out_dir=tmp_path / "run", plan=plan, **given)
    assert grid.asked == {} and not (tmp_path / "run").exists()


# -- a real simulation -------------------------------------------------------------------------------
@pytest.mark.slow  # ~35 s, mostly Ray starting
def test_dp_agrlr_in_a_flower_simulation_reports_every_view_of_metadp_plan(tmp_path, capsys):
    plan = tmp_path / "plan.toml"
    plan.write_text(_agrlr(population=4, steps=2))
    out = tmp_path / "fed"
    assert main(["train", "dp-agrlr", "--engine", "flower", "--plan", str(plan), "--data", "sinusoid",
                 "--first-order", "--eval-tasks", "4", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "record-vs-server: epsilon <=" in printed and "Flower simulation via flwr run" in printed
    assert main(["plan", str(plan), "--json"]) == 0
    expected = json.loads(capsys.readouterr().out)
    report = json.loads((out / "privacy_report.json").read_text())
    assert report["engine"] == "flower" and report["steps_done"] == 2
    assert report["epsilon"] == pytest.approx(expected["epsilon"], rel=1e-9)
    assert [u["epsilon"] for u in report["other_units"]] == pytest.approx(
        [u["epsilon"] for u in expected["other_units"]], rel=1e-9)
    assert all(v["ledger_matches_plan"] for v in report["views"])
