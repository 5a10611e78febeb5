"""What a PLD certificate rests on: the method's assumptions and citations, and those of the bound reported
where it is not the lattice's (``PldAccountant.certify``)."""

from __future__ import annotations

import dataclasses
from typing import Protocol, Sequence, Tuple

from metadp.accounting._pld_bounds import PldResult
from metadp.accounting.certificate import Certificate
from metadp.accounting.rdp_accountant import LedgerEntry
from metadp.core import events as ev

__all__ = ["RDP_REPORTED", "REVEALED_COUNT_REPORTED", "pld_certificate"]

# How a note says that the upper end reported is not the lattice's (reports then cite what it rests on)
RDP_REPORTED = "the RDP bound is reported"
REVEALED_COUNT_REPORTED = "the revealed-count bound is reported"

_METHOD = ("privacy loss distributions of the dominating pairs on a lattice, pessimistic by connect-the-dots and "
           "optimistic by one event of the composed output, composed by (tilted) FFT; every truncated mass and the "
           "proven round-off of the cell masses and of the FFT charged to delta (metadp.accounting.pld)")
_ALLOCATION_METHOD = (
    "each pass as a discrete pair that dominates the random-allocation pair (each step's likelihood-ratio factor "
    "rounded to a lattice by mean-preserving randomised rounding, exact Gaussian cell masses, the pass's sum by FFT), "
    "composed by (tilted) FFT; every truncated mass and the proven round-off charged to delta (metadp.accounting."
    "allocation_pld); an upper bound only: the lattice gives no lower bound for this pair, and the interval's lower "
    "end is the scheme's own (the max-over-steps event)")
_RDP_FALLBACK = ("the number reported is the PLD accountant's RDP bound of the same events (smaller than its lattice "
                 "bound here): RDP of the sampled Gaussian (Mironov, Talwar & Zhang 2019), composed, and converted by "
                 "Canonne, Kamath & Steinke 2020, Prop. 12, minimised over the Renyi order")
_REVEALED_COUNT_FALLBACK = ("the number reported is the revealed-count bound (metadp.accounting._revealed_count): the "
                            "count of steps that sampled the unit revealed, a sum over its binomial law of composed "
                            "Gaussian profiles")


def _mentions(event: ev.Event, kind: type) -> bool:
    """Whether ``event`` is or contains (in any field, at any depth) an event of type ``kind``."""
    if isinstance(event, kind):
        return True
    for field in dataclasses.fields(event):
        value = getattr(event, field.name)
        values = value if isinstance(value, tuple) else (value,)
        if any(isinstance(v, ev.Event) and _mentions(v, kind) for v in values):
            return True
    return False


class _Source(Protocol):
    """What a certificate reads of the accountant that computed it (``pld.PldAccountant``, which imports this
    module)."""

    @property
    def name(self) -> str: ...
    @property
    def conversion(self) -> str: ...
    @property
    def citations(self) -> Tuple[str, ...]: ...
    @property
    def ledger(self) -> Sequence[LedgerEntry]: ...


def pld_certificate(accountant: _Source, result: PldResult) -> Certificate:
    """``result`` (a ``PldResult`` of ``accountant``'s ledger) as the ``Certificate`` every accountant returns."""
    allocation = any(_mentions(entry.event, ev.RandomAllocation) for entry in accountant.ledger)
    assumptions = [_ALLOCATION_METHOD if allocation else _METHOD]
    citations = list(accountant.citations)
    if any(n.endswith(RDP_REPORTED) for n in result.notes):
        assumptions.append(_RDP_FALLBACK)
        citations += ["mironov2017renyi", "mironov2019sampled", "canonne2020discrete", "asoodeh2021three"]
    if any(n.endswith(REVEALED_COUNT_REPORTED) for n in result.notes):
        assumptions.append(_REVEALED_COUNT_FALLBACK)
    return Certificate(accountant.name, result.epsilon_upper, result.delta, accountant.conversion,
                       epsilon_lower=result.epsilon_lower, lattice=result.h, notes=result.notes,
                       assumptions=tuple(assumptions), citations=tuple(dict.fromkeys(citations)),
                       stopped_by_time=result.stopped_by_time)
