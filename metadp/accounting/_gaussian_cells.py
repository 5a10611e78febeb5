"""Gaussian cell probabilities in log space with a bound on their error (the random-allocation lattices'
cell masses: ``allocation_pld`` and ``_allocation_log``)."""

from __future__ import annotations

import math
from typing import Tuple

import numpy as np
from scipy import special

__all__ = ["log_cell"]

_U = 2.0**-53
_GL_X, _GL_W = np.polynomial.legendre.leggauss(5)
_GL_C = 120.0**4 / (11.0 * math.factorial(10) ** 3)  # 5-point Gauss-Legendre remainder constant


def log_cell(lo: np.ndarray, hi: np.ndarray, mean: float, z: float) -> Tuple[np.ndarray, np.ndarray]:
    """log Pr[N(mean, z^2) in (lo, hi]] and a bound on its absolute error (so on the mass's relative one).

    Wide cells: a difference of log_ndtr (CDFs in the lower half, survival functions in the upper: no
    cancellation against 1), each good to 16 u (|log| + 1), amplified by log(-expm1(d))'s condition.
    Narrow cells (standardised width w < 0.02): 5-point Gauss-Legendre of the density, whose remainder is
    <= C w^11 max|He_10 phi| <= C w^10 (|x| + 10)^10 e^{(|x| + w) w} relative to the cell's mass."""
    a, b = (lo - mean) / z, (hi - mean) / z
    upper = a > 0
    la = np.where(upper, special.log_ndtr(-a), special.log_ndtr(b))
    lb = np.where(upper, special.log_ndtr(-b), special.log_ndtr(a))
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        d = lb - la  # <= 0
        value = la + np.log(-np.expm1(d))
        err_d = 16.0 * _U * (np.abs(la) + np.where(np.isfinite(lb), np.abs(lb), 0.0) + 2.0)  # lb = -inf is exact
        amp = np.where(d < 0, np.exp(d) / -np.expm1(d), np.inf)
        err = err_d * (1.0 + amp) + 8.0 * _U * (np.abs(value) + 1.0)
        w = b - a
        narrow = np.isfinite(a) & (w < 0.02)
        mid, half = 0.5 * (a + b), 0.5 * w
        nodes = mid[:, None] + half[:, None] * _GL_X[None, :]
        log_terms = -0.5 * nodes**2 - 0.5 * math.log(2.0 * math.pi) + np.log(_GL_W)[None, :]
        gl = np.log(half) + special.logsumexp(log_terms, axis=1)
        reach = np.maximum(np.abs(a), np.abs(b))
        remainder = _GL_C * np.exp(10.0 * np.log(w * (reach + 10.0)) + (reach + w) * w)
        gl_err = remainder * 1.01 + 32.0 * _U * (reach**2 + np.abs(gl) + 4.0)
    return np.where(narrow, gl, value), np.where(narrow, gl_err, err)
