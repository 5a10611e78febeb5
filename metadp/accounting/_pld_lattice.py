"""Lattice discretisation of one dominating pair (PLD internals; composition in ``_pld_compose``), and
the loss moments that size the first lattice (``window_estimate``).

A pair (P, Q) with privacy loss L = log dP/dQ is cut into loss cells (e_k, e_k + h] on the lattice
h Z; the pair gives each cell's exact P- and Q-masses. Two discrete losses come out of the cells:

* **Upper (pessimistic): connect-the-dots.** Each cell's mass (p, q) is split into two atoms at its
  end points with loss ratios exactly e_k and e_k + h: the Q-masses solve q_L + q_R = q and
  e^{e_k} q_L + e^{e_k + h} q_R = p, so the P-mass at the right end is p (1 - e^{-a}) / (1 - e^{-h}),
  a = log(p/q) - e_k. The original pair is a post-processing of the split one (send each end atom back
  into its cell with the conditional law of Q), so the split pair dominates it, and composing dominating
  pairs dominates the composition (Doroshenko, Ghazi, Kamath, Kumar & Manurangsi 2022,
  arXiv:2207.04380, Sec. 3; Zhu, Dong & Wang 2022, arXiv:2106.08567, Thm 10). No drift correction is
  needed: the split adds at most h^2/4 of variance to each step's loss and keeps its Q-mass exact.
  The lower tail L <= e_0 is rounded up to e_0 (stochastic dominance, pessimistic); the upper tail
  L > e_K becomes the infinity atom.
* **Lower (optimistic): one event.** delta(eps) = sup_E P(E) - e^eps Q(E) over events E of the
  composed output, so any one event gives a lower bound. Label each step's output by its loss cell k
  (cells kept: both masses accurate) and let E be "every step's cell is kept and the labels sum to a
  value in A": P(E) and Q(E) are sums over A of the n-fold lattice sums of the cells' P-masses
  (``down``) and Q-masses (``down_q``), each an FFT power, and A = {s : P_s > e^eps Q_s} is the best
  choice. Cells are labelled by the lattice point nearest their loss ratio. No rounding of the loss and
  no drift correction: the labels only group outcomes, and an outcome's loss spreads around its
  label's by about h sqrt(n / 12), which costs delta second order.
  Dropped tails and cells simply lie outside E.

Round-off. The cells are those of the mechanism's output between the computed inverses of the edges
(floats: exact cells of the real line), so only the cell masses carry round-off, and the pair bounds
it (``cell_masses(..., with_error=True)``: a relative error eta_k per cell). The computed loss ratio
log(p_k/q_k) is then within eps_k = eta_p + eta_q + a few ulps of the cell's exact one, and every
placement uses that: connect-the-dots splits at the lattice points bracketing log(p/q) + eps_k (any
point at or above the exact ratio gives a dominating split, even if it is not the cell's nominal one),
bucketing rounds log(p/q) - eps_k down. What remains is that the stored masses are the exact ones of
such a pair only to a relative error eta (``Lattice.rel_error``, the largest over the cells kept);
since every mass is >= 0, an n-fold composition of masses each within relative eta of the exact ones is
within a factor (1 +- eta)^n of the exact composition, bin by bin (``_pld_compose``): a relative error of
delta, not an absolute one. Cells whose own bound exceeds ``_MAX_REL_ERROR`` (deep tails, subnormal
masses) are charged to the infinity atom with their absolute bound (upper) or dropped (lower).
"""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import Any, List, Optional, Sequence, Tuple, cast

import numpy as np

from metadp.core._typing import FloatArray

__all__: List[str] = []

Pair = Any
"""A dominating pair (``mechanisms.base.DominatingPair``) or a revealed mixture of them
(``mechanisms.episodic.RevealedMixture``, which has ``components``): read by what each offers."""
PairItem = Tuple[Optional[Tuple[Pair, ...]], int]
"""(pairs, count): one mechanism's pairs ((add, remove), or one pair both directions share; None for a
non-private release), composed ``count`` times: the PLD accountant's unit of composition."""
LiveItem = Tuple[Tuple[Pair, ...], int]
"""A ``PairItem`` of a private release (its pairs are not None): what the lattice bounds take."""

_U = 2.0**-53  # unit round-off of float64
_MAX_REL_ERROR = 1e-9  # cells less accurate than this go to the infinity atom (upper) or are dropped (lower)
_GH_X, _GH_W = np.polynomial.hermite.hermgauss(64)  # loss moments (they only size the first lattice)


@dataclasses.dataclass(frozen=True)
class Lattice:
    """One pair on the lattice h Z, indices from ``start`` (array position i is index start + i)."""

    start: int
    h: float
    up: FloatArray  # connect-the-dots P-masses at the lattice points (finite part)
    down: FloatArray  # the kept cells' P-masses, at their cell's index (lower bound's event)
    up_inf: float  # upper bound on Pr[L > top] plus the masses charged there: the infinity atom
    down_q: FloatArray  # the cells' Q-masses, at the same labels as ``down`` (lower bound's event)
    rel_error: float = 0.0  # up, down and down_q are within this relative error of an exact pair's masses


