"""Deterministic [lower, upper] bounds for random allocation and shuffled passes (issue 18, items 3-4).

Oracles: the exact order-A Renyi divergence by brute-force multinomial enumeration in mpmath; the
Gaussian's analytic profile at t = 1; seeded Monte Carlo of the exact pair (the likelihood ratio's
moments, the max event's probability, and metadp's own Monte Carlo delta)."""

from __future__ import annotations

import itertools
import math

import mpmath
import numpy as np
import pytest

from metadp.amplification import allocation_bounds as ab
from metadp.amplification.one_pass import gaussian_epsilon, random_allocation_delta
from metadp.core.conversions import delta_from_rdp


@mpmath.workdps(40)
def _order_a_oracle(z, t, alpha):
    """D_alpha(Q||P) = log(t^-alpha sum over (k_1..k_t), sum k = alpha, multinomial prod E V^k_i) / (alpha - 1)."""
    total = mpmath.mpf(0)
    for ks in itertools.product(range(alpha + 1), repeat=t):
        if sum(ks) != alpha:
            continue
        term = mpmath.factorial(alpha)
        for k in ks:
            term *= mpmath.exp(mpmath.mpf(k * (k - 1)) / (2 * z * z)) / mpmath.factorial(k)
        total += term
    return float(mpmath.log(total / mpmath.mpf(t) ** alpha) / (alpha - 1))


@pytest.mark.parametrize("z,t", [(1.0, 1), (1.0, 3), (0.7, 4), (2.0, 2)])
def test_order_a_rdp_is_the_exact_multinomial_sum(z, t):
    orders = np.arange(2.0, 7.0)
    got, _ = ab.allocation_rdp(z, t, 1, orders)
    want = np.array([_order_a_oracle(z, t, int(a)) for a in orders])
    assert np.all(got >= want) and np.allclose(got, want, rtol=1e-8, atol=1e-14)
    if t == 1:
        assert np.allclose(want, orders / (2 * z * z))


@pytest.mark.parametrize("z,t", [(1.0, 10), (2.0, 50), (0.8, 20)])
def test_order_b_bound_is_above_the_monte_carlo_moment(z, t):
    orders = np.array([2.0, 3.0, 5.0])
    _, bound = ab.allocation_rdp(z, t, 1, orders)
    rng = np.random.default_rng(7)
    x = rng.standard_normal((200_000, t)) * z
    r = np.mean(np.exp((x - 0.5) / z**2), axis=1)
    for a, b in zip(orders, bound):
        sample = r ** -(a - 1)
        mean, se = sample.mean(), sample.std() / math.sqrt(len(sample))
        assert b >= math.log(mean - 5 * se) / (a - 1), (a, b, mean)
        assert b < a / (2 * z * z)  # amplified below the single Gaussian


def test_a_pass_of_one_step_is_the_gaussian_on_both_sides():
    for z in (0.8, 1.0, 2.0):
        gauss = gaussian_epsilon(z, 1e-5)
        assert ab.allocation_upper(z, 1, 1e-5) == gauss
        lower = ab.allocation_lower(z, 1, 1e-5)
        assert lower <= gauss and lower == pytest.approx(gauss, rel=1e-5)  # the threshold event is optimal


def test_the_max_event_probabilities_match_a_seeded_simulation():
    z, t, tau = 1.0, 20, 2.5
    rng = np.random.default_rng(3)
    x = rng.standard_normal((400_000, t)) * z
    p_null = np.mean(x.max(axis=1) > tau)
    x[:, 0] += 1.0
    p_shift = np.mean(x.max(axis=1) > tau)
    got = ab._event_probs(z, t, 1.0, np.array([tau])), ab._event_probs(z, t, 0.0, np.array([tau]))
    assert abs(got[0][0] - p_shift) < 5 * math.sqrt(p_shift / 400_000)
    assert abs(got[1][0] - p_null) < 5 * math.sqrt(p_null / 400_000)


def test_monte_carlo_delta_lies_between_the_deterministic_bounds():
    """metadp's Monte Carlo (seeded, 95% upper confidence bound) against [lower, upper] at eps = 1, t = 10."""
    z, t, eps = 1.0, 10, 1.0
    mc = random_allocation_delta(z, t, eps, n_samples=100_000, rng=11)
    lower = ab.allocation_lower_delta(z, t, eps)
    rdp_a, rdp_b = ab.allocation_rdp(z, t)
    upper = max(delta_from_rdp(ab.ALLOCATION_ORDERS, rdp_a, eps)[0], delta_from_rdp(ab.ALLOCATION_ORDERS, rdp_b, eps)[0])
    assert 0 < lower <= mc.upper
    assert mc.estimate <= upper


