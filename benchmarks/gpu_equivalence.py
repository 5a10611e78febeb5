"""One fixed-seed private step on a GPU against the same step on the CPU (issue 30's GPU check).

Run: ``python benchmarks/gpu_equivalence.py [--device cuda] [--json FILE]`` (``--device cpu`` runs the same code
on the CPU twice: the dry run). The step is task-level DP-MAML's (dp-maml.txt Alg. 1) on 32 Omniglot-shaped
5-way 1-shot episodes, Conv-4, first and second order: the per-task meta-gradients
(``metadp.training.algorithms.contributions.meta_gradients``), their clipping to C = 1 and sum, and the
Gaussian noise N(0, (zC)^2) drawn once on the sum from the run's generator on the device.

What must agree, and how it is checked:

* the clipped sum (the mechanism's input) and the per-task norms: CUDA against CPU to 1e-4 relative, with
  TF32 off (TF32's rounding is about 1e-3; the step with TF32 on is reported beside);
* the noise: a GPU generator draws another stream than a CPU one, so the draws cannot be equal; the
  released sum minus the clipped sum must have mean 0 and standard deviation zC (each within 5 standard
  errors over the model's ~113,000 coordinates), which is the distribution the accounting assumes.

Exit status 1 when a check fails.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from metadp.training.algorithms import functional as F  # noqa: E402
from metadp.training.algorithms import models  # noqa: E402
from metadp.training.algorithms.contributions import meta_gradients  # noqa: E402
from metadp.training.data import sources as data  # noqa: E402
from metadp.training.data import tasks  # noqa: E402
from metadp.training.run.trainer import TrainConfig  # noqa: E402

Z, CLIP, LOT = 1.0, 1.0, 32


def _step(device: str, first_order: bool):
    """(per-task norms, the clipped sum, the released sum) of one step on ``device``, in float64 on the CPU."""
    images = data.synthetic_glyphs(100, 20, seed=0).images.to(device)
    pool = tasks.EpisodePool(images, 2000, n_way=5, k_shot=1, k_query=1, seed=0)
    torch.manual_seed(0)
    model = models.Conv4(5, norm="batch").to(device)
    params = {k: v.to(device) for k, v in F.param_dict(model).items()}
    c = TrainConfig(algorithm="dp-maml", first_order=first_order, clip=CLIP, noise_multiplier=Z, inner_steps=1,
                    inner_lr=0.4, steps=1, meta_batch=float(LOT))
    rows = torch.arange(LOT, device=device)
    contributions, _ = meta_gradients(c.family, model, params, pool, rows, torch.nn.functional.cross_entropy, c, None)
    clipped, norms = F.clip(contributions, CLIP, c.clip_mode)
    total = F.masked_sum(clipped, torch.ones(LOT, device=device))
    generator = torch.Generator(device=device).manual_seed(12345)
    released = F.noisy_sum({k: v.unsqueeze(0) for k, v in total.items()}, None, Z * CLIP, generator=generator)
    flat = lambda d: torch.cat([d[k].detach().double().cpu().reshape(-1) for k in sorted(d)])  # noqa: E731
    return norms.detach().double().cpu(), flat(total), flat(released)


def noise_agrees(noise: torch.Tensor, std: float) -> bool:
    """Whether ``noise`` (i.i.d. coordinates) has mean 0 and standard deviation ``std``, each within 5 standard
    errors (of the mean: std / sqrt(n); of the standard deviation: about std / sqrt(2n))."""
    n = noise.numel()
    return (abs(float(noise.mean())) < 5 * std / math.sqrt(n)
            and abs(float(noise.std()) / std - 1) < 5 / math.sqrt(2 * n))


def _relative(a, b) -> float:
    return float((a - b).norm() / b.norm().clamp(min=1e-30))


def check(device: str) -> dict:
    out = {"device": device, "card": torch.cuda.get_device_name(0) if device.startswith("cuda") else "cpu"}
    ok = True
    for first_order in (True, False):
        order = "first order" if first_order else "second order"
        tf32 = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)
        torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
        try:
            norms_cpu, total_cpu, _ = _step("cpu", first_order)
            norms_dev, total_dev, released = _step(device, first_order)
        finally:
            torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = tf32
        _, total_tf32, _ = _step(device, first_order)
        noise = released - total_dev
        n = noise.numel()
        mean, std = float(noise.mean()), float(noise.std())
        row = {"norms_relative": _relative(norms_dev, norms_cpu), "sum_relative": _relative(total_dev, total_cpu),
               "sum_relative_tf32_default": _relative(total_tf32, total_cpu), "noise_mean": mean,
               "noise_std": std, "noise_std_expected": Z * CLIP, "coordinates": n}
        row["passed"] = row["norms_relative"] < 1e-4 and row["sum_relative"] < 1e-4 and noise_agrees(noise, Z * CLIP)
        ok &= row["passed"]
        out[order] = row
        print(f"{order}: clipped sum {device} vs cpu relative {row['sum_relative']:.2e} (TF32 default: "
              f"{row['sum_relative_tf32_default']:.2e}), per-task norms {row['norms_relative']:.2e}; noise mean "
              f"{mean:+.2e}, std {std:.5f} (zC = {Z * CLIP:g}, {n:,} coordinates): "
              f"{'ok' if row['passed'] else 'FAILED'}", flush=True)
    out["passed"] = ok
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--json", metavar="FILE")
    args = parser.parse_args(argv)
    result = check(args.device)
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1))
    return 0 if result["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
