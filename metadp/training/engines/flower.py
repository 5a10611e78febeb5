"""DP-FedMeta on Flower (``pip install 'metadp[federated]'``; tested with flwr 1.42.0): each client holds
one task, the server runs metadp's trainer step, and the run's report is the plan's.

Roles (Flower's Message API: a ``ServerApp`` and a ``ClientApp``):

* **client** (:func:`client_app`): one client = one task of the plan's population, identified by the
  ``partition-id`` in its node config (a SuperNode started with ``--node-config "partition-id=3"``; the
  simulation numbers its nodes 0..N-1). On a ``train`` message (the global parameters and the inner-loop
  settings) it runs the algorithm's per-task computation on its own task (DP-AGR: the MAML inner loop and
  the meta-gradient, dp-fedmeta.txt Alg. 1, client side) and replies with it, neither clipped nor
  noised. On a ``query`` message it says its ``partition-id``.
* **server** (:class:`DpFedMetaStrategy`): the ``engine`` of ``metadp.training.run.trainer.train``. The
  trainer's loop draws the step's clients with the plan's sampler (``_Run``: Poisson, each client
  independently, an empty draw still releases noise; fixed-size batches under the substitution relation;
  shuffled passes; everyone), never Flower's own node sampling; :meth:`DpFedMetaStrategy.configure_train`
  sends one message to each drawn client and to no other; :meth:`DpFedMetaStrategy.aggregate_train`
  checks the replies; the loop then clips each client's update to C, sums, adds N(0, (zC)^2) once with
  the run's noise generator, appends the release to every ledger, and updates the model: the local
  engine's code, so on one seed both engines draw the same clients and the same noise and agree on the
  model to float rounding.
* :func:`server_app`: a ServerApp that waits for the clients and runs the trainer with the strategy, for a
  Flower App of your own. The app metadp ships (``flower_app``) and ``metadp train --engine flower``
  (``flower_run``: ``flwr run`` on a local simulation, on a loopback deployment it starts, or on an
  existing SuperLink) use the same strategy and client.

Clients that fail. A selected client that raises, does not answer within ``timeout`` seconds, or sends
anything but a finite update of the model's names and shapes contributes a zero update to that step.
A zero vector is a valid clipped update (norm 0 <= C), so the released sum is still a sum of per-client
terms each of norm at most C, where each client's term depends on that client only (its data, its
failure): one client added or removed moves it by at most C (2C under substitution), the sensitivity
the accounting uses; the sampling is the sampler's draw, made before anyone is asked, so the sampling
event is unchanged; the noise is added and the step charged whatever answered. This needs a client's
failure to be independent of the other clients' data (no client fails because another is present).
The report counts the dropped updates (``federated``); those counts, like who was selected, are the
server's knowledge and are not covered by the guarantee: remove them from a report you publish.

Whom the guarantee protects against: anyone who sees the released noisy aggregates and the models
(each selected client receives the current model: it is such an observer). Not the server: it sees
every selected client's update before the noise (DP-AGR). Clients are assumed honest-but-curious
(they compute their update as told; they never see another client's update). Amplification by
sampling assumes the selection stays hidden: against an observer who can tell which clients were sent
the model, only one Gaussian release per round holds; under fixed-size selection, colluding clients
can infer from their own selections whether another client was selected (Poisson selections are
independent of each other).
"""

from __future__ import annotations

import dataclasses
import functools
import math
import threading
import time
from types import SimpleNamespace
from typing import Any, Callable, Dict, List, NamedTuple, Optional

import torch

from metadp.training import algorithms

from metadp.training.data import setups as data_setups

from metadp.training.data import datasets
from metadp.training.algorithms import functional as F
from metadp.training.run.config import TrainConfig, TrainResult
from metadp.training.algorithms.contributions import resolve as contribution_of
from metadp.training.engines.local import clip_or_measure
from metadp.training.engines.federated import FLOWER_MODES, INSTALL_HINT
from metadp.training.engines.flower_launch import decode_job
from metadp.training.run.state import stream_seed
from metadp.training.run.trainer import check_run, train

try:  # an optional extra: this module imports without it, and each entry point says what to install
    import flwr
    from flwr.app import ArrayRecord, ConfigRecord, Message, MetricRecord, RecordDict
    from flwr.clientapp import ClientApp
    from flwr.serverapp import ServerApp
except ImportError as _err:  # pragma: no cover - exercised only without flwr
    flwr, _MISSING = None, _err


