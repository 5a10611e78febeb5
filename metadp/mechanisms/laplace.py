"""The Laplace mechanism as a dominating pair, with its closed-form privacy loss distribution.

In units of the L1 sensitivity, the pair is P = Lap(0, b), Q = Lap(1, b) with b = scale / sensitivity.
The privacy loss L(x) = (|x - 1| - |x|) / b is clamped to [-1/b, 1/b]: it equals 1/b on x <= 0,
-1/b on x >= 1 and (1 - 2x)/b in between. With eps0 = 1/b, the law of L is

    under P:  Pr[L = eps0] = 1/2,        Pr[L = -eps0] = e^{-eps0}/2,  Pr[L <= l] = e^{(l - eps0)/2} / 2,
    under Q:  Pr[L = eps0] = e^{-eps0}/2, Pr[L = -eps0] = 1/2,          Pr[L > l]  = e^{-(l + eps0)/2} / 2,

for -eps0 <= l < eps0, and the privacy profile (hockey-stick divergence E_{e^eps}(P || Q)) is

    delta(eps) = 1 - e^eps                  for eps < -eps0,
                 1 - e^{(eps - eps0)/2}     for -eps0 <= eps < eps0,
                 0                          for eps >= eps0.

(The middle line: the set {L > eps} is x < x* = (1 - b eps)/2, with P(X < x*) = 1 - e^{-x*/b}/2 and
e^eps Q(X < x*) = e^eps e^{-(1 - x*)/b}/2 = e^{(eps - eps0)/2}/2.) The RDP curve is Mironov 2017
(arXiv:1702.07476), Prop. 6, computed by :func:`metadp.core.rdp.laplace_rdp`.

Vector outputs (L1 sensitivity). The mechanism x -> f(x) + Lap(0, lambda)^d with ||f(D) - f(D')||_1
<= Delta is dominated by the 1-d pair with b = lambda / Delta. Proof: after translating and scaling,
compare P_s = Lap(0, 1)^d with Q_s = Lap(s, 1)^d, ||s||_1 <= mu. For a product pair the hockey-stick
divergence splits over a coordinate (condition on x_2, whose own loss is L_2):

    delta_{(s1, s2)}(eps) = E_{X2 ~ Lap(0,1)} [ delta_{s1}(eps - L_2(X2)) ].

Take |s1| >= |s2| (reflect a coordinate to make shifts non-negative). L_2 <= |s2| and delta_{s1} is
non-increasing, so the integrand is at most delta_{s1}(eps - |s2|); for eps >= 0 the argument is at
least -|s1|, where the middle line applies: delta_{s1}(eps - |s2|) = delta_{|s1| + |s2|}(eps). For
eps < 0 use E_{e^eps}(P||Q) = 1 - e^eps + e^eps E_{e^-eps}(Q||P) and the reflection symmetry below.
So merging the smaller shift into the larger never decreases the profile at any eps; merging
coordinates one at a time (the merged shift stays the largest) reaches the 1-d pair with shift
||s||_1 <= mu, and delta_mu(eps) is non-decreasing in mu. ``tests/mechanisms/test_laplace.py``
checks the splitting identity and the inequality by quadrature.
"""

from __future__ import annotations

import math
from typing import Tuple

import numpy as np

from metadp.core.validation import check_positive, check_probability
from metadp.core.rdp import laplace_rdp
from metadp.mechanisms.base import DominatingPair

__all__ = ["LaplacePair", "laplace_pairs"]


