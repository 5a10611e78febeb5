"""The pool-substitution pair (metadp.mechanisms.pooled): a record inside a task that stays in the pool.

Oracles and provenance:
* Exact enumeration on tiny pools (1-D): a few tasks of a few scalar records, each task's contribution
  its records' sum clipped to [-1, 1]; every subset of sampled tasks is listed with its probability, so
  the output is a finite Gaussian mixture and its hockey-stick divergence is exact
  (``metadp.verify.mixture_divergence.hockey_stick``: crossing points isolated exactly). The neighbours
  remove (or replace) one record of one task; the task stays in the pool.
* Tiny pools in the plane: contributions clipped to the unit disk; the divergence is the integral over
  the second coordinate of the exact 1-D divergence of the slice (weights times the second coordinate's
  Gaussian density), by the trapezoidal rule on 201 (slow test: 401) points over 24 noise stds (the integrand is smooth
  and Gaussian-decaying: the rule's error is far below the 1e-9 slack allowed).
* The attained configuration g = C, g' = -C is ``AntipodalPair``: checked against the enumeration
  (1e-12), and its composition is a lower bound the certified epsilon must stay above.
* Composed (slow): certified lower bounds of attained plane configurations at 30-90 degrees (side
  coordinate binned at each bin's lower rate: a post-processing of the configuration) stay below the bound.
* The revealed pair it replaces: q times the Gaussian profile at sensitivity 2 (J ~ Bernoulli(q)
  revealed); the new pair must be below it (and strictly, in the composed README case).
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from metadp.accounting import PldAccountant, RdpAccountant, UnsupportedEventError
from metadp.accounting.pld import _bounds
from metadp.core import events as ev
from metadp.core.serialize import event_from_dict, event_to_dict
from metadp.mechanisms.pooled import AntipodalPair, pooled_record_lower_pair, pooled_record_pair
from metadp.verify.mixture_divergence import gaussian_profile, hockey_stick

EPS = (0.0, 0.1, 0.5, 1.0, 2.0, 4.0)


def _clip1(v):
    return max(-1.0, min(1.0, v))


def _clip_disk(v):
    n = math.hypot(*v)
    return v if n <= 1.0 else (v[0] / n, v[1] / n)


def _mixture(contributions, q):
    """(weight, sum) over every subset of sampled tasks (Poisson, rate q each)."""
    out = []
    for picks in itertools.product((0, 1), repeat=len(contributions)):
        w = math.prod(q if b else 1.0 - q for b in picks)
        out.append((w, tuple(sum(b * c[i] for b, c in zip(picks, contributions)) for i in range(len(contributions[0])))))
    return out


def _exact_1d(tasks, neighbour, q, z, eps):
    g = [(_clip1(sum(t)),) for t in tasks]
    h = [(_clip1(sum(t)),) for t in neighbour]
    p = [(w, m[0]) for w, m in _mixture(g, q)]
    qq = [(w, m[0]) for w, m in _mixture(h, q)]
    return hockey_stick(p, qq, z, eps)


def _exact_2d(tasks, neighbour, q, z, eps, points=401):
    g = [_clip_disk(tuple(map(sum, zip(*t)))) for t in tasks]
    h = [_clip_disk(tuple(map(sum, zip(*t)))) for t in neighbour]
    mp, mq = _mixture(g, q), _mixture(h, q)
    means = [m[1] for _, m in mp + mq]
    ys = np.linspace(min(means) - 12 * z, max(means) + 12 * z, points)
    dens = lambda y, m: math.exp(-0.5 * ((y - m) / z) ** 2) / (z * math.sqrt(2 * math.pi))  # noqa: E731
    vals = [hockey_stick([(w * dens(y, m[1]), m[0]) for w, m in mp], [(w * dens(y, m[1]), m[0]) for w, m in mq], z, eps)
            for y in ys]
    return float(np.trapezoid(vals, ys))


def _neighbours(tasks, task=0, record=0, replace=None):
    """The pool with one record of one task removed (or replaced by ``replace``); the task stays."""
    changed = list(tasks[task])
    if replace is None:
        changed.pop(record)
    else:
        changed[record] = replace
    return [changed if i == task else t for i, t in enumerate(tasks)]


def _revealed(q, z, eps):
    return q * gaussian_profile(2.0, z, eps)


def _revealed_allowance(q, z, eps):
    """The revealed profile, except at eps = 0: there (total variation) the ideal pair equals it, and
    rounding the bins' rates up adds up to a factor e^resolution (0.05)."""
    return _revealed(q, z, eps) * (math.exp(0.05) if eps == 0.0 else 1.0) + 1e-12


# -- the antipodal pair -------------------------------------------------------------------------------

