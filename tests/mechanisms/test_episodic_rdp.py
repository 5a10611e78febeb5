"""RDP of episodic steps (metadp.mechanisms.episodic_rdp) and its use by the RDP accountant.

Oracles:
* one component (L = 1, P_U = 1) is the Poisson-subsampled Gaussian: ``poisson_gaussian_rdp`` (Mironov,
  Talwar & Zhang 2019), computed independently of the episodic code path;
* each component bound j eps_SGM(r, z/(s sqrt j)) is >= the component's Renyi divergence computed by
  quadrature of the Gaussian-mixture densities, in both directions;
* the truncation charge: on a tiny event truncated hard (tail 0.3), the exact one-step hockey-stick
  divergence of the untruncated revealed pair (quadrature, both directions) is <= the delta converted
  from the truncated curve plus tau, and tau >= the exact binomial tail;
* PLD's certified lower bound (a different method) is <= the new RDP upper bound on small events.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import integrate, special, stats

from metadp.accounting import EpisodicSampled, Gaussian, Group, PoissonSampled, RdpAccountant, UnsupportedEventError
from metadp.accounting.pld import PldAccountant
from metadp.core.conversions import delta_from_rdp, epsilon_from_rdp
from metadp.core.rdp import poisson_gaussian_rdp
from metadp.mechanisms.episodic_rdp import MAX_ORDER, episodic_rdp, truncation_point

ORDERS = np.arange(2, MAX_ORDER + 1, dtype=np.float64)


def _densities(j, r, z, s):
    ks = np.arange(j + 1)
    pk = stats.binom.pmf(ks, j, r)
    mix = lambda x: float(np.sum(pk * stats.norm.pdf(x, ks * s, z)))  # noqa: E731
    return mix, lambda x: float(stats.norm.pdf(x, 0.0, z))


def _renyi(log_p, log_q, alpha, hi):
    val, _ = integrate.quad(lambda x: math.exp(alpha * log_p(x) + (1.0 - alpha) * log_q(x)), -30.0, hi,
                            limit=400, epsabs=0.0, epsrel=1e-10)
    return math.log(val) / (alpha - 1.0)


def _log_densities(j, r, z, s):
    ks = np.arange(j + 1)
    log_pk = stats.binom.logpmf(ks, j, r)
    mix = lambda x: float(special.logsumexp(log_pk + stats.norm.logpdf(x, ks * s, z)))  # noqa: E731
    return mix, lambda x: float(stats.norm.logpdf(x, 0.0, z))


@pytest.mark.parametrize("r, z, s", [(0.01, 1.0, 1.0), (0.2, 2.0, 2.0), (0.5, 0.8, 1.0)])
def test_one_component_is_the_subsampled_gaussian(r, z, s):
    curve, tau = episodic_rdp(1, 1.0, r, z, ORDERS, shift=s)
    assert tau == 0.0
    np.testing.assert_allclose(curve, poisson_gaussian_rdp(r, z / s, ORDERS), rtol=1e-12)
    # fractional orders are charged their ceiling; orders above the cap are +inf
    # fractional orders get the chord of (alpha - 1) eps: between the exact value and the next integer's
    frac, _ = episodic_rdp(1, 1.0, r, z, [1.5, 2.5, 64.0, 64.5, 1e4], shift=s)
    exact = poisson_gaussian_rdp(r, z / s, [1.5, 2.5, 64.0])
    at = poisson_gaussian_rdp(r, z / s, [2.0, 3.0])
    assert np.all(exact[:2] * (1 - 1e-9) <= frac[:2]) and np.all(frac[:2] <= at)
    assert frac[1] == pytest.approx((0.5 * at[0] + 0.5 * 2 * at[1]) / 1.5, rel=1e-12)
    assert frac[2] == pytest.approx(exact[2], rel=1e-12) and np.all(np.isinf(frac[3:]))
    # the accountant's epsilon: at least the Poisson event's, at most its value on the integer orders
    a = RdpAccountant().compose(EpisodicSampled(1, 1.0, r, Gaussian(z), shift=s), 50).get_epsilon(1e-5)
    b = RdpAccountant().compose(PoissonSampled(r, Gaussian(z / s)), 50).get_epsilon(1e-5)
    grid = epsilon_from_rdp(ORDERS, 50 * poisson_gaussian_rdp(r, z / s, ORDERS), 1e-5)[0]
    assert b * (1 - 1e-9) <= a <= grid


@pytest.mark.parametrize("j, r, z, s", [(2, 0.3, 2.0, 1.0), (3, 0.1, 1.5, 2.0)])
@pytest.mark.parametrize("alpha", [2, 3])
def test_component_bound_is_above_the_exact_divergence_both_ways(j, r, z, s, alpha):
    mix, zero = _log_densities(j, r, z, s)
    hi = 30.0 + j * s
    exact = max(_renyi(mix, zero, alpha, hi), _renyi(zero, mix, alpha, hi))
    # the revealed pair with J = j surely is this component (P_U = 1, L = j)
    bound, tau = episodic_rdp(j, 1.0, r, z, [float(alpha)], shift=s)
    assert tau == 0.0
    assert exact <= bound[0]
    assert bound[0] == pytest.approx(j * poisson_gaussian_rdp(r, z / (s * math.sqrt(j)), [alpha])[0], rel=1e-12)


def test_truncation_point_and_charge_against_the_exact_tail():
    j_max, tau = truncation_point(3, 0.5, tail=0.3)  # Bin(3, 1/2): Pr[J > 1] = 1/2, Pr[J > 2] = 1/8
    assert (j_max, tau) == (2, pytest.approx(0.25))
    assert truncation_point(3, 0.5, tail=1e-30) == (3, 0.0)  # nothing cut: no charge
    j_max, tau = truncation_point(400_000, 1.739130434782609e-05)
    assert stats.binom.sf(j_max, 400_000, 1.739130434782609e-05) <= tau <= 1e-29


def test_truncated_curve_plus_charge_bounds_the_exact_hockey_stick():
    L, pu, r, z, s, tail = 3, 0.5, 0.5, 1.5, 1.0, 0.3
    curve, tau = episodic_rdp(L, pu, r, z, ORDERS, shift=s, tail=tail)
    assert tau == pytest.approx(0.25)
    w = stats.binom.pmf(np.arange(L + 1), L, pu)
    for eps in (0.25, 0.5, 1.0):
        exact = 0.0  # max over directions of sum_j w_j int (p_j - e^eps q_j)_+
        for direction in ("add", "remove"):
            total = 0.0
            for j in range(1, L + 1):
                mix, zero = _densities(j, r, z, s)
                p, q = (mix, zero) if direction == "add" else (zero, mix)
                val, _ = integrate.quad(lambda x: max(0.0, p(x) - math.exp(eps) * q(x)), -40.0, 40.0 + L * s,
                                        limit=400, points=[0.0, s, 2 * s, 3 * s])
                total += w[j] * val
            exact = max(exact, total)
        certified = delta_from_rdp(ORDERS, curve, eps)[0] + tau
        assert exact <= certified
    # the charge is needed: the truncated curve alone (J <= 2) does not bound the J = 3 component
    j3 = episodic_rdp(3, 1.0, r, z, ORDERS, shift=s)[0]
    assert np.all(curve < j3)


@pytest.mark.parametrize("event", [EpisodicSampled(4, 0.5, 0.3, Gaussian(2.0)),
                                   EpisodicSampled(10, 0.2, 0.1, Gaussian(3.0)),
                                   EpisodicSampled(6, 0.4, 0.5, Gaussian(4.0), shift=1.0)])
def test_rdp_is_above_the_pld_lower_bound(event):
    rdp = RdpAccountant().compose(event, 20).get_epsilon(1e-5)
    pld = PldAccountant().compose(event, 20).get_epsilon_bounds(1e-5)
    assert pld.epsilon_lower <= rdp < math.inf


def test_accountant_charges_the_truncation_to_delta():
    record = EpisodicSampled(400_000, 1.739130434782609e-05, 0.1, Gaussian(1.0))  # default plan's record view
    _, tau = truncation_point(400_000, 1.739130434782609e-05)
    acc = RdpAccountant().compose(record, 250)
    assert acc.delta_charge == pytest.approx(250 * tau, rel=1e-12) and acc.delta_charge > 0
    assert acc.get_epsilon_and_order(1e-300)[0] == math.inf  # delta below the charge: no bound
    assert acc.get_delta(1e9) >= acc.delta_charge
    assert np.all(np.isinf(acc.trajectory([1, 250], 1e-300)))
    with pytest.raises(UnsupportedEventError, match="group"):
        RdpAccountant().compose(Group(2, record))


def test_grouped_components_bound_the_ungrouped_sum():
    # L = 400, P_U = 1/2: j_max ~ 300 > 64 components, so groups of j are charged at their largest j
    L, pu, r, z, s = 400, 0.5, 0.001, 8.0, 1.0
    grouped, tau = episodic_rdp(L, pu, r, z, ORDERS[:8], shift=s)
    j_max, _ = truncation_point(L, pu)
    js = np.arange(1, j_max + 1)
    terms = [stats.binom.logpmf(j, L, pu) + (ORDERS[:8] - 1) * j * poisson_gaussian_rdp(r, z / (s * math.sqrt(j)),
                                                                                          ORDERS[:8]) for j in js]
    terms += [np.full(8, stats.binom.logpmf(0, L, pu)), np.full(8, math.log(tau))]
    ungrouped = special.logsumexp(np.array(terms), axis=0) / (ORDERS[:8] - 1)
    assert np.all(ungrouped <= grouped) and np.all(grouped <= 1.5 * ungrouped)
