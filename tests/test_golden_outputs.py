"""What metadp prints is unchanged by restructuring (issue 15): ``tests/golden/record.py`` recorded
every plan's epsilons and a fixed-seed short training run of every algorithm before the change; this
recomputes them.

Tolerances: a certified PLD bound is refined until its interval is within 0.5% (or a time budget runs
out, which on a slow machine leaves it a little looser), so plan epsilons are compared to 0.5%
relative; the lower bound may only move within the same interval. Training on the CPU with a fixed seed
is deterministic up to float32 summation order: losses and scores to 1e-5 relative, epsilons to 0.5%.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent / "golden"
spec = importlib.util.spec_from_file_location("golden_record", HERE / "record.py")
golden = importlib.util.module_from_spec(spec)
sys.modules[spec.name] = golden
spec.loader.exec_module(golden)
RECORDED = json.loads((HERE / "outputs.json").read_text())


def _close(new, old, rel):
    if old is None or new is None:
        return new is None and old is None
    return abs(new - old) <= rel * abs(old) + 1e-12


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.slow) if n in golden.SLOW_PLANS else n
                                  for n in golden.PLANS])
def test_plan_epsilons_are_unchanged(name):
    new, old = golden.plan_numbers(name), RECORDED["plans"][name]
    assert _close(new["epsilon"], old["epsilon"], 5e-3), (new, old)
    assert _close(new["epsilon_lower"], old["epsilon_lower"], 5e-3), (new, old)
    assert set(new["other_units"]) == set(old["other_units"])
    for unit, eps in old["other_units"].items():
        assert _close(new["other_units"][unit], eps, 5e-3), (unit, new, old)


@pytest.mark.slow
@pytest.mark.parametrize("algorithm", golden.ALGORITHMS)
def test_training_runs_are_unchanged(algorithm):
    pytest.importorskip("torch")
    new, old = golden.train_numbers(algorithm), RECORDED["training"][algorithm]
    assert set(new["views"]) == set(old["views"])
    for view, eps in old["views"].items():
        assert _close(new["views"][view], eps, 5e-3), (view, new, old)
    assert len(new["losses"]) == len(old["losses"])
    assert all(_close(a, b, 1e-5) for a, b in zip(new["losses"], old["losses"])), (new, old)
    assert _close(new["evaluation"], old["evaluation"], 1e-5), (new, old)
