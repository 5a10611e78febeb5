"""The sampling schemes: one frozen dataclass each, registered for plan files and the trainer by
``@register`` (``metadp.sampling`` docstring: what each gives, and how to add one)."""

from __future__ import annotations

import dataclasses
import math
from typing import TYPE_CHECKING, Any, ClassVar, Dict, Mapping, Optional, Tuple, Type, TypeVar, cast

from metadp.core import events as ev
from metadp.core.validation import check_count, check_positive, check_probability, check_real
from metadp.amplification.multistage import Hierarchy
from metadp.sampling import hierarchy as hi
from metadp.sampling.base import Sampling, _counts, register
from metadp.sampling.guarantee import Guarantee

__all__ = ["Poisson", "FixedSize", "WithReplacement", "NoSampling", "Episodic"]


class _TaskSlots:
    """Task sampling whose tasks are episodes drawn from records through a hierarchy (the record view)."""

    hierarchy_use: ClassVar[Optional[str]] = "tasks"
    if TYPE_CHECKING:  # what the schemes it is mixed into (Sampling subclasses) have
        hierarchy: Optional[Hierarchy]

        def _slots(self) -> Tuple[int, float, str]: ...

    def guarantees(self, unit: str, relation: str, inner: ev.Event, steps: int, group_size: Optional[int] = None,
                   clipping: str = "per_episode") -> Tuple[Guarantee, ...]:
        own = Sampling.guarantees(cast(Sampling, self), unit, relation, inner, steps, group_size, clipping)
        h = self.hierarchy
        if h is None or unit != "task" or not isinstance(inner, ev.Gaussian):
            return own
        shift = hi.episode_shift(h, clipping)
        slots, rate, kept = self._slots()
        how = (f"each sampled task is a fresh episode drawn through the hierarchy ({slots:,} task slots{kept}); "
               f"a record's affected episodes each move the sum by <= {shift:g}C; which episodes select the "
               "record's unit may show (metadp.mechanisms.episodic); " + hi.inclusion_facts(h, slots * rate, steps))
        return own + (Guarantee.of_plan("record", "add_remove", hi.record_events(h, slots, rate, shift, inner), steps,
                                        how, citations=Episodic.citations),)


