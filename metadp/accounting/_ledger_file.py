"""The privacy ledger's file: canonical JSON lines, their hashes, the single-writer lock, durable writes,
and the checks that read a ledger back (its format is described in ``metadp.accounting.ledger``).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import os
from typing import Any, Dict, List, Mapping, Optional, Tuple

from metadp.core.validation import check_delta
from metadp.core import events as ev
from metadp.accounting.rdp_accountant import RELATIONS
from metadp.core.serialize import event_from_dict

try:  # advisory single-writer lock; absent on Windows
    import fcntl
except ImportError:  # pragma: no cover
    fcntl = None  # type: ignore[assignment]  # (no module: the lock is skipped)

__all__ = ["LedgerRecord", "LedgerError", "LedgerCorruptError", "TornLedgerError", "LEDGER_UNITS", "FORMAT", "VERSION",
           "canonical_json"]

FORMAT = "metadp-ledger"
VERSION = 1
LEDGER_UNITS = ("record", "task", "group")  # as metadp.plan.UNITS
_ROOT = "0" * 64
_HEADER_KEYS = {"format", "version", "relation", "unit", "delta", "metadata", "created", "prev", "hash"}
_ENTRY_KEYS = {"index", "step", "event", "count", "time", "prev", "hash"}


class LedgerError(ValueError):
    """A ledger file cannot be used as it is; the message says where and why."""


class LedgerCorruptError(LedgerError):
    """A complete line fails a check (hash, chain, index, fields): corruption or tampering."""


class TornLedgerError(LedgerError):
    """The final line is incomplete (a crash while appending): ``Ledger.open(path, repair=True)`` drops it.

    Attributes:
        complete_entries: the number of complete entries before the torn line.
        torn_bytes: the length of the torn line in bytes.
        completable: True when the torn line is a complete, valid entry missing only its newline
            (repair then keeps it).
    """

    def __init__(self, message: str, complete_entries: int, torn_bytes: int, completable: bool):
        super().__init__(message)
        self.complete_entries = complete_entries
        self.torn_bytes = torn_bytes
        self.completable = completable


@dataclasses.dataclass(frozen=True)
class LedgerRecord:
    """One ledger entry: ``count`` compositions of ``event`` released at training ``step``.

    Attributes:
        index: position in the ledger (0-based).
        step: the training step the release belongs to (steps may repeat: several releases per step,
            or steps redone after resuming from an older checkpoint; every release counts).
        event: the released event (one step's event for the protected unit).
        count: how many times it was composed.
        time: wall-clock time of the append (seconds since the epoch).
        prev: the previous line's hash.
        hash: SHA-256 of this line's canonical JSON without ``hash``.
    """

    index: int
    step: int
    event: ev.Event
    count: int
    time: float
    prev: str
    hash: str


def canonical_json(obj: Any) -> str:
    """The canonical JSON text that is hashed and written: sorted keys, no spaces, ASCII, no NaN."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False)


def _digest(obj: Mapping[str, Any]) -> str:
    return hashlib.sha256(canonical_json({k: v for k, v in obj.items() if k != "hash"}).encode("ascii")).hexdigest()


def _sealed_line(obj: Dict[str, Any]) -> bytes:
    obj = dict(obj, hash=_digest(obj))
    return (canonical_json(obj) + "\n").encode("ascii")


def _lock(fd: int, path: str) -> None:
    if fcntl is None:  # pragma: no cover
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        raise LedgerError(f"{path} is open for appending elsewhere (another process or Ledger object holds its "
                          "lock): close it first, or open with readonly=True") from None


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


def _fsync_dir(path: str) -> None:
    try:
        dfd = os.open(os.path.dirname(os.path.abspath(path)), os.O_RDONLY)
    except OSError:  # pragma: no cover - platforms without directory fds
        return
    try:
        os.fsync(dfd)
    except OSError:  # pragma: no cover
        pass
    finally:
        os.close(dfd)


def _repair(fd: int, end: int, torn: TornLedgerError) -> str:
    """Drops the torn final line (or adds the missing newline of a complete one); returns a note."""
    if torn.completable:
        os.write(fd, b"\n")
        note = f"completed the final entry (index {torn.complete_entries}) with its missing newline"
    else:
        os.ftruncate(fd, end)
        note = (f"dropped an incomplete final line of {torn.torn_bytes} bytes after entry "
                f"{torn.complete_entries - 1} (a crash while appending)")
    os.fsync(fd)
    return note


# -- parsing and verification --------------------------------------------------------------------


def _parse(data: bytes, path: str) -> Tuple[Dict[str, Any], List[LedgerRecord], int, Optional[TornLedgerError]]:
    """(header, records, verified byte length, torn error or None) of a ledger file's bytes."""
    lines = data.split(b"\n")
    tail = lines.pop()  # b"" when the file ends with a newline, else the unterminated final line
    if not lines:
        raise LedgerError(f"{path}: the header line is incomplete ({len(tail)} bytes): the ledger's creation was "
                          "interrupted before it was written, so no release was recorded; delete the file and "
                          "create the ledger again")
    offsets = [0]
    for raw in lines:
        offsets.append(offsets[-1] + len(raw) + 1)
    header = _check_header(lines[0], path)
    records: List[LedgerRecord] = []
    events: Dict[str, ev.Event] = {}  # identical events share one object
    prev = header["hash"]
    for i, raw in enumerate(lines[1:]):
        obj = _load(raw, f"{path}: line {i + 2}")
        if obj is None:  # a complete (newline-terminated) line that does not parse
            if i == len(lines) - 2 and not tail:
                return header, records, offsets[i + 1], TornLedgerError(
                    f"{path}: the final line ({len(raw) + 1} bytes, line {i + 2}) is incomplete: a crash while "
                    f"appending; the {len(records)} entries before it are intact. Ledger.open(path, repair=True) "
                    "drops it", len(records), len(raw) + 1, False)
            raise LedgerCorruptError(f"{path}: line {i + 2} is not valid JSON, and it is not the final line, so it "
                                     "is not a torn append: the ledger was corrupted or edited")
        record = _check_entry(obj, raw, i, prev, f"{path}: line {i + 2}", events)
        records.append(record)
        prev = record.hash
    if not tail:
        return header, records, offsets[-1], None
    where = f"{path}: the final line (line {len(lines) + 1}, {len(tail)} bytes, no newline)"
    obj = _load(tail, where)
    if obj is None:
        return header, records, offsets[-1], TornLedgerError(
            f"{where} is incomplete: a crash while appending; the {len(records)} entries before it are intact. "
            "Ledger.open(path, repair=True) drops it", len(records), len(tail), False)
    _check_entry(obj, tail, len(records), prev, where, events)  # a complete entry: it must verify
    return header, records, offsets[-1], TornLedgerError(
        f"{where} is a complete entry missing its newline (a crash at the end of an append); "
        "Ledger.open(path, repair=True) adds the newline and keeps it", len(records), len(tail), True)


def _load(raw: bytes, where: str) -> Optional[Dict[str, Any]]:
    """The parsed object of a line, or None if it is not one JSON object (truncated)."""
    try:
        obj = json.loads(raw.decode("ascii"))
    except (UnicodeDecodeError, ValueError):
        return None
    if not isinstance(obj, dict):
        raise LedgerCorruptError(f"{where} is JSON but not an object")
    return obj


def _check_sealed(obj: Dict[str, Any], raw: bytes, where: str) -> None:
    if canonical_json(obj).encode("ascii") != raw:
        raise LedgerCorruptError(f"{where} is not in canonical form (keys sorted, no spaces): it was edited")
    if obj.get("hash") != _digest(obj):
        raise LedgerCorruptError(f"{where}: the hash does not match the line's contents: it was edited")


def _check_header(raw: bytes, path: str) -> Dict[str, Any]:
    where = f"{path}: line 1 (header)"
    obj = _load(raw, where)
    if obj is None and raw.strip(b"\0") == b"":
        raise LedgerError(f"{where} is empty: the ledger's creation was interrupted before it was written, so no "
                          "release was recorded; delete the file and create the ledger again")
    if obj is None or obj.get("format") != FORMAT:
        raise LedgerError(f"{where} is not a metadp ledger header")
    if obj.get("version") != VERSION:
        raise LedgerError(f"{where}: ledger format version {obj.get('version')!r}, this metadp reads {VERSION}")
    if set(obj) != _HEADER_KEYS:
        raise LedgerCorruptError(f"{where} has keys {sorted(obj)}, expected {sorted(_HEADER_KEYS)}")
    _check_sealed(obj, raw, where)
    if obj["prev"] != _ROOT or obj["relation"] not in RELATIONS or obj["unit"] not in LEDGER_UNITS:
        raise LedgerCorruptError(f"{where}: invalid prev, relation or unit")
    try:
        check_delta("delta", obj["delta"])
    except ValueError as err:
        raise LedgerCorruptError(f"{where}: {err}") from None
    return obj


def _check_entry(obj: Dict[str, Any], raw: bytes, index: int, prev: str, where: str,
                 events: Dict[str, ev.Event]) -> LedgerRecord:
    if set(obj) != _ENTRY_KEYS:
        raise LedgerCorruptError(f"{where} has keys {sorted(obj)}, expected {sorted(_ENTRY_KEYS)}")
    _check_sealed(obj, raw, where)
    if obj["prev"] != prev:
        raise LedgerCorruptError(f"{where}: the chain is broken (prev does not match the previous line's hash): "
                                 "a line before it was changed, removed or inserted")
    if isinstance(obj["index"], bool) or not isinstance(obj["index"], int) or obj["index"] != index:
        raise LedgerCorruptError(f"{where}: index {obj['index']!r}, expected {index}")
    for key in ("step", "count"):
        if isinstance(obj[key], bool) or not isinstance(obj[key], int) or obj[key] < 0:
            raise LedgerCorruptError(f"{where}: {key} must be an integer >= 0, got {obj[key]!r}")
    if isinstance(obj["time"], bool) or not isinstance(obj["time"], (int, float)) or not math.isfinite(obj["time"]):
        raise LedgerCorruptError(f"{where}: time must be a finite number, got {obj['time']!r}")
    key = canonical_json(obj["event"])
    if key not in events:
        try:
            events[key] = event_from_dict(obj["event"])
        except ValueError as err:
            raise LedgerCorruptError(f"{where}: {err}") from None
    return _record(obj, events[key])


def _record(obj: Mapping[str, Any], event: ev.Event) -> LedgerRecord:
    return LedgerRecord(obj["index"], obj["step"], event, obj["count"], float(obj["time"]), obj["prev"], obj["hash"])
