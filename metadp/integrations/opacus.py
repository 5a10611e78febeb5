"""metadp as an Opacus accountant (``pip install "metadp[opacus]"``; tested with Opacus 1.6.0).

Importing this module registers ``MetadpAccountant`` in Opacus's accountant registry under the name
``"metadp"``, so Opacus's own entry points use it unchanged::

    >>> import metadp.integrations.opacus  # registers "metadp"
    >>> engine = PrivacyEngine(accountant="metadp")
    >>> model, optimizer, loader = engine.make_private_with_epsilon(..., target_epsilon=1.0, target_delta=1e-6)
    >>> engine.get_epsilon(1e-6)                        # metadp's certified PLD upper bound
    >>> engine.accountant.get_epsilon_bounds(1e-6)      # the certified interval [lower, upper]

What changes: ``get_epsilon(delta)`` is a certified upper bound of metadp's PLD accountant
(``metadp.accounting.pld``; every truncation and a float rounding allowance charged to delta) for what the
run's loader does. Opacus hands an accountant only ``(noise_multiplier, sample_rate)`` per step; this one
also reads the loader ``make_private`` prepared (``get_optimizer_hook_fn``; ``read_loader`` by hand) and
accounts the plan of it (``metadp.integrations.loaders``): Opacus's Poisson loader (``poisson_sampling=True``)
as ``SelfComposed(PoissonSampled(sample_rate, Gaussian(noise_multiplier)), num_steps)`` per history entry;
with ``poisson_sampling=False`` a shuffling loader as shuffled passes (``get_epsilon_bounds`` then gives
Chua et al.'s certified lower bound beside the upper one), a sequential one as one Gaussian an epoch, one
drawing with replacement as ``with_replacement`` (``metadp.mechanisms.replacement``: each copy moves the sum by
2C), and a loader no plan describes is refused when ``make_private`` runs. What does not change: the history, the
optimizer hook, the state dict (``{"history", "mechanism": "metadp", "loader"}``), one record = one unit,
add/remove neighbours, per-sample gradients clipped to the clip norm.

``make_private_checked`` checks the loader before and after ``make_private``: with an Opacus accountant it
refuses a run whose batches the Poisson number would not cover; with metadp's it refuses only a loader no
plan describes, and with ``target_epsilon`` calibrates the noise for the loader's plan (Opacus's
``make_private_with_epsilon`` calibrates for Poisson sampling, too little noise for a shuffling loader).
``describe_sampling`` and ``require_poisson`` (``metadp.integrations.sampling_check``) check any loader.
"""

from __future__ import annotations

import dataclasses
import inspect
import math
import numbers
import warnings
from collections import OrderedDict
from typing import Any, Callable, Dict, List, Optional, Tuple, Union, cast

from metadp.accounting import Composed, Gaussian, PoissonSampled, SelfComposed
from metadp.accounting.calibration import calibrate_noise
from metadp.accounting.pld import PldAccountant, PldResult
from metadp.core.validation import check_delta
from metadp.integrations.loaders import LoaderScheme, account_loader, loader_table, read_loader
from metadp.plan_solve import calibrate_plan
from metadp.integrations.sampling_check import (LoaderSampling, PoissonAssumptionWarning, describe_sampling,
                                                require_poisson)

try:
    from opacus.accountants import IAccountant, create_accountant, register_accountant
except ImportError as _err:  # pragma: no cover - exercised only without opacus
    raise ImportError('metadp.integrations.opacus needs Opacus: pip install "metadp[opacus]" (install the torch '
                      "build you want first, e.g. pip install torch==2.13.0 for the CPU one)") from _err

__all__ = ["NAME", "MetadpAccountant", "LoaderBounds", "make_private_checked", "noise_multiplier_for_epsilon", "describe_sampling",
           "require_poisson", "LoaderSampling", "PoissonAssumptionWarning"]

NAME = "metadp"
_CACHE_SIZE = 256  # distinct (history, delta) queries kept: a bisection asks ~20, training re-asks the same


def _as_float(x: Any) -> float:
    """float(x), or infinity for an integer too large for a float (10**400)."""
    try:
        return float(x)
    except OverflowError:
        return math.inf


_Entry = Tuple[float, float, int]  # (noise_multiplier, sample_rate, num_steps), checked


