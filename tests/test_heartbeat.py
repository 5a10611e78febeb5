"""A command still working says so (metadp.heartbeat; issue 28, class 4: silence)."""

from __future__ import annotations

import io
import os
import subprocess
import sys
import time

from metadp.heartbeat import Heartbeat, heartbeat_after


def test_a_block_that_outlasts_the_wait_prints_status_lines():
    out = io.StringIO()
    with Heartbeat("certifying the plan", after=0.05, every=0.05, file=out) as beat:
        time.sleep(0.4)
    lines = out.getvalue().splitlines()
    assert beat.lines == len(lines) >= 2
    assert all(line.startswith("metadp: still working (certifying the plan; ") and line.endswith(" s so far) ...")
               for line in lines)


def test_a_quick_block_prints_nothing():
    out = io.StringIO()
    with Heartbeat("x", after=5.0, file=out):
        pass
    assert out.getvalue() == ""


def test_nothing_while_a_visible_bar_shows_progress():
    from tqdm import tqdm

    out = io.StringIO()
    with Heartbeat("x", after=0.05, every=0.05, file=out):
        bar = tqdm(total=3, file=io.StringIO(), disable=False)
        time.sleep(0.3)
        bar.close()
    assert out.getvalue() == ""


def test_the_setting(monkeypatch):
    for text, expected in (("", 3.0), ("1.5", 1.5), ("0", 0.0), ("-1", 0.0), ("nan", 0.0), ("junk", 3.0)):
        monkeypatch.setenv("METADP_HEARTBEAT_SECONDS", text)
        assert heartbeat_after() == expected
    monkeypatch.setenv("METADP_HEARTBEAT_SECONDS", "0")
    out = io.StringIO()
    with Heartbeat("x", file=out):  # off
        time.sleep(0.1)
    assert out.getvalue() == ""


def test_a_slow_command_speaks_within_its_first_second():
    # 10^9 Poisson steps at delta 1e-300: several seconds of certifying (measured 6-25 s before the heartbeat;
    # the first line must come long before the command ends)
    env = dict(os.environ, METADP_HEARTBEAT_SECONDS="0.5")
    start = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-m", "metadp", "calibrate", "--target-epsilon", "1", "--delta", "1e-12",
                             "--sampling", "poisson", "--rate", "0.01", "--steps", "1000000"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    first = proc.stderr.readline()
    waited = time.monotonic() - start
    proc.kill()
    proc.communicate()
    assert first.startswith("metadp: still working (calibrating"), first
    assert waited < 30
