"""What every audit pipeline shares: the :class:`Pipeline` pair of samplers, runs drawn in chunks, and
the per-step log-ratio statistics (the construction is described in :mod:`metadp.verify.pipelines`).
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, Callable, Optional, Tuple, cast

import numpy as np

from metadp.core.validation import check_count
from metadp.mechanisms.gaussian import GaussianMixturePair

__all__ = ["Pipeline", "Design", "make_pipeline", "mixture_loss", "check_pair", "per_step_statistic", "pair_name"]

_CHUNK = 1 << 22  # projections (runs x steps) drawn at once: 32 MiB per float array


@dataclasses.dataclass(frozen=True)
class Pipeline:
    """A neighbouring pair of pipelines, each run reduced to one statistic.

    Attributes:
        sample_d: (n, rng) -> (n,) statistics of n independent runs on D (the canary present).
        sample_d_prime: (n, rng) -> (n,) statistics of n runs on the neighbour D'.
        description: the sampling, noise, relation, construction and statistic, in words.
        steps: T, the number of noisy releases per run.
        relation: the neighbouring relation between D and D'.
        projections: (n, rng, under="D", noise=True) -> (n, T) per-step projections x_t in units of C
            (``under="D'"`` for the neighbour); with ``noise=False`` only the canary's shifts s_t
            (a debugging view of the sampling).
    """

    sample_d: Callable[[int, np.random.Generator], np.ndarray]
    sample_d_prime: Callable[[int, np.random.Generator], np.ndarray]
    description: str
    steps: int
    relation: str = "add_remove"
    projections: Optional[Callable[..., np.ndarray]] = dataclasses.field(default=None, repr=False, compare=False)


# -- drawing runs -------------------------------------------------------------------------------


MAX_AUDIT_STEPS = 10**6  # an audit draws every step of every run: 20,000 runs of 10^6 steps is 2 x 10^10 draws


@dataclasses.dataclass(frozen=True)
class Design:
    steps: int
    noise: float
    signal: Callable[..., Tuple[Optional[np.ndarray], Any]]  # (m, rng, present) -> (shifts (m, T) or None for all zero, side information or None)
    statistic: Callable[[np.ndarray, Any], np.ndarray]  # (x (m, T), side) -> (m,)

    def __post_init__(self) -> None:
        if not 1e-50 <= self.noise <= 1e50:  # the per-step log-ratios overflow float64 outside it (NaN statistics)
            raise ValueError(f"noise multiplier {self.noise:g}: an audit simulates noise multipliers in [1e-50, 1e50] "
                             "(outside it the per-step log-likelihood ratios overflow float64)")
        if self.steps > MAX_AUDIT_STEPS:
            raise ValueError(f"steps = {self.steps:,}: an audit simulates every step of every run (tens of thousands "
                             f"of runs), so it covers at most {MAX_AUDIT_STEPS:,} steps; audit fewer steps (the "
                             "per-step claim is the same; its composition is what the accountants certify)")


def _draw(design: Design, n: int, rng: np.random.Generator, present: bool, raw: bool = False,
          noise: bool = True) -> np.ndarray:
    n = check_count("n", n)
    if not isinstance(rng, np.random.Generator):
        raise ValueError(f"rng must be a numpy Generator, got {type(rng).__name__}")
    T = design.steps
    out = np.empty((n, T) if raw else n)
    rows = max(1, _CHUNK // T)
    for start in range(0, n, rows):
        m = min(rows, n - start)
        shifts, side = design.signal(m, rng, present)  # (m, T): one row per run, or None (all 0)
        x = design.noise * rng.standard_normal((m, T)) if noise else np.zeros((m, T))
        if shifts is not None:
            x += shifts
        out[start:start + m] = x if raw else design.statistic(x, side)
    return out


def _projections(design: Design, n: int, rng: np.random.Generator, under: str = "D", noise: bool = True) -> np.ndarray:
    if under not in ("D", "D'"):
        raise ValueError(f"under must be 'D' or \"D'\", got {under!r}")
    return _draw(design, n, rng, under == "D", raw=True, noise=noise)


def make_pipeline(design: Design, description: str, relation: str) -> Pipeline:
    return Pipeline(functools.partial(_draw, design, present=True), functools.partial(_draw, design, present=False),
                    description, design.steps, relation, functools.partial(_projections, design))


# -- statistics ---------------------------------------------------------------------------------


def mixture_loss(pair: GaussianMixturePair, x: np.ndarray) -> np.ndarray:
    """log(dP/dQ)(x) of a Gaussian-mixture pair, elementwise, without (x.size, K) temporaries:
    L_add(x) = log sum_k w_k exp((s_k x - s_k^2 / 2) / sigma^2), by the max-shift trick, in place."""
    slopes = pair.shifts / pair.sigma**2
    offsets = np.log(pair.weights) - pair.shifts**2 / (2.0 * pair.sigma**2)
    top = np.full(x.shape, -np.inf)
    term = np.empty(x.shape)
    for a, b in zip(slopes, offsets):
        np.multiply(x, a, out=term)
        term += b
        np.maximum(top, term, out=top)
    total = np.zeros(x.shape)
    for a, b in zip(slopes, offsets):
        np.multiply(x, a, out=term)
        term += b
        term -= top
        np.exp(term, out=term)
        total += term
    np.log(total, out=total)
    total += top
    return total if pair.direction == "add" else np.negative(total, out=total)




def check_pair(pair: Any) -> Any:
    if not callable(getattr(pair, "log_ratio", None)):
        raise ValueError(f"statistic_pair must have a log_ratio method (a DominatingPair), got {type(pair).__name__}")
    return pair


def per_step_statistic(pair: Any, x: np.ndarray, side: Any) -> np.ndarray:
    """sum_t log(dP/dQ)(x_t) over each run (row) of x."""
    if isinstance(pair, GaussianMixturePair):
        return cast(np.ndarray, mixture_loss(pair, x).sum(axis=1))
    return cast(np.ndarray, np.asarray(pair.log_ratio(x.ravel()), dtype=np.float64).reshape(x.shape).sum(axis=1))


def pair_name(pair: Any) -> str:
    return repr(pair) if len(repr(pair)) <= 160 else type(pair).__name__
