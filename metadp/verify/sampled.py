"""Pipelines of subsampled Gaussian steps: Poisson, fixed-size and episodic sampling seen from a canary
(the construction and the statistic: :mod:`metadp.verify.pipelines`).
"""

from __future__ import annotations

import functools
from typing import Any, Callable, Optional, Tuple

import numpy as np
from scipy import stats

from metadp.core.validation import check_count, check_positive, check_real
from metadp.mechanisms.episodic import RevealedMixture, episodic_record_pairs, hidden_binomial_pairs
from metadp.mechanisms.gaussian import GaussianMixturePair, poisson_gaussian_pairs
from metadp.verify.runs import Design, Pipeline, check_pair, make_pipeline, mixture_loss, pair_name, per_step_statistic

__all__ = ["poisson_pipeline", "fixed_size_pipeline", "episodic_pipeline"]

_RELATIONS = ("substitute", "add_remove")


def poisson_pipeline(rate: float, noise: float, steps: int, statistic_pair: Any = None) -> Pipeline:
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
    pair = poisson_gaussian_pairs(q, z)[0] if statistic_pair is None else check_pair(statistic_pair)

    def signal(m: int, rng: np.random.Generator, present: bool) -> Tuple[Optional[np.ndarray], Any]:
        return ((rng.random((m, T)) < q).astype(np.float64) if present else None), None

    design = Design(T, z, signal, functools.partial(per_step_statistic, pair))
    return make_pipeline(design, f"Poisson sampling (rate {q:g}) of a Gaussian sum (z = {z:g}), {T} steps, add/remove "
                             f"one unit; statistic: sum of per-step log-ratios of {pair_name(pair)}", "add_remove")


def fixed_size_pipeline(batch: int, population: int, noise: float, steps: int, relation: str = "substitute",
                        statistic_pair: Any = None) -> Pipeline:
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
            else check_pair(statistic_pair))

    def signal(mm: int, rng: np.random.Generator, present: bool) -> Tuple[Optional[np.ndarray], Any]:
        # the canary's position in a uniformly random order of n units; the batch is the first m
        return ((rng.integers(0, n, size=(mm, T)) < m) * 2.0 if present else None), None

    design = Design(T, z, signal, functools.partial(per_step_statistic, pair))
    return make_pipeline(design, f"fixed-size sampling ({m} of {n}) of a Gaussian sum (z = {z:g}), {T} steps, "
                             f"{relation} (canary +C, others -C: sum moves by 2C); statistic: sum of per-step "
                             f"log-ratios of {pair_name(pair)}", relation)


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
            loss[picked] = mixture_loss(pair, x[picked])
    return loss


def episodic_pipeline(episodes: int, unit_rate: float, within_rate: float, noise: float, steps: int, shift: float = 2.0,
                      reveal_unit: bool = False, statistic_pair: Any = None) -> Pipeline:
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
    statistic: Callable[[np.ndarray, Any], np.ndarray]  # (x (m, T), side) -> (m,)
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
        statistic = functools.partial(per_step_statistic, check_pair(pair))
        name = pair_name(pair)

    def signal(m: int, rng: np.random.Generator, present: bool) -> Tuple[Optional[np.ndarray], Any]:
        if not reveal_unit:  # K = sum over L episodes of Bernoulli(P_U r): Binomial(L, P_U r), J unused
            return (shift * rng.binomial(L, p_unit * r, size=(m, T)) if present else None), None
        j = rng.binomial(L, p_unit, size=(m, T))  # (m, T): episodes that selected the canary's unit
        return (shift * rng.binomial(j, r) if present else None), j

    design = Design(T, z, signal, statistic)
    seen = "J revealed" if reveal_unit else "J hidden"
    return make_pipeline(design, f"episodic sampling ({L} episodes, unit rate {p_unit:.4g}, within-unit rate {r:.4g}, "
                             f"shift {shift:g} C per episode) of a Gaussian sum (z = {z:g}), {T} steps, add/remove "
                             f"one record, {seen}; statistic: sum of per-step log-ratios of {name}", "add_remove")
