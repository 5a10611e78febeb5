"""RDP <-> (epsilon, delta) conversions against the formulas evaluated in mpmath.

References (as in metadp.core.conversions):
* CKS: Canonne, Kamath & Steinke 2020 (arXiv:2004.00010), Prop. 12:
  epsilon = r + log(1 - 1/a) - (log delta + log a)/(a - 1);
  delta = exp((a - 1)(r - epsilon) + (a - 1) log(1 - 1/a) - log a).
* classic: Mironov 2017 (arXiv:1702.07476), Prop. 3: epsilon = r + log(1/delta)/(a - 1),
  delta = exp((a - 1)(r - epsilon)).
* total variation: delta <= sqrt(1 - exp(-KL)) <= sqrt(1 - exp(-r)) (Bretagnolle & Huber 1979, with
  KL <= D_a), so (0, delta)-DP as soon as sqrt(1 - exp(-r)) <= delta.

Tolerances are forward-error bounds of the float64 formula: a few ulps times the sum of the
magnitudes of its terms (the result can be much smaller than the terms, e.g. at a = 1.01 where
|log delta|/(a - 1) is in the thousands).
"""

from __future__ import annotations

import math

import mpmath
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from metadp.core.conversions import (
    CONVERSIONS,
    delta_from_rdp,
    epsilon_from_rdp,
    epsilon_from_rdp_rows,
)

EPS_MACHINE = np.finfo(np.float64).eps
ORDERS = [1.01, 1.5, 2.0, 7.3, 64.0, 1000.0, 1e5]
DELTAS = [1e-12, 1e-6, 1e-2]


def mp_epsilon(r, a, delta, method):
    """The conversion's epsilon at one order, 50 digits (no clipping at 0, no TV bound)."""
    with mpmath.workdps(50):
        r, a, delta = mpmath.mpf(r), mpmath.mpf(a), mpmath.mpf(delta)
        if method == "cks":
            return r + mpmath.log(1 - 1 / a) - (mpmath.log(delta) + mpmath.log(a)) / (a - 1)
        return r + mpmath.log(1 / delta) / (a - 1)


def mp_log_delta(r, a, epsilon, method):
    with mpmath.workdps(50):
        r, a, epsilon = mpmath.mpf(r), mpmath.mpf(a), mpmath.mpf(epsilon)
        if method == "cks":
            return (a - 1) * (r - epsilon) + (a - 1) * mpmath.log(1 - 1 / a) - mpmath.log(a)
        return (a - 1) * (r - epsilon)


def mp_tv_delta(r):
    with mpmath.workdps(50):
        return mpmath.sqrt(-mpmath.expm1(-mpmath.mpf(r)))


def epsilon_error_bound(r, a, delta):
    # |r| + |log(1 - 1/a)| + (|log delta| + log a)/(a - 1): the terms the float formula adds.
    return 8 * EPS_MACHINE * (abs(r) + abs(math.log1p(-1 / a)) + (abs(math.log(delta)) + math.log(a)) / (a - 1))


# ---------------------------------------------------------------------------------------------
# Single orders against mpmath.


@pytest.mark.parametrize("method", CONVERSIONS)
@pytest.mark.parametrize("a", ORDERS)
@pytest.mark.parametrize("delta", DELTAS)
@pytest.mark.parametrize("r", [0.05, 1.0, 30.0])
def test_epsilon_matches_mpmath(method, a, delta, r):
    eps, order = epsilon_from_rdp([a], [r], delta, method)
    assert order == a
    reference = float(mp_epsilon(r, a, delta, method))
    assert reference > 0  # the cases are chosen away from the clipping at 0 and the TV bound
    assert abs(eps - reference) <= epsilon_error_bound(r, a, delta)


@pytest.mark.parametrize("method", CONVERSIONS)
@pytest.mark.parametrize("a", ORDERS)
@pytest.mark.parametrize("r,epsilon", [(0.05, 1.0), (1.0, 1.5), (1.0, 3.0), (30.0, 31.0)])
def test_delta_matches_mpmath(method, a, r, epsilon):
    delta, order = delta_from_rdp([a], [r], epsilon, method)
    log_ref = mp_log_delta(r, a, epsilon, method)
    tv_ref = mp_tv_delta(r)
    if log_ref >= mpmath.log(tv_ref):
        assert math.isnan(order)
        assert delta == pytest.approx(float(min(tv_ref, 1)), rel=1e-14)
        return
    assert order == a
    if log_ref < math.log(np.finfo(np.float64).tiny):
        assert delta == 0.0 or delta <= 1e-300
        return
    # Relative error of delta = absolute error of log delta, which multiplies (a - 1) into the terms.
    tol = 8 * EPS_MACHINE * ((a - 1) * (abs(r) + abs(epsilon) + 1) + math.log(a) + 1)
    assert delta == pytest.approx(float(mpmath.exp(log_ref)), rel=tol, abs=0)


