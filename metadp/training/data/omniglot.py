"""Omniglot (Lake, Salakhutdinov & Tenenbaum 2015; minimal splits and one-shot runs as in Lake et al.
2019, arXiv:1902.03477), read straight from the release zips in ``data_dir()``, or from an unpacked
``<Alphabet>/<character>/<png>`` folder; and where that folder is found.

The Omniglot PNGs are 1-bit; they are converted to 8-bit grey first, so the 28x28 images are
anti-aliased (Pillow resizes a 1-bit image with NEAREST whatever filter is asked for, which is what
resizing the raw files would give). Nothing here downloads anything or writes files; decoded arrays
are cached in memory, keyed by the source files' paths, sizes and modification times.
"""

from __future__ import annotations

import functools
import os
import re
import zipfile
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np
import torch

from metadp.training.data.images import (ImagePool, OneShotRun, _check_size, _decode, _decode_files, _select_per_class,
                                    _to_float)

__all__ = ["data_dir", "check_omniglot_folder", "load_omniglot_background", "load_one_shot_runs", "DATA_ENV_VAR",
           "BACKGROUND_ZIPS", "ONE_SHOT_ZIP", "DATA_SEARCH_ORDER"]

DATA_ENV_VAR = "METADP_DATA"
BACKGROUND_ZIPS = ("images_background_small1.zip", "images_background_small2.zip")
ONE_SHOT_ZIP = "one_shot_runs.zip"


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