def _check_entry(where: str, noise_multiplier: Any, sample_rate: Any, num_steps: Any) -> _Entry:
    """One history entry, checked: (float noise > 0, float rate in [0, 1], int steps >= 0)."""
    for name, value in (("noise_multiplier", noise_multiplier), ("sample_rate", sample_rate)):
        if isinstance(value, bool) or not isinstance(value, numbers.Real) or math.isnan(_as_float(value)):
            raise ValueError(f"{where}: {name} must be a real number, got {value!r}")
    if not 0 < noise_multiplier < math.inf or not math.isfinite(_as_float(noise_multiplier)):
        raise ValueError(f"{where}: noise_multiplier must be finite and > 0 (metadp certifies noisy training; 0 releases "
                         f"the clipped gradients as they are, epsilon infinite), got {noise_multiplier!r}")
    if not 0.0 <= sample_rate <= 1.0:
        raise ValueError(f"{where}: sample_rate must be in [0, 1] (a Poisson sampling probability), "
                         f"got {sample_rate!r}")
    if isinstance(num_steps, bool) or not isinstance(num_steps, numbers.Integral) or num_steps < 0:
        raise ValueError(f"{where}: num_steps must be an integer >= 0, got {num_steps!r}")
    return float(noise_multiplier), float(sample_rate), int(num_steps)


@dataclasses.dataclass(frozen=True)
class LoaderBounds:
    """``get_epsilon_bounds`` of a run whose loader is not Poisson: the certified upper bound of the plan of what
    the loader does (``metadp.integrations.loaders``), the sampler's certified lower bound where one is known."""

    epsilon_lower: Optional[float]
    epsilon_upper: float
    delta: float
    scheme: str
    reading: str
    notes: Tuple[str, ...] = ()


