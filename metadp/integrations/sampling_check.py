"""Is a DataLoader's batch a Poisson sample? The assumption behind every Opacus epsilon, checked.

Every Opacus accountant (and the ``"metadp"`` one) charges each optimizer step as a Poisson-subsampled
Gaussian at rate ``1 / len(data_loader)``, whatever the loader actually does (Opacus's
``make_private``). That is valid only when each record joins each batch independently with that
probability: Opacus's ``DPDataLoader`` (``UniformWithReplacementSampler``), which ``make_private``
installs when ``poisson_sampling=True``. With ``poisson_sampling=False`` the user's loader is used as it
is, and its batches are typically fixed-size batches of a shuffled pass, for which the Poisson number
can understate epsilon by up to ~20x at noise multipliers <= 2 (Chua et al. 2024, arXiv:2403.17673); a
``WeightedRandomSampler`` draws records with unequal probabilities, with replacement (Opacus issue
#813). None of this is visible to an accountant: Opacus hands it only ``(noise_multiplier,
sample_rate)`` per step. So the check is made on the loader, here.

``describe_sampling(loader)`` says what the loader does and what that means for the epsilon;
``require_poisson(loader)`` refuses (or warns loudly about) a loader the Poisson number does not cover.
torch is imported when they are called (and Opacus's sampler classes, if Opacus is installed).
"""

from __future__ import annotations

import dataclasses
import math
import warnings
from typing import Optional

__all__ = ["LoaderSampling", "PoissonAssumptionWarning", "describe_sampling", "require_poisson", "poisson_samplers"]

KINDS = ("poisson", "shuffled", "sequential", "with_replacement", "weighted", "unknown")
_SHUFFLE_GAP = ("the Poisson number can understate epsilon by up to ~20x at noise multipliers <= 2 for shuffled "
                "fixed-size batches (Chua et al. 2024)")


class PoissonAssumptionWarning(UserWarning):
    """The accountant's Poisson-sampling assumption does not hold for a data loader."""


@dataclasses.dataclass(frozen=True)
class LoaderSampling:
    """How a DataLoader draws its batches, and whether a Poisson accountant's epsilon covers it.

    ``accounted_rate`` is what Opacus charges per step (``1 / len(loader)``); ``sample_rate`` is the
    loader's own per-step inclusion probability of the most exposed record where it can be read off
    (None otherwise). ``ok`` is True only for Poisson sampling charged at a rate >= its own.
    """

    kind: str  # one of KINDS
    sampler: str  # the class that draws the indices
    dataset_size: Optional[int]
    batch_size: Optional[int]  # fixed batch size (None for Poisson batches, whose size varies)
    accounted_rate: Optional[float]
    sample_rate: Optional[float]
    ok: bool
    meaning: str  # what it means for the epsilon, in one paragraph


def _size(x) -> Optional[int]:
    try:
        return len(x)
    except TypeError:
        return None


def describe_sampling(data_loader) -> LoaderSampling:
    """What ``data_loader`` (a ``torch.utils.data.DataLoader``, e.g. the ``DPDataLoader`` that Opacus's
    ``make_private`` returns) does, and what that means for a Poisson accountant's epsilon.

    Raises:
        ValueError: if ``data_loader`` is not a torch DataLoader.
    """
    from torch.utils import data as tud

    if not isinstance(data_loader, tud.DataLoader):
        raise ValueError(f"data_loader must be a torch.utils.data.DataLoader, got {type(data_loader).__name__}")
    n = _size(data_loader.dataset)
    steps = _size(data_loader)
    accounted = 1.0 / steps if steps else None
    batch_sampler = data_loader.batch_sampler
    poisson = poisson_samplers()
    if isinstance(batch_sampler, poisson):
        q = float(batch_sampler.sample_rate)
        ok = accounted is not None and accounted >= q * (1 - 1e-12)
        meaning = (f"Poisson sampling: each record joins each batch independently with probability {q:.6g}, as the "
                   f"accountant assumes; it charges rate 1/len(loader) = {accounted:.6g}"
                   + ("" if not ok else (" (the same)" if math.isclose(accounted, q, rel_tol=1e-12)
                                         else ", above the true rate: its epsilon is valid, and pessimistic")))
        if not ok:
            meaning += (", BELOW the sampler's rate (the sampler draws more than 1/rate batches per epoch): the "
                        "epsilon is understated; charge the sampler's rate")
        return LoaderSampling("poisson", type(batch_sampler).__name__, n, None, accounted, q, ok, meaning)
    if not isinstance(batch_sampler, tud.BatchSampler):
        what = "no batch sampler (batch_size=None)" if batch_sampler is None else type(batch_sampler).__name__
        meaning = (f"batches come from {what}: how records are drawn cannot be read off, so the accountant's "
                   "Poisson assumption cannot be checked; its epsilon is not certified for this loader")
        return LoaderSampling("unknown", what, n, None, accounted, None, False, meaning)
    sampler, b = batch_sampler.sampler, batch_sampler.batch_size
    kind, rate, meaning = _fixed_size(sampler, b, n, accounted, tud)
    return LoaderSampling(kind, type(sampler).__name__, n, b, accounted, rate, False, meaning)


