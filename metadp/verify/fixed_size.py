"""Fixed-size batches under substitution: which neighbouring datasets attain what, over many steps.

The PLD accountant bounds a fixed-size (m of n, without replacement) Gaussian plan by composing the
symmetrised per-step pair S (``metadp.mechanisms.wor``): tight for one step, but no datasets are shown to
produce S at every step, so S's composition is an upper bound only. Its lower end comes from named datasets
(``SymmetrizedPair.attained``): every other record at -C, the replaced record at -C and its replacement at +C.
This module checks that choice against the mechanism itself.

**One-line configurations.** Clipped contributions on one line (units of C): the n - 1 other records at v,
the replaced record at u, its replacement at w, each in [-1, 1], the same at every step (a linear loss). A
step's batch holds the record with probability gamma = m / n and otherwise m other records, so the
released sum is, up to the common shift (m - 1) v,

    P = (1 - gamma) N(v, z^2) + gamma N(u, z^2)   against   Q = (1 - gamma) N(v, z^2) + gamma N(w, z^2),

and the steps are independent: T steps release exactly (P^T, Q^T). (v, u, w) = (-1, -1, 1) is the Poisson
pair R with shift 2 in one order and its reverse in the other.

* ``mechanism_masses`` enumerates the batches of a small dataset (any contributions, not only one-line
  ones) and returns the binned law of one step's release: an exact check of the formula above, and of
  heterogeneous other records.
* ``configuration_epsilon`` estimates the T-fold epsilon of one configuration (both orders), by composing
  its binned privacy loss with an FFT (nearest-point rounding on a fine lattice): an estimate to rank
  configurations, not a certificate. ``search_configurations`` ranks a grid of them; the winner on every
  plan tried is (-1, -1, 1), whose certified lower bound is the report's lower end.
* ``exact_two_step_epsilon`` is exact up to the binning of the output, for two steps (the double sum over
  both steps' bins), and ``adaptive_two_step_epsilon`` lets the second step's configuration depend on the
  first release (a loss whose gradient at the second iterate depends on it: in one dimension the iterate
  reveals the first release exactly), the maximum over a grid of one-line configurations.

What it shows on small plans (``tests/verify/test_fixed_size.py``; m = 1 of n = 4, z = 2, two steps,
delta = 0.1): S composes to 0.1878, the best one-line configuration to 0.1514 (the report's lower end, R),
and an adaptive second step to 0.1703 on the 9-point grid. So neither end of the interval is known to be
the truth: adaptive datasets exceed the static lower end, and no datasets reaching S's composition are
known.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from typing import Any, Callable, List, Optional, Sequence, Set, Tuple, cast

import numpy as np
from scipy import optimize, special

from metadp.core.validation import check_count, check_delta, check_positive, check_probability

__all__ = ["Configuration", "adaptive_epsilon", "adaptive_two_step_epsilon", "configuration_epsilon", "configuration_masses",
           "exact_two_step_epsilon", "mechanism_masses", "output_grid", "search_configurations"]


@dataclasses.dataclass(frozen=True)
class Configuration:
    """One-line contributions (units of C) and the estimated T-fold epsilon of the two orders."""

    others: float  # v: every other record's clipped contribution
    replaced: float  # u: the replaced record's
    replacement: float  # w: its replacement's
    epsilon: float  # max over the two orders of the neighbours (estimate, ``configuration_epsilon``)


def output_grid(z: float, span: float = 1.0, points: int = 8001) -> np.ndarray:
    """Bin edges for one step's release (units of C), -inf and +inf at the ends: ``points`` bins across
    the means' range +- 14 z (the mass outside is below 1e-44)."""
    z = check_positive("z", z)
    centres = np.linspace(-span - 14.0 * z, span + 14.0 * z, check_count("points", points, minimum=3))
    return np.concatenate([[-np.inf], 0.5 * (centres[1:] + centres[:-1]), [np.inf]])


def _gaussian_bins(mean: float, z: float, edges: np.ndarray) -> np.ndarray:
    """Pr[N(mean, z^2) in each bin]: CDF differences below the mean, survival differences above it (a
    CDF difference in the upper tail cancels to 0 where the masses are still far above underflow)."""
    x = (np.asarray(edges, dtype=np.float64) - mean) / z
    lo, hi = x[:-1], x[1:]
    return cast(np.ndarray, np.where(hi <= 0.0, special.ndtr(hi) - special.ndtr(lo),
                                     special.ndtr(-lo) - special.ndtr(-hi)))


