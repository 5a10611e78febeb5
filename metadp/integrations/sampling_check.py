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
from typing import Any, Optional, Tuple, cast

from metadp.integrations.loaders import LoaderScheme
from metadp.integrations.loaders import poisson_samplers, read_loader  # noqa: F401 - poisson_samplers re-exported

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


def describe_sampling(data_loader: Any) -> LoaderSampling:
    """What ``data_loader`` (a ``torch.utils.data.DataLoader``, e.g. the ``DPDataLoader`` that Opacus's
    ``make_private`` returns) does, and what that means for a Poisson accountant's epsilon. What the loader does
    is :func:`metadp.integrations.loaders.read_loader`'s reading (the one reader of samplers); this adds whether the
    Poisson number covers it.

    Raises:
        ValueError: if ``data_loader`` is not a torch DataLoader.
    """
    found = read_loader(data_loader)  # raises for a non-DataLoader
    n, steps = found.population, found.steps_per_epoch
    accounted = 1.0 / steps if steps else None
    if found.scheme == "poisson":
        q = cast(float, found.rate)  # (a Poisson loader's)
        ok = accounted is not None and accounted >= q * (1 - 1e-12)
        charged = (f"it charges rate 1/len(loader) = {accounted:.6g}" if accounted is not None else
                   "it charges rate 1/len(loader), and this loader has no length (its batch sampler has none): the "
                   "charged rate is unknown, so the epsilon is not shown to cover the sampler's rate")
        meaning = (f"Poisson sampling: each record joins each batch independently with probability {q:.6g}, as the "
                   f"accountant assumes; {charged}"
                   + ("" if not ok else (" (the same)" if math.isclose(cast(float, accounted), q, rel_tol=1e-12)
                                         else ", above the true rate: its epsilon is valid, and pessimistic")))
        if not ok and accounted is not None:
            meaning += (", BELOW the sampler's rate (the sampler draws more than 1/rate batches per epoch): the "
                        "epsilon is understated; charge the sampler's rate")
        return LoaderSampling("poisson", found.sampler, n, None, accounted, q, ok, meaning)
    batches = data_loader.batch_sampler
    b = getattr(batches, "batch_size", None)
    kind, rate, meaning = _not_poisson(found, b, accounted, getattr(batches, "sampler", None))
    return LoaderSampling(kind, found.sampler, n, b, accounted, rate, False, meaning)


_KIND = {"shuffle": "shuffled", "none": "sequential", "with_replacement": "with_replacement"}
_PLAN = {"shuffled": "sampling.scheme = 'shuffle': one Gaussian per pass, no amplification",
         "sequential": "sampling.scheme = 'none', a step an epoch",
         "with_replacement": "sampling.scheme = 'with_replacement', each copy moving the sum by 2C"}


def _not_poisson(found: LoaderScheme, b: Optional[int], accounted: Optional[float],
                 sampler: Any) -> Tuple[str, Optional[float], str]:
    """(kind, most exposed record's per-step inclusion probability or None, meaning) of a loader that is not
    Poisson: ``found`` is read_loader's reading."""
    from torch.utils import data as tud

    charged = "" if accounted is None else f" (it charges rate {accounted:.6g})"
    refuse = f"the accountant's Poisson epsilon{charged} does not apply"
    fix = ("Use Opacus's Poisson loader (make_private(..., poisson_sampling=True)), or certify this run with a "
           "metadp plan for what the loader does (metadp.integrations.loaders.account_loader; PrivacyEngine("
           "accountant='metadp') does it)")
    if isinstance(sampler, tud.WeightedRandomSampler) and found.scheme is None:
        p = sampler.weights.double() / sampler.weights.double().sum()
        p_max = float(p.max())
        rate: Optional[float]
        if sampler.replacement:
            rate = -math.expm1(cast(int, b) * math.log1p(-p_max)) if p_max < 1 else 1.0  # (a batch sampler's size)
            exposure = (f"the most likely record is in a batch with probability {rate:.3g} and can appear in it "
                        "several times")
        else:
            rate = p_max
            exposure = f"the most likely record is drawn first with probability {p_max:.3g}"
        return "weighted", rate, (
            f"weighted sampling (WeightedRandomSampler, replacement={sampler.replacement}) of batches of {b}: "
            f"{found.refusal}; {exposure}; {refuse} (Opacus issue #813). With poisson_sampling=True Opacus replaces "
            "the sampler by uniform Poisson sampling at rate 1/len(loader) and the weights are dropped (Opacus issue "
            f"#600). Use Opacus's Poisson loader, or uniform sampling")
    if found.scheme is None:
        return "unknown", None, (f"{found.refusal}: {refuse} unless it is Poisson sampling at rate >= "
                                 f"{accounted if accounted is not None else 'the charged rate'}. {fix}")
    kind = _KIND[found.scheme]
    n, batch = cast(int, found.population), cast(int, found.batch_size)  # (read for these schemes)
    rate = batch / n if kind == "shuffled" and found.population else (
        -math.expm1(batch * math.log1p(-1.0 / n)) if kind == "with_replacement" else None)
    gap = {"shuffled": f": {_SHUFFLE_GAP}",
           "with_replacement": (": each copy replaces another record's draw and moves the sum by up to 2C, so the "
                                "Poisson number at rate batch / records understates epsilon (examples/"
                                "dp_sgd_loader_with_replacement.toml: certified [10.32, 10.33] against 1.27)"),
           "sequential": "; each record is protected by its batch's noise alone, once per epoch"}[kind]
    return kind, rate, f"{found.reading}: not Poisson sampling, so {refuse}{gap}. {fix} ({_PLAN[kind]})"


def require_poisson(data_loader: Any, *, action: str = "raise") -> LoaderSampling:
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