@register(run="poisson")
@dataclasses.dataclass(frozen=True)
class Poisson(_TaskSlots, Sampling):
    """Each unit joins each step independently with probability ``rate`` (add/remove; Mironov, Talwar &
    Zhang 2019)."""

    rate: float
    population: Optional[int] = None
    batch_size: Optional[int] = None  # the expected batch, where the plan gave it
    draws_each_unit: ClassVar[bool] = True  # one Bernoulli draw per unit a step
    # how each task is drawn from records (the record view); not part of the task sampling itself: the plan
    # compares its own hierarchy
    hierarchy: Optional[Hierarchy] = dataclasses.field(default=None, compare=False)

    scheme: ClassVar[str] = "poisson"
    citations: ClassVar[Tuple[str, ...]] = ("mironov2019sampled",)
    warnings: ClassVar[Tuple[str, ...]] = (
        "Poisson sampling is assumed: if the trainer uses fixed-size or shuffled batches, this number does not "
        "apply (use sampling.scheme = 'fixed', which costs more)",)
    basis: ClassVar[str] = "subsampled Gaussian, Poisson sampling (Mironov, Talwar & Zhang 2019, arXiv:1908.10530)"
    pooled_record_basis: ClassVar[str] = (
        "Gaussian with the record's sampled appearances revealed, J ~ Bin(k, q) (valid, loose: task sampling "
        "amplifies delta only; metadp.mechanisms.episodic)")

    def pooled_record(self, shift: float, k: int) -> Tuple[str, Optional[ev.Event], str, str]:
        """J ~ Bin(k, rate) of the record's tasks sampled, revealed: ``EpisodicSampled(k, rate, 1, N(1/s))``."""
        return "step", ev.EpisodicSampled(k, self.rate, 1.0, ev.Gaussian(1.0 / shift), 1.0), self.pooled_record_basis, ""

    pooled_task_record_basis: ClassVar[str] = (
        "the task stays in the pool, its clipped contribution replaced: Poisson-sampled substitution pair of "
        "metadp.mechanisms.pooled (contributions in the C-ball; Zhu, Dong & Wang 2022, Thm. 10 composition)")

    def pooled_task_record(self, noise: float, k: int) -> Tuple[str, Optional[ev.Event], str, str]:
        """One record in one task (k = 1): ``PoolSubstitution(rate, Gaussian(z))``; in k > 1 tasks, the
        revealed pair of ``pooled_record(2 / z, k)``."""
        if k != 1:
            return self.pooled_record(2.0 / noise, k)
        return "step", ev.PoolSubstitution(self.rate, ev.Gaussian(noise)), self.pooled_task_record_basis, ""

    def __post_init__(self) -> None:
        object.__setattr__(self, "rate", check_probability("rate", self.rate))

    @classmethod
    def from_table(cls, d: Mapping[str, Any]) -> "Poisson":
        population, batch, rate = _counts(d)
        if rate is not None and batch is not None:
            raise ValueError("sampling.rate and sampling.batch_size are mutually exclusive: give one")
        if rate is None:
            if batch is None or population is None:
                raise ValueError("sampling.rate, or sampling.batch_size with sampling.population, is required for 'poisson'")
            rate = batch / population
        return cls(rate, population, batch)

    @classmethod
    def of_lot(cls, pool: int, lot: float) -> "Poisson":
        """The trainer's ``--meta-batch`` ``lot`` as an expected batch: rate lot / pool."""
        return cls(min(1.0, lot / pool), pool)

    @property
    def expected_batch(self) -> Optional[float]:
        if self.batch_size is not None:
            return self.batch_size
        return self.rate * self.population if self.population else None

    def step_event(self, inner: ev.Event) -> ev.PoissonSampled:
        return ev.PoissonSampled(self.rate, inner)

    def assumptions(self, unit: str, how: Optional[str] = None) -> Tuple[str, ...]:
        return (f"each {unit} joins each step's batch independently with probability {self.rate:.6g} "
                "(Poisson sampling), independently across steps",)

    def text(self, unit: str) -> str:
        expected = (f" ({self.batch_size:,} of {self.population:,} {unit}s expected per step)"
                    if self.batch_size else "")
        return f"Poisson, rate {self.rate:.6g}{expected}"

    def latex(self) -> str:
        return f"Poisson ($q={self.rate:.4g}$)"

    def _slots(self) -> Tuple[int, float, str]:  # (a plan with a hierarchy states the population)
        return cast(int, self.population), self.rate, f", each kept with probability {self.rate:.6g}"


_B = TypeVar("_B", bound="_Batches")


@dataclasses.dataclass(frozen=True)
class _Batches(Sampling):
    """Exactly ``batch_size`` of ``population`` units a step."""

    batch_size: int
    population: int

    def __post_init__(self) -> None:
        check_count("population", self.population, minimum=1)
        if not 0 <= check_count("batch_size", self.batch_size) <= self.population:
            raise ValueError(f"batch_size must be in [0, {self.population}] (population), got {self.batch_size}")

    @classmethod
    def from_table(cls: Type[_B], d: Mapping[str, Any]) -> _B:
        population, batch, rate = _counts(d)
        if rate is not None:
            raise ValueError(f"sampling.rate does not apply to sampling.scheme = '{cls.scheme}': give batch_size and "
                             "population")
        if batch is None or population is None:
            raise ValueError(f"sampling.batch_size and sampling.population are required for sampling.scheme = "
                             f"'{cls.scheme}'")
        if batch == 0:
            raise ValueError(f"sampling.batch_size must be >= 1 for sampling.scheme = '{cls.scheme}'")
        return cls(batch, population)

    @property
    def rate(self) -> float:
        return self.batch_size / self.population


