"""The EpisodicSampled and Group events under the PLD and RDP accountants.

Oracles and provenance:
* Group(k, Gaussian(z)) over T steps is mu-GDP with mu = sqrt(T) k / z exactly (sensitivity k C; Dong,
  Roth & Su 2019, Cor. 2.13): delta(eps) = Phi(-eps/mu + mu/2) - e^eps Phi(-eps/mu - mu/2), inverted by
  brentq. Under RDP the group is Gaussian(z / k) (Mironov 2017, arXiv:1702.07476, Prop. 7): identical.
* Group(k, PoissonSampled(q, Gaussian(z))) is the binomial mixture of shifts, which is dp-accounting 0.6's
  ``MixtureOfGaussiansDpEvent(z, [0..k], Bin(.; k, q))`` (Schuchardt et al. 2024, arXiv:2403.04867). Its
  PLD accountant (connect-the-dots, value_discretization_interval 1e-3) was run on this machine for
  q = 0.01, z = 1, T = 50, delta 1e-5: k = 2..8 gave 1.24722, 1.92063, 2.59636, 3.27403, 3.95442,
  4.63846, 5.32702, each above metadp's certified lower bound and within 2e-5 of its upper bound (above
  it at k <= 4: connect-the-dots is pessimistic); the live cross-check allows 1% (1.2-3.2 s per k).
* EpisodicSampled(1, 1, q, Gaussian(z), shift=1) is the Poisson-subsampled Gaussian (J = 1 surely,
  K ~ Bernoulli(q), shift 1): intervals overlap, uppers within 0.5% (observed 1.4e-7).
* DP-MAML record level (5 of 1,150 classes, 2 of 20 drawings, 1,600 episodes per step, z = 1, 250
  steps, delta 1e-6), measured on this machine by the lead and re-measured here: revealed-J pair
  [848.33, 849.76]; hidden-binomial K ~ Bin(1600, 1/2300) pair [830.63, 831.73]; dp-accounting's
  MixtureOfGaussiansDpEvent(1, [0, 2, 4, ...], Bin(k; 1600, 1/2300)) 832.556 at discretisation 1e-3
  (37.6 s), 832.560 at 1e-2 (5.2 s; 4.9 s here).
"""

from __future__ import annotations

import dataclasses
import functools
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import optimize, stats
from scipy.stats import norm

from metadp.accounting import (EpisodicSampled, Gaussian, Group, Laplace, NoOp, PoissonSampled, RdpAccountant,
                               SelfComposed, UnsupportedEventError)
from metadp.accounting import pld
from metadp.accounting.pld import PldAccountant
from metadp.mechanisms.episodic import hidden_binomial_pairs
from _grid import cover


def gaussian_epsilon(mu: float, delta: float) -> float:
    """Exact epsilon of mu-GDP at delta (Dong, Roth & Su 2019, Cor. 2.13)."""
    def gap(eps):
        return norm.cdf(-eps / mu + mu / 2) - math.exp(eps) * norm.cdf(-eps / mu - mu / 2) - delta
    return optimize.brentq(gap, 0.0, 200.0, xtol=1e-14)


def bounds(event, steps, delta, **kwargs):
    return PldAccountant(**kwargs).compose(event, steps).get_epsilon_bounds(delta)


# -- Group ------------------------------------------------------------------------------------------------

Z, T, DELTA = 4.0, 10, 1e-5


@pytest.mark.parametrize("k", range(2, 9))
def test_group_gaussian_pld_brackets_the_gdp_closed_form(k):
    exact = gaussian_epsilon(math.sqrt(T) * k / Z, DELTA)
    r = bounds(Group(k, Gaussian(Z)), T, DELTA)
    assert r.epsilon_lower <= exact <= r.epsilon_upper
    assert r.epsilon_upper - r.epsilon_lower <= 5e-3 * r.epsilon_upper  # the default tolerance was reached


@pytest.mark.parametrize("k", range(1, 9))
@pytest.mark.parametrize("relation", ["add_remove", "substitute"])
def test_group_gaussian_rdp_is_the_gaussian_at_z_over_k(k, relation):
    group = RdpAccountant(relation).compose(Group(k, Gaussian(Z)), T)
    plain = RdpAccountant(relation).compose(Gaussian(Z / k), T)
    np.testing.assert_array_equal(group.rdp(), plain.rdp())
    assert group.get_epsilon(DELTA) == plain.get_epsilon(DELTA)


