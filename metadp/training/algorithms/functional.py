"""The functional core of the private meta-learners: adaptation, per-task and per-example gradients,
clipping and the noisy sum, all on dicts of parameter tensors (``torch.func``).

A model is an ``nn.Module`` without buffers (``metadp.training.algorithms.models``); its parameters travel as a
dict ``name -> tensor`` and the module is only ever called through ``functional_call``. Gradients per
task (MAML, Reptile) and per example (DP-SGD inside a task, sample-level DP-MAML) come from
``torch.func.vmap`` over ``torch.func.grad``: one vectorised call, never a Python loop of backward
calls (STYLE.md, "Training code"). A batch of gradients is a dict ``name -> [n, *shape]``.

What a private step does with them (dp-maml.txt Alg. 1, dp-fedmeta.txt Alg. 2): clip each row to norm
at most C (``clip``), then sum the rows with Gaussian noise N(0, (z C)^2 I) drawn once
(``noisy_sum``); under add/remove of one row the sum moves by at most C (2C under substitution,
DESIGN.md sec. 3.3), which is the sensitivity the accountant is told.

The vmapped functions run with ``randomness="error"``: the per-task and per-example computations draw
no random numbers (the models have no dropout), and a random op slipped into them would raise instead
of silently drawing noise the accountant does not know about. The only randomness of a step is the
noise of ``noisy_sum``, drawn outside any vmap from the caller's generator.
"""

from __future__ import annotations

import functools
import math
from typing import Callable, Dict, Optional, Sequence, Tuple

import torch
from torch import nn
from torch.func import functional_call, grad, grad_and_value, vmap

from metadp.core.validation import check_count, check_positive, check_real

__all__ = [
    "Params",
    "LossFn",
    "CLIP_MODES",
    "param_dict",
    "inner_adapt",
    "maml_task_loss",
    "per_task_meta_grads",
    "per_task_meta_grads_and_losses",
    "reptile_task_update",
    "per_example_grads",
    "flat_norms",
    "clip",
    "noisy_sum",
    "masked_sum",
]

Params = Dict[str, torch.Tensor]
LossFn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]  # (prediction, target) -> mean loss, a scalar
CLIP_MODES = ("flat", "per_layer")


def param_dict(model: nn.Module) -> Params:
    """The model's parameters as a dict of detached copies (``name -> tensor``), the trainer's state."""
    return {name: p.detach().clone() for name, p in model.named_parameters()}


