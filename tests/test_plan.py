"""Plan semantics: how a plan maps to events and which relation it implies."""

import math
from pathlib import Path

import pytest

from metadp.accounting import FixedSizeSampled, Gaussian, Laplace, PoissonSampled, RdpAccountant, SelfComposed
from metadp.plan import Plan, default_plan, load_plan, loads_plan, plan_epsilon


def _plan(**overrides):
    d = {"unit": "record", "delta": 1e-5, "steps": 10, "sampling": {"scheme": "poisson", "rate": 0.01}, "noise": {"multiplier": 1.0}}
    d.update(overrides)
    return Plan.from_dict(d)


def test_default_plan_is_the_dp_maml_setting():
    plan = default_plan()
    assert plan.event() == SelfComposed(PoissonSampled(0.004, Gaussian(1.0)), 250)
    assert (plan.unit, plan.relation, plan.delta) == ("task", "add_remove", 1e-6)


def test_report_equals_direct_accountant():
    plan = default_plan()
    direct = RdpAccountant().compose(PoissonSampled(0.004, Gaussian(1.0)), 250).get_epsilon(1e-6)
    assert plan_epsilon(plan, accountant="rdp").epsilon == direct


def test_fixed_sampling_defaults_to_substitution():
    plan = _plan(sampling={"scheme": "fixed", "batch_size": 5, "population": 50})
    assert plan.relation == "substitute"
    assert plan.step_event() == FixedSizeSampled(5, 50, Gaussian(1.0))


def test_no_sampling_and_laplace():
    plan = _plan(sampling={"scheme": "none"}, noise={"mechanism": "laplace", "scale": 2.0})
    assert plan.step_event() == Laplace(2.0)
    # 10 Laplace(2) steps: pure DP gives epsilon <= 10 * 1/2 = 5 (Dwork & Roth 2014, Thm 3.6 + composition).
    assert plan_epsilon(plan).epsilon <= 5.0


def test_epochs_count_steps():
    # 60 epochs of 60,000 records in lots of 256: ceil(60 * 60000 / 256) = 14,063 steps.
    plan = Plan.from_dict({
        "unit": "record", "delta": 1e-5, "epochs": 60, "sampling": {"scheme": "poisson", "population": 60000, "batch_size": 256},
        "noise": {"multiplier": 1.1}})
    assert plan.steps == math.ceil(60 * 60000 / 256)


def test_poisson_rate_from_batch_size():
    plan = _plan(sampling={"scheme": "poisson", "population": 400000, "batch_size": 1600})
    assert plan.sampling.rate == 0.004


def test_load_plan_from_text_and_file(tmp_path):
    text = 'unit = "record"\ndelta = 1e-5\nsteps = 3\n[sampling]\nscheme = "none"\n[noise]\nmultiplier = 4.0\n'
    from_text = load_plan(text)
    path = tmp_path / "p.toml"
    path.write_text(text)
    assert load_plan(path) == from_text == load_plan(str(path))
    assert from_text.event() == SelfComposed(Gaussian(4.0), 3)


def test_unknown_key_suggests_correction():
    with pytest.raises(ValueError, match=r"sampling\.batchsize.*did you mean 'batch_size'"):
        _plan(sampling={"scheme": "poisson", "batchsize": 3, "population": 10})



# -- issue 13: extreme noise, and text versus paths ------------------------------------------------

TINY_NOISE = """\
name = "tiny noise"
unit = "record"
delta = 1e-6
steps = 100
accountant = "{accountant}"
[sampling]
scheme = "poisson"
rate = 0.01
[noise]
mechanism = "gaussian"
multiplier = 1e-300
"""


def test_vanishing_noise_certifies_infinity():
    # was: "cannot convert float NaN to integer" (from the PLD lattice). The unit is sampled with
    # probability 1 - 0.99^100 > delta and then released with noise 1e-300: +inf is the honest bound.
    report = plan_epsilon(loads_plan(TINY_NOISE.format(accountant="all")))
    assert report.epsilon == math.inf and report.accountant == "rdp"


