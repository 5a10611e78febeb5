"""The log-space adaptive Gauss-Kronrod kernel on integrals with closed forms."""

import math

import numpy as np
import pytest

from metadp.core._quadrature import integrate_log


@pytest.mark.parametrize("mu, s", [(0.0, 1.0), (3.0, 0.01), (1e4, 5.0)])
def test_gaussian_density_integrates_to_one(mu, s):
    def log_f(z):
        return -0.5 * ((z - mu) / s) ** 2 - math.log(s * math.sqrt(2 * math.pi))

    edges = np.linspace(mu - 15 * s, mu + 15 * s, 31)
    assert abs(integrate_log(log_f, edges)) < 1e-14


def test_huge_magnitudes_stay_in_log_space():
    # int_0^1 e^{1000 x} dx = (e^1000 - 1) / 1000: log = 1000 + log1p(-e^-1000) - log(1000)
    log_i = integrate_log(lambda z: 1000.0 * z, np.linspace(0.0, 1.0, 9))
    assert log_i == pytest.approx(1000.0 - math.log(1000.0), rel=1e-14)


def test_vanishing_integrand_gives_minus_inf():
    assert integrate_log(lambda z: np.full_like(z, -np.inf), [0.0, 1.0]) == -np.inf


def test_refines_a_peak_missed_by_coarse_panels():
    # A narrow bump (width 1e-3) inside one coarse panel: int = sqrt(2 pi) 1e-3 + 1 (the flat part).
    def log_f(z):
        return np.logaddexp(0.0, -0.5 * ((z - 0.3) / 1e-3) ** 2)

    exact = math.log(1.0 + math.sqrt(2 * math.pi) * 1e-3)
    assert integrate_log(log_f, [0.0, 0.25, 0.5, 1.0]) == pytest.approx(exact, rel=1e-12)
