"""The hash-chained privacy ledger (metadp/accounting/ledger.py): round trips, tamper detection, torn
lines from crashes (every truncation offset of a small ledger), and a writer killed with SIGKILL."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from metadp.core import events as ev
from metadp.accounting.pld import PldAccountant
from metadp.accounting.rdp_accountant import RdpAccountant, UnsupportedEventError
from metadp.accounting.ledger import (Ledger, LedgerCorruptError, LedgerError, TornLedgerError, _digest,
                                    canonical_json)

ROOT = Path(__file__).resolve().parents[2]
STEP = ev.PoissonSampled(0.01, ev.Gaussian(1.0))
EVENTS = [STEP, ev.Gaussian(3.0), ev.Laplace(50.0), ev.SelfComposed(ev.Composed((STEP, ev.Gaussian(8.0))), 2)]


def make(path, n=6, **kwargs) -> Ledger:
    ledger = Ledger.create(path, "add_remove", "record", 1e-6, {"run": "test", "seed": 7}, **kwargs)
    for i in range(n):
        ledger.append(EVENTS[i % len(EVENTS)], count=1 + i % 3, step=i // 2)
    return ledger


def one_by_one(entries, accountant):
    for r in entries:
        accountant.compose(r.event, r.count)
    return accountant


# -- round trip --------------------------------------------------------------------------------------


def test_round_trip(tmp_path):
    path = tmp_path / "ledger.jsonl"
    with make(path) as ledger:
        written, head = ledger.entries, ledger.head
    with Ledger.open(path, readonly=True) as back:
        assert back.entries == written and back.head == head and len(back) == 6
        assert (back.relation, back.unit, back.delta) == ("add_remove", "record", 1e-6)
        assert back.metadata == {"run": "test", "seed": 7} and back.repair_note is None
        assert [r.index for r in back.entries] == list(range(6))
        assert [r.step for r in back.entries] == [0, 0, 1, 1, 2, 2]
        assert [r.count for r in back.entries] == [1, 2, 3, 1, 2, 3]
        assert back.entries[0].prev == json.loads(path.read_text().splitlines()[0])["hash"]
        assert all(b.prev == a.hash for a, b in zip(back.entries, back.entries[1:]))


def test_spent_equals_composing_every_entry(tmp_path):
    with make(tmp_path / "l.jsonl", n=9) as ledger:
        rdp = one_by_one(ledger.entries, RdpAccountant()).get_epsilon(1e-6)
        pld = one_by_one(ledger.entries, PldAccountant()).get_epsilon(1e-6)
        assert ledger.spent(accountant="rdp") == pytest.approx(rdp, rel=1e-9)
        assert ledger.spent() == pytest.approx(pld, rel=1e-9)
        assert ledger.spent(1e-5, accountant="rdp") < ledger.spent(accountant="rdp")
        assert 0 < ledger.spent() <= ledger.spent(accountant="rdp")  # the PLD bound is capped by the RDP one
        assert isinstance(ledger.accountant("rdp"), RdpAccountant)
        with pytest.raises(ValueError, match="accountant must be one of"):
            ledger.accountant("prv")


def test_empty_ledger_spends_nothing(tmp_path):
    with Ledger.create(tmp_path / "l.jsonl", "substitute", "task", 1e-5) as ledger:
        assert ledger.spent() == 0.0 and len(ledger) == 0 and ledger.metadata == {}
        head = ledger.head
    with Ledger.open(tmp_path / "l.jsonl") as ledger:
        assert ledger.head == head and ledger.relation == "substitute" and ledger.unit == "task"


def test_unaccountable_events_are_named_when_spent_is_asked(tmp_path):
    with Ledger.create(tmp_path / "l.jsonl", "add_remove", "record", 1e-6) as ledger:
        ledger.append(ev.FixedSizeSampled(5, 100, ev.Gaussian(1.0)), step=0)
        with pytest.raises(UnsupportedEventError, match="fixed-size sampling"):
            ledger.spent(accountant="rdp")


def test_create_refuses_to_overwrite_and_checks_its_arguments(tmp_path):
    path = tmp_path / "l.jsonl"
    path.write_text("precious\n")
    with pytest.raises(FileExistsError):
        Ledger.create(path, "add_remove", "record", 1e-6)
    assert path.read_text() == "precious\n"
    new = tmp_path / "new.jsonl"
    for kwargs, match in [({"relation": "replace"}, "relation must be"), ({"unit": "user"}, "unit must be"),
                          ({"delta": 0.0}, "delta must be"), ({"metadata": {"x": float("nan")}}, "JSON-safe"),
                          ({"metadata": {"x": object()}}, "JSON-safe"), ({"metadata": [1]}, "must be a dict")]:
        args = dict(relation="add_remove", unit="record", delta=1e-6) | kwargs
        with pytest.raises(ValueError, match=match):
            Ledger.create(new, **args)
        assert not new.exists()


def test_append_checks_its_arguments_before_writing(tmp_path):
    path = tmp_path / "l.jsonl"
    with make(path, n=2) as ledger:
        size = path.stat().st_size
        for kwargs, match in [(dict(event="Gaussian", step=0), "must be a metadp Event"),
                              (dict(event=STEP, step=-1), "step must be"), (dict(event=STEP, count=1.5, step=0),
                                                                          "count must be")]:
            with pytest.raises(ValueError, match=match):
                ledger.append(**kwargs)
        with pytest.raises(TypeError):
            ledger.append(STEP, 1, 3)  # step is keyword-only
        assert path.stat().st_size == size
        ledger.append(STEP, count=0, step=0)  # a zero count and a repeated step are allowed
    assert len(Ledger.open(path, readonly=True)) == 3


def test_one_writer_at_a_time(tmp_path):
    path = tmp_path / "l.jsonl"
    ledger = make(path, n=2)
    with pytest.raises(LedgerError, match="open for appending elsewhere"):
        Ledger.open(path)
    reader = Ledger.open(path, readonly=True)
    with pytest.raises(LedgerError, match="not open for appending"):
        reader.append(STEP, step=5)
    with pytest.raises(ValueError, match="repair=True needs a writable"):
        Ledger.open(path, readonly=True, repair=True)
    ledger.close()
    ledger.close()
    with pytest.raises(LedgerError, match="not open for appending"):
        ledger.append(STEP, step=5)
    Ledger.open(path).close()


def test_append_refuses_a_file_changed_behind_its_back(tmp_path):
    path = tmp_path / "l.jsonl"
    with make(path, n=2) as ledger:
        with open(path, "ab") as f:
            f.write(b"{}\n")
        with pytest.raises(LedgerError, match="another writer"):
            ledger.append(STEP, step=3)


def test_check_prefix(tmp_path):
    path = tmp_path / "l.jsonl"
    with make(path, n=4) as ledger:
        saved = (len(ledger), ledger.head)
        ledger.check_prefix(0, ledger.entries[0].prev)  # the header's hash
        ledger.append(STEP, step=9)
        ledger.check_prefix(*saved)  # the ledger grew since the checkpoint: fine
        with pytest.raises(LedgerError, match="the checkpoint saw 7"):
            ledger.check_prefix(7, saved[1])
        with pytest.raises(LedgerError, match="not the ledger the checkpoint"):
            ledger.check_prefix(3, saved[1])


# -- tampering ---------------------------------------------------------------------------------------


def _lines(path):
    return path.read_bytes().split(b"\n")[:-1]


def _write(path, objs_or_lines):
    out = [o if isinstance(o, bytes) else canonical_json(o).encode() for o in objs_or_lines]
    path.write_bytes(b"".join(line + b"\n" for line in out))


def _mutations(value):
    if isinstance(value, bool):
        return [not value]
    if isinstance(value, int):
        return [value + 1, float(value)]
    if isinstance(value, float):
        return [value * (1 + 1e-12), value + 1.0]
    if isinstance(value, str):
        return [value[:-1] + ("0" if value[-1] != "0" else "1")]
    if isinstance(value, dict):  # a nested field (event, metadata): change one of its leaves
        out = []
        for k, v in value.items():
            out += [dict(value, **{k: m}) for m in _mutations(v)]
        return out + [dict(value, extra=1)]
    if isinstance(value, list):
        return [value + [0]] + ([value[:-1]] if value else [])
    return [None]


def test_tampering_with_any_field_of_any_line_is_detected(tmp_path):
    path = tmp_path / "l.jsonl"
    make(path, n=4).close()
    original = [json.loads(line) for line in _lines(path)]
    cases = 0
    for i, obj in enumerate(original):
        for key in obj:
            for value in _mutations(obj[key]):
                if value == obj[key] and type(value) is type(obj[key]):
                    continue
                tampered = [dict(o) for o in original]
                tampered[i][key] = value
                _write(path, tampered)  # hash left as it was
                with pytest.raises(LedgerError):
                    Ledger.open(path, readonly=True)
                cases += 1
                if key != "hash" and i < len(original) - 1:  # recomputing the hash breaks the chain
                    tampered[i]["hash"] = _digest(tampered[i])
                    _write(path, tampered)
                    with pytest.raises(LedgerError, match=rf"line ({i + 1}|{i + 2})\b"):
                        Ledger.open(path, readonly=True)
    assert cases > 60


def test_reordering_deleting_or_duplicating_lines_is_detected(tmp_path):
    path = tmp_path / "l.jsonl"
    make(path, n=5).close()
    lines = _lines(path)
    for variant in (lines[:2] + lines[3:], lines[:1] + lines[2:], lines[:3] + [lines[4], lines[3]] + lines[5:],
                    lines[:4] + [lines[3]] + lines[4:], [lines[0]] + lines[:1] + lines[1:],
                    lines[:2] + [lines[2].replace(b'"count":', b'"count": ')] + lines[3:],
                    lines[:2] + [lines[2] + b" "] + lines[3:]):
        _write(path, variant)
        with pytest.raises(LedgerCorruptError):
            Ledger.open(path, readonly=True)


def test_a_forged_last_line_is_caught_by_the_checkpoint_head(tmp_path):
    """What the chain alone cannot see (module docstring), check_prefix does."""
    path = tmp_path / "l.jsonl"
    with make(path, n=3) as ledger:
        saved = (len(ledger), ledger.head)
    objs = [json.loads(line) for line in _lines(path)]
    objs[-1]["count"] = 0
    objs[-1]["hash"] = _digest(objs[-1])
    _write(path, objs)
    with Ledger.open(path, readonly=True) as forged, pytest.raises(LedgerError):
        forged.check_prefix(*saved)


def test_a_garbled_line_before_the_last_is_corruption_not_a_torn_append(tmp_path):
    path = tmp_path / "l.jsonl"
    make(path, n=3).close()
    lines = _lines(path)
    _write(path, lines[:2] + [lines[2][:40]] + lines[3:])
    with pytest.raises(LedgerCorruptError, match="not the final line"):
        Ledger.open(path, repair=True)


def test_not_a_ledger(tmp_path):
    path = tmp_path / "l.jsonl"
    path.write_text('{"format": "something else"}\n')
    with pytest.raises(LedgerError, match="not a metadp ledger"):
        Ledger.open(path, readonly=True)
    path.write_bytes(b'{"format":"metadp-le')
    with pytest.raises(LedgerError, match="creation was interrupted"):
        Ledger.open(path, repair=True)
    with pytest.raises(FileNotFoundError):
        Ledger.open(tmp_path / "missing.jsonl")


# -- crashes -----------------------------------------------------------------------------------------


def test_every_truncation_is_detected_and_repaired_without_losing_complete_entries(tmp_path):
    """A crash mid-append leaves a prefix of the file: cut it at every byte after the header. Every cut
    is detected; repair (each costs an fsync) is run on every 5th cut and on the cuts next to a line end."""
    path = tmp_path / "l.jsonl"
    make(path, n=4).close()
    data = path.read_bytes()
    ends = [i + 1 for i, b in enumerate(data) if b == ord("\n")]  # ends of complete lines
    repaired = 0
    for cut in range(ends[0], len(data) + 1):
        path = tmp_path / f"cut-{cut}.jsonl"  # a new file: rewriting one in place costs a flush on ext4
        path.write_bytes(data[:cut])
        complete = sum(1 for e in ends if e <= cut) - 1  # entries whose newline survived
        if cut in ends:  # a clean prefix: a valid, shorter ledger (see check_prefix)
            assert len(Ledger.open(path, readonly=True)) == complete
            continue
        completable = cut + 1 in ends  # only the newline is missing
        for readonly in (False, True):
            with pytest.raises(TornLedgerError) as info:
                Ledger.open(path, readonly=readonly).close()
            assert info.value.complete_entries == complete and info.value.completable == completable
        if cut % 5 and min(abs(cut - e) for e in ends) > 3:
            continue
        with Ledger.open(path, repair=True) as ledger:
            kept = complete + completable
            assert len(ledger) == kept and ledger.repair_note
            assert path.read_bytes() == data[:ends[kept]]  # the complete lines, byte for byte
            if cut % 4 == 0 or completable:  # and the ledger goes on
                ledger.append(STEP, step=99)
                assert len(Ledger.open(path, readonly=True)) == kept + 1
        repaired += 1
    assert repaired > 250


def test_a_torn_line_with_trailing_zeros_is_torn_too(tmp_path):
    """After a power loss a file system may leave zero bytes where the last append was."""
    path = tmp_path / "l.jsonl"
    make(path, n=2).close()
    data = path.read_bytes()
    path.write_bytes(data + b"\0" * 300)
    with pytest.raises(TornLedgerError):
        Ledger.open(path)
    with Ledger.open(path, repair=True) as ledger:
        assert len(ledger) == 2
    path.write_bytes(data + b'{"count":1,"ev' + b"\0" * 30 + b"\n")
    with Ledger.open(path, repair=True) as ledger:
        assert len(ledger) == 2 and path.read_bytes() == data


_WRITER = """
import sys
from metadp.core import events as ev
from metadp.accounting.ledger import Ledger
events = [ev.PoissonSampled(0.01, ev.Gaussian(1.0)), ev.Gaussian(3.0), ev.Laplace(50.0)]
ledger = Ledger.open(sys.argv[1])
i = 0
while True:
    ledger.append(events[i % 3], count=1 + i % 2, step=i // 2)
    print(i, flush=True)  # acknowledged: the append returned, so the entry is on disk
    i += 1
"""


def test_a_writer_killed_with_sigkill_leaves_a_ledger_that_opens(tmp_path):
    path = tmp_path / "l.jsonl"
    Ledger.create(path, "add_remove", "record", 1e-6).close()
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.Popen([sys.executable, "-c", _WRITER, str(path)], stdout=subprocess.PIPE, env=env)
    acknowledged = -1
    watchdog = threading.Timer(60, proc.kill)  # a writer that hangs must not hang the test
    watchdog.start()
    try:
        while acknowledged < 150:
            line = proc.stdout.readline()
            if not line:
                break
            acknowledged = int(line)
    finally:
        watchdog.cancel()
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        proc.stdout.close()
    assert acknowledged >= 150, "the writer did not get going"
    try:
        ledger = Ledger.open(path)
    except TornLedgerError:
        ledger = Ledger.open(path, repair=True)
    with ledger:
        assert len(ledger) >= acknowledged + 1  # every acknowledged append survived
        entries = ledger.entries
        assert ledger.spent(accountant="rdp") == pytest.approx(
            one_by_one(entries, RdpAccountant()).get_epsilon(1e-6), rel=1e-9)
        assert ledger.spent() == pytest.approx(one_by_one(entries, PldAccountant()).get_epsilon(1e-6), rel=1e-9)
        ledger.append(STEP, step=10**6)
