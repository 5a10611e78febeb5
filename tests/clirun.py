"""``metadp ...`` run inside the test process, as the installed command runs it.

``metadp.cli.main`` is the console script's whole body (``metadp/__main__.py`` only calls it), so
calling it with the same arguments, in the same working directory and environment, prints what the
command prints and returns its exit status, without the 2-3 s a fresh interpreter spends importing
numpy, scipy and metadp. Tests that must see a real process (a traceback reaching the terminal,
signals, resource limits, what is imported at start-up) keep ``subprocess``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import os
from pathlib import Path
from typing import Mapping, Optional
from unittest import mock

from metadp.cli import main

ROOT = Path(__file__).resolve().parents[1]


@dataclasses.dataclass(frozen=True)
class Result:
    """What the command printed and its exit status (the fields of ``subprocess.CompletedProcess``)."""

    returncode: int
    stdout: str
    stderr: str


def metadp(*args: str, cwd: Path = ROOT, env: Optional[Mapping[str, str]] = None) -> Result:
    """``metadp *args`` in ``cwd`` with ``env`` added to the environment; stdout and stderr captured."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.chdir(cwd), mock.patch.dict(os.environ, dict(env or {})), \
            contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main([str(a) for a in args])
        except SystemExit as exit_:  # argparse's --help and --version exit after printing, as in a process
            code = exit_.code if isinstance(exit_.code, int) else (0 if exit_.code is None else 1)
    return Result(code, out.getvalue(), err.getvalue())
