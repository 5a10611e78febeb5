"""Cumulant generating functions of lattice pmfs, exact and block-approximate: how the PLD accountant
chooses its exponential tilts and Chernoff parameters (``metadp.accounting._pld_compose``,
``_pld_bounds``).

``cgf`` is exact (in floating point) and enters bounds; ``approximate_cgf`` only chooses among tilts
or Chernoff parameters, where any choice gives a valid bound that is then computed exactly, so its
error costs tightness or time, never validity. ``log_hockey_constant`` turns a Chernoff bound on a
tail into one on delta.
"""

from __future__ import annotations

import math
from typing import Dict, Tuple, cast

import numpy as np
from numpy.typing import ArrayLike
from scipy import special

from metadp.core._typing import FloatArray

__all__ = ["SEARCH_GUARD", "approximate_cgf", "cgf", "log_hockey_constant", "log_inverse", "positive_logs"]


def log_inverse(rel: float) -> float:
    """-log(1 - rel): a relative error's factor on a composed mass, in log (inf from rel >= 1)."""
    return -math.log1p(-rel) if rel < 1.0 else math.inf


# id(pmf) -> (pmf, positive indices, their logs): ``cgf``'s memo (it holds the array: ids stay unique)
_LOGS: Dict[int, Tuple[FloatArray, np.ndarray, FloatArray]] = {}


def positive_logs(pmf: FloatArray) -> Tuple[np.ndarray, FloatArray]:
    """(indices of the positive masses, their logs), once per pmf array (``cgf``, ``tilt``)."""
    found = _LOGS.get(id(pmf))
    if found is None or found[0] is not pmf:
        keep = np.nonzero(pmf > 0)[0]
        found = (pmf, keep, np.log(pmf[keep]))
        if len(_LOGS) >= 6:  # pmfs can be long: a few at a time (the current query's)
            _LOGS.pop(next(iter(_LOGS)))
        _LOGS[id(pmf)] = found
    return found[1], found[2]


def cgf(pmf: FloatArray, start: int, thetas: ArrayLike) -> FloatArray:
    """log sum_j pmf_j e^{theta (start + j)} for each theta (index units), for the positive masses."""
    thetas = np.atleast_1d(np.asarray(thetas, dtype=np.float64))
    keep, log_p = positive_logs(pmf)
    idx = (keep + start).astype(np.float64)
    out = np.empty(len(thetas))
    for i in range(0, len(thetas), 16):  # bounded temporaries
        block = thetas[i:i + 16]
        exponent = log_p[None, :] + block[:, None] * idx[None, :]
        top = exponent.max(axis=1)
        np.exp(exponent - top[:, None], out=exponent)
        out[i:i + 16] = top + np.log(exponent.sum(axis=1))
    return out


# id(pmf) -> (pmf, log block masses, block centroids, variances, width): ``approximate_cgf``'s blocks
_COARSE: Dict[int, Tuple[FloatArray, FloatArray, FloatArray, FloatArray, int]] = {}
_BLOCKS = 512
_GUARD = 0.01
SEARCH_GUARD = 0.5  # the block cgf's allowed error (nats) in choose_theta's Chernoff search


def approximate_cgf(pmf: FloatArray, start: int, thetas: ArrayLike, count: int = 1,
                    guard: float = _GUARD) -> FloatArray:
    """count x ``cgf`` with the pmf summed into at most ``_BLOCKS`` blocks: only to choose among tilts or
    Chernoff parameters, where any choice is valid and the bound itself is then computed exactly.

    Each block (w indices wide) enters with its mass m, centroid c and variance v as m e^{theta c +
    theta^2 v / 2}: its own log-mgf to second order, off by about |theta|^3 (w - 1)^3 / 6 per step (the
    third moment about the centroid; a block of centroids alone, as before, was off by up to theta^2
    w^2 / 8 by Hoeffding's lemma, so long compositions fell back on the exact cgf at almost every
    theta). Where that, times ``count``, exceeds ``guard`` (or |theta| (w - 1) > 1) the exact cgf is used.
    The blocks are kept per pmf array (the memo holds the array, so its id is not reused)."""
    thetas = np.atleast_1d(np.asarray(thetas, dtype=np.float64))
    found = _COARSE.get(id(pmf))
    if found is None or found[0] is not pmf:
        width = max(1, -(-len(pmf) // _BLOCKS))
        padded = np.zeros(-(-len(pmf) // width) * width)
        padded[: len(pmf)] = np.maximum(pmf, 0.0)
        blocks = padded.reshape(-1, width)
        mass = blocks.sum(axis=1)
        keep = mass > 0
        offsets = np.arange(width, dtype=np.float64)
        centroid = (blocks @ offsets)[keep] / mass[keep]
        variance = np.maximum((blocks @ (offsets * offsets))[keep] / mass[keep] - centroid * centroid, 0.0)
        found = (pmf, np.log(mass[keep]), width * np.nonzero(keep)[0] + centroid, 0.5 * variance, width)
        if len(_COARSE) >= 16:
            _COARSE.pop(next(iter(_COARSE)))
        _COARSE[id(pmf)] = found
    _, log_mass, centre, half_variance, width = found
    centre = centre + start
    exponent = log_mass[None, :] + thetas[:, None] * centre[None, :] + (thetas * thetas)[:, None] * half_variance[None, :]
    top = exponent.max(axis=1)
    out: FloatArray = top + np.log(np.exp(exponent - top[:, None]).sum(axis=1))
    reach = np.abs(thetas) * (width - 1)
    coarse = (count * reach**3 / 6.0 > guard) | (reach > 1.0)
    if np.any(coarse):
        out[coarse] = cgf(pmf, start, thetas[coarse])
    return count * out


def log_hockey_constant(lam: ArrayLike) -> FloatArray:
    """log max_{t >= 0} (1 - e^{-t}) e^{-lam t} = lam log lam - (lam + 1) log(lam + 1): the constant with
    (1 - e^{x - s})_+ <= c(lam) e^{lam (s - x)}, which turns a Chernoff bound into one on delta."""
    lam = np.asarray(lam, dtype=np.float64)
    return cast(FloatArray, special.xlogy(lam, lam) - (lam + 1.0) * np.log1p(lam))
