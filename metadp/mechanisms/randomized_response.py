"""Binary randomized response (Warner 1965) as a dominating pair on {0, 1} embedded in the real line.

The mechanism reports a private bit truthfully with probability p >= 1/2 and flipped otherwise;
neighbouring inputs are the two values of the bit (one respondent's answer changes). The pair is

    P = RR(1):  P(1) = p,      P(0) = 1 - p,
    Q = RR(0):  Q(1) = 1 - p,  Q(0) = p,

with eps0 = log(p / (1 - p)), i.e. p = e^eps0 / (1 + e^eps0). The privacy loss is +eps0 at output 1
and -eps0 at output 0, so under P it is +eps0 w.p. p and -eps0 w.p. 1 - p, and under Q the reverse.
Privacy profile (hockey-stick divergence E_{e^eps}(P || Q), Kairouz, Oh & Viswanath 2015,
arXiv:1311.0776, Sec. 3):

    delta(eps) = 1 - e^eps                                      for eps < -eps0,
                 p - e^eps (1 - p) = p (1 - e^{eps - eps0})     for -eps0 <= eps < eps0,
                 0                                              for eps >= eps0.

RDP (the Renyi divergence of two Bernoulli laws): with t = (alpha - 1) eps0,

    (alpha - 1) eps(alpha) = log(p e^t + (1 - p) e^{-t})
                           = log1p(2 sinh^2(t/2) + tanh(eps0/2) sinh(t))     (both terms >= 0)
                           = t + log p + log1p(e^{-eps0 - 2t}),

the middle form for t <= 1 (no cancellation near alpha = 1 or p = 1/2), the last beyond; eps(inf) = eps0.
"""

from __future__ import annotations

import math
from typing import Optional, Tuple, cast

import numpy as np
from scipy import special

from metadp.core.validation import check_real, check_probability
from metadp.core.rdp import orders_array
from metadp.mechanisms.base import DominatingPair

__all__ = ["RandomizedResponsePair", "randomized_response_pairs", "randomized_response"]


