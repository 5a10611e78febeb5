"""The processes of a many-process run: ``metadp train ... --nproc N`` and ``torchrun``.

``launch`` starts N copies of the same ``metadp train`` command on this machine, each with the environment
``torchrun`` gives its workers (``RANK``, ``LOCAL_RANK``, ``WORLD_SIZE``, ``LOCAL_WORLD_SIZE``) and a file
rendezvous in a fresh temporary folder (no port is opened to anything but loopback, no port race), waits
for them, and stops them all when one fails: that process's own error is the message (rank 0 prints the
run's refusals and results; the other ranks print nothing but their own crash). A process killed by a
signal is said in one line, with what the ledgers keep and how to continue (``--resume``).

``init_from_env`` is what each process (or a ``torchrun`` worker) runs first: the process group from that
environment (gloo on CPU; NCCL on CUDA, one device per local rank). Training itself is
``metadp.training.engines.distributed``.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from datetime import timedelta
from typing import List, Sequence

__all__ = ["rank", "world_size", "init_from_env", "launch", "INIT_ENV"]

INIT_ENV = "METADP_DIST_INIT"  # the process group's init method (launch sets a file://; torchrun: env://)


def world_size() -> int:
    try:
        return int(os.environ.get("WORLD_SIZE", "1"))
    except ValueError:
        return 1


def rank() -> int:
    """This process's rank (0 outside a many-process run)."""
    try:
        return int(os.environ.get("RANK", "0")) if world_size() > 1 else 0
    except ValueError:
        return 0


def init_from_env(device: str) -> str:
    """Joins the process group the environment describes (``launch``'s or ``torchrun``'s) and returns the device
    this rank trains on (``cuda:LOCAL_RANK`` for CUDA). Outside a many-process run: ``device`` unchanged."""
    if world_size() < 2:
        return device
    import torch
    import torch.distributed as dist

    cuda = device.startswith("cuda")
    if cuda:
        local = int(os.environ.get("LOCAL_RANK", "0"))
        if local >= torch.cuda.device_count():
            raise ValueError(f"local rank {local} has no CUDA device (this machine has {torch.cuda.device_count()}): "
                             "start at most one process per GPU")
        device = f"cuda:{local}"
        torch.cuda.set_device(local)
    if not dist.is_initialized():
        # long: rank 0 certifies plans and writes checkpoints between steps while the others wait
        dist.init_process_group("nccl" if cuda else "gloo", init_method=os.environ.get(INIT_ENV, "env://"),
                                rank=int(os.environ["RANK"]), world_size=world_size(), timeout=timedelta(hours=2))
    return device


def _signal_name(code: int) -> str:
    try:
        return signal.Signals(-code).name
    except ValueError:
        return f"signal {-code}"


def launch(argv: Sequence[str], nproc: int, out: str, python: str = sys.executable) -> int:
    """Runs ``python -m metadp *argv`` as ``nproc`` processes of one run and returns the exit status (the first
    failing process's; 0 when all succeed)."""
    store = tempfile.mkdtemp(prefix="metadp-rendezvous-")
    threads = max(1, (os.cpu_count() or 1) // nproc)
    procs: List[subprocess.Popen] = []
    try:
        for r in range(nproc):
            env = dict(os.environ, RANK=str(r), LOCAL_RANK=str(r), WORLD_SIZE=str(nproc), LOCAL_WORLD_SIZE=str(nproc),
                       GROUP_RANK="0", **{INIT_ENV: f"file://{store}/rendezvous"})
            env.setdefault("OMP_NUM_THREADS", str(threads))
            if r:
                env["METADP_HEARTBEAT_SECONDS"] = "0"  # rank 0 says how the run goes
            procs.append(subprocess.Popen([python, "-m", "metadp", *argv], env=env,
                                          stdout=None if r == 0 else subprocess.DEVNULL))
        print(f"metadp: {nproc} processes (torch.distributed; pids {', '.join(str(p.pid) for p in procs)}, "
              f"ranks 0-{nproc - 1}); rank 0 writes the run", file=sys.stderr, flush=True)
        return _wait(procs, out)
    except KeyboardInterrupt:  # the processes got the same SIGINT: rank 0 says where it stopped
        _stop(procs, grace=30.0)
        return 130
    finally:
        _stop(procs, grace=10.0)
        shutil.rmtree(store, ignore_errors=True)


def _wait(procs: List[subprocess.Popen], out: str) -> int:
    while True:
        codes = [p.poll() for p in procs]
        failed = next(((r, c) for r, c in enumerate(codes) if c not in (None, 0)), None)
        if failed is not None:
            r, code = failed
            _stop(procs, grace=10.0)
            if code < 0:
                print(f"metadp: error: process rank {r} (pid {procs[r].pid}) was killed by {_signal_name(code)}; the "
                      f"other processes were stopped. Every release made is on the ledgers in {out} (each is written "
                      "before it is used): continue with --resume", file=sys.stderr)
                return 1
            return code
        if all(c == 0 for c in codes):
            return 0
        time.sleep(0.1)


def _stop(procs: List[subprocess.Popen], grace: float) -> None:
    """SIGTERM to every process still running, SIGKILL after ``grace`` seconds."""
    alive = [p for p in procs if p.poll() is None]
    for p in alive:
        p.terminate()
    deadline = time.monotonic() + grace
    for p in alive:
        try:
            p.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
