"""Renyi differential privacy (RDP) curves of the basic mechanisms.

Each function maps a mechanism's parameters and an array of orders alpha > 1 to RDP epsilons
eps(alpha) (float64 array, one per order; +inf allowed). All are upper bounds on the Renyi divergence
of the worst neighbouring pair for the stated relation; exact where the docstring says so.

Degenerate cases come first and are exact: rate 0 or infinite noise give 0, zero noise gives inf.

Numerics of the Poisson-subsampled Gaussian (Mironov, Talwar & Zhang 2019, arXiv:1908.10530):
eps(alpha) = log(A_alpha) / (alpha - 1) with A_alpha = E_{Z ~ N(0, s^2)} (1 - q + q L(Z))^alpha,
L(z) = exp((2z - 1) / (2 s^2)). When q is small, A_alpha is 1 + O(q^2), and any formula that computes
A_alpha and then subtracts 1 (the two-series formula of MTZ Sec. 3.3 as implemented in dp-accounting)
loses every digit. We compute A_alpha - 1 directly, as a sum or an integral of non-negative terms:

* integer alpha: A - 1 = sum_{k=2}^{alpha} C(alpha,k) (1-q)^(alpha-k) q^k expm1((k^2-k) / (2 s^2))
  (the binomial form of MTZ Sec. 3.3 minus the k = 0, 1 terms, which sum with the rest to 1);
* fractional alpha (and integers above ``_MAX_BINOMIAL_ORDER``): A - 1 = E[g(q (L(Z) - 1))] with
  g(x) = (1+x)^alpha - 1 - alpha x >= 0 (convexity; E[L(Z)] = 1 makes the linear term vanish),
  integrated by adaptive Gauss-Kronrod in log space with panels resolving every peak.
Both are checked against 60-digit mpmath references in ``tests/accounting/test_rdp_oracle.py``.
"""

from __future__ import annotations

import math
from typing import Iterable, cast

import numpy as np
from numpy.typing import ArrayLike
from scipy import optimize, special

from metadp.core._typing import FloatArray, FloatOrArray

from metadp.core.validation import check_positive, check_probability
from metadp.core._logmath import log1mexp, log_binomial_series_remainder, log_comb, log_expm1, log_sum_exp
from metadp.core._pearson_vajda import MAX_MOMENT_ORDER, log_gaussian_central_moments
from metadp.core._quadrature import integrate_log

__all__ = [
    "orders_array",
    "gaussian_rdp",
    "laplace_rdp",
    "poisson_gaussian_rdp",
    "wor_gaussian_rdp",
]

# Integer orders up to this use the exact O(alpha) binomial sum; larger ones the O(1) quadrature.
_MAX_BINOMIAL_ORDER = 20_000
# Below this noise the quadrature's panels (width sigma^2) get too many; fractional orders then use
# the convexity bound between integer orders, and integer orders above 1e6 return +inf.
_MIN_QUADRATURE_NOISE = 0.05
# Above this noise the quadrature's centre z^2 log((1-q)/q) and its squares overflow (from about
# z = 1e77); integer orders are then exact by the binomial sum and fractional ones use convexity, as
# below 0.05 (the optimal order is large there, so the interpolation costs nothing).
_MAX_QUADRATURE_NOISE = 1e4
_MAX_SMALL_NOISE_ORDER = 1_000_000
_SERIES_TERMS = 56  # terms of sum_{i>=2} C(alpha,i) x^i for |x| <= 0.5 / alpha: ratio <= 1/2
# Where the Pearson-Vajda moments of WBK Thm 27 are computed: below 0.3 they are barely below Thm 9's
# terms (E (L-1)^n is close to E L^n when L is large) and their quadrature needs many panels; above 1e3
# the optimal orders are far above the 256 they reach. Elsewhere Thm 9's terms are kept (valid, looser).
_MOMENT_NOISE = (0.3, 1e3)
_WINDOW_SIGMAS = 12.0  # N(0,1) mass beyond 12 sigma is 1.8e-33: below double precision