def _require_flwr() -> None:
    """Raises ImportError (with the install hint) where Flower's simulation engine is not installed."""
    if flwr is None:
        raise ImportError(f"the flower engine (metadp.training.engines.flower) needs Flower's simulation engine: "
                          f"{INSTALL_HINT}") from _MISSING

__all__ = ["ClientTask", "SimulatedTasks", "Population", "DpFedMetaStrategy", "client_app", "client_update",
           "server_app", "model_of"]

_POLL = 0.02  # seconds between the server's polls for replies


# -- the client ---------------------------------------------------------------------------------------
class ClientTask(NamedTuple):
    """What one client holds: the model's architecture (its weights are the server's), a task pool with
    ``batch``/``joint_batch`` (``metadp.training.data.tasks``), the row of its own task there, and the loss."""

    model: torch.nn.Module
    tasks: Any
    row: int
    loss_fn: Callable


def client_update(task: ClientTask, params: Dict[str, torch.Tensor], *, algorithm: str, inner_steps: int,
                  inner_lr: float, first_order: bool):
    """(update, loss): the algorithm's per-task contribution on the client's own task at ``params``
    (``metadp.training.algorithms.contributions``; DP-AGR: the MAML meta-gradient), unclipped, and its query loss."""
    alg = algorithms.get(algorithm)
    if alg.inner_dp or not alg.meta_loop:
        raise ValueError(f"algorithm {algorithm!r}: a Flower client computes the per-task updates of "
                         f"{', '.join(algorithms.names(meta_loop=True, inner_dp=False))}, without noise of its own")
    config = TrainConfig(algorithm=algorithm, inner_steps=inner_steps, inner_lr=inner_lr, first_order=first_order)
    rows = torch.tensor([task.row])
    updates, losses = contribution_of(alg)(alg, task.model, params, task.tasks, rows, task.loss_fn, config, None)
    return {k: v[0].detach() for k, v in updates.items()}, float(losses[0])


def _partition(context) -> int:
    return int(context.node_config["partition-id"])


def client_app(load_task: Optional[Callable[[int], ClientTask]] = None, *, mods=None) -> ClientApp:
    """The ClientApp of one client: ``load_task(partition_id)`` gives its task (cache inside it: it is called
    for every message). None: the tasks the run config's ``job`` names (``SimulatedTasks``; the app metadp
    ships, ``metadp.training.engines.flower_app``). ``mods``: Flower client mods around it."""
    _require_flwr()
    app = ClientApp(mods=mods)

    def task_of(context) -> ClientTask:
        pid = _partition(context)
        if load_task is not None:
            return load_task(pid)
        from_job = _job_tasks(str(context.run_config.get("job", "")))
        return from_job(pid)

    @app.query()
    def identify(message, context):
        return Message(RecordDict({"client": ConfigRecord({"partition-id": _partition(context)})}), reply_to=message)

    @app.train()
    def update(message, context):
        pid = _partition(context)
        settings = message.content["config"]
        params = message.content["arrays"].to_torch_state_dict()
        grads, loss = client_update(task_of(context), params, algorithm=str(settings["algorithm"]),
                                    inner_steps=int(settings["inner-steps"]), inner_lr=float(settings["inner-lr"]),
                                    first_order=bool(settings["first-order"]))
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


# -- the server ---------------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class Population:
    """What the server knows of the clients' tasks: how many (the trainer's ``pool`` on the server; the
    tasks themselves stay with the clients)."""

    size: int
    query_per_task: Optional[int] = None


