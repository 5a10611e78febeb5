"""Gaussian mechanisms as dominating pairs: plain, Poisson-subsampled, and mixtures of shifts.

All are instances of one pair, with noise N(0, sigma^2) and shifts in units of the sensitivity:

    "add":    P = sum_k w_k N(s_k, sigma^2),   Q = N(0, sigma^2)
    "remove": P = N(0, sigma^2),               Q = sum_k w_k N(s_k, sigma^2)

with weights w_k summing to 1 and shifts s_k >= 0. The plain Gaussian is w = (1,), s = (1,); the
Poisson-subsampled Gaussian is w = (1-q, q), s = (0, 1) (Mironov, Talwar & Zhang 2019; Koskela et al.
2020); an episodic record that appears in K ~ Binomial(L, eta) episodes is w_k = Bin(k; L, eta),
s_k = 2k (DESIGN.md 3.7). The privacy loss L_add(x) = log sum_k w_k exp((2 s_k x - s_k^2)/(2 sigma^2))
is increasing in x, so every loss quantile is a Gaussian quantile at x(l) = L_add^{-1}(l).
"""

from __future__ import annotations

import math
from typing import Dict, Tuple, cast

import numpy as np
from numpy.typing import ArrayLike
from scipy import special

from metadp.core.validation import check_positive, check_probability
from metadp.core._logmath import log_expm1
from metadp.mechanisms.base import DominatingPair

__all__ = ["GaussianMixturePair", "gaussian_pair", "ndtr_error", "poisson_gaussian_pairs"]

_U = 2.0**-53  # unit round-off of float64
_TINY = 1e-300  # absolute error allowed on every CDF value: subnormal results carry no relative accuracy


def ndtr_error(t) -> np.ndarray:
    """Relative error bound of ``scipy.special.ndtr(t)`` as computed from t = (x - s)/sigma.

    ndtr's own relative error, measured against mpmath at 40 digits on [-38, 8] (tests/mechanisms/
    test_gaussian_errors.py), stays below u (38 + 2 t^2) (u = 2^-53; the t^2 term is the rounding of
    the exponent t^2/2 in the tail); we take u (128 + 8 t^2), and add the rounding of t itself (2u |t|
    relative, amplified by d log Phi / dt <= |t| + 1)."""
    t = np.abs(t)
    return _U * (128.0 + 10.0 * t * t + 4.0 * t)


# n-point Gauss-Legendre: nodes, weights, the remainder's constant (b-a)^(2n+1) (n!)^4 / ((2n+1) ((2n)!)^3)
# (Abramowitz & Stegun 25.4.30) and E Z^(2n) = (2n-1)!!, for n = 4 and 8
_GL = {n: (*np.polynomial.legendre.leggauss(n), math.factorial(n) ** 4 / ((2 * n + 1) * float(math.factorial(2 * n)) ** 3),
           float(np.prod(np.arange(1, 2 * n, 2)))) for n in (4, 8)}


def _power(x: np.ndarray, n: int) -> np.ndarray:
    """x^n for n a power of 2, by squaring (a few ulps from pow, which costs ~10x more; only error
    bounds and the 4- or 8-point choice use it)."""
    out = x
    while n > 1:
        out = out * out
        n //= 2
    return out


