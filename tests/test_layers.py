"""The layers of docs/architecture.md, checked on every module of the package.

1. No import of metadp inside a function or method: metadp's own imports sit at module top (optional
   heavy dependencies such as torch or matplotlib may be imported where they are used).
2. A module imports only from its own layer or the layers below it (the table ``LAYER``). An
   ``importlib.import_module`` (or ``__import__``) call counts as an import of the module it names; the
   one allowed is the CLI's torch gate (``metadp.cli._needs_torch``), whose literal module names count as
   imports by ``metadp.cli``; any other call, or one whose target is not a literal, fails.
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
    "metadp.releases": 5,
    "metadp.report": 5,
    "metadp.cite": 5,
    "metadp.plan_plot": 5,
    "metadp.plan_solve": 5,
    "metadp.plan_risk": 5,
    "metadp.plan_noise": 5,
    "metadp.banded_noise": 5,
    "metadp.plan_fields": 5,  # a plan's fields as a Protocol: what report, units and banded_noise read of a plan
    "metadp.integrations": 6,  # Opacus, dp-accounting: accounting and reports for other libraries
    "metadp.training": 7,  # the trainer and its engines (local, Flower)
    "metadp.verify": 8,  # audits train runs and cross-checks against dp-accounting
    "metadp.cli": 9,
    "metadp.cli_flags": 9,
    "metadp.calibrate_command": 9,
    "metadp.__main__": 9,
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
        elif isinstance(node, ast.Call) and _dynamic_import(node) and not _gate_body(node, module):
            target = node.args[0] if node.args else None
            name = target.value if isinstance(target, ast.Constant) and isinstance(target.value, str) else None
            if name is None or name == "metadp" or name.startswith("metadp."):
                yield node, name or "<not a literal>"


GATE = "_needs_torch"  # metadp.cli's torch gate: the one on-demand import of a metadp module


def _dynamic_import(node: ast.Call) -> bool:
    """Whether ``node`` imports by name: importlib.import_module, import_module, __import__ or the gate."""
    f = node.func
    name = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else None
    return name in ("import_module", "__import__", GATE)


def _is_gate_call(node: ast.Call, module: str) -> bool:
    """Whether ``node`` calls the torch gate from metadp.cli (an on-demand import by design)."""
    return module == "metadp.cli" and isinstance(node.func, ast.Name) and node.func.id == GATE


def _gate_body(node: ast.Call, module: str) -> bool:
    """Whether ``node`` is the gate's own ``importlib.import_module(module)`` in metadp.cli (what it loads is
    checked at each call of the gate, whose argument is a literal)."""
    f = node.func
    return (module == "metadp.cli" and isinstance(f, ast.Attribute) and f.attr == "import_module"
            and bool(node.args) and isinstance(node.args[0], ast.Name) and node.args[0].id == "module")


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
             for node, name in _metadp_imports(fn, module, path.name == "__init__.py")
             if not (isinstance(node, ast.Call) and _is_gate_call(node, module))]
    assert not local, f"{module}: metadp imported inside a function at {local}: move it to the top"


@pytest.mark.parametrize("module,path", MODULES, ids=[m for m, _ in MODULES])
def test_no_dynamic_import_of_metadp_but_the_torch_gate(module, path):
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found = [(node.lineno, name) for node, name in _metadp_imports(tree, module, path.name == "__init__.py")
             if isinstance(node, ast.Call) and not _is_gate_call(node, module)]
    assert not found, (f"{module}: loads a metadp module by name at {found}: import it at the top (a module "
                       "that needs torch: through metadp.cli's gate)")


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
    dynamic = ast.parse("import importlib\nm = importlib.import_module('metadp.training.run.command')\n"
                        "n = importlib.import_module(name)\n")
    assert [n for _, n in _metadp_imports(dynamic, "metadp.plan", False)] == ["metadp.training.run.command",
                                                                             "<not a literal>"]
    gate = ast.parse("def _needs_torch(module, command):\n    return importlib.import_module(module)\n"
                     "_needs_torch('metadp.verify.run_audit', 'x')\n")
    assert [n for _, n in _metadp_imports(gate, "metadp.cli", False)] == ["metadp.verify.run_audit"]
    assert sorted(n for _, n in _metadp_imports(gate, "metadp.plan", False)) == ["<not a literal>",
                                                                                "metadp.verify.run_audit"]


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
