"""Composition of lattice sums by exponentially tilted FFT powers, with a proven round-off bound.

The n-fold sum S of a lattice loss is read at tiny delta from its upper tail, where its masses are
far below the largest one: an FFT's absolute round-off (about 1e-16 of the largest mass, amplified by
the power) would swamp them. So the power is taken of the tilted pmf x_j = p_j e^{theta j - k},
k = log sum_j p_j e^{theta j} (j the lattice index), whose n-fold sum is the tilted law of S:
x^{*n}(s) = p^{*n}(s) e^{theta s - n k} exactly (Esscher 1932; the saddle-point idea of Daniels 1954).
With theta chosen where the (eps, delta) conversion of the Chernoff bound is tightest, the tilted law
is centred near the epsilon sought, and its round-off is small relative to the masses that decide
delta there. Untilting multiplies bin s by e^{n k - theta s}.

Error terms (all bounds, all charged on the pessimistic side of each bound):

* Masses: each stored mass is within relative eta of an exact pair's (``Lattice.rel_error``) and the
  tilt adds a few ulps; all masses are >= 0, so the exact n-fold sum is within a factor
  (1 +- eta')^n of the one of the stored masses, bin by bin: ``log_factor``.
* FFT: ||fl(FFT x) - FFT x||_2 <= gamma ||FFT x||_2, gamma = m eta / (1 - m eta), m = log2(size),
  eta = mu + gamma_4 (sqrt 2 + mu) for twiddles accurate to mu (Higham 2002, "Accuracy and Stability of
  Numerical Algorithms", Thm 24.2; radix 2). We take eta = 10 u per stage and m = ceil(log2(size)), at
  least the number of stages, for pocketfft's radix-2/3/4/5 and real-input passes on 2-3-5-smooth sizes
  (measured: 0.15-0.19 u log2(size), a margin of about 55; tests/accounting/test_pld_compose.py).
* Power: |a^c - b^c| <= c |a - b| max(|a|, |b|)^(c-1) per frequency, plus the polar evaluation's
  rounding (c ulps of log|a| and arg a); products of several spectra add their errors likewise. The
  error is carried both per frequency and as an l2 norm (Higham's bound is one on the norm), and the
  smaller l2 bound is charged.
* Inverse FFT: Parseval turns the spectrum's error into an l2 bound E2 on the computed bins, and
  Cauchy-Schwarz turns that into a bound on delta: |sum_s e_s g(s)| <= E2 ||g||_2 for the untilted
  weights g(s) = e^{n k - theta s} (1 - e^{x - s h})_+.
* Circular wrap: the FFT adds the tilted mass outside the window to the bins inside (>= 0: harmless to
  the upper bound); the lower bound subtracts its Chernoff bound ``alias``.
"""

from __future__ import annotations

import dataclasses
import math
from typing import List, Optional, Sequence, Tuple, cast

import numpy as np
from numpy.typing import ArrayLike
from scipy import fft as sfft

from metadp.accounting._pld_cgf import SEARCH_GUARD, log_hockey_constant, positive_logs
from metadp.accounting._pld_cgf import approximate_cgf as approximate_cgf, cgf as cgf, log_inverse as log_inverse
from metadp.core._typing import FloatArray

__all__: List[str] = []  # internals of the PLD accountant; approximate_cgf, cgf and log_inverse are used from here too

_U = 2.0**-53


def fft_gamma(size: int) -> float:
    """gamma with ||fl(rfft(x)) - rfft(x)||_2 <= gamma ||rfft(x)||_2 (module docstring), for size a
    2-3-5-smooth number (ceil(log2 size) bounds the number of its stages)."""
    levels = max(1, math.ceil(math.log2(size)))
    eta = 10.0 * _U
    return levels * eta / (1.0 - levels * eta)


@dataclasses.dataclass(frozen=True)
class Item:
    """One lattice pmf (index ``start`` at position 0), composed ``count`` times, masses within
    relative ``rel_error`` of an exact pair's."""

    pmf: FloatArray
    start: int
    count: int
    rel_error: float


