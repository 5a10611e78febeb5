"""One model of sampling (metadp.sampling): each scheme's step event, relation, charge, assumptions and
citations, read by plans, reports and the trainer; and the one guarantee type.

Expected events are written from DESIGN.md sec. 3 (Poisson: PoissonSampled(q, .); fixed-size:
FixedSizeSampled(m, n, ., 2) under substitution; one pass / shuffle: the mechanism once per pass),
not read from the code under test.
"""

from __future__ import annotations

import dataclasses

import pytest

from metadp.citations import CITATIONS
from metadp.core import events as ev
from metadp.cite import cite
from metadp.plan import Plan, plan_epsilon
from metadp.sampling import (SCHEMES, BallsInBins, Episodic, FixedSize, Guarantee, NoSampling, Poisson, Shuffle,
                             WithReplacement, from_record, of_lot, parse_hierarchy)
from metadp.training.algorithms import views

Z = ev.Gaussian(1.5)
HIERARCHY = [{"name": "class", "size": 5, "units": 1150}, {"name": "drawing", "size": 2, "units": 20}]


def plan_dict(sampling, **extra):
    return {"unit": "task", "delta": 1e-5, "steps": 100, "sampling": sampling,
            "noise": {"mechanism": "gaussian", "multiplier": 1.5}} | extra


@pytest.mark.parametrize("table,cls,record", [
    ({"scheme": "poisson", "population": 1000, "batch_size": 10}, Poisson,
     {"scheme": "poisson", "population": 1000, "batch_size": 10, "rate": 0.01}),
    ({"scheme": "poisson", "rate": 0.25}, Poisson,
     {"scheme": "poisson", "population": None, "batch_size": None, "rate": 0.25}),
    ({"scheme": "fixed", "population": 1000, "batch_size": 10}, FixedSize,
     {"scheme": "fixed", "population": 1000, "batch_size": 10, "rate": 0.01}),
    ({"scheme": "shuffle", "population": 1000, "batch_size": 10}, Shuffle,
     {"scheme": "shuffle", "population": 1000, "batch_size": 10, "rate": 0.01}),
    ({"scheme": "none", "population": 1000}, NoSampling,
     {"scheme": "none", "population": 1000, "batch_size": None, "rate": 1.0}),
    ({"scheme": "with_replacement", "population": 1000, "batch_size": 10}, WithReplacement,
     {"scheme": "with_replacement", "population": 1000, "batch_size": 10, "rate": 0.01}),
])
def test_the_sampling_table_is_parsed_once_into_its_scheme(table, cls, record):
    plan = Plan.from_dict(plan_dict(table))
    assert type(plan.sampling) is cls and plan.sampling.scheme == table["scheme"]
    assert plan.sampling.to_dict() == record and list(plan.sampling.to_dict()) == list(record)
    assert from_record(record) == plan.sampling  # the report's record rebuilds the scheme


def test_episodic_record_has_episodes_and_holds_its_hierarchy():
    plan = Plan.from_dict(plan_dict({"scheme": "episodic", "episodes": 32}, hierarchy=HIERARCHY))
    assert type(plan.sampling) is Episodic and plan.sampling.hierarchy == plan.hierarchy
    assert plan.sampling.to_dict() == {"scheme": "episodic", "population": None, "batch_size": None, "rate": None,
                                       "episodes": 32}


def test_step_events_relations_and_charges():
    assert Poisson(0.01, 1000).step_event(Z) == ev.PoissonSampled(0.01, Z)
    assert FixedSize(10, 1000).step_event(Z) == ev.FixedSizeSampled(10, 1000, Z, 2.0)
    assert FixedSize(10, 1000).step_event(Z, 1.0).sensitivity_factor == 1.0
    assert NoSampling(1000).step_event(Z) is Z and Shuffle(10, 1000).step_event(Z) is Z
    assert WithReplacement(10, 1000).step_event(Z) == ev.ReplacementSampled(10, 1000, Z)
    assert WithReplacement.relations == ("add_remove",) and WithReplacement.charge == "step"
    assert [c.relation for c in (Poisson, FixedSize, NoSampling, Shuffle, Episodic, BallsInBins)] == [
        "add_remove", "substitute", "add_remove", "add_remove", "add_remove", "add_remove"]
    assert FixedSize.relations == ("substitute",) and set(Shuffle.relations) == {"add_remove", "substitute"}
    assert [c.charge for c in (Poisson, FixedSize, NoSampling, Shuffle, Episodic, BallsInBins)] == [
        "step", "step", "step", "pass", "step", "pass"]
    # 250 steps of 1,600 of 400,000: one pass; 401 steps: two
    assert Shuffle(1600, 400_000).releases(250) == 1 and Shuffle(1600, 400_000).releases(251) == 2
    # plans and the trainer charge one analysis: random allocation a pass; pass_event is the looser single Gaussian
    assert BallsInBins(200, 20).pass_event(Z) is Z
    assert BallsInBins(200, 20).charge_event(Z) == ev.RandomAllocation(20, Z) == BallsInBins(200, 20).plan_event(Z)
    with pytest.raises(ValueError, match="no per-step event.*pass_event"):
        BallsInBins(200, 20).step_event(Z)