def orders_array(orders: ArrayLike) -> FloatArray:
    """Validates Renyi orders (each > 1, +inf allowed) and returns them as a 1-d float64 array."""
    a = np.atleast_1d(np.asarray(orders, dtype=np.float64))
    if a.ndim != 1:
        raise ValueError(f"orders must be a scalar or a 1-d sequence, got shape {a.shape}")
    if np.any(np.isnan(a)) or np.any(a <= 1.0):
        bad = a[np.isnan(a) | (a <= 1.0)][0]
        raise ValueError(f"orders must be > 1 (Renyi orders), got {bad}")
    return a


def gaussian_rdp(noise_multiplier: float, orders: ArrayLike) -> FloatArray:
    """RDP of the Gaussian mechanism, exact: eps(alpha) = alpha / (2 z^2) (Mironov 2017, Prop. 7).

    Args:
        noise_multiplier: z = sigma / L2 sensitivity, > 0 (inf: no privacy loss).
        orders: Renyi orders > 1.
    """
    orders = orders_array(orders)
    z = check_positive("noise_multiplier", noise_multiplier, allow_inf=True)
    if math.isinf(z):
        return np.zeros_like(orders)
    # Below z = 1e-154, 2 z^2 underflows (to 0 or a subnormal): the quotient is then +inf, the exact
    # value's only float upper bound, not a division-by-zero error.
    with np.errstate(divide="ignore", over="ignore"):
        return orders / (2.0 * z * z)


def laplace_rdp(scale: float, orders: ArrayLike) -> FloatArray:
    """RDP of the Laplace mechanism with scale b (relative to L1 sensitivity 1), exact.

    eps(alpha) = log( alpha/(2 alpha-1) e^{(alpha-1)/b} + (alpha-1)/(2 alpha-1) e^{-alpha/b} ) / (alpha-1)
    (Mironov 2017, arXiv:1702.07476, Prop. 6); eps(inf) = 1/b.
    """
    orders = orders_array(orders)
    b = check_positive("scale", scale, allow_inf=True)
    if math.isinf(b):
        return np.zeros_like(orders)
    finite = np.isfinite(orders)
    a = np.where(finite, orders, 2.0)
    u = 1.0 / b  # inf when b is below 1/DBL_MAX: then so is every eps(alpha), an exact upper bound
    with np.errstate(over="ignore", invalid="ignore"):  # (a-1) u may overflow to +inf: eps is then 1/b
        log_mix = np.logaddexp(np.log(a / (2 * a - 1)) + (a - 1) * u, np.log((a - 1) / (2 * a - 1)) - a * u)
        # For a u < 1/2 the mixture is 1 + f/(2a-1) with f = a expm1((a-1)u) + (a-1) expm1(-a u), whose
        # first-order terms cancel: sum f's series from n = 2 (terms shrink by a u / n).
        series = _laplace_series(a, u) if u < 0.5 else log_mix  # a > 1: a u < 1/2 needs u < 1/2
        eps = np.where(a * u < 0.5, series, log_mix) / (a - 1)
    # eps(alpha) <= eps(inf) = 1/b for every order (Renyi divergences increase with the order).
    return np.where(finite, np.minimum(eps, u), u)


def _laplace_series(a: FloatArray, u: float) -> FloatArray:
    """log(1 + f / (2a - 1)), f = a expm1((a-1)u) + (a-1) expm1(-a u) summed from n = 2."""
    f = np.zeros_like(a)
    term_a, term_b, fact = a * (a - 1), -(a - 1) * a, 1.0  # a (a-1)^n and (a-1) (-a)^n at n = 1
    for n in range(2, 40):
        term_a, term_b, fact = term_a * (a - 1), -term_b * a, fact * n
        f = f + (term_a + term_b) * u**n / fact
    return np.log1p(f / (2 * a - 1))


