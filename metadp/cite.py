"""Citing a report: BibTeX for every theorem it used, and LaTeX stating the guarantee.

``cite(report)`` returns a ``Citation``: the BibTeX entries of ``report.citations`` (from
``metadp.citations``) plus one for metadp itself, a LaTeX sentence stating the (epsilon, delta)
guarantee with its unit, neighbouring relation, sampling and accountant, and a LaTeX table of it.

The sentence claims only what the report certifies. Epsilon is rounded **up** (exactly, in decimal
arithmetic), so a printed epsilon is still an upper bound; delta is printed as given (the shortest
decimal that reads back as the same float). The report's warnings go into a footnote. Free text
(plan names, warnings) is escaped for LaTeX.
"""

from __future__ import annotations

import dataclasses
import math
from decimal import ROUND_CEILING, ROUND_FLOOR, Decimal
from importlib import metadata
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, cast

from metadp import __release_year__, __version__
from metadp.citations import CITATIONS, bibtex
from metadp.report import Report
from metadp.sampling import from_record

__all__ = ["Citation", "cite", "FORMATS", "SOFTWARE_KEY", "latex_escape", "latex_upper"]

FORMATS = ("all", "bibtex", "latex")
SOFTWARE_KEY = "metadp"

_RELATION = {"add_remove": "add/remove", "substitute": "substitution"}
_ACCOUNTANT = {"pld": "PLD", "rdp": "RDP"}
_ESCAPES = {"\\": r"\textbackslash{}", "{": r"\{", "}": r"\}", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#",
            "_": r"\_", "~": r"\textasciitilde{}", "^": r"\textasciicircum{}", "<": r"\textless{}",
            ">": r"\textgreater{}", "|": r"\textbar{}"}


@dataclasses.dataclass(frozen=True)
class Citation:
    """How to cite one report: BibTeX entries and LaTeX (a sentence, a table row, a table)."""

    keys: Tuple[str, ...]  # every key cited by ``sentence``, each with an entry in ``bibtex``; metadp last
    bibtex: str  # the entries, one per key
    sentence: str  # LaTeX: the guarantee in words, with \cite and (if the report warns) a footnote
    table_row: str  # LaTeX: unit & relation & sampling & epsilon & delta & accountant \\
    table: str  # LaTeX: a tabular with a header, the report's row and one row per other unit

    @property
    def latex(self) -> str:
        """The sentence, then the table."""
        return f"{self.sentence}\n\n{self.table}"

    def render(self, fmt: str = "all") -> str:
        """Text for ``metadp cite --format``: ``bibtex`` (a .bib file), ``latex``, or ``all`` (both).

        Raises:
            ValueError: for an unknown ``fmt``.
        """
        if fmt == "bibtex":
            return self.bibtex + "\n"
        if fmt == "latex":
            return self.latex + "\n"
        if fmt == "all":  # BibTeX ignores text outside entries, so the whole text is also a valid .bib
            return (f"% ---- BibTeX (save as a .bib file) ----\n{self.bibtex}\n\n"
                    f"% ---- LaTeX ----\n{self.latex}\n")
        raise ValueError(f"format must be one of {', '.join(FORMATS)}, got {fmt!r}")


def cite(report: Report) -> Citation:
    """BibTeX and LaTeX for ``report``'s certified guarantee.

    Args:
        report: a report from ``metadp.plan_epsilon``.

    Returns:
        A ``Citation``; its sentence cites every key in ``report.citations`` and metadp itself.

    Raises:
        ValueError: if ``report`` is not a Report, its epsilon is NaN or negative, or it cites a key
            that ``metadp.citations`` does not know.
    """
    if not isinstance(report, Report):
        raise ValueError(f"report must be a metadp Report, got {type(report).__name__}")
    if math.isnan(report.epsilon) or report.epsilon < 0:
        raise ValueError(f"report.epsilon must be a non-negative upper bound, got {report.epsilon!r}")
    if SOFTWARE_KEY in CITATIONS:  # the registry must not shadow the software entry
        raise ValueError(f"citation key {SOFTWARE_KEY!r} is reserved for metadp itself")
    keys = tuple(dict.fromkeys(report.citations + (("dong2022gaussian",) if report.risk else ()))) + (SOFTWARE_KEY,)
    entries = bibtex(keys[:-1])
    entries = f"{entries}\n\n{_software_entry()}" if entries else _software_entry()
    sampling = cast(Dict[str, Any], report.sampling)  # (a plan's report: it has sampling, noise and steps)
    row = _row(report.unit, report.group_size, report.relation, _sampling_cell(sampling), report.epsilon,
               report.delta, report.accountant, _risk_cells(report.risk, report.risk["fpr"]) if report.risk else ())
    return Citation(keys=keys, bibtex=entries, sentence=_sentence(report, keys), table_row=row,
                    table=_table(report, row))


