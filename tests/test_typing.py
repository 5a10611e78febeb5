"""metadp is a typed package (issue 35, part 3): it ships the ``py.typed`` marker (PEP 561), and mypy, run with
the project's configuration (``[tool.mypy]`` in pyproject.toml: strict on the library, the command-line front ends,
mechanisms, amplification bounds and training held to mypy's defaults), reports no error. CI runs the same check as
``pip install ".[typecheck]" && mypy`` (.ci/run), once: no test repeats that minute."""

from __future__ import annotations

from pathlib import Path

import metadp



def test_the_package_ships_its_type_marker():
    # the installed package's marker: CI installs metadp from its wheel, so this also checks the package data
    assert (Path(metadp.__file__).resolve().parent / "py.typed").is_file()
