"""One record's view of one step of episodic training: a revealed mixture of Gaussian-mixture pairs.

A step draws L episodes independently; each selects the record's unit (its class, or its task) with
probability P_U (the product of the upper levels' rates) and then, given that, includes the record
with probability r (the last level's own rate: n/|U| for a fixed-size draw, p for a Poisson one).
With per-episode clipping at C, changing the record moves an affected episode's clipped gradient by
at most ``shift`` C (2C: the episode exists either way, one of its members is replaced), so K
affected episodes move the noisy sum by at most K shift C.

Which episodes selected the record's unit can show in the output (the unit's other members shape
those episodes' gradients), so the analysis conditions on J, the number of episodes that selected it
(J ~ Binomial(L, P_U), the same under both neighbours), and only K | J ~ Binomial(J, r) is hidden:

    P = sum_j Bin(j; L, P_U) delta_j x sum_k Bin(k; j, r) N(k shift, z^2),   Q = sum_j Bin(j; L, P_U) delta_j x N(0, z^2)

(and the mirror for the other direction). The true output is a post-processing of this pair
(forget J), so the pair dominates one step (joint convexity over the upper levels: Balle, Barthe &
Gaboardi 2018, arXiv:1807.01647, Thm. 2; the conditioning bound of DESIGN.md 3.6). Its privacy loss
distribution is the mixture over j of the conditional pairs' PLDs.

The simpler pair with K ~ Binomial(L, P_U r) hidden entirely (dp-accounting's mixture of Gaussians) is
not a dominating pair for multistage sampling when P_U < 1. What is shown, by exact enumeration
(``tests/mechanisms/test_episodic.py``; two classes of 3 records, P_U = 1/2):
  * with per-example clipping and a Poisson last level it is violated already at L = 1: 5.2x at
    eps = 2, z = 1 (the other class's episodes show which class was drawn);
  * with per-episode clipping (shift 2C) the family searched there attains it but does not exceed it
    for L <= 2; an independent enumeration (metadp issue 13) found excesses only from L >= 2, of at
    most 5.5% (at most 0.3% at eps >= 0.5 when r < 1).
So it is not used: whether it understates a given plan (e.g. the default DP-MAML plan, 832.6 against
the revealed pair's 850.3) is not shown either way.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Optional, Tuple

import numpy as np
from scipy import stats

from metadp.core.validation import check_count, check_positive, check_probability, check_real
from metadp.mechanisms.base import Attained
from metadp.mechanisms.gaussian import GaussianMixturePair

__all__ = ["RevealedMixture", "episodic_datasets", "episodic_record_pairs", "hidden_binomial_pairs"]

_TAIL = 1e-18  # binomial mass cut from each truncated count, charged as an infinite privacy loss


@dataclasses.dataclass(frozen=True, eq=False)
class RevealedMixture:
    """A dominating pair whose component index j is revealed: (j, X) with j ~ weights under both P and Q.

    ``components[i]`` is a ``GaussianMixturePair`` or None (P = Q: zero privacy loss). ``inf_mass`` is
    P-mass charged as infinite privacy loss (truncated components). The PLD accountant discretises each
    component on the same lattice and mixes the lattices (``accounting._pld_lattice``).
    """

    weights: Tuple[float, ...]
    components: tuple
    inf_mass: float = 0.0
    sigma: float = 1.0  # noise std of the zero-loss components (for ``sample``)
    # None where named datasets produce this pair at every step; else the pairs they do (``base.Attained``)
    attained: Optional[Attained] = None

    def loss_range(self, tail: float) -> Tuple[float, float]:
        """(lo, hi) with both P-tails of the mixture <= ``tail``: component j's range at tail / (w_j m)
        (m components; components lighter than that are left out), and 0 for the zero-loss atoms."""
        m = len(self.components)
        ranges = [pair.loss_range(min(0.25, tail / (w * m))) for w, pair in zip(self.weights, self.components)
                  if pair is not None and w * m > 4.0 * tail]
        return min([0.0] + [lo for lo, _ in ranges]), max([0.0] + [hi for _, hi in ranges])

    def profile(self, epsilon) -> np.ndarray:
        """delta(eps) = sum_j w_j delta_j(eps) + inf_mass (the hockey-stick divergence of the revealed pair)."""
        eps = np.asarray(epsilon, dtype=np.float64)
        total = np.full(eps.shape, self.inf_mass)
        for w, pair in zip(self.weights, self.components):
            if pair is not None:
                total = total + w * pair.profile(eps)
        return np.minimum(total, 1.0)

    def sample(self, n: int, rng: np.random.Generator, under: str = "P"):
        """(j, x) samples: the revealed component index and the output (inf_mass draws get index -1)."""
        probs = np.append(np.asarray(self.weights), self.inf_mass if under == "P" else 0.0)
        j = rng.choice(len(probs), size=n, p=probs / probs.sum())
        x = np.zeros(n)
        for i, pair in enumerate(self.components):
            picked = j == i
            if pair is not None and picked.any():
                x[picked] = pair.sample(int(picked.sum()), rng, under)
            elif picked.any():
                x[picked] = self.sigma * rng.standard_normal(int(picked.sum()))
        return np.where(j == len(self.components), -1, j), x


def _binomial_support(count: int, rate: float) -> Tuple[np.ndarray, np.ndarray, float]:
    """(values, probabilities, cut mass): Binomial(count, rate) on [0, k_max], with k_max the smallest
    value whose upper tail Pr[K > k_max] is <= _TAIL (tails summed in log space, so they stay exact)."""
    values = np.arange(count + 1)
    with np.errstate(divide="ignore"):  # the pmf is accurate to ~1e-14 where logpmf loses 1e-9 at n = 4e5
        log_pmf = np.log(stats.binom.pmf(values, count, rate))
    log_upper = np.logaddexp.accumulate(log_pmf[::-1])[::-1]  # log Pr[K >= k]
    log_tail = np.append(log_upper[1:], -np.inf)  # log Pr[K > k]
    k_max = int(np.argmax(log_tail <= math.log(_TAIL)))
    return values[: k_max + 1], np.exp(log_pmf[: k_max + 1]), float(np.exp(log_tail[k_max]))


def episodic_record_pairs(episodes: int, unit_rate: float, within_rate: float, noise_multiplier: float,
                          shift: float = 2.0) -> Tuple[RevealedMixture, RevealedMixture]:
    """The (add, remove) revealed-mixture pairs of one step, in units of the clipping norm C.

    Args:
        episodes: L, independent episodes per step.
        unit_rate: P_U, probability that one episode selects the record's unit.
        within_rate: r, probability that the record is drawn given its unit is selected.
        noise_multiplier: z, the noise standard deviation over C.
        shift: how far one affected episode moves the sum, over C (2 with per-episode clipping).
    """
    episodes = check_count("episodes", episodes, minimum=1)
    unit_rate = check_probability("unit_rate", unit_rate)
    within_rate = check_probability("within_rate", within_rate)
    z = check_positive("noise_multiplier", noise_multiplier)
    shift = check_real("shift", shift, low=0.0, low_open=True)
    js, pj, cut_j = _binomial_support(episodes, unit_rate)
    out = []
    for direction in ("add", "remove"):
        weights: list[float] = []
        components: list[Optional[GaussianMixturePair]] = []
        inf_mass = cut_j
        for j, w in zip(js, pj):
            if j == 0 or within_rate == 0.0 or w == 0.0:  # w = 0: no mass (P_U = 1 puts it all at j = L)
                weights.append(float(w))
                components.append(None)
                continue
            ks, pk, cut_k = _binomial_support(int(j), within_rate)
            inf_mass += 2.0 * w * cut_k  # the cut tail, and the renormalisation of the rest (total variation)
            weights.append(float(w))
            components.append(GaussianMixturePair(pk, shift * ks, z, direction) if len(ks) > 1 else None)
        out.append(RevealedMixture(tuple(weights), tuple(components), float(inf_mass), z))
    if 0.0 < unit_rate < 1.0 and within_rate > 0.0:
        # J is revealed here, which no datasets are shown to do at the full shift; the datasets named by
        # ``episodic_datasets`` attain the hidden count K ~ Bin(L, P_U r) (the "add" order: the numerator is
        # the truncated mixture, so the cut mass is a total variation on the safe side, ``Attained.slack``)
        add, _, cut = hidden_binomial_pairs(episodes, unit_rate * within_rate, z, shift)
        attained = Attained((add,), episodic_datasets(shift), slack=cut)
        out = [dataclasses.replace(pair, attained=attained) for pair in out]
    return out[0], out[1]


def episodic_datasets(shift: float) -> str:
    """The neighbouring datasets whose step releases the hidden-count pair (``episodic_record_pairs``)."""
    return ("every episode's clipped contribution -C e, and +C e for an episode that draws the record, so that "
            "which episodes selected its unit does not show, at every step"
            if shift == 2.0 else
            f"every episode's clipped contribution 0, and {shift:g}C e for an episode that draws the record, at "
            "every step")


def hidden_binomial_pairs(episodes: int, inclusion: float, noise_multiplier: float,
                          shift: float = 2.0) -> Tuple[GaussianMixturePair, GaussianMixturePair, float]:
    """The K ~ Binomial(L, eta) pairs (add, remove) and their cut tail mass: valid only when the
    record's inclusion in each episode is independent of everything else the output shows (e.g. the
    record's unit is always selected, P_U = 1). For comparison with dp-accounting's mixture of
    Gaussians; ``episodic_record_pairs`` is the bound for multistage episodes."""
    episodes = check_count("episodes", episodes, minimum=1)
    inclusion = check_real("inclusion", inclusion, low=0.0, high=1.0, low_open=True)
    z = check_positive("noise_multiplier", noise_multiplier)
    shift = check_real("shift", shift, low=0.0, low_open=True)
    ks, pk, cut = _binomial_support(episodes, inclusion)
    return (GaussianMixturePair(pk, shift * ks, z, "add"), GaussianMixturePair(pk, shift * ks, z, "remove"), cut)
