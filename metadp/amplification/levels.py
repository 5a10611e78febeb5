"""Sampling hierarchies (episodes drawn level by level: Tombs, Kotevska & Young 2022, Algorithm 1): the
levels, their draws and rates, and the tree of units (``Hierarchy``). Their inclusion probabilities and
amplification bound are in ``metadp.amplification.multistage``.
"""

from __future__ import annotations

import bisect
import itertools
import numbers
from dataclasses import dataclass
from fractions import Fraction
from typing import List, Optional, Tuple, Union, cast

from metadp.core.validation import check_count

__all__ = ["Level", "Hierarchy", "Units"]

Units = Union[int, Tuple[int, ...]]
_DRAWS = ("fixed", "poisson")


def _exact_rate(value) -> Fraction:
    """A rate as an exact Fraction: strings ("0.3", "3/10") and Fractions exactly, floats by their
    shortest decimal repr (0.1 -> 1/10, the number that was typed; the binary double differs by < 1e-16
    relative)."""
    if isinstance(value, bool) or not isinstance(value, (str, numbers.Rational, float)):
        raise ValueError(f"rate must be a string, Fraction or float in (0, 1], got {value!r}")
    try:
        rate = Fraction(str(value)) if isinstance(value, (str, float)) else Fraction(value)
    except (ValueError, ZeroDivisionError):
        raise ValueError(f"rate must be a number in (0, 1], got {value!r}") from None
    if not 0 < rate <= 1:
        raise ValueError(f"rate must be in (0, 1], got {value!r}")
    return rate


@dataclass(frozen=True)
class Level:
    """One level of a sampling hierarchy.

    Args:
        name: what the units of this level are ("task", "class", "drawing").
        draw: ``"fixed"`` (``size`` units without replacement from each selected parent) or
            ``"poisson"`` (each unit kept independently with probability ``rate``).
        size: n_j >= 1 for a fixed draw (None for Poisson); at most the smallest ``units`` entry.
        rate: p_j in (0, 1] for a Poisson draw (None for fixed), as a string ("0.3", "3/10"),
            Fraction or float (converted through its decimal repr); stored as a Fraction.
        units: the number of units of this level under each parent unit of the level above: one int
            for every parent, or a tuple with one count per parent, in order (level 1 has one parent,
            the dataset). The last level's units are the elements.

    Raises:
        ValueError: on an unknown draw, a missing or superfluous size/rate, counts < 1, or a size
            larger than a unit.
    """

    name: str
    draw: str
    size: Optional[int] = None
    rate: Optional[Fraction] = None
    units: Units = None  # type: ignore[assignment]  # required: None (the default) is refused by name

    def __post_init__(self):
        if not isinstance(self.name, str) or not self.name:
            raise ValueError(f"name must be a non-empty string, got {self.name!r}")
        if self.draw not in _DRAWS:
            raise ValueError(f"draw must be 'fixed' or 'poisson', got {self.draw!r}")
        object.__setattr__(self, "units", _check_units(self.units))
        smallest = self.units if isinstance(self.units, int) else min(self.units)
        if self.draw == "fixed":
            if self.rate is not None:
                raise ValueError(f"rate must be None for a fixed draw (level {self.name!r}), got {self.rate!r}")
            size = check_count("size", self.size, minimum=1)
            if size > smallest:
                raise ValueError(f"size must be in [1, {smallest}] (the smallest unit count at level "
                                 f"{self.name!r}), got {self.size!r}")
            object.__setattr__(self, "size", size)
        else:
            if self.size is not None:
                raise ValueError(f"size must be None for a Poisson draw (level {self.name!r}), got {self.size!r}")
            object.__setattr__(self, "rate", _exact_rate(self.rate))

    def factor(self, children: int) -> Fraction:
        """The probability that a given child of a selected parent with ``children`` children is selected."""
        # a fixed draw has a size, a Poisson one a rate (checked at construction)
        return Fraction(cast(int, self.size), children) if self.draw == "fixed" else cast(Fraction, self.rate)


