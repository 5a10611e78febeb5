"""Adversarial "new user" attack run over the metadp CLI, the Python API and the integrations (issue 28).

Each case runs in a fresh subprocess (``python -m metadp ARGV`` or a small Python snippet) inside its own
temporary folder, with a wall-clock timeout, and its outcome is sorted into one class:

==============  ==================================================================================
traceback       "Traceback (most recent call last)" in the output, or the process died of a signal
silence         nothing on stdout or stderr for ``--silence`` seconds (default 5), or the timeout hit
                without output every SPEAKING_GAP seconds (a case that spoke throughout is "slow")
bad-number      nan / NaN / Infinity / a bare ``inf`` / ``"epsilon": null`` / a negative epsilon /
                a JSON lower bound above the upper bound
warning-noise   Python or numpy warnings on stderr (RuntimeWarning, "overflow encountered", ...)
bad-refusal     exit status 2 with more (or less) than one line on stderr
slow            the timeout hit, but output came within --silence seconds and at least every SPEAKING_GAP s
odd-exit        any other non-zero status (verify's 1 and 3 are verdicts, not failures)
refused         exit status 2 with one line (API cases: a ValueError, printed as one line)
ok              exit status 0
==============  ==================================================================================

A case may also state what a correct tool does (``expect="refused"`` or ``"ok"``); an outcome that differs
is listed as ``unexpected`` beside its class (not a failure by itself: the reader judges).

Usage::

    python benchmarks/attack.py                        # every case, 2 at a time, table on stdout
    python benchmarks/attack.py --json attack.json     # also a JSON summary
    python benchmarks/attack.py --only plan-file -k nan
    python benchmarks/attack.py --list                 # the cases, without running them
    python benchmarks/attack.py --recheck              # rerun silence/timeouts alone, to rule out load

Exit status: 1 if any case is a traceback, silence, bad-number or warning-noise, else 0.
The metadp under test is the tree this script sits in (``PYTHONPATH`` is set to it), or ``--repo DIR``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import re
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Union

REPO = Path(__file__).resolve().parents[1]
FAILING = ("traceback", "silence", "bad-number", "warning-noise")
_HEARTBEAT = re.compile(r"^metadp: still working \(.*\) \.\.\.$")
SPEAKING_GAP = 12.0  # seconds: a case that timed out with no longer gap between outputs is "slow", not "silence"
# Warnings that are a neighbour library's own advice, not noise from metadp: Opacus says this on every
# make_private* call without secure_mode (its documented behaviour, which metadp does not hide)
_FOREIGN_WARNINGS = re.compile(r"^.*opacus/privacy_engine\.py:\d+: UserWarning: Secure RNG turned off.*\n(?:\s+warnings\.warn\(.*\n?)?",
                               re.M)
SLOW_START = {"train": 15.0, "train-plan": 15.0, "verify-run": 15.0, "opacus": 30.0}  # torch import, data setup
ORDER = FAILING + ("bad-refusal", "odd-exit", "refused", "ok")


@dataclasses.dataclass
class Case:
    name: str
    label: str  # the area attacked: cli-epsilon, plan-file, opacus, ...
    argv: Optional[List[str]] = None  # metadp CLI arguments; {plan} {tmp} {repo} are substituted
    code: Optional[str] = None  # or a Python snippet (ValueError -> exit 2, one line)
    plan: Optional[Union[str, bytes]] = None  # written to {tmp}/plan.toml
    files: Dict[str, Union[str, bytes]] = dataclasses.field(default_factory=dict)  # more files under {tmp}
    timeout: float = 20.0
    expect: Optional[str] = None  # "ok" | "refused" | None
    ok_status: Sequence[int] = (0,)  # statuses that mean a verdict, not a failure (verify: 0, 1, 3)
    env: Dict[str, str] = dataclasses.field(default_factory=dict)
    mode: Optional[int] = None  # chmod of plan.toml (0: unreadable, unless run as root)
    silence: Optional[float] = None  # seconds to first output that count as silence (default: --silence)


@dataclasses.dataclass
class Outcome:
    name: str
    label: str
    cls: str
    status: Optional[int]
    seconds: float
    first_output: Optional[float]
    detail: str
    unexpected: bool
    command: str
    head: str
    tail: str


# --------------------------------------------------------------------------------------------- running

_API_WRAPPER = """
import sys
_code = sys.argv[1]
try:
    exec(compile(_code, "<case>", "exec"), {"__name__": "__case__"})
except ValueError as _err:
    print("refused: " + " ".join(str(_err).split()), file=sys.stderr)
    sys.exit(2)
