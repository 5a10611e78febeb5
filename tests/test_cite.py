"""`metadp cite`: BibTeX that parses, LaTeX that cites only what it defines, an epsilon never understated.

Every example plan and the built-in default plan go through the command once (module fixture), and
the report it computed is kept so that each check compares the printed text with the certified
numbers. The BibTeX is read by a small strict parser below (and by pybtex where it is installed);
the LaTeX is compiled with pdflatex + bibtex where they are installed.
"""

import contextlib
import glob
import io
import math
import os
import re
import shutil
import subprocess
from decimal import Decimal
from pathlib import Path

import numpy as np
import pytest

import metadp.cli
import metadp.plan
from metadp.citations import CITATIONS, bibtex
from metadp.cite import SOFTWARE_KEY, cite, latex_escape, latex_upper
from metadp.cli import main

ROOT = Path(__file__).resolve().parents[1]
# the paper-size Omniglot plan (1,600 episodes a step, ~18 s of PLD) adds no citation path of its own: its smaller
# sibling train_omniglot_5way_cpu.toml has the same keys and references
PLANS = [None] + sorted(os.path.relpath(p, ROOT) for p in glob.glob(str(ROOT / "examples" / "*.toml"))
                        if not p.endswith(("train_omniglot_5way_paper.toml", "dp_maml_task_omniglot.toml")))
# (dp_maml_task_omniglot.toml is the built-in default plan, None above, key for key: tests/test_examples.py)
FAST_PLAN = str(ROOT / "examples" / "dp_reptile_task_global.toml")  # ~10 ms to account
REQUIRED = {  # BibTeX fields an entry of each type must have ("a|b": either)
    "article": ("author", "title", "journal|eprint", "year"),
    "inproceedings": ("author", "title", "booktitle", "year"),
    "misc": ("title", "year"),
    "software": ("title", "year"),
}


# ---------------------------------------------------------------------------------------------
# A strict BibTeX reader: @type{key, name = {value} | "value" | digits, ...}, braces balanced.


def parse_bibtex(text):
    """{key: (type, {field: value})}; raises AssertionError on anything malformed or duplicated."""
    entries, i = {}, 0
    while True:
        at = text.find("@", i)
        if at < 0:
            return entries
        m = re.compile(r"@([A-Za-z]+)\s*\{\s*([^\s,{}=\"#%'()]+)\s*,").match(text, at)
        assert m, f"malformed entry header at {text[at:at + 40]!r}"
        kind, key = m.group(1).lower(), m.group(2)
        assert key.lower() not in {k.lower() for k in entries}, f"duplicate key {key}"
        fields, i = {}, m.end()
        while True:
            i = _skip_space(text, i)
            if text[i] == "}":
                i += 1
                break
            f = re.compile(r"([A-Za-z][A-Za-z0-9_-]*)\s*=\s*").match(text, i)
            assert f, f"{key}: malformed field at {text[i:i + 40]!r}"
            name = f.group(1).lower()
            assert name not in fields, f"{key}: duplicate field {name}"
            value, i = _value(text, f.end(), key)
            fields[name] = value
            i = _skip_space(text, i)
            assert text[i] in ",}", f"{key}: expected ',' or '}}' after field {name}, got {text[i]!r}"
            if text[i] == ",":
                i += 1
        entries[key] = (kind, fields)


def _skip_space(text, i):
    while i < len(text) and text[i].isspace():
        i += 1
    assert i < len(text), "unexpected end of BibTeX"
    return i


def _value(text, i, key):
    if text[i] == "{":
        depth, j = 0, i
        while True:
            assert j < len(text), f"{key}: unbalanced braces"
            depth += {"{": 1, "}": -1}.get(text[j], 0)
            if depth == 0:
                return text[i + 1:j], j + 1
            j += 1
    if text[i] == '"':
        j = text.index('"', i + 1)
        assert text[i + 1:j].count("{") == text[i + 1:j].count("}"), f"{key}: unbalanced braces"
        return text[i + 1:j], j + 1
    m = re.compile(r"\d+").match(text, i)
    assert m, f"{key}: field value must be braced, quoted or a number, got {text[i:i + 20]!r}"
    return m.group(), m.end()


def check_entries(entries):
    for key, (kind, fields) in entries.items():
        assert kind in REQUIRED, f"{key}: entry type @{kind} is not one BibTeX styles know"
        for need in REQUIRED[kind]:
            assert any(fields.get(n, "").strip() for n in need.split("|")), f"{key}: @{kind} needs {need}"


