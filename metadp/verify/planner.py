"""Sample-size planning for :func:`metadp.verify.audit.audit`.

The audit flags an event E at eps when p_L - e^eps q_U > c, with c the claimed delta(eps) and p_L, q_U
one-sided Clopper-Pearson bounds (Clopper & Pearson 1934) at level a = alpha / (2 m) on n draws per
side, m the number of confirmed tests. With p = P(E), q = Q(E), s_p = sqrt(p (1 - p)),
s_q = sqrt(q (1 - q)), z_a = Phi^{-1}(1 - a) and z_b = Phi^{-1}(power), the normal approximation
p_L ~ p_hat - z_a s_p / sqrt(n), q_U ~ q_hat + z_a s_q / sqrt(n) gives the statistic

    p_hat - e^eps q_hat - z_a (s_p + e^eps s_q) / sqrt(n)  ~  N(d - z_a A / sqrt(n), B^2 / n),

with d = p - e^eps q, A = s_p + e^eps s_q, B = sqrt(s_p^2 + e^{2 eps} s_q^2), so the power is
Phi((sqrt(n) (d - c) - z_a A) / B) and the audit needs

    n = ((z_a A + z_b B) / (d - c))^2   draws per side.

:func:`planned_power` computes the exact power (a sum over the two binomial laws); by default the
planner moves from the approximate n to the smallest n whose exact power reaches the target, since with
few expected hits (large eps, small n) the approximation is optimistic (the exact power at the normal n
was 0.845 instead of 0.9 for z = 0.8 vs 1 at eps = 1, and 0.70 at eps = 4). The plan
assumes the audit confirms the planned event; the exploration stage only finds it approximately, so
treat n as a lower bound on what a full audit needs (the tests in tests/verify/test_planner.py measure
both).
"""

from __future__ import annotations

import math
from typing import Callable, Optional, Tuple, Union

import numpy as np
from scipy import optimize, special, stats

from metadp.core.validation import check_count, check_positive, check_probability, check_real
from metadp.mechanisms.base import DominatingPair
from metadp.mechanisms.gaussian import gaussian_pair
from metadp.verify.audit import Profile, _as_profile
from metadp.verify.binomial import _cp_solve, cp_lower, cp_upper

__all__ = ["samples_needed", "planned_power", "gaussian_best_event", "gaussian_audit_plan", "pair_best_event"]

_SPAN = 9.0  # binomial ranges summed over: mean +- 9 sd (the mass outside is < 1e-18)
_POINTS = 4097  # at most this many outcomes per side in an exact power (beyond: a pessimistic grid)
_EXACT_MAX = 10**15  # beyond this n (no audit that size runs), the normal approximation is returned as is
_SCIPY_POINTS = 512  # up to this many outcomes, scipy's Clopper-Pearson bounds (as the audit's); beyond, _cp_solve


def _check_level(alpha: float, power: float, tests: int) -> Tuple[float, float, int]:
    alpha = check_real("alpha", alpha, low=0.0, high=1.0, low_open=True, high_open=True)
    power = check_real("power", power, low=0.0, high=1.0, low_open=True, high_open=True)
    return alpha, power, check_count("tests", tests, minimum=1)


def _n_normal(p: float, q: float, eps: float, claimed: float, z_a: float, z_b: float) -> float:
    growth = math.exp(eps)
    gap = p - growth * q - claimed
    if not gap > 0.0:
        return math.inf
    s_p, s_q = math.sqrt(p * (1.0 - p)), math.sqrt(q * (1.0 - q))
    a, b = s_p + growth * s_q, math.hypot(s_p, growth * s_q)
    return ((z_a * a + z_b * b) / gap) ** 2


