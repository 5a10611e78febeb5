"""A plan as the modules ``metadp.plan`` builds on read it: its fields, as a Protocol (``PlanFields``).

``metadp.plan`` imports ``report``, ``units`` and ``banded_noise`` (a plan's views, guarantees and report), so they
cannot import ``metadp.plan`` back; they take any object with a plan's fields instead, and a frozen ``Plan`` is one.
Keeping the fields here, below ``metadp.plan``, is what keeps the layers one-way (``tests/test_layers.py``).
"""

from __future__ import annotations

from typing import Any, Mapping, Optional, Protocol, Tuple

from metadp.amplification.multistage import Hierarchy
from metadp.plan_noise import NoiseSpec
from metadp.releases import Release
from metadp.sampling import Sampling

__all__ = ["PlanFields"]


class PlanFields(Protocol):
    """The fields of ``metadp.plan.Plan`` (read-only; the meaning of each is documented there)."""

    @property
    def name(self) -> str: ...
    @property
    def unit(self) -> str: ...
    @property
    def relation(self) -> str: ...
    @property
    def delta(self) -> float: ...
    @property
    def steps(self) -> int: ...
    @property
    def sampling(self) -> Sampling: ...
    @property
    def noise(self) -> NoiseSpec: ...
    @property
    def references(self) -> Tuple[str, ...]: ...
    @property
    def claim(self) -> Optional[Mapping[str, Any]]: ...
    @property
    def group_size(self) -> Optional[int]: ...
    @property
    def hierarchy(self) -> Optional[Hierarchy]: ...
    @property
    def record_multiplicity(self) -> Optional[int]: ...
    @property
    def release(self) -> Optional[Release]: ...
    @property
    def against(self) -> Optional[str]: ...
