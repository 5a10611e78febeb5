"""A run's ledgers: one hash-chained ledger per privacy view (``ledger-<view>.jsonl``), opened or created in
the run's folder, checked against what a resumed run would release, and charged before each release is used
(``metadp.accounting.ledger``). ``_Run`` (``run_state``) holds one ``ViewLedgers``."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from typing import Dict, Optional

from metadp.accounting.ledger import Ledger
from metadp.training.run.config import TrainConfig

__all__ = ["ViewLedgers", "json_safe"]


def json_safe(d: dict) -> dict:
    """``d`` with non-finite floats as their repr (JSON has no infinity): a ledger's and run.json's config."""
    return {k: (repr(v) if isinstance(v, float) and not math.isfinite(v) else v) for k, v in d.items()}


class ViewLedgers:
    """The ledgers of ``views`` (those with an event), keyed by view."""

    def __init__(self, views, config: TrainConfig):
        self.views, self.config = views, config
        self._open: Dict[str, Ledger] = {}

    def get(self, key: str) -> Optional[Ledger]:
        return self._open.get(key)

    def items(self):
        return self._open.items()

    def mismatch(self, found: Dict[str, Ledger]) -> Optional[str]:
        """Why the ledgers already in a run folder (file name -> ledger) cannot be continued by this run,
        or None: each must belong to one of this run's views, under its relation and unit, and hold only
        that view's event (the budget schedule composes one event; mixing would mis-state the spent
        budget)."""
        expected = {f"ledger-{v.key}.jsonl": v for v in self.views if v.event is not None}
        missing = sorted(set(expected) - set(found))
        if found and missing:  # a run creates all its ledgers at once: one is gone, with its spent budget
            return (f"{', '.join(missing)} is missing while {', '.join(sorted(found))} is there: the releases it "
                    "recorded would be forgotten (restore it)")
        for name, ledger in found.items():
            v = expected.get(name)
            if v is None:
                return f"{name} belongs to a view this run does not have ({', '.join(expected) or 'none'})"
            if (ledger.relation, ledger.unit) != (v.relation, v.unit):
                return (f"{name} is a {ledger.unit} ledger under the {ledger.relation} relation, this run's {v.key} "
                        f"view is {v.unit} under {v.relation}")
            other = next((r for r in ledger.entries if r.event != v.event), None)
            if other is not None:
                return (f"{name} entry {other.index} released {other.event.describe()}, this run's {v.key} view "
                        f"releases {v.event.describe()}")
        return None

    def open(self, out: Path, resume: bool) -> None:
        """Opens each view's ledger in ``out`` (repairing a torn final line when resuming) or creates it."""
        c = self.config
        for v in self.views:
            if v.event is None:
                continue
            path = out / f"ledger-{v.key}.jsonl"
            meta = {"config": json_safe(dataclasses.asdict(c)), "view": v.key, "adversary": v.adversary,
                    "charge": v.charge, "basis": v.basis, "note": v.reason}
            self._open[v.key] = (Ledger.open(path, repair=True) if resume and path.exists()
                                   else Ledger.create(path, v.relation, v.unit, c.delta, metadata=meta))

    def charge(self, step: int, new_pass: bool, visits_added: int) -> None:
        """Appends this step's releases to every view's ledger (before anything uses them)."""
        for v in self.views:
            ledger = self._open.get(v.key)
            if ledger is None:
                continue
            if v.charge == "step" or (v.charge == "pass" and new_pass):
                ledger.append(v.event, step=step)
            elif v.charge == "visit" and visits_added > 0:
                ledger.append(v.event, visits_added, step=step)

    def state(self) -> Dict[str, tuple]:
        """What a checkpoint keeps of each ledger: (entries, head hash)."""
        return {k: (len(ledger.entries), ledger.head) for k, ledger in self._open.items()}

    def check(self, saved: Dict[str, tuple]) -> None:
        """Raises ``LedgerError`` unless each ledger extends what the checkpoint saw (``state``)."""
        for key, (length, head) in saved.items():
            self._open[key].check_prefix(length, head)

    def close(self) -> None:
        for ledger in self._open.values():
            ledger.close()
