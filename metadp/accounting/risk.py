"""Certified attack risk: how well the best membership test can tell whether a unit was used (issue 33).

An attacker sees the output and tests H0 "the unit was not used" (neighbour D') against H1 "it was" (D). At
false-positive rate (FPR) alpha, the best test's true-positive rate (TPR) is 1 - f(alpha), f the trade-off
function of the mechanism's pair (Dong, Roth & Su 2022, "Gaussian differential privacy", JRSS-B, arXiv:1905.02383).
A pair with privacy profile delta(eps) (in both orders) satisfies, for every eps >= 0 and every test,

    TPR <= e^eps FPR + delta(eps)               (the (eps, delta) inequality on the rejection region),
    TPR <= 1 - e^-eps (1 - FPR - delta(eps))    (the same on its complement, the other order),

and the infimum over eps of the smaller is 1 - f(alpha) for the pair itself (ibid., Prop. 2.12: f is the upper
envelope of the (eps, delta(eps)) lines). So any certified upper bound on delta(eps), at any set of eps, gives a
certified upper bound on the TPR at every FPR; the finer the set, the closer to the pair's own curve. The
advantage max(TPR - FPR) is the total variation distance, delta(0).

Lower ends: the best attack does at least as well as any one test against named neighbouring datasets, so a
certified lower bound on some test's TPR at FPR alpha (and on its advantage) bounds the best attack from below:
the exact route's mu at its lower rounding bound, and the PLD accountant's lower lattice, read as tests
(``_pld_tpr``: events of the composed output whose P-mass is bounded below and Q-mass above). Together with the
upper end this is a certified bracket on the best attack's TPR. The RDP route has no lower end.

Three routes, best first:

* **exact mu-GDP**: a composition of plain Gaussian releases (no sampling) is mu-GDP with mu^2 = sum of the
  squared sensitivity-to-noise ratios, and its curve is TPR = Phi(Phi^-1(FPR) + mu), advantage 2 Phi(mu / 2) - 1
  (ibid., Thm. 2.7, Cor. 3.3), computed with mu at its upper rounding bound and the result raised by 1e-12
  relative (scipy's Phi and Phi^-1 are accurate to a few ulps);
* **PLD profile**: the PLD accountant's certified upper profile (``_pld_bounds.profile_upper``: one composed
  pessimistic lattice per order, every truncation charged), minimised over a grid of eps refined near each
  FPR's minimum;
* **RDP-implied**: where the PLD accountant cannot compose the events, the RDP accountant's delta(eps) at the
  same grid: valid, and looser (said in the result's ``method``).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, cast

import numpy as np
from numpy.typing import ArrayLike
from scipy import special

from metadp.accounting._pld_bounds import profile_upper
from metadp.accounting._pld_gaussian import gaussian_mu
from metadp.accounting._pld_lattice import LiveItem, PairItem
from metadp.accounting._pld_tpr import tpr_lower
from metadp.accounting.pld import PldAccountant, _attained
from metadp.accounting.registry import Accountant
from metadp.core._typing import FloatArray

__all__ = ["FPRS", "AttackRisk", "tpr_from_profile", "attack_risk", "gaussian_tpr", "bracket"]

FPRS = (1e-3, 1e-2, 1e-1)  # the false-positive rates reports print (jax_privacy's docs ask for the low ones)
_UP = 1.0 + 1e-12  # the relative margin on the closed forms (special functions to a few ulps)
_DOWN = 1.0 - 1e-12
_GRID = np.unique(np.concatenate([np.linspace(0.0, 2.0, 81), np.geomspace(2.0, 2000.0, 200)]))
_DENSE = np.unique(np.concatenate([np.linspace(0.0, 2.0, 241), np.geomspace(2.0, 2000.0, 400)]))


@dataclasses.dataclass(frozen=True)
class AttackRisk:
    """Certified bounds on the best membership attack against one unit.

    Attributes:
        fpr: the false-positive rates.
        tpr: at each, an upper bound on the true-positive rate of every test (attack).
        advantage: an upper bound on max over tests of TPR - FPR (the total variation distance).
        method: "exact mu-GDP", "PLD profile", "RDP-implied (looser)" or "not private".
        mu: the mu of mu-GDP where the route is exact, else None.
        tpr_lower: at each FPR, a lower bound on the TPR of the best test against named neighbouring datasets
            (the best attack does at least this well), or None where the route gives none (RDP; a pair that no
            one pair of datasets attains).
        advantage_lower: the same for the advantage, or None.
    """

    fpr: Tuple[float, ...]
    tpr: Tuple[float, ...]
    advantage: float
    method: str
    mu: Optional[float] = None
    tpr_lower: Optional[Tuple[float, ...]] = None
    advantage_lower: Optional[float] = None

    def to_dict(self) -> Dict[str, Any]:
        return {"bound": "upper", "of": "the best membership test's TPR at each FPR, and its advantage",
                "fpr": list(self.fpr), "tpr": list(self.tpr), "advantage": self.advantage, "method": self.method,
                "mu": self.mu, "tpr_lower": None if self.tpr_lower is None else list(self.tpr_lower),
                "advantage_lower": self.advantage_lower,
                "lower_of": "the best test against named neighbouring datasets (the attack does at least this well)"}


def gaussian_tpr(mu: float, fpr: ArrayLike) -> FloatArray:
    """Phi(Phi^-1(fpr) + mu): the best test's TPR against mu-GDP (no margin)."""
    return cast(FloatArray, special.ndtr(special.ndtri(np.asarray(fpr, dtype=np.float64)) + mu))


