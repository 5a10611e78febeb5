"""Stored oracle values: each mpmath reference is computed once, kept, and checked again by the slow suite.

The quadrature references (``mp_reference``, ``poisson_reference``) take most of the default suite's
oracle time: about three quarters of it is ``mpmath.quad``. Their values do not change between runs
(same inputs, same working precision, deterministic quadrature), so a reference decorated with
:func:`stored` answers from ``reference_values.json`` when that file holds the call, and computes it
otherwise. The stored file is never trusted blindly:

* ``METADP_REFERENCES=check``: every decorated call is computed afresh and compared with the stored
  value (relative difference at most ``CHECK_RTOL``: a different mpmath may change the last bits of a
  30-digit quadrature, never the leading 25); the keys checked are written to
  ``METADP_REFERENCES_CHECKED``. ``tests/oracles/test_stored.py`` runs the default oracle tests in this
  mode as a slow test (CI runs it after the README's command) and fails on a mismatch or on a stored
  value no test checked (a stale entry).
* ``METADP_REFERENCES=store``: like the default, and the values computed in this run are added to the
  file at the end of the session (``python tests/oracles/stored.py`` regenerates it).
* unset: stored values where present, fresh computations elsewhere.

``METADP_REFERENCES_MISSED=FILE`` (any mode but check) appends to FILE the test and reference of every
call that had to be computed: on the default suite it should list only ``test_stored.py``'s deliberate
misses. A test that changes mpmath's global precision makes every later call in its process miss (the
precision is part of the key), which is why ``tests/conftest.py`` fails such a test.

A key is the function's qualified name, the reference object's own state (for methods), the
arguments and the working precision, each number exactly (floats as hex, mpf as its binary tuple),
hashed (SHA-256), so a stored value answers only the very call that produced it. A test that asks
the oracle at points computed by the fast code (a loss range, say) asks new keys when that code moves
by an ulp: those calls are computed afresh (slower, still checked), and the old entries turn stale,
which the slow test reports; regenerate the file after such a change.
"""

from __future__ import annotations

import fcntl
import functools
import hashlib
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import mpmath

STORE = Path(__file__).with_name("reference_values.json")
CHECK_RTOL = mpmath.mpf("1e-25")
MODES = ("", "check", "store")

_values: dict = json.loads(STORE.read_text()) if STORE.exists() else {}
_new: dict = {}
_checked: set = set()
_missed: list = []  # calls answered by computing (default mode), for METADP_REFERENCES_MISSED


def _mode() -> str:
    mode = os.environ.get("METADP_REFERENCES", "")
    if mode not in MODES:
        raise ValueError(f"METADP_REFERENCES must be one of {MODES[1:]} or unset, got {mode!r}")
    return mode


def _encode(x):
    """A JSON-able, exact description of an argument or a result."""
    if isinstance(x, mpmath.mpf):
        sign, man, exp, bc = x._mpf_
        return ["mpf", sign, hex(man), exp, bc]
    if isinstance(x, bool) or x is None or isinstance(x, (int, str)):
        return x
    if isinstance(x, float):
        return ["float", x.hex()]
    if isinstance(x, (list, tuple)):
        return [type(x).__name__] + [_encode(v) for v in x]
    if isinstance(x, dict):
        return ["dict"] + [[k, _encode(v)] for k, v in sorted(x.items())]
    if hasattr(x, "__dict__"):  # a reference object (the self of a method): its whole state
        return ["obj", type(x).__name__, _encode(vars(x))]
    raise TypeError(f"cannot key an oracle argument of type {type(x).__name__}")


def _decode(x):
    if not isinstance(x, list):
        return x
    tag, rest = x[0], x[1:]
    if tag == "mpf":
        sign, man, exp, bc = rest
        with mpmath.workprec(max(bc, 53) + 8):  # exact: the mantissa's bits, not the context's 53
            return mpmath.mpf((sign, int(man, 16), exp, bc))
    if tag == "float":
        return float.fromhex(rest[0])
    if tag in ("list", "tuple"):
        items = [_decode(v) for v in rest]
        return tuple(items) if tag == "tuple" else items
    raise ValueError(f"unknown stored tag {tag!r}")


def _close(fresh, kept) -> bool:
    if isinstance(fresh, (list, tuple)):
        return isinstance(kept, (list, tuple)) and len(fresh) == len(kept) and all(map(_close, fresh, kept))
    if isinstance(fresh, mpmath.mpf) and isinstance(kept, mpmath.mpf):
        if fresh == kept or (mpmath.isnan(fresh) and mpmath.isnan(kept)):
            return True
        if mpmath.isinf(fresh) or mpmath.isinf(kept):
            return False
        return abs(fresh - kept) <= CHECK_RTOL * max(abs(fresh), abs(kept))
    return fresh == kept


def stored(fn):
    """Answer ``fn(*args, **kwargs)`` from the stored values when they hold the call (see the module)."""
    name = fn.__qualname__

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        described = json.dumps([name, _encode(list(args)), _encode(kwargs), mpmath.mp.prec], separators=(",", ":"))
        key = hashlib.sha256(described.encode()).hexdigest()[:40]
        mode = _mode()
        if mode != "check" and key in _values:
            return _decode(_values[key])
        value = fn(*args, **kwargs)
        if mode == "check" and key in _values:
            kept = _decode(_values[key])
            if not _close(value, kept):
                raise AssertionError(f"stored oracle value for {name}{args!r} is {kept!r}, the oracle now gives "
                                     f"{value!r}: regenerate {STORE.name} (python tests/oracles/stored.py)")
            _checked.add(key)
        elif key not in _values:
            _new[key] = _encode(value)
            _missed.append(f"{os.environ.get('PYTEST_CURRENT_TEST', '?')} {name}")
        return value

    return wrapper


def finish() -> None:
    """At the end of a test session: add the new values (store mode), or list the keys checked (check
    mode). Several xdist workers may finish at once: the file is merged under a lock."""
    mode = _mode()
    if mode == "store" and _new:
        with open(Path(tempfile.gettempdir()) / "metadp-reference-values.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            current = json.loads(STORE.read_text()) if STORE.exists() else {}
            current.update(_new)
            STORE.write_text(json.dumps(dict(sorted(current.items())), indent=0) + "\n")
    missed_file = os.environ.get("METADP_REFERENCES_MISSED")
    if missed_file and _missed:
        with open(missed_file, "a") as out:
            fcntl.flock(out, fcntl.LOCK_EX)
            out.writelines(line + "\n" for line in _missed)
    checked_file = os.environ.get("METADP_REFERENCES_CHECKED")
    if mode == "check" and checked_file:
        with open(checked_file, "a") as out:
            fcntl.flock(out, fcntl.LOCK_EX)
            out.writelines(key + "\n" for key in sorted(_checked))


ORACLE_TESTS = ("tests/core/test_rdp_oracle.py", "tests/oracles/test_references.py",
                "tests/mechanisms/test_gaussian_pair.py", "tests/mechanisms/test_laplace.py",
                "tests/mechanisms/test_dp_pix.py", "tests/mechanisms/test_randomized_response.py")


def regenerate() -> int:
    """Rebuild the file from scratch: the default (not slow) oracle tests, one process, store mode."""
    root = Path(__file__).resolve().parents[2]
    STORE.unlink(missing_ok=True)
    env = {**os.environ, "METADP_REFERENCES": "store"}
    return subprocess.call([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "0",
                            *ORACLE_TESTS], cwd=root, env=env)


if __name__ == "__main__":
    sys.exit(regenerate())
