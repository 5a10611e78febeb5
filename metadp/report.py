"""Reports: a certified (epsilon, delta) with everything needed to defend and cite it.

A ``Report`` carries the bound and its direction, the privacy unit, the neighbouring relation, the
sampling scheme, the accountant, every assumption the bound rests on, the citation keys of the
theorems used, and warnings. It renders as a plain-text table, JSON and a LaTeX table row. Printed
epsilons are rounded **up** (``format_upper``), so a printed number is still an upper bound.
"""

from __future__ import annotations

import dataclasses
import json
import decimal
import math
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple, Union, cast

from metadp import __version__
from metadp.accounting.certificate import Certificate
from metadp.accounting.registry import accountant_class
from metadp.citations import short_reference
from metadp.core import events as ev
from metadp.releases import Release
from metadp.sampling import Guarantee, from_record
from metadp.plan_fields import PlanFields


__all__ = ["Report", "build_report", "no_guarantee", "risk_text", "relation_label", "format_lower", "format_upper", "interval_width", "interval_width_text", "json_epsilon"]

_UNIT_TEXT = {
    "record": "one record (a single training example)",
    "task": "one task or client (all of its data, as a whole)",
    "group": "a group of units, protected together",
    "image": "one image a user sends (its pixel values)",
}


def risk_text(risk: Dict[str, Any]) -> str:
    """'TPR in [1.82%, 1.83%] at FPR 0.1%, ...; advantage in [0.382, 0.383] (exact mu-GDP)': the certified bracket,
    each end rounded outward; 'TPR <= ...' where there is no lower end (``AttackRisk``)."""
    lower = risk.get("tpr_lower")
    if lower is None:
        pairs = ", ".join(f"{format_upper(100 * t, 3)}% at FPR {f * 100:g}%" for f, t in zip(risk["fpr"], risk["tpr"]))
        return (f"TPR <= {pairs}; advantage <= {format_upper(risk['advantage'], 3)} (best membership test, certified; "
                f"{risk['method']})")
    pairs = ", ".join(f"[{format_lower(100 * lo, 3)}%, {format_upper(100 * t, 3)}%] at FPR {f * 100:g}%"
                      for f, lo, t in zip(risk["fpr"], lower, risk["tpr"]))
    return (f"TPR in {pairs}; advantage in [{format_lower(risk['advantage_lower'], 3)}, "
            f"{format_upper(risk['advantage'], 3)}] (best membership test, certified; {risk['method']})")


def format_upper(x: float, digits: int = 4) -> str:
    """``x`` rounded up to ``digits`` significant digits, so the text never understates it.

    Exact: the float's decimal expansion is rounded with ``decimal`` (ROUND_CEILING), not by scaling in
    floating point, which printed the float just above 0.01481 as "0.01481".
    """
    return _format_directed(x, digits, decimal.ROUND_CEILING)


def format_lower(x: float, digits: int = 4) -> str:
    """``x`` rounded down to ``digits`` significant digits (exactly, as ``format_upper``), so a printed lower
    bound never overstates it."""
    return _format_directed(x, digits, decimal.ROUND_FLOOR)


def _format_directed(x: float, digits: int, rounding: str) -> str:
    if x == 0 or math.isinf(x) or math.isnan(x):
        # "infinity" in words: a bare "inf" reads as a glitch, not as "no finite bound is certified"
        return {True: "infinity" if x > 0 else "-infinity"}.get(math.isinf(x), "0" if x == 0 else "nan")
    exact = decimal.Decimal(x)  # the float's exact value
    exponent = exact.adjusted()
    quantum = decimal.Decimal(1).scaleb(exponent - digits + 1)
    value = exact.quantize(quantum, rounding=rounding)
    if value.adjusted() != exponent:  # 9.9995 -> 10.00: one digit more; keep `digits` significant digits
        exponent = value.adjusted()
        value = exact.quantize(decimal.Decimal(1).scaleb(exponent - digits + 1), rounding=rounding)
    decimals = digits - 1 - exponent
    if -4 <= exponent < 6:
        return f"{value:.{max(decimals, 0)}f}"
    return f"{float(value):.{digits - 1}e}"  # 4 significant decimal digits survive the float round trip


