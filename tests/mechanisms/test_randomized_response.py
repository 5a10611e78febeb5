"""RandomizedResponsePair (metadp.mechanisms.randomized_response) against 30-digit mpmath sums.

The pair is two Bernoulli laws, so the reference "quadrature" is exact: the hockey-stick
divergence sum_x (p(x) - e^eps q(x))_+ over the two outputs, the loss CDFs as sums of the atoms
at -+eps0, and the Renyi divergence log(p^a r^(1-a) + r^a p^(1-a)) / (a - 1), r = 1 - p.
Tolerance 1e-10 relative, plus, next to eps = eps0, one ulp of eps0: the pair holds eps0 rounded
to a double and delta(eps) ~ p (eps0 - eps) there.
"""

from __future__ import annotations

import math

import mpmath
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from metadp.mechanisms import RandomizedResponsePair, randomized_response, randomized_response_pairs
from metadp.mechanisms.base import DominatingPair
from oracles.mp_reference import DPS, MpRandomizedResponse, rel_error

RTOL = 1e-10
PROBABILITIES = [0.5, 0.5 + 2.0**-40, 0.51, 0.75, 0.9, 1 - 2.0**-30]
EPSILONS = [1e-8, 0.5, 3.0, 30.0, 100.0]


def _cases():
    for p in PROBABILITIES:
        yield pytest.param(RandomizedResponsePair(p), MpRandomizedResponse(p=p), id=f"p={p!r}")
    for e in EPSILONS:
        yield pytest.param(RandomizedResponsePair.from_epsilon(e), MpRandomizedResponse(epsilon0=e), id=f"eps0={e!r}")


def _assert_close(fast: float, ref, label: str, atol: float = 0.0):
    if ref < mpmath.mpf("1e-300"):
        assert abs(fast) <= max(1e-290, atol), f"{label}: fast {fast!r}, reference {mpmath.nstr(ref, 5)}"
        return
    err = abs(mpmath.mpf(fast) - ref)
    assert err <= RTOL * ref + atol, (f"{label}: fast {fast!r}, reference {mpmath.nstr(ref, 20)}, "
                                      f"rel. error {rel_error(fast, ref):.2e}")


@pytest.mark.parametrize("pair,ref", list(_cases()))
def test_profile_matches_reference(pair, ref):
    e0 = pair.epsilon0
    grid = [-2 * e0 - 1, -e0 * (1 + 1e-9), -e0, -e0 * (1 - 1e-9), -0.5 * e0, 0.0, 0.5 * e0,
            e0 * (1 - 1e-9), e0, e0 * (1 + 1e-9), 2 * e0 + 1]
    for eps in grid:
        slack = float(np.spacing(e0)) if abs(abs(eps) - e0) <= 1e-8 * e0 else 0.0
        _assert_close(float(pair.profile(eps)), ref.hockey_stick(eps), f"eps={eps!r}", slack)


def _positions(e0):
    """Levels relative to the atoms: below -e0, at -e0, between, at +e0, above."""
    return {"below": -e0 - 1.0, "at-": -e0, "between": 0.0 if e0 > 0 else None, "at+": e0, "above": e0 + 1.0}


@pytest.mark.parametrize("pair,ref", list(_cases()))
def test_loss_distribution_matches_reference(pair, ref):
    # Each law is evaluated at its own atoms (the pair's eps0 is the double nearest the exact one).
    fast_levels = _positions(pair.epsilon0)
    with mpmath.workdps(DPS):  # -e0 - 1 at 53 bits would round the reference's atom away
        ref_levels = _positions(ref.e0)
    for where, level in fast_levels.items():
        if level is None:
            continue
        for under in "PQ":
            for kind in ("loss_cdf", "loss_sf"):
                fast = float(getattr(pair, kind)(level, under))
                exact = getattr(ref, kind)(ref_levels[where], under)
                _assert_close(fast, exact, f"{kind}({where}, {under})")


