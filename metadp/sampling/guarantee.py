"""One guarantee type, shared by plan reports (``metadp.units``) and training runs (``metadp.training``).

A ``Guarantee`` says whom a bound protects (``unit``), between which neighbouring datasets
(``relation``), against whom (``adversary``), what one charge composes (``event``, or several candidate
events of which the worst is reported) and how often it is charged (``charge``: per step, per pass or
per visit; ``steps``: how many charges, where known), the theorems it rests on (``basis`` in words,
``citations`` by key) and, once an accountant has certified it, its epsilon interval
(``epsilon_lower`` <= optimal epsilon <= ``epsilon``).

The positional order of the first fields is that of the trainer's former ``View`` (``key``, ``unit``,
``adversary``, ``relation``, ``charge``, ``event``, ``basis``, ``reason``); the plan report's former
``UnitView`` names read as properties (``events``, ``how``).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Dict, Optional, Tuple

from metadp.core import events as ev

__all__ = ["Guarantee", "EVERYONE"]

EVERYONE = "anyone who sees the released noisy aggregates and the model"


@dataclasses.dataclass(frozen=True)
class Guarantee:
    """One privacy guarantee of a plan or a run (module docstring).

    Attributes:
        key: file-name-safe name ("task", "record", "record-vs-server", ...); the unit by default.
        unit: "record", "task" or "group".
        adversary: who may see what, in words.
        relation: "add_remove" or "substitute".
        charge: "step" (event per release), "pass" (per pass) or "visit" (per visit of the worst record).
        event: the event charged, or None when this unit has no guarantee (``reason`` says why).
        basis: the theorem it rests on, in words.
        reason: the derivation the report carries (why this event), or why there is no guarantee.
        alternatives: further candidate events (the worst record of a hierarchy): the largest epsilon
            over ``events`` is the bound.
        steps: how many charges the plan composes (None: decided by the run).
        primary: the plan's own unit (reported first).
        citations: keys in ``metadp.citations`` of the theorems used.
        epsilon, epsilon_lower: the certified interval, once an accountant has computed it.
        accountant: the accountant that certified it.
        notes: the accountant's notes on the bound.
    """

    key: str
    unit: str
    adversary: str
    relation: str
    charge: str
    event: Optional[ev.Event]
    basis: str
    reason: str = ""
    alternatives: Tuple[ev.Event, ...] = ()
    steps: Optional[int] = None
    primary: bool = False
    citations: Tuple[str, ...] = ()
    epsilon: Optional[float] = None
    epsilon_lower: Optional[float] = None
    accountant: Optional[str] = None
    notes: Tuple[str, ...] = ()

    @classmethod
    def of_plan(cls, unit: str, relation: str, events: Tuple[ev.Event, ...], steps: int, how: str,
                primary: bool = False, *, charge: str = "step", basis: str = "",
                citations: Tuple[str, ...] = ()) -> "Guarantee":
        """A plan's view of one unit: ``events`` (one, or alternatives of which the worst counts) over ``steps``."""
        return cls(unit, unit, EVERYONE, relation, charge, events[0], basis, how, tuple(events[1:]), steps,
                   primary, citations)

    @property
    def events(self) -> Tuple[ev.Event, ...]:
        """Every candidate event of one charge (the largest epsilon among them is the bound)."""
        return () if self.event is None else (self.event,) + self.alternatives

    @property
    def how(self) -> str:
        """The derivation, for the report's assumptions (the former ``UnitView.how``)."""
        return self.reason

    def certified(self, epsilon: float, epsilon_lower: Optional[float], accountant: str,
                  notes: Tuple[str, ...] = ()) -> "Guarantee":
        """This guarantee with the interval an accountant certified."""
        return dataclasses.replace(self, epsilon=epsilon, epsilon_lower=epsilon_lower, accountant=accountant,
                                   notes=tuple(notes))

    def other_unit(self) -> Dict[str, Any]:
        """The plan report's ``other_units`` entry (the keys of ``metadp plan --json``; ``view`` too where the
        guarantee's key is not its unit, e.g. ``record-vs-server``)."""
        out = {"unit": self.unit, "relation": self.relation, "epsilon": self.epsilon,
               "epsilon_lower": self.epsilon_lower, "accountant": self.accountant, "how": self.how,
               "notes": list(self.notes)}
        if self.key != self.unit:
            out["view"] = self.key
        return out