@dataclasses.dataclass(frozen=True)
class Report:
    """The certified guarantee of a plan, a training run or a bare event (epsilon is an upper bound): the one
    report type. A plan's and a run's report describe their sampling, noise and steps; an event's (one read
    from a dp-accounting file, ``metadp.integrations._event_report``) has none of these and names its
    ``event`` instead."""

    name: str
    epsilon: float  # certified upper bound
    delta: float
    unit: str
    relation: str
    sampling: Optional[Dict[str, Any]]  # scheme, rate, batch_size, population (None: a bare event)
    noise: Optional[Dict[str, Any]]  # mechanism, multiplier or scale (None: a bare event)
    steps: Optional[int]  # (None: a bare event, whose description counts its releases)
    accountant: str
    order: Optional[float]  # optimal Renyi order (RDP accountant), None/nan otherwise
    conversion: str
    assumptions: Tuple[str, ...]
    citations: Tuple[str, ...]
    warnings: Tuple[str, ...] = ()
    claim: Optional[Mapping[str, Any]] = None
    epsilon_lower: Optional[float] = None  # certified lower bound on the optimal epsilon (PLD), if known
    alternatives: Tuple[Dict[str, Any], ...] = ()  # every accountant's bound (``--accountant all``)
    other_units: Tuple[Dict[str, Any], ...] = ()  # the other meaningful units' bounds (metadp.units)
    group_size: Optional[int] = None
    event: Optional[str] = None  # a bare event's one-line description (then sampling, noise and steps are None)
    risk: Optional[Dict[str, Any]] = None  # certified attack risk of the unit (metadp.plan_risk), where asked

    bound = "upper"

    def to_dict(self) -> Dict[str, Any]:
        """JSON-ready dict; ``epsilon`` is the exact float (not rounded), ``bound`` says its direction."""
        d = dataclasses.asdict(self)
        d["bound"] = self.bound
        d["epsilon"] = json_epsilon(self.epsilon)
        d["epsilon_display"] = format_upper(self.epsilon)
        d["epsilon_interval_width"] = interval_width(self.epsilon_lower, self.epsilon)
        d["order"] = None if self.order is None or math.isnan(self.order) else self.order
        d["alternatives"] = [dict(a, epsilon=json_epsilon(a["epsilon"])) for a in self.alternatives]
        d["other_units"] = [dict(u, epsilon=json_epsilon(u["epsilon"]),
                                 epsilon_display=format_upper(u["epsilon"])) for u in self.other_units]
        d["assumptions"] = list(self.assumptions)
        d["citations"] = list(self.citations)
        d["warnings"] = list(self.warnings)
        d["metadp_version"] = __version__
        return d

    def to_json(self, indent: int = 2) -> str:
        return json.dumps(self.to_dict(), indent=indent)

    def headline(self) -> str:
        """One line: 'epsilon <= 1.147 (upper bound, RDP) at delta = 1e-06, unit task, add/remove'."""
        return (f"epsilon <= {format_upper(self.epsilon)} (upper bound, {self.accountant.upper()} accountant) "
                f"at delta = {self.delta:g}, unit {self.unit}, relation {self.relation}")

    def to_table(self) -> str:
        """Human-readable report."""
        order = "" if self.order is None or math.isnan(self.order) else f", order {self.order:.4g}"
        interval = (f"certified interval [{_format_lower(self.epsilon_lower)}, {format_upper(self.epsilon)}]"
                    f"{interval_width_text(self.epsilon_lower, self.epsilon)}")
        how = (f"{self.conversion} conversion{order}" if self.accountant == "rdp" else interval)
        if self.accountant == "rdp" and self.epsilon_lower is not None:  # a scheme's own lower bound
            how += f"; {interval}"
        rows = [
            ("epsilon", f"<= {format_upper(self.epsilon)}   (upper bound; {self.accountant.upper()} accountant, {how})"),
            ("delta", f"{self.delta:g}"),
            ("unit", f"{self.unit}: {_UNIT_TEXT[self.unit]}"
                     + (f" (group of {self.group_size})" if self.group_size else "")),
            ("relation", _relation_text(self.relation, self.unit)),
        ]
        if self.risk is not None:
            rows.append(("attack", risk_text(self.risk)))
        if self.event is not None:
            rows.append(("event", self.event))
        else:  # a plan's or a run's report: it has sampling and noise
            scheme = cast(Dict[str, Any], self.sampling)
            sampled = scheme.get("units_sampled") or ("unit" if self.unit == "group" else self.unit)
            rows += [("sampling", from_record({k: v for k, v in scheme.items() if k != "units_sampled"})
                      .text(sampled)),
                     ("noise", _noise_text(cast(Dict[str, Any], self.noise))),
                     ("steps", f"{self.steps:,}")]
        for alt in self.alternatives:
            lower = "" if alt["epsilon_lower"] is None else f", lower bound {_format_lower(alt['epsilon_lower'])}"
            mark = "  <- tightest" if alt["accountant"] == self.accountant else ""
            rows.append((f"  {alt['accountant']}", f"<= {format_upper(alt['epsilon'])}{lower}{mark}"))
        for other in self.other_units:
            lower = "" if other["epsilon_lower"] is None else f", lower bound {_format_lower(other['epsilon_lower'])}"
            label = other.get("view") or f"{other['unit']}-level"
            rows.append((label, f"<= {format_upper(other['epsilon'])}{lower}   (same plan, "
                         f"{relation_label(other['relation'])}, {other['accountant'].upper()}; see below)"))
            if other.get("risk") is not None:
                rows.append(("  attack", risk_text(other["risk"])))
        if self.claim and "epsilon" in self.claim:
            rows.append(("claimed", f"epsilon = {self.claim['epsilon']:g} ({self.claim.get('source', 'no source given')})"))
        width = max(len(k) for k, _ in rows)
        lines = [f"metadp {__version__} privacy report: {self.name}", ""]
        lines += [f"  {k.ljust(width)}  {v}" for k, v in rows]
        lines += ["", "Assumptions (the bound holds only if all of these are true):"]
        lines += [f"  - {a}" for a in self.assumptions]
        for other in self.other_units:
            lines += ["", f"The {other.get('view') or other['unit'] + '-level'} bound (epsilon <= {format_upper(other['epsilon'])}) assumes:",
                      f"  - {other['how']}"]
            lines += [f"  - note: {n}" for n in other["notes"]]
        if self.warnings:
            lines += ["", "WARNINGS:"]
            lines += [f"  ! {w}" for w in self.warnings]
        lines += ["", "Theorems used (BibTeX: metadp.citations.bibtex(report.citations)):"]
        lines += [f"  [{c}] {short_reference(c)}" for c in self.citations]
        return "\n".join(lines)

    def to_latex(self) -> str:
        """A LaTeX table row (booktabs-style), preceded by a comment naming the columns (a bare event: its
        description in the sampling column, the noise and steps columns empty)."""
        if self.event is not None:
            sampling, noise = _latex_escape(self.event), ""
        else:
            spec = cast(Dict[str, Any], self.noise)  # (a plan's or a run's report: it has sampling and noise)
            sampling = from_record(cast(Dict[str, Any], self.sampling)).latex()
            cell: Dict[str, Callable[[Dict[str, Any]], str]] = {
                "gaussian": lambda n: f"$z={n['multiplier']:g}$", "none": lambda n: "none",
                "laplace": lambda n: f"Laplace $b={n['scale']:g}$"}
            noise = cell[spec["mechanism"]](spec)
            if "release" in spec:
                noise += f"; $z_{{in}}={spec['release']['inner_noise']:g}$"
        relation = relation_label(self.relation)
        delta = _latex_number(self.delta)
        bound = r"\infty" if math.isinf(self.epsilon) else format_upper(self.epsilon)
        steps = "" if self.steps is None else f"{self.steps:,}".replace(",", "{,}")
        cells = [_latex_escape(self.name), self.unit, relation, sampling, noise, steps,
                 f"$\\le {bound}$", f"${delta}$", self.accountant.upper()]
        header = "% plan & unit & relation & sampling & noise & steps & epsilon (upper bound) & delta & accountant"
        return header + "\n" + " & ".join(cells) + " \\\\"


