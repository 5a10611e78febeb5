"""The training algorithms as types: one registry the loop, the flags, the command and the docs read.

Each algorithm is an instance of a *family* class that says what it computes and what it guarantees:
its per-task contribution (``contribution``: a function of ``metadp.training.algorithms.contributions``, or any
callable with that signature), the noise on the released sum (:meth:`Algorithm.release_std`), the
update (``optimizer``, ``update_sign``, :meth:`Algorithm.update_scale`), its default unit and sampler,
which flags it reads, and its privacy views (:meth:`Algorithm.views`, built from
``metadp.releases``). No torch here: ``metadp train --help`` lists the registry without it.

=================  ==============  ======================================================================
family             algorithms      a step
=================  ==============  ======================================================================
``MetaGradient``   maml, dp-maml,  per-task meta-gradients (first or second order); private: clipped per
                   dp-agr          task, summed, noise once (dp-maml.txt Alg. 1; dp-fedmeta.txt DP-AGR)
``SampleLevel``    dp-maml-sample, DP inner loop, per-example query gradients clipped and summed per task
                   dp-agrlr        (dp-maml.txt Alg. 2); dp-agrlr adds the client's local noise and the
                                   server's per-client clip and noise (dp-fedmeta.txt Alg. 2-3)
``Reptile``        reptile,        per-task SGD updates averaged, SGD on them; private: full-batch DP-SGD
                   dp-reptile      inside each task (dp-meta-learning-task-global.txt Alg. 1)
``Prototypical``   protonet        prototypical network on obfuscated images (its own loop,
                                   ``metadp.training.algorithms.protonet``)
=================  ==============  ======================================================================

Adding an algorithm: an instance of a family (or a new subclass of :class:`Algorithm`) passed to
:func:`register`, here or in the user's code; nothing else names it.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Callable, Optional, Tuple, Union

from metadp.sampling import Guarantee, Sampling
from metadp.releases import Release, release_views
from metadp.training.registry import Registry

__all__ = ["Algorithm", "MetaGradient", "SampleLevel", "Reptile", "Prototypical", "REGISTRY", "register", "get",
           "names", "views"]

_EVERYONE = "anyone who sees the released noisy aggregates and the model"


@dataclasses.dataclass(frozen=True)
class Algorithm:
    """One training algorithm (module docstring). Subclasses are the families; fields tune a member.

    Attributes:
        name: the name on the command line and in ``TrainConfig.algorithm``.
        description: one line for ``metadp train --help``.
        private: releases only noisy aggregates and has privacy views.
        meta_loop: runs in ``metadp.training.run.trainer``'s loop on a task pool (False: its own loop).
        central_clip: clips each task's contribution and adds noise to the sum (clip policies adapt it).
        central_noise: the released sum carries central noise z C (False: only the inner loop's).
        inner_dp: per-example clipping and noise inside each task (``inner_clip``, ``inner_noise``).
        party: who a unit is, in words ("task" or "client").
        default_unit: the view whose budget stops the run unless ``unit`` says otherwise.
        default_sampler: "poisson", "fixed" or "one-pass".
        min_inner_steps: the fewest inner steps its update is defined with.
        optimizer: the outer optimiser, "adam" or "sgd".
        default_outer_lr: its learning rate unless given.
        update_sign: +1 descends the averaged update; -1 moves towards it (Reptile).
        batch: the pool method giving its tasks, "batch" (support/query) or "joint_batch".
        contribution: per-task contribution, a function name in ``metadp.training.algorithms.contributions`` or a
            callable ``f(algorithm, model, params, pool, rows, loss_fn, config, noise_gen)``.
        private_form: for a non-private algorithm, the private one to suggest.
    """

    name: str
    description: str
    private: bool = True
    meta_loop: bool = True
    central_clip: bool = False
    central_noise: bool = True
    inner_dp: bool = False
    party: str = "task"
    default_unit: str = "task"
    default_sampler: str = "poisson"
    min_inner_steps: int = 1
    optimizer: str = "adam"
    default_outer_lr: float = 1e-3
    update_sign: float = 1.0
    batch: str = "batch"
    contribution: Union[str, Callable] = "meta_gradients"
    private_form: Optional[str] = None

    # -- flags -----------------------------------------------------------------------------------
    @property
    def reads_clip(self) -> bool:
        """Reads ``clip`` and ``clip_mode`` (a clip outside the inner loop)."""
        return self.private and self.central_noise

    @property
    def reads_first_order(self) -> bool:
        return True

    @property
    def units(self) -> Tuple[str, ...]:
        """The views it has (``Guarantee.key``), the default first."""
        return (self.default_unit,) + tuple(u for u in ("task", "record") if u != self.default_unit)

    def unit_refusal(self, unit: str) -> Optional[str]:
        """Why ``unit`` cannot be budgeted (None: it can)."""
        if unit in self.units:
            return None
        if unit == "record-vs-server":
            owners = ", ".join(a.name for a in REGISTRY.values() if "record-vs-server" in a.units)
            return ("--unit record-vs-server (the record against the server that sees each client's update) "
                    f"applies to {owners} only, not {self.name}")
        return f"--unit {unit}: {self.name} has no {unit}-level guarantee"

    def charged_per_visit(self, unit: str) -> bool:
        """The view ``unit`` is charged per visit of the worst record (its noise cannot be calibrated to
        random visits)."""
        return unit == "record-vs-server"

    # -- the step --------------------------------------------------------------------------------
    def bounded(self, c) -> bool:
        """Every release of ``c`` (a ``TrainConfig``) has positive noise on a finite clip."""
        central = not self.central_noise or (c.noise_multiplier > 0 and math.isfinite(c.clip))
        inner = not self.inner_dp or (c.inner_noise > 0 and math.isfinite(c.inner_clip))
        return central and inner

    def release_std(self, c, threshold: float, z_sum: float) -> float:
        """The noise std on the released sum at clip ``threshold`` (``z_sum``: the sum's multiplier)."""
        if not (c.private and c.bounded):
            return 0.0
        return z_sum * threshold if self.central_clip else 0.0

    def update_scale(self, expected: float, query_per_task: int) -> float:
        """The divisor of the released sum: the expected batch (a Poisson sample's size is private)."""
        return expected

    # -- privacy ---------------------------------------------------------------------------------
    @property
    def form(self) -> str:
        """What each task contributes to a release (``metadp.releases.FORMS``)."""
        return "task_clip"

    def release(self, *, inner_noise: float = math.inf, inner_steps: int = 1, query_per_task: int = 1,
                first_order: bool = True) -> Release:
        """What one step of this algorithm releases (``metadp.releases``; a plan's ``[release]``)."""
        return Release.of(self.form, inner_steps=inner_steps, inner_noise=inner_noise, query_per_task=query_per_task,
                          first_order=first_order)

    def views(self, plan: Sampling, *, noise: float, inner_noise: float, inner_steps: int, query_per_task: int,
              record_multiplicity: int, first_order: bool) -> Tuple[Guarantee, ...]:
        """The guarantees of one run, the default unit's first (``metadp.releases.release_views``)."""
        if not self.private:
            return ()
        release = self.release(inner_noise=inner_noise, inner_steps=inner_steps, query_per_task=query_per_task,
                               first_order=first_order)
        found = release_views(release, plan, noise, record_multiplicity, self.party)
        return tuple(sorted(found, key=lambda g: g.key != self.default_unit))


@dataclasses.dataclass(frozen=True)
class MetaGradient(Algorithm):
    """MAML family: per-task meta-gradients; private members clip each task's and noise the sum."""


@dataclasses.dataclass(frozen=True)
class SampleLevel(Algorithm):
    """DP inner loop with per-example query gradients clipped and summed per task (dp-maml.txt Alg. 2).

    ``local_noise``: each task (client) adds noise to its own query sum and sends the mean, clipped by
    ``inner_clip``; the server then clips and noises as the MAML family does (DP-AGRLR). Without it the
    query gradients are clipped by ``clip`` and the sum carries noise z C (sample-level DP-MAML).
    """

    inner_dp: bool = True
    local_noise: bool = False
    contribution: Union[str, Callable] = "query_sums"

    @property
    def units(self) -> Tuple[str, ...]:
        return super().units + (("record-vs-server",) if self.local_noise else ())

    @property
    def form(self) -> str:
        return "local_noise" if self.local_noise else "example_clip"

    def release_std(self, c, threshold: float, z_sum: float) -> float:
        if self.central_clip or not (c.private and c.bounded):
            return super().release_std(c, threshold, z_sum)
        return c.noise_multiplier * c.clip  # clipped per example in the contribution; noise z C on the sum

    def update_scale(self, expected: float, query_per_task: int) -> float:
        return expected if self.local_noise else expected * query_per_task  # the client sends its mean


@dataclasses.dataclass(frozen=True)
class Reptile(Algorithm):
    """Reptile family: per-task SGD updates theta_i - theta, averaged, SGD towards them; the private
    member runs full-batch DP-SGD inside each task and adds no central noise (task-global DP)."""

    central_noise: bool = False
    optimizer: str = "sgd"
    default_outer_lr: float = 1.0
    update_sign: float = -1.0
    batch: str = "joint_batch"
    contribution: Union[str, Callable] = "reptile_updates"

    @property
    def form(self) -> str:
        return "inner_dp"

    @property
    def reads_first_order(self) -> bool:
        return False  # first order by construction

    @property
    def units(self) -> Tuple[str, ...]:
        return ("record",) if self.private else super().units

    def unit_refusal(self, unit: str) -> Optional[str]:
        if unit == "task" and self.private:
            return (f"--unit task: {self.name} has no task-level guarantee (each task's update reaches the "
                    "meta-learner without task-level noise); use --unit record")
        return super().unit_refusal(unit)

    def charged_per_visit(self, unit: str) -> bool:
        return (self.private and unit == "record") or super().charged_per_visit(unit)


@dataclasses.dataclass(frozen=True)
class Prototypical(Algorithm):
    """Prototypical networks on obfuscated images (``metadp.training.algorithms.protonet``, its own loop)."""

    private: bool = False
    meta_loop: bool = False


REGISTRY = Registry("algorithm", Algorithm)
register = REGISTRY.register


def get(name: str) -> Algorithm:
    """The registered algorithm ``name``; ValueError naming the registered ones otherwise."""
    return REGISTRY.lookup(name, names(meta_loop=True))


def names(*, meta_loop: Optional[bool] = None, **where) -> Tuple[str, ...]:
    """Registered names, in order, whose fields (or properties) equal ``where`` (and ``meta_loop``)."""
    return REGISTRY.names(**where) if meta_loop is None else REGISTRY.names(meta_loop=meta_loop, **where)


def views(algorithm: str, plan: Sampling, *, noise: float, inner_noise: float = math.inf, inner_steps: int = 1,
          query_per_task: int = 1, record_multiplicity: int = 1, first_order: bool = True,
          private_clipping: bool = True) -> Tuple[Guarantee, ...]:
    """The guarantees of one run of the registered ``algorithm`` (``metadp.releases``), the first
    the default budget unit's.

    Args:
        algorithm: a registered meta-learning algorithm's name.
        plan: the task sampling.
        noise: z of the central noisy sum (DP-MAML, DP-AGR, DP-AGRLR's server, sample-level's outer).
        inner_noise: z_in of the inner per-example DP-SGD (sample-level DP-MAML, DP-AGRLR's z_0,
            DP-Reptile).
        inner_steps: S, the inner steps.
        query_per_task: m_q, query examples per task.
        record_multiplicity: k, the most tasks of the pool any one record is in.
        first_order: first-order meta-gradients (sample-level DP-MAML and DP-AGRLR).
        private_clipping: False when thresholds come from raw gradient norms: every view loses its
            guarantee.
    """
    alg = get(algorithm)
    if not alg.meta_loop:
        raise ValueError(f"algorithm must be one of {names(meta_loop=True)}, got {algorithm!r}")
    out = alg.views(plan, noise=noise, inner_noise=inner_noise, inner_steps=inner_steps,
                    query_per_task=query_per_task, record_multiplicity=record_multiplicity, first_order=first_order)
    if not private_clipping:
        out = tuple(dataclasses.replace(v, event=None, reason="NOT PRIVATE: clipping thresholds computed from raw "
                                        "gradient norms (dp-maml.txt Sec. 5.2.1) depend on the data without noise")
                    for v in out)
    return out


register(MetaGradient("maml", "MAML (non-private)", private=False, min_inner_steps=0, private_form="dp-maml"))
register(Reptile("reptile", "Reptile (non-private)", private=False, private_form="dp-reptile"))
register(MetaGradient("dp-maml", "task-level DP-MAML (dp-maml Alg. 1)", central_clip=True, min_inner_steps=0))
register(SampleLevel("dp-maml-sample", "sample-level DP-MAML (dp-maml Alg. 2)", default_unit="record"))
register(Reptile("dp-reptile", "task-global DP-Reptile", inner_dp=True, default_unit="record",
                 default_sampler="one-pass", contribution="dp_reptile_updates"))
register(MetaGradient("dp-agr", "DP-FedMeta DP-AGR", central_clip=True, party="client", default_sampler="one-pass",
                      min_inner_steps=0))
register(SampleLevel("dp-agrlr", "DP-FedMeta DP-AGRLR", central_clip=True, local_noise=True, party="client",
                     default_sampler="one-pass"))
register(Prototypical("protonet", "prototypical network on obfuscated images, optional denoiser: privacy-enhanced "
                      "few-shot Alg. 1"))
