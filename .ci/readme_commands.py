"""Run every command the README shows, as written, and check its exit status and its time.

    python .ci/readme_commands.py              # every command (CI runs this after the test suite)
    python .ci/readme_commands.py --list       # what would run, with the budget of each, and what is skipped

Commands are the lines of the README's ```bash blocks. A trailing comment may state:
  * the expected exit status, as "(N)" (``metadp verify``: 0 consistent, 1 VIOLATION, 3 inconclusive);
    default 0;
  * the time the command takes, as "[N s]", "[N min]" or "[N h]"; default: a few minutes (``DEFAULT_BUDGET``).
    A command is allowed twice its stated time (a loaded CI machine); one whose stated time exceeds
    ``MAX_BUDGET`` is not run here: the README must then give a short variant next to it, which is.
The set-up and test lines (``pip install ... && ...``) are what CI runs around this script, so they
are skipped here. Each command runs in a scratch copy of the checkout (with ``../shared``
beside it), so files it writes (plots, runs/, refs.bib) never touch the checkout.
Exit status 1 if any command fails, exits with another status than stated, or overruns its budget.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import List, Optional

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_BUDGET = 180.0  # seconds, for a command whose README line states no time
MAX_BUDGET = 300.0  # a command stated to take longer is listed, not run (CI has 90 minutes in all)
_SKIP_PREFIXES = ("pip install",)  # CI's own set-up and test steps, run around this script
_FENCE = re.compile(r"^```bash\n(.*?)^```", re.S | re.M)
_STATUS = re.compile(r"\((\d)\)")
_TIME = re.compile(r"\[(\d+(?:\.\d+)?)\s*(s|min|h)\]")
_UNIT = {"s": 1.0, "min": 60.0, "h": 3600.0}


@dataclasses.dataclass(frozen=True)
class Command:
    line: int  # 1-based line in README.md
    text: str  # the command, without its comment
    comment: str
    status: int  # expected exit status
    stated: Optional[float]  # seconds stated in the README, if any

    @property
    def budget(self) -> float:
        return DEFAULT_BUDGET if self.stated is None else 2.0 * self.stated

    @property
    def skip_reason(self) -> Optional[str]:
        if self.text.startswith(_SKIP_PREFIXES):
            return "CI's own set-up and test step"
        if self.stated is not None and self.stated > MAX_BUDGET:
            return f"stated to take {self.stated / 60:.0f} min: its short variant is run instead"
        return None


def _split_comment(line: str):
    """(command, comment): a ' #' outside quotes starts the comment."""
    quote = None
    for i, ch in enumerate(line):
        if ch in "\"'" and (quote is None or quote == ch):
            quote = None if quote == ch else ch
        elif ch == "#" and quote is None and (i == 0 or line[i - 1].isspace()):
            return line[:i].strip(), line[i + 1:].strip()
    return line.strip(), ""


def readme_commands(text: str) -> List[Command]:
    """Every command line of the README's bash blocks, with its stated status and time."""
    out = []
    for block in _FENCE.finditer(text):
        first = text.count("\n", 0, block.start(1)) + 1
        for offset, raw in enumerate(block.group(1).splitlines()):
            command, comment = _split_comment(raw)
            if not command:
                continue
            status = _STATUS.search(comment)
            stated = _TIME.search(comment)
            seconds = None if stated is None else float(stated.group(1)) * _UNIT[stated.group(2)]
            out.append(Command(first + offset, command, comment, int(status.group(1)) if status else 0, seconds))
    return out


def _scratch_copy() -> Path:
    """A copy of the checkout (no .git, no build outputs) with ``shared`` beside it."""
    base = Path(tempfile.mkdtemp(prefix="metadp-readme-"))
    ignore = shutil.ignore_patterns(".git", "__pycache__", "*.egg-info", "build", "dist", ".venv", "venv", "runs",
                                    ".pytest_cache", ".hypothesis")
    shutil.copytree(ROOT, base / "metadp", ignore=ignore)
    shared = ROOT.parent / "shared"
    if shared.is_dir():
        (base / "shared").symlink_to(shared.resolve())
    return base / "metadp"


def run(commands: List[Command]) -> int:
    work = _scratch_copy()
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    failures = 0
    print(f"running {sum(c.skip_reason is None for c in commands)} README commands in {work}", flush=True)
    for c in commands:
        if c.skip_reason:
            print(f"  skip  README:{c.line}  {c.text}  ({c.skip_reason})", flush=True)
            continue
        start = time.perf_counter()
        try:
            done = subprocess.run(c.text, shell=True, cwd=work, env=env, capture_output=True, text=True,
                                  timeout=c.budget)
            code, tail = done.returncode, (done.stdout + done.stderr)[-2000:]
        except subprocess.TimeoutExpired:
            code, tail = None, ""
        seconds = time.perf_counter() - start
        ok = code == c.status
        failures += not ok
        got = "timed out" if code is None else f"exit {code}"
        print(f"  {'ok  ' if ok else 'FAIL'}  README:{c.line}  {seconds:6.1f} s (budget {c.budget:.0f} s)  {got}, "
              f"expected {c.status}  {c.text}", flush=True)
        if not ok and tail:
            print("        " + tail.replace("\n", "\n        "), flush=True)
    print(f"README commands: {failures} failed" if failures else "README commands: all passed", flush=True)
    return 1 if failures else 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--list", action="store_true", help="list the commands and budgets, run nothing")
    parser.add_argument("--match", metavar="REGEX", help="only the commands this regular expression finds")
    args = parser.parse_args(argv)
    commands = readme_commands((ROOT / "README.md").read_text(encoding="utf-8"))
    if args.match:
        commands = [c for c in commands if re.search(args.match, c.text)]
    if args.list:
        for c in commands:
            what = f"skip ({c.skip_reason})" if c.skip_reason else f"budget {c.budget:.0f} s, expect exit {c.status}"
            print(f"README:{c.line}  {what}  {c.text}")
        return 0
    return run(commands)


if __name__ == "__main__":
    sys.exit(main())
