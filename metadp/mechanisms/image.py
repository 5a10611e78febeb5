"""Image obfuscations of privacy-enhanced few-shot learning, and the one with a guarantee: DP-Pix.

The paper (``../shared/papers/privacy-enhanced-few-shot.txt``, Sec. III) obfuscates every support and
query image before it leaves the user (its Algorithm 1, ``AddNoise``) with one of: independent Gaussian
noise (III-A), pixelization or Gaussian blur (III-B), or DP-Pix (III-C; Fan, "Image pixelization with
differential privacy", DBSec 2018). Only DP-Pix carries a formal guarantee; the others are obfuscations
that re-identification attacks defeat (McPherson, Shokri & Shmatikov 2016, arXiv:1609.00408; the
paper's own Fig. 5). :data:`FORMAL_GUARANTEE` and :func:`guarantee` say so in words a report can print.

Relation to ``metadp.mechanisms.dp_pix``: that module is DP-Pix on the paper's own scale (0-255,
unclipped, whole cells only) with its dominating pair (``dp_pix_pair``), for the accountants and the
mpmath oracle tests; this one is the obfuscation layer for images as the trainers hold them (numpy or
torch, [0, 1], partial cells, clipped: post-processing). Both give the same Laplace pair per image.

Units. Images are floating point with values in [0, 1]: the paper's 8-bit scale [0, 255] maps to
[0, 1] by dividing by 255. A changed pixel then moves by at most 1 (paper: 255), a b x b cell mean by at
most 1 / b^2, and the cell means of two images differing in at most m pixel values by at most
m / b^2 in L1 norm (each changed value lies in exactly one cell). The paper's Laplace scale
255 m / (b^2 eps) (its Eq. 5) is therefore m / (b^2 eps) here: the Laplace mechanism with scale
(L1 sensitivity) / eps is eps-DP (Dwork & Roth 2014, Thm 3.6). Likewise the paper's Gaussian noise
sigma in {40, ..., 200} is sigma / 255 here.

Neighbouring relation (DP-Pix). Two images are m-neighbours if they differ in at most m pixel values,
each by any amount within [0, 1] (Fan 2018's m-neighbourhood). m counts values: a C-channel image laid
out (..., C, H, W) changes C values when one pixel changes, so protecting k whole pixels of an RGB
image needs m = 3 k. A record is one image; a user who releases n images (of the same content or not)
composes n releases: :func:`dp_pix_event`.

Partial cells (the paper does not say; 84 x 84 images with b = 8 or 10 have them). The grid starts at
the top-left pixel; the last row and column of cells may hold s < b^2 pixels, whose mean moves by up
to 1 / s > 1 / b^2 per changed value. Each cell's noise is calibrated to its own size: Laplace of scale
m / (s eps) on a cell of s pixels, which is Laplace(m / eps) on every cell *sum* (L1 sensitivity m)
divided by s, post-processing. Per changed value the loss is at most (1/s) / (m / (s eps)) = eps / m,
so the release stays eps-DP and its dominating pair is the same 1-d Laplace pair; no cell is
under-noised, and full cells get exactly the paper's scale. (Calibrating every cell to the smallest
cell would also be valid but would add up to b^2 times the noise everywhere.)

Output. Every function returns the type, shape and dtype it was given (numpy array or torch tensor,
on the same device), clipped to [0, 1]; DP-Pix repeats each noisy cell value over the cell's pixels.
Clipping and repetition are post-processing and do not change the guarantee.

Floating point. The guarantee is that of the ideal real-valued mechanism. Textbook floating-point
Laplace sampling, used here, can leak through the low-order bits of the output (Mironov, CCS 2012);
clipping and casting to the input dtype blunt but do not remove this.
"""

from __future__ import annotations

import math
import numbers
from types import MappingProxyType
from typing import Callable, Tuple

import numpy as np

from metadp.core.validation import check_count, check_positive, check_real
from metadp.core.events import Event, Laplace, NoOp, SelfComposed

__all__ = ["FORMAL_GUARANTEE", "guarantee", "cell_sizes", "pixelize", "gaussian_blur", "gaussian_noise",
           "dp_pix", "dp_pix_noise_scale", "dp_pix_event"]