def samples_needed(claimed_profile: Union[Profile, DominatingPair], epsilon: float, violation: Optional[float], *,
                   alpha: float = 0.01, power: float = 0.9, tests: int = 1, event_p: Optional[float] = None,
                   event_q: Optional[float] = None, exact: bool = True) -> int:
    """Draws per side for the audit to flag, with probability ``power``, a violation at ``epsilon``.

    The true delta(eps) is claimed(eps) + violation, attained by an event with probabilities (p, q):

    * ``event_p`` and ``event_q`` given: these (e.g. a half-line of the true pair); ``violation`` may
      then be None, and otherwise must equal p - e^eps q - claimed to 1e-9 relative;
    * ``event_p`` only: q = (p - claimed - violation) e^{-eps};
    * neither: the worst case over p in [delta_true, 1] (conservative: any event attaining delta_true).

    Args:
        claimed_profile: the claimed delta(eps) (callable or DominatingPair).
        epsilon: eps >= 0 of the test.
        violation: true delta minus claimed delta, > 0 (or None, see above).
        alpha: family-wise error level of the audit, in (0, 1).
        power: target probability of a VIOLATION verdict, in (0, 1).
        tests: m, the number of confirmed tests (Bonferroni count), >= 1.
        event_p, event_q: event probabilities under the first and second distribution.
        exact: False returns the normal approximation of the module docstring. True (default) starts
            there and moves to the smallest n (to 0.5%) whose exact power (:func:`planned_power`)
            reaches ``power``: with few expected hits (large eps, small n) the normal approximation
            is optimistic by up to tens of points of power. (Above 1e15 draws, the normal n as is.)

    Returns:
        n (int).

    Raises:
        ValueError: on invalid inputs, or when the event cannot exceed the claim (p - e^eps q <= claimed).
    """
    alpha, power, tests = _check_level(alpha, power, tests)
    eps = check_real("epsilon", epsilon, low=0.0, high=700.0)
    claimed = float(np.asarray(_as_profile(claimed_profile, "claimed_profile")(np.array([eps])))[0])
    check_probability("claimed_profile(epsilon)", claimed)
    z_a, z_b = -float(special.ndtri(alpha / (2 * tests))), float(special.ndtri(power))
    if event_p is None:
        if event_q is not None:
            raise ValueError("event_q needs event_p")
        p, q = _worst_event(claimed, check_positive("violation", violation), eps, z_a, z_b)
    else:
        p, q = _given_event(claimed, violation, eps, event_p, event_q)
    n = _n_normal(p, q, eps, claimed, z_a, z_b)
    if not math.isfinite(n):
        raise ValueError(f"event (p={p:g}, q={q:g}) has p - e^eps q <= claimed delta {claimed:g}")
    n = max(1, math.ceil(n))
    if exact and n <= _EXACT_MAX:
        n = _refine(n, lambda k: planned_power(k, p, q, eps, claimed, alpha, tests) >= power)
    return n


def _given_event(claimed: float, violation: Optional[float], eps: float, event_p: Optional[float],
                 event_q: Optional[float]) -> Tuple[float, float]:
    p, growth = check_probability("event_p", event_p), math.exp(eps)
    if event_q is None:
        viol = check_positive("violation", violation)
        q = (p - claimed - viol) / growth
        if q < 0.0:
            raise ValueError(f"event_p={p:g} is below the true delta {claimed + viol:g}: no such event")
        return p, q
    q = check_probability("event_q", event_q)
    if violation is not None:
        viol = check_positive("violation", violation)
        implied = p - growth * q - claimed
        if abs(implied - viol) > 1e-9 * (claimed + viol):
            raise ValueError(f"violation={viol:g} disagrees with p - e^eps q - claimed = {implied:g}")
    return p, q


def _worst_event(claimed: float, violation: float, eps: float, z_a: float, z_b: float) -> Tuple[float, float]:
    """(p, q) with p - e^eps q = claimed + violation needing the most draws (normal approximation)."""
    true_delta, growth = claimed + violation, math.exp(eps)
    if true_delta > 1.0:
        raise ValueError(f"claimed + violation = {true_delta:g} exceeds 1")

    def cost(p: float) -> float:
        return _n_normal(p, max(p - true_delta, 0.0) / growth, eps, claimed, z_a, z_b)

    grid = np.linspace(true_delta, 1.0, 2001)
    k = int(np.argmax([cost(p) for p in grid]))
    lo, hi = grid[max(k - 1, 0)], grid[min(k + 1, len(grid) - 1)]
    res = optimize.minimize_scalar(lambda p: -cost(p), bounds=(lo, hi), method="bounded",
                                   options={"xatol": 1e-12})
    p = float(res.x) if -res.fun >= cost(grid[k]) else float(grid[k])
    return p, max(p - true_delta, 0.0) / growth