class _Profile:
    """sum_s pmf_s (1 - e^{x - s h})_+ for pmf on indices first + i, restricted to bins s h > floor, with
    the cumulative sums precomputed so that each crossing costs one search."""

    def __init__(self, first: int, pmf: FloatArray, h: float, floor: float):
        s = (first + np.arange(len(pmf))) * h
        keep = (pmf > 0) & (s > floor)
        self.floor, self.s, p = floor, s[keep], pmf[keep]
        if len(p) == 0:
            return
        # On [s_{j-1}, s_j) the profile is A_j - e^x B_j, A_j = sum_{k>=j} p_k, B_j = sum_{k>=j} p_k e^{-s_k}.
        self.a = np.cumsum(p[::-1])[::-1]
        with np.errstate(divide="ignore"):  # sums that underflow to 0 have log -inf: no term
            if self.s[-1] - self.s[0] < 600.0:  # scaled sums do not underflow: plain cumulative sums
                self.log_b = np.log(np.cumsum((p * np.exp(self.s[0] - self.s))[::-1])[::-1]) - self.s[0]
            else:
                self.log_b = np.logaddexp.accumulate((np.log(p) - self.s)[::-1])[::-1]
        self.at_points = np.zeros(len(p))  # the profile at s_j; 0 at the last bin (nothing above it)
        with np.errstate(over="ignore"):
            self.at_points[:-1] = self.a[1:] - np.exp(self.s[:-1] + self.log_b[1:])

    def x_at(self, delta: float) -> float:
        """Smallest x >= floor with the profile <= delta (``floor`` if it holds there)."""
        if delta <= 0:
            return math.inf
        if len(self.s) == 0:
            return self.floor
        hits = self.at_points <= delta
        j = int(np.argmax(hits)) if np.any(hits) else len(self.s) - 1
        low = self.floor if j == 0 else float(self.s[j - 1])
        if self.a[j] <= delta:
            return low
        x = math.log(self.a[j] - delta) - float(self.log_b[j])
        return float(min(max(x, low), self.s[j]))


def x_at(first: int, pmf: FloatArray, h: float, delta: float, floor: float) -> float:
    """Smallest x >= ``floor`` with sum_s pmf_s (1 - e^{x - s h})_+ <= delta, pmf on indices first + i."""
    return _Profile(first, pmf, h, floor).x_at(delta)


def profile(first: int, pmf: FloatArray, h: float, x: float) -> float:
    """sum_s pmf_s (1 - e^{x - s h})_+ for pmf on indices first + i."""
    s = (first + np.arange(len(pmf))) * h
    keep = (s > x) & (pmf > 0)
    return float(np.dot(pmf[keep], -np.expm1(x - s[keep])))


@dataclasses.dataclass(frozen=True)
class Tilted:
    """The tilted, normalised pmfs of the items at theta (see ``tilt``) and the moments of their sum."""

    items: Tuple[Item, ...]
    arrays: Tuple[Tuple[FloatArray, float], ...]  # (tilted pmf, its relative error) per item
    theta: float
    log_scale: float  # sum_i c_i k_i
    log_factor: float  # sum_i c_i (-log(1 - rel_i)): the masses' relative error, composed
    mean: float  # of the tilted sum, in index units
    sd: float


# [(items, theta, Tilted)]: the last tilt computed (``tilt``)
_LAST_TILT: List[Tuple[Tuple[Item, ...], float, Tilted]] = []


def tilt(items: Sequence[Item], theta: float) -> Tilted:
    """x_i = p_i e^{theta j - k_i}, normalised, with the relative error of each against the exact tilt
    of the stored masses (log, exp, the products) added to the item's own.

    The last result is remembered: ``choose_theta`` ends on the tilt its caller asks for next. Items
    match when they hold the same pmf arrays (the memo keeps them alive, so identity is safe) with the
    same start, count and error."""
    if _LAST_TILT:
        known, known_theta, found = _LAST_TILT[0]
        if known_theta == theta and len(known) == len(items) and all(
                a.pmf is b.pmf and a.start == b.start and a.count == b.count and a.rel_error == b.rel_error
                for a, b in zip(known, items)):
            return found
    found = _tilt(items, theta)
    _LAST_TILT[:] = [(tuple(items), theta, found)]
    return found