class LaplacePair(DominatingPair):
    """P = Lap(0, b) and Q = Lap(1, b): the Laplace mechanism with scale b per unit L1 sensitivity.

    Both directions of a neighbouring relation have this same privacy loss distribution: the
    reflection x -> 1 - x maps Lap(0, b) to Lap(1, b) and back, so (Q, P) is the image of (P, Q)
    under a bijection, and log(q/p)(1 - x) = log(p/q)(x) with 1 - X ~ Q when X ~ P. One pair
    therefore serves add/remove and substitution alike (the relation only changes the sensitivity
    that ``scale`` is measured in).

    The loss is bounded, |L| <= eps0 = 1/b (pure eps0-DP), with atoms at +-eps0; all formulas are in
    the module docstring.

    Args:
        scale: b = (Laplace scale) / (L1 sensitivity), > 0 and finite, with 1/b finite.

    Raises:
        ValueError: if scale is not a positive finite number or 1/scale overflows.
    """

    def __init__(self, scale: float):
        self.scale = check_positive("scale", scale)
        self.epsilon0 = 1.0 / self.scale
        if not math.isfinite(self.epsilon0):
            raise ValueError(f"scale must be >= {1.0 / np.finfo(float).max:g} (1/scale overflows), got {scale!r}")

    # -- privacy loss -------------------------------------------------------------------------

    def log_ratio(self, x) -> np.ndarray:
        x = np.asarray(x, dtype=np.float64)
        e0 = self.epsilon0
        # The atoms exactly (|x - 1| - |x| can round to 1 -+ 1 ulp), the linear piece in between.
        inside = np.clip((1.0 - 2.0 * x) / self.scale, -e0, e0)
        return np.where(x <= 0.0, e0, np.where(x >= 1.0, -e0, inside))

    def loss_cdf(self, loss, under: str = "P") -> np.ndarray:
        return self._loss_tail(loss, under, upper=False)

    def loss_sf(self, loss, under: str = "P") -> np.ndarray:
        return self._loss_tail(loss, under, upper=True)

    def _loss_tail(self, loss, under: str, upper: bool) -> np.ndarray:
        """Pr[L <= l] (upper=False) or Pr[L > l] (upper=True): 0/1 outside [-eps0, eps0), closed forms inside."""
        self._check_under(under)
        loss = np.asarray(loss, dtype=np.float64)
        e0 = self.epsilon0
        inside = np.clip(loss, -e0, e0)  # keeps exp() finite off the interval; NaN passes through
        if under == "P":
            half_mass = 0.5 * np.exp(0.5 * (inside - e0))  # Pr_P[L <= l] on [-eps0, eps0)
        else:
            half_mass = 0.5 * np.exp(-0.5 * (inside + e0))  # Pr_Q[L > l] on [-eps0, eps0)
        small_side = (under == "P") != upper  # which of cdf/sf is the half_mass expression
        middle = half_mass if small_side else 1.0 - half_mass  # 1 - (<= 1/2): no cancellation
        below = 1.0 if upper else 0.0  # l < -eps0
        out = np.where(loss < -e0, below, np.where(loss >= e0, 1.0 - below, middle))
        return out

    def _cdf_relative_error(self, loss) -> np.ndarray:
        """exp(+-0.5 (l -+ eps0)) and 1 - it: the exponent's rounding, u (|l| + eps0), plus a few ulps."""
        loss = np.clip(np.asarray(loss, dtype=np.float64), -self.epsilon0, self.epsilon0)
        return 2.0**-53 * (16.0 + np.abs(loss) + self.epsilon0)

    def profile(self, epsilon) -> np.ndarray:
        """delta(eps) in closed form (module docstring); exact to rounding, no cancellation."""
        eps = np.asarray(epsilon, dtype=np.float64)
        e0 = self.epsilon0
        low = -np.expm1(np.minimum(eps, 0.0))  # used where eps < -eps0
        mid = -np.expm1(0.5 * (np.clip(eps, -e0, e0) - e0))
        return np.where(eps < -e0, low, np.where(eps >= e0, 0.0, mid))

    def rdp(self, orders) -> np.ndarray:
        """Renyi DP eps(alpha) = D_alpha(P || Q) (the same in both directions), exact (Mironov 2017, Prop. 6)."""
        # Imported here: metadp.accounting may import the mechanisms package (PLD accountant).

        return laplace_rdp(self.scale, orders)

    # -- verification -------------------------------------------------------------------------

    def loss_bracket(self, tail: float) -> Tuple[float, float]:
        check_probability("tail", tail)
        return -self.epsilon0, self.epsilon0  # the loss never leaves it: both tails are 0

    def sample(self, n: int, rng: np.random.Generator, under: str = "P") -> np.ndarray:
        self._check_under(under)
        return rng.laplace(0.0 if under == "P" else 1.0, self.scale, size=n)

    def __repr__(self) -> str:
        return f"LaplacePair(scale={self.scale:g})"


def laplace_pairs(scale: float) -> Tuple[LaplacePair, ...]:
    """Every pair whose worst case must be taken: one, since both directions share the PLD (see LaplacePair).

    Args:
        scale: Laplace scale divided by the L1 sensitivity under the chosen relation, > 0.
    """
    return (LaplacePair(scale),)
