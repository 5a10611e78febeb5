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

import json
import os
import time
from typing import Any, Dict, Iterable, List, Mapping, Optional, Tuple, Union, cast

from metadp.core.validation import check_count, check_delta
from metadp.core import events as ev
from metadp.accounting.rdp_accountant import RELATIONS
from metadp.accounting.certify import Certification, certify
from metadp.accounting.registry import Accountant, make_accountant
from metadp.core.serialize import event_to_dict
from metadp.accounting._ledger_file import (
    FORMAT,
    LEDGER_UNITS,
    LedgerCorruptError,
    LedgerError,
    LedgerRecord,
    TornLedgerError,
    VERSION,
    _ROOT,
    _digest,  # noqa: F401  (re-exported: tests check the hash)
    _fsync_dir,
    _lock,
    _parse,
    _record,
    _repair,
    _sealed_line,
    _write_all,
    canonical_json,
)

__all__ = ["Ledger", "LedgerRecord", "LedgerError", "LedgerCorruptError", "TornLedgerError",
           "LEDGER_UNITS"]


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
    def create(cls, path: Union[str, os.PathLike[str]], relation: str, unit: str, delta: float,
               metadata: Optional[Mapping[str, Any]] = None) -> "Ledger":
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
    def open(cls, path: Union[str, os.PathLike[str]], repair: bool = False, readonly: bool = False,
             allow_torn: bool = False) -> "Ledger":
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
                note = _repair(cast(int, fd), end, torn)  # writable: fd is open
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

    def __exit__(self, *exc: object) -> None:
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
        return cast(str, self._header["relation"])

    @property
    def unit(self) -> str:
        return cast(str, self._header["unit"])

    @property
    def delta(self) -> float:
        return cast(float, self._header["delta"])

    @property
    def metadata(self) -> Dict[str, Any]:
        return cast(Dict[str, Any], json.loads(canonical_json(self._header["metadata"])))  # a copy

    @property
    def created(self) -> float:
        return cast(float, self._header["created"])

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

    def accountant(self, kind: str = "pld", **options: Any) -> Accountant:
        """A fresh accountant (``PldAccountant`` or ``RdpAccountant``, under the ledger's relation) with
        every entry composed. Identical events are composed once with their total count (composition
        is commutative for both accountants), so the cost does not grow with the number of entries.

        Raises:
            ValueError: on an unknown kind.
            UnsupportedEventError: if the accountant cannot interpret an entry's event (named).
        """
        return self._compose_into(make_accountant(kind, self.relation, **options))

    def certify(self, delta: Optional[float] = None, accountant: Union[str, Iterable[str]] = "all",
                lower: bool = True) -> Certification:
        """Every named accountant's certificate of the releases on record (``metadp.accounting.certify``) at
        ``delta`` (default: the ledger's delta); ``.tightest`` is the bound to report."""
        delta = self.delta if delta is None else check_delta("delta", delta)
        return certify(None, delta, relation=self.relation, accountant=accountant, lower=lower,
                       composed=self._compose_into)

    def _compose_into(self, acc: Accountant) -> Accountant:
        for event, count in self._totals.items():
            acc.compose(event, count)
        return acc

    def spent(self, delta: Optional[float] = None, accountant: Union[str, Iterable[str]] = "all") -> float:
        """The certified epsilon (an upper bound; the tightest of ``accountant``, default every one that
        interprets the entries) spent so far at ``delta`` (default: the ledger's delta)."""
        delta = self.delta if delta is None else check_delta("delta", delta)
        if not self._totals:
            return 0.0
        return float(self.certify(delta, accountant, lower=False).epsilon)

    def __repr__(self) -> str:
        return (f"Ledger({self._path!r}, {len(self._records)} entries, unit {self.unit}, "
                f"relation {self.relation}, delta {self.delta:g})")


# -- file helpers --------------------------------------------------------------------------------
