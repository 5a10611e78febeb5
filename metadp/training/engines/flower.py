"""DP-FedMeta on Flower (``pip install 'metadp[federated]'``; tested with flwr 1.42.0): each client holds
one task, the server runs metadp's trainer step, and the run's report is the plan's.

Roles (Flower's Message API: a ``ServerApp`` and a ``ClientApp``):

* **client** (``flower_client``, re-exported here: :func:`client_app`, :func:`client_update`): one
  client = one task of the plan's population, identified by the ``partition-id`` in its node config (a
  SuperNode started with ``--node-config "partition-id=3"``; the simulation numbers its nodes 0..N-1).
  On a ``train`` message it computes its algorithm's per-task update on its own task and replies with
  it (DP-AGR: the meta-gradient, neither clipped nor noised; DP-AGRLR: its locally noised mean).
* **server** (:class:`DpFedMetaStrategy`, a Flower ``Strategy``): its ``start(grid, ...)`` runs
  ``metadp.training.run.trainer.train`` with the strategy as the ``engine``. The trainer's loop draws the
  step's clients with the plan's sampler (``_Run``: Poisson, each client independently, an empty draw
  still releases noise; fixed-size batches under the substitution relation; shuffled passes; everyone),
  never Flower's own node sampling; :meth:`DpFedMetaStrategy.configure_train` sends one message to each
  drawn client and to no other; :meth:`DpFedMetaStrategy.aggregate_train` checks the replies, clips each
  to C and sums them; the loop then adds N(0, (zC)^2) once with the run's noise generator, appends the
  release to every ledger, and updates the model: the local engine's code, so on one seed both engines
  draw the same clients and the same noise and, for DP-AGR, agree on the model to float rounding.
* :func:`server_app`: a ServerApp that starts the strategy, for a Flower App of your own. The app metadp
  ships (``flower_app``) and ``metadp train --engine flower`` (``flower_run``: ``flwr run`` on a local
  simulation, on a loopback deployment it starts, or on an existing SuperLink) use the same strategy
  and client.

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
(each selected client receives the current model: it is such an observer). Not the server under
DP-AGR: it sees every selected client's update before the noise. Under DP-AGRLR the record-level
``record-vs-server`` view holds against the server too (it sees only locally noised means). Clients are assumed honest-but-curious
(they compute their update as told; they never see another client's update). Amplification by
sampling assumes the selection stays hidden: against an observer who can tell which clients were sent
the model, only one Gaussian release per round holds; under fixed-size selection, colluding clients
can infer from their own selections whether another client was selected (Poisson selections are
independent of each other).
"""

from __future__ import annotations

import dataclasses
import logging
import math
import threading
import time
from typing import Any, Dict, List, Optional

import torch

from metadp.training.engines.federated import FLOWER_MODES, client_algorithms
from metadp.training.engines.flower_client import (ClientTask, SimulatedTasks, client_app, client_update, model_of,
                                                   require_flwr, train_settings)
from metadp.training.engines.local import clip_or_measure
from metadp.training.algorithms import functional as F
from metadp.training.run.config import TrainConfig, TrainResult
from metadp.training.run.trainer import train

try:  # an optional extra: this module imports without it, and each entry point says what to install
    import flwr
    from flwr.app import ArrayRecord, ConfigRecord, Message, MetricRecord, RecordDict
    from flwr.serverapp import ServerApp
    from flwr.serverapp.strategy import Result, Strategy
except ImportError:  # pragma: no cover - exercised only without flwr
    flwr, Strategy = None, object

__all__ = ["ClientTask", "SimulatedTasks", "Population", "DpFedMetaStrategy", "client_app", "client_update",
           "client_algorithms", "server_app", "model_of"]

_POLL = 0.02  # seconds between the server's polls for replies
_LOG = logging.getLogger("metadp.flower")
_ADVERSARY = {
    None: "anyone who sees the released noisy aggregates and the models; not the server, which sees each selected "
          "client's update before the noise (DP-AGR)",
    "dp-agrlr": "task and record: anyone who sees the released noisy aggregates and the models, not the server, which "
                "sees each selected client's locally noised mean; record-vs-server: also the server (each client draws "
                "its local noise from the operating system's entropy and never sends it)"}


