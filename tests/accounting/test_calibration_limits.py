"""Calibration never returns the edge of its search range as an answer, and the value it returns
meets the target with a bound that does not depend on the machine's speed (issue 13, items 3-4)."""

from __future__ import annotations

import math

import pytest

from metadp.accounting import Gaussian, Laplace, PoissonSampled, SelfComposed, calibration, pld
from metadp.accounting.calibration import calibrate_noise, certified_epsilon, max_rate, max_steps


def _poisson_plan(rate, z, steps):
    return SelfComposed(PoissonSampled(rate, Gaussian(z)), steps)


@pytest.mark.parametrize("make_event", [
    pytest.param(lambda z: _poisson_plan(0.0, z, 250), id="rate-0"),
    pytest.param(lambda z: _poisson_plan(0.004, z, 0), id="steps-0"),
])
def test_noise_for_a_plan_that_releases_nothing_is_an_error(make_event):
    # was: 1.90735e-06, the search's floor, printed as "smallest noise multiplier"
    with pytest.raises(ValueError, match="any noise multiplier meets target_epsilon 1: .*releases nothing"):
        calibrate_noise(make_event, 1.0, 1e-6)


def test_noise_met_at_the_search_floor_is_an_error():
    # one Gaussian release: z = 1e-6 gives epsilon about 1/(2 z^2) = 5e11, still below this target
    assert 0 < certified_epsilon(Gaussian(1e-6), 1e-6) < 1e300
    with pytest.raises(ValueError, match="every noise multiplier down to 1e-06 .* meets target_epsilon"):
        calibrate_noise(Gaussian, 1e300, 1e-6)


def test_max_steps_past_the_old_cap_is_the_true_answer():
    # was: 10**9, the search cap (epsilon about 670 there), returned as the largest number of steps
    step = Gaussian(1000.0)
    t = max_steps(step, 1e3, 1e-6)
    assert t > 10**9
    assert certified_epsilon(SelfComposed(step, t), 1e-6) <= 1e3 < certified_epsilon(SelfComposed(step, t + 1), 1e-6)


def test_max_steps_of_a_plan_that_releases_nothing_is_an_error():
    with pytest.raises(ValueError, match="any number of steps meets target_epsilon 1: .*releases nothing"):
        max_steps(PoissonSampled(0.0, Gaussian(1.0)), 1.0, 1e-6)


def test_max_steps_with_the_callers_limit_may_return_it():
    # a run of 100 steps that fits the budget: the caller's own limit is a true answer
    assert max_steps(PoissonSampled(0.004, Gaussian(1.0)), 10.0, 1e-6, limit=100) == 100


def test_unreachable_rate_is_an_error():
    # was: 0.0, i.e. "largest rate 0", when even rate 1e-12 exceeded the target
    with pytest.raises(ValueError, match="unreachable at any sampling rate >= 1e-12"):
        max_rate(lambda q: _poisson_plan(q, 1e-3, 10**6), 1e-3, 1e-9)


def test_calibrated_noise_meets_the_target_on_a_slow_machine(monkeypatch):
    """The search ran on a fast machine; later the machine slows down (every PLD query now stops
    refining after its first round, as the 4 s budget would under heavy load). The certified epsilon
    of the returned noise must still meet the target: it was verified without a time limit.

    Before the fix the same call gave 0.11580519... > 0.1158: the value sat within the refinement's
    gain of the target and the certified epsilon depended on the clock.
    """
    make_event = lambda b: SelfComposed(Laplace(b), 1000)  # noqa: E731  cheap for the PLD, refinement-sensitive
    target = 0.1158
    b = calibrate_noise(make_event, target, 1e-6, accountant="pld")
    defaults = list(pld.PldAccountant.__init__.__defaults__)
    defaults[-1] = 0.001  # max_seconds
    monkeypatch.setattr(pld.PldAccountant.__init__, "__defaults__", tuple(defaults))
    assert pld.PldAccountant().max_seconds == 0.001
    assert certified_epsilon(make_event(b), 1e-6, accountant="pld") <= target


def test_calibration_under_a_tiny_time_budget_meets_the_target(monkeypatch):
    """A slow machine throughout: every PLD query of the search stops after its first round."""
    defaults = list(pld.PldAccountant.__init__.__defaults__)
    defaults[-1] = 0.001
    monkeypatch.setattr(pld.PldAccountant.__init__, "__defaults__", tuple(defaults))
    make_event = lambda b: SelfComposed(Laplace(b), 1000)  # noqa: E731
    b = calibrate_noise(make_event, 0.1158, 1e-6, accountant="pld")
    exact = pld.PldAccountant(max_seconds=math.inf).compose(make_event(b)).get_epsilon(1e-6)
    assert exact <= 0.1158
    assert calibration.certified_epsilon(make_event(b), 1e-6, accountant="pld") == exact


def test_pld_result_says_whether_the_time_budget_stopped_the_refinement():
    # this plan takes two refinement rounds: a zero budget stops it after the first (wider interval)
    event = PoissonSampled(0.01, Gaussian(20.0))
    stopped = pld.PldAccountant(max_seconds=0.0).compose(event, 10**5).get_epsilon_bounds(1e-6)
    free = pld.PldAccountant(max_seconds=math.inf).compose(event, 10**5).get_epsilon_bounds(1e-6)
    assert stopped.stopped_by_time and not free.stopped_by_time
    assert free.epsilon_upper - free.epsilon_lower < stopped.epsilon_upper - stopped.epsilon_lower


def _counting_certified(monkeypatch):
    calls = []
    original = calibration.certified_epsilon

    def counted(*args, **kwargs):
        calls.append(args)
        return original(*args, **kwargs)

    monkeypatch.setattr(calibration, "certified_epsilon", counted)
    return calls


def test_calibration_reuses_the_search_bound_where_no_time_budget_decided_it(monkeypatch):
    # the search's PLD bounds ran to the tolerance: the final check is that same number, not a new query
    calls = _counting_certified(monkeypatch)
    make_event = lambda b: SelfComposed(Laplace(b), 1000)  # noqa: E731
    b = calibrate_noise(make_event, 0.1158, 1e-6, accountant="pld")
    assert calls == []
    assert pld.PldAccountant(max_seconds=math.inf).compose(make_event(b)).get_epsilon(1e-6) <= 0.1158
    assert max_steps(PoissonSampled(0.004, Gaussian(1.0)), 10.0, 1e-6, limit=100) == 100 and calls == []


def test_calibration_checks_again_where_the_time_budget_stopped_the_search(monkeypatch):
    # every search bound as if the time budget had stopped it: the answer's bound is computed untimed
    calls = _counting_certified(monkeypatch)
    search = calibration._search
    monkeypatch.setattr(calibration, "_search", lambda *args: (search(*args)[0], False))
    make_event = lambda b: SelfComposed(Laplace(b), 1000)  # noqa: E731
    b = calibrate_noise(make_event, 0.1158, 1e-6, accountant="pld")
    assert len(calls) == 1 and calls[0][0] == make_event(b)
