"""Execute the notebooks headless and fail on any error (what CI runs; regenerates the README figures).

    python notebooks/run_notebooks.py                         # every notebooks/*.ipynb, copies to a temp dir
    python notebooks/run_notebooks.py notebooks/verification.ipynb
    python notebooks/run_notebooks.py --inplace               # store the outputs in the notebooks themselves
    python notebooks/run_notebooks.py --figures /tmp/figs     # write the figures elsewhere, not docs/figures

Each notebook runs in a fresh ``python3`` kernel (nbclient) started in ``notebooks/``, with a time
limit per cell. The notebooks are stored without outputs; by default the executed copies go to a
temporary directory (``--out`` to keep them somewhere), so running this leaves the notebooks
untouched and rewrites only their figures in ``docs/figures/``. Exit status 1, naming the notebook
and the cell, if a cell raises, times out, or leaves an output of type "error"; 2 on bad arguments.
Prints each notebook's wall time and the total. Needs the ``notebooks`` extra
(``pip install ".[notebooks]"``: matplotlib, nbclient, nbformat, ipykernel).

A notebook that needs more than that extra says so in its metadata (``metadp.requires``: modules,
``metadp.install``: the command) and in its first cell; when a module is missing the runner skips
it with that command instead of failing inside a cell. ``--require-all`` (CI) turns a skip into a
failure (exit 1).
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import List, Optional, Tuple

HERE = Path(__file__).resolve().parent
FIGURES_ENV = "METADP_FIGURES_DIR"  # read by every notebook's first code cell


def _cell_source(cell, limit: int = 300) -> str:
    text = cell.get("source", "")
    return text if len(text) <= limit else text[:limit] + " ..."


def error_outputs(nb) -> List[Tuple[int, str]]:
    """(cell index, message) for every output of type "error" in an executed notebook."""
    found = []
    for index, cell in enumerate(nb.cells):
        for output in cell.get("outputs", []):
            if output.get("output_type") == "error":
                found.append((index, f"{output.get('ename', 'Error')}: {output.get('evalue', '')}"))
    return found


def missing_requirements(path: Path) -> Tuple[List[str], str]:
    """(modules the notebook declares in ``metadata.metadp.requires`` that are not installed, the
    install command it gives), read without starting a kernel."""
    import json

    meta = json.loads(path.read_text(encoding="utf-8")).get("metadata", {}).get("metadp", {})
    missing = [m for m in meta.get("requires", []) if importlib.util.find_spec(m) is None]
    return missing, meta.get("install", f"pip install {' '.join(missing)}")


def run_notebook(path: Path, out: Optional[Path], timeout: int, kernel: str) -> Tuple[float, Optional[str]]:
    """Executes ``path``; writes the executed notebook to ``out`` (None: back to ``path``).

    Returns:
        (seconds, None) on success, or (seconds, message) naming the failing cell.
    """
    import nbformat
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError, CellTimeoutError, DeadKernelError

    nb = nbformat.read(str(path), as_version=4)
    running = {"index": None}  # the cell being executed, to name it on a failure or a timeout

    def on_cell_execute(cell, cell_index, **_):
        running["index"] = cell_index

    client = NotebookClient(nb, timeout=timeout, kernel_name=kernel, allow_errors=False,
                            resources={"metadata": {"path": str(path.parent)}}, on_cell_execute=on_cell_execute)
    start = time.perf_counter()
    failure = None
    try:
        client.execute()
    except (CellExecutionError, CellTimeoutError, DeadKernelError) as err:
        index = running["index"]
        where = f"cell {index}" if index is not None else "the kernel"
        if isinstance(err, CellTimeoutError):
            why = f"no result after {timeout} s (--timeout)"
        elif isinstance(err, CellExecutionError):
            why = f"{err.ename}: {err.evalue}"
        else:
            why = str(err).strip()
        failure = f"{where} failed: {type(err).__name__}: {why}"
        if index is not None:
            failure += f"\n--- cell {index} source ---\n{_cell_source(nb.cells[index])}"
    seconds = time.perf_counter() - start
    if failure is None:
        errors = error_outputs(nb)
        if errors:
            index, message = errors[0]
            failure = f"cell {index} has an output of type 'error': {message}\n--- cell {index} source ---\n" \
                      f"{_cell_source(nb.cells[index])}"
    target = path if out is None else out
    nbformat.write(nb, str(target))
    return seconds, failure


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(
        description="Execute metadp's notebooks headless (nbclient) and fail on any error.",
        epilog="example:\n  python notebooks/run_notebooks.py\n"
               "  python notebooks/run_notebooks.py notebooks/verification.ipynb --timeout 300",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("notebooks", nargs="*", type=Path,
                        help="notebooks to run (default: every notebooks/*.ipynb, in name order)")
    parser.add_argument("--inplace", action="store_true",
                        help="write the outputs into the notebooks themselves (do not commit them)")
    parser.add_argument("--out", type=Path, help="directory for the executed copies (default: a new temp dir)")
    parser.add_argument("--figures", type=Path,
                        help=f"directory for the figures (sets {FIGURES_ENV}; default: docs/figures)")
    parser.add_argument("--timeout", type=int, default=600, help="seconds per cell (default 600)")
    parser.add_argument("--kernel", default="python3", help="Jupyter kernel name (default python3)")
    parser.add_argument("--require-all", action="store_true",
                        help="fail (exit 1) instead of skipping a notebook whose declared requirements are missing")
    args = parser.parse_args(argv)

    if args.inplace and args.out is not None:
        parser.error("--inplace and --out are mutually exclusive")
    if args.timeout < 1:
        parser.error(f"--timeout must be >= 1 second, got {args.timeout}")
    paths = [p.resolve() for p in args.notebooks] or sorted(HERE.glob("*.ipynb"))
    missing = [str(p) for p in paths if not p.is_file() or p.suffix != ".ipynb"]
    if missing:
        parser.error(f"not a notebook file: {', '.join(missing)}")
    if not paths:
        parser.error(f"no notebooks found in {HERE}")
    missing_modules = [m for m in ("nbclient", "nbformat", "ipykernel") if importlib.util.find_spec(m) is None]
    if missing_modules:
        print(f"run_notebooks.py needs the notebooks extra: pip install \".[notebooks]\" (missing: "
              f"{', '.join(missing_modules)})", file=sys.stderr)
        return 2
    if args.figures is not None:
        args.figures.mkdir(parents=True, exist_ok=True)
        os.environ[FIGURES_ENV] = str(args.figures.resolve())  # inherited by the kernels

    out_dir = None
    if not args.inplace:
        out_dir = args.out or Path(tempfile.mkdtemp(prefix="metadp-notebooks-"))
        if any(out_dir.resolve() == p.parent for p in paths):
            parser.error(f"--out {out_dir} would overwrite the notebooks themselves: use --inplace for that")
        out_dir.mkdir(parents=True, exist_ok=True)
    total, failures, skipped = 0.0, [], []
    for path in paths:
        missing, install = missing_requirements(path)
        if missing:
            message = f"needs {', '.join(missing)}, not installed: {install}"
            print(f"  {path.name}: SKIPPED ({message})", flush=True)
            (failures if args.require_all else skipped).append((path.name, message))
            continue
        print(f"running {path.name} ...", flush=True)
        seconds, failure = run_notebook(path, None if args.inplace else out_dir / path.name, args.timeout,
                                        args.kernel)
        total += seconds
        status = "ok" if failure is None else "FAILED"
        print(f"  {path.name}: {status} in {seconds:.1f} s", flush=True)
        if failure is not None:
            failures.append((path.name, failure))
            print(f"  {failure}", file=sys.stderr, flush=True)
    ran = len(paths) - len(skipped) - sum(1 for name, m in failures if m.startswith("needs "))
    print(f"total: {total:.1f} s for {ran} notebook(s)"
          + ("" if args.inplace else f"; executed copies in {out_dir}")
          + (f"; skipped {len(skipped)}: " + ", ".join(f"{n} ({m})" for n, m in skipped) if skipped else ""))
    if failures:
        print("FAILED: " + ", ".join(name for name, _ in failures), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
