"""Account the DataLoader users have: read its sampler, write the plan of what it does, certify that.

An accountant that is handed ``(noise_multiplier, sample_rate)`` per step charges every step as Poisson
sampling, whatever the loader did. Most loaders are not Poisson: a shuffling ``DataLoader`` cuts fixed-size
batches from a shuffled pass, for which the Poisson number can understate epsilon many times over (Chua et
al. 2024). :func:`read_loader` reads what a ``torch.utils.data.DataLoader`` does and names the metadp
sampling scheme that describes it; :func:`loader_plan` writes the plan of a run of it (a ``metadp.plan.Plan``,
one record = one unit, per-example clipping, add/remove neighbours); :func:`account_loader` certifies it
with :func:`metadp.plan.plan_epsilon`, the number ``metadp plan`` prints for that plan.

==========================================================  ==============================================
the loader (its ``batch_sampler``, or ``BatchSampler``        the plan's ``sampling``
over its ``sampler``)
==========================================================  ==============================================
Opacus ``UniformWithReplacementSampler`` (``DPDataLoader``)   ``poisson`` at the sampler's rate over the data
Opacus ``DistributedUniformWithReplacementSampler``           ``poisson`` at its rate over the whole data set
                                                              (each record in one rank's shard)
``RandomSampler`` (no replacement), or a uniform              ``shuffle``: batches of the loader's size
``WeightedRandomSampler(replacement=False)``, one pass
``RandomSampler(replacement=True)``, a uniform                ``with_replacement``: each batch its size in
``WeightedRandomSampler(replacement=True)``                   independent uniform draws (each copy moves the
                                                              sum by up to 2C under add/remove: the binomial
                                                              mixture of ``metadp.mechanisms.replacement``)
``DistributedSampler(shuffle=True)``, one per rank            ``shuffle`` over the data set in batches of
                                                              num_replicas x batch_size (below)
``SequentialSampler``, ``DistributedSampler(shuffle=False)``  ``none``: every record once an epoch (a plan
                                                              step is an epoch)
``WeightedRandomSampler`` with non-uniform weights            refused: no theorem here covers it
anything else                                                 refused, naming the sampler
==========================================================  ==============================================

Steps. A plan counts what the loader's steps release: Poisson and with-replacement plans count the loader's
steps (a short last batch of draws costs less than a full one, so the upper bound holds; its lower bound is
then not given); shuffle plans count passes (each record in one step a pass), so the plan's steps are chosen
to span exactly the epochs the loader's steps touch (``ceil(steps / len(loader))``), the last one charged in full if partial; a sequential
loader's plan has one step per epoch touched. A loader without ``drop_last`` whose data set is not a whole
number of batches ends each epoch with a short batch: each record is still in one batch a pass, so the upper
bound is unchanged; the certified lower bound (Chua et al.'s test) needs equal batches and is not given.

Many processes. A ``DistributedSampler`` shuffles the whole data set with a seed shared by the ranks and gives
rank r every num_replicas-th index; each step's released sum is the all-reduced sum of the ranks' clipped
batches with the noise added once (Opacus's ``DistributedDPOptimizer`` adds it on rank 0). So one step
releases a batch of num_replicas x batch_size records, a fixed set of positions of one uniform permutation,
and each record is in one step an epoch: the global run is ``shuffle`` over the data set in batches of
num_replicas x batch_size, whichever rank's loader is read. A ``DistributedSampler`` without ``drop_last``
whose data set is not a multiple of num_replicas pads the shards with repeated records, which then appear
twice an epoch: refused (set ``drop_last=True`` or trim the data set).

torch is imported when these are called; the module imports without it.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Dict, Optional, Tuple, cast

from metadp.plan import Plan, plan_epsilon
from metadp.report import Report

__all__ = ["LoaderScheme", "LoaderAccount", "read_loader", "loader_plan", "loader_table", "account_loader",
           "loader_steps", "poisson_samplers"]


@dataclasses.dataclass(frozen=True)
class LoaderScheme:
    """What a DataLoader does, as a metadp sampling scheme (module docstring).

    Attributes:
        scheme: the plan's ``sampling.scheme`` ("poisson", "with_replacement", "shuffle" or "none"), or None where
            refused.
        sampler: the class that draws the indices.
        population: records the sampling draws from (the data set).
        batch_size: records a step releases (shuffle: num_replicas x the loader's batch size; with replacement:
            draws); None for Poisson.
        rate: Poisson's per-step inclusion probability; None for the others.
        steps_per_epoch: the loader's steps an epoch (``len(loader)``).
        reading: what was read, and what it means for the epsilon, in one paragraph.
        refusal: why no plan describes the loader (None where one does).
    """

    scheme: Optional[str]
    sampler: str
    population: Optional[int]
    batch_size: Optional[int]
    rate: Optional[float]
    steps_per_epoch: Optional[int]
    reading: str
    refusal: Optional[str] = None
    short_batches: bool = False  # with replacement: a last batch of fewer draws an epoch (no certified lower bound)

    def to_dict(self) -> Dict[str, Any]:
        return dataclasses.asdict(self)


@dataclasses.dataclass(frozen=True)
class LoaderAccount:
    """A certified account of a run of a loader: the plan written for it, its report, and the reading."""

    loader: LoaderScheme
    plan: Plan
    report: Report  # the plan's report: assumptions, citations, warnings
    epsilon_lower: Optional[float]  # certified lower bound on the loader's true epsilon (None where none is known)

    @property
    def epsilon(self) -> float:
        """The certified upper bound (the plan's epsilon)."""
        return self.report.epsilon


def poisson_samplers() -> Tuple[type, ...]:
    """Opacus's Poisson batch samplers (empty where Opacus is not installed)."""
    try:
        from opacus.utils.uniform_sampler import (DistributedUniformWithReplacementSampler,
                                                  UniformWithReplacementSampler)
    except ImportError:
        return ()
    return (UniformWithReplacementSampler, DistributedUniformWithReplacementSampler)


def _size(x: Any) -> Optional[int]:
    try:
        return len(x)
    except TypeError:
        return None


def _refused(sampler: str, n: Optional[int], b: Optional[int], spe: Optional[int], why: str) -> LoaderScheme:
    return LoaderScheme(None, sampler, n, b, None, spe, why, refusal=why)


def read_loader(data_loader: Any) -> LoaderScheme:
    """What ``data_loader`` (a ``torch.utils.data.DataLoader``) does, as a sampling scheme (module docstring).

    Raises:
        ValueError: if ``data_loader`` is not a torch DataLoader.
    """
    from torch.utils import data as tud

    if not isinstance(data_loader, tud.DataLoader):
        raise ValueError(f"data_loader must be a torch.utils.data.DataLoader, got {type(data_loader).__name__}")
    n, spe = _size(data_loader.dataset), _size(data_loader)
    batches = data_loader.batch_sampler
    poisson = poisson_samplers()
    if poisson and isinstance(batches, poisson):
        q = float(cast(Any, batches).sample_rate)  # (an Opacus Poisson sampler)
        where = ("each rank samples its shard of the data set; every record is in one shard, so it joins each "
                 "all-reduced batch" if type(batches).__name__.startswith("Distributed") else "each record joins "
                 "each batch")
        return LoaderScheme("poisson", type(batches).__name__, n, None, q, spe,
                            f"Poisson sampling ({type(batches).__name__}): {where} independently with probability "
                            f"{q:.6g}")
    if not isinstance(batches, tud.BatchSampler):
        what = "no batch sampler (batch_size=None)" if batches is None else type(batches).__name__
        return _refused(what, n, None, spe, f"batches come from {what}, whose inclusion law metadp cannot read: no "
                                            "plan describes this loader")
    return _fixed_batches(batches.sampler, batches.batch_size, batches.drop_last, n, spe, tud)


def _fixed_batches(sampler: Any, b: int, drop_last: bool, n: Optional[int], spe: Optional[int],
                   tud: Any) -> LoaderScheme:
    from torch.utils.data.distributed import DistributedSampler

    name = type(sampler).__name__
    short = "" if drop_last or not n or n % b == 0 else (
        f"; the last batch of each epoch holds {n % b} records (no drop_last): each record is still in one batch a "
        "pass, so the upper bound is unchanged, and no certified lower bound is given (it needs equal batches)")
    if isinstance(sampler, tud.WeightedRandomSampler):
        weights = sampler.weights.double()
        if not bool((weights == weights[0]).all()) or float(weights[0]) <= 0:
            return _refused(name, n, b, spe, f"WeightedRandomSampler with non-uniform weights (from {float(weights.min()):.3g} "
                                             f"to {float(weights.max()):.3g}): records have unequal chances, and no "
                                             "amplification theorem metadp implements covers that; use uniform sampling")
        if len(weights) != n:
            return _refused(name, n, b, spe, f"WeightedRandomSampler over {len(weights)} weights for a data set of {n} "
                                             "records: the sampler does not draw from the data set")
        if not sampler.replacement:
            return _shuffled(name, n, b, spe, sampler.num_samples, short, "WeightedRandomSampler(replacement=False), "
                                                                          "uniform weights")
        return _with_replacement(name, n, b, spe, sampler.num_samples, drop_last, "uniform weights")
    if isinstance(sampler, tud.RandomSampler):
        if sampler.replacement:
            return _with_replacement(name, n, b, spe, sampler.num_samples, drop_last, "replacement=True")
        return _shuffled(name, n, b, spe, sampler.num_samples, short, "RandomSampler")
    if isinstance(sampler, DistributedSampler):
        return _distributed(sampler, b, drop_last, n, spe, short)
    if isinstance(sampler, tud.SequentialSampler):
        return LoaderScheme("none", name, n, b, None, spe,
                            f"batches of {b} in a fixed order (SequentialSampler): no sampling, each record in one "
                            "batch an epoch, protected by that batch's noise alone (a plan step is an epoch)")
    return _refused(name, n, b, spe, f"batches of {b} from {name}, whose inclusion law metadp cannot read: no plan "
                                     "describes this loader")


def _shuffled(name: str, n: Optional[int], b: int, spe: Optional[int], drawn: int, short: str,
              what: str) -> LoaderScheme:
    if drawn != n:
        return _refused(name, n, b, spe, f"{name}(num_samples={drawn}) over {n} records without replacement is not "
                                         "one shuffled pass an epoch")
    return LoaderScheme("shuffle", name, n, b, None, spe,
                        f"shuffled passes ({what}): batches of {b} cut from a shuffled pass over {n} records, each in "
                        f"one batch an epoch{short}")


def _with_replacement(name: str, n: Optional[int], b: int, spe: Optional[int], drawn: int, drop_last: bool,
                      what: str) -> LoaderScheme:
    if b > cast(int, n):  # (a sampler drawing from a data set of a known size)
        return _refused(name, n, b, spe, f"batches of {b} drawn with replacement from {n} records: more draws than "
                                         "records, which no plan here states (sampling.batch_size <= population)")
    short = "" if drop_last or drawn % b == 0 else (
        f"; the last batch of each epoch holds {drawn % b} draws (no drop_last): fewer draws cost less, so the upper "
        "bound holds, and no certified lower bound is given")
    return LoaderScheme("with_replacement", name, n, b, None, spe,
                        f"sampling with replacement ({name}, {what}): each batch is {b} independent uniform draws "
                        f"from {n} records, a record drawn k times contributing k copies; under add/remove each copy "
                        f"moves the sum by up to 2C (metadp.mechanisms.replacement){short}",
                        short_batches=bool(short))


def _distributed(sampler: Any, b: int, drop_last: bool, n: Optional[int], spe: Optional[int],
                 short: str) -> LoaderScheme:
    name, ranks = type(sampler).__name__, int(sampler.num_replicas)
    if sampler.total_size > (n or 0):
        return _refused(name, n, b, spe, f"DistributedSampler pads {n} records to {sampler.total_size} "
                                         f"({ranks} ranks x {sampler.num_samples}) by repeating "
                                         f"{sampler.total_size - n}, which are then in two batches an epoch: set "
                                         "drop_last=True in the DistributedSampler, or use a data set whose size "
                                         "num_replicas divides")
    if not sampler.shuffle:
        return LoaderScheme("none", name, n, ranks * b, None, spe,
                            f"DistributedSampler(shuffle=False) over {ranks} ranks: batches in a fixed order, each "
                            "record in one all-reduced batch an epoch (a plan step is an epoch)")
    dropped = "" if sampler.total_size == n else f"; {n - sampler.total_size} records left out each epoch"
    return LoaderScheme("shuffle", name, n, ranks * b, None, spe,
                        f"DistributedSampler(shuffle=True) over {ranks} ranks: one shuffled pass over {n} records an "
                        f"epoch, each step's all-reduced sum releasing {ranks} x {b} = {ranks * b} of them "
                        f"(module docstring){dropped}{short if ranks == 1 else ''}")


def loader_steps(loader: LoaderScheme, steps: int) -> int:
    """The plan steps that count what ``steps`` of the loader release (module docstring): the loader's steps
    for Poisson and with replacement (each step draws afresh); for shuffle, steps spanning exactly the epochs they touch; one an epoch for ``none``."""
    if loader.scheme in ("poisson", "with_replacement") or steps == 0:
        return steps
    epochs = math.ceil(steps / cast(int, loader.steps_per_epoch))  # (shuffle and none: a loader with a length)
    if loader.scheme == "none":
        return epochs
    n, b = cast(int, loader.population), cast(int, loader.batch_size)
    if n % b == 0 and loader.steps_per_epoch == n // b:
        return steps  # the plan's passes are the loader's epochs, step for step
    return (epochs - 1) * n // b + 1  # ceil(s b / n) = epochs: every epoch touched, charged once


def loader_plan(data_loader: Any, *, noise_multiplier: float, steps: Optional[int] = None,
                epochs: Optional[float] = None, delta: float = 1e-5, name: Optional[str] = None) -> Plan:
    """The plan of ``steps`` (or ``epochs`` x len(loader)) steps of ``data_loader`` (or a :class:`LoaderScheme`
    read from one) with Gaussian noise of ``noise_multiplier`` x the per-example clip norm on each step's sum:
    one record = one unit, add/remove (:func:`loader_table` is its plan-file table).

    Raises:
        ValueError: the loader is refused (the reason), or steps/epochs/noise are not valid.
    """
    return Plan.from_dict(loader_table(data_loader, noise_multiplier=noise_multiplier, steps=steps, epochs=epochs,
                                       delta=delta, name=name))


def loader_table(data_loader: Any, *, noise_multiplier: float, steps: Optional[int] = None,
                 epochs: Optional[float] = None, delta: float = 1e-5, name: Optional[str] = None) -> Dict[str, Any]:
    """:func:`loader_plan`'s plan as a plan file's table (what ``metadp plan`` reads; ``plan_solve`` calibrates it)."""
    found = data_loader if isinstance(data_loader, LoaderScheme) else read_loader(data_loader)
    if found.refusal is not None:
        raise ValueError(f"data_loader ({found.sampler}): {found.refusal}")
    if (steps is None) == (epochs is None):
        raise ValueError("give exactly one of steps and epochs")
    if not found.steps_per_epoch and (epochs is not None or found.scheme not in ("poisson", "with_replacement")):
        raise ValueError(f"data_loader ({found.sampler}) has no length: its steps an epoch, and so its passes, are "
                         "unknown")
    if steps is None:
        if not (isinstance(epochs, (int, float)) and 0 < epochs < math.inf) or isinstance(epochs, bool):
            raise ValueError(f"epochs must be a finite number > 0, got {epochs!r}")
        steps = int(epochs * cast(int, found.steps_per_epoch))  # (checked above)
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 0:
        raise ValueError(f"steps must be an integer >= 0, got {steps!r}")
    sampling: Dict[str, Any] = {"scheme": found.scheme, "population": found.population}
    if found.scheme == "poisson":
        sampling["rate"] = found.rate
    elif found.scheme in ("shuffle", "with_replacement"):
        sampling["batch_size"] = found.batch_size
    return {"name": name or f"a run of a DataLoader ({found.sampler})", "unit": "record", "delta": delta,
            "steps": loader_steps(found, steps), "sampling": sampling,
            "noise": {"mechanism": "gaussian", "multiplier": noise_multiplier}}


def account_loader(data_loader: Any, *, noise_multiplier: float, steps: Optional[int] = None,
                   epochs: Optional[float] = None, delta: float = 1e-5) -> LoaderAccount:
    """The certified (epsilon, delta) of a run of ``data_loader`` (:func:`loader_plan`; ``metadp plan`` of that
    plan prints the same): ``.epsilon`` the upper bound, ``.epsilon_lower`` the certified lower bound where the
    sampler has one (shuffle: Chua et al.'s test, for equal batches), ``.loader`` what was read, ``.plan`` the
    plan (``.report`` its full report). ``data_loader`` may be a :class:`LoaderScheme` already read."""
    found = data_loader if isinstance(data_loader, LoaderScheme) else read_loader(data_loader)
    plan = loader_plan(found, noise_multiplier=noise_multiplier, steps=steps, epochs=epochs, delta=delta)
    report = plan_epsilon(plan)
    if found.scheme == "shuffle":  # the sampler's own bound (equal batches only): the accountant's lower end is one
        # for the looser event it was given (one Gaussian a pass), not for the sampler
        lower = plan.sampling.epsilon_lower(plan.unit, plan.relation, plan.noise.event(), plan.steps, plan.delta)
    elif found.short_batches:  # fewer draws in some steps: the full-batch pair's lower end is not the loader's
        lower = None
    else:  # Poisson, with replacement and no sampling: the accounted pair is attained, so its lower end bounds it
        lower = report.epsilon_lower
    return LoaderAccount(found, plan, report, lower)
