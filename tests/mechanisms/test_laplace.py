"""LaplacePair (metadp.mechanisms.laplace): closed forms against 30-digit mpmath quadratures.

The profile is compared with int_{L > eps} (p - e^eps q) dx over {x < (1 - b eps)/2} (the region
where the loss exceeds eps), the loss CDFs with int_{L <= l} p and q, the RDP with int p^a q^(1-a).
The closed forms have no cancellation (1 - e^t is taken as -expm1(t)), so everything is held to
1e-10 relative wherever the reference exceeds 1e-300. Scales that are powers of two make the
atoms +-1/b exact in double precision, so the tests can probe the CDF exactly at the atoms.
"""

from __future__ import annotations

import math
from fractions import Fraction

import mpmath
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from metadp.mechanisms import LaplacePair, laplace_pairs
from metadp.mechanisms.base import DominatingPair
from oracles.mp_reference import DPS, MpLaplace, rel_error

RTOL = 1e-10
EXACT_SCALES = [2.0**-4, 0.25, 1.0, 4.0, 1024.0]  # eps0 = 16, 4, 1, 1/4, 1/1024: exact atoms
OTHER_SCALES = [0.05, 0.3, 5.0]


def _profile_grid(e0: float):
    """eps on both sides of every switch-over: -eps0, 0, eps0, and just inside/outside each."""
    grid = [-3 * e0, -e0 * (1 + 1e-9), -e0, -e0 * (1 - 1e-9), -0.5 * e0, 0.0, 1e-12, 0.5 * e0,
            e0 * (1 - 1e-9), e0 * (1 - 1e-15), e0, e0 * (1 + 1e-9), 3 * e0]
    return [float(g) for g in grid]


def _assert_close(fast: float, ref, label: str, atol: float = 0.0):
    if ref < mpmath.mpf("1e-300"):
        assert abs(fast) <= max(1e-290, atol), f"{label}: fast {fast!r}, reference {mpmath.nstr(ref, 5)}"
        return
    err = abs(mpmath.mpf(fast) - ref)
    assert err <= RTOL * ref + atol, (f"{label}: fast {fast!r}, reference {mpmath.nstr(ref, 20)}, "
                                      f"rel. error {rel_error(fast, ref):.2e}")


def _eps0_rounding(pair: LaplacePair) -> float:
    """Absolute slack for a scale whose 1/b is not a double: the pair holds eps0 = fl(1/b), 1/2 ulp
    off, and |d delta / d eps0| <= 1/2, which near eps0 (delta ~ 1e-9 eps0) is ~1e-7 relative."""
    e0 = pair.epsilon0
    return 0.0 if Fraction(e0) * Fraction(pair.scale) == 1 else float(np.spacing(e0))


@pytest.mark.parametrize("scale", EXACT_SCALES + OTHER_SCALES)
def test_profile_matches_quadrature(scale):
    pair, ref = LaplacePair(scale), MpLaplace(scale)
    atol = _eps0_rounding(pair)
    for eps in _profile_grid(pair.epsilon0):
        _assert_close(float(pair.profile(eps)), ref.hockey_stick(eps), f"b={scale} eps={eps}", atol)


@pytest.mark.parametrize("scale", [0.25, 1.0, 5.0])
def test_reverse_direction_has_the_same_profile(scale):
    # (Lap(1, b), Lap(0, b)): int_{x > (1 + b eps)/2} (q - e^eps p), the mirror of the region above.
    pair, ref = LaplacePair(scale), MpLaplace(scale)
    with mpmath.workdps(DPS):
        for eps in _profile_grid(pair.epsilon0):
            e = mpmath.mpf(eps)
            if e >= ref.e0:
                reverse = mpmath.mpf(0)
            else:
                lo = -mpmath.inf if e < -ref.e0 else (1 + ref.b * e) / 2
                g = mpmath.exp(e)
                reverse = ref._integral(lambda x: ref.density(x, "Q") - g * ref.density(x, "P"), lo, mpmath.inf)
            _assert_close(float(pair.profile(eps)), reverse, f"reverse b={scale} eps={eps}", _eps0_rounding(pair))
    assert len(laplace_pairs(scale)) == 1


