"""PLD accountant: certified two-sided bounds against closed forms and the anchor libraries."""

import math
import warnings

import mpmath
import numpy as np
import pytest
from scipy import optimize
from scipy.stats import norm

from metadp.accounting import (Composed, FixedSizeSampled, Gaussian, Laplace, NonPrivate, NoOp, PoissonSampled,
                               RdpAccountant, SelfComposed, UnsupportedEventError)
from metadp.accounting._pld_bounds import _bounds
from metadp.accounting.pld import PldAccountant, event_pairs


def gaussian_epsilon(mu: float, delta: float, high: float = 100.0) -> float:
    """Exact epsilon of mu-GDP at delta: delta(eps) = Phi(-eps/mu + mu/2) - e^eps Phi(-eps/mu - mu/2)
    (Dong, Roth & Su 2019, Cor. 2.13; Balle & Wang 2018 for the Gaussian mechanism, mu = 1/z)."""
    def gap(eps):  # in logs: e^eps overflows where Phi underflows at large mu
        a, b = norm.logcdf(-eps / mu + mu / 2), eps + norm.logcdf(-eps / mu - mu / 2)
        return a + math.log1p(-math.exp(min(b - a, 0.0))) - math.log(delta)
    return optimize.brentq(gap, 0.0, high, xtol=1e-14, rtol=1e-15)


@pytest.mark.parametrize("z, steps, delta", [(1.0, 1, 1e-5), (10.0, 100, 1e-5), (2.0, 7, 1e-8), (0.5, 3, 1e-3)])
def test_gaussian_composition_matches_gdp_closed_form(z, steps, delta):
    # T Gaussians with multiplier z compose to mu = sqrt(T)/z GDP exactly: the accountant uses that
    # closed form (certified to round-off), and its lattice path brackets it too.
    exact = gaussian_epsilon(math.sqrt(steps) / z, delta)
    r = PldAccountant().compose(Gaussian(z), steps).get_epsilon_bounds(delta)
    assert r.epsilon_lower <= exact <= r.epsilon_upper <= exact * (1 + 1e-12) + 1e-15
    lattice = _bounds([(event_pairs(Gaussian(z), "add_remove")[0][0], steps)], delta, 2e-5, 1 << 22, 2 << 30)
    assert lattice.epsilon_lower <= exact <= lattice.epsilon_upper
    # 1e-4 absolute up to epsilon 1, relative above (seen: 2.7e-4 at epsilon 7.9, i.e. 3.4e-5 relative).
    tolerance = 1e-4 * max(1.0, exact)
    assert lattice.epsilon_upper - exact <= tolerance and exact - lattice.epsilon_lower <= tolerance


# dp-accounting PLD (value_discretization_interval 1e-4) and prv-accountant (eps_error 0.01,
# delta_error delta/1000) run on this machine, 2026-11-21: (dp-accounting epsilon, prv lower bound).
ANCHORS = [
    ((0.004, 1.0, 250, 1e-6), (0.49827, 0.48821)),      # default DP-MAML plan
    ((0.004, 2.0, 250, 1e-6), (0.13352, 0.12353)),
    ((0.004, 3.0, 250, 1e-6), (0.08080, 0.07082)),
    ((0.5, 2.0, 1000, 1e-6), (71.35805, 71.34630)),
    ((1.0, 10.0, 100, 1e-6), (4.88655, 4.87635)),     # no sampling
    ((256 / 60000, 1.1, 14062, 1e-5), (2.38169, 2.37146)),  # DP-SGD
]


@pytest.mark.parametrize("plan, anchors", ANCHORS, ids=lambda x: str(x))
def test_pld_bounds_against_anchors(plan, anchors):
    q, z, steps, delta = plan
    dp_accounting, prv_lower = anchors
    event = Gaussian(z) if q == 1.0 else PoissonSampled(q, Gaussian(z))
    r = PldAccountant().compose(event, steps).get_epsilon_bounds(delta)
    assert r.epsilon_upper <= dp_accounting * 1.005 + 1e-5  # the anchors are rounded to 1e-5
    assert r.epsilon_upper >= prv_lower
    # dp-accounting's connect-the-dots estimate is pessimistic, so it is at least the true epsilon,
    # which is at least the certified lower bound (metadp's upper may be below dp-accounting's: finer grid)
    assert r.epsilon_lower <= dp_accounting + 1e-5
    assert r.epsilon_upper - r.epsilon_lower <= 0.01 * r.epsilon_upper