def test_vanishing_noise_is_refused_by_the_pld_accountant_by_name():
    with pytest.raises(ValueError, match=r"pld accountant.*noise multiplier in \[1e-50, 1e\+50\].*got 1e-300"):
        loads_plan(TINY_NOISE.format(accountant="pld"))


def test_a_string_without_newline_is_a_path_even_with_equals(tmp_path, monkeypatch):
    # a path containing '=' was parsed as TOML text
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ValueError, match="plan file 'a=b.toml' does not exist"):
        load_plan("a=b.toml")
    (tmp_path / "a=b.toml").write_text(TINY_NOISE.format(accountant="rdp"), encoding="utf-8")
    assert load_plan("a=b.toml") == loads_plan(TINY_NOISE.format(accountant="rdp")) == load_plan(Path("a=b.toml"))


def test_loads_plan_reads_text_only():
    with pytest.raises(ValueError, match="plan text must be a str"):
        loads_plan(Path("examples/dp_sgd_mnist.toml"))


def _pool_plan(**top):
    d = {"name": "pool", "unit": "task", "delta": 1e-5, "steps": 50,
         "sampling": {"scheme": "poisson", "population": 500, "batch_size": 25}, "noise": {"multiplier": 1.2}}
    d.update(top)
    return d


def test_record_multiplicity_reports_the_records_pool_view():
    from metadp.accounting.certify import certify
    from metadp.core import events as ev

    one = plan_epsilon(Plan.from_dict(_pool_plan(record_multiplicity=1)))
    record = next(o for o in one.other_units if o["unit"] == "record")
    # the oracle: k = 1 under Poisson sampling is the pool-substitution pair, 50 steps at rate 25 / 500
    expected = certify(ev.PoolSubstitution(0.05, ev.Gaussian(1.2)), 1e-5, steps=50).epsilon
    assert record["epsilon"] == pytest.approx(expected, rel=1e-9) and record["epsilon"] > one.epsilon
    assert not any("which this report does not give" in w for w in one.warnings)
    three = plan_epsilon(Plan.from_dict(_pool_plan(record_multiplicity=3)))
    record3 = next(o for o in three.other_units if o["unit"] == "record")
    revealed = certify(ev.EpisodicSampled(3, 0.05, 1.0, ev.Gaussian(1.2 / 2), 1.0), 1e-5, steps=50).epsilon
    assert record3["epsilon"] == pytest.approx(revealed, rel=1e-9) and record3["epsilon"] > record["epsilon"]
    assert plan_epsilon(Plan.from_dict(_pool_plan())).other_units == ()  # not declared: no record view


def test_record_multiplicity_without_a_bound_says_so():
    fixed = _pool_plan(record_multiplicity=2, relation="substitute",
                       sampling={"scheme": "fixed", "population": 500, "batch_size": 25})
    report = plan_epsilon(Plan.from_dict(fixed))
    assert report.other_units == ()
    assert any(w.startswith("record-level: no guarantee is certified") for w in report.warnings)


@pytest.mark.parametrize("top, words", [
    ({"record_multiplicity": 0}, "record_multiplicity must be"),
    ({"record_multiplicity": 2, "unit": "group", "group_size": 2}, "record_multiplicity applies to unit = 'task' or"),
    ({"record_multiplicity": 2, "noise": {"mechanism": "laplace", "scale": 1.0}}, "needs noise.mechanism"),
    ({"record_multiplicity": 2, "sampling": {"scheme": "poisson", "rate": 0.1}}, "needs sampling.population"),
    ({"record_multiplicity": "3"}, "record_multiplicity"),
])
def test_record_multiplicity_refusals(top, words):
    with pytest.raises(ValueError, match=words):
        Plan.from_dict(_pool_plan(**top))