def test_group_of_one_and_group_of_compositions():
    e = PoissonSampled(0.02, Gaussian(1.0))
    assert bounds(Group(1, e), 30, 1e-6, max_seconds=math.inf) == bounds(e, 30, 1e-6, max_seconds=math.inf)
    assert RdpAccountant().compose(Group(1, e), 30).get_epsilon(1e-6) == RdpAccountant().compose(e, 30).get_epsilon(1e-6)
    # a group's guarantee composes step by step: Group(k, SelfComposed(e, n)) = Group(k, e) composed n times
    nested = bounds(Group(3, SelfComposed(e, 30)), 1, 1e-6, max_seconds=math.inf)
    flat = bounds(Group(3, e), 30, 1e-6, max_seconds=math.inf)
    assert nested.epsilon_upper == pytest.approx(flat.epsilon_upper, rel=1e-9)
    rdp_nested = RdpAccountant().compose(Group(3, SelfComposed(e, 30))).get_epsilon(1e-6)
    assert rdp_nested == pytest.approx(RdpAccountant().compose(Group(3, e), 30).get_epsilon(1e-6), rel=1e-9)


Q, ZP, TP, DP = 0.01, 1.0, 50, 1e-5
DP_ACCOUNTING_GROUP = {2: 1.2472158388088415, 3: 1.9206259774840428, 4: 2.5963638916035894, 5: 3.2740316496332627,
                       6: 3.954418214482389, 7: 4.638463511094008, 8: 5.3270154306056545}  # run 2026, see docstring


def test_group_poisson_pld_grows_with_k_and_stays_below_the_rdp_group_rule():
    single = bounds(PoissonSampled(Q, Gaussian(ZP)), TP, DP)
    previous = single
    for k in range(2, 9):
        event = Group(k, PoissonSampled(Q, Gaussian(ZP)))
        r = bounds(event, TP, DP)
        assert r.epsilon_upper >= single.epsilon_upper
        assert r.epsilon_lower > previous.epsilon_upper  # strictly increasing, beyond both error bars
        # Mironov's group rule (3^c eps(2^c beta)) is valid but loose: 2.9 to 4179 here
        assert r.epsilon_upper <= RdpAccountant().compose(event, TP).get_epsilon(DP)
        # the pinned dp-accounting values (pessimistic: >= the truth >= our lower bound) sit within 1e-4 of our
        # upper bound (observed 1.7e-5 above it at k = 2, 4.7e-6 below it at k = 8)
        assert r.epsilon_lower <= DP_ACCOUNTING_GROUP[k]
        assert DP_ACCOUNTING_GROUP[k] == pytest.approx(r.epsilon_upper, rel=1e-4)
        previous = r


def _dp_accounting_group(k):
    pytest.importorskip("dp_accounting")
    from dp_accounting import dp_event as de
    from dp_accounting.pld import pld_privacy_accountant as dp_pld

    weights = stats.binom.pmf(np.arange(k + 1), k, Q)
    acc = dp_pld.PLDAccountant(value_discretization_interval=1e-3)
    acc.compose(de.MixtureOfGaussiansDpEvent(ZP, [float(j) for j in range(k + 1)], list(weights)), TP)
    theirs = acc.get_epsilon(DP)
    r = bounds(Group(k, PoissonSampled(Q, Gaussian(ZP))), TP, DP)
    assert r.epsilon_upper == pytest.approx(theirs, rel=0.01)
    assert r.epsilon_lower <= theirs * (1 + 1e-5)  # theirs is pessimistic (connect-the-dots), so >= the truth


# k = 2 live in the default run (5 s); k = 8 (13 s) under -m slow with the sweep. The pinned values of
# every k are checked in the default run by test_group_poisson_pld_grows_with_k_and_stays_below_the_rdp_group_rule.
@pytest.mark.parametrize("k", cover([2, 8], default=[2]))
def test_group_poisson_matches_dp_accounting_mixture_of_gaussians(k):
    _dp_accounting_group(k)


@pytest.mark.slow
@pytest.mark.parametrize("k", [3, 4, 5, 6, 7])
def test_group_poisson_matches_dp_accounting_sweep(k):
    _dp_accounting_group(k)


