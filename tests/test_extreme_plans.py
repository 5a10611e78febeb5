"""Issue 28, classes 2, 3, 4 and 6c: every sampling scheme's bound survives the extremes of its parameters,
deeply nested inputs are refused in one line, and absurd calibration targets are answered or refused.

The full sweep (about 150 plans, some of them tens of seconds at 2^53 steps) runs with the slow sweeps; the
default suite keeps the one-pass cases that used to raise (``_DEFAULT``).

Each case runs the command in-process (tests/clirun.py) and asks: exit 0 with a finite epsilon or an infinite one
said in words, or exit 2 with one line; never a traceback, a numpy/Python warning or NaN."""

from __future__ import annotations

import copy
import time

import pytest

from clirun import metadp

_HIER = [{"name": "class", "draw": "fixed", "size": 5, "units": 1150},
         {"name": "drawing", "draw": "fixed", "size": 2, "units": 20}]
BASE = {
    "poisson": {"sampling": {"scheme": "poisson", "population": 400000, "batch_size": 1600}},
    "poisson_rate": {"sampling": {"scheme": "poisson", "rate": 0.004}},
    "fixed": {"sampling": {"scheme": "fixed", "population": 400000, "batch_size": 1600}, "relation": "substitute"},
    "none": {"sampling": {"scheme": "none", "population": 80}},
    "shuffle": {"sampling": {"scheme": "shuffle", "population": 400000, "batch_size": 1600}},
    "balls_in_bins": {"sampling": {"scheme": "balls_in_bins", "population": 400000, "batch_size": 1600}},
    "episodic": {"sampling": {"scheme": "episodic", "episodes": 1600}, "unit": "record", "hierarchy": _HIER},
    "poisson_hierarchy": {"sampling": {"scheme": "poisson", "population": 400000, "batch_size": 1600},
                          "hierarchy": _HIER},
    "group": {"sampling": {"scheme": "poisson", "rate": 0.004}, "unit": "group", "group_size": 5},
    "laplace": {"sampling": {"scheme": "poisson", "rate": 0.004}, "noise": {"mechanism": "laplace", "scale": 1.0}},
}


def _plan(scheme, **changes):
    d = {"unit": "task", "delta": 1e-6, "steps": 250, "noise": {"mechanism": "gaussian", "multiplier": 1.0}}
    d.update(copy.deepcopy(BASE[scheme]))
    for key, value in changes.items():
        table, _, field = key.rpartition(".")
        (d[table] if table else d)[field] = value
    return d


def _toml(d) -> str:
    def val(v):
        return f'"{v}"' if isinstance(v, str) else repr(v)
    lines = [f"{k} = {val(v)}" for k, v in d.items() if not isinstance(v, (dict, list))]
    for k, v in d.items():
        if isinstance(v, dict):
            lines += [f"[{k}]"] + [f"{a} = {val(b)}" for a, b in v.items()]
    for k, v in d.items():
        if isinstance(v, list):
            for t in v:
                lines += [f"[[{k}]]"] + [f"{a} = {val(b)}" for a, b in t.items()]
    return "\n".join(lines) + "\n"


def _noise_key(scheme):
    return "noise.scale" if scheme == "laplace" else "noise.multiplier"


def _cases():
    for scheme in BASE:
        for z in (1e-300, 1e-50, 0.01, 0.1, 1e300):
            yield scheme, {_noise_key(scheme): z}
        for steps in (1, 10**7, 2**53):
            yield scheme, {"steps": steps}
        for delta in (1e-300, 0.999999):
            yield scheme, {"delta": delta}
        sampling = BASE[scheme]["sampling"]
        if "batch_size" in sampling:
            for population, batch in ((10**12, 1), (10**12, 4 * 10**9), (10**18, 1), (1, 1)):
                yield scheme, {"sampling.population": population, "sampling.batch_size": batch}
        if "rate" in sampling:
            for rate in (0.0, 1e-300, 1.0):
                yield scheme, {"sampling.rate": rate}
    for episodes in (1, 2**53):
        yield "episodic", {"sampling.episodes": episodes}
    for group in (2, 2**53):
        yield "group", {"group_size": group}


