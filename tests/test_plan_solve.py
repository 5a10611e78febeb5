"""calibrate_plan: the library side of `metadp calibrate`, checked against independent accountant runs."""

import pytest

from metadp.plan import Plan, plan_epsilon
from metadp.plan_solve import Unreachable, calibrate_plan

BASE = {"name": "t", "unit": "task", "delta": 1e-6, "accountant": "pld",
        "sampling": {"scheme": "poisson", "rate": 0.01}, "noise": {"mechanism": "gaussian", "multiplier": 1.0},
        "steps": 100}


def _eps(d):
    return plan_epsilon(Plan.from_dict(d)).epsilon


def test_noise_is_the_smallest_that_meets_the_target():
    solved = calibrate_plan(BASE, "noise", 1.0)
    assert plan_epsilon(solved.plan).epsilon <= 1.0
    assert _eps(dict(BASE, noise={"mechanism": "gaussian", "multiplier": solved.value * 0.99})) > 1.0
    assert solved.plan.steps == 100 and solved.solve == "noise"


def test_steps_are_the_most_that_meet_the_target():
    solved = calibrate_plan(BASE, "steps", 1.0)
    assert plan_epsilon(solved.plan).epsilon <= 1.0 < _eps(dict(BASE, steps=solved.value + 1))


def test_rate_is_the_largest_that_meets_the_target():
    solved = calibrate_plan(BASE, "rate", 1.0)
    assert plan_epsilon(solved.plan).epsilon <= 1.0
    assert _eps(dict(BASE, sampling={"scheme": "poisson", "rate": solved.value * 1.01})) > 1.0


def test_refusals():
    with pytest.raises(ValueError, match="solve must be one of noise, steps, rate"):
        calibrate_plan(BASE, "delta", 1.0)
    with pytest.raises(ValueError, match="needs Poisson sampling"):
        calibrate_plan(dict(BASE, relation="substitute",
                            sampling={"scheme": "fixed", "batch_size": 10, "population": 1000}), "rate", 1.0)
    with pytest.raises(Unreachable, match="unreachable"):
        calibrate_plan(dict(BASE, noise={"mechanism": "gaussian", "multiplier": 0.3}, sampling={
            "scheme": "poisson", "rate": 1.0}), "steps", 0.01)
