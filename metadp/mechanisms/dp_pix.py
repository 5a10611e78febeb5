"""DP-Pix: differentially private image pixelization (Fan, "Image pixelization with differential
privacy", DBSec 2018), as used by privacy-enhanced few-shot learning
(``../shared/papers/privacy-enhanced-few-shot.txt``, Sec. III-C, Eq. 5): the release, its noise
scale, its accountant event and its dominating pair. The obfuscations without a guarantee
(pixelization, blur, Gaussian noise) are in :mod:`metadp.mechanisms.obfuscation`.

Units. Images are floating point with values in [0, 1] (numpy arrays or torch tensors; torch is
imported only for torch input): the paper's 8-bit scale [0, 255] maps to [0, 1] by dividing by 255,
and 0-255 input is refused. A changed pixel then moves by at most 1 (paper: 255), a b x b cell mean by
at most 1 / b^2, and the cell means of two images differing in at most m pixel values by at most
m / b^2 in L1 norm (each changed value lies in exactly one cell). The paper's Laplace scale
255 m / (b^2 eps) (its Eq. 5) is therefore m / (b^2 eps) here: the Laplace mechanism with scale
(L1 sensitivity) / eps is eps-DP (Dwork & Roth 2014, Thm 3.6).

Neighbouring relation. Two images are m-neighbours if they differ in at most m pixel values, each by
any amount within [0, 1] (Fan 2018's m-neighbourhood). m counts values: a C-channel image laid out
(..., C, H, W) changes C values when one pixel changes, so protecting k whole pixels of an RGB image
needs m = 3 k. A record is one image; a user who releases n images (of the same content or not)
composes n releases: :func:`dp_pix_event`.

Partial cells (the paper does not say; 84 x 84 images with b = 8 or 10 have them). The grid starts at
the top-left pixel; the last row and column of cells may hold s < b^2 pixels, whose mean moves by up
to 1 / s > 1 / b^2 per changed value. Each cell's noise is calibrated to its own size: Laplace of scale
m / (s eps) on a cell of s pixels, which is Laplace(m / eps) on every cell *sum* (L1 sensitivity m)
divided by s, post-processing. Per changed value the loss is at most (1/s) / (m / (s eps)) = eps / m,
so the release stays eps-DP and its dominating pair is the same 1-d Laplace pair; no cell is
under-noised, and full cells get exactly the paper's scale.

Output. :func:`dp_pix` returns the type, shape and dtype it was given (numpy array or torch tensor,
on the same device), each noisy cell value repeated over the cell's pixels and clipped to [0, 1].
Clipping and repetition are post-processing and do not change the guarantee.

Floating point. The guarantee is that of the ideal real-valued mechanism. Textbook floating-point
Laplace sampling, used here, can leak through the low-order bits of the output (Mironov, CCS 2012);
clipping and casting to the input dtype blunt but do not remove this.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Tuple

import numpy as np

from metadp.core.events import Event, Laplace, NoOp, SelfComposed
from metadp.core.validation import check_count, check_positive
from metadp.mechanisms import _images
from metadp.mechanisms._images import cell_sizes, check_cell
from metadp.mechanisms.laplace import LaplacePair

__all__ = ["dp_pix", "dp_pix_noise_scale", "dp_pix_event", "dp_pix_pair", "dp_pix_pairs", "cell_sizes",
           "cell_means", "DpPixNeighbours", "dp_pix_neighbours"]

_MAX_PIXELS = 2**22  # dp_pix_neighbours: the largest image it builds (an audit draws many, in batches)


def dp_pix_noise_scale(*, epsilon: float, cell: int, m: int = 1, pixels=None):
    """Laplace scale of one DP-Pix cell mean in [0, 1] units: m / (s eps), s = b^2 for a full cell.

    The paper's 255 m / (b^2 eps) divided by 255 (module docstring). A partial cell of s < b^2
    pixels gets m / (s eps): its mean's sensitivity is m / s.

    Args:
        epsilon: eps > 0, finite.
        cell: b, the cell side in pixels, >= 1.
        m: the number of pixel values neighbours may differ in, >= 1.
        pixels: the cell's pixel count s (an int or an int array, each in [1, b^2]); default b^2.

    Returns:
        A float, or a float array shaped like ``pixels``.

    Raises:
        ValueError: on invalid parameters.
    """
    eps = check_positive("epsilon", epsilon)
    b = check_cell(cell)
    m = check_count("m", m, minimum=1)
    if pixels is None:
        return m / (b * b * eps)
    s = np.asarray(pixels)
    if not np.issubdtype(s.dtype, np.integer) or s.size == 0 or s.min() < 1 or s.max() > b * b:
        raise ValueError(f"pixels must be integers in [1, cell^2 = {b * b}], got {pixels!r}")
    scale = m / (s.astype(np.float64) * eps)
    return float(scale) if scale.ndim == 0 else scale


def cell_means(images, cell: int):
    """The cell means P_b(I) of images in [0, 1]: shape (..., ceil(H/b), ceil(W/b)), float64 numpy or
    float32/64 torch; a partial edge cell is the mean of its own pixels (:func:`cell_sizes`).

    Raises:
        ValueError: on a bad cell, type, shape, dtype or value range.
    """
    b = check_cell(cell)
    x, _ = _images.prepare(images)
    return _images.cell_means(x, b)


def dp_pix(images, *, epsilon: float, cell: int, m: int = 1, rng=None):
    """DP-Pix (paper Eq. 5; Fan 2018): pixelize with b x b cells, add Laplace noise to each cell mean.

    Noise of scale m / (b^2 eps) in [0, 1] units (the paper's 255 m / (b^2 eps)) on each full cell's
    mean, m / (s eps) on a partial edge cell of s pixels (module docstring); every pixel of a cell
    then shows the cell's noisy mean, clipped to [0, 1]. eps-DP per image for m-neighbours: images
    differing in at most m pixel values (one C-channel pixel is C values). Each image in the batch gets
    fresh noise, so every image is one release: n releases compose (:func:`dp_pix_event`).

    Args:
        images: numpy array or torch tensor, floating point, shape (..., H, W) (leading axes: batch,
            channels), values in [0, 1].
        epsilon: eps > 0, finite.
        cell: b, the cell side in pixels, >= 1.
        m: the number of pixel values neighbours may differ in, >= 1 (the paper uses 1).
        rng: numpy images: a numpy Generator, an int seed or None (fresh entropy); torch images: a
            torch.Generator on the images' device, an int seed or None (torch's default generator).

    Returns:
        The released images: same type, shape, dtype (and device), values in [0, 1].

    Raises:
        ValueError: on invalid parameters, an rng of the wrong kind, a non-floating dtype, or values
            outside [0, 1] (0-255 images included: the sensitivity m / b^2 rests on [0, 1]).
    """
    b = check_cell(cell)
    x, restore = _images.prepare(images)
    h, w = x.shape[-2:]
    scales = dp_pix_noise_scale(epsilon=epsilon, cell=b, m=m, pixels=cell_sizes(h, w, b))  # (ceil(H/b), ceil(W/b))
    means = _images.cell_means(x, b)
    if _images.is_torch(x):
        import torch

        scales = torch.as_tensor(scales, dtype=x.dtype, device=x.device)
    noisy = means + scales * _images.standard_noise("laplace", x, tuple(means.shape), rng)
    return restore(_images.to_pixels(noisy, b, h, w))


def dp_pix_event(epsilon: float, images: int = 1) -> Event:
    """The accountant event of ``images`` DP-Pix releases of one user at parameter eps.

    One release is the Laplace mechanism with scale eps^-1 per unit L1 sensitivity (noise m / (b^2 eps)
    over sensitivity m / b^2; partial cells likewise), i.e. ``Laplace(1 / eps)``: pure eps-DP, and its
    exact privacy loss distribution lets the PLD accountant compose n releases tighter than the basic
    n eps when delta > 0 (at delta -> 0 the bound is n eps, which is exact for pure DP).

    Neighbouring relation: one image of the user differing in at most m pixel values (a record is one
    image); a user who releases n images (several noisy copies of the same content, or different
    images of which all may change) composes n times. The sensitivity is already that of changing m
    values, so account with ``relation="add_remove"`` (the accountants' default), which takes the scale
    as stated; ``"substitute"`` would double it again and report twice the epsilon (safe, loose).

    Args:
        epsilon: the DP-Pix parameter eps > 0, finite.
        images: releases to compose, >= 0 (0 is a no-op).

    Returns:
        ``Laplace(1 / eps)`` for one image, ``SelfComposed(Laplace(1 / eps), images)`` for more,
        ``NoOp()`` for none.

    Raises:
        ValueError: on invalid epsilon or images.
    """
    eps = check_positive("epsilon", epsilon)
    n = check_count("images", images, minimum=0)
    scale = 1.0 / eps
    if not math.isfinite(scale):
        raise ValueError(f"epsilon must be >= {1.0 / np.finfo(float).max:g} (1/epsilon overflows), got {epsilon!r}")
    if n == 0:
        return NoOp()
    return Laplace(scale) if n == 1 else SelfComposed(Laplace(scale), n)


def dp_pix_pair(epsilon: float) -> LaplacePair:
    """A dominating pair for one DP-Pix release: LaplacePair(1 / eps), i.e. Lap(0, 1/eps) vs Lap(1, 1/eps).

    Why a 1-d pair dominates the multi-cell release. For m-neighbours I, I', each differing value
    lies in exactly one cell of s pixels and moves that cell's mean by at most 1 / s, whose noise
    scale is m / (s eps); in noise scales the cell-mean vectors therefore differ by at most eps in L1
    norm. Translating and dividing each coordinate by its scale (bijections, which keep every
    hockey-stick divergence) turns the release into Lap(0, 1)^d vs Lap(t, 1)^d with ||t||_1 <= eps. By
    the L1-Laplace lemma in :mod:`metadp.mechanisms.laplace` (merge the smaller shift of two coordinates
    into the larger: the profile never decreases), this is dominated by the 1-d Lap(0, 1) vs
    Lap(eps, 1), which is Lap(0, 1/eps) vs Lap(1, 1/eps) after scaling by 1/eps. The bound is attained
    when m <= s values of one cell go from 0 to 1 (before clipping, which is post-processing). Both
    directions share this PLD (reflection).

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


@dataclass(frozen=True)
class DpPixNeighbours:
    """A worst-case pair of m-neighbouring images for DP-Pix (:func:`dp_pix_neighbours`)."""

    image: np.ndarray  # D: a black (size, size) image
    neighbour: np.ndarray  # D': m pixel values of one cell set to 1
    pixel: Tuple[int, int]  # a pixel of the changed cell: its released value is the audit statistic
    side: int  # the changed cell's side (b, or r = b // 2 for the partial corner cell)
    size: int  # the image side in pixels


def dp_pix_neighbours(cell: int, m: int = 1, *, partial_cell: bool = False) -> DpPixNeighbours:
    """A black image and its m-neighbour with m values of one cell set to 1: the pair that attains eps.

    All m changes in one cell is the worst case: the cell mean moves by m / s, its noise scale is
    m / (s eps), so the loss reaches eps. The image is 2b x 2b (four full cells, the first changed);
    with ``partial_cell`` it is (b + r) x (b + r), r = b // 2, and the changes go into the r x r partial
    corner cell, which checks the edge calibration. The other cells are identical under D and D', so
    an audit may keep only the changed cell's released value (post-processing).

    Args:
        cell: b, the cell side in pixels, >= 1 (>= 2 with ``partial_cell``).
        m: values changed, in [1, side^2] (side = b, or r with ``partial_cell``).
        partial_cell: change the partial corner cell instead of a full cell.

    Raises:
        ValueError: on a bad cell or an m that does not fit in the changed cell.
    """
    b = check_cell(cell)
    m = check_count("m", m, minimum=1)
    if partial_cell:
        if b < 2:
            raise ValueError(f"cell must be >= 2 with partial_cell (a 1-pixel grid has no partial cells), got {b}")
        side, top, size = b // 2, b, b + b // 2  # the corner cell: rows and columns b .. b + side - 1
    else:
        side, top, size = b, 0, 2 * b
    if size * size > _MAX_PIXELS:  # two float64 images of size x size are built
        raise ValueError(f"cell = {b:,}: the worst-case images are {size:,} x {size:,} pixels, over the "
                         f"{_MAX_PIXELS:,} pixels the audit builds (an audit draws hundreds of them at once); use a cell of at most "
                         f"{math.isqrt(_MAX_PIXELS) // 2:,} pixels (the per-cell claim does not depend on the image size)")
    if m > side * side:
        raise ValueError(f"m must be in [1, {side * side}] (the pixels of one {side} x {side} cell), got {m}")
    image = np.zeros((size, size))
    neighbour = image.copy()
    for i in range(m):
        neighbour[top + i // side, top + i % side] = 1.0
    return DpPixNeighbours(image, neighbour, (top, top), side, size)
