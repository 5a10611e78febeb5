"""Each sampled task's contribution to a step (name -> [B, ...]) and its loss [B], before the central clip.

One function per kind of per-task computation; an algorithm (``metadp.training.algorithms``) names
the one it uses in ``Algorithm.contribution``. Signature: ``f(algorithm, model, params, pool, rows,
loss_fn, config, noise_gen, part=None)``, ``params`` detached, ``rows`` the sampled (padded) task
indices, ``noise_gen`` the run's noise generator (inner noise is drawn from it, in a fixed order).

``part`` (a slice of ``rows``; ``metadp.training.engines.distributed``): compute only those tasks'
contributions, but draw the inner noise of *every* row of ``rows`` and keep the part's, so that the
processes that share a chunk of tasks draw, between them, exactly what one process draws for it.
"""

from __future__ import annotations

import math

import torch

from metadp.training.algorithms import functional as F
from metadp.training.algorithms import private_steps as P

__all__ = ["meta_gradients", "reptile_updates", "dp_reptile_updates", "query_sums", "query_sums_given", "resolve"]
_NAMED = ("meta_gradients", "reptile_updates", "dp_reptile_updates", "query_sums")  # an algorithm's contribution


def _inner_std(c) -> float:
    return c.inner_noise * c.inner_clip if c.inner_noise > 0 else 0.0  # z_in = 0 with C_in = inf: no noise


def _part(rows, part):
    return rows if part is None else rows[part]


def _noise_part(noise, part):
    return noise if part is None else {k: v[part] for k, v in noise.items()}


def meta_gradients(alg, model, params, pool, rows, loss_fn, c, noise_gen, part=None):
    """Per-task meta-gradients, first or second order (MAML family)."""
    return F.per_task_meta_grads_and_losses(model, params, pool.batch(_part(rows, part)), loss_fn, c.inner_steps,
                                            c.inner_lr, c.first_order, c.chunk_size)


def reptile_updates(alg, model, params, pool, rows, loss_fn, c, noise_gen, part=None):
    """Per-task SGD updates theta_i - theta (Reptile) and the tasks' losses at theta."""
    batch = pool.joint_batch(_part(rows, part))
    updates = F.reptile_task_update(model, params, batch, loss_fn, c.inner_steps, c.inner_lr, c.chunk_size)
    losses = torch.func.vmap(lambda x, y: F._loss(model, loss_fn, params, x, y))(*batch)
    return updates, losses


def dp_reptile_updates(alg, model, params, pool, rows, loss_fn, c, noise_gen, part=None):
    """Per-task full-batch DP-SGD updates (task-global DP-Reptile)."""
    batch = pool.joint_batch(_part(rows, part))
    noise = _noise_part(P.draw_inner_noise(params, rows.numel(), c.inner_steps, noise_gen), part)
    return P.dp_reptile_updates(model, params, batch, loss_fn, c.inner_steps, c.inner_lr, c.inner_clip,
                                _inner_std(c), noise, c.chunk_size)


def query_sums(alg, model, params, pool, rows, loss_fn, c, noise_gen, part=None):
    """DP inner loop, per-example query gradients clipped and summed per task (``SampleLevel``): clipped
    by ``clip``, or with ``alg.local_noise`` by ``inner_clip`` and sent as the client's noisy mean
    (dp-fedmeta.txt Alg. 3, line 13). The inner noise is drawn first, from ``noise_gen``."""
    batch = pool.batch(_part(rows, part))
    noise = _noise_part(P.draw_inner_noise(params, rows.numel(), c.inner_steps, noise_gen), part)
    return query_sums_given(alg, model, params, batch, loss_fn, c, noise, noise_gen, part=part, tasks=rows.numel())


def query_sums_given(alg, model, params, batch, loss_fn, c, noise, noise_gen=None, part=None, tasks=None):
    """``query_sums`` on the tasks ``batch`` (x_s, y_s, x_q, y_q) with the inner noise given (standard
    normal, name -> [T, steps, *shape]); ``noise_gen`` draws only the local noise of ``alg.local_noise``
    (for ``tasks`` rows, keeping the ``part`` the batch holds, as ``query_sums`` draws the inner noise).
    A canary audit (``metadp.verify.support_canaries``) replays a task's released inner step with it."""
    inner_std = _inner_std(c)
    grads, losses = P.per_example_query_grads(model, params, batch, loss_fn, c.inner_steps, c.inner_lr, c.inner_clip,
                                              inner_std, noise, c.first_order, c.chunk_size)
    outer_clip = c.inner_clip if alg.local_noise else c.clip
    if math.isfinite(outer_clip):
        grads, _ = F.clip(grads, outer_clip, c.clip_mode, batch_dims=2)
    sums = P.task_sums(grads)
    if alg.local_noise:
        m = float(batch[2].shape[1])
        rows = tasks if tasks is not None else next(iter(sums.values())).shape[0]
        sums = {k: (g + inner_std * _drawn(rows, g, noise_gen, part)) / m if inner_std > 0 else g / m
                for k, g in sums.items()}
    return sums, losses


def _drawn(rows: int, g: torch.Tensor, noise_gen, part) -> torch.Tensor:
    """Standard normal noise for ``rows`` tasks shaped like ``g``'s rows, the ``part`` of them ``g`` holds."""
    noise = torch.randn((rows, *g.shape[1:]), generator=noise_gen, dtype=g.dtype, device=g.device)
    return noise if part is None else noise[part]


def resolve(alg):
    """The contribution function of ``alg``: its callable, or the function of this module it names."""
    fn = alg.contribution
    if callable(fn):
        return fn
    found = globals().get(fn) if fn in _NAMED else None
    if found is None:
        raise ValueError(f"algorithm {alg.name!r}: contribution must be a callable or one of {list(_NAMED)}, "
                         f"got {fn!r}")
    return found