def test_profile_closed_form_values():
    # delta(eps) = 1 - e^{(eps - 1/b)/2}: b = 1, eps = 0 gives 1 - e^-1/2 = 0.3934693402873666.
    assert LaplacePair(1.0).profile(0.0) == pytest.approx(0.3934693402873666, rel=1e-15)
    assert LaplacePair(1.0).profile(1.0) == 0.0
    assert LaplacePair(1.0).profile(-2.0) == pytest.approx(-math.expm1(-2.0), rel=1e-15)


@pytest.mark.parametrize("scale", EXACT_SCALES)
def test_loss_cdf_matches_quadrature_at_and_between_atoms(scale):
    pair, ref = LaplacePair(scale), MpLaplace(scale)
    e0 = pair.epsilon0
    levels = [-2 * e0, float(np.nextafter(-e0, -np.inf)), -e0, float(np.nextafter(-e0, np.inf)), -0.3 * e0,
              0.0, 0.7 * e0, float(np.nextafter(e0, -np.inf)), e0, float(np.nextafter(e0, np.inf)), 5 * e0]
    for level in levels:
        for under in "PQ":
            _assert_close(float(pair.loss_cdf(level, under)), ref.loss_cdf(level, under), f"cdf({level}, {under})")
            _assert_close(float(pair.loss_sf(level, under)), ref.loss_sf(level, under), f"sf({level}, {under})")


@pytest.mark.parametrize("scale", OTHER_SCALES)
def test_loss_cdf_matches_quadrature_inside(scale):
    pair, ref = LaplacePair(scale), MpLaplace(scale)
    for level in np.linspace(-pair.epsilon0, pair.epsilon0, 9)[1:-1]:
        for under in "PQ":
            _assert_close(float(pair.loss_cdf(level, under)), ref.loss_cdf(level, under), f"cdf({level}, {under})")
            _assert_close(float(pair.loss_sf(level, under)), ref.loss_sf(level, under), f"sf({level}, {under})")


@pytest.mark.parametrize("scale", EXACT_SCALES + OTHER_SCALES)
def test_cdf_plus_sf_is_one_and_atoms(scale):
    pair = LaplacePair(scale)
    e0 = pair.epsilon0
    levels = np.concatenate([np.linspace(-2 * e0, 2 * e0, 1001), [-e0, e0, -np.inf, np.inf]])
    for under in "PQ":
        cdf, sf = pair.loss_cdf(levels, under), pair.loss_sf(levels, under)
        np.testing.assert_allclose(cdf + sf, 1.0, rtol=0, atol=2 * np.finfo(float).eps)
        assert np.all(np.diff(cdf[np.argsort(levels)]) >= 0)
    # Atoms, right-continuously: P puts 1/2 on +eps0 and e^-eps0/2 on -eps0; Q the reverse.
    below = np.nextafter(e0, -np.inf)
    assert pair.loss_sf(below, "P") - pair.loss_sf(e0, "P") == pytest.approx(0.5, rel=1e-15)
    assert pair.loss_cdf(-e0, "P") == pytest.approx(0.5 * math.exp(-e0), rel=1e-15)
    assert pair.loss_cdf(np.nextafter(-e0, -np.inf), "P") == 0.0
    assert pair.loss_cdf(-e0, "Q") == 0.5
    assert pair.loss_sf(below, "Q") == pytest.approx(0.5 * math.exp(-e0), rel=1e-12)
    assert np.isnan(pair.loss_cdf(np.nan, "P"))


@pytest.mark.parametrize("scale", EXACT_SCALES + OTHER_SCALES)
def test_q_is_the_exponentially_tilted_p(scale):
    # E_P[e^-L] = 1 - Q(P = 0) = 1, from the P-law alone: by parts over [-eps0, eps0] with the atoms
    # carried by F_P's jumps, int e^-l dF_P = e^-eps0 F_P(eps0) + int_{-eps0}^{eps0} e^-l F_P(l) dl
    # (F_P = 0 just below -eps0). Also Pr_Q[L <= l] = int_{(-inf, l]} e^-t dF_P(t) at interior l.
    pair = LaplacePair(scale)
    e0 = pair.epsilon0
    with mpmath.workdps(30):
        f = lambda l: mpmath.exp(-l) * mpmath.mpf(float(pair.loss_cdf(float(l), "P")))  # noqa: E731
        total = mpmath.exp(-e0) * 1 + mpmath.quad(f, [-e0, 0, e0])
        assert abs(total - 1) <= 1e-12, total
        level = 0.3 * e0  # Pr_Q[L <= l] = e^{-l} F_P(l) + int_{-eps0}^{l} e^-t F_P(t) dt
        tilted = mpmath.exp(-level) * float(pair.loss_cdf(level, "P")) + mpmath.quad(f, [-e0, level])
        assert abs(tilted - float(pair.loss_cdf(level, "Q"))) <= 1e-12