def no_guarantee(name: str, warning: str, **fields: Any) -> Dict[str, Any]:
    """The ``Report`` schema of a run that certifies nothing: every field None, ``bound`` "none", the reason as
    its one warning, and ``fields`` (what the run does describe: sampling, noise, steps)."""
    d: Dict[str, Any] = {f.name: None for f in dataclasses.fields(Report)}
    d.update(name=name, assumptions=[], citations=[], warnings=[warning], alternatives=[], other_units=[],
             bound="none", epsilon_display=None, epsilon_interval_width=None, metadp_version=__version__)
    d.update(fields)
    return d


def json_epsilon(x: float) -> Union[float, str]:
    """An epsilon for JSON: the number, or the string "inf" where no finite bound is certified (JSON has no
    infinity, and null would say nothing; ``float("inf")`` reads it back)."""
    return "inf" if math.isinf(x) else x


def interval_width(lower: Optional[float], upper: float) -> Optional[float]:
    """(upper - lower) / upper of a certified interval: how far apart its two ends are, relative to the
    upper one (None without a finite interval; 0 for [0, 0])."""
    if lower is None or not math.isfinite(upper) or math.isnan(lower):
        return None
    return 0.0 if upper <= 0.0 else max(0.0, (upper - max(lower, 0.0)) / upper)


