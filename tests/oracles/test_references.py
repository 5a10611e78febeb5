"""The mpmath references agree with each other, with closed forms and with quadrature.

These tests check the oracles themselves (tests/oracles/references.py), before any fast
code is compared with them. Tolerances are far below float64 resolution because the
references work at 60+ digits; each one says what it compares.
"""

from __future__ import annotations

import itertools

import mpmath
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from oracles.references import (
    ref_gaussian_rdp,
    ref_laplace_rdp,
    ref_poisson_gaussian_log_a,
    ref_poisson_gaussian_rdp,
    ref_rdp_to_delta,
    ref_rdp_to_epsilon,
    ref_rdp_to_epsilon_classic,
    ref_wor_gaussian_rdp,
)
from _grid import cover


def _mp(text) -> mpmath.mpf:
    """A golden value parsed at 80 digits (mpmath.mpf(str) at the global 15 would truncate it)."""
    with mpmath.workdps(80):
        return mpmath.mpf(text)


def _rel(x, y) -> mpmath.mpf:
    """|x - y| / |y| at high precision (0 when both are 0)."""
    with mpmath.workdps(80):
        x, y = mpmath.mpf(x), mpmath.mpf(y)
        if y == 0:
            return abs(x)
        return abs(x - y) / abs(y)


# --------------------------------------------------------------------------- Poisson: binomial vs quad

_RATES = [1e-8, 1e-4, 0.01, 0.3, 0.9, 0.999999]
_NOISES = [0.3, 1.0, 3.0, 20.0, 100.0]
_INT_ORDERS = [2, 3, 7, 40, 256, 1000]

# Every corner of rate x noise x order plus a few interior points (~1 s each). The default run keeps
# the interior points and the two diagonals of the extreme corners (tiny q and q near 1, each at
# noise 0.3 with order 1000 (huge RDP) and at noise 100 with order 2 (log A ~ 1e-20)); every value of
# rate, noise and order appears. The other corners run under -m slow, as does the full sweep below.
_BINOMIAL_VS_QUAD_FAST = [
    (q, s, a) for q in (1e-8, 0.01, 0.999999) for s in (0.3, 100.0) for a in (2, 1000)
] + [(1e-4, 1.0, 7), (0.3, 3.0, 40), (0.9, 20.0, 256), (0.01, 1.0, 10)]
_BINOMIAL_VS_QUAD_DEFAULT = [(1e-8, 0.3, 1000), (1e-8, 100.0, 2), (0.999999, 0.3, 1000), (0.999999, 100.0, 2),
                             (1e-4, 1.0, 7), (0.3, 3.0, 40), (0.9, 20.0, 256), (0.01, 1.0, 10)]


@pytest.mark.parametrize("rate,noise,order", cover(_BINOMIAL_VS_QUAD_FAST, default=_BINOMIAL_VS_QUAD_DEFAULT))
def test_binomial_matches_quad(rate, noise, order):
    binomial = ref_poisson_gaussian_log_a(rate, noise, order, method="binomial")
    quad = ref_poisson_gaussian_log_a(rate, noise, order, method="quad")
    assert binomial > 0
    assert _rel(quad, binomial) < mpmath.mpf("1e-25")


@pytest.mark.slow
@pytest.mark.parametrize("rate,noise,order", list(itertools.product(_RATES, _NOISES, _INT_ORDERS)))
def test_binomial_matches_quad_sweep(rate, noise, order):
    # Observed when written: worst disagreement 6e-75 over this whole grid.
    binomial = ref_poisson_gaussian_log_a(rate, noise, order, method="binomial")
    quad = ref_poisson_gaussian_log_a(rate, noise, order, method="quad")
    assert _rel(quad, binomial) < mpmath.mpf("1e-25")


@pytest.mark.parametrize("rate", [1e-12, 1e-8, 0.5, 0.999999])
@pytest.mark.parametrize("noise", [0.3, 1.0, 100.0])
def test_order_two_closed_form(rate, noise):
    # For alpha = 2 the binomial sum collapses: A = 1 + q^2 (e^{1/s^2} - 1), exactly.
    with mpmath.workdps(80):
        q, s = mpmath.mpf(rate), mpmath.mpf(noise)
        closed = mpmath.log1p(q * q * mpmath.expm1(1 / (s * s)))
    assert _rel(ref_poisson_gaussian_log_a(rate, noise, 2, method="binomial"), closed) < mpmath.mpf("1e-55")
    if rate == 1e-8:  # one quadrature per noise level keeps the default run short
        assert _rel(ref_poisson_gaussian_log_a(rate, noise, 2, method="quad"), closed) < mpmath.mpf("1e-50")