def test_group_unsupported_and_invalid():
    # no exact group pair for Laplace: PLD refuses (before any state change), RDP uses the generic rule
    acc = PldAccountant()
    with pytest.raises(UnsupportedEventError, match="PLD accountant"):
        acc.compose(Group(2, Laplace(1.0)))
    assert acc.ledger == ()
    assert math.isfinite(RdpAccountant().compose(Group(2, Laplace(1.0))).get_epsilon(1e-6))
    # Poisson sampling is analysed under add/remove only, grouped or not
    for accountant in (PldAccountant, RdpAccountant):
        with pytest.raises(UnsupportedEventError):
            accountant("substitute").compose(Group(2, PoissonSampled(0.1, Gaussian(1.0))))
    for size in (0, -1, 1.5, True):
        with pytest.raises(ValueError, match="size"):
            Group(size, Gaussian(1.0))
    with pytest.raises(ValueError, match="inner"):
        Group(2, 1.0)


# -- EpisodicSampled ----------------------------------------------------------------------------------------


def test_one_full_rate_episode_is_the_poisson_subsampled_gaussian():
    q, z = 0.01, 1.0
    episodic = bounds(EpisodicSampled(1, 1.0, q, Gaussian(z), shift=1.0), 50, 1e-5)
    poisson = bounds(PoissonSampled(q, Gaussian(z)), 50, 1e-5)
    assert max(episodic.epsilon_lower, poisson.epsilon_lower) <= min(episodic.epsilon_upper, poisson.epsilon_upper)
    assert episodic.epsilon_upper == pytest.approx(poisson.epsilon_upper, rel=5e-3)


def test_full_unit_rate_is_the_hidden_binomial_pair():
    # P_U = 1: J = L surely, so EpisodicSampled is the hidden binomial pair K ~ Bin(L, r) (shift 2)
    revealed = bounds(EpisodicSampled(1600, 1.0, 1 / 2300, Gaussian(1.0)), 250, 1e-6)
    add, remove, _ = hidden_binomial_pairs(1600, 1 / 2300, 1.0)
    hidden = pld._bounds([((add, remove), 250)], 1e-6, 5e-3, 1 << 22, 2 << 30, 4.0)
    assert max(revealed.epsilon_lower, hidden.epsilon_lower) <= min(revealed.epsilon_upper, hidden.epsilon_upper)


BASE = dict(episodes=10, unit_rate=0.3, within_rate=0.2, inner=Gaussian(2.0), shift=2.0)


@functools.lru_cache(maxsize=None)
def _base_bounds():
    """The bounds of EpisodicSampled(**BASE), 20 steps, delta 1e-5: computed once per process."""
    return bounds(EpisodicSampled(**BASE), 20, 1e-5)


@pytest.mark.parametrize("field, larger", [("episodes", 20), ("unit_rate", 0.6), ("within_rate", 0.4),
                                           ("shift", 3.0), ("inner", Gaussian(1.5))])
def test_epsilon_increases_with_each_parameter(field, larger):
    # Observed at 20 steps, delta 1e-5: base [34.87, 34.91]; episodes 20 -> 78.1, unit rate 0.6 -> 71.6,
    # within rate 0.4 -> 76.5 (more noise, z = 3: 16.7). Strict beyond both error bars.
    small = _base_bounds()
    large = bounds(EpisodicSampled(**(BASE | {field: larger})), 20, 1e-5)
    assert small.epsilon_upper < large.epsilon_lower


def _more_noise_never_increases_epsilon(episodes, unit_rate, within_rate, z, more):
    # certified form: lower(more noise) <= true(more noise) <= true(less noise) <= upper(less noise)
    noisy = bounds(EpisodicSampled(episodes, unit_rate, within_rate, Gaussian(z * more)), 10, 1e-5)
    plain = bounds(EpisodicSampled(episodes, unit_rate, within_rate, Gaussian(z)), 10, 1e-5)
    assert noisy.epsilon_lower <= plain.epsilon_upper


_EPISODIC_PLANS = dict(episodes=st.integers(1, 12), unit_rate=st.floats(0.05, 1.0), within_rate=st.floats(0.05, 1.0),
                       z=st.floats(1.0, 4.0), more=st.floats(1.0, 2.0))
# A few examples in the default run, many in the slow sweep (the same property).
test_more_noise_never_increases_epsilon = settings(max_examples=4, deadline=None, derandomize=True)(
    given(**_EPISODIC_PLANS)(_more_noise_never_increases_epsilon))
