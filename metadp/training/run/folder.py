"""The output folder of a training run: what it holds, one writer at a time, and what a resumed run
must match (DESIGN.md sec. 7: resume never forgets spent budget).

Files of a run in its folder (``--out``):

* ``run.json``: the run's configuration, written when the run starts; ``--resume`` compares the new
  configuration with it and refuses a changed plan (``metadp.training.run.trainer``);
* ``run.lock``: the writer's lock (below);
* ``checkpoint.pt``, ``ledger-<view>.jsonl``, ``metrics.jsonl``, ``privacy_report.json``,
  ``evaluation.json`` (``protonet``: ``model.pt``).

One writer at a time: a run holds an exclusive ``fcntl.flock`` on ``run.lock`` from before its first
write to its exit. The lock belongs to the open file, not to the file's existence: the operating system
releases it when the process ends, however it ends (SIGKILL and power loss included), so a ``run.lock``
left behind is never stale and needs no cleaning up; it holds the process id of the last run that took
it, for the message. Where ``flock`` is missing (Windows) or not enforced (some network file systems),
the ledgers' own locks still keep two writers from appending to one ledger.

Checks here read only: nothing is created or changed until the caller has refused every bad input.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
from pathlib import Path
from typing import Any, Dict, Iterator, Optional, Tuple

from metadp.accounting.ledger import Ledger

try:
    import fcntl
except ImportError:  # pragma: no cover
    fcntl = None

__all__ = ["RUN_FILE", "LOCK_FILE", "CHECKPOINT", "FolderState", "check_out_path", "inspect", "create",
           "check_unlocked", "locked", "write_run_file", "RunLockedError", "check_folder", "lost_checkpoint_note"]

RUN_FILE = "run.json"
LOCK_FILE = "run.lock"
CHECKPOINT = "checkpoint.pt"
_RUN_FILES = (RUN_FILE, CHECKPOINT, "metrics.jsonl", "privacy_report.json", "evaluation.json", "model.pt")
FORMAT = "metadp-run"


class RunLockedError(ValueError):
    """Another process holds the folder's lock."""


@dataclasses.dataclass(frozen=True)
class FolderState:
    """What an output folder holds (read only by :func:`inspect`).

    Attributes:
        path: the folder.
        exists: whether it exists.
        run_files: the run files present (``run.json``, ``checkpoint.pt``, ledgers, ...), sorted.
        stored: the contents of ``run.json`` (or, for a folder written before ``run.json`` existed, the
            configuration kept in a ledger's header as ``{"config": ...}``), or None.
        checkpoint: whether ``checkpoint.pt`` exists.
        ledgers: ledger file name -> the ledger, opened read-only and verified (complete entries only:
            ``ledger.torn`` says whether a crash tore its final line, which a resume repairs).
    """

    path: Path
    exists: bool
    run_files: Tuple[str, ...]
    stored: Optional[Dict[str, Any]]
    checkpoint: bool
    ledgers: Dict[str, Ledger]

    @property
    def holds_run(self) -> bool:
        return bool(self.run_files)

    @property
    def releases(self) -> Dict[str, int]:
        """Ledger file name -> complete entries on record."""
        return {name: len(ledger) for name, ledger in self.ledgers.items()}


def check_out_path(out, flag: str = "--out") -> Path:
    """Refuses an output path that cannot be a run folder: a file, a path under a file, or (where the
    process's permissions say so) a place it may not create in. Reads only.

    Raises:
        ValueError: naming ``flag``, the path and what is allowed.
    """
    path = Path(out)
    if str(out).strip() == "":
        raise ValueError(f"{flag} must name a folder, got an empty path")
    if path.exists() and not path.is_dir():
        raise ValueError(f"{flag} {str(out)!r} is a file, not a folder: {flag} names the run's folder (created if "
                         "missing); choose another path")
    ancestor = path.absolute()
    while not ancestor.exists():
        ancestor = ancestor.parent
    if not ancestor.is_dir():
        raise ValueError(f"{flag} {str(out)!r} lies under the file {ancestor}: choose a path whose parents are folders")
    if not os.access(ancestor, os.W_OK | os.X_OK):
        what = "write to" if ancestor == path.absolute() else "create a folder in"
        raise ValueError(f"{flag} {str(out)!r}: this process may not {what} {ancestor} (permission denied); "
                         "choose a writable place")
    return path


