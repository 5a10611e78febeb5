"""How long and how large a training run is, estimated before any data is loaded (issue 28, class 4).

A plan of 10^12 steps, a population of 10^15 tasks or 10^6 episodes a step cannot end in any lifetime;
such a run used to start silently (or build its task pool until memory ran out) and print an ETA of
millions of hours only after its first step. ``metadp train`` and ``metadp verify run`` now estimate the
run from its shape alone (steps, tasks a step, the pool it draws from, the data set) and refuse, with
one line naming the setting, a run estimated beyond :data:`LIMIT_HOURS` unless ``--force-long``, and
always a task pool that needs more than half of this machine's memory.

The estimate is a **floor**, never an overestimate: each cost below is a fraction of what was measured
on a shared 2-core CPU (2026-11-28, ``metadp train dp-maml``: sinusoid ~0.35 s a step plus ~6.6 ms a
task; glyphs ~0.7 s a task): 1/20 of it for a CPU device, 1/5000 of a task's cost for an accelerator,
so a faster machine is not refused a run it could finish. A refused run takes at least the stated time
on the device it names.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Optional

from metadp.training.data import datasets
from metadp.training.run.plan_run import expected_tasks

__all__ = ["LIMIT_HOURS", "PROGRESS_SECONDS", "RunSize", "estimate_run", "check_run_size", "plan_run_size"]

LIMIT_HOURS = 24.0  # a run estimated beyond this is refused unless --force-long
PROGRESS_SECONDS = 5.0  # a run estimated beyond this says so (and shows its bar) before loading any data

# per step: the Python loop and the ledger's hash-chained append (measured ~0.35 s on the CPU)
_STEP_SECONDS = {"cpu": 1e-2, "accelerator": 1e-3}
# per task and inner step (measured 6.6 ms for sinusoid, 0.7 s for a 5-way glyph episode on the CPU)
# keyed by DataSet.images: regression (sinusoid) or image episodes (glyphs, omniglot)
_TASK_SECONDS = {"cpu": {False: 3e-4, True: 3e-2}, "accelerator": {False: 1e-6, True: 1e-4}}
_DRAW_SECONDS = 2e-10  # per pool task and step: Poisson sampling draws one uniform for every task of the pool
_POOL_BYTES = {False: 640, True: 64}  # per pool task: its points (float64 while drawn,
# then float32) and its records' visit counts (sinusoid, 20 points a task); an episode pool keeps indices only


@dataclasses.dataclass(frozen=True)
class RunSize:
    """A run's shape and its floor estimates (module docstring)."""

    steps: int  # training steps
    tasks_per_step: float  # expected tasks (episodes) computed a step
    pool: int  # tasks of the fixed pool built before step 1 (0: episodes drawn afresh each step)
    seconds: float  # at least this long to train here (a floor)
    pool_bytes: float  # at least this much memory for the pool

    def duration(self) -> str:
        """The estimate in words (seconds, minutes, hours or years)."""
        s = self.seconds
        if s < 120:
            return f"{s:.3g} s"
        if s < 2 * 3600:
            return f"{s / 60:.3g} min"
        if s < 2 * 365 * 86400:
            return f"{s / 3600:.3g} hours"
        return f"{s / (365.25 * 86400):.3g} years"

    def shape(self) -> str:
        pool = f" from a pool of {self.pool:,} tasks" if self.pool else " (episodes drawn afresh)"
        return f"{self.steps:,} steps of ~{self.tasks_per_step:,.4g} tasks each{pool}"


def estimate_run(data: str, steps: int, tasks_per_step: float, pool: int, *, inner_steps: int = 1,
                 poisson: bool = True, device: str = "cpu") -> RunSize:
    """The floor estimate of a run of ``steps`` steps drawing ``tasks_per_step`` tasks from ``pool`` tasks
    of data set ``data`` (``poisson``: one draw per pool task a step), each task adapted for
    ``inner_steps`` inner steps, on ``device`` ("cpu", or an accelerator: "cuda", "cuda:N", "mps").
    Needs no data and no torch."""
    kind = "cpu" if str(device or "cpu") == "cpu" else "accelerator"
    images = datasets.get(data).images
    per_task = _TASK_SECONDS[kind][images] * max(1, inner_steps)
    per_step = _STEP_SECONDS[kind] + tasks_per_step * per_task + (pool * _DRAW_SECONDS if poisson else 0.0)
    return RunSize(steps=steps, tasks_per_step=tasks_per_step, pool=pool, seconds=steps * per_step,
                   pool_bytes=pool * _POOL_BYTES[images])


def _memory_bytes() -> Optional[int]:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):  # not every platform reports it
        return None


def check_run_size(size: RunSize, *, force_long: bool, steps_name: str, pool_name: str,
                   batch_name: Optional[str]) -> None:
    """Refuses (ValueError naming the settings) a pool that needs over half of this machine's memory, and,
    unless ``force_long``, a run estimated beyond :data:`LIMIT_HOURS`. ``*_name``: how the message names
    the steps, the pool and the tasks a step (a flag or a plan key)."""
    memory = _memory_bytes()
    if size.pool and memory is not None and size.pool_bytes > memory / 2:
        raise ValueError(f"{pool_name} = {size.pool:,}: the run's task pool would need at least "
                         f"{size.pool_bytes / 2**30:.3g} GiB, more than half of this machine's {memory / 2**30:.3g} GiB "
                         f"(it is built before step 1); lower {pool_name}")
    if size.seconds > LIMIT_HOURS * 3600 and not force_long:
        lower = steps_name if batch_name is None else f"{steps_name} or {batch_name}"
        raise ValueError(f"{size.shape()}: this run would take at least {size.duration()} here (a floor: "
                         f"{size.seconds / size.steps:.3g} s a step or more), beyond the limit of {LIMIT_HOURS:g} hours; "
                         f"lower {lower}, or pass --force-long to run it anyway")


def plan_run_size(plan, data: str, inner_steps: int = 1, device: str = "cpu") -> RunSize:
    """:func:`estimate_run` for a plan file's run: its steps, its sampling's expected tasks (episodes) a
    step, and its population as the pool (none for episodes drawn afresh)."""
    scheme = plan.sampling
    episodes = getattr(scheme, "episodes", None)
    population = getattr(scheme, "population", None) or 0
    tasks = expected_tasks(plan)  # the trainer's own count (a min-separation block, a Poisson batch, ...)
    pool = 0 if episodes is not None or plan.hierarchy is not None else population
    return estimate_run(data, plan.steps, float(tasks), pool, inner_steps=inner_steps,
                        poisson=scheme.draws_each_unit, device=device)


def say_estimate(size: RunSize, what: str, file) -> bool:
    """Prints one status line (before data is loaded) for a run estimated beyond :data:`PROGRESS_SECONDS`;
    True when it did (the caller then shows its progress bar from step 0)."""
    if size.seconds <= PROGRESS_SECONDS:
        return False
    print(f"metadp: {what}: {size.shape()}; estimated at least {size.duration()} here; loading data ...",
          file=file, flush=True)
    return True
