"""The documentation site's shape, checked without building it (CI builds it with ``mkdocs build --strict``):
every Markdown page under docs/ is in mkdocs.yml's nav (or listed under its ``not_in_nav``), every nav entry
exists, the README stays a front door of at most 250 lines, and its links into docs/ resolve, anchors included.

mkdocs.yml is read with a few regular expressions (the test extra has no YAML parser): its ``nav`` entries are
the ``- Title: page.md`` / ``- page.md`` lines of the top-level ``nav:`` block.
"""

from __future__ import annotations

import re
import unicodedata
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
MKDOCS = ROOT / "mkdocs.yml"
README_MAX_LINES = 250


def _top_level_block(text: str, key: str) -> str:
    """The indented lines under a top-level ``key:`` of mkdocs.yml ("" where there is none)."""
    match = re.search(rf"^{key}:[^\n]*\n((?:[ \t]+[^\n]*\n|[ \t]*\n)*)", text, flags=re.M)
    return match.group(1) if match else ""


def _nav() -> list:
    entries = re.findall(r"^\s*-\s*(?:[^\n:]+:\s*)?([\w./-]+\.md)\s*$", _top_level_block(MKDOCS.read_text(), "nav"),
                         flags=re.M)
    assert entries, "mkdocs.yml has no nav entries"
    return entries


def _not_in_nav() -> set:
    """The pages mkdocs.yml's ``not_in_nav`` lists by name (one per line of its block scalar)."""
    block = _top_level_block(MKDOCS.read_text(), "not_in_nav")
    return {line.strip().lstrip("/") for line in block.splitlines() if line.strip() and not line.strip().startswith("#")}


def _pages() -> set:
    return {p.relative_to(DOCS).as_posix() for p in DOCS.rglob("*.md")}


def test_mkdocs_yml_states_the_site():
    text = MKDOCS.read_text()
    assert re.search(r"^docs_dir:\s*docs\s*$", text, flags=re.M)
    assert re.search(r"^\s+name:\s*material\s*$", text, flags=re.M)
    assert "mkdocstrings" in text and "docstring_style: google" in text


def test_every_nav_entry_exists_once():
    nav = _nav()
    missing = [entry for entry in nav if not (DOCS / entry).is_file()]
    assert not missing, f"mkdocs.yml's nav names pages that do not exist under docs/: {missing}"
    assert len(nav) == len(set(nav)), f"a page is in the nav twice: {sorted(p for p in nav if nav.count(p) > 1)}"


def test_every_docs_page_is_in_the_nav_or_excluded():
    left_out = sorted(_pages() - set(_nav()) - _not_in_nav())
    assert not left_out, f"pages under docs/ in neither mkdocs.yml's nav nor its not_in_nav: {left_out}"


def test_every_public_package_has_an_api_page():
    api = "\n".join((DOCS / "api" / p).read_text() for p in ("core.md", "mechanisms.md", "amplification.md",
                                                             "accounting.md", "sampling.md", "plan.md", "report.md",
                                                             "cite.md", "verify.md", "integrations.md", "training.md"))
    for package in ("core", "mechanisms", "amplification", "accounting", "sampling", "plan", "plan_noise",
                    "plan_solve", "plan_risk", "banded_noise", "units", "releases", "report", "cite", "verify",
                    "integrations", "training"):
        assert re.search(rf"^::: metadp\.{package}\s*$", api, flags=re.M), f"no API block for metadp.{package}"


def test_readme_is_at_most_250_lines():
    lines = len((ROOT / "README.md").read_text(encoding="utf-8").splitlines())
    assert lines <= README_MAX_LINES, f"README.md has {lines} lines; move detail to a docs/ page"


def _slug(heading: str) -> str:
    """The anchor Python-Markdown's toc extension (and GitHub, for these headings) gives a heading."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading).replace("`", "")
    text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode("ascii")
    text = re.sub(r"[^\w\s-]", "", text).strip().lower()
    return re.sub(r"[-\s]+", "-", text)


def _anchors(page: Path) -> set:
    text = re.sub(r"^```.*?^```", "", page.read_text(encoding="utf-8"), flags=re.S | re.M)  # no fenced lines
    return {_slug(m.group(1)) for m in re.finditer(r"^#{1,6}\s+(.*?)\s*#*\s*$", text, flags=re.M)}


def _readme_links():
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    return [m.group(1) for m in re.finditer(r"\]\(([^)\s]+)\)", text) if not re.match(r"[a-z]+:", m.group(1))]


@pytest.mark.parametrize("link", _readme_links())
def test_readme_links_resolve(link):
    path, _, anchor = link.partition("#")
    target = ROOT / path
    assert target.exists(), f"README.md links to {path}, which does not exist"
    if anchor:
        assert anchor in _anchors(target), f"README.md links to #{anchor}, which {path} has no heading for"


def test_the_readme_points_into_the_docs():
    links = {link.partition("#")[0] for link in _readme_links()}
    assert {"docs/index.md", "docs/plan.md", "docs/train.md", "docs/verify.md", "docs/cite.md",
            "docs/findings.md"} <= links