@pytest.mark.parametrize("scale", [0.25, 4.0])
def test_cell_masses_match_quadrature(scale):
    # The PLD accountant's discretisation: masses of (e_{i-1}, e_i], atoms included, sum to one.
    pair, ref = LaplacePair(scale), MpLaplace(scale)
    e0 = pair.epsilon0
    edges = np.linspace(-1.5 * e0, 1.5 * e0, 14)  # no edge on an atom: each atom inside one cell
    for under in "PQ":
        cells, below, above = pair.cell_masses(edges, under)
        assert below == 0 and above == 0
        assert math.fsum(cells) == pytest.approx(1.0, abs=1e-15)
        with mpmath.workdps(DPS):
            for i, mass in enumerate(cells):
                exact = ref.loss_cdf(edges[i + 1], under) - ref.loss_cdf(edges[i], under)
                _assert_close(float(mass), exact, f"cell {i} under {under}")


@pytest.mark.parametrize("scale", [0.05, 1.0, 1000.0])
def test_rdp_matches_quadrature(scale):
    pair, ref = LaplacePair(scale), MpLaplace(scale)
    orders = [1.001, 1.01, 1.5, 2.0, 10.0, 100.0, 1000.0]
    for alpha, value in zip(orders, pair.rdp(orders)):
        _assert_close(float(value), ref.rdp(alpha), f"b={scale} alpha={alpha}")
    assert pair.rdp([np.inf])[0] == pair.epsilon0


@pytest.mark.parametrize("scale", [0.25, 1.0, 5.0])
def test_loss_range(scale):
    pair = LaplacePair(scale)
    e0 = pair.epsilon0
    assert pair.loss_bracket(1e-12) == (-e0, e0)
    for tail in (0.0, 1e-12, 0.1, 0.3):
        lo, hi = pair.loss_range(tail)
        assert -e0 <= lo <= hi <= e0
        assert pair.loss_cdf(np.nextafter(lo, -np.inf), "P") <= tail and pair.loss_sf(hi, "P") <= tail
    assert pair.loss_range(1e-12) == (-e0, e0)  # the atoms are heavier than 1e-12


# Family-wise level 1e-3 over the goodness-of-fit tests of this module (Bonferroni over
# 3 scales x 2 laws x 2 statistics); the seeds are fixed, so the run is deterministic.
_LEVEL = 1e-3 / 12


@pytest.mark.parametrize("scale", [0.25, 1.0, 5.0])
def test_sampler_goodness_of_fit(scale):
    pair = LaplacePair(scale)
    e0 = pair.epsilon0
    rng = np.random.default_rng(7 + int(100 * scale))
    for under, loc in (("P", 0.0), ("Q", 1.0)):
        x = pair.sample(40_000, rng, under)
        assert stats.kstest(x, stats.laplace(loc=loc, scale=scale).cdf).pvalue > _LEVEL
        # Losses against loss_cdf, atoms in their own cells (a, b] (right-continuous CDF).
        inner = np.linspace(-e0, e0, 12)[1:-1]
        edges = np.concatenate([[-np.inf, -e0], inner, [np.nextafter(e0, -np.inf), e0, np.inf]])
        cells = np.searchsorted(edges, pair.log_ratio(x), side="left")  # edges[i-1] < L <= edges[i]
        observed = np.bincount(cells, minlength=len(edges))[1:]
        expected = np.diff(pair.loss_cdf(edges, under)) * len(x)
        nonempty = expected > 0
        assert np.all(observed[~nonempty] == 0)
        stat = np.sum((observed[nonempty] - expected[nonempty]) ** 2 / expected[nonempty])
        assert stats.chi2.sf(stat, nonempty.sum() - 1) > _LEVEL, (under, observed, expected)


def test_log_ratio():
    pair = LaplacePair(0.5)
    x = np.array([-1e300, -3.0, -1e-300, 0.0, 0.25, 0.5, 1.0, 1 + 1e-16, 7.0, np.inf])
    np.testing.assert_array_equal(pair.log_ratio(x), [2, 2, 2, 2, 1, 0, -2, -2, -2, -2])