def poisson_gaussian_rdp(rate: float, noise_multiplier: float, orders: ArrayLike) -> FloatArray:
    """RDP of the Poisson-subsampled Gaussian mechanism, add/remove relation, exact up to rounding.

    eps(alpha) = log(A_alpha)/(alpha-1) (Mironov, Talwar & Zhang 2019, arXiv:1908.10530, Sec. 3),
    which bounds both directions of the divergence. See the module docstring for how A_alpha - 1 is
    computed without cancellation; relative accuracy is about 1e-12.

    Args:
        rate: sampling probability q in [0, 1].
        noise_multiplier: z = sigma / L2 sensitivity (clip norm), > 0 (inf: no privacy loss).
        orders: Renyi orders > 1.
    """
    orders = orders_array(orders)
    q = check_probability("rate", rate)
    z = check_positive("noise_multiplier", noise_multiplier, allow_inf=True)
    if q == 0.0 or math.isinf(z):
        return np.zeros_like(orders)
    if q == 1.0:
        return gaussian_rdp(z, orders)
    if z * z < 1e-300:  # z < 1e-150: 1 / (2 z^2) and the divergence exceed every float
        return np.full_like(orders, np.inf)
    # Below 0.05 the quadrature's panels get too many; above 1e4 its centres (z^2 log((1-q)/q)) and
    # squares overflow. Both ends use the exact integer orders and convexity between them.
    small_noise = z < _MIN_QUADRATURE_NOISE or z > _MAX_QUADRATURE_NOISE
    out = np.empty_like(orders)
    for i, alpha in enumerate(orders):
        if math.isinf(alpha):
            out[i] = math.inf
        elif alpha == math.floor(alpha) and (alpha <= _MAX_BINOMIAL_ORDER or small_noise):
            out[i] = _log_a_binomial(q, z, int(alpha)) / (alpha - 1.0)
        elif small_noise:
            out[i] = _interpolated_rdp(q, z, float(alpha))
        else:
            out[i] = float(np.logaddexp(0.0, _log_a_minus_1_integral(q, z, float(alpha)))) / (alpha - 1.0)
    # Sampling never increases the divergence (A_alpha <= E[L^alpha] by convexity): the Gaussian's
    # curve caps orders the series leave at +inf (above 1e6 at very small or very large noise).
    return np.minimum(out, gaussian_rdp(z, orders))


def _log_a_binomial(q: float, sigma: float, alpha: int) -> float:
    """log A_alpha at an integer order; +inf (a valid, trivially loose bound) above 1e6 at tiny noise."""
    if alpha > _MAX_SMALL_NOISE_ORDER:
        return math.inf
    return float(np.logaddexp(0.0, _log_a_minus_1_binomial(q, sigma, alpha)))


def _interpolated_rdp(q: float, sigma: float, alpha: float) -> float:
    """Upper bound at a fractional order from the neighbouring integers (noise below 0.05).

    The cumulant generating function K(alpha) = (alpha - 1) eps(alpha) = log A_alpha is convex with
    K(1) = 0, so K(alpha) <= (1 - t) K(floor) + t K(ceil), t = alpha - floor (for 1 < alpha < 2 this
    gives eps(alpha) <= eps(2)). Used where the quadrature would need panels of width sigma^2.
    """
    lo, hi = math.floor(alpha), math.ceil(alpha)
    t = alpha - lo
    k_lo = 0.0 if lo == 1 else _log_a_binomial(q, sigma, lo)
    return ((1.0 - t) * k_lo + t * _log_a_binomial(q, sigma, hi)) / (alpha - 1.0)


def _log_a_minus_1_binomial(q: float, sigma: float, alpha: int) -> float:
    """log(A_alpha - 1) for integer alpha >= 2 as a log-sum of positive terms."""
    k = np.arange(2, alpha + 1, dtype=np.float64)
    log_terms = (
        log_comb(float(alpha), k)
        + (alpha - k) * math.log1p(-q)
        + k * math.log(q)
        + log_expm1((k * k - k) / (2.0 * sigma * sigma))
    )
    return log_sum_exp(log_terms)


def _log_g(x_sign: FloatArray, log_abs_x: FloatArray, log1p_x: FloatArray, alpha: float) -> FloatArray:
    """log g(x) with g(x) = (1+x)^alpha - 1 - alpha x >= 0, for x >= -1 given in sign/log form."""
    with np.errstate(divide="ignore", invalid="ignore", over="ignore", under="ignore"):
        abs_x = np.exp(log_abs_x)
        small = abs_x <= 0.5 / max(alpha, 1.0)
        # Series branch: g = x^2 sum_{i>=2} C(alpha, i) x^(i-2); consecutive terms shrink by >= 1/2.
        xs = np.where(small, x_sign * abs_x, 0.0)
        series = log_binomial_series_remainder(xs, log_abs_x, alpha, _SERIES_TERMS)
        # Direct branch: |alpha x| > 1/2, so (1+x)^alpha and 1 + alpha x are well separated.
        t = alpha * log1p_x
        one_plus_ax = 1.0 + alpha * x_sign * abs_x
        positive_x = x_sign > 0
        log_lin_pos = np.logaddexp(0.0, math.log(alpha) + log_abs_x)
        lin = np.where(positive_x, log_lin_pos, np.log(np.abs(one_plus_ax)))
        diff = np.minimum(lin - t, 0.0)
        direct_sub = t + log1mexp(diff)
        direct_add = np.logaddexp(t, lin)  # x < 0 with 1 + alpha x <= 0: g = (1+x)^a + |1 + a x|
        direct = np.where(positive_x | (one_plus_ax > 0), direct_sub, direct_add)
        return np.where(small, series, direct)


