"""Fixed-size sampling without replacement under substitution: the symmetric PLD pair
(metadp.mechanisms.wor) and WBK Thm 27 in the RDP curve (metadp.core.rdp.wor_gaussian_rdp).

Oracles:
* Exact enumeration: n records with clipped values in {-1, 0, +1} (C = 1), a uniformly random m-subset
  summed and N(0, sigma^2) added; one record's value substituted. Both outputs are finite Gaussian
  mixtures (every m-subset listed with probability 1 / C(n, m)); their hockey-stick divergence is exact
  from the densities' crossing points (``metadp.verify.mixture_divergence.hockey_stick``) and their
  Renyi divergence is integrated by composite Gauss-Legendre (a smooth integrand; ~1e-14). ``FixedSizeSampled(m, n, Gaussian(sigma))``
  (sensitivity factor 2) must bound every one of them, in both orderings.
* The extreme instance (others at -1, the record +1 against -1) attains the bound at eps >= 0 (Balle,
  Barthe & Gaboardi 2018, Thm 9 is tight), so the pair's profile equals its exact divergence there.
* The symmetric pair's profile for eps < 0 is 1 - e^eps + e^eps delta(-eps) (closed form from the
  profile at -eps; hockey-stick symmetry of a symmetric pair).
* dp-accounting's ``_compute_rdp_sample_wor_gaussian`` (WBK Thm 27) at integer orders <= 256.
"""

from __future__ import annotations

import itertools
import math
from fractions import Fraction

import mpmath
import numpy as np
import pytest
from scipy import special

from metadp.accounting import FixedSizeSampled, Gaussian, PoissonSampled, RdpAccountant
from metadp.accounting.pld import PldAccountant
from metadp.core.rdp import wor_gaussian_rdp
from metadp.mechanisms.gaussian import GaussianMixturePair
from metadp.mechanisms.wor import SymmetrizedPair, wor_gaussian_pair
from metadp.verify.mixture_divergence import hockey_stick


def _thm9(gamma, z, alpha):
    """WBK 2019 Thm 9 for a Gaussian base (what metadp used before), integer alpha, in mpmath."""
    g, c = mpmath.mpf(gamma), 1 / (2 * mpmath.mpf(z) ** 2)
    total = 1 + g**2 * mpmath.binomial(alpha, 2) * min(4 * mpmath.expm1(2 * c), 2 * mpmath.exp(2 * c))
    for j in range(3, alpha + 1):
        total += 2 * g**j * mpmath.binomial(alpha, j) * mpmath.exp((j - 1) * j * c)
    return float(mpmath.log(total) / (alpha - 1))


def _mixture(values, m):
    """The output law of sum over a uniform m-subset of ``values``, as (weight, mean) Fractions."""
    subsets = list(itertools.combinations(range(len(values)), m))
    law = {}
    for s in subsets:
        mean = Fraction(sum(values[i] for i in s))
        law[mean] = law.get(mean, Fraction(0)) + Fraction(1, len(subsets))
    return tuple((w, mu) for mu, w in sorted(law.items()))


def _neighbours(n):
    """(D, D') ordered pairs: the first record substituted, the others any multiset of {-1, 0, 1}."""
    for others in itertools.combinations_with_replacement((-1, 0, 1), n - 1):
        for v, w in itertools.permutations((-1, 0, 1), 2):
            yield (v,) + others, (w,) + others


_GL_X, _GL_W = np.polynomial.legendre.leggauss(16)


def _renyi(p, q, sigma, alpha):
    """D_alpha(p || q) of two Gaussian mixtures: composite 16-point Gauss-Legendre in log space on panels
    of width sigma / 4 over the means +- (12 + 2 alpha) sigma (smooth integrand: converged to ~1e-14)."""
    means = [float(mu) for _, mu in p + q]
    lo, hi = min(means) - (12 + 2 * alpha) * sigma, max(means) + (12 + 2 * alpha) * sigma
    panels = int(math.ceil((hi - lo) / (sigma / 4)))
    edges = np.linspace(lo, hi, panels + 1)
    half = 0.5 * (edges[1] - edges[0])
    x = (0.5 * (edges[1:] + edges[:-1])[:, None] + half * _GL_X[None, :]).ravel()
    log_w = np.log(np.tile(_GL_W * half, panels))

    def log_density(mix):
        terms = [math.log(float(w)) - (x - float(mu)) ** 2 / (2 * sigma**2) for w, mu in mix]
        return special.logsumexp(np.array(terms), axis=0) - 0.5 * math.log(2 * math.pi * sigma**2)

    value = special.logsumexp(log_w + alpha * log_density(p) + (1 - alpha) * log_density(q))
    return float(value / (alpha - 1))


# ---------------------------------------------------------------------------------------------
# The symmetric pair.