class MetadpAccountant(IAccountant):
    """Opacus accountant whose epsilon is metadp's certified PLD upper bound (module docstring).

    Opacus builds it with no arguments (``PrivacyEngine(accountant="metadp")``). Its PLD accountant
    refines to a relative interval width of 5e-3 without a time limit, so the same history gives the
    same number on any machine; results are cached per (history, delta).
    """

    def __init__(self) -> None:
        super().__init__()
        # [(noise_multiplier, sample_rate, num_steps)], as Opacus's accountants keep it (checked where read)
        self.history: List[Tuple[Any, ...]] = []
        self.loader: Optional[LoaderScheme] = None  # what the run's loader does, once read
        self._cache: OrderedDict[Tuple[Tuple[_Entry, ...], float], Union[PldResult, LoaderBounds]] = OrderedDict()

    def read_loader(self, data_loader: Any) -> LoaderScheme:
        """Reads what ``data_loader`` does (``metadp.integrations.loaders.read_loader``): from then on the epsilon
        is that of the plan of the loader, not the Poisson number. ``make_private`` calls it for you (below).

        Raises:
            ValueError: no plan describes the loader (the reason names its sampler).
        """
        found = read_loader(data_loader)
        if found.refusal is not None:
            raise ValueError(f"data_loader ({found.sampler}): {found.refusal}")
        self.loader, self._cache = found, OrderedDict()
        return found

    def get_optimizer_hook_fn(self, sample_rate: float) -> Callable[..., Any]:
        """Opacus's hook (one history entry a step), and the loader read off the ``make_private`` that asks for
        it: Opacus hands an accountant ``(noise_multiplier, sample_rate)`` only, so the loader it prepared (its
        own Poisson loader, or the user's with ``poisson_sampling=False``) is read from that call's frame
        (Opacus 1.6's ``PrivacyEngine.make_private``; elsewhere a PoissonAssumptionWarning says to call
        :meth:`read_loader`)."""
        frame = inspect.currentframe()  # None on an interpreter without stack frames: the loader is then unseen
        caller = frame.f_back if frame is not None else None
        loader = caller.f_locals.get("data_loader") if caller is not None and caller.f_code.co_name == "make_private" \
            else None
        if loader is not None:
            self.read_loader(loader)
        elif self.loader is None:
            warnings.warn("the metadp accountant cannot see this run's data loader: its epsilon assumes Poisson "
                          f"sampling at rate {sample_rate:.6g}; call accountant.read_loader(data_loader) to account "
                          "what the loader does", PoissonAssumptionWarning, stacklevel=2)
        hook: Callable[..., Any] = super().get_optimizer_hook_fn(sample_rate)  # (Opacus's, untyped)
        return hook

    @classmethod
    def mechanism(cls) -> str:
        return NAME

    def __len__(self) -> int:
        return len(self.history)

    def step(self, *, noise_multiplier: float, sample_rate: float) -> None:
        """Records one optimizer step (merged into the last entry when its parameters are the same).

        Raises:
            ValueError: for noise_multiplier <= 0 or a sample_rate outside [0, 1], before recording it.
        """
        noise_multiplier, sample_rate, _ = _check_entry("step", noise_multiplier, sample_rate, 1)
        if self.history and tuple(self.history[-1][:2]) == (noise_multiplier, sample_rate):
            self.history[-1] = (noise_multiplier, sample_rate, self.history[-1][2] + 1)
        else:
            self.history.append((noise_multiplier, sample_rate, 1))

    def _entries(self) -> Tuple[_Entry, ...]:
        if not isinstance(self.history, (list, tuple)):
            raise ValueError(f"history must be a list of (noise_multiplier, sample_rate, num_steps), got "
                             f"{type(self.history).__name__}")
        entries: List[_Entry] = []
        for i, entry in enumerate(self.history):
            if not isinstance(entry, (list, tuple)) or len(entry) != 3:
                raise ValueError(f"history[{i}] must be (noise_multiplier, sample_rate, num_steps), got {entry!r}")
            entries.append(_check_entry(f"history[{i}]", *entry))
        return tuple(entries)

    def event(self) -> Composed:
        """The metadp event of the history: a composition of Poisson-subsampled Gaussian steps."""
        return Composed(tuple(SelfComposed(PoissonSampled(q, Gaussian(z)), t) for z, q, t in self._entries()))

    def get_epsilon_bounds(self, delta: float) -> Union[PldResult, LoaderBounds]:
        """The certified interval (``PldResult``: ``epsilon_lower``, ``epsilon_upper``, ``notes``) at ``delta``.

        Raises:
            ValueError: for delta outside (0, 1), or a history entry with noise_multiplier <= 0, a
                sample_rate outside [0, 1] or a negative or fractional num_steps (naming the entry).
        """
        delta = check_delta("delta", delta)  # before the cache: an array or a list is not a key (TypeError)
        key = (self._entries(), delta)
        if key in self._cache:
            self._cache.move_to_end(key)
            return self._cache[key]
        result: Union[PldResult, LoaderBounds]
        if self.loader is not None and self.loader.scheme != "poisson":
            result = self._loader_bounds(key[0], delta)
        else:
            result = PldAccountant(max_seconds=math.inf).compose(self.event()).get_epsilon_bounds(delta)
        self._cache[key] = result
        if len(self._cache) > _CACHE_SIZE:
            self._cache.popitem(last=False)
        return result

    def _loader_bounds(self, entries: Tuple[_Entry, ...], delta: float) -> LoaderBounds:
        """The bounds of the history on the loader read (not Poisson): each entry's steps in the loader's batches
        (an entry's rate is accumulated batches / len(loader)), accounted as the plan of the loader; entries of
        different noise are composed by PLD (then no lower bound is given)."""
        found = cast(LoaderScheme, self.loader)  # (read, and not Poisson)
        spe = cast(int, found.steps_per_epoch)  # (the loader's length, as Opacus reads it too)
        runs = [(z, t * max(1, round(q * spe))) for z, q, t in entries if t]
        if len({z for z, _ in runs}) <= 1:
            z = runs[0][0] if runs else 1.0
            account = account_loader(found, noise_multiplier=z, steps=sum(b for _, b in runs), delta=delta)
            return LoaderBounds(account.epsilon_lower, account.epsilon, delta, cast(str, found.scheme), found.reading,
                                tuple(account.report.warnings))
        plans = [account_loader(found, noise_multiplier=z, steps=b, delta=delta).plan for z, b in runs]
        bounds = PldAccountant(max_seconds=math.inf).compose(Composed(tuple(p.event() for p in plans)))
        return LoaderBounds(None, bounds.get_epsilon_bounds(delta).epsilon_upper, delta, cast(str, found.scheme),
                            found.reading,
                            ("noise multipliers changed during the run: each run of one multiplier is charged as its "
                             "own plan (a partial pass in full) and composed",))

    def get_epsilon(self, delta: float, **kwargs: Any) -> float:
        """Certified epsilon (upper bound) spent so far at ``delta``.

        ``kwargs`` are accepted and ignored: ``make_private_with_epsilon`` forwards its extra keyword
        arguments (meant for the optimizer) to every accountant's ``get_epsilon``.
        """
        return self.get_epsilon_bounds(delta).epsilon_upper

    def state_dict(self, destination: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
        """Opacus's ``{"history", "mechanism"}``, and ``"loader"``: what the run's loader does (None: not read)."""
        destination = super().state_dict(destination)
        destination["loader"] = None if self.loader is None else self.loader.to_dict()
        return cast(Dict[str, Any], destination)

    def load_state_dict(self, state_dict: Dict[str, Any]) -> None:
        """Loads ``{"history": ..., "mechanism": "metadp"[, "loader": ...]}``, checking every history entry first."""
        history = state_dict.get("history") if isinstance(state_dict, dict) else None
        if isinstance(history, (list, tuple)):
            for i, entry in enumerate(history):
                if not isinstance(entry, (list, tuple)) or len(entry) != 3:
                    raise ValueError(f"state_dict history[{i}] must be (noise_multiplier, sample_rate, num_steps), "
                                     f"got {entry!r}")
                _check_entry(f"state_dict history[{i}]", *entry)
        loader = state_dict.get("loader") if isinstance(state_dict, dict) else None
        if loader is not None:
            try:
                loader = LoaderScheme(**loader)
            except TypeError as err:
                raise ValueError(f"state_dict loader must be a LoaderScheme's fields, got {loader!r}") from err
        super().load_state_dict(state_dict)
        self.history = [tuple(entry) for entry in self.history]
        self.loader, self._cache = loader, OrderedDict()


def _register() -> None:
    try:
        register_accountant(NAME, MetadpAccountant)
    except ValueError:  # already registered: by this module (imported again, reloaded) or by someone else
        existing = type(create_accountant(NAME))
        if (existing.__module__, existing.__qualname__) != (__name__, MetadpAccountant.__qualname__):
            raise ValueError(f"Opacus already has an accountant named {NAME!r} ({existing.__module__}."
                             f"{existing.__qualname__}); metadp does not overwrite it") from None
        register_accountant(NAME, MetadpAccountant, force=True)


_register()


def noise_multiplier_for_epsilon(*, target_epsilon: float, target_delta: float, sample_rate: float,
                                 steps: Optional[int] = None, epochs: Optional[float] = None) -> float:
    """The smallest noise multiplier (to relative 1e-4) whose certified PLD epsilon after ``steps`` Poisson
    steps at ``sample_rate`` is <= ``target_epsilon`` (as Opacus's ``get_noise_multiplier``, which bisects
    to an epsilon tolerance of 0.01; ``steps = int(epochs / sample_rate)`` as Opacus counts them).

    Raises:
        ValueError: for both or neither of steps and epochs, or a target no multiplier in [1e-6, 1e6] meets.
    """
    if (steps is None) == (epochs is None):
        raise ValueError("give exactly one of steps and epochs")
    _check_target(target_epsilon, target_delta)
    _check_entry("noise_multiplier_for_epsilon", 1.0, sample_rate, 0)
    if steps is None:
        if not (_finite_positive(epochs) and sample_rate > 0):
            raise ValueError(f"epochs must be > 0 with a sample_rate > 0, got epochs {epochs!r}, "
                             f"sample_rate {sample_rate!r}")
        steps = int(cast(float, epochs) / sample_rate)  # (checked just above)
    _check_entry("noise_multiplier_for_epsilon", 1.0, sample_rate, steps)
    return calibrate_noise(lambda z: SelfComposed(PoissonSampled(sample_rate, Gaussian(z)), steps),
                           target_epsilon, target_delta, accountant="pld")


def _finite_positive(value: object) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool) and 0 < cast(float, value) < math.inf


