"""Episodic data for the trainers (DESIGN.md sec. 7): tasks and class pools, read from local files only.

* ``SinusoidTasks``: the sinusoid regression benchmark of Finn, Abbeel & Levine 2017 (MAML,
  arXiv:1703.03400), Sec. 5.1, generated on the fly.
* ``load_omniglot_background`` and ``load_one_shot_runs``: Omniglot (Lake, Salakhutdinov & Tenenbaum
  2015; minimal splits and one-shot runs as in Lake et al. 2019, arXiv:1902.03477) read straight from
  the release zips in ``data_dir()``, or from an unpacked ``<Alphabet>/<character>/<png>`` folder.
* ``synthetic_glyphs``: procedurally drawn stroke glyphs, a learnable stand-in for fast tests.
* ``load_image_folder`` (CIFAR-FS style) and ``load_mini_imagenet_csv`` (Ravi & Larochelle 2017 csv
  splits) for users who have those datasets.

Images come back as an ``ImagePool``: a float32 tensor ``[n_classes, n_per_class, C, H, W]`` with
values in [0, 1]. Every resize uses PIL's LANCZOS filter on 8-bit grey or RGB images, as in the
MAML preprocessing scripts (``resize_images.py``). The Omniglot PNGs are 1-bit; they are converted to
8-bit grey first, so the 28x28 images are anti-aliased (Pillow resizes a 1-bit image with NEAREST
whatever filter is asked for, which is what resizing the raw files would give).

Nothing here downloads anything or writes files; decoded Omniglot arrays are cached in memory,
keyed by the source files' paths, sizes and modification times.
"""

from __future__ import annotations

import csv
import dataclasses
import functools
import io
import math
import os
import re
import zipfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np
import torch
from PIL import Image

from metadp.core.validation import check_count, check_real

__all__ = [
    "data_dir",
    "check_omniglot_folder",
    "SinusoidTasks",
    "ImagePool",
    "OneShotRun",
    "load_omniglot_background",
    "load_one_shot_runs",
    "synthetic_glyphs",
    "load_image_folder",
    "load_mini_imagenet_csv",
]

DATA_ENV_VAR = "METADP_DATA"
BACKGROUND_ZIPS = ("images_background_small1.zip", "images_background_small2.zip")
ONE_SHOT_ZIP = "one_shot_runs.zip"
_RESAMPLE = Image.Resampling.LANCZOS
_IMAGE_SUFFIXES = frozenset({".png", ".jpg", ".jpeg", ".bmp", ".gif", ".ppm", ".tif", ".tiff", ".webp"})


# ----------------------------------------------------------------------------------------- location
DATA_SEARCH_ORDER = (
    "1. --data-dir DIR (the ``explicit`` argument of ``data_dir``); "
    f"2. ${DATA_ENV_VAR}; "
    "3. ../shared/data/omniglot beside the metadp checkout that holds the current folder, or failing that "
    "the checkout the package was imported from (a folder with a pyproject.toml naming metadp)")


def _is_metadp_checkout(folder: Path) -> bool:
    """True if ``folder`` holds a ``pyproject.toml`` whose project is named metadp."""
    try:
        text = (folder / "pyproject.toml").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return False
    return re.search(r'^\s*name\s*=\s*["\']metadp["\']', text, flags=re.MULTILINE) is not None


def _checkout_root(start: Path) -> Optional[Path]:
    """The nearest folder at or above ``start`` that is a metadp checkout, or None."""
    for folder in (start, *start.parents):
        if _is_metadp_checkout(folder):
            return folder
    return None


def _default_data_dir() -> Path:
    """``../shared/data/omniglot`` beside the package's own checkout (``metadp/`` in a repository).

    After a non-editable install the package lives in a virtual environment, which is no checkout:
    the path returned then does not exist and ``data_dir`` tries the current folder's checkout first.
    """
    return (Path(__file__).resolve().parents[2] / ".." / "shared" / "data" / "omniglot").resolve()


def _checkout_candidates() -> List[Path]:
    """Search step 3: ``<checkout>/../shared/data/omniglot`` for the current folder's checkout, then the
    package's (without duplicates). The package's checkout counts only if it is one (pyproject.toml)."""
    found: List[Path] = []
    for start in (Path.cwd().resolve(), Path(__file__).resolve().parents[2]):
        root = _checkout_root(start)
        if root is not None:
            candidate = (root.parent / "shared" / "data" / "omniglot").resolve()
            if candidate not in found:
                found.append(candidate)
    return found


