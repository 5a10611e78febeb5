"""Banded correlated noise on the released sums (DP-FTRL with banded matrix factorization, BandMF; issue 34).

A banded plan (``noise.correlation = "banded"``, ``metadp.banded_noise``) certifies the releases G_t + sigma (C^-1 Z)_t,
t = 0, 1, ..., with Z's rows i.i.d. N(0, I), sigma = z x clip and C the lower-triangular Toeplitz strategy with
coefficients c_0..c_{b-1} (``banded_noise.plan_coefficients``): they are a post-processing of C G + sigma Z.
:class:`BandedSumNoise` streams w_t = (C^-1 Z)_t by forward substitution,

    w_t = (z_t - sum_{k=1}^{b-1} c_k w_{t-k}) / c_0,

keeping the last b - 1 rows (O(b x parameters) memory, as ``metadp.mechanisms.banded.BandedNoise`` does in numpy and
Algorithm 9 of Choquette-Choo et al. 2023, arXiv:2306.08153). z_t is drawn as ``F.noisy_sum`` draws independent
noise (one ``torch.randn`` per tensor, in the parameters' order, on the same generator), so one band (C = I) adds
exactly the noise of an independent-noise run with the same seed. The recursion runs in float64 and the history
is part of the run's checkpoint: a resumed run continues the same C^-1 Z.

sigma must stay the same for the whole run (the certified mechanism scales one Z): a release asked with another
std is refused rather than drawn.
"""

from __future__ import annotations

import math
from typing import Any, Dict, List, Optional, Sequence

import torch

__all__ = ["BandedSumNoise"]

Params = Dict[str, torch.Tensor]


class BandedSumNoise:
    """Streams sigma (C^-1 Z)_t for the released sums (module docstring).

    Args:
        coefficients: c_0..c_{b-1} of the Toeplitz strategy (c_0 != 0, finite).
    """

    def __init__(self, coefficients: Sequence[float]):
        c = tuple(float(x) for x in coefficients)
        if not c or c[0] == 0.0 or not all(math.isfinite(x) for x in c):
            raise ValueError(f"banded noise needs finite coefficients with c_0 != 0, got {c!r}")
        self.coefficients = c
        self.std: Optional[float] = None
        self.step = 0
        self._history: List[Params] = []  # w_{t-1}, w_{t-2}, ... (float64), at most b - 1 of them

    @property
    def bands(self) -> int:
        return len(self.coefficients)

    def add(self, sums: Params, std: float, generator: Optional[torch.Generator]) -> Params:
        """``sums`` + std (C^-1 Z)_t for this step t (then t advances).

        Raises:
            ValueError: on a std other than the run's first (the certified mechanism scales one Z), or not > 0.
        """
        if not (std > 0 and math.isfinite(std)):
            raise ValueError(f"banded noise needs a finite std > 0, got {std!r}")
        if self.std is None:
            self.std = float(std)
        elif float(std) != self.std:
            raise ValueError(f"banded noise: this release asks std {std!r}, the run's is {self.std!r}; the certified "
                             "mechanism scales one C^-1 Z by one std (an adaptive clip cannot change it)")
        c0, out, w = self.coefficients[0], {}, {}
        for name, total in sums.items():
            z = torch.randn(total.shape, generator=generator, dtype=total.dtype, device=total.device)
            x = z.double()
            for k, past in enumerate(self._history, start=1):
                x = x - self.coefficients[k] * past[name]
            w[name] = x / c0 if c0 != 1.0 else x
            out[name] = total + std * (w[name].to(total.dtype) if self.bands > 1 else z)
        if self.bands > 1:
            self._history = [w] + self._history[: self.bands - 2]
        self.step += 1
        return out

    def state_dict(self) -> Dict[str, Any]:
        """What a checkpoint keeps: the coefficients, std, step and the last b - 1 rows of C^-1 Z (on the CPU)."""
        return {"coefficients": self.coefficients, "std": self.std, "step": self.step,
                "history": [{k: v.cpu() for k, v in row.items()} for row in self._history]}

    def load_state_dict(self, state: Dict[str, Any], device=None) -> None:
        """Continues the stream a checkpoint saved (``state_dict``).

        Raises:
            ValueError: when the checkpoint's coefficients are not this run's (another strategy's noise).
        """
        if tuple(state["coefficients"]) != self.coefficients:
            raise ValueError("the checkpoint's banded noise used other coefficients than this run's strategy: its "
                             "noise cannot be continued (resume with the plan the run started with)")
        self.std, self.step = state["std"], int(state["step"])
        self._history = [{k: v.to(device) if device is not None else v for k, v in row.items()}
                         for row in state["history"]]
