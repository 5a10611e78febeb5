"""The extreme plans of issue 3: each returns a valid bound (or a clear error) within 30 s and 4 GiB.

Each case runs in a child process whose address space is capped at 4 GiB (RLIMIT_AS), so a plan that
tried to allocate more would fail there instead of being reported as passing.
"""

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

CHILD = textwrap.dedent("""
    import json, resource, sys, time
    resource.setrlimit(resource.RLIMIT_AS, (4 << 30, 4 << 30))
    from metadp.accounting import Gaussian, PoissonSampled, RdpAccountant
    from metadp.accounting.pld import PldAccountant
    q, z, steps, delta = json.loads(sys.argv[1])
    event = Gaussian(z) if q == 1.0 else PoissonSampled(q, Gaussian(z))
    start = time.perf_counter()
    r = PldAccountant().compose(event, steps).get_epsilon_bounds(delta)
    rdp = RdpAccountant().compose(event, steps).get_epsilon(delta)
    print(json.dumps({"lower": r.epsilon_lower, "upper": r.epsilon_upper, "rdp": rdp, "notes": list(r.notes),
                      "seconds": time.perf_counter() - start,
                      "max_rss_gib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20}))
""")


@pytest.mark.parametrize("plan", [
    (0.5, 0.3, 10**5, 1e-6),      # noise 0.3, rate 0.5, 1e5 steps: huge epsilon, wide losses
    (1e-6, 1.0, 10**8, 1e-6),     # rate 1e-6 over 1e8 steps
    (0.01, 50.0, 1000, 1e-6),     # noise 50: tiny losses
    (0.004, 1.0, 250, 1e-15),     # delta 1e-15: below the untilted FFT's floating-point noise
], ids=["noise0.3-rate0.5-1e5", "rate1e-6-1e8", "noise50", "delta1e-15"])
def test_extreme_plan_returns_a_valid_bound_within_limits(plan):
    proc = subprocess.run([sys.executable, "-c", CHILD, json.dumps(plan)], capture_output=True, text=True,
                          timeout=60, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 0, proc.stderr[-2000:]
    r = json.loads(proc.stdout)
    assert r["seconds"] < 30.0
    assert r["max_rss_gib"] < 4.0
    assert 0.0 <= r["lower"] <= r["upper"] <= r["rdp"]  # a valid interval, never above the RDP bound
    if plan[3] == 1e-15:  # certified by the tilted FFT (it used to report the RDP bound)
        assert r["upper"] < r["rdp"] and not any("RDP bound is reported" in n for n in r["notes"])
