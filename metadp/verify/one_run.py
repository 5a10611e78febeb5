"""The one-run audit's statistics: the guessing game of Steinke, Nasr & Jagielski 2023 (arXiv:2305.08846).

m canaries are each included in the training data independently with probability 1/2 (S_i uniform
on {-1, +1}). After one training run an auditor scores each canary and guesses: the k_+ highest scores
"in", the k_- lowest "out", abstaining on the rest (r = k_+ + k_- guesses). If the training algorithm
is (eps, delta)-DP with respect to each canary (add/remove), the number W of correct guesses satisfies
(their main theorem, Sec. 3, Thm. 3.1; the p-value of their Algorithm 2 / appendix code):

    P[W >= v] <= f(v) + 2 m delta max_{i = 1..v} (f(v - i) - f(v)) / i,
    f(v) = P[Bin(r, p) >= v],  p = e^eps / (1 + e^eps)

(the accuracy of eps-DP randomized response). An audit that sees v correct guesses rejects
"(eps, delta)-DP" at confidence 1 - beta when this p-value is below beta; the empirical lower bound
is the largest eps it rejects (bisection, returned at the rejected end: a lower bound rounded down).

Guess sets: the auditor may not pick k after seeing which guesses were right. Here k_+ = k_- = k
runs over a fixed grid (``guess_grid``) and every (scorer, k) is one test of a Bonferroni family at
level beta / (tests), so the reported maximum holds at confidence 1 - beta.

No torch here: the run itself is ``metadp.verify.canaries``.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Callable, Dict, List, Optional, Tuple, cast

import numpy as np
from scipy import special, stats

from metadp.core._typing import FloatOrArray
from metadp.core.validation import check_count, check_probability, check_real

__all__ = ["p_value", "epsilon_lower_bound", "guess_grid", "GuessResult", "guesses", "guess_and_bound", "simulated_power",
           "mixture_llr"]

_EPS_MAX = 60.0  # p in float64 is 1 - 9e-27 here: every finite v <= r is then consistent (p-value ~ 1)


def _check_counts(m: object, r: object, v: object) -> Tuple[int, int, int]:
    m = check_count("m", m, minimum=1)
    r = check_count("r", r)
    v = check_count("v", v)
    if not v <= r <= m:
        raise ValueError(f"need 0 <= v <= r <= m (correct guesses <= guesses <= canaries), got v={v}, r={r}, m={m}")
    return m, r, v


def p_value(m: int, r: int, v: int, epsilon: float, delta: float = 0.0) -> float:
    """Upper bound on P[W >= v] for an (epsilon, delta)-DP algorithm (module docstring), capped at 1.

    Args:
        m: canaries, each included independently with probability 1/2.
        r: guesses made (abstentions excluded), r <= m.
        v: correct guesses, v <= r.
        epsilon: eps >= 0 of the null hypothesis.
        delta: delta in [0, 1] of the null hypothesis.

    Returns:
        The p-value in [0, 1].
    """
    m, r, v = _check_counts(m, r, v)
    eps = check_real("epsilon", epsilon, low=0.0)
    delta = check_probability("delta", delta)
    if v == 0:
        return 1.0
    p = float(special.expit(eps))
    f_v = float(stats.binom.sf(v - 1, r, p))  # P[Bin(r, p) >= v]
    alpha = 0.0
    if delta > 0:
        ks = np.arange(v - 1, -1, -1)  # v - 1, v - 2, ..., 0
        mass = np.cumsum(stats.binom.pmf(ks, r, p))  # [i - 1] = P[v - i <= Bin < v]
        alpha = float(np.max(mass / np.arange(1, v + 1)))
    return min(1.0, f_v + 2.0 * m * delta * alpha)


def epsilon_lower_bound(m: int, r: int, v: int, beta: float, delta: float = 0.0, *, tol: float = 1e-6) -> float:
    """The largest eps the game rejects at level ``beta``: p_value(eps) < beta (0 if none).

    Bisection keeps p_value(lo) < beta <= p_value(hi) and returns lo, so the result is a rejected eps
    (rounded down, within ``tol`` of the crossing).
    """
    m, r, v = _check_counts(m, r, v)
    beta = check_real("beta", beta, low=0.0, high=1.0, low_open=True, high_open=True)
    if p_value(m, r, v, 0.0, delta) >= beta:
        return 0.0
    lo, hi = 0.0, 1.0
    while p_value(m, r, v, hi, delta) < beta:
        lo, hi = hi, 2.0 * hi
        if hi > _EPS_MAX:
            return lo
    while hi - lo > tol:
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if p_value(m, r, v, mid, delta) < beta else (lo, mid)
    return lo


def guess_grid(m: int) -> Tuple[int, ...]:
    """k (guesses "in" = guesses "out") tried on m canaries: fractions 1/50 .. 1/2 of m, each >= 1, distinct."""
    m = check_count("m", m, minimum=2)
    ks = {max(1, int(m * f)) for f in (0.02, 0.05, 0.1, 0.2, 0.35, 0.5)}
    return tuple(sorted(k for k in ks if 2 * k <= m))


@dataclasses.dataclass(frozen=True)
class GuessResult:
    """One scorer's best test of the family: k guesses each way, r = 2k, v correct, the bound."""

    scorer: str
    k: int
    guesses: int
    correct: int
    epsilon_lower: float
    p_value_at_claim: float  # p-value of "(certified eps, delta)-DP" for this (scorer, k)

    def to_dict(self) -> Dict[str, float]:
        return dataclasses.asdict(self)


