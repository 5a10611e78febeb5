"""Image pools for the trainers: the ``ImagePool`` and ``OneShotRun`` types, decoding, synthetic glyphs,
and loaders for CIFAR-FS style folders and Mini-ImageNet csv splits (``metadp.training.data.sources``).

Images come back as an ``ImagePool``: a float32 tensor ``[n_classes, n_per_class, C, H, W]`` with
values in [0, 1]. Every resize uses PIL's LANCZOS filter on 8-bit grey or RGB images, as in the
MAML preprocessing scripts (``resize_images.py``). Nothing here downloads anything or writes files.
"""

from __future__ import annotations

import csv
import dataclasses
import io
import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np
import torch
from PIL import Image

from metadp.core.validation import check_count

__all__ = ["ImagePool", "OneShotRun", "synthetic_glyphs", "load_image_folder", "load_mini_imagenet_csv"]

_RESAMPLE = Image.Resampling.LANCZOS
_IMAGE_SUFFIXES = frozenset({".png", ".jpg", ".jpeg", ".bmp", ".gif", ".ppm", ".tif", ".tiff", ".webp"})


def _check_size(size) -> int:
    return check_count("size", size, minimum=1)


# ------------------------------------------------------------------------------------- image pools
@dataclasses.dataclass(frozen=True, eq=False)
class ImagePool:
    """Images grouped by class, the pool episodes are drawn from.

    Attributes:
        images: float32 ``[n_classes, n_per_class, C, H, W]``, values in [0, 1].
        class_names: one name per class, e.g. ``"Greek/character01"`` for Omniglot.
    """

    images: torch.Tensor  # [n_classes, n_per_class, C, H, W], float32 in [0, 1]
    class_names: Tuple[str, ...]  # len == n_classes

    def __post_init__(self):
        object.__setattr__(self, "class_names", tuple(self.class_names))
        if not isinstance(self.images, torch.Tensor) or self.images.dim() != 5:
            raise ValueError("images must be a tensor [n_classes, n_per_class, C, H, W], got shape "
                             f"{tuple(getattr(self.images, 'shape', ()))}")
        if len(self.class_names) != self.images.shape[0]:
            raise ValueError(f"class_names has {len(self.class_names)} names for "
                             f"{self.images.shape[0]} classes")

    @property
    def n_classes(self) -> int:
        return self.images.shape[0]

    @property
    def n_per_class(self) -> int:
        return self.images.shape[1]

    @property
    def image_shape(self) -> Tuple[int, int, int]:
        """``(C, H, W)``."""
        return tuple(self.images.shape[2:])

    def to(self, device) -> "ImagePool":
        return ImagePool(self.images.to(device), self.class_names)

    def subset(self, classes: Sequence[int]) -> "ImagePool":
        """The pool restricted to the given class indices (in that order), e.g. a train/test class split."""
        index = torch.as_tensor(list(classes), dtype=torch.long)
        if index.numel() and (index.min() < 0 or index.max() >= self.n_classes):
            raise ValueError(f"classes must be indices in [0, {self.n_classes - 1}], got {list(classes)}")
        return ImagePool(self.images[index.to(self.images.device)],
                         tuple(self.class_names[i] for i in index.tolist()))


@dataclasses.dataclass(frozen=True, eq=False)
class OneShotRun:
    """One of the 20 official 20-way one-shot Omniglot runs (Lake et al. 2015; 2019, arXiv:1902.03477)."""

    support: torch.Tensor  # [20, 1, H, W]: training/classKK.png, KK = label + 1
    support_labels: torch.Tensor  # [20] int64: 0..19
    query: torch.Tensor  # [20, 1, H, W]: test/itemKK.png
    query_labels: torch.Tensor  # [20] int64: the support class of each query item (class_labels.txt)
    name: str = ""  # "run01" .. "run20"


def _decode(source, size: int, mode: str) -> np.ndarray:
    """An image file (path or bytes) -> uint8 ``[C, size, size]`` in PIL mode ``"L"`` or ``"RGB"``."""
    with Image.open(io.BytesIO(source) if isinstance(source, bytes) else source) as image:
        image = image.convert(mode).resize((size, size), _RESAMPLE)
        array = np.asarray(image, dtype=np.uint8)
    return array[None] if array.ndim == 2 else array.transpose(2, 0, 1)


def _decode_files(paths: Sequence[Path], size: int, mode: str) -> np.ndarray:
    """Decodes files in parallel threads (PIL releases the GIL while decoding); ``[N, C, size, size]``."""
    workers = max(1, min(8, os.cpu_count() or 1, len(paths)))
    with ThreadPoolExecutor(max_workers=workers) as pool:
        return np.stack(list(pool.map(lambda p: _decode(p, size, mode), paths)))


