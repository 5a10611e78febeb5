"""The PLD accountant's certified bounds (``metadp.accounting.pld``): the lattice refined until the
[lower, upper] interval meets the tolerance; for one direction, the tilt, the FFT window and its
Chernoff tails (``_pld_window``), epsilon(delta) and delta(epsilon) on the lattice (``_pld_compose``;
tilts chosen with ``_pld_cgf``); the terms charged to delta, for the notes; and the trajectory of a
composed step.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import time
from typing import Callable, Dict, List, Optional, Sequence, Tuple, cast

import numpy as np
from numpy.typing import ArrayLike

from metadp.accounting import _pld_compose as _comp
from metadp.accounting import _pld_event as _event
from metadp.accounting import _pld_lattice as _lat
from metadp.accounting import _pld_window as _win
from metadp.accounting._pld_window import DELTA_SHARE as _DELTA_SHARE, STEPS as _STEPS
from metadp.core._typing import FloatArray

__all__ = ["PldResult"]


_PILOT = 14  # the first lattice puts about 2^_PILOT points across the composed sum's window
_MIN_FACTOR = 0.25  # the most a refinement round shrinks h
_WIDTH = 8.0  # the FFT window spans the tilted sum's mean +- this many standard deviations
_COARSER = 4.0  # a direction behind the largest is first bounded on a lattice this many times coarser
_Direction = Sequence[Tuple[_lat.Pair, int]]  # one direction's (pair, count) of every item
_Lattices = Sequence[Tuple[_lat.Lattice, int]]  # one direction's (lattice, count) of every item
_Terms = Callable[[], Dict[str, float]]  # the shares of delta charged, computed on demand (``_charged_terms``)
_Found = Tuple[float, float, int, _Terms]  # a direction's (lower, upper, FFT size, charged terms): ``_round``


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
    stopped_by_time: bool = False  # the time budget ended the refinement (without it the bounds could be tighter)
    # where a composed pair dominates one step only (``mechanisms.base.Attained``): the lower bound on the
    # composed pairs' own epsilon, which ``epsilon_lower`` (a bound on the mechanism, from named datasets) is not
    pair_lower: Optional[float] = None

    def __str__(self) -> str:
        """The interval in words (``print(result)``); ``repr`` keeps every field."""
        def text(x: float) -> str:
            return "infinity" if math.isinf(x) else f"{x:.6g}"

        lattice = "no lattice" if math.isnan(self.h) else f"lattice spacing {self.h:.3g}"
        notes = "".join(f"\n  note: {n}" for n in self.notes)
        return (f"certified epsilon in [{text(self.epsilon_lower)}, {text(self.epsilon_upper)}] at delta "
                f"{self.delta:g} ({self.steps:,} releases; {lattice}){notes}")


def _bounds(items: Sequence[_lat.LiveItem], delta: float, tolerance: float, max_points: int, max_memory: int,
            max_seconds: float = math.inf) -> PldResult:
    """Certified bounds at ``delta``, refining the lattice until upper - lower <= tolerance * upper (it
    aims at half of that, and stops short of the aim without a note once within the tolerance).

    Both bounds are valid at every spacing (module docstring of ``_pld_lattice``); refinement only
    narrows the interval. The first spacing puts about 2^11 points across the composed sum's window (a
    cheap pilot: many plans meet the tolerance there already); the discretisation error of both bounds
    shrinks about as h^2, so each round shrinks h by sqrt(target / gap), aiming at half the tolerance,
    clamped to [1/16, 0.7] (by 1/4 while there is no lower bound above 0). The finest spacing is set by ``max_points``; no round
    starts that would (by the last round's time, scaled by the spacing) end after ``max_seconds``.
    """
    start = time.perf_counter()
    items = _canonical(items)
    n = sum(c for _, c in items)
    tau = _DELTA_SHARE * delta
    tail = _DELTA_SHARE * delta / n
    directions = 2 if any(len(pairs) == 2 for pairs, _ in items) else 1
    per_direction = [[(pairs[min(d, len(pairs) - 1)], c) for pairs, c in items] for d in range(directions)]
    width = max(_lat.window_estimate(pairs, _DELTA_SHARE * delta) for pairs in per_direction)
    h_floor = width / (0.95 * max_points)
    h = _snap(max(width / 2.0**_PILOT, h_floor), per_direction)
    hints: Dict[int, Tuple[float, float]]
    lower, upper, size, notes, gap, terms, hints, timed_out = 0.0, math.inf, 0, [], math.inf, None, {}, False
    certified: Dict[int, float] = {}  # each direction's best upper bound so far (certified at every spacing)
    for _ in range(12):
        round_start = time.perf_counter()
        try:
            # the last round's tilts help only once its interval means something (within 20%)
            informative = math.isfinite(upper) and upper - lower <= 0.2 * upper
            found = _round(per_direction, delta, h, tau, tail, max_memory, lower, 0.5 * tolerance,
                           hints, certified, informative)
        except MemoryError as err:  # the window estimate was short: widen and retry
            h *= max(1.25, float(err.args[0]) if err.args else 2.0)
            h_floor = max(h_floor, h)
            notes = [f"lattice widened to h = {h:.3g} to stay within the memory budget "
                     f"({max_memory / 2**30:.3g} GiB): the interval is wider than the tolerance asked"]
            continue
        lower = max(lower, max(f[0] for f in found))  # every round is certified: keep the best
        worst = max(found, key=lambda f: f[1])
        if worst[1] <= upper:
            upper, terms = worst[1], worst[3]
        size = max(f[2] for f in found)
        gap, previous = upper - lower, gap
        if math.isfinite(upper) and gap <= 0.5 * tolerance * upper:  # aim at half the tolerance
            break
        within = math.isfinite(upper) and gap <= tolerance * upper  # stopping here is no shortfall
        # refining no longer pays: round-off or truncation dominates (without a lower bound, e.g. where
        # the Q-masses underflow at losses beyond ~700 per step, judged by the upper bound's progress)
        if (gap > 0.8 * previous) if lower > 0.0 else (previous - gap < 0.25 * tolerance * upper):
            if not within and lower > 0.0:
                notes.append(f"refinement stalled at h = {h:.3g}: {_width(lower, upper)}")
            elif not within:  # no lower bound to measure an interval by: say what stopped it
                notes.append(f"refinement stopped at h = {h:.3g}: the upper bound moved by less than "
                             f"{0.25 * tolerance:.2g} of itself in the last refinement; this lattice gives no "
                             "lower bound")
            break
        if h <= h_floor * 1.0001:
            if not within:
                notes.append(f"lattice at its finest allowed spacing h = {h:.3g} ({max_points:,} points): "
                             f"{_width(lower, upper)}")
            break
        # without a lower bound yet (a gap of 100% says nothing about the h^2 law): a quarter
        finer = max(h * (0.25 if lower <= 0.0 else min(0.7, max(_MIN_FACTOR, math.sqrt(0.4 * tolerance * upper
                                                                                         / gap)))), h_floor)
        now = time.perf_counter()
        if now - start + (now - round_start) * h / finer > max_seconds:
            timed_out = True
            if not within:
                notes.append(f"refinement stopped at h = {h:.3g} by the time budget ({max_seconds:g} s): "
                             f"{_width(lower, upper)}")
            break
        h = _snap(finer, per_direction)
    if notes and terms:
        charged = terms()
        notes.append(f"largest term charged to the upper bound: {_dominant(charged)}; the rest of the interval "
                     "is the lattice's discretisation" if math.isfinite(upper) else
                     f"no finite upper bound; what keeps it infinite: {_dominant(charged)}")
    return PldResult(lower, upper, delta, h, n, size, tuple(notes), timed_out)


def _snap(h: float, per_direction: Sequence[_Direction]) -> float:
    """h, or the largest spacing <= h that puts a pair's loss atom (a Laplace pair's +-eps0) on the
    lattice, so that the atom is not split across the next lattice point (pure DP stays n eps0)."""
    for pairs in per_direction:
        for pair, _ in pairs:
            atom = getattr(pair, "epsilon0", None)
            if atom and math.isfinite(atom) and atom > h:
                return cast(float, atom / math.ceil(atom / h - 1e-9))
    return h


def _width(lower: float, upper: float) -> str:
    if not math.isfinite(upper):
        return "no finite upper bound"
    return f"the interval is {(upper - lower) / upper:.2%} of epsilon, wider than the tolerance asked"


def _canonical(items: Sequence[_lat.LiveItem]) -> List[_lat.LiveItem]:
    """The items in an order that does not depend on the order of composition (float sums and the FFT
    product are then the same for Composed([a, b]) and Composed([b, a]))."""
    return sorted(items, key=lambda item: (repr(item[0]), item[1]))


def _items(lattices: _Lattices, which: str) -> List[_comp.Item]:
    return [_comp.Item(getattr(L, which), L.start, c, L.rel_error) for L, c in lattices]


def _inf_mass(lattices: _Lattices) -> float:
    """Upper bound on the composed infinity atom: 1 - prod (1 - up_inf)^c."""
    return -math.expm1(sum(c * math.log1p(-min(L.up_inf, 1.0 - 1e-16)) for L, c in lattices)) * (1.0 + 1e-12)


def _upper(items: Sequence[_comp.Item], lattices: _Lattices, delta: Optional[float], h: float, max_memory: int,
           theta: Optional[float], level: float,
           x: Optional[float] = None) -> Tuple[_comp.TiltedSum, float, _comp.Tilted]:
    """The upper composed sum of one direction at tilt theta (None: untilted if that is accurate
    enough, else the saddle point): (TiltedSum, charge), charge being the exact mass above the window
    plus the infinity atom. ``delta`` is None only where ``x`` is given (delta at x)."""
    if theta is None:
        # delta at x: the answer's size is unknown, so the sum is always centred on x; otherwise the
        # untilted sum is tried where a cheap prediction expects it to be accurate enough
        tilted = None
        likely, guessed = _win.untilted_prediction(items, level) if x is None else (False, None)
        if likely:
            tilted = _comp.tilt(items, 0.0)
            window = _win.window(items, tilted, level, max_memory, guessed=guessed)
            if not _win.untilted_is_enough(items, tilted, window[1], level / _DELTA_SHARE):
                tilted = None
        if tilted is None:
            theta = _comp.choose_theta(items, h, log_delta=None if x is not None else math.log(cast(float, delta)),
                                       x=None if x is None else x / h)[0]
            tilted = _comp.tilt(items, theta)
            window = _win.window(items, tilted, level, max_memory)
    else:
        tilted = _comp.tilt(items, theta)
        window = _win.window(items, tilted, level, max_memory)
    first, size, log_above, _ = window
    if x is not None and x < first * h:  # delta at x needs the window to reach below x
        first = math.floor(x / h) - 1
        log_above = _comp.log_tail(items, tilted.theta + _STEPS / tilted.sd, first + size - 1)
    total = _comp.compose(tilted, first, size, h)
    return total, _inf_mass(lattices) + math.exp(min(log_above, 0.0)), tilted


def _round(per_direction: Sequence[_Direction], delta: float, h: float, tau: float, tail: float, max_memory: int,
           known_lower: float, aim: float = 0.0, hints: Optional[Dict[int, Tuple[float, float]]] = None,
           certified: Optional[Dict[int, float]] = None, use_hints: bool = True) -> List[_Found]:
    """One refinement round: every direction's upper bound, and lower bounds, largest upper first, until
    the interval is within ``aim`` of the largest upper bound (epsilon is the largest over the
    directions, so a direction's lower bound only matters while it could raise the best one: a direction
    whose upper bound is below the best lower bound known is skipped). ``hints`` (a dict, updated) keeps
    each direction's tilt (loss units) and upper bound for the next round's tilt (used if ``use_hints``;
    always recorded: an earlier round's dict was a fresh one, so no round ever found a hint). ``certified`` (a dict,
    updated) keeps each direction's best upper bound from earlier rounds: a direction whose bound is
    already at or below this round's largest upper is not recomputed (the largest stays the same)."""
    hints = {} if hints is None else hints
    certified = {} if certified is None else certified
    uppers, largest, lead = [], -math.inf, (0.0, math.inf)
    for d in sorted(range(len(per_direction)), key=lambda d: -certified.get(d, math.inf)):
        if certified.get(d, math.inf) <= largest:
            continue
        use = False  # a hint from this round's coarse bound of the direction
        if math.isfinite(largest) and d not in certified:
            # a direction not yet bounded, behind one that is: first a lattice _COARSER times coarser
            # (about that much cheaper, and as certified); at spacing h only if that is not enough
            # A tilted leader's tilt, centred on its epsilon, is where this direction's bound decides
            # (is it below the leader's?): the coarse bound starts there instead of searching (any tilt
            # is valid; an untilted leader says nothing about this direction's round-off)
            coarse = _snap(_COARSER * h, [per_direction[d]])
            lattices = [(_lat.lattice_cached(pair, coarse, tail), c) for pair, c in per_direction[d]]
            rough = _upper_epsilon(lattices, delta, coarse, tau, max_memory, lead if lead[0] > 0.0 else None)
            certified[d] = rough[0]
            if certified[d] <= largest:
                continue
            if rough[1] > 0.0 and math.isfinite(rough[0]):  # the coarse bound's tilt starts the fine one's
                hints[d], use = (rough[1] / coarse, rough[0]), True
        lattices = [(_lat.lattice_cached(pair, h, tail), c) for pair, c in per_direction[d]]
        bound = _upper_epsilon(lattices, delta, h, tau, max_memory, hints.get(d) if use_hints or use else None)
        hints[d] = (bound[1] / h, bound[0])
        certified[d] = min(certified.get(d, math.inf), bound[0])
        if bound[0] > largest:
            largest, lead = bound[0], hints[d]
        uppers.append((lattices,) + bound)
    found, best, tried = [], known_lower, 0
    top = max(u[1] for u in uppers)
    for lattices, eps_upper, theta, size, terms in sorted(uppers, key=lambda u: -u[1]):
        eps_lower = -math.inf
        # once one direction's lower bound leaves the interval twice the aim, this round will not end
        # the refinement: the other directions' (about as far below their own uppers) are skipped
        hopeless = tried and top - best > 2.0 * aim * top
        if math.isfinite(eps_upper) and eps_upper > best and top - best > aim * top and not hopeless:
            tried += 1
            eps_lower, size_low = _lower_epsilon(lattices, delta, h, tau, max_memory, eps_upper, theta)
            size = max(size, size_low)
            best = max(best, eps_lower)
        found.append((max(0.0, eps_lower), max(0.0, eps_upper), size, terms))
    return found