@pytest.mark.parametrize("method", CONVERSIONS)
def test_minimum_over_orders(method):
    # A subsampled-Gaussian-like curve: the answer is the minimum of the per-order mpmath values.
    orders = np.array([1.5, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0])
    rdp = 0.02 * orders + 0.001 * orders**2
    delta = 1e-6
    eps, order = epsilon_from_rdp(orders, rdp, delta, method)
    refs = [float(mp_epsilon(r, a, delta, method)) for r, a in zip(rdp, orders)]
    i = int(np.argmin(refs))
    assert order == orders[i]
    assert eps == pytest.approx(refs[i], rel=1e-14)
    d, d_order = delta_from_rdp(orders, rdp, 1.0, method)
    log_refs = [mp_log_delta(r, a, 1.0, method) for r, a in zip(rdp, orders)]
    j = int(np.argmin([float(x) for x in log_refs]))
    assert d_order == orders[j]
    assert d == pytest.approx(float(mpmath.exp(log_refs[j])), rel=1e-13)


def test_cks_is_tighter_than_classic_at_every_order():
    # cks - classic = log(1 - 1/a) - log(a)/(a - 1) < 0 for every a > 1.
    for a in ORDERS:
        for delta in DELTAS:
            assert epsilon_from_rdp([a], [1.0], delta, "cks")[0] < epsilon_from_rdp([a], [1.0], delta, "classic")[0]
        (cks, order), (classic, _) = delta_from_rdp([a], [1.0], 2.0, "cks"), delta_from_rdp([a], [1.0], 2.0, "classic")
        assert cks <= classic
        # Strictly, unless both fall back to the total-variation bound (order nan, as at a = 1.01)
        # or underflow to 0 (a >= 1000: delta ~ e^-1000).
        if not math.isnan(order) and classic > 0:
            assert cks < classic


# ---------------------------------------------------------------------------------------------
# Degenerate and limiting cases.


@pytest.mark.parametrize("method", CONVERSIONS)
def test_total_variation_certifies_epsilon_zero(method):
    # sqrt(1 - e^-r) at r = 1e-12 is 1e-6 <= delta = 1e-5: (0, 1e-5)-DP.
    eps, order = epsilon_from_rdp([2.0, 10.0], [1e-12, 5e-12], 1e-5, method)
    assert eps == 0.0 and math.isnan(order)
    # ... but not for a delta below it.
    eps, order = epsilon_from_rdp([2.0, 10.0], [1e-12, 5e-12], 1e-7, method)
    assert eps > 0 and order in (2.0, 10.0)
    # delta at epsilon 0 is the TV bound of the smallest RDP value.
    d, d_order = delta_from_rdp([2.0, 10.0], [3e-12, 1e-12], 0.0, method)
    assert math.isnan(d_order)
    assert d == pytest.approx(float(mp_tv_delta(1e-12)), rel=1e-12)


@pytest.mark.parametrize("method", CONVERSIONS)
def test_zero_rdp_is_free(method):
    assert epsilon_from_rdp([2.0, 5.0], [0.0, 0.0], 1e-9, method)[0] == 0.0
    assert delta_from_rdp([2.0, 5.0], [0.0, 0.0], 0.0, method)[0] == 0.0


@pytest.mark.parametrize("method", CONVERSIONS)
def test_infinite_rdp_gives_infinite_epsilon(method):
    assert epsilon_from_rdp([2.0, 3.0], [math.inf, math.inf], 1e-5, method)[0] == math.inf
    assert delta_from_rdp([2.0, 3.0], [math.inf, math.inf], 5.0, method)[0] == 1.0
    # One finite order is enough.
    eps, order = epsilon_from_rdp([2.0, 3.0], [math.inf, 1.0], 1e-5, method)
    assert order == 3.0 and eps == pytest.approx(float(mp_epsilon(1.0, 3.0, 1e-5, method)), rel=1e-14)


@pytest.mark.parametrize("method", CONVERSIONS)
def test_infinite_order_is_pure_dp(method):
    # D_inf <= r means r-DP: epsilon = r at any delta; delta = 0 at epsilon >= r.
    assert epsilon_from_rdp([math.inf], [0.5], 1e-5, method) == (0.5, math.inf)
    assert delta_from_rdp([math.inf], [0.5], 0.5, method)[0] == 0.0
    # Below r, only the TV bound remains.
    d, order = delta_from_rdp([math.inf], [0.5], 0.4, method)
    assert math.isnan(order) and d == pytest.approx(float(mp_tv_delta(0.5)), rel=1e-14)


def test_rows_match_single_conversions():
    orders = np.array([1.5, 2.0, 8.0, 64.0])
    rows = np.array([
        0.01 * orders,
        0.3 * orders + 0.01 * orders**2,
        np.full(4, 1e-13),  # TV: epsilon 0
        np.full(4, np.inf),
        np.zeros(4),
    ])
    for method in CONVERSIONS:
        out = epsilon_from_rdp_rows(orders, rows, 1e-6, method)
        expected = [epsilon_from_rdp(orders, row, 1e-6, method)[0] for row in rows]
        np.testing.assert_array_equal(out, expected)