def _tilt(items: Sequence[Item], theta: float) -> Tilted:
    arrays: List[Tuple[FloatArray, float]] = []
    log_scale, log_factor, mean, var = 0.0, 0.0, 0.0, 0.0
    for item in items:
        keep, log_p = positive_logs(item.pmf)  # the zero masses stay 0 (their exponent is -inf)
        idx = np.arange(len(item.pmf), dtype=np.float64) + item.start
        turn = theta * idx[keep]
        exponent = log_p + turn
        k = float(cgf(item.pmf, item.start, [theta])[0])
        shifted = exponent - k
        x = np.zeros(len(item.pmf))
        x[keep] = np.exp(shifted)
        # log p (u |log p|), theta j (u |theta j|), their sum (u |exponent|), less k (u |exponent - k|), exp;
        # at the zero masses only 2 |theta j| (its largest at an end of the array)
        ends = 2.0 * max(abs(theta * idx[0]), abs(theta * idx[-1])) if len(idx) else 0.0
        spread = max(float(np.max(2.0 * np.abs(exponent - turn) + 2.0 * np.abs(turn) + np.abs(shifted), initial=0.0)),
                     ends)
        rel = item.rel_error + _U * (4.0 + 1.01 * spread)
        m1 = float(np.dot(x, idx)) / float(x.sum())
        m2 = float(np.dot(x, (idx - m1) ** 2)) / float(x.sum())
        arrays.append((x, rel))
        log_scale += item.count * k
        log_factor += item.count * log_inverse(rel)
        mean += item.count * m1
        var += item.count * m2
    return Tilted(tuple(items), tuple(arrays), theta, log_scale, log_factor, mean, math.sqrt(max(var, 1.0)))