class RandomizedResponsePair(DominatingPair):
    """P = Bernoulli(p), Q = Bernoulli(1 - p) on {0, 1}: binary randomized response, truth probability p.

    Both directions have the same privacy loss distribution (relabelling x -> 1 - x swaps P and Q),
    so this one pair serves every relation. p = 1/2 is the trivial mechanism (loss identically 0);
    p = 1 (no randomisation, eps0 = inf) is refused because no finite loss range covers it.

    Args:
        truth_probability: p in [1/2, 1).

    Raises:
        ValueError: if p is outside [1/2, 1).
    """

    def __init__(self, truth_probability: float):
        p = check_real("truth_probability", truth_probability, low=0.5, high=1.0, high_open=True)
        # 1 - p and 2p - 1 are exact in double precision for p in [1/2, 1).
        self._set(p, 1.0 - p, math.log1p((2.0 * p - 1.0) / (1.0 - p)), 2.0 * p - 1.0)

    @classmethod
    def from_epsilon(cls, epsilon0: float) -> "RandomizedResponsePair":
        """The pair with eps0 = log(p / (1 - p)), i.e. p = e^eps0 / (1 + e^eps0).

        Args:
            epsilon0: the pure-DP parameter of the mechanism, finite and >= 0. (Beyond 36.7, p rounds
                to 1 in double precision; 1 - p is stored separately and stays exact.)
        """
        e0 = check_real("epsilon0", epsilon0, low=0.0)
        pair = cls.__new__(cls)
        pair._set(float(special.expit(e0)), float(special.expit(-e0)), e0, math.tanh(0.5 * e0))
        return pair

    def _set(self, p: float, one_minus_p: float, epsilon0: float, two_p_minus_1: float) -> None:
        self.truth_probability = p
        self._one_minus_p = one_minus_p  # kept separately: 1 - p loses digits when p -> 1
        self.epsilon0 = epsilon0
        self._tanh_half = two_p_minus_1  # 2p - 1 = tanh(eps0/2), kept separately: p - (1-p) cancels

    # -- privacy loss -------------------------------------------------------------------------

    def log_ratio(self, x) -> np.ndarray:
        x = np.asarray(x, dtype=np.float64)
        if np.any((x != 0.0) & (x != 1.0)):
            raise ValueError("randomized response outputs x must be 0 or 1 (neither P nor Q has other mass)")
        return np.where(x == 1.0, self.epsilon0, -self.epsilon0)

    def _masses(self, under: str) -> Tuple[float, float]:
        """(Pr[L = -eps0], Pr[L = +eps0]) under P or Q."""
        self._check_under(under)
        p, r = self.truth_probability, self._one_minus_p
        return (r, p) if under == "P" else (p, r)

    def loss_cdf(self, loss, under: str = "P") -> np.ndarray:
        low_mass, _ = self._masses(under)
        loss = np.asarray(loss, dtype=np.float64)
        e0 = self.epsilon0
        # Right-continuous: Pr[L <= l] jumps at -eps0 and +eps0 (one jump to 1 when eps0 = 0).
        out = np.where(loss >= e0, 1.0, np.where(loss >= -e0, low_mass, 0.0))
        return np.where(np.isnan(loss), np.nan, out)

    def loss_sf(self, loss, under: str = "P") -> np.ndarray:
        _, high_mass = self._masses(under)
        loss = np.asarray(loss, dtype=np.float64)
        e0 = self.epsilon0
        out = np.where(loss >= e0, 0.0, np.where(loss >= -e0, high_mass, 1.0))
        return np.where(np.isnan(loss), np.nan, out)

    def profile(self, epsilon) -> np.ndarray:
        """delta(eps) in closed form (module docstring), written without cancellation."""
        eps = np.asarray(epsilon, dtype=np.float64)
        e0 = self.epsilon0
        low = -np.expm1(np.minimum(eps, 0.0))
        mid = -self.truth_probability * np.expm1(np.minimum(eps - e0, 0.0))
        out = np.where(eps < -e0, low, np.where(eps >= e0, 0.0, mid))
        return np.where(np.isnan(eps), np.nan, out)

    def rdp(self, orders) -> np.ndarray:
        """Renyi DP eps(alpha) = D_alpha(P || Q) (equal in both directions), exact; eps(inf) = eps0."""
        alpha = orders_array(orders)
        e0 = self.epsilon0
        finite = np.isfinite(alpha)
        am1 = np.where(finite, alpha - 1.0, 1.0)
        t = am1 * e0
        small = t <= 1.0
        ts = np.where(small, t, 0.0)
        # t <= 1: log1p of a sum of non-negative terms; 2p - 1 = tanh(eps0 / 2).
        near = np.log1p(2.0 * np.sinh(0.5 * ts) ** 2 + self._tanh_half * np.sinh(ts)) / am1
        # t > 1: eps0 + (log p + log1p(e^{-eps0 - 2t})) / (alpha - 1), no overflow as alpha -> inf.
        tl = np.where(small, 1.0, t)
        far = e0 + (math.log(self.truth_probability) + np.log1p(np.exp(-e0 - 2.0 * tl))) / am1
        # D_alpha <= D_inf = eps0: the cap only removes rounding (one ulp near alpha = 1, p -> 1).
        return np.minimum(np.where(finite, np.where(small, near, far), e0), e0)

    # -- verification -------------------------------------------------------------------------

    def loss_bracket(self, tail: float) -> Tuple[float, float]:
        check_probability("tail", tail)
        return -self.epsilon0, self.epsilon0  # the support of the loss: both tails are 0

    def sample(self, n: int, rng: np.random.Generator, under: str = "P") -> np.ndarray:
        self._check_under(under)
        one = self.truth_probability if under == "P" else self._one_minus_p
        return (rng.random(n) < one).astype(np.float64)

    def __repr__(self) -> str:
        return f"RandomizedResponsePair(truth_probability={self.truth_probability!r})"


def randomized_response_pairs(truth_probability: Optional[float] = None, *,
                              epsilon0: Optional[float] = None) -> Tuple[RandomizedResponsePair, ...]:
    """The pairs whose worst case must be taken: one (both directions share the PLD).

    Give exactly one of truth_probability (p in [1/2, 1)) or epsilon0 (log(p / (1 - p)) >= 0).

    Raises:
        ValueError: if both or neither are given, or the value is out of range.
    """
    if (truth_probability is None) == (epsilon0 is None):
        raise ValueError("give exactly one of truth_probability or epsilon0")
    if epsilon0 is not None:
        return (RandomizedResponsePair.from_epsilon(epsilon0),)
    return (RandomizedResponsePair(cast(float, truth_probability)),)  # given: exactly one is


def randomized_response(bits, truth_probability: float, rng: np.random.Generator) -> np.ndarray:
    """Releases each bit truthfully with probability p, flipped otherwise (the mechanism itself).

    Args:
        bits: array of 0/1 values (any shape), one private bit per entry.
        truth_probability: p in [1/2, 1) (eps0 = log(p / (1 - p)) per bit).
        rng: numpy Generator.

    Returns:
        int array of the same shape.

    Raises:
        ValueError: if some entry is not 0 or 1, or p is out of range.
    """
    p = check_real("truth_probability", truth_probability, low=0.5, high=1.0, high_open=True)
    b = np.asarray(bits)
    if np.any((b != 0) & (b != 1)):
        raise ValueError("bits must be 0 or 1")
    flip = rng.random(b.shape) >= p
    return np.where(flip, 1 - b, b).astype(np.int64)