@pytest.mark.parametrize("order", [2, 7, 30])
@pytest.mark.parametrize("noise", [1.0, 2.0, 30.0])
def test_tiny_rate_leading_term(order, noise):
    # For q -> 0, A - 1 = q^2 C(a,2) (e^{1/s^2} - 1) (1 + O(q)): an independent check of
    # the regime where log A ~ 1e-16 and double-precision sums lose every digit.
    q = mpmath.mpf("1e-12")
    with mpmath.workdps(60):
        leading = q**2 * mpmath.binomial(order, 2) * mpmath.expm1(1 / mpmath.mpf(noise) ** 2)
    log_a = ref_poisson_gaussian_log_a(q, noise, order, method="binomial")
    assert _rel(log_a, leading) < mpmath.mpf("1e-6")


# --------------------------------------------------------------------------- Poisson: quad vs series (fractional orders)

# Moderate regimes only: the MTZ series tail decays like i^-(alpha+2) times
# (1-q)^a e^{-z0^2/(2 s^2)}, so it converges in a few thousand terms only when that
# prefactor is small (s >= 2 at q <= 0.01, s >= 5 at q <= 0.1, or alpha >= 7).
_QUAD_VS_SERIES = [
    (1e-8, 1.0, 1.01),
    (1e-8, 20.0, 1.5),
    (1e-3, 2.0, 1.01),
    (1e-3, 5.0, 2.5),
    (0.01, 5.0, 1.5),
    (0.01, 20.0, 7.3),
    (0.1, 5.0, 2.5),
    (0.1, 0.5, 50.5),
    (0.5, 1.0, 7.3),
    (0.01, 5.0, 300.5),
]
# Default run: every rate, noise and order above once (the others under -m slow).
_QUAD_VS_SERIES_DEFAULT = [(1e-8, 20.0, 1.5), (1e-3, 2.0, 1.01), (1e-3, 5.0, 2.5), (0.1, 0.5, 50.5),
                           (0.5, 1.0, 7.3), (0.01, 5.0, 300.5)]


@pytest.mark.parametrize("rate,noise,order", cover(_QUAD_VS_SERIES, default=_QUAD_VS_SERIES_DEFAULT))
def test_quad_matches_series_fractional(rate, noise, order):
    quad = ref_poisson_gaussian_log_a(rate, noise, order, method="quad")
    series = ref_poisson_gaussian_log_a(rate, noise, order, method="series", series_tol=1e-30)
    # Series tolerance 1e-30 relative to log A (alternating-tail bound); observed <= 1e-30.
    assert _rel(series, quad) < mpmath.mpf("1e-28")


@pytest.mark.parametrize("rate,noise,order", [(0.01, 1.0, 10), (0.3, 0.5, 4), (1e-6, 3.0, 25)])
def test_series_terminates_at_integer_orders(rate, noise, order):
    # At integer alpha the two-series formula is a finite sum that must equal the binomial.
    series = ref_poisson_gaussian_log_a(rate, noise, order, method="series")
    binomial = ref_poisson_gaussian_log_a(rate, noise, order, method="binomial")
    assert _rel(series, binomial) < mpmath.mpf("1e-50")


def test_series_raises_when_it_cannot_converge():
    # q = 0.5, s = 1, alpha = 1.5: the tail prefactor is ~0.5 e^{-1/8}, so 1e-40 relative
    # would need ~1e13 terms; the reference must refuse rather than return a guess.
    with pytest.raises(ArithmeticError, match="did not converge"):
        ref_poisson_gaussian_log_a(0.5, 1.0, 1.5, method="series", series_tol=1e-40, series_max_terms=300)


# --------------------------------------------------------------------------- Poisson: definition and degenerate cases


# One point in the default run (each is a 60-digit quadrature of the definition, 1-2 s), two under -m slow.
@pytest.mark.parametrize("rate,noise,order", cover([(0.05, 1.0, 2.5), (0.3, 2.0, 1.2), (1e-3, 0.8, 6.0)],
                                                   default=[(1e-3, 0.8, 6.0)], every_value=False))
