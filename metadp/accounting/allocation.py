"""Accounting beside random allocation (one pass, each unit in one uniformly random step).

The Monte Carlo certificate of a random-allocation pass lives with its pair in
``metadp.amplification.one_pass``; what needs an accountant is here.
"""

from __future__ import annotations

from metadp.accounting.pld import PldAccountant
from metadp.core.events import Gaussian, PoissonSampled
from metadp.core.validation import check_count, check_delta, check_positive

__all__ = ["poisson_proxy_epsilon"]


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
