"""Pipelines on a neighbouring pair (metadp/verify/pipelines.py): the samplers draw the law they claim.

Oracles: the privacy loss distributions of metadp.mechanisms (loss_cdf), Kullback-Leibler divergences
by quadrature (scipy.integrate.quad), the random-allocation loss sampler of
metadp.amplification.one_pass, and exact binomial laws (Clopper-Pearson intervals, the fidelity
tests). Every sample is seeded; tolerances are 6 standard errors (or a test at level 1e-4).
"""

from __future__ import annotations

import math
import time

import numpy as np
import pytest
from scipy import integrate, special, stats

from metadp.amplification.one_pass import _allocation_losses
from metadp.mechanisms.episodic import episodic_record_pairs, hidden_binomial_pairs
from metadp.mechanisms.gaussian import GaussianMixturePair, poisson_gaussian_pairs
from metadp.mechanisms.laplace import LaplacePair
from metadp.core import events as ev
from metadp.verify import runs, sampled
from metadp.verify.fidelity import episodic_multiplicity_test
from metadp.verify.pipelines import (
    NoPipelineError,
    Pipeline,
    balls_in_bins_pipeline,
    episodic_pipeline,
    dp_pix_pipeline,
    fixed_size_pipeline,
    pipeline_for,
    poisson_pipeline,
    shuffle_pipeline,
)

SIGMAS = 6.0


def _density(pair: GaussianMixturePair, under: str):
    """The density of P (under="P") or Q of a Gaussian-mixture pair."""
    mixture = (under == "P") == (pair.direction == "add")
    if not mixture:
        return lambda x: stats.norm.pdf(x, scale=pair.sigma)
    return lambda x: float(np.sum(pair.weights * stats.norm.pdf(x, loc=pair.shifts, scale=pair.sigma)))


def _mean_loss(pair: GaussianMixturePair, under: str) -> float:
    """E[log dP/dQ] under P (= KL(P||Q)) or under Q (= -KL(Q||P)), by quadrature."""
    density = _density(pair, under)
    lo, hi = -12 * pair.sigma, float(pair.shifts.max()) + 12 * pair.sigma
    value, _ = integrate.quad(lambda x: density(x) * float(pair.log_ratio(np.array([x]))[0]), lo, hi,
                              limit=200, epsabs=1e-13, epsrel=1e-11)
    return value


def _check_cdf(sample: np.ndarray, cdf, points) -> None:
    """Empirical CDF within 6 binomial standard errors (plus 1e-12) of the exact one at every point."""
    n = len(sample)
    exact = cdf(np.asarray(points))
    empirical = np.searchsorted(np.sort(sample), points, side="right") / n
    tolerance = SIGMAS * np.sqrt(exact * (1 - exact) / n) + 1e-12
    assert np.all(np.abs(empirical - exact) <= tolerance), (points, empirical, exact, tolerance)


# -- Poisson ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("rate, z", [(0.1, 1.0), (0.5, 0.7), (1.0, 2.0)])
def test_poisson_one_step_statistic_has_the_pair_loss_law(rate, z):
    pair = poisson_gaussian_pairs(rate, z)[0]
    pipe = poisson_pipeline(rate, z, 1)
    rng = np.random.default_rng(20260521)
    d, d_prime = pipe.sample_d(100_000, rng), pipe.sample_d_prime(100_000, rng)
    points = np.quantile(d, [0.01, 0.1, 0.3, 0.5, 0.7, 0.9, 0.99])
    _check_cdf(d, lambda l: pair.loss_cdf(l, "P"), points)
    _check_cdf(d_prime, lambda l: pair.loss_cdf(l, "Q"), np.quantile(d_prime, [0.01, 0.2, 0.5, 0.8, 0.99]))


def test_poisson_statistic_means_are_t_times_the_kl_divergences():
    rate, z, T, n = 0.2, 1.0, 100, 20_000
    pair = poisson_gaussian_pairs(rate, z)[0]
    kl_pq, minus_kl_qp = _mean_loss(pair, "P"), _mean_loss(pair, "Q")
    assert kl_pq > 0 > minus_kl_qp  # D favours large statistics, D' small ones
    pipe = poisson_pipeline(rate, z, T)
    rng = np.random.default_rng(7)
    for sample, expected in ((pipe.sample_d(n, rng), T * kl_pq), (pipe.sample_d_prime(n, rng), T * minus_kl_qp)):
        standard_error = sample.std(ddof=1) / math.sqrt(n)
        assert abs(sample.mean() - expected) <= SIGMAS * standard_error, (sample.mean(), expected, standard_error)


