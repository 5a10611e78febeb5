"""A many-process run through the ``train`` API, for ``test_distributed.py``: ``python distributed_case.py OUT
NPROC [ALGORITHM [STEPS]]`` starts NPROC processes (torch.multiprocessing, gloo, a file rendezvous), each calling
``train`` with the same arguments; every rank logs the task rows it computed each step (``rows-<rank>.json``)
and rank 0 saves the result's parameters (``params.pt``)."""

import json
import os
import sys
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from metadp.training.algorithms import models
from metadp.training.data import tasks
from metadp.training.engines import distributed
from metadp.training.run.trainer import TrainConfig, train

CONFIG = dict(steps=60, meta_batch=20.0, inner_steps=1, inner_lr=0.01, outer_lr=0.01, clip=1.0, noise_multiplier=1.0,
              inner_clip=1.0, inner_noise=1.0, sampler="poisson", seed=3)


def setup(algorithm: str, steps: int):
    pool = tasks.SinusoidPool(200, 10, 10, seed=0)
    torch.manual_seed(0)
    model = models.MLP((1, 16, 1))
    return model, pool, TrainConfig(algorithm=algorithm, chunk_size=7, **dict(CONFIG, steps=steps))


def _loss(out, y):
    return ((out - y) ** 2).mean()


def _rank(rank: int, nproc: int, out: str, algorithm: str, steps: int) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{out}/rendezvous", rank=rank, world_size=nproc)
    seen = []
    original = distributed._part_sum

    def logged(alg, model, params, pool, rows, weights, *rest):
        part = rest[-1]
        kept = rows[part][weights[part] > 0]
        seen[-1].extend(int(r) for r in kept)
        return original(alg, model, params, pool, rows, weights, *rest)

    distributed._part_sum = logged
    model, pool, config = setup(algorithm, steps)
    step_start = distributed.Leader.clipped_sum if rank == 0 else None

    if rank == 0:
        def marked(self, *args, **kwargs):
            seen.append([])
            return step_start(self, *args, **kwargs)
        distributed.Leader.clipped_sum = marked
    else:  # a worker's step starts with the chunk that carries the parameters
        original_send = distributed._send

        def send(obj):
            msg = original_send(obj)
            if msg["kind"] == "chunk" and msg["params"]:
                seen.append([])
            return msg
        distributed._send = send
    result = train(model, pool, _loss, config, Path(out) / "run")
    Path(out, f"rows-{rank}.json").write_text(json.dumps(seen))
    if rank == 0:
        torch.save(result.params, Path(out) / "params.pt")
    dist.destroy_process_group()


if __name__ == "__main__":
    out, nproc = sys.argv[1], int(sys.argv[2])
    algorithm = sys.argv[3] if len(sys.argv) > 3 else "dp-maml"
    steps = int(sys.argv[4]) if len(sys.argv) > 4 else CONFIG["steps"]
    os.makedirs(out, exist_ok=True)
    mp.spawn(_rank, args=(nproc, out, algorithm, steps), nprocs=nproc, join=True)
