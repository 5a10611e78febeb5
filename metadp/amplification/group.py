"""Group privacy: guarantees for a group of k units (records) that enter or leave together.

Four routes, from generic to mechanism-specific (DESIGN.md sec. 3.8):

* any (eps, delta)-DP mechanism, by chaining k neighbouring steps (Dwork & Roth 2014):
  :func:`group_epsilon_delta`;
* any RDP curve, by Mironov's weak triangle inequality (Mironov 2017, arXiv:1702.07476, Prop. 2):
  :func:`rdp_group`;
* the Gaussian mechanism, exactly: a group moves a clipped sum by at most k C, so the group is a
  Gaussian with noise multiplier z / k: :func:`gaussian_group_pair`;
* the Poisson-subsampled Gaussian, tightly: the number of group members in the sample is
  Binomial(k, q), and the sum moves by that many clip norms (DESIGN.md sec. 3.7; Schuchardt et al.
  2024, arXiv:2403.04867): :func:`poisson_group_pairs`.

The generic routes are valid for every mechanism but loose; the mechanism-specific pairs feed the
PLD and RDP machinery like any other dominating pair and should be preferred where they apply.
"""

from __future__ import annotations

import math
from typing import Callable, Tuple

import numpy as np
from scipy import stats

from metadp.core.validation import check_count, check_positive, check_real
from metadp.core._logmath import log_expm1
from metadp.core.rdp import orders_array
from metadp.mechanisms.gaussian import GaussianMixturePair, gaussian_pair

__all__ = [
    "GROUP_DELTA_FORMS",
    "group_epsilon_delta",
    "rdp_group",
    "gaussian_group_pair",
    "poisson_group_pairs",
]

GROUP_DELTA_FORMS = ("chain", "dwork_roth")
MAX_BASE_ORDER = 2.0**17  # rdp_group evaluates the single-unit curve at orders up to this (docstring)
# Relative round-up applied to the group delta so that the float is never below the exact value
# (log/exp and the products each carry a few ulps).
_ROUND_UP = 1.0 + 16 * np.finfo(float).eps


def group_epsilon_delta(epsilon: float, delta: float, k: int, *, form: str = "chain") -> Tuple[float, float]:
    """(eps, delta)-DP for single units implies (k eps, delta_k)-DP for groups of k units.

    Chaining the guarantee along D_0 ~ D_1 ~ ... ~ D_k (each step one unit) gives, for every event S,
    Pr[M(D_0) in S] <= e^{k eps} Pr[M(D_k) in S] + delta_k with

        chain:       delta_k = delta * sum_{i=0}^{k-1} e^{i eps} = delta (e^{k eps} - 1) / (e^eps - 1),
        dwork_roth:  delta_k = k e^{(k-1) eps} delta,

    the second being the per-term upper bound of the first, as stated after Dwork & Roth 2014
    ("The Algorithmic Foundations of Differential Privacy", Sec. 2.3, Thm. 2.2 for eps-DP and the
    remark on (eps, delta)-DP that follows it) and used in Li et al.'s task-global DP corollary
    (``dp-meta-learning-task-global.txt``, Cor. 3.1). Both are valid; "chain" is never larger and
    equals "dwork_roth" for k <= 1 or eps = 0 (both are then k delta).

    The relation is the one the base guarantee holds for (add/remove or substitution): a group of
    k units is k steps of that relation. This generic bound ignores the mechanism; for Gaussian
    noise prefer :func:`gaussian_group_pair` or :func:`poisson_group_pairs`, which are exact/tight.

    Args:
        epsilon: the single-unit epsilon, finite and >= 0.
        delta: the single-unit delta, in [0, 1].
        k: group size, an integer >= 1.
        form: ``"chain"`` (default, the exact sum) or ``"dwork_roth"`` (k e^{(k-1) eps} delta).

    Returns:
        (k eps, delta_k), delta_k capped at 1 and rounded up.

    Raises:
        ValueError: on epsilon < 0 or not finite, delta outside [0, 1], k < 1, or an unknown form.
    """
    eps = check_real("epsilon", epsilon, low=0.0)
    delta = check_real("delta", delta, low=0.0, high=1.0)
    k = check_count("k", k, minimum=1)
    if form not in GROUP_DELTA_FORMS:
        raise ValueError(f"form must be one of {GROUP_DELTA_FORMS}, got {form!r}")
    if delta == 0.0 or k == 1:
        return k * eps, delta
    if form == "dwork_roth":
        log_factor = math.log(k) + (k - 1) * eps
    elif eps == 0.0:
        log_factor = math.log(k)
    else:  # log((e^{k eps} - 1) / (e^eps - 1)), without overflow for large k eps
        log_factor = float(log_expm1(k * eps)) - float(log_expm1(eps))
    log_delta_k = math.log(delta) + log_factor
    return k * eps, min(1.0, math.exp(min(log_delta_k, 0.0)) * _ROUND_UP)