def _refine(n: int, enough: Callable[[int], bool]) -> int:
    """Smallest n (to 0.5%) with enough(n), from a guess: steps of 2%, 4%, 8%, ... away from it until the
    answer is bracketed (a good guess costs two or three exact powers), then bisection."""
    known = {}

    def ok(k: int) -> bool:
        if k not in known:
            known[k] = enough(k)
        return known[k]

    lo = hi = n
    step = 0.02
    if ok(n):
        while ok(lo):
            if lo == 1:
                return 1
            hi, lo = lo, max(1, int(lo / (1.0 + step)))
            step *= 2.0
    else:
        while not ok(hi):
            lo, hi = hi, math.ceil(hi * (1.0 + step)) + 1
            step *= 2.0
    while hi - lo > max(1, int(0.005 * hi)):
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if ok(mid) else (mid, hi)
    return hi


def planned_power(n: int, p: float, q: float, epsilon: float, claimed_delta: float, alpha: float = 0.01,
                  tests: int = 1, exact: bool = True) -> float:
    """Probability that the audit's bounds flag one event: Pr[cp_lower(K_p) - e^eps cp_upper(K_q) > c].

    Args:
        n: draws per side.
        p, q: the event's probabilities under the first and second distribution.
        epsilon: eps of the test, >= 0.
        claimed_delta: c, the claimed delta(eps), in [0, 1].
        alpha, tests: the audit's level and Bonferroni count (per-bound level alpha / (2 tests)).
        exact: True sums over K_p ~ Bin(n, p) and K_q ~ Bin(n, q) (independent), with exactly the
            audit's Clopper-Pearson bounds (beyond ~4,000 outcomes per side, on a grid that makes it a
            lower bound: :func:`_support`); False returns the normal approximation of the module docstring.

    Returns:
        The power, in [0, 1].
    """
    n = check_count("n", n, minimum=1)
    p, q = check_probability("p", p), check_probability("q", q)
    eps = check_real("epsilon", epsilon, low=0.0, high=700.0)
    c = check_probability("claimed_delta", claimed_delta)
    alpha, _, tests = _check_level(alpha, 0.5, tests)
    level = alpha / (2 * tests)
    growth = math.exp(eps)
    if not exact:
        z_a = -float(special.ndtri(level))
        s_p, s_q = math.sqrt(p * (1 - p)), math.sqrt(q * (1 - q))
        b = math.hypot(s_p, growth * s_q)
        shift = math.sqrt(n) * (p - growth * q - c) - z_a * (s_p + growth * s_q)
        return float(special.ndtr(shift / b)) if b > 0 else float(shift > 0)

    kq, every_q = _support(n, q)
    if every_q:
        weight_q = stats.binom.pmf(kq, n, q)
    else:  # the mass of (kq[i-1], kq[i]] charged at kq[i], where the claim is hardest to beat
        cdf = stats.binom.cdf(kq, n, q)
        weight_q = np.diff(cdf, prepend=stats.binom.cdf(kq[0] - 1, n, q))
    need = c + growth * _bound(kq, n, level, upper=True)  # flag iff cp_lower(K_p) > need
    kp, _ = _support(n, p)
    lower_p = _bound(kp, n, level, upper=False)  # non-decreasing in k
    first = np.searchsorted(lower_p, need, side="right")  # first index with lower_p > need
    k_min = np.where(first < len(kp), kp[np.minimum(first, len(kp) - 1)], n + 1)
    # below the summed range lower_p is smaller still: k_min is exact (on a grid: at or above the exact
    # one) unless first == 0, where Pr[K_p >= kp[0]] already covers all but < 1e-18 of the mass
    tail_p = stats.binom.sf(k_min - 1, n, p)
    return float(np.clip(np.sum(weight_q * tail_p), 0.0, 1.0))


