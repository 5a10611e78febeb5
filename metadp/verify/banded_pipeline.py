"""The audit pipeline of a plan with banded correlated noise (``metadp verify plan FILE``, issue 34): the
correlated mechanism itself, its noise streamed as the trainer streams it (``metadp.mechanisms.banded.
BandedNoise``), on a worst-case neighbouring pair.

Construction (units of the clip norm C; the canary's contribution is C e_1, every other unit's is 0 along
e_1, so only that coordinate carries information). A run releases y_t = s_t + z (C^-1 Z)_t, t < n, with s_t
= 1 where the canary contributes. The auditor undoes the strategy, w = C y = C s + z Z (post-processing:
C is public), and reduces w to its log-likelihood ratio:

* ``none`` / ``min_separation`` (s fixed: every step, or steps 0, s, 2s, ...): S = <w, v> / z^2 - ||v||^2 /
  (2 z^2), v = C s, the Neyman-Pearson statistic of N(v, z^2 I) against N(0, z^2 I);
* ``cyclic_poisson`` (the canary in group 0, in each of its steps with probability q): the participation at
  step i occupies rows i..i+b-1 of w (disjoint from the others'), whose projection on the column u_i is
  N(s_i ||u_i||, z^2); S sums the Poisson mixture log-ratios of those projections.

Where the plan's claim is right these laws are exactly the claimed Gaussian (or the DP-SGD reduction's
pair), and a noise generator that does not produce C^-1 Z shows up as a law the claim does not cover.
"""

from __future__ import annotations

from typing import List, cast

import numpy as np

from metadp.banded_noise import plan_coefficients
from metadp.plan import Plan
from metadp.mechanisms.banded import BandedNoise
from metadp.sampling.participation import CyclicPoisson, MinSeparation
from metadp.verify.runs import Pipeline


__all__ = ["banded_pipeline", "MAX_BANDED_STEPS"]

MAX_BANDED_STEPS = 4096  # every run streams n steps of noise: an audit of more is a matter of hours
_CHUNK = 1 << 21  # projections (runs x steps) drawn at once


def _apply(c: np.ndarray, y: np.ndarray) -> np.ndarray:
    """C y for the lower-triangular Toeplitz C of ``c``, row by row of y (runs x n)."""
    w = c[0] * y
    for k in range(1, len(c)):
        w[:, k:] += c[k] * y[:, :-k]
    return cast(np.ndarray, w)


def banded_pipeline(plan: Plan, noise_factor: float = 1.0) -> Pipeline:
    """The pipeline of ``plan`` (a banded plan: ``noise.correlation = "banded"``); ``noise_factor`` scales the
    noise actually streamed (below 1: a control whose claim, the plan's, does not hold)."""
    n, z = plan.steps, cast(float, plan.noise.multiplier) * noise_factor  # (a banded plan's noise is gaussian)
    if n > MAX_BANDED_STEPS:
        raise ValueError(f"metadp verify plan: a banded plan is audited for at most {MAX_BANDED_STEPS} steps (each "
                         f"run streams every step's noise), got {n}")
    c = np.asarray(plan_coefficients(plan))
    b, scheme = len(c), plan.sampling
    if scheme.scheme == "cyclic_poisson":
        cyclic = cast(CyclicPoisson, scheme)
        starts = np.arange(0, n, cyclic.groups)  # group 0's steps
        norms = np.array([np.linalg.norm(c[: min(b, n - i)]) for i in starts])
        q = cyclic.rate

        def signal(m: int, rng: np.random.Generator, present: bool) -> np.ndarray:
            s = np.zeros((m, n))
            if present:
                s[:, starts] = rng.random((m, len(starts))) < q
            return s

        def statistic(w: np.ndarray) -> np.ndarray:
            x = np.stack([w[:, i:i + len(c[: min(b, n - i)])] @ c[: min(b, n - i)] / u
                          for i, u in zip(starts, norms)], axis=1)  # s_i ||u_i|| + z N(0, 1)
            loss = (x * norms - 0.5 * norms**2) / z**2
            return cast(np.ndarray, np.sum(np.logaddexp(np.log1p(-q), np.log(q) + loss), axis=1))
        how = (f"the canary in group 0 (steps 0, {cyclic.groups}, ...), each Poisson-sampled at {q:g}; statistic: the "
               "sum of the per-participation mixture log-ratios of C y projected on each column")
    else:
        s0 = np.zeros(n)
        if scheme.scheme == "none":
            s0[:] = 1.0
        else:
            separated = cast(MinSeparation, scheme)  # (the banded schemes: none, cyclic_poisson, min_separation)
            k = separated.participations_in(n)
            s0[np.arange(k) * separated.separation] = 1.0
        v = _apply(c, s0[None, :])[0]

        def signal(m: int, rng: np.random.Generator, present: bool) -> np.ndarray:
            return np.broadcast_to(s0, (m, n)) if present else np.zeros((m, n))

        def statistic(w: np.ndarray) -> np.ndarray:
            return cast(np.ndarray, (w @ v) / z**2 - (v @ v) / (2.0 * z**2))
        how = "the canary in " + ("every step" if scheme.scheme == "none" else
                                   f"steps 0, {cast(MinSeparation, scheme).separation}, ...") + \
              "; statistic: the log-likelihood ratio of C y"

    def runs(count: int, rng: np.random.Generator, present: bool) -> np.ndarray:
        out: List[np.ndarray] = []
        per = max(1, _CHUNK // n)  # runs at a time: at most _CHUNK projections in memory
        for start in range(0, count, per):
            m = min(per, count - start)
            noise = BandedNoise(c, m, rng, sigma=z)
            y = np.stack([noise.next() for _ in range(n)], axis=1) + signal(m, rng, present)
            out.append(statistic(_apply(c, y)))
        return np.concatenate(out) if out else np.zeros(0)

    description = (f"banded correlated noise ({b} band(s), z = {z:g}, streamed as the trainer streams it), {n} steps, "
                   f"{scheme.scheme} participation: {how}")
    return Pipeline(lambda count, rng: runs(count, rng, True), lambda count, rng: runs(count, rng, False),
                    description, n, plan.relation)
