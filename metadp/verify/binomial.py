"""One-sided exact binomial (Clopper-Pearson) confidence bounds, as the audit and the planner use them.

For K ~ Bin(n, p), the lower bound at level a is the Beta(k, n - k + 1) quantile at a, the upper bound
the Beta(k + 1, n - k) quantile at 1 - a (Clopper & Pearson 1934, Biometrika 26:404): equivalently the
x solving Pr[Bin(n, x) >= k] = a, resp. Pr[Bin(n, x) <= k] = a, with Pr[Bin(n, x) >= k] = I_x(k, n - k + 1),
the regularized incomplete beta. scipy's quantiles are checked against that tail and redone by root
finding where they miss (:func:`_cp_solve`, which the planner also uses directly: it is ~100 times
faster than scipy's quantile at n ~ 1e10).
"""

from __future__ import annotations

from typing import Union, cast

import numpy as np
from numpy.typing import ArrayLike
from scipy import special, stats

__all__ = ["cp_lower", "cp_upper"]

_CP_CHECK = 1e-6  # relative miss of the binomial tail at which a scipy Clopper-Pearson bound is recomputed


def cp_lower(k: ArrayLike, n: ArrayLike, level: Union[float, np.ndarray]) -> np.ndarray:
    """One-sided exact (Clopper-Pearson) lower bound: Pr[p >= bound] >= 1 - level for K ~ Bin(n, p).

    The bound is the Beta(k, n - k + 1) quantile at ``level`` (0 when k = 0); Clopper & Pearson 1934.
    scipy's quantile is checked against the binomial tail it must solve and redone by bisection where
    it misses (it returned 2.4e-7 for k = 1000 at n = 1e10, above k / n, where the bound is 9.1e-8).
    """
    kk, nn = np.asarray(k, dtype=np.float64), np.asarray(n, dtype=np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        out = stats.beta.ppf(level, kk, nn - kk + 1.0)
        tail = special.betainc(np.maximum(kk, 1e-300), nn - kk + 1.0, out)  # Pr[Bin(n, out) >= k]: level
    out = _redo_misses(out, tail, kk, nn, level, upper=False)
    return np.where(kk <= 0, 0.0, out)


def cp_upper(k: ArrayLike, n: ArrayLike, level: Union[float, np.ndarray]) -> np.ndarray:
    """One-sided exact upper bound: the Beta(k + 1, n - k) quantile at 1 - level (1 when k = n)."""
    kk, nn = np.asarray(k, dtype=np.float64), np.asarray(n, dtype=np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        out = stats.beta.isf(level, kk + 1.0, nn - kk)  # isf keeps tiny levels exact (1 - level rounds)
        tail = special.betainc(np.maximum(nn - kk, 1e-300), kk + 1.0, 1.0 - out)  # Pr[Bin(n, out) <= k]: level
    out = _redo_misses(out, tail, kk, nn, level, upper=True)
    return np.where(kk >= nn, 1.0, out)


def _redo_misses(out: np.ndarray, tail: np.ndarray, k: np.ndarray, n: np.ndarray, level: Union[float, np.ndarray],
                 upper: bool) -> np.ndarray:
    miss = ~(np.abs(tail / level - 1.0) <= _CP_CHECK) & (k > 0) & (k < n)
    if not miss.any():
        return out
    redone = np.array(out, dtype=np.float64, copy=True)
    k_miss, n_miss, level_miss = [np.broadcast_to(a, redone.shape)[miss] for a in (k, n, level)]
    redone[miss] = _cp_solve(k_miss, n_miss, level_miss, upper=upper)
    return redone


def _cp_solve(k_in: ArrayLike, n_in: ArrayLike, level_in: ArrayLike, upper: bool) -> np.ndarray:
    """``cp_upper`` (``upper=True``) or ``cp_lower`` of counts k, by root finding on the binomial tail.

    The bound x solves Pr[Bin(n, x) <= k] = level (upper) or Pr[Bin(n, x) >= k] = level (lower), with
    Pr[Bin(n, x) >= k] = I_x(k, n - k + 1), the regularized incomplete beta: a few microseconds a call
    where scipy's beta quantile takes ~0.2 ms at n ~ 1e10. Illinois (regula falsi) steps on the
    tail's normal score, nearly linear in x, in a bracket about Wilson's score bound; the answer is
    the bracket's end past the bound (never inside the exact interval), within 1e-10 of it.
    """
    k, n, level = np.broadcast_arrays(*(np.asarray(a, dtype=np.float64) for a in (k_in, n_in, level_in)))
    shape = k.shape
    k, n, level = k.ravel(), n.ravel(), level.ravel()
    target = special.ndtri(level)
    sign = 1.0 if upper else -1.0
    z = -np.minimum(target, 0.0)
    centre = np.clip(k + 0.5 * sign, 0.0, n) / n  # Wilson's score bound, with continuity correction
    spread = z * np.sqrt(centre * (1.0 - centre) / n + z * z / (4.0 * n * n))
    start = np.clip((centre + z * z / (2.0 * n) + sign * spread) / (1.0 + z * z / n), 0.0, 1.0)
    sd = np.sqrt(np.maximum(k * (n - k), 1.0) / n) / n
    width = 0.05 * sd + 2.0 / n  # about the start: CP and this Wilson bound differ by O(1/n)

    # ndtri(tail) - ndtri(level) for elements i: > 0 inside the interval, < 0 past it
    def score(x: np.ndarray, i: np.ndarray) -> np.ndarray:
        ki, ni = k[i], n[i]
        with np.errstate(invalid="ignore", divide="ignore"):
            if upper:  # Pr[Bin(n, x) <= k] = I_{1-x}(n - k, k + 1), decreasing in x
                tail = special.betainc(np.maximum(ni - ki, 1e-300), ki + 1.0, 1.0 - x)
            else:  # Pr[Bin(n, x) >= k], increasing in x
                tail = special.betainc(np.maximum(ki, 1e-300), ni - ki + 1.0, x)
            return cast(np.ndarray, np.clip(special.ndtri(tail), -40.0, 40.0) - target[i])

    every = np.arange(k.size)
    near = np.clip(start - sign * width, 0.0, 1.0)
    s_near = score(near, every)
    for _ in range(60):  # move the near end back until it is inside the interval (score >= 0)
        i = np.flatnonzero((s_near < 0) & (near > 0.0) & (near < 1.0))
        if not i.size:
            break
        width[i] *= 2.0
        near[i] = np.clip(start[i] - sign * width[i], 0.0, 1.0)
        s_near[i] = score(near[i], i)
    far = np.clip(start + sign * width, 0.0, 1.0)
    s_far = score(far, every)
    for _ in range(60):  # and the far end out until it is past the bound (or at 0 or 1)
        i = np.flatnonzero((s_far >= 0) & (far > 0.0) & (far < 1.0))
        if not i.size:
            break
        width[i] *= 2.0
        near[i], s_near[i] = far[i], s_far[i]
        far[i] = np.clip(start[i] + sign * width[i], 0.0, 1.0)
        s_far[i] = score(far[i], i)
    for _ in range(100):  # Illinois steps on the elements whose bracket is still open
        i = np.flatnonzero(np.abs(far - near) > 1e-10 * np.abs(far))
        if not i.size:
            break
        a, b, sa, sb = near[i], far[i], s_near[i], s_far[i]
        with np.errstate(invalid="ignore", divide="ignore"):
            x = b - sb * (b - a) / (sb - sa)
        x = np.where(np.isfinite(x) & ((x - a) * (b - x) > 0), x, 0.5 * (a + b))
        s_x = score(x, i)
        past = s_x < 0  # the kept end's score is halved, so both ends keep moving
        near[i], s_near[i] = np.where(past, a, x), np.where(past, 0.5 * sa, s_x)
        far[i], s_far[i] = np.where(past, x, b), np.where(past, s_x, 0.5 * sb)
    far = np.where((k >= n) if upper else (k <= 0), 1.0 if upper else 0.0, far)
    return cast(np.ndarray, far.reshape(shape))