_SLOW = {("balls_in_bins", "steps", 2**53), ("balls_in_bins", "steps", 10**7), ("episodic", "steps", 2**53)}


# left open (not the one-pass schemes): arrays sized by the count in the episodic/fixed-size/group pairs
# the cases that raised on main (OverflowError, NaN to int, warnings), kept in the default suite
_DEFAULT = {("balls_in_bins", "noise.multiplier", 0.01), ("balls_in_bins", "noise.multiplier", 0.1),
            ("balls_in_bins", "noise.multiplier", 1e300), ("shuffle", "noise.multiplier", 1e-300),
            ("balls_in_bins", "sampling.population", 10**12), ("fixed", "noise.multiplier", 1e-50)}


def _params():
    for scheme, change in _cases():
        key, value = next(iter(change.items()))
        marks = [] if (scheme, key, value) in _DEFAULT else [pytest.mark.slow]
        yield pytest.param(scheme, change, id=f"{scheme}-{'-'.join(f'{k}={v:g}' for k, v in change.items())}",
                           marks=marks)


@pytest.mark.parametrize("scheme, change", list(_params()))
def test_plan_survives_extremes(tmp_path, scheme, change):
    d = _plan(scheme, **change)
    path = tmp_path / "plan.toml"
    path.write_text(_toml(d))
    start = time.perf_counter()
    r = metadp("plan", str(path))
    seconds = time.perf_counter() - start
    assert "Traceback" not in r.stderr and "Warning" not in r.stderr, r.stderr
    assert r.returncode in (0, 2), (r.returncode, r.stderr)
    if r.returncode == 2:
        assert len(r.stderr.strip().splitlines()) == 1, r.stderr
    else:
        headline = next(line for line in r.stdout.splitlines() if "epsilon" in line)
        assert "nan" not in headline.lower(), headline
    assert seconds < 90, seconds  # generous for a shared machine (2^53 steps: ~30 s under load); most take < 1 s


def test_balls_in_bins_tiny_noise_falls_back_to_a_certified_bound(tmp_path):
    # z = 0.01 overflowed (OverflowError: math range error); the pass's single Gaussian bounds it
    path = tmp_path / "plan.toml"
    path.write_text(_toml(_plan("balls_in_bins", **{"noise.multiplier": 0.01})))
    r = metadp("plan", str(path), "--json")
    assert r.returncode == 0 and not r.stderr, r.stderr
    import json
    epsilon = float(json.loads(r.stdout)["epsilon"])
    from metadp.amplification.one_pass import gaussian_epsilon
    # the pass's single Gaussian by RDP (5521.7), within 1% of its exact epsilon (5474.4), never the 709.78 the
    # overflowed profile gave
    assert gaussian_epsilon(0.01, 1e-6) <= epsilon <= gaussian_epsilon(0.01, 1e-6) * 1.01


def test_allocation_rdp_never_above_the_gaussian():
    import numpy as np
    from metadp.amplification.allocation_bounds import allocation_rdp
    orders = np.arange(2, 10, dtype=float)
    for z in (1e-300, 0.01, 0.3, 1.0, 1e6, 1e300):
        for rdp in allocation_rdp(z, 250, 1, orders):
            with np.errstate(over="ignore"):  # z^2 of 1e300 overflows: the bound is then 0
                gaussian = orders / (2 * z) / z
            assert np.all(rdp <= gaussian * (1 + 1e-12) + 1e-300) or z < 1e-150


def _dp_event_chain(kind: str, depth: int) -> str:
    head = '"module_name": "dp_accounting.dp_event"'
    inner = '{%s, "class_name": "GaussianDpEvent", "noise_multiplier": 1.0}' % head
    if kind == "self":
        return ('{%s, "class_name": "SelfComposedDpEvent", "count": 1, "event": ' % head) * depth + inner + "}" * depth
    return ('{%s, "class_name": "ComposedDpEvent", "events": [' % head) * depth + inner + "]}" * depth


@pytest.mark.parametrize("kind", ["self", "composed"])
@pytest.mark.parametrize("command", [("plan", "--dp-event"), ("verify", "--crosscheck")])
def test_deep_dp_event_refused_in_one_line(tmp_path, kind, command):
    path = tmp_path / "deep.json"
    path.write_text(_dp_event_chain(kind, 3000))
    r = metadp(*command, str(path), "--delta", "1e-5")
    assert r.returncode == 2, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and "too deeply" in r.stderr, r.stderr


