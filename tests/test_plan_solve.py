"""calibrate_plan: the library side of `metadp calibrate`, checked against independent accountant runs."""

import pytest

from metadp.core.events import EpisodicSampled, Gaussian, SelfComposed

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


SHUFFLE = dict(BASE, sampling={"scheme": "shuffle", "population": 1000, "batch_size": 100})


def test_a_shuffled_plan_is_calibrated_per_pass_as_its_report_counts():
    # 100 steps of 100 of 1000 are 10 passes: the noise that meets 1.0 is the one its report certifies,
    # not that of 100 Gaussian releases (Plan.event composed the steps before: noise 45 for a report of 0.29)
    solved = calibrate_plan(SHUFFLE, "noise", 1.0)
    assert plan_epsilon(solved.plan).epsilon <= 1.0
    assert _eps(dict(SHUFFLE, noise={"mechanism": "gaussian", "multiplier": solved.value * 0.99})) > 1.0
    with pytest.raises(ValueError, match="charged per step"):
        calibrate_plan(SHUFFLE, "steps", 1.0)


def test_an_episodic_record_plan_composes_its_record_event():
    # Plan.event() composed the bare Gaussian for an episodic record plan (a record in several episodes of a
    # step moves the sum by more than one C): it is the record's EpisodicSampled event now
    plan = Plan.from_dict({"name": "e", "unit": "record", "delta": 1e-6, "accountant": "pld",
                           "sampling": {"scheme": "episodic", "episodes": 4},
                           "noise": {"mechanism": "gaussian", "multiplier": 1.0}, "steps": 10,
                           "hierarchy": [{"name": "class", "draw": "fixed", "size": 2, "units": 20},
                                         {"name": "example", "draw": "fixed", "size": 1, "units": 5}]})
    assert plan.event() == SelfComposed(EpisodicSampled(4, 0.1, 0.2, Gaussian(1.0), 2.0), 10)
