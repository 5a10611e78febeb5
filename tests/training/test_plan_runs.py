"""`metadp train ALGO --plan FILE`: the trainer runs a plan file, and its report is the plan's.

A run to the end must write a privacy_report.json whose epsilon for every unit equals what
`metadp plan FILE --json` prints (both in-process here); each unit's ledger must hold the plan's event
once per charge; a plan the trainer cannot run, or one whose hierarchy does not match the data, is
refused with one line and status 2 before anything is written.
"""

import json
import math
import tomllib

import pytest

torch = pytest.importorskip("torch")

from metadp.accounting.ledger import Ledger  # noqa: E402
from metadp.cli import main  # noqa: E402
from metadp.plan import loads_plan  # noqa: E402
from metadp.sampling import BallsInBins  # noqa: E402
from metadp.training import algorithms  # noqa: E402
from metadp.training.data import sources as data  # noqa: E402
from metadp.training.algorithms import models  # noqa: E402
from metadp.training.data import tasks  # noqa: E402
from metadp.training.run.config import TrainConfig  # noqa: E402
from metadp.training.run.plan_run import check_plan, plan_settings  # noqa: E402
from metadp.training.run.trainer import TrainingInterrupted, train  # noqa: E402

SINUSOID_PLAN = """\
name = "tiny sinusoid, Poisson tasks"
unit = "task"
delta = 1e-5
steps = 4

[sampling]
scheme = "poisson"
population = 120
batch_size = 12

[noise]
mechanism = "gaussian"
multiplier = 0.9
"""

EPISODIC_PLAN = """\
name = "tiny Omniglot episodes, record level"
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
units = {classes}

[[hierarchy]]
name = "drawing"
draw = "fixed"
size = 2
units = 20
"""


def _mse(out, y):
    return ((out - y) ** 2).mean()


