"""The revealed-count bound for Poisson-subsampled Gaussian steps (issue 28, class 7).

Issue 18's proven-round-off PLD lattice (commit 4a94c8b) cannot hold losses of 5e11 a step (noise 1e-6) to its
proven precision and fell back to RDP: `metadp epsilon --sampling poisson --rate 0.01 --noise 1e-6 --steps
1000 --delta 1e-5` printed 5.001e+14 where it printed 1.302e+13 on 2026-11-25, 38x looser. The revealed-count
bound (the steps that sampled the unit revealed, a binomial mixture of Gaussian profiles) is proven and gives
1.301e13 there; the old number, from an unproven round-off allowance, agrees with it."""

from __future__ import annotations

import math

import mpmath
import pytest
from scipy import stats

from metadp.accounting._revealed_count import revealed_count_epsilon
from metadp.accounting.pld import PldAccountant
from metadp.core.events import Gaussian, PoissonSampled, SelfComposed


def _oracle_delta(q, z, steps, eps):
    """The revealed-count profile at eps, summed at 50 digits over every count with mass above 1e-40."""
    with mpmath.workdps(50):
        total = mpmath.mpf(0)
        for k in range(1, steps + 1):
            pmf = mpmath.binomial(steps, k) * mpmath.mpf(q) ** k * (1 - mpmath.mpf(q)) ** (steps - k)
            if pmf < mpmath.mpf(10) ** -40 and k > steps * q:
                break
            mu = mpmath.sqrt(k) / z
            total += pmf * (mpmath.ncdf(mu / 2 - eps / mu) - mpmath.exp(eps) * mpmath.ncdf(-mu / 2 - eps / mu))
        return float(total)


@pytest.mark.parametrize("q, z, steps, delta", [(0.01, 1e-6, 1000, 1e-5), (0.2, 0.5, 30, 1e-6), (0.05, 2.0, 100, 1e-3)])
def test_revealed_count_against_the_mpmath_profile(q, z, steps, delta):
    eps = revealed_count_epsilon(q, z, steps, delta)
    assert _oracle_delta(q, z, steps, eps) <= delta  # an upper bound on the revealed pair's epsilon ...
    assert _oracle_delta(q, z, steps, eps * (1 - 1e-6)) > delta * 0.999  # ... and nearly the exact one


def test_the_regression_plan_is_restored():
    bounds = PldAccountant().compose(SelfComposed(PoissonSampled(0.01, Gaussian(1e-6)), 1000)).get_epsilon_bounds(1e-5)
    assert bounds.epsilon_upper < 1.31e13  # was 5.001e14 (RDP), 1.302e13 on 2026-11-25
    assert "revealed-count bound" in bounds.notes[-1] or "revealed-count bound" in " ".join(bounds.notes)
    # the K-fold Gaussians at the binomial's 1e-5 quantile: epsilon at least that count's mean loss
    k = stats.binom.isf(1e-5, 1000, 0.01)
    assert bounds.epsilon_upper >= 0.9 * k / (2 * 1e-12)


def test_it_never_replaces_a_tighter_lattice_bound():
    bounds = PldAccountant().compose(SelfComposed(PoissonSampled(0.004, Gaussian(1.0)), 250)).get_epsilon_bounds(1e-6)
    assert bounds.epsilon_upper == pytest.approx(0.4983, abs=1e-4)  # the README's plan, untouched
    assert revealed_count_epsilon(0.004, 1.0, 250, 1e-6) > 10  # the revealed bound is far looser there


def test_degenerate_rates():
    assert revealed_count_epsilon(0.0, 1e-6, 1000, 1e-5) == 0.0
    assert revealed_count_epsilon(1e-9, 1e-6, 10, 1e-5) == 0.0  # Pr[K >= 1] = 1e-8 < delta
    assert math.isfinite(revealed_count_epsilon(1.0, 1.0, 10, 1e-5))
