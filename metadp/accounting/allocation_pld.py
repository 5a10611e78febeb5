"""A certified PLD upper bound for random allocation (balls in bins): one pass as a discrete pair, composed
by the PLD accountant (``metadp.accounting.pld``) like any other mechanism.

Setting as ``metadp.amplification.allocation_bounds``: one pass of t steps, each unit in one uniformly
random step, Gaussian noise z (in units of the clip norm), add/remove. One pass is dominated by
P = N(0, z^2 I_t) vs Q = (1/t) sum_i N(e_i, z^2 I_t) in both orders (Chua et al. 2025, arXiv:2412.16802;
Feldman & Shenfeld 2025, arXiv:2502.08202), and the likelihood ratio is R = dQ/dP = S / t, S = sum_i V_i,
V_i = exp((x_i - 1/2) / z^2) i.i.d. under P. With the privacy loss L = log dP'/dQ' of each order:

* order "add" (P' = Q, Q' = P; loss log R under Q): delta(x) = E_P[(R - e^x)_+], convex and nondecreasing in R;
* order "remove" (P' = P, Q' = Q; loss -log R under P): delta(x) = E_P[(1 - e^x R)_+], convex, nonincreasing.

Composed with anything else (E passes, other mechanisms with loss L_o, all independent), delta(x) is
E[(prod_k R_k - e^{x - L_o})_+] (add) or E[(1 - e^{x - L_o} prod_k R_k)_+] (remove): in each V of each
pass it keeps that shape (convex, nondecreasing / nonincreasing), which is all the construction uses.

**The discrete pair** (``_one_pass``). Each V is moved to the lattice Delta Z >= 0 by a randomised
rounding: in the cell (k Delta, (k + 1) Delta] it goes up with probability a_k, down otherwise. With a_k
exactly (E[V | cell] - k Delta) / Delta the rounded law is that of the pointwise mean-preserving rounding
(v goes up with probability (v - k Delta)/Delta), so by Jensen (conditionally on V, coordinate by
coordinate) the composed delta can only grow; a_k is computed with its error bound and then raised by it
(add: a stochastically larger law, harmless to a nondecreasing function) or lowered by it (remove). The
cell masses are exact Gaussian cell probabilities (E[V; x in A] = Pr[N(1, z^2) in A]), with their
relative error bound. V above the top of the lattice V_top: for "remove" it is put at V_top (moving V
down: harmless to a nonincreasing function); for "add" it is dropped and its mass charged to the infinity
atom: the add-order P'-mass of {some V_i > V_top} is at most E[V; V > V_top] + (1 + Delta) Pr[V > V_top]
(by the union bound over i and E R' 1{V_i > c} = (E[V_i' 1{V_i > c}] + (t - 1) E[V'] Pr[V_i > c]) / t).
The t-fold sum S' of the rounded V's is an FFT power on a window of N lattice points
(``metadp.accounting._pld_compose.compose``, the PLD accountant's own: exponentially tilted, with
Higham's bound on the FFT's round-off carried through the power). Mass of S' beyond the window wraps
around onto low bins: for "remove" that is a move to a smaller S', harmless; for "add" the wrapped mass
stays (extra mass is harmless to an upper bound) and the add-order P'-mass of {S' >= N Delta} is charged
to the infinity atom, bounded by E[R'^a] / c^(a - 1) <= (M_a^(1/a) + Delta)^a / c^(a - 1), c = N Delta / t,
with M_a = E_P[R^a] the exact moment of ``allocation_bounds`` (order A, rounded up) and R' <= R + Delta
(Minkowski), minimised over integer a; or (the smaller is used; better at small t) R' >= c forces some
V_i >= c - Delta, so by the union bound it is at most E[V; V >= c'] + (t - 1 + t Delta) Pr[V >= c'],
c' = c - Delta. Each window bin s (S' = s Delta, R' = s Delta / t) is read from the tilt (one of
several) whose round-off bound is smallest there, and raised by that bound: the atoms' masses are then
a majorant of the exact ones (their total exceeds 1 by the round-off and the wrapped mass, a few 1e-4 at
most here). A majorant is harmless: delta of a composition is an integral of a non-negative function
against the product of the P'-measures, which only grows with each of them. The stored V-cell masses
are within the relative error bound of the Gaussian cells (``_log_cell``), which ``compose`` carries as
the item's ``rel_error``; cells whose mass underflows (below 5e-324, far in V's upper tail) are put at
V_top ("remove") or charged (< 5e-324 (V_top + t) each, "add").

The lattice: Delta = sd(V) / 8 (at most 1/8), finer where the window then has under 2^16 points (small
t, where the small ratios matter), coarser where it would exceed 2^19. Where Pr[V <= Delta]^t, which
bounds the remove order's atom at S' = 0 (loss +inf), exceeds 1e-13 the lattice does not resolve the
pass (small t and small z: t = 2, z = 0.9 gives about 1e-3): there the pass is built on a lattice in
log V instead (``metadp.accounting._allocation_log``: coupled stochastic bounds on S, each order's loss
moved by at most h (1 + 2 log2 t), h = 1e-3), which resolves small sums to a relative 1e-3 and costs about
0.3 s an order at z = 1 (t = 2, z = 1, delta = 1e-5: 3.6991 against the exact 3.6974; the RDP bound it
replaces gave 4.078). Only where neither fits (``pld_resolves`` False) does the PLD accountant refuse the
event (the RDP accountant bounds it). Measured: z = 1, delta = 1e-6: t = 10,
100, 250, 1000 give 2.656, 0.859, 0.4528, 0.172, within 0.3%, 2.4%, 7.1%, 39% of the certified lower
bound; Feldman & Shenfeld's package (``combined``) gives 3.036, 1.318, 0.741, 0.291.

The atoms: "add": loss log R' with P'-mass R' Pr[S' = s] (the Q'-mass Pr[S' = s]); S' = 0 has P'-mass 0.
"remove": loss -log R' with P'-mass Pr[S' = s]; S' = 0 is the loss +inf (infinity atom).

**Only an upper bound.** The discrete pair dominates the allocation pair in the hockey-stick sense
(above) but is not dominated by it, so the PLD accountant's event-based lower bound, which reads the
pair's Q-masses, must not use it: the Q-masses are reported with a relative error bound of 1, which the
lattice treats as unusable (``_pld_lattice``: no lower-bound event, and each cell's P-mass placed at the
lattice point above the cell's, at most 2h above its loss instead of connect-the-dots' split). The
accountant's lower bound for this event is then 0; plans print the scheme's own certified lower bound
(``allocation_bounds.allocation_lower``).

Not used: Feldman & Shenfeld's Poisson domination and decomposition theorems, the k-of-t reduction, and
the PLD construction of arXiv:2602.17284 (not read); the pair is theirs and Chua et al.'s, the rest is
derived here.
"""

