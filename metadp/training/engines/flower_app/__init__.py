"""The Flower App metadp ships (this folder's ``pyproject.toml`` names ``server`` and ``client`` below):
DP-FedMeta with metadp's trainer as the ServerApp and one task per ClientApp.

``metadp train ALGO --engine flower --plan FILE`` runs it with ``flwr run`` (``flower_run``); everything
the apps need travels in the run config's ``job``: base64 of a JSON object (``flower_launch.encode_job``) with the
plan's table, the run's ``TrainConfig``, the clients' tasks (``flower.SimulatedTasks``: the data set, pool
and seed every client builds its own task from), the run folder, resume flags, the engine's mode, the
client timeout, the launcher's process id where it runs on this machine (the server stops when it is
gone), and ``handoff``, a folder where the server leaves its result (``result.pt``), the
trainer's warnings (``warnings.json``) or its refusal (``error.json``) for the command that launched it.
The run folder and the handoff are paths on the SuperLink's machine.

* ``server``: ``flower.DpFedMetaStrategy(...).start(grid, model=..., config=..., out_dir=..., plan=...)``:
  waits for the plan's population of clients, then runs the local trainer's loop, ledgers and report,
  with the clients computing each step's per-task updates.
* ``client``: ``flower.client_app()``: a SuperNode's ``partition-id`` is its task of the pool.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import os
import signal
import threading
import time
import traceback
import warnings
from pathlib import Path
from typing import Any, Dict

import torch

from metadp.plan import Plan
from metadp.training.engines import flower
from metadp.training.engines.flower_launch import decode_job
from metadp.training.run.config import TrainConfig
from metadp.training.run.trainer import ResumeWarning

__all__ = ["server", "client", "run_job"]

_EXIT_GRACE = 15.0  # seconds after SIGINT before a server whose launcher is gone exits regardless


def _tasks(job: Dict[str, Any]) -> flower.SimulatedTasks:
    return flower.SimulatedTasks(**job["tasks"])


def _write(handoff, name: str, write) -> None:
    if handoff:
        folder = Path(handoff)
        if folder.is_dir():
            write(folder / name)


def _watch_launcher(pid: int) -> None:
    """SIGINT to this process when the ``metadp train`` that launched the federation on this machine is gone
    (killed, even by SIGKILL): the trainer stops as on Ctrl-C, its ledgers complete, and the run folder's lock
    is released for ``--resume`` (Flower's own parent monitor may not reach a simulation's server)."""
    def watch() -> None:
        while True:
            time.sleep(0.5)
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                signal.raise_signal(signal.SIGINT)
                time.sleep(_EXIT_GRACE)  # the trainer stopped, its lock released; Flower may retry a dead SuperLink
                os._exit(130)
            except PermissionError:
                continue

    threading.Thread(target=watch, daemon=True, name="metadp-launcher-watch").start()


def run_job(grid, job: Dict[str, Any]):
    """The server's side of ``job`` on ``grid``: the TrainResult (the run folder holds everything else)."""
    if job.get("launcher") is not None:
        _watch_launcher(int(job["launcher"]))
    plan = Plan.from_dict(job["plan"])
    config = TrainConfig(**job["config"])
    model = copy.deepcopy(flower.model_of(_tasks(job)))
    strategy = flower.DpFedMetaStrategy(timeout=float(job["timeout"]), mode=job["mode"])
    notes = []
    try:
        with warnings.catch_warnings(record=True) as caught:  # a resumed run's ResumeWarning, for the launcher
            warnings.simplefilter("always", ResumeWarning)
            strategy.start(grid, model=model, config=config, out_dir=job["out"], plan=plan, resume=bool(job["resume"]),
                           resume_changed=bool(job["resume_changed"]), setup=job["setup"], warn=notes.append)
        notes.extend(str(w.message) for w in caught if issubclass(w.category, ResumeWarning))
        return strategy.result
    finally:
        _write(job.get("handoff"), "warnings.json", lambda p: p.write_text(json.dumps(notes)))


server = flower.ServerApp() if flower.flwr is not None else None
client = flower.client_app() if flower.flwr is not None else None

if server is not None:
    @server.main()
    def _main(grid, context) -> None:
        job = decode_job(str(context.run_config.get("job", "")))
        try:
            result = run_job(grid, job)
        except BaseException as err:  # noqa: B036 - the launcher reads it; Flower would only log it
            kind = ("refusal" if isinstance(err, ValueError) else "interrupted" if isinstance(err, KeyboardInterrupt)
                    else "failure")
            _write(job.get("handoff"), "error.json", lambda p: p.write_text(json.dumps({
                "kind": kind, "type": type(err).__name__, "message": str(err),
                "trace": "".join(traceback.format_exception(type(err), err, err.__traceback__))})))
            raise
        _write(job.get("handoff"), "result.pt", lambda p: torch.save(dataclasses.asdict(result), p))