def data_dir(explicit=None) -> Path:
    """The local Omniglot folder, searched in this order (``DATA_SEARCH_ORDER``):

    1. ``explicit`` (the command's ``--data-dir``), which must be a folder;
    2. ``$METADP_DATA``, if set, which must be a folder;
    3. ``../shared/data/omniglot`` beside the metadp checkout (a folder with a ``pyproject.toml`` naming
       metadp) that contains the current working directory, else beside the checkout the package was
       imported from (an editable install). A non-editable install (``pip install .``) lives in a
       virtual environment, so only the current folder's checkout applies then.

    The folder should hold the release files (``images_background_small1.zip``,
    ``images_background_small2.zip``, ``one_shot_runs.zip``) or an unpacked
    ``<Alphabet>/<character>/<png>`` tree. metadp never downloads data.

    Raises:
        FileNotFoundError: the folder given (1 or 2) is not a folder, or no place in 3 exists; the
            message names every place tried.
    """
    if explicit is not None:
        path = Path(explicit).expanduser()
        if path.is_dir():
            return path
        raise FileNotFoundError(f"--data-dir {str(explicit)!r} is not a folder; point it at the folder holding "
                                f"{ONE_SHOT_ZIP} and {' / '.join(BACKGROUND_ZIPS)} (metadp never downloads data)")
    env = os.environ.get(DATA_ENV_VAR, "")
    if env:
        path = Path(env).expanduser()
        if path.is_dir():
            return path
        raise FileNotFoundError(
            f"{DATA_ENV_VAR}={env!r} is not a folder; point it at the folder holding {ONE_SHOT_ZIP} and "
            f"{' / '.join(BACKGROUND_ZIPS)}, pass --data-dir, or unset it to use the checkout's "
            f"../shared/data/omniglot ({_default_data_dir()}) (metadp never downloads data)")
    candidates = _checkout_candidates()
    for candidate in candidates:
        if candidate.is_dir():
            return candidate
    tried = ", ".join(str(c) for c in candidates) or (
        f"none: neither the current folder ({Path.cwd()}) nor the package ({Path(__file__).resolve().parents[1]}) "
        "is inside a metadp checkout")
    raise FileNotFoundError(
        f"no Omniglot data folder: --data-dir not given, {DATA_ENV_VAR} not set, and no "
        f"../shared/data/omniglot beside a metadp checkout (tried {tried}); pass --data-dir DIR or set "
        f"{DATA_ENV_VAR} to the folder holding {' / '.join(BACKGROUND_ZIPS)} and {ONE_SHOT_ZIP} "
        "(metadp never downloads data)")


def check_omniglot_folder(folder, one_shot: bool = True) -> None:
    """Checks, without decoding images, that ``folder`` holds readable Omniglot data: both background zips
    (valid zip files) or an unpacked ``<Alphabet>/<character>/<png>`` tree, and with ``one_shot`` a valid
    ``one_shot_runs.zip``. Cheap (reads each zip's central directory only); for refusing bad data before
    a run writes anything.

    Raises:
        FileNotFoundError: a file is missing.
        ValueError: a file is not a zip archive.
    """
    folder = Path(folder)
    zips = [folder / name for name in BACKGROUND_ZIPS]
    present = [p.is_file() for p in zips]
    needed = [p for p, ok in zip(zips, present) if ok or any(present)]
    if not any(present) and not any(p.suffix.lower() == ".png" for p in folder.glob("*/*/*")):
        raise FileNotFoundError(f"no Omniglot background data in {folder}: expected {' and '.join(BACKGROUND_ZIPS)}, "
                                "or an unpacked <Alphabet>/<character>/<png> folder")
    if one_shot:
        needed.append(folder / ONE_SHOT_ZIP)
    for path in needed:
        if not path.is_file():
            raise FileNotFoundError(f"{path.name} is missing from {folder}")
    for path in needed:
        _check_zip(path)


def _check_zip(path: Path) -> None:
    if not zipfile.is_zipfile(path):
        raise ValueError(f"{path} is not a zip archive ({path.stat().st_size} bytes): replace it with the "
                         "release file (see the folder's MD5SUMS, if any)")


def _check_size(size) -> int:
    return check_count("size", size, minimum=1)