@pytest.mark.parametrize("pair,ref", list(_cases()))
def test_atoms_and_tilting(pair, ref):
    e0 = pair.epsilon0
    for under in "PQ":
        levels = np.array([-np.inf, np.nextafter(-e0, -np.inf), -e0, np.nextafter(e0, -np.inf), e0, np.inf])
        cdf, sf = pair.loss_cdf(levels, under), pair.loss_sf(levels, under)
        np.testing.assert_allclose(cdf + sf, 1.0, rtol=0, atol=2 * np.finfo(float).eps)
        assert cdf[0] == 0 and cdf[1] == 0 and cdf[-1] == 1 and cdf[-2] == 1
    # E_P[e^-L] = 1 from the atoms of the P-law (jumps of loss_cdf), exact to rounding.
    below = float(pair.loss_cdf(-e0, "P") - pair.loss_cdf(np.nextafter(-e0, -np.inf), "P"))
    above = float(pair.loss_sf(np.nextafter(e0, -np.inf), "P") - pair.loss_sf(e0, "P"))
    if e0 == 0:
        assert below == 1 and above == 1  # one atom at 0 (seen from both sides)
        return
    with mpmath.workdps(DPS):
        tilted = mpmath.mpf(above) * mpmath.exp(-e0) + mpmath.mpf(below) * mpmath.exp(e0)
        assert abs(tilted - 1) <= 1e-13, tilted


@pytest.mark.parametrize("pair,ref", list(_cases()))
def test_rdp_matches_reference(pair, ref):
    orders = [1.0001, 1.01, 1.5, 2.0, 10.0, 100.0, 1e4, 1e6, 1e300]
    for alpha, value in zip(orders, pair.rdp(orders)):
        _assert_close(float(value), ref.rdp(alpha), f"alpha={alpha}")
    assert pair.rdp([np.inf])[0] == pair.epsilon0
    values = pair.rdp(orders)
    assert np.all(np.diff(values) >= 0) and np.all(values <= pair.epsilon0)


@pytest.mark.parametrize("pair,ref", list(_cases())[1:])
def test_cell_masses(pair, ref):
    # The PLD accountant's discretisation: each atom lands whole in the cell (e_{i-1}, e_i] holding it.
    e0 = pair.epsilon0
    edges = np.array([-2 * e0, -0.5 * e0, 0.5 * e0, 2 * e0])
    for under in "PQ":
        cells, below, above = pair.cell_masses(edges, under)
        assert below == 0 and above == 0 and cells[1] == 0
        with mpmath.workdps(DPS):  # -e0 at 53 bits would round the reference's atom away
            low, high = ref.loss_cdf(-ref.e0, under), ref.loss_sf(0, under)
        _assert_close(float(cells[0]), low, f"cell of -eps0 under {under}")
        _assert_close(float(cells[2]), high, f"cell of +eps0 under {under}")


def test_eps0_and_probability_parametrisations_agree():
    a = RandomizedResponsePair(0.75)
    b = RandomizedResponsePair.from_epsilon(math.log(3.0))
    assert a.epsilon0 == pytest.approx(math.log(3.0), rel=1e-15)
    assert b.truth_probability == pytest.approx(0.75, rel=1e-15)
    eps = np.linspace(-3, 3, 61)
    np.testing.assert_allclose(a.profile(eps), b.profile(eps), rtol=1e-14, atol=1e-16)
    (c,) = randomized_response_pairs(epsilon0=math.log(3.0))
    (d,) = randomized_response_pairs(0.75)
    assert c.truth_probability == b.truth_probability and d.truth_probability == 0.75
    # delta(0) = 2p - 1 (total variation) = 0.5; delta(eps0) = 0.
    assert a.profile(0.0) == pytest.approx(0.5, rel=1e-15) and a.profile(a.epsilon0) == 0.0


def test_trivial_mechanism():
    pair = RandomizedResponsePair(0.5)
    assert pair.epsilon0 == 0.0
    assert pair.profile(0.0) == 0.0 and pair.profile(-1.0) == pytest.approx(-math.expm1(-1.0))
    np.testing.assert_array_equal(pair.rdp([2.0, 100.0, np.inf]), 0.0)
    assert pair.loss_cdf(0.0) == 1 and pair.loss_cdf(-1e-300) == 0
    assert pair.loss_range(0.0) == (0.0, 0.0)


