"""Banded matrix factorization (metadp.mechanisms.banded, banded_opt): workloads against the SGD recurrences
they encode, the analytic gradient against finite differences, sensitivities against brute-force
enumeration of participation patterns, streaming noise against a dense solve with the same draws, and the
b = 1 reductions to DP-SGD."""

from __future__ import annotations

import itertools
import math
import time

import numpy as np
import pytest

from metadp.mechanisms.banded import (
    BandedNoise, Cyclic, EveryStep, MinSeparation, SingleParticipation, amplified_dpsgd_equivalent,
    check_strategy, gaussian_mu, momentum_workload, num_bands, prefix_workload, sensitivity,
    sensitivity_cyclic, sensitivity_every_step, sensitivity_is_exact, sensitivity_min_separation,
    sensitivity_single,
)
from metadp.mechanisms.banded_opt import (
    banded_toeplitz, dpsgd_error, error, optimize_banded, optimize_banded_toeplitz,
    prefix_square_root_coefficients, toeplitz_error_and_gradient, toeplitz_inverse_coefficients,
)


def _random_banded(rng, n, b, nonnegative=False):
    C = np.tril(rng.uniform(0.2, 1.0, (n, n)) if nonnegative else rng.normal(size=(n, n)))
    C[np.subtract.outer(np.arange(n), np.arange(n)) >= b] = 0.0
    C[np.diag_indices(n)] = np.abs(C[np.diag_indices(n)]) + 0.5  # invertible
    return C


def _patterns(n, sep, k):
    """Every non-empty set of at most k steps in range(n), any two at least sep apart."""
    for size in range(1, k + 1):
        for pi in itertools.combinations(range(n), size):
            if all(b - a >= sep for a, b in zip(pi, pi[1:])):
                yield list(pi)


# ----------------------------------------------------------------------------------------- workloads

def test_momentum_workload_is_the_sgd_momentum_recurrence():
    rng = np.random.default_rng(0)
    n, beta = 12, 0.9
    lr = rng.uniform(0.1, 1.0, n)
    G = rng.normal(size=(n, 3))
    buf, theta, out = np.zeros(3), np.zeros(3), []
    for t in range(n):
        buf = beta * buf + G[t]
        theta = theta + lr[t] * buf
        out.append(theta.copy())
    np.testing.assert_allclose(momentum_workload(n, beta, lr) @ G, np.array(out), rtol=1e-13, atol=1e-13)


def test_momentum_workload_special_cases():
    np.testing.assert_array_equal(momentum_workload(7, 0.0), prefix_workload(7))
    A = momentum_workload(6, 0.5)
    lag = np.subtract.outer(np.arange(6), np.arange(6))
    np.testing.assert_allclose(A, np.where(lag >= 0, (1 - 0.5 ** (lag + 1)) / 0.5, 0.0), rtol=1e-15)
    with pytest.raises(ValueError, match="momentum"):
        momentum_workload(5, 1.0)
    with pytest.raises(ValueError, match="learning_rates"):
        momentum_workload(5, 0.9, [1.0, 1.0])
    with pytest.raises(ValueError, match="learning_rates"):
        momentum_workload(2, 0.9, [1.0, 0.0])


# ------------------------------------------------------------------------------- Toeplitz and errors

def test_toeplitz_inverse_and_prefix_square_root():
    c = np.array([1.0, -0.3, 0.2])
    C = banded_toeplitz(c, 9)
    M = banded_toeplitz(toeplitz_inverse_coefficients(c, 9), 9)
    np.testing.assert_allclose(C @ M, np.eye(9), atol=1e-14)
    S = banded_toeplitz(prefix_square_root_coefficients(10), 10)  # (1 - z)^{-1/2} squared is (1 - z)^{-1}
    np.testing.assert_allclose(S @ S, np.tri(10), atol=1e-14)


@pytest.mark.parametrize("workload", ["prefix", "momentum_schedule"])
def test_error_gradient_against_dense_value_and_finite_differences(workload):
    n = 30
    A = prefix_workload(n) if workload == "prefix" else momentum_workload(n, 0.8, np.linspace(1.0, 0.2, n))
    c = np.array([1.0, 0.45, 0.3, 0.1])
    value, grad = toeplitz_error_and_gradient(c, A)
    dense = np.linalg.norm(A @ np.linalg.inv(banded_toeplitz(c, n))) ** 2
    assert value == pytest.approx(dense, rel=1e-12)
    h = 1e-6
    fd = [(toeplitz_error_and_gradient(c + h * e, A)[0] - toeplitz_error_and_gradient(c - h * e, A)[0]) / (2 * h)
          for e in np.eye(c.size)]
    np.testing.assert_allclose(grad, fd, rtol=1e-6)


