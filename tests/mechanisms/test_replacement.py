"""Sampling with replacement under add/remove (metadp.mechanisms.replacement).

Oracles:
* the lemma itself, on a 2-D grid: for 2 and 3 draws and configurations of the per-draw shifts d_i that are
  not aligned (orthogonal, opposite, shorter, random), both hockey-stick divergences of the mixture
  sum_S w_S N(mu_S, I) against N(0, I) are at most the aligned configuration's, at four values of e^eps;
  the grid's aligned value is checked against the pair's own profile first (so the grid can be trusted);
* the mechanism itself: 200,000 runs of the actual sampler (indices drawn with replacement from a data set
  whose target record contributes +1 and every other -1) against the pair's CDFs (Kolmogorov-Smirnov),
  under both neighbours;
* dp-accounting's MixtureOfGaussiansDpEvent(z, [0, 2, .., 2b], Bin(.; b, 1/n)) composed T times;
* one draw is Poisson sampling at rate 1/n with the noise halved, exactly;
* the finding: the certified lower bound of a with-replacement loader is above Poisson's upper bound at
  rate b/n (what accounting it as Poisson claims).
"""

import itertools
import math

import numpy as np
import pytest
from scipy import stats

from metadp.accounting import PldAccountant
from metadp.core import events as ev
from metadp.mechanisms.replacement import replacement_pairs

Q_RATE, Z = 0.3, 1.0  # a large draw probability, so the mixture's other components matter
DELTA_SHIFT = 2.0 / Z  # each copy moves the sum by 2C: 2 / z noise standard deviations


def _grid_hockey(shifts, gamma, direction, lo=-8.0, step=0.02):
    """H_gamma(P||Q) ("add": P the mixture) or H_gamma(Q||P) ("remove") on a 2-D grid, noise std 1."""
    b = len(shifts)
    top = 8.0 + sum(float(np.linalg.norm(d)) for d in shifts)
    axis = np.arange(lo, top, step)
    x, y = np.meshgrid(axis, axis, indexing="ij")
    q = np.exp(-(x**2 + y**2) / 2) / (2 * math.pi)
    p = np.zeros_like(q)
    for mask in itertools.product((0, 1), repeat=b):
        k = sum(mask)
        w = Q_RATE**k * (1 - Q_RATE) ** (b - k)
        mu = sum((np.asarray(d) for d, m in zip(shifts, mask) if m), np.zeros(2))
        p += w * np.exp(-((x - mu[0]) ** 2 + (y - mu[1]) ** 2) / 2) / (2 * math.pi)
    first, second = (p, q) if direction == "add" else (q, p)
    return float(np.maximum(first - gamma * second, 0.0).sum() * step * step)


def _at(angle, norm=1.0):
    return DELTA_SHIFT * norm * np.array([math.cos(angle), math.sin(angle)])


CONFIGS = {
    "orthogonal": [_at(0.0), _at(math.pi / 2)],
    "opposite": [_at(0.0), _at(math.pi)],
    "one shorter": [_at(0.0), _at(0.3, 0.5)],
    "one zero": [_at(0.0), _at(0.0, 0.0)],
    "three random": [_at(a, r) for a, r in zip(np.random.default_rng(7).uniform(0, 2 * math.pi, 3),
                                               np.random.default_rng(8).uniform(0.6, 1.0, 3))],
}


@pytest.mark.parametrize("name", [n if n in ("opposite", "three random") else pytest.param(n, marks=pytest.mark.slow)
                                  for n in sorted(CONFIGS)])
def test_aligned_shifts_dominate_every_configuration_in_both_directions(name):
    shifts = CONFIGS[name]
    b = len(shifts)
    aligned = [_at(0.0)] * b
    add, remove = _pairs(b)
    for eps in (0.0, 0.5, 1.0, 2.0):
        gamma = math.exp(eps)
        for direction, pair in (("add", add), ("remove", remove)):
            top = _grid_hockey(aligned, gamma, direction)
            # the grid reproduces the aligned pair's own profile: its error is far below the margins below
            assert top == pytest.approx(float(pair.profile(np.array([eps]))[0]), rel=2e-4, abs=1e-9)
            assert _grid_hockey(shifts, gamma, direction) <= top * (1 + 1e-6) + 1e-9, (name, eps, direction)
    # and the configurations are not secretly aligned: each is strictly below somewhere
    assert _grid_hockey(shifts, math.exp(0.5), "add") < _grid_hockey(aligned, math.exp(0.5), "add") * 0.999


def _pairs(b):
    """The pairs at draw probability Q_RATE (replacement_pairs takes a population: 1/Q_RATE is not whole)."""
    from metadp.amplification.group import poisson_group_pairs

    return poisson_group_pairs(Q_RATE, Z / 2.0, b)