def _bound(k: np.ndarray, n: int, level: float, upper: bool) -> np.ndarray:
    """The audit's Clopper-Pearson bounds; for many counts by :func:`_cp_solve` (the same to 1e-12,
    never inside the exact interval, and ~100 times faster than scipy's beta quantile at large n)."""
    if len(k) <= _SCIPY_POINTS:
        return cp_upper(k, n, level) if upper else cp_lower(k, n, level)
    return _cp_solve(k, n, level, upper=upper)


def _support(n: int, prob: float) -> Tuple[np.ndarray, bool]:
    """The outcomes of Bin(n, prob) summed over (mean +- 9 sd) and whether that is every one of them.

    Wider ranges (over ``_POINTS`` outcomes: tens of thousands of expected hits) are replaced by
    ``_POINTS`` evenly spaced outcomes, both ends included. :func:`planned_power` charges each grid
    cell pessimistically (the q-side mass of a cell at its largest count, the p-side flag at the next
    grid count), so on a grid it returns a lower bound on the exact power, short of it by a cell of
    18/_POINTS standard deviations at most (observed: < 1e-3 of power).
    """
    sd = math.sqrt(n * prob * (1 - prob))
    lo, hi = max(0, math.floor(n * prob - _SPAN * sd) - 1), min(n, math.ceil(n * prob + _SPAN * sd) + 1)
    if hi - lo < _POINTS:
        return np.arange(lo, hi + 1), True
    return np.unique(np.rint(np.linspace(lo, hi, _POINTS)).astype(np.int64)), False


def gaussian_best_event(z_true: float, z_claimed: float, epsilon: float, alpha: float = 0.01,
                        power: float = 0.9, tests: int = 1, exact: bool = True) -> Tuple[float, float, float, int]:
    """The half-line {x > t} of N(1, z_true^2) vs N(0, z_true^2) that needs the fewest draws.

    The claim is the Gaussian mechanism's profile with noise multiplier z_claimed (sensitivity 1).

    The threshold minimises the normal-approximation n; ``exact`` as in :func:`samples_needed`.

    Returns:
        (t, p, q, n): threshold, p = Phi((1 - t)/z_true), q = Phi(-t/z_true), and the planned n.
    """
    z_true, z_claimed = check_positive("z_true", z_true), check_positive("z_claimed", z_claimed)
    eps = check_real("epsilon", epsilon, low=0.0, high=700.0)
    alpha, power, tests = _check_level(alpha, power, tests)
    claimed = float(gaussian_pair(z_claimed).profile(eps))
    z_a, z_b = -float(special.ndtri(alpha / (2 * tests))), float(special.ndtri(power))

    def event(t: float) -> Tuple[float, float]:
        return float(special.ndtr((1.0 - t) / z_true)), float(special.ndtr(-t / z_true))

    def cost(t: float) -> float:
        return math.log(_n_normal(*event(t), eps, claimed, z_a, z_b))

    grid = np.linspace(-8.0 * z_true, 1.0 + 8.0 * z_true + eps * z_true**2, 4001)
    values = np.array([cost(t) for t in grid])
    if not np.isfinite(values).any():
        raise ValueError(f"no half-line detects z_true={z_true:g} against z_claimed={z_claimed:g} at eps={eps:g}")
    t = _grid_argmin(cost, grid, values)
    p, q = event(t)
    return t, p, q, samples_needed(claimed_profile=lambda e: np.full_like(e, claimed), epsilon=eps,
                                   violation=None, alpha=alpha, power=power, tests=tests, event_p=p, event_q=q,
                                   exact=exact)


def _grid_argmin(cost: Callable[[float], float], grid: np.ndarray, values: np.ndarray) -> float:
    """The grid's minimiser of cost, polished between its neighbours (bounded Brent)."""
    k = int(np.argmin(values))
    lo, hi = grid[max(k - 1, 0)], grid[min(k + 1, len(grid) - 1)]
    res = optimize.minimize_scalar(cost, bounds=(lo, hi), method="bounded", options={"xatol": 1e-10})
    return float(res.x) if res.fun <= values[k] else float(grid[k])