@pytest.mark.parametrize("q,z", [(0.01, 1.0), (0.3, 0.7), (0.9, 2.0)])
def test_antipodal_pair_is_the_attained_configuration_exactly(q, z):
    # a task whose clipped sum is +1 with the record (records 2, -1) and -1 without it (record -1 alone)
    tasks = [[2.0, -1.0]]
    pair = AntipodalPair(q, 1.0, z)
    for eps in EPS:
        exact = _exact_1d(tasks, _neighbours(tasks), q, z, eps)
        assert abs(float(pair.profile(eps)) - exact) <= 1e-12 + 1e-9 * exact, (eps, exact)


def test_antipodal_pair_loss_inverse_and_symmetry():
    pair = AntipodalPair(0.003, 1.0, 0.8)
    loss = np.array([-30.0, -2.0, -1e-9, 0.0, 1e-9, 0.5, 3.0, 30.0])
    x = pair._inverse_add(loss)
    np.testing.assert_allclose(pair.log_ratio(x), loss, rtol=1e-9, atol=1e-15)
    np.testing.assert_allclose(pair.log_ratio(-x), -loss, rtol=1e-9, atol=1e-15)
    # the loss law under Q is the mirror of the law under P
    np.testing.assert_allclose(pair.loss_sf(loss, "Q"), pair.loss_cdf(-loss, "P"), rtol=1e-12, atol=1e-300)


# -- tiny pools: the new bound holds, and is below the revealed one -----------------------------------

def _random_pools(rng, count, dim):
    for _ in range(count):
        tasks = []
        for _ in range(int(rng.integers(1, 4))):
            size = int(rng.integers(1, 4))
            tasks.append([float(v) if dim == 1 else tuple(map(float, v))
                          for v in rng.uniform(-1.5, 1.5, size=(size,) if dim == 1 else (size, 2))])
        tasks[0].append(1.2 if dim == 1 else (1.2, 0.0))  # task 0 holds at least two records
        yield tasks


@pytest.mark.parametrize("q,z", [(0.05, 1.0), (0.3, 0.6), (0.7, 1.5)])
def test_exact_enumeration_on_tiny_1d_pools_stays_below_the_bound(q, z):
    rng = np.random.default_rng(20)
    claims = pooled_record_pair(q, z).profile(np.array(EPS))
    worst = 0.0
    for tasks in list(_random_pools(rng, 12, 1)) + [[[2.0, -1.0], [0.4]], [[1.0, 5.0], [-0.3, 0.2]]]:
        for neighbour in (_neighbours(tasks), _neighbours(tasks, replace=-3.0)):
            for eps, claim in zip(EPS, claims):
                exact = _exact_1d(tasks, neighbour, q, z, eps)
                assert exact <= claim + 1e-12, (tasks, neighbour, eps, exact, claim)
                worst = max(worst, exact / claim if claim > 0 else 0.0)
                assert claim <= _revealed_allowance(q, z, eps), (eps, claim)
    assert worst > 0.5  # the enumeration reaches the bound's scale (it is not vacuous)


_PLANE_POOLS = [[[(2.0, 0.0), (-1.0, 0.0)]],  # antipodal: +e1 with the record, -e1 without
                [[(1.0, -1.0), (0.0, 1.0)]],  # orthogonal on the circle: e1 with, e2 without (side information)
                [[(0.6, 0.8), (0.2, -1.6)], [(0.3, 0.3)]]]


def _check_plane(pools, q, z, eps_grid, points):
    claims = pooled_record_pair(q, z).profile(np.array(eps_grid))
    for tasks in pools:
        for eps, claim in zip(eps_grid, claims):
            exact = _exact_2d(tasks, _neighbours(tasks), q, z, eps, points)
            assert exact <= claim + 1e-9, (tasks, eps, exact, claim)
            assert claim <= _revealed_allowance(q, z, eps)


def test_exact_enumeration_on_tiny_2d_pools_stays_below_the_bound():
    _check_plane(_PLANE_POOLS, 0.1, 1.0, (0.0, 1.0), 201)


@pytest.mark.slow
@pytest.mark.parametrize("q,z", [(0.1, 1.0), (0.5, 0.8), (0.02, 0.6)])
def test_exact_enumeration_on_random_2d_pools_stays_below_the_bound(q, z):
    rng = np.random.default_rng(7)
    _check_plane(_PLANE_POOLS + [t[:2] for t in _random_pools(rng, 6, 2)], q, z, (0.0, 0.5, 2.0), 401)


def test_bound_is_strictly_below_the_revealed_profile_where_amplification_acts():
    q, z = 0.01, 1.0
    bound = pooled_record_pair(q, z)
    for eps in (0.05, 0.5, 1.0, 2.0):
        assert float(bound.profile(eps)) < 0.9 * _revealed(q, z, eps)


# -- composed over steps (the README example) ---------------------------------------------------------