def test_replacement_pairs_are_the_poisson_group_pairs_at_rate_one_over_n_and_half_the_noise():
    from metadp.amplification.group import poisson_group_pairs

    ours = replacement_pairs(5, 40, 1.3)
    theirs = poisson_group_pairs(1 / 40, 0.65, 5)
    eps = np.array([0.0, 0.3, 1.0, 3.0])
    for a, b in zip(ours, theirs):
        np.testing.assert_array_equal(a.profile(eps), b.profile(eps))


def _mixture_cdf(x, b, q, z):
    k = np.arange(b + 1)
    w = stats.binom.pmf(k, b, q)
    return (w[None, :] * stats.norm.cdf((np.asarray(x)[:, None] - 2.0 * k[None, :]) / z)).sum(axis=1)


def test_the_sampler_itself_has_the_pairs_distributions():
    # a data set of n records in 1-D, clip norm 1: the target contributes +1, every other record -1
    rng = np.random.default_rng(2026)
    n, b, z, runs = 20, 4, 1.0, 200_000
    values = np.full(n, -1.0)
    values[0] = 1.0  # the target
    with_target = values[rng.integers(0, n, size=(runs, b))].sum(axis=1) + z * rng.standard_normal(runs)
    without = values[1 + rng.integers(0, n - 1, size=(runs, b))].sum(axis=1) + z * rng.standard_normal(runs)
    # shifted by the common -b: P* = sum_k Bin(k; b, 1/n) N(2k, z^2), Q* = N(0, z^2)
    p_star = stats.kstest(with_target + b, lambda x: _mixture_cdf(np.atleast_1d(x), b, 1 / n, z))
    q_star = stats.kstest(without + b, lambda x: stats.norm.cdf(x / z))
    assert p_star.pvalue > 1e-3 and q_star.pvalue > 1e-3
    # a Poisson model of the same loader (each record in with probability b/n, adding +1) is rejected
    poisson = stats.kstest(with_target + b, lambda x: (1 - b / n) * stats.norm.cdf(x / z)
                           + (b / n) * stats.norm.cdf((x - 1) / z))
    assert poisson.pvalue < 1e-6


def _epsilon(event, steps, delta=1e-5):
    acc = PldAccountant()
    acc.compose(event, steps)
    return acc.certify(delta)


def test_one_draw_is_poisson_at_rate_one_over_n_with_half_the_noise():
    ours = _epsilon(ev.ReplacementSampled(1, 50, ev.Gaussian(1.2)), 30)
    theirs = _epsilon(ev.PoissonSampled(1 / 50, ev.Gaussian(0.6)), 30)
    # the same pair, built as a group mixture rather than the two-point class: equal to the lattice's rounding
    assert ours.epsilon == pytest.approx(theirs.epsilon, rel=1e-9)
    assert ours.epsilon_lower == pytest.approx(theirs.epsilon_lower, rel=1e-9)


def test_more_draws_cost_more_and_the_interval_is_tight():
    previous = 0.0
    for b in (1, 5, 30):
        r = _epsilon(ev.ReplacementSampled(b, 720, ev.Gaussian(1.3)), 48)
        assert r.epsilon_lower > previous
        assert r.epsilon <= r.epsilon_lower * (1 + 1e-3)
        previous = r.epsilon


def test_accounting_the_loader_as_poisson_is_a_certified_overclaim():
    wr = _epsilon(ev.ReplacementSampled(30, 720, ev.Gaussian(1.3)), 48)
    poisson = _epsilon(ev.PoissonSampled(30 / 720, ev.Gaussian(1.3)), 48)
    assert wr.epsilon_lower > 8 * poisson.epsilon  # 10.32 against 1.27


def test_matches_dp_accounting_mixture_of_gaussians():
    pytest.importorskip("dp_accounting")
    from dp_accounting import dp_event as de
    from dp_accounting.pld import pld_privacy_accountant as dp_pld

    n, b, z, steps = 100, 8, 1.3, 20
    k = np.arange(b + 1)
    acc = dp_pld.PLDAccountant(value_discretization_interval=1e-2)  # 1e-3: same to 2e-5, 10 s
    acc.compose(de.MixtureOfGaussiansDpEvent(z, [2.0 * j for j in k], list(stats.binom.pmf(k, b, 1 / n))), steps)
    theirs = acc.get_epsilon(1e-5)
    ours = _epsilon(ev.ReplacementSampled(b, n, ev.Gaussian(z)), steps)
    assert ours.epsilon == pytest.approx(theirs, rel=1e-3)  # 13.14 both
    assert ours.epsilon_lower <= theirs * (1 + 1e-5)  # theirs is pessimistic (connect-the-dots)


def test_substitution_is_refused_with_the_reason():
    from metadp.accounting import UnsupportedEventError

    acc = PldAccountant(relation="substitute")
    with pytest.raises(UnsupportedEventError, match="add_remove relation"):
        acc.compose(ev.ReplacementSampled(3, 10, ev.Gaussian(1.0)))
        acc.certify(1e-5)
