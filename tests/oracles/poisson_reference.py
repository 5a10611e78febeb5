"""60-digit mpmath references for the RDP of the Poisson-subsampled Gaussian: the binomial expansion
(integer orders), the direct-definition quadrature and the two-series formula of Mironov, Talwar &
Zhang 2019 (arXiv:1908.10530), checked against each other in ``tests/oracles/test_references.py``.
Conventions as in :mod:`oracles.references`.
"""

from __future__ import annotations

import math
from typing import Tuple

import mpmath

from oracles.stored import stored
from oracles.mp_checks import DEFAULT_DPS, GUARD_DPS, check_dps, is_integer, mp_order, mp_positive, mp_rate

__all__ = ["ref_poisson_gaussian_log_a", "ref_poisson_gaussian_rdp"]

# Term cap of the MTZ two-series formula; where it needs more, its tail (decaying like
# i^-(alpha+2)) makes it the wrong tool and it raises instead.
_SERIES_MAX_TERMS = 20_000


# --------------------------------------------------------------------------- Poisson-subsampled Gaussian


@stored
def _poisson_binomial_a_minus_1(q, s, a) -> mpmath.mpf:
    """A - 1 for integer alpha, as a sum of non-negative terms (no cancellation).

    Since the weights w_k = C(a,k) (1-q)^(a-k) q^k sum to one,
    A - 1 = sum_{k=2}^{a} w_k * expm1((k^2 - k) / (2 s^2)); the k = 0, 1 terms vanish.
    """
    n = int(a)
    s2 = 2 * s * s
    one_minus_q = 1 - q
    ratio = q / one_minus_q
    weight = one_minus_q**n  # w_0
    total = mpmath.mpf(0)
    for k in range(0, n):
        # w_{k+1} = w_k * (n-k)/(k+1) * q/(1-q); relative rounding grows ~k ulps only.
        weight = weight * (n - k) / (k + 1) * ratio
        kk = k + 1
        if kk >= 2:
            total += weight * mpmath.expm1(mpmath.mpf(kk * kk - kk) / s2)
    return total


def _poisson_peaks(q: float, s: float, a: float) -> list:
    """Approximate maxima of the integrand, as float breakpoints for the quadrature.

    The log-integrand -z^2/(2 s^2) + a log(1 - q + q L(z)) has derivative
    (a * sigmoid((z - z0)/s^2) - z) / s^2, so its maxima are fixed points of
    z = a sigmoid((z - z0)/s^2). Iterating that map from z = 2 (the peak of the
    A - 1 integrand for tiny q) and from z = a converges monotonically to the
    smallest and largest such points. Only used to place breakpoints.
    """
    if not 0 < q < 1:
        return []
    z0 = s * s * math.log((1 - q) / q) + 0.5
    peaks = []
    for start in (2.0, a):
        z = start
        for _ in range(500):
            t = (z - z0) / (s * s)
            sig = 1.0 / (1.0 + math.exp(-t)) if t > -700 else 0.0
            z_new = a * sig
            if abs(z_new - z) <= 1e-9 * max(1.0, abs(z)):
                z = z_new
                break
            z = z_new
        peaks.append(z)
    return peaks


def _poisson_breakpoints(q, s, a) -> list:
    qf, sf, af = float(q), float(s), float(a)
    centres = [0.0, 0.5, 1.0, 2.0, af]
    if 0 < qf < 1:
        centres.append(sf * sf * math.log((1 - qf) / qf) + 0.5)  # z0: where q L(z) = 1 - q
    centres += _poisson_peaks(qf, sf, af)
    # Offsets 0, 3, 8 s, then geometric (x2.5) out to the span of the centres:
    # the integrand varies by e^(huge) between distant centres, and tanh-sinh copes
    # with an interval only if the integrand does not vary too steeply across it.
    span = max(abs(c) for c in centres) + 8.0 * sf
    offsets = [0.0, 3.0, 8.0]
    while offsets[-1] * sf < span:
        offsets.append(offsets[-1] * 2.5)
    points = set()
    for c in centres:
        for k in offsets:
            points.add(c + k * sf)
            points.add(c - k * sf)
    ordered = sorted(points)
    # Drop points closer than s to the previous one: they only cost evaluations.
    merged = [ordered[0]]
    for p in ordered[1:]:
        if p - merged[-1] > 1.0 * sf:
            merged.append(p)
    return [mpmath.ninf] + [mpmath.mpf(p) for p in merged] + [mpmath.inf]


