"""A citable release: the version in one place (metadp/__init__.py), read by pyproject.toml, printed by `metadp
--version`, and matched by CITATION.cff and the top entry of CHANGELOG.md. (CI validates CITATION.cff against the
CFF 1.2.0 schema with cffconvert, in a separate environment: .ci/run.)"""

import re
import subprocess
import sys
import tomllib
from pathlib import Path

import metadp
from metadp.cli import main

ROOT = Path(__file__).resolve().parents[1]


def test_the_version_has_one_source():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert "version" not in project["project"] and "version" in project["project"]["dynamic"]
    assert project["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "metadp.__version__"}
    assert re.fullmatch(r"\d+\.\d+\.\d+", metadp.__version__)


def test_metadp_version_prints_it(capsys):
    try:
        main(["--version"])
    except SystemExit as stop:
        assert stop.code == 0
    assert capsys.readouterr().out.strip() == f"metadp {metadp.__version__}"
    out = subprocess.run([sys.executable, "-m", "metadp", "--version"], capture_output=True, text=True, cwd=ROOT)
    assert out.returncode == 0 and out.stdout.strip() == f"metadp {metadp.__version__}"


def test_citation_cff_names_this_version_and_its_year():
    text = (ROOT / "CITATION.cff").read_text()
    fields = dict(re.findall(r"^([a-z-]+): ?(.*)$", text, flags=re.M))
    assert fields["cff-version"] == "1.2.0"
    assert fields["version"].strip('"') == metadp.__version__
    assert fields["date-released"].strip('"').startswith(str(metadp.__release_year__))
    assert fields["type"] == "software" and fields["title"] and "authors" in fields


def test_the_changelogs_latest_release_is_this_version():
    releases = re.findall(r"^## (\d+\.\d+\.\d+)", (ROOT / "CHANGELOG.md").read_text(), flags=re.M)
    assert releases and releases[0] == metadp.__version__
