"""The PLD accountant's certified bounds (``metadp.accounting.pld``): the lattice refined until the
[lower, upper] interval meets the tolerance, each direction's delta(eps) and epsilon(delta) on the
lattice, the FFT window estimate, and the trajectory of a composed step.
"""

from __future__ import annotations

import dataclasses
import math
import time
from typing import Tuple

import numpy as np
from scipy import fft as sfft
from scipy import special

from metadp.accounting import _pld_lattice as _lat

__all__ = ["PldResult"]


_DELTA_SHARE = 1e-5  # fraction of delta spent on each truncation (tails, window, drift bound)
# Precision assumption: the stored cell masses of one step are within 8 ulps (relative) of the exact
# ones, so the step's total variation error is <= 8 eps; composing n steps moves delta by <= n times it.
# Not proven (no interval arithmetic), but charged: it matters from about 1e7 steps at delta 1e-6.
_ROUNDING = 8.0 * np.finfo(np.float64).eps


@dataclasses.dataclass(frozen=True)
class PldResult:
    """Certified bounds for one query, with the grid and the error terms that produced them."""

    epsilon_lower: float
    epsilon_upper: float
    delta: float
    h: float  # lattice spacing of the privacy loss
    steps: int  # number of composed releases
    fft_size: int
    notes: Tuple[str, ...] = ()




def _bounds(items, delta: float, tolerance: float, max_points: int, max_memory: int,
            max_seconds: float = math.inf) -> PldResult:
    """Certified bounds at ``delta``, refining the lattice until upper - lower <= tolerance * upper.

    Both bounds are valid at every spacing (module docstring of ``_pld_lattice``); refinement only
    narrows the interval. The first spacing puts about 2^14 points across the composed sum's window;
    the discretisation error shrinks about as h^2 (upper) and h (lower), so each round shrinks h by
    sqrt(target / gap), clamped to [1/4, 0.7]. The finest spacing is set by ``max_points``; no round
    starts that would (by the last round's time, scaled by the spacing) end after ``max_seconds``.
    """
    start = time.perf_counter()
    n = sum(c for _, c in items)
    if _ROUNDING * n >= delta:  # the upper bound's budget, delta minus this allowance, is already <= 0
        return PldResult(0.0, math.inf, delta, math.nan, n, 0, (_allowance_note(n, delta),))
    tau = _DELTA_SHARE * delta
    tail = _DELTA_SHARE * delta / n
    directions = 2 if any(len(pairs) == 2 for pairs, _ in items) else 1
    per_direction = [[(pairs[min(d, len(pairs) - 1)], c) for pairs, c in items] for d in range(directions)]
    width = max(_window_estimate(pairs, delta) for pairs in per_direction)
    h_floor = width / (0.95 * max_points)
    h = max(width / 2.0**14, h_floor)
    lower, upper, size, notes, gap = 0.0, math.inf, 0, [], math.inf
    for _ in range(12):
        round_start = time.perf_counter()
        try:
            found = [_direction_bounds(pairs, delta, h, tau, tail, max_memory) for pairs in per_direction]
        except MemoryError as err:  # the window estimate was short: widen and retry
            h *= max(1.25, float(err.args[0]) if err.args else 2.0)
            h_floor = max(h_floor, h)
            notes = [f"lattice widened to h = {h:.3g} to stay within the memory budget "
                     f"({max_memory / 2**30:.3g} GiB): the interval is wider than the tolerance asked"]
            continue
        lower = max(lower, max(lo for lo, _, _ in found))  # every round is certified: keep the best
        upper = min(upper, max(up for _, up, _ in found))
        size = max(s for _, _, s in found)
        gap, previous = upper - lower, gap
        if gap <= tolerance * upper:
            break
        if gap > 0.8 * previous:  # refining no longer pays: floating-point noise or truncation dominates
            notes.append(f"refinement stalled at h = {h:.3g}: the interval is {gap / upper:.2%} of epsilon, "
                         "wider than the tolerance asked")
            break
        if h <= h_floor * 1.0001:
            notes.append(f"lattice at its finest allowed spacing h = {h:.3g} ({max_points:,} points): "
                         f"the interval is {gap / upper:.2%} of epsilon, wider than the tolerance asked")
            break
        finer = max(h * min(0.7, max(0.25, math.sqrt(0.8 * tolerance * upper / gap))), h_floor)
        now = time.perf_counter()
        if now - start + (now - round_start) * 1.5 * h / finer > max_seconds:
            notes.append(f"refinement stopped at h = {h:.3g} by the time budget ({max_seconds:g} s): the "
                         f"interval is {gap / upper:.2%} of epsilon, wider than the tolerance asked")
            break
        h = finer
    return PldResult(lower, upper, delta, h, n, size, tuple(notes))


