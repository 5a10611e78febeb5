"""Empirical audit of a claimed privacy profile against a mechanism's own 1-d outputs.

A mechanism M satisfies the claim delta(eps) in the direction (D, D') iff for every event E,
P(E) - e^eps Q(E) <= delta(eps) with P = law of M(D), Q = law of M(D') (the hockey-stick divergence,
Balle, Barthe & Gaboardi 2018, arXiv:1807.01647). A half-line E = {x > t} or {x < t} with a lower
confidence bound on P(E) - e^eps Q(E) above the claim therefore refutes it. The outputs are scalars:
the mechanism's output, a projection on a canary direction, or a log-likelihood-ratio statistic
computed by the caller (for which half-lines are the Neyman-Pearson optimal events).

Two stages on independent samples, after DP-Sniper (Bichsel et al., IEEE S&P 2021) and Delta-Siege
(Lokna, Paradis, Dimitrov & Vechev, "Group and Attack: Auditing Differential Privacy", ACM CCS 2023):

1. Exploration (``n_explore`` draws per side): for every eps, direction ((D, D') and (D', D)) and
   orientation ({x > t}, {x < t}) pick the threshold maximising the *predicted* confirmation bound,
   p - z s_p - e^eps (q + z s_q) - claim, with Wilson-score widths at the confirmation size (so far
   tails where a few exploration hits look good but cannot be confirmed are not chosen). The best
   ``tests_per_epsilon`` of the four (direction, orientation) pairs per eps are kept: m tests in all.
2. Confirmation (``n`` fresh draws per side, in chunks): count each event's hits and bound them with
   exact one-sided Clopper-Pearson intervals (Clopper & Pearson 1934, Biometrika 26:404) at level
   alpha / (2 m): p_L below for the first distribution, q_U above for the second. Bonferroni over all
   2m bounds makes them hold simultaneously with probability >= 1 - alpha, and then
   p_L - e^eps q_U <= P(E) - e^eps Q(E) <= delta(eps) for every test if the claim is true. So the
   verdict VIOLATION (some delta_L(eps) > claim(eps)) has family-wise error <= alpha.

No additive Hoeffding/DKW margins (exact binomial tails instead), no re-runs at the same level, and the
events are fixed before the confirmation sample is drawn. As with every black-box tester (DP-Sniper,
Delta-Siege, DP-Auditorium: Kong, Medina, Ribero & Syed, IEEE S&P 2024), a ``consistent`` verdict is
only the absence of evidence at this sample size, for half-line events of the given statistic. Given
the sample size a planner needs to see a stated violation (``n_required``, :mod:`metadp.verify.sizing`),
an audit below it that finds nothing says ``INCONCLUSIVE`` instead.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import asdict, dataclass
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Union, cast

import numpy as np
from numpy.typing import ArrayLike
from scipy import special

from metadp.core.validation import check_count, check_real
from metadp.mechanisms.base import DominatingPair
from metadp.report import format_lower, format_upper
from metadp.verify.binomial import cp_lower, cp_upper

__all__ = ["AuditRow", "AuditResult", "audit", "audit_pair", "cp_lower", "cp_upper", "format_draws"]

_DIRECTIONS = ("D||D'", "D'||D")  # (first, second) distribution of the hockey-stick divergence
_ORIENTATIONS = (">", "<")  # event {x > t} or {x < t}
_GRID = 2048  # candidate thresholds per spacing (uniform and geometric in rank from each end)
_DIRECT_COUNT = 24  # up to this many events, count by comparisons; beyond, sort the chunk once
Sampler = Callable[[int, np.random.Generator], np.ndarray]  # (k, rng) -> k outputs, shape (k,)
Profile = Callable[[np.ndarray], np.ndarray]  # eps -> delta, vectorised
_Chosen = Tuple[int, int, str, float]  # (eps index, direction, orientation, threshold) of one test
_LEVEL_FLOOR = 1e-50  # p-value search floor: Boost's beta quantile stays accurate down to ~1e-60 at small k


@dataclass(frozen=True)
class AuditRow:
    """One confirmed test (an event at one eps), or the best test at an eps in ``AuditResult.rows``.

    Attributes:
        epsilon: the eps of the test.
        claimed: claimed delta(eps) for the test's direction.
        delta_lower: max(0, p_lower - e^eps q_upper), a simultaneous lower confidence bound.
        estimate: max(0, p_hat - e^eps q_hat) on the confirmation sample (plug-in, no guarantee).
        margin: delta_lower - claimed (> 0: VIOLATION).
        direction: "D||D'" (P = M(D), Q = M(D')) or "D'||D".
        orientation: ">" for the event {x > threshold}, "<" for {x < threshold}.
        threshold: t, fixed on the exploration sample.
        hits_p, hits_q: event counts among the n draws from P and from Q.
        p_lower, q_upper: the one-sided Clopper-Pearson bounds at level alpha / (2 m).
        p_value: Bonferroni-adjusted p-value of H0 "claim holds at eps": 2 m a*, a* the smallest
            per-bound level at which the bounds would flag the test (capped at 1; values at the floor
            2 m 1e-50 mean "at most this").
    """

    epsilon: float
    claimed: float
    delta_lower: float
    estimate: float
    margin: float
    direction: str
    orientation: str
    threshold: float
    hits_p: int
    hits_q: int
    p_lower: float
    q_upper: float
    p_value: float


@dataclass(frozen=True)
class AuditResult:
    """Outcome of :func:`audit`: the verdict, the best test per eps (``rows``) and every test."""

    verdict: str  # "VIOLATION", "INCONCLUSIVE" (none found, n below n_required) or "consistent"
    rows: Tuple[AuditRow, ...]  # best test (largest margin) per eps, in increasing eps
    tests: Tuple[AuditRow, ...]  # all m confirmed tests
    n: int  # confirmation draws per side
    n_explore: int  # exploration draws per side
    alpha: float  # family-wise error level of the verdict
    level: float  # per-bound level alpha / (2 m)
    n_required: Optional[float] = None  # draws per side a planner needs for the power asked (inf: none do)

    @property
    def worst_margin(self) -> float:
        """max over eps of delta_lower - claimed (> 0 exactly when the verdict is VIOLATION)."""
        return max(r.margin for r in self.rows)

    def epsilon_lower(self, delta: float) -> float:
        """Lower confidence bound on the mechanism's eps(delta), both directions, from the same tests.

        If M were (eps', delta)-DP in a test's direction, P(E) <= e^eps' Q(E) + delta, so on the event
        (probability >= 1 - alpha) that all bounds hold, eps' >= log((p_L - delta) / q_U) for every test.

        Args:
            delta: in [0, 1).

        Returns:
            max(0, max over tests of log((p_lower - delta) / q_upper)); 0 when no test has p_lower > delta.
        """
        delta = check_real("delta", delta, low=0.0, high=1.0, high_open=True)
        best = 0.0
        for t in self.tests:
            if t.p_lower > delta and t.q_upper > 0.0:
                best = max(best, math.log((t.p_lower - delta) / t.q_upper))
        return best

    def to_dict(self) -> Dict[str, Any]:
        """Plain-data form (JSON-serialisable)."""
        need = self.n_required
        return {"verdict": self.verdict, "n": self.n, "n_explore": self.n_explore, "alpha": self.alpha,
                "level": self.level, "worst_margin": self.worst_margin,
                "n_required": None if need is None or not math.isfinite(need) else (
                    int(need) if need < 2**63 else float(need)),
                "rows": [asdict(r) for r in self.rows], "tests": [asdict(t) for t in self.tests]}

    def to_table(self) -> str:
        """Text table, one line per eps; delta_L is a lower bound at family-wise level alpha.

        Lower bounds (delta_L, margin) are printed rounded down, the claim and p-values rounded up.
        """
        head = (f"audit: {self.verdict} (alpha={self.alpha:g}, {len(self.tests)} tests, n={self.n:,} per side, "
                f"explore={self.n_explore:,}); delta_L is a lower confidence bound")
        if self.verdict == "INCONCLUSIVE":
            required = cast(float, self.n_required)  # (INCONCLUSIVE: n is below it)
            need = "no number of" if not math.isfinite(required) else format_draws(required)
            head += f"\n  no violation found, but n is below the {need} draws per side the planner needs"
        cols = (f"{'eps':>8} {'claimed':>11} {'delta_L':>11} {'estimate':>11} {'margin':>11} {'p-value':>9} "
                f"{'event':>16} {'hits P/Q':>19}")
        lines = [head, cols]
        for r in self.rows:
            flag = "  VIOLATION" if r.margin > 0 else ""
            event = f"{r.direction} x{r.orientation}{r.threshold:.4g}"
            lines.append(f"{r.epsilon:8.4g} {format_upper(r.claimed):>11} {format_lower(r.delta_lower):>11} "
                         f"{r.estimate:11.4g} {format_lower(r.margin, 3):>11} {format_upper(r.p_value, 3):>9} "
                         f"{event:>16} {r.hits_p:>9d}/{r.hits_q:<9d}{flag}")
        return "\n".join(lines)


def format_draws(n: float) -> str:
    """A count of draws: 1,234,567, or 1.58e+261 (rounded up) from a billion on."""
    return f"{int(n):,}" if n < 1e9 else format_upper(float(n), 3)


def _as_profile(claim: Union[Profile, DominatingPair], name: str) -> Profile:
    if isinstance(claim, DominatingPair):
        return claim.profile
    if not callable(claim):
        raise ValueError(f"{name} must be a callable eps -> delta or a DominatingPair, got {claim!r}")
    return claim


def _evaluate_claim(profile: Profile, eps: np.ndarray, name: str) -> np.ndarray:
    value = np.asarray(profile(eps), dtype=np.float64)
    if value.shape != eps.shape:
        raise ValueError(f"{name} must return one delta per epsilon (shape {eps.shape}), got shape {value.shape}")
    if not np.all((value >= 0.0) & (value <= 1.0)):
        raise ValueError(f"{name} must return deltas in [0, 1], got {value}")
    return value


def _draw(sampler: Sampler, count: int, rng: np.random.Generator, name: str) -> np.ndarray:
    x = np.asarray(sampler(count, rng), dtype=np.float64)
    if x.shape != (count,):
        raise ValueError(f"{name}(n, rng) must return an array of shape (n,) = ({count},), got {x.shape}")
    if np.isnan(x).any():
        raise ValueError(f"{name} returned NaN outputs")
    return x


def _draw_all(sampler: Sampler, count: int, rng: np.random.Generator, chunk: int, name: str) -> np.ndarray:
    return np.concatenate([_draw(sampler, min(chunk, count - s), rng, name) for s in range(0, count, chunk)])


def _wilson(phat: np.ndarray, n: int, z: float, upper: bool) -> np.ndarray:
    """Wilson-score bound for a proportion near phat at sample size n (a cheap stand-in for CP)."""
    z2n = z * z / n
    centre = phat + 0.5 * z2n
    half = z * np.sqrt(np.maximum(phat * (1.0 - phat), 0.0) / n + 0.25 * z2n / n)
    return np.clip((centre + half if upper else centre - half) / (1.0 + z2n), 0.0, 1.0)


def _explore(xd: np.ndarray, xdp: np.ndarray, eps: np.ndarray, claims: Tuple[np.ndarray, np.ndarray], n: int,
             level: float, per_eps: int) -> List[_Chosen]:
    """Choose the events: returns a list of (eps index, direction, orientation, threshold)."""
    sd, sdp = np.sort(xd), np.sort(xdp)
    pooled = np.sort(np.concatenate([sd, sdp]))
    size = len(pooled)
    # candidate ranks: a uniform grid plus geometric grids from both ends (full resolution in the tails)
    geo = np.geomspace(1.0, max(size / 2.0, 1.0), _GRID)
    ranks = np.concatenate([np.linspace(0.0, size - 1.0, _GRID), geo - 1.0, size - geo])
    cand = np.unique(pooled[np.clip(np.rint(ranks).astype(np.int64), 0, size - 1)])  # (K,)
    frac: Dict[Tuple[str, str], np.ndarray] = {}
    for name, s in (("D", sd), ("D'", sdp)):
        frac[name, ">"] = 1.0 - np.searchsorted(s, cand, "right") / len(s)
        frac[name, "<"] = np.searchsorted(s, cand, "left") / len(s)
    z = float(special.ndtri(1.0 - level))
    chosen: List[_Chosen] = []
    for i, e in enumerate(eps):
        scored: List[Tuple[float, int, str, float]] = []
        for d, (first, second) in enumerate((("D", "D'"), ("D'", "D"))):
            for o in _ORIENTATIONS:
                pred = (_wilson(frac[first, o], n, z, upper=False)
                        - math.exp(e) * _wilson(frac[second, o], n, z, upper=True) - claims[d][i])
                j = int(np.argmax(pred))
                scored.append((float(pred[j]), d, o, float(cand[j])))
        scored.sort(key=lambda s: -s[0])  # stable: ties keep the (direction, orientation) order
        chosen.extend((i, d, o, t) for _, d, o, t in scored[:per_eps])
    return chosen


def _count(x: np.ndarray, gt: np.ndarray, lt: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
    """#{x > t} for t in gt and #{x < t} for t in lt."""
    if len(gt) + len(lt) <= _DIRECT_COUNT:
        return (np.array([np.count_nonzero(x > t) for t in gt], dtype=np.int64),
                np.array([np.count_nonzero(x < t) for t in lt], dtype=np.int64))
    s = np.sort(x)
    return len(s) - np.searchsorted(s, gt, "right"), np.searchsorted(s, lt, "left")


def _p_values(hits_p: np.ndarray, hits_q: np.ndarray, n: int, eps: np.ndarray, claimed: np.ndarray,
              m: int) -> np.ndarray:
    """2 m a*, a* = inf{a : cp_lower(a) - e^eps cp_upper(a) > claimed}, by bisection on log a."""
    hi_level = 1.0 / (2 * m)  # beyond it the adjusted p-value is >= 1 anyway

    def flags(a: np.ndarray) -> np.ndarray:
        found: np.ndarray = cp_lower(hits_p, n, a) - np.exp(eps) * cp_upper(hits_q, n, a) > claimed
        return found

    lo, hi = np.full(len(eps), math.log(_LEVEL_FLOOR)), np.full(len(eps), math.log(hi_level))
    never, always = ~flags(np.exp(hi)), flags(np.exp(lo))
    for _ in range(64):
        mid = 0.5 * (lo + hi)
        f = flags(np.exp(mid))
        hi, lo = np.where(f, mid, hi), np.where(f, lo, mid)
    p = np.minimum(1.0, 2 * m * np.exp(hi))
    return np.where(never, 1.0, np.where(always, 2 * m * _LEVEL_FLOOR, p))


def _check_epsilons(epsilons: ArrayLike) -> np.ndarray:
    eps = np.atleast_1d(np.asarray(epsilons, dtype=np.float64))
    if eps.ndim != 1 or eps.size == 0:
        raise ValueError(f"epsilons must be a non-empty 1-d sequence, got shape {eps.shape}")
    for e in eps:
        check_real("epsilons", float(e), low=0.0, high=700.0)
    if len(np.unique(eps)) != len(eps):
        raise ValueError(f"epsilons must be distinct, got {eps.tolist()}")
    return np.sort(eps)


def audit(sample_d: Sampler, sample_d_prime: Sampler, claimed_profile: Union[Profile, DominatingPair],
          epsilons: ArrayLike, *, claimed_profile_reverse: Union[Profile, DominatingPair, None] = None,
          n: int = 1_000_000, n_explore: Optional[int] = None, alpha: float = 0.01, tests_per_epsilon: int = 1,
          rng: Union[np.random.Generator, int, None] = None, chunk: int = 1 << 20,
          progress: Optional[Callable[[int, int], None]] = None,
          n_required: Optional[float] = None) -> AuditResult:
    """Audit a claimed privacy profile on samples of M(D) and M(D') (module docstring for the method).

    Args:
        sample_d: ``sample_d(k, rng)`` returns k outputs of M(D), shape (k,), float.
        sample_d_prime: the same for the neighbour D'.
        claimed_profile: the claimed delta(eps) (vectorised callable or a DominatingPair); it must hold
            for E_{e^eps}(M(D) || M(D')) and, unless ``claimed_profile_reverse`` is given, for the
            reverse divergence too (pass the maximum of both directions' claims).
        epsilons: eps grid, distinct values in [0, 700].
        claimed_profile_reverse: claimed delta(eps) for E_{e^eps}(M(D') || M(D)); default: the same.
        n: confirmation draws per side (>= 1).
        n_explore: exploration draws per side (default max(1, n // 10)); held in memory.
        alpha: family-wise error of a VIOLATION verdict if the claim is true, in (0, 1).
        tests_per_epsilon: how many of the 4 (direction, orientation) events per eps to confirm
            (1-4); the Bonferroni count is m = tests_per_epsilon * len(epsilons).
        rng: numpy Generator, an int seed or None (fresh entropy).
        chunk: confirmation draws per call of the samplers (bounds the memory), >= 1.
        progress: called as progress(done, n) after each confirmation chunk.
        n_required: the draws per side a planner (:mod:`metadp.verify.planner`) needs to see the
            violation it was asked about with the power asked for (``math.inf``: no n suffices).
            Given, and n below it, an audit that finds nothing is ``INCONCLUSIVE``, not ``consistent``.

    Returns:
        AuditResult with verdict "VIOLATION" iff some delta_L(eps) > claimed(eps) (whatever the
        power: its false-alarm guarantee does not depend on it); otherwise "INCONCLUSIVE" if
        n < n_required, else "consistent".

    Raises:
        ValueError: on invalid arguments, a sampler returning a wrong shape or NaN, or a claim
            outside [0, 1].
    """
    eps = _check_epsilons(epsilons)
    n = check_count("n", n, minimum=1)
    n_explore = max(1, n // 10) if n_explore is None else check_count("n_explore", n_explore, minimum=1)
    alpha = check_real("alpha", alpha, low=0.0, high=1.0, low_open=True, high_open=True)
    per_eps = check_count("tests_per_epsilon", tests_per_epsilon, minimum=1)
    if per_eps > 4:
        raise ValueError(f"tests_per_epsilon must be in [1, 4], got {tests_per_epsilon!r}")
    chunk = check_count("chunk", chunk, minimum=1)
    rng = _checked_callables_and_rng(sample_d, sample_d_prime, progress, n_required, rng)
    forward = _evaluate_claim(_as_profile(claimed_profile, "claimed_profile"), eps, "claimed_profile")
    reverse = forward if claimed_profile_reverse is None else _evaluate_claim(
        _as_profile(claimed_profile_reverse, "claimed_profile_reverse"), eps, "claimed_profile_reverse")
    m = per_eps * len(eps)
    level = alpha / (2 * m)

    xd = _draw_all(sample_d, n_explore, rng, chunk, "sample_d")
    xdp = _draw_all(sample_d_prime, n_explore, rng, chunk, "sample_d_prime")
    chosen = _explore(xd, xdp, eps, (forward, reverse), n, level, per_eps)
    del xd, xdp

    events = sorted({(o, t) for _, _, o, t in chosen})  # distinct (orientation, threshold)
    counts = _confirm(events, (sample_d, sample_d_prime), n, rng, chunk, progress)
    tests = _tests(chosen, events, counts, eps, (forward, reverse), n, level, m)
    rows = tuple(max((t for t in tests if t.epsilon == e), key=lambda t: t.margin) for e in eps)
    if any(r.margin > 0.0 for r in rows):
        verdict = "VIOLATION"
    else:
        verdict = "INCONCLUSIVE" if n_required is not None and n < n_required else "consistent"
    return AuditResult(verdict, rows, tests, n, n_explore, alpha, level, n_required)


def _checked_callables_and_rng(sample_d: object, sample_d_prime: object, progress: object, n_required: object,
                               rng: object) -> np.random.Generator:
    """``audit``'s checks of its callables and ``n_required``; the numpy Generator ``rng`` names."""
    if n_required is not None and not (isinstance(n_required, numbers.Real) and cast(float, n_required) >= 1):
        raise ValueError(f"n_required must be None or a number >= 1 (inf allowed), got {n_required!r}")
    if not callable(sample_d) or not callable(sample_d_prime):
        raise ValueError("sample_d and sample_d_prime must be callables (n, rng) -> array of shape (n,)")
    if progress is not None and not callable(progress):
        raise ValueError(f"progress must be callable or None, got {progress!r}")
    if isinstance(rng, numbers.Integral) or rng is None:
        return np.random.default_rng(cast(Optional[int], rng))  # an Integral seed or None
    if not isinstance(rng, np.random.Generator):
        raise ValueError(f"rng must be a numpy Generator, an int seed or None, got {rng!r}")
    return rng


def _confirm(events: Sequence[Tuple[str, float]], samplers: Tuple[Sampler, Sampler], n: int, rng: np.random.Generator,
             chunk: int, progress: Optional[Callable[[int, int], None]]) -> Dict[str, np.ndarray]:
    """How many of ``n`` fresh draws of M(D) and of M(D') fall in each event ("D", "D'": counts in ``events``'
    order), drawn ``chunk`` at a time."""
    gt = np.array([t for o, t in events if o == ">"])
    lt = np.array([t for o, t in events if o == "<"])
    counts = {"D": np.zeros(len(events), np.int64), "D'": np.zeros(len(events), np.int64)}
    is_gt = np.array([o == ">" for o, _ in events], dtype=bool)
    for start in range(0, n, chunk):
        size = min(chunk, n - start)
        for name, sampler, label in (("D", samplers[0], "sample_d"), ("D'", samplers[1], "sample_d_prime")):
            c_gt, c_lt = _count(_draw(sampler, size, rng, label), gt, lt)
            counts[name][is_gt] += c_gt
            counts[name][~is_gt] += c_lt
        if progress is not None:
            progress(start + size, n)
    return counts


def _tests(chosen: Sequence[_Chosen], events: Sequence[Tuple[str, float]], counts: Dict[str, np.ndarray],
           eps: np.ndarray, claims: Tuple[np.ndarray, np.ndarray], n: int, level: float,
           m: int) -> Tuple[AuditRow, ...]:
    """One row per chosen (eps, direction, orientation, threshold): the Clopper-Pearson lower bound on delta
    at the Bonferroni ``level``, against the claim (``claims``: forward and reverse, at each eps)."""
    forward, reverse = claims
    index = {ev: k for k, ev in enumerate(events)}
    idx = np.array([index[o, t] for _, _, o, t in chosen])
    d_first = np.array([d == 0 for _, d, _, _ in chosen])
    hits_p = np.where(d_first, counts["D"][idx], counts["D'"][idx])
    hits_q = np.where(d_first, counts["D'"][idx], counts["D"][idx])
    e_t = eps[[i for i, _, _, _ in chosen]]
    claim_t = np.where(d_first, forward[[i for i, _, _, _ in chosen]], reverse[[i for i, _, _, _ in chosen]])
    p_lo, q_up = cp_lower(hits_p, n, level), cp_upper(hits_q, n, level)
    growth = np.exp(e_t)
    delta_lo = np.maximum(0.0, p_lo - growth * q_up)
    estimate = np.maximum(0.0, (hits_p - growth * hits_q) / n)
    p_val = _p_values(hits_p, hits_q, n, e_t, claim_t, m)
    return tuple(
        AuditRow(float(e_t[k]), float(claim_t[k]), float(delta_lo[k]), float(estimate[k]),
                 float(delta_lo[k] - claim_t[k]), _DIRECTIONS[chosen[k][1]], chosen[k][2], chosen[k][3],
                 int(hits_p[k]), int(hits_q[k]), float(p_lo[k]), float(q_up[k]), float(p_val[k]))
        for k in range(len(chosen)))


def audit_pair(pair: DominatingPair, claimed_profile: Union[Profile, DominatingPair], epsilons: ArrayLike,
               **kwargs: Any) -> AuditResult:
    """:func:`audit` with M(D) ~ pair's P and M(D') ~ pair's Q (``pair.sample(k, rng, "P"/"Q")``).

    Args:
        pair: the *true* mechanism's pair (the one being audited).
        claimed_profile: as in :func:`audit`.
        epsilons: as in :func:`audit`.
        **kwargs: passed on to :func:`audit`.
    """
    if not isinstance(pair, DominatingPair):
        raise ValueError(f"pair must be a DominatingPair, got {pair!r}")
    return audit(lambda k, rng: pair.sample(k, rng, "P"), lambda k, rng: pair.sample(k, rng, "Q"),
                 claimed_profile, epsilons, **kwargs)