def latex_number(text):
    """'33{,}870' -> 33870, '1.250 \\times 10^{-5}' -> Decimal('1.250E-5'), '10^{-6}' -> 1E-6."""
    text = text.replace("{,}", "").strip()
    m = re.fullmatch(r"(?:([0-9.]+) \\times )?10\^\{(-?\d+)\}", text)
    if m:
        return Decimal(m.group(1) or "1") * Decimal(10) ** int(m.group(2))
    return Decimal(text)


# ---------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def cases():
    """{plan: (report, citation, stdout of `metadp cite [plan]`)}, each report computed once."""
    out, seen = {}, []
    real = metadp.plan.plan_epsilon

    def recording(plan, accountant=None):
        seen.append(real(plan, accountant))
        return seen[-1]

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(metadp.cli, "plan_epsilon", recording)
        for plan in PLANS:
            buffer = io.StringIO()
            with contextlib.redirect_stdout(buffer):
                code = main(["cite", "--no-risk"] + ([str(ROOT / plan)] if plan else []))
            assert code == 0, plan
            out[plan] = (seen[-1], cite(seen[-1]), buffer.getvalue())
    return out


@pytest.fixture(params=PLANS, ids=lambda p: p or "default")
def case(request, cases):
    return cases[request.param]


def test_the_command_prints_the_library_citation(case):
    report, citation, stdout = case
    assert stdout == citation.render("all")
    assert parse_bibtex(stdout).keys() == parse_bibtex(citation.bibtex).keys()  # the whole text is a .bib too


def test_bibtex_parses_with_every_required_field(case):
    report, citation, _ = case
    entries = parse_bibtex(citation.bibtex)
    check_entries(entries)
    assert list(entries) == list(citation.keys)
    assert set(entries) == set(report.citations) | {SOFTWARE_KEY}
    assert "doi" not in entries[SOFTWARE_KEY][1]  # none is invented for the software
    assert metadp.__version__ in entries[SOFTWARE_KEY][1]["note"]


def test_bibtex_parses_with_pybtex_if_installed(case):
    pybtex_database = pytest.importorskip("pybtex.database")
    data = pybtex_database.parse_string(case[1].bibtex, "bibtex")
    assert set(data.entries) == set(case[1].keys)


def test_every_cite_resolves_and_every_theorem_is_cited(case):
    report, citation, _ = case
    cited = [k.strip() for group in re.findall(r"\\cite\{([^}]*)\}", citation.latex) for k in group.split(",")]
    assert set(cited) == set(parse_bibtex(citation.bibtex)) == set(report.citations) | {SOFTWARE_KEY}


def test_printed_epsilons_are_upper_bounds_and_delta_is_exact(case):
    report, citation, _ = case
    bounds = [latex_number(x) for x in re.findall(r"\\varepsilon \\le ([^$]+)\$", citation.sentence)]
    cells = [latex_number(x) for x in re.findall(r"\$\\le ([^$]+)\$ &", citation.table)]
    certified = [report.epsilon] + [o["epsilon"] for o in report.other_units]
    assert len(bounds) == len(cells) == len(certified)
    for printed in (bounds, cells):
        for shown, exact in zip(printed, certified):
            assert Decimal(exact) <= shown <= Decimal(exact) * Decimal("1.001")  # up, by < 4th digit
    deltas = {latex_number(x) for x in re.findall(r"\\delta = ([^$]+)\$", citation.sentence)}
    assert {float(d) for d in deltas} == {report.delta}


def test_sentence_states_unit_relation_sampling_and_accountant(case):
    report, citation, _ = case
    s = citation.sentence
    relation = {"add_remove": "add/remove", "substitute": "substitution"}[report.relation]
    assert s.startswith(f"Under {relation} neighbouring of one {report.unit}")
    assert f"({report.accountant.upper()} accountant, certified upper bound)" in s
    sampling = {"poisson": "Poisson sampling", "fixed": "fixed-size sampling", "episodic": "episodic sampling",
                "shuffle": "shuffled passes", "none": "no sampling",
                "balls_in_bins": "balls in bins", "with_replacement": "sampling with replacement",
                "cyclic_poisson": "cyclic Poisson", "min_separation": "min-separation"}[
        report.sampling["scheme"]]
    assert f"with {sampling}" in s
    assert ("\\footnote{" in s) == bool(report.warnings)  # every caveat travels with the number
    assert s.count("{") == s.count("}") and "\n" not in s


def test_table_has_a_row_per_unit_with_six_columns(case):
    report, citation, _ = case
    lines = citation.table.splitlines()
    assert lines[1] == "\\begin{tabular}{llllll}" and lines[-1] == "\\end{tabular}"
    rows = [line for line in lines if line.endswith("\\\\")]
    assert len(rows) == 2 + len(report.other_units)  # header, the report's unit, the other units
    assert rows[1] == citation.table_row
    for row in rows:
        assert len(re.findall(r"(?<!\\)&", row)) == 5, row
    assert [r.split(" & ")[0] for r in rows[2:]] == [o["unit"] for o in report.other_units]


