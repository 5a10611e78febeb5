"""Sinusoid regression: task-level DP-MAML against MAML with the same steps, lot and learning rates,
over a range of budgets (test MSE against epsilon).

Run: ``python benchmarks/sinusoid_private_vs_maml.py [--steps 2000] [--out runs/sinusoid_private_vs_maml]``
(45 min on one core of a slow x86 machine; ``--steps 20 --lot 50 --series large`` is a smoke run).
Each run is the command ``metadp train maml|dp-maml --data sinusoid ...`` run in-process
(``metadp.cli.main``) and printed; its folder under ``--out`` holds the ledgers, ``privacy_report.json``
(every epsilon a certified upper bound, PLD, at delta 1e-5) and ``evaluation.json`` (test MSE on 600
fresh tasks, the same 600 for every run, mean and 95% interval); the table adds each run's MSE ratio to
MAML's with a paired 95% interval over those tasks (each task rescored from ``checkpoint.pt``). Series:

* ``large``: lots of ``--lot`` tasks (default 1,000) drawn by Poisson sampling from a pool of
  ``--pool`` tasks (default 1,000,000: rate 0.001), MAML and DP-MAML at each ``--epsilons``;
* ``small``: the README's small-lot regime, lots of 25 from a pool of 10,000 (rate 0.0025), same steps
  and learning rate.

With ``--epsilon`` the noise multiplier is calibrated so that the asked steps spend exactly that task
epsilon; the table gives the run's certified epsilon from its ledger. Writes ``summary.json`` under
``--out`` (after every run: an interrupted sweep keeps what it finished, and a rerun reuses every run
whose folder holds the same command's results) and ``--figure`` if matplotlib is installed;
``--replot`` only redraws the figure from ``summary.json``. Sets one thread. Not a timed benchmark.
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

from metadp.cli import main as metadp_main  # noqa: E402
from metadp.report import format_upper  # noqa: E402
from metadp.training.run import evaluate  # noqa: E402
from metadp.training.algorithms import models  # noqa: E402
from metadp.training.data import tasks  # noqa: E402

SMALL = {"lot": 25, "pool": 10_000}


def _runs(args):
    """(name, series, algorithm, epsilon or None, lot, pool) of every run asked for."""
    series = {"large": {"lot": args.lot, "pool": args.pool}, "small": SMALL}
    for key in args.series:
        lot, pool = series[key]["lot"], series[key]["pool"]
        yield f"{key}-maml", key, "maml", None, lot, pool
        for eps in args.epsilons:
            yield f"{key}-dp-maml-eps{eps:g}", key, "dp-maml", eps, lot, pool


def _argv(args, algorithm, epsilon, lot, pool, folder):
    argv = ["train", algorithm, "--data", "sinusoid", "--meta-batch", str(lot), "--pool", str(pool),
            "--steps", str(args.steps), "--outer-lr", f"{args.outer_lr:g}", "--seed", str(args.seed),
            "--checkpoint-every", str(max(1, args.steps // 10)), "--out", str(folder)]
    if epsilon is not None:
        argv[2:2] = ["--epsilon", f"{epsilon:g}", "--delta", f"{args.delta:g}", "--clip", f"{args.clip:g}"]
    return argv


def _per_task_mse(folder: Path, n_tasks: int) -> list:
    """Each held-out task's MSE for the run's final parameters (``checkpoint.pt``), on the tasks that
    ``evaluation.json`` scored (``evaluate.evaluate_sinusoid``'s fresh tasks, the same for every run): the
    runs' scores can then be compared task by task (a paired interval)."""
    config = json.loads((folder / "run.json").read_text())["config"]
    params = torch.load(folder / "checkpoint.pt", weights_only=False)["params"]
    held = tasks.SinusoidPool(n_tasks, 10, 100, seed=12345).batch(torch.arange(n_tasks))  # evaluate_sinusoid's
    return [evaluate.evaluate_tasks(models.MLP(), params, [t[i:i + 1] for t in held], evaluation_loss,
                                    config["inner_steps"], config["inner_lr"]).mean for i in range(n_tasks)]


def evaluation_loss(out, y):
    return ((out - y) ** 2).mean()


def _row(name, series, algorithm, epsilon, lot, pool, argv, folder: Path, wall: float) -> dict:
    evaluation = json.loads((folder / "evaluation.json").read_text())
    report = json.loads((folder / "privacy_report.json").read_text())
    views = {v["view"]: v for v in report.get("views", [])}
    task, record = views.get("task"), views.get("record")
    losses = [json.loads(line)["loss"] for line in (folder / "metrics.jsonl").read_text().splitlines()]
    per_task = _per_task_mse(folder, evaluation["tasks"])
    mean = sum(per_task) / len(per_task)
    if abs(mean - evaluation["mean"]) > 1e-4 * evaluation["mean"]:
        raise SystemExit(f"{name}: per-task MSEs average {mean}, evaluation.json says {evaluation['mean']}")
    return {"name": name, "series": series, "algorithm": algorithm, "epsilon_target": epsilon,
            "task_epsilon": task["epsilon"] if task else None,  # certified upper bound, PLD, at delta
            "record_epsilon": record["epsilon"] if record else None,
            "delta": report.get("delta") if task else None, "noise_multiplier": (report.get("noise") or {}).get("multiplier"),
            "clip": report.get("final_clip") if algorithm != "maml" else None,
            "mse": evaluation["mean"], "half_width_95": evaluation["half_width_95"], "eval_tasks": evaluation["tasks"],
            "steps": report.get("steps"), "lot": lot, "pool": pool, "wall_s": wall,
            "train_loss_at_checkpoints": losses, "per_task_mse": per_task, "command": "metadp " + " ".join(argv)}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--lot", type=int, default=1000, help="expected tasks a step, large series (default 1000)")
    parser.add_argument("--pool", type=int, default=1_000_000, help="task pool, large series (default 10^6)")
    parser.add_argument("--epsilons", type=float, nargs="+", default=[0.25, 0.5, 1, 2, 4, 8])
    parser.add_argument("--series", nargs="+", choices=["large", "small"], default=["large", "small"])
    parser.add_argument("--clip", type=float, default=1.0)
    parser.add_argument("--outer-lr", type=float, default=1e-2)
    parser.add_argument("--delta", type=float, default=1e-5)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default="runs/sinusoid_private_vs_maml")
    parser.add_argument("--figure", default="docs/figures/sinusoid_mse_vs_epsilon.png")
    parser.add_argument("--replot", action="store_true", help="only redraw --figure from --out/summary.json")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    out = Path(args.out)
    if args.replot:
        summary = json.loads((out / "summary.json").read_text())
        _print_table(summary)
        _plot(summary, Path(args.figure))
        return 0
    out.mkdir(parents=True, exist_ok=True)
    summary = {"settings": {k: v for k, v in vars(args).items() if k not in ("replot",)}, "runs": []}
    start_all = time.perf_counter()
    for name, series, algorithm, epsilon, lot, pool in _runs(args):
        folder = out / name
        command = _argv(args, algorithm, epsilon, lot, pool, folder)
        done = folder / "bench.json"
        if done.exists() and json.loads(done.read_text())["command"] == command:
            wall = json.loads(done.read_text())["wall_s"]
            print(f"{name}: reusing {folder}", flush=True)
        else:
            print("metadp " + " ".join(command), flush=True)
            start = time.perf_counter()
            status = metadp_main(command)
            wall = time.perf_counter() - start
            if status != 0:
                raise SystemExit(f"{name}: metadp train exited with status {status}")
            done.write_text(json.dumps({"command": command, "wall_s": wall}))
        row = _row(name, series, algorithm, epsilon, lot, pool, command, folder, wall)
        summary["runs"].append(row)
        eps = f"task eps <= {format_upper(row['task_epsilon'], 4)}" if row["task_epsilon"] is not None else "non-private"
        print(f"{name:26s} {eps:22s} z={row['noise_multiplier'] or 0:.4g}  test MSE {row['mse']:.4f} +- "
              f"{row['half_width_95']:.4f}  {wall:.0f} s", flush=True)
        summary["total_wall_s"] = sum(r["wall_s"] for r in summary["runs"])  # the runs' own, reused ones too
        summary["this_invocation_s"] = time.perf_counter() - start_all
        (out / "summary.json").write_text(json.dumps(summary, indent=1))
    _print_table(summary)
    _plot(summary, Path(args.figure))
    return 0


