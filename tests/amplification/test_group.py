"""Group privacy (metadp.amplification.group).

Oracles and provenance:
* group_epsilon_delta: the chain sum delta * sum_{i<k} e^{i eps} and k e^{(k-1) eps} delta in mpmath
  (Dwork & Roth 2014, Sec. 2.3), and the exact Gaussian group profile as a floor it must never cross;
* rdp_group: Mironov 2017 (arXiv:1702.07476), Prop. 2, read at group order beta: 3^c eps(2^c beta);
  for the Gaussian that is 6^c beta / (2 z^2) in closed form, never below the exact k^2 beta/(2 z^2),
  and for the Poisson-subsampled Gaussian never below the exact group RDP of the mixture pair;
* gaussian_group_pair: the analytic Gaussian with sensitivity k (Balle & Wang 2018, arXiv:1805.06530,
  Thm. 8), delta(eps) = Phi(k/(2z) - eps z/k) - e^eps Phi(-k/(2z) - eps z/k), inverted in mpmath;
* poisson_group_pairs: dp-accounting 0.6's ``from_mixture_gaussian_mechanism`` (the PLD of
  ``MixtureOfGaussiansDpEvent(z, [0..k], Bin(.; k, q))``). Its connect-the-dots PLD reproduces the
  hockey-stick divergence exactly at the lattice points, so at eps on its lattice (multiples of
  the discretization 1e-2) the two profiles agree to 1e-9 relative (observed: < 2e-12); its epsilon
  at delta is an upper bound within one lattice step (observed: at most 3e-5 above, k = 2..8).
"""

from __future__ import annotations

import math

import mpmath
import numpy as np
import pytest
from scipy import optimize, stats

from metadp.core.rdp import gaussian_rdp, poisson_gaussian_rdp
from metadp.amplification.group import (
    GROUP_DELTA_FORMS,
    gaussian_group_pair,
    group_epsilon_delta,
    poisson_group_pairs,
    rdp_group,
)
from metadp.mechanisms import gaussian_pair, mixture_rdp, poisson_gaussian_pairs

KS = range(2, 9)
ORDERS = np.array([1.5, 2.0, 3.0, 8.0, 32.0, 256.0])


def epsilon_at(pairs, delta):
    """Smallest eps with max_pair profile(eps) <= delta (brentq to 1e-13)."""
    f = lambda e: max(float(p.profile(e)) for p in pairs) - delta  # noqa: E731
    if f(0.0) <= 0:
        return 0.0
    hi = 1.0
    while f(hi) > 0:
        hi *= 2.0
    return optimize.brentq(f, 0.0, hi, xtol=1e-13, rtol=1e-14)


# -- (eps, delta) group conversion --------------------------------------------------------------------


@pytest.mark.parametrize("form", GROUP_DELTA_FORMS)
def test_group_of_one_is_the_base(form):
    assert group_epsilon_delta(0.7, 1e-6, 1, form=form) == (0.7, 1e-6)


@pytest.mark.parametrize("eps", [0.0, 1e-8, 0.3, 1.0, 5.0])
@pytest.mark.parametrize("k", [2, 3, 8, 50])
@mpmath.workdps(50)
def test_group_delta_formulas_against_mpmath(eps, k):
    delta = 1e-9
    chain = mpmath.mpf(delta) * mpmath.fsum(mpmath.exp(i * mpmath.mpf(eps)) for i in range(k))
    dwork_roth = k * mpmath.exp((k - 1) * mpmath.mpf(eps)) * mpmath.mpf(delta)
    for form, exact in (("chain", chain), ("dwork_roth", dwork_roth)):
        eps_k, delta_k = group_epsilon_delta(eps, delta, k, form=form)
        assert eps_k == k * eps
        exact = min(mpmath.mpf(1), exact)
        assert delta_k >= exact  # rounded up, never below
        assert delta_k <= exact * (1 + 1e-13) + 1e-300
    assert group_epsilon_delta(eps, delta, k)[1] <= group_epsilon_delta(eps, delta, k, form="dwork_roth")[1]


def test_group_delta_caps_at_one_and_keeps_zero():
    assert group_epsilon_delta(3.0, 0.01, 8)[1] == 1.0
    assert group_epsilon_delta(300.0, 1e-10, 8)[1] == 1.0  # e^{2100}: no overflow
    assert group_epsilon_delta(2.0, 0.0, 5) == (10.0, 0.0)