from __future__ import annotations

import functools
import math
from typing import Callable, Tuple, Union, cast

import numpy as np
from numpy.typing import ArrayLike
from scipy import special

from metadp.accounting import _allocation_log as _log_lattice
from metadp.accounting import _pld_compose as _comp
from metadp.accounting._gaussian_cells import log_cell as _log_cell
from metadp.amplification import allocation_bounds as _ab
from metadp.core.validation import check_count, check_positive
from metadp.core._typing import FloatArray

__all__ = ["AllocationPair", "allocation_pairs", "pld_resolves"]

_U = 2.0**-53
_CHARGE = 1e-13  # the window's charge to the infinity atom (add order), per pass: part of the bound at every delta
_MAX_POINTS = 1 << 19  # the FFT window's most lattice points
_TILTS = 5  # tilts per order; each window bin is read from the best
_FINE_POINTS = 1 << 16  # a window this small is refined (small t: the small ratios need it)
_PER_SD = 8.0  # V lattice points per standard deviation of V (at most 16 per unit)
_LOG_POINTS = 1 << 17  # the log lattice's most grid points (its cost is ~ 7000 x points a sum)
_LOG_STEPS = 1024  # the log lattice's largest t (its loss error grows as 2 log2 t grid steps)


@functools.lru_cache(maxsize=64)
def _layout(z: float, t: int) -> Tuple[float, int, float]:
    """(Delta, window points N, log of the add order's window charge) of one pass's lattice: the window's
    top c (in R) has charge <= _CHARGE; Delta is sd(V)/_PER_SD (at most 1/_PER_SD), finer where the window
    has fewer than _FINE_POINTS points at that, coarser where it would exceed _MAX_POINTS."""
    sd = math.sqrt(math.expm1(1.0 / z**2))  # sd of V (mean 1)
    orders = _ab.ALLOCATION_ORDERS
    log_m = _ab._rdp_order_a(z, t, orders) * (orders - 1.0)  # log E_P R^a, rounded up

    # log of a bound on E[R' 1{R' >= c}]: the smaller of two (module docstring)
    def log_charge(c: float, delta: float) -> float:
        # log(exp(log_m / a) + Delta) in log space: at small z the moments pass e^709
        moments = float(np.min(orders * np.logaddexp(log_m / orders, math.log(delta)) - (orders - 1.0) * math.log(c)))
        if c <= delta + 1.0:
            return moments
        x = z * z * math.log(c - delta) + 0.5  # V >= c - Delta  <=>  x >= x
        union = (float(special.ndtr(-(x - 1.0) / z)) + (t - 1.0 + delta * t) * float(special.ndtr(-x / z))) * (1 + 1e-12)
        return min(moments, math.log(union) if union > 0 else -math.inf)

    delta = min(sd, 1.0) / _PER_SD
    c = 2.0
    while log_charge(c, delta) > math.log(_CHARGE):
        c *= 1.25
    delta = max(min(delta, c * t / _FINE_POINTS), c * t / (_MAX_POINTS - 2))  # finer where cheap (small t)
    while log_charge(c, delta) > math.log(_CHARGE):
        c *= 1.25
        delta = max(delta, c * t / (_MAX_POINTS - 2))
    n_win = _fft_size(int(math.ceil(c * t / delta)) + 2)
    return delta, n_win, log_charge(n_win * delta / t, delta)