def _gl_masses(a, b, weights, shifts, sigma, with_error: bool = False):
    """sum_k w_k Pr[a < N(s_k, sigma^2) <= b] by Gauss-Legendre (intervals of width <= sigma/8; 4 points
    where their remainder bound is below 1e-17 of the mass, else 8), and with ``with_error`` an absolute
    error bound, component by component (each weighted by its own share of the interval's mass).

    For one component with t the largest |x - s|/sigma on the interval, w = (b - a)/sigma: rounding of the
    nodes ((|a| + |b|) u), of the exponent t^2/2 and of the sums, u (64 + 8 t^2 + 8 t (|a| + |b|)/sigma);
    the n-point remainder R_n (b-a)^(2n+1) f^(2n) with |phi^(2n)(t)| = |He_2n(t)| phi(t), |He_2n(t)| =
    |E (t + iZ)^2n| <= 2^(n-1) (t^2n + E Z^2n), and phi varying by at most e^{t w} on the interval:
    R_n w^2n 2^(n-1) (t^2n + E Z^2n) e^{t w} of the component's mass there."""
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    w = (b - a) / sigma
    # |x - s| is convex in s: its largest value over the shifts is at the smallest or the largest one
    low, high = float(np.min(shifts)), float(np.max(shifts))
    t_all = np.maximum(np.maximum(np.abs(a - low), np.abs(a - high)),
                       np.maximum(np.abs(b - low), np.abs(b - high))) / sigma
    _, _, r4, z4 = _GL[4]
    with np.errstate(over="ignore", invalid="ignore"):
        cheap = r4 * _power(w, 8) * 8.0 * (_power(t_all, 8) + z4) * np.exp(t_all * w) <= 1e-17
    total, error = np.zeros(len(a)), np.zeros(len(a))
    for n, rows in ((4, np.nonzero(cheap)[0]), (8, np.nonzero(~cheap)[0])):
        if len(rows) == 0:
            continue
        x, gw, rn, zn = _GL[n]
        ar, br, wr = a[rows], b[rows], w[rows]
        nodes = 0.5 * (ar + br)[:, None] + 0.5 * (br - ar)[:, None] * x[None, :]
        scale = 0.5 * (br - ar) / (sigma * math.sqrt(2.0 * math.pi))
        for weight, shift in zip(weights, shifts):
            centred = nodes - shift if shift else nodes
            mass = weight * scale * (np.exp(-0.5 * (centred / sigma) ** 2) @ gw)
            total[rows] += mass
            if with_error:
                t = np.maximum(np.abs(ar - shift), np.abs(br - shift)) / sigma
                rounding = _U * (64.0 + 8.0 * t * t + 8.0 * t * (np.abs(ar) + np.abs(br)) / sigma + 4.0 * len(weights))
                with np.errstate(over="ignore", invalid="ignore"):
                    remainder = rn * _power(wr, 2 * n) * 2.0 ** (n - 1) * (_power(t, 2 * n) + zn) * np.exp(t * wr)
                error[rows] += mass * (rounding + np.minimum(remainder, 1.0)) * (1.0 + 1e-6)
    return (total, error) if with_error else total


