"""A record inside a task of a persistent pool: the task's clipped contribution is replaced, not removed.

Setting (the trainer's per-task clipping, ``metadp.releases``). Each step samples every task of
the pool independently with probability q (Poisson), clips each sampled task's contribution to L2 norm
C and releases Y = sum_{sampled i} g_i + N(0, sigma^2 I_d), z = sigma / C. Neighbouring data sets differ
in one record, which sits in one task (k = 1); the task stays in the pool under both, so only its
content changes: its contribution is g under one and g' under the other, with ||g|| <= C and
||g'|| <= C (both clipped; nothing more is known, so ||g - g'|| can reach 2C). Units of C from here on
(|g|, |g'| <= 1, noise std z).

**Claim.** With a = (1, 1), b = (-1, 1) in the plane,

    P* = (1-q) N(0, z^2 I_2) + q N(a, z^2 I_2),    Q* = (1-q) N(0, z^2 I_2) + q N(b, z^2 I_2)

is a dominating pair (Zhu, Dong & Wang 2022, arXiv:2106.08567, Def. 7) of one step, for every state the
past releases led to and both orders of the neighbours; so the T-fold product of (P*, Q*) dominates T
adaptively chosen steps (ibid., Thm. 10).

*Proof.* (i) The other tasks' sum A has the same law under both neighbours and is independent of the
record's task's inclusion B ~ Bernoulli(q), so Y = A + B g + Z is a post-processing (add an
independent A) of X = B g + Z, Z ~ N(0, z^2 I); it suffices to dominate X vs X' = B g' + Z.
(ii) a and b are orthogonal with |a| = |b| = sqrt(2). Let M = [g g'] [a b]^T / 2 (d x 2), so M a = g and
M b = g'. Since [a b] / sqrt(2) is orthogonal, ||M|| = ||[g g']|| / sqrt(2) = sqrt(lambda_max(G) / 2) <= 1, G the
Gram matrix of (g, g'), because lambda_max(G) <= trace(G) = |g|^2 + |g'|^2 <= 2. The kernel
K(x) = N(M x, z^2 (I_d - M M^T)) (a valid covariance: ||M|| <= 1) sends N(m, z^2 I_2) to N(M m, z^2 I_d),
hence P* to the law of X and Q* to that of X' (the mixtures map term by term: N(0) to N(0), N(a) to
N(g), N(b) to N(g')). Hockey-stick divergences do not increase under a common kernel
(data processing), for every e^eps. (iii) Swapping the neighbours swaps a and b, which the reflection
s -> -s (below) maps onto each other: one pair covers both orders. QED.

It is loose by design where g and g' are not orthogonal-and-full: it keeps the worst shift between g
and g' (2C) *and* the worst side information about B (the common component (0, 1)); no single
configuration has both. Each configuration is attained, e.g. g = C e, g' = -C e at every step (a task
whose clipped contribution is C e with the record and -C e without it; 1-D, ``AntipodalPair`` with rate
q): its composed epsilon is a lower bound on what any bound valid for all tasks can certify.
Evidence, not proof: at q = 0.0032, z = 1, 1,000 steps, delta = 1e-5 this pair certifies 1.871 (the
revealed pair 37.55), the antipodal configuration has a certified lower bound of 0.811, and symmetric
configurations g = (sin f, cos f), g' = (-sin f, cos f) at f = 80, 70, 60, 45 degrees have lower bounds
0.799, 0.786, 0.760, 0.683 (side coordinate binned at each bin's lower rate). If the antipodal pair
dominated every configuration the bound would be near 0.81, but the contraction argument cannot compare
configurations at different angles (their Gram matrices are not ordered), so that is not claimed.

**Computable form.** In coordinates s (along a - b) and t (along a + b), T = t has the law
(1-q) N(0, z^2) + q N(1, z^2) under both P* and Q*; given T = t, B = 1 with posterior probability
r(t) = 1 / (1 + ((1-q)/q) exp(-(2t - 1) / (2 z^2))) (increasing in t), and
S | t ~ (1-r) N(0, z^2) + r N(1, z^2) under P*, (1-r) N(0, z^2) + r N(-1, z^2) under Q* (``AntipodalPair``).
The pair at rate r is a post-processing of the pair at any r' >= r (keep the output with probability
r / r', else replace it by a fresh N(0, z^2) draw), so cutting t into bins (t_{i-1}, t_i] and taking the
rate at each bin's upper end, r(t_i) (r = 1 above the last edge: N(1) vs N(-1)), gives a revealed
mixture (bin index shown, same law under both) of which (T, S) is a post-processing: draw t from its
law given the bin, then thin. That mixture is what the PLD accountant composes (``pooled_record_pair``);
every step of the discretisation rounds towards the larger divergence.
"""