# ---------------------------------------------------------------------------------------------
# Bad input.


@pytest.mark.parametrize("delta", [0.0, 1.0, -1e-5, 1.5, math.nan, math.inf, "1e-5", None])
def test_bad_delta(delta):
    with pytest.raises(ValueError, match="delta"):
        epsilon_from_rdp([2.0], [1.0], delta)
    with pytest.raises(ValueError, match="delta"):
        epsilon_from_rdp_rows([2.0], [[1.0]], delta)


@pytest.mark.parametrize("epsilon", [-0.1, math.nan, "1", None])
def test_bad_epsilon(epsilon):
    with pytest.raises(ValueError, match="epsilon"):
        delta_from_rdp([2.0], [1.0], epsilon)


@pytest.mark.parametrize(
    "orders,rdp,match",
    [
        ([1.0], [1.0], "orders"),
        ([0.5, 2.0], [1.0, 1.0], "orders"),
        ([math.nan], [1.0], "orders"),
        ([2.0], [-1e-3], "rdp"),
        ([2.0], [math.nan], "rdp"),
        ([2.0, 3.0], [1.0], "shape"),
    ],
)
def test_bad_curves(orders, rdp, match):
    with pytest.raises(ValueError, match=match):
        epsilon_from_rdp(orders, rdp, 1e-5)
    with pytest.raises(ValueError, match=match):
        delta_from_rdp(orders, rdp, 1.0)


def test_bad_method():
    for call in (lambda: epsilon_from_rdp([2.0], [1.0], 1e-5, "mironov"),
                 lambda: delta_from_rdp([2.0], [1.0], 1.0, "rdp")):
        with pytest.raises(ValueError, match="conversion"):
            call()


# ---------------------------------------------------------------------------------------------
# Properties.

curves = st.integers(min_value=1, max_value=8).flatmap(
    lambda n: st.tuples(
        st.lists(st.floats(1.01, 1e4), min_size=n, max_size=n, unique=True),
        st.lists(st.floats(0.0, 50.0), min_size=n, max_size=n),
    )
)
deltas = st.floats(1e-15, 0.5)
methods = st.sampled_from(CONVERSIONS)


def _round_trip_slack(order, r_max, eps, delta):
    """Relative rounding slack of delta(epsilon(delta)): the epsilon's absolute error times (a - 1)."""
    a = 2.0 if math.isnan(order) else order
    return 16 * EPS_MACHINE * ((a - 1) * (r_max + eps + 1) + abs(math.log(delta)) + math.log(a))


@settings(max_examples=300, deadline=None, derandomize=True)
@given(curves, deltas, methods)
def test_round_trip_delta_epsilon_delta(curve, delta, method):
    orders, rdp = curve
    eps, order = epsilon_from_rdp(orders, rdp, delta, method)
    assert 0.0 <= eps < math.inf
    back, _ = delta_from_rdp(orders, rdp, eps, method)
    assert back <= delta * (1 + _round_trip_slack(order, max(rdp), eps, delta))


@settings(max_examples=300, deadline=None, derandomize=True)
@given(curves, st.floats(0.0, 60.0), methods)
def test_round_trip_epsilon_delta_epsilon(curve, epsilon, method):
    orders, rdp = curve
    delta, order = delta_from_rdp(orders, rdp, epsilon, method)
    if not 0.0 < delta < 1.0:
        return  # nothing to convert back (delta 1 certifies nothing; delta 0 is pure DP)
    if math.isnan(order):
        # The TV bound sqrt(1 - e^-r) came back, computed as exp(log(1 - e^-r) / 2), so with a
        # relative error of about |log delta| ulps (6.7e-15 below the exact value at r = 4.4e-108).
        # epsilon_from_rdp certifies 0 from there up, but its threshold test delta^2 >= 1 - e^-r can
        # miss by those ulps and fall back to the CKS bound (a conservative jump, reported).
        nudged = delta * (1 + 4 * EPS_MACHINE * (1 + abs(math.log(delta))))
        if nudged < 1.0:
            assert epsilon_from_rdp(orders, rdp, nudged, method)[0] == 0.0
        return
    back, _ = epsilon_from_rdp(orders, rdp, delta, method)
    # epsilon's error: a few ulps of its terms, |log delta|/(a - 1) being the largest.
    slack = 16 * EPS_MACHINE * (max(rdp) + epsilon + abs(math.log(delta)) / (order - 1) + 1) * order
    assert back <= epsilon + slack


@settings(max_examples=200, deadline=None, derandomize=True)
@given(curves, deltas, st.floats(0.0, 5.0), methods)
def test_more_rdp_or_less_delta_never_lowers_epsilon(curve, delta, extra, method):
    orders, rdp = curve
    eps = epsilon_from_rdp(orders, rdp, delta, method)[0]
    assert epsilon_from_rdp(orders, np.asarray(rdp) + extra, delta, method)[0] >= eps
    assert epsilon_from_rdp(orders, rdp, delta / 10, method)[0] >= eps
