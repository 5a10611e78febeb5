"""The one-run guessing game audited against Gaussian differential privacy: the f-DP analysis of
Mahloujifar, Melis & Chaudhuri 2024, "Auditing f-Differential Privacy in One Run" (arXiv:2410.22235;
ICML 2025, PMLR 267:42615-42641), its bound for guessing games with abstentions, for the trade-off
function of mu-GDP.

The game is that of ``metadp.verify.one_run`` (Steinke, Nasr & Jagielski 2023): m canaries, each
included independently with probability 1/2; the auditor makes r guesses (k "in" for the highest scores,
k "out" for the lowest, abstaining on the rest) and W of them are right. The null hypothesis is that the
training run is f-DP with respect to each canary (add/remove, both directions) for the Gaussian
trade-off f = G_mu, G_mu(a) = Phi(Phi^-1(1 - a) - mu) (Dong, Roth & Su 2022, arXiv:1905.02383, Sec. 2).
Write fbar(a) = 1 - f(a) = Phi(Phi^-1(a) + mu) (the most a test with false-positive rate a can detect)
and g = fbar^-1, g(y) = Phi(Phi^-1(y) - mu).

The bound (the paper's recursion; ``audit_rh_with_cap`` in the authors' code, for a two-letter alphabet).
For tau in (0, 1] let h_v = tau (r - v) / m, x_v = tau v / m and, for i = v - 1, ..., 0,

    h_i = max(h_{i+1}, g(x_{i+1})),    x_i = x_{i+1} + i / (r - i) (h_i - h_{i+1}).

If x_0 + h_0 > r / m, then P[W >= v] < tau. Why: x_j = E[W 1{W >= j}] / m and h_j = E[(r - W) 1{W >= j}]
/ m sum to r P[W >= j] / m <= r / m. Flipping canary i turns "guess i right and W >= j" into "guess i
wrong and W >= j - 1", so f-DP for each canary, averaged over the 2m (canary, side) pairs with the
concavity of fbar, gives x_j <= fbar(h_{j-1}); and x_{j-1} - x_j = (j - 1) / (r - j + 1) (h_{j-1} - h_j)
because W = j - 1 on the added mass. The recursion is the least sequence these constraints allow once
P[W >= v] >= tau; every feasible sequence dominates it (x* - x >= max(0, s_{i-1} (h* - h)) and
(x* + h*) - (x + h) >= 0 at each level, s_i = i / (r - i), by induction from level v), so exceeding r / m
is impossible. The same induction shows the test is monotone in tau and in mu, so bisection applies
(the rounded test may differ by an ulp; each search returns a point it tested, so that is harmless).
``fdp_p_value`` is the least tau it certifies; ``mu_lower_bound`` the largest mu rejected at beta.

Relation to public code: jax_privacy (``jax_privacy/auditing.py``, ``_epsilon_one_run_fdp``: one-sided
guesses at every score threshold, Bonferroni over the thresholds) and PrivacyGuard
(``privacy_guard/analysis/mia/fdp_analysis_node.py``, ``rh_with_cap``) run this recursion, testing
(eps, delta) through the Gaussian mechanism calibrated to it; here mu is tested directly and converted
once (``gdp_epsilon``). Differences: every step here is rounded towards the null (theirs round to
nearest; jax_privacy's cap of x at 1 is never reached here, the loop stops once x + h > r / m); the
searches keep the rejected side (a brentq root may sit within xtol on the other side; PrivacyGuard's eps
bisection returns its upper end, and its mu grid reports its smallest mu when nothing is rejected);
guesses are two-sided (k in, k out, as in the paper's experiments) and every (scorer, k) is one test of
a Bonferroni family (PrivacyGuard's tutorial takes the best of 50 guess counts at an uncorrected 0.05).
jax_privacy PR #270 removed |mu| from its threshold GDP estimate: a reversed test is evidence only as its
own member of the family. Here a scorer that guesses worse than chance yields mu_lower = 0; a reversed
scorer must be passed as another scorer, and then counts in the family.

Directed rounding: the proof holds for any sequence with h_i <= max(h_{i+1}, g(x_{i+1})) and x_i <=
x_{i+1} + s_i (h_i - h_{i+1}) started at or below the ray x / h = v / (r - v). So g is evaluated as a
certified lower bound (``_g_lower``, from ndtr's measured error ``metadp.mechanisms.gaussian.ndtr_error``),
every sum and product is stepped one ulp towards zero and r / m one ulp up: a rejection is never an
artefact of rounding. Values of g below 1e-290 count as 0 (no relative accuracy there), so p-values stop
at ``_TAU_MIN``.

An epsilon from ``gdp_epsilon(mu_lower, delta)`` is the epsilon at delta of the most private Gaussian
curve the audit rejects: the paper's empirical privacy. It bounds the run's epsilon from below only if
the run's trade-off curve is Gaussian; for an (eps, delta) claim of any shape use ``one_run``.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Callable, Dict, List, Optional, Tuple, cast

import mpmath
import numpy as np
from numpy.typing import ArrayLike
from scipy import special

from metadp.accounting._pld_gaussian import gaussian_epsilon_bounds
from metadp.core.validation import check_delta, check_real
from metadp.mechanisms.gaussian import ndtr_error
from metadp.verify.one_run import _check_counts, guesses

__all__ = ["fdp_rejects", "fdp_p_value", "mu_lower_bound", "gdp_epsilon", "FdpGuessResult",
           "fdp_guess_and_bound", "curve_g", "curve_p_value", "curve_rejects", "fdp_audit"]

_MU_MAX = 40.0  # the bisection's ceiling (a rejected mu above it is reported as the last doubling)
_TAU_MIN = 1e-280  # p-values are reported no smaller (see the module docstring)
_TINY = 1e-290  # below this ndtr carries no relative accuracy: g's lower bound is 0 there
_NDTR_RANGE = -37.5  # ndtr_error is measured on [-38, 8]


def _down(x: float) -> float:
    """One ulp towards zero: below the exact value of a nonnegative result rounded to nearest."""
    return math.nextafter(x, 0.0)


def _phi_inv_lower(y: float) -> float:
    """A certified z <= Phi^-1(y) for y in [_TINY, 1): ndtri's value moved down by (|z| + 1) 2^-40, then by
    doubling steps until ndtr's error bound proves Phi(z) <= y. Above 1/2 through q = 1 - y (exact):
    z = -w with w >= Phi^-1(q), proved by Phi(w) (1 - error) >= q, so ndtr's error is relative to the
    small tail, not to Phi ~ 1."""
    upper = y > 0.5
    q = 1.0 - y if upper else y
    w = float(special.ndtri(q))
    step = (abs(w) + 1.0) * 2.0**-40
    if upper:
        w += step
        while float(special.ndtr(w)) * (1.0 - float(ndtr_error(w))) < q:
            step *= 2.0
            w += step
        return -w
    w -= step
    while w > _NDTR_RANGE and float(special.ndtr(w)) * (1.0 + float(ndtr_error(w))) > q:
        step *= 2.0
        w -= step
    return w


def _g_lower(y: float, mu: float) -> float:
    """A certified lower bound on g(y) = Phi(Phi^-1(y) - mu), the inverse of mu-GDP's fbar: Phi(z - mu)
    for z <= Phi^-1(y) (``_phi_inv_lower``), its argument rounded down and its value shrunk by ndtr's
    relative error bound; 0 where y or the argument is too far in the tail to trust."""
    if mu == 0.0:
        return y  # exact: g is the identity
    if y < _TINY:
        return 0.0
    t = math.nextafter(_phi_inv_lower(min(y, math.nextafter(1.0, 0.0))) - mu, -math.inf)
    if t < _NDTR_RANGE:
        return 0.0
    return _down(float(special.ndtr(t)) * (1.0 - float(ndtr_error(t))))


def _rejects(m: int, r: int, v: int, g: Callable[[float], float], tau: float) -> bool:
    """Whether the recursion (module docstring) started at tau ends above r / m: then P[W >= v] < tau. ``g``:
    y -> a certified lower bound on fbar^-1(y) (``_gaussian_g`` for mu-GDP, ``curve_g`` for a certified curve)."""
    limit = math.nextafter(r / m, math.inf)
    h = _down(_down(tau * (r - v)) / m)
    # x_v on or below the ray x / h = v / (r - v), as the proof's first step needs
    x = _down(_down(h * v) / (r - v)) if r > v else _down(_down(tau * v) / m)
    for i in range(v - 1, -1, -1):
        gx = g(x)
        if gx <= h:
            break  # h stays, so x stays: a fixed point
        x = _down(x + _down(_down(i / (r - i)) * _down(gx - h)))
        h = gx
        if _down(x + h) > limit:  # sums only grow from here on
            return True
    return _down(x + h) > limit


def _gaussian_g(mu: float) -> Callable[[float], float]:
    return lambda y: _g_lower(y, mu)


def curve_g(fprs: ArrayLike, tprs: ArrayLike) -> Callable[[float], float]:
    """A certified lower bound on fbar^-1 from a certified *upper* bound on a trade-off curve: ``tprs[j]`` bounds
    the best test's TPR at FPR ``fprs[j]`` from above (``metadp.accounting.risk``), fprs increasing. Then g(y) = the
    largest fprs[j] with tprs[j] < y (0 if none): every FPR a <= fprs[j] has fbar(a) <= fbar(fprs[j]) <= tprs[j] <
    y, so fbar^-1(y) >= fprs[j]. The recursion with this g tests "the run meets the certified curve" for any
    shape of curve (the certified claim itself, not a Gaussian stand-in)."""
    a, t = np.asarray(fprs, dtype=np.float64), np.asarray(tprs, dtype=np.float64)
    if a.ndim != 1 or a.shape != t.shape or len(a) == 0 or np.any(np.diff(a) <= 0):
        raise ValueError("fprs must be increasing and match tprs, one TPR upper bound per FPR")
    best = np.minimum.accumulate(t[::-1])[::-1]  # a bound at fprs[k] also bounds fbar at every FPR below it

    def g(y: float) -> float:
        j = int(np.searchsorted(best, y, side="left")) - 1  # the last j with best[j] < y
        return float(a[j]) if j >= 0 else 0.0
    return g


def curve_p_value(m: int, r: int, v: int, g: Callable[[float], float], *, rtol: float = 1e-7) -> float:
    """``fdp_p_value`` for the trade-off curve whose fbar^-1 ``g`` bounds from below (``curve_g``)."""
    m, r, v = _check_counts(m, r, v)
    return _least_tau(m, r, v, g, check_real("rtol", rtol, low=0.0, high=1.0, low_open=True, high_open=True))


def curve_rejects(m: int, r: int, v: int, g: Callable[[float], float], beta: float) -> bool:
    """Whether v correct guesses out of r (m canaries) reject the curve whose fbar^-1 ``g`` bounds (``curve_g``)
    at level ``beta``: one pass of the recursion (what ``curve_p_value`` bisects)."""
    m, r, v = _check_counts(m, r, v)
    return v > 0 and _rejects(m, r, v, g, beta)


def _least_tau(m: int, r: int, v: int, g: Callable[[float], float], rtol: float) -> float:
    """The least tau the recursion certifies (bisection on log tau keeping a certified tau; ``fdp_p_value``)."""
    if v == 0 or not _rejects(m, r, v, g, 1.0):
        return 1.0
    if _rejects(m, r, v, g, _TAU_MIN):
        return _TAU_MIN
    lo, hi = math.log(_TAU_MIN), 0.0  # rejected at e^hi, not at e^lo
    while hi - lo > rtol:
        mid = 0.5 * (lo + hi)
        lo, hi = (lo, mid) if _rejects(m, r, v, g, math.exp(mid)) else (mid, hi)
    return math.exp(hi)  # certified: every hi but the first (tau = 1) was tested as this very float


def fdp_rejects(m: int, r: int, v: int, mu: float, beta: float) -> bool:
    """Whether v correct guesses out of r (m canaries) reject "mu-GDP for each canary" at level beta.

    Args:
        m: canaries, each included independently with probability 1/2.
        r: guesses made (abstentions excluded), r <= m; exactly r on every run.
        v: correct guesses, v <= r.
        mu: the null hypothesis' mu >= 0.
        beta: the level, in (0, 1).

    Returns:
        True if the recursion at tau = beta certifies P[W >= v] < beta under mu-GDP.
    """
    m, r, v = _check_counts(m, r, v)
    mu = check_real("mu", mu, low=0.0)
    beta = check_real("beta", beta, low=0.0, high=1.0, low_open=True, high_open=True)
    return v > 0 and _rejects(m, r, v, _gaussian_g(mu), beta)


def fdp_p_value(m: int, r: int, v: int, mu: float, *, rtol: float = 1e-7) -> float:
    """Upper bound on P[W >= v] for a run that is mu-GDP with respect to each canary (module docstring).

    The least tau the recursion certifies, found by bisection on log tau that keeps a certified tau:
    rounded up, within a factor 1 + ``rtol`` of the least, and never below ``_TAU_MIN``.

    Args:
        m: canaries, each included independently with probability 1/2.
        r: guesses made (abstentions excluded), r <= m.
        v: correct guesses, v <= r.
        mu: the null hypothesis' mu >= 0 (mu = 0: the run reveals nothing).
        rtol: relative width at which the bisection stops, in (0, 1).

    Returns:
        The p-value in (0, 1]; 1 where no tau < 1 is certified (v = 0 among them).

    Raises:
        ValueError: for counts outside 0 <= v <= r <= m, m >= 1, or mu < 0, or rtol outside (0, 1).
    """
    m, r, v = _check_counts(m, r, v)
    mu = check_real("mu", mu, low=0.0)
    rtol = check_real("rtol", rtol, low=0.0, high=1.0, low_open=True, high_open=True)
    return _least_tau(m, r, v, _gaussian_g(mu), rtol)


def mu_lower_bound(m: int, r: int, v: int, beta: float, *, tol: float = 1e-6) -> float:
    """The largest mu the game rejects at level ``beta`` (0 if it rejects none, mu = 0 included).

    Bisection keeps a rejected mu at its low end and returns it: a rejected mu, rounded down, within
    ``tol`` of the crossing (the test is monotone in mu, module docstring).

    Raises:
        ValueError: for counts outside 0 <= v <= r <= m, or beta outside (0, 1), or tol <= 0.
    """
    m, r, v = _check_counts(m, r, v)
    beta = check_real("beta", beta, low=0.0, high=1.0, low_open=True, high_open=True)
    tol = check_real("tol", tol, low=0.0, low_open=True)
    if v == 0 or not _rejects(m, r, v, _gaussian_g(0.0), beta):
        return 0.0
    lo, hi = 0.0, 1.0
    while _rejects(m, r, v, _gaussian_g(hi), beta):
        lo, hi = hi, 2.0 * hi
        if hi > _MU_MAX:
            return lo
    while hi - lo > tol:
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if _rejects(m, r, v, _gaussian_g(mid), beta) else (lo, mid)
    return lo


def gdp_epsilon(mu: float, delta: float) -> float:
    """The epsilon at ``delta`` of mu-GDP, rounded down (it serves as an empirical lower bound).

    mu-GDP is (eps, delta(eps))-DP for delta(eps) = Phi(-eps/mu + mu/2) - e^eps Phi(-eps/mu - mu/2)
    (Dong, Roth & Su 2022, arXiv:1905.02383, Cor. 2.13), decreasing in eps; the answer is the eps with
    delta(eps) = delta, 0 where delta(0) = 2 Phi(mu/2) - 1 <= delta. The certified lower end of
    ``metadp.accounting._pld_gaussian.gaussian_epsilon_bounds`` (ndtr's error bounded), or, where that
    closed form underflows (mu beyond ~30), a 60-digit mpmath bisection kept on the low side.

    Raises:
        ValueError: for mu < 0 or not finite, or delta outside (0, 1).
    """
    mu = check_real("mu", mu, low=0.0)
    delta = check_delta("delta", delta)
    if mu == 0.0:
        return 0.0
    found = gaussian_epsilon_bounds((mu, 0.0), delta)
    if found is not None:
        return found[0]
    with mpmath.workdps(60):
        mp_mu, target = mpmath.mpf(mu), mpmath.mpf(delta)

        def excess(eps: Any) -> Any:  # delta(eps) - delta, decreasing in eps (mpmath numbers)
            return (mpmath.ncdf(-eps / mp_mu + mp_mu / 2)
                    - mpmath.exp(eps) * mpmath.ncdf(-eps / mp_mu - mp_mu / 2) - target)

        if excess(mpmath.mpf(0)) <= 0:
            return 0.0
        lo, hi = mpmath.mpf(0), mp_mu * mp_mu / 2 + mp_mu * (2 + mpmath.sqrt(-2 * mpmath.log(target))) + 1
        while hi - lo > mpmath.mpf(10) ** -20 * hi:
            mid = (lo + hi) / 2
            lo, hi = (mid, hi) if excess(mid) > 0 else (lo, mid)
        return _down(float(lo))


@dataclasses.dataclass(frozen=True)
class FdpGuessResult:
    """One scorer's best test of the family: k guesses each way, r = 2k, v correct, the bounds."""

    scorer: str
    k: int
    guesses: int
    correct: int
    mu_lower: float  # largest mu-GDP rejected at the family's level (0: none)
    epsilon_lower: float  # gdp_epsilon(mu_lower, delta): eps at delta of that Gaussian curve

    def to_dict(self) -> Dict[str, float]:
        return dataclasses.asdict(self)


def fdp_guess_and_bound(scores: Dict[str, np.ndarray], included: np.ndarray, *, beta: float,
                        delta: float) -> Tuple[List[FdpGuessResult], int]:
    """Every scorer's best (largest mu lower bound) test over ``guess_grid``, Bonferroni over them all:
    the f-DP counterpart of ``metadp.verify.one_run.guess_and_bound``.

    Args:
        scores: scorer name -> [m] scores (higher: more likely included). A reversed scorer is a
            separate entry (and a separate set of tests).
        included: [m] bool, which canaries were in the training data.
        beta: family-wise level in (0, 1): each of the ``tests`` tests runs at beta / tests.
        delta: the delta in (0, 1) at which mu_lower is reported as an epsilon.

    Returns:
        (one FdpGuessResult per scorer, the number of tests in the family).

    Raises:
        ValueError: for no scorers, fewer than 2 canaries, a scorer without m finite scores, or beta or
            delta outside (0, 1).
    """
    beta = check_real("beta", beta, low=0.0, high=1.0, low_open=True, high_open=True)
    delta = check_delta("delta", delta)
    if not scores:
        raise ValueError("scores must name at least one scorer, got none")
    m, tests, counts = guesses(scores, included)
    level = beta / tests
    out: List[FdpGuessResult] = []
    for name, found in counts:
        best: Optional[Tuple[int, int, float]] = None
        for k, v in found:
            mu = mu_lower_bound(m, 2 * k, v, level)
            if best is None or mu > best[2]:
                best = (k, v, mu)
        k, v, mu = cast(Tuple[int, int, float], best)  # (the guess grid is not empty)
        out.append(FdpGuessResult(name, k, 2 * k, v, mu, gdp_epsilon(mu, delta)))
    return out, tests


def fdp_audit(scores: Dict[str, np.ndarray], included: np.ndarray, *, beta: float, delta: float,
              curve: Optional[Tuple[np.ndarray, np.ndarray]] = None) -> Dict[str, Any]:
    """The f-DP part of a one-run audit (``metadp verify run``), as JSON:

    * ``gaussian``: ``fdp_guess_and_bound`` at family-wise level ``beta``: the largest mu-GDP the game rejects and
      its epsilon at ``delta``, an empirical lower bound *if the run's trade-off curve is Gaussian* (said in
      ``valid_if``); informational, never a verdict (a Poisson-sampled run's curve is not Gaussian, and a
      Gaussian stand-in calibrated to its epsilon can be rejected while the run meets its claim);
    * ``claim``: where ``curve`` (fprs, certified TPR upper bounds of the audited unit) is given, the recursion on
      that very curve (``curve_g``), every (scorer, k) of ``guess_grid`` one test at ``beta`` / tests: its smallest
      p-value and whether it is below the level, i.e. the run is shown not to meet its certified curve; the caller
      gives this test its share of the verdict's level (``beta`` here is that share).
    """
    results, tests = fdp_guess_and_bound(scores, included, beta=beta, delta=delta)
    best = max(results, key=lambda t: t.mu_lower)
    out: Dict[str, Any] = {
        "gaussian": {"mu_lower": best.mu_lower, "epsilon_lower": best.epsilon_lower, "tests": tests,
                     "scorers": [t.to_dict() for t in results], "confidence": 1 - beta,
                     "valid_if": "the run's trade-off curve is Gaussian (mu-GDP); else an estimate, not a bound"},
        "claim": None}
    if curve is None:
        return out
    g = curve_g(*curve)
    m, _, counts = guesses(scores, included)
    found = [(curve_p_value(m, 2 * k, v, g, rtol=1e-4), name, k, v) for name, pairs in counts for k, v in pairs]
    p, name, k, v = min(found)
    level = beta / len(found)
    out["claim"] = {"p_value": p, "level": level, "flagged": p < level, "scorer": name, "k": k, "guesses": 2 * k,
                    "correct": v, "tests": len(found), "test": "the one-run f-DP recursion on the certified trade-off "
                    "curve of the audited unit (metadp.accounting.risk): rejects the claim itself, any curve shape"}
    return out
