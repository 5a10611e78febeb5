"""Properties every certified epsilon must have, checked with Hypothesis (STYLE.md "Tests that could fail").

* More noise never increases epsilon; more steps and a higher sampling rate never decrease it
  (post-processing and composition; for the subsampled bounds, monotonicity of the MTZ 2019 and
  WBK 2019 Thm 9 expressions in q, z and T). Checked for Poisson sampling (add/remove) and for
  fixed-size sampling without replacement (substitution).
* Round trip: delta -> epsilon -> delta never certifies a larger delta than asked for.
* Calibration (metadp.accounting.calibration): the returned parameter meets the target, is the
  extreme one to within the stated tolerance, and is not wasteful (epsilon within 1% of the target).
* A plan's report is the accountant's number for the plan's events.

Strategies: rates 1e-4..0.5 and deltas 1e-9..1e-3 (both log-uniform), noise multipliers 0.5..10,
steps 1..10^4. Runs are derandomized (fixed seed, no example database) so failures reproduce; example
counts keep the default run short (a few seconds per test); every property also has a `slow` variant
(python -m pytest -m slow) with many more examples.

Tolerances. Each accountant result is a grid minimum refined by Brent's method; comparing two such
results can differ from the exact ordering by the optimiser's tolerance, far below 1e-9 relative, so
monotonicity is asserted as eps_small <= eps_large * (1 + 1e-9) + 1e-12.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, seed, settings
from hypothesis import strategies as st

from metadp.accounting import (
    DEFAULT_ORDERS,
    FixedSizeSampled,
    Gaussian,
    PoissonSampled,
    RdpAccountant,
    SelfComposed,
)
from metadp.accounting.calibration import calibrate_noise, max_rate, max_steps

REL = 1e-9
ABS = 1e-12

rates = st.floats(-4.0, math.log10(0.5)).map(lambda e: 10.0**e)
noises = st.floats(0.5, 10.0)
steps = st.integers(1, 10_000)
deltas = st.floats(-9.0, -3.0).map(lambda e: 10.0**e)

# Fixed-size sampling: batch m of a population of 10,000 (rates 1e-4..0.5). Its RDP bound costs O(alpha)
# per order, so the property tests use the default grid up to order 4096 (refinement still extends
# it on demand): monotonicity must hold on any grid.
POPULATION = 10_000
batches = st.integers(1, POPULATION // 2)
FIXED_ORDERS = DEFAULT_ORDERS[DEFAULT_ORDERS <= 4096]


def _fast(n: int):
    return settings(max_examples=n, derandomize=True, database=None, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])


def poisson_eps(q: float, z: float, t: int, delta: float) -> float:
    return RdpAccountant().compose(PoissonSampled(q, Gaussian(z)), t).get_epsilon(delta)


def fixed_eps(m: int, z: float, t: int, delta: float) -> float:
    acc = RdpAccountant("substitute", orders=FIXED_ORDERS)
    return acc.compose(FixedSizeSampled(m, POPULATION, Gaussian(z)), t).get_epsilon(delta)


def _no_larger(small: float, large: float) -> bool:
    return small <= large * (1.0 + REL) + ABS


def _finite_nonnegative(*values: float) -> bool:
    return all(math.isfinite(v) and v >= 0.0 for v in values)


# ---------------------------------------------------------------------------------------------
# Monotonicity, Poisson sampling (add/remove).


@_fast(15)  # 200 more in test_poisson_monotone_sweep
@given(q=rates, z1=noises, z2=noises, t=steps, delta=deltas)
def test_poisson_epsilon_non_increasing_in_noise(q, z1, z2, t, delta):
    lo, hi = sorted((z1, z2))
    eps_lo, eps_hi = poisson_eps(q, lo, t, delta), poisson_eps(q, hi, t, delta)
    assert _finite_nonnegative(eps_lo, eps_hi)
    assert _no_larger(eps_hi, eps_lo)


def _poisson_epsilon_non_decreasing_in_rate(q1, q2, z, t, delta):
    lo, hi = sorted((q1, q2))
    eps_lo, eps_hi = poisson_eps(lo, z, t, delta), poisson_eps(hi, z, t, delta)
    assert _finite_nonnegative(eps_lo, eps_hi)
    assert _no_larger(eps_lo, eps_hi)


test_poisson_epsilon_non_decreasing_in_rate = _fast(15)(given(q1=rates, q2=rates, z=noises, t=steps, delta=deltas)(
    _poisson_epsilon_non_decreasing_in_rate))
test_poisson_rate_sweep = pytest.mark.slow(_fast(150)(given(q1=rates, q2=rates, z=noises, t=steps, delta=deltas)(
    _poisson_epsilon_non_decreasing_in_rate)))


@_fast(15)  # 200 more in test_poisson_monotone_sweep
@given(q=rates, z=noises, t1=steps, t2=steps, delta=deltas)
def test_poisson_epsilon_non_decreasing_in_steps(q, z, t1, t2, delta):
    lo, hi = sorted((t1, t2))
    eps_lo, eps_hi = poisson_eps(q, z, lo, delta), poisson_eps(q, z, hi, delta)
    assert _finite_nonnegative(eps_lo, eps_hi)
    assert _no_larger(eps_lo, eps_hi)


# ---------------------------------------------------------------------------------------------
# Monotonicity, fixed-size sampling without replacement (substitution).


@_fast(15)  # 150 more in test_fixed_monotone_sweep
@given(m=batches, z1=noises, z2=noises, t=steps, delta=deltas)
def test_fixed_epsilon_non_increasing_in_noise(m, z1, z2, t, delta):
    lo, hi = sorted((z1, z2))
    eps_lo, eps_hi = fixed_eps(m, lo, t, delta), fixed_eps(m, hi, t, delta)
    assert _finite_nonnegative(eps_lo, eps_hi)
    assert _no_larger(eps_hi, eps_lo)


@_fast(15)  # 150 more in test_fixed_monotone_sweep
@given(m1=batches, m2=batches, z=noises, t=steps, delta=deltas)
def test_fixed_epsilon_non_decreasing_in_rate(m1, m2, z, t, delta):
    lo, hi = sorted((m1, m2))
    eps_lo, eps_hi = fixed_eps(lo, z, t, delta), fixed_eps(hi, z, t, delta)
    assert _finite_nonnegative(eps_lo, eps_hi)
    assert _no_larger(eps_lo, eps_hi)


def _fixed_epsilon_non_decreasing_in_steps(m, z, t1, t2, delta):
    lo, hi = sorted((t1, t2))
    eps_lo, eps_hi = fixed_eps(m, z, lo, delta), fixed_eps(m, z, hi, delta)
    assert _finite_nonnegative(eps_lo, eps_hi)
    assert _no_larger(eps_lo, eps_hi)


test_fixed_epsilon_non_decreasing_in_steps = _fast(15)(given(m=batches, z=noises, t1=steps, t2=steps, delta=deltas)(
    _fixed_epsilon_non_decreasing_in_steps))
test_fixed_steps_sweep = pytest.mark.slow(_fast(100)(given(m=batches, z=noises, t1=steps, t2=steps, delta=deltas)(
    _fixed_epsilon_non_decreasing_in_steps)))


def test_fixed_size_costs_at_least_poisson_at_the_same_rate():
    """A fixed-size plan under substitution is never cheaper than the Poisson plan at rate m/n under
    add/remove (the substitution sensitivity is 2C): at the default plan, 9.17 vs 1.146 (see
    examples/dp_maml_fixed_batches.toml)."""
    poisson = poisson_eps(1600 / 400_000, 1.0, 250, 1e-6)
    fixed = RdpAccountant("substitute").compose(FixedSizeSampled(1600, 400_000, Gaussian(1.0)), 250).get_epsilon(1e-6)
    assert poisson < fixed


# ---------------------------------------------------------------------------------------------
# Round trips.


@_fast(15)  # 250 more in test_delta_round_trip_sweep
@given(q=rates, z=noises, t=steps, delta=deltas)
def test_delta_epsilon_delta_round_trip(q, z, t, delta):
    acc = RdpAccountant().compose(PoissonSampled(q, Gaussian(z)), t)
    eps = acc.get_epsilon(delta)
    assert _finite_nonnegative(eps)
    back = acc.get_delta(eps)
    assert 0.0 <= back <= 1.0
    assert back <= delta * (1.0 + 1e-9)


def _tv_delta(acc: RdpAccountant) -> float:
    """The total-variation bound sqrt(1 - exp(-min_alpha rdp(alpha))), which certifies epsilon = 0."""
    return math.sqrt(-math.expm1(-float(np.min(acc.rdp()))))


def _epsilon_delta_epsilon_round_trip(q, z, t, eps):
    acc = RdpAccountant().compose(PoissonSampled(q, Gaussian(z)), t)
    delta = acc.get_delta(eps)
    assert 0.0 <= delta <= 1.0
    assume(1e-300 < delta < 1.0)
    assert acc.get_epsilon(delta) <= eps * (1.0 + 1e-9) + ABS


test_epsilon_delta_epsilon_round_trip = _fast(15)(given(q=rates, z=noises, t=steps, eps=st.floats(0.05, 20.0))(
    _epsilon_delta_epsilon_round_trip))
test_epsilon_round_trip_sweep = pytest.mark.slow(_fast(200)(given(q=rates, z=noises, t=steps, eps=st.floats(0.05, 20.0))(
    _epsilon_delta_epsilon_round_trip)))


# Regression (was a reported bug, now fixed):
def test_delta_epsilon_delta_round_trip_when_tv_wins_on_the_grid():
    """Found by the round-trip property: q = 1e-3, z = 2, 7 steps, delta = 1e-3. get_epsilon(1e-3) =
    0.035297 at order 55.27, where the CKS conversion gives delta = 1e-3 exactly; get_delta(0.035297)
    returns 1.00186e-3, the TV bound, which beat the conversion on the order grid (0.035442 at 55)."""
    acc = RdpAccountant().compose(PoissonSampled(1e-3, Gaussian(2.0)), 7)
    assert acc.get_delta(acc.get_epsilon(1e-3)) <= 1e-3 * (1.0 + 1e-9)


# Regression (was a reported bug, now fixed):
def test_delta_round_trip_at_a_steep_rdp_transition():
    """Found by the slow round-trip sweep: q = 10^-3.9375, z = 1.890625, 478 steps, delta = 1e-3.
    The composed RDP jumps from 6.7e-5 at order 64 to 13.8 at order 66, so the conversion has a sharp
    minimum inside the default grid's gap (64, 76). get_epsilon finds it (0.027657 at order 64.54, where
    the CKS conversion gives delta = 1.0e-3); get_delta(0.027657) stays at the grid value 1.01871e-3."""
    acc = RdpAccountant().compose(PoissonSampled(10.0 ** -3.9375, Gaussian(1.890625)), 478)
    assert acc.get_delta(acc.get_epsilon(1e-3)) <= 1e-3 * (1.0 + 1e-9)


# Regression (was a reported bug, now fixed):
def test_epsilon_delta_epsilon_round_trip_on_the_tv_bound():
    """Found by the round-trip property: q = 1e-4, z = 0.5, one step. get_delta(1.0) = 5.069e-4 is the
    TV bound (delta for every epsilon >= 0), so get_epsilon of it must be <= 1.0 (in fact 0)."""
    acc = RdpAccountant().compose(PoissonSampled(1e-4, Gaussian(0.5)), 1)
    delta = acc.get_delta(1.0)
    assert delta == pytest.approx(_tv_delta(acc), rel=1e-12)
    assert acc.get_epsilon(delta) <= 1.0


# ---------------------------------------------------------------------------------------------
# Calibration. Targets are the epsilons of random plans, so every target is reachable.


def _plan_event(q: float, z: float, t: int):
    return SelfComposed(PoissonSampled(q, Gaussian(z)), t)


def _eps_of(event, delta: float) -> float:
    return RdpAccountant().compose(event).get_epsilon(delta)


def _calibrate_noise_meets_target_and_is_tight(q, z0, t, delta):
    target = _eps_of(_plan_event(q, z0, t), delta)
    assume(target > 1e-6)
    z = calibrate_noise(lambda s: _plan_event(q, s, t), target, delta)
    assert math.isfinite(z) and z > 0.0
    eps = _eps_of(_plan_event(q, z, t), delta)
    assert eps <= target  # always meets the target
    assert eps >= 0.99 * target  # and does not waste noise
    assert z <= z0 * (1.0 + 1e-3)  # z0 meets the target, and z is the smallest to 1e-3
    assert _eps_of(_plan_event(q, z / (1.0 + 1e-3), t), delta) > target


def _max_steps_meets_target_and_one_more_step_exceeds_it(q, z, t0, delta):
    step = PoissonSampled(q, Gaussian(z))
    target = _eps_of(SelfComposed(step, t0), delta)
    assume(target > 1e-6)
    t = max_steps(step, target, delta)
    assert isinstance(t, int) and t >= t0
    assert _eps_of(SelfComposed(step, t), delta) <= target
    assert _eps_of(SelfComposed(step, t + 1), delta) > target


def _max_rate_meets_target_and_is_tight(q0, z, t, delta):
    target = _eps_of(_plan_event(q0, z, t), delta)
    assume(target > 1e-6)
    q = max_rate(lambda r: _plan_event(r, z, t), target, delta)
    assert 0.0 < q <= 1.0
    eps = _eps_of(_plan_event(q, z, t), delta)
    assert eps <= target
    assert eps >= 0.99 * target
    assert q >= q0 * (1.0 - 1e-3)  # q0 meets the target, and q is the largest to 1e-3
    if q < 1.0:
        assert _eps_of(_plan_event(min(1.0, q * (1.0 + 1e-3)), z, t), delta) > target


# Each calibration is a bisection of ~50 accountant calls: a few examples in the default suite, many in
# the slow sweeps below (the same properties).
test_calibrate_noise_meets_target_and_is_tight = _fast(3)(given(q=rates, z0=noises, t=steps, delta=deltas)(
    _calibrate_noise_meets_target_and_is_tight))
test_max_steps_meets_target_and_one_more_step_exceeds_it = _fast(3)(given(q=rates, z=noises, t0=steps, delta=deltas)(
    _max_steps_meets_target_and_one_more_step_exceeds_it))
test_max_rate_meets_target_and_is_tight = _fast(3)(given(q0=rates, z=noises, t=steps, delta=deltas)(
    _max_rate_meets_target_and_is_tight))
test_calibrate_noise_tight_sweep = pytest.mark.slow(_fast(10)(given(q=rates, z0=noises, t=steps, delta=deltas)(
    _calibrate_noise_meets_target_and_is_tight)))
test_max_steps_sweep = pytest.mark.slow(_fast(28)(given(q=rates, z=noises, t0=steps, delta=deltas)(
    _max_steps_meets_target_and_one_more_step_exceeds_it)))
test_max_rate_sweep = pytest.mark.slow(_fast(18)(given(q0=rates, z=noises, t=steps, delta=deltas)(
    _max_rate_meets_target_and_is_tight)))


# ---------------------------------------------------------------------------------------------
# Plans: the report is the accountant's number for the plan's events.


def _plan_report_equals_accountant(q, z, t, delta):
    from metadp.plan import Plan, plan_epsilon

    plan = Plan.from_dict({"name": "property", "unit": "record", "relation": "add_remove", "delta": delta,
                           "steps": t, "sampling": {"scheme": "poisson", "rate": q},
                           "noise": {"mechanism": "gaussian", "multiplier": z}})
    report = plan_epsilon(plan, accountant="rdp")
    assert report.epsilon == poisson_eps(q, z, t, delta)
    assert report.unit == "record" and report.relation == "add_remove" and report.steps == t


test_plan_report_equals_accountant = _fast(10)(given(q=rates, z=noises, t=steps, delta=deltas)(
    _plan_report_equals_accountant))
test_plan_report_sweep = pytest.mark.slow(_fast(100)(given(q=rates, z=noises, t=steps, delta=deltas)(
    _plan_report_equals_accountant)))


# ---------------------------------------------------------------------------------------------
# Slow sweeps: the same properties with many more examples (python -m pytest -m slow).


@pytest.mark.slow
@settings(max_examples=200, derandomize=True, database=None, deadline=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(q=rates, z1=noises, z2=noises, t1=steps, t2=steps, delta=deltas)
def test_poisson_monotone_sweep(q, z1, z2, t1, t2, delta):
    zl, zh = sorted((z1, z2))
    tl, th = sorted((t1, t2))
    assert _no_larger(poisson_eps(q, zh, tl, delta), poisson_eps(q, zl, tl, delta))
    assert _no_larger(poisson_eps(q, zl, tl, delta), poisson_eps(q, zl, th, delta))


@pytest.mark.slow
@settings(max_examples=14, derandomize=True, database=None, deadline=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(q=rates, z0=noises, t=steps, delta=deltas)
def test_calibrate_noise_sweep(q, z0, t, delta):
    target = _eps_of(_plan_event(q, z0, t), delta)
    assume(target > 1e-6)
    z = calibrate_noise(lambda s: _plan_event(q, s, t), target, delta)
    eps = _eps_of(_plan_event(q, z, t), delta)
    assert 0.99 * target <= eps <= target


@pytest.mark.slow
@settings(max_examples=150, derandomize=True, database=None, deadline=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(m1=batches, m2=batches, z1=noises, z2=noises, t=steps, delta=deltas)
def test_fixed_monotone_sweep(m1, m2, z1, z2, t, delta):
    ml, mh = sorted((m1, m2))
    zl, zh = sorted((z1, z2))
    assert _no_larger(fixed_eps(ml, zh, t, delta), fixed_eps(mh, zh, t, delta))
    assert _no_larger(fixed_eps(mh, zh, t, delta), fixed_eps(mh, zl, t, delta))


@pytest.mark.slow
@seed(20_240)  # a fixed seed rather than derandomize: the examples do not change when decorators do
@settings(max_examples=250, database=None, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(q=rates, z=noises, t=steps, delta=deltas)
def test_delta_round_trip_sweep(q, z, t, delta):
    acc = RdpAccountant().compose(PoissonSampled(q, Gaussian(z)), t)
    back = acc.get_delta(acc.get_epsilon(delta))
    assume(not math.isclose(back, _tv_delta(acc), rel_tol=1e-12))
    assert back <= delta * (1.0 + 1e-9)


def test_strategies_cover_the_stated_ranges():
    """The strategies span what the module docstring promises (guards against a silent narrowing)."""
    assert 10.0 ** -4.0 == pytest.approx(1e-4) and 10.0 ** math.log10(0.5) == pytest.approx(0.5)
    assert FIXED_ORDERS.max() == 4096 and np.all(FIXED_ORDERS > 1)
    assert 1 / POPULATION == pytest.approx(1e-4) and (POPULATION // 2) / POPULATION == 0.5