# ----------------------------------------------------------------------------------------- sinusoid
@dataclasses.dataclass(frozen=True)
class SinusoidTasks:
    """Sinusoid regression tasks y = A sin(x - phase) (Finn et al. 2017, arXiv:1703.03400, Sec. 5.1).

    Each task draws A ~ U[amplitude_range] and phase ~ U[phase_range]; each point draws x ~ U[x_range].
    The sign convention ``x - phase`` is that of the MAML reference code (``data_generator.py``); with
    phase uniform on [0, pi] the other sign gives a different (mirrored) task family.
    """

    amplitude_range: Tuple[float, float] = (0.1, 5.0)  # A ~ U[low, high]
    phase_range: Tuple[float, float] = (0.0, math.pi)  # phase ~ U[low, high], radians
    x_range: Tuple[float, float] = (-5.0, 5.0)  # inputs ~ U[low, high]

    def __post_init__(self):
        for name in ("amplitude_range", "phase_range", "x_range"):
            low, high = getattr(self, name)
            check_real(f"{name}[0]", low)
            check_real(f"{name}[1]", high, low=float(low))

    def sample(self, n_tasks: int, k_support: int, k_query: int, generator: torch.Generator,
               device="cpu") -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """Draws ``n_tasks`` tasks with ``k_support`` support and ``k_query`` query points each.

        Draws are made on the generator's device and moved to ``device``, so the result depends only on
        the generator's state (the same seed gives the same tasks on any target device).

        Returns:
            ``(x_s, y_s, x_q, y_q)``, float32; support tensors ``[n_tasks, k_support, 1]``, query
            tensors ``[n_tasks, k_query, 1]``.
        """
        n_tasks = check_count("n_tasks", n_tasks, minimum=1)
        k_support = check_count("k_support", k_support, minimum=1)
        k_query = check_count("k_query", k_query, minimum=0)
        if not isinstance(generator, torch.Generator):
            raise ValueError(f"generator must be a torch.Generator, got {type(generator).__name__}")
        kw = dict(generator=generator, device=generator.device, dtype=torch.float32)
        amplitude = _uniform(self.amplitude_range, (n_tasks, 1, 1), kw)
        phase = _uniform(self.phase_range, (n_tasks, 1, 1), kw)
        x = _uniform(self.x_range, (n_tasks, k_support + k_query, 1), kw)  # [task, point, 1]
        y = amplitude * torch.sin(x - phase)
        x, y = x.to(device), y.to(device)
        return x[:, :k_support], y[:, :k_support], x[:, k_support:], y[:, k_support:]


def _uniform(bounds, shape, kw) -> torch.Tensor:
    low, high = bounds
    return low + (high - low) * torch.rand(shape, **kw)


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


# ---------------------------------------------------------------------------------------- omniglot
def _stamp(paths: Sequence[Path]) -> Tuple:
    """Identifies file contents for the in-memory cache: path, modification time, size."""
    return tuple((str(p.resolve()), p.stat().st_mtime_ns, p.stat().st_size) for p in paths)


def _zip_characters(path: str) -> Dict[str, List[zipfile.ZipInfo]]:
    """``"Alphabet/characterNN"`` -> its PNG members, for a zip laid out ``<top>/<Alphabet>/<char>/<png>``."""
    characters: Dict[str, List[zipfile.ZipInfo]] = {}
    with zipfile.ZipFile(path) as archive:
        for info in archive.infolist():
            parts = info.filename.split("/")
            if len(parts) == 4 and parts[3].lower().endswith(".png"):
                characters.setdefault(f"{parts[1]}/{parts[2]}", []).append(info)
    return {name: sorted(infos, key=lambda i: i.filename) for name, infos in characters.items()}


def _union_characters(zip_paths: Sequence[str]) -> Dict[str, Tuple[str, List[zipfile.ZipInfo]]]:
    """Characters over several zips; one present in two zips must hold the same files (name, CRC, size)."""
    union: Dict[str, Tuple[str, List[zipfile.ZipInfo]]] = {}
    for path in zip_paths:
        for name, infos in _zip_characters(path).items():
            if name in union:
                seen = [(i.filename.rsplit("/", 1)[1], i.CRC, i.file_size) for i in union[name][1]]
                here = [(i.filename.rsplit("/", 1)[1], i.CRC, i.file_size) for i in infos]
                if seen != here:
                    raise ValueError(f"character {name!r} differs between {union[name][0]} and {path}")
                continue
            union[name] = (path, infos)
    return union


@functools.lru_cache(maxsize=4)
def _background_from_zips(stamp: Tuple, size: int) -> Tuple[np.ndarray, Tuple[str, ...]]:
    union = _union_characters([entry[0] for entry in stamp])
    names = tuple(sorted(union))
    files = _select_per_class({n: union[n][1] for n in names}, None, "the Omniglot zips")
    archives = {path: zipfile.ZipFile(path) for path in {path for path, _ in union.values()}}
    try:
        images = [[_decode(archives[union[n][0]].read(i), size, "L") for i in files[n]] for n in names]
    finally:
        for archive in archives.values():
            archive.close()
    return np.stack([np.stack(per_class) for per_class in images]), names  # [class, drawing, 1, H, W]


@functools.lru_cache(maxsize=4)
def _background_from_folder(stamp: Tuple, size: int, root: str) -> Tuple[np.ndarray, Tuple[str, ...]]:
    files: Dict[str, List[Path]] = {}
    for path_str, _, _ in stamp:
        path = Path(path_str)
        files.setdefault(f"{path.parent.parent.name}/{path.parent.name}", []).append(path)
    files = _select_per_class(files, None, root)
    names = tuple(sorted(files))
    images = _decode_files([p for n in names for p in files[n]], size, "L")
    return images.reshape(len(names), -1, *images.shape[1:]), names


def _background_arrays(root: Path, size: int) -> Tuple[np.ndarray, Tuple[str, ...]]:
    """uint8 ``[class, drawing, 1, H, W]`` (strokes dark, as stored) and class names, cached."""
    zips = [root / name for name in BACKGROUND_ZIPS]
    present = [p.is_file() for p in zips]
    if all(present):
        for path in zips:
            _check_zip(path)
        return _background_from_zips(_stamp(zips), size)
    if any(present):
        missing = [p.name for p, ok in zip(zips, present) if not ok]
        raise FileNotFoundError(f"{', '.join(missing)} missing from {root} "
                                f"(both {' and '.join(BACKGROUND_ZIPS)} are needed)")
    pngs = sorted(p for p in root.glob("*/*/*") if p.suffix.lower() == ".png" and not p.name.startswith("."))
    if not pngs:
        expected = " and ".join(BACKGROUND_ZIPS)
        raise FileNotFoundError(f"no Omniglot background data in {root}: expected {expected}, "
                                "or an unpacked <Alphabet>/<character>/<png> folder")
    return _background_from_folder(_stamp(pngs), size, str(root))


def _rotation_classes(images: torch.Tensor, names: Tuple[str, ...]):
    """Rotations by 90, 180, 270 degrees (counter-clockwise) as new classes, appended in blocks."""
    rotated = [images] + [torch.rot90(images, k, dims=(-2, -1)) for k in (1, 2, 3)]
    return torch.cat(rotated), names + tuple(f"{n}/rot{90 * k}" for k in (1, 2, 3) for n in names)


def load_omniglot_background(root=None, size: int = 28, rotations: bool = False, device="cpu") -> ImagePool:
    """The Omniglot background characters as an ``ImagePool`` (strokes 1.0, background 0.0).

    Reads ``images_background_small1.zip`` and ``images_background_small2.zip`` without unpacking them.
    The two overlap on the Greek and Latin alphabets (50 characters, identical files), counted once:
    242 characters x 20 drawings. A folder without those zips is read as an unpacked
    ``root/<Alphabet>/<character>/<png>`` tree (e.g. the full release's ``images_background``).
    Classes are sorted by ``"Alphabet/characterNN"``, drawings by file name.

    Args:
        root: the data folder; ``None`` uses ``data_dir()``.
        size: output side in pixels (105x105 -> size x size, LANCZOS on 8-bit grey).
        rotations: if True, each character rotated by 90, 180 and 270 degrees counter-clockwise is a new
            class (the augmentation of Santoro et al. 2016 and Finn et al. 2017): classes ``k*n + i``
            (n unrotated classes) are class i rotated by 90k degrees, named ``"<name>/rot<90k>"``.
        device: where the images tensor is placed.

    Returns:
        An ``ImagePool`` with images ``[n_classes, 20, 1, size, size]`` (n_classes = 242, or 968 rotated).

    Raises:
        FileNotFoundError: no data folder, a missing zip, or no images.
        ValueError: a bad size, a character that differs between the two zips, unequal drawing counts, a
            file named like a release zip that is not a zip archive.
    """
    size = _check_size(size)
    folder = Path(root) if root is not None else data_dir()
    if not folder.is_dir():
        raise FileNotFoundError(f"Omniglot folder {folder} does not exist")
    array, names = _background_arrays(folder, size)
    images = _to_float(array, device, invert=True)
    if rotations:
        images, names = _rotation_classes(images, names)
    return ImagePool(images, names)