def _allowance_note(n: int, delta: float) -> str:
    return (f"no finite PLD bound for {n:,} releases at delta = {delta:g}: the floating-point allowance charged "
            f"to delta ({_ROUNDING:.2g} per release) exceeds it")


def _direction_bounds(pairs, delta, h, tau, tail, max_memory):
    """(lower, upper, fft size) for one direction's pairs at spacing h (``_pld_lattice``)."""
    n = sum(c for _, c in pairs)
    lattices = [(_lat.lattice_cached(pair, h, tail), c) for pair, c in pairs]
    support = max(len(L.up) for L, _ in lattices)
    if support * 8 * 6 > max_memory:
        raise MemoryError(1.05 * support * 48 / max_memory)
    up_window, lams = _lat.chernoff_window(lattices, "up", tau)
    down_window, _ = _lat.chernoff_window(lattices, "down", tau, lams)  # the down sum is close to the up one
    longest = max(up_window[1] - up_window[0], down_window[1] - down_window[0]) + 1
    size = sfft.next_fast_len(max(longest, support) + 1, real=True)
    if size * 16 * 4 > max_memory:
        raise MemoryError(1.05 * size * 16 * 4 / max_memory)  # how much wider h must be
    up = _lat.compose(lattices, "up", up_window, size)
    down = _lat.compose(lattices, "down", down_window, size)
    inf_mass = -math.expm1(sum(c * math.log1p(-L.up_inf) for L, c in lattices))
    drift = sum(c * L.drift_mean for L, c in lattices) - _lat.bennett_deviation(
        sum(c * L.drift_var for L, c in lattices), max(L.drift_mean for L, _ in lattices), math.log(1.0 / tau))
    # upper: the window loses <= tau per side; lower: the same, plus tau for the drift bound failing
    rounding = _ROUNDING * n  # total variation between the stored and the exact per-step masses, composed
    upper_budget = delta - (inf_mass + 2 * tau + up.error + rounding)
    lower_budget = delta + (2 * tau + down.error + tau + rounding)
    eps_upper = up.x_at(upper_budget, floor=-h) if upper_budget > 0 else math.inf
    eps_lower = down.x_at(lower_budget, floor=-max(drift, 0.0) - h) + drift
    return max(0.0, eps_lower), max(0.0, eps_upper), size


def _direction_delta(pairs, epsilon, h, tau, tail, max_memory) -> float:
    """Upper bound on delta(epsilon) for one direction's pairs at spacing h (as ``_direction_bounds``)."""
    n = sum(c for _, c in pairs)
    lattices = [(_lat.lattice_cached(pair, h, tail), c) for pair, c in pairs]
    window, _ = _lat.chernoff_window(lattices, "up", tau)
    size = sfft.next_fast_len(max(window[1] - window[0] + 1, max(len(L.up) for L, _ in lattices)) + 1, real=True)
    if size * 16 * 4 > max_memory:
        raise MemoryError(size * 16 * 4 / max_memory)
    up = _lat.compose(lattices, "up", window, size)
    inf_mass = -math.expm1(sum(c * math.log1p(-L.up_inf) for L, c in lattices))
    return up.profile(epsilon) + inf_mass + 2 * tau + up.error + _ROUNDING * n