@register(run="fixed")
@dataclasses.dataclass(frozen=True)
class FixedSize(_TaskSlots, _Batches):
    """A uniformly random subset of exactly ``batch_size`` of ``population`` units, without replacement:
    substitution only, where a clipped sum moves by 2C (Balle, Barthe & Gaboardi 2018; Wang, Balle &
    Kasiviswanathan 2019)."""

    # how each task is drawn from records (the record view); not part of the task sampling itself: the plan
    # compares its own hierarchy
    hierarchy: Optional[Hierarchy] = dataclasses.field(default=None, compare=False)

    scheme: ClassVar[str] = "fixed"
    plan_keys: ClassVar[Tuple[str, ...]] = ("scheme", "population", "batch_size")  # its rate is derived
    relation: ClassVar[str] = "substitute"
    relations: ClassVar[Tuple[str, ...]] = ("substitute",)
    relation_note: ClassVar[str] = (" (fixed-size sampling is analysed under substitution, Balle, Barthe & "
                                    "Gaboardi 2018)")
    citations: ClassVar[Tuple[str, ...]] = ("balle2018privacy", "wang2019subsampled")
    pooled_words: ClassVar[str] = "fixed-size task batches"
    basis: ClassVar[str] = ("subsampled Gaussian, fixed-size batches, substitution (Balle, Barthe & Gaboardi 2018, "
                            "arXiv:1807.01647)")

    @classmethod
    def of_lot(cls, pool: int, lot: float) -> "FixedSize":
        if lot != int(lot):
            raise ValueError(f"fixed-size batches need a whole number of tasks a step (the batch size), got {lot:g}")
        return cls(int(lot), pool)

    def step_event(self, inner: ev.Event, sensitivity_factor: float = 2.0) -> ev.FixedSizeSampled:
        return ev.FixedSizeSampled(self.batch_size, self.population, inner, sensitivity_factor)

    def assumptions(self, unit: str, how: Optional[str] = None) -> Tuple[str, ...]:
        return (f"each step uses a uniformly random subset of exactly {self.batch_size} of the {self.population} "
                f"{unit}s, drawn without replacement, independently across steps",
                "under substitution a clipped sum moves by up to 2C, so the noise is analysed at half its "
                "multiplier (sensitivity doubling)")

    def text(self, unit: str) -> str:
        return f"fixed-size without replacement, {self.batch_size:,} of {self.population:,} {unit}s per step"

    def latex(self) -> str:
        return f"fixed ${self.batch_size}/{self.population}$"

    def _slots(self) -> Tuple[int, float, str]:
        return self.batch_size, 1.0, ""


