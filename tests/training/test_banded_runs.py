"""`metadp train dp-agr --plan FILE` with DP-FTRL's banded noise and the cross-device participation schemes (issue 34).

What must hold: the noise a run adds at step t is std (C^-1 Z)_t for the plan's C (checked by applying C back to
the stream and recovering the very normals drawn); one band is independent noise exactly (the same model as the
independent-noise plan on the same seed); the samplers keep their schemes' promises (a unit only in its group's
steps; at most k participations at least s apart); a run's report equals `metadp plan --json` and its ledger holds
the plan's charges (per pass of groups, or once); a resumed run continues the same correlated noise (the model of
an uninterrupted run), and a run charged once is charged again when resumed, and reports both charges.
"""

import json

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from metadp.accounting.ledger import Ledger  # noqa: E402
from metadp.banded_noise import plan_coefficients  # noqa: E402
from metadp.cli import main  # noqa: E402
from metadp.mechanisms.banded_opt import banded_toeplitz  # noqa: E402
from metadp.plan import loads_plan, plan_epsilon  # noqa: E402
from metadp.training import algorithms  # noqa: E402
from metadp.training.algorithms import models  # noqa: E402
from metadp.training.algorithms.correlated import BandedSumNoise  # noqa: E402
from metadp.training.data import tasks  # noqa: E402
from metadp.training.data.participation import CyclicPoissonSampler, MinSeparationSampler  # noqa: E402
from metadp.training.run.config import TrainConfig  # noqa: E402
from metadp.training.run.plan_run import check_plan, plan_settings  # noqa: E402
from metadp.training.run.trainer import TrainingInterrupted, train  # noqa: E402

PLAN = """\
name = "tiny banded DP-AGR"
unit = "task"
delta = 1e-5
steps = {steps}

[sampling]
{sampling}

[noise]
mechanism = "gaussian"
multiplier = {z}
{correlation}
"""
CYCLIC = 'scheme = "cyclic_poisson"\npopulation = 40\nbatch_size = 5\ngroups = 4'
EVERY = 'scheme = "none"\npopulation = 12'
MIN_SEP = 'scheme = "min_separation"\npopulation = 40\nparticipations = 2\nseparation = 3'


def _text(sampling, bands=3, steps=8, z=1.0):
    correlation = "" if bands is None else f'correlation = "banded"\nbands = {bands}'
    return PLAN.format(steps=steps, sampling=sampling, z=z, correlation=correlation)


def _mse(out, y):
    return ((out - y) ** 2).mean()


def _run(text, out, progress=None, resume=False, seed=0):
    plan = loads_plan(text)
    alg = algorithms.get("dp-agr")
    check_plan(plan, alg, images=False)
    config = TrainConfig(algorithm="dp-agr", first_order=True, checkpoint_every=1, seed=seed,
                         **plan_settings(plan, alg))
    pool = tasks.SinusoidPool(plan.sampling.population, 5, 5)
    torch.manual_seed(0)
    return train(models.MLP((1, 8, 1)), pool, _mse, config, out, progress=progress, resume=resume, plan=plan)


# -- the noise ---------------------------------------------------------------------------------------
def test_the_streamed_noise_is_c_inverse_z_for_the_plans_strategy():
    c = np.asarray(plan_coefficients(loads_plan(_text(EVERY, bands=4, steps=12))))
    noise, gen, std, n = BandedSumNoise(c), torch.Generator().manual_seed(7), 0.3, 12
    zero = {"w": torch.zeros(3, 2, dtype=torch.float64), "b": torch.zeros(5, dtype=torch.float64)}
    rows = [noise.add(zero, std, gen) for _ in range(n)]
    again = torch.Generator().manual_seed(7)
    drawn = [{k: torch.randn(v.shape, generator=again, dtype=v.dtype) for k, v in zero.items()} for _ in range(n)]
    C = banded_toeplitz(c, n)
    for name in zero:
        w = np.stack([r[name].reshape(-1).numpy() for r in rows])  # [n, dim]: std (C^-1 Z)
        z = np.stack([d[name].reshape(-1).numpy() for d in drawn])
        np.testing.assert_allclose(C @ w, std * z, atol=1e-12)
    assert np.abs(np.linalg.inv(C) @ (std * z) - w).max() > 0 and not np.allclose(w, std * z)  # correlated


def test_one_band_adds_exactly_the_independent_draws_and_a_changed_std_is_refused():
    noise, gen = BandedSumNoise((1.0,)), torch.Generator().manual_seed(3)
    total = {"p": torch.ones(4)}
    got = noise.add(total, 0.5, gen)["p"]
    expected = torch.ones(4) + 0.5 * torch.randn(4, generator=torch.Generator().manual_seed(3))
    assert torch.equal(got, expected)
    with pytest.raises(ValueError, match="std"):
        noise.add(total, 0.6, gen)
    with pytest.raises(ValueError, match="c_0"):
        BandedSumNoise((0.0, 1.0))
    with pytest.raises(ValueError, match="other coefficients"):
        BandedSumNoise((1.0, 0.5)).load_state_dict(noise.state_dict())