@pytest.mark.parametrize("z", [0.7, 2.0, 5.0])
@pytest.mark.parametrize("form", GROUP_DELTA_FORMS)
def test_group_conversion_never_below_the_exact_gaussian_group(z, form):
    """(k eps, delta_k) must hold for the Gaussian group, whose exact profile is known."""
    gaps = []
    for k in KS:
        exact_pair = gaussian_group_pair(z, k)
        for eps in (0.05, 0.3, 1.0, 2.5):
            base_delta = float(gaussian_pair(z).profile(eps))
            eps_k, delta_k = group_epsilon_delta(eps, base_delta, k, form=form)
            exact = float(exact_pair.profile(eps_k))
            assert exact <= delta_k
            gaps.append(exact / base_delta)
    # The test can fail: forgetting the growth of delta (delta_k = delta) would violate it here.
    assert max(gaps) > 1.5


def test_group_epsilon_delta_rejects_bad_input():
    with pytest.raises(ValueError, match="epsilon"):
        group_epsilon_delta(-0.1, 1e-5, 2)
    with pytest.raises(ValueError, match="epsilon"):
        group_epsilon_delta(math.inf, 1e-5, 2)
    with pytest.raises(ValueError, match=r"delta must be in \[0, 1\]"):
        group_epsilon_delta(1.0, 1.5, 2)
    with pytest.raises(ValueError, match="k must be an integer >= 1"):
        group_epsilon_delta(1.0, 1e-5, 0)
    with pytest.raises(ValueError, match="form"):
        group_epsilon_delta(1.0, 1e-5, 2, form="advanced")


# -- RDP group rule -----------------------------------------------------------------------------------


def test_rdp_group_of_one_is_the_base():
    base = lambda a: gaussian_rdp(1.3, a)  # noqa: E731
    np.testing.assert_array_equal(rdp_group(base, ORDERS, 1), base(ORDERS))


@pytest.mark.parametrize("k, c", [(2, 1), (3, 2), (4, 2), (5, 3), (8, 3)])
def test_rdp_group_gaussian_closed_form(k, c):
    z = 1.7
    got = rdp_group(lambda a: gaussian_rdp(z, a), ORDERS, k)
    # Prop. 2 at group order beta = max(beta, 2): 3^c (2^c beta) / (2 z^2) = 6^c beta / (2 z^2)
    expected = 6.0**c * np.maximum(ORDERS, 2.0) / (2 * z * z)
    np.testing.assert_allclose(got, expected, rtol=1e-15)
    exact_group = gaussian_rdp(z / k, ORDERS)  # k^2 beta / (2 z^2)
    assert np.all(got >= exact_group)


@pytest.mark.parametrize("k", [2, 3, 4])
def test_rdp_group_above_exact_subsampled_group_rdp(k):
    """The exact group RDP of the Poisson-subsampled Gaussian (mixture pair, both directions) is a
    floor the generic rule must respect."""
    q, z = 0.05, 1.2
    orders = np.array([2.0, 4.0, 16.0])
    exact = np.max([mixture_rdp(p, orders) for p in poisson_group_pairs(q, z, k)], axis=0)
    rule = rdp_group(lambda a: poisson_gaussian_rdp(q, z, a), orders, k)
    assert np.all(rule >= exact)


def test_rdp_group_rejects_bad_curves_and_k():
    with pytest.raises(ValueError, match="k must be an integer >= 1"):
        rdp_group(lambda a: gaussian_rdp(1.0, a), ORDERS, 0)
    with pytest.raises(ValueError, match="one value per order"):
        rdp_group(lambda a: np.ones(2), ORDERS, 2)
    with pytest.raises(ValueError, match=">= 0"):
        rdp_group(lambda a: -np.ones_like(a), ORDERS, 2)
    with pytest.raises(ValueError, match="orders"):
        rdp_group(lambda a: gaussian_rdp(1.0, a), [0.5], 2)


# -- Gaussian group pair ------------------------------------------------------------------------------


@mpmath.workdps(40)
def mp_gaussian_epsilon(sensitivity, z, delta):
    """eps with Phi(s/(2z) - eps z/s) - e^eps Phi(-s/(2z) - eps z/s) = delta, 40 digits."""
    s, z, delta = mpmath.mpf(sensitivity), mpmath.mpf(z), mpmath.mpf(delta)
    f = lambda e: mpmath.ncdf(s / (2 * z) - e * z / s) - mpmath.exp(e) * mpmath.ncdf(-s / (2 * z) - e * z / s) - delta  # noqa: E731
    lo, hi = mpmath.mpf(0), mpmath.mpf(1)
    while f(hi) > 0:
        lo, hi = hi, 2 * hi
    for _ in range(80):  # bisection: f decreases in eps; 2^-80 of the bracket is below 1e-20
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if f(mid) > 0 else (lo, mid)
    return float(hi)


