"""DP-Pix: differentially private image pixelization (Fan 2018), as used by privacy-enhanced few-shot
learning (``../shared/papers/privacy-enhanced-few-shot.txt``, Sec. III-C, Eq. 5).

The image I (pixel values in [0, 255]) is pixelized: a grid of b x b cells is laid over it and each
cell is replaced by the mean of its pixels, P_b(I). Laplace noise of scale 255 m / (b^2 eps) is added
to every cell mean: P~_b(I) = P_b(I) + L_p. Two images are m-neighbours if they differ in at most m
pixels; DP-Pix is then eps-DP for m-neighbours (one released image).

Choices the paper leaves open, and what this module does:

* Output: the noisy cell means, shape (..., H/b, W/b). The paper resizes the pixelized image to the
  model's input size afterwards; :func:`upsample` repeats each cell over its b x b pixels. Both are
  post-processing and do not change the guarantee.
* No clipping: Eq. 5 adds the noise and stops, so ``dp_pix`` returns unclipped values by default.
  ``clip=True`` clips to [0, 255] (post-processing, so eps is unchanged).
* Edges: the paper does not say. A partial cell of r < b^2 pixels has mean sensitivity 255 / r, more
  than the 255 / b^2 the noise is calibrated to, so partial cells would void the guarantee. By default
  H and W must be multiples of b (``edge="error"``); ``edge="crop"`` drops the last H mod b rows and
  W mod b columns, which are then not released at all (a data-independent crop: no privacy cost).
* Channels: every entry of the (H, W) array counts as one pixel. For a C-channel image laid out
  (..., C, H, W), changing one pixel changes C entries: use m = C x (pixels changed).
"""

from __future__ import annotations

import numbers
from typing import Tuple

import numpy as np

from metadp.core.validation import check_count, check_positive
from metadp.mechanisms.laplace import LaplacePair

__all__ = ["pixelize", "upsample", "dp_pix", "dp_pix_scale", "dp_pix_pair", "dp_pix_pairs"]

MAX_PIXEL_VALUE = 255.0  # 8-bit images, as in the paper; the sensitivity 255 m / b^2 rests on it
_EDGES = ("error", "crop")


def _check_cell(cell) -> int:
    if isinstance(cell, bool) or not isinstance(cell, numbers.Integral):
        raise ValueError(f"cell must be an integer >= 1 (cell side b in pixels), got {cell!r}")
    return check_count("cell", cell, minimum=1)


def _cropped(images: np.ndarray, b: int, edge: str) -> np.ndarray:
    if edge not in _EDGES:
        raise ValueError(f"edge must be one of {_EDGES}, got {edge!r}")
    if images.ndim < 2:
        raise ValueError(f"images must have shape (..., H, W), got shape {images.shape}")
    h, w = images.shape[-2:]
    if h < b or w < b:
        raise ValueError(f"cell must be <= the image height and width ({h} x {w}), got {b}")
    if (h % b or w % b) and edge == "error":
        raise ValueError(f"image size {h} x {w} is not a multiple of cell={b}; pass edge='crop' to drop "
                         f"the last {h % b} rows and {w % b} columns (partial cells would break the noise calibration)")
    return images[..., : h - h % b, : w - w % b]


