"""Cross-check metadp's accountants against dp-accounting and prv-accountant on one plan.

``metadp verify --crosscheck PLAN`` runs the plan's step through every accountant that can read it
(metadp RDP and PLD; Google's dp-accounting RDP and PLD; Microsoft's prv-accountant for Poisson
plans) and prints each epsilon with the tolerance it is held to and whether it agrees:

* metadp RDP vs dp-accounting RDP: the same theorems (Mironov, Talwar & Zhang 2019; Wang, Balle &
  Kasiviswanathan 2019, Thm 27 at orders <= 256; CKS conversion); metadp optimises the order continuously, so it may be
  lower by up to 1% and never higher (1e-9 slack);
* metadp PLD upper vs dp-accounting PLD (connect-the-dots, discretisation 1e-4, pessimistic): at most
  0.5% above it;
* metadp PLD interval vs prv-accountant's [lower, upper] (eps_error 0.01): they must overlap;
* every upper bound at least every certified lower bound.

dp-accounting and prv-accountant are optional (``pip install "metadp[crosscheck]"``); a library that
is missing is listed as such, never silently dropped, and the verdict names the libraries compared:
``all agree`` needs at least one of them to have run (``nothing compared`` otherwise). Lower bounds
are printed rounded down and upper bounds rounded up.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Tuple, Union, cast

from metadp.accounting import PldAccountant, RdpAccountant, UnsupportedEventError
from metadp.core import events as ev
from metadp.integrations.dp_accounting import default_relation, from_dp_event, load_dp_event, to_dp_event
from metadp.plan import Plan, load_plan
from metadp.report import format_lower, format_upper
from metadp.sampling import FixedSize, NoSampling, Poisson

__all__ = ["CrossCheckRow", "CrossCheckTable", "crosscheck_plan", "crosscheck_dp_event"]

_Anchor = Tuple[Optional[float], Optional[float], str]  # an anchor library's (value, value, note)
_LIBRARIES = ("dp-accounting", "prv-accountant")  # the rows' sources start with these names


@dataclasses.dataclass(frozen=True)
class CrossCheckRow:
    source: str  # which library and accountant
    epsilon: Optional[float]  # its epsilon (upper bound or estimate), None if not run
    lower: Optional[float]  # its certified lower bound, if any
    check: str  # the tolerance it is held to
    ok: Optional[bool]  # None: nothing to compare (or not run)
    note: str = ""


@dataclasses.dataclass(frozen=True)
class CrossCheckTable:
    plan: str
    delta: float
    rows: Tuple[CrossCheckRow, ...]

    @property
    def agree(self) -> bool:
        return all(r.ok is not False for r in self.rows)

    @property
    def compared(self) -> Tuple[str, ...]:
        """The other libraries that produced a number (metadp was compared with these)."""
        return tuple(lib for lib in _LIBRARIES if any(r.source.startswith(lib) and r.epsilon is not None
                                                      for r in self.rows))

    @property
    def not_compared(self) -> Tuple[str, ...]:
        return tuple(lib for lib in _LIBRARIES if lib not in self.compared)

    @property
    def verdict(self) -> str:
        """"DISAGREEMENT", "nothing compared" (no other library ran) or "all agree"."""
        if not self.agree:
            return "DISAGREEMENT"
        return "all agree" if self.compared else "nothing compared"

    def to_dict(self) -> Dict[str, Any]:
        return {"plan": self.plan, "delta": self.delta, "verdict": self.verdict, "agree": self.agree,
                "compared": list(self.compared), "not_compared": list(self.not_compared),
                "rows": [dataclasses.asdict(r) for r in self.rows]}

    def to_table(self) -> str:
        which = f"compared with {', '.join(self.compared)}" if self.compared else "no other library ran"
        if self.not_compared:
            which += f"; not compared: {', '.join(self.not_compared)} (see the notes)"
        lines = [f"cross-check: {self.plan} (delta {self.delta:g}): {self.verdict} ({which})",
                 f"  {'source':34s} {'epsilon':>10s} {'lower':>10s}  {'check':48s} result"]
        for r in self.rows:
            eps = "n/a" if r.epsilon is None else format_upper(r.epsilon, 6)
            low = "" if r.lower is None else format_lower(r.lower, 6)
            verdict = {None: "-", True: "ok", False: "DISAGREE"}[r.ok]
            lines.append(f"  {r.source:34s} {eps:>10s} {low:>10s}  {r.check:48s} {verdict}"
                         + (f"  ({r.note})" if r.note else ""))
        return "\n".join(lines)


def _dp_accounting(plan: Plan, step: ev.Event) -> _Anchor:
    """(rdp epsilon, pld epsilon) from dp-accounting, or a reason it could not run."""
    try:
        import dp_accounting
        from dp_accounting.pld import pld_privacy_accountant
        from dp_accounting.rdp import rdp_privacy_accountant
    except ImportError:
        return None, None, "dp-accounting not installed (pip install \"metadp[crosscheck]\")"
    z = cast(float, plan.noise.multiplier)  # (a Gaussian plan: crosscheck_plan checks it)
    relation = dp_accounting.NeighboringRelation.ADD_OR_REMOVE_ONE
    if isinstance(step, ev.PoissonSampled):
        event = dp_accounting.PoissonSampledDpEvent(step.rate, dp_accounting.GaussianDpEvent(z))
    elif isinstance(step, ev.FixedSizeSampled):
        # dp-accounting states the multiplier relative to the replace-one sensitivity (2C): z / 2
        event = dp_accounting.SampledWithoutReplacementDpEvent(step.population, step.batch,
                                                               dp_accounting.GaussianDpEvent(z / 2.0))
        relation = dp_accounting.NeighboringRelation.REPLACE_ONE
    else:
        event = dp_accounting.GaussianDpEvent(z / (2.0 if plan.relation == "substitute" else 1.0))
    composed = dp_accounting.SelfComposedDpEvent(event, plan.steps)
    rdp = rdp_privacy_accountant.RdpAccountant(neighboring_relation=relation)
    rdp.compose(composed)
    pld_eps = None
    if not isinstance(step, ev.FixedSizeSampled):
        pld = pld_privacy_accountant.PLDAccountant(neighboring_relation=relation, value_discretization_interval=1e-4)
        pld.compose(composed)
        pld_eps = pld.get_epsilon(plan.delta)
    return rdp.get_epsilon(plan.delta), pld_eps, ""


def _prv(plan: Plan, step: ev.Event) -> _Anchor:
    if not isinstance(step, ev.PoissonSampled):
        return None, None, "prv-accountant: Poisson plans only here"
    try:
        from prv_accountant import PRVAccountant
        from prv_accountant.privacy_random_variables import PoissonSubsampledGaussianMechanism
    except ImportError:
        return None, None, "prv-accountant not installed (pip install \"metadp[crosscheck]\")"
    acc = PRVAccountant(prvs=[PoissonSubsampledGaussianMechanism(noise_multiplier=plan.noise.multiplier,
                                                                  sampling_probability=step.rate)],
                        max_self_compositions=[plan.steps], eps_error=0.01, delta_error=plan.delta / 1000)
    lower, _, upper = acc.compute_epsilon(delta=plan.delta, num_self_compositions=[plan.steps])
    return lower, upper, ""


# The plans the anchor libraries are run on: outside it they divide by zero (noise 1e-300: sigma^2 underflows),
# overflow (1e300) or ask for hundreds of GiB (10^12 steps). metadp's own rows are printed either way.
ANCHOR_NOISE = (1e-3, 1e4)
ANCHOR_STEPS = 10**7


def _anchor(run: Callable[[Plan, ev.Event], _Anchor], name: str, plan: Plan, step: ev.Event) -> _Anchor:
    """``run(plan, step)`` (an anchor library's (value, value, note)), or (None, None, why it was not run):
    outside ANCHOR_NOISE / ANCHOR_STEPS, or when the library itself fails (its error, in one line)."""
    z = cast(float, plan.noise.multiplier)  # (a Gaussian plan)
    if not (ANCHOR_NOISE[0] <= z <= ANCHOR_NOISE[1]) or plan.steps > ANCHOR_STEPS:
        return None, None, (f"{name} not run: the cross-check runs the anchors on noise multipliers in "
                            f"[{ANCHOR_NOISE[0]:g}, {ANCHOR_NOISE[1]:g}] and at most {ANCHOR_STEPS:,} steps")
    try:
        return run(plan, step)
    except (ArithmeticError, MemoryError, ValueError) as err:  # the anchor's own failure, said as such
        return None, None, f"{name} failed on this plan: {type(err).__name__}: {' '.join(str(err).split())[:120]}"


_OTHERS_IMPLEMENT = (Poisson, FixedSize, NoSampling)  # the sampling dp-accounting and prv-accountant implement


def crosscheck_plan(path: Union[str, Path]) -> CrossCheckTable:
    """The agreement table for a plan file (Gaussian noise; Poisson, fixed-size or no sampling)."""
    plan = load_plan(path)
    if plan.noise.mechanism != "gaussian" or not isinstance(plan.sampling, _OTHERS_IMPLEMENT) or plan.unit == "group":
        raise ValueError("--crosscheck covers Gaussian plans with poisson, fixed or no sampling (the cases the "
                         "other libraries implement)")
    step = plan.step_event()
    rows: List[CrossCheckRow] = []
    m_rdp = RdpAccountant(plan.relation).compose(step, plan.steps).get_epsilon(plan.delta)
    try:
        bounds = PldAccountant(plan.relation).compose(step, plan.steps).get_epsilon_bounds(plan.delta)
        m_pld: Optional[Tuple[float, float]] = (bounds.epsilon_lower, bounds.epsilon_upper)
    except UnsupportedEventError as err:
        m_pld = None
        rows.append(CrossCheckRow("metadp PLD", None, None, "", None, str(err).split(":")[-1].strip()))
    d_rdp, d_pld, d_note = _anchor(_dp_accounting, "dp-accounting", plan, step)
    p_low, p_up, p_note = _anchor(_prv, "prv-accountant", plan, step)
    pld_note = "not run: fixed-size sampling" if d_rdp is not None and d_pld is None else ""
    return _table(plan.name, plan.delta, rows, m_rdp, m_pld, (d_rdp, d_pld, d_note, pld_note), (p_low, p_up, p_note))


def _table(name: str, delta: float, rows: List[CrossCheckRow], m_rdp: float, m_pld: Optional[Tuple[float, float]],
           dp: Tuple[Optional[float], Optional[float], str, str],
           prv: Tuple[Optional[float], Optional[float], str]) -> CrossCheckTable:
    """The rows comparing metadp's (RDP epsilon, PLD interval or None) with dp-accounting's
    (rdp, pld, note, pld note) and prv-accountant's (lower, upper, note) numbers."""
    d_rdp, d_pld, d_note, pld_note = dp
    p_low, p_up, p_note = prv
    rows.insert(0, CrossCheckRow("metadp RDP", m_rdp, None, "in [0.99, 1] x dp-accounting RDP",
                                 None if d_rdp is None else bool(0.99 * d_rdp <= m_rdp <= d_rdp * (1 + 1e-9))))
    if m_pld is not None:
        checks: List[bool] = [bool(m_pld[0] <= m_rdp * (1 + 1e-9))]
        text = "lower <= every upper bound"
        if d_pld is not None:
            checks.append(bool(m_pld[1] <= d_pld * 1.005 and m_pld[0] <= d_pld * (1 + 1e-9)))
            text = "upper <= 1.005 x dp-acc PLD; lower <= all uppers"
        if p_low is not None:
            checks.append(bool(m_pld[1] >= p_low and m_pld[0] <= cast(float, p_up)))  # (prv gives both ends)
            text += "; overlaps prv"
        rows.insert(1, CrossCheckRow("metadp PLD (certified interval)", m_pld[1], m_pld[0], text, all(checks)))
    rows.append(CrossCheckRow("dp-accounting RDP", d_rdp, None, "reference", None, d_note))
    rows.append(CrossCheckRow("dp-accounting PLD (1e-4)", d_pld, None, "reference (pessimistic estimate)", None,
                              d_note or pld_note))
    rows.append(CrossCheckRow("prv-accountant (eps_error 0.01)", p_up, p_low, "reference interval", None, p_note))
    return CrossCheckTable(name, delta, tuple(rows))


def crosscheck_dp_event(path: Union[str, Path], delta: float, *, noise_relative_to: str = "norm_bound") -> CrossCheckTable:
    """The agreement table for a dp-accounting event read from JSON (``metadp.integrations.dp_accounting``).

    The relation is substitution if the event samples without replacement, else add/remove. dp-accounting
    runs on the event converted back from metadp's, under ``ADD_OR_REMOVE_ONE`` or ``REPLACE_ONE``; under
    ``REPLACE_ONE`` with the multipliers halved (relative to the 2C replace-one sensitivity, which its
    accountants assume: its issue #378), so both libraries analyse the same mechanism. prv-accountant is
    not run (it covers Poisson plan files only here).
    """
    event = from_dp_event(load_dp_event(path), noise_relative_to=noise_relative_to)
    relation = default_relation(event)
    rows: List[CrossCheckRow] = []
    m_rdp = RdpAccountant(relation).compose(event).get_epsilon(delta)
    try:
        bounds = PldAccountant(relation).compose(event).get_epsilon_bounds(delta)
        m_pld: Optional[Tuple[float, float]] = (bounds.epsilon_lower, bounds.epsilon_upper)
    except UnsupportedEventError as err:
        m_pld = None
        rows.append(CrossCheckRow("metadp PLD", None, None, "", None, str(err).split(":")[-1].strip()))
    try:
        import dp_accounting
        from dp_accounting.pld import pld_privacy_accountant
        from dp_accounting.rdp import rdp_privacy_accountant
    except ImportError:
        dp = (None, None, "dp-accounting not installed (pip install \"metadp[crosscheck]\")", "")
    else:
        substitute = relation == "substitute"
        dp_event = to_dp_event(event, noise_relative_to="replace_one_sensitivity" if substitute else "norm_bound")
        neighbours = dp_accounting.NeighboringRelation.REPLACE_ONE if substitute else \
            dp_accounting.NeighboringRelation.ADD_OR_REMOVE_ONE
        rdp = rdp_privacy_accountant.RdpAccountant(neighboring_relation=neighbours)
        pld = pld_privacy_accountant.PLDAccountant(neighboring_relation=neighbours, value_discretization_interval=1e-4)
        d_rdp = rdp.compose(dp_event).get_epsilon(delta) if rdp.supports(dp_event) else None
        d_pld = pld.compose(dp_event).get_epsilon(delta) if pld.supports(dp_event) else None
        dp = (d_rdp, d_pld, "" if d_rdp is not None else "dp-accounting RDP does not support this event",
              "" if d_pld is not None else "dp-accounting PLD does not support this event")
    name = f"{path} ({relation.replace('_', '/')})"
    return _table(name, delta, rows, m_rdp, m_pld, dp, (None, None, "prv-accountant: plan files only"))