# -- the samplers ------------------------------------------------------------------------------------
def test_cyclic_poisson_keeps_each_unit_in_its_groups_steps_at_the_rate():
    pool, groups, rate, steps = 60, 4, 0.3, 2000
    s = CyclicPoissonSampler(pool, groups, rate, torch.Generator().manual_seed(1))
    group = s.assignment
    assert sorted(torch.bincount(group).tolist()) == [15] * 4  # balanced, fixed before the first step
    masks = torch.stack([s.sample() for _ in range(steps)])
    for t in range(steps):
        assert not masks[t, group != t % groups].any()
    own = masks[torch.arange(steps) % groups == 0][:, group == 0].double()
    assert abs(float(own.mean()) - rate) < 4 * (rate * (1 - rate) / own.numel()) ** 0.5
    assert s.step_in_pass == steps % groups and torch.equal(s.assignment, group)


def test_the_min_separation_schedule_keeps_its_promise_and_refuses_to_go_on():
    pool, k, sep, steps = 30, 3, 4, 17
    s = MinSeparationSampler(pool, k, sep, steps, torch.Generator().manual_seed(2))
    assert s.blocks == max(sep, -(-steps // k)) == 6
    seen = {u: [] for u in range(pool)}
    for t in range(steps):
        for u in s.sample().tolist():
            seen[u].append(t)
    assert all(len(v) <= k and all(b - a >= sep for a, b in zip(v, v[1:])) for v in seen.values())
    assert sum(map(len, seen.values())) >= pool * (steps // s.blocks)  # every block served in turn
    with pytest.raises(RuntimeError, match="17 steps"):
        s.sample()


# -- runs --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("sampling, charges", [(CYCLIC, 2), (EVERY, 1), (MIN_SEP, 1)])
def test_a_banded_runs_report_is_the_plans_and_its_ledger_holds_the_plans_charges(tmp_path, capsys, sampling,
                                                                                 charges):
    path = tmp_path / "plan.toml"
    path.write_text(_text(sampling, z=4.0 if sampling == MIN_SEP else 1.0))
    out = tmp_path / "run"
    assert main(["train", "dp-agr", "--plan", str(path), "--data", "sinusoid", "--first-order", "--eval-tasks", "5",
                 "--out", str(out)]) == 0
    capsys.readouterr()
    assert main(["plan", str(path), "--json"]) == 0
    expected = json.loads(capsys.readouterr().out)
    report = json.loads((out / "privacy_report.json").read_text())
    assert report["epsilon"] == pytest.approx(expected["epsilon"], rel=1e-12)
    assert report["epsilon_lower"] == pytest.approx(expected["epsilon_lower"], rel=1e-12)
    assert report["risk"] == expected["risk"] and report["noise"] == expected["noise"]
    view, = report["views"]
    assert view["charges"] == view["planned_charges"] == charges and view["ledger_matches_plan"]
    ledger = Ledger.open(out / "ledger-task.jsonl", readonly=True)
    assert [r.event for r in ledger.entries] == [loads_plan(path.read_text()).units()[0].event] * charges


def test_one_band_trains_the_independent_noise_plans_model(tmp_path):
    banded = _run(_text(CYCLIC, bands=1), tmp_path / "banded")
    independent = _run(_text(CYCLIC, bands=None), tmp_path / "plain")
    for name, value in independent.params.items():
        assert torch.equal(banded.params[name], value), name
    assert banded.report["epsilon"] == pytest.approx(independent.report["epsilon"], rel=1e-12)
    moved = _run(_text(CYCLIC, bands=2), tmp_path / "two")  # two bands: other noise, another model
    assert any(not torch.equal(moved.params[k], v) for k, v in independent.params.items())


def _interrupt_at(step):
    def progress(done, loss, spent):
        if done == step:
            raise KeyboardInterrupt
    return progress


@pytest.mark.parametrize("sampling, charges", [(CYCLIC, 2), (EVERY, 2)])
def test_a_resumed_banded_run_continues_the_same_noise(tmp_path, sampling, charges):
    text = _text(sampling)
    whole = _run(text, tmp_path / "whole")
    with pytest.raises(TrainingInterrupted):
        _run(text, tmp_path / "cut", progress=_interrupt_at(6))  # checkpoint at step 5, inside the second pass
    resumed = _run(text, tmp_path / "cut", resume=True)
    for name, value in whole.params.items():
        torch.testing.assert_close(resumed.params[name], value, rtol=0, atol=1e-6)
    view, = resumed.report["views"]
    assert view["charges"] == charges and view["ledger_matches_plan"]
    plan = loads_plan(text)
    if sampling == EVERY:  # charged once a process: the resumed run is charged again, and reported so
        twice = plan_epsilon(plan, charges={plan.units()[0].key: 2}).epsilon
        assert resumed.report["epsilon"] == pytest.approx(twice, rel=1e-9)
        assert twice > whole.report["epsilon"]
    else:
        assert resumed.report["epsilon"] == pytest.approx(whole.report["epsilon"], rel=1e-12)


def test_a_banded_plan_object_with_an_inner_noise_release_is_refused():
    # (a plan file cannot say this: [release] needs record_multiplicity, which banded plans refuse first)
    import dataclasses

    from metadp.releases import Release

    plan = dataclasses.replace(loads_plan(_text(CYCLIC)), release=Release.of("inner_dp", inner_noise=1.0))
    with pytest.raises(ValueError, match="release.form = 'task_clip'"):
        plan.units()


def test_the_run_size_estimate_counts_a_min_separation_block_not_the_pool():
    from metadp.training.run.size import plan_run_size

    size = plan_run_size(loads_plan(_text(MIN_SEP)), "sinusoid")
    assert size.tasks_per_step == 40 / 4  # B = max(3, ceil(8 / 2)) = 4 blocks of the 40 tasks
    assert plan_run_size(loads_plan(_text(CYCLIC)), "sinusoid").tasks_per_step == 5  # the plan's batch


# -- the outer optimiser (BandMF's workload is SGD's iterates) -----------------------------------------
def test_the_outer_optimiser_is_the_configs_and_sgd_momentum_needs_sgd(tmp_path, capsys):
    from metadp.training.run.state import outer_optimizer

    params = [torch.zeros(3, requires_grad=True)]
    sgd = outer_optimizer(params, TrainConfig(algorithm="dp-agr", outer_optimizer="sgd", outer_momentum=0.9))
    assert isinstance(sgd, torch.optim.SGD) and sgd.defaults["momentum"] == 0.9
    assert isinstance(outer_optimizer(params, TrainConfig(algorithm="dp-agr")), torch.optim.Adam)
    assert isinstance(outer_optimizer(params, TrainConfig(algorithm="reptile")), torch.optim.SGD)
    with pytest.raises(ValueError, match="needs outer_optimizer 'sgd'"):
        TrainConfig(algorithm="dp-agr", outer_momentum=0.5)
    path = tmp_path / "plan.toml"
    path.write_text(_text(CYCLIC))
    base = ["train", "dp-agr", "--plan", str(path), "--data", "sinusoid", "--first-order", "--eval-tasks", "5"]
    assert main([*base, "--outer-momentum", "0.9", "--out", str(tmp_path / "a")]) == 2
    assert "give --outer-optimizer sgd" in capsys.readouterr().err
    assert main([*base, "--outer-optimizer", "sgd", "--outer-momentum", "1", "--out", str(tmp_path / "b")]) == 2
    assert "--outer-momentum must be a number in [0, 1)" in capsys.readouterr().err
    assert main([*base, "--outer-optimizer", "sgd", "--outer-momentum", "0.9", "--outer-lr", "0.01",
                 "--out", str(tmp_path / "c")]) == 0
    config = json.loads((tmp_path / "c" / "run.json").read_text())["config"]
    assert config["outer_optimizer"] == "sgd" and config["outer_momentum"] == 0.9
    state = torch.load(tmp_path / "c" / "checkpoint.pt", weights_only=False)["optimizer"]
    assert state["param_groups"][0]["momentum"] == 0.9 and "momentum_buffer" in next(iter(state["state"].values()))


def test_a_charged_pass_is_the_schemes_own_and_a_run_charged_once_is_one_pass():
    from metadp.training.run.plan_run import pass_steps

    def plan(sampling, **noise):
        return loads_plan(_text(sampling, bands=noise.get("bands")))

    assert pass_steps(plan(CYCLIC)) == 4  # the groups
    assert pass_steps(plan(MIN_SEP)) == pass_steps(plan(MIN_SEP, bands=3)) == 8  # charged once: the whole run
    assert pass_steps(plan(EVERY, bands=3)) == 8 and pass_steps(plan(EVERY)) == 1  # banded: once; independent: a step
    shuffle = 'scheme = "shuffle"\npopulation = 25\nbatch_size = 12'  # the trainer's pass is 3 steps: 2 counted
    assert pass_steps(plan(shuffle)) == 2
    assert pass_steps(plan('scheme = "poisson"\npopulation = 40\nrate = 0.1')) == 1