"""


def _subst(text: str, tmp: Path, repo: Path) -> str:
    return text.replace("{plan}", str(tmp / "plan.toml")).replace("{tmp}", str(tmp)).replace("{repo}", str(repo))


def _command(case: Case, tmp: Path, repo: Path) -> List[str]:
    if case.argv is not None:
        return [sys.executable, "-m", "metadp"] + [_subst(a, tmp, repo) for a in case.argv]
    return [sys.executable, "-c", _API_WRAPPER, _subst(case.code, tmp, repo)]


def _shown(case: Case, tmp: Path, repo: Path) -> str:
    """A copy-pasteable reproduction (the temp folder shown as it was)."""
    if case.argv is not None:
        env = " ".join(f"{k}={v}" for k, v in case.env.items())
        return (env + " " if env else "") + "metadp " + " ".join(_quote(_subst(a, tmp, repo)) for a in case.argv)
    return "python -c " + _quote(_subst(case.code, tmp, repo))


def _quote(s: str) -> str:
    return s if re.fullmatch(r"[\w@%+=:,./-]+", s) else "'" + s.replace("'", "'\"'\"'") + "'"


def run_case(case: Case, repo: Path, silence_after: float) -> Outcome:
    tmp = Path(tempfile.mkdtemp(prefix="metadp-attack-"))
    try:
        if case.plan is not None:
            _write(tmp / "plan.toml", case.plan)
        for rel, content in case.files.items():
            _write(tmp / rel, content)
        if case.mode is not None:
            os.chmod(tmp / "plan.toml", case.mode)
        env = dict(os.environ, PYTHONPATH=str(repo), MPLBACKEND="Agg", **case.env)
        env.pop("PYTHONWARNINGS", None)
        cmd = _command(case, tmp, repo)
        shown = _shown(case, tmp, repo)
        start = time.monotonic()
        proc = subprocess.Popen(cmd, cwd=tmp, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, start_new_session=True)
        out, err, first, timed_out, gap = _pump(proc, start, case.timeout)
        seconds = time.monotonic() - start
        status = proc.returncode
        stdout = out.decode("utf-8", "replace")
        stderr = err.decode("utf-8", "replace")
        cls, detail = classify(case, status, stdout, stderr, first, timed_out,
                               case.silence if case.silence is not None else silence_after, gap)
        both = (stdout + ("\n" if stdout and stderr else "") + stderr).strip().splitlines()
        unexpected = case.expect is not None and cls in ("ok", "refused") and cls != case.expect
        return Outcome(case.name, case.label, cls, status, round(seconds, 2),
                       None if first is None else round(first, 2), detail, unexpected, shown,
                       "\n".join(both[:3])[:600], "\n".join(both[-3:])[:600])
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _write(path: Path, content: Union[str, bytes]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content, encoding="utf-8")


def _pump(proc: subprocess.Popen, start: float, timeout: float):
    """Reads both pipes as bytes arrive; returns (stdout, stderr, seconds to the first byte, timed out)."""
    sel = selectors.DefaultSelector()
    chunks = {proc.stdout: bytearray(), proc.stderr: bytearray()}
    for pipe in chunks:
        os.set_blocking(pipe.fileno(), False)
        sel.register(pipe, selectors.EVENT_READ)
    first = None
    last = start  # when the last bytes arrived (the longest gap between outputs is kept)
    longest_gap = 0.0
    timed_out = False
    open_pipes = 2
    while open_pipes:
        left = timeout - (time.monotonic() - start)
        if left <= 0:
            timed_out = True
            break
        for key, _ in sel.select(timeout=min(left, 0.5)):
            data = os.read(key.fileobj.fileno(), 65536)
            if not data:
                sel.unregister(key.fileobj)
                open_pipes -= 1
                continue
            now = time.monotonic()
            if first is None:
                first = now - start
            longest_gap, last = max(longest_gap, now - last), now
            chunks[key.fileobj] += data[: 2_000_000 - len(chunks[key.fileobj])]
    if timed_out:
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # the case's own process group (start_new_session)
        except ProcessLookupError:
            pass
    proc.wait()
    sel.close()
    longest_gap = max(longest_gap, time.monotonic() - last)
    return bytes(chunks[proc.stdout]), bytes(chunks[proc.stderr]), first, timed_out, longest_gap


# ---------------------------------------------------------------------------------------- classifying

_TRACEBACK = re.compile(r"Traceback \(most recent call last\)|Fatal Python error|Segmentation fault")
_WARNING = re.compile(r"\b\w*Warning\b.*:|overflow encountered|invalid value encountered|divide by zero encountered"
                      r"|underflow encountered|warnings\.warn\(")
_WARNING_LINE = re.compile(r"^\S.*:\d+: \w*Warning: ", re.M)
_TEXT_BAD = [
    (re.compile(r"(?<![\w.])-?nan(?![\w])", re.I), "nan"),
    (re.compile(r"(?<![\w.\"])-?inf(?![\w\"])"), "bare inf"),
    (re.compile(r"(?<![\w\"])-?Infinity(?![\w\"])"), "Infinity"),
    (re.compile(r"epsilon[^\n\d-]{0,30}?(?<![\d.eE])-\d"), "negative epsilon"),
    (re.compile(r"\"epsilon\"\s*:\s*null"), "epsilon null"),
]


def classify(case: Case, status, stdout: str, stderr: str, first, timed_out: bool, silence_after: float,
             longest_gap: float = math.inf):
    text = stdout + "\n" + stderr
    m = _TRACEBACK.search(text)
    if m:
        last = [l for l in text.strip().splitlines() if l.strip()]
        return "traceback", (last[-1] if last else m.group(0))[:200]
    if status is not None and status < 0 and not timed_out:
        return "traceback", f"killed by signal {-status}"
    if timed_out:
        if first is not None and first <= silence_after and longest_gap <= SPEAKING_GAP:
            # still working at the timeout, but it said so from the start and kept saying it (metadp's heartbeat
            # line every 10 s, or a progress bar): slow, not silent
            return "slow", f"timeout after {case.timeout:g} s, speaking throughout (longest gap {longest_gap:.1f} s)"
        return "silence", f"timeout after {case.timeout:g} s" + ("" if first is not None else " with no output")
    if first is None and status is not None:
        pass  # finished without output: judged below (exit status)
    elif first is not None and first > silence_after:
        return "silence", f"first output after {first:.1f} s"
    for pattern, what in _TEXT_BAD:
        hit = pattern.search(_without_echo(text, case))
        if hit:
            line = _line_of(text, hit.start())
            return "bad-number", f"{what}: {line.strip()[:160]}"
    bad = _json_bounds(stdout)
    if bad:
        return "bad-number", bad
    stderr = _FOREIGN_WARNINGS.sub("", stderr)
    if _WARNING_LINE.search(stderr) or _WARNING.search(stderr):
        hit = _WARNING_LINE.search(stderr) or _WARNING.search(stderr)
        return "warning-noise", _line_of(stderr, hit.start()).strip()[:200]
    ok = tuple(case.ok_status)
    if status in ok:
        return ("ok" if status == 0 else "ok"), ("" if status == 0 else f"verdict status {status}")
    if status == 2:
        # metadp's heartbeat ("metadp: still working (...) ...") is progress, like a bar, not part of the refusal
        lines = [l for l in stderr.strip().splitlines() if l.strip() and not _HEARTBEAT.match(l)]
        if len(lines) == 1:
            return "refused", lines[0][:200]
        return "bad-refusal", f"{len(lines)} lines on stderr: " + " | ".join(lines[:2])[:200]
    lines = [l for l in text.strip().splitlines() if l.strip()]
    return "odd-exit", f"status {status}: " + (lines[-1][:200] if lines else "(no output)")


def _without_echo(text: str, case: Case) -> str:
    """The output without the echoed inputs (a case that passes --noise nan may quote 'nan' back in its
    refusal: that is not a bad number) and without the refusal line itself."""
    kept = []
    for line in text.splitlines():
        if line.startswith("metadp: error:") or line.startswith("refused:"):
            continue
        if "got " in line and ("must" in line or "needs" in line):
            continue
        kept.append(line)
    return "\n".join(kept)


def _line_of(text: str, pos: int) -> str:
    start = text.rfind("\n", 0, pos) + 1
    end = text.find("\n", pos)
    return text[start:end if end >= 0 else len(text)]


def _json_bounds(stdout: str) -> str:
    """A JSON report whose epsilon is missing, negative, or below its own lower bound."""
    s = stdout.strip()
    if not s.startswith("{"):
        return ""
    try:
        data = json.loads(s)
    except ValueError:
        return ""

    def walk(d, path):
        if isinstance(d, dict):
            up, lo = d.get("epsilon"), d.get("epsilon_lower")
            if isinstance(up, (int, float)) and up < 0:
                return f"{path}epsilon = {up} < 0"
            if isinstance(up, (int, float)) and isinstance(lo, (int, float)) and lo > up * (1 + 1e-12):
                return f"{path}epsilon_lower {lo} > epsilon {up}"
            for k, v in d.items():
                found = walk(v, f"{path}{k}.")
                if found:
                    return found
        elif isinstance(d, list):
            for i, v in enumerate(d):
                found = walk(v, f"{path}[{i}].")
                if found:
                    return found
        return ""
    return walk(data, "")


# ------------------------------------------------------------------------------------------- the cases

def _toml(value) -> str:
    if isinstance(value, str) and value.startswith("@"):
        return value[1:]  # raw TOML text
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return json.dumps(value)
    return repr(value)


def plan_text(top: Dict, sampling: Dict, noise: Dict, hierarchy: Sequence[Dict] = (), extra: str = "") -> str:
    lines = [f"{k} = {_toml(v)}" for k, v in top.items()]
    lines.append("[sampling]")
    lines += [f"{k} = {_toml(v)}" for k, v in sampling.items()]
    lines.append("[noise]")
    lines += [f"{k} = {_toml(v)}" for k, v in noise.items()]
    for level in hierarchy:
        lines.append("[[hierarchy]]")
        lines += [f"{k} = {_toml(v)}" for k, v in level.items()]
    return "\n".join(lines) + "\n" + extra


BASE_TOP = {"name": "attack", "unit": "record", "delta": 1e-5, "steps": 100}
SCHEMES = {
    "poisson": ({}, {"scheme": "poisson", "population": 60000, "batch_size": 256}),
    "poisson-rate": ({}, {"scheme": "poisson", "rate": 0.01}),
    "fixed": ({}, {"scheme": "fixed", "population": 60000, "batch_size": 256}),
    "none": ({}, {"scheme": "none", "population": 1000}),
    "shuffle": ({"unit": "task", "steps": 250}, {"scheme": "shuffle", "population": 400000, "batch_size": 1600}),
    "balls": ({"unit": "task", "steps": 250}, {"scheme": "balls_in_bins", "population": 400000, "batch_size": 1600}),
}
GAUSS = {"mechanism": "gaussian", "multiplier": 1.0}
HIER = [{"name": "class", "draw": "fixed", "size": 5, "units": 1150},
        {"name": "drawing", "draw": "fixed", "size": 2, "units": 20}]
EPISODIC_TOP = {"name": "episodic", "unit": "record", "delta": 1e-6, "steps": 50}
EPISODIC_SAMPLING = {"scheme": "episodic", "episodes": 160}


def _scheme_plan(scheme: str, top=None, sampling=None, noise=None, drop=()) -> str:
    t0, s0 = SCHEMES[scheme]
    t = {**BASE_TOP, **t0, **(top or {})}
    s = {**s0, **(sampling or {})}
    n = {**GAUSS, **(noise or {})}
    for key in drop:
        t.pop(key, None)
    return plan_text(t, s, n)


def _episodic_plan(top=None, sampling=None, noise=None, levels=None) -> str:
    return plan_text({**EPISODIC_TOP, **(top or {})}, {**EPISODIC_SAMPLING, **(sampling or {})},
                     {**GAUSS, **(noise or {})}, levels if levels is not None else HIER)


FLOATS = ["0", "-1", "1e-300", "5e-324", "1e300", "nan", "-inf", "1e999", "-0", "1_0", "\u0661"]
INTS = ["0", "-1", "1e15", "1e19", "2.5", "nan", "inf", "1e400", "9007199254740993", "3e0"]
TOML_FLOATS = ["0.0", "-1.0", "1e-300", "5e-324", "1e300", "nan", "inf", "-inf", "-0.0"]
TOML_INTS = ["0", "-1", "1_000_000_000_000_000", "9223372036854775807", "2.5", "1e3", "true", '"100"', "[100]",
             "1979-05-27", "nan", "inf"]


def cases() -> List[Case]:
    c: List[Case] = []
    add = c.append

    # -------- metadp epsilon: every numeric flag, each scheme
    base = {"poisson": ["--sampling", "poisson", "--rate", "0.01"],
            "fixed": ["--sampling", "fixed", "--batch", "256", "--population", "60000"],
            "none": ["--sampling", "none"]}
    common = {"--noise": "1", "--steps": "100", "--delta": "1e-5"}

    def eps(*extra, sampling="poisson", override=None):
        flags = dict(common, **(override or {}))
        argv = ["epsilon"] + base[sampling]
        for k, v in flags.items():
            if v is not None:
                argv += [k, v]
        return argv + list(extra)

    for v in FLOATS:
        add(Case(f"epsilon poisson --noise {v}", "cli-epsilon", eps(override={"--noise": v})))
    for v in ["0", "1", "-0.1", "1.5", "1e-300", "nan", "inf", "5e-324", "0.999999999999"]:
        add(Case(f"epsilon poisson --rate {v}", "cli-epsilon", ["epsilon", "--sampling", "poisson", "--rate", v,
                                                                "--noise", "1", "--steps", "100", "--delta", "1e-5"]))
    for v in ["0", "1", "-1e-5", "1e-300", "5e-324", "nan", "inf", "0.999999", "1e-100"]:
        add(Case(f"epsilon poisson --delta {v}", "cli-epsilon", eps(override={"--delta": v})))
    for v in INTS + ["1e7", "1e9", "1e12"]:
        add(Case(f"epsilon poisson --steps {v}", "cli-epsilon", eps(override={"--steps": v}), timeout=30))
    for v in ["0", "-1", "1", "60000", "60001", "1e15", "2.5", "nan"]:
        add(Case(f"epsilon fixed --batch {v}", "cli-epsilon",
                 ["epsilon", "--sampling", "fixed", "--batch", v, "--population", "60000", "--noise", "1",
                  "--steps", "100", "--delta", "1e-5"]))
    for v in ["0", "-1", "1", "1e15", "1e19", "2.5"]:
        add(Case(f"epsilon fixed --population {v}", "cli-epsilon",
                 ["epsilon", "--sampling", "fixed", "--batch", "1", "--population", v, "--noise", "1",
                  "--steps", "100", "--delta", "1e-5"]))
    for v in ["0.01", "1e-300", "1e300", "nan"]:
        add(Case(f"epsilon fixed --noise {v}", "cli-epsilon", eps(sampling="fixed", override={"--noise": v})))
        add(Case(f"epsilon none --noise {v}", "cli-epsilon", eps(sampling="none", override={"--noise": v})))
    add(Case("epsilon poisson --batch and --population (no rate)", "cli-epsilon",
             ["epsilon", "--sampling", "poisson", "--batch", "256", "--population", "60000", "--noise", "1",
              "--steps", "100", "--delta", "1e-5"], expect="ok"))
    add(Case("epsilon poisson --batch without --population", "cli-epsilon",
             ["epsilon", "--sampling", "poisson", "--batch", "256", "--noise", "1", "--steps", "100",
              "--delta", "1e-5"], expect="refused"))
    add(Case("epsilon poisson --batch > --population", "cli-epsilon",
             ["epsilon", "--sampling", "poisson", "--batch", "70000", "--population", "60000", "--noise", "1",
              "--steps", "100", "--delta", "1e-5"], expect="refused"))
    add(Case("epsilon none with --rate 0.5", "cli-epsilon", eps("--rate", "0.5", sampling="none"), expect="refused"))
    add(Case("epsilon poisson no rate", "cli-epsilon", ["epsilon", "--sampling", "poisson", "--noise", "1",
                                                         "--steps", "10", "--delta", "1e-5"], expect="refused"))
    add(Case("epsilon fixed with --rate", "cli-epsilon", eps("--rate", "0.1", sampling="fixed"), expect="refused"))
    add(Case("epsilon --unit task --accountant rdp --latex", "cli-epsilon", eps("--unit", "task", "--accountant", "rdp",
                                                                                "--latex"), expect="ok"))
    add(Case("epsilon --accountant pld tiny noise", "cli-epsilon",
             eps("--accountant", "pld", override={"--noise": "0.05"})))
    add(Case("epsilon --accountant pld noise 1e-300", "cli-epsilon",
             eps("--accountant", "pld", override={"--noise": "1e-300"})))
    add(Case("epsilon --accountant rdp noise 1e300 json", "cli-epsilon",
             eps("--accountant", "rdp", "--json", override={"--noise": "1e300"})))
    add(Case("epsilon --json noise 1e-300", "cli-epsilon", eps("--json", override={"--noise": "1e-300"})))
    add(Case("epsilon --json --latex", "cli-epsilon", eps("--json", "--latex"), expect="refused"))
    add(Case("epsilon huge everything", "cli-epsilon",
             ["epsilon", "--sampling", "fixed", "--batch", "1000000", "--population", "1000000000000", "--noise",
              "0.01", "--steps", "10000000", "--delta", "1e-12"], timeout=25))
    add(Case("epsilon rate 1e-12 steps 1e12", "cli-epsilon",
             ["epsilon", "--sampling", "poisson", "--rate", "1e-12", "--noise", "0.5", "--steps", "1000000000000",
              "--delta", "1e-5"], timeout=25))
    add(Case("epsilon --steps given twice", "cli-epsilon", eps("--steps", "5")))
    add(Case("epsilon --noise ' 1 ' (spaces)", "cli-epsilon", eps(override={"--noise": " 1 "})))
    add(Case("epsilon --noise '' (empty)", "cli-epsilon", eps(override={"--noise": ""}), expect="refused"))
    add(Case("epsilon LC_ALL=C PYTHONIOENCODING=ascii", "cli-epsilon", eps(),
             env={"LC_ALL": "C", "LANG": "C", "PYTHONIOENCODING": "ascii"}, expect="ok"))
    add(Case("epsilon --latex noise 1e-300", "cli-epsilon", eps("--latex", override={"--noise": "1e-300"})))

    # -------- metadp calibrate
    def cal(*extra, target="1", solve="noise", sampling="poisson"):
        argv = ["calibrate", "--target-epsilon", target, "--delta", "1e-5"] + base[sampling]
        if solve != "noise":
            argv += ["--solve", solve]
        return argv + list(extra)

    for v in ["0", "-1", "1e-12", "1e-9", "1e-6", "1e3", "1e6", "1e300", "nan", "inf", "5e-324"]:
        add(Case(f"calibrate noise --target-epsilon {v}", "cli-calibrate", cal("--steps", "100", target=v), timeout=25))
    for v in ["1e-6", "1e4", "1e9", "nan", "inf"]:
        add(Case(f"calibrate steps --target-epsilon {v}", "cli-calibrate", cal("--noise", "1", target=v, solve="steps"),
                 timeout=25))
    for v in ["1e-6", "1e4", "nan"]:
        add(Case(f"calibrate rate --target-epsilon {v}", "cli-calibrate",
                 ["calibrate", "--target-epsilon", v, "--delta", "1e-5", "--sampling", "poisson", "--noise", "1",
                  "--steps", "100", "--solve", "rate"], timeout=25))
    for steps in ["0", "1", "1e9", "1e15"]:
        add(Case(f"calibrate noise --steps {steps}", "cli-calibrate", cal("--steps", steps), timeout=25))
    for noise in ["1e-300", "1e-6", "1e6", "1e300"]:
        add(Case(f"calibrate steps --noise {noise}", "cli-calibrate", cal("--noise", noise, solve="steps"), timeout=25))
    add(Case("calibrate steps fixed sampling tiny noise", "cli-calibrate",
             cal("--noise", "0.3", solve="steps", sampling="fixed"), timeout=25))
    add(Case("calibrate steps none sampling target 1e6", "cli-calibrate",
             cal("--noise", "1", target="1e6", solve="steps", sampling="none"), timeout=25))
    add(Case("calibrate rate none sampling", "cli-calibrate",
             ["calibrate", "--target-epsilon", "1", "--delta", "1e-5", "--sampling", "none", "--noise", "1",
              "--steps", "10", "--solve", "rate"], expect="refused"))
    add(Case("calibrate noise --delta 1e-300", "cli-calibrate",
             ["calibrate", "--target-epsilon", "1", "--delta", "1e-300", "--sampling", "poisson", "--rate", "0.01",
              "--steps", "100"], timeout=25))
    add(Case("calibrate noise --delta 0.999", "cli-calibrate",
             ["calibrate", "--target-epsilon", "1", "--delta", "0.999", "--sampling", "poisson", "--rate", "0.01",
              "--steps", "100"], timeout=25))
    add(Case("calibrate --accountant rdp --json", "cli-calibrate", cal("--steps", "100", "--accountant", "rdp",
                                                                       "--json"), expect="ok"))
    add(Case("calibrate noise rate 1 steps 1", "cli-calibrate",
             ["calibrate", "--target-epsilon", "0.01", "--delta", "1e-5", "--sampling", "poisson", "--rate", "1",
              "--steps", "1"], timeout=25))
    add(Case("calibrate noise rate 0", "cli-calibrate",
             ["calibrate", "--target-epsilon", "1", "--delta", "1e-5", "--sampling", "poisson", "--rate", "0",
              "--steps", "100"], timeout=25))
    add(Case("calibrate steps rate 0", "cli-calibrate",
             ["calibrate", "--target-epsilon", "1", "--delta", "1e-5", "--sampling", "poisson", "--rate", "0",
              "--noise", "1", "--solve", "steps"], timeout=25))
    add(Case("calibrate rate with --batch", "cli-calibrate", cal("--noise", "1", "--steps", "10", "--batch", "5",
                                                                 solve="rate"), expect="refused"))
    add(Case("calibrate steps target below one step", "cli-calibrate",
             cal("--noise", "0.5", target="0.001", solve="steps"), timeout=25))

    # -------- metadp plan: odd files
    readme = "{repo}/README.md"
    odd_files = {
        "empty": "", "whitespace": "  \n\t\n", "binary": bytes(range(256)) * 4,
        "utf16": "name = 'x'\n".encode("utf-16"), "utf8-bom": b"\xef\xbb\xbf" + _scheme_plan("poisson").encode(),
        "json-event": json.dumps({"module_name": "dp_accounting.dp_event", "class_name": "GaussianDpEvent",
                                  "noise_multiplier": 1.0}),
        "nested-arrays-50k": "a = " + "[" * 50000 + "]" * 50000 + "\n",
        "nested-tables-3k": "[" + ".".join(["a"] * 3000) + "]\n",
        "inline-tables-20k": "a = " + "{b = " * 20000 + "1" + "}" * 20000 + "\n",
        "duplicate-key": _scheme_plan("poisson") + "delta = 1e-6\n",
        "unknown-top-key": _scheme_plan("poisson", top={"epsilon": 1.0}),
        "unknown-sampling-key": _scheme_plan("poisson", sampling={"batchsize": 5}),
        "sampling-as-string": 'unit = "record"\ndelta = 1e-5\nsteps = 1\nsampling = "poisson"\n[noise]\nmultiplier=1.0\n',
        "sampling-array": 'unit = "record"\ndelta = 1e-5\nsteps = 1\n[[sampling]]\nscheme = "none"\n[noise]\nmultiplier=1.0\n',
        "noise-missing": 'unit = "record"\ndelta = 1e-5\nsteps = 1\n[sampling]\nscheme = "none"\n',
        "nul-in-name": _scheme_plan("poisson", top={"name": "a\u0000b"}),
        "long-name": _scheme_plan("poisson", top={"name": "x" * 100000}),
        "latex-name": _scheme_plan("poisson", top={"name": "50% of $x_{i}$ \\end{table} & # ~ ^"}),
        "name-int": _scheme_plan("poisson", top={"name": 5}),
        "description-table": _scheme_plan("poisson", top={"description": "@{a = 1}"}),
        "references-string": _scheme_plan("poisson", top={"references": "dpmaml"}),
        "references-int": _scheme_plan("poisson", top={"references": "@[1, 2]"}),
        "references-nested": _scheme_plan("poisson", top={"references": "@[[\"dpmaml\"]]"}),
        "claim-string": _scheme_plan("poisson", top={"claim": "1.5"}),
        "claim-nan": _scheme_plan("poisson") + "[claim]\nepsilon = nan\n",
        "claim-inf": _scheme_plan("poisson") + "[claim]\nepsilon = inf\n",
        "claim-huge": _scheme_plan("poisson") + "[claim]\nepsilon = 1e300\nsource = 5\n",
        "claim-tiny": _scheme_plan("poisson") + "[claim]\nepsilon = 1e-300\n",
        "unit-int": _scheme_plan("poisson", top={"unit": 1}),
        "unit-list": _scheme_plan("poisson", top={"unit": "@[\"record\"]"}),
        "accountant-upper": _scheme_plan("poisson", top={"accountant": "PLD"}),
        "relation-substitute-poisson": _scheme_plan("poisson", top={"relation": "substitute"}),
        "relation-add-remove-fixed": _scheme_plan("fixed", top={"relation": "add_remove"}),
        "relation-bogus": _scheme_plan("poisson", top={"relation": "replace"}),
        "scheme-upper": _scheme_plan("poisson", sampling={"scheme": "Poisson"}),
        "scheme-int": _scheme_plan("poisson", sampling={"scheme": 3}),
        "scheme-table": _scheme_plan("poisson", sampling={"scheme": "@{a=1}"}),
        "scheme-one_pass": _scheme_plan("shuffle", sampling={"scheme": "one_pass"}),
        "scheme-multistage": _scheme_plan("poisson", sampling={"scheme": "multistage"}),
        "mechanism-laplace-poisson": _scheme_plan("poisson", noise={"mechanism": "laplace", "multiplier": None}),
        "no-steps": _scheme_plan("poisson", drop=("steps",)),
        "steps-and-epochs": _scheme_plan("poisson", top={"epochs": 2}),
    }
    for key, content in odd_files.items():
        text = content
        if isinstance(text, str) and "multiplier = None" in text:
            text = text.replace("multiplier = None\n", "scale = 1.0\n")
        add(Case(f"plan file {key}", "plan-file", ["plan", "{plan}"], plan=text, timeout=30))
    add(Case("plan README.md as plan", "plan-file", ["plan", readme], expect="refused"))
    add(Case("plan folder as plan", "plan-file", ["plan", "{tmp}"], expect="refused"))
    add(Case("plan missing file", "plan-file", ["plan", "{tmp}/nope.toml"], expect="refused"))
    add(Case("plan /dev/null", "plan-file", ["plan", "/dev/null"], expect="refused"))
    add(Case("plan /dev/zero", "plan-file", ["plan", "/dev/zero"], expect="refused", timeout=15))
    add(Case("plan '-' (stdin)", "plan-file", ["plan", "-"], expect="refused"))
    add(Case("plan file named a=b.toml", "plan-file", ["plan", "{tmp}/a=b.toml"],
             files={"a=b.toml": _scheme_plan("poisson")}, expect="ok"))
    add(Case("plan unreadable file", "plan-file", ["plan", "{plan}"], plan=_scheme_plan("poisson"), mode=0,
             expect="refused"))
    add(Case("plan --plot to missing folder", "plan-file", ["plan", "--plot", "{tmp}/no/such/x.png"], expect="refused"))
    add(Case("plan --plot .txt", "plan-file", ["plan", "--plot", "{tmp}/x.txt"], expect="refused"))
    add(Case("plan --plot '' ", "plan-file", ["plan", "--plot", ""], expect="refused"))
    add(Case("plan --plot episodic", "plan-file", ["plan", "{plan}", "--plot", "{tmp}/x.png"],
             plan=_episodic_plan(), timeout=30))
    add(Case("plan --plot shuffle", "plan-file", ["plan", "{plan}", "--plot", "{tmp}/x.png"],
             plan=_scheme_plan("shuffle"), timeout=30))
    add(Case("plan --plot noise 1e-300", "plan-file", ["plan", "{plan}", "--plot", "{tmp}/x.png"],
             plan=_scheme_plan("poisson", noise={"multiplier": 1e-300}), timeout=30))
    add(Case("plan --delta without --dp-event", "plan-file", ["plan", "--delta", "1e-5"], expect="refused"))
    add(Case("plan --accountant pld default", "plan-file", ["plan", "--accountant", "pld"], expect="ok", timeout=25))
    add(Case("plan --latex default", "plan-file", ["plan", "--latex"], expect="ok"))

    # -------- plan files: every scheme x extreme numbers
    for scheme in SCHEMES:
        full = scheme == "poisson"  # every value for one scheme, the telling ones for the others
        for v in (TOML_FLOATS if full else ["1e-300", "1e300", "nan"]):
            add(Case(f"plan {scheme} multiplier {v}", "plan-scheme", ["plan", "{plan}"],
                     plan=_scheme_plan(scheme, noise={"multiplier": f"@{v}"}), timeout=30))
        for v in ["0.01"]:
            add(Case(f"plan {scheme} multiplier {v} steps 1e7", "plan-scheme", ["plan", "{plan}"],
                     plan=_scheme_plan(scheme, top={"steps": 10_000_000}, noise={"multiplier": 0.01}), timeout=25))
        for v in (["0", "-1", "1_000_000_000_000_000", "9223372036854775807", "2.5", "1e3", "true", '"100"'] if full
                  else ["1_000_000_000_000_000", "2.5"]):
            add(Case(f"plan {scheme} steps {v}", "plan-scheme", ["plan", "{plan}"],
                     plan=_scheme_plan(scheme, top={"steps": f"@{v}"}), timeout=30))
        for v in (["1e-300", "0.0", "1.0", "nan", "-1e-5", "0.5"] if full else ["1e-300"]):
            add(Case(f"plan {scheme} delta {v}", "plan-scheme", ["plan", "{plan}"],
                     plan=_scheme_plan(scheme, top={"delta": f"@{v}"}), timeout=30))
        add(Case(f"plan {scheme} laplace scale 1e-300", "plan-scheme", ["plan", "{plan}"],
                 plan=_scheme_plan(scheme, noise={"mechanism": "laplace", "multiplier": None}).replace(
                     "multiplier = None", "scale = 1e-300"), timeout=30))
        if full:
            add(Case(f"plan {scheme} laplace scale 1e300", "plan-scheme", ["plan", "{plan}"],
                     plan=_scheme_plan(scheme, noise={"mechanism": "laplace", "multiplier": None}).replace(
                         "multiplier = None", "scale = 1e300"), timeout=30))
        add(Case(f"plan {scheme} count_noise 1e-300", "plan-scheme", ["plan", "{plan}"],
                 plan=_scheme_plan(scheme, noise={"count_noise": 1e-300}), timeout=30))
        add(Case(f"plan {scheme} unit group size 1e15", "plan-scheme", ["plan", "{plan}"],
                 plan=_scheme_plan(scheme, top={"unit": "group", "group_size": 10**15}), timeout=30))
        add(Case(f"plan {scheme} epochs 1e9", "plan-scheme", ["plan", "{plan}"],
                 plan=_scheme_plan(scheme, top={"epochs": 1e9}, drop=("steps",)), timeout=30))
        add(Case(f"plan {scheme} epochs 0.001", "plan-scheme", ["plan", "{plan}"],
                 plan=_scheme_plan(scheme, top={"epochs": 0.001}, drop=("steps",)), timeout=30))
        add(Case(f"plan {scheme} --accountant all --json", "plan-scheme", ["plan", "{plan}", "--json",
                                                                            "--accountant", "all"],
                 plan=_scheme_plan(scheme), expect="ok", timeout=25))
    for scheme in ("poisson", "fixed", "shuffle", "balls", "none"):
        for pop in (["1", "0", "-5", "1_000_000_000_000", "9223372036854775807", "2.5"] if scheme == "fixed"
                    else ["1", "1_000_000_000_000"]):
            add(Case(f"plan {scheme} population {pop}", "plan-scheme", ["plan", "{plan}"],
                     plan=_scheme_plan(scheme, sampling={"population": f"@{pop}"}), timeout=30))
        for bs in (["0", "1", "-1", "1_000_000_000_000", "2.5"] if scheme == "fixed" else ["1", "1_000_000_000_000"]):
            add(Case(f"plan {scheme} batch_size {bs}", "plan-scheme", ["plan", "{plan}"],
                     plan=_scheme_plan(scheme, sampling={"batch_size": f"@{bs}"}), timeout=30))
    for r in ["0.0", "1.0", "1e-300", "nan", "1.5", "-0.0"]:
        add(Case(f"plan poisson rate {r}", "plan-scheme", ["plan", "{plan}"],
                 plan=_scheme_plan("poisson-rate", sampling={"rate": f"@{r}"}), timeout=30))
    add(Case("plan balls population 1e12 batch 1 steps 1e7 noise 0.01", "plan-scheme", ["plan", "{plan}"],
             plan=_scheme_plan("balls", top={"steps": 10_000_000}, sampling={"population": 10**12, "batch_size": 1},
                               noise={"multiplier": 0.01}), timeout=25))
    add(Case("plan shuffle population 1e12 batch 1e6 noise 0.05", "plan-scheme", ["plan", "{plan}"],
             plan=_scheme_plan("shuffle", top={"steps": 10**6}, sampling={"population": 10**12, "batch_size": 10**6},
                               noise={"multiplier": 0.05}), timeout=25))
    add(Case("plan shuffle steps not multiple of pass", "plan-scheme", ["plan", "{plan}"],
             plan=_scheme_plan("shuffle", top={"steps": 333}), timeout=30))
    add(Case("plan balls steps 1 (partial pass)", "plan-scheme", ["plan", "{plan}"],
             plan=_scheme_plan("balls", top={"steps": 1}), timeout=30))
    add(Case("plan shuffle relation substitute", "plan-scheme", ["plan", "{plan}"],
             plan=_scheme_plan("shuffle", top={"relation": "substitute"}), timeout=30))
    add(Case("plan none unit group relation substitute", "plan-scheme", ["plan", "{plan}"],
             plan=_scheme_plan("none", top={"unit": "group", "group_size": 3, "relation": "substitute"}), timeout=30))
    add(Case("plan fixed group 2 unit group", "plan-scheme", ["plan", "{plan}"],
             plan=_scheme_plan("fixed", top={"unit": "group", "group_size": 2}), expect="ok", timeout=30))
    add(Case("plan group_size 1", "plan-scheme", ["plan", "{plan}"],
             plan=_scheme_plan("poisson", top={"unit": "group", "group_size": 1}), expect="refused"))
    add(Case("plan group_size larger than population", "plan-scheme", ["plan", "{plan}"],
             plan=_scheme_plan("none", top={"unit": "group", "group_size": 5000}), timeout=30))
    add(Case("plan task unit with hierarchy poisson", "plan-scheme", ["plan", "{plan}"],
             plan=plan_text(dict(BASE_TOP, unit="task"), SCHEMES["poisson"][1], GAUSS, HIER), expect="ok", timeout=25))
    add(Case("plan count_noise with laplace", "plan-scheme", ["plan", "{plan}"],
             plan=_scheme_plan("poisson", noise={"mechanism": "laplace", "multiplier": None,
                                                 "count_noise": 1.0}).replace("multiplier = None", "scale = 1.0"),
             expect="refused"))
    add(Case("plan count_noise nan", "plan-scheme", ["plan", "{plan}"],
             plan=_scheme_plan("poisson", noise={"count_noise": "@nan"}), expect="refused"))
    add(Case("plan count_noise 1e300", "plan-scheme", ["plan", "{plan}"],
             plan=_scheme_plan("poisson", noise={"count_noise": 1e300}), timeout=30))

    # -------- episodic / multistage
    for v in ["0", "1", "-1", "1_000_000_000_000", "2.5", "9223372036854775807"]:
        add(Case(f"plan episodic episodes {v}", "plan-episodic", ["plan", "{plan}"],
                 plan=_episodic_plan(sampling={"episodes": f"@{v}"}), timeout=25))
    for v in ["1e-300", "0.01", "1e300", "nan", "inf"]:
        add(Case(f"plan episodic multiplier {v}", "plan-episodic", ["plan", "{plan}"],
                 plan=_episodic_plan(noise={"multiplier": f"@{v}"}), timeout=25))
    for v in ["1_000_000_000", "1", "0"]:
        add(Case(f"plan episodic steps {v}", "plan-episodic", ["plan", "{plan}"],
                 plan=_episodic_plan(top={"steps": f"@{v}"}), timeout=25))
    level_attacks = {
        "size 0": [dict(HIER[0], size=0), HIER[1]],
        "size > units": [dict(HIER[0], size=2000), HIER[1]],
        "size = units": [dict(HIER[0], size=1150), HIER[1]],
        "size 2.5": [dict(HIER[0], size=2.5), HIER[1]],
        "units 1e15": [dict(HIER[0], units=10**15), HIER[1]],
        "units list": [HIER[0], dict(HIER[1], units="@[20, 30, 40]")],
        "units empty list": [HIER[0], dict(HIER[1], units="@[]")],
        "units list of 0": [HIER[0], dict(HIER[1], units="@[0, 0]")],
        "units string": [dict(HIER[0], units="many"), HIER[1]],
        "draw poisson rate 0": [dict(HIER[0], draw="poisson", rate=0.0, size=None), HIER[1]],
        "draw poisson rate 1": [dict(HIER[0], draw="poisson", rate=1.0, size=None), HIER[1]],
        "draw poisson rate nan": [dict(HIER[0], draw="poisson", rate="@nan", size=None), HIER[1]],
        "draw poisson rate 1e-300": [dict(HIER[0], draw="poisson", rate=1e-300, size=None), HIER[1]],
        "draw poisson both rate and size": [dict(HIER[0], draw="poisson", rate=0.1), HIER[1]],
        "draw bogus": [dict(HIER[0], draw="bernoulli"), HIER[1]],
        "unknown level key": [dict(HIER[0], weight=2), HIER[1]],
        "one level": [HIER[0]],
        "30 levels": [dict(HIER[1], name=f"l{i}") for i in range(30)],
        "200 levels": [dict(HIER[1], name=f"l{i}") for i in range(200)],
        "name int": [dict(HIER[0], name=7), HIER[1]],
    }
    for key, levels in level_attacks.items():
        levels = [{k: v for k, v in lv.items() if v is not None} for lv in levels]
        add(Case(f"plan episodic hierarchy {key}", "plan-episodic", ["plan", "{plan}"],
                 plan=_episodic_plan(levels=levels), timeout=25))
    add(Case("plan episodic empty hierarchy", "plan-episodic", ["plan", "{plan}"],
             plan=_episodic_plan(levels=[]) + "hierarchy = []\n", expect="refused"))
    add(Case("plan episodic hierarchy as table", "plan-episodic", ["plan", "{plan}"],
             plan=_episodic_plan(levels=[]) + "[hierarchy]\nname = 'x'\n", expect="refused"))
    add(Case("plan episodic per_example clipping", "plan-episodic", ["plan", "{plan}"],
             plan=_episodic_plan(noise={"clipping": "per_example"}), expect="ok", timeout=25))
    add(Case("plan episodic per_example poisson lower level", "plan-episodic", ["plan", "{plan}"],
             plan=_episodic_plan(noise={"clipping": "per_example"},
                                 levels=[HIER[0], {"name": "d", "draw": "poisson", "rate": 0.1, "units": 20}]),
             timeout=25))
    add(Case("plan episodic unit task", "plan-episodic", ["plan", "{plan}"], plan=_episodic_plan(top={"unit": "task"}),
             timeout=25))
    add(Case("plan episodic unit group", "plan-episodic", ["plan", "{plan}"],
             plan=_episodic_plan(top={"unit": "group", "group_size": 2}), expect="refused"))
    add(Case("plan episodic epochs", "plan-episodic", ["plan", "{plan}"],
             plan=_episodic_plan(top={"epochs": 1}).replace("steps = 50\n", ""), expect="refused"))
    add(Case("plan episodic --json --accountant rdp", "plan-episodic", ["plan", "{plan}", "--json", "--accountant",
                                                                         "rdp"], plan=_episodic_plan(), timeout=25))
    add(Case("plan episodic laplace", "plan-episodic", ["plan", "{plan}"],
             plan=_episodic_plan(noise={"mechanism": "laplace", "multiplier": None}).replace(
                 "multiplier = None", "scale = 1.0"), expect="refused"))

    # -------- --dp-event
    def ev(cls, **fields):
        return dict({"module_name": "dp_accounting.dp_event", "class_name": cls}, **fields)

    g = ev("GaussianDpEvent", noise_multiplier=1.0)
    events = {
        "gaussian": g,
        "gaussian 1e-300": ev("GaussianDpEvent", noise_multiplier=1e-300),
        "gaussian 1e308 replace-one": ev("GaussianDpEvent", noise_multiplier=1e308),
        "gaussian string inf": ev("GaussianDpEvent", noise_multiplier="inf"),
        "gaussian string nan": ev("GaussianDpEvent", noise_multiplier="nan"),
        "gaussian string 1": ev("GaussianDpEvent", noise_multiplier="1"),
        "gaussian bool": ev("GaussianDpEvent", noise_multiplier=True),
        "laplace tiny": ev("LaplaceDpEvent", noise_multiplier=1e-300),
        "poisson q 1e-300": ev("PoissonSampledDpEvent", sampling_probability=1e-300, event=g),
        "poisson q 1": ev("PoissonSampledDpEvent", sampling_probability=1, event=g),
        "poisson of laplace": ev("PoissonSampledDpEvent", sampling_probability=0.01,
                                 event=ev("LaplaceDpEvent", noise_multiplier=1.0)),
        "selfcomposed 2^53": ev("SelfComposedDpEvent", event=ev("PoissonSampledDpEvent", sampling_probability=0.01,
                                                                 event=g), count=2**53),
        "selfcomposed 1e7 of 0.01": ev("SelfComposedDpEvent", event=ev("PoissonSampledDpEvent",
                                                                       sampling_probability=0.01,
                                                                       event=ev("GaussianDpEvent",
                                                                                noise_multiplier=0.01)),
                                       count=10**7),
        "selfcomposed count 2.0": ev("SelfComposedDpEvent", event=g, count=2.0),
        "selfcomposed count 0": ev("SelfComposedDpEvent", event=g, count=0),
        "selfcomposed count 1e300": ev("SelfComposedDpEvent", event=g, count=1e300),
        "composed empty": ev("ComposedDpEvent", events=[]),
        "composed 5000 gaussians": ev("ComposedDpEvent", events=[ev("GaussianDpEvent", noise_multiplier=1 + i * 1e-6)
                                                                  for i in range(5000)]),
        "swor n 1e15": ev("SampledWithoutReplacementDpEvent", source_dataset_size=10**15, sample_size=1, event=g),
        "swor m 0": ev("SampledWithoutReplacementDpEvent", source_dataset_size=100, sample_size=0, event=g),
        "swor m = n": ev("SampledWithoutReplacementDpEvent", source_dataset_size=100, sample_size=100, event=g),
        "noop": ev("NoOpDpEvent"),
        "nonprivate": ev("NonPrivateDpEvent"),
        "randomized response": ev("RandomizedResponseDpEvent", noise_parameter=0.5, num_buckets=2),
        "mixture": ev("MixtureOfGaussiansDpEvent", standard_deviation=1.0, sensitivities=[0, 1],
                      sampling_probs=[0.9, 0.1]),
        "zcdp": ev("ZCDpEvent", rho=0.1, xi=0),
        "other module": {"module_name": "os", "class_name": "system", "noise_multiplier": 1},
        "no module": {"class_name": "GaussianDpEvent", "noise_multiplier": 1},
        "extra field": ev("GaussianDpEvent", noise_multiplier=1.0, sigma=2),
        "json list": [g],
        "json number": 5,
        "json string": "GaussianDpEvent",
    }
    for key, obj in events.items():
        add(Case(f"plan --dp-event {key}", "dp-event", ["plan", "--dp-event", "{tmp}/e.json", "--delta", "1e-5"],
                 files={"e.json": json.dumps(obj)}, timeout=25))
    add(Case("plan --dp-event replace-one 1e308", "dp-event",
             ["plan", "--dp-event", "{tmp}/e.json", "--delta", "1e-5", "--noise-relative-to",
              "replace_one_sensitivity", "--relation", "substitute"],
             files={"e.json": json.dumps(events["gaussian 1e308 replace-one"])}, timeout=25))
    add(Case("plan --dp-event NaN literal", "dp-event", ["plan", "--dp-event", "{tmp}/e.json", "--delta", "1e-5"],
             files={"e.json": '{"module_name": "dp_accounting.dp_event", "class_name": "GaussianDpEvent", '
                              '"noise_multiplier": NaN}'}))
    add(Case("plan --dp-event Infinity literal", "dp-event", ["plan", "--dp-event", "{tmp}/e.json", "--delta", "1e-5"],
             files={"e.json": '{"module_name": "dp_accounting.dp_event", "class_name": "GaussianDpEvent", '
                              '"noise_multiplier": Infinity}'}))
    add(Case("plan --dp-event huge int literal", "dp-event", ["plan", "--dp-event", "{tmp}/e.json", "--delta", "1e-5"],
             files={"e.json": '{"module_name": "dp_accounting.dp_event", "class_name": "SelfComposedDpEvent", '
                              '"count": 1' + "0" * 5000 + ', "event": ' + json.dumps(g) + '}'}))
    add(Case("plan --dp-event float literal 1e400", "dp-event", ["plan", "--dp-event", "{tmp}/e.json", "--delta", "1e-5"],
             files={"e.json": '{"module_name": "dp_accounting.dp_event", "class_name": "GaussianDpEvent", '
                              '"noise_multiplier": 1e400}'}))
    nest = json.dumps(g)
    for _ in range(150):
        nest = '{"module_name": "dp_accounting.dp_event", "class_name": "SelfComposedDpEvent", "count": 1, "event": ' \
               + nest + "}"
    add(Case("plan --dp-event 150 levels", "dp-event", ["plan", "--dp-event", "{tmp}/e.json", "--delta", "1e-5"],
             files={"e.json": nest}, timeout=25))
    deep = '{"a": ' * 100000 + "1" + "}" * 100000
    add(Case("plan --dp-event JSON 100k levels", "dp-event", ["plan", "--dp-event", "{tmp}/e.json", "--delta", "1e-5"],
             files={"e.json": deep}))
    add(Case("plan --dp-event list 100k levels", "dp-event", ["plan", "--dp-event", "{tmp}/e.json", "--delta", "1e-5"],
             files={"e.json": "[" * 100000 + "]" * 100000}))
    for key, content in {"empty": "", "binary": bytes(range(256)), "toml plan": _scheme_plan("poisson"),
                         "utf16": json.dumps(g).encode("utf-16")}.items():
        add(Case(f"plan --dp-event {key} file", "dp-event", ["plan", "--dp-event", "{tmp}/e.json", "--delta", "1e-5"],
                 files={"e.json": content}, expect="refused"))
    add(Case("plan --dp-event README.md", "dp-event", ["plan", "--dp-event", readme, "--delta", "1e-5"],
             expect="refused"))
    add(Case("plan --dp-event folder", "dp-event", ["plan", "--dp-event", "{tmp}", "--delta", "1e-5"],
             expect="refused"))
    for d in ["0", "1", "nan", "1e-300", "5e-324"]:
        add(Case(f"plan --dp-event --delta {d}", "dp-event", ["plan", "--dp-event", "{tmp}/e.json", "--delta", d],
                 files={"e.json": json.dumps(g)}, timeout=30))
    add(Case("plan --dp-event --unit task --relation substitute poisson", "dp-event",
             ["plan", "--dp-event", "{tmp}/e.json", "--delta", "1e-5", "--unit", "task", "--relation", "substitute"],
             files={"e.json": json.dumps(events["poisson q 1"])}, timeout=30))
    add(Case("plan --dp-event --accountant rdp --json laplace", "dp-event",
             ["plan", "--dp-event", "{tmp}/e.json", "--delta", "1e-5", "--accountant", "rdp", "--json"],
             files={"e.json": json.dumps(events["poisson of laplace"])}, timeout=30))

    # -------- cite
    add(Case("cite default", "cite", ["cite"], expect="ok"))
    for key in ("episodic", "shuffle", "balls", "group", "laplace", "latex-name", "tiny-noise"):
        plan = {"episodic": _episodic_plan(), "shuffle": _scheme_plan("shuffle"), "balls": _scheme_plan("balls"),
                "group": _scheme_plan("none", top={"unit": "group", "group_size": 3}),
                "laplace": _scheme_plan("none", noise={"mechanism": "laplace", "multiplier": None}).replace(
                    "multiplier = None", "scale = 1.0"),
                "latex-name": odd_files["latex-name"],
                "tiny-noise": _scheme_plan("poisson", noise={"multiplier": 1e-300})}[key]
        add(Case(f"cite {key} --format latex", "cite", ["cite", "{plan}", "--format", "latex"], plan=plan, timeout=25))
    add(Case("cite --out /dev/full --force", "cite", ["cite", "--out", "/dev/full", "--force"], expect="refused"))
    add(Case("cite --out /dev/null", "cite", ["cite", "--out", "/dev/null"], expect="refused"))
    add(Case("cite --out ''", "cite", ["cite", "--out", ""], expect="refused"))
    add(Case("cite --out folder", "cite", ["cite", "--out", "{tmp}"], expect="refused"))
    add(Case("cite --out missing folder", "cite", ["cite", "--out", "{tmp}/no/refs.bib"], expect="refused"))
    add(Case("cite --force without --out", "cite", ["cite", "--force"], expect="refused"))
    add(Case("cite README.md", "cite", ["cite", readme], expect="refused"))
    add(Case("cite empty file", "cite", ["cite", "{plan}"], plan="", expect="refused"))
    add(Case("cite --out read-only file --force", "cite", ["cite", "--out", "/proc/version", "--force"],
             expect="refused"))
    add(Case("cite --format bibtex --accountant rdp", "cite", ["cite", "--format", "bibtex", "--accountant", "rdp"],
             expect="ok"))

    # -------- verify
    q = ["--samples", "20000"]
    for v in ["0", "-1", "1e-300", "1e300", "nan", "inf"]:
        add(Case(f"verify gaussian --noise {v}", "verify", ["verify", "gaussian", "--noise", v] + q, ok_status=(0, 1, 3),
                 timeout=25))
    for v in ["1e-300", "1e300", "nan"]:
        add(Case(f"verify gaussian --claim-noise {v}", "verify", ["verify", "gaussian", "--noise", "1", "--claim-noise",
                                                                  v] + q, ok_status=(0, 1, 3), timeout=25))
    for v in ["", ",", "nan", "-1", "1e300", "1e-300", ",".join(["1"] * 500)]:
        add(Case(f"verify gaussian --epsilons {v[:20]!r}", "verify", ["verify", "gaussian", "--noise", "1",
                                                                      "--epsilons", v] + q,
                 ok_status=(0, 1, 3), timeout=25))
    for v in ["0", "1", "2", "1e15", "-5", "1e19"]:
        add(Case(f"verify gaussian --samples {v}", "verify", ["verify", "gaussian", "--noise", "1", "--samples", v],
                 ok_status=(0, 1, 3), timeout=25))
    for flag, vals in {"--alpha": ["1", "1e-300"], "--power": ["0", "1"],
                       "--violation": ["0", "1e300"], "--seed": ["-1", "1e19"]}.items():
        for v in vals:
            add(Case(f"verify gaussian {flag} {v}", "verify", ["verify", "gaussian", "--noise", "1", flag, v] + q,
                     ok_status=(0, 1, 3), timeout=25))
    for v in ["0", "1e-300", "1e300", "nan"]:
        add(Case(f"verify laplace --scale {v}", "verify", ["verify", "laplace", "--scale", v] + q, ok_status=(0, 1, 3),
                 timeout=25))
    for args in (["--epsilon", "0"], ["--epsilon", "1e300"], ["--epsilon", "1e-300"], ["--cell", "0"],
                 ["--cell", "100000"], ["--m", "0"], ["--m", "1e9"], ["--epsilon", "nan"]):
        full = dict(zip(["--epsilon", "--cell", "--m"], ["1", "4", "1"]))
        full[args[0]] = args[1]
        add(Case(f"verify dp-pix {' '.join(args)}", "verify",
                 ["verify", "dp-pix"] + [x for kv in full.items() for x in kv] + q, ok_status=(0, 1, 3), timeout=25))
    for args in (["--rate", "0"], ["--rate", "1"], ["--rate", "1e-300"], ["--rate", "nan"], ["--steps", "0"],
                 ["--steps", "1e9"], ["--noise", "1e-300"], ["--steps", "1e15"]):
        full = {"--rate": "0.5", "--noise": "1", "--steps": "3"}
        full[args[0]] = args[1]
        add(Case(f"verify poisson {' '.join(args)}", "verify",
                 ["verify", "poisson"] + [x for kv in full.items() for x in kv] + q, ok_status=(0, 1, 3), timeout=25))
    add(Case("verify (no mechanism)", "verify", ["verify"], expect="refused"))
    add(Case("verify gaussian --scale 1 (wrong flag)", "verify", ["verify", "gaussian", "--noise", "1", "--scale", "1"],
             expect="refused"))
    add(Case("verify gaussian --plot missing folder", "verify",
             ["verify", "gaussian", "--noise", "1", "--plot", "{tmp}/no/x.png"] + q, expect="refused", timeout=25))
    add(Case("verify gaussian --json --quiet", "verify", ["verify", "gaussian", "--noise", "1", "--json",
                                                          "--quiet"] + q, ok_status=(0, 1, 3), timeout=25))
    add(Case("verify plan README.md", "verify", ["verify", "plan", readme] + q, expect="refused"))
    add(Case("verify plan empty", "verify", ["verify", "plan", "{plan}"] + q, plan="", expect="refused"))
    add(Case("verify plan balls_in_bins", "verify", ["verify", "plan", "{plan}"] + q, plan=_scheme_plan("balls"),
             ok_status=(0, 1, 3), timeout=30))
    add(Case("verify plan episodic", "verify", ["verify", "plan", "{plan}"] + q, plan=_episodic_plan(),
             ok_status=(0, 1, 3), timeout=30))
    add(Case("verify plan group", "verify", ["verify", "plan", "{plan}"] + q,
             plan=_scheme_plan("none", top={"unit": "group", "group_size": 3}), ok_status=(0, 1, 3), timeout=30))
    add(Case("verify plan noise 1e-300", "verify", ["verify", "plan", "{plan}"] + q,
             plan=_scheme_plan("poisson", noise={"multiplier": 1e-300}), ok_status=(0, 1, 3), timeout=30))
    add(Case("verify plan steps 1e12", "verify", ["verify", "plan", "{plan}"] + q,
             plan=_scheme_plan("poisson", top={"steps": 10**12}), ok_status=(0, 1, 3), timeout=30))
    add(Case("verify --crosscheck README.md", "verify", ["verify", "--crosscheck", readme], expect="refused"))
    add(Case("verify --crosscheck folder", "verify", ["verify", "--crosscheck", "{tmp}"], expect="refused"))
    add(Case("verify --crosscheck empty .toml", "verify", ["verify", "--crosscheck", "{plan}"], plan="",
             expect="refused"))
    add(Case("verify --crosscheck binary", "verify", ["verify", "--crosscheck", "{plan}"], plan=bytes(range(256)),
             expect="refused"))
    add(Case("verify --crosscheck event without --delta", "verify", ["verify", "--crosscheck", "{tmp}/e.json"],
             files={"e.json": json.dumps(g)}, expect="refused"))
    add(Case("verify --crosscheck event 150 levels", "verify", ["verify", "--crosscheck", "{tmp}/e.json",
                                                                "--delta", "1e-5"], files={"e.json": nest},
             ok_status=(0, 1, 3), timeout=30))
    add(Case("verify --crosscheck event JSON 100k levels", "verify",
             ["verify", "--crosscheck", "{tmp}/e.json", "--delta", "1e-5"], files={"e.json": deep}, expect="refused"))
    add(Case("verify --crosscheck event --delta nan", "verify",
             ["verify", "--crosscheck", "{tmp}/e.json", "--delta", "nan"], files={"e.json": json.dumps(g)},
             expect="refused"))
    for key in ("shuffle", "balls", "fixed", "none"):
        add(Case(f"verify --crosscheck {key}", "verify", ["verify", "--crosscheck", "{plan}"],
                 plan=_scheme_plan(key), ok_status=(0, 1, 3), timeout=30))
    add(Case("verify --crosscheck episodic", "verify", ["verify", "--crosscheck", "{plan}"], plan=_episodic_plan(),
             ok_status=(0, 1, 3), timeout=30))
    add(Case("verify --crosscheck noise 1e-300", "verify", ["verify", "--crosscheck", "{plan}"],
             plan=_scheme_plan("poisson", noise={"multiplier": 1e-300}), ok_status=(0, 1, 3), timeout=30))
    add(Case("verify --crosscheck noise 1e300", "verify", ["verify", "--crosscheck", "{plan}"],
             plan=_scheme_plan("poisson", noise={"multiplier": 1e300}), ok_status=(0, 1, 3), timeout=30))
    add(Case("verify --crosscheck steps 1e12", "verify", ["verify", "--crosscheck", "{plan}"],
             plan=_scheme_plan("poisson", top={"steps": 10**12}), ok_status=(0, 1, 3), timeout=30))
    add(Case("verify --crosscheck .txt plan", "verify", ["verify", "--crosscheck", "{tmp}/p.txt"],
             files={"p.txt": _scheme_plan("poisson")}, ok_status=(0, 1, 3), timeout=30))
    quick = "{repo}/benchmarks/audit_sinusoid_quick.toml"
    for v in ["0", "1", "2", "3", "-1", "1e9", "2.5"]:
        add(Case(f"verify run dp-maml --canaries {v}", "verify-run",
                 ["verify", "run", "dp-maml", "--plan", quick, "--data", "sinusoid", "--canaries", v, "--hidden", "4"],
                 ok_status=(0, 1, 3), timeout=25))
    for args in (["--hidden", "0"], ["--hidden", "1e9"], ["--outer-lr", "nan"], ["--outer-lr", "1e300"],
                 ["--data", "glyphs"], ["--data", "omniglot"], ["--view", "record"], ["--plant-defect", "low-noise"]):
        add(Case(f"verify run dp-maml {' '.join(args)}", "verify-run",
                 ["verify", "run", "dp-maml", "--plan", quick, "--data", "sinusoid", "--canaries", "10",
                  "--hidden", "4"] + args, ok_status=(0, 1, 3), timeout=25))
    add(Case("verify run without plan", "verify-run", ["verify", "run", "dp-maml", "--data", "sinusoid"],
             expect="refused"))
    add(Case("verify run bogus algorithm", "verify-run", ["verify", "run", "dp-bogus", "--plan", quick],
             expect="refused"))
    add(Case("verify run plan 1e12 steps", "verify-run",
             ["verify", "run", "dp-maml", "--plan", "{plan}", "--data", "sinusoid", "--canaries", "10"],
             plan=_scheme_plan("poisson", top={"unit": "task", "steps": 10**12},
                               sampling={"population": 40, "batch_size": 2}), ok_status=(0, 1, 3), timeout=30))
    add(Case("verify run shuffle plan", "verify-run",
             ["verify", "run", "dp-maml", "--plan", "{plan}", "--data", "sinusoid", "--canaries", "10"],
             plan=_scheme_plan("shuffle", top={"steps": 20}, sampling={"population": 40, "batch_size": 2}),
             expect="refused", timeout=30))
    add(Case("verify run dp-maml-sample --inner-noise 1e-300", "verify-run",
             ["verify", "run", "dp-maml-sample", "--plan", "{repo}/benchmarks/audit_sinusoid_support.toml",
              "--data", "sinusoid", "--canaries", "10", "--inner-noise", "1e-300"], ok_status=(0, 1, 3), timeout=25))
    add(Case("verify run dp-maml-sample --inner-steps 1e9", "verify-run",
             ["verify", "run", "dp-maml-sample", "--plan", "{repo}/benchmarks/audit_sinusoid_support.toml",
              "--data", "sinusoid", "--canaries", "10", "--inner-steps", "1e9"], ok_status=(0, 1, 3), timeout=30))

    # -------- train (tiny runs only)
    tiny = ["--data", "sinusoid", "--steps", "2", "--meta-batch", "4", "--pool", "50", "--eval-tasks", "5",
            "--out", "{tmp}/run"]

    def tr(algo, *extra, replace=None):
        args = list(tiny)
        for k, v in (replace or {}).items():
            i = args.index(k)
            args[i + 1] = v
        return ["train", algo] + args + list(extra)

    for v in ["0", "-1", "1e-300", "1e300", "nan", "inf"]:
        add(Case(f"train dp-maml --noise {v}", "train", tr("dp-maml", "--noise", v), timeout=25))
    for v in ["0", "1e-300", "1e-9", "1e300", "nan", "inf"]:
        add(Case(f"train dp-maml --epsilon {v}", "train", tr("dp-maml", "--epsilon", v), timeout=25))
    for v in ["0", "1", "1e-300", "nan"]:
        add(Case(f"train dp-maml --delta {v}", "train", tr("dp-maml", "--noise", "1", "--delta", v), timeout=25))
    for v in ["0", "-1", "1e12", "2.5"]:
        add(Case(f"train dp-maml --steps {v}", "train", tr("dp-maml", "--noise", "1", replace={"--steps": v}),
                 timeout=30))
    for v in ["0", "0.5", "1e9", "nan", "-4"]:
        add(Case(f"train dp-maml --meta-batch {v}", "train", tr("dp-maml", "--noise", "1",
                                                                replace={"--meta-batch": v}), timeout=25))
    for v in ["0", "1", "1e15"]:
        add(Case(f"train dp-maml --pool {v}", "train", tr("dp-maml", "--noise", "1", replace={"--pool": v}),
                 timeout=25))
    for flag, vals in {"--clip": ["0", "nan", "inf", "1e-300"], "--inner-lr": ["nan", "inf", "1e300"],
                       "--outer-lr": ["nan", "1e300"], "--inner-steps": ["-1", "1e9"],
                       "--chunk-size": ["0", "-1"], "--checkpoint-every": ["0", "-1"], "--seed": ["-1", "1e19"],
                       "--count-noise": ["0", "nan"], "--inner-clip": ["nan"], "--inner-noise": ["1e-300"]}.items():
        for v in vals:
            add(Case(f"train dp-maml {flag} {v}", "train", tr("dp-maml", "--noise", "1", flag, v), timeout=25))
    for v in ["0", "-1"]:
        add(Case(f"train dp-maml --eval-tasks {v}", "train", tr("dp-maml", "--noise", "1",
                                                                replace={"--eval-tasks": v}), timeout=25))
    for dev in ["cuda", "cuda:99", "tpu", "mps", ""]:
        add(Case(f"train dp-maml --device {dev!r}", "train", tr("dp-maml", "--noise", "1", "--device", dev),
                 timeout=25))
    for out in ["/dev/null", "", "/proc/x"]:
        add(Case(f"train --out {out!r}", "train", tr("dp-maml", "--noise", "1", replace={"--out": out}),
                 expect="refused", timeout=25))
    add(Case("train --out existing file", "train", tr("dp-maml", "--noise", "1", replace={"--out": "{tmp}/f"}),
             files={"f": "x"}, expect="refused", timeout=25))
    add(Case("train --resume with no run", "train", tr("dp-maml", "--noise", "1", "--resume"), timeout=25))
    add(Case("train --resume on empty folder", "train", tr("dp-maml", "--noise", "1", "--resume",
                                                           replace={"--out": "{tmp}/r"}), files={"r/.keep": ""},
             timeout=25))
    add(Case("train --resume corrupted state", "train", tr("dp-maml", "--noise", "1", "--resume",
                                                           replace={"--out": "{tmp}/r"}),
             files={"r/state.json": "{not json", "r/checkpoint.pt": b"\x00garbage"}, timeout=25))
    add(Case("train --resume-changed alone", "train", tr("dp-maml", "--noise", "1", "--resume-changed"), timeout=25))
    for algo in ("maml", "reptile", "dp-reptile", "dp-maml-sample", "dp-agr", "dp-agrlr"):
        add(Case(f"train {algo} tiny", "train", tr(algo, *([] if algo in ("maml", "reptile") else ["--noise", "1"])),
                 timeout=30))
    add(Case("train dp-agr --engine flower (flwr missing?)", "train", tr("dp-agr", "--noise", "1", "--engine", "flower"),
             timeout=25))
    add(Case("train maml with --noise", "train", tr("maml", "--noise", "1"), expect="refused", timeout=25))
    add(Case("train dp-maml --data omniglot no dir", "train", tr("dp-maml", "--noise", "1",
                                                                 replace={"--data": "omniglot"}), expect="refused"))
    add(Case("train dp-maml --data omniglot --data-dir README", "train",
             tr("dp-maml", "--noise", "1", "--data-dir", readme, replace={"--data": "omniglot"}), expect="refused"))
    add(Case("train dp-maml glyphs tiny", "train", tr("dp-maml", "--noise", "1", replace={"--data": "glyphs"}),
             timeout=30))
    add(Case("train dp-maml --sampler one-pass", "train", tr("dp-maml", "--noise", "1", "--sampler", "one-pass"),
             timeout=25))
    add(Case("train dp-maml --sampler fixed --meta-batch 50", "train",
             tr("dp-maml", "--noise", "1", "--sampler", "fixed", replace={"--meta-batch": "50"}), timeout=25))
    add(Case("train dp-maml --sampler fixed --meta-batch 51 > pool", "train",
             tr("dp-maml", "--noise", "1", "--sampler", "fixed", replace={"--meta-batch": "51"}), timeout=25))
    add(Case("train dp-maml --unit record-vs-server", "train", tr("dp-maml", "--noise", "1", "--unit",
                                                                  "record-vs-server"), timeout=25))
    add(Case("train --clip-policy quantile count-noise tiny", "train",
             tr("dp-maml", "--noise", "1", "--clip-policy", "quantile", "--count-noise", "1e-300"), timeout=25))
    add(Case("train protonet --ways 0", "train", ["train", "protonet", "--data", "glyphs", "--steps", "2", "--ways", "0",
                                                  "--eval-tasks", "5", "--out", "{tmp}/run"], timeout=25))
    add(Case("train protonet --ways 1e6", "train", ["train", "protonet", "--data", "glyphs", "--steps", "2", "--ways",
                                                    "1000000", "--eval-tasks", "5", "--out", "{tmp}/run"], timeout=25))
    add(Case("train protonet --shots 0", "train", ["train", "protonet", "--data", "glyphs", "--steps", "2", "--shots",
                                                   "0", "--eval-tasks", "5", "--out", "{tmp}/run"], timeout=25))
    add(Case("train protonet dp-pix --cell 0", "train",
             ["train", "protonet", "--data", "glyphs", "--steps", "2", "--obfuscation", "dp-pix", "--cell", "0",
              "--epsilon", "1", "--eval-tasks", "5", "--out", "{tmp}/run"], timeout=25))
    add(Case("train protonet dp-pix --epsilon nan", "train",
             ["train", "protonet", "--data", "glyphs", "--steps", "2", "--obfuscation", "dp-pix", "--cell", "4",
              "--epsilon", "nan", "--eval-tasks", "5", "--out", "{tmp}/run"], timeout=25))
    add(Case("train protonet blur --radius 1e9", "train",
             ["train", "protonet", "--data", "glyphs", "--steps", "2", "--obfuscation", "blur", "--radius", "1e9",
              "--sigma", "1", "--eval-tasks", "5", "--out", "{tmp}/run"], timeout=25))
    tplan = {"poisson-tiny-noise": _scheme_plan("poisson", top={"unit": "task", "steps": 2},
                                                sampling={"population": 50, "batch_size": 4},
                                                noise={"multiplier": 1e-300}),
             "poisson-1e12-steps": _scheme_plan("poisson", top={"unit": "task", "steps": 10**12},
                                                sampling={"population": 50, "batch_size": 4}),
             "shuffle": _scheme_plan("shuffle", top={"steps": 2}, sampling={"population": 8, "batch_size": 4}),
             "balls": _scheme_plan("balls", top={"steps": 2}, sampling={"population": 8, "batch_size": 4}),
             "fixed-record": _scheme_plan("fixed", top={"steps": 2}, sampling={"population": 50, "batch_size": 4}),
             "none": _scheme_plan("none", top={"unit": "task", "steps": 2}, sampling={"population": 5}),
             "group": _scheme_plan("poisson", top={"unit": "group", "group_size": 2, "steps": 2},
                                   sampling={"population": 50, "batch_size": 4}),
             "laplace": _scheme_plan("poisson", top={"unit": "task", "steps": 2},
                                     sampling={"population": 50, "batch_size": 4},
                                     noise={"mechanism": "laplace", "multiplier": None}).replace("multiplier = None",
                                                                                                 "scale = 1.0"),
             "episodic": _episodic_plan(top={"steps": 2}, sampling={"episodes": 4}),
             "rate-only": _scheme_plan("poisson-rate", top={"unit": "task", "steps": 2}),
             "epochs-1e6": _scheme_plan("poisson", top={"unit": "task", "epochs": 10**6},
                                        sampling={"population": 50, "batch_size": 4}, drop=("steps",)),
             "README": None}
    for key, plan in tplan.items():
        argv = ["train", "dp-maml", "--plan", readme if plan is None else "{plan}", "--data", "sinusoid",
                "--eval-tasks", "5", "--out", "{tmp}/run"]
        add(Case(f"train dp-maml --plan {key}", "train-plan", argv, plan=plan, timeout=25))
    add(Case("train --plan with --steps override", "train-plan",
             ["train", "dp-maml", "--plan", "{plan}", "--data", "sinusoid", "--steps", "1e12", "--eval-tasks", "5",
              "--out", "{tmp}/run"], plan=tplan["rate-only"], timeout=30))
    add(Case("train --save-plan into missing folder", "train-plan",
             tr("dp-maml", "--noise", "1", "--save-plan", "{tmp}/no/p.toml"), expect="refused", timeout=25))
    add(Case("train --save-plan over README", "train-plan",
             tr("dp-maml", "--noise", "1", "--save-plan", "{tmp}/R.md"), files={"R.md": "keep me"}, timeout=25))

    # -------- the Opacus accountant API
    pre = "import math, numpy as np\nfrom metadp.integrations.opacus import *\nimport metadp.integrations.opacus as mo\n"
    api = {
        "step noise nan": "a = MetadpAccountant(); a.step(noise_multiplier=float('nan'), sample_rate=0.01)",
        "step noise np.nan": "a = MetadpAccountant(); a.step(noise_multiplier=np.float64('nan'), sample_rate=0.01)",
        "step noise np.float32 inf": "a = MetadpAccountant(); a.step(noise_multiplier=np.float32('inf'), sample_rate=0.01)",
        "step noise str": "a = MetadpAccountant(); a.step(noise_multiplier='1', sample_rate=0.01)",
        "step noise 1e-300 then eps": "a = MetadpAccountant(); a.step(noise_multiplier=1e-300, sample_rate=0.01); "
                                      "print(a.get_epsilon(1e-5))",
        "step noise 1e300 then eps": "a = MetadpAccountant(); a.step(noise_multiplier=1e300, sample_rate=0.01); "
                                     "print(a.get_epsilon(1e-5))",
        "step rate 1e-300": "a = MetadpAccountant(); a.step(noise_multiplier=1, sample_rate=1e-300); "
                            "print(a.get_epsilon(1e-5))",
        "step rate 0 eps": "a = MetadpAccountant(); a.step(noise_multiplier=1, sample_rate=0.0); print(a.get_epsilon(1e-5))",
        "step rate np.float16": "a = MetadpAccountant(); a.step(noise_multiplier=1, sample_rate=np.float16(0.01)); "
                                "print(a.get_epsilon(1e-5))",
        "step noise Decimal": "from decimal import Decimal\na = MetadpAccountant(); "
                              "a.step(noise_multiplier=Decimal('1'), sample_rate=0.01); print(a.get_epsilon(1e-5))",
        "step noise Fraction": "from fractions import Fraction\na = MetadpAccountant(); "
                               "a.step(noise_multiplier=Fraction(1, 3), sample_rate=0.01); print(a.get_epsilon(1e-5))",
        "step noise huge int": "a = MetadpAccountant(); a.step(noise_multiplier=10**400, sample_rate=0.01); "
                               "print(a.get_epsilon(1e-5))",
        "step noise torch tensor": "import torch\na = MetadpAccountant(); "
                                   "a.step(noise_multiplier=torch.tensor(1.0), sample_rate=0.01); print(a.get_epsilon(1e-5))",
        "get_epsilon empty": "print(MetadpAccountant().get_epsilon(1e-5))",
        "get_epsilon delta 0": "a = MetadpAccountant(); a.step(noise_multiplier=1, sample_rate=0.01); print(a.get_epsilon(0))",
        "get_epsilon delta 1": "a = MetadpAccountant(); a.step(noise_multiplier=1, sample_rate=0.01); print(a.get_epsilon(1))",
        "get_epsilon delta nan": "a = MetadpAccountant(); a.step(noise_multiplier=1, sample_rate=0.01); "
                                 "print(a.get_epsilon(float('nan')))",
        "get_epsilon delta -1": "a = MetadpAccountant(); a.step(noise_multiplier=1, sample_rate=0.01); print(a.get_epsilon(-1))",
        "get_epsilon delta str": "a = MetadpAccountant(); a.step(noise_multiplier=1, sample_rate=0.01); "
                                 "print(a.get_epsilon('1e-5'))",
        "get_epsilon delta 5e-324": "a = MetadpAccountant(); a.step(noise_multiplier=1, sample_rate=0.01); "
                                    "print(a.get_epsilon(5e-324))",
        "get_epsilon delta np.array": "a = MetadpAccountant(); a.step(noise_multiplier=1, sample_rate=0.01); "
                                      "print(a.get_epsilon(np.array([1e-5])))",
        "get_epsilon delta list (unhashable)": "a = MetadpAccountant(); a.step(noise_multiplier=1, sample_rate=0.01); "
                                               "print(a.get_epsilon([1e-5]))",
        "get_epsilon_bounds delta 1e-300": "a = MetadpAccountant(); a.step(noise_multiplier=1, sample_rate=0.01); "
                                           "print(a.get_epsilon_bounds(1e-300))",
        "history 10^15 steps": "a = MetadpAccountant(); a.history = [(1.0, 0.01, 10**15)]; print(a.get_epsilon(1e-5))",
        "history 2^63 steps": "a = MetadpAccountant(); a.history = [(1.0, 0.01, 2**63)]; print(a.get_epsilon(1e-5))",
        "history np.int64 steps": "a = MetadpAccountant(); a.history = [(1.0, 0.01, np.int64(100))]; "
                                  "print(a.get_epsilon(1e-5))",
        "history tiny noise 1e7 steps": "a = MetadpAccountant(); a.history = [(0.01, 0.01, 10**7)]; "
                                        "print(a.get_epsilon(1e-5))",
        "history 2000 entries": "a = MetadpAccountant(); a.history = [(1.0 + i * 1e-3, 0.01, 1) for i in range(2000)]; "
                                "print(a.get_epsilon(1e-5))",
        "history dict": "a = MetadpAccountant(); a.history = {'x': 1}; print(a.get_epsilon(1e-5))",
        "history None": "a = MetadpAccountant(); a.history = None; print(a.get_epsilon(1e-5))",
        "history generator": "a = MetadpAccountant(); a.history = ((1.0, 0.01, 1) for _ in range(3)); "
                             "print(a.get_epsilon(1e-5))",
        "load_state_dict junk": "a = MetadpAccountant(); a.load_state_dict({'history': [(1, 2)], 'mechanism': 'metadp'})",
        "load_state_dict None": "a = MetadpAccountant(); a.load_state_dict(None)",
        "load_state_dict no history": "a = MetadpAccountant(); a.load_state_dict({'mechanism': 'metadp'}); "
                                      "print(a.get_epsilon(1e-5))",
        "load_state_dict other mechanism": "a = MetadpAccountant(); a.load_state_dict({'history': [], 'mechanism': 'rdp'})",
        "load_state_dict nan entry": "a = MetadpAccountant(); "
                                     "a.load_state_dict({'history': [(float('nan'), 0.01, 1)], 'mechanism': 'metadp'})",
        "state_dict round trip": "a = MetadpAccountant(); a.step(noise_multiplier=1, sample_rate=0.01); "
                                 "b = MetadpAccountant(); b.load_state_dict(a.state_dict()); print(b.get_epsilon(1e-5))",
        "nm_for_eps eps nan": "print(noise_multiplier_for_epsilon(target_epsilon=float('nan'), target_delta=1e-5, "
                              "sample_rate=0.01, steps=100))",
        "nm_for_eps eps 1e-9": "print(noise_multiplier_for_epsilon(target_epsilon=1e-9, target_delta=1e-5, "
                               "sample_rate=0.01, steps=100))",
        "nm_for_eps eps 1e9": "print(noise_multiplier_for_epsilon(target_epsilon=1e9, target_delta=1e-5, "
                              "sample_rate=0.01, steps=100))",
        "nm_for_eps epochs 1e-9": "print(noise_multiplier_for_epsilon(target_epsilon=1, target_delta=1e-5, "
                                  "sample_rate=0.01, epochs=1e-9))",
        "nm_for_eps epochs 1e15": "print(noise_multiplier_for_epsilon(target_epsilon=1, target_delta=1e-5, "
                                  "sample_rate=0.01, epochs=1e15))",
        "nm_for_eps rate 0": "print(noise_multiplier_for_epsilon(target_epsilon=1, target_delta=1e-5, "
                             "sample_rate=0.0, steps=100))",
        "nm_for_eps rate 1e-300": "print(noise_multiplier_for_epsilon(target_epsilon=1, target_delta=1e-5, "
                                  "sample_rate=1e-300, steps=100))",
        "nm_for_eps steps 0": "print(noise_multiplier_for_epsilon(target_epsilon=1, target_delta=1e-5, "
                              "sample_rate=0.01, steps=0))",
        "nm_for_eps steps 2.5": "print(noise_multiplier_for_epsilon(target_epsilon=1, target_delta=1e-5, "
                                "sample_rate=0.01, steps=2.5))",
        "nm_for_eps delta 1e-300": "print(noise_multiplier_for_epsilon(target_epsilon=1, target_delta=1e-300, "
                                   "sample_rate=0.01, steps=100))",
        "nm_for_eps delta np.float32": "print(noise_multiplier_for_epsilon(target_epsilon=1, "
                                       "target_delta=np.float32(1e-5), sample_rate=0.01, steps=100))",
        "nm_for_eps eps bool": "print(noise_multiplier_for_epsilon(target_epsilon=True, target_delta=1e-5, "
                               "sample_rate=0.01, steps=100))",
        "nm_for_eps rate nan": "print(noise_multiplier_for_epsilon(target_epsilon=1, target_delta=1e-5, "
                               "sample_rate=float('nan'), steps=100))",
        "describe_sampling list": "print(describe_sampling([1, 2, 3]))",
        "describe_sampling None": "print(describe_sampling(None))",
        "require_poisson action bogus": "import torch\nfrom torch.utils.data import DataLoader, TensorDataset\n"
                                        "dl = DataLoader(TensorDataset(torch.zeros(10, 2)), batch_size=2)\n"
                                        "print(require_poisson(dl, action='bogus'))",
        "describe_sampling empty dataset": "import torch\nfrom torch.utils.data import DataLoader, TensorDataset\n"
                                           "dl = DataLoader(TensorDataset(torch.zeros(0, 2)), batch_size=2)\n"
                                           "print(describe_sampling(dl))",
        "describe_sampling batch_size None": "import torch\nfrom torch.utils.data import DataLoader, TensorDataset\n"
                                             "dl = DataLoader(TensorDataset(torch.zeros(10, 2)), batch_size=None)\n"
                                             "print(describe_sampling(dl))",
        "describe_sampling iterable dataset": "import torch\nfrom torch.utils.data import DataLoader, IterableDataset\n"
                                              "class It(IterableDataset):\n    def __iter__(self): return iter(range(5))\n"
                                              "print(describe_sampling(DataLoader(It(), batch_size=2)))",
    }
    engine = ("import torch, warnings\nfrom torch.utils.data import DataLoader, TensorDataset\n"
              "from opacus import PrivacyEngine\n"
              "m = torch.nn.Linear(2, 1); o = torch.optim.SGD(m.parameters(), lr=0.1)\n"
              "dl = DataLoader(TensorDataset(torch.zeros(100, 2), torch.zeros(100, 1)), batch_size=10)\n"
              "pe = PrivacyEngine(accountant='metadp')\n")
    engine_cases = {
        "opacus mpwe target_delta nan": "pe.make_private_with_epsilon(module=m, optimizer=o, data_loader=dl, "
                                        "target_epsilon=1.0, target_delta=float('nan'), epochs=1, max_grad_norm=1.0)",
        "opacus mpwe target_epsilon inf": "pe.make_private_with_epsilon(module=m, optimizer=o, data_loader=dl, "
                                          "target_epsilon=float('inf'), target_delta=1e-5, epochs=1, max_grad_norm=1.0)\n"
                                          "print(o.noise_multiplier if hasattr(o,'noise_multiplier') else '')",
        "opacus mpwe epochs nan": "pe.make_private_with_epsilon(module=m, optimizer=o, data_loader=dl, "
                                  "target_epsilon=1.0, target_delta=1e-5, epochs=float('nan'), max_grad_norm=1.0)",
        "opacus mpwe epochs 0": "pe.make_private_with_epsilon(module=m, optimizer=o, data_loader=dl, "
                                "target_epsilon=1.0, target_delta=1e-5, epochs=0, max_grad_norm=1.0)",
        "opacus mpwe target_epsilon 1e-9": "r = pe.make_private_with_epsilon(module=m, optimizer=o, data_loader=dl, "
                                           "target_epsilon=1e-9, target_delta=1e-5, epochs=1, max_grad_norm=1.0)\n"
                                           "print(r[1].noise_multiplier)",
        "opacus mpwe target_epsilon -1": "pe.make_private_with_epsilon(module=m, optimizer=o, data_loader=dl, "
                                         "target_epsilon=-1.0, target_delta=1e-5, epochs=1, max_grad_norm=1.0)",
        "opacus make_private noise nan then eps": "r = pe.make_private(module=m, optimizer=o, data_loader=dl, "
                                                  "noise_multiplier=float('nan'), max_grad_norm=1.0)\n"
                                                  "r[1].zero_grad(); pe.accountant.step(noise_multiplier=float('nan'), "
                                                  "sample_rate=0.1)",
        "opacus get_epsilon delta 0 after step": "pe.accountant.step(noise_multiplier=1.0, sample_rate=0.1)\n"
                                                 "print(pe.get_epsilon(0.0))",
        "make_private_checked eps nan": "make_private_checked(pe, module=m, optimizer=o, data_loader=dl, "
                                        "target_epsilon=float('nan'), target_delta=1e-5, epochs=1, max_grad_norm=1.0)",
        "make_private_checked noise 0": "make_private_checked(pe, module=m, optimizer=o, data_loader=dl, "
                                        "noise_multiplier=0.0, max_grad_norm=1.0)",
        "make_private_checked max_grad_norm list nan": "make_private_checked(pe, module=m, optimizer=o, data_loader=dl, "
                                                       "noise_multiplier=1.0, max_grad_norm=[float('nan')])",
        "make_private_checked no poisson, shuffled": "dl2 = DataLoader(dl.dataset, batch_size=10, shuffle=True)\n"
                                                     "make_private_checked(pe, module=m, optimizer=o, data_loader=dl2, "
                                                     "noise_multiplier=1.0, max_grad_norm=1.0, poisson_sampling=False)",
        "make_private_checked batch 1 of 100": "dl2 = DataLoader(dl.dataset, batch_size=1)\n"
                                               "r = make_private_checked(pe, module=m, optimizer=o, data_loader=dl2, "
                                               "noise_multiplier=1.0, max_grad_norm=1.0)\nprint('ok')",
        "make_private_checked eps 1e-9 epochs 1": "r = make_private_checked(pe, module=m, optimizer=o, data_loader=dl, "
                                                  "target_epsilon=1e-9, target_delta=1e-5, epochs=1, max_grad_norm=1.0)\n"
                                                  "print(r[1].noise_multiplier)",
        "make_private_checked epochs 1e12": "r = make_private_checked(pe, module=m, optimizer=o, data_loader=dl, "
                                            "target_epsilon=1, target_delta=1e-5, epochs=1e12, max_grad_norm=1.0)\n"
                                            "print(r[1].noise_multiplier)",
    }
    for key, code in api.items():
        add(Case(f"opacus {key}", "opacus", code=pre + code, timeout=25))
    for key, code in engine_cases.items():
        add(Case(key, "opacus", code=pre + engine + code, timeout=25))
    add(Case("opacus import twice + reload", "opacus",
             code="import importlib, metadp.integrations.opacus as m\nimportlib.reload(m)\nimportlib.reload(m)\n"
                  "from opacus import PrivacyEngine\nprint(PrivacyEngine(accountant='metadp').accountant)"))

    # -------- dp-accounting conversion in Python
    dpre = ("import math\nimport dp_accounting as dpa\nfrom metadp.integrations.dp_accounting import *\n"
            "from metadp.accounting import *\n")
    dcases = {
        "from Gaussian nan": "print(from_dp_event(dpa.GaussianDpEvent(float('nan'))))",
        "from Gaussian -1": "print(from_dp_event(dpa.GaussianDpEvent(-1)))",
        "from Gaussian 0": "print(from_dp_event(dpa.GaussianDpEvent(0)))",
        "from Poisson q 2": "print(from_dp_event(dpa.PoissonSampledDpEvent(2, dpa.GaussianDpEvent(1))))",
        "from SelfComposed -1": "print(from_dp_event(dpa.SelfComposedDpEvent(dpa.GaussianDpEvent(1), -1)))",
        "from SelfComposed 10**20": "print(from_dp_event(dpa.SelfComposedDpEvent(dpa.GaussianDpEvent(1), 10**20)))",
        "from Composed []": "print(from_dp_event(dpa.ComposedDpEvent([])))",
        "from Composed tuple of dicts": "print(from_dp_event(dpa.ComposedDpEvent((dpa.GaussianDpEvent(1),))))",
        "from RR": "print(from_dp_event(dpa.RandomizedResponseDpEvent(0.5, 2)))",
        "from SampledWithReplacement": "print(from_dp_event(dpa.SampledWithReplacementDpEvent(100, 10, "
                                       "dpa.GaussianDpEvent(1))))",
        "from SingleEpochTree": "print(from_dp_event(dpa.SingleEpochTreeAggregationDpEvent(1.0, 10)))",
        "from UnsupportedDpEvent": "print(from_dp_event(dpa.UnsupportedDpEvent()))",
        "from nested 2000 (RecursionError?)": "e = dpa.GaussianDpEvent(1)\nfor _ in range(2000):\n"
                                              "    e = dpa.SelfComposedDpEvent(e, 1)\nprint(from_dp_event(e))",
        "from nested 100000 Composed": "e = dpa.GaussianDpEvent(1)\nfor _ in range(100000):\n"
                                       "    e = dpa.ComposedDpEvent([e])\nprint(from_dp_event(e))",
        "from bad noise_relative_to": "print(from_dp_event(dpa.GaussianDpEvent(1), noise_relative_to='x'))",
        "from None": "print(from_dp_event(None))",
        "from int": "print(from_dp_event(5))",
        "to Gaussian 1e-300": "print(to_dp_event(Gaussian(1e-300)))",
        "to Episodic": "from metadp.accounting import EpisodicSampled\nimport inspect\n"
                       "print(to_dp_event(Group(Gaussian(1.0), 2)))",
        "to nested 5000": "e = Gaussian(1.0)\nfor _ in range(5000):\n    e = SelfComposed(e, 1)\nprint(to_dp_event(e))",
        "to_dp_event_dict inf json": "import json\nprint(json.dumps(to_dp_event_dict(SelfComposed(Gaussian(1.0), 3))))",
        "to_dp_event_dict replace-one tiny": "print(to_dp_event_dict(Gaussian(5e-324), noise_relative_to="
                                             "'replace_one_sensitivity'))",
        "round trip fixed size": "e = to_dp_event(FixedSizeSampled(10, 100, Gaussian(1.0), sensitivity_factor=2.0))\n"
                                 "print(from_dp_event(e))",
        "load_dp_event missing": "print(load_dp_event('/nonexistent.json'))",
        "load_dp_event dir": "print(load_dp_event('/tmp'))",
        "dp_event_from_dict other module": "print(dp_event_from_dict({'module_name': 'os', 'class_name': 'system'}))",
        "default_relation NoOp": "print(default_relation(NoOp()))",
        "event_report delta nan": "from metadp.integrations._event_report import event_report\n"
                                  "print(event_report(Gaussian(1.0), float('nan'), unit='record', relation='add_remove', "
                                  "accountant='all', name='x', assumptions=()).to_table())",
    }
    for key, code in dcases.items():
        add(Case(f"dp-accounting {key}", "dp-accounting", code=dpre + code, timeout=25))

    # -------- the library API (plan, epsilon)
    ppre = "import math\nfrom metadp.plan import *\nimport metadp\n"
    pcases = {
        "loads_plan bytes": "print(loads_plan(b'x = 1'))",
        "loads_plan None": "print(loads_plan(None))",
        "load_plan int": "print(load_plan(5))",
        "load_plan Path of README": "import pathlib\nprint(load_plan(pathlib.Path('{repo}/README.md')))",
        "load_plan str with newline but not TOML": "print(load_plan('hello\\nworld'))",
        "Plan.from_dict list": "print(Plan.from_dict([1, 2]))",
        "Plan.from_dict nan steps": "print(Plan.from_dict({'unit': 'record', 'delta': 1e-5, 'steps': float('nan'), "
                                    "'sampling': {'scheme': 'none'}, 'noise': {'multiplier': 1.0}}))",
        "Plan.from_dict numpy int steps": "import numpy as np\nprint(Plan.from_dict({'unit': 'record', 'delta': 1e-5, "
                                          "'steps': np.int64(10), 'sampling': {'scheme': 'none'}, "
                                          "'noise': {'multiplier': 1.0}}).steps)",
        "Plan.from_dict Decimal delta": "from decimal import Decimal\nprint(Plan.from_dict({'unit': 'record', "
                                        "'delta': Decimal('1e-5'), 'steps': 10, 'sampling': {'scheme': 'none'}, "
                                        "'noise': {'multiplier': 1.0}}).delta)",
        "Plan.from_dict int keys": "print(Plan.from_dict({1: 2}))",
        "Plan.from_dict references None": "print(Plan.from_dict({'unit': 'record', 'delta': 1e-5, 'steps': 10, "
                                          "'references': None, 'sampling': {'scheme': 'none'}, "
                                          "'noise': {'multiplier': 1.0}}))",
        "Plan.from_dict references generator": "print(Plan.from_dict({'unit': 'record', 'delta': 1e-5, 'steps': 10, "
                                               "'references': 5, 'sampling': {'scheme': 'none'}, "
                                               "'noise': {'multiplier': 1.0}}))",
        "Plan.from_dict description None": "p = Plan.from_dict({'unit': 'record', 'delta': 1e-5, 'steps': 10, "
                                           "'description': None, 'sampling': {'scheme': 'none'}, "
                                           "'noise': {'multiplier': 1.0}}); print(repr(p.description))",
        "plan_epsilon accountant bogus": "print(plan_epsilon(default_plan(), accountant='bogus'))",
        "plan_epsilon max_seconds 0": "print(plan_epsilon(default_plan(), max_seconds=0).headline())",
        "plan_epsilon max_seconds nan": "print(plan_epsilon(default_plan(), max_seconds=float('nan')).headline())",
        "plan_epsilon max_seconds -1": "print(plan_epsilon(default_plan(), max_seconds=-1).headline())",
        "plan_epsilon None": "print(plan_epsilon(None))",
        "plan.event() episodic": "p = loads_plan('''" + _episodic_plan() + "''')\nprint(p.event())",
        "report to_json noise 1e-300": "p = Plan.from_dict({'unit': 'record', 'delta': 1e-5, 'steps': 10, "
                                       "'sampling': {'scheme': 'none'}, 'noise': {'multiplier': 1e-300}})\n"
                                       "print(plan_epsilon(p).to_json())",
        "report to_latex noise 1e-300": "p = Plan.from_dict({'unit': 'record', 'delta': 1e-5, 'steps': 10, "
                                        "'sampling': {'scheme': 'none'}, 'noise': {'multiplier': 1e-300}})\n"
                                        "print(plan_epsilon(p).to_latex())",
        "accountant get_epsilon delta 0": "from metadp.accounting import *\nprint(PldAccountant().compose("
                                          "Gaussian(1.0)).get_epsilon(0.0))",
        "rdp accountant nan noise event": "from metadp.accounting import *\nprint(RdpAccountant().compose("
                                          "Gaussian(float('nan'))).get_epsilon(1e-5))",
        "PoissonSampled q nan event": "from metadp.accounting import *\nprint(PoissonSampled(float('nan'), Gaussian(1)))",
        "SelfComposed count 2**64": "from metadp.accounting import *\nprint(PldAccountant().compose("
                                    "SelfComposed(Gaussian(1.0), 2**64)).get_epsilon(1e-5))",
        "calibrate_noise target nan": "from metadp.accounting.calibration import calibrate_noise\nfrom metadp.accounting "
                                      "import *\nprint(calibrate_noise(lambda z: Gaussian(z), float('nan'), 1e-5))",
    }
    for key, code in pcases.items():
        add(Case(f"api {key}", "api", code=ppre + code, timeout=25))

    # -------- the CLI shell
    for argv, expect in ((["--version"], "ok"), ([], "refused"), (["bogus"], "refused"), (["plan", "--bogus"], "refused"),
                         (["epsilon", "--help"], "ok"), (["train", "--help"], "ok"), (["verify", "--help"], "ok"),
                         (["train"], "refused"), (["epsilon"], "refused"), (["plan", "a", "b"], "refused"),
                         (["calibrate", "--target-epsilon"], "refused"), (["plan", "--json", "--latex"], "refused"),
                         (["epsilon", "--sampling", "Poisson"], "refused")):
        add(Case("cli " + (" ".join(argv) or "(no arguments)"), "cli", argv, expect=expect))
    return c


# ------------------------------------------------------------------------------------------------ main

def _table(outcomes: Sequence[Outcome]) -> str:
    rows = []
    width = max((len(o.name) for o in outcomes), default=10)
    width = min(width, 60)
    for o in outcomes:
        flag = " !" if o.unexpected else ""
        rows.append(f"{o.cls:<14}{flag:<2} {o.name[:60]:<{width}} {o.seconds:>6.1f}s  {o.detail[:110]}")
    return "\n".join(rows)


def markdown(outcomes: Sequence[Outcome]) -> str:
    """The failures grouped by class, each with its reproduction and the first/last lines it printed."""
    parts = []
    for cls in FAILING + ("bad-refusal", "odd-exit"):
        hits = [o for o in outcomes if o.cls == cls]
        if not hits:
            continue
        parts.append(f"### {cls} ({len(hits)})\n")
        for o in hits:
            parts.append(f"- **{o.name}** [{o.label}] {o.detail}\n\n  ```\n  {o.command[:400]}\n  ```\n"
                         f"  first: `{o.head.splitlines()[0][:200] if o.head else ''}`  \n"
                         f"  last: `{o.tail.splitlines()[-1][:200] if o.tail else ''}`\n")
    unexpected = [o for o in outcomes if o.unexpected]
    if unexpected:
        parts.append(f"### unexpected ok/refused ({len(unexpected)})\n")
        for o in unexpected:
            parts.append(f"- **{o.name}**: {o.cls}: {o.detail[:200]}\n\n  ```\n  {o.command[:400]}\n  ```\n")
    return "\n".join(parts)


def _write_json(path: str, outcomes: Sequence[Outcome], started: float) -> None:
    counts = {k: sum(o.cls == k for o in outcomes) for k in ORDER}
    Path(path).write_text(json.dumps({"counts": counts, "cases": len(outcomes),
                                      "unexpected": sum(o.unexpected for o in outcomes),
                                      "seconds": round(time.monotonic() - started, 1),
                                      "outcomes": [dataclasses.asdict(o) for o in outcomes]}, indent=1))


def main(argv: Optional[List[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--json", metavar="PATH", help="write the JSON summary here")
    p.add_argument("--only", metavar="CLASS", help="report only cases whose outcome is CLASS (comma-separated); "
                   "with a case label (cli-epsilon, plan-file, opacus, ...) instead, run only those cases")
    p.add_argument("-k", metavar="SUBSTRING", action="append", help="run only cases whose name contains it (repeatable)")
    p.add_argument("-j", "--jobs", type=int, default=2, help="cases at a time (default 2)")
    p.add_argument("--silence", type=float, default=5.0, help="seconds without output that count as silence")
    p.add_argument("--repo", default=str(REPO), help="the metadp tree to attack (default: this script's)")
    p.add_argument("--list", action="store_true", help="list the cases and exit")
    p.add_argument("--markdown", metavar="PATH", help="write the failures, grouped by class, as Markdown")
    p.add_argument("--from-json", metavar="PATH", action="append",
                   help="do not run: report (and --markdown) the outcomes stored in these --json files")
    p.add_argument("--recheck", action="store_true", help="rerun each silence outcome alone before reporting it")
    args = p.parse_args(argv)

    chosen = cases()
    for c in chosen:
        if c.silence is None and c.label in SLOW_START:
            c.silence = SLOW_START[c.label]
    labels = {c.label for c in chosen}
    only = set(args.only.split(",")) if args.only else set()
    if only & labels:
        chosen = [c for c in chosen if c.label in only]
        only -= labels
    if args.k:
        chosen = [c for c in chosen if any(k.lower() in c.name.lower() for k in args.k)]
    if args.list:
        for c in chosen:
            print(f"{c.label:<14} {c.name}")
        print(f"{len(chosen)} cases")
        return 0
    repo = Path(args.repo).resolve()
    started = time.monotonic()
    outcomes: List[Outcome] = []
    if args.from_json:
        for path in args.from_json:
            outcomes += [Outcome(**o) for o in json.loads(Path(path).read_text())["outcomes"]]
        names = {c.name for c in chosen}
        outcomes = [o for o in outcomes if o.name in names]
        chosen = []
    with ThreadPoolExecutor(max_workers=max(1, min(args.jobs, 2))) as pool:
        for o in pool.map(lambda c: run_case(c, repo, args.silence), chosen):
            outcomes.append(o)
            print(f"{o.cls:<14} {o.name[:70]:<70} {o.seconds:6.1f}s", file=sys.stderr, flush=True)
            if args.json:  # kept current, so an interrupted run still leaves its results
                _write_json(args.json, outcomes, started)
    if args.recheck:
        by_name = {c.name: c for c in chosen}
        for i, o in enumerate(outcomes):
            if o.cls == "silence":
                again = run_case(by_name[o.name], repo, args.silence)
                if again.cls != "silence":
                    again.detail = f"(silence under load, not alone) {again.detail}"
                outcomes[i] = again
    shown = [o for o in outcomes if not only or o.cls in only]
    print(_table(shown))
    counts = {k: sum(o.cls == k for o in outcomes) for k in ORDER}
    print("\n" + ", ".join(f"{k}: {v}" for k, v in counts.items() if v)
          + f"; unexpected: {sum(o.unexpected for o in outcomes)}; {len(outcomes)} cases in "
          f"{time.monotonic() - started:.0f} s")
    if args.json:
        _write_json(args.json, outcomes, started)
    if args.markdown:
        Path(args.markdown).write_text(markdown(outcomes), encoding="utf-8")
    return 1 if any(counts[k] for k in FAILING) else 0


if __name__ == "__main__":
    sys.exit(main())
