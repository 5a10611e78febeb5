"""Sinusoid regression (10-shot, 1 inner step): MAML against each private trainer at a fixed budget.

Run: ``python benchmarks/sinusoid_curves.py [--steps 5000] [--epsilon 4] [--out runs/sinusoid_curves]``.
Each algorithm trains on a fixed pool of 10,000 tasks (Poisson rate 25/10,000, or one pass for DP-AGR
and DP-Reptile); the noise is calibrated so that the asked steps spend ``--epsilon`` of the
algorithm's default unit at delta 1e-5 (PLD, certified), and every other guarantee of the run is
printed too. Prints the meta-test MSE on 600 fresh tasks (mean and 95% interval), writes the training
curves (loss per step) and each run's privacy report under ``--out``, and a plot if matplotlib is
installed. Not a timed benchmark.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

import torch  # noqa: E402

from metadp.report import format_upper  # noqa: E402
from metadp.training.run import evaluate  # noqa: E402
from metadp.training.algorithms import models  # noqa: E402
from metadp.training.data import tasks  # noqa: E402
from metadp.training.run.trainer import TrainConfig, calibrate, train  # noqa: E402


def mse(out, y):
    return ((out - y) ** 2).mean()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=5000)
    parser.add_argument("--epsilon", type=float, default=4.0)
    parser.add_argument("--out", default="runs/sinusoid_curves")
    parser.add_argument("--replot", action="store_true", help="only redraw curves.png from --out/summary.json")
    args = parser.parse_args()
    out = Path(args.out)
    if args.replot:
        _plot(json.loads((out / "summary.json").read_text()), out)
        return
    out.mkdir(parents=True, exist_ok=True)
    pool = tasks.SinusoidPool(10000, 10, 10, seed=0)
    common = dict(steps=args.steps, meta_batch=25, inner_steps=1, inner_lr=0.01, first_order=False, delta=1e-5,
                  clip=1.0, inner_clip=1.0, checkpoint_every=max(1, args.steps // 10))
    cases = [
        ("maml", dict(algorithm="maml")),
        ("dp-maml", dict(algorithm="dp-maml", epsilon=args.epsilon)),
        ("dp-maml-sample", dict(algorithm="dp-maml-sample", epsilon=args.epsilon, first_order=True)),
        ("dp-agr", dict(algorithm="dp-agr", epsilon=args.epsilon)),
        ("reptile", dict(algorithm="reptile", outer_lr=1.0, inner_steps=3, inner_lr=0.02)),
        ("dp-reptile", dict(algorithm="dp-reptile", outer_lr=1.0, inner_steps=3, inner_lr=0.02, epsilon=args.epsilon)),
    ]
    summary = {}
    print("every epsilon: certified upper bound (PLD) at delta 1e-5, per privacy view (unit, relation)")
    for name, extra in cases:
        config = TrainConfig(**{**common, **extra})
        if config.private:
            config = calibrate(pool, config)
        torch.manual_seed(0)
        start = time.perf_counter()
        result = train(models.MLP(), pool, mse, config, out / name)
        score = evaluate.evaluate_sinusoid(models.MLP(), result.params, n_tasks=600, steps=config.inner_steps,
                                           lr=config.inner_lr)
        guarantees = "; ".join(f"{v['view']} ({v['relation']}) eps<={format_upper(v['epsilon'], 3)}"
                               if v["epsilon"] is not None else
                               f"{v['view']} none" for v in result.report["views"]) or "non-private"
        print(f"{name:15s} steps {len(result.losses):5d}  z={config.noise_multiplier:.3g} z_in={config.inner_noise:.3g}"
              f"  test MSE {score.mean:.3f} +- {score.half_width:.3f}  ({guarantees})  "
              f"{time.perf_counter() - start:.0f} s")
        summary[name] = {"mse": score.mean, "half_width": score.half_width, "losses": list(result.losses),
                         "views": result.report["views"], "noise": config.noise_multiplier,
                         "inner_noise": config.inner_noise}
    (out / "summary.json").write_text(json.dumps(summary, indent=1))
    _plot(summary, out)


def _plot(summary: dict, out: Path) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    fig, ax = plt.subplots(figsize=(7, 4))
    for name, row in summary.items():
        losses = torch.tensor(row["losses"])
        window = max(1, len(losses) // 50)
        smooth = losses.unfold(0, window, window).mean(1) if len(losses) >= window else losses
        eps = next((v["epsilon"] for v in row["views"] if v["epsilon"] is not None), None)
        label = name + (f" (eps<={format_upper(eps, 2)})" if eps is not None and math.isfinite(eps) else "")
        ax.plot(torch.arange(len(smooth)) * window, smooth, label=label)
    ax.set_xlabel("step")
    ax.set_ylabel("training MSE of the sampled tasks")
    ax.set_title("MAML family: query MSE after adaptation; Reptile family: MSE before adaptation", fontsize=9)
    ax.set_yscale("log")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out / "curves.png", dpi=120)


if __name__ == "__main__":
    main()