def test_statistic_is_the_sum_of_the_claimed_pairs_log_ratios():
    # same seed: sample_d and projections(under="D") draw the same runs
    for claim in (GaussianMixturePair([0.7, 0.3], [0.0, 1.5], 1.3, "remove"), LaplacePair(0.8),
                  GaussianMixturePair([0.2, 0.5, 0.3], [0.0, 1.0, 2.0], 0.9, "add")):
        pipe = poisson_pipeline(0.3, 1.0, 17, statistic_pair=claim)
        for under, sampler in (("D", pipe.sample_d), ("D'", pipe.sample_d_prime)):
            statistic = sampler(500, np.random.default_rng(3))
            x = pipe.projections(500, np.random.default_rng(3), under)
            expected = claim.log_ratio(x.ravel()).reshape(x.shape).sum(axis=1)
            np.testing.assert_allclose(statistic, expected, rtol=1e-12, atol=1e-10)


def test_chunks_cover_every_run(monkeypatch):
    monkeypatch.setattr(runs, "_CHUNK", 7)  # 2 runs of 3 steps per chunk
    pipe = poisson_pipeline(0.5, 1.0, 3)
    rng = np.random.default_rng(0)
    assert pipe.sample_d(5, rng).shape == (5,)
    assert pipe.projections(5, rng, "D'").shape == (5, 3)
    assert pipe.sample_d_prime(0, rng).shape == (0,)
    shifts = pipe.projections(4000, rng, "D", noise=False)
    assert set(np.unique(shifts)) == {0.0, 1.0}
    assert abs(shifts.mean() - 0.5) < SIGMAS * math.sqrt(0.25 / shifts.size)


# -- fixed size ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("relation", ["substitute", "add_remove"])
def test_fixed_size_inclusion_frequency_is_batch_over_population(relation):
    batch, population, T, n = 3, 40, 50, 2000
    pipe = fixed_size_pipeline(batch, population, 1.0, T, relation=relation)
    assert pipe.relation == relation
    rng = np.random.default_rng(11)
    shifts = pipe.projections(n, rng, "D", noise=False)
    assert set(np.unique(shifts)) == {0.0, 2.0}  # the sum moves by 2C when the canary's slot is drawn
    hits = int(np.count_nonzero(shifts))
    interval = stats.binomtest(hits, shifts.size, batch / population).proportion_ci(0.9999, method="exact")
    assert interval.low <= batch / population <= interval.high, (hits / shifts.size, interval)
    assert not np.any(pipe.projections(n, rng, "D'", noise=False))


def test_fixed_size_attains_the_substitution_pair():
    # One step: the statistic's law is that of the pair (1-q) N(0, z^2) + q N(2, z^2) vs N(0, z^2), the
    # fixed-size pair with sensitivity 2C (DESIGN.md 3.3): the construction is the worst case.
    batch, population, z = 5, 20, 1.5
    pair = GaussianMixturePair([0.75, 0.25], [0.0, 2.0], z, "add")
    pipe = fixed_size_pipeline(batch, population, z, 1)
    rng = np.random.default_rng(5)
    d, d_prime = pipe.sample_d(100_000, rng), pipe.sample_d_prime(100_000, rng)
    _check_cdf(d, lambda l: pair.loss_cdf(l, "P"), np.quantile(d, [0.02, 0.25, 0.5, 0.75, 0.98]))
    _check_cdf(d_prime, lambda l: pair.loss_cdf(l, "Q"), np.quantile(d_prime, [0.02, 0.25, 0.5, 0.75, 0.98]))


# -- episodic -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("reveal", [False, True])
def test_episodic_with_one_episode_and_its_unit_always_drawn_is_poisson(reveal):
    rate, z, T, n = 0.3, 1.0, 8, 20_000
    episodic = episodic_pipeline(1, 1.0, rate, z, T, shift=1.0, reveal_unit=reveal)
    poisson = poisson_pipeline(rate, z, T)
    rng = np.random.default_rng(99)
    for a, b in ((episodic.sample_d, poisson.sample_d), (episodic.sample_d_prime, poisson.sample_d_prime)):
        assert stats.ks_2samp(a(n, rng), b(n, rng)).pvalue > 1e-4