def interval_width_text(lower: Optional[float], upper: float) -> str:
    """", width 21%" (of the upper end, rounded up) for a report's interval; "" without one."""
    width = interval_width(lower, upper)
    if width is None:
        return ""
    return f", width {format_upper(100.0 * width, 2)}%" if width > 0 else ", width 0"


def _format_lower(x: Optional[float], digits: int = 4) -> str:
    """``x`` rounded down to ``digits`` significant digits (a printed lower bound never overstates)."""
    if x is None:
        return "n/a"
    return "0" if x <= 0 else format_lower(x, digits)


def _latex_number(x: float) -> str:
    mantissa, power = f"{x:.3g}e+0".split("e")[:2] if "e" not in f"{x:.3g}" else f"{x:.3g}".split("e")
    exponent = int(power)
    if exponent == 0:
        return mantissa
    return f"10^{{{exponent}}}" if mantissa == "1" else f"{mantissa}\\times 10^{{{exponent}}}"


def _latex_escape(text: str) -> str:
    for a, b in (("\\", "\\textbackslash{}"), ("&", "\\&"), ("%", "\\%"), ("_", "\\_"), ("#", "\\#"),
                 ("$", "\\$"), ("{", "\\{"), ("}", "\\}")):
        text = text.replace(a, b)
    return text


_RELATION_LABELS = {"add_remove": "add/remove", "substitute": "substitution", "m_pixels": "m-pixel"}


def relation_label(relation: str) -> str:
    """A neighbouring relation in two words, for tables ("add/remove", "substitution", "m-pixel")."""
    return _RELATION_LABELS[relation]


def _relation_text(relation: str, unit: str) -> str:
    if relation == "m_pixels":
        return f"m-pixel: neighbouring {unit}s differ in at most m pixel values (DP-Pix's relation, Fan 2018)"
    if relation == "add_remove":
        return f"add/remove: neighbouring datasets differ by one {unit} added or removed"
    return f"substitution: neighbouring datasets differ by one {unit} replaced by another"


def _noise_text(n: Dict[str, Any]) -> str:
    inner = ""
    if "release" in n:
        inner = f"; inside each task {n['release']['inner_steps']} DP step(s) at z_in = {n['release']['inner_noise']:g}"
    if n["mechanism"] == "none":
        return "none on the released sum" + inner
    if n["mechanism"] == "gaussian":
        banded = (f"; banded correlated noise, {n['bands']} band(s) (DP-FTRL BandMF)"
                  if n.get("correlation") == "banded" else "")
        return f"Gaussian, noise multiplier {n['multiplier']:g} (sigma = {n['multiplier']:g} x clip norm)" + banded + inner
    return f"Laplace, scale {n['scale']:g} x L1 sensitivity"


