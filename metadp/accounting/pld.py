"""Privacy-loss-distribution (PLD) accountant with certified lower and upper bounds.

Each step's dominating pair (``metadp.mechanisms``) has a privacy loss L = log dP/dQ under P. The
pair is discretised on a lattice h Z (``_pld_lattice``): pessimistically by connect-the-dots (each loss
cell's mass split between its end points: a pair that dominates the original; Doroshenko et al. 2022,
arXiv:2207.04380), and for the lower bound the cells' P- and Q-masses are kept with lattice labels, so
that one event of the composed output, P(E) - e^eps Q(E), bounds delta(eps) from below. Composition is
an FFT power per distinct pair (self-composition T = 1e9 costs what T = 1e3 costs), exponentially
tilted where the FFT's round-off would otherwise swamp the masses that decide a small delta
(``_pld_compose``), and delta(eps) = E[(1 - e^{eps - S})_+] of the composed sum S is read off exactly on
the lattice. Composing dominating pairs dominates the composition (Zhu, Dong & Wang 2022,
arXiv:2106.08567, Thm 10).

Everything truncated or rounded is charged on the pessimistic side of each bound, with proofs, not
estimates: per-step loss tails (upper: to an infinity atom, lower: outside the event), the mass outside
the FFT window (Chernoff bounds), the cell masses' round-off (a relative error per cell from the pair,
``cell_masses(with_error=True)``, which composes to a relative error of delta, not an absolute one),
and the FFT's round-off (Higham's bound carried through the power and the inverse transform). The
lattice is refined until the interval [lower, upper] is within the requested relative tolerance or the
point or time budget is spent; then the notes say which charged term is largest. Every public number
is an upper bound; the optimistic one comes with it from ``get_epsilon_bounds``.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Callable, Iterable, List, Optional, Sequence, Set, Tuple, cast

import numpy as np

from metadp.accounting import _pld_lattice as _lat
from metadp.accounting._pld_method import RDP_REPORTED, REVEALED_COUNT_REPORTED, pld_certificate
from metadp.accounting.certificate import Certificate
from metadp.accounting.rdp_accountant import RELATIONS, LedgerEntry, RdpAccountant, UnsupportedEventError
from metadp.accounting._pld_gaussian import gaussian_delta_bounds, gaussian_epsilon_bounds, gaussian_mu
from metadp.accounting._pld_lattice import Lattice, LiveItem, Pair, PairItem
from metadp.accounting._pld_pairs import event_pairs
from metadp.accounting._revealed_count import revealed_count_epsilon
from metadp.accounting._pld_bounds import PldResult, _bounds, _delta_bounds, _trajectory_direction
from metadp.accounting._pld_window import DELTA_SHARE as _DELTA_SHARE
from metadp.core import events as ev
from metadp.core._typing import FloatArray
from metadp.core.validation import check_count, check_delta, check_real
from metadp.mechanisms.base import Attained

__all__ = ["PldAccountant", "PldResult", "event_pairs"]


# Below this delta the lattice's truncated tails (float64 masses near the smallest normal, 2.2e-308) cannot be
# charged to delta: at 1e-280 one Poisson step stalled after 9.5 s at a 0.8% interval, at 1e-290 refined 10.6 s to
# no finite bound; at 1e-270 it is exact in milliseconds. Below it the revealed-count and RDP bounds answer.
DELTA_FLOOR = 1e-270


def _guarded_bounds(items: Sequence[LiveItem], delta: float, tolerance: float, max_fft_size: int, max_memory: int,
                    max_seconds: float, steps: int) -> PldResult:
    """``_bounds``, or no bound (lower 0, upper infinity, a note) where its arithmetic leaves float64's range.

    The lattice's error terms grow with the composed count and the per-step losses (counts near 10^13 or noise
    near 1e-30 overflow them). An overflow or an invalid operation there means the certificate cannot be
    computed, not that a number is wrong, so it is raised (numpy's errstate) and turned into this result,
    whose infinite upper bound the caller replaces by the RDP bound where there is one."""
    try:
        with np.errstate(over="raise", invalid="raise"):
            return _bounds(items, delta, tolerance, max_fft_size, max_memory, max_seconds)
    except (OverflowError, FloatingPointError, ValueError) as err:
        if isinstance(err, ValueError) and "cannot convert float" not in str(err):  # int(nan) or int(inf) only
            raise
        note = (f"the PLD lattice's arithmetic leaves float64's range at this scale ({steps:,} releases): no PLD "
                "bound is certified")
        return PldResult(0.0, math.inf, delta, math.nan, steps, 0, (note,))


def _up(x: float) -> str:
    """``x`` rounded up at 6 significant digits (a printed upper bound never understates)."""
    return "infinity" if not math.isfinite(x) else f"{_directed(x, math.ceil):.6g}"


def _down(x: float) -> str:
    """``x`` rounded down at 6 significant digits (a printed lower bound never overstates)."""
    return f"{_directed(x, math.floor):.6g}"


def _directed(x: float, rounding: Callable[[float], int]) -> float:
    if x <= 0.0:
        return max(x, 0.0)
    scale = 10.0 ** (5 - math.floor(math.log10(x)))  # 6 significant digits
    return rounding(x * scale) / scale


def _poisson_gaussian_steps(ledger: Sequence[LedgerEntry]) -> Optional[Tuple[float, float, int]]:
    """(rate, noise multiplier, steps) where every composed release is PoissonSampled(rate, Gaussian(z)) of one
    rate and multiplier (through SelfComposed and Composed); else None."""
    found: Set[Tuple[float, float]] = set()
    stack = [(entry.event, entry.count) for entry in ledger]
    steps = 0
    while stack:
        event, count = stack.pop()
        if isinstance(event, ev.SelfComposed):
            stack.append((event.inner, count * event.count))
        elif isinstance(event, ev.Composed):
            stack.extend((e, count) for e in event.events)
        elif isinstance(event, ev.PoissonSampled) and isinstance(event.inner, ev.Gaussian):
            found.add((event.rate, event.inner.noise_multiplier))
            steps += count
        elif not isinstance(event, ev.NoOp):
            return None
    if len(found) != 1:
        return None
    rate, z = found.pop()
    return (rate, z, steps) if math.isfinite(z) else None


def _attained(pairs: Optional[Tuple[Pair, ...]]) -> Optional[Attained]:
    """The ``Attained`` of an item some of whose pairs dominate one step only, else None (every pair of the
    item is attained as it is). For an (add, remove) item, each direction's first attained pair (or the
    pair itself), merged into one where they are the same pair."""
    if pairs is None:  # a non-private release
        return None
    named: List[Optional[Attained]] = [getattr(pair, "attained", None) for pair in pairs]
    found = [a for a in named if a is not None]
    if not found:
        return None
    if len(pairs) == 1:
        return found[0]
    chosen = tuple(a.pairs[0] if a is not None else pair for a, pair in zip(named, pairs))
    chosen = chosen[:1] if all(p is chosen[0] for p in chosen) else chosen
    return Attained(chosen, found[0].datasets, max(a.slack for a in found))


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
    timed = True  # takes ``max_seconds``
    citations = ("zhu2022optimal", "doroshenko2022connect", "higham2002accuracy")

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
        self._items: List[PairItem] = []
        self._rdp_cache: Optional[Tuple[int, Optional[RdpAccountant]]] = None  # (len(ledger), RDP cap), built on use

    def compose(self, event: ev.Event, count: int = 1) -> "PldAccountant":
        """Composes ``event`` ``count`` times; raises before any state change if unsupported."""
        if not isinstance(event, ev.Event):
            raise ValueError(f"event must be a metadp Event, got {type(event).__name__}")
        count = check_count("count", count, maximum=ev.MAX_COUNT)
        items = [(pairs, c * count) for pairs, c in event_pairs(event, self.relation) if c * count > 0]
        for pairs, c in items:  # the same mechanism again: one item with a larger count (one FFT power)
            same = [i for i, (known, _) in enumerate(self._items) if known is pairs]
            if same:
                self._items[same[0]] = (pairs, self._items[same[0]][1] + c)
            else:
                self._items.append((pairs, c))
        self._ledger.append(LedgerEntry(event, count))
        return self

    def why_unsupported(self, event: ev.Event) -> Optional[str]:
        """None if this accountant can interpret ``event`` under its relation, else the reason."""
        try:
            event_pairs(event, self.relation)
        except UnsupportedEventError as err:
            return str(err)
        return None

    def supports(self, event: ev.Event) -> bool:
        """Whether ``compose(event)`` would succeed (``why_unsupported`` says why not)."""
        return self.why_unsupported(event) is None

    def certify(self, delta: float, lower: bool = True) -> Certificate:
        """``get_epsilon_bounds`` as the interface every accountant shares (``metadp.accounting.certify``): the
        certified interval, the lattice spacing, the notes, and the assumptions and citations of the method,
        including those of the RDP or revealed-count bound where that is the number reported. ``lower=False``:
        the upper bound only (``get_epsilon``'s work: no second composition for the mechanism's lower end)."""
        if lower:
            return pld_certificate(self, self.get_epsilon_bounds(delta))
        result = self._pair_bounds(check_delta("delta", delta))
        return dataclasses.replace(pld_certificate(self, result), epsilon_lower=None)

    @property
    def ledger(self) -> Tuple[LedgerEntry, ...]:
        return tuple(self._ledger)

    def get_epsilon(self, delta: float) -> float:
        """Certified epsilon at ``delta`` (the upper bound; the mechanism's lower end, which may take a second
        composition, is not computed)."""
        return self._pair_bounds(check_delta("delta", delta)).epsilon_upper

    def get_epsilon_and_order(self, delta: float) -> Tuple[float, float]:
        """(epsilon, nan): the accountant interface shared with ``RdpAccountant`` (no Renyi order)."""
        return self.get_epsilon(delta), math.nan

    def get_epsilon_bounds(self, delta: float) -> PldResult:
        """Lower and upper bounds on the optimal epsilon at ``delta``.

        The RDP bound, also an upper bound, is reported instead when it is smaller. It is at least the
        true epsilon, so at least the PLD lower bound: it can only win when the PLD interval is wider
        than the tolerance (or the PLD bound is infinite), and only then is it computed.

        The lower bound is one on the mechanism: where a composed pair dominates one step only (its
        ``attained`` names the pairs that datasets produce at every step, ``mechanisms.base.Attained``),
        it is the lower bound of those pairs' composition, and ``pair_lower`` keeps the composed
        dominating pairs' own (which says how close the upper bound is to their exact composition).
        """
        delta = check_delta("delta", delta)
        return self._attained_lower(self._pair_bounds(delta), delta)

    def _pair_bounds(self, delta: float) -> PldResult:
        """``get_epsilon_bounds`` of the composed dominating pairs (the lower end theirs)."""
        if any(pairs is None for pairs, _ in self._items):
            return PldResult(math.inf, math.inf, delta, math.nan, self._steps(), 0, ("non-private release",))
        if not self._items:
            return PldResult(0.0, 0.0, delta, math.nan, 0, 0)
        mu = gaussian_mu(self._items)  # Gaussian releases only: the exact mu-GDP profile, no lattice
        exact = gaussian_epsilon_bounds(mu, delta) if mu is not None else None
        if exact is not None:
            return PldResult(exact[0], exact[1], delta, math.nan, self._steps(), 0)
        if delta < DELTA_FLOOR:  # the lattice cannot charge its truncations below it: skip to the fallbacks
            note = (f"delta {delta:.3g} is below {DELTA_FLOOR:g}, where the PLD lattice cannot charge its truncated "
                    "mass in float64 (it refined for seconds to no finite bound): no PLD lattice bound")
            result = PldResult(0.0, math.inf, delta, math.nan, self._steps(), 0, (note,))
        else:
            result = _guarded_bounds(cast(List[LiveItem], self._items), delta, self.tolerance, self.max_fft_size,
                                     self.max_memory, self.max_seconds, self._steps())  # none is non-private
        upper = result.epsilon_upper
        if math.isfinite(upper) and upper - result.epsilon_lower <= self.tolerance * upper:
            return result
        result = self._revealed_count(result, delta)
        scale = self._rdp_epsilon(delta)
        if scale == 0.0:
            return PldResult(0.0, 0.0, delta, math.nan, self._steps(), 0, ("RDP certifies epsilon 0",))
        if math.isinf(result.epsilon_upper) and math.isinf(scale):
            note = ("no finite PLD bound at this delta: the truncated mass and round-off charged to delta "
                    "exceed it, and this event has no RDP bound to fall back on (use a larger delta)")
            return dataclasses.replace(result, notes=result.notes + (note,))
        if result.epsilon_upper > scale:  # both are valid upper bounds: report the smaller, and say so
            note = (f"the PLD bound {_number(result.epsilon_upper)} is above the RDP bound {scale:.6g} "
                    f"(the notes above say what the PLD bound is charged): {RDP_REPORTED}")
            return dataclasses.replace(result, epsilon_upper=scale, notes=result.notes + (note,))
        return result

    def _revealed_count(self, result: PldResult, delta: float) -> PldResult:
        """``result`` with the revealed-count bound as its upper end where that is smaller (a ledger of
        Poisson-subsampled Gaussian steps of one rate and noise, add/remove: ``_revealed_count``). Asked only
        when the lattice's interval is wider than the tolerance: at tiny noise the lattice's window cannot
        hold the losses to its proven precision, and this bound is then near the truth."""
        found = _poisson_gaussian_steps(self._ledger) if self.relation == "add_remove" else None
        if found is None:
            return result
        bound = revealed_count_epsilon(*found, delta)
        if bound is None or bound >= result.epsilon_upper:
            return result
        note = (f"the PLD lattice's bound {_number(result.epsilon_upper)} is above the revealed-count bound {bound:.6g} "
                "(which steps sampled the unit revealed; a sum over the binomial count of Gaussian profiles, "
                f"metadp.accounting._revealed_count): {REVEALED_COUNT_REPORTED}")
        return dataclasses.replace(result, epsilon_upper=bound, notes=result.notes + (note,))

    def _attained_lower(self, result: PldResult, delta: float) -> PldResult:
        """``result`` with its lower end replaced by the composition of the pairs named datasets attain at
        every step, where some composed pair dominates one step only (``get_epsilon_bounds``)."""
        named = [_attained(pairs) for pairs, _ in self._items]
        if all(a is None for a in named) or not math.isfinite(result.epsilon_upper):
            return result
        datasets = sorted({a.datasets for a in named if a is not None})
        pair_note = (f"the upper end composes a per-step dominating pair that no neighbouring datasets are shown to "
                     f"produce at every step: that composition's own lower bound ({_down(result.epsilon_lower)}) is "
                     "not one on the mechanism")
        if len(datasets) > 1:  # configurations of different mechanisms: not shown to be one pair of datasets
            return dataclasses.replace(result, epsilon_lower=0.0, pair_lower=result.epsilon_lower,
                                       notes=result.notes + (pair_note + "; no named datasets give a lower bound "
                                                             "for this composition",))
        items = cast(List[LiveItem], [(pairs if a is None else a.pairs, c)  # none non-private: upper is finite
                                      for a, (pairs, c) in zip(named, self._items)])
        slack = sum(c * a.slack for a, (_, c) in zip(named, self._items) if a is not None)
        if delta + slack >= 1.0 or delta + slack < DELTA_FLOOR:  # nothing to find, or no lattice to find it
            lower = 0.0
        else:
            found = _guarded_bounds(items, delta + slack, self.tolerance, self.max_fft_size, self.max_memory,
                                    self.max_seconds, self._steps())
            lower = min(found.epsilon_lower, result.epsilon_upper)
        note = (f"the true epsilon may lie anywhere in [{_down(lower)}, {_up(result.epsilon_upper)}]: the lower end is "
                f"attained by named neighbouring datasets ({datasets[0]}); {pair_note}")
        return dataclasses.replace(result, epsilon_lower=lower, pair_lower=result.epsilon_lower,
                                   notes=result.notes + (note,))

    def _rdp_accountant(self) -> Optional[RdpAccountant]:
        """The RDP accountant of the ledger (None if an event has no RDP bound), built on first use."""
        if self._rdp_cache is None or self._rdp_cache[0] != len(self._ledger):
            rdp = RdpAccountant(self.relation)
            try:
                for entry in self._ledger:
                    rdp.compose(entry.event, entry.count)
                self._rdp_cache = (len(self._ledger), rdp)
            except UnsupportedEventError:
                self._rdp_cache = (len(self._ledger), None)
        return self._rdp_cache[1]

    def _rdp_epsilon(self, delta: float) -> float:
        rdp = self._rdp_accountant()
        return rdp.get_epsilon(delta) if rdp is not None else math.inf

    def trajectory(self, steps: Iterable[int], delta: float, step_event: Optional[ev.Event] = None) -> FloatArray:
        """Certified epsilon (upper bound) after each listed number of steps.

        As ``RdpAccountant.trajectory``: the step is ``step_event`` on top of the ledger, or the last
        composed event on top of the entries before it. One lattice spacing and tail truncation serve
        every step count (those that meet the tolerance at the longest count), so the step's lattice
        is built once; each listed count costs one Chernoff window and one FFT composition.

        The RDP bound, also an upper bound at every count, is taken where it is smaller, but computed
        only where it can matter, decided before computing it (as ``get_epsilon_bounds`` does): at
        counts without a finite PLD bound, and at every count when the PLD interval at the longest count
        is wider than the tolerance (a time or point budget stopped the lattice short). Otherwise the
        RDP bound, at least the true epsilon, could only win by the shared lattice's excess over the
        true epsilon at a shorter count; that choice is one of tightness, not validity (every value
        returned is a certified upper bound either way), and on the plans tried (the default plan's
        task and record views, 32 counts each) RDP was above PLD at every count, 8x above at one step.
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
        if any(pairs is None for pairs, _ in base_items + step_items):
            return np.full(len(counts), np.inf)  # a non-private release
        n_of = [sum(c for _, c in base_items) + t * sum(c for _, c in step_items) for t in counts]
        out = np.full(len(counts), np.inf)
        wide = True  # whether the PLD values may be looser than the tolerance (then RDP is asked everywhere)
        if gaussian_mu(base_items + step_items) is not None:  # Gaussian releases only: mu-GDP per count
            # (every item is a Gaussian pair, at any count: gaussian_mu is not None)
            exact = [gaussian_epsilon_bounds(cast(Tuple[float, float], gaussian_mu(
                base_items + [(p, c * t) for p, c in step_items])), delta) if n else (0.0, 0.0)
                for t, n in zip(counts, n_of)]
            if all(e is not None for e in exact):
                out = np.array([cast(Tuple[float, float], e)[1] for e in exact])
                wide = False  # the closed form: within a few ulps of the optimal epsilon
        if wide:
            # (no item is non-private: checked above)
            out, wide = self._lattice_trajectory(cast(List[LiveItem], base_items), cast(List[LiveItem], step_items),
                                                 counts, n_of, delta)
        out = np.where(np.array(n_of) == 0, 0.0, out)
        need = [i for i in range(len(counts)) if n_of[i] > 0 and (wide or not math.isfinite(out[i]))]
        if need:
            try:
                rdp = RdpAccountant(self.relation)
                for e, c in base:
                    rdp.compose(e, c)
                scales = rdp.trajectory([counts[i] for i in need], delta, step_event=step_event)
            except UnsupportedEventError:  # no RDP cap for this plan
                scales = np.full(len(need), np.inf)
            out[need] = np.minimum(out[need], scales)
        return out

    def _lattice_trajectory(self, base_items: List[LiveItem], step_items: List[LiveItem], counts: List[int],
                            n_of: List[int], delta: float) -> Tuple[FloatArray, bool]:
        """(PLD upper bounds at each count on one shared lattice, whether the longest count's interval
        is wider than the tolerance): ``trajectory``'s lattice part."""
        certifiable = [i for i in range(len(counts)) if 0 < n_of[i]]
        out, wide = np.full(len(counts), np.inf), False
        while certifiable:
            longest = max(certifiable, key=lambda i: n_of[i])
            # the spacing that meets the tolerance at the longest count serves every count; a count
            # without a finite PLD bound keeps the RDP one, and the next longest sets the spacing
            final = base_items + [(pairs, c * counts[longest]) for pairs, c in step_items]
            found = _bounds(final, delta, self.tolerance, self.max_fft_size, self.max_memory, self.max_seconds)
            if math.isfinite(found.epsilon_upper):
                break
            certifiable = [i for i in certifiable if n_of[i] < n_of[longest]]
        if certifiable:
            wide = found.epsilon_upper - found.epsilon_lower > self.tolerance * found.epsilon_upper
            h = found.h
            tail = _DELTA_SHARE * delta / n_of[longest]
            directions = 2 if any(len(pairs) == 2 for pairs, _ in base_items + step_items) else 1
            values = np.zeros(len(certifiable))
            for d in range(directions):
                pick: Callable[[List[LiveItem]], List[Tuple[Lattice, int]]] = \
                    lambda items: [(_lat.lattice_cached(pairs[min(d, len(pairs) - 1)], h, tail), c)
                                   for pairs, c in items]
                values = np.maximum(values, _trajectory_direction(pick(base_items), pick(step_items),
                                                                  [counts[i] for i in certifiable], delta,
                                                                  self.max_memory))
            out[certifiable] = values
        return out, wide

    def get_delta(self, epsilon: float) -> float:
        """Certified delta at ``epsilon`` (upper bound), read off the pessimistic lattice sum.

        The lattice is refined until the certified interval on delta(epsilon) (the pessimistic lattice
        sum above, the lower bound's event below) is within the tolerance; the truncations are sized
        from a reference delta (1e-6 at first; if the result is far below it, it becomes the reference
        and the computation is repeated, so the charged truncation mass stays small next to the
        answer). The RDP delta, also an upper bound, is reported instead where it is smaller; it can
        only be when the interval is wider than the tolerance, and only then is it computed.
        """
        epsilon = check_real("epsilon", epsilon, low=0.0, allow_inf=True)
        if any(pairs is None for pairs, _ in self._items):
            return 1.0
        if not self._items or math.isinf(epsilon):
            return 0.0
        mu = gaussian_mu(self._items)
        exact = gaussian_delta_bounds(mu, epsilon) if mu is not None else None
        if exact is not None:
            return float(exact[1])
        reference, lower, delta = 1e-6, 0.0, 1.0
        for _ in range(4):
            lower, delta = _delta_bounds(cast(List[LiveItem], self._items), epsilon, reference, self.tolerance,
                                         self.max_fft_size, self.max_memory, self.max_seconds)  # none non-private
            if delta >= 0.01 * reference or delta <= 1e-300:
                break
            reference = delta
        if delta - lower > self.tolerance * delta:
            rdp = self._rdp_accountant()
            if rdp is not None:
                delta = min(delta, rdp.get_delta(epsilon))
        return float(min(delta, 1.0))

    def _steps(self) -> int:
        return sum(c for _, c in self._items)


def _number(x: float) -> str:
    """An epsilon in a note: six digits, or "infinity" in words (a bare "inf" reads as a glitch)."""
    return "infinity" if math.isinf(x) else f"{x:.6g}"
