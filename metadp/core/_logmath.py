"""Log-space arithmetic for privacy accounting.

Every quantity in an accountant (moment generating functions, binomial sums, Gaussian tails) can
under- or overflow a float64 long before the privacy number it feeds becomes meaningless, so the
accountants work with logarithms throughout. Each function accepts numpy arrays or scalars, returns
float64 (an array, or a float for scalar input), and is tested against mpmath at 50 digits in
``tests/accounting/test_logmath.py``.
"""

from __future__ import annotations

import math
from typing import Optional, overload

import numpy as np
from numpy.typing import ArrayLike
from scipy import special

from metadp.core._typing import FloatArray, FloatOrArray

__all__ = [
    "log_add",
    "log_sub",
    "log_sum_exp",
    "log_sum_exp_signed",
    "log_comb",
    "log_ndtr",
    "log_erfc",
    "log_expm1",
    "log1mexp",
    "log_binomial_series_remainder",
]

_LOG2 = float(np.log(2.0))


def _out(x: FloatArray) -> FloatOrArray:
    """Returns a Python float for 0-d results, the array otherwise."""
    return float(x) if np.ndim(x) == 0 else x


@overload
def log_add(a: float, b: float) -> float: ...
@overload
def log_add(a: ArrayLike, b: ArrayLike) -> FloatOrArray: ...
def log_add(a: ArrayLike, b: ArrayLike) -> FloatOrArray:
    """log(e^a + e^b), exact for -inf operands."""
    return _out(np.logaddexp(np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)))


@overload
def log_sub(a: float, b: float) -> float: ...
@overload
def log_sub(a: ArrayLike, b: ArrayLike) -> FloatOrArray: ...
def log_sub(a: ArrayLike, b: ArrayLike) -> FloatOrArray:
    """log(e^a - e^b) for a >= b; -inf when a == b.

    Raises:
        ValueError: if any a < b (the difference would be negative).
    """
    x = np.asarray(a, dtype=np.float64)
    y = np.asarray(b, dtype=np.float64)
    if np.any(x < y):
        raise ValueError("log_sub(a, b) needs a >= b: the difference e^a - e^b must be >= 0")
    with np.errstate(invalid="ignore", divide="ignore"):
        # log(e^a - e^b) = a + log(1 - e^(b - a)); b - a is in [-inf, 0].
        result = np.where(np.isneginf(y), x, x + log1mexp(np.minimum(y - x, 0.0)))
    return _out(np.where(x == y, -np.inf, result))


def log_sum_exp(log_terms: ArrayLike) -> float:
    """log(sum(exp(log_terms))) of a 1-D array: the largest term plus the log of the scaled sum, as
    ``scipy.special.logsumexp`` computes it, without its array-API dispatch (~100 us a call; the RDP
    curves call this thousands of times a plan). -inf for no terms or all -inf; +inf if any is +inf."""
    x = np.asarray(log_terms, dtype=np.float64)
    if x.size == 0:
        return -math.inf
    top = float(np.max(x))
    if not math.isfinite(top):
        return top
    return top + math.log(float(np.sum(np.exp(x - top))))


def log_sum_exp_signed(log_abs: ArrayLike, signs: ArrayLike,
                       axis: Optional[int] = None) -> tuple[FloatOrArray, FloatOrArray]:
    """log|sum_i s_i e^{x_i}| and the sign of the sum.

    Args:
        log_abs: the x_i (any shape); -inf entries contribute nothing.
        signs: +1 or -1 per entry (broadcastable to log_abs).
        axis: axis to sum over (None: all).

    Returns:
        (log_abs_sum, sign): sign is +1, -1 or 0 (then log_abs_sum is -inf).
    """
    x = np.asarray(log_abs, dtype=np.float64)
    s = np.broadcast_to(np.asarray(signs, dtype=np.float64), x.shape)
    m = np.max(x, axis=axis, keepdims=True)
    m = np.where(np.isfinite(m), m, 0.0)
    with np.errstate(under="ignore"):
        total = np.sum(s * np.exp(x - m), axis=axis, keepdims=True)
    with np.errstate(divide="ignore"):
        log_total = np.log(np.abs(total)) + m
    sign = np.sign(total)
    if axis is None:
        return float(log_total.reshape(())), float(sign.reshape(()))
    return _out(np.squeeze(log_total, axis=axis)), _out(np.squeeze(sign, axis=axis))


