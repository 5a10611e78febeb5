"""The README's and the docs pages' commands as ``.ci/readme_commands.py`` reads them (CI runs them all after the
suite).

Fast checks only: the parser reads statuses and stated times from the trailing comments, and every
command of the README and of docs/ is either run by CI within a budget or skipped for a stated reason."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _module():
    spec = importlib.util.spec_from_file_location("readme_commands", ROOT / ".ci" / "readme_commands.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def test_parser_reads_status_time_and_quotes():
    m = _module()
    text = ("intro\n```bash\nmetadp verify x  # VIOLATION (1)\n\nmetadp train y --steps 10  # [4 min]\n"
            "metadp plan 'a # b'\n# a comment line\npip install . && metadp plan\n```\n```python\nnot_bash()\n```\n")
    got = m.readme_commands(text)
    assert [(c.line, c.text, c.status, c.stated) for c in got] == [
        (3, "metadp verify x", 1, None), (5, "metadp train y --steps 10", 0, 240.0), (6, "metadp plan 'a # b'", 0, None),
        (8, "pip install . && metadp plan", 0, None)]
    assert got[1].budget == 480.0 and got[0].budget == m.DEFAULT_BUDGET
    assert got[3].skip_reason and got[0].skip_reason is None
    long = m.readme_commands("```bash\nmetadp train z  # [3 h]\nmetadp train w  # [30 min]\n```\n")
    assert "180 min" in long[0].skip_reason and "30 min" in long[1].skip_reason


def test_every_readme_and_docs_command_is_run_or_skipped_for_a_reason():
    m = _module()
    readme = m.readme_commands((ROOT / "README.md").read_text(encoding="utf-8"))
    assert {"pip install . && metadp plan", 'pip install ".[test]" && python -m pytest'} <= {c.text for c in readme}
    commands = m.all_commands()
    assert len(commands) >= 45 and {c.page for c in commands} >= {"README.md", "docs/plan.md", "docs/train.md",
                                                                  "docs/verify.md", "docs/cite.md", "docs/findings.md"}
    run = [c for c in commands if c.skip_reason is None]
    assert len(run) >= 40
    assert all(c.text.startswith(("metadp ", "python ")) for c in run), [c.text for c in run]
    # 2: a refusal a page shows on purpose (bad input exits with status 2)
    assert all(c.status in (0, 1, 2, 3) for c in commands)
    assert len({c.text for c in run}) == len(run), "a repeated command runs once, where it first appears"
    assert all(c.first is None or c.skip_reason.startswith("the same command as") for c in commands)


def test_a_command_repeated_on_a_later_page_runs_once():
    m = _module()
    first = m.readme_commands("```bash\nmetadp cite x --out refs.bib\n```\n")[0]
    again = m.readme_commands("text\n```bash\nmetadp cite x --out refs.bib\n```\n", "docs/cite.md")[0]
    assert (again.page, again.line, again.where) == ("docs/cite.md", 3, "docs/cite.md:3")
    assert first.skip_reason is None and again.skip_reason is None
    marked = m.dataclasses.replace(again, first=first.where)
    assert marked.skip_reason == "the same command as README.md:2, run there"


def test_results_pages_are_listed_not_run():
    m = _module()
    assert set(m.NOT_RUN) <= set(m.pages())
    listed = [c for c in m.all_commands() if c.page in m.NOT_RUN]
    assert listed and all(c.skip_reason == m.NOT_RUN[c.page] for c in listed)