def test_latex_compiles_with_bibtex(cases, tmp_path):
    if not (shutil.which("pdflatex") and shutil.which("bibtex")):
        pytest.skip("pdflatex and bibtex are not installed")
    entries, bib = set(), []
    for _, citation, _ in cases.values():  # one document for every plan: one TeX run, not nine
        for key, text in zip(parse_bibtex(citation.bibtex), citation.bibtex.split("\n\n")):
            if key not in entries:
                entries.add(key)
                bib.append(text)
    (tmp_path / "refs.bib").write_text("\n\n".join(bib), encoding="utf-8")
    body = "\n\n".join(c.latex for _, c, _ in cases.values())
    (tmp_path / "main.tex").write_text("\\documentclass{article}\n\\begin{document}\n" + body
                                       + "\n\n\\bibliographystyle{plain}\n\\bibliography{refs}\n\\end{document}\n",
                                       encoding="utf-8")
    latex = ["pdflatex", "-interaction=nonstopmode", "-halt-on-error", "main.tex"]
    for command in (latex, ["bibtex", "main"], latex, latex):
        run = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=60)
        assert run.returncode == 0, f"{command[0]} failed:\n{run.stdout[-3000:]}"  # bibtex: 1 on any warning
    log = (tmp_path / "main.log").read_text(encoding="latin-1")
    assert "undefined" not in log.lower(), log[-3000:]
    assert (tmp_path / "main.pdf").stat().st_size > 0


def test_every_registered_citation_parses():
    entries = parse_bibtex(bibtex(CITATIONS))
    check_entries(entries)
    assert set(entries) == set(CITATIONS) and SOFTWARE_KEY not in CITATIONS


def test_no_entry_pretends_to_know_nothing():
    """Every entry names real authors or says the work is anonymous (never a placeholder "Unknown"),
    and an undated entry says why in its note; metadp's own entry carries its release year."""
    for key, entry in CITATIONS.items():
        assert "unknown" not in entry.get("author", "").lower(), key
        if not re.fullmatch(r"(19|20)\d\d", entry["year"]):
            assert entry["year"] == "n.d." and "year" in entry.get("note", "") and "withheld" in entry["note"], key
    fields = parse_bibtex(cite.__globals__["_software_entry"]())[SOFTWARE_KEY][1]
    assert re.fullmatch(r"20\d\d", fields["year"]), fields["year"]
    assert CITATIONS["wang2022squeezing"]["doi"] == "10.1145/3564625.3564652"  # ACSAC 2022 (dp-fedmeta.txt)


# ---------------------------------------------------------------------------------------------
# Numbers and escaping


@pytest.mark.parametrize("x, text", [
    (0.5, "0.5000"),  # exact in binary: no rounding needed
    (850.25, "850.3"),  # exact; rounds up, not to even
    (33866.888732162835, "33{,}870"),  # the record-episodic plan's task-level epsilon
    (2.0**-17, "7.630 \\times 10^{-6}"),  # 7.62939453125e-06 exactly
    (12345678.0, "1.235 \\times 10^{7}"),
    # one ulp above 0.01481: its decimal value is 0.01481000000000000093..., so rounding up must
    # give 0.01482 (metadp.report.format_upper, which rounds a float product, prints 0.01481)
    (math.nextafter(0.01481, math.inf), "0.01482"),
    (0.0, "0"),
    (math.inf, "\\infty"),
])
def test_latex_upper_golden(x, text):
    assert latex_upper(x) == text


@pytest.mark.parametrize("exponent", range(-12, 9))
def test_latex_upper_never_understates(exponent):
    for k in range(1000, 10000, 37):
        for x in (k * 10.0 ** (exponent - 3), math.nextafter(k * 10.0 ** (exponent - 3), math.inf)):
            shown = latex_number(latex_upper(x))
            assert Decimal(x) <= shown <= Decimal(x) * Decimal("1.001"), (x, latex_upper(x))


def test_latex_escape_leaves_no_special_character_bare():
    text = latex_escape("50% of a_b & c #1 {x} $y ~2^3 <= 4 >= \\ |")
    bare = re.sub(r"\\(textbackslash|textasciitilde|textasciicircum|textless|textgreater|textbar)\{\}"
                  r"|\\[%_&#{}$]|\$\\[lg]e\$", "", text)
    assert not re.search(r"[%_&#{}$~^\\<>|]", bare), text


def test_cite_rejects_what_is_not_a_report_and_unknown_formats(cases):
    with pytest.raises(ValueError, match="Report"):
        cite({"epsilon": 1.0})
    with pytest.raises(ValueError, match="format must be one of"):
        cases[None][1].render("xml")