@pytest.mark.parametrize("z,t,epochs", [(1.0, 10, 1), (2.0, 100, 1), (1.0, 100, 3), (0.8, 30, 2)])
def test_upper_is_above_lower_and_below_the_gaussian(z, t, epochs):
    lower, upper = ab.allocation_lower(z, t, 1e-5, epochs), ab.allocation_upper(z, t, 1e-5, epochs)
    gauss = gaussian_epsilon(z / math.sqrt(epochs), 1e-5)
    assert 0 < lower <= upper <= gauss
    shuffle = ab.shuffle_lower(z, t, 1e-5, epochs)
    assert shuffle == lower  # zero-out shuffle: the same pair


def test_more_epochs_never_lower_the_lower_bound():
    one, three = ab.allocation_lower(1.0, 20, 1e-5, 1), ab.allocation_lower(1.0, 20, 1e-5, 3)
    assert three >= one


def test_substitution_shuffle_lower_bound_is_below_its_gaussian():
    z = 1.0  # relative to the substitution sensitivity: one Gaussian with multiplier z is the upper bound
    lower = ab.shuffle_lower(z, 10, 1e-5, 1, "substitute")
    assert 0 < lower <= gaussian_epsilon(z, 1e-5)


def test_bad_arguments_name_the_parameter():
    with pytest.raises(ValueError, match="z"):
        ab.allocation_upper(0.0, 10, 1e-5)
    with pytest.raises(ValueError, match="t"):
        ab.allocation_lower(1.0, 0, 1e-5)
    with pytest.raises(ValueError, match="delta"):
        ab.allocation_upper(1.0, 10, 1.5)
    with pytest.raises(ValueError, match="relation"):
        ab.shuffle_lower(1.0, 10, 1e-5, 1, "zero")
    with pytest.raises(ValueError, match="orders"):
        ab.allocation_rdp(1.0, 10, 1, [2.5])


@pytest.mark.slow
@pytest.mark.parametrize("z", [0.6, 1.0, 2.0, 4.0])
@pytest.mark.parametrize("t", [2, 10, 100, 1000])
@pytest.mark.parametrize("delta", [1e-3, 1e-6, 1e-9])
def test_upper_is_above_lower_on_a_grid(z, t, delta):
    for epochs in (1, 4):
        lower, upper = ab.allocation_lower(z, t, delta, epochs), ab.allocation_upper(z, t, delta, epochs)
        assert 0 <= lower <= upper <= gaussian_epsilon(z / math.sqrt(epochs), delta) * (1 + 1e-12)


def test_the_lower_delta_is_below_metadps_monte_carlo_at_z_2():
    z, t, eps = 2.0, 100, 0.05
    mc = random_allocation_delta(z, t, eps, n_samples=100_000, rng=9)
    assert 0 < ab.allocation_lower_delta(z, t, eps) <= mc.upper


def test_order_a_matches_the_random_allocation_package():
    """Feldman & Shenfeld's own code (PyPI ``random-allocation``, its exact 'remove'-direction RDP by integer
    partitions) where installed: agreement to 1e-5 relative (their sum is in floats)."""
    direct = pytest.importorskip("random_allocation.random_allocation_scheme.direct")
    for z in (0.7, 1.0, 2.0):
        for t in (2, 10, 1000):
            orders = np.arange(2.0, 21.0)
            mine = ab.allocation_rdp(z, t, 1, orders)[0]
            theirs = np.array([direct.allocation_RDP_remove(int(a), z, t) for a in orders])
            assert np.allclose(mine, theirs, rtol=1e-5, atol=0)


@pytest.mark.slow
def test_lower_bound_against_the_random_allocation_package():
    """Their lower bound (Chua et al.'s balls-and-bins accountant) at z = 1: ours within 2% (ours is the same
    max event: 1.3% below theirs at t = 1000); and our upper is above theirs (a lower bound too)."""
    lb = pytest.importorskip("random_allocation.random_allocation_scheme.lower_bound")
    structs = pytest.importorskip("random_allocation.comparisons.structs")
    for t in (100, 1000):
        params = structs.PrivacyParams(sigma=1.0, num_steps=t, delta=1e-5)
        theirs = lb.allocation_epsilon_lower_bound(params, structs.SchemeConfig())
        assert ab.allocation_lower(1.0, t, 1e-5) == pytest.approx(theirs, rel=2e-2)
        assert ab.allocation_upper(1.0, t, 1e-5) >= theirs