@overload
def log_comb(n: float, k: float) -> float: ...
@overload
def log_comb(n: ArrayLike, k: ArrayLike) -> FloatOrArray: ...
def log_comb(n: ArrayLike, k: ArrayLike) -> FloatOrArray:
    """log C(n, k) = log Gamma(n+1) - log Gamma(k+1) - log Gamma(n-k+1) for real n >= k >= 0.

    With m = min(k, n-k) and a = n - m + 1, the large difference log Gamma(a + m) - log Gamma(a) is
    formed from Stirling's series so that nothing large cancels (gammaln or betaln differences lose
    ~1e-12 absolute at n = 1e4). Exact 0 at k = 0 and k = n.
    """
    nn = np.asarray(n, dtype=np.float64)
    kk = np.asarray(k, dtype=np.float64)
    if np.any(kk < 0) or np.any(nn < kk) or np.any(np.isnan(nn)) or np.any(np.isnan(kk)):
        raise ValueError("log_comb(n, k) needs real n >= k >= 0")
    m = np.minimum(kk, nn - kk)
    a = nn - m + 1.0
    big = a >= 10.0
    ab = np.where(big, a, 10.0)  # keeps the unused branch finite
    with np.errstate(divide="ignore", invalid="ignore"):
        stirling = ((ab - 0.5) * np.log1p(m / ab) + m * np.log(ab + m) - m
                    + _stirling_tail(ab + m) - _stirling_tail(ab))
    diff = np.where(big, stirling, special.gammaln(a + m) - special.gammaln(a))
    return _out(np.where(m == 0, 0.0, diff - special.gammaln(m + 1.0)))


def _stirling_tail(x: FloatArray) -> FloatArray:
    """log Gamma(x) - [(x - 1/2) log x - x + log(2 pi)/2] for x >= 10 (error < 1e-17)."""
    inv = 1.0 / x
    inv2 = inv * inv
    return inv * (1.0 / 12 - inv2 * (1.0 / 360 - inv2 * (1.0 / 1260 - inv2 * (1.0 / 1680 - inv2 / 1188))))


@overload
def log_ndtr(x: float) -> float: ...
@overload
def log_ndtr(x: ArrayLike) -> FloatOrArray: ...
def log_ndtr(x: ArrayLike) -> FloatOrArray:
    """log Phi(x), the log of the standard normal CDF, accurate in both tails."""
    return _out(special.log_ndtr(np.asarray(x, dtype=np.float64)))


@overload
def log_erfc(x: float) -> float: ...
@overload
def log_erfc(x: ArrayLike) -> FloatOrArray: ...
def log_erfc(x: ArrayLike) -> FloatOrArray:
    """log erfc(x), accurate for large positive x (where erfc underflows) via the scaled erfcx."""
    x = np.asarray(x, dtype=np.float64)
    with np.errstate(divide="ignore", over="ignore"):
        # erfcx(x) = e^{x^2} erfc(x) stays O(1/x) for x > 0; for x <= 0 erfc(x) is in [1, 2].
        positive = np.log(special.erfcx(np.maximum(x, 0.0))) - np.maximum(x, 0.0) ** 2
        negative = np.log(special.erfc(np.minimum(x, 0.0)))
    return _out(np.where(x > 0, positive, negative))


@overload
def log_expm1(x: float) -> float: ...
@overload
def log_expm1(x: ArrayLike) -> FloatOrArray: ...
def log_expm1(x: ArrayLike) -> FloatOrArray:
    """log(e^x - 1) for x > 0, without overflow for large x or cancellation for tiny x."""
    x = np.asarray(x, dtype=np.float64)
    if np.any(x < 0):
        raise ValueError("log_expm1(x) needs x >= 0")
    with np.errstate(divide="ignore", over="ignore"):
        # For x > 50, e^x - 1 = e^x (1 - e^-x) and log1p(-e^-x) is below 2e-22.
        small = np.log(np.expm1(np.minimum(x, 50.0)))
        large = x + np.log1p(-np.exp(-np.maximum(x, 50.0)))
    return _out(np.where(x > 50.0, large, small))


@overload
def log1mexp(x: float) -> float: ...
@overload
def log1mexp(x: ArrayLike) -> FloatOrArray: ...
def log1mexp(x: ArrayLike) -> FloatOrArray:
    """log(1 - e^x) for x <= 0 (Maechler 2012: switch at x = -log 2)."""
    x = np.asarray(x, dtype=np.float64)
    if np.any(x > 0):
        raise ValueError("log1mexp(x) needs x <= 0")
    with np.errstate(divide="ignore"):
        near_zero = np.log(-np.expm1(x))  # x = 0 gives -inf, as it should
        far = np.log1p(-np.exp(x))
    return _out(np.where(x > -_LOG2, near_zero, far))


def log_binomial_series_remainder(x: ArrayLike, log_abs_x: ArrayLike, alpha: float,
                                  terms: int = 56) -> FloatArray:
    """log of sum_{i>=2} C(alpha, i) x^i = (1+x)^alpha - 1 - alpha x, by its series.

    For |x| <= 1/(2 max(|alpha|, 1)) consecutive terms shrink by at least half, so ``terms`` = 56
    reaches double precision. ``x`` are the (small) values, ``log_abs_x`` their log-magnitudes (kept
    separately so that x^2 does not underflow); entries outside the range are meaningless.
    """
    coef = np.empty(terms)
    c = alpha * (alpha - 1.0) / 2.0
    for j in range(terms):
        coef[j] = c
        c *= (alpha - 2.0 - j) / (3.0 + j)
    xs = np.asarray(x, dtype=np.float64)
    poly = np.zeros_like(xs)
    for c in coef[::-1]:
        poly = poly * xs + c
    with np.errstate(divide="ignore", invalid="ignore"):
        return 2.0 * np.asarray(log_abs_x) + np.log(poly)