# ---------------------------------------------------------------------------------------------
# Command-line options and errors: one line on stderr, exit 2, no traceback


def test_format_bibtex_prints_only_entries(capsys):
    assert main(["cite", FAST_PLAN, "--format", "bibtex"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("@") and "\\cite" not in out and "tabular" not in out
    check_entries(parse_bibtex(out))


def test_format_latex_prints_sentence_and_table(capsys):
    assert main(["cite", FAST_PLAN, "--format", "latex", "--accountant", "rdp"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("Under add/remove neighbouring of one record") and "\\end{tabular}" in out
    assert "@" not in out and "(RDP accountant, certified upper bound)" in out


def test_out_writes_and_never_overwrites_without_force(tmp_path, capsys):
    target = tmp_path / "refs.bib"
    assert main(["cite", FAST_PLAN, "--format", "bibtex", "--out", str(target)]) == 0
    first = capsys.readouterr()
    assert first.out == "" and "wrote" in first.err
    written = target.read_text(encoding="utf-8")
    assert written.startswith("@")
    assert main(["cite", FAST_PLAN, "--out", str(target)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("metadp: error: --out") and "--force" in err and err.count("\n") == 1
    assert target.read_text(encoding="utf-8") == written
    assert main(["cite", FAST_PLAN, "--format", "latex", "--out", str(target), "--force"]) == 0
    assert target.read_text(encoding="utf-8").startswith("Under ")


@pytest.mark.parametrize("argv, needle", [
    (["cite", "no/such/plan.toml"], "does not exist"),
    (["cite", FAST_PLAN, "--format", "xml"], "invalid choice"),
    (["cite", FAST_PLAN, "--force"], "--force applies only with --out"),
    (["cite", FAST_PLAN, "--out", "no/such/dir/refs.bib"], "cannot be written"),
])
def test_bad_input_is_one_line_exit_2(argv, needle, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("metadp: error:") and needle in err and err.count("\n") == 1
    assert "Traceback" not in err


def test_the_sentence_states_the_certified_attack_risk_and_cites_its_theorem(capsys):
    # a Gaussian plan without sampling: the exact mu-GDP curve (Dong, Roth & Su), rounded up
    assert main(["cite", str(ROOT / "examples" / "dp_reptile_task_global.toml")]) == 0
    out = capsys.readouterr().out
    assert "Against one record, the best membership test has a true-positive rate of at most $" in out
    assert "at a false-positive rate of $0.1\\%$" in out and "(certified upper bounds, exact mu-GDP)" in out
    assert "@article{dong2022gaussian," in out and "dong2022gaussian" in out.split("\\cite{", 1)[1].split("}", 1)[0]
    assert main(["cite", str(ROOT / "examples" / "dp_reptile_task_global.toml"), "--no-risk"]) == 0
    assert "membership test" not in capsys.readouterr().out


def test_the_latex_table_has_a_tpr_column_per_fpr_and_the_sentence_both_ends():
    # dp_reptile_task_global: 2 Gaussian steps at z = 0.661, no sampling: mu = sqrt(2) / 0.661 exactly, and the
    # best test's TPR at FPR a is Phi(Phi^-1(a) + mu) (Dong, Roth & Su, Cor. 3.3): each cell an upper bound on it
    # within 4 significant digits, each lower end in the sentence below it within the same
    from scipy import special

    from metadp.cite import cite
    from metadp.plan import load_plan, plan_epsilon
    from metadp.plan_risk import with_risk

    plan = load_plan(ROOT / "examples" / "dp_reptile_task_global.toml")
    citation = cite(with_risk(plan_epsilon(plan), plan))
    header, row = [line for line in citation.table.splitlines() if line.endswith("\\\\")][:2]
    assert "TPR at 0.1\\% FPR & TPR at 1\\% FPR & TPR at 10\\% FPR & Accountant" in header
    cells = row.split(" & ")
    assert len(cells) == 9  # unit, relation, sampling, epsilon, delta, three TPRs, accountant
    exact = 100 * special.ndtr(special.ndtri(np.array([1e-3, 1e-2, 1e-1])) + math.sqrt(2) / 0.661)
    printed = [float(re.search(r"\$\\le ([0-9.]+)\\%\$", c).group(1)) for c in cells[5:8]]
    assert all(t <= p <= t * (1 + 1e-3) for t, p in zip(exact, printed)), (exact, printed)
    lows = re.search(r"it reaches at least (.*?) at the same false-positive rates", citation.sentence).group(1)
    low = [float(x) for x in re.findall(r"\$([0-9.]+)\\%\$", lows)]
    assert all(t * (1 - 1e-3) <= lo <= t for t, lo in zip(exact, low)), (exact, low)