def _check_units(units) -> Units:
    if isinstance(units, (tuple, list)):
        if len(units) == 0:
            raise ValueError("units must be an int >= 1 or a non-empty tuple of ints >= 1, got ()")
        return tuple(check_count(f"units[{i}]", u, minimum=1) for i, u in enumerate(units))
    if units is None:
        raise ValueError("units must be an int >= 1 or a non-empty tuple of ints >= 1, got None")
    return check_count("units", units, minimum=1)


@dataclass(frozen=True)
class Hierarchy:
    """The levels of a multistage sampler, top (level 1) to elements (last).

    Examples:
        DP-MAML on Omniglot, 5 of 1,150 classes per episode, 2 of each class's 20 drawings::

            Hierarchy((Level("class", "fixed", size=5, units=1150),
                       Level("drawing", "fixed", size=2, units=20)))

        Tombs et al.'s Example 3.1 (18 examples: units of 4, 2, 3 under U1 and 4, 5 under U2)::

            Hierarchy((Level("primary", "fixed", size=1, units=2),
                       Level("ultimate", "fixed", size=1, units=(3, 2)),
                       Level("example", "fixed", size=1, units=(4, 2, 3, 4, 5))))

    Raises:
        ValueError: if levels is empty, holds a non-Level, or a tuple of unit counts does not have
            one entry per unit of the level above.
    """

    levels: Tuple[Level, ...]

    def __post_init__(self):
        levels = tuple(self.levels) if isinstance(self.levels, (tuple, list)) else None
        if not levels or not all(isinstance(level, Level) for level in levels):
            raise ValueError(f"levels must be a non-empty tuple of Level, got {self.levels!r}")
        object.__setattr__(self, "levels", levels)
        for level, parents in zip(levels, (1,) + self.unit_counts()):
            if isinstance(level.units, tuple) and len(level.units) != parents:
                raise ValueError(f"units of level {level.name!r} must have one entry per unit of the level "
                                 f"above ({parents}), got {len(level.units)} entries")

    def unit_counts(self) -> Tuple[int, ...]:
        """The number of units at each level (the last entry is the number of elements)."""
        counts, parents = [], 1
        for level in self.levels:
            parents = parents * level.units if isinstance(level.units, int) else sum(level.units)
            counts.append(parents)
        return tuple(counts)

    def child_starts(self, j: int) -> Optional[List[int]]:
        """For a level with per-parent counts, the index of each parent's first child (else None)."""
        units = self.levels[j].units
        return None if isinstance(units, int) else list(itertools.accumulate(units, initial=0))[:-1]

    def path_of(self, element: int) -> Tuple[int, ...]:
        """The local index (position among its siblings) of the element and of each of its ancestors."""
        path, index = [], element
        for j in reversed(range(len(self.levels))):
            units, starts = self.levels[j].units, self.child_starts(j)
            if starts is None:
                index, local = divmod(index, cast(int, units))  # one count for every parent
            else:
                parent = bisect.bisect_right(starts, index) - 1
                index, local = parent, index - starts[parent]
            path.append(local)
        return tuple(reversed(path))

    def element_of(self, path: Tuple[int, ...]) -> int:
        """The global index (in level order) of the element at ``path``, the inverse of ``path_of``."""
        if not isinstance(path, tuple) or len(path) != len(self.levels):
            raise ValueError(f"path must be a tuple of {len(self.levels)} local indices, got {path!r}")
        index = 0
        for j, local in enumerate(path):
            starts, units = self.child_starts(j), self.levels[j].units
            children = units if isinstance(units, int) else units[index]  # starts is None for an int
            if isinstance(local, bool) or not isinstance(local, int) or not 0 <= local < children:
                raise ValueError(f"path[{j}] must be an integer in [0, {children - 1}], got {local!r}")
            index = index * children + local if starts is None else starts[index] + local
        return index