def _lower_epsilon(lattices: _Lattices, delta: float, h: float, tau: float, max_memory: int, eps_upper: float,
                   theta: float) -> Tuple[float, int]:
    """(lower epsilon, FFT size): one event of the composed output (``_pld_lattice``), its P- and Q-sums
    tilted like the upper sum (the labels follow the loss, so the tilt centres them near the answer)."""
    p_items, q_items = _items(lattices, "down"), _items(lattices, "down_q")
    if any(not np.any(item.pmf > 0) for item in p_items + q_items):
        # a lattice with no mass kept (a loss range far beyond the answer, e.g. a Gaussian with z ~ 0.01):
        # the composed event has probability 0 on that side and certifies only the trivial lower bound
        return 0.0, 0
    tilted = _comp.tilt(p_items, theta)
    first, size, _, outside = _win.window(p_items, tilted, tau, max_memory)
    p_sum = _comp.compose(tilted, first, size, h, alias=outside)
    # Q's labels sit at a loss ratio of the P-masses' labels only up to the rounding: centre its
    # tilted sum on P's (about theta + h, the tilt that turns Q's loss law into P's)
    theta_q, _ = _comp.choose_theta(q_items, h, x=tilted.mean, start=theta + h)
    q_sum = _comp.compose(_comp.tilt(q_items, theta_q), first, size, h)
    eps_lower = _event.certified_lower(p_sum, q_sum, delta, eps_upper)
    return eps_lower - 1e-14 * abs(eps_lower), size  # the crossing's own rounding, downward


