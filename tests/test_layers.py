"""The layers of docs/architecture.md, checked on every module of the package.

1. No import of metadp inside a function or method: metadp's own imports sit at module top (optional
   heavy dependencies such as torch or matplotlib may be imported where they are used).
2. A module imports only from its own layer or the layers below it (the table ``LAYER``).
3. Importing any subpackage first, in a fresh interpreter, works (no import cycle).
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

import metadp

PACKAGE = Path(metadp.__file__).resolve().parent

# Lower number = lower layer. A module may import its own layer and any lower one.
LAYER = {
    "metadp": 0,  # the package's __init__ (version only)
    "metadp.citations": 0,  # the BibTeX registry: data, imports nothing of metadp
    "metadp.core": 0,
    "metadp.mechanisms": 1,
    "metadp.amplification": 2,
    "metadp.accounting": 3,
    "metadp.sampling": 4,
    "metadp.plan": 5,
    "metadp.units": 5,
    "metadp.report": 5,
    "metadp.cite": 5,
    "metadp.plan_plot": 5,
    "metadp.plan_solve": 5,
    "metadp.training": 6,
    "metadp.verify": 6,
    "metadp.integrations": 6,
    "metadp.cli": 7,
    "metadp.__main__": 7,
    "metadp.data": 0,
}


def _layer(module: str) -> int:
    parts = module.split(".")
    for n in range(len(parts), 0, -1):
        name = ".".join(parts[:n])
        if name in LAYER:
            return LAYER[name]
    raise AssertionError(f"{module} is in no layer: add it to LAYER (and to docs/architecture.md)")


def _modules():
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE.parent).with_suffix("")
        parts = list(rel.parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        yield ".".join(parts), path


MODULES = list(_modules())


def _metadp_imports(tree: ast.AST, module: str, is_package: bool):
    """(node, imported module name) for every import of metadp in ``tree``, relative ones resolved."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name == "metadp" or alias.name.startswith("metadp."):
                    yield node, alias.name
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".") if is_package else module.split(".")[:-1]
                base = base[: len(base) - (node.level - 1)]
                name = ".".join(base + ([node.module] if node.module else []))
            else:
                name = node.module or ""
            if name == "metadp" or name.startswith("metadp."):
                yield node, name


def _function_bodies(tree: ast.AST):
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            yield node


def test_every_module_is_in_a_layer():
    for module, _ in MODULES:
        _layer(module)


@pytest.mark.parametrize("module,path", MODULES, ids=[m for m, _ in MODULES])
def test_no_import_of_metadp_inside_a_function(module, path):
    tree = ast.parse(path.read_text(encoding="utf-8"))
    local = [(node.lineno, name) for fn in _function_bodies(tree)
             for node, name in _metadp_imports(fn, module, path.name == "__init__.py")]
    assert not local, f"{module}: metadp imported inside a function at {local}: move it to the top"


@pytest.mark.parametrize("module,path", MODULES, ids=[m for m, _ in MODULES])
def test_imports_only_its_layer_and_below(module, path):
    tree = ast.parse(path.read_text(encoding="utf-8"))
    own = _layer(module)
    upward = [(node.lineno, name) for node, name in _metadp_imports(tree, module, path.name == "__init__.py")
              if _layer(name) > own]
    assert not upward, f"{module} (layer {own}) imports a higher layer: {upward}"


def test_the_layer_check_can_fail():
    # The checks above on a module written to break both rules.
    text = "from metadp.cli import main\n\ndef f():\n    import metadp.plan\n"
    tree = ast.parse(text)
    assert [n for _, n in _metadp_imports(tree, "metadp.core.x", False)] == ["metadp.cli", "metadp.plan"]
    assert [n for fn in _function_bodies(tree) for _, n in _metadp_imports(fn, "metadp.core.x", False)] \
        == ["metadp.plan"]
    assert _layer("metadp.cli") > _layer("metadp.core.x")


SUBPACKAGES = sorted({m.split(".")[1] for m, _ in MODULES if m.count(".") >= 1})


@pytest.mark.slow  # 17 fresh interpreters; the AST checks above (default run) already rule out upward imports
def test_importing_any_subpackage_first_works():
    # One fresh interpreter per subpackage, all at once (a cycle shows only when its module comes first).
    names = [n for n in SUBPACKAGES if n != "__main__"]
    procs = {n: subprocess.Popen([sys.executable, "-c", f"import metadp.{n}"], stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, text=True) for n in names}
    bad = {}
    for name, proc in procs.items():
        _, err = proc.communicate(timeout=120)
        if proc.returncode:
            bad[name] = err.strip().splitlines()[-1]
    assert not bad, bad