class DpFedMetaStrategy:
    """The server's side of each step (the trainer's ``engine``; module docstring).

    Args:
        grid: the Flower ``Grid`` of the ServerApp.
        clients: partition-id (task index) -> node id, for every client of the population.
        timeout: seconds to wait for a step's replies (later replies are ignored: those clients dropped).
    """

    def __init__(self, grid, clients: Dict[int, int], *, timeout: float = 600.0,
                 stop: Optional[threading.Event] = None, mode: str = "app"):
        _require_flwr()
        if not (isinstance(timeout, (int, float)) and math.isfinite(timeout) and timeout > 0):
            raise ValueError(f"timeout must be a finite number of seconds > 0, got {timeout!r}")
        if mode not in FLOWER_MODES:
            raise ValueError(f"mode must be one of {', '.join(FLOWER_MODES)}, got {mode!r}")
        self.grid, self.node_of, self.timeout, self.mode = grid, dict(clients), float(timeout), mode
        # set: the next poll raises KeyboardInterrupt (the trainer's loop stops as on Ctrl-C)
        self.stop = stop if stop is not None else threading.Event()
        self.rounds: List[Dict[str, int]] = []  # per step of this process: selected, dropped

    @classmethod
    def connect(cls, grid, population: int, *, timeout: float = 600.0,
                stop: Optional[threading.Event] = None, mode: str = "app") -> "DpFedMetaStrategy":
        """Waits for the population's clients, asks each its partition-id and checks that they are
        0..population-1, one node each (else ValueError, before any step)."""
        strategy = cls(grid, {}, timeout=timeout, stop=stop, mode=mode)
        deadline = time.monotonic() + strategy.timeout
        nodes = list(grid.get_node_ids())
        while len(nodes) < population and time.monotonic() < deadline:
            strategy._wait()
            nodes = list(grid.get_node_ids())
        if len(nodes) != population:
            raise ValueError(f"the plan's sampling.population is {population} clients, but {len(nodes)} are connected")
        queries = [Message(RecordDict(), dst_node_id=n, message_type="query") for n in nodes]
        found: Dict[int, int] = {}
        for reply in strategy._exchange(queries):
            if reply.has_error():
                raise ValueError(f"client node {reply.metadata.src_node_id} did not say its partition-id: "
                                 f"{reply.error.reason}")
            pid = int(reply.content["client"]["partition-id"])
            if pid in found:
                raise ValueError(f"two client nodes say partition-id {pid}: each task of the population is one client")
            found[pid] = reply.metadata.src_node_id
        if sorted(found) != list(range(population)):
            raise ValueError(f"the clients' partition-ids must be 0..{population - 1} (the plan's population), got "
                             f"{sorted(found)[:10]}{'...' if len(found) > 10 else ''}")
        strategy.node_of = found
        return strategy

    def _wait(self) -> None:
        if self.stop.wait(_POLL):
            raise KeyboardInterrupt

    def _exchange(self, messages: List[Message]) -> List[Message]:
        """Pushes ``messages`` and pulls their replies until all came or the timeout passed."""
        if self.stop.is_set():
            raise KeyboardInterrupt
        waiting = set(self.grid.push_messages(messages))
        deadline = time.monotonic() + self.timeout
        replies: List[Message] = []
        while True:
            got = list(self.grid.pull_messages(waiting))
            replies.extend(got)
            waiting -= {m.metadata.reply_to_message_id for m in got}
            if not waiting or time.monotonic() >= deadline:
                return replies
            self._wait()

    def configure_train(self, server_round: int, params: Dict[str, torch.Tensor], selected: List[int],
                        config: TrainConfig) -> List[Message]:
        """One ``train`` message to each selected client (the sampler's draw), and to no other."""
        settings = {"algorithm": config.algorithm, "inner-steps": config.inner_steps, "inner-lr": config.inner_lr,
                    "first-order": config.first_order, "round": server_round}
        state = {k: v.detach().cpu() for k, v in params.items()}
        return [Message(RecordDict({"arrays": ArrayRecord(torch_state_dict=state), "config": ConfigRecord(settings)}),
                        dst_node_id=self.node_of[i], message_type="train", group_id=str(server_round))
                for i in selected]

    def aggregate_train(self, messages: List[Message], replies: List[Message], params: Dict[str, torch.Tensor]):
        """(updates name -> [n, *shape], losses [n], answered bool [n]) of the n selected clients, in the
        order of ``messages``: a client that failed, timed out or sent an invalid update has a zero update
        (module docstring). Nothing is clipped or noised here."""
        n = len(messages)
        position = {m.metadata.message_id: j for j, m in enumerate(messages)}
        updates = {k: torch.zeros((n,) + tuple(v.shape), dtype=v.dtype) for k, v in params.items()}
        losses, answered = torch.zeros(n), torch.zeros(n, dtype=torch.bool)
        for reply in replies:
            j = position.get(reply.metadata.reply_to_message_id)
            if j is None or answered[j] or reply.has_error():
                continue
            update = _valid_update(reply, params)
            if update is None:
                continue
            for k, v in update.items():
                updates[k][j] = v
            losses[j] = _reply_loss(reply)
            answered[j] = True
        self.rounds.append({"selected": n, "dropped": int(n - int(answered.sum()))})
        return updates, losses, answered

    def clipped_sum(self, alg, model, params, tasks, rows, weights, loss_fn, c, run, contribution, threshold,
                    raw_norms):
        """``LocalEngine.clipped_sum`` with the clients computing: (sum of the clipped updates,
        their norms before clipping or None, losses), per trainer row (pads weigh 0 and stay 0)."""
        drawn = torch.nonzero(weights > 0).flatten()
        selected = [int(i) for i in rows[drawn].tolist()]
        messages = self.configure_train(len(self.rounds) + 1, params, selected, c)
        updates, losses, _ = self.aggregate_train(messages, self._exchange(messages) if messages else [], params)
        updates, norms = clip_or_measure(updates, threshold, c.clip_mode, raw_norms)
        total = F.masked_sum(updates, None)
        row_losses = torch.zeros(rows.numel(), dtype=losses.dtype)
        row_losses[drawn] = losses
        row_norms = None
        if norms is not None:
            row_norms = torch.zeros(rows.numel(), dtype=norms.dtype)
            row_norms[drawn] = norms
        return total, row_norms, row_losses

    def report_fields(self) -> Dict[str, Any]:
        """``privacy_report.json``'s engine and the clients' record of the steps this process ran."""
        selected = sum(r["selected"] for r in self.rounds)
        dropped = sum(r["dropped"] for r in self.rounds)
        return {"engine": "flower", "federated": {
            "framework": f"flwr {flwr.__version__}", "mode": self.mode, "mode_means": FLOWER_MODES[self.mode],
            "clients": len(self.node_of), "rounds_run": len(self.rounds),
            "updates_asked": selected, "updates_dropped": dropped,
            "rounds_with_dropouts": [dict(r, round=i + 1) for i, r in enumerate(self.rounds) if r["dropped"]],
            "selection": "the plan's sampler (metadp.training.data.samplers) on the run's seed: one train message to each "
                         "drawn client and to no other",
            "dropouts": "a selected client that failed, timed out or sent an invalid update counted as a zero update: "
                        "the sum's sensitivity and the sampling event are unchanged, the noise was added and the step "
                        "charged",
            "note": "these counts (the rounds this server process ran) are the server's knowledge, not covered by the "
                    "guarantee: remove them before publishing this report",
            "adversary": "anyone who sees the released noisy aggregates and the models; not the server, which sees "
                         "each selected client's update before the noise (DP-AGR)"}}


