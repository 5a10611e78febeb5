"""The accountant contract (every accountant must pass it) and RdpAccountant-specific checks.

The contract tests take the ``spec`` fixture, parametrized over ``ACCOUNTANTS``: to put a new
accountant (e.g. a PLD accountant) under the contract, add one ``AccountantSpec`` to that list, with
the events it cannot interpret and the tolerance of its ``trajectory`` against ``get_epsilon``.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Callable, Tuple

import mpmath
import numpy as np
import pytest

from metadp.accounting import (
    Composed,
    Event,
    FixedSizeSampled,
    Gaussian,
    Laplace,
    NonPrivate,
    NoOp,
    PoissonSampled,
    RdpAccountant,
    SelfComposed,
    UnsupportedEventError,
    epsilon_from_rdp,
)
from metadp.accounting.pld import PldAccountant


@dataclasses.dataclass(frozen=True)
class _Mystery(Event):
    """An event type no accountant has ever heard of."""

    strength: float = 1.0


@dataclasses.dataclass(frozen=True)
class AccountantSpec:
    name: str
    factory: Callable[..., object]  # factory(relation=...) -> fresh accountant
    # (relation, event, the sub-event the error must name) that this accountant cannot handle.
    unsupported: Tuple[tuple, ...]
    # Events (add/remove) it handles, used for the algebraic laws.
    supported: Tuple[Event, ...]
    # trajectory() may be looser than get_epsilon() by this relative margin (never tighter).
    trajectory_rtol: float
    # equal plans composed differently agree to this (PLD: FFT products in another order, ~1e-11)
    algebra_rtol: float = 1e-12
    # trajectory() may also be this much below get_epsilon() (both certified; PLD lattices differ)
    trajectory_below: float = 0.0


_POISSON_LAPLACE = PoissonSampled(0.1, Laplace(1.0))
_FIXED = FixedSizeSampled(10, 100, Gaussian(1.0))
_POISSON = PoissonSampled(0.1, Gaussian(1.0))

ACCOUNTANTS = [
    AccountantSpec(
        name="rdp",
        factory=RdpAccountant,
        unsupported=(
            ("add_remove", _POISSON_LAPLACE, Laplace(1.0)),  # only Gaussians inside sampling
            ("add_remove", _FIXED, _FIXED),  # fixed-size sampling needs substitution
            ("substitute", _POISSON, _POISSON),  # Poisson sampling needs add/remove
            ("add_remove", _Mystery(), _Mystery()),
            # Nested: the valid Gaussian before it must not be composed either.
            ("add_remove", Composed([Gaussian(2.0), SelfComposed(_POISSON_LAPLACE, 3)]), Laplace(1.0)),
        ),
        supported=(Gaussian(1.3), Laplace(3.0), PoissonSampled(0.01, Gaussian(1.1))),
        # Documented in RdpAccountant.trajectory (grid plus orders refined at log-spaced checkpoints):
        # within 5e-3 of get_epsilon. Seen: 3.5e-3 at rate 0.01, noise 20, step 5.
        trajectory_rtol=5e-3,
    ),
    AccountantSpec(
        name="pld",
        factory=PldAccountant,
        unsupported=(
            ("add_remove", _POISSON_LAPLACE, Laplace(1.0)),  # only Gaussians inside sampling
            ("add_remove", _FIXED, _FIXED),  # fixed-size sampling needs substitution
            ("substitute", _POISSON, _POISSON),  # Poisson sampling needs add/remove
            ("add_remove", _Mystery(), _Mystery()),
            ("add_remove", Composed([Gaussian(2.0), SelfComposed(_POISSON_LAPLACE, 3)]), Laplace(1.0)),
        ),
        supported=(Gaussian(1.3), Laplace(3.0), PoissonSampled(0.01, Gaussian(1.1))),
        # one lattice for every count (the finest need); tests/accounting/test_pld.py allows 1%
        trajectory_rtol=1e-2,
        algebra_rtol=1e-9,
        trajectory_below=5e-3,
    ),
]


@pytest.fixture(params=ACCOUNTANTS, ids=lambda s: s.name)
def spec(request) -> AccountantSpec:
    return request.param


DELTAS = (1e-10, 1e-5, 0.1)

# ---------------------------------------------------------------------------------------------
# Contract: degenerate plans.


def test_empty_accountant_is_free(spec):
    acc = spec.factory()
    assert acc.ledger == ()
    for delta in DELTAS:
        assert acc.get_epsilon(delta) == 0.0
    for epsilon in (0.0, 0.1, 10.0):
        assert acc.get_delta(epsilon) == 0.0


@pytest.mark.parametrize("relation", ["add_remove", "substitute"])
def test_noop_is_free(spec, relation):
    acc = spec.factory(relation=relation).compose(NoOp()).compose(NoOp(), 1000)
    for delta in DELTAS:
        assert acc.get_epsilon(delta) == 0.0
    assert acc.get_delta(0.0) == 0.0


def test_noop_adds_nothing(spec):
    base = spec.factory().compose(Gaussian(2.0), 3)
    with_noop = spec.factory().compose(Gaussian(2.0), 3).compose(NoOp(), 50)
    assert with_noop.get_epsilon(1e-5) == base.get_epsilon(1e-5)


def test_non_private_is_infinite(spec):
    acc = spec.factory().compose(NonPrivate())
    for delta in DELTAS:
        assert acc.get_epsilon(delta) == math.inf
    assert acc.get_delta(1.0) == 1.0
    # ... and stays infinite whatever private events surround it.
    mixed = spec.factory().compose(Gaussian(10.0)).compose(NonPrivate()).compose(Gaussian(10.0))
    assert mixed.get_epsilon(1e-5) == math.inf


# ---------------------------------------------------------------------------------------------
# Contract: unsupported events fail before any state changes.


def test_unsupported_event_raises_naming_subevent_and_changes_nothing(spec):
    for relation, event, culprit in spec.unsupported:
        acc = spec.factory(relation=relation).compose(Gaussian(3.0), 2)
        ledger, eps, delta = acc.ledger, acc.get_epsilon(1e-5), acc.get_delta(1.0)
        with pytest.raises(UnsupportedEventError) as info:
            acc.compose(event, 5)
        assert isinstance(info.value, ValueError)
        assert info.value.event == culprit, (relation, event)
        assert culprit.describe() in str(info.value)
        assert acc.ledger == ledger
        assert acc.get_epsilon(1e-5) == eps
        assert acc.get_delta(1.0) == delta


@pytest.mark.parametrize("bad", ["gaussian", None, 1.0])
def test_compose_rejects_non_events(spec, bad):
    acc = spec.factory()
    with pytest.raises(ValueError):
        acc.compose(bad)
    assert acc.ledger == ()


@pytest.mark.parametrize("count", [-1, 1.5, "3", math.nan])
def test_compose_rejects_bad_counts(spec, count):
    acc = spec.factory()
    with pytest.raises(ValueError, match="count"):
        acc.compose(Gaussian(1.0), count)
    assert acc.ledger == ()


def test_bad_relation_and_delta_are_rejected(spec):
    with pytest.raises(ValueError, match="relation"):
        spec.factory(relation="replace_one")
    acc = spec.factory().compose(Gaussian(1.0))
    for delta in (0.0, 1.0, -1e-5, math.nan):
        with pytest.raises(ValueError, match="delta"):
            acc.get_epsilon(delta)
    with pytest.raises(ValueError, match="epsilon"):
        acc.get_delta(-0.1)


# ---------------------------------------------------------------------------------------------
# Contract: the composition algebra.


def _assert_same_guarantee(a, b, rtol=1e-12):
    for delta in (1e-8, 1e-5):
        assert a.get_epsilon(delta) == pytest.approx(b.get_epsilon(delta), rel=rtol, abs=0)
    eps = a.get_epsilon(1e-5)
    assert a.get_delta(eps) == pytest.approx(b.get_delta(eps), rel=rtol, abs=0)


@pytest.mark.parametrize("n", [1, 7, 40])
def test_compose_n_equals_n_single_compositions(spec, n):
    for event in spec.supported:
        once = spec.factory().compose(event, n)
        repeated = spec.factory()
        for _ in range(n):
            repeated.compose(event)
        _assert_same_guarantee(once, repeated, spec.algebra_rtol)


def test_composed_equals_composing_in_sequence(spec):
    a, b, c = spec.supported
    _assert_same_guarantee(
        spec.factory().compose(Composed([a, b, c])), spec.factory().compose(a).compose(b).compose(c), spec.algebra_rtol
    )
    # Order does not matter for a non-adaptive accountant's bound.
    _assert_same_guarantee(spec.factory().compose(Composed([a, b])), spec.factory().compose(Composed([b, a])),
                           spec.algebra_rtol)


@pytest.mark.parametrize("n", [0, 1, 13])
def test_self_composed_equals_compose_count(spec, n):
    for event in spec.supported:
        _assert_same_guarantee(spec.factory().compose(SelfComposed(event, n)), spec.factory().compose(event, n),
                               spec.algebra_rtol)
        _assert_same_guarantee(
            spec.factory().compose(SelfComposed(event, n), 3), spec.factory().compose(event, 3 * n), spec.algebra_rtol
        )


def test_ledger_records_what_was_composed(spec):
    a, b, _ = spec.supported
    acc = spec.factory()
    assert acc.compose(a, 3) is acc  # chaining
    acc.compose(b).compose(NoOp(), 0)
    assert [(e.event, e.count) for e in acc.ledger] == [(a, 3), (b, 1), (NoOp(), 0)]
    # A snapshot: the caller cannot rewrite history through it.
    snapshot = acc.ledger
    acc.compose(a)
    assert len(snapshot) == 3 and len(acc.ledger) == 4


@pytest.mark.parametrize("z", [0.7, 1.0, 4.0])
def test_substitution_doubles_the_sensitivity_exactly(spec, z):
    # A clipped sum moves by 2C when one unit is replaced: Gaussian(z) under substitution is
    # Gaussian(z / 2) under add/remove, and Laplace likewise (exact: halving is exact in binary).
    for sub_event, ar_event in [(Gaussian(z), Gaussian(z / 2)), (Laplace(z), Laplace(z / 2))]:
        sub = spec.factory(relation="substitute").compose(sub_event, 10)
        ar = spec.factory(relation="add_remove").compose(ar_event, 10)
        assert sub.get_epsilon(1e-5) == ar.get_epsilon(1e-5)
        assert sub.get_delta(1.0) == ar.get_delta(1.0)


def test_more_steps_more_epsilon(spec):
    step = PoissonSampled(0.01, Gaussian(1.0))
    eps = [spec.factory().compose(step, t).get_epsilon(1e-6) for t in (1, 10, 100, 1000)]
    assert all(x < y for x, y in zip(eps, eps[1:]))


# ---------------------------------------------------------------------------------------------
# Contract: trajectory.

DEFAULT_STEP = PoissonSampled(0.004, Gaussian(1.0))  # the default DP-MAML plan, delta 1e-6


def _check_against_fresh(spec, trajectory, steps, delta, step_event, base=()):
    for t, value in zip(steps, trajectory):
        fresh = spec.factory()
        for event, count in base:
            fresh.compose(event, count)
        exact = fresh.compose(step_event, t).get_epsilon(delta)
        # Never below the refined value (it is the same bound at fewer orders), barely above it.
        assert exact * (1 - spec.trajectory_below) <= value <= exact * (1 + spec.trajectory_rtol), (t, value, exact)


PROBES = [1, 2, 5, 17, 100, 250, 1000, 10_000]


@pytest.mark.parametrize(
    "step_event,delta",
    [(DEFAULT_STEP, 1e-6), (PoissonSampled(0.01, Gaussian(20.0)), 1e-5), (Gaussian(10.0), 1e-5)],
    ids=["default", "rate0.01-noise20", "gaussian10"],
)
def test_trajectory_with_step_event(spec, step_event, delta):
    # every count for RDP (cheap); for PLD, whose every count is one FFT composition, 0, the probes and
    # 60 log-spaced counts here (test_pld_trajectory_at_every_count, slow, takes every count to 2,500)
    steps = np.arange(0, 10_001) if spec.name == "rdp" else np.unique(np.concatenate(
        [[0], PROBES, np.geomspace(1, 10_000, 60).astype(int)]))
    _check_trajectory(spec, steps, step_event, delta)


@pytest.mark.slow
@pytest.mark.parametrize("step_event,delta", [(DEFAULT_STEP, 1e-6), (PoissonSampled(0.01, Gaussian(20.0)), 1e-5)],
                         ids=["default", "rate0.01-noise20"])
def test_pld_trajectory_at_every_count(step_event, delta):
    # every count to 2,500 (monotone, none skipped), then the probes to 10,000 (all 10,001 counts took ~4 min
    # of CPU for the two events in a slow run on 2 cores)
    steps = np.union1d(np.arange(0, 2_501), PROBES)
    _check_trajectory(next(s for s in ACCOUNTANTS if s.name == "pld"), steps, step_event, delta)


def _check_trajectory(spec, steps, step_event, delta):
    traj = spec.factory().trajectory(steps, delta, step_event=step_event)
    assert traj.shape == (len(steps),)
    assert traj[0] == 0.0
    assert np.all(np.diff(traj) >= 0)
    where = {int(t): i for i, t in enumerate(steps)}
    _check_against_fresh(spec, traj[[where[p] for p in PROBES]], PROBES, delta, step_event)


# Regression: with few step counts, checkpoint picks once dropped indices (4% above get_epsilon).
def test_trajectory_with_few_step_counts(spec):
    traj = spec.factory().trajectory(PROBES, 1e-5, step_event=Gaussian(10.0))
    _check_against_fresh(spec, traj, PROBES, 1e-5, Gaussian(10.0))


def test_trajectory_on_top_of_the_ledger(spec):
    base = ((Gaussian(5.0), 2),)
    acc = spec.factory()
    for event, count in base:
        acc.compose(event, count)
    steps = [0, 3, 30, 300]
    traj = acc.trajectory(steps, 1e-5, step_event=DEFAULT_STEP)
    assert traj[0] > 0.0  # the base alone costs something
    assert np.all(np.diff(traj) >= 0)
    _check_against_fresh(spec, traj, steps, 1e-5, DEFAULT_STEP, base)


def test_trajectory_of_the_last_composition(spec):
    total = 250
    acc = spec.factory().compose(DEFAULT_STEP, total)
    traj = acc.trajectory(range(1, total + 1), 1e-6)
    assert traj.shape == (total,)
    assert np.all(np.diff(traj) >= 0) and traj[0] > 0
    final = acc.get_epsilon(1e-6)
    assert final <= traj[-1] <= final * (1 + spec.trajectory_rtol)
    _check_against_fresh(spec, traj[[0, 9, 99]], [1, 10, 100], 1e-6, DEFAULT_STEP)


def test_trajectory_needs_a_step(spec):
    with pytest.raises(ValueError):
        spec.factory().trajectory([1, 2], 1e-5)
    with pytest.raises(ValueError):
        spec.factory().trajectory([1, -2], 1e-5, step_event=Gaussian(1.0))


# ---------------------------------------------------------------------------------------------
# RdpAccountant only.


def test_golden_gaussian_one_step_cks():
    """Gaussian z = 1, one release, delta = 1e-5, CKS conversion, optimised over the order.

    eps(a) = a/2 + log(1 - 1/a) - (log delta + log a)/(a - 1) (CKS 2020, Prop. 12, with the exact
    Gaussian RDP a/(2 z^2)). d eps/da = 1/2 + (log delta + log a)/(a - 1)^2, so the optimum solves
    (a - 1)^2 = -2 log(delta a). mpmath (50 digits, findroot from a = 5):
    a* = 5.43184967027010247..., eps* = 4.72838698494331389997...
    """
    with mpmath.workdps(50):
        log_delta = mpmath.log(mpmath.mpf("1e-5"))
        a = mpmath.findroot(lambda x: (x - 1) ** 2 + 2 * (log_delta + mpmath.log(x)), 5)
        eps_star = a / 2 + mpmath.log(1 - 1 / a) - (log_delta + mpmath.log(a)) / (a - 1)
        assert abs(eps_star - mpmath.mpf("4.72838698494331389997")) < mpmath.mpf("1e-20")
        eps_star, a_star = float(eps_star), float(a)
    eps, order = RdpAccountant().compose(Gaussian(1.0)).get_epsilon_and_order(1e-5)
    # An upper bound (the conversion at some order >= its minimum), and the minimum to 1e-12.
    assert eps_star * (1 - 1e-15) <= eps <= eps_star * (1 + 1e-12)
    assert order == pytest.approx(a_star, rel=1e-4)  # the objective is flat at the optimum


@pytest.mark.parametrize(
    "event,count,delta",
    [(Gaussian(1.0), 1, 1e-5), (PoissonSampled(0.004, Gaussian(1.0)), 250, 1e-6), (Laplace(2.0), 20, 1e-8)],
)
def test_classic_conversion_is_never_tighter(event, count, delta):
    # CKS's epsilon at each order is the classic one plus log(1 - 1/a) - log(a)/(a - 1) < 0.
    cks = RdpAccountant(conversion="cks").compose(event, count)
    classic = RdpAccountant(conversion="classic").compose(event, count)
    assert classic.get_epsilon(delta) > cks.get_epsilon(delta)
    eps = cks.get_epsilon(delta)
    assert classic.get_delta(eps) > cks.get_delta(eps)


def test_bad_conversion_rejected():
    with pytest.raises(ValueError, match="conversion"):
        RdpAccountant(conversion="mironov")


@pytest.mark.parametrize("conversion", ["cks", "classic"])
def test_epsilon_is_the_conversion_at_the_reported_order(conversion):
    # Whatever order the refinement lands on, the epsilon is the conversion of the curve there:
    # a certificate one can recompute.
    acc = RdpAccountant(conversion=conversion).compose(PoissonSampled(0.004, Gaussian(1.0)), 250)
    eps, order = acc.get_epsilon_and_order(1e-6)
    recomputed, _ = epsilon_from_rdp([order], acc.rdp([order]), 1e-6, conversion)
    assert eps == pytest.approx(recomputed, rel=1e-14)
    grid_eps, _ = epsilon_from_rdp(acc.orders, acc.rdp(), 1e-6, conversion)
    assert eps <= grid_eps


def test_rdp_curve_is_the_sum_of_the_ledger():
    acc = RdpAccountant().compose(Gaussian(2.0), 3).compose(Laplace(4.0))
    orders = [1.5, 2.0, 10.0, 100.0]
    a = np.asarray(orders)
    expected = 3 * a / (2 * 2.0**2) + np.log(
        a / (2 * a - 1) * np.exp((a - 1) / 4.0) + (a - 1) / (2 * a - 1) * np.exp(-a / 4.0)
    ) / (a - 1)  # Mironov 2017, Props. 6 and 7
    np.testing.assert_allclose(acc.rdp(orders), expected, rtol=1e-13)
    np.testing.assert_allclose(acc.rdp(acc.orders), acc.rdp(), rtol=1e-15)


def test_pure_noise_and_zero_rate_are_free():
    acc = RdpAccountant().compose(Gaussian(math.inf), 10).compose(PoissonSampled(0.0, Gaussian(0.1)), 10)
    assert acc.get_epsilon(1e-9) == 0.0
