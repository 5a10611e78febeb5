"""Image obfuscations WITHOUT a differential-privacy guarantee: pixelization, Gaussian blur and
independent Gaussian noise, as privacy-enhanced few-shot learning uses them
(``../shared/papers/privacy-enhanced-few-shot.txt``, Sec. III-A and III-B), and the guarantee text of
every obfuscation the trainer offers.

None of these functions is differentially private: pixelization and blur are deterministic, and all
three are defeated by re-identification attacks (McPherson, Shokri & Shmatikov 2016,
arXiv:1609.00408; the paper's own Fig. 5). They carry no accountant event and no epsilon. The one
obfuscation with a guarantee, DP-Pix (Sec. III-C; Fan 2018), is :mod:`metadp.mechanisms.dp_pix`.
:data:`FORMAL_GUARANTEE` and :func:`guarantee` say which is which in words a report can print.

Units and arrays as in :mod:`metadp.mechanisms.dp_pix`: numpy arrays or torch tensors, floating point,
shape (..., H, W), values in [0, 1] (the paper's 8-bit scale divided by 255; its Gaussian noise
sigma in {40, ..., 200} is sigma / 255 here). Every function returns the type, shape and dtype it was
given (on the same device), clipped to [0, 1].
"""

from __future__ import annotations

import numbers
from types import MappingProxyType
from typing import Optional

import numpy as np

from metadp.core.validation import check_count, check_positive, check_real
from metadp.mechanisms import _images

__all__ = ["FORMAL_GUARANTEE", "guarantee", "pixelize", "gaussian_blur", "gaussian_noise"]

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


def guarantee(name: str, *, epsilon: Optional[float] = None, m: Optional[int] = None) -> str:
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
    b = _images.check_cell(cell)
    x, restore = _images.prepare(images)
    h, w = x.shape[-2:]
    return restore(_images.to_pixels(_images.cell_means(x, b), b, h, w))


def _blur_last_axis(x, weights: np.ndarray, r: int):
    n = x.shape[-1]
    idx = np.clip(np.arange(-r, n + r), 0, n - 1)  # edge pixels repeated, as Pillow's box blur does
    if _images.is_torch(x):
        import torch

        padded = x.index_select(-1, torch.as_tensor(idx, device=x.device))
    else:
        padded = np.take(x, idx, axis=-1)
    out = float(weights[0]) * padded[..., :n]
    for k in range(1, 2 * r + 1):
        out = out + float(weights[k]) * padded[..., k:k + n]
    return out


def gaussian_blur(images, radius: int, *, sigma: Optional[float] = None):
    """Gaussian blur (paper Sec. III-B b, Eq. 4): convolution with a (2r+1) x (2r+1) Gaussian kernel.

    No formal privacy guarantee (deterministic; :func:`guarantee`). The kernel is
    G(x, y) ~ exp(-(x^2 + y^2) / (2 sigma^2)) on |x|, |y| <= r, normalised to sum 1 (Eq. 4 as printed is
    not normalised; blurring must keep brightness). The paper approximates sigma from r after Gwosdek
    et al. 2012 through Pillow, whose ``GaussianBlur(radius)`` takes the radius as the standard
    deviation: sigma = r by default. Pillow's extended box filter reaches about 3 sigma, so its blur is
    stronger than this kernel of half-width r (on white noise, r = 1: output std 0.103 here, 0.083 in
    Pillow); ``gaussian_blur(images, 3 * r, sigma=r)`` matches Pillow's ``GaussianBlur(r)`` to about
    1/255 (``tests/mechanisms/test_obfuscation.py``). Image borders repeat the edge pixels. The kernel is
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
    x, restore = _images.prepare(images)
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
    x, restore = _images.prepare(images)
    if s == 0.0:
        return restore(x)
    return restore(x + s * _images.standard_noise("normal", x, tuple(x.shape), rng))