@pytest.mark.parametrize("reveal", [False, True])
def test_episodic_counts_are_binomial_over_episodes(reveal):
    L, p_unit, r, shift = 6, 0.4, 0.5, 2.0
    pipe = episodic_pipeline(L, p_unit, r, 1.0, 25, shift=shift, reveal_unit=reveal)
    rng = np.random.default_rng(2024)
    counts = (pipe.projections(400, rng, "D", noise=False) / shift).ravel()
    assert np.all(counts == np.round(counts))
    result = episodic_multiplicity_test(counts.astype(int), L, p_unit * r)
    assert result.passed, result.detail
    assert not np.any(pipe.projections(100, rng, "D'", noise=False))


def test_revealed_statistic_mean_is_t_times_the_revealed_kl():
    # E_D[S] = T sum_j Bin(j; L, P_U) KL(component j): the statistic is the revealed pair's loss
    L, p_unit, r, z, shift, T, n = 3, 0.5, 0.5, 1.0, 2.0, 10, 20_000
    mixture = episodic_record_pairs(L, p_unit, r, z, shift)[0]
    kl = sum(w * _mean_loss(c, "P") for w, c in zip(mixture.weights, mixture.components) if c is not None)
    minus_kl = sum(w * _mean_loss(c, "Q") for w, c in zip(mixture.weights, mixture.components) if c is not None)
    pipe = episodic_pipeline(L, p_unit, r, z, T, shift=shift, reveal_unit=True)
    rng = np.random.default_rng(31)
    for sample, expected in ((pipe.sample_d(n, rng), T * kl), (pipe.sample_d_prime(n, rng), T * minus_kl)):
        standard_error = sample.std(ddof=1) / math.sqrt(n)
        assert abs(sample.mean() - expected) <= SIGMAS * standard_error, (sample.mean(), expected, standard_error)


def test_revealed_loss_matches_the_binomial_mixture_formula():
    # component j: log sum_k Bin(k; j, r) exp((s k x - (s k)^2 / 2) / z^2), also past the truncation
    L, p_unit, r, z, shift = 40, 0.05, 0.3, 0.8, 2.0
    mixture = episodic_record_pairs(L, p_unit, r, z, shift)[0]
    rng = np.random.default_rng(1)
    x = rng.normal(0, 3, size=(30, 7))
    j = rng.integers(0, L + 1, size=(30, 7))
    assert j.max() >= len(mixture.components)  # some counts lie past the mixture's truncation
    got = sampled._revealed_loss(mixture, r, shift, x, j)
    expected = np.empty_like(x)
    for idx in np.ndindex(x.shape):
        ks = np.arange(j[idx] + 1)
        expected[idx] = special.logsumexp(stats.binom.logpmf(ks, j[idx], r)
                                          + (shift * ks * x[idx] - (shift * ks) ** 2 / 2) / z**2)
    np.testing.assert_allclose(got, expected, rtol=1e-9, atol=1e-9)


def test_hidden_episodic_statistic_default_is_the_hidden_binomial_pair():
    L, p_unit, r, z, shift = 4, 0.5, 0.4, 1.0, 2.0
    claim = hidden_binomial_pairs(L, p_unit * r, z, shift)[0]
    pipe = episodic_pipeline(L, p_unit, r, z, 5, shift=shift)
    statistic = pipe.sample_d(300, np.random.default_rng(8))
    x = pipe.projections(300, np.random.default_rng(8), "D")
    np.testing.assert_allclose(statistic, claim.log_ratio(x).sum(axis=1), rtol=1e-12, atol=1e-10)