def tpr_from_profile(fpr: float, epsilons: ArrayLike, deltas: ArrayLike,
                     refine: Optional[Callable[[FloatArray], FloatArray]] = None) -> float:
    """The smallest of e^eps fpr + delta and 1 - e^-eps (1 - fpr - delta) over the (eps, delta) given, each an
    upper bound on the profile; ``refine`` (eps -> certified deltas) is asked for a finer grid around the best."""
    eps, delta = np.asarray(epsilons, dtype=np.float64), np.asarray(deltas, dtype=np.float64)

    def best(e: FloatArray, d: FloatArray) -> Tuple[float, int]:
        with np.errstate(over="ignore"):
            bounds = np.minimum(np.exp(e) * fpr + d, 1.0 - np.exp(-e) * (1.0 - fpr - d))
        i = int(np.argmin(bounds))
        return float(bounds[i]), i

    value, i = best(eps, delta)
    if refine is not None and len(eps) > 2:
        lo, hi = eps[max(i - 1, 0)], eps[min(i + 1, len(eps) - 1)]
        fine = np.linspace(lo, hi, 41)
        value = min(value, best(fine, refine(fine))[0])
    return min(1.0, max(value * _UP, fpr))  # the float arithmetic of e^eps fpr + delta, rounded upward


def attack_risk(accountant: Accountant, fprs: Sequence[float] = FPRS, lower: bool = True) -> AttackRisk:
    """The certified attack risk of what ``accountant`` (a ``PldAccountant`` or ``RdpAccountant``) has composed;
    ``lower=False`` gives no lower ends (a calibration needs the upper end only; a claim whose lower end is not the
    mechanism's has none)."""
    fprs = tuple(float(a) for a in fprs)
    if any(not 0.0 < a < 1.0 for a in fprs):
        raise ValueError(f"each FPR must be in (0, 1), got {fprs}")
    items: Optional[List[PairItem]] = getattr(accountant, "_items", None)  # a PLD accountant's
    if items is not None and any(pairs is None for pairs, _ in items):
        return AttackRisk(fprs, tuple(1.0 for _ in fprs), 1.0, "not private")
    if items is not None and not items:
        return AttackRisk(fprs, fprs, 0.0, "exact mu-GDP", 0.0)
    mu = gaussian_mu(items) if items is not None else None
    if mu is not None:
        m, low = mu[0] * (1.0 + mu[1]), mu[0] * (1.0 - mu[1])
        tpr = tuple(float(t) for t in np.minimum(gaussian_tpr(m, fprs) * _UP, 1.0))
        advantage = min(1.0, (2.0 * float(special.ndtr(m / 2.0)) - 1.0) * _UP + 1e-300)
        if not lower:
            return AttackRisk(fprs, tpr, advantage, "exact mu-GDP", mu[0])
        tpr_low = tuple(float(t) for t in np.maximum(gaussian_tpr(low, fprs) * _DOWN, fprs))
        advantage_low = max(0.0, (2.0 * float(special.ndtr(low / 2.0)) - 1.0) * _DOWN)
        return AttackRisk(fprs, tpr, advantage, "exact mu-GDP", mu[0], tpr_low, advantage_low)
    if items is not None:  # an overflow or invalid operation raises (as in the accountant's own bounds): the
        # profile cannot be certified at this scale, and the caller turns to RDP (metadp.plan_risk)
        with np.errstate(over="raise", invalid="raise"):
            pld = cast(PldAccountant, accountant)  # (it has items)
            reader = profile_upper(cast(List[LiveItem], items), 1e-3 * min(fprs), pld.max_fft_size, pld.max_memory)

        def deltas(eps: FloatArray) -> FloatArray:
            with np.errstate(over="raise", invalid="raise"):
                return reader(eps)
        # many FPRs (a curve): one denser grid read once, instead of a refinement around each FPR's best eps
        method, grid_eps = "PLD profile", (_GRID if len(fprs) <= 8 else _DENSE)
    else:  # each delta an RDP conversion: a coarser grid
        def deltas(eps: FloatArray) -> FloatArray:
            return np.array([min(1.0, float(accountant.get_delta(float(e)))) for e in eps])
        method, grid_eps = "RDP-implied (looser)", _GRID[::4]
    with np.errstate(over="raise", invalid="raise"):
        grid = deltas(grid_eps)
    tpr = tuple(tpr_from_profile(a, grid_eps, grid, deltas if len(fprs) <= 8 else None) for a in fprs)
    advantage = min(1.0, float(grid[0]) * _UP)
    if items is None or not lower:
        return AttackRisk(fprs, tpr, advantage, method)
    found = _lower(items, fprs, cast(PldAccountant, accountant))
    if found is None:
        return AttackRisk(fprs, tpr, advantage, method)
    return AttackRisk(fprs, tpr, advantage, method, None, *bracket(found[0], found[1], tpr, advantage))