def _loss(model: nn.Module, loss_fn: LossFn, params: Params, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return loss_fn(functional_call(model, params, (x,)), y)


def inner_adapt(model: nn.Module, params: Params, x: torch.Tensor, y: torch.Tensor, loss_fn: LossFn,
                steps: int, lr: float, first_order: bool) -> Params:
    """``steps`` full-batch SGD steps on (x, y) from ``params``: theta <- theta - lr * grad L(theta; x, y).

    Second order (``first_order=False``): the inner gradients stay functions of ``params``, so a
    ``torch.func.grad`` taken around this call differentiates through them (the Hessian-vector terms
    of MAML, Finn et al. 2017, arXiv:1703.03400, Eq. 1). First order: each inner gradient is detached,
    so d theta_k / d params = I and the meta-gradient is the query gradient at the adapted
    parameters (FOMAML). Outside any transform the two give the same adapted parameters.

    Args:
        model: the module (called through ``functional_call``).
        params: name -> tensor, the starting point (the meta-parameters).
        x, y: one task's support inputs [k, ...] and targets [k, ...].
        loss_fn: (prediction, target) -> scalar mean loss.
        steps: number of inner steps, >= 0 (0 returns ``params``).
        lr: inner learning rate (finite).
        first_order: detach the inner gradients.

    Returns:
        The adapted parameters, name -> tensor of the same shapes.
    """
    steps = check_count("steps", steps)
    lr = check_real("lr", lr)
    grad_fn = grad(functools.partial(_loss, model, loss_fn))
    for _ in range(steps):
        g = grad_fn(params, x, y)
        if first_order:
            g = {name: t.detach() for name, t in g.items()}
        params = {name: p - lr * g[name] for name, p in params.items()}
    return params


def maml_task_loss(model: nn.Module, params: Params, task: Sequence[torch.Tensor], loss_fn: LossFn,
                   steps: int, lr: float, first_order: bool) -> torch.Tensor:
    """One task's MAML objective: the query loss after ``inner_adapt`` on the support set.

    Args:
        task: (x_s, y_s, x_q, y_q) of one task: support [k, ...] and query [m, ...] inputs and targets.
        Others as in ``inner_adapt``.

    Returns:
        The scalar query loss L(theta_steps(params); x_q, y_q).
    """
    x_s, y_s, x_q, y_q = task
    adapted = inner_adapt(model, params, x_s, y_s, loss_fn, steps, lr, first_order)
    return _loss(model, loss_fn, adapted, x_q, y_q)


def _detached(params: Params) -> Params:
    # The trainer's parameters must not carry an autograd graph from one step into the next.
    return {name: p.detach() for name, p in params.items()}


def _check_tasks(tasks: Sequence[torch.Tensor], arity: int, what: str) -> Tuple[torch.Tensor, ...]:
    if len(tasks) != arity:
        raise ValueError(f"tasks must be {what} ({arity} stacked tensors), got {len(tasks)} tensors")
    count = tasks[0].shape[0]
    for i, t in enumerate(tasks):
        if t.dim() == 0 or t.shape[0] != count:
            raise ValueError(f"tasks[{i}] must have the task count {count} as its leading dimension, got shape "
                             f"{tuple(t.shape)}")
    return tuple(tasks)


def per_task_meta_grads_and_losses(model: nn.Module, params: Params, tasks: Sequence[torch.Tensor], loss_fn: LossFn,
                                   steps: int, lr: float, first_order: bool,
                                   chunk_size: Optional[int] = None) -> Tuple[Params, torch.Tensor]:
    """Per-task MAML meta-gradients and query losses for a meta-batch, in one vmapped call.

    g_i = grad_params L(theta_steps(params; support_i); query_i) for each task i: the quantity that
    task-level DP-MAML clips per task and sums with noise (dp-maml.txt Alg. 1; dp-fedmeta.txt
    Alg. 1-2, computed by the clients there).

    Args:
        tasks: (x_s, y_s, x_q, y_q) stacked over T tasks: [T, k, ...], [T, k, ...], [T, m, ...], [T, m, ...].
        chunk_size: evaluate at most this many tasks at a time (``torch.func.vmap``'s ``chunk_size``;
            bounds memory for large meta-batches, same result); None: all at once.
        Others as in ``inner_adapt``.

    Returns:
        (grads, losses): name -> [T, *shape], and the query losses [T] (before the meta-update).
    """
    tasks = _check_tasks(tasks, 4, "(x_s, y_s, x_q, y_q)")

    def one_task(p, x_s, y_s, x_q, y_q):
        return grad_and_value(maml_task_loss, argnums=1)(model, p, (x_s, y_s, x_q, y_q), loss_fn, steps, lr,
                                                          first_order)

    return vmap(one_task, in_dims=(None, 0, 0, 0, 0), randomness="error", chunk_size=chunk_size)(
        _detached(params), *tasks)


def per_task_meta_grads(model: nn.Module, params: Params, tasks: Sequence[torch.Tensor], loss_fn: LossFn,
                        steps: int, lr: float, first_order: bool, chunk_size: Optional[int] = None) -> Params:
    """Per-task MAML meta-gradients, name -> [T, *shape]; see ``per_task_meta_grads_and_losses``."""
    return per_task_meta_grads_and_losses(model, params, tasks, loss_fn, steps, lr, first_order, chunk_size)[0]


def reptile_task_update(model: nn.Module, params: Params, tasks: Sequence[torch.Tensor], loss_fn: LossFn,
                        steps: int, lr: float, chunk_size: Optional[int] = None) -> Params:
    """Per-task Reptile updates theta_i - params, with theta_i from ``steps`` full-batch SGD steps on task i.

    Batched Reptile (Nichol et al. 2018, arXiv:1803.02999) moves the meta-parameters along the mean of
    these differences; the task-global DP variant (dp-meta-learning-task-global.txt, Alg. 1) makes each
    task's inner optimisation itself DP (per-example clipping and noise inside the task), which is built
    from ``per_example_grads``, ``clip`` and ``noisy_sum`` instead of this non-private inner loop.

    Args:
        tasks: (x, y) stacked over T tasks: [T, n, ...] and [T, n, ...] (a task's training data).
        Others as in ``inner_adapt`` (first order: nothing is differentiated through the inner loop).

    Returns:
        name -> [T, *shape], the difference adapted - params for each task.
    """
    tasks = _check_tasks(tasks, 2, "(x, y)")

    def one_task(p, x, y):
        adapted = inner_adapt(model, p, x, y, loss_fn, steps, lr, first_order=True)
        return {name: adapted[name] - p[name] for name in p}

    return vmap(one_task, in_dims=(None, 0, 0), randomness="error", chunk_size=chunk_size)(_detached(params), *tasks)


def per_example_grads(model: nn.Module, params: Params, x: torch.Tensor, y: torch.Tensor, loss_fn: LossFn,
                      chunk_size: Optional[int] = None) -> Params:
    """Per-example gradients grad_params loss_fn(model(x_j), y_j), name -> [n, *shape], one vmapped call.

    Each example is evaluated as a batch of one, so nothing couples the rows: the property DP-SGD's
    per-example clipping needs (Abadi et al. 2016, arXiv:1607.00133). With ``Conv4(norm="batch")``
    that means each example is normalised with its own statistics (over its pixels), not those of the
    batch it came in; ``norm="group"`` behaves identically per example and in a batch.

    Args:
        x, y: inputs [n, ...] and targets [n, ...].
        chunk_size: as in ``per_task_meta_grads_and_losses``.
    """
    def one_example(p, xj, yj):
        return grad(_loss, argnums=2)(model, loss_fn, p, xj.unsqueeze(0), yj.unsqueeze(0))

    return vmap(one_example, in_dims=(None, 0, 0), randomness="error", chunk_size=chunk_size)(_detached(params), x, y)


def _check_grads(grads: Params, batch_dims: int) -> torch.Size:
    if not grads:
        raise ValueError("grads must be a non-empty dict name -> [n, *shape] tensor")
    batch = None
    for name, g in grads.items():
        if g.dim() < batch_dims or (batch is not None and g.shape[:batch_dims] != batch):
            raise ValueError(f"grads[{name!r}] must have leading (batch) shape {tuple(batch or ())} "
                             f"({batch_dims} dims), got shape {tuple(g.shape)}")
        batch = g.shape[:batch_dims]
    return batch


def flat_norms(grads: Params, batch_dims: int = 1) -> torch.Tensor:
    """The L2 norm of each row over all tensors together: ||(g[name][i] for every name)||_2, shape [n].

    Computed as m * sqrt(sum (g / m)^2) with m the row's largest |entry|, so it neither overflows for
    huge rows (|g| > 1e19 in float32) nor underflows for tiny ones. A row holding inf gives inf, one
    holding NaN gives NaN.

    Args:
        grads: name -> [*batch, *shape], the same batch shape for every tensor.
        batch_dims: how many leading dimensions index rows (1: [n]; 2: [T, n] for per-example
            gradients of several tasks).

    Returns:
        The norms, shape [*batch] (the tensors' dtype and device).
    """
    batch_dims = check_count("batch_dims", batch_dims)
    _check_grads(grads, batch_dims)
    rows = [g.flatten(start_dim=batch_dims) for g in grads.values()]  # each [*batch, numel]
    peak = torch.stack([r.abs().amax(dim=-1) if r.shape[-1] else r.new_zeros(r.shape[:-1]) for r in rows]).amax(0)
    ok = torch.isfinite(peak) & (peak > 0)
    unit = torch.where(ok, peak, torch.ones_like(peak))
    squares = sum((r / unit.unsqueeze(-1)).square().sum(dim=-1) for r in rows)
    return torch.where(ok, unit * squares.sqrt(), torch.where(peak == 0, torch.zeros_like(peak), peak))


def _scale_rows(g: torch.Tensor, factor: torch.Tensor) -> torch.Tensor:
    # factor [*batch] against g [*batch, *shape]; rows with factor 0 become exactly 0 (also if g is inf/NaN).
    f = factor.reshape(factor.shape + (1,) * (g.dim() - factor.dim()))
    return torch.where(f == 0, torch.zeros_like(g), g * f)


def _clip_to(grads: Params, threshold: float, batch_dims: int) -> Params:
    """Rows scaled by min(1, threshold / (norm + 1e-12)), rows with a non-finite norm set to 0; verified."""
    norms = flat_norms(grads, batch_dims)
    factor = torch.clamp(threshold / (norms + 1e-12), max=1.0)
    factor = torch.where(torch.isfinite(norms), factor, torch.zeros_like(factor))
    clipped = {name: _scale_rows(g, factor) for name, g in grads.items()}
    # Rounding can leave a scaled row a few ulps above the threshold: shrink those once more, then check.
    after = flat_norms(clipped, batch_dims)
    over = after > threshold
    if bool(over.any()):
        eps = torch.finfo(after.dtype).eps
        fix = torch.where(over, threshold / after * (1 - 4 * eps), torch.ones_like(after))
        clipped = {name: _scale_rows(g, fix) for name, g in clipped.items()}
        if bool((flat_norms(clipped, batch_dims) > threshold).any()):
            raise RuntimeError(f"clipping failed to bring every norm to <= {threshold!r}")
    return clipped


def clip(grads: Params, C: float, mode: str = "flat", batch_dims: int = 1) -> Tuple[Params, torch.Tensor]:
    """Clip each row to L2 norm at most C: g_i * min(1, C / ||g_i||) (dp-maml.txt Alg. 1; Abadi et al. 2016).

    Modes:
        "flat": one threshold C on the norm of the whole row (all tensors together).
        "per_layer": each parameter tensor (each entry of the dict: a weight and its bias count as two)
            is clipped on its own to C / sqrt(K), K = number of tensors, so the whole row's norm is at
            most sqrt(K (C / sqrt(K))^2) = C: the same sensitivity C as "flat" (McMahan et al. 2018,
            arXiv:1710.06963, Sec. 3, per-layer clipping with equal thresholds). The row is then
            guarded as in "flat" too, so rounding never lifts the total above C.

    A row whose norm is not finite (inf or NaN entries) is replaced by zero (norm 0 <= C); its norm is
    still reported as inf / NaN. The result is checked: every clipped row (every tensor, per layer)
    has measured norm <= its threshold, else RuntimeError.

    Args:
        grads: name -> [*batch, *shape] (per-task or per-example gradients).
        C: clipping threshold, > 0.
        mode: "flat" or "per_layer".
        batch_dims: leading row dimensions, as in ``flat_norms``.

    Returns:
        (clipped, norms): the clipped grads (same shapes) and the flat norms [*batch] before clipping
        (for adaptive clipping from noisy counts, DESIGN.md sec. 3.10; never release them raw).

    Raises:
        ValueError: on C <= 0, an unknown mode, or inconsistent shapes.
    """
    C = check_positive("C", C)
    if mode not in CLIP_MODES:
        raise ValueError(f"mode must be one of {', '.join(CLIP_MODES)}, got {mode!r}")
    norms = flat_norms(grads, batch_dims)
    if mode == "flat":
        return _clip_to(grads, C, batch_dims), norms
    threshold = C / math.sqrt(len(grads))
    clipped = {name: _clip_to({name: g}, threshold, batch_dims)[name] for name, g in grads.items()}
    # K tensors each at C / sqrt(K) can still total C (1 + a few ulps) after rounding: guard the total too.
    return _clip_to(clipped, C, batch_dims), norms


def noisy_sum(grads: Params, mask_or_weights: Optional[torch.Tensor], std: float,
              generator: Optional[torch.Generator] = None, dim: int = 0) -> Params:
    """sum_i w_i g_i + N(0, std^2 I) for each tensor: the Gaussian mechanism on a (masked) sum of rows.

    With Poisson sampling a step keeps a static batch shape and a 0/1 mask says which rows were
    sampled; rows with weight 0 contribute exactly 0 (even if they hold inf or NaN). The noise is drawn
    on each tensor's device and dtype with one ``torch.randn`` call per tensor, whatever the mask: an
    empty sample still releases pure noise, as the accounting of a Poisson-subsampled Gaussian assumes.
    With rows clipped to C and weights in [0, 1], adding or removing one row moves the sum by at most
    C, so std = z C gives noise multiplier z (dp-maml.txt Alg. 1, Eq. 6).

    Args:
        grads: name -> [*lead, n, *shape] with ``dim`` = len(lead) (usually [n, *shape], dim 0).
        mask_or_weights: [*lead, n] 0/1 mask or weights; None: every row with weight 1.
        std: noise standard deviation, finite and >= 0 (0: no noise is drawn).
        generator: a ``torch.Generator`` on the grads' device (None: the global one).
        dim: the dimension summed over.

    Returns:
        name -> [*lead, *shape], the noisy sums.

    Raises:
        ValueError: on a negative or non-finite std, or a weight shape that does not match.
    """
    std = check_real("std", std, low=0.0)
    out = _masked_sum(grads, mask_or_weights, dim)
    if std > 0:
        for name, total in out.items():
            out[name] = total + std * torch.randn(total.shape, generator=generator, dtype=total.dtype,
                                                  device=total.device)
    return out


def masked_sum(grads: Params, mask_or_weights: Optional[torch.Tensor], dim: int = 0) -> Params:
    """sum_i w_i g_i for each tensor, rows of weight 0 contributing exactly 0 (``noisy_sum`` without noise;
    arguments as there)."""
    return _masked_sum(grads, mask_or_weights, dim)


def _masked_sum(grads: Params, mask_or_weights: Optional[torch.Tensor], dim: int) -> Params:
    dim = check_count("dim", dim)
    _check_grads(grads, dim + 1)
    out = {}
    for name, g in grads.items():
        if mask_or_weights is None:
            out[name] = g.sum(dim=dim)
            continue
        if tuple(mask_or_weights.shape) != tuple(g.shape[:dim + 1]):
            raise ValueError(f"mask_or_weights must have shape {tuple(g.shape[:dim + 1])} (the leading dimensions "
                             f"of grads[{name!r}]), got {tuple(mask_or_weights.shape)}")
        w = mask_or_weights.to(device=g.device, dtype=g.dtype)
        w = w.reshape(w.shape + (1,) * (g.dim() - w.dim()))
        out[name] = torch.where(w == 0, torch.zeros_like(g), g * w).sum(dim=dim)
    return out
