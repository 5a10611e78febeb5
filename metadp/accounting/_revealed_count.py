"""An upper bound for Poisson-subsampled Gaussian releases that stays tight at tiny noise: the count revealed.

T steps each include the unit independently with probability q and release a sum plus N(0, z^2) (add/remove,
sensitivity 1). Reveal to the adversary which steps included the unit: the per-step pair
((1-q) N(0, z^2) + q N(1, z^2), N(0, z^2)) is a post-processing of ((B, N(B, z^2)), (B, N(0, z^2))) with
B ~ Bernoulli(q) under both (forget B), in either order of the neighbours, so the revealed pair dominates
(Zhu, Dong & Wang 2022, arXiv:2106.08567, Def. 7 and Thm 10 for the composition). Given the revealed count
K ~ Binomial(T, q) the release is a K-fold Gaussian, i.e. a Gaussian with mu_K = sqrt(K) / z (Dong, Roth &
Su 2019, arXiv:1905.02383, Cor. 3.3), whose profile is Balle & Wang's (2018, arXiv:1805.06530, Thm 8). So

    delta(eps) <= sum_k Bin(k; T, q) [Phi(mu_k / 2 - eps / mu_k) - e^eps Phi(-mu_k / 2 - eps / mu_k)],

the same in both orders (the Gaussian pair is symmetric). Where z is tiny, the subsampled pair's own
amplification is worth nothing beyond hiding K, so this is close to the truth: at q = 0.01, z = 1e-6, 1,000
steps, delta 1e-5 it gives 1.302e13 where the PLD lattice, whose window cannot hold losses of 5e11 a step to
its proven precision, falls back to RDP's 5.0e14 (which composes all 1,000 steps as if every one sampled the
unit). Everything is computed in log space; the binomial's upper tail beyond k_max is charged whole.
"""

from __future__ import annotations

import math
from typing import Optional, cast

import numpy as np
from scipy import special, stats

__all__ = ["revealed_count_epsilon"]

_TAIL_SHARE = 1e-3  # of delta, for the binomial tail beyond the largest count summed
_MAX_TERMS = 2_000_000  # counts summed at most (a wider binomial: no bound from here)


def _log_delta(eps: float, mu: np.ndarray) -> np.ndarray:
    """log of the mu-GDP profile at eps, for each mu > 0 (-inf where it is 0)."""
    a = mu / 2.0 - eps / mu
    b = -mu / 2.0 - eps / mu
    log_a, log_b = special.log_ndtr(a), special.log_ndtr(b)
    with np.errstate(divide="ignore"):
        return cast(np.ndarray, log_a + np.log(-np.expm1(np.minimum(eps + log_b - log_a, 0.0))))


def revealed_count_epsilon(rate: float, z: float, steps: int, delta: float) -> Optional[float]:
    """The certified epsilon at ``delta`` of the revealed-count pair (module docstring), rounded up; None where
    the binomial is too wide to sum (more than 2,000,000 counts)."""
    if rate <= 0.0 or steps == 0:
        return 0.0
    tail = _TAIL_SHARE * delta
    k_max = int(stats.binom.isf(tail, steps, rate)) + 1  # Pr[K > k_max] <= tail
    k_min = int(max(1, stats.binom.ppf(1e-300, steps, rate)))  # counts below carry no mass worth summing
    if k_max - k_min > _MAX_TERMS:
        return None
    k = np.arange(max(k_min, 1), k_max + 1, dtype=np.float64)
    log_pmf = stats.binom.logpmf(k, steps, rate)
    mu = np.sqrt(k) / z
    charged = float(stats.binom.sf(k_max, steps, rate)) + tail * 1e-6  # the tail, with room for its rounding

    def bound(eps: float) -> float:
        terms = log_pmf + _log_delta(eps, mu)
        return float(np.exp(special.logsumexp(terms))) * (1.0 + 1e-9) + charged if np.any(np.isfinite(terms)) \
            else charged

    if bound(0.0) <= delta:
        return 0.0
    if charged >= delta:
        return None
    hi = max(1.0, float(mu[-1] ** 2))  # mu^2 / 2 + mu sqrt(2 log(1/delta)) bounds the largest count's epsilon
    while bound(hi) > delta:
        hi *= 2.0
        if not math.isfinite(hi):
            return None
    lo = 0.0
    while hi - lo > 1e-10 * hi:
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if bound(mid) > delta else (lo, mid)
    return hi