@register()
@dataclasses.dataclass(frozen=True)
class WithReplacement(_Batches):
    """``batch_size`` draws a step, each uniform over the ``population`` units, with replacement (a
    ``RandomSampler(replacement=True)`` or uniform ``WeightedRandomSampler`` loader): add/remove, where a
    copy of the unit replaces another unit's draw and so moves the sum by up to 2C (the binomial mixture of
    ``metadp.mechanisms.replacement``, attained)."""

    scheme: ClassVar[str] = "with_replacement"
    plan_keys: ClassVar[Tuple[str, ...]] = ("scheme", "population", "batch_size")
    relation_note: ClassVar[str] = (" (a draw of the unit replaces another unit's draw: metadp.mechanisms."
                                    "replacement)")
    citations: ClassVar[Tuple[str, ...]] = ("schuchardt2024unified", "zhu2022optimal")
    warnings: ClassVar[Tuple[str, ...]] = (
        "sampling with replacement: each copy of a unit replaces another unit's draw, so it moves the clipped sum "
        "by up to 2C (not C as a Poisson inclusion does); accounting this loader as Poisson sampling at rate "
        "batch_size / population understates epsilon",)
    basis: ClassVar[str] = ("Gaussian on draws with replacement, add/remove: binomial mixture of shifts 2kC, attained "
                            "(metadp.mechanisms.replacement; Schuchardt et al. 2024, arXiv:2403.04867)")

    def step_event(self, inner: ev.Event) -> ev.ReplacementSampled:
        return ev.ReplacementSampled(self.batch_size, self.population, inner)

    def assumptions(self, unit: str, how: Optional[str] = None) -> Tuple[str, ...]:
        return (f"each step draws {self.batch_size} {unit}s independently and uniformly from the {self.population} "
                f"with replacement (a {unit} drawn k times contributes k clipped copies), independently across steps",
                f"under add/remove a copy of the {unit} replaces another {unit}'s draw: each copy moves the sum by "
                "up to 2C, and the worst case (every other contribution opposite) is attained")

    def epsilon_lower(self, unit: str, relation: str, inner: ev.Event, steps: int, delta: float) -> Optional[float]:
        return None  # the accountant's lower end is the mechanism's (the pair is attained): the report gives it

    def text(self, unit: str) -> str:
        return f"with replacement, {self.batch_size:,} draws from {self.population:,} {unit}s per step"

    def latex(self) -> str:
        return f"with replacement ${self.batch_size}/{self.population}$"


@register()
@dataclasses.dataclass(frozen=True)
class NoSampling(Sampling):
    """Every unit in every step (full batch)."""

    population: Optional[int] = None

    scheme: ClassVar[str] = "none"
    plan_keys: ClassVar[Tuple[str, ...]] = ("scheme", "population")  # every unit, every step
    rate: ClassVar[float] = 1.0  # every unit in every step
    relations: ClassVar[Tuple[str, ...]] = ("add_remove", "substitute")
    basis: ClassVar[str] = "the mechanism at every step, no sampling"

    @classmethod
    def from_table(cls, d: Mapping[str, Any]) -> "NoSampling":
        population, batch, rate = _counts(d)
        if rate is not None or batch is not None:
            raise ValueError("sampling.rate and sampling.batch_size do not apply to sampling.scheme = 'none'")
        return cls(population)

    def steps_for_epochs(self, epochs: float) -> int:
        return check_count("epochs", check_positive("epochs", epochs), maximum=ev.MAX_COUNT)

    def step_event(self, inner: ev.Event) -> ev.Event:
        return inner

    def assumptions(self, unit: str, how: Optional[str] = None) -> Tuple[str, ...]:
        return (f"every {unit} contributes to every step (no sampling, no amplification)",)

    def text(self, unit: str) -> str:
        return f"none: every {unit} in every step"


