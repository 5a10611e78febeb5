"""Renyi-DP of one episodic step (``metadp.mechanisms.episodic``), with the J tail charged to delta.

One step is dominated by the revealed pair (notation of ``metadp.mechanisms.episodic``)

    P = sum_j w_j delta_j x P_j,   Q = sum_j w_j delta_j x Q_j,   w_j = Bin(j; L, P_U),

with (add direction) P_j = sum_k Bin(k; j, r) N(k s, z^2), Q_j = N(0, z^2), and the two swapped in
the remove direction. Three facts give an RDP bound at every order alpha > 1:

1. **Revealed index.** J has the same law under P and Q, so
   exp((alpha-1) D_alpha(P||Q)) = sum_j w_j exp((alpha-1) D_alpha(P_j||Q_j))   (exact).

2. **Component j by post-processing.** Let B_1..B_j be i.i.d. Bernoulli(r) and X_i ~ N(B_i s, z^2/j)
   independent; then X_1 + ... + X_j ~ N(K s, z^2) with K ~ Bin(j, r), i.e. P_j, and with every
   B_i = 0 the sum is Q_j. So (P_j, Q_j) is the image under the sum of the j-fold product of
   Poisson-subsampled Gaussian pairs, rate r and noise multiplier z / (s sqrt(j)); by the data
   processing inequality and additivity of D_alpha over products,
   D_alpha(P_j||Q_j) <= j eps_SGM(alpha; r, z/(s sqrt j)), in both directions, because eps_SGM
   (``metadp.core.rdp.poisson_gaussian_rdp``; Mironov, Talwar & Zhang 2019, arXiv:1908.10530, Sec. 3
   and Thm. 5) bounds both directions of the subsampled Gaussian pair. For j = 1 this is exactly
   the subsampled-Gaussian RDP. It is loose for large j (each X_i carries noise z^2/j, so it sees
   one inclusion sqrt(j) times more sharply than the sum does).

3. **Truncating J, charged to delta.** Fix j_max with tau = Pr[J > j_max] and let P' be P with
   every component j > j_max replaced by Q_j (Q is unchanged). Coupling: draw J once; P and P'
   agree unless J > j_max, so TV(P, P') <= tau. Over T steps (any adaptive composition, each step
   dominated by its pair: Zhu, Dong & Wang 2022, arXiv:2106.08567, Thm. 10) the product laws
   satisfy TV(P^T, P'^T) <= T tau (hybrid argument: change one coordinate at a time), so for every
   event S,  P^T(S) <= P'^T(S) + T tau <= e^eps Q^T(S) + delta'(eps) + T tau,
   where delta'(eps) is certified by the RDP of (P', Q) composed over the steps. Since Q' = Q, no
   factor e^eps multiplies the charge. The RDP of (P', Q) is fact 1 with D_alpha(P'_j||Q_j) = 0 for
   j > j_max:  exp((alpha-1) D') <= sum_{j <= j_max} w_j exp((alpha-1) j eps_SGM) + tau.
   Where j_max is large, contiguous groups of j are charged at their largest j: j eps_SGM(r, z/(s sqrt j))
   is non-decreasing in j (more factors, each with less noise; less noise is never more private).

Only integer orders up to ``MAX_ORDER`` are computed; a fractional order gets the chord of the convex
function K(alpha) = (alpha-1) D_alpha (K(1) = 0; van Erven & Harremoes 2014, arXiv:1206.2459, Cor. 2),
and orders above ``MAX_ORDER`` get +inf (a valid, trivially loose bound) so plan reports stay fast.
"""

from __future__ import annotations

import functools
import math
from typing import Tuple

import numpy as np
from scipy import special, stats

from metadp.core.rdp import orders_array, poisson_gaussian_rdp
from metadp.core.validation import check_count, check_positive, check_probability, check_real

__all__ = ["MAX_ORDER", "TAIL", "episodic_rdp", "truncation_point"]

MAX_ORDER = 64
_MAX_COMPONENTS = 64  # beyond this many j's, contiguous groups of j are charged at their largest j
_DENSE_COMPONENTS = 10**6  # up to this j_max the pmf of every j is summed; above it, tails bound the groups
TAIL = 1e-30  # Pr[J > j_max] aimed at; the charge is the computed tail times 2 (round-off margin)


def truncation_point(count: int, rate: float, tail: float = TAIL) -> Tuple[int, float]:
    """(j_max, tau): the smallest j_max with Pr[Bin(count, rate) > j_max] <= tail, and a certified
    upper bound tau on that probability (scipy's survival function, relative error ~1e-12, doubled)."""
    if rate == 0.0:
        return 0, 0.0
    lo, hi = 0, count
    while lo < hi:  # sf is non-increasing in j
        mid = (lo + hi) // 2
        if stats.binom.sf(mid, count, rate) <= tail:
            hi = mid
        else:
            lo = mid + 1
    return lo, 2.0 * float(stats.binom.sf(lo, count, rate)) if lo < count else 0.0