def _upper_epsilon(lattices: _Lattices, delta: float, h: float, tau: float, max_memory: int,
                   hint: Optional[Tuple[float, float]] = None) -> Tuple[float, float, int, _Terms]:
    """(upper epsilon, tilt, FFT size, charged terms) of the composed upper lattices at delta
    (``_round``); the terms are ``_charged_terms`` at the epsilon found, to be called (only
    the notes need them). ``hint``: a previous round's (tilt in loss units, upper epsilon) for the same
    pairs: untilted again, or tilted to centre on that epsilon from that tilt (no fresh search)."""
    up_items = _items(lattices, "up")
    theta = None
    if hint is not None and (hint[0] == 0.0 or math.isfinite(hint[1])):
        theta = 0.0 if hint[0] == 0.0 else _comp.choose_theta(up_items, h, x=hint[1] / h, start=hint[0] * h)[0]
    up, charge, tilted = _upper(up_items, lattices, delta, h, max_memory, theta, tau)
    eps_upper = _read_upper(up, delta - charge)
    size, theta, used = len(up.values), up.theta, (up, charge)
    if theta > 0 and math.isfinite(eps_upper) and abs(eps_upper / h - tilted.mean) > tilted.sd:
        theta, _ = _comp.choose_theta(up_items, h, x=eps_upper / h)
        again, again_charge, _ = _upper(up_items, lattices, delta, h, max_memory, theta, tau)
        eps_again = _read_upper(again, delta - again_charge)
        size = max(size, len(again.values))
        if eps_again < eps_upper:
            eps_upper, used = eps_again, (again, again_charge)
        else:
            theta = up.theta
    return eps_upper, theta, size, functools.partial(_charged_terms, *used, delta, eps_upper)


