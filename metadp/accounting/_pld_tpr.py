"""Certified *lower* bounds on the best membership test's TPR at given FPRs, from the PLD accountant's lower
lattice (``_pld_lattice``: "one event"), the other end of the bracket ``metadp.accounting.risk`` prints.

A test is any (randomised) function of the output. The lower lattice labels each step's output by its loss
cell and composes the labels: for a set A of label sums, E_A = "every step's cell is kept and the labels sum
into A" is an event of the composed output, so rejecting H0 on E_A is a test, with TPR P(E_A) and FPR Q(E_A).
``_pld_event`` bounds both with their round-off: P(E_A) from below, Q(E_A) from above. Taking A_j = the bins
whose loss ratio is at least the j-th (the Neyman-Pearson order of the labels) gives points (FPR_j upper,
TPR_j lower); a test that takes A_{j+1} and adds bin j with probability g has FPR <= (1 - g) FPR_{j+1} +
g FPR_j and TPR >= (1 - g) TPR_{j+1} + g TPR_j, so the lines between the points are tests too, and the best
test's TPR at FPR alpha is at least that piecewise-linear curve read at alpha (and at least alpha: guessing).
The advantage (total variation) is at least max_j TPR_j - FPR_j.

The tests are on the composed pairs of each direction (H1 the first distribution); a lower bound on the
mechanism where named neighbouring datasets produce those pairs at every step. Where a pair dominates one step
only, its ``Attained`` pairs are used instead, their total-variation slack subtracted from each TPR, as the
accountant's lower epsilon does (``PldAccountant._attained_lower``); where no one pair of datasets attains
the composition, there is no lower bound (None).

The label sums are composed untilted (the FFT window on P's own bulk, Q's sum tilted onto it): the FPRs asked
(1e-4 and up) put the tests' boundaries where the masses are far above the FFT's round-off.
"""

from __future__ import annotations

import math
from typing import List, Optional, Sequence, Tuple

import numpy as np

from metadp.accounting import _pld_bounds as _bounds
from metadp.accounting import _pld_compose as _comp
from metadp.accounting import _pld_lattice as _lat
from metadp.accounting import _pld_window as _win
from metadp.accounting._pld_event import _event
from metadp.accounting._pld_lattice import LiveItem, Pair
from metadp.core._typing import FloatArray

__all__: List[str] = []

_U = 2.0**-52


def _curve(p_sum: _comp.TiltedSum, q_sum: _comp.TiltedSum, budget: float) -> Optional[Tuple[FloatArray, FloatArray]]:
    """(FPR upper bounds, TPR lower bounds) of the tests E_{A_j}, A_j the kept bins from the j-th in loss-ratio
    order up (module docstring), FPRs decreasing; None where no bin is usable. The round-off of P(E_A) is
    e^{-log_factor} (error ||w_P||_{2,A} + alias max_A w_P) and that of Q(E_A) e^{log_factor} error ||w_Q||_{2,A}
    (Cauchy-Schwarz on A, as ``_pld_event._event_error``), each float sum raised by its count of terms' ulps."""
    event = _event(p_sum, q_sum, budget, 0.0, near=0.0)
    if event is None:
        return None
    usable = event.a > 0.0  # a bin whose P-mass underflowed adds nothing to P(E_A): A leaves it out
    ell, a = event.ell[usable], event.a[usable]
    log_wp, log_wq = event.log_wp[usable], event.log_wq[usable]
    if not len(ell):
        return None
    n = len(ell)
    top_a = np.cumsum(a[::-1])[::-1]
    with np.errstate(over="ignore", invalid="ignore"):  # Q-masses by their loss ratio (an overflow: FPR 1)
        top_b = np.cumsum(np.exp(np.log(a) - ell)[::-1])[::-1]

    def log_norms(log_w: FloatArray) -> FloatArray:  # log ||w||_{2, A_j} for every j
        return 0.5 * np.logaddexp.accumulate(2.0 * log_w[::-1])[::-1]

    max_wp = np.maximum.accumulate(log_wp[::-1])[::-1]
    err_p = math.exp(-p_sum.log_factor) * (p_sum.error * np.exp(np.minimum(log_norms(log_wp), 700.0))
                                           + p_sum.alias * np.exp(np.minimum(max_wp, 700.0)))
    err_q = math.exp(q_sum.log_factor) * q_sum.error * np.exp(np.minimum(log_norms(log_wq), 700.0))
    margin = (n + 4) * _U
    fpr = np.minimum(top_b * (1.0 + margin) + err_q, 1.0)
    tpr = np.maximum(top_a * (1.0 - margin) - err_p, 0.0)
    return fpr, tpr


def _read(fpr: FloatArray, tpr: FloatArray, alpha: float) -> float:
    """The piecewise-linear curve through (fpr_j, tpr_j) (fpr decreasing in j) at alpha: the best point at or
    below alpha, mixed with the next one up."""
    inside = np.nonzero(fpr <= alpha)[0]
    if not len(inside):
        return alpha
    j = int(inside[0])  # the largest set whose FPR bound is within alpha
    value = float(tpr[j])
    if j > 0 and fpr[j - 1] > fpr[j]:
        g = (alpha - fpr[j]) / (fpr[j - 1] - fpr[j])
        value = max(value, (1.0 - g) * value + g * float(tpr[j - 1]))
    return max(alpha, value * (1.0 - 4 * _U))


def _direction(pairs: Sequence[Tuple[Pair, int]], fprs: Sequence[float], h: float, tau: float, tail: float,
               max_memory: int) -> Tuple[List[float], float]:
    """(TPR lower bound at each FPR, advantage lower bound) of one direction's composed pairs at spacing h."""
    lattices = [(_lat.lattice_cached(pair, h, tail), c) for pair, c in pairs]
    p_items, q_items = _bounds._items(lattices, "down"), _bounds._items(lattices, "down_q")
    if any(not np.any(item.pmf > 0) for item in p_items + q_items):  # no mass kept: only guessing is certified
        return list(fprs), 0.0
    tilted = _comp.tilt(p_items, 0.0)
    first, size, _, outside = _win.window(p_items, tilted, tau, max_memory)
    p_sum = _comp.compose(tilted, first, size, h, alias=outside)
    theta_q, _ = _comp.choose_theta(q_items, h, x=tilted.mean, start=h)
    q_sum = _comp.compose(_comp.tilt(q_items, theta_q), first, size, h)
    curve = _curve(p_sum, q_sum, min(fprs))
    if curve is None:
        return list(fprs), 0.0
    return [_read(*curve, alpha) for alpha in fprs], max(0.0, float(np.max(curve[1] - curve[0])))


def tpr_lower(items: Sequence[LiveItem], fprs: Sequence[float], reference: float, max_points: int, max_memory: int,
              slack: float = 0.0) -> Tuple[Tuple[float, ...], float]:
    """(TPR lower bounds at ``fprs``, advantage lower bound) of the composed ``items`` (pairs, count): the larger
    over the directions, less ``slack`` (the attained pairs' total-variation slack, module docstring);
    truncations sized for masses near ``reference``."""
    per_direction, h, tau, n = _bounds.risk_lattice(items, reference, max_points)
    best, advantage = list(fprs), 0.0
    for pairs in per_direction:
        tprs, adv = _direction(pairs, fprs, h, tau, tau / n, max_memory)
        best = [max(b, t) for b, t in zip(best, tprs)]
        advantage = max(advantage, adv)
    return tuple(float(max(a, t - slack)) for a, t in zip(fprs, best)), float(max(0.0, advantage - slack))