test_more_noise_sweep = pytest.mark.slow(settings(max_examples=60, deadline=None, derandomize=True)(
    given(**_EPISODIC_PLANS)(_more_noise_never_increases_epsilon)))


def test_compose_n_equals_n_single_compositions():
    # no time budget (max_seconds = inf): both runs refine the same way, whatever the machine's speed
    e = EpisodicSampled(**(BASE | {"episodes": 4}))
    once = PldAccountant(max_seconds=math.inf).compose(e, 3).get_epsilon_bounds(1e-5)
    single = PldAccountant(max_seconds=math.inf)
    for _ in range(3):
        single.compose(e)
    apart = single.get_epsilon_bounds(1e-5)
    assert apart.epsilon_upper == pytest.approx(once.epsilon_upper, rel=1e-9)  # observed 1.0e-12
    assert apart.epsilon_lower == pytest.approx(once.epsilon_lower, rel=1e-9)
    assert len(single.ledger) == 3 and single.ledger[0].event == e


def test_rdp_takes_episodic_events_and_caps_pld_only_where_it_wins():
    e = EpisodicSampled(**BASE)
    rdp = RdpAccountant().compose(e, 20)
    assert rdp.ledger[0].event == e and 0.0 <= rdp.delta_charge < 1e-25
    acc = PldAccountant().compose(PoissonSampled(0.01, Gaussian(1.0)), 5).compose(e, 20)
    r = acc.get_epsilon_bounds(1e-5)
    assert 0 < r.epsilon_lower <= r.epsilon_upper < math.inf
    # the RDP bound is valid (above PLD's certified lower bound) but looser here: the PLD bound stands
    assert RdpAccountant().compose(PoissonSampled(0.01, Gaussian(1.0)), 5).compose(e, 20).get_epsilon(1e-5) \
        >= r.epsilon_lower
    assert not any("RDP bound" in note for note in r.notes)
    assert acc.trajectory([20], 1e-5)[-1] == pytest.approx(r.epsilon_upper, rel=5e-3)
    # delta 1e-15 is certified by the tilted PLD; one episode whose unit is always selected is the
    # Poisson pair, so the two intervals meet
    tiny = bounds(EpisodicSampled(1, 1.0, 0.01, Gaussian(1.0), shift=1.0), 50, 1e-15)
    same = bounds(PoissonSampled(0.01, Gaussian(1.0)), 50, 1e-15)
    assert not any("RDP" in note for note in same.notes)
    assert 0 < max(tiny.epsilon_lower, same.epsilon_lower) <= min(tiny.epsilon_upper, same.epsilon_upper)
    # where no PLD bound is finite (delta 1e-300), the episodic event now falls back on its RDP bound,
    # which for one component is the subsampled Gaussian's (orders capped at 64: a little above it)
    none = bounds(EpisodicSampled(1, 1.0, 0.01, Gaussian(1.0), shift=1.0), 50, 1e-300)
    poisson = RdpAccountant().compose(PoissonSampled(0.01, Gaussian(1.0)), 50).get_epsilon(1e-300)
    assert poisson <= none.epsilon_upper <= 1.01 * poisson
    assert any("the RDP bound is reported" in note for note in none.notes)


def test_substitute_relation_is_refused():
    e = EpisodicSampled(**BASE)
    for accountant in (PldAccountant, RdpAccountant):
        acc = accountant("substitute")
        with pytest.raises(UnsupportedEventError):
            acc.compose(e)
        assert acc.ledger == ()
    with pytest.raises(UnsupportedEventError, match="add_remove"):
        PldAccountant("substitute").compose(e)


def test_degenerate_episodic_events_cost_nothing():
    for e in [EpisodicSampled(5, 0.0, 0.5, Gaussian(1.0)), EpisodicSampled(5, 0.5, 0.0, Gaussian(1.0)),
              EpisodicSampled(5, 0.5, 0.5, Gaussian(math.inf))]:
        r = bounds(e, 100, 1e-6)
        assert (r.epsilon_lower, r.epsilon_upper) == (0.0, 0.0)