# Which obfuscation has a formal privacy guarantee. False reads "no formal privacy guarantee".
FORMAL_GUARANTEE = MappingProxyType({"dp_pix": True, "pixelize": False, "gaussian_blur": False,
                                     "gaussian_noise": False})

_NONE_DETERMINISTIC = ("none: no formal privacy guarantee; {what} is deterministic, so no epsilon is finite, "
                       "and it is defeated by re-identification (McPherson, Shokri & Shmatikov 2016, "
                       "arXiv:1609.00408)")
_GUARANTEES = {
    "pixelize": _NONE_DETERMINISTIC.format(what="pixelization"),
    "gaussian_blur": _NONE_DETERMINISTIC.format(what="Gaussian blur"),
    "gaussian_noise": ("none: no formal privacy guarantee is claimed or accounted (the paper treats additive "
                       "Gaussian noise as an obfuscation). Read formally it is the Gaussian mechanism with noise "
                       "multiplier sigma / sqrt(m) for m-value neighbours (values in [0, 1]): per image, m = 1, "
                       "delta = 1e-5, epsilon is about 47 at the paper's sigma = 40/255 and 5.8 at 200/255 "
                       "(metadp PLD)"),
}


def guarantee(name: str, *, epsilon: float = None, m: int = None) -> str:
    """The privacy guarantee of an obfuscation, as a report prints it.

    Args:
        name: ``"dp_pix"``, ``"pixelize"``, ``"gaussian_blur"`` or ``"gaussian_noise"``.
        epsilon, m: DP-Pix's parameters, written into its sentence when given (else symbolic).

    Returns:
        ``"epsilon-DP for m-pixel neighbours (DP-Pix, Fan 2018) ..."`` for DP-Pix, ``"none: ..."``
        with the reason for the others.

    Raises:
        ValueError: on an unknown name or invalid epsilon / m.
    """
    if name not in FORMAL_GUARANTEE:
        raise ValueError(f"name must be one of {tuple(FORMAL_GUARANTEE)}, got {name!r}")
    if name != "dp_pix":
        return _GUARANTEES[name]
    eps = "epsilon" if epsilon is None else f"{check_positive('epsilon', epsilon):g}"
    pixels = "m" if m is None else f"{check_count('m', m, minimum=1)}"
    return (f"{eps}-DP for {pixels}-pixel neighbours (DP-Pix, Fan 2018): images differing in at most {pixels} "
            "pixel value(s), each within [0, 1] (one C-channel pixel is C values); per released image, "
            "n images compose")


# ---------------------------------------------------------------------------------------------
# Arrays: numpy or torch, floating point, shape (..., H, W), values in [0, 1].


def _is_torch(x) -> bool:
    return type(x).__module__.split(".")[0] == "torch"


def _prepare(images) -> Tuple[object, Callable]:
    """(work array, restore): float64 numpy or float32/64 torch; restore clips and casts back."""
    if isinstance(images, np.ndarray):
        if not np.issubdtype(images.dtype, np.floating):
            raise ValueError(f"images must be floating point with values in [0, 1] (divide 8-bit images by 255), "
                             f"got dtype {images.dtype}")
        x = images.astype(np.float64)

        def restore(y):
            return np.clip(y, 0.0, 1.0).astype(images.dtype, copy=False)
    elif _is_torch(images):
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
        raise ValueError("images must have values in [0, 1] (the sensitivity m / b^2 assumes it); "
                         "divide 8-bit images by 255")
    return x, restore


def _check_cell(cell) -> int:
    if isinstance(cell, bool) or not isinstance(cell, numbers.Integral):
        raise ValueError(f"cell must be an integer >= 1 (the cell side b in pixels), got {cell!r}")
    return check_count("cell", cell, minimum=1)


