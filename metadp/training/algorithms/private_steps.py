"""Per-task computations of the record-level private meta-learners: DP inner loops, per-example query
gradients through them, and DP-Reptile's within-task DP-SGD (all vectorised with ``torch.func``).

Three algorithms make a task's own optimisation differentially private for its records:

* sample-level DP-MAML (dp-maml.txt Alg. 2): the inner update of task i is
  theta <- theta - lr (sum_j clip(g_j, C_in) + N(0, (z_in C_in)^2 I)) / n_s over its n_s support
  examples; the query examples' gradients w.r.t. the meta-parameters are then clipped one by one and
  summed (the caller adds the outer noise once over all tasks);
* DP-FedMeta DP-AGRLR (dp-fedmeta.txt Alg. 3): the same client computation, plus local noise on the
  task's query sum before it leaves the client (the caller adds it: ``local_query_release``);
* task-global DP-Reptile (dp-meta-learning-task-global.txt Alg. 1, batched as in its Sec. 5): full-batch
  DP-SGD on the task's records for ``steps`` steps; the task sends theta_i - theta.

What the inner noise protects, and what it does not. With **first-order** meta-gradients the query
gradients are taken at the adapted parameters, which depend on a support record only through the noisy
inner sums: by post-processing a support record costs the inner Gaussians only. With **second-order**
meta-gradients the outer gradient d L_q(theta_i(phi)) / d phi multiplies by the Jacobian of the inner
update, I - lr/n_s sum_j d clip(g_j(phi)) / d phi, which holds every support record's Hessian *without
noise*: a support record also moves every query gradient of its task (each by up to 2 C_out after
clipping). dp-maml.txt Alg. 2 does not account for this; ``metadp.releases`` charges it.

The inner noise is drawn outside the vmapped functions (they run with ``randomness="error"``) from the
caller's generator, one standard normal tensor per task, inner step and parameter, and scaled inside.
Clipping inside a vmap cannot branch on data, so ``clip_rows`` scales with a float64 norm and a margin
that provably leaves every row at norm <= C (its docstring).
"""

from __future__ import annotations

import functools
import math
from typing import Dict, Optional, Sequence, Tuple

import torch
from torch import nn
from torch.func import grad, vjp, vmap

from metadp.training.algorithms.functional import LossFn, Params, _check_tasks, _detached, _loss

__all__ = ["clip_rows", "draw_inner_noise", "private_inner_adapt", "per_example_query_grads", "dp_reptile_updates"]

# Rows are scaled by C (1 - _MARGIN) / ||row||: the float64 norm of float32 entries is exact to ~1e-16
# relative, and rounding each scaled entry to float32 moves the norm by at most 2^-24 (6e-8) relative,
# so the clipped norm is at most C (1 - 1e-6)(1 + 6e-8)(1 + 1e-15) < C.
_MARGIN = 1e-6


def clip_rows(grads: Params, C: float, batch_dims: int = 1) -> Params:
    """Each row scaled to norm <= C (rows below C unchanged up to a factor 1 - 1e-6), safe inside ``vmap``.

    No data-dependent branch: the factor min(1, C (1 - 1e-6) / ||row||) is computed with the row norm
    in float64, which keeps every clipped row's norm strictly below C (see ``_MARGIN``), and has finite
    derivatives (second-order MAML differentiates through it). A row with a non-finite norm becomes 0;
    C = inf returns the rows unchanged.

    Args:
        grads: name -> [*batch, *shape].
        C: threshold, > 0 (not validated: called inside vmapped code; callers validate).
        batch_dims: leading row dimensions.
    """
    if math.isinf(C):  # no clipping (the non-private limit); rows pass unchanged
        return grads
    rows = [g.flatten(start_dim=batch_dims).double() for g in grads.values()]
    square = torch.stack([r.square().sum(dim=-1) for r in rows]).sum(0)  # [*batch], float64
    bound = C * (1.0 - _MARGIN)
    # bound / sqrt(max(||row||^2, bound^2)) = min(1, bound / ||row||), with finite derivatives everywhere
    # (second-order MAML differentiates through it; sqrt is never taken at 0)
    factor = bound / torch.clamp(square, min=bound * bound).sqrt()
    factor = torch.where(torch.isfinite(square), factor, torch.zeros_like(factor))
    out = {}
    for name, g in grads.items():
        f = factor.to(g.dtype).reshape(factor.shape + (1,) * (g.dim() - batch_dims))
        out[name] = torch.where(f == 0, torch.zeros_like(g), g * f)
    return out


def draw_inner_noise(params: Params, tasks: int, steps: int, generator: Optional[torch.Generator]) -> Params:
    """Standard normal noise for the inner loops: name -> [tasks, steps, *shape] (on each tensor's device)."""
    return {name: torch.randn((tasks, steps, *p.shape), generator=generator, dtype=p.dtype, device=p.device)
            for name, p in params.items()}


def _per_example(model: nn.Module, loss_fn: LossFn, params: Params, x: torch.Tensor, y: torch.Tensor) -> Params:
    # Each example as a batch of one (nothing couples the rows), inside the caller's vmap over tasks.
    def one(p, xj, yj):
        return grad(_loss, argnums=2)(model, loss_fn, p, xj.unsqueeze(0), yj.unsqueeze(0))

    return vmap(one, in_dims=(None, 0, 0), randomness="error")(params, x, y)