def ratio(row, base):
    """MSE ratio R = mean(a) / mean(b) of ``row`` to ``base`` and its paired 95% half-width over the shared
    held-out tasks (delta method: 1.96 sd(a_i - R b_i) / (sqrt(n) mean(b)))."""
    a, b = torch.tensor(row["per_task_mse"], dtype=torch.float64), torch.tensor(base["per_task_mse"], dtype=torch.float64)
    r = float(a.mean() / b.mean())
    return r, 1.96 * float((a - r * b).std(unbiased=True)) / (math.sqrt(a.numel()) * float(b.mean()))


def _print_table(summary: dict) -> None:
    base = {r["series"]: r for r in summary["runs"] if r["algorithm"] == "maml"}
    print("| series | algorithm | target epsilon | certified task epsilon | record epsilon | z | test MSE (95%) | "
          "ratio to MAML (paired 95%) |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for r in summary["runs"]:
        rat, hw = ratio(r, base[r["series"]]) if r["series"] in base else (math.nan, math.nan)
        fmt = lambda e: f"<= {format_upper(e, 4)}" if e is not None else "none"  # noqa: E731
        print(f"| {r['series']} (lot {r['lot']:,}, pool {r['pool']:,}) | {r['algorithm']} | "
              f"{format(r['epsilon_target'], 'g') if r['epsilon_target'] is not None else '-'} | {fmt(r['task_epsilon'])} | "
              f"{fmt(r['record_epsilon'])} | {r['noise_multiplier'] or 0:.4g} | {r['mse']:.3f} +- "
              f"{r['half_width_95']:.3f} | {rat:.3f} +- {hw:.3f} |")
    print(f"wall time of the runs (metadp train, each with its evaluation): {summary.get('total_wall_s', 0):.0f} s")


def _plot(summary: dict, path: Path) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib.ticker import FuncFormatter
    except ImportError:
        print("matplotlib not installed: no figure")
        return
    fig, ax = plt.subplots(figsize=(7, 4.2))
    colours = {"large": "tab:blue", "small": "tab:orange"}
    for series in sorted({r["series"] for r in summary["runs"]}):
        rows = [r for r in summary["runs"] if r["series"] == series]
        lot, pool = rows[0]["lot"], rows[0]["pool"]
        colour = colours.get(series, "tab:gray")
        private = sorted((r for r in rows if r["algorithm"] != "maml"), key=lambda r: r["task_epsilon"])
        if private:
            ax.errorbar([r["task_epsilon"] for r in private], [r["mse"] for r in private],
                        yerr=[r["half_width_95"] for r in private], marker="o", capsize=3, color=colour,
                        label=f"DP-MAML, lot {lot:,} of {pool:,} tasks")
        for r in rows:
            if r["algorithm"] == "maml":
                ax.axhspan(r["mse"] - r["half_width_95"], r["mse"] + r["half_width_95"], color=colour, alpha=0.18,
                           label=f"MAML (non-private), lot {lot:,}: 95% interval")
                ax.axhline(r["mse"], color=colour, lw=1, ls="--")
                if series == "large":
                    ax.axhline(1.15 * r["mse"], color=colour, lw=0.8, ls=":", label="MAML + 15%")
    steps = summary["runs"][0]["steps"]
    ax.set_xscale("log")
    ax.set_yscale("log")
    plain = FuncFormatter(lambda v, _: f"{v:g}")
    epsilons = sorted({r["epsilon_target"] for r in summary["runs"] if r["epsilon_target"] is not None})
    ax.set_xticks(epsilons)
    ax.xaxis.set_major_formatter(plain)
    ax.xaxis.set_minor_formatter(FuncFormatter(lambda v, _: ""))
    ax.yaxis.set_major_formatter(plain)
    ax.yaxis.set_minor_formatter(plain)
    ax.set_xlabel("certified task-level epsilon at delta 1e-5 (PLD, Poisson task sampling)")
    ax.set_ylabel("meta-test MSE, 600 fresh tasks (95% interval)")
    ax.set_title(f"Sinusoid 10-shot, 1 inner step: {steps:,} steps, same lot and learning rates", fontsize=9)
    ax.legend(fontsize=7.5)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    print(f"figure: {path}")


if __name__ == "__main__":
    sys.exit(main())
