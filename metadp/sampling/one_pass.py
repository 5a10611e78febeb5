"""The one-pass schemes: shuffled equal partitions and random allocation (balls in bins), each unit in one
step a pass (DESIGN.md 3.9), registered for plan files and the trainer like the others
(``metadp.sampling`` docstring)."""

from __future__ import annotations

import dataclasses
import math
from typing import Any, ClassVar, Dict, Mapping, Optional, Tuple, cast

from metadp.core import events as ev
from metadp.core.validation import check_count
from metadp.amplification.allocation_bounds import allocation_lower, shuffle_lower
from metadp.sampling.base import Sampling, _counts, register
from metadp.sampling.guarantee import Guarantee
from metadp.sampling.schemes import _Batches

__all__ = ["Shuffle", "BallsInBins"]


@register()
@dataclasses.dataclass(frozen=True)
class Shuffle(_Batches):
    """Shuffled passes: each pass cuts a shuffled population into batches, so each unit is in one step per
    pass. No amplification bound is known (Chua et al. 2024): one release per pass."""

    loose_event: ClassVar[bool] = True

    scheme: ClassVar[str] = "shuffle"
    plan_keys: ClassVar[Tuple[str, ...]] = ("scheme", "population", "batch_size")  # its rate is derived
    relations: ClassVar[Tuple[str, ...]] = ("add_remove", "substitute")
    charge: ClassVar[str] = "pass"
    citations: ClassVar[Tuple[str, ...]] = ("chua2024private",)
    warnings: ClassVar[Tuple[str, ...]] = (
        "shuffled fixed-size batches have no known amplification bound: this is the single-Gaussian epsilon per "
        "pass. Poisson accounting of the same batches would understate epsilon (by up to ~20x at z <= 2, Chua et "
        "al. 2024)",)
    basis: ClassVar[str] = "shuffled passes, each unit in one step a pass: one release per pass, no amplification"

    def step_event(self, inner: ev.Event) -> ev.Event:
        return inner  # the unit's one release of the pass (charged per pass)

    def pass_steps(self, steps: int) -> int:
        # (rounded down where the batch does not divide the population: the trainer's pass is one step longer, so a
        # budget of k passes stops within the k passes the plan counts)
        return self.population // self.batch_size

    def releases(self, steps: int) -> int:
        return math.ceil(steps * self.batch_size / self.population - 1e-9)

    def guarantees(self, unit: str, relation: str, inner: ev.Event, steps: int, group_size: Optional[int] = None,
                   clipping: str = "per_episode") -> Tuple[Guarantee, ...]:
        passes = self.releases(steps)
        step = inner if unit != "group" else ev.Group(cast(int, group_size), inner)  # a group plan states it
        how = (f"{steps:,} steps of {self.batch_size:,} cut from shuffled passes over {self.population:,}: each unit "
               f"is in one step per pass, so {passes:,} Gaussian release(s), no amplification")
        return (self._own(unit, relation, step, passes, how),)

    def epsilon_lower(self, unit: str, relation: str, inner: ev.Event, steps: int, delta: float) -> Optional[float]:
        """Certified lower bound on the true epsilon of the shuffled passes (Chua et al. 2024's max-over-batches
        test, ``metadp.amplification.allocation_bounds.shuffle_lower``), over the full passes; None where the
        population is not a whole number of batches, for groups, or for a non-Gaussian mechanism."""
        t, rem = divmod(self.population, self.batch_size)
        full = steps // t if t else 0
        if rem or full == 0 or unit == "group" or not isinstance(inner, ev.Gaussian):
            return None
        z = inner.noise_multiplier if relation == "add_remove" else inner.noise_multiplier / 2.0
        return shuffle_lower(z, t, delta, full, relation)

    def assumptions(self, unit: str, how: Optional[str] = None) -> Tuple[str, ...]:
        return (how or "shuffled passes",
                "the partition's shape does not depend on whether the unit is present (a zero-out reading of "
                "add/remove)")

    def text(self, unit: str) -> str:
        return (f"shuffled passes: {self.population:,} {unit}s cut into batches of {self.batch_size:,} "
                "(each in one step per pass)")