from __future__ import annotations

import functools
import math
from typing import Optional

import numpy as np
from scipy import special

from metadp.core._logmath import log_expm1
from metadp.core.validation import check_positive, check_probability, check_real
from metadp.mechanisms.base import Attained
from metadp.mechanisms.episodic import RevealedMixture
from metadp.mechanisms.gaussian import GaussianMixturePair

__all__ = ["AntipodalPair", "POOL_DATASETS", "pooled_record_pair", "pooled_record_lower_pair"]

# the neighbouring datasets that produce the antipodal pair at every step
POOL_DATASETS = ("a task whose clipped contribution is C e with the record and -C e with its replacement, "
                 "at every step (the antipodal configuration)")


class AntipodalPair(GaussianMixturePair):
    """P = (1-r) N(0, sigma^2) + r N(s, sigma^2) against Q = (1-r) N(0, sigma^2) + r N(-s, sigma^2).

    One sampled unit whose contribution is s under one neighbour and -s under the other (substitution
    under Poisson sampling at rate r, 0 < r < 1). Its privacy loss
    L(x) = log((1-r) + r e^{(s x - s^2/2)/sigma^2}) - log((1-r) + r e^{(-s x - s^2/2)/sigma^2}) is odd and
    increasing in x, with the closed-form inverse ``_inverse_add``.
    """

    def __init__(self, rate: float, shift: float, sigma: float):
        r = check_real("rate", rate, low=0.0, high=1.0, low_open=True, high_open=True)
        shift = check_real("shift", shift, low=0.0, low_open=True)
        super().__init__([1.0 - r, r], [0.0, shift], sigma, "add")
        self.rate = r
        self._loss_floor = -math.inf
        self._log_keep = math.log1p(-r)  # log(1 - r)
        self._log_b = math.log(r) - shift * shift / (2.0 * self.sigma**2)  # log(r e^{-s^2 / (2 sigma^2)})
        self._slope = shift / self.sigma**2

    def _law(self, under: str):
        return (self.weights, self.shifts) if under == "P" else (self.weights, -self.shifts)

    def _loss_add(self, x: np.ndarray) -> np.ndarray:
        """log((1-r) + e^{log b + slope x}) - log((1-r) + e^{log b - slope x})."""
        x = np.asarray(x, dtype=np.float64)
        k = self._slope * x
        return np.logaddexp(self._log_keep, self._log_b + k) - np.logaddexp(self._log_keep, self._log_b - k)

    def loss_range(self, tail: float):
        """(lo, hi) with both P-tails <= ``tail``, from X's component quantiles (no bisection): with k the
        standard normal quantile of ``tail``, Pr_P[X > s + k sigma] <= tail and Pr_P[X < -k sigma] <= tail."""
        check_probability("tail", tail)
        if tail <= 0.0:
            return super().loss_range(tail)
        k = -float(special.ndtri(tail * (1.0 - 1e-9))) * self.sigma
        lo, hi = self._loss_add(np.array([-k, float(self.shifts[1]) + k]))
        pad = 1e-12 * (1.0 + max(abs(lo), abs(hi)))
        return float(lo) - pad, float(hi) + pad

    def _inverse_add(self, loss) -> np.ndarray:
        """x(l): with y = e^{slope x}, A = (1-r) expm1(l), b = r e^{-s^2/(2 sigma^2)}, L(x) = l solves
        b y^2 - A y - b e^l = 0, y = (A + sqrt(A^2 + 4 b^2 e^l)) / (2b) for l >= 0; x(-l) = -x(l)."""
        loss = np.asarray(loss, dtype=np.float64)
        mag = np.abs(loss)
        out = np.full(loss.shape, np.inf)
        finite = np.isfinite(mag)
        m = mag[finite]
        with np.errstate(divide="ignore"):
            log_a = self._log_keep + np.where(m > 0, log_expm1(np.where(m > 0, m, 1.0)), -np.inf)
        log_root = 0.5 * np.logaddexp(2.0 * log_a, math.log(4.0) + 2.0 * self._log_b + m)
        log_y = np.logaddexp(log_a, log_root) - math.log(2.0) - self._log_b
        out[finite] = log_y / self._slope
        return np.sign(loss) * out

    def _loss_tail(self, loss, under: str, upper: bool) -> np.ndarray:
        self._check_under(under)
        x = self._inverse_add(loss)  # L <= l  <=>  X <= x(l)
        weights, shifts = self._law(under)
        z = (x[..., None] - shifts) / self.sigma
        with np.errstate(invalid="ignore"):
            return np.sum(weights * special.ndtr(-z if upper else z), axis=-1)

    def profile(self, epsilon) -> np.ndarray:
        """delta(eps) = Pr_P[X > x(eps)] - e^eps Pr_Q[X > x(eps)] (the loss is increasing in X)."""
        eps = np.asarray(epsilon, dtype=np.float64)
        with np.errstate(over="ignore", invalid="ignore"):
            value = self.loss_sf(eps, "P") - np.exp(eps) * self.loss_sf(eps, "Q")
        return np.clip(np.where(np.isnan(value), 0.0, value), 0.0, 1.0)

    def sample(self, n: int, rng: np.random.Generator, under: str = "P") -> np.ndarray:
        self._check_under(under)
        weights, shifts = self._law(under)
        return rng.standard_normal(n) * self.sigma + shifts[rng.choice(len(weights), size=n, p=weights)]

    def __repr__(self) -> str:
        return f"AntipodalPair(rate={self.rate!r}, shift={float(self.shifts[1])!r}, sigma={self.sigma:g})"