def _linear_resolves(z: float, t: int) -> bool:
    """Whether the linear lattice resolves small likelihood ratios: Pr[every V_i <= Delta]^t, which bounds the
    remove order's infinity atom (S' = 0), is at most _CHARGE. At small t with a coarse lattice it is not
    (t = 2, z = 0.9: about 1e-3)."""
    delta = _layout(z, t)[0]
    return t * float(special.log_ndtr((z * z * math.log(delta) + 0.5) / z)) <= math.log(_CHARGE)


def pld_resolves(z: float, t: int) -> bool:
    """Whether one pass has a PLD pair here: the linear lattice where it resolves small ratios, else the lattice
    in log V (``_allocation_log``: small t) where its grid and its sums stay within _LOG_POINTS and _LOG_STEPS;
    otherwise the PLD accountant leaves the event to the RDP accountant (``_pld_pairs``)."""
    return _linear_resolves(z, t) or (t <= _LOG_STEPS and _log_lattice.grid_points(z, t) <= _LOG_POINTS)


@functools.lru_cache(maxsize=32)
def _one_pass(z: float, t: int, direction: str) -> Tuple[FloatArray, FloatArray, float]:
    """(losses, P'-masses, infinity mass) of one pass's discrete pair (the masses raised by their error bounds):
    the linear lattice's where it resolves the pass, else the log lattice's (``pld_resolves``)."""
    if not _linear_resolves(z, t):
        return _log_lattice.log_lattice_pass(z, t, direction)
    delta, n_win, log_window_charge = _layout(z, t)
    # V's lattice: up to V_top, where Pr[V > V_top] is negligible, or the window
    x_of: Callable[[ArrayLike], FloatArray] = lambda v: z * z * np.log(v) + 0.5  # V = v  <=>  x = z^2 log v + 1/2
    v_top = min(math.exp((z * 40.0 - 0.5) / (z * z)) if z < 50 else math.inf, (n_win - 1) * delta)
    k_top = max(1, int(v_top / delta))
    v_top = k_top * delta
    edges = np.arange(k_top + 1, dtype=np.float64) * delta
    with np.errstate(divide="ignore"):
        xe = x_of(edges)  # -inf at v = 0
    log_p, err_p = _log_cell(xe[:-1], xe[1:], 0.0, z)  # Pr[V in cell k]
    log_e, err_e = _log_cell(xe[:-1], xe[1:], 1.0, z)  # E[V; V in cell k]
    with np.errstate(invalid="ignore", over="ignore"):
        mean = np.exp(log_e - log_p)
        rel = np.expm1(np.minimum(err_e + err_p + 4.0 * _U * (np.abs(log_e - log_p) + 1.0), 1.0))
    k = np.arange(k_top, dtype=np.float64)
    bias = mean * rel if direction == "add" else -mean * rel
    frac = np.clip((mean + bias) / delta - k, 0.0, 1.0)
    frac = np.where(np.isfinite(frac), frac, 1.0 if direction == "add" else 0.0)
    p = np.exp(log_p)
    p = np.where(np.isfinite(p), p, 0.0)
    lost = float(np.count_nonzero(p == 0.0)) * 5e-324  # underflowed cells: each below the least subnormal
    pmf = np.zeros(k_top + 1)
    pmf[:-1] += p * (1.0 - frac)
    pmf[1:] += p * frac
    cell_rel = float(np.max(np.where(p > 0, np.expm1(np.minimum(err_p, 1.0)), 0.0), initial=0.0)) + 4.0 * _U
    inf_mass = 0.0
    x_top = float(x_of(v_top))
    above = float(special.ndtr(-x_top / z))
    if direction == "remove":
        pmf[-1] += above * (1.0 + 1e-12) + lost  # V above V_top (and underflowed cells) put at V_top
    else:  # dropped, charged: E[V; V > V_top] + (1 + Delta) Pr[V > V_top], and the underflowed cells
        inf_mass += (float(special.ndtr(-(x_top - 1.0) / z)) + (1.0 + delta) * above) * (1.0 + 1e-12) + 1e-300
        inf_mass += lost * (v_top + t)
        inf_mass += math.exp(log_window_charge) * (1.0 + 1e-9)
    item = _comp.Item(pmf, 0, t, min(cell_rel, 0.5))
    masses, errors = _best_of_tilts(item, n_win, delta, t, direction)
    # each bin's mass raised by its round-off bound: a majorant of the exact masses (extra mass is harmless)
    upper = (masses + errors) * (1.0 + 4.0 * _U)
    r = np.arange(n_win, dtype=np.float64) * delta / t
    with np.errstate(divide="ignore"):
        if direction == "add":
            losses, p_side = np.log(r[1:]), upper[1:] * r[1:] * (1.0 + 4.0 * _U)
        else:
            losses, p_side = -np.log(r[1:])[::-1], upper[1:][::-1]
            inf_mass += upper[0]
    keep = np.isfinite(p_side) & (p_side > 0)
    inf_mass += float(np.sum(np.where(np.isfinite(p_side), 0.0, 1.0)))  # (none expected) an unbounded bin
    return losses[keep], p_side[keep], inf_mass


