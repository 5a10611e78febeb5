"""DP-Pix as an audit pipeline: the released value of the changed cell of a worst-case pair of images."""

from __future__ import annotations

import functools
from typing import Tuple

import numpy as np

from metadp.core.validation import check_positive
from metadp.mechanisms import dp_pix as dp_pix_module
from metadp.verify.runs import Pipeline

__all__ = ["dp_pix_pipeline"]

_BATCH = 1 << 16  # images released per call: bounded memory
_BATCH_PIXELS = 1 << 24  # and at most this many pixels per call (128 MiB of float64)


def _released_cell(image: np.ndarray, pixel: Tuple[int, int], epsilon: float, cell: int, m: int, k: int,
                  rng: np.random.Generator) -> np.ndarray:
    out = np.empty(k)
    batch_size = max(1, min(_BATCH, _BATCH_PIXELS // image.size))
    for start in range(0, k, batch_size):
        count = min(batch_size, k - start)
        batch = np.broadcast_to(image, (count,) + image.shape)
        # looked up on the module at each call, so a test can swap the noise calibration
        release = dp_pix_module.dp_pix(batch, epsilon=epsilon, cell=cell, m=m, rng=rng)
        out[start:start + count] = release[(slice(None),) + tuple(pixel)]
    return out


def dp_pix_pipeline(epsilon: float, cell: int, m: int = 1, *, partial_cell: bool = False) -> Pipeline:
    """DP-Pix on the worst-case pair of :func:`metadp.mechanisms.dp_pix.dp_pix_neighbours`.

    D is a black image, D' the same with m pixel values set to 1 in one cell; the statistic is the
    released value of that cell (the other cells are identical in law under D and D' and are left out:
    post-processing). The release is clipped to [0, 1], which keeps the half-lines {x < t},
    0 < t <= m / s, that attain the profile. One release (steps = 1); the relation is m-neighbours
    (images differing in at most m pixel values).

    Args:
        epsilon: the DP-Pix parameter the implementation runs with, > 0.
        cell: b, the cell side in pixels (>= 2 with ``partial_cell``).
        m: values changed, in [1, side^2].
        partial_cell: change the r x r partial corner cell (r = b // 2) of a (b + r)-pixel image.

    Raises:
        ValueError: on an invalid epsilon, cell or m.
    """
    eps = check_positive("epsilon", epsilon)
    pair = dp_pix_module.dp_pix_neighbours(cell, m, partial_cell=partial_cell)
    where = (f"the {pair.side}x{pair.side} partial corner cell" if partial_cell else f"one {cell}x{cell} cell")
    draw = functools.partial(_released_cell, pixel=pair.pixel, epsilon=eps, cell=cell, m=m)
    return Pipeline(lambda k, rng: draw(pair.image, k=k, rng=rng), lambda k, rng: draw(pair.neighbour, k=k, rng=rng),
                    f"DP-Pix, epsilon {eps:g}, cell {cell}, m {m}: the released value of {where} of a "
                    f"{pair.size}x{pair.size} image, {m} pixel value(s) 0 -> 1", 1, "m_neighbours")
