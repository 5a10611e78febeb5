"""The round-off bounds behind the PLD accountant's lattice (issue 18): scipy's ndtr against mpmath,
and every cell mass of the Gaussian pairs within its stated error bound of the exact one."""

import math

import mpmath
import numpy as np
import pytest
from scipy import special

from metadp.mechanisms import gaussian as g
from metadp.mechanisms.gaussian import GaussianMixturePair, gaussian_pair, poisson_gaussian_pairs

U = 2.0**-53


def test_ndtr_is_within_the_measured_envelope_and_the_bound_used():
    # The envelope the bound rests on: ndtr's relative error <= u (38 + 2 t^2) where its value is normal
    # (>= 1e-300); the bound used, ndtr_error, is at least twice that everywhere.
    rng = np.random.default_rng(7)
    t = np.concatenate([np.linspace(-37.0, 8.0, 300), rng.uniform(-37.0, 8.0, 100), [-5.9, -20.0, -1.0, 0.0]])
    with mpmath.workdps(40):
        exact = np.array([float(mpmath.ncdf(mpmath.mpf(float(x)))) for x in t])
        rel = np.array([float(abs((mpmath.mpf(float(special.ndtr(x))) - mpmath.ncdf(mpmath.mpf(float(x))))
                                  / mpmath.ncdf(mpmath.mpf(float(x))))) for x in t])
    normal = exact >= 1e-300
    envelope = U * (38.0 + 2.0 * t * t)
    assert np.all(rel[normal] <= envelope[normal]), float(np.max(rel[normal] / envelope[normal]))
    assert np.all(g.ndtr_error(t) >= 2.0 * envelope)


def _exact_cells(pair, edges, under, keep):
    """Cell masses of the x-cells between the pair's own computed inverses of the edges, in mpmath."""
    x = pair._inverse_add(edges if pair.direction == "add" else -edges)
    mixture = (under == "P") == (pair.direction == "add")
    weights, shifts = (pair.weights, pair.shifts) if mixture else ([1.0], [0.0])
    with mpmath.workdps(40):
        def mass(v0, v1):  # Pr[v0 < X <= v1], each component's difference taken on its smaller side
            total = mpmath.mpf(0)
            for w, s in zip(weights, shifts):
                z0, z1 = [(mpmath.mpf(float(v)) - float(s)) / pair.sigma if math.isfinite(v) else
                          (mpmath.inf if v > 0 else -mpmath.inf) for v in (v0, v1)]
                total += mpmath.mpf(float(w)) * (mpmath.ncdf(z1) - mpmath.ncdf(z0) if z1 <= 0 else
                                                 mpmath.ncdf(-z0) - mpmath.ncdf(-z1))
            return total
        lo_x, hi_x = (x[:-1], x[1:]) if pair.direction == "add" else (x[1:], x[:-1])
        cells = {i: mass(float(lo_x[i]), float(hi_x[i])) for i in keep}
        below = mass(-math.inf, float(x[0])) if pair.direction == "add" else mass(float(x[0]), math.inf)
        above = mass(float(x[-1]), math.inf) if pair.direction == "add" else mass(-math.inf, float(x[-1]))
    return cells, below, above


@pytest.mark.parametrize("pair", [
    pytest.param(poisson_gaussian_pairs(1e-4, 1.0)[0], id="poisson-1e-4-add"),
    pytest.param(poisson_gaussian_pairs(5e-4, 1.1)[1], id="poisson-5e-4-remove"),
    pytest.param(gaussian_pair(0.5), id="gaussian-0.5"),
    pytest.param(GaussianMixturePair([0.5, 0.3, 0.2], [0.0, 2.0, 40.0], 1.0, "add"), id="mixture-far-shift"),
])
def test_cell_masses_are_within_their_error_bounds(pair):
    lo, hi = pair.loss_range(1e-24)
    h = (hi - lo) / 3000.0
    edges = np.arange(math.floor(lo / h), math.ceil(hi / h) + 1) * h
    keep = np.unique(np.concatenate([np.arange(0, 12), np.arange(len(edges) - 13, len(edges) - 1),
                                     np.linspace(0, len(edges) - 2, 25).astype(int)]))
    for under in ("P", "Q"):
        cells, below, above, err, err_below, err_above = pair.cell_masses(edges, under, with_error=True)
        exact, exact_below, exact_above = _exact_cells(pair, edges, under, keep)
        for i in keep:
            assert abs(mpmath.mpf(float(cells[i])) - exact[i]) <= err[i], (under, i, cells[i], float(exact[i]), err[i])
        assert abs(mpmath.mpf(below) - exact_below) <= err_below
        assert abs(mpmath.mpf(above) - exact_above) <= err_above
        # and the bounds are tight enough for the lattice: relative 1e-9 wherever a cell holds mass
        assert np.all(err[cells > 1e-280] <= 1e-9 * cells[cells > 1e-280])