def test_gaussian_group_of_one_is_the_gaussian():
    pair = gaussian_group_pair(1.4, 1)
    eps = np.array([0.0, 0.5, 2.0])
    np.testing.assert_array_equal(pair.profile(eps), gaussian_pair(1.4).profile(eps))


@pytest.mark.parametrize("k", KS)
def test_gaussian_group_epsilon_is_the_analytic_gaussian_with_sensitivity_k(k):
    z, delta = 4.0, 1e-5
    got = epsilon_at([gaussian_group_pair(z, k)], delta)
    assert got == pytest.approx(mp_gaussian_epsilon(k, z, delta), rel=1e-9)


def test_gaussian_group_pair_rejects_bad_input():
    with pytest.raises(ValueError, match="z must be"):
        gaussian_group_pair(0.0, 2)
    with pytest.raises(ValueError, match="k must be an integer >= 1"):
        gaussian_group_pair(1.0, 2.5)


# -- Poisson-subsampled Gaussian group pairs ----------------------------------------------------------


def test_poisson_group_of_one_is_the_subsampled_gaussian():
    eps = np.array([0.0, 0.3, 1.0, 3.0])
    for got, ref in zip(poisson_group_pairs(0.02, 0.9, 1), poisson_gaussian_pairs(0.02, 0.9)):
        assert got.direction == ref.direction
        np.testing.assert_allclose(got.profile(eps), ref.profile(eps), rtol=1e-13, atol=0)


def test_poisson_group_pairs_weights_and_full_rate():
    add, remove = poisson_group_pairs(0.3, 1.0, 5)
    np.testing.assert_allclose(add.weights, stats.binom.pmf(np.arange(6), 5, 0.3), rtol=1e-14)
    np.testing.assert_array_equal(add.shifts, np.arange(6.0))
    assert (add.direction, remove.direction) == ("add", "remove")
    (full,) = poisson_group_pairs(1.0, 2.0, 3)
    eps = np.array([0.0, 1.0, 4.0])
    np.testing.assert_allclose(full.profile(eps), gaussian_group_pair(2.0, 3).profile(eps), rtol=1e-13)


def test_poisson_group_amplifies_and_grows_with_k():
    eps = np.array([0.5, 1.0, 2.0])
    previous = np.zeros(3)
    for k in KS:
        sub = np.max([p.profile(eps) for p in poisson_group_pairs(0.1, 1.0, k)], axis=0)
        assert np.all(sub <= gaussian_group_pair(1.0, k).profile(eps))
        assert np.all(sub >= previous)
        previous = sub


def _dp_accounting_check(q, z, k):
    pld_module = pytest.importorskip("dp_accounting.pld.privacy_loss_distribution")
    weights = stats.binom.pmf(np.arange(k + 1), k, q)
    pld = pld_module.from_mixture_gaussian_mechanism(
        standard_deviation=z, sensitivities=list(range(k + 1)), sampling_probs=list(weights),
        value_discretization_interval=1e-2)
    pairs = poisson_group_pairs(q, z, k)
    for eps in (0.0, 0.5, 1.0, 3.0):  # lattice points of the 1e-2 discretization
        ours = max(float(p.profile(eps)) for p in pairs)
        assert pld.get_delta_for_epsilon(eps) == pytest.approx(ours, rel=1e-9)
    ours_eps = epsilon_at(pairs, 1e-5)
    theirs_eps = pld.get_epsilon_for_delta(1e-5)
    assert ours_eps - 1e-9 <= theirs_eps <= ours_eps + 1e-2


@pytest.mark.parametrize("k", KS)
def test_poisson_group_matches_dp_accounting_mixture_of_gaussians(k):
    _dp_accounting_check(0.1, 1.0, k)


@pytest.mark.slow
@pytest.mark.parametrize("q, z", [(0.01, 0.8), (0.3, 2.0)])
@pytest.mark.parametrize("k", KS)
def test_poisson_group_matches_dp_accounting_sweep(q, z, k):
    _dp_accounting_check(q, z, k)


def test_poisson_group_pairs_reject_bad_input():
    with pytest.raises(ValueError, match=r"q must be in \(0, 1\]"):
        poisson_group_pairs(0.0, 1.0, 2)
    with pytest.raises(ValueError, match=r"q must be in \(0, 1\]"):
        poisson_group_pairs(1.2, 1.0, 2)
    with pytest.raises(ValueError, match="z must be"):
        poisson_group_pairs(0.1, -1.0, 2)
    with pytest.raises(ValueError, match="k must be an integer >= 1"):
        poisson_group_pairs(0.1, 1.0, 0)
