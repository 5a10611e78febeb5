"""Accounting beside random allocation (one pass, each unit in one uniformly random step).

The Monte Carlo certificate of a random-allocation pass lives with its pair in
``metadp.amplification.one_pass``; what needs an accountant is here.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Tuple

from metadp.accounting.pld import PldAccountant
from metadp.accounting.rdp_accountant import UnsupportedEventError
from metadp.amplification.allocation_bounds import AllocationBounds, one_pass_bounds
from metadp.core.events import Event, Gaussian, PoissonSampled, RandomAllocation
from metadp.core.validation import check_count, check_delta, check_positive

__all__ = ["poisson_proxy_epsilon", "one_pass_comparison", "certified_one_pass_bounds"]


def poisson_proxy_epsilon(z: float, T: int, delta: float) -> float:
    """PROXY for random allocation: Poisson subsampling at rate 1/T, composed T times (PLD, certified
    for Poisson, *not* for random allocation; Feldman & Shenfeld 2025, arXiv:2502.08202, show the two
    are close, with allocation dominated by Poisson at a slightly larger rate plus a small delta).

    Pass it as ``proxy=`` to ``metadp.amplification.random_allocation_epsilon`` to have it reported
    beside the certified bound.
    """
    z = check_positive("z", z)
    T = check_count("T", T, minimum=1)
    delta = check_delta("delta", delta)
    return PldAccountant("add_remove").compose(PoissonSampled(1.0 / T, Gaussian(z)), T).get_epsilon(delta)


def certified_one_pass_bounds(z: float, t: int, delta: float, epochs: int = 1) -> AllocationBounds:
    """``metadp.amplification.one_pass_bounds`` for random allocation with the PLD upper bound as well
    (``metadp.accounting.allocation_pld``): ``upper`` is the smaller of the RDP and PLD bounds (both
    certified) and ``upper_method`` says which ("rdp" where the PLD lattice does not resolve the pass)."""
    found = one_pass_bounds(z, t, delta, epochs)
    try:
        pld = PldAccountant().compose(RandomAllocation(t, Gaussian(z)), epochs).get_epsilon(delta)
    except UnsupportedEventError:
        return found
    if pld < found.upper:
        found = dataclasses.replace(found, upper=pld, lower=min(found.lower, pld), upper_method="pld")
    return found


def one_pass_comparison(sampling: Any, relation: str, inner: Event, steps: int, delta: float, lower: float,
                        upper: float) -> Tuple[str, ...]:
    """The report lines of a one-pass plan (balls in bins, shuffle; ``sampling`` is its scheme, from
    ``metadp.sampling``, a layer above): its certified [lower, upper] and, under
    add/remove with a Gaussian, Poisson sampling at the same rate (1/t) over the same steps (PLD, upper
    bound), with the lower bound's ratio to it: how much Poisson accounting of these batches would understate."""
    interval = (f"one-pass sampling ({sampling.scheme}): the true epsilon lies in the certified interval "
                f"[{_down(lower)}, {_up(upper)}] (lower: the max-over-steps event, "
                "metadp.amplification.allocation_bounds)")
    if relation != "add_remove" or not isinstance(inner, Gaussian):
        return (interval,)
    rate = 1.0 / sampling.steps_per_pass if hasattr(sampling, "steps_per_pass") else sampling.rate
    try:
        poisson = PldAccountant("add_remove").compose(PoissonSampled(rate, inner), steps).get_epsilon(delta)
    except UnsupportedEventError:  # noise outside the PLD accountant's range: no comparison to print
        return (interval,)
    ratio = "" if poisson <= 0 else f"; this sampler's lower bound is {lower / poisson:.3g}x that"
    return (interval, f"Poisson sampling at the same rate ({rate:.6g}) over the same {steps:,} steps would give "
                      f"epsilon <= {_up(poisson)} (PLD), which is NOT a bound for this sampler{ratio}")


def _up(x: float) -> str:
    return "infinity" if math.isinf(x) else f"{math.ceil(x * 1e4) / 1e4:g}"


def _down(x: float) -> str:
    return f"{math.floor(x * 1e4) / 1e4:g}"
