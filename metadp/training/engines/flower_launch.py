"""Flower's processes for ``metadp train ALGO --engine flower``: a SuperLink, SuperNodes and ``flwr run``,
started, watched and stopped by process id (no torch, no flwr import: everything runs as Flower's own
command-line programs, as a user would run them).

Three modes (``MODES``):

* ``simulation``: a SuperLink in simulation mode on a free loopback port; ``flwr run`` with
  ``num-supernodes`` = the plan's population runs the clients as Flower's simulated SuperNodes (Ray).
* ``local``: a deployment on loopback: a SuperLink and N SuperNodes as separate processes
  (``partition-id`` 0..N-1, each with its own port), then ``flwr run`` against the SuperLink.
* ``superlink``: ``flwr run`` against a SuperLink someone else runs (``--superlink ADDRESS``); its
  SuperNodes must be started with ``--node-config "partition-id=<i>"``.

What a run needs travels in ``flwr run``'s run config as one ``job`` string (:func:`encode_job`: base64
JSON, versioned; the ServerApp and the ClientApp read it with :func:`decode_job`).

Every process this module starts gets its own session (process group); :meth:`Federation.stop` sends
SIGTERM to each group, then SIGKILL to what is left after a grace period, so nothing it started
outlives it (Flower's ``flower-superexec`` and ``flwr-serverapp`` children, and Ray's workers in a
simulation, are in those groups); on Linux each also gets SIGTERM when the launching process dies, even
by SIGKILL (``PR_SET_PDEATHSIG``). The SuperLink runs offline (``--insecure`` on loopback,
``--disable-runtime-dependency-installation``: the app's dependencies are this environment's), with
telemetry off (``FLWR_TELEMETRY_ENABLED=0``) and ``FLWR_HOME`` in the run's own work folder, whose
``config.toml`` names the one connection ``flwr run`` uses.
"""

from __future__ import annotations

import base64
import ctypes
import functools
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Tuple

from metadp.training.engines.federated import FLOWER_MODES

__all__ = ["MODES", "CONNECTION", "JOB_VERSION", "encode_job", "decode_job", "Federation", "FederationError", "free_port", "app_folder", "toml_value",
           "descendants"]

MODES = tuple(mode for mode in FLOWER_MODES if mode != "app")  # the modes this module starts a run in
JOB_VERSION = 1


def encode_job(job: Dict[str, Any]) -> str:
    """The run config's ``job`` string for ``job`` (JSON, base64: no quotes for the run-config parser)."""
    text = json.dumps(dict(job, version=JOB_VERSION), sort_keys=True)
    return base64.urlsafe_b64encode(text.encode("utf-8")).decode("ascii")


@functools.lru_cache(maxsize=8)
def decode_job(encoded: str) -> Dict[str, Any]:
    """The job of a run config (ValueError naming what is wrong: an app launched without metadp's job)."""
    if not encoded:
        raise ValueError("this Flower App runs jobs of `metadp train --engine flower`: the run config's `job` is empty")
    try:
        job = json.loads(base64.urlsafe_b64decode(encoded.encode("ascii")))
    except ValueError as err:
        raise ValueError(f"the run config's `job` is not a metadp job ({err})") from None
    if not isinstance(job, dict) or job.get("version") != JOB_VERSION:
        raise ValueError(f"the run config's `job` has version {job.get('version') if isinstance(job, dict) else None!r}; "
                         f"this metadp reads version {JOB_VERSION} (the SuperLink's metadp differs from the launcher's)")
    return job

CONNECTION = "metadp"  # the connection's name in FLWR_HOME/config.toml
_START_TIMEOUT = 60.0  # seconds for a SuperLink to answer its health check
_GRACE = 5.0  # seconds between SIGTERM and SIGKILL when stopping a process group
_POLL = 0.25


