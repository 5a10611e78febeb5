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
noise) is left out: 5,000 clients a round for 1,000 rounds is hours a run on 2 cores.
Each method runs twice: with dp-agr's own outer optimiser (Adam, lr 0.01), and with SGD (heavy-ball momentum 0.9,
lr 0.05; the banded plans' C then optimised for that momentum, ``noise.momentum``). BandMF's error analysis is for
SGD, whose model is a linear function of the noisy sums; under Adam its advantage is whatever this table measures.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from scipy import stats

POPULATION, STEPS, BANDS, RATE = 5000, 1000, 4, 0.004
K, SEPARATION = 4, 250  # 5,000 clients in 250 blocks: 20 a round, as Poisson's expected 20
MOMENTUM = 0.9  # the SGD rows' heavy-ball momentum; their banded plans optimise C for it (noise.momentum)

SAMPLING = {
    "poisson": f'scheme = "poisson"\npopulation = {POPULATION}\nrate = {RATE}',
    "min_sep": f'scheme = "min_separation"\npopulation = {POPULATION}\nparticipations = {K}\nseparation = {SEPARATION}',
    "cyclic": f'scheme = "cyclic_poisson"\npopulation = {POPULATION}\nrate = {RATE * BANDS}\ngroups = {BANDS}',
}
ADAM = ("--outer-optimizer", "adam", "--outer-lr", "0.01")
SGD = ("--outer-optimizer", "sgd", "--outer-momentum", str(MOMENTUM), "--outer-lr", "0.05")
SGD_SLOW = ("--outer-optimizer", "sgd", "--outer-momentum", str(MOMENTUM), "--outer-lr", "0.005")  # z ~ 4 diverges at 0.05
_POISSON, _MIN_SEP, _CYCLIC = ("Poisson client sampling, secret", f"at most {K} rounds, >= {SEPARATION} apart",
                               f"{BANDS} fixed groups, Poisson within")
METHODS = [  # (name, sampling, banded, what the guarantee assumes, optimiser); "maml": the same rounds, no privacy
    ("maml poisson (no privacy)", "poisson", False, "(no guarantee)", ADAM),
    ("dp-agr poisson", "poisson", False, _POISSON, ADAM),
    ("dp-agr min-sep", "min_sep", False, _MIN_SEP, ADAM),
    ("bandmf min-sep", "min_sep", True, _MIN_SEP, ADAM),
    ("bandmf cyclic", "cyclic", True, _CYCLIC, ADAM),
    ("dp-agr poisson sgd", "poisson", False, _POISSON, SGD),
    ("dp-agr min-sep sgd", "min_sep", False, _MIN_SEP, SGD),
    ("bandmf min-sep sgd", "min_sep", True, _MIN_SEP, SGD),
    ("bandmf cyclic sgd", "cyclic", True, _CYCLIC, SGD),
    ("dp-agr min-sep sgd lr 0.005", "min_sep", False, _MIN_SEP, SGD_SLOW),
    ("bandmf min-sep sgd lr 0.005", "min_sep", True, _MIN_SEP, SGD_SLOW),
]


def plan_text(name: str, sampling: str, banded: bool, momentum: float = 0.0) -> str:
    noise = 'mechanism = "gaussian"\nmultiplier = 1.0\n' + (f'correlation = "banded"\nbands = {BANDS}\n' if banded else "")
    if banded and momentum:
        noise += f"momentum = {momentum}\n"
    return (f'name = "{name}"\nunit = "task"\ndelta = 1e-5\nsteps = {STEPS}\n\n[sampling]\n{SAMPLING[sampling]}\n\n'
            f"[noise]\n{noise}")


def _folder(root: Path, name: str, epsilon: float, seed: int) -> Path:
    return root / f"{name.replace(' ', '_')}-eps{epsilon:g}-seed{seed}"


def _argv(root: Path, method, epsilon: float, seed: int, eval_tasks: int):
    name, sampling, banded, _, optimiser = method
    plan = root / f"{name.replace(' ', '_')}.toml"
    plan.write_text(plan_text(name, sampling, banded, 0.0 if optimiser is ADAM else MOMENTUM))
    private = not name.startswith("maml")
    return [sys.executable, "-m", "metadp", "train", "dp-agr" if private else "maml", "--plan", str(plan),
            *(["--epsilon", str(epsilon), "--clip", "1"] if private else []), "--data", "sinusoid", "--first-order",
            "--seed", str(seed), "--eval-tasks", str(eval_tasks), *optimiser,
            "--out", str(_folder(root, name, epsilon, seed))]


def _train(argv) -> None:
    print(" ".join(argv[2:]), flush=True)
    done = subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if done.returncode != 0:
        raise SystemExit(f"failed ({done.returncode}): {done.stderr.strip().splitlines()[-1]}")


def run(root: Path, epsilon: float, seeds, eval_tasks: int, jobs: int) -> None:
    root.mkdir(parents=True, exist_ok=True)
    todo = [_argv(root, m, epsilon, s, eval_tasks) for m in METHODS for s in seeds
            if not (_folder(root, m[0], epsilon, s) / "evaluation.json").exists()]
    with ThreadPoolExecutor(max_workers=jobs) as pool:  # one thread a run (OMP_NUM_THREADS=1)
        list(pool.map(_train, todo))


def _interval(values):
    mean = sum(values) / len(values)
    if len(values) < 2:
        return mean, math.nan
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1))
    return mean, stats.t.ppf(0.975, len(values) - 1) * sd / math.sqrt(len(values))


def table(root: Path, epsilon: float, seeds) -> str:
    lines = [f"| method | participation assumed | outer optimiser | z | certified task epsilon at delta 1e-5 | test MSE "
             f"(mean over {len(seeds)} seeds, 95% CI) |", "|---|---|---|---|---|---|"]
    for name, _, _, assumed, optimiser in METHODS:
        runs = [_folder(root, name, epsilon, s) for s in seeds]
        runs = [r for r in runs if (r / "evaluation.json").exists()]
        if not runs:
            continue
        report = json.loads((runs[0] / "privacy_report.json").read_text())
        mse = [json.loads((r / "evaluation.json").read_text())["mean"] for r in runs]
        mean, half = _interval(mse)
        if report.get("private", True) and report.get("noise"):
            z, low = f"{report['noise']['multiplier']:.4g}", report.get("epsilon_lower")
            interval = f"[{low:.5g}, {report['epsilon']:.5g}]" if low is not None else f"<= {report['epsilon']:.5g}"
        else:
            z, interval = "-", "none"
        how = "Adam, lr 0.01" if optimiser is ADAM else f"SGD, momentum {MOMENTUM}, lr {optimiser[-1]}"
        mse_text = f"{mean:.3f} +- {half:.3f}" if mean < 1e3 else f"diverged: {', '.join(f'{v:.3g}' for v in mse)}"
        lines.append(f"| {name} | {assumed} | {how} | {z} | {interval} | {mse_text} ({len(runs)} runs) |")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="runs/bandmf_sinusoid")
    parser.add_argument("--epsilon", type=float, default=2.0)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--eval-tasks", type=int, default=200)
    parser.add_argument("--jobs", type=int, default=2, help="runs at a time (one thread each; default 2)")
    parser.add_argument("--table", action="store_true", help="only print the table of finished runs")
    args = parser.parse_args(argv)
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    root = Path(args.out)
    if not args.table:
        run(root, args.epsilon, args.seeds, args.eval_tasks, args.jobs)
    print(table(root, args.epsilon, args.seeds))
    return 0


if __name__ == "__main__":
    sys.exit(main())
