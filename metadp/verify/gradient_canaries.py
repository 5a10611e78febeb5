"""Gradient (Dirac) canaries for the one-run audit of a real training run (``metadp verify run``).

Why. Under task-level DP (add/remove) the trainer's guarantee holds for every data set, hence for every
per-task contribution function: the proof of the clipped, Poisson-sampled Gaussian sum only uses that
each sampled task's clipped contribution has norm <= C. So a task whose contribution (before the clip)
is any chosen vector v_i is a legitimate neighbour to audit with, and the auditor may choose v_i to lie
off the pool's gradient subspace (Nasr et al. 2023, arXiv:2302.07956, Sec. 3, "gradient canaries";
Steinke, Nasr & Jagielski 2023, arXiv:2305.08846, Sec. 7, "Dirac canaries": one coordinate each). A data
canary (a whole sinusoid task) has a meta-gradient that shares a few directions with every other task's
in a small MLP, so at low noise the other sampled tasks, not the noise, hide it; a Dirac canary is hidden
by the noise and by the other tasks' component along one coordinate only.

What. Canary i gets a distinct parameter coordinate j_i and a sign s_i (drawn with the seed, before the
inclusion bits, independent of them) and the unit direction u_i = s_i e_{j_i}. The trainer's audit hook
``contributions(fn)`` wraps the contribution function of the step: a canary row's contribution is
replaced, before the trainer's own clip, sum and noise run on it, by

* task view: ``GRADIENT_NORM`` C u_i (an excluded canary task is absent from the pool: never sampled);
* record view: + ``GRADIENT_NORM`` C u_i with the canary record in its host task, - ``GRADIENT_NORM`` C u_i
  without it. The record view certifies any change of one record's host-task clipped contribution
  inside the C-ball (``metadp.mechanisms.pooled``: g and g' with |g|, |g'| <= C), and clipped these are
  +-C u_i, the antipodal configuration, which that module shows is attained.

The norm GRADIENT_NORM C > C means the trainer's clip is exercised on every canary (the ``no-clipping``
control then lets GRADIENT_NORM C through). Scores: the white-box release score of
``metadp.verify.canaries`` with a_i, b_i the clipped canary contributions in and out, and a final-model
score: the final parameters' move along u_i, against the update's sign.
"""

from __future__ import annotations

from typing import Any, Callable, Dict, Optional, cast

import numpy as np
import torch

from metadp.core.validation import check_count

__all__ = ["GRADIENT_NORM", "DiracCanaries"]

GRADIENT_NORM = 4.0  # each canary vector's norm before the trainer's clip, in units of the clipping threshold C


class DiracCanaries:
    """m Dirac canary directions over the parameters ``params`` (name -> tensor, the model's order), for
    the pool rows ``rows``; ``signs`` [m] (+1: the canary's "in" vector, -1: minus it, 0: zero) say
    what each canary row contributes in this run (module docstring)."""

    def __init__(self, params: Dict[str, torch.Tensor], rows: torch.Tensor, population: int, clip: float,
                 generator: torch.Generator):
        self.names = list(params)
        self.shapes = [tuple(params[n].shape) for n in self.names]
        size = sum(int(np.prod(s)) for s in self.shapes)
        m = check_count("canaries", rows.numel(), minimum=1)
        if m > size:
            raise ValueError(f"--canaries: gradient canaries take one parameter coordinate each, so at most the "
                             f"model's {size} parameters, got {m} (use a wider --hidden or --canary-kind data)")
        self.coordinates = torch.randperm(size, generator=generator)[:m]
        self.signs = torch.where(torch.rand(m, generator=generator) < 0.5, -1.0, 1.0).double()
        self.directions = torch.zeros(m, size, dtype=torch.float64)  # [m, P] unit vectors u_i
        self.directions[torch.arange(m), self.coordinates] = self.signs
        self.slot = torch.full((population,), -1, dtype=torch.long)  # pool row -> canary index, -1: none
        self.slot[rows] = torch.arange(m)
        self.norm = GRADIENT_NORM * clip
        self._rows_value: Optional[Dict[str, torch.Tensor]] = None

    def unflatten(self, flat: torch.Tensor) -> Dict[str, torch.Tensor]:
        """[B, P] -> name -> [B, *shape], in the model's parameter order."""
        out, start = {}, 0
        for name, shape in zip(self.names, self.shapes):
            n = int(np.prod(shape))
            out[name] = flat[:, start:start + n].reshape((flat.shape[0],) + shape)
            start += n
        return out

    def vectors(self, coefficients: torch.Tensor) -> Dict[str, torch.Tensor]:
        """Each canary's contribution before the clip: coefficient_i x GRADIENT_NORM C u_i (name -> [m, ...])."""
        return self.unflatten(coefficients.double()[:, None] * self.norm * self.directions)

    def set_run(self, coefficients: torch.Tensor) -> None:
        """What each canary row contributes in this run (+1: in, -1: minus the in vector, 0: nothing)."""
        self._rows_value = self.vectors(coefficients)

    def wrap(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        """The contribution function ``fn`` with the canary rows' contributions replaced (the trainer's
        ``audit.contributions`` hook: its clip, sum and noise then run on them)."""
        def with_canaries(alg: Any, model: Any, params: Any, pool: Any, rows: Any, loss_fn: Any, c: Any,
                          noise_gen: Any) -> Any:
            contributions, losses = fn(alg, model, params, pool, rows, loss_fn, c, noise_gen)
            slot = self.slot[rows.cpu()]
            hit = slot >= 0
            if not bool(hit.any()):
                return contributions, losses
            out = {}
            for name, v in contributions.items():
                v = v.clone()
                value = cast(Dict[str, torch.Tensor], self._rows_value)[name]  # (set_run set it)
                v[hit.to(v.device)] = value[slot[hit]].to(dtype=v.dtype, device=v.device)
                out[name] = v
            return out, losses
        return with_canaries

    def final_model_scores(self, start: Dict[str, torch.Tensor], final: Dict[str, torch.Tensor],
                           update_sign: float) -> np.ndarray:
        """The final model's move along each canary's direction, against the update (the trainer steps
        the parameters along -update_sign x release): -update_sign <theta_T - theta_0, u_i>."""
        move = torch.cat([(final[n].detach() - start[n].detach()).reshape(-1).double() for n in self.names])
        return (-update_sign * (self.directions @ move)).numpy()
