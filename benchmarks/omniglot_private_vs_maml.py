"""MAML against task-level DP-MAML on Omniglot 5-way 1-shot, at the largest plan a 2-core CPU trains in about
two hours (issue 30): ``examples/train_omniglot_5way_task.toml`` (Poisson lots of 128 of 400,000 task slots,
a fresh episode per slot from the 242 shipped classes, 400 steps, first order, Adam at 0.003).

    python benchmarks/omniglot_private_vs_maml.py --run      # the three runs, one thread each, side by side
    python benchmarks/omniglot_private_vs_maml.py --table    # the table from the finished runs

The runs: MAML, and DP-MAML with the noise calibrated (``--epsilon``) to certified task epsilon 1 and 4 at
delta 1e-5, all with the same plan, seed, lot, steps and learning rates. The table gives, per run, the
certified task and record epsilons (``privacy_report.json``), the noise multiplier, the accuracy on the 20
official one-shot runs cut into 80 5-way tasks (95% interval over tasks) and the paired difference to
MAML over the same 80 tasks (95%).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

PLAN = ROOT / "examples" / "train_omniglot_5way_task.toml"
RUNS = [("maml", "maml", None), ("eps4", "dp-maml", 4.0), ("eps1", "dp-maml", 1.0)]
OUTER_LR = "0.003"


def command(algorithm: str, epsilon, out: Path, seed: int):
    cmd = [sys.executable, "-m", "metadp", "train", algorithm, "--plan", str(PLAN), "--data", "omniglot",
           "--first-order", "--outer-lr", OUTER_LR, "--seed", str(seed), "--out", str(out)]
    return cmd + (["--epsilon", f"{epsilon:g}"] if epsilon is not None else [])


def run(folder: Path, seed: int) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, OMP_NUM_THREADS="1")
    procs = []
    for name, algorithm, epsilon in RUNS:
        cmd = command(algorithm, epsilon, folder / name, seed)
        print(" ".join(cmd[1:]), flush=True)
        log = open(folder / f"{name}.log", "w")
        procs.append(subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT))
    codes = [p.wait() for p in procs]
    if any(codes):
        raise SystemExit(f"a run failed (exit statuses {codes}); see the logs in {folder}")


def _per_task(out: Path):
    """The run's accuracy on each of the 80 5-way tasks cut from the official one-shot runs (its checkpoint)."""
    import torch

    from metadp.training.algorithms import models
    from metadp.training.data import sources as data
    from metadp.training.run.evaluate import evaluate_one_shot_runs

    state = torch.load(out / "checkpoint.pt", weights_only=False)
    model = models.Conv4(5, norm="batch")
    runs = data.load_one_shot_runs(None)
    score = evaluate_one_shot_runs(model, state["params"], runs, steps=1, lr=0.4, n_way=5)
    return torch.tensor(score.per_task, dtype=torch.float64), state["step"]


def _interval(values) -> str:
    n = values.numel()
    return f"{100 * float(values.mean()):.1f}% +- {100 * 1.96 * float(values.std()) / math.sqrt(n):.1f}"


def table(folder: Path) -> str:
    from metadp.report import format_upper

    rows = ["| run | target task epsilon | certified task epsilon (upper bound; add/remove, Poisson; delta 1e-5) | "
            "record epsilon (upper bound; add/remove; delta 1e-5) | "
            "noise multiplier z | steps | accuracy (80 tasks, 95%) | difference to MAML (paired, 95%) |",
            "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    base = None
    for name, algorithm, epsilon in RUNS:
        out = folder / name
        report = json.loads((out / "privacy_report.json").read_text())
        accuracy, steps = _per_task(out)
        if base is None:
            base = accuracy
        diff = accuracy - base
        paired = "-" if name == "maml" else _interval(diff).replace("% +-", " +-") + " points"
        if name == "maml":
            task, record, z = "none", "none", "-"
        else:
            task = f"<= {format_upper(float(report['epsilon']))}"
            record = "; ".join(f"<= {format_upper(float(o['epsilon']))}" for o in report["other_units"]
                               if o["view"] == "record")
            z = f"{report['noise']['multiplier']:.4g}"
        target = "-" if epsilon is None else f"{epsilon:g}"
        rows.append(f"| {algorithm} | {target} | {task} | {record} | {z} | {steps} | {_interval(accuracy)} | "
                    f"{paired} |")
    return "\n".join(rows)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run", action="store_true", help="train the three runs (about two hours on 2 cores)")
    parser.add_argument("--table", action="store_true", help="print the table of the finished runs")
    parser.add_argument("--runs", type=Path, default=Path("runs/omniglot-task"), help="their folder")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if not (args.run or args.table):
        parser.error("give --run, --table or both")
    if args.run:
        run(args.runs, args.seed)
    if args.table:
        print(table(args.runs))


if __name__ == "__main__":
    main()