def test_citations_are_known_keys_and_name_the_theorems():
    for cls in (Poisson, FixedSize, WithReplacement, NoSampling, Shuffle, Episodic, BallsInBins):
        assert all(key in CITATIONS for key in cls.citations), cls
    assert "mironov2019sampled" in Poisson.citations and "balle2018privacy" in FixedSize.citations
    assert "chua2024private" in Shuffle.citations and "tombs2022privacy" in Episodic.citations


def test_assumptions_name_the_unit_and_the_parameters():
    assert "probability 0.01 (Poisson sampling)" in Poisson(0.01).assumptions("task")[0]
    assert "exactly 10 of the 1000 records" in FixedSize(10, 1000).assumptions("record")[0]
    assert "draws 10 records independently and uniformly from the 1000 with replacement" in WithReplacement(
        10, 1000).assumptions("record")[0]
    assert "moves the sum by up to 2C" in WithReplacement(10, 1000).assumptions("record")[1]
    assert "every client contributes to every step" in NoSampling().assumptions("client")[0]
    assert Shuffle(10, 1000).assumptions("task", "how it was cut")[0] == "how it was cut"
    assert Episodic(4).assumptions("record")[0] == "episodic sampling"


def test_bad_parameters_are_refused():
    with pytest.raises(ValueError, match="rate"):
        Poisson(1.5)
    with pytest.raises(ValueError, match="batch_size"):
        FixedSize(11, 10)


@pytest.mark.parametrize("sampler,lot,expected", [
    ("poisson", 10, Poisson(0.05, 200)),
    ("fixed", 10, FixedSize(10, 200)),
    ("one-pass", 10, BallsInBins(200, 20)),
])
def test_the_trainer_reads_the_same_schemes(sampler, lot, expected):
    run = of_lot(sampler, 200, lot)  # --sampler SAMPLER --pool 200 --meta-batch LOT
    assert run == expected
    task = next(v for v in views("dp-maml", run, noise=1.5) if v.key == "task")
    assert (task.relation, task.charge, task.event, task.basis) == (
        expected.relation, expected.charge, expected.charge_event(ev.Gaussian(1.5)), expected.charge_basis)


def test_one_guarantee_type_for_plans_and_runs():
    run = views("dp-maml", Poisson(0.05, 200), noise=1.5)  # the trainer's views of --sampler poisson
    plan = Plan.from_dict(plan_dict({"scheme": "poisson", "population": 200, "rate": 0.05}))
    assert all(type(g) is Guarantee for g in run + plan.units())
    (own,) = plan.units()
    assert own.events == (ev.PoissonSampled(0.05, Z),) and own.how == "the plan's step" and own.steps == 100
    certified = own.certified(1.25, 1.0, "pld", ("a note",))
    assert certified.other_unit() == {"unit": "task", "relation": "add_remove", "epsilon": 1.25,
                                      "epsilon_lower": 1.0, "accountant": "pld", "how": "the plan's step",
                                      "notes": ["a note"]}


def test_a_hierarchy_record_view_is_the_worst_record():
    # one of 2 units, then 2 of its records; units of 4 and 5 records: the worst record is in the unit of 4,
    # selected with P_U = 1/2 and then drawn with r = 2/4 (DESIGN.md 3.6, conditioning on the upper level)
    h = parse_hierarchy([{"name": "u", "size": 1, "units": 2}, {"name": "r", "size": 2, "units": [4, 5]}])
    events = Episodic(8, h).record_events(Z, 2.0)
    assert events == (ev.EpisodicSampled(8, 0.5, 0.5, Z, 2.0),)
    g = Guarantee.of_plan("record", "add_remove", events, 10, "how")
    assert g.events == events and g.event == events[0]


@dataclasses.dataclass(frozen=True)
class _Toy(Poisson):
    """A new scheme written in one place: Poisson sampling that its report calls by another name."""

    scheme = "toy"

    def assumptions(self, unit, how=None):
        return (f"each {unit} is drawn by the toy scheme with probability {self.rate:.6g}",)

    def text(self, unit):
        return f"toy, rate {self.rate:.6g}"


def test_a_new_scheme_reaches_plans_and_reports_from_one_registry(monkeypatch):
    monkeypatch.setitem(SCHEMES, "toy", _Toy)
    plan = Plan.from_dict(plan_dict({"scheme": "toy", "rate": 0.01}))
    assert type(plan.sampling) is _Toy and plan.step_event() == ev.PoissonSampled(0.01, Z)
    report = plan_epsilon(plan, "rdp")
    table = report.to_table()
    assert "each task is drawn by the toy scheme with probability 0.01" in table
    assert "toy, rate 0.01" in table and report.sampling["scheme"] == "toy"
    # metadp cite's sentence and table cell read the scheme too (before: "no sampling" for any new scheme)
    latex = cite(report).render("latex")
    assert "toy, rate 0.01" in latex and "no sampling" not in latex


