"""Random allocation (balls in bins) and shuffled equal partitions: deterministic [lower, upper] bounds.

Setting (DESIGN.md 3.9). A pass has t steps; each releases a clipped sum (clip norm C) plus
N(0, (z C)^2 I). Under **random allocation** each unit independently goes to one uniformly random step
of the pass (k = 1 of t); passes ("epochs") are independent. Relation: add/remove of one unit, the
other units' contributions fixed. In units of C, one coordinate per step, one pass is dominated by

    P = N(0, z^2 I_t)   vs   Q = (1/t) sum_i N(e_i, z^2 I_t)        (both orders: "A" = Q||P, "B" = P||Q)

and it is exactly this pair when all other units contribute 0 (Chua et al. 2025, arXiv:2412.16802;
Feldman & Shenfeld 2025, arXiv:2502.08202). With V_i = exp((x_i - 1/2)/z^2) (i.i.d. under P, E V = 1,
E V^k = exp(k(k-1)/(2 z^2))), the likelihood ratio is R = dQ/dP = (1/t) sum_i V_i.

**Upper bounds.** A PLD upper bound, usually much tighter (about 0.45 where this RDP bound gives 1.13 at
z = 1, t = 250, delta = 1e-6), needs the PLD accountant's lattice and lives above this layer, in
``metadp.accounting.allocation_pld`` (plans report the smaller of the two). Here (:func:`allocation_upper`):
Renyi DP of each order, composed over the epochs (RDP adds
over independent passes), converted by Canonne, Kamath & Steinke 2020 (Prop. 12) per order, each order
of the pair separately (each ordered pair's hockey-stick divergence is bounded by its own RDP):

* order A, D_a(Q||P) = log E_P[R^a] / (a - 1), integer a >= 2, **exactly**: E_P[R^a] = a! [u^a] M(u)^t
  / t^a with M(u) = sum_k E V^k u^k / k! (the multinomial expansion; the same quantity as Feldman &
  Shenfeld's sum over integer partitions of a, their "remove" direction), computed by binary powering
  of the truncated series in log space (all terms positive, no cancellation);
* order B, D_a(P||Q) = log E_P[R^-(a-1)] / (a - 1): proved here (no closed form). With b = a - 1 and
  g(r) = r^-b - 1 + b (r - 1) >= 0, E R^-b = 1 + E g(R) since E R = 1. On R >= 1, g(r) <= b(b+1)(r-1)^2/2
  and g(r) <= b (r - 1), so that part is <= min(b(b+1) Var R / 2, b sqrt(Var R) / 2), Var R =
  (e^{1/z^2} - 1)/t. On R < 1, E[g(R); R < 1] = int_0^1 b (r^-(b+1) - 1) Pr[R < r] dr (layer cake), with
  Pr[R < r] <= min(1, inf_s e^{t s r} phi(s)^t, Pr[V < t r]^t) (Chernoff for the lower tail, phi(s) =
  E e^{-s V} bounded above by an upper Riemann sum over exact Gaussian cell probabilities; and R < r
  forces every V_i < t r). The integral is bounded by upper sums (the integrand's factors are monotone)
  on a grid in log r, with the part below the grid bounded in closed form (Gaussian tail of log V).
  A second bound, the smaller of the two kept: r^-b <= T2(r) (its second-order Taylor polynomial at 1)
  on r >= 1, r^-b <= T2(r) + K (1 - r)^3 on [r*, 1) with K = b(b+1)(b+2) r*^-(b+3) / 6 (Lagrange
  remainder), and r^-b - T2(r) <= r^-b below r*, so E R^-b <= 1 + b(b+1) Var R / 2 + K E(1 - R)_+^3 +
  E[R^-b; R < r*], the last two by the same tail integrals, minimised over r* on the grid.
* the result is capped by the exact E-fold Gaussian epsilon (every pass is dominated by one Gaussian
  by joint convexity; E Gaussians compose to one with multiplier z / sqrt(E)).

What is and is not taken from the literature: the pair is Chua et al.'s and Feldman & Shenfeld's; the
order-A value is the quantity of Feldman & Shenfeld's exact RDP for their "remove" direction (their
code, PyPI ``random-allocation``, cites Lemma 2.4 and Claim 6.4 of arXiv:2502.08202; it agrees with
ours to 1e-6, tests/amplification/test_allocation_bounds.py), derived here from the multinomial
expansion; the order-B bound and the lower bounds are derived here (proofs above). Feldman &
Shenfeld's Poisson-domination and decomposition theorems are NOT used (not verified here), and neither
is the PLD construction of arXiv:2602.17284 (not read). Assumptions: add/remove of one unit, Gaussian
noise N(0, (zC)^2 I) on a sum of contributions clipped to C, k = 1 of t steps per pass (their k-of-t
reduction is used only as proved below, for k > 1), passes independent, the allocation independent of
the data.

**Lower bound** (:func:`allocation_lower`): any post-processing of the exact pair lower-bounds its
hockey-stick divergence. The per-pass event {max_i x_i > tau} has closed forms for independent
Gaussians: P(E) = 1 - Phi(tau/z)^t, Q(E) = 1 - Phi((tau - 1)/z) Phi(tau/z)^(t-1). Over E epochs the
count N of passes with the event is Bin(E, Q(E)) vs Bin(E, P(E)) (a post-processing of the product
pair), whose hockey-stick divergence sum_m (Q_m - e^eps P_m)_+ (and the reverse order) is a certified
lower bound, maximised over tau.

**k of t** (``selected = k``: each unit in k distinct uniformly random steps of a pass). The lower bound
is the same test with k shifted coordinates: Q(E) = 1 - Phi((tau - 1)/z)^k Phi(tau/z)^(t-k). The upper
bound (``metadp.sampling.BallsInBins``) reduces k of t to k independent 1-of-floor(t/k) allocations, the
reduction of Feldman & Shenfeld (arXiv:2502.08202), proved here as follows. (i) A uniformly random
partition of the t steps into k blocks of sizes floor(t/k) or ceil(t/k), then one uniformly random step of
each block, draws a uniformly random k-subset: every k-subset it draws has distinct elements, and the law
is invariant under permutations of the steps (tests/amplification/test_allocation_k.py enumerates it).
(ii) Revealing the partition (public, independent of the data) can only help the adversary; given it, a
pass is the composition of k one-step allocations over disjoint blocks. (iii) A 1-of-(m+1) allocation is
the mixture, over a revealed uniformly random step r, of a 1-of-m allocation over the other steps plus
step r, which releases noise alone: revealing r again only helps, so 1 of m+1 is at least as private as 1
of m, and every block may be charged as floor(t/k) steps.

**Shuffle** (equal partitions, :func:`shuffle_lower`): a pass cuts a shuffled population into t equal
batches. With every other unit contributing 0, the unit lies in a uniformly random batch, so under the
zero-out reading of add/remove (the unit replaced by a null unit, the partition unchanged) one pass is
*exactly* the pair above: the allocation lower bound is a lower bound for the shuffle (Chua et al.
2024, arXiv:2403.17673, the same max-over-batches test). Under substitution (shift +a vs -a in the
same random batch) the event's probabilities are 1 - Phi((tau -+ a)/z) Phi(tau/z)^(t-1). The shuffle's
upper bound stays the single-Gaussian epsilon (``metadp.amplification.one_pass.shuffle_epsilon``).
"""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import Tuple, cast