@pytest.mark.parametrize("rate,z", [(0.3, 1.0), (0.01, 0.5), (0.5, 3.0)])
def test_profile_is_symmetric_and_matches_poisson_pair_at_positive_eps(rate, z):
    s = wor_gaussian_pair(rate, z)
    base = GaussianMixturePair([1 - rate, rate], [0.0, 1.0], z, "add")
    eps = np.array([0.0, 0.1, 0.5, 1.0, 3.0])
    np.testing.assert_allclose(s.profile(eps), base.profile(eps), rtol=1e-13, atol=0)
    # from the loss laws: delta(eps) = P(L > eps) - e^eps Q(L > eps), both signs of eps
    both = np.concatenate([-eps[::-1], eps])
    direct = s.loss_sf(both, "P") - np.exp(both) * s.loss_sf(both, "Q")
    np.testing.assert_allclose(s.profile(both), direct, rtol=1e-9, atol=1e-15)
    np.testing.assert_allclose(s.profile(-eps), -np.expm1(-eps) + np.exp(-eps) * base.profile(eps), rtol=1e-13)


@pytest.mark.parametrize("under", ["P", "Q"])
def test_cells_sum_to_one_and_match_the_cdf(under):
    s = wor_gaussian_pair(0.2, 1.5)
    edges = np.linspace(-2.0, 2.5, 46)
    cells, below, above, err, err_below, err_above = s.cell_masses(edges, under, with_error=True)
    assert abs(cells.sum() + below + above - 1.0) < 1e-13
    cdf = s.loss_cdf(edges, under)
    np.testing.assert_allclose(np.cumsum(cells), cdf[1:] - cdf[0], atol=1e-14)
    assert below == pytest.approx(cdf[0], abs=1e-15) and np.all(err >= 0)
    # the atom at loss 0 sits in the cell (-0.1, 0]
    k = int(np.searchsorted(edges, 0.0)) - 1
    assert cells[k] >= s.atom > 0.05


def test_tail_cells_keep_their_relative_accuracy():
    # the lattice asks for cells from far below 0 to far above: a tail cell of 1e-12 must come out to
    # 1e-12 relative, as the base pair's own (not as a difference of cumulative sums near 1)
    s = wor_gaussian_pair(0.25, 2.0)
    edges = np.linspace(-3.0, 3.0, 61)
    for under, other in (("P", "Q"), ("Q", "P")):
        cells, _, above, err, _, _ = s.cell_masses(edges, under, with_error=True)
        base, _, base_above = s.base.cell_masses(edges[edges >= 0.0], under)
        np.testing.assert_allclose(cells[-len(base):], base, rtol=1e-12)
        assert above == pytest.approx(base_above, rel=1e-12)
        mirrored, _, _ = s.base.cell_masses(-edges[edges <= 0.0][::-1], other)
        np.testing.assert_allclose(cells[: len(mirrored) - 1], mirrored[::-1][:-1], rtol=1e-12)
        assert np.all(err <= 1e-9 * cells + 1e-300)


def test_loss_under_q_is_the_mirror_under_p():
    s = wor_gaussian_pair(0.25, 0.8)
    x = np.array([0.05, 0.4, 1.3, 3.0])
    np.testing.assert_allclose(s.loss_sf(x, "Q"), s.loss_cdf(-x, "P"), rtol=1e-12)
    # dQ = e^{-l} dP on a cell: Q((a, b]) between e^{-b} P((a, b]) and e^{-a} P((a, b])
    cp, _, _ = s.cell_masses(np.array([0.4, 0.5]), "P")
    cq, _, _ = s.cell_masses(np.array([0.4, 0.5]), "Q")
    assert math.exp(-0.5) * cp[0] <= cq[0] <= math.exp(-0.4) * cp[0]


def test_sample_mean_loss_matches_kl():
    s = wor_gaussian_pair(0.3, 1.0)
    rng = np.random.default_rng(7)
    losses = s.sample(40_000, rng, "P")
    edges = np.linspace(-6, 6, 2401)
    cells, _, _ = s.cell_masses(edges, "P")
    mean = float(np.dot(cells, 0.5 * (edges[1:] + edges[:-1])))
    assert abs(losses.mean() - mean) < 5 * losses.std() / math.sqrt(len(losses))


def test_rejects_a_non_mixture_base():
    with pytest.raises(ValueError, match="base must be a GaussianMixturePair"):
        SymmetrizedPair("not a pair")
    with pytest.raises(ValueError, match="rate must be > 0"):
        wor_gaussian_pair(0.0, 1.0)


# ---------------------------------------------------------------------------------------------
# Exact enumeration: the PLD accountant's certified delta bounds every neighbouring pair.

EPS_GRID = (0.0, 0.3, 1.0, 2.0)


def _pld_delta(m, n, sigma, epsilon):
    return PldAccountant("substitute").compose(FixedSizeSampled(m, n, Gaussian(sigma))).get_delta(epsilon)