def _to_float(array: np.ndarray, device, invert: bool = False) -> torch.Tensor:
    """uint8 -> float32 in [0, 1] on ``device`` (a fresh copy, never a view of a cached array)."""
    tensor = torch.from_numpy(np.ascontiguousarray(array)).to(device=device, dtype=torch.float32) / 255.0
    return 1.0 - tensor if invert else tensor


def _select_per_class(files: Dict[str, List], n_per_class: Optional[int], where: str):
    """Applies the equal-count policy: all classes equal, or the first ``n_per_class`` of each."""
    if not files:
        raise ValueError(f"no classes found in {where}")
    counts = {name: len(items) for name, items in files.items()}
    low = min(counts, key=counts.get)
    high = max(counts, key=counts.get)
    if n_per_class is None:
        if counts[low] == 0:
            raise ValueError(f"class {low!r} in {where} has no images")
        if counts[low] != counts[high]:
            raise ValueError(
                f"classes in {where} have unequal image counts ({counts[low]} in {low!r}, "
                f"{counts[high]} in {high!r}); pass n_per_class={counts[low]} to keep the first "
                f"{counts[low]} of each class")
        return files
    n = check_count("n_per_class", n_per_class, minimum=1)
    if counts[low] < n:
        raise ValueError(f"n_per_class={n} but class {low!r} in {where} has only {counts[low]} images")
    return {name: items[:n] for name, items in files.items()}


# ---------------------------------------------------------------------------------------- synthetic
_GLYPH_STROKES = 3  # line segments per class prototype
_GLYPH_HALF_WIDTH = 1.1 / 28  # stroke half-width, fraction of the side (1.1 px at 28x28)
_GLYPH_SHIFT = 2.0 / 28  # per-example translation, uniform in +-this, fraction of the side
_GLYPH_JITTER = 0.6 / 28  # per-endpoint Gaussian jitter (sd), fraction of the side
_GLYPH_NOISE = 0.05  # per-pixel Gaussian noise (sd), before clipping to [0, 1]


def _draw_segments(ends: torch.Tensor, size: int) -> torch.Tensor:
    """Anti-aliased segments: ends ``[..., S, 2 (endpoint), 2 (x, y)]`` in unit coordinates ->
    ``[..., size, size]``, the maximum over the S strokes of a 1-pixel soft edge around each."""
    centres = (torch.arange(size, dtype=torch.float32) + 0.5) / size
    grid = torch.stack(torch.meshgrid(centres, centres, indexing="xy"), dim=-1)  # [H, W, 2] as (x, y)
    a = ends[..., 0, :][..., None, None, :]  # [..., S, 1, 1, 2]
    ab = ends[..., 1, :][..., None, None, :] - a
    t = (((grid - a) * ab).sum(-1) / (ab * ab).sum(-1).clamp_min(1e-12)).clamp(0.0, 1.0)  # [..., S, H, W]
    distance = (grid - a - t[..., None] * ab).norm(dim=-1)
    return ((_GLYPH_HALF_WIDTH - distance) * size + 0.5).clamp(0.0, 1.0).amax(dim=-3)


