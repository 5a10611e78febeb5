"""Privacy-loss-distribution (PLD) accountant with certified lower and upper bounds.

Each step's dominating pair (``metadp.mechanisms``) has a privacy loss L = log dP/dQ under P. The
pair is discretised on a lattice h Z twice (``_pld_lattice``): pessimistically by connect-the-dots
(each loss cell's mass split between its end points: a pair that dominates the original; Doroshenko
et al. 2022, arXiv:2207.04380) and optimistically by bucketing (a post-processing, so dominated) with
the bucketed loss rounded down and the rounding drift undone by Bennett's inequality. Composition is
an FFT power per distinct pair (self-composition T = 1e9 costs what T = 1e3 costs), and delta(eps) =
E[(1 - e^{eps - S})_+] of the composed sum S is read off exactly on the lattice. Composing dominating
pairs dominates the composition (Zhu, Dong & Wang 2022, arXiv:2106.08567, Thm 10).

Everything truncated is charged on the pessimistic side of each bound: per-step loss tails (upper:
to an infinity atom, lower: dropped), the mass outside the FFT window (Chernoff bounds on the lattice
sums: it would wrap around), the failure probability of the drift bound, and the floating-point
noise of the FFT (estimated from the largest negative output). The lattice is refined until the
interval [lower, upper] is within the requested relative tolerance or the point budget is spent
(then a note says so). Every public number is an upper bound; the optimistic one comes with it from
``get_epsilon_bounds``.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import time
from typing import List, Tuple

import numpy as np
from scipy import fft as sfft
from scipy import special

from metadp.accounting import _pld_lattice as _lat
from metadp.accounting.rdp_accountant import (RELATIONS, LedgerEntry, RdpAccountant, UnsupportedEventError,
                                              _effective_noise_multiplier)
from metadp.amplification.group import poisson_group_pairs
from metadp.core import events as ev
from metadp.core.validation import check_count, check_delta, check_real
from metadp.mechanisms.episodic import episodic_record_pairs
from metadp.mechanisms.gaussian import gaussian_pair, poisson_gaussian_pairs
from metadp.mechanisms.laplace import LaplacePair

__all__ = ["PldAccountant", "PldResult", "event_pairs"]

_DELTA_SHARE = 1e-5  # fraction of delta spent on each truncation (tails, window, drift bound)
# Precision assumption: the stored cell masses of one step are within 8 ulps (relative) of the exact
# ones, so the step's total variation error is <= 8 eps; composing n steps moves delta by <= n times it.
# Not proven (no interval arithmetic), but charged: it matters from about 1e7 steps at delta 1e-6.
_ROUNDING = 8.0 * np.finfo(np.float64).eps


# ---------------------------------------------------------------------------------------------
# Event -> dominating pairs (dispatch table). Each item: (pairs, count), pairs = (add, remove) or a
# single pair when both directions share one PLD.


@functools.singledispatch
def event_pairs(event: ev.Event, relation: str) -> List[Tuple[tuple, int]]:
    """The dominating pairs of ``event`` with their multiplicities."""
    raise _pld_unsupported(event, f"no dominating pair for {type(event).__name__}")


def _pld_unsupported(event, reason):
    return UnsupportedEventError(event, reason, accountant="PLD")


@event_pairs.register
def _(event: ev.NoOp, relation):
    return []


@event_pairs.register
def _(event: ev.NonPrivate, relation):
    return [(None, 1)]


def _factor(relation: str) -> float:
    return 2.0 if relation == "substitute" else 1.0


# The noise multipliers (and Laplace scales, relative to the sensitivity) whose pairs float64 can
# represent: below, the privacy losses (about 1/(2 z^2)) and their squares in the lattice's moments
# overflow (seen from z = 1e-80); above, z^2 overflows in the pair's constructor (from 1e154) and the
# losses vanish below the lattice's resolution. The RDP accountant bounds both ends.
_NOISE_RANGE = (1e-50, 1e50)


def _check_noise(event: ev.Event, noise: float, what: str = "noise multiplier") -> float:
    low, high = _NOISE_RANGE
    if not low <= noise <= high:
        raise _pld_unsupported(event, f"the PLD accountant needs a {what} in [{low:g}, {high:g}] relative to the "
                                      f"sensitivity, got {noise:g} (float64 cannot hold its privacy losses); "
                                      "the RDP accountant bounds it")
    return noise


@functools.lru_cache(maxsize=256)
def _cached_pairs(kind: str, *args) -> tuple:
    """One pair object per distinct mechanism, so repeated compositions of it merge into one power
    (and its lattice is built once)."""
    if kind == "gaussian":
        return (gaussian_pair(*args),)
    if kind == "laplace":
        return (LaplacePair(*args),)
    return tuple(poisson_gaussian_pairs(*args))


@event_pairs.register
def _(event: ev.Gaussian, relation):
    if math.isinf(event.noise_multiplier):
        return []
    return [(_cached_pairs("gaussian", _check_noise(event, event.noise_multiplier / _factor(relation))), 1)]


@event_pairs.register
def _(event: ev.Laplace, relation):
    if math.isinf(event.scale):
        return []
    return [(_cached_pairs("laplace", _check_noise(event, event.scale / _factor(relation), "Laplace scale")), 1)]


@event_pairs.register
def _(event: ev.PoissonSampled, relation):
    if relation != "add_remove":
        raise _pld_unsupported(event, "Poisson sampling is analysed under the add_remove relation")
    z = _effective_noise_multiplier(event.inner, "PLD")
    if event.rate == 0.0 or math.isinf(z):
        return []
    return [(_cached_pairs("poisson", event.rate, _check_noise(event, z)), 1)]


@event_pairs.register
def _(event: ev.EpisodicSampled, relation):
    if relation != "add_remove":
        raise _pld_unsupported(event, "episodic sampling is analysed under the add_remove relation (one record)")
    if math.isinf(event.inner.noise_multiplier) or event.unit_rate == 0.0 or event.within_rate == 0.0:
        return []
    _check_noise(event, event.inner.noise_multiplier / (event.shift * event.episodes))  # largest shift: all episodes
    return [(episodic_record_pairs(event.episodes, event.unit_rate, event.within_rate,
                                   event.inner.noise_multiplier, event.shift), 1)]


@event_pairs.register
def _(event: ev.Group, relation):
    inner, k = event.inner, event.size
    if k == 1:
        return event_pairs(inner, relation)
    if isinstance(inner, (ev.SelfComposed, ev.Composed)):  # a group's guarantee composes step by step
        parts = [inner.inner] if isinstance(inner, ev.SelfComposed) else list(inner.events)
        times = inner.count if isinstance(inner, ev.SelfComposed) else 1
        return [(pairs, c * times) for e in parts for pairs, c in event_pairs(ev.Group(k, e), relation)]
    if isinstance(inner, ev.Gaussian):
        return event_pairs(ev.Gaussian(inner.noise_multiplier / k), relation)
    if isinstance(inner, ev.PoissonSampled) and isinstance(inner.inner, ev.Gaussian) and relation == "add_remove":
        if inner.rate == 0.0 or math.isinf(inner.inner.noise_multiplier):
            return []
        _check_noise(event, inner.inner.noise_multiplier / k)  # the group's largest shift is k
        return [(poisson_group_pairs(inner.rate, inner.inner.noise_multiplier, k), 1)]
    raise _pld_unsupported(event, "exact group pairs exist for Gaussian and Poisson-subsampled Gaussian "
                                  "(add_remove) steps only")


@event_pairs.register
def _(event: ev.SelfComposed, relation):
    return [(pairs, count * event.count) for pairs, count in event_pairs(event.inner, relation)
            if count * event.count > 0]


@event_pairs.register
def _(event: ev.Composed, relation):
    return [item for e in event.events for item in event_pairs(e, relation)]


# ---------------------------------------------------------------------------------------------


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


class PldAccountant:
    """Tight accountant over privacy loss distributions, returning certified (lower, upper) bounds.

    Args:
        relation: ``"add_remove"`` or ``"substitute"`` (as ``RdpAccountant``).
        tolerance: the width of [lower, upper] relative to the upper bound that the lattice is refined
            to reach; both bounds are certified at every spacing, so this trades time for tightness.
        max_memory: bytes the FFT may use; beyond it h is widened (the gap grows, the bounds stay valid).
        max_fft_size: the time budget, as the largest FFT length: the lattice is not refined past it,
            and a note says when the tolerance was not reached (2^22 keeps a query to seconds).
        max_seconds: refinement rounds that would end after this many seconds are not started (the
            first round always runs); the bounds stay certified, only wider, and a note says so.
    """

    name = "pld"
    conversion = "pld"

    def __init__(self, relation: str = "add_remove", tolerance: float = 5e-3, max_memory: int = 2 << 30,
                 max_fft_size: int = 1 << 22, max_seconds: float = 4.0):
        if relation not in RELATIONS:
            raise ValueError(f"relation must be one of {RELATIONS}, got {relation!r}")
        self.relation = relation
        self.tolerance = check_real("tolerance", tolerance, low=1e-6, high=1.0)
        self.max_memory = check_count("max_memory", max_memory, minimum=1 << 20)
        self.max_fft_size = check_count("max_fft_size", max_fft_size, minimum=1 << 10)
        self.max_seconds = check_real("max_seconds", max_seconds, low=0.0, allow_inf=True)
        self._ledger: List[LedgerEntry] = []
        self._items: List[Tuple[tuple, int]] = []
        self._rdp = RdpAccountant(relation)

    def compose(self, event: ev.Event, count: int = 1) -> "PldAccountant":
        """Composes ``event`` ``count`` times; raises before any state change if unsupported."""
        if not isinstance(event, ev.Event):
            raise ValueError(f"event must be a metadp Event, got {type(event).__name__}")
        count = check_count("count", count, maximum=ev.MAX_COUNT)
        items = [(pairs, c * count) for pairs, c in event_pairs(event, self.relation) if c * count > 0]
        if self._rdp is not None:
            try:  # the RDP bound is a cap on the PLD one, not needed for it
                self._rdp.compose(event, count)
            except UnsupportedEventError:
                self._rdp = None
        for pairs, c in items:  # the same mechanism again: one item with a larger count (one FFT power)
            same = [i for i, (known, _) in enumerate(self._items) if known is pairs]
            if same:
                self._items[same[0]] = (pairs, self._items[same[0]][1] + c)
            else:
                self._items.append((pairs, c))
        self._ledger.append(LedgerEntry(event, count))
        return self

    @property
    def ledger(self):
        return tuple(self._ledger)

    def get_epsilon(self, delta: float) -> float:
        """Certified epsilon at ``delta`` (the upper bound)."""
        return self.get_epsilon_bounds(delta).epsilon_upper

    def get_epsilon_and_order(self, delta: float):
        """(epsilon, nan): the accountant interface shared with ``RdpAccountant`` (no Renyi order)."""
        return self.get_epsilon(delta), math.nan

    def get_epsilon_bounds(self, delta: float) -> PldResult:
        """Lower and upper bounds on the optimal epsilon at ``delta``."""
        delta = check_delta("delta", delta)
        if any(pairs is None for pairs, _ in self._items):
            return PldResult(math.inf, math.inf, delta, math.nan, self._steps(), 0, ("non-private release",))
        if not self._items:
            return PldResult(0.0, 0.0, delta, math.nan, 0, 0)
        scale = self._rdp.get_epsilon(delta) if self._rdp is not None else math.inf
        if scale == 0.0:
            return PldResult(0.0, 0.0, delta, math.nan, self._steps(), 0, ("RDP certifies epsilon 0",))
        if _ROUNDING * self._steps() >= delta:  # no PLD bound exists: the RDP one (or inf) stands
            why = ("; the RDP bound is reported" if math.isfinite(scale)
                   else "; this event has no RDP bound to fall back on (use a larger delta)")
            return PldResult(0.0, scale, delta, math.nan, self._steps(), 0,
                             (_allowance_note(self._steps(), delta) + why,))
        result = _bounds(self._items, delta, self.tolerance, self.max_fft_size, self.max_memory, self.max_seconds)
        if math.isinf(result.epsilon_upper) and math.isinf(scale):
            note = ("no finite PLD bound at this delta: the truncated and floating-point mass charged to delta "
                    "exceeds it, and this event has no RDP bound to fall back on (use a larger delta)")
            return dataclasses.replace(result, notes=result.notes + (note,))
        if result.epsilon_upper > scale:  # both are valid upper bounds: report the smaller, and say so
            note = (f"the PLD bound {result.epsilon_upper:.6g} is above the RDP bound {scale:.6g} "
                    "(floating-point noise or truncation dominates at this delta): the RDP bound is reported")
            return dataclasses.replace(result, epsilon_upper=scale, notes=result.notes + (note,))
        return result

    def trajectory(self, steps, delta: float, step_event: ev.Event = None) -> np.ndarray:
        """Certified epsilon (upper bound) after each listed number of steps.

        As ``RdpAccountant.trajectory``: the step is ``step_event`` on top of the ledger, or the last
        composed event on top of the entries before it. One lattice spacing and tail truncation serve
        every step count (those that meet the tolerance at the longest count), so the step's lattice
        is built once; each listed count costs one Chernoff window and one FFT composition.
        """
        delta = check_delta("delta", delta)
        counts = [check_count("steps", s, maximum=ev.MAX_COUNT) for s in steps]
        if step_event is None:
            if not self._ledger:
                raise ValueError("trajectory needs a step_event or at least one composed event")
            base, step_event = [(e.event, e.count) for e in self._ledger[:-1]], self._ledger[-1].event
        else:
            base = [(e.event, e.count) for e in self._ledger]
        step_items = [(pairs, c) for pairs, c in event_pairs(step_event, self.relation) if c > 0]
        base_items = [item for e, c in base for item in
                      [(pairs, k * c) for pairs, k in event_pairs(e, self.relation) if k * c > 0]]
        try:
            rdp = RdpAccountant(self.relation)
            for e, c in base:
                rdp.compose(e, c)
            scales = rdp.trajectory(counts, delta, step_event=step_event)
        except UnsupportedEventError:  # no RDP cap for this plan
            scales = np.full(len(counts), np.inf)
        if any(pairs is None for pairs, _ in base_items + step_items):
            return np.full(len(counts), np.inf)
        n_of = [sum(c for _, c in base_items) + t * sum(c for _, c in step_items) for t in counts]
        # counts whose rounding allowance alone exceeds delta have no PLD bound: the RDP one stands
        certifiable = [i for i in range(len(counts)) if 0 < n_of[i] and _ROUNDING * n_of[i] < delta]
        out = np.full(len(counts), np.inf)
        if certifiable:
            longest = max(certifiable, key=lambda i: n_of[i])
            # the spacing that meets the tolerance at the longest count serves every count
            final = base_items + [(pairs, c * counts[longest]) for pairs, c in step_items]
            h = _bounds(final, delta, self.tolerance, self.max_fft_size, self.max_memory, self.max_seconds).h
            tail = _DELTA_SHARE * delta / n_of[longest]
            directions = 2 if any(len(pairs) == 2 for pairs, _ in base_items + step_items) else 1
            found = np.zeros(len(certifiable))
            for d in range(directions):
                pick = lambda items: [(_lat.lattice_cached(pairs[min(d, len(pairs) - 1)], h, tail), c)
                                      for pairs, c in items]
                found = np.maximum(found, _trajectory_direction(pick(base_items), pick(step_items),
                                                                [counts[i] for i in certifiable], delta,
                                                                self.max_memory))
            out[certifiable] = found
        return np.where(np.array(n_of) == 0, 0.0, np.minimum(out, scales))

    def get_delta(self, epsilon: float) -> float:
        """Certified delta at ``epsilon`` (upper bound), read off the pessimistic lattice sum.

        The truncations are sized from a reference delta (the RDP delta at ``epsilon``, itself an upper
        bound, or 1e-6 without one); if the result is far below it, it becomes the reference and the
        computation is repeated, so the charged truncation mass stays small next to the answer. Never
        above the RDP delta where that exists.
        """
        epsilon = check_real("epsilon", epsilon, low=0.0, allow_inf=True)
        if any(pairs is None for pairs, _ in self._items):
            return 1.0
        if not self._items or math.isinf(epsilon):
            return 0.0
        cap = self._rdp.get_delta(epsilon) if self._rdp is not None else 1.0
        if cap == 0.0:
            return 0.0
        reference = min(cap, 1e-6) if cap >= 1.0 else cap
        n = sum(c for _, c in self._items)
        floor = _ROUNDING * n  # every PLD delta includes this rounding allowance
        if floor >= cap:
            return float(min(cap, 1.0))
        reference = max(reference, min(2.0 * floor, cap))  # the lattice is sized for a delta above it
        directions = 2 if any(len(pairs) == 2 for pairs, _ in self._items) else 1
        per_direction = [[(pairs[min(d, len(pairs) - 1)], c) for pairs, c in self._items] for d in range(directions)]
        delta = 1.0
        for _ in range(4):
            h = _bounds(self._items, reference, self.tolerance, self.max_fft_size, self.max_memory, self.max_seconds).h
            tau = _DELTA_SHARE * reference
            delta = max(_direction_delta(pairs, epsilon, h, tau, tau / n, self.max_memory) for pairs in per_direction)
            if delta >= 0.01 * reference or delta <= 1e-300:
                break
            reference = delta
        return float(min(delta, cap, 1.0))

    def _steps(self) -> int:
        return sum(c for _, c in self._items)


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
