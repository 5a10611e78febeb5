"""The tight dominating pair of a Gaussian on a fixed-size sample drawn without replacement (substitution).

Sampling m of n records without replacement, neighbours differing by one substituted record, a Gaussian
with multiplier z relative to the substitution sensitivity (2C for a clipped sum). Let R = (P_R, Q_R) =
((1 - gamma) N(0, z^2) + gamma N(1, z^2), N(0, z^2)), gamma = m / n, with profile delta_R.

* For eps >= 0 and every ordered pair of neighbours (D, D'), delta_{D,D'}(eps) <= delta_R(eps):
  delta_R(eps') = gamma delta_G(eps) at e^{eps'} = 1 + gamma (e^eps - 1) (the hockey-stick of a mixture
  with Q_R), which is Balle, Barthe & Gaboardi 2018 (arXiv:1807.01647), Thm 9, with delta_G the
  Gaussian's substitution profile. It is attained (all other records at -C, the substituted one +C
  against -C: the released sums are exactly R, shifted), so no pair with a smaller profile at eps >= 0
  dominates.
* The relation is symmetric, so for eps < 0: delta_{D,D'}(eps) = 1 - e^eps + e^eps delta_{D',D}(-eps)
  <= 1 - e^eps + e^eps delta_R(-eps).

The pair S below has exactly this profile on the whole real line, so it dominates every neighbouring
pair for every hockey-stick order (Zhu, Dong & Wang 2022, arXiv:2106.08567, Def. 7) and composes by
their Thm 10. Its tradeoff function is Dong, Roth & Su's C_gamma(f) = min{f_gamma, f_gamma^-1}** for the
Gaussian f (arXiv:1905.02383, Thm 4.2 and Sec. 4.1); in loss terms, S's privacy loss under P is

    R's loss under P on (0, inf)  +  minus R's loss under Q on (0, inf)  +  an atom at 0,

of mass a = 1 - P_R(L > 0) - Q_R(L > 0) >= 0 (S is symmetric: its loss under Q is the mirror image).
The Poisson pair R alone is not enough: on its own it is not dominating for eps < 0, i.e. for the
reverse ordering of the same neighbours, which a composition of many steps mixes.

**S is tight for one step, not for T.** Each of S's two halves is attained (R by the neighbours above, its
reverse by the same neighbours in the other order), but no pair of datasets is shown to produce S itself at
every step, so a lower bound on S's T-fold composition is not one on the mechanism. What named datasets do
attain at every step is R in both orders: all other records at -C, the replaced record at -C and its
replacement at +C, on one line (a linear loss gives these clipped gradients at every iterate); the steps
are then independent, so the released sums are exactly R^T (up to a shift) in one order and its reverse in
the other. ``SymmetrizedPair.attained`` names these pairs, and the PLD accountant's lower end is their
composition's (``metadp.accounting.pld``). On the fixed-size plan of docs/plan.md (256 of 60,000, z = 1.1, 14,062 steps,
delta 1e-5) S composes to 18.45 and R to 14.71: the true epsilon is only known to lie between. A search
over the one-line configurations (the other records at v, the replaced record at u, its replacement at w,
each in [-C, C]; ``metadp.verify.fixed_size``) finds none above R.

The output space of S is the privacy loss itself (``log_ratio(x) = x``).
"""

from __future__ import annotations

import math
from typing import Optional, Tuple

import numpy as np

from metadp.core.validation import check_positive, check_probability
from metadp.mechanisms.base import Attained, DominatingPair
from metadp.mechanisms.gaussian import GaussianMixturePair, gaussian_pair, poisson_gaussian_pairs

__all__ = ["SymmetrizedPair", "WOR_DATASETS", "wor_gaussian_pair"]

# the neighbouring datasets whose released sums are R (one order) and its reverse (the other) at every step
WOR_DATASETS = ("all other records' clipped contributions -C, the replaced record's -C and its replacement's +C, "
                "on one line at every step (a linear loss)")

_U = 2.0**-53