class GaussianMixturePair(DominatingPair):
    """The pair above, for one direction (``"add"`` or ``"remove"``).

    Args:
        weights: mixture weights w_k >= 0 (normalised to sum 1).
        shifts: shifts s_k >= 0 in units of the sensitivity, at least one > 0.
        sigma: noise multiplier (standard deviation in units of the sensitivity), > 0.
        direction: ``"add"`` (P is the mixture) or ``"remove"`` (Q is the mixture).
    """

    exact_loss_cells = False  # cells are cut at the computed inverses of the loss edges
    # x -> (x, {shift: (Phi(t), Phi(-t), ndtr_error(t))}): ``_edge_cdfs``' memo (absent until the first call)
    _cdf_memo: Tuple[np.ndarray, Dict[float, Tuple[np.ndarray, np.ndarray, np.ndarray]]]

    def __init__(self, weights: ArrayLike, shifts: ArrayLike, sigma: float, direction: str = "add"):
        w = np.asarray(weights, dtype=np.float64)
        s = np.asarray(shifts, dtype=np.float64)
        if w.ndim != 1 or w.shape != s.shape or len(w) == 0:
            raise ValueError("weights and shifts must be 1-d sequences of the same non-zero length")
        if np.any(~np.isfinite(w)) or np.any(w < 0) or w.sum() <= 0:
            raise ValueError("weights must be finite, >= 0 and not all 0")
        if np.any(~np.isfinite(s)) or np.any(s < 0) or not np.any((s > 0) & (w > 0)):
            raise ValueError("shifts must be finite, >= 0, and some shift with positive weight must be > 0")
        if direction not in ("add", "remove"):
            raise ValueError(f"direction must be 'add' or 'remove', got {direction!r}")
        keep = w > 0
        self.weights = w[keep] / w.sum()
        self.shifts = s[keep]
        self.sigma = check_positive("sigma", sigma)
        self.direction = direction
        self._log_w = np.log(self.weights)
        self._a = self.shifts / self.sigma**2  # slope of each component's log-likelihood ratio
        self._b = self.shifts**2 / (2 * self.sigma**2)
        zero = self.shifts == 0
        # inf_x L_add(x) = log(total weight of zero shifts) (or -inf)
        self._loss_floor = float(np.log(self.weights[zero].sum())) if np.any(zero) else -math.inf

    # -- the increasing loss L_add and its inverse ----------------------------------------------

    def _loss_add(self, x: np.ndarray) -> np.ndarray:
        # logsumexp by hand (largest term + log of the scaled sum, as scipy's): scipy's array-API
        # dispatch costs ~100 us a call, and the PLD accountant calls this thousands of times
        terms = self._log_w + self._a * np.asarray(x, dtype=np.float64)[..., None] - self._b
        top = np.max(terms, axis=-1, keepdims=True)
        top = np.where(np.isfinite(top), top, 0.0)
        return np.log(np.sum(np.exp(terms - top), axis=-1)) + top[..., 0]

    def _inverse_add(self, loss: np.ndarray) -> np.ndarray:
        """x with L_add(x) = loss; -inf at or below the loss floor, +inf for +inf."""
        loss = np.asarray(loss, dtype=np.float64)
        out = np.full(loss.shape, -np.inf)
        ok = loss > self._loss_floor
        out[np.isposinf(loss)] = np.inf
        ok &= np.isfinite(loss)
        if not np.any(ok):
            return out
        target = loss[ok]
        closed = self._closed_form_inverse(target)
        if closed is not None:
            out[ok] = closed
            return out
        # With zero shifts (weight w0 = e^floor), solve log sum_{s_k > 0} w_k e^{a_k x - b_k} = log(e^l - w0)
        # instead (computed without cancellation, as the closed form does): the positive-shift part is
        # nearly linear in x, where L_add flattens towards its floor and Newton would crawl (~25 steps).
        positive = self._a > 0
        log_w, a, b = self._log_w[positive], self._a[positive], self._b[positive]
        if math.isfinite(self._loss_floor):
            with np.errstate(divide="ignore"):
                target = self._loss_floor + cast(np.ndarray, log_expm1(np.maximum(target - self._loss_floor, 0.0)))
        # Start right of the root (the smallest single-term solution: each term alone is <= the sum,
        # so each single-term solution is right of the root) and run Newton on the convex increasing
        # sum: iterates decrease to the root.
        x = np.min((target[:, None] - log_w + b) / a, axis=1)
        active = np.nonzero(np.isfinite(x))[0]  # a target at the floor (log 0) inverts to -inf
        settled = np.zeros(len(x), dtype=bool)  # converged once: one more step, then leave the active set
        for _ in range(200):
            if len(active) == 0:
                break
            xa, ta = x[active], target[active]
            terms = log_w + a * xa[:, None] - b
            # logsumexp as top + log1p(rest): the loss can sit within 1e-7 of 0 (small sampling
            # rates), where log(1 + rest) would keep only 9 digits
            arg = terms.argmax(axis=1)
            rows = np.arange(len(arg))
            top = terms[rows, arg]
            e = np.exp(terms - top[:, None])
            e[rows, arg] = 0.0
            rest = e.sum(axis=1)
            value = top + np.log1p(rest)
            slope = (e @ a + a[arg]) / (1.0 + rest)
            step = (value - ta) / slope
            x[active] = xa - step
            # converged, or at the round-off level of the residual: logsumexp is exact to a few ulps of
            # its largest term, so steps below that over the slope are noise
            scale = np.max(np.abs(terms), axis=1) + np.abs(ta)
            floor = 8.0 * np.finfo(float).eps * (np.abs(xa) + scale / slope)
            done = np.abs(step) <= np.maximum(1e-15 * np.maximum(1.0, np.abs(xa)), floor)
            leave = done & settled[active]
            settled[active[done]] = True
            active = active[~leave]
            if len(active) == 0:
                break
        out[ok] = x
        return out

    def _closed_form_inverse(self, target: np.ndarray):
        """x(l) in closed form for one shift (the Gaussian) or shifts (0, s) (Poisson subsampling)."""
        if len(self.shifts) == 1:
            (a,), (b,), (lw,) = self._a, self._b, self._log_w
            return (target - lw + b) / a
        if len(self.shifts) == 2 and self.shifts[0] == 0.0:
            # log(w0 + w1 e^{a x - b}) = l  <=>  a x - b = log(e^l - w0) - log w1, with
            # e^l - w0 = w0 expm1(l - log w0) computed without cancellation near the floor.
            log_w0, log_w1 = self._log_w
            a, b = self._a[1], self._b[1]
            with np.errstate(divide="ignore"):
                log_excess = log_w0 + log_expm1(np.maximum(target - log_w0, 0.0))
            return (log_excess - log_w1 + b) / a
        return None

    # -- DominatingPair interface --------------------------------------------------------------

    def _law(self, under: str):
        """(weights, shifts) of the Gaussian mixture X follows under P or Q (noise ``sigma``)."""
        mixture = (under == "P") == (self.direction == "add")
        return (self.weights, self.shifts) if mixture else (np.ones(1), np.zeros(1))

    def log_ratio(self, x) -> np.ndarray:
        value = self._loss_add(np.asarray(x, dtype=np.float64))
        return value if self.direction == "add" else -value

    def _mixture_cdf(self, x, upper: bool) -> np.ndarray:
        """Pr[X <= x] (or Pr[X > x] if upper) for X ~ the mixture."""
        z = (x[..., None] - self.shifts) / self.sigma
        return np.sum(self.weights * special.ndtr(-z if upper else z), axis=-1)

    def _null_cdf(self, x, upper: bool) -> np.ndarray:
        return special.ndtr(-x / self.sigma if upper else x / self.sigma)

    def loss_cdf(self, loss, under: str = "P") -> np.ndarray:
        return self._loss_tail(loss, under, upper=False)

    def loss_sf(self, loss, under: str = "P") -> np.ndarray:
        return self._loss_tail(loss, under, upper=True)

    def _loss_tail(self, loss, under: str, upper: bool) -> np.ndarray:
        self._check_under(under)
        loss = np.asarray(loss, dtype=np.float64)
        mixture = (under == "P") == (self.direction == "add")
        dist = self._mixture_cdf if mixture else self._null_cdf
        with np.errstate(invalid="ignore"):
            if self.direction == "add":  # L <= l  <=>  X <= x(l)
                return dist(self._inverse_add(loss), upper=upper)
            # remove: L = -L_add(X) <= l  <=>  L_add(X) >= -l  <=>  X >= x(-l)
            return dist(self._inverse_add(-loss), upper=not upper)

    def cell_masses(self, edges, under: str = "P", with_error: bool = False):
        """As ``DominatingPair.cell_masses``; where CDF differences would cancel, cells are integrated
        by 8-point Gauss-Legendre on pieces at most sigma/8 wide (relative accuracy ~1e-15).

        The cells are those of x between the computed inverses of the edges (floats, so exact cells of
        the real line; only their loss ranges carry the inverse's round-off). With ``with_error``, also
        returns absolute error bounds of (cells, below, above): CDF differences from the accuracy of
        ``ndtr`` (``_cdf_error``) at both ends, quadrature cells from its rounding and the Gauss-Legendre
        remainder (``_quadrature_error``)."""
        self._check_under(under)
        edges = np.asarray(edges, dtype=np.float64)
        x = self._edges_inverse(edges)  # the costly part: once for both P and Q
        weights, shifts = self._law(under)
        # Pr[X <= x] and Pr[X > x] term by term (each from its own side, no complement taken), and each
        # term's ndtr error weighted by the term: a far component's large t counts only as its mass
        below_x, above_x = np.zeros(len(x)), np.zeros(len(x))
        err_low, err_high = np.full(len(x), _TINY), np.full(len(x), _TINY)
        finite = np.isfinite(x)
        below_x[x == np.inf] = 1.0
        above_x[x == -np.inf] = 1.0
        for w, shift in zip(weights, shifts):
            phi_low, phi_high, phi_error = self._edge_cdfs(x, finite, float(shift))
            low, high = w * phi_low, w * phi_high
            below_x[finite] += low
            above_x[finite] += high
            rel = phi_error + 4.0 * _U * len(weights)
            err_low[finite] += low * rel
            err_high[finite] += high * rel
        cdf, sf = (below_x, above_x) if self.direction == "add" else (above_x, below_x)
        err_cdf, err_sf = (err_low, err_high) if self.direction == "add" else (err_high, err_low)
        use_cdf = cdf[1:] <= 0.5  # as DominatingPair.cell_masses: difference on the smaller side
        cells = np.maximum(np.where(use_cdf, cdf[1:] - cdf[:-1], sf[:-1] - sf[1:]), 0.0)
        below, above = float(cdf[0]), float(sf[-1])
        lo, hi = (x[:-1], x[1:]) if self.direction == "add" else (x[1:], x[:-1])
        # Differences of tail functions lose log10(tail / cell) digits: integrate where the difference's
        # error bound exceeds 1e-11 of the cell (the bulk, where cells are tiny next to the CDF values
        # around them, and the far tails, where ndtr's own error grows with t^2).
        errors = np.where(use_cdf, err_cdf[1:] + err_cdf[:-1], err_sf[:-1] + err_sf[1:]) + _U * cells
        cancelling = errors > 1e-11 * cells
        # cells wider than sigma/8 are cut into that many pieces (composite rule), up to 64
        with np.errstate(invalid="ignore", over="ignore"):  # edges at or below the loss floor invert to -inf
            pieces = np.ceil((hi - lo) / (self.sigma / 8.0))
            quad = np.nonzero(cancelling & np.isfinite(lo) & np.isfinite(hi) & (pieces <= 64))[0]
        count = np.maximum(pieces[quad], 1).astype(np.int64)
        if np.all(count == 1):  # every cell in one piece (the usual case): the same a, b without the indexing
            owner, a, b = np.arange(len(quad)), lo[quad], hi[quad]
        else:
            owner = np.repeat(np.arange(len(quad)), count)
            part = np.arange(len(owner)) - np.repeat(np.cumsum(count) - count, count)
            width = (hi[quad] - lo[quad]) / count
            a = lo[quad][owner] + width[owner] * part
            b = np.where(part == count[owner] - 1, hi[quad][owner], a + width[owner])
        masses, piece_errors = np.zeros(len(a)), np.zeros(len(a))
        for start in range(0, len(a), 1 << 16):  # bounded temporaries
            sl = slice(start, start + (1 << 16))
            if with_error:
                masses[sl], piece_errors[sl] = _gl_masses(a[sl], b[sl], weights, shifts, self.sigma, True)
            else:
                masses[sl] = _gl_masses(a[sl], b[sl], weights, shifts, self.sigma)
        cells[quad] = np.bincount(owner, masses, len(quad))
        if not with_error:
            return cells, below, above
        errors[quad] = np.bincount(owner, piece_errors, len(quad)) + _U * count * cells[quad] + _TINY  # + underflow
        return cells, below, above, errors, float(err_cdf[0]), float(err_sf[-1])

    def _edge_cdfs(self, x: np.ndarray, finite: np.ndarray, shift: float):
        """Phi(t), Phi(-t) and ``ndtr_error(t)`` at t = (x - shift)/sigma over the finite x, remembered
        per shift for the last x (the zero shift serves both the P- and the Q-masses of a lattice)."""
        memo = getattr(self, "_cdf_memo", None)
        if memo is None or memo[0] is not x:
            memo = self._cdf_memo = (x, {})
        if shift not in memo[1]:
            t = (x[finite] - shift) / self.sigma
            memo[1][shift] = (special.ndtr(t), special.ndtr(-t), ndtr_error(t))
        return memo[1][shift]

    def _edges_inverse(self, edges: np.ndarray) -> np.ndarray:
        """x at the loss edges (``cell_masses``), remembered for the last edges asked: the PLD lattice
        asks for the P- and then the Q-masses of the same cells."""
        known = getattr(self, "_last_inverse", None)
        if known is not None and known[0].shape == edges.shape and np.array_equal(known[0], edges):
            return known[1]
        x = self._inverse_add(edges if self.direction == "add" else -edges)
        self._last_inverse = (edges.copy(), x)
        return x

    def profile(self, epsilon) -> np.ndarray:
        """delta(eps) without the cancellation of sf_P - e^eps sf_Q: with x0 the loss threshold,
        add:    sum_k w_k [Phi~((x0 - s_k)/s) - Phi~(x0/s)] - expm1(eps) Phi~(x0/s),
        remove: sum_k w_k [Phi(x1/s) - Phi((x1 - s_k)/s)] - expm1(eps) sum_k w_k Phi((x1 - s_k)/s),
        so zero-shift components drop out exactly (Phi~ = 1 - Phi, x1 = x(-eps))."""
        eps = np.asarray(epsilon, dtype=np.float64)
        with np.errstate(over="ignore", invalid="ignore"):
            if self.direction == "add":
                x0 = self._inverse_add(eps)[..., None]
                null = special.ndtr(-x0 / self.sigma)
                terms = self.weights * (special.ndtr((self.shifts - x0) / self.sigma) - null)
                value = terms.sum(axis=-1) - np.expm1(eps) * null[..., 0]
            else:
                x1 = self._inverse_add(-eps)[..., None]
                shifted = special.ndtr((x1 - self.shifts) / self.sigma)
                terms = self.weights * (special.ndtr(x1 / self.sigma) - shifted)
                value = terms.sum(axis=-1) - np.expm1(eps) * (self.weights * shifted).sum(axis=-1)
        return np.clip(np.where(np.isnan(value), 0.0, value), 0.0, 1.0)

    def loss_bracket(self, tail: float) -> Tuple[float, float]:
        check_probability("tail", tail)
        # The loss is monotone in X; take X's quantiles under P, with per-component Gaussian tails.
        k = -float(special.ndtri(tail / (2.0 * len(self.weights)))) if tail > 0 else 40.0
        lo_x: float
        hi_x: float
        if (self.direction == "add"):
            lo_x, hi_x = np.min(self.shifts) - k * self.sigma, np.max(self.shifts) + k * self.sigma
        else:
            lo_x, hi_x = -k * self.sigma, k * self.sigma
        ends = self.log_ratio(np.array([lo_x, hi_x]))
        return float(np.min(ends)), float(np.max(ends))

    def loss_range(self, tail: float) -> Tuple[float, float]:
        """As ``DominatingPair.loss_range``, from X's quantiles under P (the loss is monotone in X), so
        no loss inversions are needed: bisection on the mixture CDF in x, or the Gaussian quantile."""
        check_probability("tail", tail)
        if tail <= 0.0:
            return super().loss_range(tail)
        lo_b, hi_b = self.loss_bracket(tail)  # its tails are <= tail too: never go beyond it
        tail = tail * (1.0 - 1e-9)  # strict tails, as the base class
        if self.direction == "add":  # P is the mixture; L = L_add(X) increases with X
            x_lo = self._mixture_quantile(tail, upper=False)  # Pr[X < x_lo] <= tail
            x_hi = self._mixture_quantile(tail, upper=True)  # Pr[X > x_hi] <= tail
            lo, hi = self._loss_add(np.array([x_lo, x_hi]))
        else:  # P = N(0, sigma^2); L = -L_add(X) decreases with X
            k = -float(special.ndtri(tail)) * self.sigma
            hi, lo = -self._loss_add(np.array([-k, k]))
        pad = 1e-12 * (1.0 + max(abs(lo), abs(hi)))  # round-off of L_add: keep the tails strict
        return max(float(lo) - pad, lo_b), min(float(hi) + pad, hi_b)

    def _mixture_quantile(self, tail: float, upper: bool) -> float:
        """x with Pr[X > x] <= tail (upper) or Pr[X < x] <= tail, X ~ the mixture, by bisection from
        the per-component Gaussian quantiles (where every component's tail is already <= tail)."""
        k = -float(special.ndtri(tail)) * self.sigma
        if upper:
            inner, outer = float(np.min(self.shifts)), float(np.max(self.shifts)) + k
        else:
            inner, outer = float(np.max(self.shifts)), float(np.min(self.shifts)) - k
        for _ in range(20):  # invariant: the tail beyond `outer` is <= tail
            # 31 interior points at once (a 32-way bisection: ~9 rounds of one array call, not ~45 calls)
            points = inner + (outer - inner) * np.arange(1, 32) / 32.0
            # the tail beyond a point shrinks from inner to outer: the first good point is the new outer
            good = self._mixture_cdf(points, upper=upper) <= tail
            first = int(np.argmax(good)) if np.any(good) else len(points)
            outer = float(points[first]) if first < len(points) else outer
            inner = float(points[first - 1]) if first > 0 else inner
            if abs(outer - inner) <= 1e-13 * (1.0 + abs(outer)):
                break
        return outer

    def sample(self, n: int, rng: np.random.Generator, under: str = "P") -> np.ndarray:
        self._check_under(under)
        mixture = (under == "P") == (self.direction == "add")
        noise = rng.standard_normal(n) * self.sigma
        if not mixture:
            return noise
        return noise + self.shifts[rng.choice(len(self.weights), size=n, p=self.weights)]

    def __repr__(self) -> str:
        return (f"GaussianMixturePair(weights={self.weights.tolist()}, shifts={self.shifts.tolist()}, "
                f"sigma={self.sigma:g}, direction={self.direction!r})")


def gaussian_pair(noise_multiplier: float) -> GaussianMixturePair:
    """N(1, z^2) vs N(0, z^2): the Gaussian mechanism (both directions have this same PLD)."""
    return GaussianMixturePair([1.0], [1.0], noise_multiplier, "add")


def poisson_gaussian_pairs(rate: float, noise_multiplier: float) -> Tuple[GaussianMixturePair, ...]:
    """Both directions of the Poisson-subsampled Gaussian (add/remove relation)."""
    q = check_probability("rate", rate)
    if q == 1.0:
        return (gaussian_pair(noise_multiplier),)
    return tuple(GaussianMixturePair([1.0 - q, q], [0.0, 1.0], noise_multiplier, d) for d in ("add", "remove"))
