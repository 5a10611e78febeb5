"""``metadp train ALGO --engine flower --plan FILE``: the plan's run as metadp's Flower App under ``flwr run``.

:func:`run_plan` checks every refusal of the trainer before any process starts, writes the job
(``flower_launch.encode_job``), starts the federation of the mode (``flower_launch.Federation``:
``simulation``, ``local`` or ``superlink``), runs ``flwr run`` while its progress bar follows the run
folder's ledger, stops every process it started, and returns the server's result (``TrainResult``).
The ServerApp writes the run folder exactly as the local trainer does (ledgers, checkpoints,
``privacy_report.json``, with ``"engine": "flower"`` and ``federated.mode``); a refusal on the server
(e.g. the clients' partition-ids) comes back as the same ``ValueError`` with its message. Ctrl-C stops
the federation and raises ``TrainingInterrupted``: the ledgers hold every release, ``--resume`` continues.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any, Callable, Dict, Optional

import torch

from metadp.training.engines import flower
from metadp.training.engines.flower_launch import Federation, FederationError, app_folder, encode_job
from metadp.training.run.config import TrainConfig, TrainResult
from metadp.training.run.trainer import TrainingInterrupted, check_run

__all__ = ["run_plan"]


def _ledger_count(out: Path) -> int:
    """Releases on the run folder's longest ledger (the progress bar's step)."""
    most = 0
    for ledger in out.glob("ledger-*.jsonl"):
        try:
            with open(ledger, "rb") as f:
                most = max(most, sum(1 for _ in f) - 1)  # the first line is the ledger's header
        except OSError:
            continue
    return most


def _loss(out: Path) -> float:
    """The last metric line's loss (NaN before the first)."""
    try:
        last = (out / "metrics.jsonl").read_text(encoding="utf-8").strip().rsplit("\n", 1)[-1]
        return float(json.loads(last).get("loss", math.nan))
    except (OSError, ValueError, AttributeError):
        return math.nan


def _keep_logs(work: Path, out: Path) -> Path:
    """A failed run's Flower logs, copied into ``out/flower-logs`` (the work folder is removed)."""
    target = out / "flower-logs"
    if out.is_dir():
        shutil.copytree(work / "logs", target, dirs_exist_ok=True)
        return target
    return work / "logs"


def _outcome(handoff: Path, code: int, logs: Callable[[], Path], warn) -> Optional[TrainResult]:
    """The server's result, its refusal raised as the local trainer raises it, or None (no handoff came back)."""
    if (handoff / "warnings.json").exists() and warn is not None:
        for note in json.loads((handoff / "warnings.json").read_text(encoding="utf-8")):
            warn(note)
    if (handoff / "error.json").exists():
        error = json.loads((handoff / "error.json").read_text(encoding="utf-8"))
        if error["kind"] == "refusal":
            raise ValueError(error["message"])
        if error["kind"] == "interrupted":
            raise TrainingInterrupted(error["message"])
        raise FederationError(f"the Flower server failed: {error['type']}: {error['message']} (logs: {logs()})")
    if (handoff / "result.pt").exists():
        return TrainResult(**torch.load(handoff / "result.pt", weights_only=False))
    if code != 0:
        raise FederationError(f"flwr run ended with exit code {code} before the server's run finished (logs: {logs()})")
    return None


def run_plan(config: TrainConfig, out, *, plan, table: Dict[str, Any], tasks: "flower.SimulatedTasks",
             mode: str = "simulation", superlink: Optional[str] = None, root_certificates: Optional[str] = None,
             timeout: float = 600.0, progress: Optional[Callable[[int, float, float], None]] = None,
             resume: bool = False, resume_changed: bool = False, setup: Optional[dict] = None,
             warn: Optional[Callable[[str], None]] = None,
             started: Optional[Callable[[Federation], None]] = None, app=None) -> Optional[TrainResult]:
    """Runs ``plan`` (its ``table``, as a plan file holds it) on Flower: one client per task of its population,
    each building its task from ``tasks`` on its own machine.

    ``mode``: ``simulation`` (Flower's simulation engine), ``local`` (a SuperLink and one SuperNode process
    per client on loopback) or ``superlink`` (an existing SuperLink at ``superlink``). ``timeout``: seconds
    the server waits for a round's replies. ``started(federation)`` is called once its processes run (tests
    stop one of them there). ``app``: a Flower App folder of your own to run instead of metadp's (its
    ServerApp must run the job: ``metadp.training.engines.flower_app.server``; e.g. your ClientApp).

    Returns None only where the run finished on a SuperLink whose machine cannot leave the result here.

    Raises:
        ValueError: a refusal (the trainer's, before anything starts, or the server's).
        TrainingInterrupted: Ctrl-C; every release is on the ledgers and ``resume=True`` continues.
        FederationError: a Flower process failed (the message names its logs, kept in ``out/flower-logs``).
    """
    population = plan.sampling.population
    # the clients' query size is checked on the server, where they say it (DpFedMetaStrategy.connect)
    stated = plan.release.query_per_task if plan.release is not None else None
    check_run(flower.Population(population, stated), config, out, resume=resume, resume_changed=resume_changed,
              setup=setup, plan=plan)
    out = Path(out).resolve()
    with tempfile.TemporaryDirectory(prefix="metadp-flower-") as folder:
        work = Path(folder)
        handoff = work / "handoff"
        handoff.mkdir()
        job = {"plan": table, "config": dataclasses.asdict(config), "tasks": dataclasses.asdict(tasks), "out": str(out),
               "resume": resume, "resume_changed": resume_changed, "setup": setup, "timeout": float(timeout),
               "mode": mode, "handoff": str(handoff), "launcher": os.getpid() if mode != "superlink" else None}
        federation = Federation(work, mode, clients=population, superlink=superlink,
                                root_certificates=root_certificates)
        shown = [-1]

        def watch():
            done = _ledger_count(out)
            if progress is not None and done != shown[0]:
                shown[0] = done
                progress(done, _loss(out), math.nan)

        try:
            with federation:
                if started is not None:
                    started(federation)
                code, _ = federation.run(app_folder(work, app), {"job": encode_job(job)}, watch=watch)
        except KeyboardInterrupt:
            raise TrainingInterrupted(f"interrupted: the Flower federation was stopped ({_ledger_count(out)} releases on "
                                      f"the ledgers of {out}); --resume continues without losing one") from None
        except FederationError as err:
            kept = _keep_logs(work, out)
            raise FederationError(f"{str(err).replace(str(work / 'logs'), str(kept))}; every release made is on the "
                                  f"ledgers in {out}: --resume continues the run") from None
        return _outcome(handoff, code, lambda: _keep_logs(work, out), warn)