# -- the server ---------------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class Population:
    """What the server knows of the clients' tasks: how many (the trainer's ``pool`` on the server; the
    tasks themselves stay with the clients)."""

    size: int
    query_per_task: Optional[int] = None

    def record_ids(self, indices: torch.Tensor) -> torch.Tensor:
        """One id per client, [len(indices), 1]: the server cannot see a client's records, so a visit of a
        client counts as a visit of each of its records; with each record held by one client (the plan's
        ``record_multiplicity = 1``, which ``federated.flower_refusal`` requires of a per-visit view) a
        record's visits are exactly its client's."""
        return indices.reshape(-1, 1).to(torch.int64)


@dataclasses.dataclass
class _Step:
    """What one step's ``configure_train`` and ``aggregate_train`` share (the trainer's call in between)."""

    selected: List[int]
    params: Dict[str, torch.Tensor]
    threshold: float
    clip_mode: str
    raw_norms: bool
    messages: List[Any] = dataclasses.field(default_factory=list)
    total: Optional[Dict[str, torch.Tensor]] = None
    norms: Optional[torch.Tensor] = None
    losses: Optional[torch.Tensor] = None


class DpFedMetaStrategy(Strategy):
    """DP-FedMeta as a Flower ``Strategy`` (``flwr.serverapp.strategy``; module docstring).

    :meth:`start` is Flower's entry point (``strategy.start(grid, ...)`` in a ServerApp): it waits for the
    plan's clients and runs metadp's trainer (``metadp.training.run.trainer.train``) with this strategy as
    its ``engine``, so the rounds are the trainer's steps: the plan's sampler draws the clients,
    :meth:`configure_train` sends the model to each drawn client and to no other, :meth:`aggregate_train`
    clips each reply to C and sums them, and the trainer adds N(0, (zC)^2) once, charges every ledger,
    checkpoints and stops at the budget. Flower's own round loop is not used: it would be a second,
    unaccounted path for the same release.

    Args:
        timeout: seconds to wait for a step's replies (later replies are ignored: those clients dropped).
        stop: an event; set, the next poll raises KeyboardInterrupt (the trainer stops as on Ctrl-C).
        mode: how the federation runs, for the report (``federated.FLOWER_MODES``).
    """

    def __init__(self, *, timeout: float = 600.0, stop: Optional[threading.Event] = None, mode: str = "app"):
        require_flwr()
        if mode not in FLOWER_MODES:
            raise ValueError(f"mode must be one of {', '.join(FLOWER_MODES)}, got {mode!r}")
        self.grid, self.node_of, self.timeout, self.mode = None, {}, _seconds(timeout), mode
        self.population: Optional[Population] = None  # the clients', once connect() returned
        self.stop = stop if stop is not None else threading.Event()
        self.rounds: List[Dict[str, int]] = []  # per step of this process: selected, dropped
        self.losses: List[float] = []  # per step of this process: the answering clients' mean query loss
        self.algorithm: Optional[str] = None
        self.plan = None
        self.result: Optional[TrainResult] = None  # the trainer's, once start() returned
        self._step: Optional[_Step] = None

    # -- Flower's entry point ----------------------------------------------------------------------
    def start(self, grid, initial_arrays=None, num_rounds: Optional[int] = None, timeout: Optional[float] = None,
              train_config=None, evaluate_config=None, evaluate_fn=None, *, model: torch.nn.Module,
              config: TrainConfig, out_dir, plan, **train_options) -> "Result":
        """Runs ``plan`` on the federation of ``grid``: the trainer's loop with the clients computing
        (class docstring); the TrainResult is kept in :attr:`result`.

        Flower's arguments: ``initial_arrays`` (None: ``model``'s weights) replaces the model's weights;
        ``num_rounds`` must be None or the run's ``config.steps`` (the budget was certified for them);
        ``timeout`` replaces the constructor's; ``train_config`` and ``evaluate_config`` must be empty (the
        clients' settings come from ``config``; they do no evaluation); ``evaluate_fn(round, arrays)`` is
        called on the initial model (round 0) and on the final one (the trainer's loop owns the rounds).
        ``train_options``: ``train``'s (``resume``, ``progress``, ``setup``, ``warn``, ...).

        Returns:
            Flower's ``Result``: the final model's arrays, per round this process ran the clients' mean
            query loss and counts (``train_metrics_clientapp``), and ``evaluate_fn``'s metrics.
        """
        if num_rounds is not None and num_rounds != config.steps:
            raise ValueError(f"num_rounds is {num_rounds}, but the run's steps are {config.steps}: the plan's "
                             "guarantee is certified for its steps; change the plan, not the rounds")
        for name, record in (("train_config", train_config), ("evaluate_config", evaluate_config)):
            if record:
                raise ValueError(f"{name}: the clients' settings come from the run's TrainConfig (and they run no "
                                 "federated evaluation); pass an empty record or None")
        if timeout is not None:
            self.timeout = _seconds(timeout)
        if initial_arrays is not None:
            model.load_state_dict(initial_arrays.to_torch_state_dict(), strict=True)
        self.plan = plan
        self.summary()
        result = Result()
        if evaluate_fn is not None:
            _record(result.evaluate_metrics_serverapp, 0, evaluate_fn(0, _arrays(model.state_dict())))
        self.connect(grid, plan.sampling.population)
        self.result = train(model, self.population, None, config, out_dir, plan=plan, engine=self, **train_options)
        result.arrays = _arrays(self.result.params)
        for i, (counts, loss) in enumerate(zip(self.rounds, self.losses), start=1):
            result.train_metrics_clientapp[i] = MetricRecord(dict(counts, loss=loss))
        if evaluate_fn is not None:
            _record(result.evaluate_metrics_serverapp, len(self.rounds), evaluate_fn(len(self.rounds), result.arrays))
        return result

    def summary(self) -> None:
        """Logs the plan this strategy runs (Flower calls it as a strategy starts)."""
        if self.plan is not None:
            _LOG.info("DpFedMetaStrategy: plan %r, %d clients, %s, mode %s", self.plan.name,
                      self.plan.sampling.population, type(self.plan.sampling).__name__, self.mode)

    def connect(self, grid, population: int) -> "DpFedMetaStrategy":
        """Waits for the population's clients, asks each its partition-id and query size and checks that
        they are 0..population-1, one node each, one query size (else ValueError, before any step); returns
        this strategy (its :attr:`population`, what the server knows of the clients' tasks, is set)."""
        self.grid = grid
        deadline = time.monotonic() + self.timeout
        nodes = list(grid.get_node_ids())
        while len(nodes) < population and time.monotonic() < deadline:
            self._wait()
            nodes = list(grid.get_node_ids())
        if len(nodes) != population:
            raise ValueError(f"the plan's sampling.population is {population} clients, but {len(nodes)} are connected")
        asks = [Message(RecordDict(), dst_node_id=n, message_type="query") for n in nodes]
        found: Dict[int, int] = {}
        queries: set = set()
        for reply in self._exchange(asks):
            if reply.has_error():
                raise ValueError(f"client node {reply.metadata.src_node_id} did not say its partition-id: "
                                 f"{reply.error.reason}")
            said = reply.content["client"]
            pid = int(said["partition-id"])
            if pid in found:
                raise ValueError(f"two client nodes say partition-id {pid}: each task of the population is one client")
            found[pid] = reply.metadata.src_node_id
            if "query-per-task" in said:
                queries.add(int(said["query-per-task"]))
        if sorted(found) != list(range(population)):
            raise ValueError(f"the clients' partition-ids must be 0..{population - 1} (the plan's population), got "
                             f"{sorted(found)[:10]}{'...' if len(found) > 10 else ''}")
        if len(queries) > 1:
            raise ValueError(f"the clients' tasks have {sorted(queries)} query examples: the plan's release states one "
                             "query_per_task for every task")
        self.node_of = found
        self.population = Population(population, queries.pop() if queries else None)
        return self

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

    # -- one step: Flower's hooks, called by the trainer's engine call --------------------------------
    def configure_train(self, server_round: int, arrays, config, grid) -> List[Message]:
        """One ``train`` message (``arrays``, ``config``) to each client the plan's sampler drew for this step
        (set by :meth:`clipped_sum`), and to no other."""
        step = self._step
        step.messages = [Message(RecordDict({"arrays": arrays, "config": config}), dst_node_id=self.node_of[i],
                                 message_type="train", group_id=str(server_round)) for i in step.selected]
        return step.messages

    def aggregate_train(self, server_round: int, replies):
        """(the sum of the drawn clients' updates clipped to C, before the trainer's noise: never a model,
        this step's counts and mean loss). A client that failed, timed out or sent anything but a finite update
        of the model's names and shapes counts as a zero update (module docstring)."""
        step, replies = self._step, list(replies)
        n = len(step.messages)
        position = {m.metadata.message_id: j for j, m in enumerate(step.messages)}
        updates = {k: torch.zeros((n,) + tuple(v.shape), dtype=v.dtype) for k, v in step.params.items()}
        losses, answered = torch.zeros(n), torch.zeros(n, dtype=torch.bool)
        for reply in replies:
            j = position.get(reply.metadata.reply_to_message_id)
            if j is None or answered[j] or reply.has_error():
                continue
            update = _valid_update(reply, step.params)
            if update is None:
                continue
            for k, v in update.items():
                updates[k][j] = v
            losses[j] = _reply_loss(reply)
            answered[j] = True
        updates, step.norms = clip_or_measure(updates, step.threshold, step.clip_mode, step.raw_norms)
        step.total, step.losses = F.masked_sum(updates, None), losses
        got = int(answered.sum())
        counts = {"selected": n, "dropped": n - got}
        self.rounds.append(counts)
        self.losses.append(float(losses.sum()) / got if got else 0.0)
        return _arrays(step.total), MetricRecord(dict(counts, loss=self.losses[-1]))

    def configure_evaluate(self, server_round: int, arrays, config, grid) -> List[Message]:
        """No federated evaluation: the trainer evaluates the final model on held-out tasks."""
        return []

    def aggregate_evaluate(self, server_round: int, replies) -> None:
        return None

    # -- the trainer's engine -----------------------------------------------------------------------
    def clipped_sum(self, alg, model, params, tasks, rows, weights, loss_fn, c, run, contribution, threshold,
                    raw_norms):
        """``LocalEngine.clipped_sum`` with the clients computing: (sum of the clipped updates,
        their norms before clipping or None, losses), per trainer row (pads weigh 0 and stay 0)."""
        self.algorithm = c.algorithm
        drawn = torch.nonzero(weights > 0).flatten()
        self._step = _Step([int(i) for i in rows[drawn].tolist()], params, threshold, c.clip_mode, raw_norms)
        server_round = len(self.rounds) + 1
        state = {k: v.detach().cpu() for k, v in params.items()}
        messages = self.configure_train(server_round, _arrays(state), ConfigRecord(train_settings(c, server_round)),
                                        self.grid)
        self.aggregate_train(server_round, self._exchange(messages) if messages else [])
        step = self._step
        row_losses = torch.zeros(rows.numel(), dtype=step.losses.dtype)
        row_losses[drawn] = step.losses
        row_norms = None
        if step.norms is not None:
            row_norms = torch.zeros(rows.numel(), dtype=step.norms.dtype)
            row_norms[drawn] = step.norms
        return step.total, row_norms, row_losses

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
            "adversary": _ADVERSARY.get(self.algorithm, _ADVERSARY[None])}}


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



