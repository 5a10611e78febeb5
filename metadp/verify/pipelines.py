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

Modules: :mod:`metadp.verify.runs` (the :class:`Pipeline` pair and the statistics),
:mod:`metadp.verify.sampled` (Poisson, fixed-size, episodic), :mod:`metadp.verify.one_pass` (shuffle,
balls-in-bins) and :mod:`metadp.verify.dp_pix_pipeline`; :func:`pipeline_for` picks the pipeline of
an accountant event.
"""

from __future__ import annotations

import functools
from typing import Optional, Tuple

from metadp.core import events as ev
from metadp.verify.dp_pix_pipeline import dp_pix_pipeline
from metadp.verify.one_pass import balls_in_bins_pipeline, shuffle_pipeline
from metadp.verify.runs import Pipeline
from metadp.verify.sampled import episodic_pipeline, fixed_size_pipeline, poisson_pipeline

__all__ = ["Pipeline", "poisson_pipeline", "fixed_size_pipeline", "episodic_pipeline", "shuffle_pipeline",
           "balls_in_bins_pipeline", "dp_pix_pipeline", "pipeline_for", "NoPipelineError"]


class NoPipelineError(ValueError):
    """No audit pipeline realises the event (``event`` is kept; the message names it and the reason)."""

    def __init__(self, event: ev.Event, reason: str):
        self.event = event
        super().__init__(f"no audit pipeline for {event.describe()}: {reason}")


def _noise(event: ev.Event) -> float:
    inner = getattr(event, "inner", None)
    if not isinstance(inner, ev.Gaussian):
        raise NoPipelineError(event, "the sampled step must be Gaussian")
    return inner.noise_multiplier


@functools.singledispatch
def pipeline_for(event: ev.Event, steps: int, *, shuffle: Optional[Tuple[int, int]] = None) -> Pipeline:
    """The audit pipeline that realises ``steps`` compositions of one accountant event.

    Dispatch on the event's type: ``PoissonSampled(q, Gaussian(z))`` -> :func:`poisson_pipeline`,
    ``FixedSizeSampled`` (sensitivity factor 2) -> :func:`fixed_size_pipeline` (substitution), ``EpisodicSampled`` ->
    :func:`episodic_pipeline` (the unit revealed when its rate is below 1), and ``Gaussian(z)`` with
    ``shuffle=(population, batch)`` -> :func:`shuffle_pipeline` over ``steps`` passes with background
    -1 (every step of a pass is one Gaussian release, the adversarial zero-out construction).

    Args:
        event: one step, as the accountants read it.
        steps: T >= 1 (passes, for a shuffle).
        shuffle: (population, batch) when the steps are passes over a shuffled equal partition.

    Raises:
        NoPipelineError: (a ValueError) for an event no pipeline realises.
        ValueError: on invalid parameters of the pipeline.
    """
    raise NoPipelineError(event, f"no pipeline for {type(event).__name__}")


@pipeline_for.register
def _(event: ev.PoissonSampled, steps: int, *, shuffle: Optional[Tuple[int, int]] = None) -> Pipeline:
    return poisson_pipeline(event.rate, _noise(event), steps)


@pipeline_for.register
def _(event: ev.FixedSizeSampled, steps: int, *, shuffle: Optional[Tuple[int, int]] = None) -> Pipeline:
    if event.sensitivity_factor != 2.0:  # the pipeline's construction moves the sum by 2C
        raise NoPipelineError(event, "the fixed-size pipeline realises sensitivity factor 2")
    return fixed_size_pipeline(event.batch, event.population, _noise(event), steps)


@pipeline_for.register
def _(event: ev.EpisodicSampled, steps: int, *, shuffle: Optional[Tuple[int, int]] = None) -> Pipeline:
    return episodic_pipeline(event.episodes, event.unit_rate, event.within_rate, _noise(event), steps,
                             shift=event.shift, reveal_unit=event.unit_rate < 1.0)


@pipeline_for.register
def _(event: ev.Gaussian, steps: int, *, shuffle: Optional[Tuple[int, int]] = None) -> Pipeline:
    if shuffle is None:
        raise NoPipelineError(event, "a Gaussian step is a pipeline only as a pass of a shuffle=(population, batch)")
    population, batch = shuffle
    return shuffle_pipeline(population, batch, event.noise_multiplier, steps, background=-1.0)
