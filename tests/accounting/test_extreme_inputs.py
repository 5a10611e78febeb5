"""Extreme but finite inputs give a certified bound (possibly infinity) or a ValueError naming the
parameter, never a numpy overflow, NaN or an unrelated error (issue 13).

pytest turns RuntimeWarnings raised in metadp into errors (pyproject.toml), so every case here also
checks that no overflow/invalid-value warning is emitted on the way.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from metadp.accounting import (
    FixedSizeSampled,
    Gaussian,
    Laplace,
    PoissonSampled,
    RdpAccountant,
    SelfComposed,
    UnsupportedEventError,
)
from metadp.accounting.pld import PldAccountant
from metadp.core.rdp import gaussian_rdp, laplace_rdp, poisson_gaussian_rdp, wor_gaussian_rdp

ORDERS = [1.5, 2.0, 10.0, 1e4, 1e8]
MAX_COUNT = 2**53  # the documented largest count (metadp.core.events.MAX_COUNT): exact in float64


def _rdp_epsilon(event, count=1, delta=1e-6, relation="add_remove"):
    return RdpAccountant(relation).compose(event, count).get_epsilon(delta)


# -- noise multipliers at the ends of float64 ---------------------------------------------------

@pytest.mark.parametrize("curve", [
    pytest.param(lambda: gaussian_rdp(1e-300, ORDERS), id="gaussian"),
    pytest.param(lambda: poisson_gaussian_rdp(0.01, 1e-300, ORDERS), id="poisson"),
    pytest.param(lambda: wor_gaussian_rdp(0.01, 1e-300, ORDERS), id="fixed-size"),  # was ZeroDivisionError
])
def test_vanishing_noise_gives_an_infinite_rdp_curve(curve):
    # z = 1e-300: alpha / (2 z^2) = alpha * 5e599 exceeds every float, so +inf is the only honest float
    assert np.all(np.isposinf(curve()))


def test_vanishing_laplace_scale_is_bounded_by_pure_dp():
    # b = 1e-300: u**n overflowed (OverflowError). Every Renyi divergence is <= eps(inf) = 1/b.
    curve = laplace_rdp(1e-300, ORDERS)
    assert np.all(np.isfinite(curve)) and np.all(curve <= 1e300 * (1 + 1e-12)) and np.all(curve > 0)


@pytest.mark.parametrize("z", [1e5, 1e80, 1e100, 1e300])
def test_huge_noise_poisson_curve_is_below_the_gaussian_one(z):
    # The quadrature overflowed from z ~ 1e77 (rdp.py, "overflow encountered in multiply"). Sampling
    # never increases the divergence: the subsampled curve is at most alpha / (2 z^2), itself tiny.
    curve = poisson_gaussian_rdp(0.01, z, ORDERS)
    assert np.all(curve >= 0) and np.all(curve <= np.asarray(ORDERS) / (2 * z * z) * (1 + 1e-9) + 1e-300)


@pytest.mark.parametrize("event, relation", [
    pytest.param(Gaussian(1e-300), "add_remove", id="gaussian"),
    pytest.param(PoissonSampled(0.01, Gaussian(1e-300)), "add_remove", id="poisson"),
    pytest.param(FixedSizeSampled(10, 1000, Gaussian(1e-300)), "substitute", id="fixed-size"),
])
def test_vanishing_noise_certifies_infinity(event, relation):
    # the unit is sampled with probability >= 1% > delta and then released with no noise to speak of
    assert _rdp_epsilon(event, relation=relation) == math.inf


@pytest.mark.parametrize("z", [1e100, 1e300])
def test_huge_noise_certifies_zero(z):
    # TV(N(0, z^2), N(1, z^2)) <= 1/z << delta, so (0, delta)-DP holds exactly: 0 is the tight bound.
    assert _rdp_epsilon(PoissonSampled(0.01, Gaussian(z)), 10) == 0.0


# -- counts -------------------------------------------------------------------------------------

@pytest.mark.parametrize("make", [
    pytest.param(lambda: RdpAccountant().compose(Gaussian(1.0), 10**20), id="rdp-compose"),  # accepted before: beyond 2^53 now
    pytest.param(lambda: RdpAccountant().compose(Gaussian(1.0), 10**400), id="rdp-compose-1e400"),  # OverflowError
    pytest.param(lambda: PldAccountant().compose(Gaussian(1.0), 10**20), id="pld-compose"),
    pytest.param(lambda: SelfComposed(Gaussian(1.0), MAX_COUNT + 1), id="self-composed"),
    pytest.param(lambda: RdpAccountant().trajectory([10**300], 1e-6, step_event=Gaussian(1.0)), id="trajectory"),
])
def test_counts_beyond_float64_integers_are_refused(make):
    with pytest.raises(ValueError, match=r"(count|steps) must be an integer >= 0 and <= 9007199254740992"):
        make()


def test_the_largest_count_gives_a_finite_bound():
    eps = _rdp_epsilon(PoissonSampled(0.01, Gaussian(1.0)), MAX_COUNT)
    assert math.isfinite(eps) and eps > _rdp_epsilon(PoissonSampled(0.01, Gaussian(1.0)), 2**40)


def test_pld_without_a_finite_bound_reports_the_rdp_bound_and_why():
    # 1e12 releases at delta 1e-6: no finite PLD bound (the lattice that fits the memory budget is far
    # too coarse, and the FFT power's proven round-off bound grows with the count). It used to fail with "zero-size
    # array to reduction operation minimum" (from about 1e20 steps); the RDP bound is reported, and the
    # notes say which term kept the PLD bound infinite.
    step = PoissonSampled(0.01, Gaussian(1.0))
    result = PldAccountant().compose(step, 10**12).get_epsilon_bounds(1e-6)
    assert result.epsilon_lower == 0.0
    assert result.epsilon_upper == _rdp_epsilon(step, 10**12)
    assert any("RDP bound is reported" in n for n in result.notes)
    assert any(n.startswith("no finite upper bound; what keeps it infinite: ") for n in result.notes), result.notes


def test_pld_trajectory_past_the_rounding_allowance_keeps_the_rdp_bound():
    step = PoissonSampled(0.01, Gaussian(1.0))
    out = PldAccountant().trajectory([10, 10**12], 1e-6, step_event=step)
    assert out[1] == pytest.approx(_rdp_epsilon(step, 10**12), rel=5e-3)
    assert 0 < out[0] <= _rdp_epsilon(step, 10)


def test_pld_delta_past_the_rounding_allowance_is_the_rdp_delta():
    step = PoissonSampled(0.01, Gaussian(1.0))
    cap = RdpAccountant().compose(step, 10**12).get_delta(2e8)
    assert PldAccountant().compose(step, 10**12).get_delta(2e8) == cap


# -- the PLD accountant's range, and which accountant an error names (issue 14) -------------------

@pytest.mark.parametrize("event", [
    pytest.param(Gaussian(1e-300), id="gaussian-tiny"),
    pytest.param(PoissonSampled(0.01, Gaussian(1e-100)), id="poisson-tiny"),  # overflow in the lattice
    pytest.param(PoissonSampled(0.01, Gaussian(1e300)), id="poisson-huge"),  # OverflowError in the pair
    pytest.param(Laplace(1e-300), id="laplace-tiny"),
])
def test_pld_refuses_noise_outside_its_range_by_name(event):
    with pytest.raises(UnsupportedEventError, match=r"^PLD accountant cannot handle .*in \[1e-50, 1e\+50\]"):
        PldAccountant().compose(event)


def test_sampled_laplace_error_names_the_pld_accountant():
    # was: "RDP accountant cannot handle Laplace(scale 1): ..." from the PLD accountant
    with pytest.raises(UnsupportedEventError) as info:
        PldAccountant().compose(PoissonSampled(0.1, Laplace(1.0)))
    assert str(info.value).startswith("PLD accountant cannot handle Laplace(scale 1)")
    assert "RDP" not in str(info.value) and info.value.accountant == "PLD"


def test_sampled_laplace_error_names_the_rdp_accountant():
    with pytest.raises(UnsupportedEventError) as info:
        RdpAccountant().compose(PoissonSampled(0.1, Laplace(1.0)))
    assert str(info.value).startswith("RDP accountant cannot handle Laplace(scale 1)")
    assert info.value.accountant == "RDP"