def _check_target(target_epsilon: Any, target_delta: Any) -> None:
    """Refuses a non-finite or non-positive target_epsilon and a target_delta outside (0, 1), naming them.

    Opacus's noise search compares ``eps > target_epsilon``, which is False for NaN, and so returns its first
    multiplier (10) for target_epsilon = nan or inf without asking the accountant anything: metadp refuses
    these before Opacus sees them."""
    if not _finite_positive(target_epsilon):
        raise ValueError(f"target_epsilon must be a finite number > 0, got {target_epsilon!r}")
    if not (_finite_positive(target_delta) and target_delta < 1):
        raise ValueError(f"target_delta must be a number in (0, 1), got {target_delta!r}")


def _check_private_arguments(kwargs: Dict[str, Any]) -> None:
    """The numbers ``make_private_checked`` passes on to Opacus, checked first (ValueError naming each)."""
    if "target_epsilon" in kwargs or "target_delta" in kwargs:
        _check_target(kwargs.get("target_epsilon"), kwargs.get("target_delta"))
    for name in ("epochs", "noise_multiplier", "max_grad_norm"):
        if name in kwargs and kwargs[name] is not None:
            value = kwargs[name]
            values = value if isinstance(value, (list, tuple)) and name == "max_grad_norm" else [value]  # per layer
            if not all(_finite_positive(v) for v in values):
                raise ValueError(f"{name} must be a finite number > 0, got {value!r}")


