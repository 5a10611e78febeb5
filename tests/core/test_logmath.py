"""The log-space kit (metadp.core._logmath) against mpmath at 50 digits.

Tolerance rule, used everywhere unless a test says otherwise:
  * |fast - ref| <= 1e-13 * |ref| when |ref| >= 1 (relative), and
  * |fast - ref| <= 1e-13 when |ref| < 1 (absolute).
  An absolute error e in a logarithm is a relative error e in the quantity it
  represents, and next to a zero crossing of the log (log_add(a, b) with e^a + e^b ~ 1,
  log_expm1 near x = log 2, log_erfc near x = 0, log_comb near C(n, k) = 1) relative
  accuracy of the log is not even defined by the float inputs.
  * Where a tiny log is itself the answer -- log_add(0, b) = log1p(e^b),
    log_sub(0, b), log1mexp(x) for x << 0, log_ndtr(x) for x >> 0; this is how an
    RDP log A ~ 1e-16 is computed -- the tests `*_tail_is_relative` require 1e-13
    *relative* accuracy down to the smallest normal double.
  * A reference below the smallest normal double (2.2e-308) only requires the fast
    value to be that small too ("where representable").
"""

from __future__ import annotations

import math

import mpmath
import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from scipy import special

from metadp.core._logmath import log_sum_exp

DPS = 50
RTOL = 1e-13
_TINY = 2.2250738585072014e-308  # smallest normal float64

_SETTINGS = settings(max_examples=300, deadline=None, derandomize=True)


@pytest.fixture(scope="module")
def lm():
    return pytest.importorskip("metadp.core._logmath")


# --------------------------------------------------------------------------- references (mpmath, 50 digits)


def _mp(x) -> mpmath.mpf:
    return mpmath.mpf(float(x))  # exact: every float64 is an mpf


def _mp_log1mexp(x):
    """log(1 - e^x) for x <= 0 in the current mpmath precision, both forms exact identities:
    log1p(-e^x) keeps e^x = 1e-304 that log(-expm1(x)) would round away at 50 digits."""
    if x == -mpmath.inf:
        return mpmath.mpf(0)
    if x < -1:
        return mpmath.log1p(-mpmath.exp(x))
    return mpmath.log(-mpmath.expm1(x))


def ref_log_add(a, b):
    with mpmath.workdps(DPS):
        a, b = _mp(a), _mp(b)
        if a == -mpmath.inf and b == -mpmath.inf:
            return -mpmath.inf
        hi, lo = max(a, b), min(a, b)
        return hi + mpmath.log1p(mpmath.exp(lo - hi))  # lo - hi is exact at 50 digits


def ref_log_sub(a, b):
    with mpmath.workdps(DPS):
        a, b = _mp(a), _mp(b)
        if a == b:
            return -mpmath.inf
        return a + _mp_log1mexp(b - a)


def ref_log_sum_exp_signed(xs, signs):
    # Extra digits so that cancellation among the terms cannot reach the 50 kept.
    with mpmath.workdps(DPS + 40):
        xs = [_mp(x) for x in xs]
        finite = [x for x in xs if x != -mpmath.inf]
        if not finite:
            return -mpmath.inf, 0
        m = max(finite)
        total = mpmath.fsum(int(s) * mpmath.exp(x - m) for x, s in zip(xs, signs) if x != -mpmath.inf)
        if total == 0:
            return -mpmath.inf, 0
        return mpmath.log(abs(total)) + m, (1 if total > 0 else -1)


def ref_log_comb(n, k):
    n, k = _mp(n), _mp(k)
    # log Gamma(1e300) ~ 7e302: keep 50 digits after the cancellation of the three terms.
    extra = int(mpmath.log10(max(n, 1))) + 10
    with mpmath.workdps(DPS + extra):
        return mpmath.loggamma(n + 1) - mpmath.loggamma(k + 1) - mpmath.loggamma(n - k + 1)


def _mp_log_ndtr_lower_tail(t):
    """log Phi(-t) for t >= 1e10 by the Mills-ratio expansion (mpmath's erfc overflows
    near t = 1e300): -t^2/2 - log t - log(2 pi)/2 + log(1 - 1/t^2 + 3/t^4 - 15/t^6 + 105/t^8);
    the first omitted term, 945/t^10, is below 1e-97."""
    u = 1 / (t * t)
    series = 1 - u + 3 * u**2 - 15 * u**3 + 105 * u**4
    return -t * t / 2 - mpmath.log(t) - mpmath.log(2 * mpmath.pi) / 2 + mpmath.log(series)