def synthetic_glyphs(n_classes: int, n_per_class: int, size: int = 28, seed: int = 0,
                     device="cpu") -> ImagePool:
    """Procedural glyph classes: a fast, learnable stand-in for Omniglot in tests.

    Each class is a prototype of ``_GLYPH_STROKES`` random line segments (endpoints uniform in the
    central 60% of the image); each example redraws the prototype translated by up to 2 px (at 28x28)
    with 0.6 px endpoint jitter, adds N(0, 0.05^2) pixel noise and clips to [0, 1]. Strokes are bright
    on a dark background, as in the Omniglot pools. Deterministic given ``seed`` (drawn on the CPU).

    Returns:
        An ``ImagePool`` with images ``[n_classes, n_per_class, 1, size, size]``, classes ``"glyphNNNN"``.
    """
    n_classes = check_count("n_classes", n_classes, minimum=1)
    n_per_class = check_count("n_per_class", n_per_class, minimum=1)
    size = check_count("size", size, minimum=4)
    seed = check_count("seed", seed, minimum=0)
    generator = torch.Generator().manual_seed(seed)
    prototypes = 0.2 + 0.6 * torch.rand(n_classes, 1, _GLYPH_STROKES, 2, 2, generator=generator)
    shift = _GLYPH_SHIFT * (2 * torch.rand(n_classes, n_per_class, 1, 1, 2, generator=generator) - 1)
    jitter = _GLYPH_JITTER * torch.randn(n_classes, n_per_class, _GLYPH_STROKES, 2, 2, generator=generator)
    ends = prototypes + shift + jitter  # [class, example, stroke, endpoint, xy]
    # classes per chunk, so that the [chunk, example, S, H, W] temporaries stay near 2^22 values
    chunk = max(1, 2 ** 22 // (n_per_class * _GLYPH_STROKES * size * size))
    images = torch.cat([_draw_segments(ends[i:i + chunk], size) for i in range(0, n_classes, chunk)])
    noise = _GLYPH_NOISE * torch.randn(images.shape, generator=generator)
    images = (images + noise).clamp(0.0, 1.0)[:, :, None]  # [class, example, 1, H, W]
    return ImagePool(images.to(device), tuple(f"glyph{i:04d}" for i in range(n_classes)))


# ------------------------------------------------------------------------------------------ folders
def _is_image(path: Path) -> bool:
    return path.is_file() and path.suffix.lower() in _IMAGE_SUFFIXES and not path.name.startswith(".")


def _channels_mode(channels) -> str:
    channels = check_count("channels", channels, minimum=1)
    if channels not in (1, 3):
        raise ValueError(f"channels must be 1 (grey) or 3 (RGB), got {channels}")
    return "L" if channels == 1 else "RGB"


def _pool_from_files(files: Dict[str, List[Path]], size: int, mode: str, device) -> ImagePool:
    names = tuple(files)
    flat = [p for n in names for p in files[n]]
    images = _decode_files(flat, size, mode)
    images = images.reshape(len(names), len(flat) // len(names), *images.shape[1:])
    return ImagePool(_to_float(images, device), names)


def load_image_folder(root, size: int, channels: int = 3, *, n_per_class: Optional[int] = None,
                      device="cpu") -> ImagePool:
    """A ``root/<class>/<image>`` folder (CIFAR-FS style) as an ``ImagePool`` with values in [0, 1].

    Classes are the non-hidden subfolders, sorted by name; images within a class are sorted by file
    name and resized (LANCZOS) to size x size. Unequal class sizes raise unless ``n_per_class`` is
    given, which keeps the first ``n_per_class`` images of every class. The pool holds
    ``n_images * channels * size^2`` float32 values: mind the memory for large folders.

    Raises:
        FileNotFoundError: root is not a folder.
        ValueError: bad size or channels, no classes, an empty class, unequal class sizes.
    """
    size, mode = _check_size(size), _channels_mode(channels)
    root = Path(root)
    if not root.is_dir():
        raise FileNotFoundError(f"image folder {root} does not exist")
    classes = sorted(d for d in root.iterdir() if d.is_dir() and not d.name.startswith("."))
    files = {d.name: sorted(p for p in d.iterdir() if _is_image(p)) for d in classes}
    if not classes:
        raise ValueError(f"no class folders in {root}: expected {root}/<class>/<image>")
    return _pool_from_files(_select_per_class(files, n_per_class, str(root)), size, mode, device)


def load_mini_imagenet_csv(csv_path, images_dir, size: int = 84, *, n_per_class: Optional[int] = None,
                           device="cpu") -> ImagePool:
    """A Mini-ImageNet split from a Ravi & Larochelle 2017 csv (header ``filename,label``), RGB.

    Files are looked up as ``images_dir/<filename>``; classes are the labels (WordNet ids) sorted,
    images in csv order within each class, resized (LANCZOS) to size x size (84 in the literature).
    Unequal class sizes raise unless ``n_per_class`` is given (the first ``n_per_class`` of each class).
    The 64-class training split at 84x84 is 38,400 images, about 3.3 GB as float32.

    Raises:
        FileNotFoundError: the csv, the images folder or a listed image is missing.
        ValueError: bad size, a wrong header, an empty csv, unequal class sizes.
    """
    size = _check_size(size)
    csv_path, images_dir = Path(csv_path), Path(images_dir)
    if not csv_path.is_file():
        raise FileNotFoundError(f"Mini-ImageNet csv {csv_path} does not exist")
    if not images_dir.is_dir():
        raise FileNotFoundError(f"Mini-ImageNet images folder {images_dir} does not exist")
    files: Dict[str, List[Path]] = {}
    with open(csv_path, newline="") as handle:
        reader = csv.reader(handle)
        header = [h.strip() for h in next(reader, [])]
        if header != ["filename", "label"]:
            raise ValueError(f"{csv_path}: header must be 'filename,label', got {','.join(header)!r}")
        for row in reader:
            if not row:
                continue
            if len(row) != 2:
                raise ValueError(f"{csv_path}, line {reader.line_num}: expected 'filename,label', got {row}")
            files.setdefault(row[1].strip(), []).append(images_dir / row[0].strip())
    if not files:
        raise ValueError(f"{csv_path} lists no images")
    missing = [str(p) for paths in files.values() for p in paths if not p.is_file()]
    if missing:
        raise FileNotFoundError(f"{len(missing)} images listed in {csv_path} are missing, e.g. {missing[0]}")
    files = {label: files[label] for label in sorted(files)}
    return _pool_from_files(_select_per_class(files, n_per_class, str(csv_path)), size, "RGB", device)