# -- one pass -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("background, present, absent", [(0.0, 1.0, 0.0), (-1.0, 2.0, 1.0)])
def test_shuffle_puts_the_canary_in_exactly_one_step_per_pass(background, present, absent):
    population, batch, passes, n = 24, 4, 5, 3000
    pipe = shuffle_pipeline(population, batch, 1.0, passes, background=background)
    per_pass = population // batch
    assert pipe.steps == passes * per_pass
    rng = np.random.default_rng(4)
    for under, value in (("D", present), ("D'", absent)):
        blocks = pipe.projections(n, rng, under, noise=False).reshape(n, passes, per_pass)
        if value == 0.0:
            assert not np.any(blocks)
            continue
        assert np.all(np.count_nonzero(blocks, axis=2) == 1)
        assert np.all(blocks.max(axis=2) == value)
        positions = np.argmax(blocks, axis=2).ravel()  # uniform over the pass's steps
        assert stats.chisquare(np.bincount(positions, minlength=per_pass)).pvalue > 1e-4


@pytest.mark.parametrize("T, z", [(1, 1.0), (10, 0.8)])
def test_balls_in_bins_statistic_is_the_random_allocation_loss(T, z):
    # against the independent sampler of metadp.amplification.one_pass (law of L_add under P and Q)
    n = 20_000
    pipe = balls_in_bins_pipeline(T, z)
    rng = np.random.default_rng(12)
    assert stats.ks_2samp(pipe.sample_d(n, rng), _allocation_losses(z, T, n, rng, "add")).pvalue > 1e-4
    assert stats.ks_2samp(pipe.sample_d_prime(n, rng), -_allocation_losses(z, T, n, rng, "remove")).pvalue > 1e-4


def test_one_pass_with_a_claimed_per_step_pair():
    claim = poisson_gaussian_pairs(0.25, 1.0)[0]  # the Poisson proxy, rate 1/T per step
    pipe = shuffle_pipeline(8, 2, 1.0, 3, statistic_pair=claim)
    statistic = pipe.sample_d(200, np.random.default_rng(6))
    x = pipe.projections(200, np.random.default_rng(6), "D")
    np.testing.assert_allclose(statistic, claim.log_ratio(x).sum(axis=1), rtol=1e-12, atol=1e-10)


def test_pipeline_records_its_description_and_steps():
    pipe = poisson_pipeline(0.01, 1.1, 250)
    assert isinstance(pipe, Pipeline) and pipe.steps == 250 and pipe.relation == "add_remove"
    assert "Poisson" in pipe.description and "0.01" in pipe.description and "250 steps" in pipe.description
    assert "substitute" in fixed_size_pipeline(2, 10, 1.0, 3).description
    assert "J revealed" in episodic_pipeline(2, 0.5, 0.5, 1.0, 3, reveal_unit=True).description


# -- invalid inputs -----------------------------------------------------------------------------------


@pytest.mark.parametrize("build", [
    lambda: poisson_pipeline(0.0, 1.0, 10),
    lambda: poisson_pipeline(1.5, 1.0, 10),
    lambda: poisson_pipeline(0.1, 0.0, 10),
    lambda: poisson_pipeline(0.1, math.inf, 10),
    lambda: poisson_pipeline(0.1, 1.0, 0),
    lambda: poisson_pipeline(0.1, 1.0, 10, statistic_pair="not a pair"),
    lambda: fixed_size_pipeline(11, 10, 1.0, 5),
    lambda: fixed_size_pipeline(10, 10, 1.0, 5, relation="add_remove"),
    lambda: fixed_size_pipeline(0, 10, 1.0, 5),
    lambda: fixed_size_pipeline(2, 10, 1.0, 5, relation="replace"),
    lambda: episodic_pipeline(0, 0.5, 0.5, 1.0, 5),
    lambda: episodic_pipeline(3, 0.0, 0.5, 1.0, 5),
    lambda: episodic_pipeline(3, 0.5, 1.5, 1.0, 5),
    lambda: episodic_pipeline(3, 0.5, 0.5, 1.0, 5, shift=0.0),
    lambda: episodic_pipeline(3, 0.5, 0.5, 1.0, 5, reveal_unit=True, statistic_pair=poisson_gaussian_pairs(0.1, 1)[0]),
    lambda: episodic_pipeline(3, 0.5, 0.5, 1.0, 5, statistic_pair=episodic_record_pairs(3, 0.5, 0.5, 1.0)[0]),
    lambda: shuffle_pipeline(10, 3, 1.0, 2),
    lambda: shuffle_pipeline(12, 3, 1.0, 0),
    lambda: shuffle_pipeline(12, 3, 1.0, 1, background=2.0),
    lambda: balls_in_bins_pipeline(0, 1.0),
])
def test_invalid_inputs_raise(build):
    with pytest.raises(ValueError):
        build()