def _write(tmp_path, text, name="plan.toml"):
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def _plan_json(path, capsys):
    capsys.readouterr()
    assert main(["plan", path, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def _units(report):
    """unit -> epsilon for the plan's unit and every other unit of a plan report."""
    found = {report["unit"]: report["epsilon"]}
    found.update({u["unit"]: u["epsilon"] for u in report["other_units"]})
    return found


def _assert_same_report(run, plan):
    run_units, plan_units = _units(run), _units(plan)
    assert set(run_units) == set(plan_units)
    for unit, epsilon in plan_units.items():
        assert math.isfinite(epsilon) and run_units[unit] == pytest.approx(epsilon, rel=1e-6), unit
    for key in plan:  # the schema of `metadp plan --json`, key for key
        assert key in run, key
    assert run["sampling"] == plan["sampling"] and run["steps"] == plan["steps"]


def test_sinusoid_poisson_plan_run_reports_the_plans_epsilon(tmp_path, capsys):
    plan = _write(tmp_path, SINUSOID_PLAN)
    out = tmp_path / "run"
    assert main(["train", "dp-maml", "--plan", plan, "--data", "sinusoid", "--first-order", "--eval-tasks", "10",
                 "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "task [the plan's unit]: epsilon <=" in printed
    report = json.loads((out / "privacy_report.json").read_text())
    _assert_same_report(report, _plan_json(plan, capsys))
    assert report["steps_done"] == 4 and report["algorithm"] == "dp-maml"
    view, = report["views"]
    assert view["charges"] == view["planned_charges"] == 4 and view["ledger_matches_plan"]
    ledger = Ledger.open(out / "ledger-task.jsonl", readonly=True)
    assert len(ledger.entries) == 4 and ledger.relation == "add_remove"
    assert str(ledger.entries[0].event) == str(loads_plan(SINUSOID_PLAN).units()[0].event)


def _omniglot_or_skip():
    try:
        return data.load_omniglot_background(None)
    except (FileNotFoundError, ValueError) as err:
        pytest.skip(f"Omniglot data not available: {err}")


def test_omniglot_episodic_record_plan_run_reports_every_units_epsilon(tmp_path, capsys):
    images = _omniglot_or_skip().images
    plan = _write(tmp_path, EPISODIC_PLAN.format(classes=images.shape[0]))
    out = tmp_path / "omni"
    assert main(["train", "dp-maml", "--plan", plan, "--data", "omniglot", "--first-order", "--out", str(out)]) == 0
    report = json.loads((out / "privacy_report.json").read_text())
    expected = _plan_json(plan, capsys)
    _assert_same_report(report, expected)
    assert set(_units(report)) == {"record", "task"} and report["unit"] == "record"
    assert all(v["ledger_matches_plan"] and v["charges"] == 2 for v in report["views"])
    evaluation = json.loads((out / "evaluation.json").read_text())
    assert evaluation["metric"] == "accuracy" and evaluation["tasks"] == 80  # 20 runs cut into 4 5-way tasks


def test_fresh_episodes_hold_the_drawn_images_with_episode_labels():
    images = torch.arange(6 * 4, dtype=torch.float32).reshape(6, 4, 1, 1, 1)  # image value = class * 4 + example
    plan = loads_plan(EPISODIC_PLAN.replace("units = 20", "units = 4").replace("size = 2", "size = 3").format(
        classes=6))
    source = tasks.EpisodeImages(images, k_shot=2)
    source.check(plan.hierarchy)
    from metadp.training.data.samplers import EpisodicSampler

    episodes = EpisodicSampler(plan.hierarchy, 7, torch.Generator().manual_seed(3)).sample()
    fresh = tasks.FreshEpisodes.of(source, episodes)
    x_s, y_s, x_q, y_q = fresh.batch(torch.arange(7))
    assert x_s.shape[:2] == (7, 5 * 2) and x_q.shape[:2] == (7, 5 * 1) and fresh.query_per_task == 5
    classes, drawings = episodes.indices
    for t in range(7):
        for label in range(5):
            shown = x_s[t][y_s[t] == label].flatten().tolist() + x_q[t][y_q[t] == label].flatten().tolist()
            assert shown == drawings[t, label].tolist()  # class c's drawing j is image c * 4 + j
            assert all(int(v) // 4 == int(classes[t, label]) for v in shown)


def test_interrupted_plan_run_resumes_to_the_plans_report(tmp_path):
    plan = loads_plan(SINUSOID_PLAN)
    alg = algorithms.get("dp-maml")
    check_plan(plan, alg, images=False)
    config = TrainConfig(algorithm="dp-maml", first_order=True, checkpoint_every=1, **plan_settings(plan, alg))
    pool = tasks.SinusoidPool(120, 10, 10)
    out = tmp_path / "run"

    def stop_at_two(step, loss, spent):
        if step == 2:
            raise KeyboardInterrupt

    with pytest.raises(TrainingInterrupted):
        train(models.MLP(), pool, lambda o, y: ((o - y) ** 2).mean(), config, out, progress=stop_at_two, plan=plan)
    assert len(Ledger.open(out / "ledger-task.jsonl", readonly=True).entries) == 2
    result = train(models.MLP(), pool, lambda o, y: ((o - y) ** 2).mean(), config, out, resume=True, plan=plan)
    assert len(Ledger.open(out / "ledger-task.jsonl", readonly=True).entries) == 4  # two more, not four more
    from metadp.plan import plan_epsilon

    assert result.report["epsilon"] == pytest.approx(plan_epsilon(plan).epsilon, rel=1e-9)
    assert result.epsilon_spent == result.report["epsilon"]


@pytest.mark.slow
def test_shuffle_plan_charges_each_pass_once(tmp_path, capsys):
    text = SINUSOID_PLAN.replace('scheme = "poisson"', 'scheme = "shuffle"').replace("population = 120", "population = 24")
    text = text.replace("steps = 4", "steps = 5")  # 2 steps a pass: passes 1, 1, 2, 2, 3
    plan = _write(tmp_path, text)
    out = tmp_path / "run"
    assert main(["train", "dp-maml", "--plan", plan, "--data", "sinusoid", "--first-order", "--eval-tasks", "10",
                 "--out", str(out)]) == 0
    report = json.loads((out / "privacy_report.json").read_text())
    _assert_same_report(report, _plan_json(plan, capsys))
    assert len(Ledger.open(out / "ledger-task.jsonl", readonly=True).entries) == 3


def test_balls_in_bins_plan_runs_random_allocation_and_reports_the_plans_interval(tmp_path, capsys):
    text = SINUSOID_PLAN.replace('scheme = "poisson"', 'scheme = "balls_in_bins"').replace("population = 120",
                                                                                         "population = 24")
    text = text.replace("steps = 4", "steps = 5")  # 2 steps a pass: passes 1, 1, 2, 2, 3
    plan = _write(tmp_path, text)
    out = tmp_path / "run"
    assert main(["train", "dp-maml", "--plan", plan, "--data", "sinusoid", "--first-order", "--eval-tasks", "10",
                 "--out", str(out)]) == 0
    report, planned = json.loads((out / "privacy_report.json").read_text()), _plan_json(plan, capsys)
    _assert_same_report(report, planned)
    assert 0 < report["epsilon_lower"] == planned["epsilon_lower"] <= report["epsilon"]
    entries = Ledger.open(out / "ledger-task.jsonl", readonly=True).entries
    assert len(entries) == 3 and all(type(e.event).__name__ == "RandomAllocation" for e in entries)


@pytest.mark.slow
def test_epsilon_calibrates_the_plan_and_save_plan_writes_what_ran(tmp_path, capsys):
    plan = _write(tmp_path, SINUSOID_PLAN)
    saved = tmp_path / "calibrated.toml"
    out = tmp_path / "run"
    assert main(["train", "dp-maml", "--plan", plan, "--epsilon", "3", "--save-plan", str(saved), "--data", "sinusoid",
                 "--first-order", "--eval-tasks", "10", "--out", str(out)]) == 0
    report = json.loads((out / "privacy_report.json").read_text())
    again = _plan_json(str(saved), capsys)
    _assert_same_report(report, again)
    assert 2.9 < report["epsilon"] <= 3.0
    assert loads_plan(saved.read_text()).noise.multiplier < 0.9  # a budget of 3 needs less than the file's noise


def test_flag_run_save_plan_writes_the_equivalent_plan(tmp_path, capsys):
    saved = tmp_path / "flags.toml"
    out = tmp_path / "run"
    assert main(["train", "dp-maml", "--data", "sinusoid", "--noise", "1.1", "--steps", "3", "--meta-batch", "10",
                 "--pool", "100", "--first-order", "--eval-tasks", "10", "--save-plan", str(saved),
                 "--out", str(out)]) == 0
    plan = loads_plan(saved.read_text())
    assert (plan.unit, plan.steps, plan.noise.multiplier, plan.sampling.rate) == ("task", 3, 1.1, 0.1)
    assert plan.record_multiplicity == 1  # the sinusoid pool: every task its own records
    views = {v["view"]: v for v in json.loads((out / "privacy_report.json").read_text())["views"]}
    # the run's ledgers and the plan's report (both the tightest accountant): the task view and, through the
    # plan's record_multiplicity, the record view (issue 29: flags compile to a plan)
    planned = _plan_json(str(saved), capsys)
    assert planned["epsilon"] == pytest.approx(views["task"]["epsilon"], rel=1e-3)
    record = next(o for o in planned["other_units"] if o["unit"] == "record")
    assert record["epsilon"] == pytest.approx(views["record"]["epsilon"], rel=1e-3)
    assert record["epsilon"] > planned["epsilon"]  # the pool-substitution pair: a record costs more than a task


@pytest.mark.parametrize("flags, words", [
    (["--steps", "7"], "--steps 7 contradicts the plan (steps = 4"),
    (["--unit", "record"], "--unit record contradicts the plan (unit = task"),
    (["--noise", "2"], "--noise 2.0 contradicts the plan (noise.multiplier = 0.9"),
    (["--pool", "50"], "--pool 50 contradicts the plan (sampling.population = 120"),
    (["--sampler", "fixed"], "--sampler fixed contradicts the plan (sampling.scheme = poisson"),
    (["--delta", "1e-6"], "--delta 1e-06 contradicts the plan (delta = 1e-05"),
    (["--shots", "2"], "--shots applies to plans with [[hierarchy]] levels"),
])
def test_a_flag_that_contradicts_the_plan_is_refused(tmp_path, capsys, flags, words):
    plan = _write(tmp_path, SINUSOID_PLAN)
    out = tmp_path / "run"
    assert main(["train", "dp-maml", "--plan", plan, "--data", "sinusoid", "--out", str(out), *flags]) == 2
    err = capsys.readouterr().err.strip()
    assert words in err and err.count("\n") == 0
    assert not out.exists()


@pytest.mark.parametrize("algorithm, data, edit, words", [
    ("dp-maml-sample", "sinusoid", {}, "dp-maml-sample releases release.form = 'example_clip'"),
    ("dp-reptile", "sinusoid", {}, "dp-reptile releases release.form = 'inner_dp'"),
    ("dp-maml", "sinusoid", {"population = 120\nbatch_size = 12": "rate = 0.1"}, "sampling.population is needed"),
    ("dp-maml", "sinusoid", {'mechanism = "gaussian"\nmultiplier = 0.9': 'mechanism = "laplace"\nscale = 1.0',
                             'scheme = "poisson"\npopulation = 120\nbatch_size = 12': 'scheme = "none"\npopulation = 9'},
     "noise.mechanism = 'laplace'"),
])
def test_a_plan_the_trainer_cannot_run_is_refused_before_any_step(tmp_path, capsys, algorithm, data, edit, words):
    text = SINUSOID_PLAN
    for old, new in edit.items():
        assert old in text
        text = text.replace(old, new)
    plan = _write(tmp_path, text)
    out = tmp_path / "run"
    assert main(["train", algorithm, "--plan", plan, "--data", data, "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert words in err and err.count("\n") == 0
    assert not out.exists()


@pytest.mark.parametrize("edit, words", [
    ({"units = {classes}": "units = 1150"}, "has units = 1150, but the data has 150 classes"),
    ({"units = 20": "units = 30"}, "has units = 30, but the data has 20 examples per class"),
    ({'draw = "fixed"\nsize = 2': 'draw = "poisson"\nrate = 0.1'}, "draws fixed-size levels only"),
])
def test_a_hierarchy_that_does_not_match_the_data_is_refused(tmp_path, capsys, edit, words):
    text = EPISODIC_PLAN
    for old, new in edit.items():
        assert old in text
        text = text.replace(old, new)
    plan = _write(tmp_path, text.replace("{classes}", "150"))
    out = tmp_path / "run"
    assert main(["train", "dp-maml", "--plan", plan, "--data", "glyphs", "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert words in err and err.count("\n") == 0 and "does not match --data glyphs" in err
    assert not out.exists()


def test_an_episodic_plan_on_generated_regression_tasks_is_refused(tmp_path, capsys):
    plan = _write(tmp_path, EPISODIC_PLAN.format(classes=150))
    assert main(["train", "dp-maml", "--plan", plan, "--data", "sinusoid", "--out", str(tmp_path / "r")]) == 2
    assert "generated regression tasks have no such records" in capsys.readouterr().err


def test_a_large_lot_in_chunks_trains_exactly_as_in_one_piece(tmp_path):
    # memory holds one chunk's per-task meta-gradients (chunk_size tasks), never the whole lot's: the clipped sum,
    # the noise, the update and the losses are the same as computed in one piece
    plan = loads_plan(SINUSOID_PLAN)
    alg = algorithms.get("dp-maml")
    results = []
    for chunk in (None, 5):
        config = TrainConfig(algorithm="dp-maml", first_order=True, chunk_size=chunk, clip=0.5,
                             **plan_settings(plan, alg))
        torch.manual_seed(0)  # the same initial model
        results.append(train(models.MLP(), tasks.SinusoidPool(120, 10, 10), lambda o, y: ((o - y) ** 2).mean(),
                             config, tmp_path / f"run-{chunk}", plan=plan))
    whole, chunked = results
    assert whole.losses == pytest.approx(chunked.losses, rel=1e-5)
    for name, value in whole.params.items():
        torch.testing.assert_close(chunked.params[name], value, rtol=1e-5, atol=1e-6)
    assert whole.report["epsilon"] == chunked.report["epsilon"]


@pytest.mark.parametrize("sampling", ['scheme = "poisson"\npopulation = 40\nbatch_size = 4',
                                      'scheme = "episodic"\nepisodes = 5'])
def test_the_runs_episodes_contain_a_record_as_often_as_the_plans_event_says(sampling):
    # the run's own step_tasks (the sampler, the fresh-episode drawer and the padding), seen from one record:
    # the sampled episodes that contain it are Binomial(slots, q eta) a step, q eta the rate the plan's
    # record event composes (EpisodicSampled(slots, q P_U, r): q P_U r = q eta)
    from metadp.training.run.state import _Run
    from metadp.verify.fidelity import episodic_multiplicity_test

    text = EPISODIC_PLAN.replace('scheme = "episodic"\nepisodes = 3', sampling).format(classes=6)
    text = text.replace("units = 20", "units = 4").replace('unit = "record"', 'unit = "task"' if "poisson" in sampling
                                                           else 'unit = "record"')
    plan = loads_plan(text)
    images = torch.arange(6 * 4, dtype=torch.float32).reshape(6, 4, 1, 1, 1)  # image value = record id
    alg = algorithms.get("dp-maml")
    run = _Run(tasks.EpisodeImages(images), TrainConfig(algorithm="dp-maml", **plan_settings(plan, alg)), "cpu", plan)
    record_view = next(g for g in run.views if g.unit == "record")
    slots, rate = record_view.event.episodes, record_view.event.unit_rate * record_view.event.within_rate
    counts = []
    for _ in range(800):
        fresh, rows, weights = run.step_tasks(run.sampler.sample())
        x_s, _, x_q, _ = fresh.batch(rows)
        holds = (torch.cat([x_s, x_q], dim=1).flatten(1) == 0).any(dim=1)  # record 0 in the episode
        counts.append(int((holds & (weights > 0)).sum()))
    result = episodic_multiplicity_test(counts, slots, rate, 1e-3)
    assert result.passed, result.detail
    assert rate == pytest.approx((4 / 40 if "poisson" in sampling else 1.0) * (5 / 6) * (2 / 4))  # 5 of 6, 2 of 4


@pytest.mark.slow
def test_a_plans_count_noise_runs_the_quantile_policy_accounted_as_the_plan_accounts_it(tmp_path, capsys):
    from metadp.accounting.adaptive_clipping import combined_noise_multiplier, sum_noise_multiplier

    plan = _write(tmp_path, SINUSOID_PLAN.replace("multiplier = 0.9", "multiplier = 0.9\ncount_noise = 2.0"))
    out = tmp_path / "run"
    assert main(["train", "dp-maml", "--plan", plan, "--data", "sinusoid", "--first-order", "--eval-tasks", "10",
                 "--out", str(out)]) == 0
    report = json.loads((out / "privacy_report.json").read_text())
    _assert_same_report(report, _plan_json(plan, capsys))
    config = json.loads((out / "run.json").read_text())["config"]
    assert report["clip_policy"] == config["clip_policy"] == "quantile" and config["count_noise"] == 2.0
    # the trainer's z is the sum's and the count's together; the sum itself carries the plan's multiplier
    assert config["noise_multiplier"] == pytest.approx(combined_noise_multiplier(0.9, 2.0), rel=1e-12)
    assert sum_noise_multiplier(config["noise_multiplier"], 2.0) == pytest.approx(0.9, rel=1e-9)


def test_a_saved_flag_plan_runs_with_the_flag_runs_views(tmp_path, capsys):
    # flags -> plan -> run: the plan run has the flag run's task and record views, with the same epsilons
    saved, flags, planned = tmp_path / "flags.toml", tmp_path / "flags", tmp_path / "planned"
    common = ["--data", "sinusoid", "--first-order", "--eval-tasks", "10"]
    assert main(["train", "dp-maml", "--noise", "1.1", "--steps", "3", "--meta-batch", "10", "--pool", "100",
                 "--save-plan", str(saved), "--out", str(flags), *common]) == 0
    assert main(["train", "dp-maml", "--plan", str(saved), "--out", str(planned), *common]) == 0
    capsys.readouterr()
    by_flags = {v["view"]: v for v in json.loads((flags / "privacy_report.json").read_text())["views"]}
    report = json.loads((planned / "privacy_report.json").read_text())
    assert {v["view"] for v in report["views"]} == {"task", "record"}
    assert all(v["ledger_matches_plan"] for v in report["views"])
    by_plan = {v["view"]: v for v in report["views"]}
    assert all(set(by_plan[k]) == set(by_flags[k]) for k in by_plan)  # one views shape (issue 29)
    # one path (issue 29): the flag run ran the plan it saved, so both are plan runs with the same numbers
    assert by_flags["task"]["planned_charges"] == by_plan["task"]["planned_charges"] == 3
    assert by_plan["task"]["epsilon"] == report["epsilon"] and by_plan["task"]["guarantee"] == "upper bound"
    assert report["epsilon"] == by_flags["task"]["epsilon"]
    record = next(o for o in report["other_units"] if o["unit"] == "record")
    assert record["epsilon"] == by_flags["record"]["epsilon"]


def test_a_pool_whose_records_repeat_more_than_the_plan_says_is_refused(tmp_path, capsys, monkeypatch):
    from metadp.training.data.tasks import SinusoidPool

    plan = _write(tmp_path, SINUSOID_PLAN.replace('name = ', 'record_multiplicity = 1\nname = ', 1))
    monkeypatch.setattr(SinusoidPool, "record_multiplicity", lambda self: 2)
    out = tmp_path / "run"
    assert main(["train", "dp-maml", "--plan", plan, "--data", "sinusoid", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "a record is in up to 2 tasks of this pool, the plan's record_multiplicity is 1" in err


@pytest.mark.parametrize("pool, steps, table, passes", [
    (40, 12, {"batch_size": 4}, 2),  # 10 steps a pass: two passes, the partial second charged in full
    # 42 tasks, about 4 a step: 10 steps a pass, which no batch_size states (42 / 10 is no whole batch), so the plan
    # says sampling.steps_per_pass (it had no plan form before issue 29)
    (42, 3, {"steps_per_pass": 10}, 1),
])
def test_a_one_pass_flag_run_saves_its_balls_in_bins_plan(tmp_path, capsys, pool, steps, table, passes):
    # --sampler one-pass is random allocation: its plan is balls_in_bins, certified as the run charged it
    saved, out = tmp_path / "one_pass.toml", tmp_path / "run"
    assert main(["train", "dp-agr", "--data", "sinusoid", "--sampler", "one-pass", "--noise", "1.0", "--steps",
                 str(steps), "--meta-batch", "4", "--pool", str(pool), "--eval-tasks", "5", "--save-plan", str(saved),
                 "--out", str(out)]) == 0
    plan = loads_plan(saved.read_text())
    assert plan.sampling == BallsInBins(pool, 10)
    written = tomllib.loads(saved.read_text())["sampling"]
    assert written == {"scheme": "balls_in_bins", "population": pool, **table}
    report = json.loads((out / "privacy_report.json").read_text())
    views = {v["view"]: v for v in report["views"]}
    planned = _plan_json(str(saved), capsys)
    assert views["task"]["charges"] == passes
    assert report["epsilon"] == planned["epsilon"] == views["task"]["epsilon"]
    assert report["epsilon_lower"] == planned["epsilon_lower"]
    record = next(o for o in planned["other_units"] if o["unit"] == "record")
    assert record["epsilon"] == views["record"]["epsilon"]


def test_a_federated_population_runs_a_plan_that_declares_record_multiplicity():
    # the Flower engine's server holds a Population (the clients keep their records): the plan's k is then the
    # assumption its record-level bound states, not a count the server can check (this raised AttributeError)
    from metadp.training.engines.flower import Population
    from metadp.training.run.state import _Run

    plan = loads_plan(SINUSOID_PLAN.replace('name = ', 'record_multiplicity = 1\nname = ', 1))
    alg = algorithms.get("dp-agr")
    run = _Run(Population(120), TrainConfig(algorithm="dp-agr", **plan_settings(plan, alg)), "cpu", plan)
    assert {v.key for v in run.views} == {"task", "record"}


AGRLR_RELEASE = """
[release]
form = "local_noise"
inner_steps = 1
inner_noise = 3.0
query_per_task = 10
first_order = true
"""


@pytest.mark.parametrize("algorithm, change, words", [
    ("dp-agr", {"noise_multiplier": 0.5}, "the run's noise_multiplier is 0.5, the plan's noise.multiplier gives 0.9"),
    ("dp-agr", {"steps": 5}, "the run asks 5 steps, the plan certifies 4"),
    ("dp-agrlr", {"inner_noise": 1.0}, "the run's inner_noise is 1.0, the plan's release.inner_noise gives 3"),
    ("dp-agrlr", {"inner_steps": 2}, "the run's inner_steps is 2, the plan's release says 1"),
    ("dp-agrlr", {"first_order": False}, "the run's first_order is False, the plan's release says True"),
])
def test_train_with_a_plan_refuses_a_config_that_is_not_the_certified_run(tmp_path, algorithm, change, words):
    # the command line compiles the config from the plan; a library caller of train(..., plan=plan) (a Flower
    # ServerApp's DpFedMetaStrategy.start among them) could hand it another, and the report would carry the plan's
    # epsilon for a run with less noise. More noise than planned is still bounded by the plan and runs.
    text = SINUSOID_PLAN.replace("population = 120", "population = 20").replace("batch_size = 12", "batch_size = 4")
    if algorithm == "dp-agrlr":
        text = text.replace("steps = 4\n", "steps = 4\nrecord_multiplicity = 1\n") + AGRLR_RELEASE
    plan = loads_plan(text)
    settings = {"first_order": True, **plan_settings(plan, algorithms.get(algorithm))}
    pool = tasks.SinusoidPool(20, 10, 10, seed=0)
    with pytest.raises(ValueError, match=words):
        train(models.MLP(), pool, _mse, TrainConfig(algorithm=algorithm, **{**settings, **change}), tmp_path / "run",
              plan=plan)
    assert not (tmp_path / "run").exists()
    louder = dict(settings, noise_multiplier=settings["noise_multiplier"] * 2, steps=2)
    result = train(models.MLP(), pool, _mse, TrainConfig(algorithm=algorithm, **louder), tmp_path / "louder", plan=plan)
    assert result.steps_done == 2 and result.report["plan_steps"] == 4
