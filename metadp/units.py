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

import dataclasses
from typing import Tuple, cast

from metadp.banded_noise import banded_views
from metadp.core import events as ev
from metadp.releases import Release, release_views
from metadp.sampling import Guarantee, Sampling
from metadp.sampling.hierarchy import LEVEL_KEYS, episode_shift, parse_hierarchy, top_unit_shift
from metadp.plan_fields import PlanFields


__all__ = ["parse_hierarchy", "unit_views", "episode_shift", "top_unit_shift", "LEVEL_KEYS"]


def unit_views(plan: PlanFields) -> Tuple[Guarantee, ...]:
    """Every meaningful unit's view of ``plan``, the plan's own unit first (``primary``); the plan's
    sampling scheme builds them (``metadp.sampling``). A plan over a fixed pool that declares
    ``record_multiplicity`` has the task's and the record's views (``pooled_views``)."""
    if plan.noise.correlation == "banded":  # DP-FTRL's banded noise: the strategy's sensitivity (banded_noise)
        return _as_private_as(plan, banded_views(plan))
    if plan.record_multiplicity is not None:
        return _as_private_as(plan, pooled_views(plan))
    views = plan.sampling.guarantees(plan.unit, plan.relation, plan.noise.event(), plan.steps, plan.group_size,
                                     plan.noise.clipping)
    return _as_private_as(plan, views)


def pooled_views(plan: PlanFields) -> Tuple[Guarantee, ...]:
    """The views of a plan over a fixed pool of tasks, each record in at most ``record_multiplicity`` of them:
    the release's (``metadp.releases``: task, record and, against the server, the record again), each charged
    as often as the plan's steps charge it, the plan's unit first. A per-visit charge counts the worst record's
    visits: ``record_multiplicity`` a pass under one-pass sampling, at most that many a step otherwise (a run's
    ledger counts the visits it made, never more)."""
    k, scheme, steps = cast(int, plan.record_multiplicity), plan.sampling, plan.steps  # (declared: pooled views)
    release = plan.release or Release()
    views: Tuple[Guarantee, ...]
    # (a gaussian spec's event is a Gaussian; no noise: see below)
    noise = cast(ev.Gaussian, plan.noise.event()) if plan.noise.mechanism == "gaussian" else ev.Gaussian(1.0)
    if release.form == "task_clip":
        task = scheme.guarantees("task", plan.relation, noise, steps, None, plan.noise.clipping)[0]
        views = (dataclasses.replace(task, primary=False), pooled_record_view(scheme, noise, k, task))
    else:
        if plan.noise.clip == "none" and release.inner_noise == 0:  # no guarantee at all: events are placeholders
            release = dataclasses.replace(release, inner_noise=1.0)
        views = tuple(_counted(v, scheme, steps, k) for v in release_views(release, scheme, noise.noise_multiplier, k))
    key = "record-vs-server" if plan.against == "server" else plan.unit
    ordered = sorted(views, key=lambda v: v.key != key)
    return (dataclasses.replace(ordered[0], primary=True),) + tuple(ordered[1:])


def _counted(view: Guarantee, scheme: Sampling, steps: int, k: int) -> Guarantee:
    """``view`` with its charges counted over ``steps`` steps of ``scheme`` (module docstring of ``pooled_views``)."""
    if view.charge == "visit":
        per = scheme.releases(steps) if scheme.charge == "pass" else steps
        how = (f"{k} visit(s) of the record's tasks a pass" if scheme.charge == "pass" else
               f"at most {k} visit(s) a step, an a-priori bound (a run's ledger charges the visits it made)")
        return dataclasses.replace(view, steps=per * k, reason=f"{view.reason}; {how}")
    return dataclasses.replace(view, steps=scheme.releases(steps) if view.charge == "pass" else steps)


_NOT_PRIVATE = {
    "raw_norms": "NOT PRIVATE: clipping thresholds computed from raw gradient norms (dp-maml.txt Sec. 5.2.1) "
                 "depend on the data without noise",
}


def _as_private_as(plan: PlanFields, views: Tuple[Guarantee, ...]) -> Tuple[Guarantee, ...]:
    """``views`` as the plan's noise leaves them: thresholds from raw norms void every guarantee (event None,
    the reason said); no central noise (unless the release's noise is inside the tasks) or an unbounded
    contribution (``noise.clip = 'none'``) makes every release non-private (``NonPrivate``, epsilon infinite)."""
    noise, release = plan.noise, plan.release
    if noise.clip == "raw_norms":
        return tuple(dataclasses.replace(v, event=None, alternatives=(), reason=_NOT_PRIVATE["raw_norms"])
                     for v in views)
    inner_only = release is not None and release.form == "inner_dp"
    if noise.clip == "none" or (noise.mechanism == "none" and not inner_only):
        return tuple(dataclasses.replace(v, event=ev.NonPrivate(), alternatives=()) if v.event is not None else v
                     for v in views)
    return views


def pooled_record_view(sampling: Sampling, inner: ev.Gaussian, k: int, task: Guarantee) -> Guarantee:
    """The record's guarantee when each record is in at most ``k`` tasks of a fixed pool and each task's
    contribution is clipped to C under ``inner`` (the same view the trainer gives a flag run of that pool:
    ``Sampling.pooled_task_record``); charged as the scheme charges it, over the task view's charges."""
    charge, event, basis, reason = sampling.pooled_task_record(inner.noise_multiplier, k)
    return Guarantee("record", "record", task.adversary, "add_remove", charge, event, basis,
                     reason or f"one record added or removed; it is in at most {k} task(s) of the pool, each of "
                               "which moves the clipped sum by up to 2C", steps=task.steps)