def ref_log_ndtr(x):
    with mpmath.workdps(DPS):
        x = _mp(x)
        if abs(x) >= 1e10:
            lower = _mp_log_ndtr_lower_tail(abs(x))
            return lower if x < 0 else mpmath.log1p(-mpmath.exp(lower))
        if x <= 0:
            return mpmath.log(mpmath.ncdf(x))
        return mpmath.log1p(-mpmath.ncdf(-x))  # ncdf(x) = 1 - tiny would lose the tiny part


def ref_log_erfc(x):
    with mpmath.workdps(DPS):
        x = _mp(x)
        if abs(x) < 1:
            return mpmath.log1p(-mpmath.erf(x))  # erfc(1e-300) = 1 - 1.1e-300 needs erf
        return mpmath.log(mpmath.erfc(x))


def ref_log_expm1(x):
    with mpmath.workdps(DPS):
        x = _mp(x)
        if x > 50:
            return x + mpmath.log1p(-mpmath.exp(-x))  # same value, without exp(1e300)
        return mpmath.log(mpmath.expm1(x))


def ref_log1mexp(x):
    with mpmath.workdps(DPS):
        return _mp_log1mexp(_mp(x))


# --------------------------------------------------------------------------- comparison


def _assert_close(actual, ref, *, relative_only=False, label=""):
    """The tolerance rule of the module docstring; `relative_only` drops the absolute floor."""
    actual = float(np.asarray(actual, dtype=np.float64))
    if mpmath.isinf(ref):
        assert actual == float(ref), f"{label}: expected {ref}, got {actual}"
        return
    assert math.isfinite(actual), f"{label}: expected {mpmath.nstr(ref, 17)}, got {actual}"
    if relative_only and abs(ref) < _TINY:
        assert abs(actual) <= 2 * _TINY, f"{label}: expected ~{mpmath.nstr(ref, 5)}, got {actual}"
        return
    scale = abs(ref) if relative_only else max(abs(ref), 1)
    with mpmath.workdps(DPS):
        err = abs(_mp(actual) - ref)
    assert err <= RTOL * scale, (
        f"{label}: got {actual!r}, mpmath {mpmath.nstr(ref, 20)}, "
        f"error {mpmath.nstr(err / scale, 3)} ({'relative' if scale == abs(ref) else 'absolute'})"
    )


_MAGNITUDES = [0.0, 1e-300, 1e-10, 0.5, 1.0, 30.0, 700.0, 1e10, 1e300]
_SIGNED = sorted({s * m for m in _MAGNITUDES for s in (1.0, -1.0)})
_WIDE = st.floats(min_value=-1e300, max_value=1e300, allow_nan=False, allow_infinity=False)


# --------------------------------------------------------------------------- log_add


@pytest.mark.parametrize("a", _SIGNED + [-math.inf])
def test_log_add_grid(lm, a):
    for b in _SIGNED + [-math.inf]:
        _assert_close(lm.log_add(a, b), ref_log_add(a, b), label=f"log_add({a}, {b})")


@_SETTINGS
@given(a=_WIDE, b=_WIDE)
def test_log_add_hypothesis(lm, a, b):
    _assert_close(lm.log_add(a, b), ref_log_add(a, b), label=f"log_add({a}, {b})")
    assert float(lm.log_add(a, b)) == float(lm.log_add(b, a))


@pytest.mark.parametrize("b", [-1.0, -5.0, -36.0, -37.5, -100.0, -700.0, -708.3])
def test_log_add_tail_is_relative(lm, b):
    # log_add(0, b) = log1p(e^b) ~ e^b: the tiny-q path of an RDP log A.
    _assert_close(lm.log_add(0.0, b), ref_log_add(0.0, b), relative_only=True, label=f"log_add(0, {b})")


# --------------------------------------------------------------------------- log_sub


@pytest.mark.parametrize("a", _SIGNED)
def test_log_sub_grid(lm, a):
    for b in _SIGNED + [-math.inf]:
        if b <= a:
            _assert_close(lm.log_sub(a, b), ref_log_sub(a, b), label=f"log_sub({a}, {b})")