def test_dpsgd_error_closed_form_and_scale_invariance():
    n = 40
    A = prefix_workload(n)
    assert dpsgd_error(A) == pytest.approx((n + 1) / 2, rel=1e-14)  # ||tri||_F^2 / n = n(n+1)/2 / n
    assert dpsgd_error(A, EveryStep()) == pytest.approx(n * (n + 1) / 2, rel=1e-14)  # Delta(I)^2 = n
    C = banded_toeplitz([1.0, 0.4], n)
    assert error(A, 3.0 * C) == pytest.approx(error(A, C), rel=1e-12)


# ------------------------------------------------------------------------------------------ optimiser

def test_one_band_is_the_identity_and_dpsgd():
    A = prefix_workload(50)
    C = optimize_banded(A, 1)
    np.testing.assert_array_equal(C, np.eye(50))
    assert error(A, C) == dpsgd_error(A)


def test_optimiser_output_is_banded_unit_norm_and_stationary():
    A = prefix_workload(80)
    c = optimize_banded_toeplitz(A, 6)
    assert c.size == 6 and c[0] > 0 and np.linalg.norm(c) == pytest.approx(1.0, rel=1e-14)
    C = optimize_banded(A, 6)
    assert num_bands(C) == 6 and sensitivity_single(C) == pytest.approx(1.0, rel=1e-14)
    value, grad = toeplitz_error_and_gradient(c, A)
    # the gradient of the scale-free objective log(||c||^2 E) vanishes at the optimum
    assert np.max(np.abs(2 * c + grad / value)) < 1e-6


def test_two_bands_against_a_grid_of_c1():
    n = 40
    A = prefix_workload(n)
    c = optimize_banded_toeplitz(A, 2)
    # C = Toeplitz(1, x) has C^{-1} = Toeplitz((-x)^k): a closed form independent of the filter code
    lag = np.subtract.outer(np.arange(n), np.arange(n))
    grid = np.linspace(-0.99, 0.99, 3961)
    best = min((1 + x * x) * np.sum((A @ np.where(lag >= 0, (-x) ** np.maximum(lag, 0), 0.0)) ** 2) / n
               for x in grid)
    achieved = error(A, banded_toeplitz(c, n))
    assert achieved <= best * (1 + 1e-12)
    assert achieved >= best * (1 - 1e-3)  # the grid's spacing 5e-4 is near the optimum


def test_more_bands_never_increase_the_optimised_error():
    A = prefix_workload(64)
    errors = [error(A, optimize_banded(A, b)) for b in (1, 2, 3, 4, 6, 8, 16, 32, 64)]
    assert all(later <= earlier * (1 + 1e-9) for earlier, later in zip(errors, errors[1:])), errors
    assert errors[-1] < 0.2 * errors[0]


def test_optimiser_input_errors():
    with pytest.raises(ValueError, match="bands"):
        optimize_banded_toeplitz(prefix_workload(5), 6)
    with pytest.raises(ValueError, match="square"):
        optimize_banded_toeplitz(np.ones((3, 4)), 2)
    with pytest.raises(ValueError, match="init"):
        optimize_banded_toeplitz(prefix_workload(5), 3, init=[1.0, 0.5])


# ---------------------------------------------------------------------------------------- sensitivity

def test_single_and_every_step_closed_forms():
    C = np.array([[1.0, 0, 0], [2.0, 1.0, 0], [0, 1.0, 3.0]])
    assert sensitivity_single(C) == 3.0  # column norms sqrt(5), sqrt(2), 3
    assert sensitivity_every_step(C) == pytest.approx(np.linalg.norm(C @ np.ones(3)), rel=1e-14)  # X >= 0
    assert sensitivity_every_step(np.eye(7)) == pytest.approx(math.sqrt(7), rel=1e-15)


def test_every_step_bound_with_negative_gram_entries():
    rng = np.random.default_rng(1)
    C = _random_banded(rng, 8, 3)
    X = C.T @ C
    assert np.any(X < 0)
    scalar_best = max(np.array(s) @ X @ np.array(s) for s in itertools.product((-1, 1), repeat=8))
    bound = sensitivity_every_step(C)
    assert bound >= math.sqrt(scalar_best) * (1 - 1e-12)  # attained by scalar contributions of +-1
    assert bound <= np.sum(np.linalg.norm(C, axis=0)) * (1 + 1e-12)


