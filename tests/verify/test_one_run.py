"""The one-run guessing game's bound (Steinke, Nasr & Jagielski 2023, arXiv:2305.08846) against a
brute-force oracle: exact binomial sums in rational arithmetic (mpmath at 50 digits for e^eps)."""

from __future__ import annotations

import math
from fractions import Fraction

import mpmath
import numpy as np
import pytest

from metadp.verify.one_run import epsilon_lower_bound, guess_and_bound, guess_grid, p_value, simulated_power


def _oracle_p_value(m, r, v, eps, delta):
    """f(v) + 2 m delta max_i (f(v - i) - f(v)) / i, f(v) = P[Bin(r, p) >= v], p = e^eps / (1 + e^eps):
    every binomial term summed one by one at 50 digits."""
    with mpmath.workdps(50):
        p = mpmath.e**eps / (1 + mpmath.e**eps)
        pmf = [mpmath.binomial(r, j) * p**j * (1 - p) ** (r - j) for j in range(r + 1)]
        f = lambda u: mpmath.fsum(pmf[max(u, 0):])  # noqa: E731  P[Bin >= u]
        alpha = max((f(v - i) - f(v)) / i for i in range(1, m + 1)) if v > 0 else 0
        return float(min(1, f(v) + 2 * m * delta * alpha)) if v > 0 else 1.0


@pytest.mark.parametrize("m,r,v,eps,delta", [
    (10, 10, 10, 0.0, 0.0), (10, 10, 9, 1.0, 0.0), (50, 20, 17, 0.7, 1e-3), (100, 40, 40, 2.5, 1e-5),
    (30, 30, 0, 1.0, 1e-2), (200, 60, 45, 0.3, 1e-4), (7, 5, 3, 5.0, 0.05)])
def test_p_value_matches_brute_force(m, r, v, eps, delta):
    assert p_value(m, r, v, eps, delta) == pytest.approx(_oracle_p_value(m, r, v, eps, delta), rel=1e-9, abs=1e-300)


def test_pure_dp_all_correct_closed_form():
    # delta = 0, v = r: P[W >= r] = p^r, so the bound solves p^r = beta: eps = log(b / (1 - b)), b = beta^(1/r)
    r, beta = 40, 0.05
    b = beta ** (1 / r)
    assert epsilon_lower_bound(40, r, r, beta) == pytest.approx(math.log(b / (1 - b)), abs=2e-6)
    assert epsilon_lower_bound(40, r, r, beta) <= math.log(b / (1 - b))  # rounded down


def test_lower_bound_is_rejected_and_just_above_is_not():
    m, r, v, beta, delta = 100, 50, 44, 0.05, 1e-5
    eps = epsilon_lower_bound(m, r, v, beta, delta)
    assert eps > 0
    assert p_value(m, r, v, eps, delta) < beta <= p_value(m, r, v, eps + 1e-5, delta)


def test_chance_level_gives_zero():
    assert epsilon_lower_bound(100, 50, 25, 0.05) == 0.0


def test_exact_rational_oracle_small_case():
    # eps = log 3 (p = 3/4), r = 4, v = 3, delta = 1/100, m = 5: exact fractions
    p = Fraction(3, 4)
    pmf = [math.comb(4, j) * p**j * (1 - p) ** (4 - j) for j in range(5)]
    f = lambda u: sum(pmf[max(u, 0):], Fraction(0))  # noqa: E731
    alpha = max((f(3 - i) - f(3)) / i for i in range(1, 6))
    exact = f(3) + 2 * 5 * Fraction(1, 100) * alpha
    assert p_value(5, 4, 3, math.log(3), 0.01) == pytest.approx(float(exact), rel=1e-12)


def test_guesses_and_bonferroni():
    rng = np.random.default_rng(1)
    included = rng.random(200) < 0.5
    perfect = np.where(included, 1.0, -1.0) + 0.01 * rng.standard_normal(200)
    results, tests = guess_and_bound({"s": perfect}, included, beta=0.05, delta=0.0, claimed_epsilon=1.0)
    assert tests == len(guess_grid(200))
    best = results[0]
    assert best.correct == best.guesses == 200  # k = 100 each way, all correct
    b = (0.05 / tests) ** (1 / 200)
    assert best.epsilon_lower == pytest.approx(math.log(b / (1 - b)), abs=1e-5)
    noise, _ = guess_and_bound({"s": rng.standard_normal(200)}, included, beta=0.05, delta=0.0)
    assert noise[0].epsilon_lower < 0.5


def test_bad_counts_refused():
    with pytest.raises(ValueError, match="v <= r <= m"):
        p_value(10, 11, 3, 1.0)
    with pytest.raises(ValueError, match="beta"):
        epsilon_lower_bound(10, 10, 10, 1.5)


def test_simulated_power_extremes():
    sep = simulated_power(lambda n, r: 10 + r.standard_normal(n), lambda n, r: r.standard_normal(n), 200, 1.0,
                          beta=0.05, delta=0.0, runs=20)
    none = simulated_power(lambda n, r: r.standard_normal(n), lambda n, r: r.standard_normal(n), 200, 1.0,
                           beta=0.05, delta=0.0, runs=20)
    assert sep == 1.0 and none == 0.0
