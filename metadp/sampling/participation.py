"""Participation schemes of cross-device training (issue 34): who contributes to which step when the server
cannot promise Poisson sampling of everyone.

* ``cyclic_poisson`` (Choquette-Choo, Ganesh, McKenna, McMahan, Rush, Thakurta & Xu 2023, "(Amplified) banded
  matrix factorization", NeurIPS 2023, arXiv:2306.08153, Alg. 2): the population is split, independently of the
  data, into ``groups`` fixed groups; step t draws each unit of group t mod groups independently with probability
  ``rate`` and no other unit. A unit can only join the steps of its group, one step in every ``groups``: each pass
  of ``groups`` steps is one Poisson-sampled release for it. With independent noise this is DP-SGD over the
  ceil(steps / groups) steps of its group (the other steps do not depend on it); with banded noise of at most
  ``groups`` bands, Theorem 4 there gives the same guarantee (``metadp.banded_noise``).
* ``min_separation``: no sampling and no amplification; every unit takes part in at most ``participations``
  steps, any two at least ``separation`` apart, in any order the data or the clients choose (the b-min-separation
  participation of the same paper). With independent noise a unit's releases are at most ``participations``
  Gaussians: the run is charged once, their composition; with banded noise, one Gaussian with the strategy's
  exact sensitivity (``banded_noise``).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, ClassVar, Dict, Mapping, Optional, Tuple

from metadp.core import events as ev
from metadp.core.validation import check_count, check_probability
from metadp.sampling.base import Sampling, _counts, register
from metadp.sampling.guarantee import Guarantee

__all__ = ["CyclicPoisson", "MinSeparation", "min_separation_blocks"]


def _one_unit(unit: str, scheme: str) -> None:
    if unit == "group":
        raise ValueError(f"unit = 'group' is not available with sampling.scheme = '{scheme}' (its bounds are for one "
                         "unit)")


@register()
@dataclasses.dataclass(frozen=True)
class CyclicPoisson(Sampling):
    """Cyclic Poisson participation (module docstring): ``groups`` fixed groups, each Poisson-sampled at ``rate``
    in its own steps (every ``groups``-th). A plan gives ``groups`` and ``rate``, or ``batch_size`` (the expected
    batch of a step) with ``population``: rate = batch_size x groups / population."""

    rate: float
    groups: int
    population: Optional[int] = None
    batch_size: Optional[int] = None

    scheme: ClassVar[str] = "cyclic_poisson"
    charge: ClassVar[str] = "pass"
    plan_keys: ClassVar[Tuple[str, ...]] = ("scheme", "population", "batch_size", "rate", "groups")
    citations: ClassVar[Tuple[str, ...]] = ("choquette2023amplified", "mironov2019sampled")
    warnings: ClassVar[Tuple[str, ...]] = (
        "cyclic Poisson participation is assumed: fixed groups chosen independently of the data, each Poisson-"
        "sampled only in its own steps; if clients join whenever they are available, this number does not apply "
        "(use sampling.scheme = 'min_separation', which needs no sampling)",)
    basis: ClassVar[str] = ("cyclic Poisson participation: each pass of the groups' steps is one Poisson-subsampled "
                            "Gaussian for a unit (Choquette-Choo et al. 2023, arXiv:2306.08153, Alg. 2 and Thm. 4)")

    def __post_init__(self) -> None:
        object.__setattr__(self, "rate", check_probability("sampling.rate", self.rate))
        check_count("sampling.groups", self.groups, minimum=1)

    @classmethod
    def from_table(cls, d: Mapping[str, Any]) -> "CyclicPoisson":
        if d.get("groups") is None:
            raise ValueError("sampling.groups is required for sampling.scheme = 'cyclic_poisson' (the number of "
                             "fixed groups; with banded noise, at least noise.bands)")
        groups = check_count("sampling.groups", d["groups"], minimum=1)
        population, batch, rate = _counts({k: v for k, v in d.items() if k != "groups"})
        if rate is not None and batch is not None:
            raise ValueError("sampling.rate and sampling.batch_size are mutually exclusive: give one")
        if rate is None:
            if batch is None or population is None:
                raise ValueError("sampling.rate, or sampling.batch_size with sampling.population, is required for "
                                 "'cyclic_poisson'")
            if population < groups:
                raise ValueError(f"sampling.population ({population}) must be at least sampling.groups ({groups})")
            rate = batch * groups / population
            if rate > 1.0:
                raise ValueError(f"sampling.batch_size = {batch} is more than a group holds (population / groups = "
                                 f"{population / groups:g}): the rate batch_size x groups / population would exceed 1")
        return cls(rate, groups, population, batch)

    @property
    def expected_batch(self) -> Optional[float]:
        if self.batch_size is not None:
            return self.batch_size
        return self.rate * self.population / self.groups if self.population else None

    def step_event(self, inner: ev.Event) -> ev.Event:
        """One step of the unit's own group: ``inner`` Poisson-sampled at ``rate`` (the other steps release
        nothing about it)."""
        return ev.PoissonSampled(self.rate, inner)

    def pass_steps(self, steps: int) -> int:
        return self.groups

    def releases(self, steps: int) -> int:
        return math.ceil(steps / self.groups)

    def guarantees(self, unit: str, relation: str, inner: ev.Event, steps: int, group_size: Optional[int] = None,
                   clipping: str = "per_episode") -> Tuple[Guarantee, ...]:
        _one_unit(unit, self.scheme)
        passes = self.releases(steps)
        how = (f"{steps:,} steps in {passes:,} pass(es) of {self.groups:,}: each {unit} is in one fixed group and "
               f"joins only that group's step of a pass, with probability {self.rate:g}; a partial last pass charged "
               "in full")
        return (self._own(unit, relation, self.step_event(inner), passes, how),)

    def assumptions(self, unit: str, how: Optional[str] = None) -> Tuple[str, ...]:
        return (how or "cyclic Poisson participation",
                f"the {self.groups:,} groups are fixed before training, independently of the data; step t samples "
                f"only group t mod {self.groups:,}, each of its {unit}s independently with probability {self.rate:g}")

    def text(self, unit: str) -> str:
        return f"cyclic Poisson: {self.groups:,} groups, each sampled at rate {self.rate:g} in its own steps"

    def latex(self) -> str:
        return f"cyclic Poisson, {self.groups:,} groups, $q = {self.rate:g}$"

    def to_dict(self) -> Dict[str, Any]:
        return dict(super().to_dict(), groups=self.groups)


def min_separation_blocks(steps: int, participations: int, separation: int) -> int:
    """B = max(separation, ceil(steps / participations)): the blocks of the trainer's min-separation schedule
    (``metadp.training.data.participation``): block t mod B in step t keeps every unit in at most
    ``participations`` steps, B >= ``separation`` apart."""
    return max(separation, math.ceil(steps / participations))


@register()
@dataclasses.dataclass(frozen=True)
class MinSeparation(Sampling):
    """At most ``participations`` steps per unit, any two at least ``separation`` steps apart, chosen by anyone
    (module docstring): no amplification. The run is charged once."""

    participations: int
    separation: int = 1
    population: Optional[int] = None

    scheme: ClassVar[str] = "min_separation"
    charge: ClassVar[str] = "pass"
    relations: ClassVar[Tuple[str, ...]] = ("add_remove", "substitute")
    plan_keys: ClassVar[Tuple[str, ...]] = ("scheme", "population", "participations", "separation")
    citations: ClassVar[Tuple[str, ...]] = ("choquette2023amplified",)
    basis: ClassVar[str] = ("at most k participations, any two at least the separation apart, in any order: the "
                            "composition of the unit's releases, no amplification")

    def __post_init__(self) -> None:
        check_count("sampling.participations", self.participations, minimum=1)
        check_count("sampling.separation", self.separation, minimum=1)

    @classmethod
    def from_table(cls, d: Mapping[str, Any]) -> "MinSeparation":
        if d.get("participations") is None:
            raise ValueError("sampling.participations is required for sampling.scheme = 'min_separation' (the most "
                             "steps one unit takes part in)")
        for key in ("rate", "batch_size"):
            if d.get(key) is not None:
                raise ValueError(f"sampling.{key} does not apply to sampling.scheme = 'min_separation' (no sampling)")
        population = d.get("population")
        return cls(check_count("sampling.participations", d["participations"], minimum=1),
                   check_count("sampling.separation", d.get("separation", 1), minimum=1),
                   None if population is None else check_count("sampling.population", population, minimum=1))

    def step_event(self, inner: ev.Event) -> ev.Event:
        raise ValueError("min-separation participation has no per-step event (a unit's steps are chosen by anyone): "
                         "the run is charged once, the composition of its participations")

    def pass_steps(self, steps: int) -> int:
        return steps  # the run is charged once

    def releases(self, steps: int) -> int:
        return 1

    def participations_in(self, steps: int) -> int:
        """The most participations that fit in ``steps`` steps: at most ``participations``, at least
        ``separation`` apart (steps 0, s, 2s, ...)."""
        return min(self.participations, 1 + (steps - 1) // self.separation)

    def run_event(self, inner: ev.Event, steps: int) -> ev.Event:
        """The whole run for one unit with independent noise: ``inner`` once per participation that fits."""
        k = self.participations_in(steps)
        return inner if k == 1 else ev.SelfComposed(inner, k)

    def guarantees(self, unit: str, relation: str, inner: ev.Event, steps: int, group_size: Optional[int] = None,
                   clipping: str = "per_episode") -> Tuple[Guarantee, ...]:
        _one_unit(unit, self.scheme)
        k = self.participations_in(steps)
        how = (f"each {unit} in at most {k:,} of the {steps:,} steps, any two at least {self.separation:,} apart, "
               "in any order: the run charged once, the composition of its releases")
        return (self._own(unit, relation, self.run_event(inner, steps), 1, how),)

    def assumptions(self, unit: str, how: Optional[str] = None) -> Tuple[str, ...]:
        return (how or "min-separation participation",
                f"no {unit} contributes to more than {self.participations:,} steps, nor to two steps fewer than "
                f"{self.separation:,} apart (no sampling, no amplification: the steps may be chosen adversarially)")

    def text(self, unit: str) -> str:
        return (f"min-separation: each {unit} in at most {self.participations:,} steps, at least {self.separation:,} "
                "apart (no sampling)")

    def latex(self) -> str:
        return f"min-separation, $k = {self.participations:,}$, $b = {self.separation:,}$"

    def to_dict(self) -> Dict[str, Any]:
        return dict(super().to_dict(), participations=self.participations, separation=self.separation)
