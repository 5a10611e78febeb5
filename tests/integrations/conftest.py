"""The ``flower`` fixture of the Flower tests: the engine module, with Flower's task identity set."""

import pytest


@pytest.fixture
def flower(monkeypatch):
    pytest.importorskip("flwr")
    from flwr.supercore.task_identity import TaskIdentity

    from metadp.training.engines import flower

    # who this process is, to Flower's Message constructor (a ServerApp process has it set by Flower)
    for name, value in (("_run_id", 1), ("_task_id", 1), ("_node_id", 0)):
        monkeypatch.setattr(TaskIdentity, name, getattr(TaskIdentity, name) or value)
    return flower
