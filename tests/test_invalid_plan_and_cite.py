"""Bad input to `metadp plan`, plan files and `metadp cite` is refused up front (issue 13, item 7).

Each case: exit status 2, exactly one stderr line ``metadp: error: ...`` naming the parameter, no
traceback, nothing on stdout, and no file written or changed (the working folder is the test's own
tmp_path, so an output written by mistake would show up in the snapshot). ``metadp.cli.main`` is
called in-process: an uncaught exception (a traceback) fails the test by itself.

Cases already in tests/test_invalid_inputs.py (missing plan file, malformed TOML, rate above 1) and
tests/test_cite.py (cite --force without --out, --out into a missing folder or onto an existing file,
unknown --format) are not repeated; `plan --plot` onto an existing file (tests/test_plan_plot.py) is,
with the checks above.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from metadp.cli import main

ROOT = Path(__file__).resolve().parents[1]

VALID_PLAN = """\
name = "tiny plan"
unit = "record"
delta = 1e-5
steps = 3

[sampling]
scheme = "none"

[noise]
mechanism = "gaussian"
multiplier = {multiplier}
"""


def _write(name: str, content) -> callable:
    def make(tmp: Path) -> str:
        path = tmp / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content, encoding="utf-8")
        return name
    return make


def _folder(name: str) -> callable:
    def make(tmp: Path) -> str:
        (tmp / name).mkdir()
        return name
    return make


def _valid_plan(tmp: Path) -> str:
    return _write("plan.toml", VALID_PLAN.format(multiplier="4.0"))(tmp)


def _existing_figure(tmp: Path) -> str:
    return _write("figure.png", b"\x89PNG not really")(tmp)


# Each case: argv (strings, or callables that create their file in tmp_path and return its name),
# and the substrings the error line must contain (the parameter first).
CASES = [
    # -- the plan file ---------------------------------------------------------------------------
    # a path with '=' was parsed as TOML text ("plan <text> is not valid TOML")
    pytest.param(["plan", "a=b.toml"], ["plan file", "a=b.toml", "does not exist"], id="plan-path-with-equals-missing"),
    pytest.param(["cite", "a=b.toml"], ["plan file", "a=b.toml", "does not exist"], id="cite-path-with-equals-missing"),
    pytest.param(["plan", _folder("plans")], ["plan file", "plans", "not a file"], id="plan-directory"),
    pytest.param(["cite", _folder("plans")], ["plan file", "plans", "not a file"], id="cite-directory"),
    pytest.param(["plan", _write("plan.toml", b"\xff\xfe\x00\x01binary\x00")], ["plan file", "plan.toml", "UTF-8"],
                 id="plan-binary-file"),
    pytest.param(["cite", _write("plan.toml", b"\x89PNG\r\n\x1a\n\x00\x00")], ["plan file", "plan.toml", "UTF-8"],
                 id="cite-binary-file"),
    pytest.param(["plan", _write("plan.toml", "")], ["plan", "plan.toml", "empty"], id="plan-empty-file"),
    pytest.param(["plan", _write("plan.toml", "stpes = 3\n" + VALID_PLAN.format(multiplier="4.0"))],
                 ["stpes", "did you mean 'steps'"], id="plan-unknown-key"),
    pytest.param(["cite", _write("plan.toml", VALID_PLAN.format(multiplier='"four"'))], ["noise.multiplier"],
                 id="cite-multiplier-not-a-number"),
    pytest.param(["plan", _write("plan.toml", VALID_PLAN.format(multiplier="4.0").replace("steps = 3", "steps = 1e20"))],
                 ["steps", "9007199254740992"], id="plan-steps-beyond-2-53"),
    # "cannot convert float NaN to integer" with the PLD accountant
    pytest.param(["plan", _write("plan.toml", VALID_PLAN.format(multiplier="1e-300")), "--accountant", "pld"],
                 ["noise multiplier", "[1e-50, 1e+50]", "PLD"], id="plan-pld-noise-1e-300"),
    # -- plan options ----------------------------------------------------------------------------
    pytest.param(["plan", _valid_plan, "--json", "--latex"], ["--latex", "--json"], id="plan-json-and-latex"),
    pytest.param(["plan", _valid_plan, "--accountant", "moments"], ["--accountant", "moments"],
                 id="plan-unknown-accountant"),
    pytest.param(["plan", _valid_plan, "--plot", _existing_figure], ["--plot", "figure.png", "--overwrite"],
                 id="plan-plot-existing-file"),
    # the report was printed (and all the accounting done) before this was found
    pytest.param(["plan", _valid_plan, "--plot", "figure.jpg"], ["--plot", ".png or .pdf", "figure.jpg"],
                 id="plan-plot-bad-extension"),
    pytest.param(["plan", _valid_plan, "--plot", "figures/figure.png"], ["--plot", "figures", "does not exist"],
                 id="plan-plot-missing-folder"),
    # --overwrite was ignored without --plot
    pytest.param(["plan", _valid_plan, "--overwrite"], ["--overwrite", "--plot"], id="plan-overwrite-without-plot"),
    # -- cite options ----------------------------------------------------------------------------
    pytest.param(["cite", _valid_plan, "--out", _folder("refs")], ["--out", "refs", "folder"], id="cite-out-is-a-folder"),
    pytest.param(["cite", _valid_plan, "--accountant", "moments"], ["--accountant", "moments"],
                 id="cite-unknown-accountant"),
]


def _snapshot(root: Path) -> dict:
    """Every path under root with its kind, size, modification time and content hash."""
    out = {}
    for path in sorted(root.rglob("*")):
        stat = path.stat()
        digest = hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else None
        out[str(path.relative_to(root))] = (path.is_dir(), stat.st_size, stat.st_mtime_ns, digest)
    return out


@pytest.mark.parametrize("argv, needles", CASES)
def test_refused_in_one_line_and_nothing_written(argv, needles, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    args = [a(tmp_path) if callable(a) else a for a in argv]
    before = _snapshot(tmp_path)
    capsys.readouterr()
    assert main(args) == 2
    captured = capsys.readouterr()
    lines = captured.err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("metadp: error: "), captured.err
    assert "Traceback" not in captured.err and captured.out == "", captured
    for needle in needles:
        assert needle in lines[0], f"{lines[0]!r} does not contain {needle!r}"
    assert _snapshot(tmp_path) == before


def test_enough_distinct_new_cases():
    ids = [p.id for p in CASES]
    assert len(ids) == len(set(ids)) >= 12


def test_a_plan_path_containing_equals_is_read_as_a_path(tmp_path, monkeypatch, capsys):
    # `metadp plan "a=b.toml"` on an existing file: it used to be parsed as the TOML text "a=b.toml"
    monkeypatch.chdir(tmp_path)
    (tmp_path / "a=b.toml").write_text(VALID_PLAN.format(multiplier="4.0"), encoding="utf-8")
    assert main(["plan", "a=b.toml", "--accountant", "rdp"]) == 0
    assert "tiny plan" in capsys.readouterr().out