def test_pld_never_above_rdp_and_lower_below_upper():
    for event, steps, delta in [(PoissonSampled(0.01, Gaussian(0.8)), 50, 1e-5), (Gaussian(3.0), 4, 1e-7)]:
        rdp = RdpAccountant().compose(event, steps).get_epsilon(delta)
        r = PldAccountant().compose(event, steps).get_epsilon_bounds(delta)
        assert 0 <= r.epsilon_lower <= r.epsilon_upper <= rdp


@pytest.mark.parametrize("z, steps, delta", [(2.0, 100, 1e-15), (200.0, 10**6, 1e-12), (8.0, 10**6, 1e-12)])
def test_tiny_delta_gaussian_lattice_brackets_the_closed_form(z, steps, delta):
    # Far below the FFT's absolute round-off (~1e-16 of the largest mass): the tilted composition keeps
    # the round-off relative to the masses that decide delta, and its bound is charged, not estimated.
    # (The accountant itself uses the closed form for Gaussians; the lattice path is what other plans use.)
    exact = gaussian_epsilon(math.sqrt(steps) / z, delta, high=1e5)
    r = _bounds([(event_pairs(Gaussian(z), "add_remove")[0][0], steps)], delta, 5e-3, 1 << 22, 2 << 30)
    assert r.epsilon_lower <= exact <= r.epsilon_upper <= exact * (1 + 5e-3)


def test_tiny_delta_is_certified_below_the_rdp_bound():
    # delta 1e-15 used to be beyond the PLD (float allowance and FFT noise): the RDP bound was reported
    event = PoissonSampled(0.004, Gaussian(1.0))
    r = PldAccountant().compose(event, 250).get_epsilon_bounds(1e-15)
    assert 0 < r.epsilon_lower <= r.epsilon_upper < RdpAccountant().compose(event, 250).get_epsilon(1e-15)
    assert r.epsilon_upper - r.epsilon_lower <= 0.005 * r.epsilon_upper
    assert not any("RDP bound is reported" in note for note in r.notes)


def test_composition_order_and_grouping_do_not_matter():
    a, b = PoissonSampled(0.02, Gaussian(1.0)), Gaussian(4.0)
    first = PldAccountant().compose(Composed([a, b]), 20).get_epsilon_bounds(1e-6)
    second = PldAccountant().compose(b, 20).compose(SelfComposed(a, 20)).get_epsilon_bounds(1e-6)
    assert first.epsilon_upper == pytest.approx(second.epsilon_upper, rel=1e-9)
    assert max(first.epsilon_lower, second.epsilon_lower) <= min(first.epsilon_upper, second.epsilon_upper)


def test_degenerate_and_unsupported_events():
    assert PldAccountant().get_epsilon(1e-5) == 0.0
    assert PldAccountant().compose(NoOp(), 5).get_epsilon(1e-5) == 0.0
    assert PldAccountant().compose(NonPrivate()).get_epsilon(1e-5) == math.inf
    acc = PldAccountant()  # fixed-size sampling has a pair under substitution only (metadp.mechanisms.wor)
    with pytest.raises(UnsupportedEventError, match="PLD accountant cannot handle fixed-size.*substitute"):
        acc.compose(FixedSizeSampled(10, 100, Gaussian(1.0)))
    assert acc.ledger == () and acc.get_epsilon(1e-5) == 0.0


def test_get_delta_is_consistent_with_get_epsilon():
    acc = PldAccountant().compose(PoissonSampled(0.004, Gaussian(1.0)), 250)
    eps = acc.get_epsilon(1e-6)
    d = acc.get_delta(eps)
    assert 0.999e-6 <= d <= 1e-6 * 1.001  # both read off certified lattice sums
    # round trip: the two queries refine their lattices to different certified intervals (epsilon's to
    # its tolerance, 5e-3; delta's likewise), so they agree to the width of epsilon's interval (the
    # certified lower bound at 1e-6 is 2e-4 below the upper), not bit for bit (seen: 5.5e-5 relative)
    r = acc.get_epsilon_bounds(1e-6)
    assert r.epsilon_lower <= acc.get_epsilon(d) <= eps + (r.epsilon_upper - r.epsilon_lower)