def _fft_size(n: int) -> int:
    """The smallest 2-3-5-smooth number >= n (scipy's good size is 2-3-5-7-11; ours must be 2-3-5)."""
    best = 1 << max(0, (n - 1).bit_length())
    p5 = 1
    while p5 < 2 * n:
        p35 = p5
        while p35 < 2 * n:
            m = p35
            while m < n:
                m *= 2
            best = min(best, m)
            p35 *= 3
        p5 *= 5
    return best


def _best_of_tilts(item: _comp.Item, size: int, h: float, t: int, direction: str) -> Tuple[FloatArray, FloatArray]:
    """The t-fold sum's masses on the window and absolute error bounds, each bin from the tilt whose bound
    is smallest there (every tilt gives a valid bound of the same exact masses)."""
    thetas = _thetas(item, size, direction)
    best_m = np.zeros(size)
    best_e = np.full(size, np.inf)
    for theta in thetas:
        found = _comp.compose(_comp.tilt([item], theta), 0, size, h)
        w = found.weights()
        v = found.values
        f = math.expm1(found.log_factor)
        with np.errstate(over="ignore", invalid="ignore"):
            err = ((f * (np.abs(v) + found.error) + found.error) * w) * (1.0 + 1e-9)
            mass = np.maximum(v, 0.0) * w
        err = np.where(np.isfinite(err), err, np.inf)
        better = err < best_e
        best_m = np.where(better, mass, best_m)
        best_e = np.where(better, err, best_e)
    return best_m, best_e