def pixelize(images, cell: int, *, edge: str = "error") -> np.ndarray:
    """Cell means over a grid of b x b cells (the paper's P_b).

    Args:
        images: array of shape (..., H, W); leading axes (batch, channels) are kept.
        cell: b, the cell side in pixels.
        edge: ``"error"`` (H, W must be multiples of b) or ``"crop"`` (drop the remainder).

    Returns:
        float64 array of shape (..., H // b, W // b).

    Raises:
        ValueError: on a bad cell, an image smaller than a cell, or a size not divisible by b with
            ``edge="error"``.
    """
    b = _check_cell(cell)
    x = _cropped(np.asarray(images, dtype=np.float64), b, edge)
    h, w = x.shape[-2:]
    blocks = x.reshape(x.shape[:-2] + (h // b, b, w // b, b))  # (..., H/b, b, W/b, b)
    return blocks.mean(axis=(-3, -1))


def upsample(cells, cell: int) -> np.ndarray:
    """Repeats each cell value over its b x b pixels: (..., h, w) -> (..., h b, w b). Post-processing."""
    b = _check_cell(cell)
    c = np.asarray(cells)
    if c.ndim < 2:
        raise ValueError(f"cells must have shape (..., h, w), got shape {c.shape}")
    return np.repeat(np.repeat(c, b, axis=-2), b, axis=-1)


def dp_pix_scale(cell: int, m: int, epsilon: float) -> float:
    """Laplace scale per cell mean, 255 m / (b^2 eps): the L1 sensitivity 255 m / b^2 over eps."""
    b = _check_cell(cell)
    m = check_count("m", m, minimum=1)
    eps = check_positive("epsilon", epsilon)
    return MAX_PIXEL_VALUE * m / (b * b * eps)


def dp_pix(images, cell: int, m: int, epsilon: float, rng: np.random.Generator, *,
           edge: str = "error", clip: bool = False) -> np.ndarray:
    """DP-Pix (paper Eq. 5): pixelize, then add Laplace(255 m / (b^2 eps)) to each cell mean.

    eps-DP for images that differ in at most m pixels (each image released once; releases of
    several images compose). Pixel values must lie in [0, 255].

    Args:
        images: array of shape (..., H, W) with values in [0, 255]; each (H, W) slice is one image.
        cell: b, the cell side in pixels.
        m: number of pixels the neighbouring relation may change, >= 1.
        epsilon: privacy parameter eps > 0.
        rng: numpy Generator (fresh noise per cell).
        edge: see :func:`pixelize`.
        clip: clip the noisy means to [0, 255] (post-processing; the paper does not clip).

    Returns:
        float64 array of shape (..., H // b, W // b): the noisy cell means.

    Raises:
        ValueError: on invalid parameters or pixel values outside [0, 255] (the sensitivity
            255 m / b^2 would not hold).
    """
    scale = dp_pix_scale(cell, m, epsilon)
    x = np.asarray(images, dtype=np.float64)
    if x.size and not (np.all(np.isfinite(x)) and x.min() >= 0.0 and x.max() <= MAX_PIXEL_VALUE):
        raise ValueError(f"images must have values in [0, {MAX_PIXEL_VALUE:g}] (the sensitivity assumes 8-bit "
                         "pixels); rescale them first")
    means = pixelize(x, cell, edge=edge)
    noisy = means + rng.laplace(0.0, scale, size=means.shape)
    return np.clip(noisy, 0.0, MAX_PIXEL_VALUE) if clip else noisy


def dp_pix_pair(epsilon: float) -> LaplacePair:
    """A dominating pair for one DP-Pix release: LaplacePair(1 / eps), i.e. Lap(0, 1/eps) vs Lap(1, 1/eps).

    Why a 1-d pair dominates the multi-cell release. For m-neighbours I, I', each differing pixel
    lies in exactly one cell and moves that cell's mean by at most 255 / b^2, so the cell-mean
    vectors satisfy ||P_b(I) - P_b(I')||_1 <= 255 m / b^2 = eps * lambda, with lambda = 255 m / (b^2 eps)
    the noise scale. Translating and dividing by lambda (bijections, which keep every hockey-stick
    divergence) turns the release into Lap(0, 1)^d vs Lap(s, 1)^d with ||s||_1 <= eps. By the
    L1-Laplace lemma in :mod:`metadp.mechanisms.laplace` (merge the smaller shift of two coordinates
    into the larger: the profile never decreases), this is dominated by the 1-d Lap(0, 1) vs Lap(eps, 1),
    which is Lap(0, 1/eps) vs Lap(1, 1/eps) after scaling by 1/eps. The bound is attained when
    m <= b^2 pixels of one cell go from 0 to 255. Both directions share this PLD (reflection).

    Args:
        epsilon: the DP-Pix privacy parameter eps > 0.

    Returns:
        The pair; its profile is 1 - e^{(e - eps)/2} for 0 <= e < eps, and 0 from e = eps on.
    """
    eps = check_positive("epsilon", epsilon)
    return LaplacePair(1.0 / eps)


def dp_pix_pairs(epsilon: float) -> Tuple[LaplacePair, ...]:
    """Every pair whose worst case must be taken (one: see :func:`dp_pix_pair`)."""
    return (dp_pix_pair(epsilon),)

