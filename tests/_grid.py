"""Oracle grids split into a fast covering subset and a slow remainder (STYLE.md: "Slow sweeps behind a
slow marker; the default suite stays fast").

``cover(points, default)`` turns a grid into ``pytest.param``s: the points in ``default`` run in the
default suite, every other point is marked ``slow`` (``python -m pytest -m slow`` runs them), so the full
grid is still checked and nothing is dropped. It refuses a ``default`` that is not a cover: a point
outside the grid (a typo would silently run nothing), or, for grids of tuples, a value of some axis
(a rate, a noise level, an order) that no default point uses.

    _POINTS = product([1e-8, 1e-2, 0.9], [0.3, 100.0])
    @pytest.mark.parametrize("rate,noise", cover(_POINTS, default=[(1e-8, 0.3), (1e-2, 100.0), (0.9, 0.3)]))
"""

from __future__ import annotations

import itertools

import pytest

__all__ = ["cover", "product"]


def product(*axes) -> list:
    """The cartesian product of the axes, as a list of tuples (the first axis varies slowest)."""
    return list(itertools.product(*axes))


def cover(points, default, *, every_value: bool = True, ids=None) -> list:
    """``pytest.param``s for ``points``; those not in ``default`` are marked slow.

    Args:
        points: the full grid, a sequence of scalars or of equal-length tuples (one per test call).
        default: the points the default run keeps; each must be in ``points``.
        every_value: for tuple points, require every value of every axis to appear in ``default``.
        ids: optional function of a point returning its test id (pytest's own ids otherwise).

    Raises:
        ValueError: a default point is not in the grid, or (``every_value``) an axis value is missing
            from the default points.
    """
    points, default = list(points), list(default)
    outside = [p for p in default if p not in points]
    if outside:
        raise ValueError(f"default points not in the grid: {outside}")
    if every_value and points and isinstance(points[0], tuple):
        for axis in range(len(points[0])):
            missing = [v for v in dict.fromkeys(p[axis] for p in points) if v not in {d[axis] for d in default}]
            if missing:
                raise ValueError(f"axis {axis}: values {missing} appear in no default point")
    params = []
    for p in points:
        values = p if isinstance(p, tuple) else (p,)
        marks = () if p in default else pytest.mark.slow
        params.append(pytest.param(*values, marks=marks, id=None if ids is None else ids(p)))
    return params