def _thetas(item: _comp.Item, size: int, direction: str) -> FloatArray:
    """Tilts (index units) whose tilted t-fold means spread over the part of the window that matters to
    this order: below the mean ("remove": large losses at small sums), above it ("add"). Only a choice:
    every theta gives valid bounds. The means are estimated on the pmf summed into blocks."""
    grid = np.concatenate([-np.geomspace(30.0, 1e-5, 120), [0.0], np.geomspace(1e-7, 1.0, 120)])
    width = max(1, -(-len(item.pmf) // 4096))  # the pmf in blocks, each at its centroid (an estimate)
    padded = np.zeros(-(-len(item.pmf) // width) * width)
    padded[: len(item.pmf)] = item.pmf
    blocks = padded.reshape(-1, width)
    mass = blocks.sum(axis=1)
    keep = mass > 0
    centre = (blocks @ np.arange(width, dtype=np.float64))[keep] / mass[keep] + width * np.nonzero(keep)[0]
    exponent = np.log(mass[keep])[None, :] + grid[:, None] * centre[None, :]
    weights = np.exp(exponent - exponent.max(axis=1, keepdims=True))
    means = item.count * (weights @ centre) / weights.sum(axis=1)
    mean0 = float(np.interp(0.0, grid, means))
    targets = (mean0 * np.geomspace(0.03, 1.0, _TILTS) if direction == "remove"
               else np.geomspace(mean0, max(2.0 * mean0, 0.9 * size), _TILTS))
    order = np.argsort(means)
    return np.unique(np.interp(targets, means[order], grid[order]))


class AllocationPair:
    """One random-allocation pass (k = 1 of t, Gaussian z, add/remove) in one order ("add" or "remove"),
    as the discrete pair of the module docstring, in the interface the PLD lattice reads
    (``cell_masses``, ``loss_range``). Upper bounds only: the Q-masses carry a relative error of 1."""

    exact_loss_cells = True

    def __init__(self, z: float, t: int, direction: str):
        if direction not in ("add", "remove"):
            raise ValueError(f"direction must be 'add' or 'remove', got {direction!r}")
        self.z = check_positive("z", z)
        self.t = check_count("t", t, minimum=2)
        self.direction = direction

    def __repr__(self) -> str:
        return f"AllocationPair(z={self.z!r}, t={self.t}, direction={self.direction!r})"

    def _atoms(self) -> Tuple[FloatArray, FloatArray, float]:
        return _one_pass(self.z, self.t, self.direction)

    def loss_range(self, tail: float) -> Tuple[float, float]:
        """(lo, hi) with the P'-mass of atoms below lo and above hi (infinity atom excluded) <= tail."""
        losses, p, _ = self._atoms()
        cum = np.cumsum(p)
        lo_i = int(np.searchsorted(cum, tail, side="right"))
        rev = np.cumsum(p[::-1])
        hi_i = len(p) - 1 - int(np.searchsorted(rev, tail, side="right"))
        lo = float(losses[min(lo_i, len(p) - 1)])
        hi = float(losses[max(hi_i, 0)])
        return lo, max(hi, lo + 1e-9)

    def cell_masses(self, edges: ArrayLike, under: str = "P", with_error: bool = False) -> Union[
            Tuple[FloatArray, float, float], Tuple[FloatArray, float, float, FloatArray, float, float]]:
        """Masses of the loss cells (e_{i-1}, e_i], below e_0 and above e_K (with the infinity atom), as
        ``DominatingPair.cell_masses``. Under "Q" the error bounds equal the masses (module docstring)."""
        if under not in ("P", "Q"):
            raise ValueError(f"under must be 'P' or 'Q', got {under!r}")
        losses, p, inf_mass = self._atoms()
        err = p * 4.0 * _U  # the atoms' masses are the majorant's own (module docstring)
        if under == "Q":  # Q'-mass = P'-mass e^{-loss}
            with np.errstate(over="ignore"):
                p = p * np.exp(-losses)
            err, inf_mass = p.copy(), 0.0
        edges = np.asarray(edges, dtype=np.float64)
        where = np.searchsorted(edges, losses, side="left")  # cell index + 1; 0 below, K + 1 above
        size = len(edges) + 1
        mass = cast(FloatArray, np.bincount(where, p, size))  # with weights: float64 (the stubs say intp)
        error = cast(FloatArray, np.bincount(where, err, size)) + mass * (len(p) * _U)
        cells, below, above = mass[1:-1], float(mass[0]), float(mass[-1]) + inf_mass
        if not with_error:
            return cells, below, above
        return cells, below, above, error[1:-1], float(error[0]), float(error[-1]) + (inf_mass * 1e-12 if under == "P" else 0.0)


@functools.lru_cache(maxsize=64)
def allocation_pairs(z: float, t: int) -> Tuple[AllocationPair, AllocationPair]:
    """(add, remove) discrete pairs of one random-allocation pass (one object per (z, t), so repeated
    passes merge into one FFT power in the PLD accountant)."""
    return AllocationPair(z, t, "add"), AllocationPair(z, t, "remove")