def _reply_loss(reply: Message) -> float:
    """The client's query loss (diagnostics only: 0 when missing or not a finite number)."""
    try:
        loss = float(reply.content["metrics"]["loss"])
    except (KeyError, TypeError, ValueError):
        return 0.0
    return loss if math.isfinite(loss) else 0.0


def _valid_update(reply: Message, params: Dict[str, torch.Tensor]) -> Optional[Dict[str, torch.Tensor]]:
    """The reply's update as tensors, if it has exactly the model's names and shapes and is finite."""
    if "arrays" not in reply.content.array_records:
        return None
    try:
        update = reply.content["arrays"].to_torch_state_dict()
    except (TypeError, ValueError):
        return None
    if set(update) != set(params):
        return None
    out = {}
    for k, v in update.items():
        if tuple(v.shape) != tuple(params[k].shape) or not bool(torch.isfinite(v).all()):
            return None
        out[k] = v.to(params[k].dtype)
    return out


# -- a ServerApp of your own ------------------------------------------------------------------------
def server_app(model: torch.nn.Module, config: TrainConfig, out_dir, *, plan, timeout: float = 600.0,
               outcome: Optional[Dict[str, Any]] = None, **train_options) -> ServerApp:
    """The ServerApp of a run of ``plan``: waits for its population of clients, checks their partition-ids,
    then runs ``metadp.training.run.trainer.train(model, Population(N), None, config, out_dir, plan=plan,
    engine=<its DpFedMetaStrategy>, **train_options)`` (``resume``, ``progress``, ``setup``, ...).

    For a deployment, pass ``resume=True``: a restarted server then continues the run in ``out_dir``
    with every release on its ledgers still charged. ``outcome`` (a dict; :func:`simulate`'s) receives
    the ``result`` or the ``error`` instead of raising it and sets its ``finished`` event when the run
    ends; setting its ``stop`` event stops the run at the server's next poll (as Ctrl-C does).
    """
    _require_flwr()
    population = Population(plan.sampling.population)
    app = ServerApp()

    @app.main()
    def main(grid, context):
        try:
            stop = outcome.get("stop") if outcome is not None else None
            strategy = DpFedMetaStrategy.connect(grid, population.size, timeout=timeout, stop=stop)
            result = train(model, population, None, config, out_dir, plan=plan, engine=strategy, **train_options)
            if outcome is not None:
                outcome["result"] = result
        except BaseException as err:  # noqa: B036 - the caller's thread raises it
            if outcome is None:
                raise
            outcome["error"] = err
        finally:
            if outcome is not None:
                outcome.setdefault("finished", threading.Event()).set()

    return app