def _charged_terms(total: _comp.TiltedSum, charge: float, delta: float, x: float) -> Dict[str, float]:
    """Shares of delta charged at x (the window's top when x is inf): the truncated mass (tails, the
    window's end, cells less accurate than 1e-9), the lattice masses' relative error composed, and the
    FFT's round-off bound."""
    terms: Dict[str, float] = {}
    if not math.isfinite(x):
        floor = total.first * total.h
        if total.first > cast(int, total.support_low) and total.upper_profile(floor) + charge <= delta:  # set
            # the whole window lies above the answer: the pessimistic lattice sum's own excess
            return {f"the lattice's discretisation (h = {total.h:.3g}: the pessimistic lattice sum lies "
                    "above the epsilon sought, beyond the window)": math.inf}
        x = (total.first + len(total.values) - 2) * total.h
        terms["the lattice sum's own delta at the window's top (discretisation)"] = \
            _comp.profile(total.first, total.untilted(), total.h, x) / delta
    body = _comp.profile(total.first, total.untilted(), total.h, x)
    factor = math.exp(total.log_factor)
    terms.update({"truncated mass (per-step tails, FFT window)": charge / delta,
                  "relative error of the lattice masses, composed": (factor - 1.0) * body / delta,
                  "FFT round-off (proven bound)": factor * total.error * total.error_norm(x) / delta})
    return terms