def test_the_sampling_layer_imports_only_the_layers_below_it():
    import ast
    import pathlib

    import metadp.sampling

    allowed = ("metadp.core", "metadp.amplification", "metadp.sampling")
    for path in pathlib.Path(metadp.sampling.__file__).parent.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("metadp"):
                assert node.module.startswith(allowed), (path.name, node.module)


@pytest.mark.parametrize("sampling,extra,message", [
    ({"scheme": "fixed", "population": 100, "batch_size": 10}, {"relation": "add_remove"},
     "relation must be 'substitute' for sampling.scheme = 'fixed' (fixed-size sampling is analysed under "
     "substitution, Balle, Barthe & Gaboardi 2018)"),
    ({"scheme": "poisson", "rate": 0.1}, {"relation": "substitute"},
     "relation must be 'add_remove' for sampling.scheme = 'poisson'"),
    ({"scheme": "episodic", "episodes": 4}, {},
     "sampling.scheme = 'episodic' needs the [[hierarchy]] levels (how an episode is drawn)"),
    ({"scheme": "episodic", "episodes": 4}, {"hierarchy": HIERARCHY, "epochs": 2, "steps": None},
     "epochs does not apply to sampling.scheme = 'episodic' (episodes are drawn afresh): give steps"),
    ({"scheme": "shuffle", "population": 100, "batch_size": 10}, {"hierarchy": HIERARCHY},
     "[[hierarchy]] applies to sampling.scheme = 'episodic', or to 'poisson'/'fixed' task sampling"),
    ({"scheme": "balls_in_bins"}, {}, "sampling.batch_size and sampling.population are required for sampling.scheme "
                                      "= 'balls_in_bins'"),
    ({"scheme": "with_replacement", "population": 100, "batch_size": 10}, {"relation": "substitute"},
     "relation must be 'add_remove' for sampling.scheme = 'with_replacement' (a draw of the unit replaces another "
     "unit's draw"),
    ({"scheme": "with_replacement", "rate": 0.1}, {},
     "sampling.rate does not apply to sampling.scheme = 'with_replacement'"),
])
def test_plan_refusals_read_the_scheme(sampling, extra, message):
    d = plan_dict(sampling, **extra)
    d = {k: v for k, v in d.items() if v is not None}
    with pytest.raises(ValueError) as err:
        Plan.from_dict(d)
    assert str(err.value).startswith(message)


def test_relations_and_epochs_follow_the_scheme():
    shuffle = Plan.from_dict(plan_dict({"scheme": "shuffle", "population": 100, "batch_size": 10},
                                       relation="substitute"))
    assert shuffle.relation == "substitute" and shuffle.units()[0].charge == "pass"
    fixed = Plan.from_dict(plan_dict({"scheme": "fixed", "population": 100, "batch_size": 10}))
    assert fixed.relation == "substitute"  # the scheme's relation is the plan's default
    epochs = {k: v for k, v in plan_dict({"scheme": "none"}, epochs=3).items() if k != "steps"}
    assert Plan.from_dict(epochs).steps == 3  # full batch: one step an epoch
    epochs = {k: v for k, v in plan_dict({"scheme": "poisson", "population": 100, "batch_size": 30}, epochs=2).items()
              if k != "steps"}
    assert Plan.from_dict(epochs).steps == 7  # 2 x 100 / 30 = 6.67 expected steps, rounded up


@pytest.mark.parametrize("scheme", [Poisson(0.25, 40), Poisson(1 / 3, 30), FixedSize(10, 40), BallsInBins(40, 10),
                                    Shuffle(8, 40), NoSampling(12), WithReplacement(8, 40)])
def test_a_schemes_plan_table_loads_back_to_it(scheme):
    # what --save-plan writes for a run's scheme (issue 29: flags compile to a plan)
    table = scheme.plan_table()
    assert table is not None and table["scheme"] == scheme.scheme
    assert SCHEMES[scheme.scheme].from_table(dict(table)) == scheme


def test_a_one_pass_scheme_that_no_batch_size_states_says_its_steps_per_pass():
    # 42 / 10 steps a pass: no batch_size states it, sampling.steps_per_pass does (issue 29: no plan form before)
    table = BallsInBins(42, 10).plan_table()
    assert table == {"scheme": "balls_in_bins", "population": 42, "steps_per_pass": 10}
    assert BallsInBins.from_table(table) == BallsInBins(42, 10)
    for bad, words in (({"batch_size": 4}, "goes with sampling.population and instead of"),
                       ({"steps_per_pass": 43}, "sampling.steps_per_pass must be")):
        with pytest.raises(ValueError, match=words):
            BallsInBins.from_table(dict(table, **bad))
    with pytest.raises(ValueError, match="steps_per_pass applies only to sampling.scheme = 'balls_in_bins'"):
        Poisson.from_table({"scheme": "poisson", "population": 42, "rate": 0.1, "steps_per_pass": 2})
    assert of_lot("one-pass", 40, 4).plan_table() == {"scheme": "balls_in_bins", "population": 40, "batch_size": 4}
