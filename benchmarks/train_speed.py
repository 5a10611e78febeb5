"""Meta-training throughput (tasks/s) of the trainer's algorithms on Omniglot-shaped 5-way 1-shot episodes, Conv-4.

Run: ``python benchmarks/train_speed.py [--device cuda] [--steps 20] [--meta-batch 32] [--nproc 2] [--json FILE]``.

Times training steps (the median time between steps after the first) of ``metadp.training.run.trainer.train`` (per-task meta-gradients by
torch.func vmap; clipping, noise and the ledger appends with fsync for the private ones; the optimiser
update) on synthetic 28x28 glyphs shaped like Omniglot episodes (a step's cost does not depend on the
pixels). Each private algorithm is printed beside the non-private algorithm of the same order, measured in
the same run, and the ratio is the issue's target:

* task-level DP-MAML >= 0.8x MAML (the same order);
* sample-level DP-MAML >= 0.25x MAML (the same order);
* on a GPU, first-order MAML >= 2,000 tasks/s.

``--nproc N`` also times first-order MAML and task-level DP-MAML with N processes
(``metadp.training.engines.distributed``, gloo on CPU, NCCL on CUDA with one GPU a process) and prints the
scaling over one process. All algorithms run with one inner step and Poisson task sampling.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

import torch  # noqa: E402

from metadp.training.algorithms import models  # noqa: E402
from metadp.training.data import sources as data  # noqa: E402
from metadp.training.data import tasks  # noqa: E402
from metadp.training.run.trainer import TrainConfig, train  # noqa: E402

PRIVATE = dict(clip=1.0, noise_multiplier=1.0, inner_clip=1.0, inner_noise=1.0)
# (name, the non-private baseline's name or None, algorithm, first order, target ratio to the baseline)
CASES = [
    ("MAML, second order", None, "maml", False, None),
    ("DP-MAML task-level, second order", "MAML, second order", "dp-maml", False, 0.8),
    ("DP-MAML sample-level, second order", "MAML, second order", "dp-maml-sample", False, 0.25),
    ("MAML, first order", None, "maml", True, None),
    ("DP-MAML task-level, first order", "MAML, first order", "dp-maml", True, 0.8),
    ("DP-MAML sample-level, first order", "MAML, first order", "dp-maml-sample", True, 0.25),
    ("DP-AGR, second order", "MAML, second order", "dp-agr", False, 0.8),
    ("DP-AGRLR, first order", "MAML, first order", "dp-agrlr", True, 0.25),
    ("Reptile", None, "reptile", False, None),
    ("DP-Reptile task-global", "Reptile", "dp-reptile", False, 0.25),
]


def _config(algorithm, first_order, steps, meta_batch):
    extra = PRIVATE if algorithm not in ("maml", "reptile") else {}
    lr = dict(outer_lr=1.0) if "reptile" in algorithm else {}
    return TrainConfig(algorithm=algorithm, first_order=first_order, steps=steps, meta_batch=meta_batch,
                       inner_steps=1, inner_lr=0.4, sampler="poisson", **extra, **lr)


def _setup(device):
    images = data.synthetic_glyphs(100, 20, seed=0, device=device).images
    pool = tasks.EpisodePool(images, 20000, n_way=5, k_shot=1, k_query=1, seed=0)
    torch.manual_seed(0)
    return models.Conv4(5, norm="batch").to(device), pool


def _step_seconds(config, device):
    """The seconds of each step of one run of ``config`` after its first (warm-up) step: the time between the
    trainer's progress calls, so a run's setup and final report are not counted."""
    model, pool = _setup(device)
    stamps = []

    def progress(step, loss, epsilon):
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        stamps.append(time.perf_counter())

    with tempfile.TemporaryDirectory() as out:
        train(model, pool, torch.nn.functional.cross_entropy, config, out, device=device, progress=progress)
    return [b - a for a, b in zip(stamps, stamps[1:])]


def _rate(config, seconds) -> float:
    return config.meta_batch / statistics.median(seconds)


def tasks_per_second(config, device, repeats=3) -> float:
    """Expected tasks a step over the median step time, pooled over ``repeats`` runs."""
    return _rate(config, [s for _ in range(repeats) for s in _step_seconds(config, device)])


def _rank(rank, nproc, store, device, config, repeats, result):
    """One process of a timed many-process run (torch.multiprocessing.spawn)."""
    import torch.distributed as dist

    torch.set_num_threads(max(1, (os.cpu_count() or 1) // nproc))
    cuda = device.startswith("cuda")
    if cuda:
        torch.cuda.set_device(rank)
        device = f"cuda:{rank}"
    dist.init_process_group("nccl" if cuda else "gloo", init_method=f"file://{store}", rank=rank, world_size=nproc)
    seconds = []
    for _ in range(repeats):
        dist.barrier()
        seconds += _step_seconds(config, device)
    if rank == 0:
        Path(result).write_text(json.dumps(_rate(config, seconds)))
    dist.destroy_process_group()


def tasks_per_second_processes(config, device, nproc, repeats=3) -> float:
    import torch.multiprocessing as mp

    with tempfile.TemporaryDirectory() as folder:
        result = Path(folder) / "rate.json"
        mp.spawn(_rank, args=(nproc, str(Path(folder) / "store"), device, config, repeats, str(result)),
                 nprocs=nproc, join=True)
        return json.loads(result.read_text())


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--meta-batch", type=float, default=32.0)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--nproc", type=int, default=1, help="also time N processes (torch.distributed)")
    parser.add_argument("--only", help="case names to run, separated by ';' (default: all)")
    parser.add_argument("--json", metavar="FILE", help="also write the measurements as JSON")
    args = parser.parse_args(argv)
    card = torch.cuda.get_device_name(0) if args.device.startswith("cuda") else platform.processor() or "cpu"
    print(f"machine: {platform.platform()}; {os.cpu_count()} CPUs, {torch.get_num_threads()} torch threads; device "
          f"{args.device} ({card}); torch {torch.__version__}")
    print(f"meta-batch {args.meta_batch:g} (Poisson), 1 inner step, {args.steps} steps, median of {args.repeats} runs")
    chosen = [c for c in CASES if args.only is None or c[0] in args.only.split(";")]
    tasks_per_second(_config("maml", True, 2, args.meta_batch), args.device, 1)  # warm-up, untimed
    rates, rows = {}, []
    for name, base, algorithm, first_order, target in chosen:
        rate = tasks_per_second(_config(algorithm, first_order, args.steps, args.meta_batch), args.device, args.repeats)
        rates[name] = rate
        ratio = rate / rates[base] if base in rates else None
        met = "" if ratio is None or target is None else ("  target >= %.2fx: %s" % (target, "met" if ratio >= target
                                                                                      else "NOT met"))
        against = f"= {ratio:5.2f}x {base}" if ratio is not None else ""
        print(f"{name:36s} {rate:9.1f} tasks/s  {against}{met}", flush=True)
        rows.append(dict(name=name, algorithm=algorithm, first_order=first_order, tasks_per_second=rate,
                         baseline=base, ratio=ratio, target=target))
    if args.device.startswith("cuda") and "MAML, first order" in rates:
        rate = rates["MAML, first order"]
        print(f"GPU target, first-order MAML >= 2,000 tasks/s: {rate:.0f} ({'met' if rate >= 2000 else 'NOT met'})")
    scaling = []
    if args.nproc > 1:
        print(f"\nscaling, {args.nproc} processes (torch.distributed) over 1, the same steps and lot:")
        for algorithm in ("maml", "dp-maml"):
            config = _config(algorithm, True, args.steps, args.meta_batch)
            one = tasks_per_second(config, args.device, args.repeats)
            many = tasks_per_second_processes(config, args.device, args.nproc, args.repeats)
            print(f"{algorithm + ', first order':36s} 1: {one:9.1f}  {args.nproc}: {many:9.1f} tasks/s  = "
                  f"{many / one:5.2f}x", flush=True)
            scaling.append(dict(algorithm=algorithm, first_order=True, one=one, many=many, processes=args.nproc))
    print("(median step time after each run's first step: per-task gradients, clipping, noise, the ledger appends "
          "with fsync and the update; not the run's setup or final report)")
    if args.json:
        Path(args.json).write_text(json.dumps(dict(device=args.device, card=card, torch=torch.__version__,
                                                   steps=args.steps, meta_batch=args.meta_batch, cases=rows,
                                                   scaling=scaling), indent=1))


if __name__ == "__main__":
    main()
