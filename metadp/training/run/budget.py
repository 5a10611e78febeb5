"""The privacy budget of a training run, fixed before step 1 (DESIGN.md sec. 7).

Before the first step the trainer asks for the schedule: the certified epsilon after each step of the
sampler's step event, and the last step whose epsilon is within the budget; the loop stops there.
Pure accounting (no torch): it composes events with metadp's accountants.

* ``last_step`` is exact for the accountant used: the largest T with epsilon(T steps) <= target,
  found by doubling and bisection on certified bounds (``accounting.calibration.max_steps``).
* ``epsilon_after(t)`` is a certified upper bound for every t: the accountant's trajectory at
  checkpoints, read at the first checkpoint >= t (epsilon does not decrease with the number of steps),
  and exact at ``last_step``.
"""

from __future__ import annotations

import dataclasses
from typing import Callable, Tuple

import numpy as np

from metadp.core.validation import check_count, check_delta, check_real
from metadp.core import events as ev
from metadp.report import format_upper
from metadp.accounting.calibration import calibrate_noise, max_steps
from metadp.accounting.certify import accountant_names, certify, trajectory

__all__ = ["BudgetSchedule", "budget_schedule", "noise_for_budget"]


@dataclasses.dataclass(frozen=True)
class BudgetSchedule:
    """When a run must stop, and what it has spent at each step (upper bounds)."""

    target_epsilon: float
    delta: float
    relation: str
    accountant: str
    step_event: ev.Event
    max_steps: int  # the steps the run asked for
    last_step: int  # the last step with certified epsilon <= target (0: not even one)
    checkpoints: Tuple[int, ...]  # steps at which the trajectory was computed (increasing, ends at max_steps)
    epsilons: Tuple[float, ...]  # certified epsilon after each checkpoint
    final_epsilon: float  # certified epsilon after last_step (0 if last_step is 0)

    def epsilon_after(self, step: int) -> float:
        """Certified epsilon after ``step`` steps (an upper bound; exact at checkpoints and last_step)."""
        step = check_count("step", step)
        if step == 0:
            return 0.0
        if step > self.checkpoints[-1]:
            raise ValueError(f"step must be <= {self.checkpoints[-1]} (the schedule's horizon), got {step}")
        i = int(np.searchsorted(np.asarray(self.checkpoints), step))
        if step <= self.last_step:  # epsilon(step) <= epsilon(last_step) <= final: both are upper bounds
            return min(self.epsilons[i], self.final_epsilon)
        return self.epsilons[i]

    def describe(self) -> str:
        how = "tightest accountant" if self.accountant == "all" else f"{self.accountant.upper()} accountant"
        return (f"budget epsilon <= {self.target_epsilon:g} at delta = {self.delta:g} ({how}, "
                f"{self.relation}): stop after step {self.last_step:,} of {self.max_steps:,} "
                f"(epsilon <= {format_upper(self.final_epsilon)})")


def budget_schedule(step_event: ev.Event, steps: int, target_epsilon: float, delta: float, *,
                    relation: str = "add_remove", accountant: str = "all", checkpoints: int = 64) -> BudgetSchedule:
    """The schedule of a run of up to ``steps`` releases of ``step_event``.

    Args:
        step_event: one step's event for the protected unit (from the sampler).
        steps: the number of steps asked for (>= 1).
        target_epsilon: the budget (> 0), at ``delta``.
        relation: the neighbouring relation of the step event.
        accountant: ``"all"`` (the tightest of every accountant that interprets the event, as plans do), or
            one registered name.
        checkpoints: trajectory points (log-spaced, always including ``steps``).
    """
    steps = check_count("steps", steps, minimum=1)
    target = check_real("target_epsilon", target_epsilon, low=0.0, low_open=True)
    delta = check_delta("delta", delta)
    accountant_names(accountant)  # an unknown name fails here, before any work
    last = max_steps(step_event, target, delta, relation=relation, accountant=accountant, limit=steps)
    grid = np.unique(np.concatenate([np.round(np.geomspace(1, steps, min(checkpoints, steps))).astype(int),
                                     [steps] + ([last] if last else [])]))
    epsilons = trajectory(step_event, [int(t) for t in grid], delta, relation=relation, accountant=accountant)
    final = (certify(step_event, delta, steps=last, relation=relation, accountant=accountant, lower=False).epsilon
             if last else 0.0)
    return BudgetSchedule(target, delta, relation, accountant, step_event, steps, last,
                          tuple(int(t) for t in grid), epsilons, float(final))


def noise_for_budget(make_step_event: Callable[[float], ev.Event], steps: int, target_epsilon: float, delta: float,
                     *, relation: str = "add_remove", accountant: str = "all", rtol: float = 1e-3) -> float:
    """The smallest noise multiplier whose ``steps`` steps stay within the budget (certified)."""
    steps = check_count("steps", steps, minimum=1)
    return calibrate_noise(lambda z: ev.SelfComposed(make_step_event(z), steps), target_epsilon, delta,
                           relation=relation, accountant=accountant, rtol=rtol)
