"""One question every accountant answers, one result type (``certificate.Certificate``), and the one function
that asks them.

Every accountant registered in ``registry.ACCOUNTANTS`` implements the same interface (in the spirit of
dp-accounting's ``PrivacyAccountant.supports`` and prv_accountant's one result type):

* ``name`` (its registry key), ``timed`` (whether it takes a ``max_seconds`` refinement budget);
* ``supports(event) -> bool``: whether it can interpret the event under its relation;
* ``compose(event, count)``, then ``certify(delta, lower=True) -> Certificate``: a certified upper bound on epsilon at
  ``delta``, a certified lower bound on the optimal epsilon where the accountant has one, the Renyi order
  or the PLD lattice spacing it was read at, its notes, the assumptions of its method and their citations;
* ``trajectory(steps, delta, step_event)``: the certified epsilon after each count of steps (``trajectory``
  here: the smallest over the accountants asked).

``certify`` (the function) runs the named accountant, or every registered one (``"all"``), on a
plan's events and keeps the tightest: plans, plots, event reports, calibration and the trainer's spent
budget all call it, so the rule "which accountant, which bound" is written once. A new accountant is one
class with this interface and one line in ``registry.py``.
"""

from __future__ import annotations

import dataclasses
from typing import Callable, Iterable, List, Optional, Sequence, Tuple, Union, cast

from metadp.accounting._rdp_events import UnsupportedEventError
from metadp.accounting.certificate import Certificate, worst
from metadp.accounting.registry import ACCOUNTANTS, Accountant, accountant_class
from metadp.core import events as ev

__all__ = ["Certificate", "Certification", "NoAccountantError", "certify", "accountant_names", "supporting",
           "trajectory"]


class NoAccountantError(UnsupportedEventError):
    """None of the accountants asked can interpret the events: every one's reason, joined."""

    def __init__(self, errors: Sequence[UnsupportedEventError]):
        ValueError.__init__(self, "; ".join(str(e) for e in errors))
        self.event, self.accountant, self.errors = errors[0].event, "every accountant asked", tuple(errors)


@dataclasses.dataclass(frozen=True)
class Certification:
    """Every accountant's certificate for one question, and the accountants that could not answer it."""

    certificates: Tuple[Certificate, ...]  # in registry order
    refused: Tuple[Tuple[str, str], ...] = ()  # (accountant, why) for each that cannot interpret the events

    @property
    def tightest(self) -> Certificate:
        """The smallest upper bound (the first in registry order on a tie)."""
        return min(self.certificates, key=lambda c: c.epsilon)

    @property
    def epsilon(self) -> float:
        return self.tightest.epsilon

    def get(self, accountant: str) -> Optional[Certificate]:
        """The named accountant's certificate (None if it did not run or refused)."""
        return next((c for c in self.certificates if c.accountant == accountant), None)


def accountant_names(accountant: Union[str, Iterable[str]] = "all") -> Tuple[str, ...]:
    """The registered names that ``accountant`` asks for: one name, several, or ``"all"``.

    Raises:
        ValueError: an unknown name (the message lists the known ones and ``all``).
    """
    if accountant == "all":
        return tuple(ACCOUNTANTS)
    if isinstance(accountant, str):
        if accountant not in ACCOUNTANTS:
            raise ValueError(f"accountant must be one of {tuple(ACCOUNTANTS) + ('all',)}, got {accountant!r}")
        return (accountant,)
    try:
        names = tuple(accountant)
    except TypeError:
        raise ValueError(f"accountant must be one of {tuple(ACCOUNTANTS) + ('all',)}, got {accountant!r}") from None
    if not names or len(set(names)) != len(names) or any(not isinstance(n, str) or n not in ACCOUNTANTS
                                                         for n in names):
        raise ValueError(f"accountants must be distinct names among {tuple(ACCOUNTANTS)}, got {accountant!r}")
    return names


def _fresh(name: str, relation: str, max_seconds: Optional[float]) -> Accountant:
    cls = accountant_class(name)
    return cls(relation=relation, max_seconds=max_seconds) if cls.timed and max_seconds is not None \
        else cls(relation=relation)