@pytest.mark.parametrize("sep,k", [(1, 2), (2, 3), (3, 2), (3, None), (4, 3), (5, None)])
def test_min_separation_against_brute_force(sep, k):
    rng = np.random.default_rng(sep * 10 + (k or 0))
    n, b = 10, 3
    kk = -(-n // sep) if k is None else k
    for nonnegative in (True, False):
        C = _random_banded(rng, n, b, nonnegative)
        X = C.T @ C
        relaxed = max(np.abs(X[np.ix_(pi, pi)]).sum() for pi in _patterns(n, sep, kk))
        value = sensitivity_min_separation(C, k, sep)
        assert value >= math.sqrt(relaxed) * (1 - 1e-12)
        if nonnegative:  # X >= 0: the true sensitivity is sqrt(max_pi 1^T X[pi, pi] 1) = sqrt(relaxed)
            assert value >= math.sqrt(max(X[np.ix_(pi, pi)].sum() for pi in _patterns(n, sep, kk))) - 1e-12
        if sep >= b:  # disjoint supports: exact
            assert value == pytest.approx(math.sqrt(relaxed), rel=1e-12)
            assert value == pytest.approx(math.sqrt(max(np.diag(X)[pi].sum() for pi in _patterns(n, sep, kk))),
                                          rel=1e-12)


def test_min_separation_unit_columns_and_one_participation():
    C = optimize_banded(prefix_workload(30), 4, column_normalize=True)
    assert sensitivity_min_separation(C, 3, 4) == pytest.approx(math.sqrt(3), rel=1e-12)
    assert sensitivity_min_separation(C, None, 4) == pytest.approx(math.sqrt(8), rel=1e-12)  # ceil(30/4)
    rng = np.random.default_rng(3)
    D = _random_banded(rng, 9, 4)
    assert sensitivity_min_separation(D, 1, 1) == pytest.approx(sensitivity_single(D), rel=1e-12)


@pytest.mark.parametrize("groups", [1, 2, 3, 4, 5])
def test_cyclic_against_direct_sums(groups):
    rng = np.random.default_rng(groups)
    n, b = 11, 3
    for nonnegative in (True, False):
        C = _random_banded(rng, n, b, nonnegative)
        X = C.T @ C
        offsets = [list(range(j, n, groups)) for j in range(groups)]
        relaxed = max(np.abs(X[np.ix_(pi, pi)]).sum() for pi in offsets)
        value = sensitivity_cyclic(C, groups)
        assert value == pytest.approx(math.sqrt(relaxed), rel=1e-12)
        if nonnegative or groups >= b:  # exact in both cases
            assert value == pytest.approx(math.sqrt(max(X[np.ix_(pi, pi)].sum() for pi in offsets)), rel=1e-12)
        assert value <= sensitivity_min_separation(C, None, groups) * (1 + 1e-12)  # cyclic is a min-sep pattern
    assert sensitivity_cyclic(np.eye(n), groups) == pytest.approx(math.sqrt(-(-n // groups)), rel=1e-15)
    assert sensitivity_cyclic(C, 1) == pytest.approx(sensitivity_every_step(C), rel=1e-12)


def test_exactness_flags():
    rng = np.random.default_rng(6)
    P, M = _random_banded(rng, 9, 3, nonnegative=True), _random_banded(rng, 9, 3)
    assert np.any(M.T @ M < 0)
    assert sensitivity_is_exact(P, EveryStep()) and not sensitivity_is_exact(M, EveryStep())
    assert sensitivity_is_exact(M, SingleParticipation())
    assert sensitivity_is_exact(M, MinSeparation(None, 3)) and not sensitivity_is_exact(M, MinSeparation(2, 2))
    assert sensitivity_is_exact(M, MinSeparation(1, 1))
    assert sensitivity_is_exact(M, Cyclic(3)) and sensitivity_is_exact(P, Cyclic(2))
    assert not sensitivity_is_exact(M, Cyclic(1))
    # where the flag says exact, the value is the sup over scalar contributions of +-1 (attained)
    X = M.T @ M
    best = max(np.array(s) @ X[np.ix_(pi, pi)] @ np.array(s)
               for pi in _patterns(9, 1, 1) for s in itertools.product((-1, 1), repeat=len(pi)))
    assert sensitivity_min_separation(M, 1, 1) == pytest.approx(math.sqrt(best), rel=1e-12)


def test_sensitivity_dispatch_and_input_errors():
    C = _random_banded(np.random.default_rng(5), 6, 2)
    assert sensitivity(C, SingleParticipation()) == sensitivity_single(C)
    assert sensitivity(C, MinSeparation(2, 3)) == sensitivity_min_separation(C, 2, 3)
    assert sensitivity(C, Cyclic(2)) == sensitivity_cyclic(C, 2)
    with pytest.raises(ValueError, match="pattern"):
        sensitivity(C, "every step")
    with pytest.raises(ValueError, match="lower-triangular"):
        sensitivity_single(C.T)
    with pytest.raises(ValueError, match="sep"):
        sensitivity_min_separation(C, 2, 0)
    with pytest.raises(ValueError, match="groups"):
        sensitivity_cyclic(C, 0)
    with pytest.raises(ValueError, match="diagonal"):
        check_strategy(np.zeros((3, 3)))


# ------------------------------------------------------------------------------------ streaming noise

@pytest.mark.parametrize("bands", [1, 3, 8])
def test_streaming_noise_equals_dense_solve(bands):
    n, dim, sigma = 40, 5, 1.7
    A = prefix_workload(n)
    coef = optimize_banded_toeplitz(A, bands)
    for strategy, C in ((coef, banded_toeplitz(coef, n)),
                        (optimize_banded(A, bands, column_normalize=True),) * 2):
        Z = sigma * np.random.default_rng(11).standard_normal((n, dim))
        noise = BandedNoise(strategy, dim, np.random.default_rng(11), sigma=sigma)
        streamed = np.array([noise.next() for _ in range(n)])
        np.testing.assert_allclose(streamed, np.linalg.solve(C, Z), rtol=0, atol=1e-12)
        assert noise._buffer.shape == (bands - 1, dim)  # O(b dim) state


def test_streaming_noise_stops_after_a_dense_strategys_steps():
    noise = BandedNoise(np.eye(3), 2, np.random.default_rng(0))
    for _ in range(3):
        next(noise)
    with pytest.raises(ValueError, match="3 steps"):
        noise.next()


# ---------------------------------------------------------------------------------------- reductions

def test_gaussian_mu_reduces_to_dpsgd_for_one_band():
    n, sigma = 25, 2.0
    assert gaussian_mu(np.eye(n), sigma, SingleParticipation()) == pytest.approx(1 / sigma)
    # full-batch DP-SGD for n steps: n-fold composition of (1/sigma)-GDP is sqrt(n)/sigma-GDP
    assert gaussian_mu(np.eye(n), sigma, EveryStep()) == pytest.approx(math.sqrt(n) / sigma, rel=1e-15)
    assert gaussian_mu(np.eye(n), sigma, Cyclic(5)) == pytest.approx(math.sqrt(5) / sigma, rel=1e-15)
    assert gaussian_mu(np.eye(n), 0.0, EveryStep()) == math.inf
    with pytest.raises(ValueError, match="sigma"):
        gaussian_mu(np.eye(n), -1.0, EveryStep())


def test_gaussian_mu_with_banded_strategy_and_min_separation():
    C = optimize_banded(prefix_workload(32), 4, column_normalize=True)
    assert gaussian_mu(C, 2.0, MinSeparation(None, 4)) == pytest.approx(math.sqrt(8) / 2.0, rel=1e-12)


def test_amplified_equivalent_is_dpsgd_for_one_band_and_counts_rounds():
    assert amplified_dpsgd_equivalent(np.eye(10), 1, 10, 0.01, 1.5) == (0.01, 10, 1.5)
    assert amplified_dpsgd_equivalent(2.0 * np.eye(10), 1, 10, 0.01, 1.5) == (0.01, 10, 0.75)
    C = optimize_banded(prefix_workload(10), 4)
    q, steps, z = amplified_dpsgd_equivalent(C, 4, 10, 0.02, 3.0)
    assert (q, steps) == (0.02, 3) and z == pytest.approx(3.0, rel=1e-14)  # unit column norm, ceil(10/4)
    assert amplified_dpsgd_equivalent(C, 5, 10, 0.02, 3.0)[1] == 2  # fewer bands than groups is allowed
    with pytest.raises(ValueError, match="4 bands"):
        amplified_dpsgd_equivalent(C, 3, 10, 0.02, 3.0)
    with pytest.raises(ValueError, match="n x n"):
        amplified_dpsgd_equivalent(C, 4, 12, 0.02, 3.0)
    with pytest.raises(ValueError, match="sampling_rate"):
        amplified_dpsgd_equivalent(C, 4, 10, 1.5, 3.0)


# ----------------------------------------------------------------------------------------------- slow

@pytest.mark.slow
def test_optimiser_scales_to_two_thousand_steps():
    A = prefix_workload(2000)
    base = dpsgd_error(A)
    previous = math.inf
    for b in (1, 4, 16, 64):
        start = time.perf_counter()
        C = optimize_banded(A, b)
        elapsed = time.perf_counter() - start
        ratio = error(A, C) / base
        assert elapsed < 10.0, (b, elapsed)
        assert ratio <= previous * (1 + 1e-9)
        previous = ratio
    assert previous < 0.05  # measured 0.0263 at b = 64


@pytest.mark.slow
def test_streaming_noise_long_run_matches_dense():
    n, dim = 1000, 16
    C = optimize_banded(momentum_workload(n, 0.9), 32, column_normalize=True)
    noise = BandedNoise(C, dim, np.random.default_rng(2))
    streamed = np.array([noise.next() for _ in range(n)])
    Z = np.random.default_rng(2).standard_normal((n, dim))
    np.testing.assert_allclose(streamed, np.linalg.solve(C, Z), rtol=0, atol=1e-10)