def test_readme_example_new_record_bound_between_attained_lower_bound_and_revealed_bound():
    q, z, steps, delta = 0.0032, 1.0, 1000, 1e-5
    new = PldAccountant().compose(ev.PoolSubstitution(q, ev.Gaussian(z)), steps).get_epsilon(delta)
    revealed = PldAccountant().compose(ev.EpisodicSampled(1, q, 1.0, ev.Gaussian(z / 2), 1.0), steps).get_epsilon(delta)
    attained = _bounds([((pooled_record_lower_pair(q, z),), steps)], delta, 5e-3, 1 << 22, 2 << 30, 30.0)
    task = PldAccountant().compose(ev.PoissonSampled(q, ev.Gaussian(z)), steps).get_epsilon(delta)
    assert attained.epsilon_lower <= new < revealed
    assert task < new < 0.1 * revealed
    # README quotes these: the new upper bound rounded up, the attained configuration's lower bound rounded down
    assert new <= 1.871 <= 1.005 * new
    assert 0.811 <= attained.epsilon_lower <= 1.005 * 0.811
    assert 37.5 <= revealed <= 37.55  # the number README quoted for the revealed view


# -- the event and its plumbing -----------------------------------------------------------------------

def test_event_validates_and_round_trips():
    event = ev.PoolSubstitution(0.25, ev.Gaussian(1.5))
    assert event_from_dict(event_to_dict(event)) == event
    with pytest.raises(ValueError, match="rate"):
        ev.PoolSubstitution(1.5, ev.Gaussian(1.0))
    with pytest.raises(ValueError, match="inner"):
        ev.PoolSubstitution(0.5, ev.Laplace(1.0))


def test_both_record_relations_give_the_same_pld_and_rdp_refuses_naming_the_event():
    event = ev.PoolSubstitution(0.2, ev.Gaussian(3.0))
    a = PldAccountant("add_remove").compose(event, 4).get_epsilon(1e-5)
    b = PldAccountant("substitute").compose(event, 4).get_epsilon(1e-5)
    assert a == b
    with pytest.raises(UnsupportedEventError, match="PoolSubstitution"):
        RdpAccountant().compose(event)


def test_degenerate_rates():
    assert PldAccountant().compose(ev.PoolSubstitution(0.0, ev.Gaussian(1.0)), 5).get_epsilon(1e-5) == 0.0
    always = PldAccountant().compose(ev.PoolSubstitution(1.0, ev.Gaussian(1.0)), 3).get_epsilon(1e-5)
    gauss = PldAccountant().compose(ev.Gaussian(0.5), 3).get_epsilon(1e-5)  # shift 2C at noise zC
    assert always == pytest.approx(gauss, rel=1e-3)
    with pytest.raises(ValueError, match="rate"):
        pooled_record_pair(0.0, 1.0)


def _configuration_lower_pair(q, z, angle, h=0.05):
    """A post-processing of the configuration g = (sin f, cos f), g' = (-sin f, cos f) (f = ``angle``):
    its side coordinate binned, each bin at its LOWER posterior rate (the opposite rounding of
    ``pooled_record_pair``), so its certified lower epsilon is a lower bound for that configuration."""
    from scipy import special

    from metadp.mechanisms.episodic import RevealedMixture

    mu, w = math.sin(angle), math.cos(angle)
    if w < 1e-12:
        return AntipodalPair(q, mu, z)
    t = np.arange(-5 * z, w + 6 * z, h * z * z / w)
    cdf = (1 - q) * special.ndtr(t / z) + q * special.ndtr((t - w) / z)
    weights = np.diff(np.concatenate(([0.0], cdf, [1.0])))
    logit = math.log(q / (1 - q)) + (2 * t * w - w * w) / (2 * z * z)
    rates = np.concatenate(([0.0], 1 / (1 + np.exp(-logit))))  # bin (t_{i-1}, t_i] at r(t_{i-1})
    parts = [(x, AntipodalPair(float(r), mu, z) if 0 < r < 1 else None) for x, r in zip(weights, rates) if x > 0]
    total = sum(x for x, _ in parts)
    return RevealedMixture(tuple(x / total for x, _ in parts), tuple(p for _, p in parts), 0.0, z)


@pytest.mark.slow
@pytest.mark.parametrize("q,z,steps", [(0.05, 1.0, 50), (0.2, 2.0, 20)])
def test_composed_bound_is_above_every_attained_configuration(q, z, steps):
    delta = 1e-5
    new = PldAccountant().compose(ev.PoolSubstitution(q, ev.Gaussian(z)), steps).get_epsilon(delta)
    for degrees in (90, 75, 60, 30):
        pair = _configuration_lower_pair(q, z, math.radians(degrees))
        lower = _bounds([((pair,), steps)], delta, 5e-3, 1 << 22, 2 << 30, 30.0).epsilon_lower
        assert 0 < lower <= new, (degrees, lower, new)
