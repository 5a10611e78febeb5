"""The notebooks (``notebooks/*.ipynb``) and their runner, ``notebooks/run_notebooks.py``.

Fast checks (no kernel): every notebook is a valid nbformat v4 document stored without outputs, opens
with a Markdown cell that says what it shows and gives the one command that regenerates it, and
names its figures after itself; the runner's ``--help`` works and its error scan finds stored error
outputs. The full execution (every notebook in a fresh kernel, a few minutes of CPU) is marked
``slow``: ``python -m pytest -m slow tests/test_notebooks.py``. It writes the figures to a temporary
directory, never to ``docs/figures``.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = ROOT / "notebooks"
RUNNER = NOTEBOOKS / "run_notebooks.py"
EXPECTED = ("epsilon_over_steps", "papers_vs_certified", "training_comparison", "verification")
PATHS = sorted(NOTEBOOKS.glob("*.ipynb"))


def load(path: Path) -> dict:
    return json.loads(path.read_text(encoding="utf-8"))


def runner_module():
    spec = importlib.util.spec_from_file_location("run_notebooks", RUNNER)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_expected_notebooks_exist():
    assert tuple(p.stem for p in PATHS) == EXPECTED


@pytest.mark.parametrize("path", PATHS, ids=lambda p: p.stem)
def test_notebook_is_valid_v4_without_outputs(path):
    nb = load(path)
    assert nb["nbformat"] == 4
    assert nb["metadata"]["kernelspec"]["name"] == "python3"
    assert nb["cells"], "empty notebook"
    for i, cell in enumerate(nb["cells"]):
        assert cell["cell_type"] in ("markdown", "code"), f"cell {i}: {cell['cell_type']}"
        if cell["cell_type"] == "code":
            assert cell.get("outputs") == [], f"cell {i} has stored outputs: clear them before committing"
            assert cell.get("execution_count") is None, f"cell {i} has an execution count: clear outputs"
    try:
        import nbformat
    except ImportError:  # the schema check needs the notebooks extra; the structure above does not
        return
    nbformat.validate(nbformat.reads(path.read_text(encoding="utf-8"), as_version=4))


@pytest.mark.parametrize("path", PATHS, ids=lambda p: p.stem)
def test_notebook_header_says_what_it_shows_and_how_to_regenerate_it(path):
    cells = load(path)["cells"]
    first = "".join(cells[0]["source"])
    assert cells[0]["cell_type"] == "markdown"
    assert first.startswith("# "), "the first cell must open with a title"
    assert f"python notebooks/run_notebooks.py notebooks/{path.name}" in first
    assert "upper bound" in " ".join(first.split())  # how to read every epsilon it prints


@pytest.mark.parametrize("path", PATHS, ids=lambda p: p.stem)
def test_notebook_names_its_figures_after_itself(path):
    code = "\n".join("".join(c["source"]) for c in load(path)["cells"] if c["cell_type"] == "code")
    assert f'NOTEBOOK = "{path.stem}"' in code  # figures are docs/figures/<notebook>_<name>.png
    assert "save(fig," in code
    assert "METADP_FIGURES_DIR" in code  # the runner and the slow test redirect figures with it


def test_runner_help_works():
    done = subprocess.run([sys.executable, str(RUNNER), "--help"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "--inplace" in done.stdout and "--timeout" in done.stdout and "example" in done.stdout


def test_runner_rejects_a_path_that_is_not_a_notebook(tmp_path):
    done = subprocess.run([sys.executable, str(RUNNER), str(tmp_path / "missing.ipynb")], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 2
    assert "not a notebook file" in done.stderr


def test_error_outputs_are_found_without_running_anything():
    nbformat = pytest.importorskip("nbformat")
    from nbformat.v4 import new_code_cell, new_notebook, new_output

    nb = new_notebook(cells=[new_code_cell("1 + 1"), new_code_cell("raise ValueError('boom')")])
    nb.cells[1].outputs = [new_output("error", ename="ValueError", evalue="boom", traceback=[])]
    assert runner_module().error_outputs(nbformat.from_dict(nb)) == [(1, "ValueError: boom")]


@pytest.mark.slow
def test_a_failing_cell_fails_the_run_and_is_named(tmp_path):
    nbformat = pytest.importorskip("nbformat")
    pytest.importorskip("nbclient")
    pytest.importorskip("ipykernel")
    from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

    raising = new_notebook(cells=[new_markdown_cell("# t"), new_code_cell("x = 1"),
                                  new_code_cell("raise ValueError('boom')")])
    tagged = new_notebook(cells=[new_code_cell("raise KeyError('tagged')", metadata={"tags": ["raises-exception"]})])
    for name, nb in (("raising", raising), ("tagged", tagged)):  # tagged: nbclient lets it run on, the scan must not
        path = tmp_path / f"{name}.ipynb"
        nbformat.write(nb, str(path))
        done = subprocess.run([sys.executable, str(RUNNER), str(path), "--out", str(tmp_path / "out"),
                               "--timeout", "120"], capture_output=True, text=True, timeout=300)
        assert done.returncode == 1, done.stdout + done.stderr
        assert f"{name}.ipynb: FAILED" in done.stdout
        assert ("cell 2" if name == "raising" else "cell 0") in done.stderr


@pytest.mark.slow
def test_every_notebook_runs_without_errors(tmp_path):
    pytest.importorskip("nbclient")
    pytest.importorskip("ipykernel")
    pytest.importorskip("matplotlib")
    pytest.importorskip("torch")
    figures = tmp_path / "figures"
    # every cell runs; training_comparison trains 300 steps a run instead of 1,500 (99 s of its notebook's 208 s
    # alone on 2 cores; the figures the docs show come from full runs: python notebooks/run_notebooks.py)
    env = dict(os.environ, METADP_NOTEBOOK_STEPS="300")
    done = subprocess.run([sys.executable, str(RUNNER), "--out", str(tmp_path / "executed"), "--figures",
                           str(figures), "--timeout", "900"], capture_output=True, text=True, timeout=1800, env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    for stem in EXPECTED:
        assert f"{stem}.ipynb: ok" in done.stdout
        assert list(figures.glob(f"{stem}_*.png")), f"{stem} wrote no figure"
        executed = load(tmp_path / "executed" / f"{stem}.ipynb")
        assert not [o for c in executed["cells"] for o in c.get("outputs", []) if o["output_type"] == "error"]


def _imports_torch(path: Path) -> bool:
    """A code cell imports torch, or a metadp.training module that needs it (all but the torch-free ones
    below, which tests/training/test_registry.py imports with torch refused), directly."""
    light = ("metadp.training.run.budget", "metadp.accounting.ledger", "metadp.releases",
             "metadp.training.algorithms", "metadp.training.data.datasets", "metadp.training.registry",
             "metadp.training.run.parser")
    for cell in load(path)["cells"]:
        if cell["cell_type"] != "code":
            continue
        for line in "".join(cell["source"]).splitlines():
            words = line.split()
            if words[:1] in (["import"], ["from"]) and len(words) > 1:
                module = words[1]
                if module.split(".")[0] == "torch" or (module.startswith("metadp.training") and module not in light):
                    return True
    return False


@pytest.mark.parametrize("path", PATHS, ids=lambda p: p.stem)
def test_a_notebook_that_needs_torch_declares_it_and_says_how_to_install_it(path):
    """The notebooks extra brings no torch (a plain torch requirement pulls a CUDA build), so a notebook
    that needs it says so, in its metadata (read by the runner) and in its first cell (read by people)."""
    meta = load(path)["metadata"].get("metadp", {})
    if _imports_torch(path):
        assert "torch" in meta.get("requires", []), f"{path.name} imports torch but does not declare it"
        assert "torch==2.13.0" in meta["install"]
        assert "pip install torch==2.13.0" in "".join(load(path)["cells"][0]["source"])
    else:
        assert "torch" not in meta.get("requires", [])


def test_a_notebook_with_a_missing_requirement_is_skipped_with_the_install_command(tmp_path):
    """No kernel starts: the runner reads the declared requirements first (issue 13: a fresh machine
    with only the notebooks extra failed inside training_comparison.ipynb with ModuleNotFoundError)."""
    nb = {"cells": [{"cell_type": "code", "execution_count": None, "id": "a", "metadata": {}, "outputs": [],
                     "source": "import metadp_no_such_module"}],
          "metadata": {"kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"},
                       "metadp": {"requires": ["metadp_no_such_module"], "install": "pip install the-thing"}},
          "nbformat": 4, "nbformat_minor": 5}
    path = tmp_path / "needs.ipynb"
    path.write_text(json.dumps(nb), encoding="utf-8")
    assert runner_module().missing_requirements(path) == (["metadp_no_such_module"], "pip install the-thing")
    if importlib.util.find_spec("nbclient") is None or importlib.util.find_spec("ipykernel") is None:
        return  # the runner itself needs the notebooks extra; the requirement check above does not
    done = subprocess.run([sys.executable, str(RUNNER), str(path), "--out", str(tmp_path / "out")],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "needs.ipynb: SKIPPED (needs metadp_no_such_module, not installed: pip install the-thing)" in done.stdout
    assert "skipped 1" in done.stdout and "Traceback" not in done.stderr
    strict = subprocess.run([sys.executable, str(RUNNER), str(path), "--out", str(tmp_path / "out"), "--require-all"],
                            capture_output=True, text=True, timeout=120)
    assert strict.returncode == 1 and "FAILED: needs.ipynb" in strict.stderr