def _masses(pair: Pair, edges: FloatArray, under: str) -> Tuple[FloatArray, float, float, FloatArray, FloatArray,
                                                                float, float]:
    """cell masses, below, above and their relative error bounds (``cell_masses(with_error=True)``)."""
    cells, below, above, err, err_below, err_above = pair.cell_masses(edges, under, with_error=True)
    with np.errstate(divide="ignore", invalid="ignore"):
        rel = np.where(cells > 0, err / cells, np.inf)
    return cells, below, above, rel, err, err_below, err_above


def _bracket(value: FloatArray, h: float, guard: FloatArray) -> Tuple[np.ndarray, FloatArray]:
    """Lattice index j and offset r in [0, h) with value = j h + r to round-off (``guard`` absolute)."""
    j = np.floor(value / h)
    r = value - j * h
    low, high = r < 0.0, r >= h
    j, r = np.where(low, j - 1, np.where(high, j + 1, j)), np.where(low, r + h, np.where(high, r - h, r))
    return j.astype(np.int64), r


def build_lattice(pair: Pair, h: float, tail: float) -> Lattice:
    """The lattice of ``pair`` with spacing h, loss tails of P-mass <= ``tail`` cut on each side."""
    if hasattr(pair, "components"):  # a revealed mixture: mix the components' lattices
        return _mixed_lattice(pair, h, tail)
    lo, hi = _loss_range(pair, tail)
    # one more cell on each side: an atom at the range's end (a Laplace pair's +-eps0 on a snapped
    # lattice) must not fall outside it by the rounding of the edges
    j_lo, j_hi = math.floor(lo / h) - 1, math.ceil(hi / h) + 1
    edges = np.arange(j_lo, j_hi + 1, dtype=np.float64) * h
    cp, below, above, rel_p, err_p, err_below, err_above = _masses(pair, edges, "P")
    cq, _, _, rel_q, _, _, _ = _masses(pair, edges, "Q")
    kept = (cp > 0) & (rel_p <= _MAX_REL_ERROR)
    charged = float(np.sum(np.where(kept, 0.0, cp + err_p)))  # to the infinity atom (upper), dropped (lower)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.log(cp) - np.log(cq)  # the cell's loss ratio l* to within `slack`
        slack = np.where(np.isfinite(ratio), rel_p + rel_q + 4.0 * _U * (np.abs(ratio) + 1.0), 0.0)
    usable = kept & np.isfinite(ratio) & (rel_q <= _MAX_REL_ERROR)
    nominal = np.arange(len(cp), dtype=np.int64) + j_lo  # cell k is (e_k, e_{k+1}] in exact arithmetic
    guard = 8.0 * _U * (np.abs(edges[:-1]) + h)  # rounding of j h and of the subtractions below
    if np.any(guard[kept] >= 0.25 * h):
        raise ValueError(f"lattice spacing h = {h:g} is below the resolution of float64 at losses near {hi:g}")
    # upper: split between j h and (j + 1) h with j h <= l* + slack < (j + 1) h; a cell without a usable
    # ratio (q underflows) puts all its mass two points above its nominal cell (its loss is <= e_{k+1}
    # up to the inverse's round-off). Where the pair's cells are exact loss intervals (``exact_loss_cells``)
    # l* <= e_{k+1} as well: an atom on a lattice point stays there.
    exact = getattr(pair, "exact_loss_cells", False)
    high = ratio + slack
    if exact:
        high = np.minimum(high, edges[1:])
    j, r = _bracket(np.where(usable, high, 0.0), h, guard)
    a = r + guard
    wrap = a > h
    j, a = np.where(wrap, j + 1, j), np.where(wrap, a - h, a)
    j = np.where(usable, j, nominal + 1)
    a = np.where(usable, np.clip(a, 0.0, h), h)
    right = np.where(kept, cp * (np.expm1(-a) / math.expm1(-h)), 0.0)
    left = np.where(kept, cp * (np.exp(-a) * np.expm1(a - h) / math.expm1(-h)), 0.0)
    start = min(int(j.min()), j_lo - 1)
    size = max(int(j.max()) + 2, j_hi + 2) - start
    up = np.bincount(j - start, left, size) + np.bincount(j + 1 - start, right, size)
    # L <= e_0: its upper bound, placed one point up for the inverse's round-off (extra P-mass only
    # raises every delta, so an absolute bound serves where a relative one may not exist)
    up[j_lo + 1 - start] += below + err_below
    # lower: the kept cells with both masses accurate, labelled by the lattice point nearest their loss
    # ratio (any labels give a valid event; these keep a label sum's loss near its lattice value)
    sure = usable & (cq > 0)
    label = np.clip(np.where(sure, np.floor(ratio / h + 0.5), nominal).astype(np.int64), start, start + size - 1)
    down = np.bincount(label - start, np.where(sure, cp, 0.0), size)
    down_q = np.bincount(label - start, np.where(sure, cq, 0.0), size)
    eta = float(max(np.max(rel_p[kept], initial=0.0), np.max(rel_q[sure], initial=0.0))) + 8.0 * _U
    up_inf = (above + err_above + charged) * (1.0 + 4.0 * _U)
    # np.bincount with weights gives float64 (its stubs say intp)
    return Lattice(start, h, cast(FloatArray, up), cast(FloatArray, down), up_inf, cast(FloatArray, down_q),
                   min(eta, 1.0))


