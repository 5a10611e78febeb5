"""Error of a matrix factorization and the banded Toeplitz optimiser of BandMF (see
:mod:`metadp.mechanisms.banded` for the mechanism, its sensitivity and its privacy reductions).

Error (the normalisation of jax_privacy's ``toeplitz.loss`` with a mean reduction, and of the papers'
RMSE = sqrt(error)): for A = B C released as B (C G + Z), Z ~ N(0, sigma^2) entrywise with
sigma = Delta(C) (noise multiplier 1), the expected squared error per released step and per coordinate is

    error(A, C) = Delta(C)^2 ||A C^{-1}||_F^2 / n,

invariant to rescaling C. DP-SGD is C = I: error = Delta(I)^2 ||A||_F^2 / n, so error(A, C) / dpsgd_error(A)
is "BandMF error vs DP-SGD error at the same sensitivity-normalised noise" (no amplification in either).

Optimiser: C restricted to lower-triangular b-banded *Toeplitz* matrices, C[i, j] = c_{i-j} for
0 <= i - j < b, as jax_privacy's ``toeplitz.optimize_banded_toeplitz`` does (McKenna 2024,
arXiv:2405.15913). Its single-participation sensitivity is ||c|| (the first column's norm, b <= n), so
minimising ||A C^{-1}||_F^2 subject to max column norm <= 1 is minimising the scale-free
||c||^2 ||A C(c)^{-1}||_F^2 and normalising c afterwards. C^{-1} is lower-triangular Toeplitz with first
column m (C m = e_0, an IIR filter's impulse response), and with W = A^T A and S the down-shift,

    ||A C^{-1}||_F^2 = sum_{k,l} m_k m_l tr((S^k)^T W S^l) = m^T K m,   K_kl = sum_{t >= 0} W_{k+t, l+t},

so after one O(n^2) pass to build K each evaluation costs O(n^2 + n b), for any A.
"""

from __future__ import annotations

from typing import Tuple

import numpy as np
from scipy import linalg, optimize, signal

from metadp.core.validation import check_count
from metadp.mechanisms.banded import SingleParticipation, check_strategy, sensitivity

__all__ = [
    "banded_toeplitz", "toeplitz_inverse_coefficients", "prefix_square_root_coefficients",
    "toeplitz_error_and_gradient", "optimize_banded_toeplitz", "optimize_banded", "error", "dpsgd_error",
]


def _check_workload(A) -> np.ndarray:
    A = np.asarray(A, dtype=np.float64)
    if A.ndim != 2 or A.shape[0] != A.shape[1] or A.shape[0] == 0:
        raise ValueError(f"A must be a non-empty square (n x n) workload, got shape {A.shape}")
    if not np.all(np.isfinite(A)):
        raise ValueError("A must be finite, got a nan or inf entry")
    return A


def _check_coefficients(coef) -> np.ndarray:
    c = np.asarray(coef, dtype=np.float64)
    if c.ndim != 1 or c.size == 0 or not np.all(np.isfinite(c)) or c[0] == 0:
        raise ValueError(f"Toeplitz coefficients must be a non-empty finite 1-D array with c_0 != 0, got {coef!r}")
    return c


def banded_toeplitz(coef, n: int) -> np.ndarray:
    """The n x n lower-triangular Toeplitz C with C[i, j] = coef[i - j] for 0 <= i - j < len(coef)
    (coefficients past n are dropped)."""
    c = _check_coefficients(coef)
    n = check_count("n", n, minimum=1)
    first = np.zeros(n)
    first[:min(n, c.size)] = c[:n]
    return linalg.toeplitz(first, np.zeros(n))


def toeplitz_inverse_coefficients(coef, n: int) -> np.ndarray:
    """First column m (length n) of C^{-1} for C = banded_toeplitz(coef, n): C m = e_0, i.e. the impulse
    response of the all-pole filter 1 / (c_0 + c_1 z^-1 + ...), O(n b)."""
    c = _check_coefficients(coef)
    impulse = np.zeros(check_count("n", n, minimum=1))
    impulse[0] = 1.0
    return signal.lfilter([1.0], c, impulse)


def prefix_square_root_coefficients(bands: int) -> np.ndarray:
    """c_k = binom(2k, k) / 4^k, k < bands: the Toeplitz square root of the prefix workload (its Taylor
    coefficients of (1 - z)^{-1/2}; Fichtenberger, Henzinger & Upadhyay 2023, arXiv:2202.11205), truncated
    to b bands; jax_privacy's ``optimal_max_error_strategy_coefs``, used here as the initial point."""
    k = np.arange(check_count("bands", bands, minimum=1), dtype=np.float64)
    ratios = np.where(k > 0, (2 * k - 1) / np.maximum(2 * k, 1), 1.0)
    return np.cumprod(ratios)


def _shift_gram(A: np.ndarray) -> np.ndarray:
    """K[k, l] = sum_{t >= 0} W[k + t, l + t], W = A^T A: suffix sums along W's diagonals."""
    K = A.T @ A
    for i in range(len(K) - 2, -1, -1):  # K[i, j] += K[i + 1, j + 1], bottom row first
        K[i, :-1] += K[i + 1, 1:]
    return K


def _error_and_gradient(c: np.ndarray, K: np.ndarray) -> Tuple[float, np.ndarray]:
    """(m^T K m, d/dc) with m the first column of C(c)^{-1}.

    Differentiating C m = e_0: dm = -C^{-1} (dC) m, and dC = S^k for c_k, so with g = 2 K m,
    d/dc_k = -(C^{-T} g)^T S^k m = -sum_t h_t m_{t-k}, h = C^{-T} g = J C^{-1} J g (J the reversal; a
    square Toeplitz C has J C J = C^T)."""
    n = len(K)
    m = toeplitz_inverse_coefficients(c, n)
    Km = K @ m
    value = float(m @ Km)
    h = signal.lfilter([1.0], c, 2.0 * Km[::-1])[::-1]
    grad = -np.array([h[k:] @ m[:n - k] for k in range(min(c.size, n))] + [0.0] * max(c.size - n, 0))
    return value, grad


