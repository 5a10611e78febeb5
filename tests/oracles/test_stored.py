"""The stored oracle values (tests/oracles/stored.py) are what the oracles compute, and none is stale."""

import json
import os
import subprocess
import sys
from pathlib import Path

import mpmath
import pytest

from oracles import stored

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_every_stored_value_is_recomputed_and_agrees(tmp_path):
    # The default oracle tests, with every decorated reference computed afresh and compared with the
    # stored value (a mismatch fails that test, so this run); then every stored key must have been
    # checked by some test, or it is stale and could hide a wrong value behind a test that never reads it.
    checked = tmp_path / "checked.txt"
    env = {**os.environ, "METADP_REFERENCES": "check", "METADP_REFERENCES_CHECKED": str(checked)}
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "0",
                           "-m", "not slow", *stored.ORACLE_TESTS], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=1800)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    keys = set(json.loads(stored.STORE.read_text()))
    seen = set(checked.read_text().split())
    assert keys - seen == set(), f"{len(keys - seen)} stored values no test checked: regenerate the file"


def test_a_stored_value_answers_only_its_own_call(monkeypatch):
    calls = []

    @stored.stored
    def oracle(x, *, dps=30):
        calls.append(x)
        with mpmath.workdps(dps):
            return mpmath.sqrt(x)

    monkeypatch.setattr(stored, "_values", {})
    monkeypatch.setattr(stored, "_new", {})
    first = oracle(mpmath.mpf(2), dps=60)
    monkeypatch.setattr(stored, "_values", dict(stored._new))  # as if read back from the file
    again = oracle(mpmath.mpf(2), dps=60)
    assert calls == [mpmath.mpf(2)] and again == first  # answered from the store, every bit kept
    with mpmath.workdps(60):
        assert abs(again - mpmath.sqrt(2)) < mpmath.mpf("1e-58")
    oracle(mpmath.mpf(2), dps=30)  # another precision is another call
    oracle(2.0, dps=60)  # a float is not the mpf
    assert len(calls) == 3


def test_check_mode_refuses_a_stored_value_the_oracle_does_not_give(monkeypatch):
    @stored.stored
    def oracle(x):
        return mpmath.mpf(x) * 3

    monkeypatch.setattr(stored, "_values", {})
    monkeypatch.setattr(stored, "_new", {})
    oracle(1.5)
    (key, _), = stored._new.items()
    monkeypatch.setattr(stored, "_values", {key: stored._encode(mpmath.mpf("4.5000001"))})
    assert oracle(1.5) == mpmath.mpf("4.5000001")  # default mode trusts the file ...
    monkeypatch.setenv("METADP_REFERENCES", "check")
    monkeypatch.setattr(stored, "_checked", set())
    with pytest.raises(AssertionError, match="stored oracle value"):  # ... check mode does not
        oracle(1.5)
    monkeypatch.setattr(stored, "_values", {key: stored._encode(mpmath.mpf(4.5))})
    assert oracle(1.5) == 4.5 and stored._checked == {key}


def test_an_unknown_mode_is_refused(monkeypatch):
    monkeypatch.setenv("METADP_REFERENCES", "yes")
    with pytest.raises(ValueError, match="METADP_REFERENCES"):
        stored.stored(lambda: 1)()