def build_report(plan: PlanFields, certificate: Certificate, *, alternatives: Sequence[Certificate] = (),
                 view: Optional[Guarantee] = None, other_units: Sequence[Dict[str, Any]] = (),
                 unbounded: Sequence[str] = ()) -> Report:
    """Assembles the report of ``plan`` from the tightest accountant's ``Certificate`` (``plan_epsilon``);
    ``alternatives``: every accountant's certificate, listed where the plan asked for all of them;
    ``unbounded``: a warning for each other unit that has no bound."""
    epsilon, notes = certificate.epsilon, certificate.notes
    assumptions, citations, warnings = _analysis_notes(plan, certificate, view, other_units)
    warnings += list(unbounded) + list(notes)
    if math.isinf(epsilon):
        warnings.insert(0, f"no finite epsilon is certified: at delta {plan.delta:g} every accountant that handles this "
                           "plan gives infinity (too little noise, or a non-private release), so the plan protects "
                           "nothing as written")
    alts: Tuple[Dict[str, Any], ...] = tuple(
        {"accountant": c.accountant, "epsilon": c.epsilon, "epsilon_lower": c.epsilon_lower} for c in alternatives)
    lowers = [a for a in alts if a["epsilon_lower"] is not None]
    for a in lowers:  # a certified lower bound above another certified upper bound is a contradiction
        for b in alts:
            if a["epsilon_lower"] > b["epsilon"] * (1 + 1e-9):
                warnings.append(f"accountants disagree beyond their error bars: {a['accountant']} lower bound "
                                f"{a['epsilon_lower']:.6g} > {b['accountant']} upper bound {b['epsilon']:.6g}; "
                                "please report this plan")
    for alt in alternatives:
        citations += alt.citations
    for other in other_units:
        citations += accountant_class(other["accountant"]).citations
    if plan.claim and "epsilon" in plan.claim:
        claimed = float(plan.claim["epsilon"])
        if claimed < epsilon * (1 - 1e-9):
            warnings.append(f"the claimed epsilon {claimed:g} is BELOW the certified upper bound "
                            f"{format_upper(epsilon)}: this analysis does not support the claim")
    sampling = plan.sampling.to_dict()
    if getattr(plan, "record_multiplicity", None) is not None and plan.unit != "task":
        sampling["units_sampled"] = "task"
    if getattr(plan, "against", None) is not None and view is not None:
        assumptions.insert(0, f"the guarantee holds against {view.adversary}")
    noise = {k: v for k, v in dataclasses.asdict(plan.noise).items() if v is not None}
    if noise.get("correlation") == "independent":  # the keys plans always had: banded noise adds its two
        noise.pop("correlation"), noise.pop("bands", None)
    if getattr(plan, "release", None) is not None:
        noise["release"] = cast(Release, plan.release).to_table()
    return Report(name=plan.name, epsilon=epsilon, delta=plan.delta, unit=plan.unit, relation=plan.relation,
                  sampling=sampling, noise=noise, steps=plan.steps, accountant=certificate.accountant,
                  order=certificate.order if certificate.order is not None else math.nan,
                  conversion=certificate.conversion, assumptions=tuple(assumptions),
                  citations=tuple(dict.fromkeys(citations)), warnings=tuple(warnings), claim=plan.claim,
                  epsilon_lower=certificate.epsilon_lower, alternatives=alts, other_units=tuple(other_units),
                  group_size=plan.group_size)


