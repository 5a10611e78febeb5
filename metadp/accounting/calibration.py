"""Calibration: the noise, number of steps or sampling rate that meets a target (epsilon, delta).

Every result is conservative: the returned parameter is one at which the certified epsilon was
computed and found <= the target. Searches bracket first (doubling or halving) and then bisect on
certified bounds, relying only on monotonicity (epsilon non-increasing in noise, non-decreasing in
steps and rate), which holds for every accountant here.

The search may use the PLD accountant's time budget (``PldAccountant.max_seconds``), whose bounds
are certified but looser when refinement stops early; the value returned is then verified by
``certified_epsilon``, which refines without a time limit (the point budget only), so its bound
does not depend on the machine's speed or load: the same call gives the same number afterwards.

An answer at the edge of a search range is not an answer: each function raises ``ValueError`` saying
what is true instead (the target is unreachable, or met everywhere searched, e.g. because the plan
releases nothing).
"""

from __future__ import annotations

import math
from typing import Callable, Dict, Generic, Optional, Tuple, TypeVar

from scipy import optimize

from metadp.core.validation import check_count, check_delta, check_real
from metadp.core import events as ev
from metadp.accounting.certify import accountant_names, certify
from metadp.accounting.registry import ACCOUNTANTS
from metadp.accounting.rdp_accountant import UnsupportedEventError

__all__ = ["ACCOUNTANTS", "certified_epsilon", "calibrate_noise", "max_steps", "max_rate"]

_NOISE_RANGE = (1e-6, 1e6)  # noise multipliers searched by calibrate_noise
_MIN_RATE = 1e-12  # the smallest sampling rate max_rate tries
_X = TypeVar("_X", int, float)  # the parameter searched: a number of steps, a noise multiplier or a rate


def certified_epsilon(event: ev.Event, delta: float, *, relation: str = "add_remove",
                      accountant: str = "rdp") -> float:
    """The certified epsilon of one event (upper bound) with a fresh accountant.

    The PLD accountant refines its lattice here without a time limit (to its tolerance or its point
    budget), so the number does not depend on how fast the machine is.
    """
    return certify(event, delta, relation=relation, accountant=accountant, max_seconds=math.inf, lower=False).epsilon


def _search(event: ev.Event, delta: float, relation: str, accountant: str) -> Tuple[float, bool]:
    """(a certified epsilon for the search, with the accountant's default time budget; whether
    ``certified_epsilon`` gives the very same number): it does where the time budget did not decide
    anything (an accountant without one, or refinement not stopped by it: it is otherwise deterministic,
    so the untimed run takes the same rounds to the same bounds). The final check then reuses the
    search's value instead of computing it again."""
    found = certify(event, delta, relation=relation, accountant=accountant, lower=False).tightest
    return found.epsilon, not found.stopped_by_time


class _Searched(Generic[_X]):
    """The search's epsilons by parameter, and the certified (time-independent) epsilon from them where
    the search's is already that number (``_search``), else computed."""

    def __init__(self, make_event: Callable[[_X], ev.Event], delta: float, relation: str, accountant: str,
                 progress: Optional[Callable[[_X, float], None]] = None):
        self.make_event: Callable[[_X], ev.Event] = make_event
        self.delta, self.relation, self.accountant = delta, relation, accountant
        self.found: Dict[_X, Tuple[float, bool]] = {}
        # called with (parameter, epsilon) after each evaluation
        self.progress: Optional[Callable[[_X, float], None]] = progress

    def search(self, x: _X) -> float:
        if x not in self.found:
            self.found[x] = _search(self.make_event(x), self.delta, self.relation, self.accountant)
            if self.progress is not None:
                self.progress(x, self.found[x][0])
        return self.found[x][0]

    def quick(self, x: _X) -> float:
        """The RDP accountant's certified epsilon (fast at any count and noise): where the search's accountant
        is another, a bracket to start from; any certified upper bound <= target is a valid answer."""
        return _search(self.make_event(x), self.delta, self.relation, "rdp")[0] if self.accountant != "rdp" \
            else self.search(x)

    def certified(self, x: _X) -> float:
        if x in self.found and self.found[x][1]:
            return self.found[x][0]
        return certified_epsilon(self.make_event(x), self.delta, relation=self.relation, accountant=self.accountant)


def _check_target(target_epsilon: float, delta: float) -> Tuple[float, float]:
    target = check_real("target_epsilon", target_epsilon, low=0.0, low_open=True)
    return target, check_delta("delta", delta)