def _seconds(timeout) -> float:
    if isinstance(timeout, bool) or not (isinstance(timeout, (int, float)) and math.isfinite(timeout) and timeout > 0):
        raise ValueError(f"timeout must be a finite number of seconds > 0, got {timeout!r}")
    return float(timeout)


def _arrays(state: Dict[str, torch.Tensor]) -> "ArrayRecord":
    return ArrayRecord(torch_state_dict={k: v.detach().cpu() for k, v in state.items()})


def _record(into: Dict[int, Any], server_round: int, metrics) -> None:
    if metrics is not None:
        into[server_round] = metrics


# -- a ServerApp of your own ------------------------------------------------------------------------
def server_app(model: torch.nn.Module, config: TrainConfig, out_dir, *, plan, timeout: float = 600.0,
               **train_options) -> "ServerApp":
    """The ServerApp of a run of ``plan``: ``DpFedMetaStrategy(timeout=timeout).start(grid, model=model,
    config=config, out_dir=out_dir, plan=plan, **train_options)`` (``resume``, ``progress``, ``setup``, ...).
    For a deployment, pass ``resume=True``: a restarted server then continues the run in ``out_dir`` with
    every release on its ledgers still charged."""
    require_flwr()
    app = ServerApp()

    @app.main()
    def main(grid, context):
        DpFedMetaStrategy(timeout=timeout).start(grid, model=model, config=config, out_dir=out_dir, plan=plan,
                                                 **train_options)

    return app
