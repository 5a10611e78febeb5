"""Exact composition of Gaussian mechanisms for the PLD accountant: n Gaussian releases with
sensitivity/noise ratios mu_i compose to mu-GDP with mu^2 = sum mu_i^2 (Dong, Roth & Su 2022,
"Gaussian Differential Privacy", Cor. 3.3), whose profile is the analytic Gaussian one,
delta(eps) = Phi(mu/2 - eps/mu) - e^eps Phi(-mu/2 - eps/mu) (Balle & Wang 2018, Thm 8). No lattice, no
truncation: the only error is the round-off of evaluating it, bounded from ``ndtr``'s accuracy
(``metadp.mechanisms.gaussian.ndtr_error``) and the rounding of its arguments, so both bounds of the
interval are certified and within a few ulps of each other where the difference does not cancel.
"""

from __future__ import annotations

import math
from typing import List, Optional, Sequence, Tuple

from scipy import special

from metadp.accounting._pld_lattice import PairItem
from metadp.mechanisms.gaussian import GaussianMixturePair, ndtr_error

__all__: List[str] = []

_U = 2.0**-53
_TINY = 1e-290  # below this a CDF value carries no relative accuracy: the closed form is not used


def gaussian_mu(items: Sequence[PairItem]) -> Optional[Tuple[float, float]]:
    """(mu, its relative rounding bound) of the composition when every item is a plain Gaussian pair
    (one shift, both directions alike), else None. mu^2 = sum_i c_i (s_i / sigma_i)^2: a quotient, a
    square, a product and a sum per item, then a square root, each to an ulp."""
    total = 0.0
    for pairs, count in items:
        if pairs is None or len(pairs) != 1:
            return None
        pair = pairs[0]
        if not isinstance(pair, GaussianMixturePair) or len(pair.shifts) != 1:
            return None
        total += count * (float(pair.shifts[0]) / pair.sigma) ** 2
    return (math.sqrt(total), 4.0 * _U * (len(items) + 2)) if total > 0 else None


def _terms(mu: float, eps: float) -> Tuple[float, float, float, float]:
    """(A, B, abs error bound of A - B, Phi(-mu/2 - eps/mu)) for A = Phi(mu/2 - eps/mu),
    B = e^eps Phi(-mu/2 - eps/mu)."""
    a, b = mu / 2.0 - eps / mu, -mu / 2.0 - eps / mu
    big_a, phi_b = float(special.ndtr(a)), float(special.ndtr(b))
    big_b = math.exp(eps) * phi_b if phi_b > 0 else 0.0
    # arguments: eps/mu and mu/2 each to an ulp, the difference to another; Phi moves by (|t| + 1) per unit
    arg = 2.0 * _U * (abs(mu) / 2.0 + abs(eps / mu) + abs(a))
    rel_a = float(ndtr_error(a)) + (abs(a) + 1.0) * arg
    rel_b = float(ndtr_error(b)) + (abs(b) + 1.0) * arg + 2.0 * _U * (1.0 + abs(eps))  # exp's argument
    error = rel_a * big_a + rel_b * big_b + 4.0 * _U * big_a
    return big_a, big_b, error, phi_b


def gaussian_delta_bounds(mu: Tuple[float, float], eps: float) -> Optional[Tuple[float, float]]:
    """(lower, upper) on delta(eps) of mu-GDP, ``mu`` = (mu, relative error) as from ``gaussian_mu``
    (delta grows with mu: the lower bound is taken at mu's lower end, the upper at its upper end), or
    None where a CDF value is too small to trust."""
    mu_value, rel = mu
    out: List[float] = []
    for m in (mu_value * (1.0 - rel), mu_value * (1.0 + rel)):
        big_a, big_b, error, phi_b = _terms(m, eps)
        if big_a - big_b > 0 and (phi_b < _TINY or big_a < _TINY):
            return None
        out.append(big_a - big_b + (error if out else -error))
    return max(0.0, out[0]), min(1.0, max(0.0, out[1]))