@dataclasses.dataclass(frozen=True)
class TiltedSum:
    """The composed sum on the window of indices [first, first + size): ``values`` are the computed
    tilted masses. Bin s of the exact sum of the exact pair is at most e^{log_factor} (at least
    e^{-log_factor}) times (values_s + e_s) e^{log_scale - theta s}, with ||e||_2 <= ``error`` and, for
    the lower bound, values_s also carrying wrapped tilted mass, at most ``alias`` in all."""

    first: int
    values: FloatArray
    theta: float
    log_scale: float
    h: float
    error: float
    log_factor: float
    alias: float
    support_low: Optional[int] = None  # the sum's smallest index: a window starting there misses nothing below

    def _scale(self, lo: int = 0) -> Tuple[np.ndarray, FloatArray]:
        # the memos (_log_weights, _weights, _untilted) are set directly in the instance's __dict__ (frozen)
        if "_log_weights" not in self.__dict__:  # computed once (frozen dataclass: set directly)
            s = self.first + np.arange(len(self.values), dtype=np.float64)
            object.__setattr__(self, "_log_weights", self.log_scale - self.theta * s)
            object.__setattr__(self, "_weights", np.exp(np.minimum(self.__dict__["_log_weights"], 700.0)))
        return self.first + lo + np.arange(len(self.values) - lo), self.__dict__["_weights"][lo:]

    def untilted(self) -> FloatArray:
        if "_untilted" not in self.__dict__:
            object.__setattr__(self, "_untilted", np.maximum(self.values, 0.0) * self._scale()[1])
        return cast(FloatArray, self.__dict__["_untilted"])

    def error_norm(self, x: float) -> float:
        """||g||_2 for g(s) = e^{log_scale - theta s} (1 - e^{x - s h})_+ over the window."""
        lo = max(0, math.floor(x / self.h) - self.first)
        if lo >= len(self.values):
            return 0.0
        s, scale = self._scale(lo)
        # (1 - e^u)_+ is 0 for every u >= 0: cap u there, so a far-right bin (u > 709) does not overflow
        g = scale * np.maximum(-np.expm1(np.minimum(x - s * self.h, 0.0)), 0.0)
        top = float(np.max(g, initial=0.0))
        return top * math.sqrt(float(np.dot(g / top, g / top))) if 0.0 < top < math.inf else top

    def alias_weight(self, x: float) -> float:
        """max over window bins s > x of e^{log_scale - theta s}: what a unit of wrapped mass adds."""
        s = max(self.first, math.floor(x / self.h) + 1)
        return math.exp(min(self.log_scale - self.theta * s, 700.0))

    def upper_profile(self, x: float) -> float:
        """An upper bound on sum over the window of exact bins s: m_s (1 - e^{x - s h})_+."""
        body = profile(self.first, self.untilted(), self.h, x)
        underflow = len(self.values) * 1e-300
        return math.exp(self.log_factor) * (body + self.error * self.error_norm(x) + underflow)

    def upper_profiles(self, xs: ArrayLike) -> FloatArray:
        """``upper_profile`` at every x of ``xs`` at once (a profile read at many points): the body from the
        cumulative sums of ``_Profile`` (A_j - e^x B_j), raised by their float error (a few n u A_j); the
        round-off term's norm taken at an anchor at or below x (larger: valid) where that term is negligible."""
        points = np.asarray(xs, dtype=np.float64)
        if points.size == 0:
            return np.zeros(0)
        mass = self.untilted()
        n = len(mass)
        found = _Profile(self.first, mass, self.h, float(np.min(points)) - self.h)
        body = np.zeros(len(points))
        if len(found.s):
            j = np.searchsorted(found.s, points, side="right")  # the first kept bin above each x
            inside = j < len(found.s)
            jj = j[inside]
            with np.errstate(over="ignore"):
                value = found.a[jj] - np.exp(points[inside] + found.log_b[jj])
            # float error: each cumulative sum within about n u of itself, e^{x + log B} within (|x| + |log B| + 4) u
            # more (its argument's rounding), and e^x B_j <= A_j on the bins above x: all within this many A_j
            slack = (2 * n + 16 + 4 * (np.abs(points[inside]) + np.abs(found.log_b[jj]))) * 2.0**-53
            body[inside] = np.maximum(value, 0.0) + slack * found.a[jj]
        # error_norm is nonincreasing in x (every g_s shrinks, bins drop out): its value at the nearest of about
        # 24 anchors at or below x bounds it there
        # (a point whose anchor's term exceeds 1e-10 gets its own exact norm: the excess is at most 1e-10 a value)
        anchors = np.sort(points)[::max(1, len(points) // 24)]
        at = np.array([self.error_norm(float(a)) for a in anchors])
        norm = at[np.searchsorted(anchors, points, side="right") - 1]
        for i in np.nonzero(self.error * norm > 1e-10)[0]:
            norm[i] = self.error_norm(float(points[i]))
        with np.errstate(over="ignore", invalid="ignore"):
            out = math.exp(self.log_factor) * (body + self.error * norm + n * 1e-300)
        return np.where(np.isnan(out), np.inf, out)

    def x_upper(self, budget: float, floor: float) -> float:
        """Smallest x >= floor found whose ``upper_profile`` is <= budget (inf if none)."""
        target = budget * math.exp(-self.log_factor) - len(self.values) * 1e-300
        if target <= 0:
            return math.inf
        found = _Profile(self.first, self.untilted(), self.h, floor)
        first = found.x_at(target)
        room = target - self.error * self.error_norm(first)  # the error term only shrinks as x grows
        return found.x_at(room) if room > 0 else math.inf

    def weights(self) -> FloatArray:
        """e^{log_scale - theta s} over the window: a bin's untilting factor."""
        return self._scale()[1]


def _fold(pmf: FloatArray, size: int) -> Tuple[FloatArray, int]:
    """pmf wrapped onto ``size`` points (circular), and the most terms summed into one point."""
    if len(pmf) <= size:
        return pmf, 1
    terms = -(-len(pmf) // size)
    padded = np.zeros(terms * size)
    padded[: len(pmf)] = pmf
    return padded.reshape(terms, size).sum(axis=0), terms


def _power(spectrum: np.ndarray, count: int, bound: float) -> Tuple[np.ndarray, np.ndarray, float]:
    """spectrum ** count in polar form; per frequency a bound on its distance from the exact power of the
    exact spectrum, given ||computed - exact||_2 <= ``bound`` (so at every frequency too); and a bound
    on that distance's l2 norm over the full spectrum (module docstring).
    Only frequencies where (|y| + bound)^(count - 1) exceeds e^-740 are worked on: elsewhere both the
    power and its error bound are below 1e-300 (charged as such)."""
    if count == 1:
        return spectrum, np.full(len(spectrum), bound), bound
    modulus = np.abs(spectrum)
    with np.errstate(divide="ignore"):
        log_reach = (count - 1) * np.log(modulus + bound)
    live = np.nonzero(log_reach > -740.0)[0]
    out = np.zeros_like(spectrum)
    err = np.full(len(spectrum), 1e-300)
    y, m = spectrum[live], modulus[live]
    with np.errstate(divide="ignore"):
        log_modulus = np.log(m)
    angle = np.angle(y)
    scaled = count * log_modulus
    keep = scaled > -740.0
    turn = count * angle
    radius = np.where(keep, np.exp(np.maximum(scaled, -745.0)), 0.0)
    power = np.empty(len(live), dtype=np.complex128)  # radius (cos + i sin), without complex products
    power.real = radius * np.cos(turn)
    power.imag = radius * np.sin(turn)
    size = np.abs(power)
    with np.errstate(invalid="ignore"):
        rounding = (2.0 * count * _U * (np.abs(log_modulus) + np.abs(angle) + 2.0)
                    + _U * (np.abs(scaled) + np.abs(turn)) + 8.0 * _U)
    rounding = np.where(keep, np.expm1(np.minimum(rounding * 1.01, 700.0)), 0.0)
    lost = np.where(keep, 0.0, 1e-300)  # powers below e^-740, set to 0
    out[live] = power
    err[live] = (count * bound * np.exp(np.minimum(log_reach[live], 700.0)) + size * rounding + lost) * (1.0 + 1e-9)
    # in l2 (the full spectrum's norm): ||c (y - Y) max(|y|, |Y|)^(c-1)|| <= c ||y - Y|| max(...)^(c-1), and
    # ||y - Y|| <= bound itself (Higham's bound is on the norm), plus the evaluation's rounding
    rest = np.zeros(len(spectrum))
    rest[live] = size * rounding + lost
    l2 = (count * bound * math.exp(min(float(np.max(log_reach, initial=-np.inf)), 700.0))
          + math.sqrt(2.0 * float(np.dot(rest, rest))) + 1e-300 * math.sqrt(2.0 * len(spectrum))) * (1.0 + 1e-9)
    return out, err, l2


def compose(tilted: Tilted, first: int, size: int, h: float, alias: float = 0.0) -> TiltedSum:
    """The tilted sum on the window [first, first + size) by FFT powers of length ``size`` (2-3-5-smooth)."""
    gamma = fft_gamma(size)
    weight = np.full(size // 2 + 1, 2.0)
    weight[0] = 1.0
    if size % 2 == 0:
        weight[-1] = 1.0  # the Nyquist frequency appears once in the full spectrum

    def full(v: FloatArray) -> float:  # the full spectrum's l2 norm from the half one
        return math.sqrt(float(np.dot(weight, v * v)))

    spectrum = np.ones(size // 2 + 1, dtype=np.complex128)
    error = np.zeros(size // 2 + 1)  # per frequency
    error_l2 = 0.0  # of the whole error vector: the smaller of the two is used
    log_factor, offset = tilted.log_factor, 0
    for item, (x, _) in zip(tilted.items, tilted.arrays):
        folded, terms = _fold(x, size)
        log_factor += item.count * log_inverse(terms * _U)  # the folding's sums
        offset += item.count * item.start
        y = sfft.rfft(folded, size)
        bound = gamma * math.sqrt(size) * float(np.linalg.norm(folded))  # Higham: ||error||_2 of the full FFT
        power, power_err, power_l2 = _power(y, item.count, bound)
        # A B - a b = (A - a) b + A (B - b) for the running product A and this factor B (a, b exact)
        error_l2 = error_l2 * float(np.max(np.abs(power) + power_err)) + float(np.max(np.abs(spectrum))) * power_l2
        error = error * (np.abs(power) + power_err) + power_err * np.abs(spectrum)
        spectrum = spectrum * power
        error += 4.0 * _U * np.abs(spectrum)
        error_l2 += 4.0 * _U * full(np.abs(spectrum))
    values = sfft.irfft(spectrum, size)
    shift = (first - offset) % size  # bin i of the window is bin (i + shift) mod size of the circular sum
    values = np.concatenate([values[shift:], values[:shift]]) if shift else values
    e2 = (min(full(error), error_l2) + gamma * full(np.abs(spectrum))) / math.sqrt(size) * (1.0 + 1e-9)
    # untilting e^{log_scale - theta s} is computed with an exponent good to u (|log_scale| + |theta s|)
    # each (the sum log_scale of the counts' k, the product theta s, the difference), and summing a
    # window of masses adds at most size ulps: both relative, folded into the factor
    reach = abs(tilted.theta) * max(abs(first), abs(first + size))
    log_factor += 4.0 * _U * (abs(tilted.log_scale) + reach + 2.0) + 2.0 * size * _U
    return TiltedSum(first, values, tilted.theta, tilted.log_scale, h, e2, log_factor, alias, offset)


def log_tail(items: Sequence[Item], thetas: ArrayLike, t: float) -> float:
    """log of a bound on the exact mass of the untilted sum at indices > t (thetas > 0) or < t (thetas <
    0): Chernoff, sum_i c_i K_i(theta) - theta t, the best over ``thetas``, with K_i raised for the
    masses' relative error."""
    thetas = np.atleast_1d(np.asarray(thetas, dtype=np.float64))
    total = -thetas * t
    for item in items:
        total = total + item.count * (cgf(item.pmf, item.start, thetas) + log_inverse(item.rel_error))
    return float(np.min(total))


def choose_theta(items: Sequence[Item], h: float, log_delta: Optional[float] = None, x: Optional[float] = None,
                 start: Optional[float] = None) -> Tuple[float, float]:
    """The tilt theta (index units) under which the sum's mean is the epsilon sought (or ``x``, index
    units), and that epsilon's Chernoff estimate: x(theta) = (K(theta) + log c(theta/h) - log delta) /
    theta minimised (with K from ``approximate_cgf`` within about ``SEARCH_GUARD`` nats: an estimate,
    which moves x by about that over theta, far less than the tilted sum's spread). Any theta gives
    valid bounds; this one centres the tilted sum where delta is read off (a saddle point)."""
    def chernoff(lams: FloatArray) -> FloatArray:
        thetas = lams * h
        total = log_hockey_constant(lams)
        for item in items:
            total = total + approximate_cgf(item.pmf, item.start, thetas, item.count, SEARCH_GUARD)
        return (total - cast(float, log_delta)) / thetas  # searched only when x is not given: delta is

    if x is None:
        lams = np.geomspace(1e-3, 1e5, 17)
        for _ in range(2):
            values = chernoff(lams)
            best = int(np.nanargmin(values))
            lams = np.geomspace(lams[max(best - 1, 0)], lams[min(best + 1, len(lams) - 1)], 9)
        values = chernoff(lams)
        best = int(np.nanargmin(values))
        x, lam = float(values[best]), float(lams[best])
    else:
        lam = 1.0 if start is None else start / h
    # the mean increases with theta (its derivative is the variance): safeguarded Newton from lam h (a
    # step that leaves the bracket bisects instead), each step one tilt. Any theta is valid; this only
    # has to land near the target, within a tenth of a standard deviation of the tilted sum.
    theta = lam * h
    lo, hi = -math.inf, math.inf
    for _ in range(40):
        tilted = tilt(items, theta)
        if abs(x - tilted.mean) <= 0.1 * tilted.sd:
            break
        if tilted.mean < x:
            lo = theta
        else:
            hi = theta
        step = theta + (x - tilted.mean) / tilted.sd**2
        if not lo < step < hi:  # outside the bracket: bisect it, or widen it where it is still open
            if math.isinf(hi):
                step = theta + max(4.0 * abs(theta), h)
            elif math.isinf(lo):
                step = theta - max(4.0 * abs(theta), h)
            else:
                step = 0.5 * (lo + hi)
        theta = step
    return float(theta), x