def cell_sizes(height: int, width: int, cell: int) -> np.ndarray:
    """Pixels per cell of the b x b grid laid from the top-left corner: int array (ceil(H/b), ceil(W/b)).

    Interior cells hold b^2 pixels; the last row / column of cells holds (H mod b) / (W mod b) rows /
    columns when H / W is not a multiple of b.
    """
    b = _check_cell(cell)
    h, w = check_count("height", height, minimum=1), check_count("width", width, minimum=1)
    rows = [b] * (h // b) + ([h % b] if h % b else [])
    cols = [b] * (w // b) + ([w % b] if w % b else [])
    return np.outer(rows, cols)


def _cell_means(x, b: int):
    """Cell means (..., ceil(H/b), ceil(W/b)) of the work array, partial cells over their own pixels."""
    h, w = x.shape[-2:]
    ph, pw = -h % b, -w % b  # zero padding adds nothing to the sums
    if _is_torch(x):
        import torch

        padded = torch.nn.functional.pad(x, (0, pw, 0, ph))
        sums = padded.reshape(tuple(x.shape[:-2]) + ((h + ph) // b, b, (w + pw) // b, b)).sum(dim=(-3, -1))
        return sums / torch.as_tensor(cell_sizes(h, w, b), dtype=x.dtype, device=x.device)
    padded = np.pad(x, [(0, 0)] * (x.ndim - 2) + [(0, ph), (0, pw)]) if ph or pw else x
    blocks = padded.reshape(x.shape[:-2] + ((h + ph) // b, b, (w + pw) // b, b))
    return blocks.sum(axis=-1).sum(axis=-2) / cell_sizes(h, w, b)  # two passes: faster than one over (-3, -1)


def _to_pixels(cells, b: int, h: int, w: int):
    """Repeats each cell value over its pixels: (..., ceil(H/b), ceil(W/b)) -> (..., H, W)."""
    if _is_torch(cells):
        return cells.repeat_interleave(b, dim=-2).repeat_interleave(b, dim=-1)[..., :h, :w]
    return np.repeat(np.repeat(cells, b, axis=-2), b, axis=-1)[..., :h, :w]


def _noise(kind: str, x, shape, rng):
    """Standard Laplace or normal noise of ``shape``, drawn like x (numpy, or torch on x's device)."""
    if _is_torch(x):
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
        rng = np.random.default_rng(rng)
    elif not isinstance(rng, np.random.Generator):
        raise ValueError(f"rng must be a numpy Generator, an int seed or None for numpy images, got {rng!r}")
    return rng.standard_normal(shape) if kind == "normal" else rng.laplace(0.0, 1.0, size=shape)


# ---------------------------------------------------------------------------------------------
# Obfuscations without a formal guarantee.


def pixelize(images, cell: int):
    """Pixelization (mosaicing, paper Sec. III-B a): each b x b cell replaced by its mean.

    No formal privacy guarantee (deterministic; :func:`guarantee`). Partial edge cells (H or W not a
    multiple of b) are replaced by the mean of their own pixels.

    Args:
        images: numpy array or torch tensor, floating point, shape (..., H, W), values in [0, 1].
        cell: b, the cell side in pixels (>= 1; b = 1 returns the images unchanged).

    Returns:
        The pixelized images: same type, shape, dtype (and device), values in [0, 1].

    Raises:
        ValueError: on a bad cell, shape, dtype or value range.
    """
    b = _check_cell(cell)
    x, restore = _prepare(images)
    h, w = x.shape[-2:]
    return restore(_to_pixels(_cell_means(x, b), b, h, w))


def _blur_last_axis(x, weights: np.ndarray, r: int):
    n = x.shape[-1]
    idx = np.clip(np.arange(-r, n + r), 0, n - 1)  # edge pixels repeated, as Pillow's box blur does
    if _is_torch(x):
        import torch

        padded = x.index_select(-1, torch.as_tensor(idx, device=x.device))
    else:
        padded = np.take(x, idx, axis=-1)
    out = float(weights[0]) * padded[..., :n]
    for k in range(1, 2 * r + 1):
        out = out + float(weights[k]) * padded[..., k:k + n]
    return out


def gaussian_blur(images, radius: int, *, sigma: float = None):
    """Gaussian blur (paper Sec. III-B b, Eq. 4): convolution with a (2r+1) x (2r+1) Gaussian kernel.

    No formal privacy guarantee (deterministic; :func:`guarantee`). The kernel is
    G(x, y) ~ exp(-(x^2 + y^2) / (2 sigma^2)) on |x|, |y| <= r, normalised to sum 1 (Eq. 4 as printed is
    not normalised; blurring must keep brightness). The paper approximates sigma from r after Gwosdek
    et al. 2012 through Pillow, whose ``GaussianBlur(radius)`` takes the radius as the standard
    deviation: sigma = r by default. Pillow's extended box filter reaches about 3 sigma, so its blur is
    stronger than this kernel of half-width r (on white noise, r = 1: output std 0.103 here, 0.083 in
    Pillow); ``gaussian_blur(images, 3 * r, sigma=r)`` matches Pillow's ``GaussianBlur(r)`` to about
    1/255 (``tests/mechanisms/test_image.py``). Image borders repeat the edge pixels. The kernel is
    separable: rows then columns.

    Args:
        images: numpy array or torch tensor, floating point, shape (..., H, W), values in [0, 1].
        radius: r, an integer >= 0 (0 returns the images unchanged; the paper uses 1 to 5).
        sigma: the kernel's standard deviation in pixels, > 0 (default: r).

    Returns:
        The blurred images: same type, shape, dtype (and device), values in [0, 1].

    Raises:
        ValueError: on a bad radius, sigma, shape, dtype or value range.
    """
    if isinstance(radius, bool) or not isinstance(radius, numbers.Integral):
        raise ValueError(f"radius must be an integer >= 0 (kernel size 2 radius + 1), got {radius!r}")
    r = check_count("radius", radius, minimum=0)
    s = float(r) if sigma is None else check_positive("sigma", sigma)
    x, restore = _prepare(images)
    if r == 0:
        return restore(x)
    k = np.arange(-r, r + 1, dtype=np.float64)
    weights = np.exp(-k * k / (2.0 * s * s))
    weights /= weights.sum()  # the 2-d kernel is the outer product of these 1-d weights
    x = _blur_last_axis(x, weights, r)  # along rows
    x = _blur_last_axis(x.swapaxes(-1, -2), weights, r)  # along columns
    return restore(x.swapaxes(-1, -2))


def gaussian_noise(images, sigma: float, *, rng=None):
    """Independent Gaussian noise (paper Sec. III-A): every value plus N(0, sigma^2), then clipped.

    No formal privacy guarantee is claimed or accounted (:func:`guarantee` gives the formal reading:
    a Gaussian mechanism with a very large epsilon at the paper's noise levels). The paper's
    sigma in {40, 80, 120, 160, 200} on the 255 scale is sigma / 255 here.

    Args:
        images: numpy array or torch tensor, floating point, shape (..., H, W), values in [0, 1].
        sigma: standard deviation in [0, 1] units, >= 0 and finite (0 returns the images unchanged).
        rng: numpy images: a numpy Generator, an int seed or None (fresh entropy); torch images: a
            torch.Generator on the images' device, an int seed or None (torch's default generator).

    Returns:
        The noisy images, clipped to [0, 1]: same type, shape, dtype (and device).

    Raises:
        ValueError: on a bad sigma, rng, shape, dtype or value range.
    """
    s = check_real("sigma", sigma, low=0.0)
    x, restore = _prepare(images)
    if s == 0.0:
        return restore(x)
    return restore(x + s * _noise("normal", x, tuple(x.shape), rng))


# ---------------------------------------------------------------------------------------------
# DP-Pix.


def dp_pix_noise_scale(epsilon: float, cell: int, m: int = 1, *, pixels=None):
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
    b = _check_cell(cell)
    m = check_count("m", m, minimum=1)
    if pixels is None:
        return m / (b * b * eps)
    s = np.asarray(pixels)
    if not np.issubdtype(s.dtype, np.integer) or s.size == 0 or s.min() < 1 or s.max() > b * b:
        raise ValueError(f"pixels must be integers in [1, cell^2 = {b * b}], got {pixels!r}")
    scale = m / (s.astype(np.float64) * eps)
    return float(scale) if scale.ndim == 0 else scale


def dp_pix(images, epsilon: float, cell: int, m: int = 1, *, rng=None):
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
            outside [0, 1] (the sensitivity m / b^2 rests on them).
    """
    b = _check_cell(cell)
    x, restore = _prepare(images)
    h, w = x.shape[-2:]
    scales = dp_pix_noise_scale(epsilon, b, m, pixels=cell_sizes(h, w, b))  # (ceil(H/b), ceil(W/b))
    means = _cell_means(x, b)
    if _is_torch(x):
        import torch

        scales = torch.as_tensor(scales, dtype=x.dtype, device=x.device)
    noisy = means + scales * _noise("laplace", x, tuple(means.shape), rng)
    return restore(_to_pixels(noisy, b, h, w))


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