@functools.lru_cache(maxsize=256)
def _integer_curve(episodes: int, unit_rate: float, within_rate: float, z: float, shift: float,
                   top: int, tail: float) -> Tuple[np.ndarray, float]:
    """(eps at orders 2..top, tau) of the truncated pair (module docstring)."""
    j_max, tau = truncation_point(episodes, unit_rate, tail)
    orders = np.arange(2, top + 1, dtype=np.float64)
    if j_max == 0 or within_rate == 0.0 or math.isinf(z):
        return np.zeros_like(orders), tau
    if j_max <= _DENSE_COMPONENTS:
        log_w_all = stats.binom.logpmf(np.arange(1, j_max + 1), episodes, unit_rate)
        first = int(np.argmax(np.isfinite(log_w_all)))  # P_U = 1: all the mass at j = L
        starts = np.unique(np.linspace(first, j_max, _MAX_COMPONENTS + 1)[:-1].astype(int))
        log_w = np.logaddexp.reduceat(log_w_all, starts)
        js = np.append(starts[1:], j_max)  # each group of j's is charged at its largest j (the bound grows with j)
    else:
        log_w, js = _tail_bounded_groups(episodes, unit_rate, j_max)
    terms = np.empty((len(js) + 2, len(orders)))
    for i, j in enumerate(js):
        terms[i] = log_w[i] + (orders - 1.0) * j * poisson_gaussian_rdp(within_rate, z / (shift * math.sqrt(j)), orders)
    terms[-2] = stats.binom.logpmf(0, episodes, unit_rate)  # j = 0: no privacy loss
    terms[-1] = math.log(tau) if tau > 0 else -math.inf  # j > j_max: replaced by Q_j (loss 0)
    with np.errstate(over="ignore", invalid="ignore"):
        log_sum = special.logsumexp(terms, axis=0)
    curve = np.maximum(log_sum, 0.0) / (orders - 1.0)
    curve = np.where(np.isnan(curve), np.inf, curve)
    curve.setflags(write=False)
    return curve, tau


def _tail_bounded_groups(episodes: int, unit_rate: float, j_max: int) -> Tuple[np.ndarray, np.ndarray]:
    """(log weight bounds, largest j) of _MAX_COMPONENTS groups of j in 1..j_max, without a pmf per j (j_max
    of 10^9 would need gigabytes). A group's mass is bounded by the binomial tail that contains it (the
    lower tail below the mode, the upper tail above it, 1 around it), doubled for scipy's round-off:
    over-weighting a component only raises the RDP bound, so the curve stays an upper bound."""
    bounds = np.unique(np.linspace(1, j_max + 1, _MAX_COMPONENTS + 1).astype(np.int64))
    first, last = bounds[:-1], bounds[1:] - 1  # group i holds j in [first[i], last[i]]
    mode = math.floor((episodes + 1) * unit_rate)
    below = stats.binom.logcdf(last, episodes, unit_rate)  # Pr[J <= last]
    above = stats.binom.logsf(first - 1, episodes, unit_rate)  # Pr[J >= first]
    log_w = np.where(last < mode, below, np.where(first > mode, above, 0.0))
    return np.minimum(log_w + math.log(2.0), 0.0), last


def episodic_rdp(episodes: int, unit_rate: float, within_rate: float, noise_multiplier: float, orders,
                 shift: float = 2.0, tail: float = TAIL) -> Tuple[np.ndarray, float]:
    """(RDP curve at ``orders``, per-step delta charge tau) of one episodic step, both directions.

    The curve bounds the Renyi divergence of the truncated pair (P', Q) of the module docstring; a
    composition of T such steps is (eps, delta' + T tau)-DP where (eps, delta') is converted from the
    composed curve. Fractional orders get the chord of (alpha-1) eps between integers; above ``MAX_ORDER``, +inf.
    """
    episodes = check_count("episodes", episodes, minimum=1)
    unit_rate = check_probability("unit_rate", unit_rate)
    within_rate = check_probability("within_rate", within_rate)
    z = check_positive("noise_multiplier", noise_multiplier, allow_inf=True)
    shift = check_real("shift", shift, low=0.0, low_open=True)
    tail = check_real("tail", tail, low=0.0, high=1.0, low_open=True)
    orders = orders_array(orders)
    top = MAX_ORDER  # one cached curve serves every query (the refinement asks one order at a time)
    curve, tau = _integer_curve(episodes, float(unit_rate), float(within_rate), float(z), float(shift), top, tail)
    # K(alpha) = (alpha - 1) D_alpha = log E_Q[(dP/dQ)^alpha] is convex in alpha (Hoelder) with K(1) = 0,
    # so between integers n < alpha < n + 1 it lies below the chord: an upper bound at fractional orders
    k_int = np.concatenate([[0.0], curve * np.arange(1, top, dtype=np.float64)])  # K at 1, 2, ..., top
    out = np.full(orders.shape, np.inf)
    ok = np.isfinite(orders) & (orders <= top)
    a = orders[ok]
    n = np.minimum(np.floor(a), top - 1).astype(int)  # a in [n, n + 1], n >= 1
    frac = a - n
    with np.errstate(invalid="ignore"):
        k = np.where(frac == 0.0, k_int[n - 1], (1.0 - frac) * k_int[n - 1] + frac * k_int[n])
    out[ok] = np.where(np.isnan(k), np.inf, k / (a - 1.0))
    return out, tau