def private_inner_adapt(model: nn.Module, params: Params, x: torch.Tensor, y: torch.Tensor, loss_fn: LossFn,
                        steps: int, lr: float, clip: float, std: float, noise: Params, divisor: float,
                        first_order: bool) -> Params:
    """``steps`` full-batch DP-SGD steps on one task's examples (x, y), from ``params``.

    Each step: per-example gradients, each clipped to ``clip`` (``clip_rows``), summed, plus
    ``std * noise[name][s]``, divided by ``divisor`` (a public constant: the nominal support size, as
    dp-maml.txt Alg. 2 divides by |D^s|), then theta <- theta - lr * that. First order: the noisy
    gradient is detached (the meta-gradient is taken at the adapted point, post-processing).

    Args:
        noise: name -> [steps, *shape] standard normal draws for this task.
        Others as in ``functional.inner_adapt``.
    """
    per_example = functools.partial(_per_example, model, loss_fn)
    for s in range(steps):
        g = clip_rows(per_example(params, x, y), clip)
        step = {name: (t.sum(0) + std * noise[name][s]) / divisor for name, t in g.items()}
        if first_order:
            step = {name: t.detach() for name, t in step.items()}
        params = {name: p - lr * step[name] for name, p in params.items()}
    return params


def per_example_query_grads(model: nn.Module, params: Params, tasks: Sequence[torch.Tensor], loss_fn: LossFn,
                            steps: int, lr: float, inner_clip: float, inner_std: float, noise: Params,
                            first_order: bool, chunk_size: Optional[int] = None) -> Tuple[Params, torch.Tensor]:
    """Per-task, per-query-example meta-gradients after a DP inner loop (dp-maml.txt Alg. 2, lines 2-12).

    For each task i and query example j: d/d phi of L(theta_i(phi); x_q[i, j]) with theta_i the DP
    inner loop of ``private_inner_adapt`` on task i's support set (divisor: the support size). Second
    order differentiates through the inner loop (one ``vjp`` per task, vmapped over its query examples);
    first order takes the gradient at theta_i.

    Args:
        tasks: (x_s, y_s, x_q, y_q) stacked over T tasks.
        inner_clip, inner_std: the inner per-example threshold C_in and noise std z_in C_in.
        noise: name -> [T, steps, *shape] standard normal (``draw_inner_noise``).
        chunk_size: tasks evaluated at a time (``vmap``'s ``chunk_size``).

    Returns:
        (grads, losses): name -> [T, m, *shape] per-example query gradients (unclipped), and the query
        losses at theta_i [T] (diagnostics).
    """
    x_s, y_s, x_q, y_q = _check_tasks(tasks, 4, "(x_s, y_s, x_q, y_q)")
    divisor = float(x_s.shape[1])

    def one_task(p, xs, ys, xq, yq, nz):
        def adapt(p0):
            return private_inner_adapt(model, p0, xs, ys, loss_fn, steps, lr, inner_clip, inner_std, nz, divisor,
                                       first_order)

        if first_order:
            adapted = adapt(p)
            g = _per_example(model, loss_fn, {k: v.detach() for k, v in adapted.items()}, xq, yq)
        else:
            adapted, pullback = vjp(adapt, p)
            gq = _per_example(model, loss_fn, adapted, xq, yq)
            g = vmap(lambda cot: pullback(cot)[0], randomness="error")(gq)
        return g, _loss(model, loss_fn, adapted, xq, yq)

    return vmap(one_task, in_dims=(None, 0, 0, 0, 0, 0), randomness="error", chunk_size=chunk_size)(
        _detached(params), x_s, y_s, x_q, y_q, noise)


def dp_reptile_updates(model: nn.Module, params: Params, tasks: Sequence[torch.Tensor], loss_fn: LossFn,
                       steps: int, lr: float, clip: float, std: float, noise: Params,
                       chunk_size: Optional[int] = None) -> Tuple[Params, torch.Tensor]:
    """Task-global DP-Reptile: per task, ``steps`` full-batch DP-SGD steps on its n records (clip ``clip``,
    noise std ``std``, divisor n), and the difference theta_i - params the task sends.

    Args:
        tasks: (x, y) stacked over T tasks: [T, n, ...].
        noise: name -> [T, steps, *shape] standard normal.

    Returns:
        (updates, losses): name -> [T, *shape], and each task's loss at ``params`` before adapting [T].
    """
    x, y = _check_tasks(tasks, 2, "(x, y)")
    divisor = float(x.shape[1])

    def one_task(p, xt, yt, nz):
        adapted = private_inner_adapt(model, p, xt, yt, loss_fn, steps, lr, clip, std, nz, divisor, first_order=True)
        return {k: adapted[k] - p[k] for k in p}, _loss(model, loss_fn, p, xt, yt)

    return vmap(one_task, in_dims=(None, 0, 0, 0), randomness="error", chunk_size=chunk_size)(
        _detached(params), x, y, noise)


def task_sums(grads: Params) -> Dict[str, torch.Tensor]:
    """Sum of per-example rows within each task: name -> [T, m, *shape] to [T, *shape]."""
    return {name: g.sum(dim=1) for name, g in grads.items()}