def inspect(out) -> FolderState:
    """What the folder ``out`` holds, with every ledger verified read-only (nothing is written).

    Raises:
        LedgerError: a ledger is corrupt or tampered with (the message names the file and the line).
        ValueError: ``run.json`` is not a run file.
    """
    path = Path(out)
    if not path.is_dir():
        return FolderState(path, False, (), None, False, {})
    ledgers = {p.name: Ledger.open(p, readonly=True, allow_torn=True) for p in sorted(path.glob("ledger-*.jsonl"))}
    files = tuple(sorted([name for name in _RUN_FILES if (path / name).exists()] + list(ledgers)))
    stored = None
    run_file = path / RUN_FILE
    if run_file.exists():
        try:
            stored = json.loads(run_file.read_text(encoding="utf-8"))
        except (OSError, ValueError) as err:
            raise ValueError(f"{run_file} cannot be read as a metadp run file ({err}): restore it, or choose "
                             "another --out") from None
        if not isinstance(stored, dict) or stored.get("format") != FORMAT or not isinstance(stored.get("config"), dict):
            raise ValueError(f"{run_file} is not a metadp run file: restore it, or choose another --out")
    elif ledgers:  # written before run.json existed: the ledgers' headers keep the configuration
        config = next(iter(ledgers.values())).metadata.get("config")
        stored = {"config": config} if isinstance(config, dict) else None
    return FolderState(path, True, files, stored, (path / CHECKPOINT).exists(), ledgers)


def create(out, flag: str = "--out") -> Path:
    """Creates the folder (and its parents); an OS refusal becomes a ValueError naming ``flag``."""
    path = Path(out)
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise ValueError(f"{flag} {str(out)!r} cannot be created: {err.strerror or err}; choose a writable "
                         "place") from None
    return path


def _holder(fd: int) -> str:
    return os.pread(fd, 32, 0).decode("ascii", "replace").strip() or "unknown"


def _locked_error(out, lock: Path, holder: str) -> RunLockedError:
    return RunLockedError(f"--out {out} is in use: another metadp train (pid {holder}) holds its lock {lock}; wait "
                          "for it to finish, or choose another --out (the lock is released when that process exits)")


def check_unlocked(out) -> None:
    """Refuses a folder whose lock another process holds, without creating or changing anything (a probe:
    the lock is taken and released at once, so :func:`locked` still decides).

    Raises:
        RunLockedError: another process holds the lock.
    """
    lock = Path(out) / LOCK_FILE
    if fcntl is None or not lock.is_file():
        return
    fd = os.open(lock, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        raise _locked_error(out, lock, _holder(fd)) from None
    finally:
        os.close(fd)


@contextlib.contextmanager
def locked(out) -> Iterator[None]:
    """Holds the exclusive lock of the run folder ``out`` (module docstring) while the block runs.

    Raises:
        RunLockedError: another process holds it (the message names its process id and the lock file).
    """
    lock = Path(out) / LOCK_FILE
    fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        if fcntl is not None:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                raise _locked_error(out, lock, _holder(fd)) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode("ascii"), 0)
        yield
    finally:
        os.close(fd)  # releases the flock