def bracket(tpr_lower: Sequence[float], advantage_lower: float, tpr: Sequence[float],
            advantage: float) -> Tuple[Tuple[float, ...], float]:
    """The lower ends clamped to the upper ones. The two ends come from different computations, each certified, so a
    lower end can exceed its upper end only by the float rounding of both (1e-9 relative here); beyond that one of
    them is wrong, and ArithmeticError says so (callers then give no certificate rather than a crossed bracket)."""
    pairs = list(zip(tpr_lower, tpr)) + [(advantage_lower, advantage)]
    if any(lo > up * (1.0 + 1e-9) + 1e-15 for lo, up in pairs):
        raise ArithmeticError(f"a certified lower end is above its upper end: {pairs}")
    return tuple(min(lo, up) for lo, up in zip(tpr_lower, tpr)), min(advantage_lower, advantage)


def _lower(items: Sequence[PairItem], fprs: Sequence[float],
           accountant: PldAccountant) -> Optional[Tuple[Tuple[float, ...], float]]:
    """(TPR lower bounds, advantage lower bound) from the PLD lower lattice, on the pairs named datasets attain
    (``_pld_tpr``), or None where no one pair of datasets attains the composition."""
    named = [_attained(pairs) for pairs, _ in items]
    if len({a.datasets for a in named if a is not None}) > 1:
        return None
    lower_items = cast(List[LiveItem], [(pairs if a is None else a.pairs, c) for a, (pairs, c) in zip(named, items)])
    slack = sum(c * a.slack for a, (_, c) in zip(named, items) if a is not None)
    try:  # as the upper end: an overflow or invalid operation is no certificate (then no lower end, said as None)
        with np.errstate(over="raise", invalid="raise"):
            return tpr_lower(lower_items, fprs, 1e-3 * min(fprs), accountant.max_fft_size, accountant.max_memory,
                             slack)
    except (ArithmeticError, MemoryError):
        return None