import numpy as np
from scipy import special, stats

from metadp.core._logmath import log_expm1
from metadp.core.conversions import epsilon_from_rdp
from metadp.core.validation import check_count, check_delta, check_positive, check_real
from metadp.amplification.one_pass import gaussian_epsilon

__all__ = ["ALLOCATION_ORDERS", "AllocationBounds", "allocation_rdp", "allocation_rdp_at", "allocation_upper", "allocation_lower",
           "allocation_lower_delta", "one_pass_bounds", "shuffle_lower", "shuffle_lower_delta"]

ALLOCATION_ORDERS = np.arange(2, 129, dtype=np.float64)
_RDP_MARGIN = 1e-9  # relative allowance for the float rounding of every RDP value (log-space sums)
_X_CELLS = np.linspace(-38.0, 38.0, 6001)  # standardised Gaussian cells for phi(s)
_S_GRID = np.exp(np.linspace(math.log(1e-3), math.log(1e9), 241))  # Chernoff parameters


def _check(z, t, epochs):
    return check_positive("z", z), check_count("t", t, minimum=1), check_count("epochs", epochs, minimum=1)


# Noise multipliers where the two-order bound is computed; outside, one pass is bounded by the plain Gaussian
# (each unit is in one step of the pass; revealing which step only helps the adversary, so alpha / (2 z^2) of
# order alpha is an upper bound). Below the low end exp(1/z^2) overflows (z ~ 0.0377), and there the
# amplification is worth nothing measurable anyway; above the high end z^2 overflows and every RDP is ~0.
_AMPLIFIED_Z = (0.05, 1e100)


