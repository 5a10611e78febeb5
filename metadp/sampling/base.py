"""The sampling model's base class, the registries of schemes, and how plans, reports and runs name them."""

from __future__ import annotations

import dataclasses
import math
from typing import TYPE_CHECKING, Any, Callable, ClassVar, Dict, Mapping, Optional, Tuple, Type, TypeVar, cast

from metadp.core import events as ev
from metadp.core.validation import check_count, check_positive, check_probability
from metadp.sampling.guarantee import Guarantee

__all__ = ["Sampling", "SCHEMES", "RUN_SCHEMES", "NOT_IN_PLANS", "register", "from_record", "of_lot"]

SCHEMES: Dict[str, Type[Sampling]] = {}
"""The schemes a plan file may name (``sampling.scheme``), in the order error messages list them."""

RUN_SCHEMES: Dict[str, Type[Sampling]] = {}
"""The trainer's ``--sampler`` names."""

NOT_IN_PLANS: Dict[str, str] = {}
"""Schemes a plan file may not name yet, with what to use instead."""

_PLAN_KEYS = ("scheme", "population", "batch_size", "rate", "episodes")  # a plan's [sampling] keys
_S = TypeVar("_S", bound="Type[Sampling]")


def register(*, plan: bool = True, run: Optional[str] = None, refusal: Optional[str] = None) -> Callable[[_S], _S]:
    """Class decorator: the scheme is named in plan files (``plan``), by the trainer (``run``: its
    ``--sampler`` name), or refused in plan files with ``refusal``."""
    def add(cls: _S) -> _S:
        if plan:
            SCHEMES[cls.scheme] = cls
        if run is not None:
            RUN_SCHEMES[run] = cls
        if refusal is not None:
            NOT_IN_PLANS[cls.scheme] = refusal
        return cls
    return add


