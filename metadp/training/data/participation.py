"""Samplers of the cross-device participation schemes (``metadp.sampling.participation``, issue 34).

=====================  ====================  ===========================================  =========
sampler                one step returns      event (the plan's)                           charged
=====================  ====================  ===========================================  =========
CyclicPoissonSampler   mask [pool]           PoissonSampled(q, inner) per pass of groups  per pass
MinSeparationSampler   indices [<= block]    the unit's k participations, once            once
=====================  ====================  ===========================================  =========

* **Cyclic Poisson** (Choquette-Choo et al. 2023, arXiv:2306.08153, Alg. 2): the pool is split into ``groups``
  groups of sizes differing by at most one, by a uniformly random permutation drawn once, before the first step,
  from the sampler's generator (so independently of the data, as the theorem assumes); step t keeps each unit of
  group t mod groups independently with probability ``rate`` (a float64 uniform, as ``PoissonSampler``) and no
  other unit. The assignment is part of the sampler's state (checkpoints keep it).
* **Min-separation**: a fixed schedule that meets the plan's promise by construction. The pool is split the same
  way into B = max(separation, ceil(steps / participations)) blocks and step t takes every unit of block t mod B:
  a unit joins steps j, j + B, j + 2B, ..., so at most ceil(steps / B) <= participations times, any two B >=
  separation apart. The guarantee (no amplification) holds for any schedule with those two properties; the
  sampler also counts each unit's participations and last step and refuses a step that would break either
  (it cannot happen with this schedule; the check keeps the promise independent of the arithmetic).
"""

from __future__ import annotations

from typing import Any, Dict, Optional

import torch

from metadp.core import events as ev
from metadp.core.validation import check_count, check_probability
from metadp.sampling import CyclicPoisson
from metadp.sampling.participation import min_separation_blocks
from metadp.training.data.sampler_base import _Sampler, _check_event
from metadp.training.data.subsets import uniform as _uniform

__all__ = ["CyclicPoissonSampler", "MinSeparationSampler"]


def _balanced_groups(pool_size: int, groups: int, generator: torch.Generator) -> torch.Tensor:
    """int64 [pool_size]: each unit's group, a uniformly random assignment with group sizes differing by <= 1."""
    order = _uniform((pool_size,), generator).argsort()
    assignment = torch.empty(pool_size, dtype=torch.int64, device=order.device)
    assignment[order] = torch.arange(pool_size, device=order.device) % groups
    return assignment


class CyclicPoissonSampler(_Sampler):
    """Cyclic Poisson participation (module docstring).

    Args:
        pool_size: units, >= groups.
        groups: the fixed groups, >= 1 (a pass is ``groups`` steps).
        rate: q in [0, 1], each unit's probability in its group's step.
        generator: the random source (``samplers``' module docstring).
    """

    relation = "add_remove"

    def __init__(self, pool_size: int, groups: int, rate: float, generator: Optional[torch.Generator] = None):
        super().__init__(generator)
        self.pool_size = check_count("pool_size", pool_size, minimum=1)
        self.groups = check_count("groups", groups, minimum=1, maximum=self.pool_size)
        self.rate = check_probability("rate", rate)
        self.steps_per_pass = self.groups
        self._group = _balanced_groups(self.pool_size, self.groups, self._generator)
        self._position = 0

    @property
    def step_in_pass(self) -> int:
        """The next step's group (0: it starts a pass)."""
        return self._position

    @property
    def assignment(self) -> torch.Tensor:
        """Each unit's group (fixed for the run)."""
        return self._group.clone()

    def sample(self) -> torch.Tensor:
        """bool [pool_size]: this step's units (of its group only)."""
        mask = (self._group == self._position) & (_uniform((self.pool_size,), self._generator) < self.rate)
        self._position = (self._position + 1) % self.groups
        return mask

    def pass_event(self, inner: ev.Event) -> ev.Event:
        """One pass for one unit: its group's step, ``PoissonSampled(rate, inner)``."""
        return CyclicPoisson(self.rate, self.groups).step_event(_check_event("inner", inner))

    def state_dict(self) -> Dict[str, Any]:
        return {"generator": self._generator.get_state(), "position": self._position, "groups": self._group.clone()}

    def load_state_dict(self, state: Dict[str, Any]) -> None:
        super().load_state_dict(state)
        self._position = check_count("position", state["position"], maximum=self.groups - 1)
        group = state["groups"].to(self.device)
        if group.shape != (self.pool_size,) or int(group.min()) < 0 or int(group.max()) >= self.groups:
            raise ValueError(f"state['groups'] must assign each of {self.pool_size} units one of {self.groups} groups")
        self._group = group.clone()


class MinSeparationSampler(_Sampler):
    """The min-separation schedule (module docstring): every unit in at most ``participations`` of ``steps``
    steps, any two at least ``separation`` apart.

    Args:
        pool_size: units, >= 1.
        participations: k >= 1.
        separation: s >= 1.
        steps: the run's steps (the schedule's blocks depend on them).
        generator: draws the blocks once (``samplers``' module docstring).
    """

    relation = "add_remove"

    def __init__(self, pool_size: int, participations: int, separation: int, steps: int,
                 generator: Optional[torch.Generator] = None):
        super().__init__(generator)
        self.pool_size = check_count("pool_size", pool_size, minimum=1)
        self.participations = check_count("participations", participations, minimum=1)
        self.separation = check_count("separation", separation, minimum=1)
        self.steps = check_count("steps", steps, minimum=1)
        self.blocks = min_separation_blocks(self.steps, self.participations, self.separation)
        self._block = _balanced_groups(self.pool_size, self.blocks, self._generator)
        self._count = torch.zeros(self.pool_size, dtype=torch.int64, device=self.device)
        self._last = torch.full((self.pool_size,), -self.separation, dtype=torch.int64, device=self.device)
        self._step = 0

    def sample(self) -> torch.Tensor:
        """int64 [units of this step's block]: this step's units.

        Raises:
            RuntimeError: past ``steps``, or where a unit would break the promise (never with this schedule).
        """
        if self._step >= self.steps:
            raise RuntimeError(f"the min-separation schedule is for {self.steps} steps; step {self._step + 1} asked")
        units = torch.nonzero(self._block == self._step % self.blocks).flatten()
        if units.numel() and (int(self._count[units].max()) >= self.participations
                              or int((self._step - self._last[units]).min()) < self.separation):
            raise RuntimeError("min-separation schedule: a unit would exceed its participations or separation")
        self._count[units] += 1
        self._last[units] = self._step
        self._step += 1
        return units

    def state_dict(self) -> Dict[str, Any]:
        return {"generator": self._generator.get_state(), "step": self._step, "blocks": self._block.clone(),
                "count": self._count.clone(), "last": self._last.clone()}

    def load_state_dict(self, state: Dict[str, Any]) -> None:
        super().load_state_dict(state)
        self._step = check_count("step", state["step"], maximum=self.steps)
        blocks = state["blocks"].to(self.device)
        if blocks.shape != (self.pool_size,) or int(blocks.min()) < 0 or int(blocks.max()) >= self.blocks:
            raise ValueError(f"state['blocks'] must assign each of {self.pool_size} units one of {self.blocks} blocks")
        self._block = blocks.clone()
        self._count, self._last = state["count"].to(self.device).clone(), state["last"].to(self.device).clone()
