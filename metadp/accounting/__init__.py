"""Accountants: they interpret events (``metadp.core.events``, re-exported here) as privacy guarantees.

``RdpAccountant`` (fast, loose) and ``PldAccountant`` (tight: a certified interval; its event -> pairs
table in ``_pld_pairs``, its lattice bounds in ``_pld_bounds`` and ``_pld_lattice``), looked up by name in
``registry.ACCOUNTANTS``, each answering ``certify(delta) -> Certificate``; ``certify.certify`` asks the named
accountant or all of them and keeps the tightest (the one path every caller takes); ``calibration`` (noise, steps or rate for a target epsilon, certified);
``adaptive_clipping`` (the noisy-count noise of private quantile clipping); ``ledger`` (the append-only,
hash-chained record of every release a training run made, read back by an accountant; its file format and
checks in ``_ledger_file``);
``allocation`` (the Poisson proxy beside a random-allocation pass).
"""

from metadp.accounting.ledger import Ledger, LedgerCorruptError, LedgerError, TornLedgerError
from metadp.accounting.pld import PldAccountant, PldResult
from metadp.accounting.rdp_accountant import (
    DEFAULT_ORDERS,
    RELATIONS,
    RdpAccountant,
    UnsupportedEventError,
    event_rdp,
)
from metadp.accounting.registry import ACCOUNTANTS, accountant_class, make_accountant
from metadp.accounting.certificate import Certificate
from metadp.accounting.certify import Certification, NoAccountantError, certify
from metadp.core.conversions import delta_from_rdp, epsilon_from_rdp
from metadp.core.events import (
    Composed,
    EpisodicSampled,
    Event,
    FixedSizeSampled,
    Gaussian,
    Group,
    Laplace,
    NonPrivate,
    NoOp,
    PoissonSampled,
    ReplacementSampled,
    PoolSubstitution,
    RandomAllocation,
    SelfComposed,
)

__all__ = [
    "Event", "NoOp", "NonPrivate", "Gaussian", "Laplace", "PoissonSampled", "ReplacementSampled", "FixedSizeSampled",
    "RandomAllocation",
    "SelfComposed", "Composed", "EpisodicSampled", "PoolSubstitution", "Group", "RdpAccountant", "PldAccountant", "PldResult",
    "UnsupportedEventError", "event_rdp", "DEFAULT_ORDERS", "RELATIONS", "epsilon_from_rdp", "delta_from_rdp",
    "ACCOUNTANTS", "accountant_class", "make_accountant", "Ledger", "LedgerError", "LedgerCorruptError",
    "TornLedgerError", "Certificate", "Certification", "NoAccountantError", "certify",
]
