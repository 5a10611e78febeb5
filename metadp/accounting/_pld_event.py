"""The PLD accountant's lower bound read off one event of the composed output (``_pld_lattice``):
delta(x) >= P(E) - e^x Q(E) for E = {label sum in A}, any set A of label sums, so the best A at x is
{s : P_s > e^x Q_s}. P_s and Q_s are the lattice sums of the cells' P- and Q-masses (``_pld_compose``),
bounded below and above with their round-off: P_s >= e^{-log_factor} (values - e - wrapped) e^{log_scale
- theta s}, Q_s <= e^{log_factor} (values + e) e^{...}, the l2 round-off entering through Cauchy-Schwarz
on A, the wrapped tilted mass at the largest untilting weight in A.
"""

from __future__ import annotations

import dataclasses
import math
from typing import List, Optional, Tuple, cast

import numpy as np

from metadp.accounting._pld_compose import TiltedSum
from metadp.core._typing import FloatArray

__all__: List[str] = []

_Sums = Tuple[FloatArray, FloatArray, FloatArray]  # ``_crossing_sums``: tail sums of a and b, the sum at each ell


def _crossing(ell: FloatArray, a: FloatArray, b: FloatArray, target: float, x0: float = 0.0,
              sums: Optional[_Sums] = None) -> float:
    """Smallest x with sum_{ell_s > x} (a_s - e^{x - x0} b_s) <= target, for ell sorted increasing and
    b_s = a_s e^{x0 - ell_s} (b scaled by e^{x0}, so that huge losses do not overflow). ``sums``: the
    target-free part (``_crossing_sums``), when several targets are asked of the same bins."""
    big_a, big_b, at_points = _crossing_sums(ell, a, b, x0) if sums is None else sums
    hits = at_points <= target
    if not np.any(hits):
        return math.inf
    j = int(np.argmax(hits))
    if big_a[j] <= target:
        return float(ell[j - 1]) if j > 0 else -math.inf
    return float(min(x0 + math.log((big_a[j] - target) / big_b[j]), ell[j]))


def _crossing_sums(ell: FloatArray, a: FloatArray, b: FloatArray, x0: float) -> _Sums:
    """The tail sums of a and b and the crossing's sum at each x = ell_j (``_crossing``)."""
    big_a = np.cumsum(a[::-1])[::-1]
    big_b = np.cumsum(b[::-1])[::-1]
    at_points = np.zeros(len(ell))  # the sum at x = ell_j; 0 at the last bin (nothing above it)
    with np.errstate(over="ignore", invalid="ignore"):
        at_points[:-1] = big_a[1:] - np.exp(np.minimum(ell[:-1] - x0, 700.0)) * big_b[1:]
    return big_a, big_b, at_points


@dataclasses.dataclass(frozen=True)
class _Event:
    """The bins usable in the lower bound's event, sorted by their loss ratio ell = log(P_s / Q_s):
    lower bounds a_s on P_s, upper bounds b_s = e^{x0} Q_s (scaled), and the log untilting weights."""

    ell: FloatArray
    a: FloatArray
    b: FloatArray
    log_wp: FloatArray
    log_wq: FloatArray
    x0: float

    def crossing(self, target: float) -> float:
        if "_sums" not in self.__dict__:  # computed once (frozen dataclass: set directly)
            object.__setattr__(self, "_sums", _crossing_sums(self.ell, self.a, self.b, self.x0))
        # the memo is set directly in the instance's __dict__ (frozen)
        return _crossing(self.ell, self.a, self.b, target, self.x0, cast(_Sums, self.__dict__["_sums"]))

    def value(self, x: float) -> float:
        """sum over ell_s > x of a_s - e^{x - x0} b_s: P(E_x) - e^x Q(E_x) before the round-off."""
        inside = self.ell > x
        return float(np.sum(self.a[inside]) - math.exp(min(x - self.x0, 700.0)) * np.sum(self.b[inside]))


def _event(p_sum: TiltedSum, q_sum: TiltedSum, budget: float, x0: float,
           near: Optional[float] = None) -> Optional[_Event]:
    """The usable bins (``_Event``) of the lower bound's P- and Q-sums, or None. Q-masses are handled in
    logs, scaled by e^{x0} (x0 near the answer), since e^{-x} Q underflows at large epsilon. A may be
    any set: bins whose untilting factor makes their round-off alone a noticeable part of the budget
    are left out (far below the answer, where the tilted masses are tiny), and those whose Q round-off,
    times e^x at ``near`` (found here when None), is."""
    s = p_sum.first + np.arange(len(p_sum.values), dtype=np.float64)
    log_wp = p_sum.log_scale - p_sum.theta * s
    log_wq = q_sum.log_scale - q_sum.theta * s
    with np.errstate(divide="ignore", invalid="ignore"):
        log_a = np.log(p_sum.values) + log_wp - p_sum.log_factor
        log_b = np.logaddexp(np.log(np.maximum(q_sum.values, 0.0)) + q_sum.log_factor, -690.0) + log_wq
    log_cut = math.log(1e-3 * budget)
    keep = np.isfinite(log_a) & (math.log(p_sum.error + 1e-300) + log_wp <= log_cut)
    keep &= log_a - log_b > x0 - 600.0  # bins 600 below x0 in loss only count at x far below the answer
    sums: Optional[_Sums] = None
    for rounds in range(2):  # the second time with the answer's estimate for the Q cut
        if not np.any(keep):
            return None
        ell = log_a[keep] - log_b[keep]
        order = np.argsort(ell, kind="stable")
        ell = ell[order]
        a = np.exp(log_a[keep][order])
        b = np.exp(np.minimum(log_a[keep][order] + x0 - ell, 700.0))
        if rounds == 0:
            if near is None:
                sums = _crossing_sums(ell, a, b, x0)
                near = _crossing(ell, a, b, budget, x0, sums)
            if not math.isfinite(near):
                return None
            cut = math.log(q_sum.error + 1e-300) + log_wq + near + q_sum.log_factor <= log_cut
            if np.all(cut[keep]):  # the Q cut leaves every bin in: the same bins again (kept as they are)
                break
            keep &= cut
            sums = None
    event = _Event(ell, a, b, log_wp[keep][order], log_wq[keep][order], x0)
    if sums is not None:  # the tail sums of these very bins, already computed
        object.__setattr__(event, "_sums", sums)
    return event


def _event_error(p_sum: TiltedSum, q_sum: TiltedSum, event: _Event, x_low: float, x_high: float) -> float:
    """The round-off of P(E_x) - e^x Q(E_x) for every x in [x_low, x_high] (A_x within A_{x_low}):
    Cauchy-Schwarz on the bins inside, plus the wrapped tilted mass at the largest weight there."""
    inside = event.ell > x_low
    if not np.any(inside):
        return 0.0

    def norm(log_w: FloatArray) -> float:  # ||e^{log_w}||_2 over the bins inside, in log
        top = float(np.max(log_w[inside]))
        return top + 0.5 * math.log(float(np.sum(np.exp(2.0 * (log_w[inside] - top)))))

    term_p = p_sum.error * math.exp(min(norm(event.log_wp), 700.0)) + \
        p_sum.alias * math.exp(min(float(np.max(event.log_wp[inside])), 700.0))
    term_q = math.exp(min(x_high + q_sum.log_factor + math.log(q_sum.error + 1e-300) + norm(event.log_wq), 700.0))
    return math.exp(-p_sum.log_factor) * term_p + term_q


def certified_lower(p_sum: TiltedSum, q_sum: TiltedSum, budget: float, x0: float) -> float:
    """Largest x found at which P(E) - e^x Q(E) >= budget is certified for E = {label sum in A_x},
    A_x = {s : P_s > e^x Q_s}: then delta(x) >= budget, so epsilon(budget) >= x (-inf if none).

    P_s is bounded below by e^{-log_factor} (values - e - wrapped) e^{log_scale - theta s} and Q_s above
    by e^{log_factor} (values + e) e^{...}; the l2 round-off terms enter through Cauchy-Schwarz on A_x."""
    event = _event(p_sum, q_sum, budget, x0)
    if event is None:
        return -math.inf
    top = event.crossing(budget)
    if not math.isfinite(top):
        return -math.inf
    for factor in (1.01, 1.1, 2.0, 10.0):
        probe = event.crossing(factor * budget)
        slack = _event_error(p_sum, q_sum, event, probe, top)
        if slack <= (factor - 1.0) * budget:
            return event.crossing(budget + slack)  # in [probe, top], where A_x lies within A_probe
    return -math.inf


def certified_lower_delta(p_sum: TiltedSum, q_sum: TiltedSum, x: float, reference: float) -> float:
    """A certified lower bound on delta(x): P(E_x) - e^x Q(E_x) less its round-off (0 if negative)."""
    event = _event(p_sum, q_sum, reference, x, near=x)
    if event is None:
        return 0.0
    return max(0.0, event.value(x) - _event_error(p_sum, q_sum, event, x, x))
