"""A training run's ``privacy_report.json`` in the schema of ``metadp plan --json`` (issue 15: one guarantee
type, one report schema): the guarantee of the unit whose budget stops the run at the top level, every
other view in ``other_units``, each a :class:`metadp.sampling.Guarantee` certified from its own ledger.

The run's own record (algorithm, every view with its charges, the realised sampling, clipping) is added
by ``metadp.training.run.state`` beside these keys. A non-private run has the same keys, with no epsilon
(``bound`` "none"). The sampling scheme's plan warnings (e.g. "Poisson sampling is assumed: if the trainer
uses fixed-size batches ...") are not repeated: here the trainer itself executed the scheme.
"""

from __future__ import annotations

from typing import Any, Dict, Optional, Sequence

from metadp.accounting.registry import accountant_class, make_accountant
from metadp.report import Report, no_guarantee
from metadp.sampling import Guarantee, Sampling

__all__ = ["run_report", "view_entry"]


def view_entry(v: Guarantee, ledger, epsilon: Optional[float], accountant: Optional[str], *,
               planned: Optional[int] = None, matches: Optional[bool] = None) -> Dict[str, Any]:
    """One entry of ``privacy_report.json``'s ``views``, the one shape of flag and plan runs: the view, its
    charges on record, its certified epsilon (None: no guarantee) and, for a plan run, the charges the plan
    composes over the steps run (``planned_charges``) and whether the ledger holds exactly them
    (``ledger_matches_plan``; both None for a flag run)."""
    return {"view": v.key, "unit": v.unit, "adversary": v.adversary, "relation": v.relation,
            "charged_per": v.charge, "charges": len(ledger.entries) if ledger is not None else 0,
            "epsilon": epsilon, "guarantee": "none" if epsilon is None else "upper bound",
            "event": v.event.describe() if v.event is not None else None, "basis": v.basis,
            "accountant": accountant, "note": v.reason, "planned_charges": planned, "ledger_matches_plan": matches}


def _other(g: Guarantee) -> Dict[str, Any]:
    return dict(g.other_unit(), view=g.key, adversary=g.adversary, how=g.basis or g.how)


def run_report(name: str, primary: Optional[Guarantee], others: Sequence[Guarantee], scheme: Sampling,
               noise: Optional[Dict[str, Any]], steps: int, delta: Optional[float]) -> Dict[str, Any]:
    """The plan-report dict of a run: ``primary`` certified (None: no guarantee), ``others`` beside it."""
    if primary is None:
        return no_guarantee(name, "non-private: no privacy guarantee", sampling=scheme.to_dict(), noise=noise,
                            steps=steps)
    unit = "unit" if primary.unit == "group" else primary.unit
    assumptions = (f"{primary.basis}" if primary.basis else primary.how,) + tuple(scheme.assumptions(unit)) + (
        f"the adversary: {primary.adversary}",
        "every release is recorded in the view's hash-chained ledger before it is used; epsilon is recomputed "
        "from the ledger (metadp.accounting.ledger)")
    citations = list(scheme.citations) + list(accountant_class(primary.accountant).citations)
    for g in others:
        citations += accountant_class(g.accountant).citations
    report = Report(name=name, epsilon=primary.epsilon, delta=delta, unit=primary.unit, relation=primary.relation,
                    sampling=scheme.to_dict(), noise=noise, steps=steps, accountant=primary.accountant, order=None,
                    conversion=make_accountant(primary.accountant).conversion, assumptions=assumptions,
                    citations=tuple(dict.fromkeys(citations)),
                    epsilon_lower=primary.epsilon_lower, other_units=tuple(_other(g) for g in others))
    d = report.to_dict()
    d["view"] = primary.key
    return d