def configuration_masses(v: float, u: float, w: float, rate: float, z: float,
                         edges: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
    """(P, Q) binned on ``edges``: one step of the one-line configuration (module docstring)."""
    for name, x in (("v", v), ("u", u), ("w", w)):
        if not -1.0 <= x <= 1.0:
            raise ValueError(f"{name} must be in [-1, 1] (a clipped contribution in units of C), got {x!r}")
    g = check_probability("rate", rate)
    base = (1.0 - g) * _gaussian_bins(v, z, edges)
    return base + g * _gaussian_bins(u, z, edges), base + g * _gaussian_bins(w, z, edges)


def mechanism_masses(contributions: Sequence[float], batch: int, z: float, edges: np.ndarray) -> np.ndarray:
    """The binned law of one step's release sum_{i in B} c_i + N(0, z^2), B uniform among the batches of
    ``batch`` of the records (every batch enumerated: for small datasets)."""
    c = np.asarray(contributions, dtype=np.float64)
    if c.ndim != 1 or len(c) < 1 or np.any(np.abs(c) > 1.0) or not np.all(np.isfinite(c)):
        raise ValueError("contributions must be a list of clipped contributions in [-1, 1] (units of C)")
    m = check_count("batch", batch, minimum=1, maximum=len(c))
    count = math.comb(len(c), m)
    if count > 100_000:
        raise ValueError(f"{count:,} batches is too many to enumerate; use a smaller dataset")
    batches = list(itertools.combinations(range(len(c)), m))
    sums = np.array([c[list(b)].sum() for b in batches])
    return cast(np.ndarray, sum(_gaussian_bins(s, z, edges) for s in sums) / len(batches))  # (a sum of arrays)


def _losses(p: np.ndarray, q: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
    keep = (p > 0.0) & (q > 0.0)
    if np.any(p[~keep] > 1e-300):  # a P-mass where Q has none: an infinite loss the estimate would drop
        raise ValueError("P has mass where Q has none at this binning")
    return np.log(p[keep]) - np.log(q[keep]), p[keep]


def _solve(delta_of: Callable[[float], float], delta: float, top: float = 200.0) -> float:
    if delta_of(0.0) <= delta:
        return 0.0
    if delta_of(top) > delta:
        return math.inf
    return float(optimize.brentq(lambda e: delta_of(e) - delta, 0.0, top, xtol=1e-10))


def _composed_epsilon(p: np.ndarray, q: np.ndarray, steps: int, delta: float, spacing: float, width: float) -> float:
    """Estimated epsilon of (P^T, Q^T): the loss rounded to the nearest point of a lattice around its mean."""
    loss, mass = _losses(p, q)
    mean = float(np.sum(mass * loss))
    size = 1 << int(math.ceil(math.log2(2.0 * width / spacing)))
    index = np.rint((loss - mean) / spacing).astype(np.int64) % size
    pmf = np.bincount(index, weights=mass, minlength=size)
    composed = np.maximum(np.fft.irfft(np.fft.rfft(pmf) ** steps, size), 0.0)
    k = np.arange(size)
    total = np.where(k >= size // 2, k - size, k) * spacing + steps * mean
    return _solve(lambda e: float(np.sum(composed * -np.expm1(np.minimum(e - total, 0.0)))), delta)


def configuration_epsilon(v: float, u: float, w: float, rate: float, z: float, steps: int, delta: float, *,
                          spacing: float = 2e-4, width: float = 80.0, points: int = 8001) -> float:
    """Estimated epsilon of T steps of one configuration, the larger of the two orders (an estimate to rank
    configurations by, not a certificate: module docstring)."""
    steps = check_count("steps", steps, minimum=1)
    delta = check_delta("delta", delta)
    p, q = configuration_masses(v, u, w, rate, z, output_grid(z, points=points))
    return max(_composed_epsilon(p, q, steps, delta, spacing, width),
               _composed_epsilon(q, p, steps, delta, spacing, width))


def search_configurations(rate: float, z: float, steps: int, delta: float,
                          values: Sequence[float] = (-1.0, -0.5, 0.0, 0.5, 1.0),
                          **options: Any) -> List[Configuration]:
    """Every one-line configuration on the grid ``values`` (v, u, w), ranked by estimated epsilon, largest
    first. Mirror images (v, u, w) -> (-v, -u, -w) and swapped orders (u <-> w) are the same mechanism up to
    a reflection or the order of the neighbours, so each is computed once."""
    seen: Set[Tuple[float, float, float]] = set()
    found: List[Configuration] = []
    for v, u, w in itertools.product(values, repeat=3):
        key = min((v, u, w), (-v, -u, -w), (v, w, u), (-v, -w, -u))
        if u == w or key in seen:
            continue
        seen.add(key)
        found.append(Configuration(v, u, w, configuration_epsilon(v, u, w, rate, z, steps, delta, **options)))
    return sorted(found, key=lambda c: -c.epsilon)


def exact_two_step_epsilon(p: np.ndarray, q: np.ndarray, delta: float) -> float:
    """epsilon of two independent steps of the binned pair (P, Q), in the order (P, Q): the double sum
    over both steps' bins (exact for the binned release, which is a post-processing of the real one)."""
    delta = check_delta("delta", delta)
    loss, mass = _losses(p, q)
    total = (loss[:, None] + loss[None, :]).ravel()
    order = np.argsort(total)
    total, weight = total[order], (mass[:, None] * mass[None, :]).ravel()[order]
    # delta(eps) = sum_{s > eps} w_s (1 - e^{eps - s}) for eps >= 0: suffix sums of w and of w e^{-s} (taken
    # at s >= 0 only, where e^{-s} <= 1; a query at eps >= 0 never reaches the negative s)
    tail_w = np.cumsum(weight[::-1])[::-1]
    tail_we = np.cumsum((weight * np.exp(-np.maximum(total, 0.0)))[::-1])[::-1]

    def delta_of(eps: float) -> float:
        k = int(np.searchsorted(total, eps, side="right"))
        return 0.0 if k == len(total) else max(0.0, float(tail_w[k] - math.exp(eps) * tail_we[k]))

    return _solve(delta_of, delta)


def adaptive_two_step_epsilon(pairs: Sequence[Tuple[np.ndarray, np.ndarray]], delta: float) -> float:
    """epsilon of two steps where each step's configuration is any of ``pairs`` (binned (P, Q) on one
    grid), the second chosen after seeing the first release: delta(eps) = max over the first pair of
    sum_y P_1(y) max_k delta_k(eps - L_1(y)), delta_k the second pair's hockey-stick divergence at any real
    order (its value at eps < 0 included). The max over k is taken on a lattice of orders (spacing 0.01,
    linearly interpolated): an estimate, as ``configuration_epsilon``."""
    delta = check_delta("delta", delta)
    orders = np.linspace(-8.0, 12.0, 2001)
    envelope = np.zeros_like(orders)
    for p, q in pairs:
        envelope = np.maximum(envelope, [np.sum(np.maximum(p - math.exp(e) * q, 0.0)) for e in orders])

    def second(x: np.ndarray) -> np.ndarray:  # max_k delta_k(x); beyond the lattice: 1 - e^x below (every delta_k >= it), 0 above
        inside = np.interp(x, orders, envelope, right=0.0)
        return cast(np.ndarray, np.where(x < orders[0], -np.expm1(np.minimum(x, 0.0)), inside))

    best = 0.0
    for p, q in pairs:
        loss, mass = _losses(p, q)
        best = max(best, _solve(lambda e: float(np.sum(mass * second(e - loss))), delta, top=orders[-1]))
    return best


def adaptive_epsilon(pairs: Sequence[Tuple[np.ndarray, np.ndarray]], steps: int, delta: float, *,
                     spacing: float = 1e-3, low: float = -40.0, high: float = 60.0,
                     progress: Optional[Callable[[int], None]] = None) -> float:
    """Estimated epsilon of ``steps`` steps where each step's configuration is any of ``pairs``, chosen
    after seeing every earlier release (the adversary of adaptive composition, restricted to this menu).

    Dynamic programming over the hockey-stick order: delta_0(eps) = (1 - e^eps)_+ and
    delta_t(eps) = max_k sum_y P_k(y) delta_{t-1}(eps - L_k(y)), the maximum taken at each eps, i.e. the
    configuration chosen for the remaining steps given the privacy loss so far. Losses are rounded to the
    nearest point of a lattice of ``spacing`` (each step's convolution is an FFT), and orders outside
    [low, high] are taken as 1 - e^eps below (every delta is at least that) and 0 above: an estimate, not a
    certificate. Two steps over a menu agree with ``adaptive_two_step_epsilon``, one pair with the static
    composition (``tests/verify/test_fixed_size.py``). ``progress``: called with each step number."""
    steps = check_count("steps", steps, minimum=1)
    delta = check_delta("delta", delta)
    count = int(round((high - low) / spacing)) + 1
    orders = low + spacing * np.arange(count)
    size = 1 << int(math.ceil(math.log2(2 * count)))
    kernels = []
    for p, q in pairs:
        loss, mass = _losses(p, q)
        k = np.rint(loss / spacing).astype(np.int64)
        if k.max() - k.min() >= size - count:
            raise ValueError("a step's privacy loss spans more than the order lattice; raise high - low")
        kernels.append((int(k.min()), np.fft.rfft(np.bincount(k - k.min(), weights=mass), size)))
    floor = np.maximum(-np.expm1(np.minimum(orders, 0.0)), 0.0)
    value = floor.copy()
    index = np.arange(count)
    for t in range(steps):
        spectrum = np.fft.rfft(value, size)
        best = floor.copy()
        for shift, kernel in kernels:
            # new(eps_i) = sum_j w_j value(eps_i - (shift + j) h) = (value * w)[i - shift]
            conv = np.fft.irfft(spectrum * kernel, size)
            source = index - shift
            inside = (source >= 0) & (source < size)
            out = np.where(inside, conv[np.clip(source, 0, size - 1)], floor)
            best = np.maximum(best, out)
        value = np.minimum(best, 1.0)
        if progress is not None:
            progress(t + 1)
    below = np.nonzero(value <= delta)[0]
    if len(below) == 0:
        return math.inf
    return float(max(orders[below[0]], 0.0))
