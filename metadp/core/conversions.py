"""From RDP to (epsilon, delta)-DP, and back.

All conversions return valid upper bounds: given RDP values eps(alpha) that upper-bound the Renyi
divergence at each order, the (epsilon, delta) they return holds for the mechanism.

* ``cks`` (default): Canonne, Kamath & Steinke 2020 (arXiv:2004.00010, Prop. 12); equivalently
  Asoodeh et al. 2021 (arXiv:2001.05990):
  epsilon = eps(alpha) + log((alpha - 1)/alpha) - (log delta + log alpha)/(alpha - 1),
  delta = exp((alpha - 1)(eps(alpha) - epsilon) + (alpha - 1) log(1 - 1/alpha) - log alpha).
* ``classic``: Mironov 2017 (arXiv:1702.07476, Prop. 3): epsilon = eps(alpha) + log(1/delta)/(alpha - 1).

Both are combined with the total-variation bound delta <= sqrt(1 - exp(-KL)) <= sqrt(1 - exp(-eps(alpha)))
(Bretagnolle & Huber 1979; KL <= D_alpha for alpha >= 1), which certifies epsilon = 0 when it is
already below delta.
"""

from __future__ import annotations

import math

import numpy as np
from numpy.typing import ArrayLike

from metadp.core._typing import FloatArray
from metadp.core.validation import check_delta, check_real

__all__ = ["CONVERSIONS", "epsilon_from_rdp", "epsilon_from_rdp_rows", "delta_from_rdp"]

CONVERSIONS = ("cks", "classic")


def _check(orders: ArrayLike, rdp: ArrayLike, method: str) -> tuple[FloatArray, FloatArray]:
    if method not in CONVERSIONS:
        raise ValueError(f"conversion must be one of {CONVERSIONS}, got {method!r}")
    orders = np.atleast_1d(np.asarray(orders, dtype=np.float64))
    rdp = np.atleast_1d(np.asarray(rdp, dtype=np.float64))
    if orders.shape != rdp.shape:
        raise ValueError(f"orders and rdp must have the same shape, got {orders.shape} and {rdp.shape}")
    if np.any(~(orders > 1.0)):
        raise ValueError("orders must be > 1")
    if np.any(np.isnan(rdp)) or np.any(rdp < 0):
        raise ValueError("rdp values must be >= 0 (not nan)")
    return orders, rdp


def epsilon_from_rdp(orders: ArrayLike, rdp: ArrayLike, delta: float, method: str = "cks") -> tuple[float, float]:
    """Smallest certified epsilon over the given orders.

    Args:
        orders: Renyi orders alpha > 1.
        rdp: RDP upper bounds eps(alpha) at those orders.
        delta: target delta in (0, 1).
        method: ``"cks"`` or ``"classic"`` (module docstring).

    Returns:
        (epsilon, alpha): the bound (>= 0, possibly inf) and the order attaining it (nan when the
        total-variation bound certifies epsilon = 0).
    """
    delta = check_delta("delta", delta)
    orders, rdp = _check(orders, rdp, method)
    eps = _epsilon_per_order(orders, rdp, delta, method)
    if np.any(_tv_delta(rdp) <= delta):
        return 0.0, math.nan
    i = int(np.argmin(eps))
    return max(0.0, float(eps[i])), float(orders[i])


def epsilon_from_rdp_rows(orders: ArrayLike, rdp_rows: ArrayLike, delta: float, method: str = "cks") -> FloatArray:
    """``epsilon_from_rdp`` for each row of a (rows, orders) matrix of RDP curves, vectorised."""
    delta = check_delta("delta", delta)
    rdp_rows = np.atleast_2d(np.asarray(rdp_rows, dtype=np.float64))
    orders, _ = _check(orders, rdp_rows[0], method)
    if rdp_rows.shape[1] != len(orders):
        raise ValueError(f"rdp_rows must have {len(orders)} columns (one per order), got {rdp_rows.shape[1]}")
    if np.any(np.isnan(rdp_rows)) or np.any(rdp_rows < 0):
        raise ValueError("rdp values must be >= 0 (not nan)")
    eps = np.min(_epsilon_per_order(orders[None, :], rdp_rows, delta, method), axis=1)
    tv_ok = np.any(_tv_delta(rdp_rows) <= delta, axis=1)
    return np.where(tv_ok, 0.0, np.maximum(eps, 0.0))


def _tv_delta(rdp: ArrayLike) -> FloatArray:
    """Total-variation bound sqrt(1 - e^{-rdp}) >= TV (Bretagnolle-Huber; KL <= D_alpha), rounded up.

    The factor 1 + 8 eps covers the rounding of expm1 and sqrt, so the float is never below the
    exact value (the pessimistic direction for a delta).
    """
    with np.errstate(over="ignore", invalid="ignore"):
        return np.minimum(1.0, np.sqrt(-np.expm1(-np.asarray(rdp, dtype=np.float64))) * (1.0 + 8 * np.finfo(float).eps))


def _epsilon_per_order(orders: FloatArray, rdp: FloatArray, delta: float, method: str) -> FloatArray:
    """The conversion's epsilon at every order (vectorised, inf where rdp is inf)."""
    a = np.where(np.isfinite(orders), orders, 2.0)
    with np.errstate(invalid="ignore"):
        if method == "cks":
            eps = rdp + np.log1p(-1.0 / a) - (math.log(delta) + np.log(a)) / (a - 1.0)
        else:
            eps = rdp - math.log(delta) / (a - 1.0)
    # Infinite order: the limit is eps(inf) itself for both conversions.
    eps = np.where(np.isfinite(orders), eps, rdp)
    return np.where(np.isnan(eps), np.inf, eps)


def delta_from_rdp(orders: ArrayLike, rdp: ArrayLike, epsilon: float, method: str = "cks",
                   total_variation: bool = True) -> tuple[float, float]:
    """Smallest certified delta for a given epsilon over the given orders.

    ``total_variation=False`` leaves out the total-variation bound (used when refining the order).

    Returns:
        (delta, alpha): the bound in [0, 1] and the order attaining it (nan for the TV bound).
    """
    epsilon = check_real("epsilon", epsilon, low=0.0)
    orders, rdp = _check(orders, rdp, method)
    a = np.where(np.isfinite(orders), orders, 2.0)
    with np.errstate(invalid="ignore", over="ignore"):
        if method == "cks":
            log_delta = (a - 1.0) * (rdp - epsilon + np.log1p(-1.0 / a)) - np.log(a)
        else:
            log_delta = (a - 1.0) * (rdp - epsilon)
        log_delta = np.where(np.isfinite(orders), log_delta, np.where(rdp <= epsilon, -np.inf, 0.0))
        log_delta = np.where(np.isnan(log_delta), np.inf, log_delta)
    i = int(np.argmin(log_delta))
    best, order = float(log_delta[i]), float(orders[i])
    if not total_variation:
        return float(min(1.0, math.exp(min(best, 0.0)))), order
    # KL <= D_alpha for every alpha, so the smallest RDP value gives the tightest TV bound.
    tv_delta = float(_tv_delta(np.min(rdp)))
    conversion_delta = float(min(1.0, math.exp(min(best, 0.0))))
    if tv_delta < conversion_delta:  # returned as computed, not through log/exp, so it round-trips
        return tv_delta, math.nan
    return conversion_delta, order