# --------------------------------------------------------------------------- the L1 lemma

def _fiber_profile(s1: float, s2: float, eps: float) -> float:
    """delta of Lap(0,1)^2 vs Lap((s1, s2), 1) by the fiber formula E_{X2}[delta_{s1}(eps - L_2(X2))]."""
    pair1 = LaplacePair(1.0 / s1)  # Lap(0, 1) vs Lap(s1, 1) is Lap(0, 1/s1) vs Lap(1, 1/s1), rescaled
    with mpmath.workdps(20):
        def integrand(x):  # X2 ~ Lap(0, 1), whose own loss is |x - s2| - |x|
            l2 = abs(x - s2) - abs(x)
            return mpmath.mpf(float(pair1.profile(eps - float(l2)))) * mpmath.exp(-abs(x)) / 2
        return float(mpmath.quad(integrand, [-mpmath.inf, 0, s2, mpmath.inf]))


def test_fiber_formula_matches_two_dimensional_quadrature():
    # The splitting identity of the laplace module docstring, against a direct 2-d integral of
    # (p - e^eps q)_+ over the cells cut by the kinks (scipy dblquad, 1e-9).
    from scipy import integrate

    s1, s2, eps = 0.7, 0.4, 0.3
    g = math.exp(eps)

    def f(y, x):
        p = 0.25 * math.exp(-abs(x) - abs(y))
        q = 0.25 * math.exp(-abs(x - s1) - abs(y - s2))
        return max(p - g * q, 0.0)

    cuts = [-40.0, 0.0, s1, 40.0]
    ycuts = [-40.0, 0.0, s2, 40.0]
    total = 0.0
    for a, b in zip(cuts[:-1], cuts[1:]):
        for c, d in zip(ycuts[:-1], ycuts[1:]):
            total += integrate.dblquad(f, a, b, c, d, epsabs=1e-12, epsrel=1e-10)[0]
    assert total == pytest.approx(_fiber_profile(s1, s2, eps), rel=1e-7)


@pytest.mark.parametrize("mu", [0.2, 1.0, 3.0])
def test_l1_lemma_one_coordinate_dominates(mu):
    # Splitting a shift of L1 norm mu over two coordinates never raises delta above the 1-d pair.
    one = LaplacePair(1.0 / mu)
    for frac in (0.5, 0.7, 0.9):
        for eps in (0.0, 0.1 * mu, 0.5 * mu, 0.9 * mu):
            two = _fiber_profile(frac * mu, (1 - frac) * mu, eps)
            assert two <= float(one.profile(eps)) * (1 + 1e-9), (mu, frac, eps)
            assert two >= 0


# --------------------------------------------------------------------------- properties and inputs

@settings(max_examples=60, deadline=None)
@given(st.floats(1e-3, 1e3), st.floats(-30.0, 30.0))
def test_profile_agrees_with_its_loss_distribution(scale, eps):
    # The closed form against the generic Pr_P[L > eps] - e^eps Pr_Q[L > eps] of the base class,
    # within the latter's cancellation (a few ulps of its larger term).
    pair = LaplacePair(scale)
    generic = float(DominatingPair.profile(pair, eps))
    closed = float(pair.profile(eps))
    big = float(pair.loss_sf(eps, "P")) + math.exp(min(eps, 700.0)) * float(pair.loss_sf(eps, "Q"))
    assert abs(generic - closed) <= 8 * np.finfo(float).eps * big + 1e-300


@settings(max_examples=60, deadline=None)
@given(st.floats(1e-3, 1e3), st.floats(1e-3, 1e3), st.floats(-10.0, 30.0))
def test_more_noise_never_increases_delta(b1, b2, eps):
    lo, hi = sorted((b1, b2))
    assert LaplacePair(hi).profile(eps) <= LaplacePair(lo).profile(eps)


@pytest.mark.parametrize("bad", [0.0, -1.0, math.inf, math.nan, True, "1", 1e-320])
def test_invalid_scale(bad):
    with pytest.raises(ValueError, match="scale"):
        LaplacePair(bad)


def test_invalid_under_and_tail():
    pair = LaplacePair(1.0)
    with pytest.raises(ValueError, match="under"):
        pair.loss_cdf(0.0, "R")
    with pytest.raises(ValueError, match="tail"):
        pair.loss_range(-0.1)
    with pytest.raises(ValueError, match="orders"):
        pair.rdp([0.5])
