"""Image arrays for DP-Pix and the obfuscations: numpy or torch, floating point, (..., H, W), in [0, 1].

torch is imported only when a torch tensor comes in, so the numpy path never loads it.
"""

from __future__ import annotations

import numbers
from typing import Any, Callable, Optional, Tuple, cast

import numpy as np

from metadp.core.validation import check_count

_EIGHT_BIT = ("images must have values in [0, 1] (the sensitivity m / b^2 assumes it); "
              "divide 8-bit images by 255")


def is_torch(x) -> bool:
    return type(x).__module__.split(".")[0] == "torch"


def prepare(images) -> Tuple[Any, Callable[[Any], Any]]:  # a numpy array or a torch tensor
    """(work array, restore): float64 numpy or float32/64 torch; restore clips and casts back.

    Raises:
        ValueError: on a type other than a numpy array or a torch tensor, a non-floating dtype, a shape
            other than (..., H, W) with H, W >= 1, or values outside [0, 1] (0-255 images included).
    """
    if isinstance(images, np.ndarray):
        if not np.issubdtype(images.dtype, np.floating):
            raise ValueError(f"images must be floating point with values in [0, 1] (divide 8-bit images by 255), "
                             f"got dtype {images.dtype}")
        x = images.astype(np.float64)

        def restore(y):
            return np.clip(y, 0.0, 1.0).astype(images.dtype, copy=False)
    elif is_torch(images):
        import torch

        if not images.is_floating_point():
            raise ValueError(f"images must be floating point with values in [0, 1] (divide 8-bit images by 255), "
                             f"got dtype {images.dtype}")
        x = images.to(torch.float64 if images.dtype == torch.float64 else torch.float32)

        def restore(y):
            return y.clamp(0.0, 1.0).to(images.dtype)
    else:
        raise ValueError(f"images must be a numpy array or a torch tensor, got {type(images).__name__}")
    if x.ndim < 2 or 0 in tuple(x.shape[-2:]):
        raise ValueError(f"images must have shape (..., H, W) with H, W >= 1, got shape {tuple(x.shape)}")
    if not bool(((x >= 0.0) & (x <= 1.0)).all()):  # NaN fails both comparisons
        top = float(x.max()) if bool((x == x).all()) else float("nan")
        hint = f" (got values up to {top:g}: 0-255 pixels?)" if 1.0 < top <= 255.0 else ""
        raise ValueError(_EIGHT_BIT + hint)
    return x, restore


def check_cell(cell) -> int:
    if isinstance(cell, bool) or not isinstance(cell, numbers.Integral):
        raise ValueError(f"cell must be an integer >= 1 (the cell side b in pixels), got {cell!r}")
    return check_count("cell", cell, minimum=1)


def cell_sizes(height: int, width: int, cell: int) -> np.ndarray:
    """Pixels per cell of the b x b grid laid from the top-left corner: int array (ceil(H/b), ceil(W/b)).

    Interior cells hold b^2 pixels; the last row / column of cells holds (H mod b) / (W mod b) rows /
    columns when H / W is not a multiple of b.
    """
    b = check_cell(cell)
    h, w = check_count("height", height, minimum=1), check_count("width", width, minimum=1)
    rows = [b] * (h // b) + ([h % b] if h % b else [])
    cols = [b] * (w // b) + ([w % b] if w % b else [])
    return np.outer(rows, cols)


def cell_means(x, b: int):
    """Cell means (..., ceil(H/b), ceil(W/b)) of a work array, partial cells over their own pixels."""
    h, w = x.shape[-2:]
    ph, pw = -h % b, -w % b  # zero padding adds nothing to the sums
    if is_torch(x):
        import torch

        padded = torch.nn.functional.pad(x, (0, pw, 0, ph))
        sums = padded.reshape(tuple(x.shape[:-2]) + ((h + ph) // b, b, (w + pw) // b, b)).sum(dim=(-3, -1))
        return sums / torch.as_tensor(cell_sizes(h, w, b), dtype=x.dtype, device=x.device)
    padded_np = np.pad(x, [(0, 0)] * (x.ndim - 2) + [(0, ph), (0, pw)]) if ph or pw else x
    blocks = padded_np.reshape(x.shape[:-2] + ((h + ph) // b, b, (w + pw) // b, b))
    return blocks.sum(axis=-1).sum(axis=-2) / cell_sizes(h, w, b)  # two passes: faster than one over (-3, -1)


def to_pixels(cells, b: int, h: int, w: int):
    """Repeats each cell value over its pixels: (..., ceil(H/b), ceil(W/b)) -> (..., H, W)."""
    if is_torch(cells):
        return cells.repeat_interleave(b, dim=-2).repeat_interleave(b, dim=-1)[..., :h, :w]
    return np.repeat(np.repeat(cells, b, axis=-2), b, axis=-1)[..., :h, :w]


def standard_noise(kind: str, x, shape, rng):
    """Standard Laplace or normal noise of ``shape``, drawn like x (numpy, or torch on x's device)."""
    if is_torch(x):
        import torch

        if rng is None or isinstance(rng, torch.Generator):
            gen = rng
        elif isinstance(rng, numbers.Integral) and not isinstance(rng, bool):
            gen = torch.Generator(device=x.device).manual_seed(int(rng))
        else:
            raise ValueError(f"rng must be a torch.Generator, an int seed or None for torch images, got {rng!r}")
        if kind == "normal":
            return torch.randn(shape, generator=gen, dtype=x.dtype, device=x.device)
        e1, e2 = (torch.empty(shape, dtype=x.dtype, device=x.device).exponential_(generator=gen) for _ in range(2))
        return e1 - e2  # the difference of two Exp(1) is Lap(0, 1)
    if rng is None or (isinstance(rng, numbers.Integral) and not isinstance(rng, bool)):
        rng = np.random.default_rng(cast(Optional[int], rng))  # an Integral seed or None
    elif not isinstance(rng, np.random.Generator):
        raise ValueError(f"rng must be a numpy Generator, an int seed or None for numpy images, got {rng!r}")
    return rng.standard_normal(shape) if kind == "normal" else rng.laplace(0.0, 1.0, size=shape)