@pytest.mark.parametrize("a", [0.0, 1.0, 30.0, 700.0, 1e10])
def test_log_sub_nearly_equal_arguments(lm, a):
    # e^a - e^b for b one ulp to a million ulps below a: b - a is exact in float64, so
    # the result is well conditioned and must be accurate (it is ~ a + log(a - b)).
    for steps in (1, 2, 1000, 10**6):
        b = a - steps * np.spacing(a)
        _assert_close(lm.log_sub(a, b), ref_log_sub(a, b), label=f"log_sub({a}, {b!r})")


@_SETTINGS
@given(a=_WIDE, b=_WIDE)
def test_log_sub_hypothesis(lm, a, b):
    a, b = max(a, b), min(a, b)
    _assert_close(lm.log_sub(a, b), ref_log_sub(a, b), label=f"log_sub({a}, {b})")


@pytest.mark.parametrize("b", [-1.0, -0.6931471805599453, -5.0, -37.5, -100.0, -708.3])
def test_log_sub_tail_is_relative(lm, b):
    _assert_close(lm.log_sub(0.0, b), ref_log_sub(0.0, b), relative_only=True, label=f"log_sub(0, {b})")


def test_log_sub_edge_cases_and_errors(lm):
    assert float(lm.log_sub(3.0, 3.0)) == -math.inf
    assert float(lm.log_sub(-2.5, -math.inf)) == -2.5
    with pytest.raises(ValueError):
        lm.log_sub(1.0, 2.0)
    with pytest.raises(ValueError):
        lm.log_sub(np.array([1.0, 0.0]), np.array([0.0, 0.5]))


# --------------------------------------------------------------------------- log_sum_exp_signed


def _check_signed(lm, xs, signs):
    value, sign = lm.log_sum_exp_signed(np.asarray(xs, dtype=float), np.asarray(signs, dtype=float))
    ref_value, ref_sign = ref_log_sum_exp_signed(xs, signs)
    assert float(sign) == ref_sign, f"sign of sum for {xs}, {signs}: {sign} != {ref_sign}"
    _assert_close(value, ref_value, label=f"log_sum_exp_signed({xs}, {signs})")


@pytest.mark.parametrize(
    "xs, signs",
    [
        ([math.log(3.0), 0.0], [1, -1]),  # 3 - 1 = 2, positive
        ([0.0, math.log(3.0)], [1, -1]),  # 1 - 3 = -2, negative
        ([1e300, 1e300 - 1e290, -1e300], [1, 1, -1]),
        ([-1e300, -1e300, -math.inf], [1, 1, 1]),
        ([1e-300, -1e-300, 0.0], [1, 1, 1]),
        ([700.0, 699.0, 1.0, -700.0], [1, -1, -1, 1]),
        (list(np.linspace(-50.0, 50.0, 101)), [1] * 101),
        ([5.0, 5.0 + 1e-12], [-1, 1]),  # heavy cancellation, but exact float inputs
    ],
)
def test_log_sum_exp_signed_cases(lm, xs, signs):
    _check_signed(lm, xs, signs)


def test_log_sum_exp_signed_exact_cancellation(lm):
    value, sign = lm.log_sum_exp_signed(np.array([2.0, 2.0]), np.array([1.0, -1.0]))
    assert float(value) == -math.inf
    assert float(sign) == 0


@_SETTINGS
@given(
    xs=st.lists(st.floats(min_value=-1e3, max_value=1e3), min_size=1, max_size=8),
    seed_signs=st.lists(st.sampled_from([1, -1]), min_size=8, max_size=8),
)
def test_log_sum_exp_signed_hypothesis(lm, xs, seed_signs):
    signs = seed_signs[: len(xs)]
    with mpmath.workdps(DPS + 40):
        m = max(_mp(x) for x in xs)
        total = mpmath.fsum(s * mpmath.exp(_mp(x) - m) for x, s in zip(xs, signs))
        size = mpmath.fsum(mpmath.exp(_mp(x) - m) for x in xs)
    # Well-conditioned sums only (condition number sum|t| / |sum t| <= 10): beyond that
    # any float64 summation loses digits in proportion, whatever the implementation.
    assume(total != 0 and size / abs(total) <= 10)
    _check_signed(lm, xs, signs)


# --------------------------------------------------------------------------- log_comb


_COMB_CASES = [
    (n, k)
    for n in [1e-300, 0.5, 1.0, 2.5, 10.0, 100.5, 1e4, 1e6, 1e15, 1e300]
    for k in sorted({0.0, min(n, 1e-300), min(n, 0.5), min(n, 1.0), min(n, 3.0), n / 2, max(n - 1, 0.0), n})
]