def _correct(scores: np.ndarray, included: np.ndarray, k: int) -> int:
    order = np.argsort(scores, kind="stable")
    return int(included[order[-k:]].sum() + (~included[order[:k]]).sum())


def guesses(scores: Dict[str, np.ndarray], included: np.ndarray) -> Tuple[int, int, List[Tuple[str, List[Tuple[int, int]]]]]:
    """(m, tests, [(scorer, [(k, correct guesses) for k in guess_grid(m)])]): every test of the Bonferroni family
    (one per scorer and k), each scorer's scores checked (m finite numbers)."""
    included = np.asarray(included, dtype=bool)
    if included.ndim != 1:
        raise ValueError(f"included must be a 1-D array of m booleans, got shape {included.shape}")
    m = included.size
    ks = guess_grid(m)
    out = []
    for name, s in scores.items():
        s = np.asarray(s, dtype=np.float64)
        if s.shape != (m,) or not np.isfinite(s).all():
            raise ValueError(f"scores[{name!r}] must be {m} finite numbers")
        out.append((name, [(k, _correct(s, included, k)) for k in ks]))
    return m, len(ks) * len(scores), out


def guess_and_bound(scores: Dict[str, np.ndarray], included: np.ndarray, *, beta: float, delta: float,
                    claimed_epsilon: Optional[float] = None) -> Tuple[List[GuessResult], int]:
    """Every scorer's best (largest lower bound) test over ``guess_grid``, Bonferroni over them all.

    Args:
        scores: scorer name -> [m] scores (higher: more likely included).
        included: [m] bool, which canaries were in the training data.
        beta: family-wise level: each of the ``tests`` tests runs at beta / tests.
        delta: the run's delta (the null hypothesis is (eps, delta)-DP).
        claimed_epsilon: the certified eps; its p-value is reported per test (None: not computed).

    Returns:
        (one GuessResult per scorer, the number of tests in the family).
    """
    m, tests, counts = guesses(scores, included)
    level = beta / tests
    out = []
    for name, found in counts:
        best = None
        for k, v in found:
            eps = epsilon_lower_bound(m, 2 * k, v, level, delta)
            pv = p_value(m, 2 * k, v, claimed_epsilon, delta) if claimed_epsilon is not None else math.nan
            if best is None or eps > best.epsilon_lower or (eps == best.epsilon_lower and pv < best.p_value_at_claim):
                best = GuessResult(name, k, 2 * k, v, eps, pv)
        out.append(cast(GuessResult, best))  # (the guess grid is not empty)
    return out, tests


def simulated_power(score_in: Callable[[int, np.random.Generator], np.ndarray],
                    score_out: Callable[[int, np.random.Generator], np.ndarray], m: int, claimed_epsilon: float, *,
                    beta: float, delta: float, scorers: int = 1, runs: int = 200, seed: int = 0,
                    also: Optional[Callable[[int, int, int, float], bool]] = None) -> float:
    """Probability that the game flags ``claimed_epsilon`` (some test's p-value below its level) when the
    included canaries' scores are draws of ``score_in(n, rng)`` and the others of ``score_out(n, rng)``:
    a Monte Carlo prediction (``runs`` games) of an audit's power, for the idealised score laws a
    planted defect gives (``metadp.verify.canaries.predicted_power``). ``scorers``: the family's scorers
    (the level is beta / (scorers x grid)). ``also``: another test of the same guesses, (m, r, v, level) -> True
    where it rejects at that level (the f-DP test of the certified curve), each of its tests at the same level: a
    game flags when either does."""
    m = check_count("m", m, minimum=2)
    rng = np.random.default_rng(seed)
    ks = guess_grid(m)
    level = beta / (len(ks) * scorers)
    flagged = 0
    for _ in range(check_count("runs", runs, minimum=1)):
        included = rng.random(m) < 0.5
        s = np.empty(m)
        s[included] = score_in(int(included.sum()), rng)
        s[~included] = score_out(int((~included).sum()), rng)
        counts = [(k, _correct(s, included, k)) for k in ks]
        flagged += (any(p_value(m, 2 * k, v, claimed_epsilon, delta) < level for k, v in counts)
                    or (also is not None and any(v > 0 and also(m, 2 * k, v, level) for k, v in counts)))
    return flagged / runs



def mixture_llr(y: FloatOrArray, p: FloatOrArray, mean_in: FloatOrArray, mean_out: FloatOrArray,
                var: FloatOrArray) -> np.ndarray:
    """log of [(1-p) N(y; 0, var) + p N(y; mean_in, var)] / [(1-p) N(y; 0, var) + p N(y; mean_out, var)]:
    the log-likelihood ratio, canary in against out, of one projected release when the canary is sampled
    with probability p (0 where p = 0)."""
    with np.errstate(divide="ignore", invalid="ignore"):  # p = 0 or 1: log 0 = -inf, and -inf - -inf where p = 0
        log_rest, log_p = np.log1p(-p), np.log(p)
        zero = log_rest - y**2 / (2 * var)
        num = np.logaddexp(zero, log_p - (y - mean_in) ** 2 / (2 * var))
        den = np.logaddexp(zero, log_p - (y - mean_out) ** 2 / (2 * var))
        return np.where(p > 0, num - den, 0.0)
