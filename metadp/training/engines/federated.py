"""``metadp train ALGO --engine flower --plan FILE``: which runs the Flower engine takes, checked before
anything is loaded or written (no torch, no flwr here; the engine is ``metadp.training.engines.flower``).

The Flower engine runs a plan file as a federated simulation: each of the plan's ``population`` tasks
is one client (a Flower SuperNode whose ``partition-id`` is the task's index), the server samples the
clients with the plan's own sampler and runs the very step of the local trainer (clip each client's
update, sum, Gaussian noise once, ledger, update), so its report is the plan's report and, on a fixed
seed, its model is the local engine's. What it cannot run is refused with one line naming the flag or
the plan key.
"""

from __future__ import annotations

import importlib.util
from typing import Optional

from metadp.plan import Plan
from metadp.training.algorithms import Algorithm
from metadp.training.run.plan_run import fresh_episodes, plan_algorithm_refusal

__all__ = ["ENGINES", "INSTALL_HINT", "flower_refusal", "flower_installed"]

ENGINES = ("local", "flower")
INSTALL_HINT = "pip install 'metadp[federated]'"


def flower_installed() -> bool:
    """flwr (with its simulation extra, Ray) can be imported here."""
    return importlib.util.find_spec("flwr") is not None and importlib.util.find_spec("ray") is not None


def flower_refusal(alg: Algorithm, plan: Optional[Plan], *, chunk_size=None, device: str = "cpu") -> Optional[str]:
    """Why ``--engine flower`` cannot run ``alg`` on ``plan`` (None: it can). Checked in this order: the
    plan file, the algorithm, the plan's sampling, the flags it would ignore, then flwr itself."""
    if plan is None:
        return ("--engine flower runs plan files: give --plan FILE (its sampling.population is the number of "
                "simulated clients)")
    why = plan_algorithm_refusal(alg, plan)
    if why is not None:
        return f"--engine flower: {why}"
    if alg.private and alg.form != "task_clip":
        return (f"--engine flower: {alg.name}'s clients would run a DP inner loop (release.form = '{alg.form}'), which "
                "the Flower engine does not run yet; it runs task_clip releases (dp-agr, dp-maml) and the non-private "
                "algorithms")
    if fresh_episodes(plan):
        return ("--engine flower: the plan draws fresh episodes through [[hierarchy]] levels, but a client holds one "
                "fixed task of the population: use a plan without [[hierarchy]] (one client = one task)")
    if getattr(plan.sampling, "population", None) is None:
        return ("--engine flower: sampling.population is needed: it is the number of clients (give population with "
                "the rate or batch_size)")
    if chunk_size is not None:
        return "--chunk-size does not apply to --engine flower (each client computes its own task's update); drop it"
    if str(device) != "cpu":
        return f"--device {device} does not apply to --engine flower (the simulated clients run on CPU); drop it"
    if not flower_installed():
        return f"--engine flower needs Flower's simulation engine (flwr[simulation]): {INSTALL_HINT}"
    return None
