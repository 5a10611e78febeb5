"""One random-allocation pass on a lattice in log V: small t, where the linear lattice cannot resolve small sums.

Setting and notation as ``metadp.accounting.allocation_pld``: one pass of t steps, Gaussian noise z, R = S / t,
S = sum_i V_i, V_i = exp(W_i) i.i.d. under P with W_i ~ N(-1/(2 z^2), 1/z^2). The "add" order's delta is
E_P[(R - e^x)_+] (convex, nondecreasing in each V, and so in S), the "remove" order's E_P[(1 - e^x R)_+]
(nonincreasing), and composed with anything independent each keeps that monotonicity in S (the module
docstring there). So a coupled S+ >= S gives an "add" pair that dominates, and a coupled S- <= S a "remove"
pair: the same argument as the linear lattice's, with stochastic bounds in place of its randomised rounding.

**The bounds.** Cut W at the grid w_j = w_0 + j h, j = 0..M. In the cell (w_j, w_{j+1}] put V- = e^{w_j} and
V+ = e^{w_{j+1}}; below w_0, V- = 0 and V+ = e^{w_0}; above w_M, V- = e^{w_M} and V+ is dropped (below). The
cells' masses are exact Gaussian cell probabilities (``_gaussian_cells.log_cell``), raised by their error
bound. A sum of two values on the grid, log(e^a + e^b) = max(a, b) + log1p(e^{-|a-b|}), is rounded to the
grid, down for S- and up for S+ (with a margin of 1e-9 h, far above the float error of the edges), so every
partial sum stays a coupled bound. The t-fold sum is built by doubling (S_{2k} = S_k (+) S_k, then the binary
digits of t): rounding errors in log S add as max(e_a, e_b) + h per sum, so |log S+- - log S| <= h (1 + the
sums on the longest chain), about h (1 + 2 log2 t): each order's privacy loss is moved by at most that.
Products of masses are non-negative sums: their float round-off is bounded and added (a majorant).

**The dropped mass ("add").** The add order's P'-mass of the atoms with some W_i > w_M is at most
E[V; W > w_M] + (t - 1) E[V+] Pr[W > w_M] (union bound over i, as in ``allocation_pld``), E[V+] <= e^h +
e^{w_0}; charged to the infinity atom. The remove order's S- = 0 (every W_i below w_0) has loss +inf and mass
Pr[W < w_0]^t. The grid's ends are chosen so that both are below 1e-20, and Pr[W < w_0] <= 1e-12 (each V
below w_0 counts 0 in S-: harmless to validity, but at 1e-20^(1/t) it would cost tightness at large t).

**Cost.** A sum of two grids of N points is O(K N) with K = log(1/h) / h pairs of offsets whose log1p term is
at least one step (beyond, the sum rounds to the larger value, done by cumulative sums): h = 1e-3 and
N ~ 15,000 at z = 1 take about 0.2 s a sum.
"""

from __future__ import annotations

import functools
import math
from typing import Optional, Tuple, cast

import numpy as np
from scipy import special

from metadp.accounting._gaussian_cells import log_cell as _log_cell

__all__ = ["log_lattice_pass", "grid_points"]

_U = 2.0**-53
_END = 1e-20  # each end's charge: Pr[W < w_0]^t (remove) and the dropped add-order mass
_MARGIN = 1e-9  # rounding margin, in grid steps
_LOW = 1e-12  # Pr[W < w_0]: the remove order's V- = 0 there


def _offsets(h: float, down: bool) -> np.ndarray:
    """Grid steps to add to the larger of two grid values k steps apart, rounded down (or up): delta_k for
    k = 0..K, K the last k where it is not the tail value (0 down, 1 up)."""
    tail = 0 if down else 1
    k_max = int(math.ceil(math.log(1.0 / h + 1.0) / h)) + 2
    k = np.arange(k_max + 1, dtype=np.float64)
    steps = np.log1p(np.exp(-k * h)) / h
    d = np.floor(steps - _MARGIN) if down else np.ceil(steps + _MARGIN)
    d = np.maximum(d, tail).astype(np.int64)
    last = int(np.nonzero(d != tail)[0].max(initial=0))
    return d[: last + 1]


def _combine(a: np.ndarray, a0: float, b: np.ndarray, b0: float, offsets: np.ndarray,
             tail: int) -> Tuple[np.ndarray, float]:
    """The pmf of the rounded log(e^A + e^B) on the grid, and its zero atom (A, B independent; a0, b0 their
    masses at V = 0). Index i is the grid value w_0 + i h for both inputs and the output."""
    n = max(len(a), len(b))
    a = np.pad(a, (0, n - len(a)))
    b = np.pad(b, (0, n - len(b)))
    out = np.zeros(n + int(offsets[0]) + 2)
    out[int(offsets[0]): int(offsets[0]) + n] += a * b  # equal values: + log 2, rounded
    kmax = len(offsets) - 1
    for k in range(1, min(kmax, n - 1) + 1):
        d = int(offsets[k])
        # larger index j = i + k from b (a below it), and from a (b below it)
        out[k + d: n + d] += a[: n - k] * b[k:] + b[: n - k] * a[k:]
    if n - 1 > kmax:  # far apart: the sum rounds to the larger value (+ tail steps)
        ca, cb = np.cumsum(a), np.cumsum(b)
        j = np.arange(kmax + 1, n)
        out[j + tail] += b[j] * ca[j - kmax - 1] + a[j] * cb[j - kmax - 1]
    out[:n] += a0 * b + b0 * a  # one of them zero: the other value
    return out, a0 * b0


def _ends(z: float, t: int) -> Tuple[float, float]:
    """(w_0, w_M): Pr[W < w_0] <= _LOW and Pr[W < w_0]^t <= _END (below w_0, V- = 0: valid, but each such
    V drops out of the sum), and the add order's dropped mass above w_M about _END."""
    m, s = -0.5 / z**2, 1.0 / z
    lo = m + s * float(special.ndtri(min(_END ** (1.0 / t), _LOW)))
    hi = m + s * s + s * float(-special.ndtri(_END / (2.0 * t + 2.0)))
    return lo, hi


def grid_points(z: float, t: int, h: float = 1e-3) -> int:
    """The log lattice's grid points for one pass (its cost is about log(1/h) / h times this a sum)."""
    lo, hi = _ends(z, t)
    return int(math.ceil((hi - lo) / h)) + 1


@functools.lru_cache(maxsize=32)
def log_lattice_pass(z: float, t: int, direction: str, h: float = 1e-3) -> Tuple[np.ndarray, np.ndarray, float]:
    """(losses, P'-masses, infinity mass) of one pass's dominating discrete pair in ``direction`` ("add": S+,
    loss log R+, P'-mass R+ Pr[S+ = s]; "remove": S-, loss -log R-, P'-mass Pr[S- = s]): module docstring."""
    down = direction == "remove"
    m, s = -0.5 / z**2, 1.0 / z
    lo, hi = _ends(z, t)
    count = int(math.ceil((hi - lo) / h))
    w = lo + h * np.arange(count + 1, dtype=np.float64)
    log_p, err_p = _log_cell(w[:-1] * z * z + 0.5, w[1:] * z * z + 0.5, 0.0, z)  # W in (w_j, w_j+1] <=> x in cell
    p = np.exp(log_p) * np.expm1(np.minimum(err_p, 1.0) + 4.0 * _U) + np.exp(log_p)  # raised: a majorant
    p = np.where(np.isfinite(p), p, 0.0)
    below = float(special.ndtr((lo - m) / s)) * (1.0 + 1e-12) + 1e-300
    above = float(special.ndtr(-(hi - m) / s)) * (1.0 + 1e-12) + 1e-300
    one = np.zeros(count + 1)  # grid index of V-/V+: the cell's lower (remove) or upper (add) edge
    if down:
        one[:-1] += p
        one[-1] += above  # above w_M: V- = e^{w_M}
        zero = below  # below w_0: V- = 0
        inf_mass = 0.0
    else:
        one[1:] += p
        one[0] += below  # below w_0: V+ = e^{w_0}
        zero = 0.0
        mean_plus = math.exp(h) + math.exp(lo)  # E[V+] <= e^h E[V] + e^{w_0} Pr[W < w_0]
        tilted = float(special.ndtr(-(hi - m - s * s) / s))  # E[V; W > w_M]
        inf_mass = (tilted + (t - 1.0) * mean_plus * above) * (1.0 + 1e-12) + 1e-300
    offsets = _offsets(h, down)
    tail = 0 if down else 1
    total: Optional[np.ndarray]
    total, total0, sums = None, 0.0, 0
    power, power0 = one, zero
    k = t
    while k:
        if k & 1:
            if total is None:
                total, total0 = power, power0
            else:
                total, total0 = _combine(total, total0, power, power0, offsets, tail)
                sums += 1
        k >>= 1
        if k:
            power, power0 = _combine(power, power0, power, power0, offsets, tail)
            sums += 1
    # float round-off: each mass is a sum of at most (grid points)^2 non-negative products
    total = cast(np.ndarray, total)  # set in the loop (t >= 1)
    total = total * (1.0 + 4.0 * _U * (sums + 2) * len(total))
    idx = np.nonzero(total > 0)[0]
    log_s = lo + h * idx.astype(np.float64)
    if down:
        losses, masses = math.log(t) - log_s, total[idx]
        inf_mass += total0 * (1.0 + 1e-12)
        order = np.argsort(losses)
        return losses[order], masses[order], inf_mass
    losses = log_s - math.log(t)
    with np.errstate(over="ignore"):
        masses = total[idx] * np.exp(losses) * (1.0 + 4.0 * _U)
    keep = np.isfinite(masses)
    return losses[keep], masses[keep], inf_mass + float(np.sum(~keep))
