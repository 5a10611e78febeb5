"""Rooms a newcomer can read (issue 29, item 5): no function in ``metadp/training`` is longer than 60 lines,
docstring included (the before-stop hook's limit elsewhere is 80)."""

from __future__ import annotations

import ast
from pathlib import Path

import metadp

TRAINING = Path(metadp.__file__).resolve().parent / "training"
LIMIT = 60


def _long_functions(root: Path, limit: int):
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                length = node.end_lineno - node.lineno + 1
                if length > limit:
                    yield f"{path.relative_to(root.parent)}:{node.lineno} {node.name} ({length} lines)"


def test_no_function_in_training_is_over_60_lines():
    found = list(_long_functions(TRAINING, LIMIT))
    assert not found, f"split these (one concern each): {found}"


def test_the_length_check_can_fail(tmp_path):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "m.py").write_text("def f():\n" + "    x = 1\n" * 61)
    assert [s.split()[1] for s in _long_functions(tmp_path / "pkg", LIMIT)] == ["f"]
