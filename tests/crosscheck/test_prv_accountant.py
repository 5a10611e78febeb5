"""Cross-checks of metadp's PLD accountant against prv-accountant (Gopi, Lee & Wutschitz 2021) and
dp-accounting's PLD on tiny-delta, long-run plans (issue 18).

prv-accountant certifies an interval [lower, upper] around epsilon (its ``eps_error``, with its own
truncation and discretisation analysis). metadp's upper bound must be at or above every certified lower
bound (prv's and its own) and at most 0.5% above the best upper bound among the three libraries.
dp-accounting's PLD (discretisation 1e-4) prints one pessimistic estimate, counted as an upper bound.

The fast tests compare against anchors recorded from prv-accountant 0.2.0 (eps_error 0.01, delta_error
delta / 1000) and dp-accounting 0.6.0 on this machine (2026-11-25); the slow test reruns both libraries.
"""

from __future__ import annotations

import logging

import pytest

from metadp.accounting import Gaussian, PoissonSampled
from metadp.accounting.pld import PldAccountant

# (rate, noise multiplier, steps, delta): prv [lower, upper], dp-accounting PLD (1e-4)
PLANS = [
    pytest.param((1e-4, 1.0, 10**6, 1e-10), (0.75568, 0.77574), 0.82462, id="rate1e-4-1e6-delta1e-10"),
    pytest.param((5e-4, 1.1, 2 * 10**5, 1e-9), (1.42037, 1.44047), 1.43452, id="rate5e-4-2e5-delta1e-9"),
]


def _metadp(plan):
    q, z, steps, delta = plan
    return PldAccountant().compose(PoissonSampled(q, Gaussian(z)), steps).get_epsilon_bounds(delta)


def _check(result, prv_lower, uppers):
    assert 0.0 < result.epsilon_lower <= result.epsilon_upper
    assert result.epsilon_upper >= prv_lower  # at or above every certified lower bound
    best = min([result.epsilon_upper, *uppers])
    assert result.epsilon_upper <= 1.005 * best, (result, best)


@pytest.mark.parametrize("plan, prv, dp_accounting", PLANS)
def test_tiny_delta_long_runs_against_recorded_anchors(plan, prv, dp_accounting):
    r = _metadp(plan)
    # anchors rounded to 1e-5: the lower one down, the upper ones up
    _check(r, prv[0], [prv[1], dp_accounting])
    assert not any("RDP bound is reported" in n for n in r.notes), r.notes


@pytest.mark.slow
@pytest.mark.parametrize("plan, prv, dp_accounting", PLANS)
def test_tiny_delta_long_runs_against_prv_and_dp_accounting(plan, prv, dp_accounting):
    prv_accountant = pytest.importorskip("prv_accountant")
    from prv_accountant.privacy_random_variables import PoissonSubsampledGaussianMechanism

    q, z, steps, delta = plan
    acc = prv_accountant.PRVAccountant(
        prvs=[PoissonSubsampledGaussianMechanism(noise_multiplier=z, sampling_probability=q)],
        max_self_compositions=[steps], eps_error=0.01, delta_error=delta / 1000)
    prv_lower, _, prv_upper = acc.compute_epsilon(delta=delta, num_self_compositions=[steps])
    uppers = [prv_upper]
    try:
        from dp_accounting import dp_event as de
        from dp_accounting.pld import pld_privacy_accountant
    except ImportError:
        pass
    else:
        logging.getLogger("absl").setLevel(logging.ERROR)
        dp = pld_privacy_accountant.PLDAccountant(value_discretization_interval=1e-4)
        dp.compose(de.SelfComposedDpEvent(de.PoissonSampledDpEvent(q, de.GaussianDpEvent(z)), steps))
        uppers.append(dp.get_epsilon(delta))
    _check(_metadp(plan), prv_lower, uppers)
