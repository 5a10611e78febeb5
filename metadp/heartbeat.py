"""A command that is still working says so: one status line on stderr, then one at intervals.

Certifying a bound is usually well under a second, but some honest plans (10^9 steps, delta 1e-300,
a composition of thousands of events, a calibration that certifies tens of bounds) take tens of
seconds, and a command that prints nothing meanwhile cannot be told from a hung one (issue 28, class
4). :class:`Heartbeat` wraps a command: if it has not finished after ``after`` seconds, a line
``metadp: still working (plan ...; 3 s so far) ...`` goes to stderr, then another every ``every``
seconds. It prints nothing while a visible progress bar (tqdm) is on screen, since the bar already
shows progress, and nothing at all for a command that ends in time, so quick commands (and their
one-line refusals) are unchanged.

``METADP_HEARTBEAT_SECONDS`` (a number of seconds, default 3) sets ``after``; 0 or a negative value
turns the heartbeat off. The test suite sets it high (tests/conftest.py) so that a loaded test
machine does not add lines to outputs that tests compare; tests/test_heartbeat.py checks the lines.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from typing import Callable, Optional, TextIO

__all__ = ["Heartbeat", "heartbeat_after", "silence"]

_DEFAULT_AFTER = 3.0  # seconds before the first line
_EVERY = 10.0  # seconds between later lines


_SILENT = threading.Event()


def silence() -> None:
    """Stops every heartbeat of this process from printing (e.g. once other processes report the work:
    ``metadp train --nproc`` starts them and waits)."""
    _SILENT.set()


def heartbeat_after() -> float:
    """Seconds before the first status line: ``METADP_HEARTBEAT_SECONDS`` or 3; 0 when it is off."""
    text = os.environ.get("METADP_HEARTBEAT_SECONDS", "")
    try:
        value = float(text) if text.strip() else _DEFAULT_AFTER
    except ValueError:
        value = _DEFAULT_AFTER  # a malformed setting must not stop a command: the default applies
    return value if value == value and value > 0 else 0.0  # NaN, 0 or negative: off


def _bars_on_screen() -> bool:
    """True while a tqdm bar that is displayed (not disabled) exists: it already shows progress."""
    try:
        from tqdm import tqdm
    except ImportError:  # pragma: no cover - tqdm is a core dependency
        return False
    return any(not getattr(bar, "disable", True) for bar in list(getattr(tqdm, "_instances", ())))


class Heartbeat:
    """A context manager that prints ``metadp: still working (WHAT; N s so far) ...`` to ``file`` after
    ``after`` seconds, then every ``every`` seconds, until the block ends (module docstring).

    Args:
        what: what the command is doing, in a few words ("certifying the plan", "calibrating the noise").
        after: seconds before the first line (default :func:`heartbeat_after`); 0 turns it off.
        every: seconds between later lines.
        file: where the lines go (default ``sys.stderr`` at the time of printing).
        clock: a monotonic clock (tests).
    """

    def __init__(self, what: str, *, after: Optional[float] = None, every: float = _EVERY,
                 file: Optional[TextIO] = None, clock: Callable[[], float] = time.monotonic):
        self.what = what
        self.after = heartbeat_after() if after is None else after
        self.every = every
        self._file = file
        self._clock = clock
        self._done = threading.Event()
        self._thread: Optional[threading.Thread] = None
        self.lines = 0  # status lines printed so far

    def __enter__(self) -> "Heartbeat":
        if self.after > 0:
            self._start = self._clock()
            self._thread = threading.Thread(target=self._beat, name="metadp-heartbeat", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._done.set()
        if self._thread is not None:
            self._thread.join()

    def _beat(self) -> None:
        wait = self.after
        while not self._done.wait(wait):
            if _SILENT.is_set():
                return
            if not _bars_on_screen():
                seconds = self._clock() - self._start
                file = self._file if self._file is not None else sys.stderr
                try:
                    print(f"metadp: still working ({self.what}; {seconds:.0f} s so far) ...", file=file, flush=True)
                except (OSError, ValueError):  # stderr closed (a broken pipe): nothing more to say
                    return
                self.lines += 1
            wait = self.every