def _gaussian_rdp(z: float, orders: np.ndarray) -> np.ndarray:
    """alpha / (2 z^2) without forming z^2 (which overflows for z > 1e154, underflows for z < 1e-154)."""
    with np.errstate(over="ignore"):
        return orders / (2.0 * z) / z


# -- upper bound: RDP of both orders ---------------------------------------------------------------------


def _log_series_mul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Log coefficients of the product of two power series given by log coefficients, truncated."""
    n = len(a)
    idx = np.arange(n)
    diff = idx[:, None] - idx[None, :]  # (n, k): b index n - k
    terms = np.where(diff >= 0, a[None, :] + b[np.clip(diff, 0, n - 1)], -np.inf)
    return special.logsumexp(terms, axis=1)


def _rdp_order_a(z: float, t: int, orders: np.ndarray) -> np.ndarray:
    """D_a(Q||P) per pass, exact, integer orders (module docstring), rounded up."""
    top = int(orders.max())
    k = np.arange(top + 1, dtype=np.float64)
    base = k * (k - 1) / (2 * z * z) - special.gammaln(k + 1)  # log E V^k / k!
    result, power, n = None, base, t
    while n:
        if n & 1:
            result = power if result is None else _log_series_mul(result, power)
        n >>= 1
        if n:
            power = _log_series_mul(power, power)
    a = orders.astype(int)
    log_moment = special.gammaln(a + 1.0) + cast(np.ndarray, result)[a] - a * math.log(t)  # t >= 1: set
    # float error: each log-sum-exp is accurate to a few ulps of its largest term (|term| <= a log t + a^2/z^2),
    # over 2 log2(t) products; 1e-12 of that magnitude per product covers it with a wide margin
    error = 1e-12 * (2 * math.log2(t) + 2) * (a * math.log(t) + a * a / (2 * z * z) + 1.0)
    rdp = (np.maximum(log_moment, 0.0) + error) / (orders - 1.0)
    return rdp * (1 + _RDP_MARGIN)


@functools.lru_cache(maxsize=64)
def _log_phi_upper(z: float) -> np.ndarray:
    """log of an upper bound on phi(s) = E exp(-s V) at every s of ``_S_GRID`` (upper Riemann sum)."""
    g = _X_CELLS
    log_cdf = special.log_ndtr(g)
    with np.errstate(divide="ignore"):  # cells of probability 0 (float) get log 0 = -inf
        log_p = log_cdf[1:] + np.log(-np.expm1(log_cdf[:-1] - log_cdf[1:]))  # cell probabilities, relative
    v_left = np.exp(g[:-1] / z - 0.5 / z**2)
    terms = log_p[None, :] - _S_GRID[:, None] * v_left[None, :]
    tails = np.stack([np.full(len(_S_GRID), log_cdf[0]),  # below the grid: e^{-sV} <= 1
                      special.log_ndtr(-g[-1]) - _S_GRID * v_left[-1]], axis=1)
    return special.logsumexp(np.concatenate([terms, tails], axis=1), axis=1) + 1e-12


def _log_tail_bound(z: float, t: int, log_r: np.ndarray) -> np.ndarray:
    """log of an upper bound on Pr_P[R < r] (module docstring), at each log r."""
    r = np.exp(log_r)
    chernoff = t * np.min(_S_GRID[None, :] * r[:, None] + _log_phi_upper(z)[None, :], axis=1) + 1e-12 * t
    all_small = t * special.log_ndtr((z * z * (math.log(t) + log_r) + 0.5) / z)
    return np.minimum(0.0, np.minimum(chernoff, all_small + 1e-12 * t))


def _rdp_order_b(z: float, t: int, orders: np.ndarray) -> np.ndarray:
    """An upper bound on D_a(P||Q) per pass (module docstring), at every order."""
    if t == 1:
        return orders / (2 * z * z)
    b = orders[:, None] - 1.0
    var = math.expm1(1.0 / z**2) / t
    # grid in log r: the far left end makes the closed-form remainder negligible
    a0 = (z * z * math.log(t) + 0.5) / z
    y0 = (a0 + b.max() / z + 40.0) / z + 1.0
    log_r = np.concatenate([np.linspace(-y0, math.log(0.5), 1500, endpoint=False),
                            np.log(np.linspace(0.5, 1.0, 3001))])
    lo, hi = log_r[:-1], log_r[1:]
    log_c = _log_tail_bound(z, t, hi)  # Pr[R < r_hi] on each cell
    # E[(1 - R)_+^3] = int_0^1 3 (1 - r)^2 Pr[R < r] dr, by an upper sum
    w3 = np.maximum((1 - np.exp(lo)) ** 3 - (1 - np.exp(hi)) ** 3, 0.0)
    m3 = float(np.sum(w3 * np.exp(log_c))) * (1 + 1e-10) + 1e-300
    # E[R^-b; R < r*] = r*^-b Pr[R < r*] + int_0^{r*} b r^-(b+1) Pr[R < r] dr, at every grid point r* = r_hi
    log_w = -b * hi + log_expm1(b * (hi - lo))  # int over the cell of b r^-(b+1) dr
    cum = np.logaddexp.accumulate(log_w + log_c[None, :], axis=1)
    bb = b[:, 0]
    # remainder below the grid: int_{y0}^inf b e^{b y} Phi(a0 - z y) dy (Phi(-w) <= e^{-w^2/2}), in closed form
    log_rem = (np.log(bb) + 0.5 * math.log(2 * math.pi) - math.log(z) + bb * a0 / z + bb**2 / (2 * z * z)
               + special.log_ndtr(-(z * y0 - a0 - bb / z)))
    log_low = np.logaddexp(np.logaddexp(cum, log_rem[:, None]), -b * hi + log_c[None, :])
    # Taylor on [r*, 1): r^-b <= T2(r) + K (1 - r)^3, K = b(b+1)(b+2) r*^-(b+3) / 6; r^-b <= T2(r) on r >= 1
    log_k = np.log(bb * (bb + 1) * (bb + 2) / 6.0)[:, None] - (b + 3) * hi[None, :] + math.log(m3)
    extra = np.min(np.logaddexp(log_low, log_k), axis=1)
    # second bound, also valid (the smaller is kept): E R^-b = 1 + E g(R), g(r) = r^-b - 1 + b (r - 1); on R >= 1
    # g <= min(b(b+1)(r-1)^2/2, b (r-1)); E[g(R); R < 1] = int_0^1 b (r^-(b+1) - 1) Pr[R < r] dr by upper sums
    near = hi > math.log(0.49)  # there keep the -b dr part of the cell weight (it matters near r = 1)
    with np.errstate(over="ignore"):
        w_near = np.exp(np.minimum(log_w, 700.0)) - b * (np.exp(hi) - np.exp(lo))[None, :]
    w_near = np.maximum(w_near, 0.0) * (1 + 1e-10) + 1e-16 * np.exp(np.minimum(log_w, 700.0))
    log_w2 = np.where(near[None, :], np.log(np.maximum(w_near, 1e-320)), log_w)
    below = np.logaddexp(special.logsumexp(log_w2 + log_c[None, :], axis=1), log_rem)
    above = np.minimum(bb * (bb + 1) * var / 2, bb * math.sqrt(var) / 2)
    with np.errstate(over="ignore"):
        log_moment = np.minimum(np.log1p(bb * (bb + 1) * var / 2 + np.exp(extra)), np.log1p(above + np.exp(below)))
    return log_moment / (orders - 1.0) * (1 + _RDP_MARGIN) + 1e-15


def allocation_rdp(z: float, t: int, epochs: int = 1, orders=ALLOCATION_ORDERS) -> Tuple[np.ndarray, np.ndarray]:
    """(RDP of order A, RDP of order B) over ``epochs`` random-allocation passes of t steps, at ``orders``
    (integers >= 2): order A exact, order B an upper bound (module docstring)."""
    z, t, epochs = _check(z, t, epochs)
    orders = np.asarray(orders, dtype=np.float64)
    if np.any(orders < 2) or np.any(orders != np.round(orders)):
        raise ValueError("orders must be integers >= 2")
    if not _AMPLIFIED_Z[0] <= z <= _AMPLIFIED_Z[1]:
        gaussian = epochs * _gaussian_rdp(z, orders)
        return gaussian, gaussian
    gaussian = epochs * _gaussian_rdp(z, orders)  # never above the pass's single Gaussian (also a bound)
    return (np.minimum(epochs * _rdp_order_a(z, t, orders), gaussian),
            np.minimum(epochs * _rdp_order_b(z, t, orders), gaussian))


@functools.lru_cache(maxsize=64)
def _pass_rdp(z: float, t: int) -> np.ndarray:
    """max(order A, order B) RDP of one pass at ``ALLOCATION_ORDERS`` (cached)."""
    rdp_a, rdp_b = allocation_rdp(z, t)
    return np.maximum(rdp_a, rdp_b)


def allocation_rdp_at(z: float, t: int, orders) -> np.ndarray:
    """An RDP upper bound of one pass (both orders of the pair) at any orders > 1: RDP is nondecreasing
    in the order, so D(a) <= D(ceil(a)) (orders below 2 use order 2); orders above the largest of
    ``ALLOCATION_ORDERS`` get +inf (no bound claimed)."""
    z, t, _ = _check(z, t, 1)
    orders = np.asarray(orders, dtype=np.float64)
    if t == 1 or not _AMPLIFIED_Z[0] <= z <= _AMPLIFIED_Z[1]:
        return _gaussian_rdp(z, orders)
    curve = _pass_rdp(z, t)
    idx = np.clip(np.ceil(orders), 2, None) - 2
    top = len(ALLOCATION_ORDERS) - 1
    safe = np.minimum(np.nan_to_num(idx, nan=top, posinf=top), top).astype(int)
    return np.where(idx <= top, curve[safe], np.inf)


@functools.lru_cache(maxsize=256)
def allocation_upper(z: float, t: int, delta: float, epochs: int = 1) -> float:
    """Certified upper bound on epsilon at ``delta`` for ``epochs`` random-allocation passes of t steps
    (k = 1 of t, Gaussian noise multiplier z, add/remove; module docstring), never above the exact
    epochs-fold Gaussian epsilon."""
    z, t, epochs = _check(z, t, epochs)
    delta = check_delta("delta", delta)
    gauss = gaussian_epsilon(z / math.sqrt(epochs), delta)
    if t == 1:
        return gauss
    rdp_a, rdp_b = allocation_rdp(z, t, epochs)
    eps = max(epsilon_from_rdp(ALLOCATION_ORDERS, rdp_a, delta)[0], epsilon_from_rdp(ALLOCATION_ORDERS, rdp_b, delta)[0])
    return min(eps, gauss)


# -- lower bounds: the max-over-steps event ---------------------------------------------------------------


def _event_probs(z: float, t: int, shift: float, taus: np.ndarray, selected: int = 1) -> np.ndarray:
    """Pr[max_i x_i > tau] when ``selected`` uniformly random coordinates of N(0, z^2 I_t) are shifted by
    ``shift`` (which ones does not matter: the event is symmetric in the coordinates)."""
    log_in = selected * special.log_ndtr((taus - shift) / z) + (t - selected) * special.log_ndtr(taus / z)
    return -np.expm1(log_in)


def _binomial_pmfs(p: np.ndarray, epochs: int) -> np.ndarray:
    """Bin(m; E, p) for m = 0..E (rows) and each p (columns), from logs: scipy's pmf raises OverflowError
    (boost's ibeta_derivative) for some p at a tiny noise multiplier. E <= _LOWER_EPOCHS, so the log
    binomial coefficients are exact to a few ulps, well inside _hockey_binomial's error allowance."""
    m = np.arange(epochs + 1, dtype=np.float64)[:, None]
    p = np.clip(np.asarray(p, dtype=np.float64), 0.0, 1.0)[None, :]
    log_comb = special.gammaln(epochs + 1.0) - special.gammaln(m + 1.0) - special.gammaln(epochs - m + 1.0)
    with np.errstate(divide="ignore", invalid="ignore"):  # log 0 = -inf where p is 0 or 1: pmf 0 (or 1 below)
        log_pmf = log_comb + special.xlogy(m, p) + special.xlog1py(epochs - m, -p)
    return np.exp(log_pmf)


def _hockey_binomial(p: np.ndarray, q: np.ndarray, epochs: int, eps: float, pmfs=None) -> np.ndarray:
    """sum_m (Bin(m; E, p) - e^eps Bin(m; E, q))_+ for each (p, q), rounded down (``pmfs``: both pmf tables,
    when already computed)."""
    if eps > 600.0:  # the float error allowance 1e-12 e^eps below is then above any delta: the bound is 0
        return np.zeros(len(p))
    pmf_p, pmf_q = pmfs if pmfs is not None else (_binomial_pmfs(p, epochs), _binomial_pmfs(q, epochs))
    diff = pmf_p - math.exp(eps) * pmf_q
    value = np.sum(np.maximum(diff, 0.0), axis=0)
    # float error of the pmfs and of the event probabilities: below 1e-12 (1 + e^eps) in all
    return np.maximum(value * (1 - 1e-9) - 1e-12 * (1.0 + math.exp(eps)), 0.0)


# The lower bounds use at most this many passes: the adversary may ignore the rest, so the epsilon of fewer
# passes is a lower bound too (binomial pmfs over more passes cost time and memory in proportion: 4,096 passes took a minute)
_LOWER_EPOCHS = 256


def _lower_delta(z: float, t: int, eps: float, epochs: int, shifts: Tuple[float, float], selected: int = 1) -> float:
    """max over tau of the binomial hockey-stick, both orders, for the pair with these shifts (over at most
    ``_LOWER_EPOCHS`` passes: a lower bound for more)."""
    epochs = min(epochs, _LOWER_EPOCHS)
    a, c = shifts
    taus = np.linspace(min(a, c) - 8 * z, max(a, c) + z * (8 + math.sqrt(2 * math.log(t + 1))), 801)
    best = 0.0
    for zoom in range(3):  # grid, then two zooms around the best tau
        pq, pp = _event_probs(z, t, a, taus, selected), _event_probs(z, t, c, taus, selected)
        # the first grid's pmfs do not depend on eps: computed once for every eps of the bisection
        tables = _first_grid_pmfs(z, t, epochs, shifts, selected) if zoom == 0 else (_binomial_pmfs(pq, epochs),
                                                                           _binomial_pmfs(pp, epochs))
        vals = np.maximum(_hockey_binomial(pq, pp, epochs, eps, tables),
                          _hockey_binomial(pp, pq, epochs, eps, tables[::-1]))
        i = int(np.argmax(vals))
        best = max(best, float(vals[i]))
        step = taus[1] - taus[0]
        taus = np.linspace(taus[i] - step, taus[i] + step, 201)
    return best


@functools.lru_cache(maxsize=16)
def _first_grid_pmfs(z: float, t: int, epochs: int, shifts: Tuple[float, float], selected: int = 1):
    """The binomial pmf tables of ``_lower_delta``'s first tau grid, (for shift a, for shift c)."""
    a, c = shifts
    taus = np.linspace(min(a, c) - 8 * z, max(a, c) + z * (8 + math.sqrt(2 * math.log(t + 1))), 801)
    return (_binomial_pmfs(_event_probs(z, t, a, taus, selected), epochs),
            _binomial_pmfs(_event_probs(z, t, c, taus, selected), epochs))


def _lower_epsilon(delta_of, delta: float, eps_max: float) -> float:
    """Largest eps (on a 1e-9 relative bisection) with a certified delta_of(eps) > delta; 0 when none."""
    if not delta_of(0.0) > delta:
        return 0.0
    lo, hi = 0.0, max(eps_max, 1e-12)
    if delta_of(hi) > delta:
        return hi
    while hi - lo > 1e-9 * hi:
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if delta_of(mid) > delta else (lo, mid)
    return lo


def allocation_lower_delta(z: float, t: int, eps: float, epochs: int = 1, selected: int = 1) -> float:
    """Certified lower bound on delta(eps) of ``epochs`` random-allocation passes, each unit in ``selected``
    uniformly random steps of the t of a pass (module docstring)."""
    z, t, epochs = _check(z, t, epochs)
    selected = check_count("selected", selected, minimum=1, maximum=t)
    eps = check_real("eps", eps, low=0.0)
    return _lower_delta(z, t, eps, epochs, (1.0, 0.0), selected)


@functools.lru_cache(maxsize=256)
def allocation_lower(z: float, t: int, delta: float, epochs: int = 1, selected: int = 1) -> float:
    """Certified lower bound on epsilon at ``delta`` for ``epochs`` random-allocation passes, each unit in
    ``selected`` of the t steps of a pass: the true epsilon is at least this (module docstring)."""
    z, t, epochs = _check(z, t, epochs)
    selected = check_count("selected", selected, minimum=1, maximum=t)
    delta = check_delta("delta", delta)
    eps_max = gaussian_epsilon(z / math.sqrt(epochs * selected), delta)  # k Gaussians a pass bound it above
    return _lower_epsilon(lambda e: _lower_delta(z, t, e, epochs, (1.0, 0.0), selected), delta, eps_max)


def shuffle_lower_delta(z: float, t: int, eps: float, epochs: int = 1, relation: str = "add_remove") -> float:
    """Certified lower bound on delta(eps) of ``epochs`` shuffled passes cut into t equal batches.

    ``relation``: "add_remove" (zero-out reading: the unit replaced by a null unit; shifts 1 vs 0) or
    "substitute" (shifts +1/2 vs -1/2: z is relative to the substitution sensitivity, 2C for a clipped
    sum, so the unit moves the sum by +-C = +-1/2 of it)."""
    z, t, epochs = _check(z, t, epochs)
    eps = check_real("eps", eps, low=0.0)
    return _lower_delta(z, t, eps, epochs, _shuffle_shifts(relation))


def _shuffle_shifts(relation: str) -> Tuple[float, float]:
    if relation == "add_remove":
        return 1.0, 0.0
    if relation == "substitute":
        return 0.5, -0.5
    raise ValueError(f"relation must be 'add_remove' or 'substitute', got {relation!r}")


@functools.lru_cache(maxsize=256)
def shuffle_lower(z: float, t: int, delta: float, epochs: int = 1, relation: str = "add_remove") -> float:
    """Certified lower bound on epsilon at ``delta`` for ``epochs`` shuffled passes of t equal batches."""
    z, t, epochs = _check(z, t, epochs)
    delta = check_delta("delta", delta)
    shifts = _shuffle_shifts(relation)
    eps_max = gaussian_epsilon(z / math.sqrt(epochs), delta)
    return _lower_epsilon(lambda e: _lower_delta(z, t, e, epochs, shifts), delta, eps_max)


@dataclasses.dataclass(frozen=True)
class AllocationBounds:
    """A certified interval [lower, upper] for epsilon at ``delta`` and its comparison numbers.

    Attributes:
        lower, upper: the true epsilon of the scheme lies in [lower, upper].
        delta, z, t, epochs: the query.
        scheme: "balls_in_bins" or "shuffle".
        gaussian: the exact epochs-fold single-Gaussian epsilon (no amplification).
        upper_method: which bound gave ``upper``: "rdp" (:func:`allocation_upper`), "gaussian" (the shuffle's),
            or "pld" (``metadp.accounting.allocation.certified_one_pass_bounds``).
    """

    lower: float
    upper: float
    delta: float
    z: float
    t: int
    epochs: int
    scheme: str
    gaussian: float
    upper_method: str = "rdp"


def one_pass_bounds(z: float, t: int, delta: float, epochs: int = 1, scheme: str = "balls_in_bins",
                      relation: str = "add_remove") -> AllocationBounds:
    """[lower, upper] for random allocation (``scheme="balls_in_bins"``) or shuffled equal partitions
    (``scheme="shuffle"``: the upper bound is the single-Gaussian one, no amplification claimed)."""
    z, t, epochs = _check(z, t, epochs)
    delta = check_delta("delta", delta)
    gauss = gaussian_epsilon(z / math.sqrt(epochs), delta)
    if scheme == "balls_in_bins":
        if relation != "add_remove":
            raise ValueError(f"relation must be 'add_remove' for balls_in_bins, got {relation!r}")
        lower, upper = allocation_lower(z, t, delta, epochs), allocation_upper(z, t, delta, epochs)
    elif scheme == "shuffle":
        lower, upper = shuffle_lower(z, t, delta, epochs, relation), gauss
    else:
        raise ValueError(f"scheme must be 'balls_in_bins' or 'shuffle', got {scheme!r}")
    return AllocationBounds(min(lower, upper), upper, delta, z, t, epochs, scheme, gauss,
                            "rdp" if scheme == "balls_in_bins" else "gaussian")