def latex_escape(text: str) -> str:
    """``text`` with LaTeX's special characters escaped (``<=`` and ``>=`` become math relations)."""
    out = "".join(_ESCAPES.get(ch, ch) for ch in " ".join(str(text).split()))
    return out.replace(r"\textless{}=", r"$\le$").replace(r"\textgreater{}=", r"$\ge$")


def latex_upper(x: float, digits: int = 4) -> str:
    """``x`` rounded up to ``digits`` significant digits, as LaTeX math (no ``$``); never below ``x``.

    The rounding is done on the exact decimal value of the float, so the printed number is >= ``x``.
    """
    if math.isnan(x):
        raise ValueError("cannot print NaN as an upper bound")
    return _latex_directed(x, digits, ROUND_CEILING)


def latex_lower(x: float, digits: int = 4) -> str:
    """``x`` rounded down to ``digits`` significant digits, as LaTeX math (no ``$``); never above ``x``."""
    if math.isnan(x):
        raise ValueError("cannot print NaN as a lower bound")
    return _latex_directed(x, digits, ROUND_FLOOR)


def _latex_directed(x: float, digits: int, rounding: str) -> str:
    if math.isinf(x):
        return r"\infty" if x > 0 else r"-\infty"
    if x == 0:
        return "0"
    exact = Decimal(x)
    exponent = exact.adjusted()
    rounded = exact.quantize(Decimal(1).scaleb(exponent - digits + 1), rounding=rounding)
    if -4 <= exponent < 6:
        return _group_digits(format(rounded, "f"))
    mantissa, power = f"{rounded:E}".split("E")
    return f"{mantissa} \\times 10^{{{int(power)}}}"


def _latex_exact(x: float) -> str:
    """``x`` as LaTeX math, from the shortest decimal that reads back as the same float."""
    text = repr(float(x))
    if "e" not in text:
        return _group_digits(text[:-2] if text.endswith(".0") else text)
    mantissa, power = text.split("e")
    return f"10^{{{int(power)}}}" if mantissa in ("1", "1.0") else f"{mantissa} \\times 10^{{{int(power)}}}"


def _group_digits(number: str) -> str:
    """'400000' -> '400{,}000' (LaTeX math thousands separators); decimals untouched."""
    whole, dot, frac = number.partition(".")
    sign = "-" if whole.startswith("-") else ""
    whole = whole.lstrip("-")
    groups: List[str] = []
    while len(whole) > 3:
        whole, groups = whole[:-3], [whole[-3:]] + groups
    return sign + "{,}".join([whole] + groups) + dot + frac


def _count(n: int) -> str:
    return f"${_group_digits(str(int(n)))}$"


def _unit_words(unit: str, group_size: Optional[int]) -> str:
    if unit == "group":
        return f"one group of {group_size} units" if group_size else "one group of units"
    return f"one {unit}"


def _sampling_words(s: Dict[str, Any], unit: str) -> str:
    """The sampling scheme in a sentence ('with <this>')."""
    unit = "unit" if unit == "group" else unit  # a group's members are the plan's units
    units = f"{unit}s"
    scheme = s["scheme"]
    if scheme == "poisson":
        expected = (f", expected {_count(s['batch_size'])} of {_count(s['population'])} {units} per step"
                    if s.get("batch_size") and s.get("population") else "")
        return f"Poisson sampling (rate $q {_approx(s['rate'])}${expected})"
    if scheme == "fixed":
        return (f"fixed-size sampling without replacement ({_count(s['batch_size'])} of "
                f"{_count(s['population'])} {units} per step)")
    if scheme == "with_replacement":
        return (f"sampling with replacement ({_count(s['batch_size'])} independent uniform draws from "
                f"{_count(s['population'])} {units} per step, each copy moving the clipped sum by up to $2C$)")
    if scheme == "episodic":
        return (f"episodic sampling ({_count(s['episodes'])} episodes per step, each drawn level by level "
                "through the plan's hierarchy)")
    if scheme == "shuffle":
        return (f"shuffled passes ({_count(s['population'])} {units} cut into batches of "
                f"{_count(s['batch_size'])}, each {unit} in one step per pass; no amplification by sampling)")
    if scheme == "none":
        return f"no sampling (every {unit} in every step)"
    return latex_escape(from_record(s).text(unit))  # a scheme without its own wording here