def write_run_file(out, record: Dict[str, Any]) -> None:
    """Writes ``run.json`` atomically (a temporary file, fsync, rename)."""
    path = Path(out) / RUN_FILE
    tmp = path.with_suffix(".json.tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(dict(record, format=FORMAT), f, indent=1, sort_keys=True, allow_nan=False)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


# settings a resumed run may change without --resume-changed: they change neither the plan nor its accounting
_FREE_ON_RESUME = ("inner_lr", "outer_lr", "chunk_size", "checkpoint_every")
# settings no resumed run may change: other views, other ledgers, another model
_FIXED_ON_RESUME = ("algorithm",)
_FLAGS = ("unit", "sampler", "steps", "meta_batch", "inner_steps", "first_order", "clip", "clip_mode", "inner_clip",
          "inner_noise", "clip_policy", "count_noise", "epsilon", "delta", "seed")


def _flag(field: str) -> str:
    """The ``metadp train`` flag of a TrainConfig field (the field's name where there is none)."""
    if field == "noise_multiplier":
        return "--noise"
    if field == "algorithm":
        return "the algorithm"
    return "--" + field.replace("_", "-") if field in _FLAGS else field


def _changes(stored: dict, record: dict):
    """(fixed, changed): 'name old -> new' texts of the setup and fixed fields, and of the others."""
    fixed, changed = [], []
    old_setup, new_setup = stored.get("setup"), record["setup"]
    if isinstance(old_setup, dict):
        for key in sorted(set(old_setup) | set(new_setup)):
            if old_setup.get(key) != new_setup.get(key):
                fixed.append(f"{key} {old_setup.get(key)} -> {new_setup.get(key)}")
    old = stored["config"]
    for key, value in record["config"].items():
        if key in _FREE_ON_RESUME or key not in old or old[key] == value:
            continue
        (fixed if key in _FIXED_ON_RESUME else changed).append(f"{_flag(key)} {old[key]} -> {value}")
    return fixed, changed


def check_folder(out: Path, record: dict, resume: bool, resume_changed: bool):
    """Refuses a folder a run with ``record`` (``{"config": TrainConfig fields, "setup": data and model}``)
    cannot write into; reads only.

    A folder with a run needs ``resume``; no resumed run may change its ``setup`` or algorithm; other
    changed settings (``_FREE_ON_RESUME`` aside) need ``resume_changed``.

    Returns:
        (the folder's state, the changed settings as "flag old -> new" texts).

    Raises:
        ValueError: naming the flags (``RunLockedError`` when another process holds the folder's lock).
    """
    state = inspect(out)
    if not state.holds_run:
        return state, []
    check_unlocked(out)  # a run writing here now: say so before anything else
    if not resume:
        raise ValueError(f"--out {out} holds a run ({', '.join(state.run_files)}): pass --resume to continue it "
                         "(train(resume=True)), or choose another --out")
    changed = []
    if state.stored is not None:
        fixed, changed = _changes(state.stored, record)
        if fixed:
            raise ValueError(f"--resume: the run in {out} was started on other data, another model or another "
                             f"algorithm ({'; '.join(fixed + changed)}); a run cannot continue on those: choose "
                             "another --out")
        if changed and not resume_changed:
            held = sum(state.releases.values())
            raise ValueError(f"--resume: the run in {out} was started with other settings ({'; '.join(changed)}); "
                             "pass --resume-changed to continue under the new ones (the "
                             f"{held} releases on record stay charged), or choose another --out")
    return state, changed


def lost_checkpoint_note(out, state: FolderState, spent: Optional[str]) -> str:
    """What a resumed run whose ``checkpoint.pt`` is missing does, in one line (``spent``: the budget
    view's spent epsilon, in words, or None)."""
    held = sum(state.releases.values())
    checkpoint = Path(out) / CHECKPOINT
    if not held:
        return f"--resume: {checkpoint} is missing and no release is on record: training starts from step 0"
    counts = ", ".join(f"{name}: {n}" for name, n in state.releases.items())
    return (f"--resume: {checkpoint} is missing, but the ledgers hold releases ({counts}){'; ' + spent if spent else ''}"
            f"; training restarts from step 0 with a new model and the {held} releases on record stay charged, so "
            "the run stops when they and the new ones reach the budget")