def test_quad_matches_direct_renyi_divergence(rate, noise, order):
    # Independent of the A - 1 rewriting: integrate p^a q^(1-a) for
    # P = (1-q) N(0, s^2) + q N(1, s^2), Q = N(0, s^2) as written in the definition.
    with mpmath.workdps(60):
        q, s, a = mpmath.mpf(rate), mpmath.mpf(noise), mpmath.mpf(order)

        def integrand(x):
            p_x = (1 - q) * mpmath.npdf(x, 0, s) + q * mpmath.npdf(x, 1, s)
            return p_x**a * mpmath.npdf(x, 0, s) ** (1 - a)

        points = [-mpmath.inf, -10 * s, -s, 0, 0.5, 1, a, s + a, 10 * s + a, mpmath.inf]
        direct = mpmath.log(mpmath.quad(integrand, points)) / (a - 1)
    assert _rel(ref_poisson_gaussian_rdp(rate, noise, order), direct) < mpmath.mpf("1e-40")


@pytest.mark.parametrize("order", [1.01, 2, 7.5, 1000])
def test_poisson_degenerate_rates(order):
    assert ref_poisson_gaussian_rdp(0.0, 1.0, order) == 0
    # q = 1 is the plain Gaussian, alpha / (2 s^2).
    assert _rel(ref_poisson_gaussian_rdp(1.0, 0.7, order), ref_gaussian_rdp(0.7, order)) < mpmath.mpf("1e-70")


def test_poisson_rdp_is_log_a_over_order_minus_one():
    log_a = ref_poisson_gaussian_log_a(0.01, 1.0, 10)
    with mpmath.workdps(80):
        expected = log_a / 9
    assert _rel(ref_poisson_gaussian_rdp(0.01, 1.0, 10), expected) < mpmath.mpf("1e-70")


def test_poisson_golden_values():
    # log A for q = 0.01, s = 1, alpha = 10, computed with this module at 60 digits, by
    # "binomial" and by "quad"; both gave these 40 digits (disagreement 2e-76).
    golden = _mp("0.3444337700545362875877855910746297479818")
    assert _rel(ref_poisson_gaussian_log_a(0.01, 1.0, 10, method="binomial"), golden) < mpmath.mpf("1e-38")
    # log A for q = 0.01, s = 5, alpha = 2.5 (fractional), by "quad" and by "series"
    # (MTZ two-series); both gave these 40 digits.
    golden_frac = _mp("0.000007653571147463514090632198476052119098372")
    assert _rel(ref_poisson_gaussian_log_a(0.01, 5.0, 2.5), golden_frac) < mpmath.mpf("1e-38")
    # RDP at q = 1e-4, s = 0.3, alpha = 10000 (huge-RDP regime), "binomial"; at
    # alpha = 10000 it sits just below alpha / (2 s^2) = 55555.6 as it must.
    golden_big = _mp("55546.34429405743367220500479918165627469")
    assert _rel(ref_poisson_gaussian_rdp(1e-4, 0.3, 10000), golden_big) < mpmath.mpf("1e-38")


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(rate=-0.1, noise_multiplier=1.0, order=2), "rate"),
        (dict(rate=1.5, noise_multiplier=1.0, order=2), "rate"),
        (dict(rate=0.1, noise_multiplier=0.0, order=2), "noise_multiplier"),
        (dict(rate=0.1, noise_multiplier=1.0, order=1.0), "order"),
        (dict(rate=0.1, noise_multiplier=1.0, order=2.5, method="binomial"), "integer"),
        (dict(rate=0.1, noise_multiplier=1.0, order=2, method="simpson"), "method"),
        (dict(rate=0.1, noise_multiplier=1.0, order=2, dps=30), "dps"),
    ],
)
def test_poisson_rejects_bad_input(kwargs, message):
    with pytest.raises(ValueError, match=message):
        ref_poisson_gaussian_log_a(**kwargs)


def test_references_leave_global_precision_alone():
    before = mpmath.mp.dps
    ref_poisson_gaussian_rdp(0.01, 1.0, 2.5)
    ref_wor_gaussian_rdp(0.01, 1.0, 2.5)
    assert mpmath.mp.dps == before


# --------------------------------------------------------------------------- Gaussian and Laplace vs quadrature


@pytest.mark.parametrize("noise,order", [(0.3, 1.01), (1.0, 2.0), (2.0, 7.5), (10.0, 300.0)])
def test_gaussian_closed_form_matches_quadrature(noise, order):
    with mpmath.workdps(60):
        s, a = mpmath.mpf(noise), mpmath.mpf(order)

        def integrand(x):  # N(1, s^2)^a N(0, s^2)^(1-a)
            return mpmath.npdf(x, 1, s) ** a * mpmath.npdf(x, 0, s) ** (1 - a)

        points = [-mpmath.inf, -s, 0, 1, a - s, a, a + s, mpmath.inf]
        divergence = mpmath.log(mpmath.quad(integrand, points)) / (a - 1)
    assert _rel(ref_gaussian_rdp(noise, order), divergence) < mpmath.mpf("1e-45")


@pytest.mark.parametrize("scale,order", [(1.0, 2.0), (0.1, 1.01), (0.1, 100.0), (3.0, 1.5), (100.0, 1e4), (0.5, 7.3)])
def test_laplace_closed_form_matches_quadrature(scale, order):
    with mpmath.workdps(60):
        b, a = mpmath.mpf(scale), mpmath.mpf(order)

        def integrand(x):  # Lap(0, b)^a Lap(1, b)^(1-a), kinks at 0 and 1
            return mpmath.exp(-a * abs(x) / b - (1 - a) * abs(x - 1) / b) / (2 * b)

        divergence = mpmath.log(mpmath.quad(integrand, [-mpmath.inf, 0, 1, mpmath.inf])) / (a - 1)
    assert _rel(ref_laplace_rdp(scale, order), divergence) < mpmath.mpf("1e-45")


def test_laplace_golden_and_limits():
    # b = 1, alpha = 2: log(2/3 e + 1/3 e^-2); closed form and quadrature both gave
    # 0.6191236299985928833997885365435069867983 when this test was written.
    assert _rel(ref_laplace_rdp(1.0, 2.0), _mp("0.6191236299985928833997885365435069867983")) < mpmath.mpf("1e-38")
    # alpha -> infinity tends to the pure-DP epsilon 1/b (Mironov 2017, Table II).
    assert _rel(ref_laplace_rdp(2.0, 1e12), mpmath.mpf("0.5")) < mpmath.mpf("1e-10")
    # It never exceeds 1/b and grows with the order.
    assert ref_laplace_rdp(2.0, 3.0) < ref_laplace_rdp(2.0, 30.0) < mpmath.mpf("0.5")


def test_laplace_matches_dp_accounting():
    rdp = pytest.importorskip("dp_accounting.rdp.rdp_privacy_accountant")
    # dp-accounting's _laplace_rdp(eps = 1/b, alpha) is Prop. 6 written as
    # eps + log1p((a-1) expm1((1-2a) eps) / (2a-1)) / (a-1), in float64.
    for scale, order in [(1.0, 2.0), (0.5, 1.5), (10.0, 1.05), (0.2, 64.0)]:
        fast = rdp._laplace_rdp(1.0 / scale, order)
        assert float(_rel(fast, ref_laplace_rdp(scale, order))) < 1e-13


# --------------------------------------------------------------------------- sampling without replacement (WBK19 Thm 9)


def _wor_by_hand(gamma, z, alpha):
    """Thm 9 bracket summed term by term at 100 digits, written independently."""
    with mpmath.workdps(100):
        g, z = mpmath.mpf(gamma), mpmath.mpf(z)
        e2 = 2 / (2 * z**2)
        terms = [mpmath.mpf(1), g**2 * mpmath.binomial(alpha, 2) * min(4 * (mpmath.exp(e2) - 1), 2 * mpmath.exp(e2))]
        for j in range(3, alpha + 1):
            terms.append(g**j * mpmath.binomial(alpha, j) * 2 * mpmath.exp((j - 1) * j / (2 * z**2)))
        return mpmath.log(mpmath.fsum(terms)) / (alpha - 1)


@pytest.mark.parametrize("gamma,z,order", [(0.01, 1.0, 2), (0.01, 1.0, 10), (0.2, 0.7, 33), (1e-6, 5.0, 300)])
def test_wor_integer_orders_match_hand_sum(gamma, z, order):
    assert _rel(ref_wor_gaussian_rdp(gamma, z, order), _wor_by_hand(gamma, z, order)) < mpmath.mpf("1e-55")


def test_wor_golden_value():
    # gamma = 0.01, z = 1, alpha = 10: this module at 60 digits and _wor_by_hand at 100
    # digits; dp-accounting's float64 gave 0.06742238451337361 (rel. diff 6e-15).
    golden = _mp("0.06742238451337321729198216531539006317301")
    assert _rel(ref_wor_gaussian_rdp(0.01, 1.0, 10), golden) < mpmath.mpf("1e-38")


def test_wor_fractional_orders_interpolate_the_cgf():
    a = 7.25
    lo, hi = ref_wor_gaussian_rdp(0.05, 1.5, 7), ref_wor_gaussian_rdp(0.05, 1.5, 8)
    with mpmath.workdps(80):
        expected = (mpmath.mpf("0.75") * 6 * lo + mpmath.mpf("0.25") * 7 * hi) / (a - 1)
    assert _rel(ref_wor_gaussian_rdp(0.05, 1.5, a), expected) < mpmath.mpf("1e-60")
    # Between 1 and 2 the bound is eps'(2) (RDP is non-decreasing in the order).
    assert ref_wor_gaussian_rdp(0.05, 1.5, 1.3) == ref_wor_gaussian_rdp(0.05, 1.5, 2)


def test_wor_degenerate_and_monotone():
    assert ref_wor_gaussian_rdp(0.0, 1.0, 5) == 0
    assert ref_wor_gaussian_rdp(1.0, 2.0, 5) == ref_gaussian_rdp(2.0, 5)
    values = [ref_wor_gaussian_rdp(g, 1.0, 12) for g in (1e-4, 1e-3, 1e-2, 1e-1)]
    assert all(x < y for x, y in zip(values, values[1:]))


def test_wor_matches_dp_accounting():
    rdp = pytest.importorskip("dp_accounting.rdp.rdp_privacy_accountant")
    # For alpha > 256, dp-accounting's _compute_rdp_sample_wor_gaussian_int evaluates
    # exactly WBK19 Thm 9 as implemented here (in float64): agreement to 1e-13.
    # For alpha <= 256 it uses the tighter Thm 27 for Gaussians, which can only be lower.
    for gamma, z in [(0.01, 1.0), (0.001, 2.0), (0.1, 5.0), (0.5, 0.8)]:
        for order in [300, 512, 1024, 300.5]:
            theirs = rdp._compute_rdp_sample_wor_gaussian(gamma, z, [order])[0]
            assert float(_rel(theirs, ref_wor_gaussian_rdp(gamma, z, order))) < 1e-13
        for order in [2, 3, 10, 2.5, 64, 256]:
            theirs = rdp._compute_rdp_sample_wor_gaussian(gamma, z, [order])[0]
            assert theirs <= float(ref_wor_gaussian_rdp(gamma, z, order)) * (1 + 1e-13)


# --------------------------------------------------------------------------- conversions


def test_conversion_golden_values():
    # rdp = 1, alpha = 10, delta = 1e-5, by hand:
    # CKS: 1 + log(0.9) - (log(1e-5) + log(10))/9 = 1.918010636783971771469044786350259493962
    # classic: 1 + log(1e5)/9 = 2.279213940552247593142989262154501648668
    assert _rel(ref_rdp_to_epsilon(1, 10, 1e-5), _mp("1.918010636783971771469044786350259493962")) < mpmath.mpf("1e-38")
    assert _rel(ref_rdp_to_epsilon_classic(1, 10, 1e-5), _mp("2.279213940552247593142989262154501648668")) < mpmath.mpf("1e-38")


def test_conversion_clips_at_zero_and_caps_at_one():
    assert ref_rdp_to_epsilon(1e-9, 2, 0.5) == 0
    assert ref_rdp_to_delta(50.0, 3, 0.0) == 1


@settings(max_examples=200, deadline=None, derandomize=True)
@given(
    rdp_value=st.floats(min_value=1e-6, max_value=1e3),
    order=st.floats(min_value=1.01, max_value=1e4),
    log10_delta=st.floats(min_value=-30, max_value=-1),
)
def test_conversion_round_trip(rdp_value, order, log10_delta):
    with mpmath.workdps(80):
        delta = mpmath.mpf(10) ** log10_delta
    eps = ref_rdp_to_epsilon(rdp_value, order, delta)
    classic = ref_rdp_to_epsilon_classic(rdp_value, order, delta)
    assert eps <= classic  # log((a-1)/a) - log(a)/(a-1) < 0
    if eps > 0:  # away from the clip at 0 the two functions are inverse to each other
        assert _rel(ref_rdp_to_delta(rdp_value, order, eps), delta) < mpmath.mpf("1e-50")


def test_conversion_matches_dp_accounting():
    rdp = pytest.importorskip("dp_accounting.rdp.rdp_privacy_accountant")
    for rdp_value, order, delta in [(1.0, 10.0, 1e-5), (0.05, 32.0, 1e-8), (20.0, 1.5, 1e-6)]:
        eps, _ = rdp.compute_epsilon([order], [rdp_value], delta)
        assert float(_rel(eps, ref_rdp_to_epsilon(rdp_value, order, delta))) < 1e-13
        target = float(ref_rdp_to_epsilon(rdp_value, order, delta))
        d, _ = rdp.compute_delta([order], [rdp_value], target)
        assert float(_rel(d, ref_rdp_to_delta(rdp_value, order, target))) < 1e-12
