"""Dominating pairs: a mechanism's worst case as two distributions (P, Q) on the real line.

For a mechanism M and a neighbouring relation, (P, Q) dominates M if for every neighbouring pair
(D, D') and every epsilon, the hockey-stick divergence E_{e^eps}(M(D) || M(D')) is at most
E_{e^eps}(P || Q) (Zhu, Dong & Wang 2022, arXiv:2106.08567, Def. 7). Everything the accountants need
follows from the privacy loss L = log(dP/dQ):

* the privacy profile delta(eps) = P(L > eps) - e^eps Q(L > eps)  (Balle et al. 2020, arXiv:1807.01647);
* the privacy loss distribution (the law of L under P) and the law of L under Q, as CDF and
  survival function (the PLD accountant discretises these; survival functions keep tail masses exact);
* a sampler of P and Q, for empirical verification.

Add/remove relations need both directions, (P, Q) for "add" and its mirror for "remove"; a mechanism's
``pairs(relation)`` returns every pair whose worst case must be taken.
"""

from __future__ import annotations

import abc
import dataclasses
from typing import Optional, Tuple

import numpy as np

__all__ = ["Attained", "DominatingPair"]


@dataclasses.dataclass(frozen=True)
class Attained:
    """Pairs that named neighbouring datasets attain at every step, for a pair that dominates one step only.

    A dominating pair bounds every neighbouring pair of datasets at one step; its T-fold composition bounds
    T adaptively chosen steps (Zhu, Dong & Wang 2022, arXiv:2106.08567, Thm 10). A lower bound on that
    composition is a lower bound on the *mechanism* only if some pair of neighbouring datasets produces the
    pair at every step. Where no datasets are shown to (the pair covers several configurations at once, as
    the symmetrised pair of fixed-size sampling under substitution does), a pair names here the composition
    that named datasets do attain: its lower bound is then the mechanism's (``PldAccountant``).
    """

    pairs: tuple  # one pair per ordering of the two datasets (as an item's (add, remove)), or one for both
    datasets: str  # the datasets that attain them, in words: what a report prints beside the lower bound
    # total variation between ``pairs`` and the datasets' exact releases, per step (truncated mixture weights
    # on the numerator's side): the lower end is taken at delta + steps x slack, which covers it
    slack: float = 0.0


class DominatingPair(abc.ABC):
    """Two distributions (P, Q) on the real line and the privacy loss L = log dP/dQ between them."""

    # ``cell_masses`` cells are exactly the loss intervals (e_{i-1}, e_i] (True here: computed from the
    # loss CDF); a subclass that cuts the output space at computed inverses of the edges sets False
    exact_loss_cells = True
    # None: named neighbouring datasets produce this pair at every step, so a lower bound on its composition
    # bounds the mechanism; otherwise the pairs such datasets do produce (``Attained``)
    attained: Optional[Attained] = None

    @abc.abstractmethod
    def loss_cdf(self, loss, under: str = "P") -> np.ndarray:
        """Pr[L <= loss] for X ~ P (``under="P"``) or X ~ Q (``under="Q"``), vectorised."""

    @abc.abstractmethod
    def loss_sf(self, loss, under: str = "P") -> np.ndarray:
        """Pr[L > loss] under P or Q (computed directly, not as 1 - cdf, so tails stay exact)."""

    @abc.abstractmethod
    def log_ratio(self, x) -> np.ndarray:
        """The privacy loss log(dP/dQ)(x) at outputs x (+inf where Q has no density)."""

    @abc.abstractmethod
    def sample(self, n: int, rng: np.random.Generator, under: str = "P") -> np.ndarray:
        """n independent outputs drawn from P or Q."""

    @abc.abstractmethod
    def loss_bracket(self, tail: float) -> Tuple[float, float]:
        """Finite (lo, hi), possibly loose, with Pr_P[L < lo] <= tail and Pr_P[L > hi] <= tail."""

    def loss_range(self, tail: float) -> Tuple[float, float]:
        """The tightest (lo, hi) (to 1e-3 of the bracket width) with both P-tails <= tail."""
        lo, hi = self.loss_bracket(tail)
        tail = tail * (1.0 - 1e-9)  # margin for the rounding of the CDFs: the returned tails are strict
        a, b = lo, hi  # shrink hi: largest point with sf > tail stays above
        for _ in range(60):
            mid = 0.5 * (a + b)
            if self.loss_sf(mid, "P") <= tail:
                b = mid
            else:
                a = mid
        upper = b
        a, b = lo, upper  # raise lo: Pr[L < lo] <= Pr[L <= lo] = cdf(lo) <= tail
        for _ in range(60):
            mid = 0.5 * (a + b)
            if self.loss_cdf(mid, "P") <= tail:
                a = mid
            else:
                b = mid
        return float(a), float(upper)

    def cell_masses(self, edges, under: str = "P", with_error: bool = False):
        """Masses of the loss cells (e_{i-1}, e_i] for increasing edges e_0 < ... < e_K.

        Returns:
            (cells, below, above): cells[i-1] = Pr[e_{i-1} < L <= e_i], below = Pr[L <= e_0],
            above = Pr[L > e_K]. Differences are taken on the CDF side below the median and on the
            survival side above it, so tail cells keep their relative accuracy. With ``with_error``,
            also absolute error bounds of the three, from ``_cdf_relative_error`` at both ends.
        """
        edges = np.asarray(edges, dtype=np.float64)
        cdf = self.loss_cdf(edges, under)
        sf = self.loss_sf(edges, under)
        use_cdf = cdf[1:] <= 0.5
        cells = np.maximum(np.where(use_cdf, cdf[1:] - cdf[:-1], sf[:-1] - sf[1:]), 0.0)
        if not with_error:
            return cells, float(cdf[0]), float(sf[-1])
        rel = self._cdf_relative_error(edges)
        err_cdf, err_sf = cdf * rel + 1e-300, sf * rel + 1e-300
        errors = np.where(use_cdf, err_cdf[1:] + err_cdf[:-1], err_sf[:-1] + err_sf[1:]) + 2.0**-53 * cells
        return cells, float(cdf[0]), float(sf[-1]), errors, float(err_cdf[0]), float(err_sf[-1])

    def _cdf_relative_error(self, loss) -> np.ndarray:
        """Relative error bound of ``loss_cdf`` / ``loss_sf`` as computed at ``loss`` (assumed 64 ulps;
        subclasses whose closed forms lose more, e.g. to a large exponent, override it)."""
        return np.full(np.shape(loss), 64.0 * 2.0**-53)

    def profile(self, epsilon) -> np.ndarray:
        """delta(eps) = Pr_P[L > eps] - e^eps Pr_Q[L > eps], the hockey-stick divergence E_{e^eps}(P||Q)."""
        eps = np.asarray(epsilon, dtype=np.float64)
        with np.errstate(over="ignore", invalid="ignore"):
            value = self.loss_sf(eps, "P") - np.exp(eps) * self.loss_sf(eps, "Q")
        return np.clip(np.where(np.isnan(value), 0.0, value), 0.0, 1.0)

    @staticmethod
    def _check_under(under: str) -> None:
        if under not in ("P", "Q"):
            raise ValueError(f"under must be 'P' or 'Q', got {under!r}")