@stored
def _poisson_quad_a_minus_1(q, s, a, dps: int) -> mpmath.mpf:
    """A - 1 = E_{Z ~ N(0, s^2)}[ g(q (L(Z) - 1)) ], g(x) = (1+x)^a - 1 - a x >= 0.

    E[L(Z)] = 1, so the subtracted linear term integrates to zero and the integrand
    is non-negative (g is convex with g(0) = g'(0) = 0 on x >= -1): the integral of
    A - 1 is free of cancellation even when A - 1 ~ 1e-20.
    """
    s2 = s * s
    norm = 1 / (s * mpmath.sqrt(2 * mpmath.pi))

    def g_of(z):
        x = q * mpmath.expm1((2 * z - 1) / (2 * s2))
        if x == 0:
            return mpmath.mpf(0)
        # g(x) ~ a(a-1)/2 x^2 loses about -log2|x| bits to cancellation: add them back.
        with mpmath.extraprec(max(0, -mpmath.mag(x)) + 20):
            return mpmath.expm1(a * mpmath.log1p(x)) - a * x

    points = _poisson_breakpoints(q, s, a)
    # mpmath.quad stops each interval on an *absolute* error of 2^-prec, so scale the
    # integrand to be O(1) at its largest breakpoint value (breakpoints include the
    # maxima): the tolerance then becomes relative to the peak, whether A - 1 is
    # 1e-20 or e^(5e8).
    log_peak = max(
        mpmath.log(g) - p * p / (2 * s2) for p in points[1:-1] for g in [g_of(p)] if g > 0
    )

    def integrand(z):
        g = g_of(z)
        if g == 0:
            return g
        return g * mpmath.exp(-z * z / (2 * s2) - log_peak)

    scaled, error = mpmath.quad(integrand, points, error=True, maxdegree=10)
    value = scaled * norm * mpmath.exp(log_peak)
    error = error * norm * mpmath.exp(log_peak)
    if not (value > 0) or error > value * mpmath.mpf(10) ** (-dps):
        raise ArithmeticError(
            f"quadrature did not reach {dps} digits for rate={q}, noise_multiplier={s}, "
            f"order={a}: value={mpmath.nstr(value, 10)}, error estimate={mpmath.nstr(error, 3)}"
        )
    return value


def _poisson_series_a(q, s, a, tol, max_terms: int) -> Tuple[mpmath.mpf, mpmath.mpf]:
    """A by the two-series formula of MTZ 2019 Sec. 3.3; returns (A, error bound).

    A = sum_i C(a,i) [ (1-q)^(a-i) q^i e^{(i^2-i)/(2s^2)} erfc((i - z0)/(sqrt2 s))/2
                     + q^(a-i) (1-q)^i e^{(j^2-j)/(2s^2)} erfc((z0 - j)/(sqrt2 s))/2 ],
    j = a - i. Substituting z0 = s^2 log((1-q)/q) + 1/2 shows that the i-th term
    equals C(a,i) (1-q)^a e^{-z0^2/(2s^2)} [erfcx((i-z0)/(sqrt2 s)) + erfcx((z0-j)/(sqrt2 s))]/2,
    so for i > a the terms alternate in sign (with C(a,i)) and decrease strictly in
    magnitude (|C(a,i+1)/C(a,i)| = (i-a)/(i+1) < 1 and erfcx is decreasing). Hence,
    by the alternating-series test, stopping before the first term i > a with
    |t_i| <= tol * S |log S| (S the partial sum) leaves a remainder of magnitude
    <= |t_i|, i.e. a relative error of about tol in log A.
    """
    s2 = s * s
    z0 = s2 * mpmath.log((1 - q) / q) + mpmath.mpf(1) / 2
    root2s = mpmath.sqrt(2) * s
    one_minus_q = 1 - q
    coef = mpmath.mpf(1)  # C(a, 0)
    total = mpmath.mpf(0)
    total_abs = mpmath.mpf(0)
    for i in range(max_terms):
        j = a - i
        t0 = (
            one_minus_q**j * q**i * mpmath.exp((i * i - i) / (2 * s2))
            * mpmath.erfc((i - z0) / root2s) / 2
        )
        t1 = (
            q**j * one_minus_q**i * mpmath.exp((j * j - j) / (2 * s2))
            * mpmath.erfc((z0 - j) / root2s) / 2
        )
        term = coef * (t0 + t1)
        # The remainder |R| <= |term| moves log A by about |R| / A; compare that with
        # tol * |log A| so that tiny log A (q = 1e-8) keeps its relative accuracy.
        if i > a and total > 0 and abs(term) <= tol * total * abs(mpmath.log(total)):
            return total, abs(term) + total_abs * mpmath.eps
        total += term
        total_abs += abs(term)
        coef = coef * (a - i) / (i + 1)
        if coef == 0:  # integer order: the series terminates exactly
            return total, total_abs * mpmath.eps
    raise ArithmeticError(
        f"MTZ two-series formula did not converge to relative tolerance {mpmath.nstr(tol, 3)} "
        f"within {max_terms} terms for rate={q}, noise_multiplier={s}, order={a} "
        "(its tail decays only like i^(-order-2))"
    )