def _dominant(terms: Dict[str, float]) -> str:
    name = max(terms, key=terms.__getitem__)
    return name if math.isinf(terms[name]) else f"{name}, {terms[name]:.2g} of delta"


def _read_upper(total: _comp.TiltedSum, budget: float) -> float:
    """The upper epsilon of a composed upper sum at ``budget`` (inf if the window starts above it)."""
    floor = total.first * total.h
    eps = total.x_upper(budget, floor)
    if eps <= floor and total.first > cast(int, total.support_low):  # ``compose`` sets it
        return math.inf
    return eps + 1e-14 * abs(eps)  # the crossing's own rounding, upward


def _direction_delta(pairs: _Direction, epsilon: float, h: float, tau: float, tail: float,
                     max_memory: int) -> Tuple[float, float]:
    """(lower, upper) bounds on delta(epsilon) for one direction's pairs at spacing h (as
    ``_round``: the upper lattice's profile plus what is charged; the lower bound's event)."""
    lattices = [(_lat.lattice_cached(pair, h, tail), c) for pair, c in pairs]
    up, charge, _ = _upper(_items(lattices, "up"), lattices, None, h, max_memory, None, tau, x=epsilon)
    upper = min(1.0, up.upper_profile(epsilon) + charge)
    p_items, q_items = _items(lattices, "down"), _items(lattices, "down_q")
    if any(not np.any(item.pmf > 0) for item in p_items):  # a pair without lower-bound masses: trivial lower 0
        return 0.0, upper
    tilted = _comp.tilt(p_items, up.theta)
    first, size, _, outside = _win.window(p_items, tilted, tau, max_memory)
    if epsilon < first * h:
        return 0.0, upper
    p_sum = _comp.compose(tilted, first, size, h, alias=outside)
    theta_q, _ = _comp.choose_theta(q_items, h, x=tilted.mean, start=up.theta + h)
    q_sum = _comp.compose(_comp.tilt(q_items, theta_q), first, size, h)
    return _event.certified_lower_delta(p_sum, q_sum, epsilon, max(upper, tau)), upper


