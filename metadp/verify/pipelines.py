"""Whole subsampled-and-composed pipelines on a neighbouring pair, reduced to one number per run.

An empirical audit (DESIGN.md sec. 6) runs a pipeline many times on a dataset D that holds a canary
unit and on its neighbour D', and compares the laws of one statistic under D and D' with the claimed
privacy profile. The builders here give the two samplers, ``sample_d(n, rng)`` and
``sample_d_prime(n, rng)``, each returning an (n,) array.

Worst-case construction (every builder). Each step releases a sum of per-unit contributions clipped
to L2 norm C plus N(0, (zC)^2 I). The canary contributes C e_1; the other units contribute nothing
in the direction e_1 (except where stated, for fixed-size and shuffled batches), so the released sum
projected on e_1, in units of C, is x_t = s_t + z g_t with g_t ~ N(0, 1) and s_t the canary's shift
in step t. The other coordinates carry no information about the canary and are dropped (post-
processing). The samplers simulate the true law of (s_1, ..., s_T) under the sampling scheme (the
canary's inclusion only: the other units' inclusions do not move x_t), and reduce x_1..x_T to

    S = sum_t log(dP/dQ)(x_t)

for a claimed per-step dominating pair (P, Q), ``statistic_pair`` (any object with ``log_ratio``,
acting on projections in units of C). When the claim is the true per-step pair, S is the log-
likelihood ratio of the whole run and the most powerful statistic (Neyman-Pearson); otherwise it is
still a post-processing, so any divergence measured on S is a lower bound on the pipeline's. The
default pair is the one that matches the sampling; the one-pass pipelines default to the exact
log-likelihood ratio of a pass (DESIGN.md 3.9). Runs are drawn in chunks of <= 2^22 projections.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import Callable, Optional

import numpy as np
from scipy import special, stats

from metadp.core.validation import check_count, check_positive, check_real
from metadp.mechanisms.episodic import RevealedMixture, episodic_record_pairs, hidden_binomial_pairs
from metadp.mechanisms.gaussian import GaussianMixturePair, poisson_gaussian_pairs

__all__ = ["Pipeline", "poisson_pipeline", "fixed_size_pipeline", "episodic_pipeline", "shuffle_pipeline",
           "balls_in_bins_pipeline"]

_CHUNK = 1 << 22  # projections (runs x steps) drawn at once: 32 MiB per float array
_RELATIONS = ("substitute", "add_remove")


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


@dataclasses.dataclass(frozen=True)
class _Design:
    steps: int
    noise: float
    signal: Callable  # (m, rng, present) -> (shifts (m, T) or None for all zero, side information or None)
    statistic: Callable  # (x (m, T), side) -> (m,)


def _draw(design: _Design, n, rng, present: bool, raw: bool = False, noise: bool = True) -> np.ndarray:
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


def _projections(design: _Design, n, rng, under: str = "D", noise: bool = True) -> np.ndarray:
    if under not in ("D", "D'"):
        raise ValueError(f"under must be 'D' or \"D'\", got {under!r}")
    return _draw(design, n, rng, under == "D", raw=True, noise=noise)


def _pipeline(design: _Design, description: str, relation: str) -> Pipeline:
    return Pipeline(functools.partial(_draw, design, present=True), functools.partial(_draw, design, present=False),
                    description, design.steps, relation, functools.partial(_projections, design))


# -- statistics ---------------------------------------------------------------------------------


def _mixture_loss(pair: GaussianMixturePair, x: np.ndarray) -> np.ndarray:
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




def _check_pair(pair):
    if not callable(getattr(pair, "log_ratio", None)):
        raise ValueError(f"statistic_pair must have a log_ratio method (a DominatingPair), got {type(pair).__name__}")
    return pair


def _per_step_statistic(pair, x: np.ndarray, side) -> np.ndarray:
    """sum_t log(dP/dQ)(x_t) over each run (row) of x."""
    if isinstance(pair, GaussianMixturePair):
        return _mixture_loss(pair, x).sum(axis=1)
    return np.asarray(pair.log_ratio(x.ravel()), dtype=np.float64).reshape(x.shape).sum(axis=1)


def _allocation_statistic(per_pass: int, present_shift: float, absent_shift: float, sigma: float,
                          x: np.ndarray, side) -> np.ndarray:
    """Exact log-likelihood ratio of passes in which one uniformly random step of ``per_pass`` carries
    ``present_shift`` under D and ``absent_shift`` under D' (DESIGN.md 3.9):
    sum over passes of log sum_t e^{(a x_t - a^2/2)/sigma^2} - log sum_t e^{(c x_t - c^2/2)/sigma^2}."""
    blocks = x.reshape(x.shape[0], -1, per_pass)  # (m, passes, steps per pass)

    def log_mean(shift):
        if shift == 0.0:
            return 0.0
        return special.logsumexp((shift * blocks - 0.5 * shift**2) / sigma**2, axis=-1) - math.log(per_pass)

    return np.sum(log_mean(present_shift) - log_mean(absent_shift), axis=-1)


# -- builders -----------------------------------------------------------------------------------


def _pair_name(pair) -> str:
    return repr(pair) if len(repr(pair)) <= 160 else type(pair).__name__


def poisson_pipeline(rate, noise, steps, statistic_pair=None) -> Pipeline:
    """T steps of Poisson sampling: the canary is in each step independently with probability q.

    Relation: add/remove the canary (D' lacks it). Per step x_t = B_t + z g_t, B_t ~ Bernoulli(q), under D
    and z g_t under D', i.e. the Poisson-subsampled Gaussian pair P = (1-q) N(0, z^2) + q N(1, z^2),
    Q = N(0, z^2) (DESIGN.md 3.2), exactly. The other units' inclusions are independent of the
    canary's, so contributions of theirs would only add independent noise: zero is the worst case.

    Args:
        rate: q in (0, 1].
        noise: z > 0, the noise standard deviation over C.
        steps: T >= 1.
        statistic_pair: the claimed per-step pair (default: the "add" pair above).

    Raises:
        ValueError: on a rate outside (0, 1], a noise multiplier <= 0 or infinite, steps < 1, or a
            statistic_pair without ``log_ratio``.
    """
    q = check_real("rate", rate, low=0.0, high=1.0, low_open=True)
    z = check_positive("noise", noise)
    T = check_count("steps", steps, minimum=1)
    pair = poisson_gaussian_pairs(q, z)[0] if statistic_pair is None else _check_pair(statistic_pair)

    def signal(m, rng, present):
        return ((rng.random((m, T)) < q).astype(np.float64) if present else None), None

    design = _Design(T, z, signal, functools.partial(_per_step_statistic, pair))
    return _pipeline(design, f"Poisson sampling (rate {q:g}) of a Gaussian sum (z = {z:g}), {T} steps, add/remove "
                             f"one unit; statistic: sum of per-step log-ratios of {_pair_name(pair)}", "add_remove")


def fixed_size_pipeline(batch, population, noise, steps, relation="substitute", statistic_pair=None) -> Pipeline:
    """T steps, each a uniformly random subset of exactly ``batch`` of ``population`` units.

    Construction, worst case for a clipped sum under either relation: the canary contributes +C e_1
    and every other unit -C e_1. Projections are reported relative to the public baseline -m C (m the
    batch size), the sum of a batch without the canary.

    * ``"substitute"``: D' replaces the canary by a unit contributing -C e_1, in the same slot. A step
      that draws the slot releases -(m-1) + 1 = -m + 2 under D and -m under D'; otherwise -m under both.
    * ``"add_remove"``: D' drops the canary (population n-1); its batches are m other units, sum -m.

    Either way x_t = 2 B_t + z g_t under D, B_t ~ Bernoulli(m/n) independent over steps, and z g_t
    under D': exactly P = (1-q) N(0, z^2) + q N(2, z^2) vs Q = N(0, z^2), q = m/n, the subsampled
    Gaussian with substitution sensitivity 2C that ``FixedSizeSampled`` (sensitivity factor 2) stands
    for (Balle, Barthe & Gaboardi 2018, arXiv:1807.01647; DESIGN.md 3.3): the construction attains that
    pair. With the other units at 0 the step laws would be (1-q) N(0, z^2) + q N(+-1, z^2), a weaker
    pair. Swapping D and D' gives the mirror direction.

    Args:
        batch: m, 1 <= m <= population (m <= population - 1 for ``"add_remove"``).
        population: n >= 1.
        noise: z > 0, the noise standard deviation over C.
        steps: T >= 1.
        relation: ``"substitute"`` or ``"add_remove"``.
        statistic_pair: the claimed per-step pair (default: the pair above, "add" direction).

    Raises:
        ValueError: on invalid sizes, relation, noise or steps.
    """
    n = check_count("population", population, minimum=1)
    m = check_count("batch", batch, minimum=1)
    if relation not in _RELATIONS:
        raise ValueError(f"relation must be one of {_RELATIONS}, got {relation!r}")
    top = n if relation == "substitute" else n - 1
    if m > top:
        raise ValueError(f"batch must be in [1, {top}] for population {n} and relation {relation!r}, got {batch!r}")
    z = check_positive("noise", noise)
    T = check_count("steps", steps, minimum=1)
    pair = (GaussianMixturePair([n - m, m], [0.0, 2.0], z, "add") if statistic_pair is None
            else _check_pair(statistic_pair))

    def signal(mm, rng, present):
        # the canary's position in a uniformly random order of n units; the batch is the first m
        return ((rng.integers(0, n, size=(mm, T)) < m) * 2.0 if present else None), None

    design = _Design(T, z, signal, functools.partial(_per_step_statistic, pair))
    return _pipeline(design, f"fixed-size sampling ({m} of {n}) of a Gaussian sum (z = {z:g}), {T} steps, "
                             f"{relation} (canary +C, others -C: sum moves by 2C); statistic: sum of per-step "
                             f"log-ratios of {_pair_name(pair)}", relation)


def _revealed_loss(mixture: RevealedMixture, within_rate: float, shift: float, x: np.ndarray,
                   j: np.ndarray) -> np.ndarray:
    """Per-step log-ratio of the component J of a revealed mixture (0 where P = Q). A count J past the
    mixture's truncation (Pr <= 1e-18 for the default) uses the Binomial(J, r) pair it stands for."""
    loss = np.zeros(x.shape)
    direction = next((c.direction for c in mixture.components if c is not None), "add")
    for value in range(1, int(j.max(initial=0)) + 1):
        picked = j == value
        if not picked.any():
            continue
        if value < len(mixture.components):
            pair = mixture.components[value]
        else:
            ks = np.arange(value + 1)
            pair = GaussianMixturePair(stats.binom.pmf(ks, value, within_rate), shift * ks, mixture.sigma, direction)
        if pair is not None:
            loss[picked] = _mixture_loss(pair, x[picked])
    return loss


def episodic_pipeline(episodes, unit_rate, within_rate, noise, steps, shift=2.0, reveal_unit=False,
                      statistic_pair=None) -> Pipeline:
    """T steps of episodic training seen from a canary record (DESIGN.md 3.6-3.7).

    Each step draws L episodes independently; each selects the canary's unit with probability P_U and,
    given that, contains the canary with probability r. Relation: add/remove the record. Worst case with
    per-episode clipping: an episode containing the record moves the sum by ``shift`` C (the episode
    exists either way), so with J ~ Binomial(L, P_U) episodes selecting the unit and K | J ~
    Binomial(J, r) containing the record, x_t = shift K_t + z g_t under D and z g_t under D' (J has the
    same law under both). The pipeline simulates J and K episode-wise in law; a claim that counts the
    record once per step (K in {0, 1}) is therefore testable against it.

    Args:
        episodes: L >= 1.
        unit_rate: P_U in (0, 1].
        within_rate: r in (0, 1].
        noise: z > 0, the noise standard deviation over C.
        steps: T >= 1.
        shift: per-episode shift over C, > 0 (2 with per-episode clipping).
        reveal_unit: if True, J is visible (the unit's other members shape its episodes): the statistic is
            sum_t log-ratio of component J_t of a ``RevealedMixture`` (default: the "add" pair of
            ``episodic_record_pairs``). If False, only x is used, with a per-step pair (default: the
            hidden pair K ~ Binomial(L, P_U r) of ``hidden_binomial_pairs``, which is then the true law).
        statistic_pair: the claim, as above (a ``RevealedMixture`` when ``reveal_unit``).

    Raises:
        ValueError: on invalid counts, rates, noise, shift, or a statistic_pair of the wrong kind.
    """
    L = check_count("episodes", episodes, minimum=1)
    p_unit = check_real("unit_rate", unit_rate, low=0.0, high=1.0, low_open=True)
    r = check_real("within_rate", within_rate, low=0.0, high=1.0, low_open=True)
    z = check_positive("noise", noise)
    T = check_count("steps", steps, minimum=1)
    shift = check_real("shift", shift, low=0.0, low_open=True)
    if reveal_unit:
        mixture = episodic_record_pairs(L, p_unit, r, z, shift)[0] if statistic_pair is None else statistic_pair
        if not isinstance(mixture, RevealedMixture):
            raise ValueError(f"statistic_pair must be a RevealedMixture when reveal_unit is True, "
                             f"got {type(mixture).__name__}")
        statistic = lambda x, j: _revealed_loss(mixture, r, shift, x, j).sum(axis=1)  # noqa: E731
        name = "the revealed-J mixture" + (" (episodic_record_pairs, add)" if statistic_pair is None else "")
    else:
        pair = hidden_binomial_pairs(L, p_unit * r, z, shift)[0] if statistic_pair is None else statistic_pair
        if isinstance(pair, RevealedMixture):
            raise ValueError("statistic_pair is a RevealedMixture: pass reveal_unit=True to use it")
        statistic = functools.partial(_per_step_statistic, _check_pair(pair))
        name = _pair_name(pair)

    def signal(m, rng, present):
        if not reveal_unit:  # K = sum over L episodes of Bernoulli(P_U r): Binomial(L, P_U r), J unused
            return (shift * rng.binomial(L, p_unit * r, size=(m, T)) if present else None), None
        j = rng.binomial(L, p_unit, size=(m, T))  # (m, T): episodes that selected the canary's unit
        return (shift * rng.binomial(j, r) if present else None), j

    design = _Design(T, z, signal, statistic)
    seen = "J revealed" if reveal_unit else "J hidden"
    return _pipeline(design, f"episodic sampling ({L} episodes, unit rate {p_unit:.4g}, within-unit rate {r:.4g}, "
                             f"shift {shift:g} C per episode) of a Gaussian sum (z = {z:g}), {T} steps, add/remove "
                             f"one record, {seen}; statistic: sum of per-step log-ratios of {name}", "add_remove")


def _one_pass(per_pass: int, passes: int, z: float, background: float, statistic_pair, what: str,
              relation: str) -> Pipeline:
    T = per_pass * passes
    present_shift, absent_shift = 1.0 - background, -background
    if statistic_pair is None:
        statistic = functools.partial(_allocation_statistic, per_pass, present_shift, absent_shift, z)
        name = "the exact per-pass log-likelihood ratio"
    else:
        statistic = functools.partial(_per_step_statistic, _check_pair(statistic_pair))
        name = "per-step log-ratios of " + _pair_name(statistic_pair)

    def signal(m, rng, present):
        value = present_shift if present else absent_shift
        if value == 0.0:
            return None, None
        shifts = np.zeros((m, passes, per_pass))
        where = rng.integers(0, per_pass, size=(m, passes))  # the canary's (or null unit's) step in each pass
        np.put_along_axis(shifts, where[..., None], value, axis=-1)
        return shifts.reshape(m, T), None

    design = _Design(T, z, signal, statistic)
    return _pipeline(design, f"{what}, Gaussian sum (z = {z:g}), {T} steps; statistic: {name}", relation)


def shuffle_pipeline(population, batch, noise, passes, background=0.0, statistic_pair=None) -> Pipeline:
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


def balls_in_bins_pipeline(T, noise, passes=1, statistic_pair=None) -> Pipeline:
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