def poisson_samplers() -> tuple:
    """Opacus's Poisson batch samplers (empty where Opacus is not installed)."""
    try:
        from opacus.utils.uniform_sampler import (DistributedUniformWithReplacementSampler,
                                                  UniformWithReplacementSampler)
    except ImportError:
        return ()
    return (UniformWithReplacementSampler, DistributedUniformWithReplacementSampler)


def _fixed_size(sampler, b: int, n: Optional[int], accounted: Optional[float], tud):
    """(kind, most exposed record's per-batch inclusion probability or None, meaning) of fixed-size batches."""
    from torch.utils.data.distributed import DistributedSampler

    charged = "" if accounted is None else f" (it charges rate {accounted:.6g})"
    refuse = f"the accountant's Poisson epsilon{charged} does not apply"
    fix = ("Use Opacus's Poisson loader (make_private(..., poisson_sampling=True)), or certify this run with a "
           "metadp plan for what the loader does")
    if isinstance(sampler, tud.WeightedRandomSampler):
        p = sampler.weights.double() / sampler.weights.double().sum()
        p_max = float(p.max())
        if sampler.replacement:
            rate = -math.expm1(b * math.log1p(-p_max)) if p_max < 1 else 1.0
            exposure = (f"the most likely record is in a batch with probability {rate:.3g} and can appear in it "
                        "several times (its contribution to the sum is then not bounded by the clip norm)")
        else:
            rate = p_max
            exposure = f"the most likely record is drawn first with probability {p_max:.3g}"
        return "weighted", rate, (
            f"weighted sampling (WeightedRandomSampler, replacement={sampler.replacement}) of batches of {b}: records "
            f"have unequal chances and {exposure}; {refuse} (Opacus issue #813). With poisson_sampling=True Opacus "
            f"replaces the sampler by uniform Poisson sampling at rate 1/len(loader) and the weights are dropped "
            f"(Opacus issue #600). {fix}")
    if isinstance(sampler, tud.RandomSampler) and sampler.replacement:
        return "with_replacement", None, (
            f"batches of {b} indices drawn uniformly with replacement: a record can appear several times in one "
            f"batch (its contribution is then not bounded by the clip norm), and batches are not Poisson samples; "
            f"{refuse}. {fix}")
    shuffled = isinstance(sampler, (tud.RandomSampler, tud.SubsetRandomSampler)) or (
        isinstance(sampler, DistributedSampler) and sampler.shuffle)
    if shuffled:
        return "shuffled", (b / n if n else None), (
            f"fixed-size batches of {b} cut from a shuffled pass (each record in exactly one batch per epoch): not "
            f"Poisson sampling, so {refuse}: {_SHUFFLE_GAP}. {fix} (sampling.scheme = 'shuffle': "
            "one Gaussian per pass, no amplification)")
    if isinstance(sampler, (tud.SequentialSampler, DistributedSampler)):
        return "sequential", None, (
            f"batches of {b} in a fixed order (no random sampling, so no amplification): {refuse}; each record is "
            f"protected by its batch's noise alone, once per epoch. {fix}")
    return "unknown", None, (
        f"batches of {b} from {type(sampler).__name__}, whose inclusion law cannot be read off: {refuse} unless it "
        f"is Poisson sampling at rate >= {accounted if accounted is not None else 'the charged rate'}. "
        f"{fix}")


def require_poisson(data_loader, *, action: str = "raise") -> LoaderSampling:
    """``describe_sampling(data_loader)``, refusing a loader whose batches the Poisson epsilon does not cover.

    Args:
        action: ``"raise"`` (default: ValueError) or ``"warn"`` (``PoissonAssumptionWarning``).

    Raises:
        ValueError: with ``action="raise"``, when the batches are not Poisson samples at a rate at most the
            charged one; the message says what the loader does and what to do.
    """
    if action not in ("raise", "warn"):
        raise ValueError(f"action must be 'raise' or 'warn', got {action!r}")
    found = describe_sampling(data_loader)
    if not found.ok:
        message = f"data_loader ({found.kind}, {found.sampler}): {found.meaning}"
        if action == "raise":
            raise ValueError(message)
        warnings.warn(message, PoissonAssumptionWarning, stacklevel=2)
    return found
