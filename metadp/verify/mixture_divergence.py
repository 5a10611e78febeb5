"""Exact hockey-stick divergences between finite Gaussian mixtures with a common variance, and the
analytic Gaussian profile they are compared with (used by :mod:`metadp.verify.enumeration`).
"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Dict, List, Tuple, cast

import numpy as np
from scipy import optimize, special

from metadp.core.validation import check_positive, check_real

__all__ = ["Mixture", "hockey_stick", "gaussian_profile"]

Mixture = Tuple[Tuple[Fraction, Fraction], ...]  # (weight, mean) pairs

_TAIL = 40.0  # crossings are sought within 40 sigma of the means; the mass beyond is < 1e-300


def _lse(xs: List[float]) -> float:
    """log sum exp for a short list (plain Python: scipy's logsumexp costs 100x more at this size)."""
    top = max(xs)
    return top + math.log(sum(math.exp(x - top) for x in xs))


def _exp_sum_zeros(signs: List[float], slopes: List[float], logs: List[float], lo: float, hi: float) -> List[float]:
    """Zeros in [lo, hi] of g(u) = sum_k s_k exp(b_k u + l_k), slopes b_k strictly increasing.

    Rolle: g e^{-b_0 u} has derivative sum_{k>=1} s_k (b_k - b_0) exp((b_k - b_0) u + l_k), an
    exponential sum with one term fewer and the same signs. Between consecutive zeros of it, g is
    monotone and has at most one zero, bracketed and found by Brent's method. (A tangency, which
    no sign change reveals, does not change where g is positive.)
    """
    if len(set(signs)) < 2:
        return []  # one sign, no zero
    b = [float(x - slopes[0]) for x in slopes]
    crit = _exp_sum_zeros(signs[1:], b[1:], [l + math.log(x) for l, x in zip(logs[1:], b[1:])], lo, hi)
    up = [(bk, lk) for s, bk, lk in zip(signs, b, logs) if s > 0]
    down = [(bk, lk) for s, bk, lk in zip(signs, b, logs) if s < 0]

    def gap(u: float) -> float:  # log(positive part) - log(negative part): g's sign, no overflow
        return _lse([bk * u + lk for bk, lk in up]) - _lse([bk * u + lk for bk, lk in down])

    knots, zeros = [lo] + crit + [hi], []
    for a, c in zip(knots[:-1], knots[1:]):
        ga, gc = gap(a), gap(c)
        if ga == 0.0:
            zeros.append(a)
        elif ga * gc < 0:
            zeros.append(optimize.brentq(gap, a, c, xtol=1e-14, rtol=4 * np.finfo(float).eps))
    return zeros


def _phi_diff(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Phi(b) - Phi(a) for a <= b, from the tail that avoids cancellation."""
    return cast(np.ndarray, np.where(a > 0, special.ndtr(-a) - special.ndtr(-b), special.ndtr(b) - special.ndtr(a)))


def hockey_stick(p: Mixture, q: Mixture, sigma: float, epsilon: float) -> float:
    """D_{e^eps}(P || Q) = int (P(y) - e^eps Q(y))_+ dy for P = sum_k w_k N(m_k, sigma^2), Q likewise.

    The density difference over a Gaussian is the exponential sum sum_k c_k exp(m_k y / sigma^2 -
    m_k^2 / (2 sigma^2)), c_k = w^P_k - e^eps w^Q_k, whose real zeros are isolated exactly
    (``_exp_sum_zeros``); the divergence is then a sum of Gaussian CDF differences over the intervals
    where P > e^eps Q. Absolute error about 1e-15 (1 + e^eps) times the number of distinct means, from
    float round-off (zeros beyond 40 sigma of every mean are ignored: the mass there is < 1e-300).

    Args:
        p, q: sequences of (weight, mean) pairs, weights >= 0 and means finite (Fraction or float).
        sigma: the common noise standard deviation, > 0.
        epsilon: a finite real; e^eps is the order of the hockey-stick divergence.
    """
    sigma = check_positive("sigma", sigma)
    alpha = math.exp(check_real("epsilon", epsilon))
    coef: Dict[float, float] = {}
    for mixture, scale in ((p, 1.0), (q, -alpha)):
        for weight, mean in mixture:
            w, m = check_real("weight", weight, low=0.0), check_real("mean", mean) / sigma
            coef[m] = coef.get(m, 0.0) + scale * w
    mu = np.array(sorted(m for m, c in coef.items() if c != 0.0))
    if len(mu) == 0:
        return 0.0
    c = np.array([coef[m] for m in mu])
    zeros = _exp_sum_zeros(list(np.sign(c)), list(mu), list(np.log(np.abs(c)) - mu**2 / 2),
                           mu[0] - _TAIL, mu[-1] + _TAIL)
    edges = [-math.inf] + sorted(set(zeros)) + [math.inf]
    parts = []
    for a, b in zip(edges[:-1], edges[1:]):
        if math.isinf(a) and math.isinf(b):
            probe = float(mu[0])
        else:
            probe = a + 1.0 if b == math.inf else (b - 1.0 if a == -math.inf else (a + b) / 2)
        log_density = -((probe - mu) ** 2) / 2
        if float(np.sum(c * np.exp(log_density - log_density.max()))) > 0:  # P > e^eps Q on (a, b)
            parts.extend(c * _phi_diff(a - mu, b - mu))
    return min(max(math.fsum(parts), 0.0), 1.0)


def gaussian_profile(sensitivity: float, sigma: float, epsilon: float) -> float:
    """Analytic Gaussian profile (Balle & Wang 2018, arXiv:1805.06530, Thm 8) of the noisy sum:
    delta(eps) = Phi(D/(2 sigma) - eps sigma/D) - e^eps Phi(-D/(2 sigma) - eps sigma/D), with D = 1
    for adding or removing one x in [-1, 1] and D = 2 for substituting -1 by +1."""
    d, s = check_positive("sensitivity", sensitivity), check_positive("sigma", sigma)
    eps = check_real("epsilon", epsilon, low=0.0)
    a, b = d / (2 * s) - eps * s / d, -d / (2 * s) - eps * s / d
    return max(float(special.ndtr(a)) - math.exp(eps + float(special.log_ndtr(b))), 0.0)
