"""Suite-wide settings.

The default run is spread over the machine's cores by pytest-xdist (``-n auto`` in pyproject.toml).
Each worker then keeps to one thread for its numeric libraries (BLAS, OpenMP, torch's intra-op pool):
two workers each running two threads on two cores only fight over them. Set here, before any test
module imports numpy or torch, and only in xdist workers, so a one-process run (``-n 0``) is untouched.
"""

import os

if "PYTEST_XDIST_WORKER" in os.environ:
    for _name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        os.environ.setdefault(_name, "1")

# A command still working after a few seconds says so on stderr (metadp.heartbeat); on a loaded test machine that
# would add lines to outputs the tests compare. Off for the suite (inherited by the CLI subprocesses it starts),
# except in tests/test_heartbeat.py, which sets it for the commands it runs.
os.environ["METADP_HEARTBEAT_SECONDS"] = "0"

import mpmath  # noqa: E402
import pytest  # noqa: E402

from oracles import stored as _stored_oracle_values  # noqa: E402  (after the thread settings above)


def pytest_sessionfinish(session, exitstatus):
    """Stored oracle values: add this run's new ones, or list the ones it checked (tests/oracles/stored.py)."""
    _stored_oracle_values.finish()


@pytest.fixture(autouse=True)
def _mpmath_precision_unchanged():
    """A test that changes mpmath's global precision changes every later test in its process: the
    stored oracle values are keyed by the working precision (they are then computed afresh, slowly),
    and oracles become order-dependent. Use ``mpmath.workdps`` (a context manager or decorator)."""
    before = mpmath.mp.prec
    yield
    after = mpmath.mp.prec
    if after != before:
        mpmath.mp.prec = before
        pytest.fail(f"the test changed mpmath's global precision from {before} to {after} bits and left it "
                    f"so; use mpmath.workdps(...) instead", pytrace=False)