def calibrate_noise(make_event: Callable[[float], ev.Event], target_epsilon: float, delta: float, *,
                    relation: str = "add_remove", accountant: str = "rdp", rtol: float = 1e-4,
                    progress: Optional[Callable[[float, float], None]] = None) -> float:
    """Smallest noise multiplier z (to relative ``rtol``) with epsilon(make_event(z)) <= target.

    Args:
        make_event: builds the whole plan's event from a noise multiplier.
        target_epsilon: > 0.
        delta: in (0, 1).

    Returns:
        z such that ``certified_epsilon(make_event(z))`` is <= target_epsilon, within relative ``rtol``
        of the smallest such z (Brent's bracketing root finder on log z over certified bounds, then a
        check with the time-independent bound).

    Raises:
        ValueError: if no multiplier up to 1e6 meets the target, or if every multiplier down to 1e-6
            does (no smallest one in range; epsilon 0 there means the plan releases nothing).
    """
    target, delta = _check_target(target_epsilon, delta)
    accountant_names(accountant)  # validates the name
    searched = _Searched(make_event, delta, relation, accountant, progress)
    start = 1.0
    if accountant != "rdp":  # the RDP answer (fast) meets the target with a bound at least this one's
        low = _NOISE_RANGE[0]
        try:
            floor = searched.quick(low)
        except UnsupportedEventError:
            floor = math.inf
        if floor <= target:  # certified at the smallest noise searched already: refused at once
            raise ValueError(f"every noise multiplier down to {low:g} (the smallest searched) meets target_epsilon "
                             f"{target:g} (epsilon <= {floor:.6g} there, RDP): no smallest one in range")
        try:
            start = _smallest_noise(searched.quick, target, 1e-2)
        except (ValueError, UnsupportedEventError):
            start = 1.0
    z = _smallest_noise(searched.search, target, rtol, start)
    while searched.certified(z) > target:
        z *= 1.0 + rtol / 4.0  # not reached while the search's bounds are the looser ones; a safeguard
        if z > _NOISE_RANGE[1]:
            raise ValueError(f"target_epsilon {target:g} is unreachable: even noise multiplier "
                             f"{_NOISE_RANGE[1]:g} exceeds it")
    return z


def _smallest_noise(eps: Callable[[float], float], target: float, rtol: float, start: float = 1.0) -> float:
    """Smallest z (to relative rtol) with eps(z) <= target, for eps non-increasing in z (the bracket searched
    from ``start``)."""
    low, high = _NOISE_RANGE
    if eps(high) > target:
        raise ValueError(f"target_epsilon {target:g} is unreachable: even noise multiplier {high:g} "
                         f"exceeds it (epsilon {eps(high):.6g})")
    hi = min(max(start, low), high)
    while eps(hi) > target:
        hi *= 2.0
        if hi > high:
            raise ValueError(f"target_epsilon {target:g} is unreachable: even noise multiplier {high:g} "
                             f"exceeds it (epsilon {eps(high):.6g})")
    lo = hi / 2.0
    while eps(lo) <= target:
        hi, lo = lo, lo / 2.0
        if lo < low:
            floor = eps(low)
            if floor == 0.0:
                raise ValueError(f"any noise multiplier meets target_epsilon {target:g}: epsilon is 0 even at "
                                 f"noise multiplier {low:g}, so the plan releases nothing about a unit (e.g. "
                                 "rate 0 or 0 steps)")
            raise ValueError(f"every noise multiplier down to {low:g} (the smallest searched) meets "
                             f"target_epsilon {target:g} (epsilon {floor:.6g} there): no smallest one in range")
    # Brent's method on log z (bracketing, superlinear): eps(lo) > target >= eps(hi).
    root = optimize.brentq(lambda log_z: eps(math.exp(log_z)) - target, math.log(lo), math.log(hi),
                           xtol=rtol / 4.0)
    z = min(hi, math.exp(root) * (1.0 + rtol / 4.0))
    while eps(z) > target:  # the certified bound decides, not the root finder: step up until it holds
        z = min(hi, z * (1.0 + rtol / 4.0))
    return z