_LOGIT_LIMIT = 46.0  # |logit r| beyond which a bin's rate is within 1e-20 of 0 or 1: the end bins take over


def _posterior_logit(t, rate: float, z: float):
    """logit r(t) = log(q / (1-q)) + (2t - 1) / (2 z^2)."""
    return math.log(rate) - math.log1p(-rate) + (2.0 * np.asarray(t, dtype=np.float64) - 1.0) / (2.0 * z * z)


def _mass(lo, hi, q: float, z: float) -> np.ndarray:
    """Pr[lo < T <= hi] for T ~ (1-q) N(0, z^2) + q N(1, z^2) (CDF differences on the smaller side)."""
    total = 0.0
    for w, m in ((1.0 - q, 0.0), (q, 1.0)):
        a, b = (lo - m) / z, (hi - m) / z
        with np.errstate(invalid="ignore"):
            part = np.where(b <= 0, special.ndtr(b) - special.ndtr(a), special.ndtr(-a) - special.ndtr(-b))
        total = total + w * part
    return np.maximum(total, 0.0)


def _merge(weights: np.ndarray, rates: np.ndarray, budget: float):
    """Groups of consecutive bins, each taking its top bin's rate (so still a dominating choice), grown
    while the group's excess sum_i w_i (r_top^2 - r_i^2) (the chi-square-like cost of rounding the rates
    up, to first order in r) stays within ``budget``. Returns (weights, rates) of the groups."""
    out_w, out_r = [], []
    i, n = 0, len(weights)
    while i < n:
        j, w_sum, w_r2 = i, weights[i], weights[i] * rates[i] ** 2
        while j + 1 < n:
            w_next, r_next = w_sum + weights[j + 1], rates[j + 1]
            if w_next * r_next**2 - (w_r2 + weights[j + 1] * r_next**2) > budget:
                break
            j, w_sum, w_r2 = j + 1, w_next, w_r2 + weights[j + 1] * r_next**2
        out_w.append(float(w_sum))
        out_r.append(float(rates[j]))
        i = j + 1
    return np.array(out_w), np.array(out_r)


