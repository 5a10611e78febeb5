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
from metadp.training import algorithms
from metadp.training.algorithms import Algorithm
from metadp.training.run.plan_run import fresh_episodes, plan_algorithm_refusal

__all__ = ["ENGINES", "FLOWER_MODES", "DEPLOYMENTS", "INSTALL_HINT", "flower_refusal", "flower_installed",
           "deployment_refusal", "flower_mode", "client_algorithms"]

ENGINES = ("local", "flower")
FLOWER_MODES = {
    "simulation": "Flower simulation via flwr run: a SuperLink in simulation mode, the clients Flower's simulated "
                  "SuperNodes (Ray)",
    "local": "Flower deployment on loopback: a SuperLink and one SuperNode process per client, started and stopped by "
             "metadp",
    "superlink": "Flower deployment on the given SuperLink (--superlink): its SuperNodes are the clients",
    "app": "a Flower ServerApp of your own (metadp.training.engines.flower.server_app)"}
"""The Flower engine's modes, as the report (``federated.mode``, ``mode_means``) and the summary name them."""
DEPLOYMENTS = ("simulation", "local")  # --deployment
_DEPLOYMENT_FLAGS = ("deployment", "clients", "superlink", "root_certificates", "client_timeout")
INSTALL_HINT = "pip install 'metadp[federated]'"


def client_algorithms() -> tuple:
    """The registered algorithms a Flower client computes: the meta-loop ones without a DP inner loop of the
    task's own (DP-AGR, MAML, Reptile) and those whose client adds its own local noise (DP-AGRLR)."""
    return tuple(name for name in algorithms.names(meta_loop=True)
                 if not algorithms.get(name).inner_dp or getattr(algorithms.get(name), "local_noise", False))


def flower_installed() -> bool:
    """flwr (with its simulation extra, Ray) can be imported here."""
    return importlib.util.find_spec("flwr") is not None and importlib.util.find_spec("ray") is not None


def flower_mode(args) -> str:
    """The Flower engine's mode of ``metadp train``'s flags: ``superlink`` (--superlink), else --deployment."""
    if getattr(args, "superlink", None):
        return "superlink"
    return getattr(args, "deployment", None) or "simulation"


def deployment_refusal(args, population: Optional[int]) -> Optional[str]:
    """Why the Flower flags of ``args`` cannot run (None: they can): they need --engine flower, --clients
    needs --deployment local and equals the population, --superlink excludes --deployment local."""
    given = [n for n in _DEPLOYMENT_FLAGS if getattr(args, n, None) is not None]
    if getattr(args, "engine", None) != "flower":
        if given:
            return f"--{given[0].replace('_', '-')} applies to --engine flower; drop it or add --engine flower"
        return None
    if getattr(args, "superlink", None) is not None and getattr(args, "deployment", None) is not None:
        return ("--superlink runs on an existing federation and --deployment starts one here: give one of them")
    if getattr(args, "root_certificates", None) is not None and getattr(args, "superlink", None) is None:
        return "--root-certificates applies to --superlink (the loopback federations metadp starts are unencrypted)"
    clients = getattr(args, "clients", None)
    if clients is not None:
        if getattr(args, "deployment", None) != "local":
            return "--clients is the number of SuperNodes --deployment local starts: add --deployment local or drop it"
        if population is not None and clients != population:
            return (f"--clients {clients}, but the plan's sampling.population is {population}: each client is one task "
                    f"of the population, so start {population} SuperNodes (or change the plan)")
    timeout = getattr(args, "client_timeout", None)
    if timeout is not None and not (0 < timeout < float("inf")):
        return f"--client-timeout must be a finite number of seconds > 0, got {timeout:g}"
    return None


def flower_refusal(alg: Algorithm, plan: Optional[Plan], *, chunk_size=None, device: str = "cpu") -> Optional[str]:
    """Why ``--engine flower`` cannot run ``alg`` on ``plan`` (None: it can). Checked in this order: the
    plan file, the algorithm, the plan's sampling, the flags it would ignore, then flwr itself."""
    if plan is None:
        return ("--engine flower runs plan files: give --plan FILE (its sampling.population is the number of "
                "simulated clients)")
    why = plan_algorithm_refusal(alg, plan)
    if why is not None:
        return f"--engine flower: {why}"
    if alg.name not in client_algorithms():
        return (f"--engine flower: {alg.name}'s tasks would run a DP inner loop of their own (release.form = "
                f"'{alg.form}'), which no Flower client computes: the Flower engine runs {', '.join(client_algorithms())}")
    if (plan.record_multiplicity or 1) > 1 and any(u.charge == "visit" for u in plan.units()):
        return (f"--engine flower: the plan's record_multiplicity is {plan.record_multiplicity} and its "
                f"{next(u.key for u in plan.units() if u.charge == 'visit')} view is charged per visit of a record: the "
                "server cannot see which records clients share, so it cannot count a record's visits; with each record "
                "held by one client (record_multiplicity = 1, DP-FedMeta's setting) a record's visits are its client's")
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