def _sampling_cell(s: Dict[str, Any]) -> str:
    scheme = s["scheme"]
    if scheme == "poisson":
        return f"Poisson, $q {_approx(s['rate'])}$"
    if scheme == "fixed":
        return f"fixed, {_count(s['batch_size'])} of {_count(s['population'])}"
    if scheme == "episodic":
        return f"episodic, {_count(s['episodes'])} per step"
    if scheme == "shuffle":
        return f"shuffled, {_count(s['batch_size'])} of {_count(s['population'])}"
    if scheme == "none":
        return "none"
    return from_record(s).latex()  # a scheme without its own wording here


def _approx(rate: float) -> str:
    """'= 0.004', or '\\approx 0.004267' where four significant digits do not give the rate exactly."""
    short = f"{rate:.4g}"
    return f"= {_latex_exact(rate)}" if float(short) == rate else f"\\approx {short}"


def _noise_words(n: Dict[str, Any]) -> str:
    if n["mechanism"] == "gaussian":
        words = f"Gaussian noise with multiplier $z = {_latex_exact(n['multiplier'])}$"
        if n.get("correlation") == "banded":
            words = (f"banded correlated Gaussian noise (DP-FTRL banded matrix factorization, ${n['bands']}$ band"
                     f"{'s' if n['bands'] != 1 else ''}) with multiplier $z = {_latex_exact(n['multiplier'])}$")
        if n.get("count_noise") is not None:
            words += (f" and adaptive clipping (noisy count of standard deviation "
                      f"${_latex_exact(n['count_noise'])}$, accounted with the sum)")
        return words
    return f"Laplace noise of scale $b = {_latex_exact(n['scale'])}$"


def _bound(epsilon: float, delta: float) -> str:
    return f"$\\varepsilon \\le {latex_upper(epsilon)}$ at $\\delta = {_latex_exact(delta)}$"


def _sentence(report: Report, keys: Tuple[str, ...]) -> str:
    accountant = _ACCOUNTANT.get(report.accountant, latex_escape(report.accountant))
    noise = cast(Dict[str, Any], report.noise)  # (a plan's report: it has sampling, noise and steps)
    subject = (f"the training plan ``{latex_escape(report.name)}'' ({_noise_words(noise)}, "
               f"{_count(cast(int, report.steps))} steps)")
    head = (f"Under {_RELATION[report.relation]} neighbouring of {_unit_words(report.unit, report.group_size)}, "
            f"with {_sampling_words(cast(Dict[str, Any], report.sampling), report.unit)}, {subject}")
    if math.isinf(report.epsilon):
        claim = (f" has no finite certified $\\varepsilon$ at $\\delta = {_latex_exact(report.delta)}$ "
                 f"({accountant} accountant)")
    else:
        claim = (f" satisfies $(\\varepsilon, \\delta)$-DP with {_bound(report.epsilon, report.delta)} "
                 f"({accountant} accountant, certified upper bound)")
    text = f"{head}{claim}~\\cite{{{','.join(keys)}}}."
    for other in report.other_units:
        other_acc = _ACCOUNTANT.get(other["accountant"], latex_escape(other["accountant"]))
        if math.isinf(other["epsilon"]):
            text += (f" For {_unit_words(other['unit'], None)} ({_RELATION[other['relation']]} neighbouring), "
                     f"the same plan has no finite certified $\\varepsilon$ ({other_acc} accountant).")
        else:
            text += (f" For {_unit_words(other['unit'], None)} ({_RELATION[other['relation']]} neighbouring), "
                     f"the same plan satisfies {_bound(other['epsilon'], report.delta)} ({other_acc} accountant, "
                     "certified upper bound).")
    if report.risk:
        text += _risk_words(report.risk, report.unit)
    if report.warnings:
        caveats = "; ".join(f"({i}) {latex_escape(w.rstrip('.'))}" for i, w in enumerate(report.warnings, 1))
        text += f"\\footnote{{Caveats stated by metadp {latex_escape(__version__)} with this bound: {caveats}.}}"
    return text


