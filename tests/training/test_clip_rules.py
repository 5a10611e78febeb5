"""The clip-policy registry (issue 29): each policy's rule says what its threshold moves with, and no code
outside ``metadp.training.algorithms.clipping`` decides anything by comparing a policy's name."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import metadp
from metadp.training.algorithms.clipping import POLICIES, RULES, ClipPolicy, clip_rule

PACKAGE = Path(metadp.__file__).resolve().parent


def test_each_rule_states_what_the_accounting_must_hold():
    # the module docstring's four policies: fixed never moves; noisy-window is post-processing of released sums;
    # quantile releases an accounted noisy count; raw-percentile reads raw norms and is not private
    assert POLICIES == ("fixed", "noisy-window", "quantile", "raw-percentile")
    assert not RULES["fixed"].adapts and RULES["fixed"].private
    assert RULES["noisy-window"].from_released and not RULES["noisy-window"].releases_count
    assert RULES["quantile"].releases_count and not RULES["quantile"].from_released and RULES["quantile"].private
    assert RULES["raw-percentile"].reads_raw_norms and not RULES["raw-percentile"].private
    assert all(r.adapts == (r.from_released or r.releases_count or r.reads_raw_norms) for r in RULES.values())


@pytest.mark.parametrize("bad", ["adaptive", "", None, 3])
def test_an_unknown_policy_is_refused_with_the_list(bad):
    with pytest.raises(ValueError, match="fixed, noisy-window, quantile, raw-percentile"):
        clip_rule(bad)
    with pytest.raises(ValueError, match="clip policy must be one of"):
        ClipPolicy(bad)


def test_only_the_rule_moves_the_threshold():
    moved = {}
    for name in POLICIES:
        policy = ClipPolicy(name, 10.0, window=2, percentile=50.0, count_noise=1.0 if name == "quantile" else None)
        for _ in range(2):
            policy.after_release(1.0)
            policy.after_count(-5.0, 10.0)  # every task clipped: quantile raises C
            policy.after_raw_norms([2.0])
        moved[name] = policy.threshold
    assert moved["fixed"] == 10.0 and moved["noisy-window"] == 1.0 and moved["raw-percentile"] == 2.0
    assert moved["quantile"] > 10.0


def _policy_name_tests(tree: ast.AST):
    """Comparisons of something with a policy's name (``x == "quantile"``, ``x != "fixed"``, ``x in (...)``)."""
    for node in ast.walk(tree):
        if not isinstance(node, ast.Compare):
            continue
        names = [c.value for c in [node.left, *node.comparators] if isinstance(c, ast.Constant)]
        names += [e.value for c in node.comparators if isinstance(c, (ast.Tuple, ast.List, ast.Set))
                  for e in c.elts if isinstance(e, ast.Constant)]
        said = ast.unparse(node)
        if any(n in POLICIES and n != "fixed" for n in names) or ("policy" in said and "fixed" in names):
            yield node.lineno, said


def test_the_name_check_can_fail():
    tree = ast.parse('if c.clip_policy == "quantile": pass\nif policy != "fixed": pass\nif s == "poisson": pass\n')
    assert [line for line, _ in _policy_name_tests(tree)] == [1, 2]


def test_no_caller_compares_a_policy_name():
    found = []
    for path in sorted((PACKAGE / "training").rglob("*.py")):
        if path.name == "clipping.py":
            continue
        found += [(path.name, line, said) for line, said in _policy_name_tests(ast.parse(path.read_text()))]
    assert not found, f"ask the policy's rule (metadp.training.algorithms.clipping.clip_rule) instead: {found}"
