"""The client side of DP-FedMeta on Flower (``pip install 'metadp[federated]'``): one client = one task.

A client is a Flower ``ClientApp`` (:func:`client_app`) on a SuperNode whose ``partition-id`` (node
config) is its task's index in the plan's population. On a ``train`` message (the global parameters and
the inner-loop settings) it computes its algorithm's per-task contribution on its own task
(:func:`client_update`) and replies with it; on a ``query`` message it says its ``partition-id`` and
how many query examples its task has (the server checks them against the plan's ``release.query_per_task``).

* **DP-AGR** (dp-fedmeta.txt Alg. 1, client side): the MAML inner loop and the meta-gradient, neither
  clipped nor noised: the server clips and noises (``flower.DpFedMetaStrategy``).
* **DP-AGRLR** (dp-fedmeta.txt Alg. 2-3, client side): the DP inner loop (per-example clip C_in, noise
  z_in C_in on each inner sum), the per-example query gradients clipped to C_in and summed, the local
  noise N(0, (z_in C_in)^2) added, divided by m: the client's noisy mean, the ``local_noise`` release
  of ``metadp.releases``. Its guarantee against the server (``record-vs-server``) holds only if the
  server cannot know that noise: the client draws it from a generator seeded from the operating system's
  entropy (``secrets``), fresh for every message, unless the app is given ``local_noise`` (a function
  of partition-id and round returning a ``torch.Generator``: for tests that replay a client, never for a
  deployment). torch's generator is Mersenne Twister and its Gaussian sampler is floating point: the same
  caveat as every DP-SGD implementation (Mironov 2012), stated in the report's assumptions.

The same per-task code as the local engine (``metadp.training.algorithms.contributions``) runs here, so a
client's reply is what the local engine computes for that task on the same noise.
"""

from __future__ import annotations

import dataclasses
import functools
import secrets
from types import SimpleNamespace
from typing import Any, Callable, Dict, NamedTuple, Optional

import torch

from metadp.training import algorithms
from metadp.training.algorithms.contributions import resolve as contribution_of
from metadp.training.data import datasets
from metadp.training.data import setups as data_setups
from metadp.training.engines.federated import INSTALL_HINT, client_algorithms
from metadp.training.engines.flower_launch import decode_job
from metadp.training.run.config import TrainConfig
from metadp.training.run.state import stream_seed

try:  # an optional extra: this module imports without it, and each entry point says what to install
    import flwr
    from flwr.app import ArrayRecord, ConfigRecord, Message, MetricRecord, RecordDict
    from flwr.clientapp import ClientApp
except ImportError as _err:  # pragma: no cover - exercised only without flwr
    flwr, _MISSING = None, _err

__all__ = ["ClientTask", "SimulatedTasks", "client_app", "client_update", "model_of", "require_flwr",
           "secret_generator", "train_settings"]


def require_flwr() -> None:
    """Raises ImportError (with the install hint) where Flower's simulation engine is not installed."""
    if flwr is None:
        raise ImportError(f"the flower engine (metadp.training.engines.flower) needs Flower's simulation engine: "
                          f"{INSTALL_HINT}") from _MISSING


class ClientTask(NamedTuple):
    """What one client holds: the model's architecture (its weights are the server's), a task pool with
    ``batch``/``joint_batch`` (``metadp.training.data.tasks``), the row of its own task there, and the loss."""

    model: torch.nn.Module
    tasks: Any
    row: int
    loss_fn: Callable


def secret_generator() -> torch.Generator:
    """A generator seeded with 63 bits from the operating system (``secrets``): noise nobody else can replay."""
    return torch.Generator().manual_seed(secrets.randbits(63))


def train_settings(config: TrainConfig, server_round: int) -> Dict[str, Any]:
    """The inner-loop settings a ``train`` message carries (all a client needs besides the parameters)."""
    return {"algorithm": config.algorithm, "inner-steps": config.inner_steps, "inner-lr": config.inner_lr,
            "first-order": config.first_order, "inner-clip": float(config.inner_clip),
            "inner-noise": float(config.inner_noise), "clip-mode": config.clip_mode, "round": server_round}


def client_update(task: ClientTask, params: Dict[str, torch.Tensor], *, algorithm: str, inner_steps: int,
                  inner_lr: float, first_order: bool, inner_clip: float = 1.0, inner_noise: float = 1.0,
                  clip_mode: str = "flat", noise_gen: Optional[torch.Generator] = None):
    """(update, loss): the algorithm's per-task contribution on the client's own task at ``params``
    (``metadp.training.algorithms.contributions``; DP-AGR: the MAML meta-gradient, unclipped; DP-AGRLR:
    the noisy mean of the per-example clipped query gradients after the DP inner loop) and its query loss.
    ``noise_gen``: the generator of DP-AGRLR's inner and local noise (None: :func:`secret_generator`)."""
    if algorithm not in client_algorithms():
        raise ValueError(f"algorithm {algorithm!r}: a Flower client computes the per-task updates of "
                         f"{', '.join(client_algorithms())}")
    alg = algorithms.get(algorithm)
    config = TrainConfig(algorithm=algorithm, inner_steps=inner_steps, inner_lr=inner_lr, first_order=first_order,
                         inner_clip=inner_clip, inner_noise=inner_noise, clip_mode=clip_mode)
    if alg.inner_dp and noise_gen is None:
        noise_gen = secret_generator()
    rows = torch.tensor([task.row])
    updates, losses = contribution_of(alg)(alg, task.model, params, task.tasks, rows, task.loss_fn, config, noise_gen)
    return {k: v[0].detach() for k, v in updates.items()}, float(losses[0])


