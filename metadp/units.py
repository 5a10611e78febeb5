"""Privacy units of a plan: the event each unit's guarantee composes (DESIGN.md sec. 2, 3.6-3.9, 4).

A plan names one unit (``record``, ``task`` or ``group``); where the plan also says how tasks are
built from records (a ``[[hierarchy]]`` of episodic levels), the other meaningful unit is reported
beside it, because a task-level number says nothing about one record that appears in many episodes.

Views (one step's event, the relation, and why), each a ``metadp.sampling.Guarantee`` that the plan's
sampling scheme builds (``Sampling.guarantees`` in ``metadp.sampling.schemes``):

* task or record, Poisson / fixed-size / no sampling: the plan's own step (``PoissonSampled``,
  ``FixedSizeSampled``, or the bare mechanism); ``group``: the same inside ``Group(k, .)``.
* ``episodic`` sampling (L fresh episodes per step, drawn level by level): the record is protected by
  ``EpisodicSampled`` (which episodes select the record's unit may show; only the last draw is
  hidden: ``metadp.mechanisms.episodic``); the top-level unit (``task``: a class, user or client) by
  a hidden Binomial(L, rate of the top level) count of affected episodes.
* a hierarchy under Poisson or fixed-size task sampling (each sampled task is a fresh episode): the
  record view is ``EpisodicSampled`` with one slot per task of the population (Poisson: each slot
  kept with the task rate, so the count of episodes that select the record's unit is Binomial(N, q
  P_U)) or the batch (fixed).
* ``shuffle`` (one pass over an equal partition, per epoch): one Gaussian per epoch, no amplification
  (and a certified lower bound); ``balls_in_bins``: ``RandomAllocation`` per pass, whose RDP and lower
  bound ``amplification.allocation_bounds`` derives.
"""

from __future__ import annotations

from typing import Tuple

from metadp.sampling import Guarantee
from metadp.sampling.hierarchy import LEVEL_KEYS, episode_shift, parse_hierarchy, top_unit_shift

__all__ = ["parse_hierarchy", "unit_views", "episode_shift", "top_unit_shift", "LEVEL_KEYS"]


def unit_views(plan) -> Tuple[Guarantee, ...]:
    """Every meaningful unit's view of ``plan``, the plan's own unit first (``primary``); the plan's
    sampling scheme builds them (``metadp.sampling``). A task-level plan over a fixed pool that declares
    ``record_multiplicity`` also has the record's view (``pooled_record_view``)."""
    views = plan.sampling.guarantees(plan.unit, plan.relation, plan.noise.event(), plan.steps, plan.group_size,
                                     plan.noise.clipping)
    k = getattr(plan, "record_multiplicity", None)
    return views if k is None else views + (pooled_record_view(plan.sampling, plan.noise.event(), k, views[0]),)


def pooled_record_view(sampling, inner, k: int, task: Guarantee) -> Guarantee:
    """The record's guarantee when each record is in at most ``k`` tasks of a fixed pool and each task's
    contribution is clipped to C under ``inner`` (the same view the trainer gives a flag run of that pool:
    ``Sampling.pooled_task_record``); charged as the scheme charges it, over the task view's charges."""
    charge, event, basis, reason = sampling.pooled_task_record(inner.noise_multiplier, k)
    return Guarantee("record", "record", task.adversary, "add_remove", charge, event, basis,
                     reason or f"one record added or removed; it is in at most {k} task(s) of the pool, each of "
                               "which moves the clipped sum by up to 2C", steps=task.steps)