def test_invalid_sampling_arguments_raise():
    pipe = poisson_pipeline(0.1, 1.0, 3)
    with pytest.raises(ValueError, match="rng"):
        pipe.sample_d(10, 42)
    with pytest.raises(ValueError, match="n must"):
        pipe.sample_d(-1, np.random.default_rng(0))
    with pytest.raises(ValueError, match="under"):
        pipe.projections(10, np.random.default_rng(0), "Q")


@pytest.mark.slow
def test_a_thousand_steps_of_a_hundred_thousand_runs_take_seconds():
    pipe = poisson_pipeline(0.01, 1.0, 1000)
    start = time.perf_counter()
    pipe.sample_d(100_000, np.random.default_rng(0))
    assert time.perf_counter() - start < 60.0


# -- pipeline_for: the pipeline of an accountant event ------------------------------------------


@pytest.mark.parametrize("event, steps, shuffle, builder", [
    (ev.PoissonSampled(0.25, ev.Gaussian(2.0)), 3, None, lambda: poisson_pipeline(0.25, 2.0, 3)),
    (ev.FixedSizeSampled(4, 40, ev.Gaussian(1.5)), 2, None, lambda: fixed_size_pipeline(4, 40, 1.5, 2)),
    (ev.EpisodicSampled(3, 0.5, 0.25, ev.Gaussian(1.0), shift=1.0), 2, None,
     lambda: episodic_pipeline(3, 0.5, 0.25, 1.0, 2, shift=1.0, reveal_unit=True)),
    (ev.EpisodicSampled(3, 1.0, 0.25, ev.Gaussian(1.0)), 2, None,
     lambda: episodic_pipeline(3, 1.0, 0.25, 1.0, 2, reveal_unit=False)),
    (ev.Gaussian(0.8), 2, (12, 4), lambda: shuffle_pipeline(12, 4, 0.8, 2, background=-1.0)),
])
def test_pipeline_for_dispatches_on_the_event(event, steps, shuffle, builder):
    got, expected = pipeline_for(event, steps, shuffle=shuffle), builder()
    assert isinstance(got, Pipeline)
    assert (got.description, got.steps, got.relation) == (expected.description, expected.steps, expected.relation)
    x, y = got.sample_d(200, np.random.default_rng(1)), expected.sample_d(200, np.random.default_rng(1))
    np.testing.assert_array_equal(x, y)  # the same sampler and statistic


@pytest.mark.parametrize("event, shuffle, needle", [
    (ev.Gaussian(1.0), None, "shuffle"),  # a Gaussian step is a pipeline only as a pass of a shuffle
    (ev.Laplace(1.0), None, "no pipeline for Laplace"),
    (ev.PoissonSampled(0.5, ev.Laplace(1.0)), None, "must be Gaussian"),
    (ev.FixedSizeSampled(4, 40, ev.Gaussian(1.0), sensitivity_factor=1.0), None, "sensitivity factor 2"),
    (ev.SelfComposed(ev.Gaussian(1.0), 3), None, "no audit pipeline"),
])
def test_pipeline_for_refuses_events_no_pipeline_realises(event, shuffle, needle):
    with pytest.raises(NoPipelineError, match=needle):
        pipeline_for(event, 2, shuffle=shuffle)


def test_dp_pix_pipeline_releases_the_changed_cell():
    pipe = dp_pix_pipeline(40.0, 2, 3)  # scale 3 / (4 * 40): the cell value 0 under D, 3/4 under D'
    d, d_prime = pipe.sample_d(4000, np.random.default_rng(0)), pipe.sample_d_prime(4000, np.random.default_rng(1))
    assert pipe.steps == 1 and d.min() >= 0 and d_prime.max() <= 1
    assert abs(np.median(d_prime) - 0.75) < 0.01 and np.mean(d == 0) > 0.45  # clipped at 0 about half the time
    with pytest.raises(ValueError, match="m must be in"):
        dp_pix_pipeline(1.0, 2, 5)

