"""The run's budget schedule: the last step within budget is exact, every epsilon an upper bound."""

import numpy as np
import pytest

from metadp.accounting import EpisodicSampled, Gaussian, PoissonSampled, RdpAccountant
from metadp.accounting.pld import PldAccountant
from metadp.training.run.budget import budget_schedule, noise_for_budget

STEP = PoissonSampled(0.004, Gaussian(1.0))


def test_last_step_is_the_largest_within_budget():
    s = budget_schedule(STEP, 1000, 0.5, 1e-6)
    assert 0 < s.last_step < 1000
    inside = PldAccountant().compose(STEP, s.last_step).get_epsilon(1e-6)
    beyond = PldAccountant().compose(STEP, s.last_step + 1).get_epsilon(1e-6)
    assert inside <= 0.5 < beyond
    assert s.epsilon_after(s.last_step) == pytest.approx(inside, rel=1e-12)
    assert "stop after step" in s.describe()


def test_schedule_is_monotone_and_bounds_every_step():
    s = budget_schedule(STEP, 300, 10.0, 1e-6, accountant="rdp")
    assert s.last_step == 300  # the whole run fits
    values = [s.epsilon_after(t) for t in range(1, 301)]
    assert np.all(np.diff(values) >= 0)
    for t in (1, 17, 150, 299):  # read at the next checkpoint: never below the step's own epsilon
        assert s.epsilon_after(t) >= RdpAccountant().compose(STEP, t).get_epsilon(1e-6) * (1 - 1e-12)
    with pytest.raises(ValueError, match="horizon"):
        s.epsilon_after(301)


def test_budget_too_small_for_one_step():
    s = budget_schedule(PoissonSampled(0.5, Gaussian(0.5)), 10, 0.01, 1e-6)
    assert s.last_step == 0 and s.final_epsilon == 0.0 and s.epsilon_after(0) == 0.0


def test_episodic_schedule_stops_at_the_last_step_within_budget():
    # A record in 2 episodes: one step costs 2.04 at delta 1e-6, 50 steps 3.93 (independent PLD composes)
    step = EpisodicSampled(2, 5 / 100, 0.1, Gaussian(2.0))
    s = budget_schedule(step, 60, 3.0, 1e-6)
    assert 1 < s.last_step < 50
    spent = lambda t: PldAccountant().compose(step, t).get_epsilon(1e-6)  # noqa: E731
    assert spent(s.last_step) <= 3.0 < spent(s.last_step + 1)


@pytest.mark.slow
def test_episodic_record_schedule_and_noise_for_budget():
    # one step already costs 5.9 at delta 1e-6 (rare steps with 3+ affected episodes dominate), 50 cost 11.3
    step = EpisodicSampled(16, 5 / 100, 0.1, Gaussian(2.0))
    s = budget_schedule(step, 200, 10.0, 1e-6)
    assert 10 < s.last_step < 50
    z = noise_for_budget(lambda z: PoissonSampled(0.004, Gaussian(z)), 250, 1.0, 1e-6)
    assert PldAccountant().compose(PoissonSampled(0.004, Gaussian(z)), 250).get_epsilon(1e-6) <= 1.0
    assert 0.8 < z < 0.9  # about 0.8403 (benchmarks/accounting_speed.py)


def test_noise_for_budget_spends_the_budget():
    z = noise_for_budget(lambda z: PoissonSampled(0.004, Gaussian(z)), 250, 1.0, 1e-6)
    assert PldAccountant().compose(PoissonSampled(0.004, Gaussian(z)), 250).get_epsilon(1e-6) <= 1.0
    assert PldAccountant().compose(PoissonSampled(0.004, Gaussian(z * 0.99)), 250).get_epsilon(1e-6) > 1.0


@pytest.mark.parametrize("bad", [dict(steps=0), dict(target_epsilon=0.0), dict(delta=1.5), dict(accountant="x")])
def test_bad_arguments(bad):
    kwargs = dict(step_event=STEP, steps=10, target_epsilon=1.0, delta=1e-6) | bad
    with pytest.raises(ValueError):
        budget_schedule(**kwargs)