def _check_enumeration(n, m, sigma):
    worst = {e: 0.0 for e in EPS_GRID}
    for d, d_prime in _neighbours(n):
        p, q = _mixture(d, m), _mixture(d_prime, m)
        for e in EPS_GRID:
            worst[e] = max(worst[e], hockey_stick(p, q, sigma, e))
    for e in EPS_GRID:
        bound = _pld_delta(m, n, sigma, e)
        assert bound >= worst[e] * (1 - 1e-9), (n, m, sigma, e, bound, worst[e])
        # tight: the extreme instance attains the pair's profile (to the lattice's 0.5% tolerance)
        assert bound <= worst[e] * 1.006 + 1e-12, (n, m, sigma, e, bound, worst[e])
    return worst


@pytest.mark.parametrize("n,m,sigma", [(4, 1, 1.0), (5, 2, 2.0)])
def test_pld_bounds_exact_enumeration(n, m, sigma):
    _check_enumeration(n, m, sigma)


@pytest.mark.slow
@pytest.mark.parametrize("n", [4, 5, 6, 7, 8])
@pytest.mark.parametrize("m", [1, 2, 3])
@pytest.mark.parametrize("sigma", [0.7, 1.5, 4.0])
def test_pld_bounds_exact_enumeration_sweep(n, m, sigma):
    _check_enumeration(n, m, sigma)


def test_pld_is_tighter_than_rdp_on_the_fixed_size_example():
    """examples/dp_maml_fixed_batches.toml: 1,600 of 400,000, z = 1 (0.5 under substitution), 250 steps."""
    event = FixedSizeSampled(1600, 400_000, Gaussian(1.0))
    pld = PldAccountant("substitute").compose(event, 250).get_epsilon_bounds(1e-6)
    rdp = RdpAccountant("substitute").compose(event, 250).get_epsilon(1e-6)
    assert pld.epsilon_lower <= pld.epsilon_upper < 0.8 * rdp
    # at least the Poisson add/remove epsilon of the same plan at half the multiplier (one step of the
    # symmetric pair dominates the Poisson "add" pair of rate 1600/400000 and multiplier 0.5)
    poisson = PldAccountant().compose(PoissonSampled(1600 / 400_000, Gaussian(0.5)), 250).get_epsilon_bounds(1e-6)
    assert pld.epsilon_upper >= poisson.epsilon_lower


# ---------------------------------------------------------------------------------------------
# WBK Thm 27 in the RDP curve.


@pytest.mark.parametrize("gamma,z", [(0.5, 2.0), (0.1, 1.0), (0.02, 0.5), (0.5, 0.6)])
def test_thm27_never_above_thm9_and_strictly_below_where_it_bites(gamma, z):
    orders = np.arange(2, 40)
    new = wor_gaussian_rdp(gamma, z, orders)
    old = np.array([_thm9(gamma, z, int(a)) for a in orders])
    assert np.all(new <= old * (1 + 1e-12))
    if (gamma, z) == (0.5, 2.0):  # the case: up to 28% at gamma 0.5, z/2 = 2
        assert np.max(1 - new / old) > 0.2


def test_thm27_matches_dp_accounting():
    rdp_module = pytest.importorskip("dp_accounting.rdp.rdp_privacy_accountant")
    orders = [2, 3, 4, 7, 12, 33, 100, 256]
    for gamma, z in [(0.5, 2.0), (0.25, 1.0), (256 / 60000, 0.55)]:
        ours = wor_gaussian_rdp(gamma, z, orders)
        theirs = rdp_module._compute_rdp_sample_wor_gaussian(gamma, z, orders)
        np.testing.assert_allclose(ours, theirs, rtol=1e-9)


def _check_rdp_enumeration(n, m, sigma, orders):
    bound = RdpAccountant("substitute").compose(FixedSizeSampled(m, n, Gaussian(sigma))).rdp(orders)
    worst = np.zeros(len(orders))
    for d, d_prime in _neighbours(n):
        p, q = _mixture(d, m), _mixture(d_prime, m)
        worst = np.maximum(worst, [_renyi(p, q, sigma, a) for a in orders])
    assert np.all(bound >= worst * (1 - 1e-9)), (bound, worst)
    return bound, worst


def test_thm27_bounds_exact_enumeration():
    bound, worst = _check_rdp_enumeration(4, 2, 2.0, [2, 3, 5])
    # not vacuous: within Thm 27's own factors (4 (e^eps2 - 1) against the extreme instance's e^eps2 - 1)
    assert np.all(bound <= 3.0 * worst)


@pytest.mark.slow
@pytest.mark.parametrize("n,m", [(4, 1), (5, 2), (6, 3), (8, 2)])
@pytest.mark.parametrize("sigma", [1.0, 3.0])
def test_thm27_bounds_exact_enumeration_sweep(n, m, sigma):
    _check_rdp_enumeration(n, m, sigma, [2, 3, 4, 6, 8])
