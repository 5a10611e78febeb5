"""The exact Gaussian epsilon at extreme noise: an upper bound everywhere (issue 28, class 2).

Below z ~ 0.031 (delta 1e-6) the epsilon passes 709, where e^eps overflows float64: the profile's direct
form gave inf x 0 = nan and the bisection returned 709.78 for every such z, far below the truth (5474 at
z = 0.01). The oracle is the analytic profile (Balle & Wang 2018, Thm 8) at 60 digits."""

from __future__ import annotations

import math

import mpmath
import pytest

from metadp.amplification.allocation_bounds import allocation_upper
from metadp.amplification.one_pass import gaussian_epsilon


def _profile(z: float, eps: float) -> float:
    with mpmath.workdps(60):
        z, eps = mpmath.mpf(z), mpmath.mpf(eps)
        return float(mpmath.ncdf(1 / (2 * z) - eps * z) - mpmath.exp(eps) * mpmath.ncdf(-1 / (2 * z) - eps * z))


@pytest.mark.parametrize("z", [0.005, 0.01, 0.02, 0.03, 0.031, 0.035, 0.05, 0.2, 1.0, 10.0])
@pytest.mark.parametrize("delta", [1e-6, 1e-12])
def test_gaussian_epsilon_is_the_tight_upper_bound(z, delta):
    eps = gaussian_epsilon(z, delta)
    assert math.isfinite(eps)
    assert _profile(z, eps) <= delta * (1 + 1e-9)  # an upper bound: delta(eps) at most the target
    assert _profile(z, eps * (1 - 1e-6)) > delta  # and tight: just below it the profile is above
    assert eps >= 1 / (2 * z * z) - 1e-9  # the truth is above the privacy loss's mean


def test_tiny_and_huge_noise():
    assert gaussian_epsilon(1e-60, 1e-6) == math.inf
    assert gaussian_epsilon(1e60, 1e-6) == 0.0  # total variation below delta
    assert 0.0 < gaussian_epsilon(1e60, 1e-70) <= math.sqrt(2 * math.log(1.25e70)) / 1e60


def test_random_allocation_cap_is_not_the_overflowed_value():
    # allocation_upper takes the smaller of its RDP bound and the Gaussian: with the Gaussian at its overflowed
    # 709.78 it printed a number below the truth's lower bound for z = 0.01
    assert allocation_upper(0.01, 10, 1e-6) >= 5000.0
