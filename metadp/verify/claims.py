"""The claim an audit tests: the certified privacy profile delta(eps) of metadp's accountants."""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from metadp.accounting import ACCOUNTANTS, UnsupportedEventError
from metadp.accounting.registry import Accountant
from metadp.core.events import Event
from metadp.core.validation import check_count

__all__ = ["accountant_profile", "tightest_accountant"]


def accountant_profile(accountant: Accountant) -> Callable[[np.ndarray], np.ndarray]:
    """delta(eps) of a composed accountant, elementwise over an array of epsilons (upper bounds)."""

    def profile(eps: Any) -> np.ndarray:
        return np.array([accountant.get_delta(float(e)) for e in np.atleast_1d(eps)])

    return profile


def tightest_accountant(event: Event, steps: int, *, relation: str) -> Accountant:
    """The first accountant of PLD, then RDP, that reads ``event``, composed ``steps`` times.

    Args:
        event: one step.
        steps: compositions, >= 1.
        relation: the neighbouring relation the accountant analyses.

    Raises:
        ValueError: when neither accountant can analyse the event (naming it), or on invalid steps.
    """
    steps = check_count("steps", steps, minimum=1)
    for name in ("pld", "rdp"):  # PLD first: tighter where both apply
        try:
            return ACCOUNTANTS[name](relation=relation).compose(event, steps)
        except UnsupportedEventError:
            continue
    raise ValueError(f"no accountant can analyse {event.describe()}")