def _window_estimate(pairs, delta: float) -> float:
    """Approximate width (in loss units) of the composed sum's window plus one step's support."""
    n = sum(c for _, c in pairs)
    variance, support = 0.0, 0.0
    for pair, c in pairs:
        lo, hi = pair.loss_range(_DELTA_SHARE * delta / n)
        # A loss range can collapse to a point in float (a Gaussian with z <= 0.05 under Poisson sampling,
        # remove direction: the loss is -log(1 - q) to 1e-80 on all but a 1e-80 tail); keep a positive width.
        hi = max(hi, lo + 1e-6 * max(1.0, abs(lo), abs(hi)))
        coarse = _lat.lattice_cached(pair, (hi - lo) / 4096.0, _DELTA_SHARE * delta / n)
        idx = (np.arange(len(coarse.up)) + coarse.start) * coarse.h
        mass = float(coarse.up.sum())
        mean = float(np.dot(coarse.up, idx)) / mass
        variance += c * float(np.dot(coarse.up, (idx - mean) ** 2)) / mass
        support = max(support, hi - lo)
    return 14.0 * math.sqrt(variance) + support


_LAMBDAS = np.concatenate([np.geomspace(1e-10, 10.0, 96), -np.geomspace(1e-10, 10.0, 96)])


def _cgf_table(L) -> np.ndarray:
    """log E[e^{lam U}] of one lattice's pessimistic loss (indices as units) on the grid ``_LAMBDAS``."""
    idx = np.arange(len(L.up)) + L.start
    keep = L.up > 0
    return special.logsumexp(np.log(L.up[keep])[None, :] + _LAMBDAS[:, None] * idx[keep][None, :], axis=1)


def _trajectory_direction(base, step, counts, delta, max_memory) -> np.ndarray:
    """Upper bounds for base + t x step, t in counts, reusing lattice spectra and CGF tables."""
    tau = _DELTA_SHARE * delta
    log_tau = math.log(tau)
    tables = {id(L): _cgf_table(L) for L, _ in base + step}
    windows = []
    for t in counts:
        cgf = sum(c * tables[id(L)] for L, c in base + [(L, c * t) for L, c in step] if c)
        with np.errstate(invalid="ignore", divide="ignore"):
            ends = (cgf - log_tau) / _LAMBDAS  # upper ends for lam > 0, lower ends for lam < 0
        windows.append((math.floor(np.nanmax(np.where(_LAMBDAS < 0, ends, -np.inf))) - 1,
                        math.ceil(np.nanmin(np.where(_LAMBDAS > 0, ends, np.inf))) + 1))
    support = max(len(L.up) for L, _ in base + step)
    size = sfft.next_fast_len(max(max(hi - lo + 1 for lo, hi in windows), support) + 1, real=True)
    if size * 16 * 4 > max_memory:
        raise MemoryError(size * 16 * 4 / max_memory)
    h = (base + step)[0][0].h
    spectra = {id(L): sfft.rfft(L.up, size) for L, _ in base + step}
    base_spec = np.ones(size // 2 + 1, dtype=np.complex128)
    for L, c in base:
        base_spec *= _lat.spectral_power(spectra[id(L)], c)
    out = np.zeros(len(counts))
    for i, t in enumerate(counts):
        items = base + [(L, c * t) for L, c in step if c * t]
        if not items:
            continue
        spectrum = base_spec.copy()
        for L, c in step:
            spectrum *= _lat.spectral_power(spectra[id(L)], c * t)
        offset = sum(c * L.start for L, c in items)
        lo, hi = windows[i]
        pmf = np.roll(sfft.irfft(spectrum, size), -((lo - offset) % size))[: hi - lo + 1]
        noise = max(0.0, -float(pmf.min()))
        up = _lat.LatticeSum(lo, np.maximum(pmf, 0.0), h, 2.0 * max(noise, 2.0**-60) * size)
        inf_mass = -math.expm1(sum(c * math.log1p(-L.up_inf) for L, c in items))
        budget = delta - (inf_mass + 2 * tau + up.error + _ROUNDING * sum(c for _, c in items))
        out[i] = max(0.0, up.x_at(budget, floor=-h)) if budget > 0 else math.inf
    return out
