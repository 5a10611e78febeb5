"""Plan semantics: how a plan maps to events and which relation it implies."""

import math

import pytest

from metadp.accounting import FixedSizeSampled, Gaussian, Laplace, PoissonSampled, RdpAccountant, SelfComposed
from metadp.plan import Plan, default_plan, load_plan, plan_epsilon


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