# dp-accounting PLD (value_discretization_interval 1e-4) on this machine, 2026-11-21.
@pytest.mark.parametrize("scale, steps, delta, dp_accounting", [(2.0, 10, 1e-5, 4.98996), (10.0, 100, 1e-6, 4.69267)])
def test_laplace_composition(scale, steps, delta, dp_accounting):
    r = PldAccountant().compose(Laplace(scale), steps).get_epsilon_bounds(delta)
    assert r.epsilon_lower <= dp_accounting + 1e-5 and dp_accounting <= r.epsilon_upper * 1.005
    assert r.epsilon_upper <= steps / scale  # never worse than pure-DP composition (Dwork & Roth, Thm 3.16)
    assert r.epsilon_upper - r.epsilon_lower <= 0.01 * r.epsilon_upper


@pytest.mark.parametrize("event, steps, delta", [
    (PoissonSampled(0.004, Gaussian(1.0)), 250, 1e-6),
    (Gaussian(5.0), 40, 1e-5),
])
def test_trajectory_is_a_valid_schedule(event, steps, delta):
    acc = PldAccountant().compose(event, steps)
    counts = [1, 2, 7, steps // 3, steps]
    trajectory = acc.trajectory(counts, delta)
    assert np.all(np.diff(trajectory) >= 0)
    for t, value in zip(counts, trajectory):
        fresh = PldAccountant().compose(event, t).get_epsilon_bounds(delta)
        # a valid upper bound (at or above the certified lower bound), never looser than RDP, and close
        # to the fresh upper bound (the trajectory shares one lattice, sized for the finest need)
        assert fresh.epsilon_lower <= value <= RdpAccountant().compose(event, t).get_epsilon(delta)
        assert value <= fresh.epsilon_upper + 0.01 * fresh.epsilon_upper


def test_trajectory_on_top_of_the_ledger_and_with_a_step_event():
    base, step = Gaussian(3.0), PoissonSampled(0.01, Gaussian(1.0))
    acc = PldAccountant().compose(base, 2)
    via_step = acc.trajectory([5, 50], 1e-6, step_event=step)
    direct = [PldAccountant().compose(base, 2).compose(step, t).get_epsilon_bounds(1e-6) for t in (5, 50)]
    for value, fresh in zip(via_step, direct):
        assert fresh.epsilon_lower <= value <= fresh.epsilon_upper * 1.01
    with pytest.raises(ValueError, match="trajectory needs"):
        PldAccountant().trajectory([1], 1e-6)


def test_trajectory_asks_rdp_only_where_it_can_win(monkeypatch):
    # the lattice met the tolerance at the longest count: the RDP trajectory (it was 2/3 of a plan
    # plot's PLD time, and above PLD at every count) is not computed at all
    step, counts = PoissonSampled(0.5, Gaussian(0.6)), [1, 3000]
    rdp = RdpAccountant().trajectory(counts, 1e-7, step_event=step)

    def refused(*args, **kwargs):
        raise AssertionError("RDP trajectory computed")

    tight = PldAccountant().trajectory(counts, 1e-7, step_event=step)
    assert np.all(tight < rdp)  # 8.69 < 9.24, 1645.9 < 1675.1
    monkeypatch.setattr(RdpAccountant, "trajectory", refused)
    assert np.array_equal(PldAccountant().trajectory(counts, 1e-7, step_event=step), tight)
    monkeypatch.undo()
    # a point budget too small for the tolerance: every count is capped by RDP, which wins at the last
    # (at one step RDP's 9.24 is above the coarse PLD bound 9.04; at 3000 steps it is below it)
    coarse = PldAccountant(max_fft_size=1024).trajectory(counts, 1e-7, step_event=step)
    assert coarse[0] < rdp[0] and coarse[1] == rdp[1]


@pytest.mark.slow
def test_long_composition_acceptance_plan():
    # Issue 3 plan: rate 1e-4, noise 0.8, 1e6 steps, delta 1e-7. Anchors run on this machine 2026-11-21:
    # dp-accounting PLD (1e-4) 0.93302 (above prv's certified upper bound 0.92275); prv lower 0.90267.
    r = PldAccountant().compose(PoissonSampled(1e-4, Gaussian(0.8)), 10**6).get_epsilon_bounds(1e-7)
    assert 0.90267 <= r.epsilon_upper <= 0.93302 * 1.005
    assert r.epsilon_upper <= 0.92275 + 1e-5  # below prv-accountant's own certified upper bound
    assert r.epsilon_upper - r.epsilon_lower <= 0.01 * r.epsilon_upper


@pytest.mark.parametrize("z, steps", [(2.0, 4), (1.0, 1), (5.0, 100)])
def test_get_delta_is_an_upper_bound_close_to_the_gdp_closed_form(z, steps):
    # T Gaussians compose to mu = sqrt(T)/z GDP: delta(eps) = Phi(-eps/mu + mu/2) - e^eps Phi(-eps/mu - mu/2)
    mu = math.sqrt(steps) / z
    acc = PldAccountant().compose(Gaussian(z), steps)
    for eps in (0.0, 0.5, 1.0, 3.0):
        exact = norm.cdf(-eps / mu + mu / 2) - math.exp(eps) * norm.cdf(-eps / mu - mu / 2)
        got = acc.get_delta(eps)
        assert exact <= got <= exact * (1 + 1e-3) + 1e-12, (eps, got, exact)


def test_get_delta_small_deltas_and_degenerate_cases():
    acc = PldAccountant().compose(PoissonSampled(0.004, Gaussian(1.0)), 250)
    eps = acc.get_epsilon(1e-9)
    d = acc.get_delta(eps)
    assert 0.5e-9 <= d <= 1e-9 * 1.001  # the truncation charged is sized to the answer, not to the RDP delta
    assert PldAccountant().get_delta(0.5) == 0.0
    assert PldAccountant().compose(NonPrivate()).get_delta(10.0) == 1.0


@mpmath.workdps(50)
def _mp_gaussian_epsilon(mu: float, delta: float) -> float:
    """epsilon(delta) of mu-GDP at 50 digits (mpmath): the closed form's root, for deltas where the
    float helper above cannot be trusted."""
    mu, delta = mpmath.mpf(mu), mpmath.mpf(delta)
    f = lambda e: mpmath.ncdf(mu / 2 - e / mu) - mpmath.exp(e) * mpmath.ncdf(-mu / 2 - e / mu) - delta
    lo, hi = mpmath.mpf(0), mpmath.mpf(1)
    while f(hi) > 0:
        hi *= 2
    return float(mpmath.findroot(f, (lo, hi), solver="bisect", tol=mpmath.mpf(10) ** -40))


@pytest.mark.parametrize("z, steps, delta", [(20.0, 1, 2.6e-81), (50.0, 1, 1e-100), (20.0, 1, 1e-200),
                                              (10.0, 100, 1e-6)])
def test_gdp_closed_form_at_tiny_deltas_brackets_mpmath(z, steps, delta):
    # The closed form's bisection starts from a bracket around an estimate, so it only evaluates
    # Phi near the answer: at tiny deltas with small mu it no longer steps where Phi underflows
    # (which sent these plans to the lattice); both bounds stay certified, within 1e-10 of each other.
    exact = _mp_gaussian_epsilon(math.sqrt(steps) / z, delta)
    r = PldAccountant().compose(Gaussian(z), steps).get_epsilon_bounds(delta)
    assert r.fft_size == 0 and math.isnan(r.h)  # the closed form, not the lattice
    assert r.epsilon_lower <= exact <= r.epsilon_upper <= exact * (1 + 1e-10)


@pytest.mark.parametrize("z", [0.00847457627118644, 0.02])
def test_a_gaussian_with_almost_no_noise_gets_a_valid_bound_not_a_crash(z):
    # z ~ 0.01 (mu ~ 100): the closed form's second CDF underflows, the lattice keeps no lower-bound mass
    # on one side; this raised numpy's "zero-size array" ValueError (dp-agrlr's record-vs-server view)
    result = PldAccountant().compose(Gaussian(z)).get_epsilon_bounds(1e-5)
    mu = mpmath.mpf(1) / z

    def delta_of(eps):  # mu-GDP hockey-stick (Dong, Roth & Su, Cor. 2.13), at 50 digits
        with mpmath.workdps(50):
            eps = mpmath.mpf(eps)
            return mpmath.ncdf(-eps / mu + mu / 2) - mpmath.exp(eps) * mpmath.ncdf(-eps / mu - mu / 2)

    assert 0.0 <= result.epsilon_lower <= result.epsilon_upper < math.inf
    assert delta_of(result.epsilon_upper) <= 1e-5  # a valid upper bound
    assert delta_of(0.995 * result.epsilon_upper) > 1e-5  # and within 0.5% of the exact epsilon


def test_tiny_noise_bounds_without_overflow_warnings():
    # z = 0.001 at rate 0.5: the error term's (1 - e^(x - s h))_+ met arguments beyond 709 (numpy's expm1
    # overflowed to inf, then clipped to 0: the right value, with a RuntimeWarning); the bound is the
    # same and no warning is raised
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        r = PldAccountant().compose(PoissonSampled(0.5, Gaussian(0.001)), 1).get_epsilon_bounds(1e-5)
    assert 0.0 <= r.epsilon_lower <= r.epsilon_upper