MAX_STEPS = 10**9  # make_private_checked: the longest run (epochs x batches an epoch) it accepts


def _check_run_length(epochs: Any, data_loader: Any) -> None:
    """Refuses epochs whose steps (epochs x len(data_loader), as Opacus counts them) exceed MAX_STEPS: Opacus's
    noise search then asks for bounds of 10^14 steps, for minutes, and no such run ends."""
    try:
        batches = len(data_loader)
    except TypeError:  # a loader without a length: Opacus will say so itself
        return
    if epochs is not None and _finite_positive(epochs) and epochs * batches > MAX_STEPS:
        raise ValueError(f"epochs must give at most {MAX_STEPS:,} steps (epochs x len(data_loader) = {epochs:g} x "
                         f"{batches:,} = {epochs * batches:.3g}): no such run ends")


def make_private_checked(privacy_engine: Any, *, data_loader: Any, poisson_sampling: bool = True,
                         **kwargs: Any) -> Any:
    """Opacus's ``make_private`` (or ``make_private_with_epsilon`` when ``target_epsilon`` is given),
    refusing a run whose batches the accountant's epsilon would not cover.

    Before anything is changed: with ``poisson_sampling=False`` the loader is used as it is. With metadp's
    accountant it is read (``MetadpAccountant.read_loader``: refused only where no plan describes it) and,
    with ``target_epsilon``, the noise is calibrated for the plan of that loader (``target_delta``, ``epochs``)
    and ``make_private`` runs with it; with any other accountant (whose epsilon is the Poisson number) it
    must itself be a Poisson loader (``require_poisson``). With ``poisson_sampling=True`` Opacus installs one at
    rate ``1 / len(data_loader)``, and a ``PoissonAssumptionWarning`` says when that differs from what the
    loader did (weights dropped, Opacus #600; an expected batch more than 10% away from the loader's
    batch size, as in Opacus #813; a sampler it cannot read). After: the
    returned loader is checked again. Any accountant benefits; the check is about the loader.

    Returns:
        What Opacus returns (module, optimizer, [criterion,] data_loader).

    Raises:
        ValueError: the loader's batches are not what the accountant charges (the message says what the
            loader does and what to use instead); or target_epsilon, target_delta, epochs,
            noise_multiplier or max_grad_norm is not finite and positive (target_delta in (0, 1)); or
            epochs x len(data_loader) exceeds MAX_STEPS.
    """
    _check_private_arguments(kwargs)
    _check_run_length(kwargs.get("epochs"), data_loader)
    before = describe_sampling(data_loader)
    ours = isinstance(privacy_engine.accountant, MetadpAccountant)
    if not poisson_sampling and ours:  # metadp accounts what the loader does: only a loader no plan describes is refused
        found = privacy_engine.accountant.read_loader(data_loader)
        if "target_epsilon" in kwargs and found.scheme != "poisson":  # Opacus would calibrate z for Poisson sampling
            table = loader_table(found, noise_multiplier=1.0, epochs=kwargs.pop("epochs"),
                                 delta=kwargs.pop("target_delta"))
            kwargs["noise_multiplier"] = calibrate_plan(table, "noise", kwargs.pop("target_epsilon")).value
    elif not poisson_sampling:
        require_poisson(data_loader)
    elif before.kind != "poisson":
        n, b, q = before.dataset_size, before.batch_size, before.accounted_rate
        expected = q * n if (n and q) else None
        if before.kind in ("weighted", "unknown") or (expected and b and abs(expected - b) > 0.1 * b):
            size = f"; expected batch {expected:.4g} records where the loader's is {b}" if expected and b else ""
            dropped = "; the sampler's weights are dropped (Opacus issue #600)" if before.kind == "weighted" else ""
            rate = "unknown" if q is None else format(q, ".6g")
            warnings.warn(f"data_loader ({before.kind}, {before.sampler}) is replaced by Opacus's Poisson loader at "
                          f"rate 1/len(data_loader) = {rate}{size}{dropped}", PoissonAssumptionWarning, stacklevel=2)
    method = privacy_engine.make_private_with_epsilon if "target_epsilon" in kwargs else privacy_engine.make_private
    out = method(data_loader=data_loader, poisson_sampling=poisson_sampling, **kwargs)
    if not ours or poisson_sampling:
        require_poisson(out[-1])
    return out