def _mixed_lattice(mixture: Pair, h: float, tail: float) -> Lattice:
    """Lattices of a revealed mixture's components, mixed with its weights (a component None is the
    zero-loss atom). Connect-the-dots and bucketing act per (component, cell), so mixing is exact."""
    # Component j may lose tail / (w_j m) per side (m components): the mixture loses <= tail. Components
    # too light to keep at all are charged whole: to the infinity atom (upper) or dropped (lower).
    m = len(mixture.components)
    parts: List[Tuple[float, Optional[Lattice]]] = []
    dropped = 0.0
    for w, pair in zip(mixture.weights, mixture.components):
        if pair is None:
            parts.append((w, None))
        elif w * m <= 4.0 * tail:
            dropped += w
        else:
            parts.append((w, build_lattice(pair, h, min(0.25, tail / (w * m)))))
    start = min([0] + [L.start for _, L in parts if L is not None])
    stop = max([1] + [L.start + len(L.up) for _, L in parts if L is not None])
    up, down, down_q = np.zeros(stop - start), np.zeros(stop - start), np.zeros(stop - start)
    up_inf, eta = mixture.inf_mass + dropped, 0.0
    for w, L in parts:
        if L is None:
            for array in (up, down, down_q):
                array[-start] += w
            continue
        at = slice(L.start - start, L.start - start + len(L.up))
        up[at] += w * L.up
        down[at] += w * L.down
        down_q[at] += w * L.down_q
        up_inf += w * L.up_inf
        eta = max(eta, L.rel_error)
    eta += 4.0 * _U * (1 + len(parts))
    return Lattice(start, h, up, down, up_inf * (1.0 + eta), down_q, eta)


@functools.lru_cache(maxsize=64)
def _loss_range(pair: Pair, tail: float) -> Tuple[float, float]:
    """``pair.loss_range(tail)``, once per pair and tail (every refinement round asks again)."""
    found: Tuple[float, float] = pair.loss_range(tail)
    return found


@functools.lru_cache(maxsize=64)
def lattice_cached(pair: Pair, h: float, tail: float) -> Lattice:
    return build_lattice(pair, h, tail)


def window_estimate(pairs: Sequence[Tuple[Pair, int]], tau: float) -> float:
    """Approximate width (in loss units) of the composed sum's window plus one step's support, for the
    truncation ``tau`` of the whole sum (it only sizes the first lattice spacing)."""
    n = sum(c for _, c in pairs)
    variance, support = 0.0, 0.0
    for pair, c in pairs:
        lo, hi = _loss_range(pair, tau / n)
        # A loss range can collapse to a point in float (a Gaussian with z <= 0.05 under Poisson sampling,
        # remove direction: the loss is -log(1 - q) to 1e-80 on all but a 1e-80 tail); keep a positive width.
        hi = max(hi, lo + 1e-6 * max(1.0, abs(lo), abs(hi)))
        moments = loss_moments(pair)
        if moments is None:  # a coarse lattice's
            coarse = lattice_cached(pair, (hi - lo) / 512.0, tau / n)
            idx = (np.arange(len(coarse.up)) + coarse.start) * coarse.h
            mass = float(coarse.up.sum())
            mean = float(np.dot(coarse.up, idx)) / mass
            moments = (mean, float(np.dot(coarse.up, (idx - mean) ** 2)) / mass)
        variance += c * moments[1]
        support = max(support, hi - lo)
    return 14.0 * math.sqrt(variance) + support



def loss_moments(pair: Pair) -> Optional[Tuple[float, float]]:
    """(mean, variance) of the privacy loss under P for a Gaussian mixture pair (or a revealed mixture
    of them), by 64-point Gauss-Hermite quadrature per component; None for other pairs."""
    if hasattr(pair, "components"):
        first = second = 0.0
        for w, part in zip(pair.weights, pair.components):
            if w <= 0.0:
                continue
            found = (0.0, 0.0) if part is None else loss_moments(part)
            if found is None:
                return None
            first += w * found[0]
            second += w * (found[1] + found[0] ** 2)
        return first, max(second - first * first, 0.0)
    if not all(hasattr(pair, name) for name in ("weights", "shifts", "sigma", "direction")):
        return None
    weights, shifts = (pair.weights, pair.shifts) if pair.direction == "add" else ([1.0], [0.0])
    first = second = 0.0
    for w, shift in zip(weights, shifts):
        loss = pair.log_ratio(shift + pair.sigma * math.sqrt(2.0) * _GH_X)
        first += w * float(np.dot(_GH_W, loss)) / math.sqrt(math.pi)
        second += w * float(np.dot(_GH_W, loss * loss)) / math.sqrt(math.pi)
    return first, max(second - first * first, 0.0)
