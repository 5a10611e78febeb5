"""Banded matrix-factorization (BandMF / DP-FTRL with correlated noise): workloads, sensitivity under
participation patterns, streaming noise, and the reductions to a Gaussian mechanism and to DP-SGD.

The mechanism (Kairouz et al. 2021, arXiv:2103.00039; Denisov et al. 2022, arXiv:2202.08312): the
workload A (n x n, lower-triangular) maps the per-step gradient sums G (n x d) to what training releases,
A G (prefix sums, or the iterates of SGD with momentum). With a factorization A = B C, C lower-triangular
and invertible, the mechanism releases B (C G + Z), Z with i.i.d. N(0, sigma^2) entries; equivalently it
adds the noise (C^{-1} Z)_t to the gradient sum of step t and runs the optimiser on the noisy sums.
Privacy is that of C G + Z (B is post-processing). C is b-banded when C[i, j] = 0 for i - j >= b
(Choquette-Choo et al. 2023, "(Amplified) banded matrix factorization", arXiv:2306.08153): b = 1 is a
diagonal C, i.e. DP-SGD's independent noise.

Sensitivity (l2, add/remove one user whose clipped gradient rows g_i, ||g_i|| <= 1, enter at its
participation steps pi): Delta = sup_pi sup_g ||sum_{i in pi} C[:, i] g_i^T||_F. With X = C^T C,
Delta^2 = sup_pi sup_g sum_{i, j in pi} X_ij <g_i, g_j> <= sup_pi sum_{i, j in pi} |X_ij|, with equality
when X[pi, pi] >= 0 (take every g_i equal to one unit vector) or when the columns in pi are pairwise
orthogonal (only the diagonal is left). This is the reduction of vector to scalar contributions of
Choquette-Choo, McMahan, Rush & Thakurta 2023 (arXiv:2211.06530, Sec. 2). Under the substitution
relation the difference rows have norm <= 2, so every sensitivity here doubles.

The optimiser of C (banded Toeplitz, single-participation normalised) and the error of a factorization
are in :mod:`metadp.mechanisms.banded_opt`.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Optional, Tuple, cast

import numpy as np

from metadp.core.validation import check_count, check_probability, check_real

__all__ = [
    "prefix_workload", "momentum_workload", "check_strategy", "num_bands",
    "SingleParticipation", "EveryStep", "MinSeparation", "Cyclic", "sensitivity",
    "sensitivity_is_exact", "sensitivity_single", "sensitivity_every_step", "sensitivity_min_separation", "sensitivity_cyclic",
    "BandedNoise", "gaussian_mu", "amplified_dpsgd_equivalent",
]


# ----------------------------------------------------------------------------------------- workloads

def prefix_workload(n: int) -> np.ndarray:
    """The prefix-sum workload: A[t, s] = 1 for s <= t (n x n lower-triangular ones), so (A G)_t is the
    sum of the gradient sums of steps 0..t: the iterate of SGD with learning rate 1, up to sign."""
    n = check_count("n", n, minimum=1)
    return np.tri(n)


def momentum_workload(n: int, momentum: float, learning_rates=None) -> np.ndarray:
    """The workload of SGD with heavy-ball momentum and a learning-rate schedule.

    With momentum buffer m_t = momentum * m_{t-1} + g_t (m_{-1} = 0) and update
    theta_t = theta_{t-1} - lr_t m_t, the released iterates are theta_t = theta_{-1} - (A G)_t with

        A[t, s] = sum_{r=s}^{t} lr_r momentum^(r - s)   (s <= t),   A = L diag(lr) P,

    L the lower-triangular ones and P[r, s] = momentum^(r - s). This is the SGD-with-momentum workload of
    Denisov et al. 2022 (arXiv:2202.08312) and Choquette-Choo et al. 2023 (arXiv:2211.06530, Fig. 2 and
    Sec. 5.3: momentum 0.95 with a learning-rate cooldown), the matrix jax_privacy's
    ``streaming_matrix.momentum_sgd_matrix`` applies. momentum = 0 and unit rates give the prefix workload;
    constant rates give a Toeplitz A, A[t, s] = lr (1 - momentum^(t-s+1)) / (1 - momentum).

    Args:
        n: number of steps (rows and columns of A), >= 1.
        momentum: in [0, 1).
        learning_rates: None (all 1) or n positive learning rates lr_0..lr_{n-1}.

    Returns:
        The n x n lower-triangular workload A.

    Raises:
        ValueError: n < 1, momentum outside [0, 1), or learning rates of the wrong length or not > 0.
    """
    n = check_count("n", n, minimum=1)
    beta = check_real("momentum", momentum, low=0.0, high=1.0, high_open=True)
    lr = np.ones(n) if learning_rates is None else np.asarray(learning_rates, dtype=np.float64)
    if lr.shape != (n,) or not np.all(np.isfinite(lr)) or np.any(lr <= 0):
        raise ValueError(f"learning_rates must be {n} finite numbers > 0 (one per step), got shape "
                         f"{lr.shape} with min {np.min(lr) if lr.size else 'n/a'}")
    lag = np.subtract.outer(np.arange(n), np.arange(n))  # r - s
    decay = np.where(lag >= 0, beta ** np.maximum(lag, 0), 0.0)  # P (0 ** 0 = 1: momentum 0 is SGD)
    return np.cumsum(lr[:, None] * decay, axis=0)


# ---------------------------------------------------------------------------------------- strategies

def check_strategy(C, *, invertible: bool = True) -> np.ndarray:
    """C as a float64 array if it is a finite, square, lower-triangular matrix (with a nonzero diagonal
    when ``invertible``), else ValueError. Lower-triangular is what makes B (C G + Z) a valid mechanism on
    adaptively chosen gradients (Denisov et al. 2022, arXiv:2202.08312): step t's noise needs only G[:t+1]."""
    C = np.asarray(C, dtype=np.float64)
    if C.ndim != 2 or C.shape[0] != C.shape[1] or C.shape[0] == 0:
        raise ValueError(f"C must be a non-empty square matrix, got shape {C.shape}")
    if not np.all(np.isfinite(C)):
        raise ValueError("C must be finite, got a nan or inf entry")
    if np.any(np.triu(C, 1) != 0):
        raise ValueError("C must be lower-triangular (C[i, j] = 0 for j > i), got a nonzero entry above "
                         "the diagonal")
    if invertible and np.any(np.diag(C) == 0):
        raise ValueError(f"C must have a nonzero diagonal (be invertible), got a zero at step "
                         f"{int(np.flatnonzero(np.diag(C) == 0)[0])}")
    return C


