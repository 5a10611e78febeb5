"""What the Flower tests share: an in-process stand-in for Flower's Grid that calls the real ClientApp,
the clients' sinusoid tasks, the run settings (the ``flower`` fixture is in conftest.py)."""

import math
import uuid

import torch

from metadp.training import algorithms
from metadp.training.algorithms import models
from metadp.training.data import tasks
from metadp.training.run.config import TrainConfig
from metadp.training.run.plan_run import plan_settings
from metadp.training.run.state import stream_seed


def _mse(out, y):
    return ((out - y) ** 2).mean()


def _model():
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(stream_seed(0, "model"))
        return models.MLP()


def _config(algorithm, plan, **extra):
    extra.setdefault("checkpoint_every", 50)  # a plan run's checkpoint computes the plan's report (~0.1 s)
    settings = {"first_order": True, "inner_lr": 0.01, **plan_settings(plan, algorithms.get(algorithm)), **extra}
    return TrainConfig(algorithm=algorithm, **settings)


class InProcessGrid:
    """Flower's Grid, in this process: each pushed message is answered at once by the real ClientApp
    (an exception becomes Flower's error reply, as the simulation's workers make it); partitions in
    ``silent`` never answer train messages. Node ids are not in partition order."""

    def __init__(self, app, population, *, silent=(), garbage=None):
        from flwr.app import Context, Error, Message, RecordDict

        self._flwr = (Context, Error, Message, RecordDict)
        self.app, self.population, self.silent = app, population, set(silent)
        self.garbage = dict(garbage or {})  # partition id -> what it sends instead of its update
        self.partition_of = {10_007 * (i + 3) % 99_991 + 1: i for i in range(population)}
        self.asked = {}  # step (the message's group id) -> partition ids sent a train message, in order
        self._replies = {}

    def get_node_ids(self):
        return list(self.partition_of)

    def push_messages(self, messages):
        Context, Error, Message, RecordDict = self._flwr
        ids = []
        for m in messages:
            m.metadata.__dict__["_message_id"] = uuid.uuid4().hex  # as Flower's grids number them
            ids.append(m.metadata.message_id)
            pid = self.partition_of[m.metadata.dst_node_id]
            if m.metadata.message_type == "train":
                self.asked.setdefault(int(m.metadata.group_id), []).append(pid)
                if pid in self.silent:
                    continue
            context = Context(run_id=1, node_id=m.metadata.dst_node_id, state=RecordDict(), run_config={},
                              node_config={"partition-id": pid, "num-partitions": self.population})
            try:
                reply = self.app(m, context)
                if m.metadata.message_type == "train" and pid in self.garbage:
                    reply.content["arrays"] = self.garbage[pid](reply.content["arrays"])
                self._replies[m.metadata.message_id] = reply
            except Exception as err:  # noqa: BLE001 - a failing client, as the simulation reports it
                self._replies[m.metadata.message_id] = Message(Error(code=0, reason=repr(err)), reply_to=m)
        return ids

    def pull_messages(self, ids):
        return [self._replies.pop(i) for i in list(ids) if i in self._replies]


class Tasks:
    """The clients' tasks: sinusoid task ``partition-id`` of one pool; ``fail`` raise, ``nan`` send NaN."""

    def __init__(self, population, fail=(), nan=()):
        self.pool, self.fail, self.nan = tasks.SinusoidPool(population, 10, 10, seed=0), set(fail), set(nan)
        self.model = models.MLP()

    def __call__(self, pid):
        from metadp.training.engines.flower import ClientTask

        if pid in self.fail:
            raise RuntimeError(f"client {pid} crashed")
        return ClientTask(self.model, self.pool, pid, _nan_mse if pid in self.nan else _mse)


def _nan_mse(out, y):
    return _mse(out, y) * math.nan


