"""Deeply nested inputs are refused in one line naming the limit, never a RecursionError traceback; a file
that is neither a plan nor an event is said to be so (issue 28, class 3)."""

from __future__ import annotations

import json
import sys

import pytest

from clirun import metadp
from metadp.core.events import MAX_DEPTH, Composed, Gaussian, PoissonSampled, SelfComposed, nesting_depth
from metadp.integrations.dp_accounting import from_dp_event

GAUSSIAN = {"module_name": "dp_accounting.dp_event", "class_name": "GaussianDpEvent", "noise_multiplier": 1.1}


def _nested(kind: str, depth: int) -> dict:
    event = GAUSSIAN
    for _ in range(depth):
        if kind == "self":
            event = {"module_name": "dp_accounting.dp_event", "class_name": "SelfComposedDpEvent", "event": event,
                     "count": 1}
        elif kind == "composed":
            event = {"module_name": "dp_accounting.dp_event", "class_name": "ComposedDpEvent", "events": [event]}
        else:
            event = {"module_name": "dp_accounting.dp_event", "class_name": "PoissonSampledDpEvent",
                     "sampling_probability": 0.5, "event": event}
    return event


def _write_json(path, obj):
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 50_000))  # json.dumps recurses per level too
    try:
        path.write_text(json.dumps(obj))
    finally:
        sys.setrecursionlimit(limit)
    return path


def _one_line_refusal(result, *words):
    assert result.returncode == 2, (result.stdout[-500:], result.stderr[-2000:])
    assert "Traceback" not in result.stderr and "RecursionError" not in result.stderr
    lines = [x for x in result.stderr.splitlines() if x.strip()]
    assert len(lines) == 1, result.stderr
    for word in words:
        assert word in lines[0], lines[0]


@pytest.mark.parametrize("kind", ["self", "composed", "poisson"])
@pytest.mark.parametrize("depth", [150, 3000])
def test_deep_dp_event_is_refused_by_plan_and_crosscheck(tmp_path, kind, depth):
    path = _write_json(tmp_path / "deep.json", _nested(kind, depth))
    words = ("100 levels",) if depth == 150 else ("too deeply",)
    _one_line_refusal(metadp("plan", "--dp-event", path, "--delta", "1e-5"), *words)
    _one_line_refusal(metadp("verify", "--crosscheck", path, "--delta", "1e-5"), *words)


def test_an_event_at_the_limit_is_accepted():
    nested = _nested("poisson", MAX_DEPTH - 2)
    event = from_dp_event(nested)
    assert nesting_depth(event) == MAX_DEPTH - 1


def test_deep_json_arrays_are_refused(tmp_path):
    path = tmp_path / "raw.json"
    path.write_text("[" * 100_000 + "]" * 100_000)
    _one_line_refusal(metadp("plan", "--dp-event", path, "--delta", "1e-5"), "too deeply")


@pytest.mark.parametrize("text", ["name = " + "[" * 50_000 + "]" * 50_000 + "\n",
                                  "x = " + "{a = " * 5_000 + "1" + "}" * 5_000 + "\n"])
@pytest.mark.parametrize("command", [["plan"], ["verify", "--crosscheck"], ["cite"]])
def test_deeply_nested_plan_files_are_refused(tmp_path, text, command):
    path = tmp_path / "deep.toml"
    path.write_text(text)
    _one_line_refusal(metadp(*command, path), "too deeply")


def test_events_built_in_python_are_bounded():
    event = Gaussian(1.0)
    with pytest.raises(ValueError, match="100 or more levels"):
        for _ in range(MAX_DEPTH + 5):
            event = Composed((event,))
    wide = Composed(tuple(SelfComposed(PoissonSampled(0.1, Gaussian(1.0)), 3) for _ in range(5000)))  # wide is fine
    assert nesting_depth(wide) == 4


def test_crosscheck_of_a_markdown_file_says_it_is_neither(tmp_path):
    readme = tmp_path / "README.md"
    readme.write_text("# A project\n\nSome *markdown* text.\n\n```bash\npip install .\n```\n")
    _one_line_refusal(metadp("verify", "--crosscheck", readme), "neither a plan", "nor a dp-accounting event")


def test_crosscheck_of_json_without_the_json_suffix_says_how_to_read_it(tmp_path):
    path = _write_json(tmp_path / "event.txt", _nested("self", 1))
    _one_line_refusal(metadp("verify", "--crosscheck", path), "holds JSON", "*.json")


@pytest.mark.parametrize("line, word", [('references = [["dpmaml"]]', "references"),
                                         ('references = "dpmaml"', "references")])
def test_plan_references_of_the_wrong_type_are_refused(tmp_path, line, word):
    path = tmp_path / "plan.toml"
    path.write_text(f'name = "x"\nunit = "task"\ndelta = 1e-5\nsteps = 5\n{line}\n[sampling]\nscheme = "poisson"\n'
                    'rate = 0.1\n[noise]\nmechanism = "gaussian"\nmultiplier = 1.0\n')
    _one_line_refusal(metadp("plan", path), word)


def test_a_sampling_scheme_that_is_a_table_is_refused(tmp_path):
    path = tmp_path / "plan.toml"
    path.write_text('name = "x"\nunit = "task"\ndelta = 1e-5\nsteps = 5\n[sampling]\nscheme = {a = 1}\nrate = 0.1\n'
                    '[noise]\nmechanism = "gaussian"\nmultiplier = 1.0\n')
    _one_line_refusal(metadp("plan", path), "sampling.scheme")


def test_vanishing_count_noise_is_a_bound_not_an_overflow(tmp_path):
    from metadp.accounting.adaptive_clipping import combined_noise_multiplier
    assert combined_noise_multiplier(1.0, 1e-300) == pytest.approx(2e-300)  # the count's noise decides
    assert combined_noise_multiplier(1.0, 2.0) == pytest.approx((1 + 1 / 16) ** -0.5, rel=1e-15)
    path = tmp_path / "plan.toml"
    path.write_text('name = "x"\nunit = "task"\ndelta = 1e-5\nsteps = 5\n[sampling]\nscheme = "poisson"\nrate = 0.1\n'
                    '[noise]\nmechanism = "gaussian"\nmultiplier = 1.0\ncount_noise = 1e-300\n')
    result = metadp("plan", path)
    assert result.returncode == 0 and "Traceback" not in result.stderr and "epsilon   <= infinity" in result.stdout


@pytest.mark.parametrize("argv", [["gaussian", "--noise", "1e300"], ["gaussian", "--noise", "1", "--claim-noise", "1e-300"],
                                  ["laplace", "--scale", "1e-300"]])
def test_audits_refuse_noise_their_pairs_cannot_hold(argv):
    _one_line_refusal(metadp("verify", *argv, "--samples", "20000"), argv[-2], "float64")
