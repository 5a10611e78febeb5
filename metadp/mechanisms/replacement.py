"""Sampling with replacement under add/remove: the binomial mixture of Gaussians dominates, and is attained.

Setting (a ``DataLoader`` over ``RandomSampler(replacement=True)`` or a uniform ``WeightedRandomSampler``).
Each step draws b indices independently and uniformly from the n records of the data set D, with
replacement, clips each drawn copy's contribution to L2 norm C, and releases Y = sum of the b copies +
N(0, sigma^2 I_d), z = sigma / C. The steps draw independently. Neighbours: D' = D without one record x*
(add/remove). Units of sigma from here on where stated.

**Claim.** With q = 1/n and Delta = 2 / z,

    P* = sum_{k=0}^{b} Bin(k; b, q) N(k Delta, 1),    Q* = N(0, 1)

is a dominating pair (Zhu, Dong & Wang 2022, arXiv:2106.08567, Def. 7) of one step, in both orders of the
neighbours and for every state the past releases led to (so the T-fold product dominates T steps, ibid.
Thm. 10); and it is attained.

*Proof.* (i) Coupling. Draw J_1..J_b i.i.d. uniform on D' and M_1..M_b i.i.d. Bernoulli(q), independent.
Position i holds x* if M_i = 1, else J_i: i.i.d. uniform on D. Under D' position i holds J_i. With g the
clipped contribution of a record, Y = S_J + sum_i M_i d_i + Z and Y' = S_J + Z, where S_J = sum_i g(J_i),
d_i = g(x*) - g(J_i) and |d_i| <= 2C: a draw that picks x* on D picks another record on D', so x*'s copy
*replaces* a contribution, it does not add one. Hockey-stick divergences are jointly convex, so it
suffices to dominate P_d = law(sum_i M_i d_i + Z) against Q = N(0, sigma^2 I) for each fixed J (the
common shift S_J is a post-processing).

(ii) Aligned is worst. For a subset S of the positions let mu_S = sum_{i in S} d_i / sigma and
w_S = q^|S| (1-q)^(b-|S|). Then L = dP_d/dQ = sum_S w_S e_S with e_S = exp(Y_S - G_SS / 2), where under Q
the vector (Y_S)_S = (<x, mu_S>)_S is a centred Gaussian with covariance G_ST = <mu_S, mu_T>. Both
hockey-stick divergences are E_Q[phi(L)] for a convex phi: H_g(P_d||Q) = E_Q[(L - g)_+] and
H_g(Q||P_d) = E_Q[(1 - g L)_+]. For a smooth convex phi let F(G) = E phi(sum_S w_S exp(Y_S - G_SS / 2)),
Y ~ N(0, G). Along G + tH (H symmetric), Gaussian integration by parts gives
d/dt F = 1/2 sum_{S,T} H_ST E[d_S d_T f] - 1/2 sum_S H_SS E[d_S f] with f = phi(L), and since
d_S d_T f = phi''(L) w_S w_T e_S e_T + [S = T] phi'(L) w_S e_S the phi' terms cancel:

    d/dt F = 1/2 sum_{S,T} H_ST E[phi''(L) w_S w_T e_S e_T] >= 0   wherever H >= 0 entrywise.

The aligned configuration mu*_S = |S| Delta e (all d_i = 2C e) has G*_ST = |S| |T| Delta^2 >= |mu_S| |mu_T| >=
G_ST, so on the segment from G to G* (positive semi-definite throughout: a convex combination) F does not
decrease: F(G) <= F(G*). A convex phi with a kink ((.)_+) is the increasing limit of smooth convex ones
(monotone convergence). G* is the Gram matrix of P* vs Q*, which are therefore a dominating pair.

(iii) The rate. Removing x* from D (n records) gives q = 1/n. Adding x* to a data set of n records gives
q = 1/(n+1), which P* at 1/n dominates: write M_i = M'_i B_i with M'_i ~ Bernoulli(1/n) and
B_i ~ Bernoulli(n/(n+1)), condition on B (joint convexity) and set d_i = 0 where B_i = 0 (still in the
ball, so (ii) applies). So q = 1/n for the data set the loader reads covers both orders.

(iv) A shorter batch (a loader's last batch without ``drop_last``) has b' < b positions: set d_i = 0 for the
missing ones and (ii) applies with b.

(v) Attained. A linear loss whose clipped gradient is +C e for x* and -C e for every other record gives
exactly P* and Q* (up to the common shift -bC e) at every step, whatever the parameters: the certified
lower end of the composed pair is a lower bound on the epsilon any bound valid for all data sets can
certify, and so on the mechanism's own.

**Cost.** Each copy moves the sum by 2C, where a Poisson inclusion adds C: at n = 720, b = 30, z = 1.3,
48 steps and delta = 1e-5 this pair certifies epsilon 10.32 (lower 10.32) where Poisson sampling at rate
b/n (what Opacus's ``make_private`` accounts for such a loader) gives 1.27. The pair is
``metadp.amplification.group.poisson_group_pairs`` at rate 1/n and noise multiplier z/2 (shifts in
units of 2C), dp-accounting's ``MixtureOfGaussiansDpEvent(z, [0, 2, .., 2b], Bin(.; b, 1/n))``. Its RDP
curve is dominated by large k (Renyi divergences weigh the rare many-copies events heavily), so the RDP
accountant uses the group rule and is far looser than the PLD; the PLD is the number to report.
"""

from __future__ import annotations

from typing import Tuple

import numpy as np
from scipy import stats

from metadp.core.validation import check_count, check_positive
from metadp.mechanisms.gaussian import GaussianMixturePair

__all__ = ["replacement_pairs"]


def replacement_pairs(draws: int, population: int, z: float) -> Tuple[GaussianMixturePair, ...]:
    """The (add, remove) dominating pairs of one step of ``draws`` draws with replacement from ``population``
    records, Gaussian noise multiplier ``z`` (sigma / C) on the sum of the copies (module docstring).

    Raises:
        ValueError: on draws < 1, population < 1, or z not a finite number > 0.
    """
    draws = check_count("draws", draws, minimum=1)
    population = check_count("population", population, minimum=1)
    z = check_positive("z", z)
    copies = np.arange(draws + 1)
    weights = stats.binom.pmf(copies, draws, 1.0 / population)
    if population == 1:  # every draw is the unit: one Gaussian, shift 2 b C
        return (GaussianMixturePair([1.0], [float(draws)], z / 2.0, "add"),)
    return tuple(GaussianMixturePair(weights, copies.astype(np.float64), z / 2.0, d) for d in ("add", "remove"))