@register()
@dataclasses.dataclass(frozen=True)
class Episodic(Sampling):
    """``episodes`` independent episodes a step, each drawn level by level through ``hierarchy``
    (multistage sampling, DESIGN.md 3.6-3.7; Tombs, Kotevska & Young 2022, corrected)."""

    episodes: int
    hierarchy: Optional[Hierarchy] = None  # required by a plan; its [[hierarchy]] tables

    scheme: ClassVar[str] = "episodic"
    citations: ClassVar[Tuple[str, ...]] = ("balle2018privacy", "tombs2022privacy")
    basis: ClassVar[str] = ("multistage sampling conditioned on the upper levels; which episodes select the "
                            "record's unit may show (DESIGN.md 3.6-3.7, metadp.mechanisms.episodic)")
    hierarchy_use: ClassVar[Optional[str]] = "episodes"

    @classmethod
    def from_table(cls, d: Mapping[str, Any]) -> "Episodic":
        extra = [k for k in ("population", "batch_size", "rate") if k in d]
        if extra:
            raise ValueError(f"sampling.{extra[0]} does not apply to sampling.scheme = 'episodic': give "
                             "sampling.episodes and the [[hierarchy]] levels")
        if "episodes" not in d:
            raise ValueError("sampling.episodes (episodes drawn per step) is required for sampling.scheme = 'episodic'")
        return cls(check_count("sampling.episodes", d["episodes"], minimum=1, maximum=ev.MAX_COUNT))

    def to_dict(self) -> Dict[str, Any]:
        return dict(super().to_dict(), episodes=self.episodes)

    def steps_for_epochs(self, epochs: float) -> int:
        raise ValueError("epochs does not apply to sampling.scheme = 'episodic' (episodes are drawn afresh): give steps")

    def step_event(self, inner: ev.Event) -> ev.Event:
        """The step's release itself: a unit's event depends on the clipping (``record_events``, ``unit_event``)."""
        return inner

    def record_events(self, inner: ev.Gaussian, shift: float) -> Tuple[ev.Event, ...]:
        """One step for the worst record(s): ``EpisodicSampled(L, P_U, r, inner, shift)`` per Pareto-maximal
        (P_U, r) of the hierarchy; ``shift``: how far one affected episode moves the sum, over C."""
        shift = check_real("shift", shift, low=0.0, low_open=True)
        return hi.record_events(cast(Hierarchy, self.hierarchy), self.episodes, 1.0, shift, inner)  # (required)

    def unit_event(self, inner: ev.Gaussian, shift: float = 2.0) -> ev.Event:
        """One step for a top-level unit (``NonPrivate`` where ``shift`` is infinite)."""
        shift = check_real("shift", shift, low=0.0, low_open=True, allow_inf=True)
        return hi.top_unit_event(cast(Hierarchy, self.hierarchy), self.episodes, inner, shift)

    def contributor(self, unit: str) -> str:
        return "episode"

    def guarantees(self, unit: str, relation: str, inner: ev.Event, steps: int, group_size: Optional[int] = None,
                   clipping: str = "per_episode") -> Tuple[Guarantee, ...]:
        h, episodes = cast(Hierarchy, self.hierarchy), self.episodes  # a plan's hierarchy is required
        shift = hi.episode_shift(h, clipping)
        top = h.levels[0]
        gaussian = cast(ev.Gaussian, inner)  # (its events are EpisodicSampled, which checks that inner is Gaussian)
        record = Guarantee.of_plan(
            "record", "add_remove", self.record_events(gaussian, shift), steps,
            f"each step draws {episodes:,} episodes independently through the hierarchy; a record's affected "
            f"episodes each move the sum by <= {shift:g}C; which episodes select the record's unit may show "
            "(metadp.mechanisms.episodic); " + hi.inclusion_facts(h, episodes, steps), unit == "record",
            basis=self.basis, citations=self.citations)
        top_shift = hi.top_unit_shift(h, clipping)
        if math.isinf(top_shift):
            how = (f"no bound for a whole top-level unit ({top.name}): with per-example clipping and a Poisson level "
                   "below it, the number of its records in one episode is unbounded (use per-episode clipping)")
        else:
            how = (f"a top-level unit ({top.name}) is in each episode with probability {hi.top_rate(h):.6g}; each "
                   f"such episode moves the sum by <= {top_shift:g}C")
        task = Guarantee.of_plan("task", "add_remove", (self.unit_event(gaussian, top_shift),), steps, how,
                                 unit == "task", basis=self.basis, citations=self.citations)
        return (record, task) if unit == "record" else (task, record)

    def assumptions(self, unit: str, how: Optional[str] = None) -> Tuple[str, ...]:
        return (how or "episodic sampling",
                "the hierarchy's draws are independent across episodes and steps; the conditioning on the upper "
                "levels is the corrected multistage bound (DESIGN.md 3.6, metadp.amplification.multistage), "
                "verified by exact enumeration (metadp.verify.enumeration)")

    def text(self, unit: str) -> str:
        return f"episodic: {self.episodes:,} episodes per step, each drawn level by level through the hierarchy"

    def latex(self) -> str:
        return f"episodic (${self.episodes}$ per step)"