class SymmetrizedPair(DominatingPair):
    """The symmetric pair whose profile equals ``base``'s for eps >= 0 (module docstring).

    Args:
        base: a pair R whose losses have no atom (a ``GaussianMixturePair`` with a positive shift) and
            with P_R(L > 0) + Q_R(L > 0) <= 1 (true whenever R's profile at eps >= 0 dominates its
            reverse's, as for the subsampled Gaussian).
        attained: the pairs named datasets produce at every step (module docstring), or None where S
            itself is (then a lower bound on S's composition is one on the mechanism).
    """

    exact_loss_cells = False  # the base's cells are cut at computed inverses

    def __init__(self, base: GaussianMixturePair, attained: Optional[Attained] = None):
        self.attained = attained
        if not isinstance(base, GaussianMixturePair):
            raise ValueError(f"base must be a GaussianMixturePair, got {type(base).__name__}")
        self.base = base
        edges = np.array([0.0, 1.0])
        _, below_p, _, _, err_below_p, _ = base.cell_masses(edges, "P", with_error=True)
        cells_q, _, above_q, errors_q, _, err_above_q = base.cell_masses(edges, "Q", with_error=True)
        # a = P_R(L <= 0) - Q_R(L > 0)
        self.atom = float(below_p - (cells_q[0] + above_q))
        self.atom_error = float(err_below_p + errors_q[0] + err_above_q + 4.0 * _U)
        if self.atom < -self.atom_error:
            raise ValueError(f"base pair has P(L > 0) + Q(L > 0) > 1 (atom {self.atom:g}): not symmetrisable")
        self.atom = max(self.atom, 0.0)

    # -- loss distribution ----------------------------------------------------------------------

    @staticmethod
    def _other(under: str) -> str:
        return "Q" if under == "P" else "P"

    def loss_cdf(self, loss, under: str = "P") -> np.ndarray:
        self._check_under(under)
        loss = np.asarray(loss, dtype=np.float64)
        with np.errstate(invalid="ignore"):
            # x < 0: Pr[L_S <= x] = Pr_other[L_R >= -x]; x >= 0: Pr_same[L_R <= x]
            neg = self.base.loss_sf(-np.minimum(loss, 0.0), self._other(under))
            pos = self.base.loss_cdf(np.maximum(loss, 0.0), under)
        return np.where(loss < 0.0, neg, pos)

    def loss_sf(self, loss, under: str = "P") -> np.ndarray:
        self._check_under(under)
        loss = np.asarray(loss, dtype=np.float64)
        with np.errstate(invalid="ignore"):
            neg = self.base.loss_cdf(-np.minimum(loss, 0.0), self._other(under))
            pos = self.base.loss_sf(np.maximum(loss, 0.0), under)
        return np.where(loss < 0.0, neg, pos)

    def log_ratio(self, x) -> np.ndarray:
        return np.asarray(x, dtype=np.float64)

    def cell_masses(self, edges, under: str = "P", with_error: bool = False):
        """As ``DominatingPair.cell_masses``: cells above 0 are the base's under ``under``, cells below
        0 the base's mirrored cells under the other distribution, and the atom goes to the cell (., 0].
        Computed on the edges with 0 and one edge beyond each end added, then summed back piece by piece."""
        self._check_under(under)
        edges = np.asarray(edges, dtype=np.float64)
        # one edge beyond each end; doubled, not shifted by 1, which vanishes in float64 beyond 2^53 (losses of
        # tiny noise reach 1e80, and a shifted end equal to the last edge left the summed cells one short)
        lo, hi = 2.0 * min(float(edges[0]), -1.0) - 1.0, 2.0 * max(float(edges[-1]), 1.0) + 1.0
        grid = np.unique(np.concatenate([[lo, 0.0, hi], edges]))
        neg, pos = grid[grid <= 0.0], grid[grid >= 0.0]
        c_n, _, above_n, e_n, _, err_above_n = self.base.cell_masses(-neg[::-1], self._other(under), with_error=True)
        c_p, _, above_p, e_p, _, err_above_p = self.base.cell_masses(pos, under, with_error=True)
        cells = np.concatenate([c_n[::-1], c_p])  # cells of `grid`, in order
        errors = np.concatenate([e_n[::-1], e_p])
        k0 = len(neg) - 2  # the cell (., 0]
        cells[k0] += self.atom
        errors[k0] += self.atom_error
        # back to the requested edges: each requested cell is one grid cell, or two around an inserted 0;
        # summed piecewise (never as differences of cumulative sums, which cancel in the tails)
        position = np.searchsorted(grid, edges)  # strictly increasing, the last below len(cells) (hi > edges)
        out_cells = np.add.reduceat(cells, position)[:-1]
        out_err = np.add.reduceat(errors, position)[:-1] + 4.0 * _U * out_cells
        below = float(above_n + np.sum(cells[: position[0]]))
        above = float(above_p + np.sum(cells[position[-1]:]))
        if not with_error:
            return out_cells, below, above
        err_below = float(err_above_n + np.sum(errors[: position[0]]) + 4.0 * _U * below)
        err_above = float(err_above_p + np.sum(errors[position[-1]:]) + 4.0 * _U * above)
        return out_cells, below, above, out_err, err_below, err_above

    def profile(self, epsilon) -> np.ndarray:
        eps = np.asarray(epsilon, dtype=np.float64)
        with np.errstate(over="ignore", invalid="ignore"):
            positive = self.base.profile(np.abs(eps))
            value = np.where(eps >= 0.0, positive, -np.expm1(eps) + np.exp(eps) * positive)
        return np.clip(value, 0.0, 1.0)

    def loss_bracket(self, tail: float) -> Tuple[float, float]:
        # Pr_S[L < -t] = Q_R(L > t) <= P_R(L > t) for t >= 0, and Pr_S[L > t] = P_R(L > t)
        _, hi = self.base.loss_bracket(tail)
        top = max(float(hi), 0.0)
        return -top, top

    def sample(self, n: int, rng: np.random.Generator, under: str = "P") -> np.ndarray:
        """n losses drawn under P or Q (rejection from the base pair's outputs)."""
        self._check_under(under)
        other = self._other(under)
        same_up = float(self.base.loss_sf(0.0, under))
        other_up = float(self.base.loss_sf(0.0, other))
        probs = np.array([same_up, other_up, self.atom])
        pick = rng.choice(3, size=n, p=probs / probs.sum())
        out = np.zeros(n)
        for which, dist, sign in ((0, under, 1.0), (1, other, -1.0)):
            need = int(np.sum(pick == which))
            got = []
            while need > 0:
                losses = self.base.log_ratio(self.base.sample(max(64, 4 * need), rng, dist))
                losses = losses[losses > 0.0][:need]
                got.append(losses)
                need -= len(losses)
            if got:
                out[pick == which] = sign * np.concatenate(got)
        return out

    def __repr__(self) -> str:
        return f"SymmetrizedPair({self.base!r})"


def wor_gaussian_pair(rate: float, noise_multiplier: float) -> DominatingPair:
    """The pair S of a Gaussian on a fixed-size sample (fraction ``rate`` = m / n) under substitution.

    Args:
        rate: gamma = m / n in [0, 1] (0: no privacy loss is the caller's to handle).
        noise_multiplier: sigma over the **substitution** sensitivity (2C for a clipped sum).
    """
    q = check_probability("rate", rate)
    z = check_positive("noise_multiplier", noise_multiplier)
    if q == 0.0:
        raise ValueError("rate must be > 0 (a sample of size 0 releases nothing)")
    if q == 1.0:
        return gaussian_pair(z)  # the Gaussian pair is symmetric already
    attained = Attained(poisson_gaussian_pairs(q, z), WOR_DATASETS)
    return SymmetrizedPair(GaussianMixturePair([1.0 - q, q], [0.0, 1.0], z, "add"), attained)
