"""The local engine: this process computes every task's contribution (``metadp.training.engines``)."""

from __future__ import annotations

from typing import Any, Dict, Optional

import torch

from metadp.training.algorithms import functional as F

__all__ = ["LocalEngine", "LOCAL", "clip_or_measure", "chunked"]


def clip_or_measure(contributions, threshold: Optional[float], mode: str, raw_norms: bool):
    """(the contributions clipped to ``threshold``, their norms before clipping), or where there is no threshold
    (the contributions as they are, their norms if ``raw_norms`` else None): what every engine does to the
    per-task contributions it computed before summing them."""
    if threshold is not None:
        return F.clip(contributions, threshold, mode)
    return contributions, (F.flat_norms(contributions) if raw_norms else None)


def chunked(rows, weights, chunk_size: Optional[int], one_chunk):
    """(the sum over chunks of ``chunk_size`` rows, the norms or None, the losses) of ``one_chunk(rows, weights)``
    -> (summed, norms or None, losses) called on each chunk in order (one chunk where ``chunk_size`` is None): the
    chunk loop of every engine that computes the contributions itself."""
    size = rows.numel()
    step = chunk_size if chunk_size is not None else max(size, 1)
    total, norms, losses = None, [], []
    for start in range(0, max(size, 1), step):
        summed, found, task_losses = one_chunk(rows[start:start + step], weights[start:start + step])
        total = summed if total is None else {k: total[k] + summed[k] for k in total}
        if found is not None:
            norms.append(found)
        losses.append(task_losses)
    return total, (torch.cat(norms) if norms else None), torch.cat(losses)


class LocalEngine:
    """Per-task contributions computed here, in chunks of ``config.chunk_size`` tasks."""

    name = "local"

    def clipped_sum(self, alg, model, params, tasks, rows, weights, loss_fn, c, run, contribution,
                    threshold: Optional[float], raw_norms: bool):
        """(sum of the weighted, clipped per-task contributions, their norms before clipping or None, the tasks'
        losses), computed ``c.chunk_size`` tasks at a time where set: memory holds one chunk's per-task
        contributions, never the whole lot's (lots of thousands of tasks; dp-maml.txt's L = 1,600). The same
        sum as unchunked; an algorithm that draws noise inside each task draws it chunk by chunk (the same
        distribution, another stream)."""
        def one_chunk(chunk, w):
            contributions, task_losses = contribution(alg, model, params, tasks, chunk, loss_fn, c, run.noise_gen)
            contributions, found = clip_or_measure(contributions, threshold, c.clip_mode, raw_norms)
            return F.masked_sum(contributions, w), found, task_losses

        return chunked(rows, weights, c.chunk_size, one_chunk)

    def report_fields(self) -> Dict[str, Any]:
        return {"engine": self.name}


LOCAL = LocalEngine()
