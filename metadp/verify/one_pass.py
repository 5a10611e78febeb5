"""One-pass pipelines: passes over a shuffled equal partition, and balls-in-bins allocation, in which the
canary joins exactly one random step per pass (DESIGN.md 3.9; the construction and the statistic:
:mod:`metadp.verify.pipelines`).
"""

from __future__ import annotations

import functools
import math
from typing import Any, Callable, Optional, Tuple, cast

import numpy as np
from scipy import special

from metadp.core.validation import check_count, check_positive, check_real
from metadp.verify.runs import Design, Pipeline, check_pair, make_pipeline, pair_name, per_step_statistic

__all__ = ["shuffle_pipeline", "balls_in_bins_pipeline"]


def _allocation_statistic(per_pass: int, present_shift: float, absent_shift: float, sigma: float,
                          x: np.ndarray, side: Any) -> np.ndarray:
    """Exact log-likelihood ratio of passes in which one uniformly random step of ``per_pass`` carries
    ``present_shift`` under D and ``absent_shift`` under D' (DESIGN.md 3.9):
    sum over passes of log sum_t e^{(a x_t - a^2/2)/sigma^2} - log sum_t e^{(c x_t - c^2/2)/sigma^2}."""
    blocks = x.reshape(x.shape[0], -1, per_pass)  # (m, passes, steps per pass)

    def log_mean(shift: float) -> Any:  # (m, passes), or 0
        if shift == 0.0:
            return 0.0
        return special.logsumexp((shift * blocks - 0.5 * shift**2) / sigma**2, axis=-1) - math.log(per_pass)

    return cast(np.ndarray, np.sum(log_mean(present_shift) - log_mean(absent_shift), axis=-1))


def _one_pass(per_pass: int, passes: int, z: float, background: float, statistic_pair: Any, what: str,
              relation: str) -> Pipeline:
    T = per_pass * passes
    present_shift, absent_shift = 1.0 - background, -background
    statistic: Callable[[np.ndarray, Any], np.ndarray]  # (x (m, T), side) -> (m,)
    if statistic_pair is None:
        statistic = functools.partial(_allocation_statistic, per_pass, present_shift, absent_shift, z)
        name = "the exact per-pass log-likelihood ratio"
    else:
        statistic = functools.partial(per_step_statistic, check_pair(statistic_pair))
        name = "per-step log-ratios of " + pair_name(statistic_pair)

    def signal(m: int, rng: np.random.Generator, present: bool) -> Tuple[Optional[np.ndarray], Any]:
        value = present_shift if present else absent_shift
        if value == 0.0:
            return None, None
        shifts = np.zeros((m, passes, per_pass))
        where = rng.integers(0, per_pass, size=(m, passes))  # the canary's (or null unit's) step in each pass
        np.put_along_axis(shifts, where[..., None], value, axis=-1)
        return shifts.reshape(m, T), None

    design = Design(T, z, signal, statistic)
    return make_pipeline(design, f"{what}, Gaussian sum (z = {z:g}), {T} steps; statistic: {name}", relation)


def shuffle_pipeline(population: int, batch: int, noise: float, passes: int, background: float = 0.0,
                     statistic_pair: Any = None) -> Pipeline:
    """Passes over a shuffled equal partition: each pass cuts a fresh random order of the n units into
    n/m batches of m, one step each (DESIGN.md 3.9(b)), so the canary is in exactly one uniformly
    random step per pass.

    Relation: add/remove the canary. With ``background = 0`` (every other unit contributes 0), D' has
    no shift anywhere and one pass has the same law as balls-in-bins allocation. With ``background = b``
    in [-1, 1] every other unit contributes b C e_1, and D' replaces the canary by a null unit
    (contribution 0) so that the partition stays equal (zero-out neighbours, ``relation`` "zero_out"):
    relative to the public baseline m b, the canary's step carries 1 - b under D and the null unit's
    step -b under D'. b = -1 is an adversarial variant in the spirit of Chua et al. 2024
    (arXiv:2403.17673), whose exact construction was not checked here.

    Args:
        population: n >= 1, a multiple of ``batch``.
        batch: m >= 1.
        noise: z > 0, the noise standard deviation over C.
        passes: >= 1; T = passes n / m steps.
        background: b in [-1, 1].
        statistic_pair: a claimed per-step pair (default: the exact per-pass log-likelihood ratio).

    Raises:
        ValueError: on a population that is not a multiple of batch, or other invalid inputs.
    """
    n = check_count("population", population, minimum=1)
    m = check_count("batch", batch, minimum=1)
    if n % m != 0:
        raise ValueError(f"population must be a multiple of batch ({m}) for an equal partition, got {population!r}")
    z = check_positive("noise", noise)
    passes = check_count("passes", passes, minimum=1)
    b = check_real("background", background, low=-1.0, high=1.0)
    relation = "add_remove" if b == 0.0 else "zero_out"  # zero-out: the canary replaced by a null unit
    return _one_pass(n // m, passes, z, b, statistic_pair,
                     f"shuffled equal partition ({n} units in batches of {m}), {passes} passes, background "
                     f"{b:g} C", relation)


def balls_in_bins_pipeline(T: int, noise: float, passes: int = 1, statistic_pair: Any = None) -> Pipeline:
    """Random allocation: in each pass the canary joins one uniformly random step of T (DESIGN.md 3.9(a);
    Chua et al. 2025, arXiv:2412.16802; Feldman & Shenfeld 2025, arXiv:2502.08202).

    Relation: add/remove the canary; the other units contribute 0 (their step counts are independent
    of the canary's step). Per pass the pair is (1/T) sum_t N(e_t, z^2 I_T) vs N(0, z^2 I_T), exactly.

    Args:
        T: steps per pass, >= 1.
        noise: z > 0, the noise standard deviation over C.
        passes: >= 1.
        statistic_pair: a claimed per-step pair (default: the exact per-pass log-likelihood ratio).

    Raises:
        ValueError: on invalid inputs.
    """
    T = check_count("T", T, minimum=1)
    z = check_positive("noise", noise)
    passes = check_count("passes", passes, minimum=1)
    return _one_pass(T, passes, z, 0.0, statistic_pair, f"balls-in-bins allocation over {T} steps, {passes} passes",
                     "add_remove")