def certify(events: Union[ev.Event, Sequence[ev.Event], None], delta: float, *, steps: int = 1,
            relation: str = "add_remove", accountant: Union[str, Iterable[str]] = "all",
            max_seconds: Optional[float] = None, lower: bool = True,
            composed: Optional[Callable[[Accountant], Accountant]] = None) -> Certification:
    """Certifies ``steps`` compositions of ``events`` at ``delta`` with the named accountant(s).

    Args:
        events: one event, or several alternatives whose worst is the guarantee (the worst record of a
            hierarchy: each accountant's bound is the largest over them, ``worst``).
        delta: in (0, 1).
        steps: how many times each event is composed.
        relation: the neighbouring relation of the events.
        accountant: a registered name, several, or ``"all"`` (every accountant that supports the events;
            those that do not are listed in ``refused``).
        max_seconds: the refinement time budget of the accountants that have one (None: their default;
            ``math.inf``: refine to the tolerance or the point budget only, the same number on any machine).
        lower: False asks for upper bounds only (accountants skip the work their lower bound needs, and
            report none): for callers that compare an upper bound with a budget on a hot path.
        composed: instead of ``events`` and ``steps``, a callable ``composed(accountant)`` that composes
            a fresh accountant's history (a ledger's entries).

    Raises:
        ValueError: an unknown accountant name;
        UnsupportedEventError: when no accountant asked for can interpret the events (one named accountant:
            its own error; several: every reason, joined).
    """
    names = accountant_names(accountant)
    alternatives: Tuple[ev.Event, ...] = () if composed is not None else (events,) if isinstance(events, ev.Event) \
        else tuple(cast(Sequence[ev.Event], events))  # events are given where composed is not
    if composed is None and not alternatives:
        raise ValueError("certify needs at least one event (a unit without an event has no guarantee to certify)")
    found: List[Certificate] = []
    refused: List[Tuple[str, str]] = []
    errors: List[UnsupportedEventError] = []
    for name in names:
        try:
            if composed is not None:
                found.append(composed(_fresh(name, relation, max_seconds)).certify(delta, lower))
                continue
            found.append(worst([_fresh(name, relation, max_seconds).compose(e, steps).certify(delta, lower)
                                for e in alternatives]))
        except UnsupportedEventError as err:
            refused.append((name, str(err)))
            errors.append(err)
    if not found:
        if len(errors) == 1:
            raise errors[0]
        raise NoAccountantError(errors)
    return Certification(tuple(found), tuple(refused))


def supporting(events: Union[ev.Event, Sequence[ev.Event]], relation: str = "add_remove",
               accountant: Union[str, Iterable[str]] = "all") -> Tuple[Tuple[str, ...], Tuple[Tuple[str, str], ...]]:
    """(the names among ``accountant`` that support every event, (name, why) for the others): a plan's
    load-time check, without computing any bound."""
    alternatives = (events,) if isinstance(events, ev.Event) else tuple(events)
    ok: List[str] = []
    refused: List[Tuple[str, str]] = []
    for name in accountant_names(accountant):
        acc = accountant_class(name)(relation=relation)
        answers = [acc.why_unsupported(e) for e in alternatives]
        reasons = [r for r in answers if r is not None]
        if reasons:
            refused.append((name, reasons[0]))
        else:
            ok.append(name)
    return tuple(ok), tuple(refused)


def trajectory(step_event: ev.Event, counts: Sequence[int], delta: float, *, relation: str = "add_remove",
               accountant: Union[str, Iterable[str]] = "all") -> Tuple[float, ...]:
    """The certified epsilon after each count of releases of ``step_event``: with several accountants, the
    smallest of their bounds at each count (each is a certified upper bound there).

    Raises:
        UnsupportedEventError: when no accountant asked for can interpret the event.
    """
    names, refused = supporting(step_event, relation, accountant)
    if not names:
        raise NoAccountantError([UnsupportedEventError(step_event, why, accountant=n) for n, why in refused])
    curves = [accountant_class(n)(relation=relation).trajectory(list(counts), delta, step_event=step_event)
              for n in names]
    return tuple(float(min(values)) for values in zip(*curves))