def pair_best_event(true_pair: DominatingPair, claimed_profile: Union[Profile, DominatingPair], epsilon: float,
                    alpha: float = 0.01, power: float = 0.9, tests: int = 1,
                    exact: bool = True) -> Tuple[float, float, float, int]:
    """The privacy-loss half-line {L > l} of a true pair that needs the fewest draws to refute a claim.

    Half-lines of the loss L = log dP/dQ are the Neyman-Pearson events; for a pair whose loss is
    monotone in the output (Gaussian, Laplace) they are the output half-lines the audit tries. Used
    to plan an audit of a claim against a true mechanism a given amount noisier than claimed (e.g.
    ``LaplacePair(0.8 * b)`` against ``LaplacePair(b)``).

    Args:
        true_pair: the pair of the mechanism as it truly is (a DominatingPair).
        claimed_profile: the claimed delta(eps) (callable or DominatingPair).
        epsilon, alpha, power, tests, exact: as in :func:`samples_needed`.

    Returns:
        (l, p, q, n): the loss threshold, p = Pr_P[L > l], q = Pr_Q[L > l], and the planned n.

    Raises:
        ValueError: on invalid inputs, or when no such event exceeds the claim at ``epsilon``.
    """
    if not isinstance(true_pair, DominatingPair):
        raise ValueError(f"true_pair must be a DominatingPair, got {true_pair!r}")
    eps = check_real("epsilon", epsilon, low=0.0, high=700.0)
    alpha, power, tests = _check_level(alpha, power, tests)
    profile = _as_profile(claimed_profile, "claimed_profile")
    claimed = check_probability("claimed_profile(epsilon)", float(np.asarray(profile(np.array([eps])))[0]))
    z_a, z_b = -float(special.ndtri(alpha / (2 * tests))), float(special.ndtri(power))

    def event(loss: float) -> Tuple[float, float]:
        return float(true_pair.loss_sf(loss, "P")), float(true_pair.loss_sf(loss, "Q"))

    def cost(loss: float) -> float:
        return math.log(_n_normal(*event(loss), eps, claimed, z_a, z_b))

    lo, hi = true_pair.loss_range(1e-15)
    grid = np.linspace(lo, hi, 4001)[:-1]  # {L > hi} is (nearly) empty
    p, q = true_pair.loss_sf(grid, "P"), true_pair.loss_sf(grid, "Q")
    growth = math.exp(eps)
    s_p, s_q = np.sqrt(p * (1.0 - p)), np.sqrt(q * (1.0 - q))
    gap = p - growth * q - claimed  # the normal-approximation n of _n_normal, on the whole grid
    with np.errstate(divide="ignore", invalid="ignore"):
        values = np.where(gap > 0, 2.0 * np.log((z_a * (s_p + growth * s_q) + z_b * np.hypot(s_p, growth * s_q))
                                                / gap), np.inf)
    if not np.isfinite(values).any():
        raise ValueError(f"no loss half-line of {true_pair!r} exceeds the claimed delta {claimed:g} at eps={eps:g}")
    loss = _grid_argmin(cost, grid, values)
    p_at, q_at = event(loss)
    return loss, p_at, q_at, samples_needed(lambda e: np.full_like(e, claimed), eps, None, alpha=alpha, power=power,
                                            tests=tests, event_p=p_at, event_q=q_at, exact=exact)


def gaussian_audit_plan(z_true: float, z_claimed: float, epsilon: float, alpha: float = 0.01,
                        power: float = 0.9, tests: int = 1, exact: bool = True) -> int:
    """Draws per side to detect Gaussian noise z_true < z_claimed at ``epsilon`` (best half-line).

    Example: ``gaussian_audit_plan(0.8, 1.0, 1.0, tests=3)`` is the n for a 3-epsilon audit to catch
    noise 20% below the claim at eps = 1 with probability 0.9.
    """
    return gaussian_best_event(z_true, z_claimed, epsilon, alpha, power, tests, exact)[3]