_LABEL_LINE = re.compile(r"^(run\d+)/test/item(\d+)\.png\s+(run\d+)/training/class(\d+)\.png$")


def _parse_class_labels(text: str, run: str, n_items: int, n_classes: int) -> List[int]:
    """``class_labels.txt`` -> the support class (0-based) of each test item, in item order."""
    labels: List[Optional[int]] = [None] * n_items
    for line in filter(None, (raw.strip() for raw in text.splitlines())):
        match = _LABEL_LINE.match(line)
        if match is None or match.group(1) != run or match.group(3) != run:
            raise ValueError(f"{run}/class_labels.txt: cannot parse line {line!r}")
        item, label = int(match.group(2)) - 1, int(match.group(4)) - 1
        if not (0 <= item < n_items and 0 <= label < n_classes) or labels[item] is not None:
            raise ValueError(f"{run}/class_labels.txt: bad or repeated line {line!r}")
        labels[item] = label
    if None in labels:
        raise ValueError(f"{run}/class_labels.txt: no label for test items "
                         f"{[i + 1 for i, v in enumerate(labels) if v is None]}")
    return labels


def _numbered(members: Sequence[str], pattern: str, what: str) -> List[str]:
    """Members matching ``pattern`` (one group: a 1-based number), ordered 1..n; a gap raises."""
    found = {int(m.group(1)): m.group(0) for m in map(re.compile(pattern).match, members) if m}
    if sorted(found) != list(range(1, len(found) + 1)):
        raise ValueError(f"{ONE_SHOT_ZIP}: {what} must be numbered 1..n, found {sorted(found)}")
    return [found[k] for k in range(1, len(found) + 1)]


@functools.lru_cache(maxsize=4)
def _one_shot_arrays(stamp: Tuple, size: int):
    """Per run: (name, support uint8 [20,1,H,W], query uint8 [20,1,H,W], query labels)."""
    with zipfile.ZipFile(stamp[0][0]) as archive:
        members = sorted(archive.namelist())
        runs = sorted({m.split("/")[0] for m in members if re.match(r"^run\d+/", m)})
        if not runs:
            raise ValueError(f"{stamp[0][0]} holds no runNN/ folders")
        result = []
        for run in runs:
            support = _numbered(members, rf"^{run}/training/class(\d+)\.png$", f"{run}/training/classKK.png")
            query = _numbered(members, rf"^{run}/test/item(\d+)\.png$", f"{run}/test/itemKK.png")
            if f"{run}/class_labels.txt" not in members:
                raise ValueError(f"{ONE_SHOT_ZIP}: {run}/class_labels.txt is missing")
            labels = _parse_class_labels(archive.read(f"{run}/class_labels.txt").decode(), run,
                                         len(query), len(support))
            support, query = (np.stack([_decode(archive.read(m), size, "L") for m in names])
                              for names in (support, query))
            result.append((run, support, query, tuple(labels)))
    return tuple(result)


def load_one_shot_runs(root=None, size: int = 28, device="cpu") -> List[OneShotRun]:
    """The 20 official 20-way one-shot Omniglot runs from ``one_shot_runs.zip``, preprocessed as
    ``load_omniglot_background`` (LANCZOS to size x size, strokes 1.0).

    Each run has 20 training images (one per class, ``classKK.png`` -> label KK - 1) and 20 test items;
    ``runNN/class_labels.txt`` lines ``runNN/test/itemII.png runNN/training/classKK.png`` give each
    item's class. The characters come from the evaluation alphabets, disjoint from the background set.

    Raises:
        FileNotFoundError: no data folder or no ``one_shot_runs.zip``.
        ValueError: a bad size, a malformed ``class_labels.txt``, or a ``one_shot_runs.zip`` that is not a
            zip archive.
    """
    size = _check_size(size)
    folder = Path(root) if root is not None else data_dir()
    path = folder / ONE_SHOT_ZIP
    if not path.is_file():
        raise FileNotFoundError(f"{ONE_SHOT_ZIP} not found in {folder}")
    _check_zip(path)
    runs = []
    for name, support, query, labels in _one_shot_arrays(_stamp([path]), size):
        runs.append(OneShotRun(
            support=_to_float(support, device, invert=True),
            support_labels=torch.arange(len(support), device=device),
            query=_to_float(query, device, invert=True),
            query_labels=torch.tensor(labels, dtype=torch.long, device=device),
            name=name))
    return runs


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
