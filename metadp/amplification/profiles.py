"""Privacy profiles amplified by subsampling, by advanced joint convexity.

A privacy profile is delta(eps) = sup over neighbouring (D, D') of the hockey-stick divergence
E_{e^eps}(M(D) || M(D')) (Balle, Barthe & Gaboardi 2018, arXiv:1807.01647, Sec. 2). Here a profile is
any callable eps -> delta, vectorised over numpy arrays (``DominatingPair.profile`` is one).

Advanced joint convexity (ibid., Thm. 2): if mu = (1 - eta) mu0 + eta mu1 and
mu' = (1 - eta) mu0 + eta mu1', then with eps' = log(1 + eta (e^eps - 1)) and beta = e^eps' / e^eps,

    E_{e^eps'}(mu || mu') = eta E_{e^eps}(mu1 || (1 - beta) mu0 + beta mu1'),

and joint convexity over a coupling of the sampled inputs bounds the right side by eta delta(eps),
where delta is the base mechanism's profile **for the relation that the coupling induces between the
sampled inputs**. Read backwards, the amplified profile at a given eps' is eta delta(eps) with

    eps = log(1 + (e^eps' - 1) / eta),

computed here in log space (no overflow for eps' in the hundreds, no cancellation for eta = 1e-9).

Each amplifier returns an :class:`AmplifiedProfile`; :func:`epsilon_for_delta` inverts any profile.
Amplified profiles are defined for eps' >= 0 (the range of the theorems).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Tuple

import numpy as np
from scipy import stats

from metadp.core.validation import check_count, check_delta, check_positive, check_probability
from metadp.core._logmath import log_expm1

__all__ = [
    "AmplifiedProfile",
    "amplify_poisson",
    "amplify_without_replacement",
    "amplify_with_replacement",
    "epsilon_for_delta",
]

Profile = Callable[[np.ndarray], np.ndarray]

_EPS = float(np.finfo(float).eps)
# The base epsilon is lowered, and the amplified delta raised, by a few ulps: log/exp each carry a
# few ulps and the profile is non-increasing, so both roundings err on the pessimistic side.
_EPS_DOWN = 1.0 - 8 * _EPS
_DELTA_UP = 1.0 + 8 * _EPS
_BINOMIAL_TAIL = 1e-30  # with-replacement sum: copies beyond this tail mass count with delta_k = 1


@dataclass(frozen=True)
class AmplifiedProfile:
    """delta'(eps') = weight * base(eps) at eps = log(1 + (e^eps' - 1) / rate), for eps' >= 0.

    Attributes:
        base: the base mechanism's profile (callable, vectorised), for ``relation``.
        rate: the rate in eps' = log(1 + rate (e^eps - 1)), in [0, 1].
        weight: the factor on the base delta, in [0, 1].
        relation: the neighbouring relation the base profile must be computed under
            (``"add_remove"`` or ``"substitute"``).
        theorem: the statement implemented, with its citation.
    """

    base: Profile
    rate: float
    weight: float
    relation: str
    theorem: str

    def base_epsilon(self, epsilon) -> np.ndarray:
        """eps = log(1 + (e^eps' - 1) / rate), the base epsilon paired with eps' (before rounding down)."""
        eps_prime = _check_epsilon(epsilon)
        if self.rate == 0.0:  # only eps' = 0 is reachable; every larger eps' pairs with eps = inf
            return np.where(eps_prime == 0.0, 0.0, np.inf)
        with np.errstate(divide="ignore"):
            return np.logaddexp(0.0, np.asarray(log_expm1(eps_prime)) - math.log(self.rate))

    def __call__(self, epsilon) -> np.ndarray:
        """The amplified delta at eps' = ``epsilon`` (array-like, every entry >= 0, +inf allowed)."""
        eps_prime = _check_epsilon(epsilon)
        if self.rate == 0.0 or self.weight == 0.0:  # nothing of the differing element is ever used
            return np.zeros_like(eps_prime)
        if self.rate == 1.0 and self.weight == 1.0:  # no amplification: exactly the base profile
            return np.asarray(self.base(eps_prime), dtype=np.float64)
        eps = self.base_epsilon(eps_prime) * _EPS_DOWN
        delta = np.asarray(self.base(eps), dtype=np.float64)
        return np.minimum(self.weight * delta * _DELTA_UP, 1.0)


def amplify_poisson(profile: Profile, rate: float) -> AmplifiedProfile:
    """Poisson subsampling at rate q, add/remove relation (Balle et al. 2018, arXiv:1807.01647, Thm. 8).

    Each record enters the sample independently with probability q; D and D' differ by adding or
    removing one record z. The amplified profile satisfies

        delta'(eps') <= q delta(eps),   eps' = log(1 + q (e^eps - 1)),

    with delta the base mechanism's **add/remove** profile (the larger of both directions).

    Derivation. Remove direction, D = D' + z: mu = (1 - q) omega + q omega_z and mu' = omega, with
    omega the law of M on a sample of D' and omega_z the same with z added. Thm. 2 with mu0 = mu1' = omega
    gives E_{e^eps'}(mu || mu') = q E_{e^eps}(omega_z || omega) <= q delta(eps) (joint convexity over the
    coupling "same sample, with and without z"); this is Thm. 8, tight for dominating pairs. Add
    direction: E_{a'}(omega || (1 - q) omega + q omega_z) = (1 - a'(1 - q)) E_{a_add}(omega || omega_z)
    with a' = e^eps' and a_add = q a' / (1 - a'(1 - q)) (and 0 when a'(1 - q) >= 1); the factor equals
    q a' / a_add and a_add >= a = e^eps (their difference has the sign of (a' - 1)^2 (1 - q)), so this
    direction is at most q delta(eps) as well.

    Args:
        profile: the base profile under add/remove (vectorised callable eps -> delta).
        rate: the sampling rate q in [0, 1]. q = 0 gives the zero profile, q = 1 the base profile.

    Returns:
        The amplified profile, a callable eps' -> delta' for eps' >= 0.

    Raises:
        ValueError: if rate is outside [0, 1].
    """
    q = check_probability("rate", rate)
    return AmplifiedProfile(profile, q, q, "add_remove",
                            "Balle, Barthe & Gaboardi 2018 (arXiv:1807.01647), Thm. 8 (Poisson "
                            "subsampling, add/remove) via advanced joint convexity (Thm. 2)")


def amplify_without_replacement(profile: Profile, m: int, n: int) -> AmplifiedProfile:
    """Sampling m of n without replacement, substitution relation (Balle et al. 2018, Thm. 9).

    D and D' (both of size n) differ in one record, replaced; the sample is a uniformly random subset
    of m records. With eta = m / n,

        delta'(eps') <= eta delta(eps),   eps' = log(1 + eta (e^eps - 1)),

    with delta the base mechanism's **substitution** profile: the coupling draws the same positions
    from both datasets, so the two samples differ in the replaced record with probability eta and
    are identical otherwise (Thm. 2 with mu1, mu1' the samples containing it, mu0 those that do not;
    mu1 and mu0 are coupled by replacing the record with a uniformly chosen unsampled one, again a
    substitution). For a clipped sum the substitution sensitivity is 2C, not C (DESIGN.md 3.3).

    Args:
        profile: the base profile under substitution (vectorised callable eps -> delta).
        m: sample size, an integer in [0, n].
        n: dataset size, an integer >= 1.

    Returns:
        The amplified profile, a callable eps' -> delta' for eps' >= 0.

    Raises:
        ValueError: if n < 1 or m is not in [0, n].
    """
    n = check_count("n", n, minimum=1)
    m = check_count("m", m, minimum=0)
    if m > n:
        raise ValueError(f"m must be an integer in [0, n] = [0, {n}], got {m!r}")
    eta = m / n
    return AmplifiedProfile(profile, eta, eta, "substitute",
                            "Balle, Barthe & Gaboardi 2018 (arXiv:1807.01647), Thm. 9 (sampling "
                            "without replacement, substitution) via advanced joint convexity (Thm. 2)")


def amplify_with_replacement(group_profile: Callable[[int, np.ndarray], np.ndarray], m: int,
                             n: int) -> AmplifiedProfile:
    """m draws with replacement from n records, substitution relation (Balle et al. 2018, Thm. 10).

    D and D' (size n) differ in one record, replaced. Each of the m draws picks one of the n records
    uniformly, so the replaced record appears K ~ Binomial(m, 1/n) times in the sample. With
    eta = P(K >= 1) = 1 - (1 - 1/n)^m,

        delta'(eps') <= sum_{k=1}^{m} Bin(k; m, 1/n) delta_k(eps),   eps' = log(1 + eta (e^eps - 1)),

    where delta_k is the base mechanism's profile for inputs that differ by **k substitutions** (its
    group profile; for a Gaussian sum with clip C, sensitivity 2kC).

    Derivation (the statement of Thm. 10, re-derived from Thm. 2). Draw the same indices for D and D';
    conditionally on K = k the two samples differ in k positions. With mu0 the law given K = 0 (the
    same for both) and mu1 = sum_{k>=1} Bin(k)/eta mu_k (likewise mu1'), Thm. 2 gives
    E_{e^eps'}(mu || mu') = eta E_{e^eps}(mu1 || (1 - beta) mu0 + beta mu1'). Joint convexity bounds
    E(mu1 || mu1') and E(mu1 || mu0) (couple a sample with k copies to one with none by redrawing
    those k positions among the other n - 1 records: k substitutions) by sum_k Bin(k)/eta delta_k(eps);
    the same holds with the datasets swapped. Binomial terms beyond a tail mass of 1e-30 are counted
    with delta_k = 1 (pessimistic).

    Args:
        group_profile: callable (k, eps) -> delta_k(eps), vectorised over eps, for k = 1..m.
        m: number of draws, an integer >= 0.
        n: dataset size, an integer >= 1.

    Returns:
        The amplified profile, a callable eps' -> delta' for eps' >= 0 (weight eta, base the binomial
        mixture of group profiles divided by eta).

    Raises:
        ValueError: if m < 0 or n < 1.
    """
    n = check_count("n", n, minimum=1)
    m = check_count("m", m, minimum=0)
    if m == 0:
        eta = 0.0
    elif n == 1:
        eta = 1.0
    else:
        eta = -math.expm1(m * math.log1p(-1.0 / n))  # 1 - (1 - 1/n)^m without cancellation
    base = _BinomialGroupMixture(group_profile, *_binomial_terms(m, n, eta))
    return AmplifiedProfile(base, eta, eta, "substitute",
                            "Balle, Barthe & Gaboardi 2018 (arXiv:1807.01647), Thm. 10 (sampling "
                            "with replacement, substitution, group profiles) via advanced joint "
                            "convexity (Thm. 2)")


def _binomial_terms(m: int, n: int, eta: float) -> Tuple[np.ndarray, np.ndarray, float]:
    """k = 1..K, Bin(k; m, 1/n) / eta, and the remaining tail mass P(K > K_max) / eta."""
    if m == 0 or eta == 0.0:
        return np.zeros(0, dtype=np.int64), np.zeros(0), 0.0
    p = 1.0 / n
    lo, hi = 1, m  # smallest k_max in [1, m] with P(K > k_max) <= tail (sf is non-increasing in k)
    while lo < hi:
        mid = (lo + hi) // 2
        if stats.binom.sf(mid, m, p) <= _BINOMIAL_TAIL:
            hi = mid
        else:
            lo = mid + 1
    k_max = lo
    ks = np.arange(1, k_max + 1)
    weights = stats.binom.pmf(ks, m, p) / eta
    tail = float(stats.binom.sf(k_max, m, p)) / eta if k_max < m else 0.0
    return ks, weights, tail


@dataclass(frozen=True, eq=False)
class _BinomialGroupMixture:
    """eps -> sum_k w_k group_profile(k, eps) + tail (tail copies counted with delta_k = 1)."""

    group_profile: Callable[[int, np.ndarray], np.ndarray]
    ks: np.ndarray
    weights: np.ndarray
    tail: float

    def __call__(self, epsilon) -> np.ndarray:
        eps = np.asarray(epsilon, dtype=np.float64)
        total = np.full(eps.shape, self.tail)
        for k, w in zip(self.ks, self.weights):
            total = total + w * np.asarray(self.group_profile(int(k), eps), dtype=np.float64)
        return np.minimum(total, 1.0)


def epsilon_for_delta(profile: Profile, delta: float, *, tolerance: float = 1e-12) -> float:
    """The smallest eps >= 0 with profile(eps) <= delta, rounded up (an upper bound).

    Brackets the root by doubling from eps = 1 and bisects, keeping the upper end, at which the
    profile has been evaluated and is <= delta. For a non-increasing profile the result is within
    ``tolerance * eps`` above the smallest such eps (or below 2^-150 when that is smaller).

    Args:
        profile: a non-increasing privacy profile (vectorised callable eps -> delta).
        delta: the target delta, in (0, 1).
        tolerance: relative width of the final bracket, > 0.

    Returns:
        eps (a float), 0.0 if profile(0) <= delta, or math.inf if profile(eps) > delta up to eps = 2^16.

    Raises:
        ValueError: if delta is outside (0, 1) or tolerance <= 0.
    """
    delta = check_delta("delta", delta)
    tolerance = check_positive("tolerance", tolerance)

    def value(eps: float) -> float:
        # a profile is elementwise: a float64 scalar goes through as a 0-d array would
        return float(np.asarray(profile(np.float64(eps)), dtype=np.float64))  # type: ignore[arg-type]

    if value(0.0) <= delta:
        return 0.0
    lo, hi = 0.0, 1.0
    while value(hi) > delta:
        lo, hi = hi, 2.0 * hi
        if hi > 2.0 ** 16:
            return math.inf
    for _ in range(200):  # 200 halvings reach 2^-150 from [0, 2^16] even when lo stays at 0
        if hi - lo <= tolerance * hi:
            break
        mid = 0.5 * (lo + hi)
        if not lo < mid < hi:
            break
        if value(mid) <= delta:
            hi = mid
        else:
            lo = mid
    return hi


def _check_epsilon(epsilon) -> np.ndarray:
    eps = np.asarray(epsilon, dtype=np.float64)
    if np.any(np.isnan(eps)) or np.any(eps < 0):
        bad = eps[np.isnan(eps) | (eps < 0)].flat[0]
        raise ValueError(f"epsilon must be in [0, inf] (amplified profiles are defined for eps' >= 0), "
                         f"got {bad!r}")
    return eps
