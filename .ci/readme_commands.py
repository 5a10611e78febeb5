"""Run every command the README and the documentation pages show, as written, and check its exit status and time.

    python .ci/readme_commands.py              # every command (CI runs this after the test suite)
    python .ci/readme_commands.py --list       # what would run, with the budget of each, and what is skipped
    python .ci/readme_commands.py --match REGEX  # only the commands the regular expression finds

Commands are the lines of the ```bash blocks of README.md and of every page under docs/ (README first, then
the pages in path order; the pages in ``NOT_RUN`` are listed, not run). A trailing comment may state:
  * the expected exit status, as "(N)" (``metadp verify``: 0 consistent, 1 VIOLATION, 3 inconclusive);
    default 0;
  * the time the command takes, as "[N s]", "[N min]" or "[N h]"; default: a few minutes (``DEFAULT_BUDGET``).
    A command is allowed twice its stated time (a loaded CI machine); one whose stated time exceeds
    ``MAX_BUDGET`` is not run here: the README must then give a short variant next to it, which is.
The set-up and test lines (``pip install ... && ...``) are what CI runs around this script, so they
are skipped here. A command shown on more than one page runs once, where it first appears (README first).
Each command runs in a scratch copy of the checkout (with ``../shared`` beside it), so files it writes
(plots, runs/, refs.bib) never touch the checkout; the commands of one page run in the order shown, so a
command may read a file an earlier one on its page wrote.
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
# Pages whose ```bash blocks are recipes, not commands CI runs: the runs that made a results table (hours each,
# with placeholders such as ``--epsilon E``). Each such page says how long its commands take.
NOT_RUN = {
    "docs/training_results.md": "a results page: the runs behind its tables take hours",
    "docs/protonet_results.md": "a results page: the runs behind its tables take minutes to hours",
}


@dataclasses.dataclass(frozen=True)
class Command:
    line: int  # 1-based line in its page
    text: str  # the command, without its comment
    comment: str
    status: int  # expected exit status
    stated: Optional[float]  # seconds stated on the page, if any
    page: str = "README.md"  # the page, relative to the checkout
    first: Optional[str] = None  # "page:line" where the same command first appears, if it appeared before

    @property
    def where(self) -> str:
        return f"{self.page}:{self.line}"

    @property
    def budget(self) -> float:
        return DEFAULT_BUDGET if self.stated is None else 2.0 * self.stated

    @property
    def skip_reason(self) -> Optional[str]:
        if self.page in NOT_RUN:
            return NOT_RUN[self.page]
        if self.text.startswith(_SKIP_PREFIXES):
            return "CI's own set-up and test step"
        if self.first is not None:
            return f"the same command as {self.first}, run there"
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


def readme_commands(text: str, page: str = "README.md") -> List[Command]:
    """Every command line of a page's bash blocks, with its stated status and time."""
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
            out.append(Command(first + offset, command, comment, int(status.group(1)) if status else 0, seconds,
                               page))
    return out


def pages() -> List[str]:
    """README.md, then every Markdown page under docs/ in path order (relative to the checkout)."""
    docs = sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "docs").rglob("*.md"))
    return ["README.md"] + docs


def all_commands() -> List[Command]:
    """Every page's commands (``pages``), a repeated command marked with where it first appears."""
    seen, out = {}, []
    for page in pages():
        for c in readme_commands((ROOT / page).read_text(encoding="utf-8"), page):
            runs = page not in NOT_RUN and not c.text.startswith(_SKIP_PREFIXES)
            if runs and c.text in seen:
                c = dataclasses.replace(c, first=seen[c.text])
            elif runs:
                seen[c.text] = c.where
            out.append(c)
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
    print(f"running {sum(c.skip_reason is None for c in commands)} commands of the README and docs/ in {work}",
          flush=True)
    for c in commands:
        if c.skip_reason:
            print(f"  skip  {c.where}  {c.text}  ({c.skip_reason})", flush=True)
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
        print(f"  {'ok  ' if ok else 'FAIL'}  {c.where}  {seconds:6.1f} s (budget {c.budget:.0f} s)  {got}, "
              f"expected {c.status}  {c.text}", flush=True)
        if not ok and tail:
            print("        " + tail.replace("\n", "\n        "), flush=True)
    print(f"README and docs commands: {failures} failed" if failures else "README and docs commands: all passed",
          flush=True)
    return 1 if failures else 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--list", action="store_true", help="list the commands and budgets, run nothing")
    parser.add_argument("--match", metavar="REGEX", help="only the commands this regular expression finds")
    args = parser.parse_args(argv)
    commands = all_commands()
    if args.match:
        commands = [c for c in commands if re.search(args.match, c.text)]
    if args.list:
        for c in commands:
            what = f"skip ({c.skip_reason})" if c.skip_reason else f"budget {c.budget:.0f} s, expect exit {c.status}"
            print(f"{c.where}  {what}  {c.text}")
        return 0
    return run(commands)


if __name__ == "__main__":
    sys.exit(main())
