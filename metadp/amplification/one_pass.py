"""One pass over the units: every unit (client, task) is used in exactly one of T noisy steps.

How units are assigned to steps decides the accounting (DESIGN.md sec. 3.9). Each step releases a
clipped sum (clip norm C per unit) plus N(0, (z C)^2 I); the relation is add/remove of one unit.

(a) **Random allocation** ("balls in bins"): each unit independently picks one of the T steps
    uniformly. Stacking the T releases, a unit's presence shifts one uniformly random coordinate
    block, and the whole pass is dominated by the pair (in units of C, one coordinate per step)

        add:     P = (1/T) sum_t N(e_t, z^2 I_T)   vs   Q = N(0, z^2 I_T),
        remove:  P = N(0, z^2 I_T)   vs   Q = (1/T) sum_t N(e_t, z^2 I_T),

    (Chua et al. 2025, "Balls-and-Bins Sampling for DP-SGD", arXiv:2412.16802; Feldman & Shenfeld
    2025, "Privacy amplification by random allocation", arXiv:2502.08202). Its privacy loss is
    L_add(x) = log((1/T) sum_t exp((x_t - 1/2) / z^2)), a T-dimensional quantity with no closed-form
    law, so delta(eps) = E_P[(1 - e^{eps - L})_+] is estimated by Monte Carlo and certified by a
    one-sided upper confidence bound (:func:`random_allocation_delta`, :func:`random_allocation_epsilon`).
    The integrand lies in [0, 1], so two distribution-free bounds apply:

    * ``"kl"`` (default): Hoeffding 1963 (J. Amer. Statist. Assoc. 58, Thm. 1), the relative-entropy
      form, valid for independent variables in [0, 1]: Pr[mean_n <= mu - t] <= exp(-n kl(mu - t || mu)),
      so mu <= sup{m >= mean_n : n kl(mean_n || m) <= log(1/beta)} with probability >= 1 - beta.
      At small delta it is about mean + sqrt(2 mean log(1/beta)/n) + log(1/beta)/n.
    * ``"bernstein"``: the empirical Bernstein bound of Maurer & Pontil 2009 (arXiv:0907.3740,
      Thm. 4): mu <= mean_n + sqrt(2 V_n log(2/beta)/n) + 7 log(2/beta)/(3(n-1)), V_n the unbiased
      sample variance; better when the integrand's variance is far below its mean.

    Deterministic bounds (RDP of both orders of the pair, and a certified lower bound) are in
    ``metadp.amplification.allocation_bounds``; Feldman & Shenfeld's Poisson-domination theorem is
    not implemented (its exact constants were not verified). Poisson subsampling at rate 1/T for T steps is reported alongside as
    a **proxy** (``metadp.accounting.allocation.poisson_proxy_epsilon``): close to the allocation bound in their experiments,
    but not a certified bound for random allocation.

(b) **Shuffle, then cut into equal batches**: only lower bounds are known, and Poisson accounting
    understates the true epsilon by up to ~20x at z <= 2 (Chua et al. 2024, "How Private are DP-SGD
    Implementations?", arXiv:2403.17673). :func:`shuffle_epsilon` reports the single-Gaussian epsilon
    (no amplification), which is valid: each unit touches one step.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import Any, Callable, Dict, Optional, Tuple

import numpy as np
from scipy import optimize, special

from metadp.core.validation import check_count, check_delta, check_positive, check_real

__all__ = [
    "MC_BOUNDS",
    "MonteCarloDelta",
    "AllocationEpsilon",
    "random_allocation_delta",
    "random_allocation_epsilon",
    "gaussian_epsilon",
    "shuffle_epsilon",
    "SHUFFLE_WARNING",
]

MC_BOUNDS = ("kl", "bernstein")
_DIRECTIONS = ("add", "remove", "both")
_CHUNK = 1 << 20  # normals drawn per chunk (8 MiB)
# Fixed multipliers of the pilot epsilon tried on the confirmation sample (Bonferroni over them).
_LADDER = (1.0, 1.01, 1.02, 1.05, 1.1, 1.2, 1.5, 2.0)
_MC_ROUND_UP = 1.0 + 1e-9  # covers the float error of the sample mean and of the root finding


# -- Monte Carlo bounds for [0, 1]-valued samples ----------------------------------------------------


def _kl_bernoulli(p: float, m: float) -> float:
    """kl(p || m) = p log(p/m) + (1-p) log((1-p)/(1-m)) for 0 <= p < 1, 0 < m < 1, accurate for small
    p and m (log1p keeps the second term's digits)."""
    return float(special.xlogy(p, p) - special.xlogy(p, m)) + (1.0 - p) * (math.log1p(-p) - math.log1p(-m))


def _kl_upper(mean: float, n: int, log_inv_beta: float) -> float:
    """sup{m in [mean, 1]: n kl(mean || m) <= log(1/beta)} (Hoeffding 1963, Thm. 1), rounded up."""
    c = log_inv_beta / n
    if mean >= 1.0:
        return 1.0
    if mean <= 0.0:  # kl(0 || m) = -log(1 - m)
        return min(1.0, -math.expm1(-c) * _MC_ROUND_UP)
    hi = 1.0 - 1e-16
    if _kl_bernoulli(mean, hi) <= c:
        return 1.0
    root = optimize.brentq(lambda m: _kl_bernoulli(mean, m) - c, mean, hi, xtol=1e-300, rtol=1e-14)
    return min(1.0, root * _MC_ROUND_UP)


def _bernstein_upper(mean: float, mean_sq: float, n: int, log_inv_beta: float) -> float:
    """Maurer & Pontil 2009 (arXiv:0907.3740), Thm. 4, one-sided, rounded up."""
    log_term = math.log(2.0) + log_inv_beta
    variance = max(0.0, (mean_sq - mean * mean) * n / (n - 1))
    bound = mean + math.sqrt(2.0 * variance * log_term / n) + 7.0 * log_term / (3.0 * (n - 1))
    return min(1.0, bound * _MC_ROUND_UP)


class _LossSample:
    """Sorted privacy-loss samples L_i ~ P; delta(eps) = E[(1 - e^{eps - L})_+] and its bounds."""

    def __init__(self, losses: np.ndarray):
        self.losses = np.sort(losses)
        self.n = len(losses)

    def moments(self, eps: float) -> Tuple[float, float]:
        tail = self.losses[np.searchsorted(self.losses, eps, side="right"):]
        values = -np.expm1(eps - tail)  # in (0, 1]
        return float(values.sum()) / self.n, float(np.dot(values, values)) / self.n

    def upper(self, eps: float, log_inv_beta: float, bound: str, n: Optional[int] = None) -> Tuple[float, float]:
        """(estimate, upper confidence bound) of delta(eps); with ``n`` given, the bound a sample of
        size n with these moments would give (a prediction, not a certificate)."""
        mean, mean_sq = self.moments(eps)
        n = self.n if n is None else n
        if bound == "kl":
            return mean, _kl_upper(mean, n, log_inv_beta)
        return mean, _bernstein_upper(mean, mean_sq, n, log_inv_beta)


# -- the random-allocation privacy loss ---------------------------------------------------------------


def _allocation_losses(z: float, T: int, n: int, rng: np.random.Generator, direction: str) -> np.ndarray:
    """n samples of the privacy loss log(dP/dQ) under P for one direction (module docstring).

    By symmetry the unit sits in step 1 under the mixture. u_t = (x_t - 1/2) / z^2 and
    L_add = logsumexp(u) - log T; "remove" draws x ~ N(0, z^2 I) and negates L_add.
    """
    rows = max(1, _CHUNK // T)
    out = np.empty(n)
    offset = np.full(T, -0.5 / z**2)
    offset_add = offset.copy()
    offset_add[0] += 1.0 / z**2  # x_1 = 1 + z g_1 under the mixture
    for start in range(0, n, rows):
        m = min(rows, n - start)
        g = rng.standard_normal((m, T))  # (m, T): one row per simulated pass
        u = g / z + (offset_add if direction == "add" else offset)
        loss = special.logsumexp(u, axis=1) - math.log(T)
        out[start:start + m] = loss if direction == "add" else -loss
    return out


def _check_mc(z, T, n_samples, confidence, rng, direction, bound):
    z = check_positive("z", z)
    T = check_count("T", T, minimum=1)
    n_samples = check_count("n_samples", n_samples, minimum=2)
    confidence = check_real("confidence", confidence, low=0.0, high=1.0, low_open=True, high_open=True)
    if direction not in _DIRECTIONS:
        raise ValueError(f"direction must be one of {_DIRECTIONS}, got {direction!r}")
    if bound not in MC_BOUNDS:
        raise ValueError(f"bound must be one of {MC_BOUNDS}, got {bound!r}")
    if rng is None or isinstance(rng, (int, np.integer)):
        rng = np.random.default_rng(rng)
    elif not isinstance(rng, np.random.Generator):
        raise ValueError(f"rng must be a numpy Generator, an int seed or None, got {type(rng).__name__}")
    directions = ("add", "remove") if direction == "both" else (direction,)
    return z, T, n_samples, confidence, rng, directions


@dataclasses.dataclass(frozen=True)
class MonteCarloDelta:
    """A Monte Carlo delta(eps) with its certified one-sided upper confidence bound.

    Attributes:
        epsilon: the eps at which delta was estimated.
        estimate: the sample mean (the maximum over the directions estimated).
        upper: certified upper bound: delta(eps) <= upper with probability >= ``confidence`` over
            the sampling (over all directions jointly).
        confidence: 1 - beta.
        n_samples: samples per direction.
        direction: ``"add"``, ``"remove"`` or ``"both"``.
        bound: ``"kl"`` or ``"bernstein"`` (module docstring).
        per_direction: ((direction, estimate, upper), ...).
    """

    epsilon: float
    estimate: float
    upper: float
    confidence: float
    n_samples: int
    direction: str
    bound: str
    per_direction: Tuple[Tuple[str, float, float], ...]


def random_allocation_delta(z: float, T: int, eps: float, n_samples: int = 200_000, confidence: float = 0.95,
                            rng=None, direction: str = "both", bound: str = "kl") -> MonteCarloDelta:
    """delta(eps) of one random-allocation pass, by Monte Carlo with a certified upper bound.

    The pass (each unit in one uniformly random step of T, Gaussian noise multiplier z per step,
    add/remove of one unit) is dominated by the pair of the module docstring (Chua et al. 2025,
    arXiv:2412.16802; Feldman & Shenfeld 2025, arXiv:2502.08202). Samples of its privacy loss L are
    drawn in vectorised chunks (cost O(n_samples T)), and delta(eps) = E_P[(1 - e^{eps - L})_+] is
    bounded by the one-sided bound ``bound`` at level 1 - beta (beta = 1 - confidence; split
    Bonferroni-wise, beta / 2 each, over the two directions of ``"both"``). T = 1 is the Gaussian
    mechanism itself (a useful check against the analytic profile).

    Args:
        z: noise multiplier per step (sigma / C), > 0 and finite.
        T: number of steps in the pass, an integer >= 1.
        eps: the epsilon at which to bound delta, finite and >= 0.
        n_samples: Monte Carlo samples per direction, >= 2.
        confidence: 1 - beta in (0, 1).
        rng: a numpy Generator (or an int seed; None draws fresh entropy, not reproducible).
        direction: ``"add"``, ``"remove"`` or ``"both"`` (the add/remove relation needs both).
        bound: ``"kl"`` (Hoeffding 1963, Thm. 1) or ``"bernstein"`` (Maurer & Pontil 2009, Thm. 4).

    Raises:
        ValueError: on out-of-range arguments (the message names the parameter and the range).
    """
    z, T, n_samples, confidence, rng, directions = _check_mc(z, T, n_samples, confidence, rng, direction, bound)
    eps = check_real("eps", eps, low=0.0)
    log_inv_beta = math.log(len(directions) / (1.0 - confidence))
    rows = []
    for d in directions:
        estimate, upper = _LossSample(_allocation_losses(z, T, n_samples, rng, d)).upper(eps, log_inv_beta, bound)
        rows.append((d, estimate, upper))
    return MonteCarloDelta(eps, max(r[1] for r in rows), max(r[2] for r in rows), confidence, n_samples,
                           direction, bound, tuple(rows))


@dataclasses.dataclass(frozen=True)
class AllocationEpsilon:
    """A certified epsilon for one random-allocation pass, with the numbers it should be read beside.

    Attributes:
        epsilon: certified upper bound at ``delta``, holding with probability >= ``confidence`` over
            the Monte Carlo sampling; never above ``gaussian_epsilon`` (which holds surely).
        delta: the target delta.
        confidence: 1 - beta of the Monte Carlo certificate.
        method: ``"monte-carlo"`` or ``"gaussian"`` (no amplification could be certified).
        delta_upper: the certified upper bound on delta(epsilon) (nan for ``"gaussian"``).
        gaussian_epsilon: the single-Gaussian epsilon (no amplification): exact and always valid.
        poisson_proxy_epsilon: PROXY, not a bound for random allocation: PLD epsilon of Poisson
            subsampling at rate 1/T over T steps (nan when no ``proxy`` was given).
        n_pilot: pilot samples per direction (used only to choose the epsilons to test).
        n_samples: confirmation samples per direction.
        notes: how the number was obtained, and any caveat.
    """

    epsilon: float
    delta: float
    confidence: float
    method: str
    delta_upper: float
    gaussian_epsilon: float
    poisson_proxy_epsilon: float
    n_pilot: int
    n_samples: int
    notes: Tuple[str, ...] = ()


def random_allocation_epsilon(z: float, T: int, delta: float, n_samples: int = 200_000,
                              confidence: float = 0.95, rng=None, direction: str = "both", bound: str = "kl",
                              n_pilot: Optional[int] = None,
                              proxy: Optional[Callable[[float, int, float], float]] = None) -> AllocationEpsilon:
    """Certified upper bound on epsilon at ``delta`` for one random-allocation pass (Monte Carlo).

    Choosing epsilon by looking at the same sample that certifies it would void the confidence
    level, so the search is split (the selection never sees the confirmation sample):

    1. pilot: on ``n_pilot`` fresh samples per direction, bisect for the smallest eps at which a
       confirmation sample with the pilot's moments would certify delta (the bound evaluated at the
       pilot moments with n = n_samples); this only picks a candidate eps_0;
    2. confirmation: on ``n_samples`` new samples per direction, evaluate the upper bound at the
       fixed ladder eps_0 * (1, 1.01, 1.02, 1.05, 1.1, 1.2, 1.5, 2), with a Bonferroni split of beta
       over the m ladder points and the directions (beta / (m d) each), and return the smallest
       ladder eps whose bound is <= delta. All m d bounds hold jointly with probability >= 1 - beta.

    The result is capped by the exact single-Gaussian epsilon (a pass touches each unit in one step,
    and by joint convexity of the hockey-stick divergence the allocation pair is no worse than one
    Gaussian), which is returned, with a note, when the Monte Carlo sample cannot certify less
    (e.g. delta below about log(m d / beta) / n_samples). T = 1 returns the Gaussian epsilon exactly.

    Args:
        z, T, n_samples, confidence, rng, direction, bound: as :func:`random_allocation_delta`.
        delta: target delta in (0, 1).
        n_pilot: pilot samples per direction (default max(n_samples // 4, 1000)).
        proxy: a function (z, T, delta) -> epsilon to report beside the bound as the Poisson proxy,
            e.g. ``metadp.accounting.allocation.poisson_proxy_epsilon`` (PLD, ~1 s); this layer has no
            accountant of its own.

    Raises:
        ValueError: on out-of-range arguments.
    """
    z, T, n_samples, confidence, rng, directions = _check_mc(z, T, n_samples, confidence, rng, direction, bound)
    delta = check_delta("delta", delta)
    n_pilot = check_count("n_pilot", max(n_samples // 4, 1000) if n_pilot is None else n_pilot, minimum=2)
    eps_gauss = gaussian_epsilon(z, delta)
    eps_proxy = float(proxy(z, T, delta)) if proxy is not None else math.nan
    result: Dict[str, Any] = dict(delta=delta, confidence=confidence, gaussian_epsilon=eps_gauss,
                                  poisson_proxy_epsilon=eps_proxy, n_pilot=n_pilot, n_samples=n_samples)
    if T == 1 or eps_gauss == 0.0:
        return AllocationEpsilon(epsilon=eps_gauss, method="gaussian", delta_upper=math.nan,
                                 notes=("exact: the pass is a single Gaussian mechanism",), **result)
    log_inv_beta = math.log(len(_LADDER) * len(directions) / (1.0 - confidence))
    pilot = [_LossSample(_allocation_losses(z, T, n_pilot, rng, d)) for d in directions]
    eps0 = _pilot_epsilon(pilot, delta, eps_gauss, log_inv_beta, bound, n_samples)
    ladder = [e for e in sorted({eps0 * f for f in _LADDER}) if e < eps_gauss]
    fresh = [_LossSample(_allocation_losses(z, T, n_samples, rng, d)) for d in directions]
    for eps in ladder:
        upper = max(s.upper(eps, log_inv_beta, bound)[1] for s in fresh)
        if upper <= delta:
            note = (f"Monte Carlo ({bound} bound), pilot eps {eps0:.6g}, certified at ladder point {eps:.6g}; "
                    f"confidence {confidence:g} over the sampling")
            return AllocationEpsilon(epsilon=eps, method="monte-carlo", delta_upper=upper, notes=(note,), **result)
    note = (f"Monte Carlo could not certify an epsilon below the single-Gaussian one with {n_samples} samples "
            f"(needs roughly n_samples >> log({len(_LADDER) * len(directions)}/beta)/delta "
            f"= {log_inv_beta / delta:.3g}); the single-Gaussian epsilon is reported")
    return AllocationEpsilon(epsilon=eps_gauss, method="gaussian", delta_upper=math.nan, notes=(note,), **result)


def _pilot_epsilon(pilot, delta: float, eps_max: float, log_inv_beta: float, bound: str, n: int) -> float:
    """Smallest eps in [0, eps_max] whose predicted size-n bound (max over directions) is <= delta."""
    def fails(eps):
        return max(s.upper(eps, log_inv_beta, bound, n)[1] for s in pilot) > delta
    if not fails(0.0):
        return 0.0
    if fails(eps_max):
        return eps_max
    lo, hi = 0.0, eps_max
    while hi - lo > 1e-6 * hi:
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if fails(mid) else (lo, mid)
    return hi


# -- the comparison numbers ---------------------------------------------------------------------------


def gaussian_epsilon(z: float, delta: float) -> float:
    """Exact epsilon at ``delta`` of the Gaussian mechanism with noise multiplier z, rounded up.

    Inverts the analytic Gaussian profile delta(eps) = Phi(1/(2z) - eps z) - e^eps Phi(-1/(2z) - eps z)
    (Balle & Wang 2018, arXiv:1805.06530, Thm. 8) by bisection to 1e-12 relative, returning the
    right end of the bracket (where delta(eps) <= target). Same for add/remove and, with z taken
    relative to the substitution sensitivity, for substitution.

    Raises:
        ValueError: on z <= 0 or not finite, or delta outside (0, 1).
    """
    z = check_positive("z", z)
    delta = check_delta("delta", delta)
    if z < 1e-50:  # the pair's losses overflow float64; infinity is an upper bound (and the truth is ~1/(2 z^2))
        return math.inf
    if z > 1e50:  # z^2 overflows: delta(0) is the total variation 2 Phi(1/(2z)) - 1 <= 1 / (z sqrt(2 pi)) < 0.4 / z;
        # else the classic sqrt(2 log(1.25 / delta)) / z (Dwork & Roth 2014, Thm A.1; valid where it is < 1)
        return 0.0 if 0.4 / z <= delta else math.sqrt(2.0 * math.log(1.25 / delta)) / z
    profile = functools.partial(_gaussian_profile, z)
    if profile(0.0) <= delta:
        return 0.0
    hi = 1.0
    while profile(hi) > delta:
        hi *= 2.0
    lo = 0.0 if hi == 1.0 else hi / 2.0
    while hi - lo > 1e-12 * hi:
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if profile(mid) > delta else (lo, mid)
    return hi


def _gaussian_profile(z: float, eps: float) -> float:
    """delta(eps) = Phi(a) - e^eps Phi(b), a = 1/(2z) - eps z, b = -1/(2z) - eps z, in log space:
    Phi(a) (1 - exp(eps + log Phi(b) - log Phi(a))). e^eps itself overflows past eps = 709, where the
    direct form gave inf x 0 = nan, which the bisection read as 'delta is small' (it returned 709.78 for every
    z below 0.031 at delta 1e-6: not an upper bound; the truth there is above 1/(2 z^2))."""
    a, b = 0.5 / z - eps * z, -0.5 / z - eps * z
    log_a, log_b = float(special.log_ndtr(a)), float(special.log_ndtr(b))
    return max(0.0, math.exp(log_a) * -math.expm1(min(eps + log_b - log_a, 0.0)))


SHUFFLE_WARNING = (
    "shuffle-and-partition (equal-size batches, one pass): no amplification is certified, so the "
    "single-Gaussian epsilon is reported. Poisson accounting at rate 1/T would understate epsilon for "
    "this sampler (by up to ~20x at noise multiplier <= 2: Chua et al. 2024, arXiv:2403.17673); use "
    "random allocation (each unit in one uniformly random step) to claim amplification."
)


def shuffle_epsilon(z: float, delta: float) -> Tuple[float, str]:
    """Epsilon of one shuffle-and-partition pass: the single-Gaussian epsilon, with a warning.

    Each unit lands in exactly one of the equal-size batches; conditioned on the (data-independent)
    partition, its presence moves one step's clipped sum by at most C, so every conditional pass is
    dominated by one Gaussian with multiplier z, and so is their mixture (joint convexity of the
    hockey-stick divergence). Amplification from the shuffle is real but only lower bounds are known
    (Chua et al. 2024, arXiv:2403.17673), so none is claimed. Assumes the partition's shape does not
    depend on the unit's presence ("zero-out" add/remove); for substitution pass z relative to the
    substitution sensitivity (2C for a clipped sum).

    Returns:
        (epsilon, warning): the exact analytic-Gaussian epsilon (:func:`gaussian_epsilon`) and
        ``SHUFFLE_WARNING``.
    """
    return gaussian_epsilon(z, delta), SHUFFLE_WARNING