def rdp_group(rdp_curve: Callable[[np.ndarray], np.ndarray], orders, k: int) -> np.ndarray:
    """RDP for groups of k units from a single-unit RDP curve (Mironov 2017, Prop. 2).

    Mironov 2017 (arXiv:1702.07476), Prop. 2: if f is (alpha, eps)-RDP, g is 2^c-stable (neighbouring
    inputs map to inputs at distance <= 2^c) and alpha >= 2^{c+1}, then f o g is (alpha / 2^c, 3^c eps)-RDP.
    Read for a group of 2^c units at the group order beta = alpha / 2^c (so the condition is beta >= 2):

        eps_group(beta) <= 3^c eps(2^c beta),   beta >= 2.

    For orders 1 < beta < 2 the value at beta = 2 is returned, valid because Renyi divergences are
    non-decreasing in the order (van Erven & Harremoes 2014, arXiv:1206.2459, Thm. 3). For k not a
    power of two the next power 2^c >= k is used (a group of k units is also within distance 2^c),
    which is looser than necessary. k = 1 returns the base curve itself. Base orders above
    :data:`MAX_BASE_ORDER` are not evaluated (their group bound is returned as infinity, which is
    valid): some curves cost time and memory linear in the order (the fixed-size sampled Gaussian
    sums a term per integer order), and a group bound at such orders is vacuous anyway.

    The rule is generic and loose: for the Gaussian it gives 6^c alpha / (2 z^2) against the exact
    k^2 alpha / (2 z^2) of :func:`gaussian_group_pair`.

    Args:
        rdp_curve: maps a 1-d float64 array of orders (> 1, possibly +inf) to the single-unit RDP
            upper bounds at those orders (same shape, >= 0, +inf allowed), for the relation of interest.
        orders: the group orders beta > 1 at which to evaluate.
        k: group size, an integer >= 1.

    Returns:
        float64 array, one group RDP upper bound per order.

    Raises:
        ValueError: on invalid orders or k, or if ``rdp_curve`` returns a wrong shape, nan or < 0.
    """
    orders = orders_array(orders)
    k = check_count("k", k, minimum=1)
    c = (k - 1).bit_length()  # smallest c with 2^c >= k
    base_orders = orders if c == 0 else (2.0**c) * np.maximum(orders, 2.0)
    kept = base_orders <= MAX_BASE_ORDER if c > 0 else np.ones(base_orders.shape, dtype=bool)
    base = np.full(base_orders.shape, np.inf)
    if kept.any():
        values = np.asarray(rdp_curve(base_orders[kept]), dtype=np.float64)
        if values.shape != base_orders[kept].shape:
            raise ValueError(f"rdp_curve must return one value per order (shape {base_orders[kept].shape}), got "
                             f"{values.shape}")
        base[kept] = values
    if np.any(np.isnan(base)) or np.any(base < 0):
        raise ValueError("rdp_curve must return values >= 0 (not nan)")
    return (3.0**c) * base


def gaussian_group_pair(z: float, k: int) -> GaussianMixturePair:
    """The exact dominating pair of the Gaussian mechanism for groups of k units.

    A query with L2 sensitivity C per unit has sensitivity at most k C for a group of k (triangle
    inequality; attained when the k contributions are aligned), so with noise N(0, (z C)^2 I) the
    group sees a Gaussian mechanism with noise multiplier z / k: N(k, z^2) vs N(0, z^2), i.e.
    ``gaussian_pair(z / k)``; RDP k^2 alpha / (2 z^2) (Mironov 2017, arXiv:1702.07476, Prop. 7). Both
    directions of add/remove share this PLD; under substitution pass z relative to the substitution
    sensitivity (2C for a clipped sum).

    Args:
        z: noise multiplier sigma / C, > 0 and finite.
        k: group size, an integer >= 1.

    Raises:
        ValueError: on z <= 0 or not finite, or k < 1.
    """
    z = check_positive("z", z)
    k = check_count("k", k, minimum=1)
    return gaussian_pair(z / k)


def poisson_group_pairs(q: float, z: float, k: int) -> Tuple[GaussianMixturePair, ...]:
    """Tight dominating pairs of the Poisson-subsampled Gaussian for groups of k units (add/remove).

    Each unit is sampled independently with probability q and the clipped sum (clip norm C) gets
    N(0, (z C)^2 I). Adding a group of k units, J ~ Binomial(k, q) of them are sampled and the sum
    moves by at most J C; the worst case (all contributions aligned) gives, in units of C,

        add:     P = sum_{j=0}^{k} Bin(j; k, q) N(j, z^2)   vs   Q = N(0, z^2),
        remove:  P = N(0, z^2)   vs   Q = sum_{j=0}^{k} Bin(j; k, q) N(j, z^2),

    the group case of the episodic mixture of DESIGN.md sec. 3.7 and the tight group-privacy
    amplification of Schuchardt et al. 2024 ("Unified Mechanism-Specific Amplification by
    Subsampling and Group Privacy Amplification", arXiv:2403.04867). The same pair is dp-accounting's ``MixtureOfGaussiansDpEvent(z, [0..k],
    Bin(.; k, q))``. k = 1 is the usual subsampled Gaussian; q = 1 is :func:`gaussian_group_pair`.

    Args:
        q: sampling probability per unit, in (0, 1] (q = 0 releases no information about the
            group and has no dominating pair of this form).
        z: noise multiplier sigma / C, > 0 and finite.
        k: group size, an integer >= 1.

    Returns:
        (add, remove) pairs, or a single pair when q = 1 (both directions then share one PLD).

    Raises:
        ValueError: on q outside (0, 1], z <= 0 or not finite, or k < 1.
    """
    q = check_real("q", q, low=0.0, high=1.0, low_open=True)
    z = check_positive("z", z)
    k = check_count("k", k, minimum=1)
    if q == 1.0:
        return (GaussianMixturePair([1.0], [float(k)], z, "add"),)
    j = np.arange(k + 1)
    weights = stats.binom.pmf(j, k, q)
    return tuple(GaussianMixturePair(weights, j.astype(np.float64), z, d) for d in ("add", "remove"))