def toeplitz_error_and_gradient(coef, A) -> Tuple[float, np.ndarray]:
    """||A C^{-1}||_F^2 for C = banded_toeplitz(coef, n), and its gradient with respect to coef
    (analytic, see the module docstring; the tests check it against finite differences)."""
    A = _check_workload(A)
    return _error_and_gradient(_check_coefficients(coef), _shift_gram(A))


def optimize_banded_toeplitz(A, bands: int, iterations: int = 1000, init=None,
                             tol: float = 1e-12) -> np.ndarray:
    """Band coefficients c (length ``bands``, ||c|| = 1, c_0 > 0) of a b-banded lower-triangular Toeplitz C
    (approximately) minimising ||A C^{-1}||_F^2 subject to max column norm of C <= 1.

    L-BFGS (scipy) on log(||c||^2 ||A C(c)^{-1}||_F^2) over (c_1, ..., c_{b-1}) with c_0 = 1 (the objective
    is invariant to scaling c, and C must be invertible), with the analytic gradient; then c / ||c||. The
    problem is not convex in c: the result is a local optimum from ``init`` (default: the truncated prefix
    square root, :func:`prefix_square_root_coefficients`, whose filter 1/c(z) is stable by the
    Enestrom-Kakeya theorem since its coefficients are positive and decreasing); it is never worse than
    ``init``. bands = 1 gives c = (1,), C = I. Because a unit-norm c gives every column norm <= 1 and
    C's columns b or more apart are orthogonal, the same c is also optimal, up to the constant factor k,
    for k participations at least b apart (b-min-separation or cyclic with b groups).

    Args:
        A: n x n workload (e.g. :func:`metadp.mechanisms.banded.prefix_workload`).
        bands: b in [1, n].
        iterations: maximum L-BFGS iterations, >= 1.
        init: optional starting coefficients (length ``bands``, c_0 != 0).
        tol: L-BFGS gradient and relative-decrease tolerance, > 0.

    Raises:
        ValueError: A not square and finite, bands outside [1, n], bad init.
    """
    A = _check_workload(A)
    n = len(A)
    b = check_count("bands", bands, minimum=1, maximum=n)
    iterations = check_count("iterations", iterations, minimum=1)
    start = prefix_square_root_coefficients(b) if init is None else _check_coefficients(init)
    if start.size != b:
        raise ValueError(f"init must have bands = {b} coefficients, got {start.size}")
    if b == 1:
        return np.ones(1)
    K = _shift_gram(A)

    def objective(x):
        c = np.concatenate(([1.0], x))
        with np.errstate(over="ignore", invalid="ignore"):
            value, grad = _error_and_gradient(c, K)
            s = c @ c
            if not (np.isfinite(value) and value > 0 and np.all(np.isfinite(grad))):
                return 1e300, np.zeros_like(x)  # an unstable filter: far from any optimum, so step back
        return float(np.log(s * value)), (2.0 * c / s + grad / value)[1:]

    x0 = start[1:] / start[0]
    result = optimize.minimize(objective, x0, jac=True, method="L-BFGS-B",
                               options=dict(maxiter=iterations, gtol=tol, ftol=tol))
    x = result.x if result.fun <= objective(x0)[0] else x0
    c = np.concatenate(([1.0], x))
    return c / np.linalg.norm(c)


def optimize_banded(A, bands: int, iterations: int = 1000, init=None, column_normalize: bool = False
                    ) -> np.ndarray:
    """The n x n strategy C of :func:`optimize_banded_toeplitz` (max column norm 1).

    With ``column_normalize`` each column is divided by its norm (the last b - 1 columns of a banded
    Toeplitz matrix are truncated, so shorter), as jax_privacy's ``column_normalize_for_n`` does: every
    column then has norm exactly 1, C stays b-banded and lower-triangular, but is no longer Toeplitz
    (stream its noise with the dense C). Whether that lowers the error depends on A; compare with
    :func:`error`."""
    A = _check_workload(A)
    C = banded_toeplitz(optimize_banded_toeplitz(A, bands, iterations, init), len(A))
    return C / np.linalg.norm(C, axis=0) if column_normalize else C


def error(A, C, pattern=SingleParticipation()) -> float:
    """Delta(C)^2 ||A C^{-1}||_F^2 / n: the expected squared error per step (mean over the n rows of
    B Z, B = A C^{-1}) when sigma = Delta(C), Delta the sensitivity of C under ``pattern`` (an upper bound
    where that sensitivity is one, making this error pessimistic for the mechanism's utility, not its
    privacy). sqrt(error) is the papers' RMSE at noise multiplier 1.

    Raises:
        ValueError: A not square and finite, C not lower-triangular and invertible of the same size.
    """
    A = _check_workload(A)
    C = check_strategy(C)
    if C.shape != A.shape:
        raise ValueError(f"C must have A's shape {A.shape}, got {C.shape}")
    B_T = linalg.solve_triangular(C.T, A.T, lower=False)  # (A C^{-1})^T
    return float(sensitivity(C, pattern) ** 2 * np.sum(B_T * B_T) / len(A))


def dpsgd_error(A, pattern=SingleParticipation()) -> float:
    """:func:`error` of C = I (independent noise each step: DP-SGD without amplification):
    Delta(I)^2 ||A||_F^2 / n."""
    A = _check_workload(A)
    return error(A, np.eye(len(A)), pattern)