def _partition(context) -> int:
    return int(context.node_config["partition-id"])


def client_app(load_task: Optional[Callable[[int], ClientTask]] = None, *, mods=None,
               local_noise: Optional[Callable[[int, int], torch.Generator]] = None) -> "ClientApp":
    """The ClientApp of one client: ``load_task(partition_id)`` gives its task (cache inside it: it is called
    for every message). None: the tasks the run config's ``job`` names (``SimulatedTasks``; the app metadp
    ships, ``metadp.training.engines.flower_app``). ``mods``: Flower client mods around it.
    ``local_noise(partition_id, round)``: the generator of a DP-AGRLR client's noise (module docstring:
    tests only; None draws it from the operating system's entropy)."""
    require_flwr()
    app = ClientApp(mods=mods)

    def task_of(context) -> ClientTask:
        pid = _partition(context)
        if load_task is not None:
            return load_task(pid)
        from_job = _job_tasks(str(context.run_config.get("job", "")))
        return from_job(pid)

    @app.query()
    def identify(message, context):
        said = {"partition-id": _partition(context)}
        try:  # m: DP-AGRLR's mean divides by it, the plan's release states it
            query = getattr(task_of(context).tasks, "query_per_task", None)
        except Exception:  # noqa: BLE001 - a client that cannot load its task fails its train messages (dropped)
            query = None
        if query is not None:
            said["query-per-task"] = int(query)
        return Message(RecordDict({"client": ConfigRecord(said)}), reply_to=message)

    @app.train()
    def update(message, context):
        pid = _partition(context)
        settings = message.content["config"]
        params = message.content["arrays"].to_torch_state_dict()
        noise_gen = local_noise(pid, int(settings["round"])) if local_noise is not None else None
        grads, loss = client_update(task_of(context), params, algorithm=str(settings["algorithm"]),
                                    inner_steps=int(settings["inner-steps"]), inner_lr=float(settings["inner-lr"]),
                                    first_order=bool(settings["first-order"]),
                                    inner_clip=float(settings.get("inner-clip", 1.0)),
                                    inner_noise=float(settings.get("inner-noise", 1.0)),
                                    clip_mode=str(settings.get("clip-mode", "flat")), noise_gen=noise_gen)
        return Message(RecordDict({"arrays": ArrayRecord(torch_state_dict=grads),
                                   "metrics": MetricRecord({"loss": loss, "partition-id": pid})}), reply_to=message)

    return app


def _job_tasks(encoded: str) -> "SimulatedTasks":
    """The clients' tasks of a ``metadp train --engine flower`` job (``flower_launch.encode_job``)."""
    if not encoded:
        raise ValueError("this ClientApp builds its task from the run config's `job` of `metadp train --engine flower`, "
                         "which is missing; pass load_task to client_app for a federation of your own")
    return SimulatedTasks(**decode_job(encoded)["tasks"])


@dataclasses.dataclass(frozen=True)
class SimulatedTasks:
    """The clients' tasks of a simulation: task ``partition-id`` of the pool that ``metadp train --data``
    builds from these settings (the pool is built once per worker process)."""

    data: str
    pool: int
    seed: int
    data_dir: Optional[str] = None
    rotations: bool = False
    norm: Optional[str] = None

    def __call__(self, partition_id: int) -> ClientTask:
        model, pool, loss_fn = _simulated_pool(self)
        if not 0 <= partition_id < pool.size:
            raise ValueError(f"partition-id must be in [0, {pool.size}), got {partition_id}")
        return ClientTask(model, pool, partition_id, loss_fn)


def model_of(spec: SimulatedTasks) -> torch.nn.Module:
    """The model (architecture and initial weights from the run's seed) of ``spec``'s run, as ``metadp train``
    builds it (the server starts from it; the clients only use its architecture)."""
    return _simulated_pool(spec)[0]


@functools.lru_cache(maxsize=4)
def _simulated_pool(spec: SimulatedTasks):
    args = SimpleNamespace(**dataclasses.asdict(spec), device="cpu", fresh_episodes=False, shots=None, n_way=None)
    make, pool, loss_fn, _ = data_setups.resolve(datasets.get(spec.data).setup)(args)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(stream_seed(spec.seed, "model"))  # the architecture only: the server sends the weights
        model = make()
    return model, pool, loss_fn
