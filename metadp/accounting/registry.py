"""The accountants by name: the one table every caller (plans, calibration, the ledger, the trainer's
budget, the CLI) looks them up in, through ``metadp.accounting.certify``. A new accountant is a class with
the interface that module describes and one entry here; ``tests/accounting/test_certify.py`` runs the
interface's contract on every entry."""

from __future__ import annotations

from typing import Any, Dict, Iterable, Optional, Protocol, Tuple

from metadp.accounting.certificate import Certificate
from metadp.accounting.pld import PldAccountant
from metadp.core import events as ev
from metadp.core._typing import FloatArray
from metadp.core.validation import lookup
from metadp.accounting.rdp_accountant import LedgerEntry, RdpAccountant

__all__ = ["ACCOUNTANTS", "Accountant", "AccountantClass", "accountant_class", "make_accountant"]


class Accountant(Protocol):
    """The interface every registered accountant implements (``metadp.accounting.certify``), for type checking."""

    @property
    def name(self) -> str: ...
    @property
    def timed(self) -> bool: ...
    @property
    def relation(self) -> str: ...
    @property
    def conversion(self) -> str: ...
    @property
    def citations(self) -> Tuple[str, ...]: ...
    @property
    def ledger(self) -> Tuple[LedgerEntry, ...]: ...
    def compose(self, event: ev.Event, count: int = 1) -> "Accountant": ...
    def why_unsupported(self, event: ev.Event) -> Optional[str]: ...
    def supports(self, event: ev.Event) -> bool: ...
    def certify(self, delta: float, lower: bool = True) -> Certificate: ...
    def get_epsilon(self, delta: float) -> float: ...
    def get_epsilon_and_order(self, delta: float) -> Tuple[float, float]: ...
    def get_delta(self, epsilon: float) -> float: ...
    def trajectory(self, steps: Iterable[int], delta: float, step_event: Optional[ev.Event] = None) -> FloatArray: ...


class AccountantClass(Protocol):
    """A registered accountant class: its class attributes, and its constructor (``relation`` and options)."""

    @property
    def name(self) -> str: ...
    @property
    def timed(self) -> bool: ...
    @property
    def citations(self) -> Tuple[str, ...]: ...
    def __call__(self, *args: Any, **kwargs: Any) -> Accountant: ...


ACCOUNTANTS: Dict[str, AccountantClass] = {"rdp": RdpAccountant, "pld": PldAccountant}


def accountant_class(name: str) -> AccountantClass:
    """The accountant class registered as ``name``.

    Raises:
        ValueError: an unknown name (the message lists the known ones).
    """
    return lookup("accountant", name, ACCOUNTANTS)


def make_accountant(name: str, relation: str = "add_remove", **options: Any) -> Accountant:
    """A fresh accountant ``name`` under ``relation`` (options go to its constructor)."""
    return accountant_class(name)(relation, **options)