def test_deep_dp_event_dict_refused_by_the_library():
    from metadp.integrations.dp_accounting import from_dp_event
    d = {"module_name": "dp_accounting.dp_event", "class_name": "GaussianDpEvent", "noise_multiplier": 1.0}
    for _ in range(500):
        d = {"module_name": "dp_accounting.dp_event", "class_name": "SelfComposedDpEvent", "count": 1, "event": d}
    with pytest.raises(ValueError, match="more than 100 levels deep"):
        from_dp_event(d)


def test_deep_plan_refused_in_one_line(tmp_path):
    path = tmp_path / "deep.toml"
    path.write_text("a = " + "[" * 5000 + "]" * 5000 + "\n")
    r = metadp("plan", str(path))
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and "too deeply" in r.stderr, r.stderr
    from metadp.plan import Plan
    d = {}
    for _ in range(500):
        d = {"x": d}
    with pytest.raises(ValueError):  # an unknown key, named, before any recursion into it
        Plan.from_dict(d)


def test_crosscheck_of_a_file_neither_plan_nor_event():
    r = metadp("verify", "--crosscheck", "README.md")
    assert r.returncode == 2 and "is neither a plan" in r.stderr and "nor a dp-accounting event" in r.stderr, r.stderr


def test_huge_count_dp_event_has_no_warning(tmp_path):
    head = '"module_name": "dp_accounting.dp_event"'
    path = tmp_path / "big.json"
    path.write_text('{%s, "class_name": "SelfComposedDpEvent", "count": 1000000000000000, "event": '
                    '{%s, "class_name": "GaussianDpEvent", "noise_multiplier": 1.0}}' % (head, head))
    r = metadp("plan", "--dp-event", str(path), "--delta", "1e-5")
    assert r.returncode == 0 and "Warning" not in r.stderr and not r.stderr.strip(), r.stderr


_CALIBRATE = {"noise": ("--rate", "0.004", "--steps", "250"),
              "steps": ("--rate", "0.004", "--noise", "1", "--solve", "steps"),
              "rate": ("--noise", "1", "--steps", "250", "--solve", "rate")}


def _targets():
    for target in ("1e6", "1e-12", "1e300", "nan", "inf", "-1"):
        for solve in sorted(_CALIBRATE):
            if target == "1e-12" and solve in ("noise", "rate"):
                # still minutes (352 s and 136 s on 2 loaded cores): the PLD evaluations at noise ~1e10 are
                # slow since issue 18's proven round-off (issue 28 class 7b, open); not in CI's time budget
                continue
            # a certified answer at 1e6 or 1e-12 takes tens of seconds to minutes of PLD evaluations (a progress
            # bar shows them on a terminal): with the slow sweeps; the refusals are immediate
            slow = target in ("1e6", "1e-12") or (target == "1e300" and solve == "rate")
            yield pytest.param(solve, target, marks=[pytest.mark.slow] if slow else [], id=f"{target}-{solve}")


@pytest.mark.parametrize("solve, target", list(_targets()))
def test_calibrate_absurd_targets_are_quick(solve, target):
    start = time.perf_counter()
    r = metadp("calibrate", f"--target-epsilon={target}", "--delta", "1e-6", "--sampling", "poisson",
               *_CALIBRATE[solve])
    seconds = time.perf_counter() - start
    assert "Traceback" not in r.stderr and "Warning" not in r.stderr, r.stderr
    assert r.returncode in (0, 2)
    if r.returncode == 2:
        assert len(r.stderr.strip().splitlines()) == 1 and "target" in r.stderr, r.stderr
    assert seconds < (900 if target in ("1e6", "1e-12") else 15), seconds


def test_calibrate_steps_says_the_cap_is_not_reached():
    r = metadp("calibrate", "--target-epsilon", "1e300", "--delta", "1e-6", "--sampling", "poisson",
               "--rate", "0.004", "--noise", "1", "--solve", "steps")
    assert r.returncode == 2 and "is not reached within 9,007,199,254,740,992 steps" in r.stderr, r.stderr
