"""What every sampler of ``metadp.training.data.samplers`` shares: its generator, checkpointed with its state."""

from __future__ import annotations

from typing import Any, Dict, Optional

import torch

from metadp.core import events as ev

__all__ = ["_Sampler", "_check_generator", "_check_event"]


def _check_generator(generator: Optional[torch.Generator]) -> torch.Generator:
    if generator is None:
        generator = torch.Generator()
        generator.seed()  # from the operating system's entropy, not the fixed default seed
        return generator
    if not isinstance(generator, torch.Generator):
        raise ValueError(f"generator must be a torch.Generator or None, got {type(generator).__name__}")
    return generator


def _check_event(name: str, inner) -> ev.Event:
    if not isinstance(inner, ev.Event):
        raise ValueError(f"{name} must be a metadp Event (e.g. Gaussian(z)), got {type(inner).__name__}")
    return inner


class _Sampler:
    """Holds the generator; checkpoints its state (and any state of the sampler)."""

    relation: str

    def __init__(self, generator: Optional[torch.Generator]):
        self._generator = _check_generator(generator)

    @property
    def generator(self) -> torch.Generator:
        return self._generator

    @property
    def device(self) -> torch.device:
        return self._generator.device

    def state_dict(self) -> Dict[str, Any]:
        """The generator's state (and the sampler's own), to save with checkpoints."""
        return {"generator": self._generator.get_state()}

    def load_state_dict(self, state: Dict[str, Any]) -> None:
        self._generator.set_state(state["generator"])