class FederationError(RuntimeError):
    """A process of the federation could not start or stopped on its own (the message names it and its log)."""


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def toml_value(value) -> str:
    """``value`` as a TOML literal (``flwr run --run-config`` reads ``key=<TOML value>``)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    text = str(value)
    if "'" in text or "\n" in text:
        raise ValueError(f"a run-config string cannot hold a quote or a newline: {text[:40]!r}")
    return f"'{text}'"


def app_folder(into: Path, app: Optional[Path] = None) -> Path:
    """A copy, in ``into``, of the Flower App ``flwr run`` bundles: ``app`` (a folder of your own whose
    ``pyproject.toml`` declares ``job = ""`` in ``[tool.flwr.app.config]``), or the one metadp ships
    (``metadp/training/engines/flower_app``: its ``pyproject.toml`` names metadp's ServerApp and ClientApp)."""
    target = Path(into) / "app"
    if app is not None:
        if not (Path(app) / "pyproject.toml").is_file():
            raise ValueError(f"a Flower App folder holds a pyproject.toml; {str(app)!r} does not")
        shutil.copytree(app, target, ignore=shutil.ignore_patterns("__pycache__", ".*"))
        return target
    target.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(Path(__file__).with_name("flower_app") / "pyproject.toml", target / "pyproject.toml")
    return target


def _program(name: str) -> str:
    """Flower's command ``name`` from this Python's environment (its scripts folder first, then PATH)."""
    beside = Path(sys.executable).with_name(name)
    if beside.exists():
        return str(beside)
    found = shutil.which(name)
    if found is None:
        raise FederationError(f"{name} is not installed here: pip install 'metadp[federated]'")
    return found


class Federation:
    """The Flower processes of one run, in ``work`` (logs, ``FLWR_HOME``); a context manager that stops
    every process it started on exit.

    Args:
        work: the run's work folder (created; logs go to ``work/logs``).
        mode: one of ``MODES``.
        clients: SuperNodes to start (``local``; partition-ids 0..clients-1) or simulate (``simulation``).
        superlink: the address of an existing SuperLink (``superlink`` mode only).
        root_certificates: a PEM file for TLS to that SuperLink (None: an unencrypted connection).
    """

    def __init__(self, work, mode: str, *, clients: int, superlink: Optional[str] = None,
                 root_certificates: Optional[str] = None):
        if mode not in MODES:
            raise ValueError(f"mode must be one of {', '.join(MODES)}, got {mode!r}")
        if (mode == "superlink") != (superlink is not None):
            raise ValueError("a SuperLink address is given exactly in the 'superlink' mode")
        self.work, self.mode, self.clients = Path(work), mode, int(clients)
        self.address = superlink
        self.root_certificates = root_certificates
        self.processes: Dict[str, subprocess.Popen] = {}
        self.seen: Dict[int, str] = {}  # every descendant seen: pid -> its start time (Flower detaches some)
        self.logs = self.work / "logs"
        self.home = self.work / "flwr-home"
        self.env = dict(os.environ, FLWR_HOME=str(self.home), FLWR_TELEMETRY_ENABLED="0",
                        FLWR_DISABLE_UPDATE_CHECK="1", PYTHONUNBUFFERED="1")

    # -- processes ------------------------------------------------------------------------------------
    def _start(self, name: str, command: List[str]) -> subprocess.Popen:
        log = open(self.logs / f"{name}.log", "ab")  # noqa: SIM115 - the child holds it; closed in stop()
        process = subprocess.Popen(command, env=self.env, stdout=log, stderr=subprocess.STDOUT,
                                   stdin=subprocess.DEVNULL, start_new_session=True, cwd=self.work,
                                   preexec_fn=_die_with_parent if sys.platform.startswith("linux") else None)
        log.close()
        self.processes[name] = process
        return process

    def start(self) -> "Federation":
        """Writes ``FLWR_HOME/config.toml`` and starts the SuperLink and SuperNodes the mode needs; returns
        when the SuperLink answers (FederationError if it does not within a minute)."""
        self.logs.mkdir(parents=True, exist_ok=True)
        self.home.mkdir(parents=True, exist_ok=True)
        if self.mode != "superlink":
            self.address = f"127.0.0.1:{free_port()}"
            self.start_superlink()
            if self.mode == "local":
                for i in range(self.clients):
                    self.start_supernode(i)
        self._write_config()
        return self

    def start_superlink(self) -> subprocess.Popen:
        """Starts (or restarts, on the same port) the SuperLink; waits for its health check."""
        port = self.address.rsplit(":", 1)[1]
        command = [_program("flower-superlink"), "--insecure", "--disable-runtime-dependency-installation",
                   "--host", "127.0.0.1", "--port", port]
        if self.mode == "simulation":
            command.append("--simulation")
        process = self._start("superlink", command)
        deadline = time.monotonic() + _START_TIMEOUT
        while not _healthy(self.address):
            if process.poll() is not None:
                raise FederationError(f"flower-superlink exited with code {process.returncode} at start; its log: "
                                      f"{self.logs / 'superlink.log'}")
            if time.monotonic() > deadline:
                raise FederationError(f"flower-superlink did not answer on {self.address} within {_START_TIMEOUT:g} s; "
                                      f"its log: {self.logs / 'superlink.log'}")
            time.sleep(_POLL)
        return process

    def start_supernode(self, partition: int) -> subprocess.Popen:
        """Starts the SuperNode of client ``partition`` (its own Runtime API port)."""
        command = [_program("flower-supernode"), "--insecure", "--superlink", self.address,
                   "--node-config", f"partition-id={partition}", "--host", "127.0.0.1", "--port", str(free_port()),
                   "--max-retries", "0"]
        return self._start(f"supernode-{partition}", command)

    def _write_config(self) -> None:
        lines = ["[superlink]", f'default = "{CONNECTION}"', "", f"[superlink.{CONNECTION}]",
                 f'address = "{self.address}"']
        if self.root_certificates is None:
            lines.append("insecure = true")
        else:
            lines.append(f'root-certificates = "{Path(self.root_certificates).resolve()}"')
        (self.home / "config.toml").write_text("\n".join(lines) + "\n", encoding="utf-8")

    def pid(self, name: str) -> int:
        """The process id of ``name`` (``superlink``, ``supernode-<i>``), for tests that stop one."""
        return self.processes[name].pid

    def track(self) -> None:
        """Records the descendants of the processes started (``flwr-serverapp`` runs in a session of its own, so
        a process group does not reach it once its parent died): :meth:`stop` stops those too."""
        self.seen.update(descendants([p.pid for p in self.processes.values() if p.poll() is None]))

    def stop(self) -> None:
        """SIGTERM to every process group this federation started and every descendant it saw, SIGKILL after
        a grace period."""
        self.track()
        live = [p for p in self.processes.values() if p.poll() is None]
        for process in live:
            _signal_group(process.pid, signal.SIGTERM)
        _signal_seen(self.seen, signal.SIGTERM)
        deadline = time.monotonic() + _GRACE
        for process in live:
            try:
                process.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
        for process in self.processes.values():  # the group too: children that outlive their parent
            _signal_group(process.pid, signal.SIGKILL)
            if process.poll() is None:
                process.wait()
        _signal_seen(self.seen, signal.SIGKILL)

    def __enter__(self) -> "Federation":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    # -- a run ----------------------------------------------------------------------------------------
    def run(self, app: Path, run_config: Dict[str, object], *, watch: Optional[Callable[[], None]] = None,
            timeout: Optional[float] = None) -> Tuple[int, Path]:
        """``flwr run APP metadp --stream`` with ``run_config``; ``watch()`` is called while it runs (a
        progress bar). Returns (its exit code, its log). Raises FederationError if the SuperLink this
        federation started stops during the run, KeyboardInterrupt on Ctrl-C (the caller stops the rest)."""
        command = [_program("flwr"), "run", str(app), CONNECTION, "--stream"]
        for key, value in run_config.items():
            command += ["--run-config", f"{key}={toml_value(value)}"]
        if self.mode == "simulation":
            command += ["--federation-config", f"num-supernodes={self.clients} client-resources-num-cpus=1 "
                                               "init-args-num-cpus=1 init-args-log-to-driver=false"]
        process = self._start("flwr-run", command)
        log = self.logs / "flwr-run.log"
        deadline = None if timeout is None else time.monotonic() + timeout
        while process.poll() is None:
            self.track()
            if watch is not None:
                watch()
            superlink = self.processes.get("superlink")
            if superlink is not None and superlink.poll() is not None:
                raise FederationError(f"the SuperLink (process {superlink.pid}) stopped during the run (exit code "
                                      f"{superlink.returncode}); its log: {self.logs / 'superlink.log'}")
            if deadline is not None and time.monotonic() > deadline:
                raise FederationError(f"flwr run did not finish within {timeout:g} s; its log: {log}")
            time.sleep(_POLL)
        if watch is not None:
            watch()
        return process.returncode, log


def _die_with_parent() -> None:
    """In the child before exec (Linux): SIGTERM when the launching process dies, even by SIGKILL, so a killed
    ``metadp train`` leaves no SuperLink or SuperNode behind (their own children follow their parent)."""
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG = 1


def _healthy(address: str) -> bool:
    try:
        with urllib.request.urlopen(f"http://{address}/health", timeout=0.5) as answer:  # noqa: S310 - loopback
            return 200 <= answer.status < 300
    except OSError:
        return False


def _processes() -> Dict[int, Tuple[int, str]]:
    """pid -> (parent pid, start time) of every live process (Linux /proc; empty elsewhere)."""
    table: Dict[int, Tuple[int, str]] = {}
    proc = Path("/proc")
    if not proc.is_dir():
        return table
    for entry in proc.iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if fields[0] != "Z":
                table[int(entry.name)] = (int(fields[1]), fields[19])
    return table


def descendants(roots: List[int]) -> Dict[int, str]:
    """pid -> start time of every live descendant of ``roots`` and of the roots (Linux /proc; zombies left out)."""
    table = _processes()
    found = {pid: table[pid][1] for pid in roots if pid in table}
    grew = True
    while grew:
        grew = False
        for pid, (parent, started) in table.items():
            if parent in found and pid not in found:
                found[pid] = started
                grew = True
    return found


def _signal_seen(seen: Dict[int, str], sig: int) -> None:
    """``sig`` to each process of ``seen`` still running with the same start time (not a reused pid)."""
    table = _processes()
    for pid, started in seen.items():
        if pid in table and table[pid][1] == started:
            try:
                os.kill(pid, sig)
            except (ProcessLookupError, PermissionError):
                pass


def _signal_group(pid: int, sig: int) -> None:
    try:
        os.killpg(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass
