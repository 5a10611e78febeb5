"""DP-FedMeta on sinusoids at one certified task epsilon: DP-FTRL's banded noise (BandMF) against DP-AGR with and
without Poisson client sampling (issue 34). Not a timed benchmark.

Every method is ``metadp train dp-agr --plan FILE --epsilon E`` (the plan's noise calibrated so that its certified
task-level epsilon is E at delta 1e-5, as ``metadp plan`` certifies it) on the same population of sinusoid clients,
the same steps and seeds; the test MSE is the trainer's held-out evaluation (``evaluation.json``). The table gives,
per method, what the guarantee assumes about participation, the calibrated z, the certified epsilon interval and
the test MSE: the mean over seeds with a 95% t-interval across seeds.

    python benchmarks/bandmf_sinusoid.py                 # runs/bandmf_sinusoid: about 15 min on 2 cores
    python benchmarks/bandmf_sinusoid.py --table         # the table of finished runs only

Methods (P clients, n rounds; every plan's text is written beside its run):

* ``dp-agr poisson``: Poisson client sampling at rate q (amplified; needs the server to sample in secret);
* ``dp-agr min-sep`` / ``bandmf min-sep``: each client in at most k rounds, any two at least s apart, in any order
  (no sampling: the honest no-amplification baseline and BandMF under the same promise); both certify sensitivity
  sqrt(k) (BandMF with s >= b), so one z gives both one epsilon;
* ``bandmf cyclic``: b groups, each Poisson-sampled in its own rounds (Choquette-Choo et al. 2023, Thm. 4).

Every method takes about 20 clients a round. Every client in every round (no sampling, independent or banded
noise) is left out: 1,000 clients a round for 200 rounds is about 40 minutes a run on 2 cores.
The outer optimiser is dp-agr's (Adam, lr 0.01): BandMF's error analysis is for SGD, whose model is a linear
function of the noisy sums; under Adam its advantage is whatever this table measures.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
from pathlib import Path

from scipy import stats

POPULATION, STEPS, BANDS, RATE = 1000, 200, 4, 0.02
K, SEPARATION = 4, 50  # 1,000 clients in 50 blocks: 20 a round, as Poisson's expected 20

SAMPLING = {
    "poisson": f'scheme = "poisson"\npopulation = {POPULATION}\nrate = {RATE}',
    "min_sep": f'scheme = "min_separation"\npopulation = {POPULATION}\nparticipations = {K}\nseparation = {SEPARATION}',
    "cyclic": f'scheme = "cyclic_poisson"\npopulation = {POPULATION}\nrate = {RATE * BANDS}\ngroups = {BANDS}',
}
METHODS = [  # (name, sampling, banded, what the guarantee assumes)
    ("dp-agr poisson", "poisson", False, "Poisson client sampling, secret"),
    ("dp-agr min-sep", "min_sep", False, f"at most {K} rounds, >= {SEPARATION} apart"),
    ("bandmf min-sep", "min_sep", True, f"at most {K} rounds, >= {SEPARATION} apart"),
    ("bandmf cyclic", "cyclic", True, f"{BANDS} fixed groups, Poisson within"),
]


def plan_text(name: str, sampling: str, banded: bool) -> str:
    noise = 'mechanism = "gaussian"\nmultiplier = 1.0\n' + (f'correlation = "banded"\nbands = {BANDS}\n' if banded else "")
    return (f'name = "{name}"\nunit = "task"\ndelta = 1e-5\nsteps = {STEPS}\n\n[sampling]\n{SAMPLING[sampling]}\n\n'
            f"[noise]\n{noise}")


def _folder(root: Path, name: str, epsilon: float, seed: int) -> Path:
    return root / f"{name.replace(' ', '_')}-eps{epsilon:g}-seed{seed}"


def run(root: Path, epsilon: float, seeds, eval_tasks: int) -> None:
    for name, sampling, banded, _ in METHODS:
        for seed in seeds:
            out = _folder(root, name, epsilon, seed)
            if (out / "evaluation.json").exists():
                continue
            out.parent.mkdir(parents=True, exist_ok=True)
            plan = root / f"{name.replace(' ', '_')}.toml"
            plan.write_text(plan_text(name, sampling, banded))
            argv = [sys.executable, "-m", "metadp", "train", "dp-agr", "--plan", str(plan), "--epsilon", str(epsilon),
                    "--data", "sinusoid", "--first-order", "--seed", str(seed), "--eval-tasks", str(eval_tasks),
                    "--clip", "1", "--outer-lr", "0.01", "--out", str(out)]
            print(" ".join(argv[2:]), flush=True)
            subprocess.run(argv, check=True, stdout=subprocess.DEVNULL)


def _interval(values):
    mean = sum(values) / len(values)
    if len(values) < 2:
        return mean, math.nan
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1))
    return mean, stats.t.ppf(0.975, len(values) - 1) * sd / math.sqrt(len(values))


def table(root: Path, epsilon: float, seeds) -> str:
    lines = [f"| method | participation assumed | z | certified task epsilon at delta 1e-5 | test MSE (mean over "
             f"{len(seeds)} seeds, 95% CI) |", "|---|---|---|---|---|"]
    for name, _, _, assumed in METHODS:
        runs = [_folder(root, name, epsilon, s) for s in seeds]
        runs = [r for r in runs if (r / "evaluation.json").exists()]
        if not runs:
            continue
        report = json.loads((runs[0] / "privacy_report.json").read_text())
        z = report["noise"]["multiplier"]
        mse = [json.loads((r / "evaluation.json").read_text())["mean"] for r in runs]
        mean, half = _interval(mse)
        low = report.get("epsilon_lower")
        interval = f"[{low:.4g}, {report['epsilon']:.4g}]" if low is not None else f"<= {report['epsilon']:.4g}"
        lines.append(f"| {name} | {assumed} | {z:.4g} | {interval} | {mean:.3f} +- {half:.3f} ({len(runs)} runs) |")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="runs/bandmf_sinusoid")
    parser.add_argument("--epsilon", type=float, default=2.0)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--eval-tasks", type=int, default=200)
    parser.add_argument("--table", action="store_true", help="only print the table of finished runs")
    args = parser.parse_args(argv)
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    root = Path(args.out)
    if not args.table:
        run(root, args.epsilon, args.seeds, args.eval_tasks)
    print(table(root, args.epsilon, args.seeds))
    return 0


if __name__ == "__main__":
    sys.exit(main())
