"""The one result type of every accountant's ``certify`` (the interface and the runner: ``accounting.certify``).

Kept below the accountants, which build it, and below the runner that compares them.
"""

from __future__ import annotations

import dataclasses
from typing import Optional, Sequence, Tuple

__all__ = ["Certificate", "worst"]


@dataclasses.dataclass(frozen=True)
class Certificate:
    """One accountant's certified answer at ``delta``.

    ``epsilon`` is an upper bound on the optimal epsilon; ``epsilon_lower`` a lower bound on it (None where
    the accountant certifies none); ``order`` the Renyi order the RDP conversion was read at (nan: epsilon
    0 by the total-variation bound; None for other accountants); ``lattice`` the PLD loss spacing (nan: no
    lattice, e.g. the exact Gaussian); ``assumptions`` and ``citations`` those of the accountant's method
    (what a report must add to the plan's own); ``stopped_by_time``: a time budget ended refinement (the
    bound is valid, only looser than it could be).
    """

    accountant: str
    epsilon: float
    delta: float
    conversion: str  # how the bound became (epsilon, delta): "cks" or "classic" (RDP), "pld"
    epsilon_lower: Optional[float] = None
    order: Optional[float] = None
    lattice: Optional[float] = None
    notes: Tuple[str, ...] = ()
    assumptions: Tuple[str, ...] = ()
    citations: Tuple[str, ...] = ()
    stopped_by_time: bool = False


def worst(found: Sequence[Certificate]) -> Certificate:
    """The certificate of the worst of several alternative events (the worst record of a hierarchy): the
    largest upper bound; its lower end the largest lower bound (each is one on its own event's epsilon, and
    so on the largest of them)."""
    top = max(found, key=lambda c: c.epsilon)
    lowers = [c.epsilon_lower for c in found if c.epsilon_lower is not None]
    return dataclasses.replace(top, epsilon_lower=max(lowers) if lowers else None)