def _delta_bounds(items: Sequence[_lat.LiveItem], epsilon: float, reference: float, tolerance: float, max_points: int,
                  max_memory: int, max_seconds: float = math.inf) -> Tuple[float, float]:
    """Certified (lower, upper) on delta(epsilon), truncations sized for deltas near ``reference``, the
    lattice refined (halving h) until upper - lower <= tolerance * upper, or the interval stalls, or the
    point or time budget is spent."""
    start = time.perf_counter()
    items = _canonical(items)
    n = sum(c for _, c in items)
    tau = _DELTA_SHARE * reference
    directions = 2 if any(len(pairs) == 2 for pairs, _ in items) else 1
    per_direction = [[(pairs[min(d, len(pairs) - 1)], c) for pairs, c in items] for d in range(directions)]
    width = max(_lat.window_estimate(pairs, _DELTA_SHARE * reference) for pairs in per_direction)
    h_floor = width / (0.95 * max_points)
    h = _snap(max(width / 2.0**14, h_floor), per_direction)
    lower, upper, gap = 0.0, 1.0, math.inf
    for _ in range(10):
        round_start = time.perf_counter()
        try:
            found = [_direction_delta(pairs, epsilon, h, tau, tau / n, max_memory) for pairs in per_direction]
        except MemoryError as err:
            h *= max(1.25, float(err.args[0]) if err.args else 2.0)
            h_floor = max(h_floor, h)
            continue
        lower, upper = max(lower, max(lo for lo, _ in found)), min(upper, max(up for _, up in found))
        gap, previous = upper - lower, gap
        now = time.perf_counter()
        if (gap <= tolerance * upper or gap > 0.8 * previous or h <= h_floor * 1.0001
                or now - start + (now - round_start) * 3.0 > max_seconds):
            break
        h = _snap(max(0.5 * h, h_floor), per_direction)
    return lower, upper


def _trajectory_direction(base: _Lattices, step: _Lattices, counts: Sequence[int], delta: float,
                          max_memory: int) -> FloatArray:
    """Upper bounds for base + t x step, t in counts, on the given lattices (each count as in
    ``_round``'s upper bounds, sharing the lattices)."""
    tau = _DELTA_SHARE * delta
    out = np.zeros(len(counts))
    for i, t in enumerate(counts):
        lattices = [(L, c) for L, c in base if c] + [(L, c * t) for L, c in step if c * t]
        if lattices:
            out[i] = max(0.0, _upper_epsilon(lattices, delta, lattices[0][0].h, tau, max_memory)[0])
    return out


def risk_lattice(items: Sequence[_lat.LiveItem], reference: float,
                 max_points: int) -> Tuple[List[List[Tuple[_lat.Pair, int]]], float, float, int]:
    """(pairs per direction, spacing h, truncation level tau, steps n) of the attack-risk lattice: about 2^14 points
    across the composed sum's window (at most ``max_points``), truncations sized for masses near ``reference``;
    shared by the upper profile here and the lower ends (``_pld_tpr``), so both read the same lattices."""
    items = _canonical(items)
    n = sum(c for _, c in items)
    tau = _DELTA_SHARE * reference
    directions = 2 if any(len(pairs) == 2 for pairs, _ in items) else 1
    per_direction = [[(pairs[min(d, len(pairs) - 1)], c) for pairs, c in items] for d in range(directions)]
    width = max(_lat.window_estimate(pairs, tau) for pairs in per_direction)
    return per_direction, _snap(max(width / 2.0**14, width / (0.95 * max_points)), per_direction), tau, n


def profile_upper(items: Sequence[_lat.LiveItem], reference: float, max_points: int, max_memory: int,
                  floor: float = 0.0) -> Callable[[ArrayLike], FloatArray]:
    """A function eps -> certified upper bounds on delta(eps) (the larger of the two directions) for eps >= floor:
    one composed upper lattice sum per direction, built once, read at every eps (``upper_profile`` plus what is
    charged: valid for every eps at or above the window's floor, which is set below ``floor``). Truncations are
    sized for deltas near ``reference``: each adds at most its share of it to every value."""
    per_direction, h, tau, n = risk_lattice(items, reference, max_points)
    sums = []
    for pairs in per_direction:
        lattices = [(_lat.lattice_cached(pair, h, tau / n), c) for pair, c in pairs]
        up, charge, _ = _upper(_items(lattices, "up"), lattices, None, h, max_memory, None, tau, x=float(floor))
        sums.append((up, charge))

    def read(epsilons: ArrayLike) -> FloatArray:
        eps = np.asarray(epsilons, dtype=np.float64)
        if np.any(eps < floor):
            raise ValueError(f"the profile is read at eps >= {floor:g}")
        out = np.zeros(len(eps))
        for up, charge in sums:
            values = up.upper_profiles(eps) + charge
            out = np.maximum(out, np.where(np.isfinite(values), values, 1.0))
        return np.minimum(out, 1.0)

    return read