def test_episodic_event_fields():
    e = EpisodicSampled(3, 0.25, 0.5, Gaussian(1.0))
    assert e.shift == 2.0 and e.inclusion == 0.125
    assert isinstance(e.episodes, int) and isinstance(e.unit_rate, float)
    assert EpisodicSampled(3.0, 1, 1, Gaussian(1.0)).episodes == 3  # integral floats accepted, as counts elsewhere
    with pytest.raises(dataclasses.FrozenInstanceError):
        e.shift = 1.0
    assert "episodic sampling (3 episodes" in e.describe()


@pytest.mark.parametrize("kwargs, name", [
    (dict(episodes=0), "episodes"), (dict(episodes=2.5), "episodes"),
    (dict(unit_rate=-0.1), "unit_rate"), (dict(unit_rate=1.1), "unit_rate"), (dict(unit_rate=math.nan), "unit_rate"),
    (dict(within_rate=1.5), "within_rate"), (dict(within_rate=-1.0), "within_rate"),
    (dict(inner=Laplace(1.0)), "inner"), (dict(inner=PoissonSampled(0.1, Gaussian(1.0))), "inner"),
    (dict(inner=NoOp()), "inner"), (dict(inner=1.0), "inner"),
    (dict(shift=0.0), "shift"), (dict(shift=-1.0), "shift"), (dict(shift=math.inf), "shift"),
])
def test_episodic_rejects_bad_input(kwargs, name):
    with pytest.raises(ValueError, match=name):
        EpisodicSampled(**(BASE | kwargs))


# -- the DP-MAML record-level numbers ---------------------------------------------------------------------

DPMAML = EpisodicSampled(1600, 5 / 1150, 2 / 20, Gaussian(1.0))  # 5 of 1,150 classes, 2 of 20 drawings
HIDDEN_DP_ACCOUNTING_1E2 = 832.560  # dp-accounting, discretisation 1e-2 (lead's run; 832.5600000003 here)


def _hidden_dpmaml():
    add, remove, _ = hidden_binomial_pairs(1600, 1 / 2300, 1.0)
    return pld._bounds([((add, remove), 250)], 1e-6, 5e-3, 1 << 22, 2 << 30, math.inf)


def test_dpmaml_record_level_revealed_interval_is_pinned():
    r = bounds(DPMAML, 250, 1e-6, max_seconds=math.inf)  # no time budget: the same refinement on any machine
    # the revealed pair's composition: lead's measurement [848.3, 849.8] (observed here [848.327, 849.761]),
    # 0.2% slack either side; its lower end bounds that composition, not the mechanism (pair_lower)
    assert 848.3 * 0.998 <= r.pair_lower <= r.epsilon_upper <= 849.8 * 1.002
    assert r.epsilon_upper - r.pair_lower <= 5e-3 * r.epsilon_upper
    hidden = _hidden_dpmaml()
    # pinned: [830.63, 831.73]; revealing J costs ~2% here, and it shows beyond both error bars
    assert 830.63 * 0.998 <= hidden.epsilon_lower <= hidden.epsilon_upper <= 831.73 * 1.002
    assert r.pair_lower >= hidden.epsilon_upper
    # the mechanism's lower end is the hidden count's, which named datasets attain (taken at delta plus the
    # truncated binomial tail, 1e-18 a step; the "add" order alone, whose truncation errs on the safe side)
    assert hidden.epsilon_lower * 0.995 <= r.epsilon_lower <= hidden.epsilon_upper


@pytest.mark.slow
def test_dpmaml_hidden_binomial_against_dp_accounting():
    pytest.importorskip("dp_accounting")
    from dp_accounting import dp_event as de
    from dp_accounting.pld import pld_privacy_accountant as dp_pld

    ks = np.arange(18)  # Pr[K > 17] = 1.1e-19 for K ~ Bin(1600, 1/2300)
    acc = dp_pld.PLDAccountant(value_discretization_interval=1e-2)
    acc.compose(de.MixtureOfGaussiansDpEvent(1.0, [2.0 * k for k in ks], list(stats.binom.pmf(ks, 1600, 1 / 2300))),
                250)
    theirs = acc.get_epsilon(1e-6)
    assert theirs == pytest.approx(HIDDEN_DP_ACCOUNTING_1E2, abs=1e-3)
    ours = _hidden_dpmaml().epsilon_upper
    # connect-the-dots at 1e-2 is pessimistic: metadp's certified upper bound is within 1% below it
    assert ours == pytest.approx(theirs, rel=0.01)
    assert ours <= theirs * 1.001