def _risk_words(risk: Mapping[str, Any], unit: str) -> str:
    """'Against one record, the best membership test has a true-positive rate of at most ...' (upper bounds), and
    where the report has them, the lower ends named datasets attain."""
    rates = ", ".join(f"${latex_upper(100 * t)}\\%$ at a false-positive rate of ${_latex_exact(100 * f)}\\%$"
                      for f, t in zip(risk["fpr"], risk["tpr"]))
    text = (f" Against one {latex_escape(unit)}, the best membership test has a true-positive rate of at most {rates}, "
            f"and an advantage of at most ${latex_upper(risk['advantage'])}$ (certified upper bounds, "
            f"{latex_escape(risk['method'])})")
    if risk.get("tpr_lower") is None:
        return text + "."
    lows = ", ".join(f"${latex_lower(100 * t)}\\%$" for t in risk["tpr_lower"])
    return (text + f"; against named neighbouring data sets it reaches at least {lows} at the same false-positive "
            f"rates, and an advantage of at least ${latex_lower(risk['advantage_lower'])}$ (certified lower bounds).")


def _risk_cells(risk: Optional[Mapping[str, Any]], fprs: Sequence[float]) -> List[str]:
    """The table's TPR cells (upper bounds) at ``fprs``; '--' where the unit has no risk figures."""
    if risk is None or tuple(risk["fpr"]) != tuple(fprs):
        return ["--"] * len(fprs)
    return [f"$\\le {latex_upper(100 * t)}\\%$" for t in risk["tpr"]]


def _row(unit: str, group_size: Optional[int], relation: str, sampling: str, epsilon: float, delta: float,
         accountant: str, risk_cells: Sequence[str] = ()) -> str:
    unit_cell = f"group of {group_size}" if unit == "group" and group_size else latex_escape(unit)
    cells = [unit_cell, _RELATION[relation], sampling, f"$\\le {latex_upper(epsilon)}$",
             f"${_latex_exact(delta)}$", *risk_cells, _ACCOUNTANT.get(accountant, latex_escape(accountant))]
    return " & ".join(cells) + " \\\\"


def _table(report: Report, row: str) -> str:
    """The LaTeX table: a row per unit; with the report's risk, a column of TPR upper bounds per FPR."""
    fprs = tuple(report.risk["fpr"]) if report.risk else ()
    rows = [row] + [_row(o["unit"], None, o["relation"], "same plan", o["epsilon"], report.delta, o["accountant"],
                         _risk_cells(o.get("risk"), fprs) if fprs else ())
                    for o in report.other_units]
    heads = "".join(f" & TPR at {_latex_exact(100 * f)}\\% FPR" for f in fprs)
    return "\n".join([
        f"% metadp {__version__}: {' '.join(report.name.split())}",
        f"\\begin{{tabular}}{{{'l' * (6 + len(fprs))}}}",
        "\\hline",
        f"Unit & Relation & Sampling & $\\varepsilon$ & $\\delta${heads} & Accountant \\\\",
        "\\hline",
        *rows,
        "\\hline",
        "\\end{tabular}",
    ])


def _software_entry() -> str:
    """A @misc entry for metadp itself: name, version and authors as the package states them."""
    author = "{metadp developers}"
    try:
        stated = cast(Any, metadata.metadata("metadp")).get("Author")  # (an email Message: it has .get)
    except metadata.PackageNotFoundError:  # run from a source tree that is not installed
        stated = None
    if stated:
        author = "{" + stated.replace("{", "").replace("}", "") + "}"
    fields = {
        "title": "metadp: Certified Differential-Privacy Accounting for Episodic (Meta-) Learning",
        "author": author,
        "key": "metadp",
        "howpublished": "Python package",
        "note": f"Version {__version__}",
        "year": str(__release_year__),
    }
    body = ",\n".join(f"  {name} = {{{value}}}" for name, value in fields.items())
    return f"@misc{{{SOFTWARE_KEY},\n{body}\n}}"