def _log_a_minus_1_integral(q: float, sigma: float, alpha: float) -> float:
    """log(A_alpha - 1) = log E[g(q(L(Z)-1))], Z ~ N(0, sigma^2), by adaptive quadrature."""
    s2 = sigma * sigma
    log_q, log_1mq = math.log(q), math.log1p(-q)
    log_norm = -0.5 * math.log(2.0 * math.pi * s2)

    def log_f(zz: FloatArray) -> FloatArray:
        v = (2.0 * zz - 1.0) / (2.0 * s2)
        with np.errstate(divide="ignore"):
            log_abs_expm1_v = np.where(v > 0, log_expm1(np.abs(v)), log1mexp(-np.abs(v)))
        log_abs_x = log_q + log_abs_expm1_v
        log1p_x = np.logaddexp(log_1mq, log_q + v)
        return log_norm - zz * zz / (2.0 * s2) + _log_g(np.sign(v), log_abs_x, log1p_x, alpha)

    centers = [0.0, 0.5, 1.0, 2.0, alpha, *_modes(q, sigma, alpha)]
    z0 = s2 * (log_1mq - log_q) + 0.5  # where q L(z) = 1 - q: the sigmoid's midpoint
    centers.append(z0)
    return integrate_log(log_f, _panel_edges(centers, sigma))


def _modes(q: float, sigma: float, alpha: float) -> list[float]:
    """Stationary points of z -> -z^2/(2 s^2) + alpha log(1 - q + q L(z)): roots of z = alpha w(z)."""
    s2 = sigma * sigma
    shift = math.log(q) - math.log1p(-q)

    def f(z: FloatOrArray) -> FloatOrArray:
        return cast(FloatOrArray, z - alpha * special.expit((2.0 * z - 1.0) / (2.0 * s2) + shift))

    grid = np.linspace(-1.0, alpha + 1.0, 513)
    values = cast(FloatArray, f(grid))
    roots: list[float] = []
    for i in np.nonzero(np.sign(values[:-1]) != np.sign(values[1:]))[0]:
        roots.append(optimize.brentq(f, grid[i], grid[i + 1], xtol=1e-12 * max(1.0, alpha)))
    return roots


def _panel_edges(centers: Iterable[float], sigma: float) -> FloatArray:
    """Panels of width <= min(sigma, sigma^2)/2 within 12 sigma of each center, coarser between."""
    half = _WINDOW_SIGMAS * sigma
    fine = 0.5 * min(sigma, sigma * sigma)
    windows = sorted((c - half, c + half) for c in centers if math.isfinite(c))
    merged = [list(windows[0])]
    for lo, hi in windows[1:]:
        if lo <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], hi)
        else:
            merged.append([lo, hi])
    edges: list[float] = []
    for j, (lo, hi) in enumerate(merged):
        edges.extend(np.linspace(lo, hi, int(math.ceil((hi - lo) / fine)) + 1)[:-1])
        if j + 1 < len(merged):  # a gap: 16 panels, refined adaptively if it holds mass
            edges.extend(np.linspace(hi, merged[j + 1][0], 17)[:-1])
    edges.append(merged[-1][1])
    return np.asarray(edges)


def wor_gaussian_rdp(rate: float, noise_multiplier: float, orders: ArrayLike) -> FloatArray:
    """RDP upper bound for a Gaussian run on a fixed-size sample drawn without replacement.

    Wang, Balle & Kasiviswanathan 2019 (arXiv:1808.00087), Theorem 27 (their strengthening of
    Theorem 9 for mechanisms whose RDP curve is attained by one pair for every order, as the Gaussian's
    is), substitution relation: for integer alpha >= 2 and sampling fraction gamma = m / n,

        eps'(alpha) <= log(1 + sum_{j=2}^{alpha} gamma^j C(alpha,j) B_j) / (alpha - 1),
        B_j = min{4 sqrt(D_{2 floor(j/2)} D_{2 ceil(j/2)}), 2 e^{(j-1) eps(j)}},

    with D_n = E_Q[(L - 1)^n] the Gaussian's Pearson-Vajda moments (``_pearson_vajda``; D_2 =
    e^{eps(2)} - 1, so B_2 = min{4 (e^{eps(2)} - 1), 2 e^{eps(2)}} as in Thm 9) and eps(j) = j / (2 z^2).
    Each B_j bounds the j-th term on its own, so terms with j > 256 (or a moment that cannot be
    certified) keep Thm 9's 2 e^{(j-1) eps(j)}. This is never above Thm 9 (the bound metadp used
    before) and equals dp-accounting's ``_compute_rdp_sample_wor_gaussian`` at orders <= 256.

    Fractional alpha > 2: linear interpolation of (alpha-1) eps'(alpha) between the neighbouring
    integers, an upper bound because the cumulant generating function is convex (WBK Cor. 10);
    1 < alpha < 2: eps'(2), since RDP is non-decreasing in alpha.

    Args:
        rate: gamma = batch / population in [0, 1].
        noise_multiplier: sigma divided by the **substitution** sensitivity (2C for a clipped sum;
            the event layer performs that doubling).
        orders: Renyi orders > 1.
    """
    orders = orders_array(orders)
    gamma = check_probability("rate", rate)
    z = check_positive("noise_multiplier", noise_multiplier, allow_inf=True)
    if gamma == 0.0 or math.isinf(z):
        return np.zeros_like(orders)
    if gamma == 1.0:
        return gaussian_rdp(z, orders)
    if z * z < 1e-300:  # z < 1e-150: eps(2) = 1 / z^2 and the bound exceed every float
        return np.full_like(orders, np.inf)
    out = np.empty_like(orders)
    for i, alpha in enumerate(orders):
        if math.isinf(alpha):
            out[i] = math.inf
        elif alpha <= 2.0:
            out[i] = _wor_cgf(gamma, z, 2)
        elif alpha == math.floor(alpha):
            out[i] = _wor_cgf(gamma, z, int(alpha)) / (alpha - 1.0)
        else:
            lo, hi = math.floor(alpha), math.ceil(alpha)
            t = alpha - lo
            out[i] = ((1 - t) * _wor_cgf(gamma, z, lo) + t * _wor_cgf(gamma, z, hi)) / (alpha - 1.0)
    return out


def _wor_cgf(gamma: float, z: float, alpha: int) -> float:
    """(alpha - 1) eps'(alpha) of WBK Theorem 27 for a Gaussian base, integer alpha >= 2."""
    eps2 = 2.0 / (2.0 * z * z)
    log_gamma = math.log(gamma)
    first = 2 * log_gamma + float(log_comb(alpha, 2)) + min(math.log(4.0) + float(log_expm1(eps2)),
                                                              math.log(2.0) + eps2)
    if alpha == 2:
        return float(np.logaddexp(0.0, first))
    j = np.arange(3, alpha + 1, dtype=np.float64)
    thm9 = math.log(2.0) + (j - 1.0) * j / (2.0 * z * z)
    bound = thm9.copy()
    if _MOMENT_NOISE[0] <= z <= _MOMENT_NOISE[1]:
        moments = log_gaussian_central_moments(z)
        top = min(alpha, MAX_MOMENT_ORDER)
        jj = np.arange(3, top + 1)
        pv = math.log(4.0) + 0.5 * (moments[2 * (jj // 2)] + moments[2 * ((jj + 1) // 2)])
        bound[: len(jj)] = np.minimum(thm9[: len(jj)], pv)
    rest = j * log_gamma + log_comb(float(alpha), j) + bound
    return float(np.logaddexp(0.0, log_sum_exp(np.concatenate([[first], rest]))))