@stored
def ref_poisson_gaussian_log_a(
    rate,
    noise_multiplier,
    order,
    *,
    method: str = "auto",
    dps: int = DEFAULT_DPS,
    series_tol=None,
    series_max_terms: int = _SERIES_MAX_TERMS,
) -> mpmath.mpf:
    """log A_alpha for the Poisson-subsampled Gaussian mechanism (add/remove, sensitivity 1).

    A_alpha = E_{Z ~ N(0, s^2)}[ (1 - q + q L(Z))^alpha ],  L(x) = exp((2x - 1)/(2 s^2)),
    i.e. A_alpha = exp((alpha-1) D_alpha(P || Q)) for P = (1-q) N(0, s^2) + q N(1, s^2),
    Q = N(0, s^2), the direction that Mironov, Talwar & Zhang 2019, "Renyi
    Differential Privacy of the Sampled Gaussian Mechanism" (arXiv:1908.10530),
    Sec. 3, show to be the larger one. Three independent evaluations:

      * "binomial" (integer alpha): A = sum_{k=0}^{alpha} C(alpha,k) (1-q)^(alpha-k) q^k
        exp((k^2-k)/(2 s^2)) (MTZ Sec. 3.3), summed as A - 1 = sum_k w_k expm1(...) >= 0.
      * "quad" (any alpha > 1): mpmath.quad of A - 1 = E[g(q(L(Z) - 1))],
        g(x) = (1+x)^alpha - 1 - alpha x >= 0, over the real line split at 0, 0.5, 1,
        2, z0 = s^2 log(1/q - 1) + 1/2, alpha, the integrand's maxima, and 3, 8, 20,
        ... s (geometric) either side of each, with the integrand scaled to O(1) at
        its largest breakpoint value. Raises if mpmath's error estimate exceeds
        10^-dps relative.
      * "series" (fractional alpha, moderate regimes): the MTZ two-series formula,
        Sec. 3.3, summed until the alternating tail is provably below `series_tol`
        relative to log A (see `_poisson_series_a`); raises ArithmeticError when that takes
        more than `series_max_terms` terms (its tail decays only like i^-(alpha+2)).

    "auto" is "binomial" for integer orders and "quad" otherwise.
    Degenerate cases, exact: q = 0 gives 0; q = 1 gives alpha (alpha - 1) / (2 s^2).

    Args:
      rate: sampling probability q in [0, 1].
      noise_multiplier: s = sigma / sensitivity > 0.
      order: alpha > 1 (an integer for "binomial").
      method: "auto", "binomial", "quad" or "series".
      dps: decimal digits of the result (>= 60).
      series_tol: tolerance of the "series" method, relative to log A; default 10^-dps.
      series_max_terms: term cap of the "series" method.

    Returns:
      log A_alpha as mpf (log1p(A - 1), so tiny values keep their relative accuracy).

    Raises:
      ValueError: parameter out of range, unknown method, or non-integer order for
        "binomial".
      ArithmeticError: "quad" or "series" could not certify the requested accuracy.
    """
    check_dps(dps)
    q = mp_rate(rate)
    s = mp_positive(noise_multiplier, "noise_multiplier")
    a = mp_order(order)
    if method not in ("auto", "binomial", "quad", "series"):
        raise ValueError(f"method must be 'auto', 'binomial', 'quad' or 'series', got {method!r}")
    if method == "auto":
        method = "binomial" if is_integer(a) else "quad"
    if method == "binomial" and not is_integer(a):
        raise ValueError(f"order must be an integer for method='binomial', got {order!r}")
    with mpmath.workdps(dps + GUARD_DPS):
        if q == 0:
            return mpmath.mpf(0)
        if q == 1:
            return a * (a - 1) / (2 * s * s)
        if method == "binomial":
            return mpmath.log1p(_poisson_binomial_a_minus_1(q, s, a))
        if method == "quad":
            return mpmath.log1p(_poisson_quad_a_minus_1(q, s, a, dps))
        tol = mpmath.mpf(10) ** (-dps) if series_tol is None else mp_positive(series_tol, "series_tol")
        value, _ = _poisson_series_a(q, s, a, tol, series_max_terms)
        if not value > 0:
            raise ArithmeticError(f"MTZ two-series sum is not positive: {value}")
        return mpmath.log(value)


@stored
def ref_poisson_gaussian_rdp(
    rate, noise_multiplier, order, *, method: str = "auto", dps: int = DEFAULT_DPS
) -> mpmath.mpf:
    """RDP of the Poisson-subsampled Gaussian mechanism, add/remove, sensitivity 1.

    eps(alpha) = log(A_alpha) / (alpha - 1) with A_alpha as in
    `ref_poisson_gaussian_log_a` (Mironov, Talwar & Zhang 2019, arXiv:1908.10530,
    Sec. 3). q = 0 gives 0 and q = 1 gives alpha / (2 s^2), exactly.

    Args:
      rate: sampling probability q in [0, 1].
      noise_multiplier: s = sigma / sensitivity > 0.
      order: alpha > 1.
      method: see `ref_poisson_gaussian_log_a`; "auto" is binomial for integer
        orders and quad otherwise.
      dps: decimal digits of the result (>= 60).

    Returns:
      The RDP epsilon as mpf.
    """
    a = mp_order(order)
    log_a = ref_poisson_gaussian_log_a(rate, noise_multiplier, order, method=method, dps=dps)
    with mpmath.workdps(dps + GUARD_DPS):
        return log_a / (a - 1)