def num_bands(C) -> int:
    """The smallest b such that C is b-banded (C[i, j] = 0 whenever i - j >= b); 1 for a diagonal C."""
    C = check_strategy(C, invertible=False)
    rows, cols = np.nonzero(C)
    return int(np.max(rows - cols)) + 1 if rows.size else 1


# ------------------------------------------------------------------------------ participation patterns

@dataclass(frozen=True)
class SingleParticipation:
    """Each user contributes at one step at most (a single epoch)."""


@dataclass(frozen=True)
class EveryStep:
    """The user contributes at every one of the n steps (full-batch, one user all the way)."""


@dataclass(frozen=True)
class MinSeparation:
    """At most ``max_participations`` steps (None: as many as fit), any two at least ``min_sep`` apart
    (b-min-separation of Choquette-Choo et al. 2023, arXiv:2306.08153; min_sep = 1 allows adjacent steps)."""
    max_participations: Optional[int]  # k >= 1, or None for ceil(n / min_sep)
    min_sep: int  # >= 1


@dataclass(frozen=True)
class Cyclic:
    """Cyclic participation: the user's group j participates at steps j, j + groups, j + 2 groups, ...
    (the (k, b)-participation of arXiv:2211.06530 with b = groups, and the cyclic order of arXiv:2306.08153's
    Algorithm 2); the worst group offset j is taken."""
    groups: int  # >= 1


# ---------------------------------------------------------------------------------------- sensitivity

def _gram(C) -> np.ndarray:
    C = check_strategy(C, invertible=False)
    return C.T @ C


