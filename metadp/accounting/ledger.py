"""An append-only, hash-chained privacy ledger in JSON lines (DESIGN.md sec. 7: resume never forgets
spent budget).

Every noisy release a trainer makes is appended, as the event the accountant composes, before the
trainer goes on; the privacy spent is recomputed from the file, never from a counter that a crash or a
resumed checkpoint could roll back.

File format (UTF-8, one JSON object per line, keys sorted, no spaces: the canonical form below):

* line 1, the header: ``{"format": "metadp-ledger", "version": 1, "relation", "unit", "delta",
  "metadata", "created", "prev": 64 zeros, "hash"}``;
* every other line, one entry: ``{"index", "step", "event" (``metadp.core.serialize``),
  "count", "time", "prev", "hash"}``, with ``index`` 0, 1, 2, ...

``hash`` is the SHA-256 (hex) of the canonical JSON of the line's object without ``hash``, and
``prev`` is the previous line's ``hash``: editing, deleting, inserting or reordering lines breaks the
chain at the first line touched, and :meth:`Ledger.open` says where. What a chain without a secret
cannot show: a ledger cut at a line boundary (it reads as a shorter, valid ledger) or a suffix
rewritten with recomputed hashes. Checkpoints should therefore store ``len(ledger)`` and
``ledger.head`` and check them on resume (:meth:`Ledger.check_prefix`).

Durability: :meth:`Ledger.append` writes the line with one ``write`` and returns only after
``os.fsync``; a crash can therefore damage only the line being written. Such a torn final line (one
that does not parse as JSON, or a complete entry missing only its newline) makes :meth:`Ledger.open`
raise :class:`TornLedgerError`; ``open(path, repair=True)`` drops the torn bytes (or, for a complete
entry, writes the missing newline) and never drops a line that parses. A line that parses but fails
the checks (hash, chain, index, fields) anywhere, the last line included, is corruption or tampering:
:class:`LedgerCorruptError`, never repaired.

One writer at a time: a writable ledger holds an exclusive advisory lock (``fcntl.flock``, where the
platform has it) until :meth:`Ledger.close`; ``readonly=True`` opens without it.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import os
import time
from typing import Any, Dict, List, Mapping, Optional, Tuple

from metadp.core.validation import check_count, check_delta
from metadp.core import events as ev
from metadp.accounting.rdp_accountant import RELATIONS
from metadp.accounting.registry import make_accountant
from metadp.core.serialize import event_from_dict, event_to_dict

try:  # advisory single-writer lock; absent on Windows
    import fcntl
except ImportError:  # pragma: no cover
    fcntl = None

__all__ = ["Ledger", "LedgerRecord", "LedgerError", "LedgerCorruptError", "TornLedgerError",
           "LEDGER_UNITS"]

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


class Ledger:
    """An append-only, hash-chained privacy ledger (module docstring). Create with :meth:`create`,
    reopen with :meth:`open`; not constructed directly.

    Example::

        ledger = Ledger.create("run/ledger.jsonl", "add_remove", "record", 1e-6, {"run": "omniglot-5w1s"})
        ledger.append(PoissonSampled(0.01, Gaussian(1.0)), step=1)  # before the release leaves the process
        ledger.spent()  # certified epsilon at the ledger's delta (PLD upper bound)
        # checkpoint: save len(ledger) and ledger.head; on resume:
        ledger = Ledger.open("run/ledger.jsonl")  # add repair=True if a crash tore the last line
        ledger.check_prefix(saved_len, saved_head)
    """

    def __init__(self, path: str, header: Dict[str, Any], records: List[LedgerRecord], fd: Optional[int],
                 end: int, repair_note: Optional[str] = None):
        self._path = path
        self._header = header
        self._records = records
        self._fd = fd
        self._end = end  # byte length of the verified file
        self._broken: Optional[str] = None
        self.repair_note = repair_note  # what ``open(repair=True)`` did, or None
        self.torn: Optional[TornLedgerError] = None  # a torn final line left as it is (``open(allow_torn=True)``)
        self._totals: Dict[ev.Event, int] = {}
        for r in records:
            self._totals[r.event] = self._totals.get(r.event, 0) + r.count

    # -- creating and opening -------------------------------------------------------------------

    @classmethod
    def create(cls, path, relation: str, unit: str, delta: float, metadata: Optional[Mapping[str, Any]] = None
               ) -> "Ledger":
        """Creates a new ledger file (never overwriting one) and returns it open for appending.

        Args:
            path: the file to create; it must not exist.
            relation: the neighbouring relation of every event, ``"add_remove"`` or ``"substitute"``.
            unit: the privacy unit the events protect, one of ``LEDGER_UNITS``.
            delta: the target delta in (0, 1), the default of :meth:`spent`.
            metadata: JSON-safe details to keep with the ledger (plan, run id, ...); copied.

        Raises:
            FileExistsError: if ``path`` exists.
            ValueError: on an invalid relation, unit, delta or metadata that is not JSON-safe.
        """
        if relation not in RELATIONS:
            raise ValueError(f"relation must be one of {RELATIONS}, got {relation!r}")
        if unit not in LEDGER_UNITS:
            raise ValueError(f"unit must be one of {LEDGER_UNITS}, got {unit!r}")
        delta = check_delta("delta", delta)
        metadata = {} if metadata is None else metadata
        if not isinstance(metadata, Mapping):
            raise ValueError(f"metadata must be a dict, got {type(metadata).__name__}")
        try:
            metadata = json.loads(canonical_json(dict(metadata)))
        except (TypeError, ValueError) as err:
            raise ValueError(f"metadata must be JSON-safe (str keys; str, finite numbers, bool, None, lists, "
                             f"dicts): {err}") from None
        header = {"format": FORMAT, "version": VERSION, "relation": relation, "unit": unit, "delta": delta,
                  "metadata": metadata, "created": time.time(), "prev": _ROOT}
        line = _sealed_line(header)
        path = os.fspath(path)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_APPEND, 0o644)
        try:
            _lock(fd, path)
            _write_all(fd, line)
            os.fsync(fd)
            _fsync_dir(path)
        except BaseException:
            os.close(fd)
            raise
        return cls(path, json.loads(line), [], fd, len(line))

    @classmethod
    def open(cls, path, repair: bool = False, readonly: bool = False, allow_torn: bool = False) -> "Ledger":
        """Reads and verifies every line of a ledger.

        Args:
            path: the ledger file.
            repair: drop an incomplete final line left by a crash (or complete an entry that lacks only
                its newline). Only that line is touched; every complete entry is kept.
            readonly: open without the writer's lock (``append`` then raises; ``repair`` is refused).
            allow_torn: with ``readonly``, a torn final line is reported in ``torn`` (the error a
                non-repairing open would raise) instead of raised; the ledger holds the complete entries
                before it. Nothing is written.

        Returns:
            The ledger (writable unless ``readonly``); ``repair_note`` says what a repair did.

        Raises:
            FileNotFoundError: if ``path`` does not exist.
            TornLedgerError: if the final line is incomplete and ``repair`` is False.
            LedgerCorruptError: if a complete line fails a check (never repaired).
            LedgerError: if the header is incomplete or the file is not a metadp ledger.
        """
        path = os.fspath(path)
        if repair and readonly:
            raise ValueError("repair=True needs a writable ledger (readonly=False)")
        if allow_torn and not readonly:
            raise ValueError("allow_torn=True needs readonly=True (a writable ledger repairs or refuses a torn line)")
        fd = None if readonly else os.open(path, os.O_RDWR | os.O_APPEND)
        try:
            if fd is not None:
                _lock(fd, path)
            with open(path, "rb") as f:
                data = f.read()
            header, records, end, torn = _parse(data, path)
            note = None
            if torn is not None and allow_torn:
                ledger = cls(path, header, records, fd, end)
                ledger.torn = torn
                return ledger
            if torn is not None:
                if not repair:
                    raise torn
                note = _repair(fd, end, torn)
                if torn.completable:
                    header, records, end, torn = _parse(data + b"\n", path)
            return cls(path, header, records, fd, end, note)
        except BaseException:
            if fd is not None:
                os.close(fd)
            raise

    def close(self) -> None:
        """Releases the file and the writer's lock (idempotent)."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> "Ledger":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- appending ------------------------------------------------------------------------------

    def append(self, event: ev.Event, count: int = 1, *, step: int) -> LedgerRecord:
        """Appends one entry and returns after it is on disk (``os.fsync``).

        Call it before the release leaves the process: the budget is charged even if training
        crashes right after.

        Args:
            event: one release's event for the protected unit (serialisable, see
                ``metadp.core.serialize``).
            count: how many times it is composed, >= 0.
            step: the training step, >= 0 (keyword only).

        Returns:
            The written record.

        Raises:
            ValueError: on an event that cannot be serialised, or an invalid count or step.
            LedgerError: if the ledger is read-only, closed, or changed on disk since it was opened.
        """
        if self._broken:
            raise LedgerError(f"{self._path}: {self._broken}; reopen the ledger (Ledger.open) to continue")
        if self._fd is None:
            raise LedgerError(f"{self._path} is not open for appending (opened read-only, or closed)")
        if not isinstance(event, ev.Event):
            raise ValueError(f"event must be a metadp Event, got {type(event).__name__}")
        count = check_count("count", count)
        step = check_count("step", step)
        obj = {"index": len(self._records), "step": step, "event": event_to_dict(event), "count": count,
               "time": time.time(), "prev": self.head}
        line = _sealed_line(obj)
        size = os.fstat(self._fd).st_size
        if size != self._end:
            raise LedgerError(f"{self._path} has {size} bytes on disk, {self._end} were verified: another writer "
                              "changed it; reopen it (Ledger.open) to verify it again")
        try:
            _write_all(self._fd, line)
            os.fsync(self._fd)
        except BaseException as err:
            self._broken = f"an append failed ({type(err).__name__}: {err})"
            try:  # leave no partial line behind
                os.ftruncate(self._fd, self._end)
                os.fsync(self._fd)
            except OSError:
                pass
            raise
        self._end += len(line)
        record = _record(json.loads(line), event)
        self._records.append(record)
        self._totals[event] = self._totals.get(event, 0) + count
        return record

    # -- reading --------------------------------------------------------------------------------

    @property
    def path(self) -> str:
        return self._path

    @property
    def relation(self) -> str:
        return self._header["relation"]

    @property
    def unit(self) -> str:
        return self._header["unit"]

    @property
    def delta(self) -> float:
        return self._header["delta"]

    @property
    def metadata(self) -> Dict[str, Any]:
        return json.loads(canonical_json(self._header["metadata"]))  # a copy

    @property
    def created(self) -> float:
        return self._header["created"]

    @property
    def entries(self) -> Tuple[LedgerRecord, ...]:
        """Every entry, in order."""
        return tuple(self._records)

    @property
    def head(self) -> str:
        """The hash of the last line (the header's when there are no entries): store it in checkpoints."""
        return self._records[-1].hash if self._records else self._header["hash"]

    def __len__(self) -> int:
        return len(self._records)

    def check_prefix(self, entries: int, head: str) -> None:
        """Checks that this ledger extends the one a checkpoint saw (``len(ledger)``, ``ledger.head``).

        Raises:
            LedgerError: if the ledger has fewer entries, or its entry ``entries - 1`` (the header when
                0) has another hash: entries were lost or rewritten since the checkpoint.
        """
        entries = check_count("entries", entries)
        if entries > len(self._records):
            raise LedgerError(f"{self._path} has {len(self._records)} entries but the checkpoint saw {entries}: "
                              "spent budget was lost (restore the ledger that belongs to the checkpoint)")
        found = self._records[entries - 1].hash if entries else self._header["hash"]
        if found != head:
            raise LedgerError(f"{self._path}: entry {entries - 1} has hash {found[:12]}..., the checkpoint saw "
                              f"{str(head)[:12]}...: this is not the ledger the checkpoint was written with")

    def accountant(self, kind: str = "pld", **options):
        """A fresh accountant (``PldAccountant`` or ``RdpAccountant``, under the ledger's relation) with
        every entry composed. Identical events are composed once with their total count (composition
        is commutative for both accountants), so the cost does not grow with the number of entries.

        Raises:
            ValueError: on an unknown kind.
            UnsupportedEventError: if the accountant cannot interpret an entry's event (named).
        """
        acc = make_accountant(kind, self.relation, **options)
        for event, count in self._totals.items():
            acc.compose(event, count)
        return acc

    def spent(self, delta: Optional[float] = None, kind: str = "pld") -> float:
        """The certified epsilon (an upper bound) spent so far at ``delta`` (default: the ledger's delta)."""
        delta = self.delta if delta is None else check_delta("delta", delta)
        if not self._totals:
            return 0.0
        return float(self.accountant(kind).get_epsilon(delta))

    def __repr__(self) -> str:
        return (f"Ledger({self._path!r}, {len(self._records)} entries, unit {self.unit}, "
                f"relation {self.relation}, delta {self.delta:g})")


# -- file helpers --------------------------------------------------------------------------------


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


def _parse(data: bytes, path: str):
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


def _check_entry(obj, raw, index, prev, where, events) -> LedgerRecord:
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