def gaussian_epsilon_bounds(mu: Tuple[float, float], delta: float) -> Optional[Tuple[float, float]]:
    """(lower, upper) on epsilon(delta) of mu-GDP (``mu`` as from ``gaussian_mu``), by bisection on the
    certified delta interval (the lower bound: the largest eps whose certified delta is still >= delta;
    the upper: the smallest whose certified delta is <= delta), or None where the closed form cannot be
    trusted (then the lattice is used). The bisection starts from a narrow bracket around an uncertified
    estimate (``_estimate``), checked like every other point, so it takes ~15 steps, not ~55, and only
    evaluates Phi near the answer."""
    top = mu[0] * (1.0 + mu[1])
    hi = top * top / 2.0 + top * (2.0 + math.sqrt(2.0 * max(0.0, -math.log(delta)))) + 1.0
    at_hi, at_zero = gaussian_delta_bounds(mu, hi), gaussian_delta_bounds(mu, 0.0)
    if at_hi is None or at_zero is None or at_hi[1] > delta:
        return None
    guess = _estimate(mu[0], delta, hi)
    out = []
    for side in (0, 1):
        if not at_zero[side] > delta if side else at_zero[side] < delta:
            out.append(0.0)  # upper: delta(0) <= delta already; lower: nothing above 0 is certified
            continue
        bracket = _bracket(mu, delta, side, guess, hi)
        if bracket is None:
            return None
        lo, high = bracket  # invariant: the side's bound at lo is on delta's far side, at high not
        while high - lo > 4.0 * _U * high:
            mid = 0.5 * (lo + high)
            found = gaussian_delta_bounds(mu, mid)
            if found is None:
                return None
            if _far(found, side, delta):
                lo = mid
            else:
                high = mid
        out.append(high if side else lo)
    return out[0], out[1]


def _far(found: Tuple[float, float], side: int, delta: float) -> bool:
    """Whether a certified (lower, upper) delta lies on delta's far side for the side's bound (upper:
    the upper delta is still above delta; lower: the lower delta is still at or above it)."""
    return bool(found[1] > delta if side else found[0] >= delta)


def _estimate(mu: float, delta: float, hi: float) -> float:
    """An uncertified estimate of epsilon(delta) for mu-GDP (bisection on the plain closed form in
    math.erfc), only to start the certified bisection from a narrow bracket around it."""
    lo = 0.0
    for _ in range(60):
        mid = 0.5 * (lo + hi)
        a, b = mu / 2.0 - mid / mu, -mu / 2.0 - mid / mu
        tail = math.erfc(-b / math.sqrt(2.0))
        value = 0.5 * math.erfc(-a / math.sqrt(2.0)) - (math.exp(min(mid + math.log(tail), 700.0)) * 0.5
                                                         if tail > 0.0 else 0.0)
        lo, hi = (mid, hi) if value > delta else (lo, mid)
        if hi - lo <= 1e-13 * hi:
            break
    return 0.5 * (lo + hi)


def _bracket(mu: Tuple[float, float], delta: float, side: int, guess: float,
             hi: float) -> Optional[Tuple[float, float]]:
    """[lo, high] around ``guess`` with the side's certified bound on delta's far side at lo and not at
    high (``gaussian_epsilon_bounds``' invariant), widened from 2^-40 of the guess by factors of 16;
    [0, hi] at worst, where the invariant holds by the checks made there. None where a certified
    delta cannot be computed."""
    width = 2.0**-40 * max(guess, 1e-300)
    lo, high = None, None
    while lo is None or high is None:
        if lo is None:
            lo = max(guess - width, 0.0)
            if lo > 0.0:
                found = gaussian_delta_bounds(mu, lo)
                if found is None:
                    return None
                lo = lo if _far(found, side, delta) else None
        if high is None:
            high = min(guess + width, hi)
            if high < hi:
                found = gaussian_delta_bounds(mu, high)
                if found is None:
                    return None
                high = None if _far(found, side, delta) else high
        width *= 16.0
    return lo, high