def _vec_sens(x: np.ndarray, min_sep: int, k: int) -> np.ndarray:
    """max over index sets pi (|pi| <= k, any two >= min_sep apart) of sum_{i in pi} x_i, for each row of
    x (shape (rows, m)); the dynamic program VecSens (arXiv:2306.08153, Alg. 3, as in jax_privacy's
    ``sensitivity.max_participation_for_linear_fn``): F_k(i) = max(x_i + F_{k-1}(i + min_sep), F_k(i + 1))."""
    rows, m = x.shape
    f = np.zeros((rows, m + min_sep))
    for _ in range(min(k, -(-m // min_sep))):
        f[:, :m] = x + f[:, min_sep:]
        f = np.maximum.accumulate(f[:, ::-1], axis=1)[:, ::-1]
    return np.maximum(f[:, 0], 0.0)


def sensitivity_single(C) -> float:
    """Single participation: Delta = max_j ||C[:, j]|| (exact)."""
    return float(np.sqrt(np.max(np.sum(check_strategy(C, invertible=False) ** 2, axis=0))))


def sensitivity_every_step(C) -> float:
    """The user contributes at all n steps. Returns sqrt(sum_{i,j} |X_ij|), X = C^T C.

    Since Delta^2 = sup_{||g_i|| <= 1} sum_{i,j} X_ij <g_i, g_j> and |<g_i, g_j>| <= 1, the value returned
    is always an upper bound, and it is exact when X >= 0 entrywise (then it is ||C 1||: all g_i equal to one
    unit vector). It is at most sum_j ||C[:, j]|| (Cauchy-Schwarz, |X_ij| <= ||c_i|| ||c_j||), the cruder bound
    that ignores the geometry. For C = I it is sqrt(n), n-fold composition of one Gaussian step."""
    X = _gram(C)
    return float(np.sqrt(np.sum(np.abs(X))))


def sensitivity_min_separation(C, k: Optional[int], sep: int) -> float:
    """At most k participations (None: ceil(n / sep)), any two at least ``sep`` steps apart.

    Exact when ``sep >= num_bands(C)``: two columns of a b-banded lower-triangular C that are b or more
    apart have disjoint row supports (column j lives on rows j..j+b-1), so X[pi, pi] is diagonal and
    Delta^2 = max_pi sum_{i in pi} ||C[:, i]||^2, found exactly by VecSens (arXiv:2306.08153, Alg. 3); with
    unit column norms this is min(k, ceil(n / sep)). Otherwise an upper bound on sup_pi sum_{i,j in pi}
    |X_ij| (hence on Delta^2), by the two-stage relaxation of arXiv:2306.08153 (jax_privacy's
    ``get_min_sep_sensitivity_upper_bound``): r_i = max_pi sum_{j in pi} |X_ij| row by row, then
    max_pi sum_{i in pi} r_i. Each r_i only needs the window |i - j| < b, where row i of X can be nonzero.

    Raises:
        ValueError: k < 1 or sep < 1.
    """
    X = _gram(C)
    n = len(X)
    sep = check_count("sep", sep, minimum=1)
    k = -(-n // sep) if k is None else check_count("k", k, minimum=1)
    b = num_bands(C)
    if sep >= b:
        return float(np.sqrt(_vec_sens(np.diag(X)[None, :], sep, k)[0]))
    w = 2 * b - 1  # row i's window: columns i - b + 1 .. i + b - 1
    padded = np.zeros((n, n + 2 * (b - 1)))
    padded[:, b - 1:b - 1 + n] = np.abs(X)
    windows = np.lib.stride_tricks.sliding_window_view(padded, w, axis=1)[np.arange(n), np.arange(n)]
    row_max = _vec_sens(windows, sep, k)
    return float(np.sqrt(_vec_sens(row_max[None, :], sep, k)[0]))


def sensitivity_cyclic(C, groups: int) -> float:
    """Cyclic participation with ``groups`` groups: max over offsets j of sqrt(sum_{a,b in pi_j} |X_ab|),
    pi_j = {j, j + groups, ...}. Exact when every X[pi_j, pi_j] >= 0, and when groups >= num_bands(C)
    (then each X[pi_j, pi_j] is diagonal: Delta^2 = max_j sum_{i in pi_j} ||C[:, i]||^2); an upper bound
    otherwise. All n steps are swept (a group participates ceil((n - j) / groups) times).

    Raises:
        ValueError: groups < 1.
    """
    X = np.abs(_gram(C))
    n = len(X)
    g = check_count("groups", groups, minimum=1)
    k = -(-n // g)
    padded = np.zeros((k * g, k * g))
    padded[:n, :n] = X
    per_offset = np.einsum("aibi->i", padded.reshape(k, g, k, g))  # sum over the k x k block of offset i
    return float(np.sqrt(np.max(per_offset)))


def sensitivity(C, pattern) -> float:
    """l2 sensitivity of C under a participation pattern (add/remove of one user, rows clipped to norm 1):
    the ``sensitivity_*`` function of the pattern's type, with its exactness (an upper bound in general)."""
    return _sensitivity(pattern, C)


@functools.singledispatch
def _sensitivity(pattern, C) -> float:
    raise ValueError(f"pattern must be SingleParticipation, EveryStep, MinSeparation or Cyclic, got {pattern!r}")


_sensitivity.register(SingleParticipation)(lambda pattern, C: sensitivity_single(C))
_sensitivity.register(EveryStep)(lambda pattern, C: sensitivity_every_step(C))
_sensitivity.register(MinSeparation)(
    lambda pattern, C: sensitivity_min_separation(C, pattern.max_participations, pattern.min_sep))
_sensitivity.register(Cyclic)(lambda pattern, C: sensitivity_cyclic(C, pattern.groups))


def sensitivity_is_exact(C, pattern) -> bool:
    """Whether ``sensitivity(C, pattern)`` is provably the sensitivity itself rather than an upper bound:
    always for SingleParticipation; for EveryStep when X = C^T C >= 0 entrywise; for MinSeparation when
    sep >= num_bands(C) or k = 1 (then max_ij |X_ij| = max_i X_ii); for Cyclic when groups >= num_bands(C)
    or every block X[pi_j, pi_j] >= 0. False means "an upper bound, possibly exact"."""
    return _is_exact(pattern, C)


@functools.singledispatch
def _is_exact(pattern, C) -> bool:
    raise ValueError(f"pattern must be SingleParticipation, EveryStep, MinSeparation or Cyclic, got {pattern!r}")


@_is_exact.register
def _(pattern: SingleParticipation, C) -> bool:
    check_strategy(C, invertible=False)
    return True


@_is_exact.register
def _(pattern: EveryStep, C) -> bool:
    return bool(np.all(_gram(C) >= 0))


@_is_exact.register
def _(pattern: MinSeparation, C) -> bool:
    return pattern.max_participations == 1 or pattern.min_sep >= num_bands(C)


@_is_exact.register
def _(pattern: Cyclic, C) -> bool:
    X, g = _gram(C), pattern.groups
    return g >= num_bands(C) or all(np.all(X[j::g, j::g] >= 0) for j in range(min(g, len(X))))


# ------------------------------------------------------------------------------------ streaming noise

class BandedNoise:
    """Streams the correlated noise (C^{-1} Z)_t, t = 0, 1, ..., Z rows i.i.d. N(0, sigma^2 I_dim).

    x = C^{-1} Z by forward substitution: x_t = (z_t - sum_{k=1}^{b-1} C[t, t-k] x_{t-k}) / C[t, t], so only
    the last b - 1 outputs are kept (a ring buffer of shape (b - 1, dim): O(b dim) memory), as in
    Algorithm 9 of arXiv:2306.08153 and jax_privacy's ``toeplitz.inverse_as_streaming_matrix``. z_t is drawn
    as ``sigma * rng.standard_normal(dim)`` at each call, so n calls use the same draws as one
    ``sigma * rng.standard_normal((n, dim))``.

    Args:
        strategy: either the b Toeplitz coefficients (c_0, ..., c_{b-1}) of C[i, j] = c_{i-j} (any number
            of steps), or a dense n x n lower-triangular C (at most n steps; its band, n x b, is kept).
        dim: dimension of each noise row, >= 1.
        rng: a numpy Generator.
        sigma: standard deviation of Z's entries, >= 0.
    """

    _toeplitz: Optional[np.ndarray]  # the b coefficients (Toeplitz strategy), or None (dense: ``_band``)
    _band: Optional[np.ndarray]
    steps: Optional[int]

    def __init__(self, strategy, dim: int, rng: np.random.Generator, sigma: float = 1.0):
        s = np.asarray(strategy, dtype=np.float64)
        if s.ndim == 1:
            if s.size == 0 or not np.all(np.isfinite(s)) or s[0] == 0:
                raise ValueError("Toeplitz coefficients must be finite, non-empty, with c_0 != 0")
            self._toeplitz, self._band, self.steps = s, None, None
            self.bands = s.size
        else:
            C = check_strategy(s)
            self.bands = num_bands(C)
            n = len(C)
            idx = np.arange(n)[:, None] - np.arange(self.bands)[None, :]  # band[t, k] = C[t, t - k]
            self._band = np.where(idx >= 0, C[np.arange(n)[:, None], np.maximum(idx, 0)], 0.0)
            self._toeplitz, self.steps = None, n
        self.dim = check_count("dim", dim, minimum=1)
        self.sigma = check_real("sigma", sigma, low=0.0)
        self._rng = rng
        self._buffer = np.zeros((max(self.bands - 1, 0), self.dim))  # row k-1 holds x_{t-k}
        self.t = 0

    def next(self) -> np.ndarray:
        """(C^{-1} Z)_t for the current step t, then advances t. Raises ValueError past a dense C's n steps."""
        if self.steps is not None and self.t >= self.steps:
            raise ValueError(f"this BandedNoise has C for {self.steps} steps; step {self.t} was asked")
        row = cast(np.ndarray, self._toeplitz) if self._band is None else self._band[self.t]  # one is set
        z = self.sigma * self._rng.standard_normal(self.dim)
        used = min(self.t, self.bands - 1)  # earlier outputs that exist
        x = (z - row[1:used + 1] @ self._buffer[:used]) / row[0]
        if self.bands > 1:
            self._buffer = np.roll(self._buffer, 1, axis=0)
            self._buffer[0] = x
        self.t += 1
        return x

    __next__ = next

    def __iter__(self):
        return self


# ---------------------------------------------------------------------------------------- reductions

def gaussian_mu(C, sigma: float, pattern) -> float:
    """mu such that releasing C G + Z, Z ~ N(0, sigma^2) entrywise, is mu-GDP: mu = Delta / sigma.

    Theorem (Gaussian mechanism in GDP; Dong, Roth & Su 2022, arXiv:1905.02383, Thm. 2.7): adding
    N(0, sigma^2 I) to a statistic of l2 sensitivity Delta is (Delta / sigma)-GDP. Applied to the whole
    vector C G with Delta = sensitivity(C, pattern) (add/remove of one user, rows clipped to norm 1,
    participations allowed by ``pattern``), and valid for adaptively chosen gradients because C is
    lower-triangular (Denisov et al. 2022, arXiv:2202.08312; Choquette-Choo et al. 2023, arXiv:2211.06530,
    for multiple participations). B (C G + Z) is post-processing. No amplification by sampling is used.
    Exactness follows the sensitivity's (see the ``sensitivity_*`` functions); otherwise mu is an upper
    bound. For C = I and EveryStep, mu = sqrt(n) / sigma: n-fold composition of (1/sigma)-GDP
    (ibid., Cor. 3.3), i.e. full-batch DP-SGD.

    Raises:
        ValueError: sigma < 0, a bad C or pattern. sigma = 0 gives mu = inf.
    """
    sigma = check_real("sigma", sigma, low=0.0)
    delta = sensitivity(C, pattern)
    if delta == 0.0:
        return 0.0
    return math.inf if sigma == 0.0 else delta / sigma


def amplified_dpsgd_equivalent(C, bands: int, n: int, sampling_rate: float, sigma: float
                               ) -> Tuple[float, int, float]:
    """(rate, steps, noise multiplier) of the DP-SGD whose guarantee amplified BandMF inherits.

    Theorem 4 of Choquette-Choo, Ganesh, McKenna, McMahan, Rush, Thakurta & Xu 2023 ("(Amplified) banded
    matrix factorization", NeurIPS 2023, arXiv:2306.08153; the number as cited by jax_privacy's
    ``toeplitz.optimize_coefs_for_amplifications``): if C is lower-triangular and b-banded and the batches
    are drawn by their Algorithm 2 (cyclic Poisson sampling), BandMF satisfies every privacy guarantee
    ((eps, delta), RDP, PLD) of DP-SGD with Poisson sampling rate q, noise multiplier sigma / zeta, run for
    ceil(n / b) steps, where zeta = max_j ||C[:, j]|| (the single-participation sensitivity).

    Assumptions, all required: (1) the data are split, independently of their values, into b = ``bands``
    disjoint groups; step t draws each example of group t mod b independently with probability q
    (``sampling_rate``) and no other example (Alg. 2); (2) per-example gradients are clipped to l2 norm 1
    and summed; Z has i.i.d. N(0, sigma^2) entries; (3) neighbouring datasets differ by adding or removing
    one example (the Poisson-subsampled Gaussian's relation; substitution is not covered); (4) C is
    n x n, lower-triangular and b'-banded with b' <= b (a b'-banded C is b-banded). A group that appears
    floor(n / b) times is dominated by one appearing ceil(n / b) times. With b = 1 (C diagonal) this is
    DP-SGD itself: (q, n, sigma / max |C_jj|).

    Returns:
        (sampling_rate, ceil(n / bands), sigma / zeta); the multiplier is 0 when sigma is 0.

    Raises:
        ValueError: C not n x n lower-triangular with at most ``bands`` bands, bands outside [1, n],
            sampling_rate outside [0, 1], sigma < 0.
    """
    n = check_count("n", n, minimum=1)
    bands = check_count("bands", bands, minimum=1, maximum=n)
    C = check_strategy(C)
    if C.shape != (n, n):
        raise ValueError(f"C must be n x n = {n} x {n}, got shape {C.shape}")
    if num_bands(C) > bands:
        raise ValueError(f"C must be {bands}-banded (C[i, j] = 0 for i - j >= {bands}) for the amplified "
                         f"reduction, but it has {num_bands(C)} bands; use at least that many groups")
    q = check_probability("sampling_rate", sampling_rate)
    sigma = check_real("sigma", sigma, low=0.0)
    return q, -(-n // bands), sigma / sensitivity_single(C)