# Family-wise level 1e-3 over this module's goodness-of-fit tests (Bonferroni over 4 pairs x 2 laws
# for the sampler and 2 calls of the mechanism); the seeds are fixed.
_LEVEL = 1e-3 / 10


@pytest.mark.parametrize("p", [0.5, 0.6, 0.9, 1 - 1e-4])
def test_sampler_goodness_of_fit(p):
    pair = RandomizedResponsePair(p)
    rng = np.random.default_rng(int(p * 1e6))
    for under, one in (("P", p), ("Q", 1 - p)):
        x = pair.sample(50_000, rng, under)
        assert set(np.unique(x)) <= {0.0, 1.0}
        assert stats.binomtest(int(x.sum()), len(x), one).pvalue > _LEVEL, (p, under)
        losses = pair.log_ratio(x)
        assert set(np.unique(losses)) <= {-pair.epsilon0, pair.epsilon0}


def test_randomized_response_mechanism():
    rng = np.random.default_rng(11)
    bits = np.tile(np.array([[0, 1], [1, 1]]), (20_000, 1))  # (40000, 2)
    out = randomized_response(bits, 0.8, rng)
    assert out.shape == bits.shape and out.dtype == np.int64
    flips = out != bits
    for column in range(2):
        assert stats.binomtest(int(flips[:, column].sum()), flips.shape[0], 0.2).pvalue > _LEVEL
    with pytest.raises(ValueError, match="bits"):
        randomized_response([0, 2], 0.8, rng)
    with pytest.raises(ValueError, match="truth_probability"):
        randomized_response([0, 1], 0.3, rng)


@settings(max_examples=80, deadline=None)
@given(st.floats(0.5, 1 - 1e-12), st.floats(-40.0, 40.0))
def test_profile_agrees_with_its_loss_distribution(p, eps):
    # The closed form against the base class's Pr_P[L > eps] - e^eps Pr_Q[L > eps], within the
    # latter's cancellation (a few ulps of its larger term).
    pair = RandomizedResponsePair(p)
    generic = float(DominatingPair.profile(pair, eps))
    closed = float(pair.profile(eps))
    big = float(pair.loss_sf(eps, "P")) + math.exp(eps) * float(pair.loss_sf(eps, "Q"))
    assert abs(generic - closed) <= 8 * np.finfo(float).eps * big + 1e-300


@settings(max_examples=80, deadline=None)
@given(st.floats(0.0, 50.0), st.floats(0.0, 50.0), st.floats(-10.0, 60.0))
def test_larger_eps0_never_decreases_delta(e1, e2, eps):
    lo, hi = sorted((e1, e2))
    assert RandomizedResponsePair.from_epsilon(lo).profile(eps) <= RandomizedResponsePair.from_epsilon(hi).profile(eps)


@pytest.mark.parametrize("bad", [0.49, 1.0, 1.5, -0.1, math.nan, math.inf, True])
def test_invalid_truth_probability(bad):
    with pytest.raises(ValueError, match="truth_probability"):
        RandomizedResponsePair(bad)


@pytest.mark.parametrize("bad", [-1e-9, math.inf, math.nan])
def test_invalid_epsilon0(bad):
    with pytest.raises(ValueError, match="epsilon0"):
        RandomizedResponsePair.from_epsilon(bad)


def test_invalid_arguments():
    with pytest.raises(ValueError, match="exactly one"):
        randomized_response_pairs()
    with pytest.raises(ValueError, match="exactly one"):
        randomized_response_pairs(0.7, epsilon0=1.0)
    pair = RandomizedResponsePair(0.7)
    with pytest.raises(ValueError, match="0 or 1"):
        pair.log_ratio([0.5])
    with pytest.raises(ValueError, match="under"):
        pair.loss_sf(0.0, "X")
