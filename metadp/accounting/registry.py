"""The accountants by name: the one table every caller (plans, calibration, the ledger, the trainer's
budget, the CLI) looks them up in, through ``metadp.accounting.certify``. A new accountant is a class with
the interface that module describes and one entry here; ``tests/accounting/test_certify.py`` runs the
interface's contract on every entry."""

from __future__ import annotations

from typing import Dict, Type

from metadp.accounting.pld import PldAccountant
from metadp.core.validation import lookup
from metadp.accounting.rdp_accountant import RdpAccountant

__all__ = ["ACCOUNTANTS", "accountant_class", "make_accountant"]

ACCOUNTANTS: Dict[str, Type] = {"rdp": RdpAccountant, "pld": PldAccountant}


def accountant_class(name: str) -> Type:
    """The accountant class registered as ``name``.

    Raises:
        ValueError: an unknown name (the message lists the known ones).
    """
    return lookup("accountant", name, ACCOUNTANTS)


def make_accountant(name: str, relation: str = "add_remove", **options):
    """A fresh accountant ``name`` under ``relation`` (options go to its constructor)."""
    return accountant_class(name)(relation, **options)