@dataclasses.dataclass(frozen=True)
class Sampling:
    """How units are chosen for each step; subclasses are the schemes (fields: their parameters)."""

    scheme: ClassVar[str]  # the name in plan files (``sampling.scheme``) and reports
    relation: ClassVar[str] = "add_remove"  # the relation it is analysed under (the plan's default)
    relations: ClassVar[Tuple[str, ...]] = ("add_remove",)  # the relations a plan may state
    relation_note: ClassVar[str] = ""  # why, appended to the refusal of another relation
    charge: ClassVar[str] = "step"  # what one event is charged for: "step" or "pass"
    draws_each_unit: ClassVar[bool] = False  # a step draws once per unit of the population (a run's size estimate)
    citations: ClassVar[Tuple[str, ...]] = ()  # keys in metadp.citations
    warnings: ClassVar[Tuple[str, ...]] = ()  # what every report of it must say
    basis: ClassVar[str] = ""  # the theorem, in words (training reports)
    pooled_words: ClassVar[str] = "this task sampling"  # in pooled_record's refusal
    # the accountant is given an event that bounds the sampler from above only (the one-pass schemes: one Gaussian a
    # pass), so its lower ends are not the sampler's: a report gives the scheme's own (epsilon_lower) or none
    loose_event: ClassVar[bool] = False
    hierarchy_use: ClassVar[Optional[str]] = None  # "episodes" (required), "tasks" (optional) or None
    plan_keys: ClassVar[Tuple[str, ...]] = _PLAN_KEYS  # the [sampling] keys that state it (plan_table)

    if TYPE_CHECKING:  # what the registered schemes define: their readers (``from_table``, ``of_lot``)
        @classmethod
        def from_table(cls, d: Mapping[str, Any]) -> Sampling: ...
        @classmethod
        def of_lot(cls, pool: int, lot: float) -> Sampling: ...

    def step_event(self, inner: ev.Event) -> ev.Event:
        """One step for one unit, as sampled (no group, no hierarchy)."""
        raise NotImplementedError

    def charge_event(self, inner: ev.Event) -> ev.Event:
        """The event of one charge (``charge``): a step's, or a pass's. Plans and the trainer charge this same
        event, so one sampler has one analysis."""
        return self.step_event(inner)

    @property
    def charge_basis(self) -> str:
        """The theorem ``charge_event`` rests on, in words (training reports)."""
        return self.basis

    def pass_steps(self, steps: int) -> int:
        """The steps one charge covers when the scheme charges per pass (a run's budget and its report's prefix
        count passes of this many steps); 1 for a scheme charged per step."""
        return 1

    def releases(self, steps: int) -> int:
        """How many charges ``steps`` steps make."""
        return steps

    def pooled_record(self, shift: float, k: int) -> Tuple[str, Optional[ev.Event], str, str]:
        """(charge, event, basis, reason) for a record in ``k`` tasks of a persistent task pool, ``shift``
        noise standard deviations per appearance (``metadp.releases``'s docstring derives it);
        event None where no bound is implemented (``reason`` says why)."""
        return self.charge, None, "", (f"no record-level bound is implemented for {self.pooled_words} with "
                                       "records shared between tasks; use Poisson sampling for a record-level "
                                       "guarantee")

    def pooled_task_record(self, noise: float, k: int) -> Tuple[str, Optional[ev.Event], str, str]:
        """As ``pooled_record`` where each task's whole contribution is clipped to C under noise multiplier
        ``noise`` (an appearance moves the sum by 2C, both contributions in the C-ball); schemes with a
        tighter pair for that case override it (``Poisson``: ``metadp.mechanisms.pooled``)."""
        return self.pooled_record(2.0 / noise, k)

    def epsilon_lower(self, unit: str, relation: str, inner: ev.Event, steps: int, delta: float) -> Optional[float]:
        """A certified lower bound on the true epsilon of a plan with this sampling, where the scheme has
        one of its own (the one-pass schemes); None otherwise."""
        return None

    def contributor(self, unit: str) -> str:
        """Whose clipped contribution a step's sum adds up ("per-<this>")."""
        return unit

    def assumptions(self, unit: str, how: Optional[str] = None) -> Tuple[str, ...]:
        """The sampling assumptions the report prints (``how``: the primary guarantee's derivation)."""
        raise NotImplementedError

    def text(self, unit: str) -> str:
        """The report table's sampling row."""
        raise NotImplementedError

    def latex(self) -> str:
        """The LaTeX row's sampling cell."""
        return self.scheme

    def to_dict(self) -> Dict[str, Any]:
        """The report's ``sampling`` record (the keys of ``metadp plan --json``)."""
        return {"scheme": self.scheme, "population": getattr(self, "population", None),
                "batch_size": getattr(self, "batch_size", None), "rate": getattr(self, "rate", None)}

    def plan_table(self) -> Optional[Dict[str, Any]]:
        """The ``[sampling]`` table of a plan file that describes exactly this scheme (``metadp train
        --save-plan``), or None where no plan file does (a scheme plans may not name, or parameters that
        its plan keys cannot state exactly)."""
        if SCHEMES.get(self.scheme) is not type(self):
            return None
        table = {k: v for k, v in self.to_dict().items() if v is not None and k in self.plan_keys}
        try:
            same = type(self).from_table(dict(table)) == self
        except ValueError:
            return None
        return table if same else None

    @classmethod
    def from_record(cls, d: Mapping[str, Any]) -> "Sampling":
        return cls(**{f.name: d.get(f.name) for f in dataclasses.fields(cls)
                      if f.name != "hierarchy" and (f.name in d or f.default is dataclasses.MISSING)})

    def steps_for_epochs(self, epochs: float) -> int:
        """Steps in ``epochs`` passes over the population (expected, for Poisson), rounded up."""
        epochs = check_positive("epochs", epochs)
        expected = self.expected_batch
        if not expected or not getattr(self, "population", None):
            raise ValueError("epochs needs sampling.population and sampling.batch_size (or rate) to count steps")
        steps = epochs * cast(int, getattr(self, "population")) / expected  # (the schemes with a population)
        if not steps <= ev.MAX_COUNT:
            raise ValueError(f"epochs = {epochs:g} gives {steps:.4g} steps; at most {ev.MAX_COUNT} steps are allowed "
                             "(fewer epochs or a larger batch)")
        return int(math.ceil(steps - 1e-9))

    @property
    def expected_batch(self) -> Optional[float]:
        return getattr(self, "batch_size", None)

    def guarantees(self, unit: str, relation: str, inner: ev.Event, steps: int, group_size: Optional[int] = None,
                   clipping: str = "per_episode") -> Tuple[Guarantee, ...]:
        """Every meaningful unit's guarantee of a plan with this sampling, the plan's ``unit`` first."""
        step = self.step_event(inner)
        if unit == "group":
            step = ev.Group(cast(int, group_size), step)  # a group plan states its size
        return (self._own(unit, relation, step, steps, "the plan's step"),)

    def _own(self, unit: str, relation: str, event: ev.Event, steps: int, how: str) -> Guarantee:
        return Guarantee.of_plan(unit, relation, (event,), steps, how, True, charge=self.charge, basis=self.basis,
                                 citations=self.citations)


def _counts(d: Mapping[str, Any]) -> Tuple[Optional[int], Optional[int], Optional[float]]:
    """(population, batch_size, rate) of a ``[sampling]`` table, each validated where given."""
    if "episodes" in d:
        raise ValueError("sampling.episodes applies only to sampling.scheme = 'episodic'")
    for key in ("steps_per_pass", "selected"):
        if key in d:
            raise ValueError(f"sampling.{key} applies only to sampling.scheme = 'balls_in_bins'")
    population, batch, rate = d.get("population"), d.get("batch_size"), d.get("rate")
    if population is not None:
        population = check_count("sampling.population", population, minimum=1, maximum=ev.MAX_COUNT)
    if batch is not None:
        batch = check_count("sampling.batch_size", batch, minimum=0)
        if population is not None and batch > population:
            raise ValueError(f"sampling.batch_size must be <= sampling.population ({population}), got {batch}")
    if rate is not None:
        rate = check_probability("sampling.rate", rate)
    return population, batch, rate


def from_record(d: Mapping[str, Any]) -> Sampling:
    """The scheme of a report's ``sampling`` record (``Sampling.to_dict``)."""
    return SCHEMES[d["scheme"]].from_record(d)


def of_lot(name: str, pool: int, lot: float) -> Sampling:
    """The scheme the trainer's ``--sampler name`` runs over ``pool`` units with ``--meta-batch lot``."""
    return RUN_SCHEMES[name].of_lot(pool, lot)