def _analysis_notes(plan: PlanFields, certificate: Certificate, view: Optional[Guarantee] = None,
                    other_units: Sequence[Dict[str, Any]] = ()) -> Tuple[List[str], List[str], List[str]]:
    """The assumptions, citation keys and warnings that the plan's analysis rests on (the accountant's method's
    own from its ``Certificate``, last)."""
    unit = plan.unit if plan.unit != "group" else "unit"
    if getattr(plan, "record_multiplicity", None) is not None:
        unit = "task"  # a fixed pool: tasks are sampled, and a record's guarantee follows from its tasks'
    s = plan.sampling
    assumptions: List[str] = []
    citations = list(certificate.citations)
    warnings: List[str] = []
    release = getattr(plan, "release", None)
    if release is not None:
        assumptions.append(release.describe(plan.noise.multiplier))
    elif plan.noise.mechanism == "gaussian" and plan.noise.correlation == "banded":
        assumptions.append(f"each step releases the sum of per-{s.contributor(unit)} contributions, each clipped to L2 "
                           f"norm C, plus banded correlated Gaussian noise (C^-1 Z)_t with z = {plan.noise.multiplier:g} "
                           f"and {plan.noise.bands} band(s) (metadp.banded_noise)")
        if s.scheme == "none" and view is not None:  # its scheme's own assumptions do not state the derivation
            assumptions.append(view.how)
    elif plan.noise.mechanism == "gaussian":
        per = s.contributor(unit)
        assumptions.append(f"each step releases the sum of per-{per} contributions, each clipped to L2 norm C, "
                           f"plus Gaussian noise N(0, (zC)^2 I) with z = {plan.noise.multiplier:g}")
    elif plan.noise.mechanism == "none":
        assumptions.append(f"each step releases the sum of per-{s.contributor(unit)} contributions with no noise: no "
                           "guarantee (a non-private baseline with the plan's sampling and steps)")
    else:
        assumptions.append(f"each step releases a query with L1 sensitivity 1 per {unit} plus Laplace noise of "
                           f"scale {plan.noise.scale:g} per coordinate")
    assumptions += s.assumptions(unit, view.how if view is not None else None)
    citations += s.citations
    warnings += s.warnings
    if plan.noise.count_noise is not None:
        assumptions.append(f"adaptive clipping: the noisy count of unclipped updates (noise std {plan.noise.count_noise:g}, "
                           f"sensitivity 1/2) is released with the sum on the same sample; both are accounted as one "
                           f"Gaussian with multiplier {cast(ev.Gaussian, plan.noise.event()).noise_multiplier:.6g}; "
                           "the threshold is updated only from released noisy counts (Andrew et al. 2021)")
        citations.append("andrew2021differentially")
    if plan.group_size:
        assumptions.append(f"the guarantee covers {plan.group_size} units added or removed together: the exact group "
                           "pair where one exists (Gaussian: sensitivity x k; Poisson: binomial mixture of shifts), "
                           "else Mironov's RDP group rule")
        citations.append("mironov2017renyi")
    assumptions.append(f"all {plan.steps:,} steps' outputs may be released; composition is adaptive")
    if plan.noise.clip == "raw_norms":
        warnings.append("NOT PRIVATE: the clipping thresholds are computed from raw gradient norms (dp-maml.txt Sec. "
                        "5.2.1), which depend on the data without noise; no unit has a guarantee")
    elif plan.noise.clip == "none":
        warnings.append("NOT PRIVATE: a contribution is not bounded (no clipping, or no noise where the release "
                        "needs it): no unit has a guarantee")
    else:
        assumptions.append("the clipping threshold and noise are fixed in advance or chosen from previously "
                           "released noisy outputs (never from raw gradient norms)")
    assumptions += certificate.assumptions
    if plan.unit == "task" and not any(o["unit"] == "record" for o in other_units):
        warnings.append("task-level guarantee: it protects a whole task or client. A single record that appears "
                        "in many tasks or episodes has a different (record-level) guarantee, which this report "
                        "does not give (add the plan's [[hierarchy]], or its record_multiplicity over a fixed pool of "
                        "Poisson-sampled tasks, to get it)")
    for other in other_units:
        if other["unit"] == "record" and other["epsilon"] > 0:
            warnings.append(f"record-level epsilon <= {format_upper(other['epsilon'])}: a record appears in many "
                            "episodes, and counting it once would understate its epsilon")
    citations += list(plan.references)
    return assumptions, citations, warnings