@pytest.mark.parametrize("n,k", _COMB_CASES)
def test_log_comb_grid(lm, n, k):
    _assert_close(lm.log_comb(n, k), ref_log_comb(n, k), label=f"log_comb({n}, {k})")


@pytest.mark.parametrize("n", [2.5, 10.0, 10000.5, 1e6])
def test_log_comb_integer_k_sweep(lm, n):
    # The use in RDP sums: real order n, every integer k <= n (vectorised call).
    ks = np.arange(0, math.floor(n) + 1, max(1, int(n) // 200), dtype=float)
    values = np.asarray(lm.log_comb(n, ks))
    assert values.shape == ks.shape
    for k, v in zip(ks, values):
        _assert_close(v, ref_log_comb(n, k), label=f"log_comb({n}, {k})")


@_SETTINGS
@given(n=st.floats(min_value=0.0, max_value=1e8), frac=st.floats(min_value=0.0, max_value=1.0))
def test_log_comb_hypothesis(lm, n, frac):
    k = n * frac
    assume(k <= n)
    _assert_close(lm.log_comb(n, k), ref_log_comb(n, k), label=f"log_comb({n}, {k})")


# --------------------------------------------------------------------------- log_ndtr and log_erfc


@pytest.mark.parametrize(
    "x",
    [-1e154, -1e100, -1e10, -1e3, -40.0, -38.5, -20.0, -5.0, -1.0, -1e-10, -1e-300, 0.0,
     1e-300, 1e-10, 1.0, 3.0, 5.0, 6.0, 8.0, 20.0, 37.0, 38.5, 40.0, 1e3, 1e300],
)
def test_log_ndtr_grid(lm, x):
    _assert_close(lm.log_ndtr(x), ref_log_ndtr(x), label=f"log_ndtr({x})")


@pytest.mark.parametrize("x", [1.0, 3.0, 5.0, 5.9, 6.1, 8.0, 12.0, 20.0, 30.0, 37.5])
def test_log_ndtr_tail_is_relative(lm, x):
    # log Phi(x) ~ -Phi(-x): tiny, and the whole answer in a privacy-profile tail.
    _assert_close(lm.log_ndtr(x), ref_log_ndtr(x), relative_only=True, label=f"log_ndtr({x})")


@_SETTINGS
@given(x=st.floats(min_value=-1e154, max_value=1e154, allow_nan=False))
def test_log_ndtr_hypothesis(lm, x):
    _assert_close(lm.log_ndtr(x), ref_log_ndtr(x), label=f"log_ndtr({x})")


@pytest.mark.parametrize(
    "x",
    [-1e300, -1e10, -30.0, -6.0, -1.0, -1e-10, -1e-300, 0.0, 1e-300, 1e-10, 0.5, 1.0, 5.0,
     26.0, 27.3, 30.0, 1e3, 1e10, 1e100, 1e154],
)
def test_log_erfc_grid(lm, x):
    # Both sides of x = 0 (erfc switches to erfcx) and of x ~ 26.5, where erfc underflows.
    _assert_close(lm.log_erfc(x), ref_log_erfc(x), label=f"log_erfc({x})")


@_SETTINGS
@given(x=st.floats(min_value=-1e300, max_value=1e154, allow_nan=False))
def test_log_erfc_hypothesis(lm, x):
    _assert_close(lm.log_erfc(x), ref_log_erfc(x), label=f"log_erfc({x})")


# --------------------------------------------------------------------------- log_expm1 and log1mexp


_LOG2 = math.log(2.0)


@pytest.mark.parametrize(
    "x",
    [1e-300, 1e-100, 1e-20, 1e-10 * 0.999, 1e-10, 1e-10 * 1.001, 1e-5, 0.5, _LOG2, np.nextafter(_LOG2, 1.0),
     1.0, 20.0, 36.0, 37.0, 49.9, 50.0, 50.1, 700.0, 710.0, 1e10, 1e300],
)
def test_log_expm1_grid(lm, x):
    _assert_close(lm.log_expm1(x), ref_log_expm1(x), label=f"log_expm1({x})")


@_SETTINGS
@given(x=st.floats(min_value=1e-300, max_value=1e300))
def test_log_expm1_hypothesis(lm, x):
    _assert_close(lm.log_expm1(x), ref_log_expm1(x), label=f"log_expm1({x})")


@pytest.mark.parametrize(
    "x",
    [-1e-300, -1e-100, -1e-10, -0.1, -_LOG2 * (1 + 1e-15), -_LOG2, -_LOG2 * (1 - 1e-15), -0.5, -1.0, -36.0,
     -37.0, -700.0, -745.0, -1e10, -1e300],
)
def test_log1mexp_grid(lm, x):
    # Both sides of the switch at x = -log 2 (Maechler 2012).
    _assert_close(lm.log1mexp(x), ref_log1mexp(x), label=f"log1mexp({x})")


@pytest.mark.parametrize("x", [-0.7, -1.0, -5.0, -20.0, -36.7, -37.0, -100.0, -700.0])
def test_log1mexp_tail_is_relative(lm, x):
    _assert_close(lm.log1mexp(x), ref_log1mexp(x), relative_only=True, label=f"log1mexp({x})")


@_SETTINGS
@given(x=st.floats(min_value=-1e300, max_value=-1e-300))
def test_log1mexp_hypothesis(lm, x):
    _assert_close(lm.log1mexp(x), ref_log1mexp(x), label=f"log1mexp({x})")


# --------------------------------------------------------------------------- arrays and scalars


@pytest.mark.parametrize(
    "name, args",
    [
        ("log_add", (np.array([[-1.0, 0.0], [5.0, -700.0]]), np.array([[2.0, -3.0], [5.0, -1e10]]))),
        ("log_sub", (np.array([[2.0, 0.0], [5.0, -700.0]]), np.array([[-1.0, -3.0], [5.0, -1e10]]))),
        ("log_comb", (np.array([[10.0, 3.5], [1e4, 7.0]]), np.array([[3.0, 1.5], [5e3, 7.0]]))),
        ("log_ndtr", (np.array([[-40.0, 0.0], [3.0, 40.0]]),)),
        ("log_erfc", (np.array([[-3.0, 0.0], [3.0, 40.0]]),)),
        ("log_expm1", (np.array([[1e-10, 0.5], [3.0, 400.0]]),)),
        ("log1mexp", (np.array([[-1e-10, -0.5], [-3.0, -400.0]]),)),
    ],
)
def test_arrays_match_scalars(lm, name, args):
    fn = getattr(lm, name)
    out = np.asarray(fn(*args))
    assert out.shape == args[0].shape
    assert out.dtype == np.float64
    for index in np.ndindex(out.shape):
        scalar = fn(*(float(a[index]) for a in args))
        assert np.ndim(scalar) == 0
        assert float(scalar) == out[index]


@pytest.mark.parametrize("alpha", [1.01, 1.5, 2.0, 7.25, 300.0, -0.5, -3.0])
@pytest.mark.parametrize("fraction", [1e-12, 1e-4, 0.3, 1.0])
def test_log_binomial_series_remainder(lm, alpha, fraction):
    # log((1+x)^a - 1 - a x) at |x| up to the series' range 1/(2 max(|a|, 1)), both signs; mpmath 50 digits.
    for sign in (1.0, -1.0):
        x = sign * fraction * 0.5 / max(abs(alpha), 1.0)
        with mpmath.workdps(50):
            xm, am = mpmath.mpf(x), mpmath.mpf(alpha)
            ref = mpmath.log((1 + xm) ** am - 1 - am * xm)
        got = lm.log_binomial_series_remainder(np.array([x]), np.array([math.log(abs(x))]), alpha)[0]
        assert abs(got - float(ref)) <= 1e-13 * max(1.0, abs(float(ref))), (alpha, x, got, ref)


def test_log_sum_exp_matches_scipy_and_its_edge_cases():
    rng = np.random.default_rng(3)
    for scale in (1.0, 50.0, 700.0):
        x = rng.normal(size=257) * scale
        assert log_sum_exp(x) == pytest.approx(float(special.logsumexp(x)), rel=1e-14, abs=1e-14)
    assert log_sum_exp(np.array([-np.inf, -np.inf])) == -np.inf
    assert log_sum_exp(np.array([])) == -np.inf
    assert log_sum_exp(np.array([1.0, np.inf])) == np.inf
    assert log_sum_exp(np.array([-1e308, 0.0])) == 0.0
    assert log_sum_exp(np.array([1000.0, 1000.0])) == pytest.approx(1000.0 + np.log(2.0), rel=1e-15)