@functools.lru_cache(maxsize=16)
def pooled_record_pair(rate: float, noise_multiplier: float, resolution: float = 0.05, merge: float = 1e-5):
    """The dominating pair of one step (module docstring), as a ``RevealedMixture`` of ``AntipodalPair``s
    with shift 1 (units of C); ``GaussianMixturePair([1], [2], z)`` when the task is always sampled.

    Args:
        rate: q, the task's Poisson sampling rate.
        noise_multiplier: z = sigma / C.
        resolution: the fine bins' width in logit r(t) (a bin's top rate is e^resolution times its
            bottom one).
        merge: fine bins are merged into groups (each at its top rate) while a group's rounding excess
            sum w_i (r_top^2 - r_i^2) stays below ``merge`` times the total sum w_i r_i^2: few groups
            where the posterior rate matters little. Any grouping is valid; these only trade time for
            tightness.
    """
    q = check_probability("rate", rate)
    z = check_positive("noise_multiplier", noise_multiplier)
    h = check_real("resolution", resolution, low=0.0, high=1.0, low_open=True)
    merge = check_real("merge", merge, low=0.0, high=1.0)
    if q == 0.0:
        raise ValueError("rate must be > 0 for a pool substitution pair (rate 0 releases nothing about the task)")
    if q == 1.0:
        return GaussianMixturePair([1.0], [2.0], z)
    # t from where the posterior rate is negligible (or the law of T has no mass left) to where it is 1
    lam = math.log(q) - math.log1p(-q)
    t_of = lambda logit: 0.5 + z * z * (logit - lam)  # noqa: E731  inverse of _posterior_logit
    t_lo = max(-4.0 * z, t_of(-_LOGIT_LIMIT))
    t_hi = max(t_lo, min(1.0 + 6.0 * z, t_of(_LOGIT_LIMIT)))
    count = max(1, math.ceil((t_hi - t_lo) / (h * z * z)))
    edges = np.linspace(t_lo, t_hi, count + 1)
    # bins (-inf, t_0], (t_{i-1}, t_i], each at the rate of its upper end; (t_m, inf) at rate 1
    weights = np.concatenate(([float(_mass(-np.inf, edges[0], q, z))], _mass(edges[:-1], edges[1:], q, z)))
    rates = 1.0 / (1.0 + np.exp(-_posterior_logit(edges, q, z)))
    top = float(_mass(edges[-1], np.inf, q, z))
    weights, rates = _merge(weights, rates, merge * float(np.sum(weights * rates**2)))
    components, kept = [], []
    for w, r in zip(weights, rates):
        if w > 0.0:
            kept.append(float(w))
            components.append(AntipodalPair(float(r), 1.0, z) if r < 1.0 else GaussianMixturePair([1.0], [2.0], z))
    if top > 0.0:
        kept.append(top)
        components.append(GaussianMixturePair([1.0], [2.0], z))
    total = sum(kept)
    # the pair covers every configuration of g and g' at once; named datasets attain the antipodal one
    attained = Attained((AntipodalPair(q, 1.0, z),), POOL_DATASETS)
    return RevealedMixture(tuple(w / total for w in kept), tuple(components), 0.0, z, attained)


def pooled_record_lower_pair(rate: float, noise_multiplier: float) -> Optional[GaussianMixturePair]:
    """The attained configuration g = C e, g' = -C e (``AntipodalPair(q, 1, z)``): its composition is a
    lower bound on what any valid bound for a pooled record can certify (None when q is 0 or 1)."""
    q = check_probability("rate", rate)
    z = check_positive("noise_multiplier", noise_multiplier)
    return AntipodalPair(q, 1.0, z) if 0.0 < q < 1.0 else None
