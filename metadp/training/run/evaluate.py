"""Meta-test evaluation: adapt on each held-out task's support set, score on its query set.

Reports the mean over tasks with a 95% interval (mean +- 1.96 standard errors over tasks), the
convention of the few-shot literature (600 tasks; the 20 official one-shot runs for Omniglot).
Evaluation uses held-out tasks only and releases nothing about the training data beyond the model.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Sequence

import torch

from metadp.training.algorithms import functional as F
from metadp.training.data.tasks import SinusoidPool

__all__ = ["Score", "evaluate_tasks", "evaluate_sinusoid", "evaluate_one_shot_runs"]


@dataclasses.dataclass(frozen=True)
class Score:
    mean: float
    half_width: float  # 1.96 standard errors over tasks
    n_tasks: int
    metric: str
    per_task: tuple = dataclasses.field(default=(), repr=False, compare=False)  # each task's score, in order

    def __str__(self) -> str:
        if not math.isfinite(self.mean):  # a diverged model: in words, not "nan +- nan"
            return (f"{self.metric} not finite on {self.n_tasks} tasks: the model diverged (lower the learning "
                    "rates, --inner-lr and --outer-lr, or the clip norm)")
        if not math.isfinite(self.half_width):  # one task: no spread to estimate
            return f"{self.metric} {self.mean:.4g} ({self.n_tasks} task, no interval)"
        return f"{self.metric} {self.mean:.4g} +- {self.half_width:.2g} (95%, {self.n_tasks} tasks)"


def _score(values: torch.Tensor, metric: str) -> Score:
    values = values.double()
    n = values.numel()
    sd = float(values.std(unbiased=True)) if n > 1 else math.nan
    return Score(float(values.mean()), 1.96 * sd / math.sqrt(n) if n > 1 else math.nan, n, metric,
                 tuple(values.cpu().tolist()))


def evaluate_tasks(model, params, tasks: Sequence[torch.Tensor], loss_fn, steps: int, lr: float,
                   metric: str = "mse", chunk: int = 100) -> Score:
    """Adapts ``params`` on each task's support set (``steps`` SGD steps at ``lr``) and scores the query
    set: ``metric="mse"`` (regression) or ``"accuracy"`` (classification, targets are class indices)."""
    x_s, y_s, x_q, y_q = tasks
    results = []
    for start in range(0, x_s.shape[0], chunk):
        sl = slice(start, start + chunk)

        def one(xs, ys, xq, yq):
            adapted = F.inner_adapt(model, params, xs, ys, loss_fn, steps, lr, first_order=True)
            out = torch.func.functional_call(model, adapted, (xq,))
            if metric == "accuracy":
                return (out.argmax(-1) == yq).float().mean()
            return ((out - yq) ** 2).mean()

        results.append(torch.func.vmap(one)(x_s[sl], y_s[sl], x_q[sl], y_q[sl]).detach())
    return _score(torch.cat(results), metric)


def evaluate_sinusoid(model, params, n_tasks: int = 600, k_shot: int = 10, steps: int = 1, lr: float = 0.01,
                      seed: int = 12345) -> Score:
    """Test MSE after k-shot, ``steps``-step adaptation on fresh sinusoid tasks (100 query points each)."""
    tasks = SinusoidPool(n_tasks, k_shot, 100, seed=seed).batch(torch.arange(n_tasks))
    return evaluate_tasks(model, params, tasks, lambda o, y: ((o - y) ** 2).mean(), steps, lr, "mse")


def evaluate_one_shot_runs(model, params, runs, steps: int, lr: float, n_way: int = 20) -> Score:
    """Accuracy on the 20 official Omniglot 20-way 1-shot runs (``data.load_one_shot_runs``), the model's
    head sized for ``n_way`` classes: 20, or a divisor of 20, each run's classes then cut in order into
    20 / n_way tasks of ``n_way`` classes whose query items are that run's test items of those classes."""
    if n_way == 20:
        tasks = tuple(torch.stack(t) for t in zip(*[(r.support, r.support_labels, r.query, r.query_labels)
                                                    for r in runs]))
    elif 20 % n_way == 0:
        tasks = tuple(torch.stack(t) for t in zip(*[_cut(r, g, n_way) for r in runs for g in range(20 // n_way)]))
    else:
        raise ValueError(f"the one-shot runs are 20-way: n_way must divide 20, got {n_way}")
    return evaluate_tasks(model, params, tasks, torch.nn.functional.cross_entropy, steps, lr, "accuracy")


def _cut(run, group: int, n_way: int):
    """The ``group``-th n_way-class task of a one-shot run (support in class order, labels 0..n_way-1)."""
    first = group * n_way
    order = torch.argsort(run.support_labels)[first:first + n_way]
    keep = (run.query_labels >= first) & (run.query_labels < first + n_way)
    return run.support[order], run.support_labels[order] - first, run.query[keep], run.query_labels[keep] - first
