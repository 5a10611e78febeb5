"""Meta-training throughput (tasks/s) of every trainer algorithm on Omniglot 5-way 1-shot, Conv-4.

Run: ``python benchmarks/train_speed.py [--device cuda] [--steps 20] [--meta-batch 32]``. Times whole
training steps (per-task meta-gradients by torch.func vmap; clipping, noise and the ledger appends with
fsync for the private ones; the optimiser update) on synthetic 28x28 glyphs shaped like Omniglot
episodes (the step's cost does not depend on the pixels). Prints tasks/s and the ratio to non-private
second-order MAML measured in the same run (targets on a GPU: MAML >= 2,000 tasks/s, task-level DP
>= 0.8x, sample-level >= 0.25x). All algorithms run with one inner step and Poisson task sampling.
"""

from __future__ import annotations

import argparse
import dataclasses
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

import torch  # noqa: E402

from metadp.training.data import sources as data  # noqa: E402

from metadp.training.algorithms import models  # noqa: E402

from metadp.training.data import tasks  # noqa: E402
from metadp.training.run.trainer import TrainConfig, train  # noqa: E402


def _tasks_per_second(config, device, repeats=3):
    images = data.synthetic_glyphs(100, 20, seed=0, device=device).images
    pool = tasks.EpisodePool(images, 20000, n_way=5, k_shot=1, k_query=1, seed=0)
    rates = []
    for r in range(repeats):
        model = models.Conv4(5, norm="batch").to(device)
        with tempfile.TemporaryDirectory() as out:
            start = time.perf_counter()
            result = train(model, pool, torch.nn.functional.cross_entropy, config, out, device=device)
            if device.startswith("cuda"):
                torch.cuda.synchronize()
            elapsed = time.perf_counter() - start
        rates.append(len(result.losses) * config.meta_batch / elapsed)
    return statistics.median(rates)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--meta-batch", type=float, default=32.0)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    print(f"machine: {platform.platform()}, {torch.get_num_threads()} torch threads, device {args.device}, "
          f"torch {torch.__version__}")
    common = dict(steps=args.steps, meta_batch=args.meta_batch, inner_steps=1, inner_lr=0.4, sampler="poisson")
    private = dict(clip=1.0, noise_multiplier=1.0, inner_clip=1.0, inner_noise=1.0)
    cases = [
        ("MAML, second order", TrainConfig(algorithm="maml", first_order=False, **common)),
        ("MAML, first order", TrainConfig(algorithm="maml", first_order=True, **common)),
        ("DP-MAML task-level, second order", TrainConfig(algorithm="dp-maml", first_order=False, **common, **private)),
        ("DP-MAML sample-level, first order", TrainConfig(algorithm="dp-maml-sample", first_order=True, **common,
                                                          **private)),
        ("DP-MAML sample-level, second order", TrainConfig(algorithm="dp-maml-sample", first_order=False, **common,
                                                           **private)),
        ("Reptile", TrainConfig(algorithm="reptile", outer_lr=1.0, **common)),
        ("DP-Reptile task-global", TrainConfig(algorithm="dp-reptile", outer_lr=1.0, **common, **private)),
        ("DP-AGR, second order", TrainConfig(algorithm="dp-agr", first_order=False, **common, **private)),
        ("DP-AGRLR, first order", TrainConfig(algorithm="dp-agrlr", first_order=True, **common, **private)),
    ]
    _tasks_per_second(dataclasses.replace(cases[0][1], steps=2), args.device, 1)  # warm-up, untimed
    base = None
    print(f"meta-batch {args.meta_batch:g}, 1 inner step, {args.steps} steps, median of {args.repeats} runs")
    for name, config in cases:
        rate = _tasks_per_second(config, args.device, args.repeats)
        base = base or rate
        print(f"{name:36s} {rate:9.1f} tasks/s  = {rate / base:5.2f}x second-order MAML")
    print("(timings include each run's first-step warm-up, its setup and the ledger appends with fsync)")


if __name__ == "__main__":
    main()
