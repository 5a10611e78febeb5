"""Fixed-size batches under substitution, checked against the mechanism's own releases (small datasets,
every batch enumerated; ``metadp.verify.fixed_size``)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from metadp.accounting.pld import PldAccountant
from metadp.core.events import FixedSizeSampled, Gaussian, PoissonSampled
from metadp.verify import fixed_size as fs

# m = 1 of n = 4 records, z = 2 (sigma = 2C), two steps, delta = 0.1: a plan where the composed symmetrised
# pair (0.1878) is far above what the named datasets attain (0.1514)
N, M, Z, STEPS, DELTA = 4, 1, 2.0, 2, 0.1
GRID = (-1.0, -0.5, 0.0, 0.5, 1.0)


@pytest.fixture(scope="module")
def edges():
    return fs.output_grid(Z, span=1.0, points=2001)


@pytest.fixture(scope="module")
def bounds():
    return PldAccountant("substitute").compose(FixedSizeSampled(M, N, Gaussian(Z)), STEPS).get_epsilon_bounds(DELTA)


def _datasets(v, u, w):
    return [v] * (N - 1) + [u], [v] * (N - 1) + [w]


def test_named_datasets_release_the_poisson_pair(edges):
    # every batch of the datasets enumerated: one step's release is exactly the configuration's mixture
    for v, u, w in [(-1.0, -1.0, 1.0), (0.5, -1.0, 0.0), (1.0, 1.0, -1.0)]:
        d, d_prime = _datasets(v, u, w)
        p, q = fs.configuration_masses(v, u, w, M / N, Z, edges)
        assert np.max(np.abs(fs.mechanism_masses(d, M, Z, edges) - p)) < 1e-12
        assert np.max(np.abs(fs.mechanism_masses(d_prime, M, Z, edges) - q)) < 1e-12


def test_batches_of_two_shift_by_the_other_records(edges):
    # m = 2 of 4: the release is the configuration's, shifted by the other record in the batch (m - 1) v
    v, u, w = -0.5, 1.0, -1.0
    wide = fs.output_grid(Z, span=2.0, points=3001)
    got = fs.mechanism_masses([v, v, v, u], 2, Z, wide)
    shifted = wide - (2 - 1) * v
    p, _ = fs.configuration_masses(v, u, w, 2 / 4, Z, shifted)
    assert np.max(np.abs(got - p)) < 1e-12


def _best_configuration(grid, edges):
    attained = {}
    for v, u, w in itertools.product(grid, repeat=3):
        if u == w:
            continue
        d, d_prime = _datasets(v, u, w)
        p, q = fs.mechanism_masses(d, M, Z, edges), fs.mechanism_masses(d_prime, M, Z, edges)
        attained[(v, u, w)] = max(fs.exact_two_step_epsilon(p, q, DELTA), fs.exact_two_step_epsilon(q, p, DELTA))
    return max(attained, key=attained.get), max(attained.values())


@pytest.mark.parametrize("grid, points", [
    pytest.param((-1.0, 0.0, 1.0), 1001, id="3-point grid"),
    # the 5-point grid at the 3-point grid's resolution: its best configuration is the same one (2,001 points took
    # 92 s of CI for the same verdict)
    pytest.param(GRID, 1001, id="5-point grid", marks=pytest.mark.slow)])
def test_lower_end_is_attained_and_the_old_one_was_not(grid, points, bounds):
    best, top = _best_configuration(grid, fs.output_grid(Z, span=1.0, points=points))
    # the named configuration (or its mirror image / other order) is the best one-line configuration
    assert best in {(-1.0, -1.0, 1.0), (-1.0, 1.0, -1.0), (1.0, 1.0, -1.0), (1.0, -1.0, 1.0)}
    assert top == pytest.approx(0.1514, abs=5e-4)  # binned: a post-processing, a little below the truth
    # the report's lower end: at most what the named datasets attain (within the binning's resolution) ...
    assert bounds.epsilon_lower <= top * 1.005
    assert bounds.epsilon_lower >= top * 0.99
    # ... while the composed pair's own lower bound, printed as the lower end before, is above every
    # one-line configuration by 24%
    assert bounds.pair_lower > 1.2 * top
    assert bounds.pair_lower <= bounds.epsilon_upper


def test_an_adaptive_second_step_exceeds_the_static_lower_end(edges, bounds):
    # the second step's configuration chosen from the first release (a gradient that depends on the
    # iterate): above every static configuration, below the composed pair: neither end is the truth
    pairs = []
    for v, u, w in itertools.product(GRID, repeat=3):
        if u != w:
            pairs.append(fs.configuration_masses(v, u, w, M / N, Z, edges))
    adaptive = fs.adaptive_two_step_epsilon(pairs, DELTA)
    assert 1.1 * bounds.epsilon_lower < adaptive < bounds.pair_lower
    assert adaptive == pytest.approx(0.1703, abs=1e-3)


def test_search_ranks_the_named_configuration_first_and_estimates_it_inside_its_interval():
    rate, z, steps, delta = 0.05, 1.0, 40, 1e-4
    options = dict(spacing=1e-3, width=30.0, points=2001)
    ranked = fs.search_configurations(rate, z, steps, delta, values=(-1.0, 0.0, 1.0), **options)
    first = ranked[0]
    assert (first.others, first.replaced, first.replacement) in {(-1.0, -1.0, 1.0), (-1.0, 1.0, -1.0)}
    assert all(c.epsilon <= first.epsilon for c in ranked)
    poisson = PldAccountant("add_remove").compose(PoissonSampled(rate, Gaussian(z / 2)), steps).get_epsilon_bounds(delta)
    assert poisson.epsilon_lower * 0.99 <= first.epsilon <= poisson.epsilon_upper * 1.01
    # and the accountant's lower end for the fixed-size plan is that certified lower bound
    fixed = PldAccountant("substitute").compose(FixedSizeSampled(50, 1000, Gaussian(z)), steps).get_epsilon_bounds(delta)
    assert fixed.epsilon_lower == pytest.approx(poisson.epsilon_lower, rel=1e-12)


@pytest.mark.parametrize("bad", [
    dict(v=1.5, u=0.0, w=1.0), dict(v=0.0, u=float("nan"), w=1.0), dict(v=0.0, u=-2.0, w=1.0)])
def test_contributions_outside_the_clip_are_refused(bad, edges):
    with pytest.raises(ValueError, match=r"must be in \[-1, 1\]"):
        fs.configuration_masses(bad["v"], bad["u"], bad["w"], 0.1, 1.0, edges)


def test_mechanism_refuses_unclipped_or_too_many_batches(edges):
    with pytest.raises(ValueError, match="contributions"):
        fs.mechanism_masses([0.0, 2.0], 1, 1.0, edges)
    with pytest.raises(ValueError, match="too many"):
        fs.mechanism_masses([0.0] * 40, 20, 1.0, edges)


def test_multi_step_adaptive_estimate_agrees_with_the_two_step_and_static_ones(edges):
    p, q = fs.configuration_masses(-1.0, -1.0, 1.0, M / N, Z, edges)
    lattice = dict(spacing=1e-3, low=-10.0, high=10.0)
    # one configuration in one order: no choice, the static composition (to the lattice's 1e-3, rounded up)
    static = fs.configuration_epsilon(-1.0, -1.0, 1.0, M / N, Z, STEPS, DELTA)
    assert fs.adaptive_epsilon([(q, p)], STEPS, DELTA, **lattice) == pytest.approx(static, abs=2e-3)
    menu = [fs.configuration_masses(v, u, w, M / N, Z, edges)
            for v, u, w in itertools.product(GRID, repeat=3) if u != w]
    two = fs.adaptive_two_step_epsilon(menu, DELTA)
    assert fs.adaptive_epsilon(menu, 2, DELTA, **lattice) == pytest.approx(two, abs=2e-3)
    # more steps: the adaptive adversary gains more over the static one
    three_static = fs.configuration_epsilon(-1.0, -1.0, 1.0, M / N, Z, 3, DELTA)
    assert fs.adaptive_epsilon(menu, 3, DELTA, **lattice) > 1.05 * three_static