@register(run="one-pass")
@dataclasses.dataclass(frozen=True)
class BallsInBins(Sampling):
    """Passes of ``steps_per_pass`` steps: in each pass every unit independently goes to one uniformly random
    step (random allocation, DESIGN.md 3.9(a)), so it is in exactly one step a pass. A plan gives
    ``population`` and ``batch_size`` (the expected batch; ``steps_per_pass = population / batch_size``), and
    optionally ``selected = k``: each unit in k distinct uniformly random steps of a pass (k-of-t random
    allocation; ``steps_per_pass = k population / batch_size``), charged as k one-step allocations over
    floor(t/k) steps each (the reduction proved in ``metadp.amplification.allocation_bounds``).

    Plans charge each pass ``RandomAllocation(steps_per_pass, inner)``: the RDP accountant bounds it
    (``metadp.amplification.allocation_bounds``: exact RDP of one order, a proved bound on the other), and
    so does the PLD accountant (``metadp.accounting.allocation_pld``: a discrete pair that dominates the
    allocation pair; usually much tighter), the smaller reported; :meth:`epsilon_lower` gives a certified lower bound (the max-over-steps event), so a plan's report
    prints [lower, upper]. The trainer's one-pass sampler executes this allocation and charges the same event
    (``charge_event``); :meth:`pass_event` is the single-Gaussian bound, valid whatever the allocation."""

    loose_event: ClassVar[bool] = True

    population: int
    steps_per_pass: int
    selected: int = 1

    scheme: ClassVar[str] = "balls_in_bins"
    plan_keys: ClassVar[Tuple[str, ...]] = ("scheme", "population", "batch_size", "selected")  # steps a pass: derived
    charge: ClassVar[str] = "pass"
    citations: ClassVar[Tuple[str, ...]] = ("feldman2025random", "chua2025balls")
    basis: ClassVar[str] = ("one pass, each unit in exactly one step: single Gaussian per pass, no amplification "
                            "(DESIGN.md 3.9a)")
    plan_basis: ClassVar[str] = ("random allocation, each unit in one uniformly random step a pass: the allocation "
                                 "pair's RDP (metadp.amplification.allocation_bounds) or PLD "
                                 "(metadp.accounting.allocation_pld), the smaller")

    def __post_init__(self) -> None:
        check_count("population", self.population, minimum=1)
        check_count("steps_per_pass", self.steps_per_pass, minimum=1)
        check_count("sampling.selected", self.selected, minimum=1, maximum=self.steps_per_pass)

    @classmethod
    def from_table(cls, d: Mapping[str, Any]) -> "BallsInBins":
        """``population`` and ``batch_size`` (which must divide it), or ``population`` and ``steps_per_pass``
        (the trainer's one-pass sampler over a pool that its lot does not divide: ``metadp train --save-plan``)."""
        steps = d.get("steps_per_pass")
        selected = 1 if d.get("selected") is None else d["selected"]
        population, batch, rate = _counts({k: v for k, v in d.items() if k not in ("steps_per_pass", "selected")})
        selected = check_count("sampling.selected", selected, minimum=1)
        if rate is not None:
            raise ValueError("sampling.rate does not apply to sampling.scheme = 'balls_in_bins': give batch_size "
                             "(the expected batch) and population")
        if steps is not None:
            if batch is not None or population is None:
                raise ValueError("sampling.steps_per_pass goes with sampling.population and instead of "
                                 "sampling.batch_size for sampling.scheme = 'balls_in_bins'")
            return cls(population, check_count("sampling.steps_per_pass", steps, minimum=1, maximum=population), selected)
        if batch is None or population is None:
            raise ValueError("sampling.batch_size and sampling.population are required for sampling.scheme = "
                             "'balls_in_bins'")
        if batch == 0 or (selected * population) % batch:
            what = "sampling.population" if selected == 1 else f"selected x sampling.population ({selected} x)"
            raise ValueError(f"sampling.batch_size must divide {what} ({population}) for sampling.scheme = "
                             f"'balls_in_bins' (selected x population / batch_size steps a pass), got {batch}; or give "
                             "sampling.steps_per_pass instead")
        if selected * population // batch < selected:
            raise ValueError(f"sampling.selected = {selected} needs at least {selected} steps a pass, but "
                             f"selected x population / batch_size = {selected * population // batch}")
        return cls(population, selected * population // batch, selected)

    def plan_table(self) -> Optional[Dict[str, Any]]:
        """``population`` and ``batch_size`` where the batch divides the population, else ``steps_per_pass``."""
        if (self.selected * self.population) % self.steps_per_pass == 0:
            return super().plan_table()
        extra = {"selected": self.selected} if self.selected != 1 else {}
        return {"scheme": self.scheme, "population": self.population, "steps_per_pass": self.steps_per_pass, **extra}

    def to_dict(self) -> Dict[str, Any]:
        extra = {"selected": self.selected} if self.selected != 1 else {}  # k = 1: the keys plans always had
        return dict(super().to_dict(), batch_size=self.selected * self.population // self.steps_per_pass,
                    steps_per_pass=self.steps_per_pass, **extra)

    @classmethod
    def of_lot(cls, pool: int, lot: float) -> "BallsInBins":
        """About ``lot`` units a step: round(pool / lot) steps a pass (at least one)."""
        return cls(pool, max(1, round(pool / lot)))

    @property
    def expected_batch(self) -> float:
        return self.selected * self.population / self.steps_per_pass

    def step_event(self, inner: ev.Event) -> ev.Event:
        """Raises: one step of a pass has no event of its own (see the class docstring)."""
        raise ValueError("balls-in-bins sampling has no per-step event: each unit is in exactly one step per pass, "
                         "which is not a per-step sampling law (the steps of a pass are dependent). Compose "
                         "plan_event(inner) (random allocation) or pass_event(inner) (single Gaussian) once per pass")

    def pass_event(self, inner: ev.Event) -> ev.Event:
        """One pass for one unit, valid whatever the allocation: ``inner`` once for each of its k releases."""
        return inner if self.selected == 1 else ev.SelfComposed(inner, self.selected)

    def plan_event(self, inner: ev.Event) -> ev.Event:
        """One pass for one unit under random allocation: ``RandomAllocation(steps_per_pass, inner, selected)``;
        the accountants bound k of t by k of ``RandomAllocation(t // k, inner)`` composed (``allocation_bounds``:
        the reduction, proved there)."""
        return ev.RandomAllocation(self.steps_per_pass, inner, self.selected)

    def charge_event(self, inner: ev.Event) -> ev.Event:
        """A pass under random allocation (``plan_event``), as plans charge it: the trainer's one-pass sampler
        (``training.samplers.BallsInBinsSampler``) executes exactly this allocation (issue 29: it used to be
        charged the looser single Gaussian a pass, ``pass_event``)."""
        return self.plan_event(inner)

    @property
    def charge_basis(self) -> str:
        return self.plan_basis

    def pooled_record(self, shift: float, k: int) -> Tuple[str, Optional[ev.Event], str, str]:
        """The k appearances may share the record's step of a pass: ``Gaussian(1 / (k s))`` per pass."""
        return "pass", ev.Gaussian(1.0 / (k * shift)), self.basis, ""

    def pass_steps(self, steps: int) -> int:
        return self.steps_per_pass

    def releases(self, steps: int) -> int:
        return math.ceil(steps / self.steps_per_pass)

    def guarantees(self, unit: str, relation: str, inner: ev.Event, steps: int, group_size: Optional[int] = None,
                   clipping: str = "per_episode") -> Tuple[Guarantee, ...]:
        if unit == "group":
            raise ValueError("unit = 'group' is not available with sampling.scheme = 'balls_in_bins' (the random-"
                             "allocation pair is for one unit)")
        passes = self.releases(steps)
        chosen = "one uniformly random step" if self.selected == 1 else (
            f"{self.selected:,} distinct uniformly random steps (charged as {self.selected:,} one-step allocations over "
            f"{self.steps_per_pass // self.selected:,} steps each)")
        how = (f"{steps:,} steps in passes of {self.steps_per_pass:,}: each {unit} is in {chosen} "
               f"of each pass, independently of the others; {passes:,} pass(es), a partial last pass charged in full")
        return (Guarantee.of_plan(unit, relation, (self.charge_event(inner),), passes, how, True, charge=self.charge,
                                  basis=self.plan_basis, citations=self.citations),)

    def epsilon_lower(self, unit: str, relation: str, inner: ev.Event, steps: int, delta: float) -> Optional[float]:
        """Certified lower bound on the plan's epsilon (the max-over-steps event; None where not derived)."""
        full = steps // self.steps_per_pass  # a partial pass may be ignored by the adversary: full passes only
        if unit == "group" or not isinstance(inner, ev.Gaussian) or relation != "add_remove" or full == 0:
            return None
        return allocation_lower(inner.noise_multiplier, self.steps_per_pass, delta, full, self.selected)

    def assumptions(self, unit: str, how: Optional[str] = None) -> Tuple[str, ...]:
        return (how or f"each {unit} is in exactly {self._in} of the {self.steps_per_pass:,} steps of each pass",
                "the allocation is uniform and independent across units and passes, and does not depend on the data; "
                "other units' contributions may be anything (the pair holds for each fixed choice)")

    def text(self, unit: str) -> str:
        steps = "step" if self.selected == 1 else "steps"
        return f"balls in bins: each {unit} in {self._in} uniformly random {steps} of each {self.steps_per_pass:,}-step pass"

    @property
    def _in(self) -> str:
        return "one" if self.selected == 1 else f"{self.selected:,} distinct"

    def latex(self) -> str:
        return f"balls in bins ($t={self.steps_per_pass}$)"