def max_steps(step_event: ev.Event, target_epsilon: float, delta: float, *, relation: str = "add_remove",
              accountant: str = "rdp", limit: Optional[int] = None,
              progress: Optional[Callable[[float, float], None]] = None) -> int:
    """Largest number of steps T with epsilon(T x step_event) <= target (0 if even one step exceeds it).

    Args:
        limit: the most steps the caller can use (e.g. a run's length): the answer is at most
            ``limit``, and ``limit`` itself when it meets the target. None: no limit of the caller's;
            the search covers every count up to ``events.MAX_COUNT`` (2^53).

    Raises:
        ValueError: with ``limit`` None, if even ``MAX_COUNT`` steps meet the target (there is then no
            largest number in range; epsilon 0 there means the plan releases nothing).
    """
    target, delta = _check_target(target_epsilon, delta)
    cap = ev.MAX_COUNT if limit is None else check_count("limit", limit, minimum=1, maximum=ev.MAX_COUNT)
    accountant_names(accountant)  # validates the name

    searched: _Searched[int] = _Searched(lambda t: ev.SelfComposed(step_event, t), delta, relation, accountant,
                                         progress)

    def ok(t: int) -> bool:
        return searched.search(t) <= target

    def verified(t: int) -> bool:
        return searched.certified(t) <= target

    if limit is None and _quick_ok(searched, cap, target):  # certified (RDP) at the cap already: no largest
        at_cap = searched.quick(cap)
        if at_cap == 0.0:
            raise ValueError(f"any number of steps meets target_epsilon {target:g}: epsilon is 0 even after "
                             f"{cap:,} steps, so the plan releases nothing about a unit (e.g. rate 0)")
        raise ValueError(f"target_epsilon {target:g} is not reached within {cap:,} steps (the most searched; "
                         f"epsilon <= {at_cap:.6g} there, RDP): no largest number of steps in range")
    if not ok(1):
        return 0
    lo, hi = 1, 2
    if accountant != "rdp":  # start from the RDP answer (fast at any count), which the search's bound meets too
        quick = _largest_quick(searched, target, cap)
        if quick > 1 and ok(quick):
            lo, hi = quick, min(2 * quick, cap + 1)
            if searched.search(quick) >= searched.quick(quick):
                # the search's accountant gives no tighter bound than RDP here (the PLD accountant falls back to
                # it at such counts): searching further would cost minutes for the RDP answer itself
                return quick if verified(quick) else max_steps(step_event, target, delta, relation=relation,
                                                               accountant="rdp", limit=limit)
    while hi <= cap and ok(hi):
        lo, hi = hi, hi * 2
    if hi > cap:
        if ok(cap):
            if limit is None:
                at_cap = certified_epsilon(ev.SelfComposed(step_event, cap), delta, relation=relation,
                                           accountant=accountant)
                if at_cap == 0.0:
                    raise ValueError(f"any number of steps meets target_epsilon {target:g}: epsilon is 0 even after "
                                     f"{cap:,} steps, so the plan releases nothing about a unit (e.g. rate 0)")
                raise ValueError(f"target_epsilon {target:g} is not reached within {cap:,} steps (the most "
                                 f"searched; epsilon {at_cap:.6g} there): no largest number of steps in range")
            lo = hi = cap
        else:
            hi = cap
    while hi - lo > 1:  # invariant: ok(lo), not ok(hi)
        mid = (lo + hi) // 2
        if ok(mid):
            lo = mid
        else:
            hi = mid
    while lo > 0 and not verified(lo):  # not reached while the search's bounds are the looser ones
        lo -= 1
    return lo


def _quick_ok(searched: _Searched[int], steps: int, target: float) -> bool:
    try:
        return searched.quick(steps) <= target
    except UnsupportedEventError:
        return False


def _largest_quick(searched: _Searched[int], target: float, cap: int) -> int:
    """The largest count (to 1e-3 relative) whose RDP epsilon meets the target, 0 if none or no RDP bound."""
    try:
        if searched.quick(1) > target:
            return 0
        lo, hi = 1, 2
        while hi <= cap and searched.quick(hi) <= target:
            lo, hi = hi, hi * 2
        hi = min(hi, cap)
        while hi - lo > max(1, lo // 1000):
            mid = (lo + hi) // 2
            lo, hi = (mid, hi) if searched.quick(mid) <= target else (lo, mid)
        return lo
    except UnsupportedEventError:
        return 0


def max_rate(make_event: Callable[[float], ev.Event], target_epsilon: float, delta: float, *,
             relation: str = "add_remove", accountant: str = "rdp", rtol: float = 1e-4,
             progress: Optional[Callable[[float, float], None]] = None) -> float:
    """Largest sampling rate q in [0, 1] (to relative ``rtol``) with epsilon(make_event(q)) <= target.

    Returns 1.0 when every unit in every step (rate 1) meets the target.

    Raises:
        ValueError: if even a rate of 1e-12 (the smallest tried) exceeds the target.
    """
    target, delta = _check_target(target_epsilon, delta)
    accountant_names(accountant)  # validates the name

    searched = _Searched(make_event, delta, relation, accountant, progress)

    def ok(q: float) -> bool:
        return searched.search(q) <= target

    def verified(q: float) -> bool:
        return searched.certified(q) <= target

    if ok(1.0) and verified(1.0):
        return 1.0
    lo = 0.5
    while not ok(lo):
        lo /= 2.0
        if lo < _MIN_RATE:
            epsilon = certified_epsilon(make_event(_MIN_RATE), delta, relation=relation, accountant=accountant)
            raise ValueError(f"target_epsilon {target:g} is unreachable at any sampling rate >= {_MIN_RATE:g} "
                             f"(epsilon {epsilon:.6g} at rate {_MIN_RATE:g})")
    hi = min(1.0, 2.0 * lo)
    while hi / lo - 1.0 > rtol:
        mid = math.sqrt(lo * hi)
        if ok(mid):
            lo = mid
        else:
            hi = mid
    while not verified(lo):  # not reached while the search's bounds are the looser ones; a safeguard
        lo /= 1.0 + rtol
        if lo < _MIN_RATE:
            raise ValueError(f"target_epsilon {target:g} is unreachable at any sampling rate >= {_MIN_RATE:g}")
    return lo
