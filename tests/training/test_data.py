"""Episodic data: sinusoid tasks, Omniglot from the release zips, synthetic glyphs, folder loaders."""

import io
import math
import zipfile
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
Image = pytest.importorskip("PIL.Image")

from metadp.training.data import sources as data  # noqa: E402
from metadp.training.data import omniglot as omniglot_files  # noqa: E402
from metadp.training.data.sources import (  # noqa: E402
    ImagePool,
    data_dir,
    load_image_folder,
    load_mini_imagenet_csv,
    load_omniglot_background,
    load_one_shot_runs,
    synthetic_glyphs,
)
from metadp.training.data.tasks import SinusoidPool  # noqa: E402


def _omniglot_folder():
    """The real Omniglot folder, or a skip saying where it was looked for."""
    try:
        folder = data_dir()
    except FileNotFoundError as error:
        pytest.skip(f"Omniglot data not available: {error}")
    if not (folder / data.ONE_SHOT_ZIP).is_file():
        pytest.skip(f"Omniglot data not available: no {data.ONE_SHOT_ZIP} in {folder}")
    return folder


@pytest.fixture(scope="module")
def omniglot():
    return load_omniglot_background(_omniglot_folder())


# ----------------------------------------------------------------------------------------- sinusoid
def test_sinusoid_shapes_ranges_and_law():
    x_s, y_s, x_q, y_q = SinusoidPool(500, 5, 15, seed=0).batch(torch.arange(500))
    assert x_s.shape == y_s.shape == (500, 5, 1) and x_q.shape == y_q.shape == (500, 15, 1)
    assert x_s.dtype == torch.float32
    x, y = torch.cat([x_s, x_q], 1), torch.cat([y_s, y_q], 1)
    assert x.min() >= -5 and x.max() <= 5 and x.min() < -4.9 and x.max() > 4.9
    assert y.abs().max() <= 5.0 + 1e-5
    # Recover (A, phase) per task from y = A sin(x - phase) = a sin x + b cos x, a = A cos p, b = -A sin p.
    basis = torch.cat([torch.sin(x), torch.cos(x)], dim=-1).double()  # [task, point, 2]
    coef = torch.linalg.lstsq(basis, y.double()).solution[..., 0]  # [task, 2]
    assert torch.allclose(basis @ coef[..., None], y.double(), atol=1e-4)  # exactly a sinusoid of period 2 pi
    amplitude = coef.norm(dim=-1)
    phase = torch.atan2(-coef[:, 1], coef[:, 0])
    assert amplitude.min() >= 0.1 - 1e-4 and amplitude.max() <= 5 + 1e-4
    assert phase.min() >= -1e-4 and phase.max() <= math.pi + 1e-4
    # 500 uniform draws: mean amplitude 2.55 +- 3 * 1.41 / sqrt(500) = +- 0.19
    assert abs(amplitude.mean().item() - 2.55) < 0.19


def test_sinusoid_is_deterministic_given_the_seed():
    rows = torch.arange(8)
    first, again = SinusoidPool(8, 10, 10, seed=3).batch(rows), SinusoidPool(8, 10, 10, seed=3).batch(rows)
    other = SinusoidPool(8, 10, 10, seed=4).batch(rows)
    assert all(torch.equal(a, b) for a, b in zip(first, again))
    assert not torch.equal(first[0], other[0])


def test_sinusoid_rejects_bad_arguments():
    with pytest.raises(ValueError, match="k_support"):
        SinusoidPool(2, 0, 5)
    with pytest.raises(ValueError, match="k_query"):
        SinusoidPool(2, 5, -1)
    with pytest.raises(ValueError, match="size"):
        SinusoidPool(0, 5, 5)


# ----------------------------------------------------------------------------------------- location
def test_data_dir_honours_metadp_data(monkeypatch, tmp_path):
    monkeypatch.setenv("METADP_DATA", str(tmp_path))
    assert data_dir() == tmp_path
    monkeypatch.setenv("METADP_DATA", str(tmp_path / "absent"))
    with pytest.raises(FileNotFoundError) as error:
        data_dir()
    message = str(error.value)
    assert str(tmp_path / "absent") in message and str(omniglot_files._default_data_dir()) in message


def _fake_install(monkeypatch, tmp_path):
    """Places the package, as ``omniglot`` sees itself, in a virtual environment (a non-editable install)."""
    fake = tmp_path / "venv" / "lib" / "python3.11" / "site-packages" / "metadp" / "training" / "omniglot.py"
    monkeypatch.setattr(omniglot_files, "__file__", str(fake))
    monkeypatch.delenv("METADP_DATA", raising=False)


def _checkout(root):
    """A metadp checkout at ``root`` with its data at ``root/../shared/data/omniglot``; returns the data folder."""
    root.mkdir(parents=True)
    (root / "pyproject.toml").write_text('[project]\nname = "metadp"\nversion = "0"\n')
    folder = root.parent / "shared" / "data" / "omniglot"
    folder.mkdir(parents=True)
    return folder


def test_data_dir_search_order(monkeypatch, tmp_path):
    _fake_install(monkeypatch, tmp_path)
    shared = _checkout(tmp_path / "work" / "repo")
    (tmp_path / "work" / "repo" / "docs").mkdir()
    monkeypatch.chdir(tmp_path / "work" / "repo" / "docs")  # anywhere inside the checkout
    assert data_dir() == shared.resolve()
    env = tmp_path / "env"
    env.mkdir()
    monkeypatch.setenv("METADP_DATA", str(env))
    assert data_dir() == env  # $METADP_DATA before the checkout
    explicit = tmp_path / "explicit"
    explicit.mkdir()
    assert data_dir(explicit) == explicit  # --data-dir before $METADP_DATA
    with pytest.raises(FileNotFoundError, match="--data-dir"):
        data_dir(tmp_path / "absent")  # given, so never passed over for the next place


def test_non_editable_install_outside_a_checkout_names_every_place_tried(monkeypatch, tmp_path):
    _fake_install(monkeypatch, tmp_path)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(FileNotFoundError) as error:
        data_dir()
    message = str(error.value)
    assert "--data-dir" in message and "METADP_DATA" in message and "../shared/data/omniglot" in message
    assert str(tmp_path) in message  # the current folder it looked above
    # a folder that is not a metadp checkout does not count, even with a shared/ folder beside it
    other = tmp_path / "other"
    other.mkdir()
    (other / "pyproject.toml").write_text('[project]\nname = "another"\n')
    (tmp_path / "shared" / "data" / "omniglot").mkdir(parents=True)
    monkeypatch.chdir(other)
    with pytest.raises(FileNotFoundError):
        data_dir()


def test_the_packages_own_checkout_is_the_last_place(monkeypatch, tmp_path):
    # an editable install: the package's file is in a checkout; the current folder is in none
    monkeypatch.delenv("METADP_DATA", raising=False)
    shared = _checkout(tmp_path / "work" / "repo")
    monkeypatch.setattr(omniglot_files, "__file__", str(tmp_path / "work" / "repo" / "metadp" / "training" /
                                                     "omniglot.py"))
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")
    assert data_dir() == shared.resolve()


def test_train_omniglot_after_a_non_editable_install_is_one_line(monkeypatch, tmp_path, capsys):
    from metadp.cli import main

    _fake_install(monkeypatch, tmp_path)
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "run"
    assert main(["train", "maml", "--data", "omniglot", "--steps", "1", "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("metadp: error: --data omniglot: no Omniglot data folder")
    assert "--data-dir" in err[0] and "METADP_DATA" in err[0] and not out.exists()


def test_omniglot_folder_check(tmp_path):
    with pytest.raises(FileNotFoundError, match="no Omniglot background data"):
        data.check_omniglot_folder(tmp_path)
    for name in data.BACKGROUND_ZIPS:
        (tmp_path / name).write_bytes(b"not a zip")
    with pytest.raises(FileNotFoundError, match=data.ONE_SHOT_ZIP):
        data.check_omniglot_folder(tmp_path)
    with pytest.raises(ValueError, match="is not a zip archive"):
        data.check_omniglot_folder(tmp_path, one_shot=False)
    with pytest.raises(ValueError, match="is not a zip archive"):  # the loaders refuse it too, by name
        load_omniglot_background(tmp_path)
    (tmp_path / data.ONE_SHOT_ZIP).write_bytes(b"not a zip")
    with pytest.raises(ValueError, match=data.ONE_SHOT_ZIP):
        load_one_shot_runs(tmp_path)


def test_default_is_the_shared_folder_next_to_the_repository():
    repo_root = Path(omniglot_files.__file__).resolve().parents[2]
    assert omniglot_files._default_data_dir() == (repo_root.parent / "shared" / "data" / "omniglot").resolve()


# ------------------------------------------------------------------------- omniglot (real zips)
def test_omniglot_background_union_of_the_two_small_splits(omniglot):
    assert omniglot.images.shape == (242, 20, 1, 28, 28)  # 136 + 156 - 50 shared characters
    assert omniglot.images.dtype == torch.float32
    assert len(set(omniglot.class_names)) == 242
    assert "Greek/character01" in omniglot.class_names and "Balinese/character01" in omniglot.class_names
    alphabets = {name.split("/")[0] for name in omniglot.class_names}
    assert alphabets == {"Balinese", "Early_Aramaic", "Greek", "Korean", "Latin",
                         "Japanese_(katakana)", "Sanskrit", "Tagalog"}


def test_omniglot_values_are_inverted_strokes(omniglot):
    images = omniglot.images
    assert images.min() == 0.0 and images.max() == 1.0
    assert (images == 0).float().mean() > 0.6  # background is most of every image
    assert images.mean() < 0.15  # strokes cover ~8% of the page
    # LANCZOS keeps stroke coverage: 28x28 mean vs the inverted 105x105 original, per drawing.
    folder = _omniglot_folder()
    with zipfile.ZipFile(folder / "images_background_small1.zip") as archive:
        index = omniglot.class_names.index("Latin/character05")
        members = sorted(n for n in archive.namelist() if "/Latin/character05/" in n and n.endswith(".png"))
        for drawing, member in enumerate(members):
            original = np.asarray(Image.open(io.BytesIO(archive.read(member))).convert("L"), dtype=float)
            assert original.shape == (105, 105)
            coverage = 1.0 - original.mean() / 255.0
            assert abs(images[index, drawing].mean().item() - coverage) < 0.01


def test_omniglot_rotations_are_four_times_the_classes(omniglot):
    rotated = load_omniglot_background(_omniglot_folder(), rotations=True)
    n = omniglot.n_classes
    assert rotated.images.shape == (4 * n, 20, 1, 28, 28)
    assert torch.equal(rotated.images[:n], omniglot.images)
    for k in (1, 2, 3):
        assert torch.equal(rotated.images[k * n + 7], torch.rot90(omniglot.images[7], k, dims=(-2, -1)))
        assert rotated.class_names[k * n + 7] == f"{omniglot.class_names[7]}/rot{90 * k}"
    assert len(set(rotated.class_names)) == 4 * n


def test_omniglot_is_deterministic_and_the_cache_is_not_shared(omniglot):
    folder = _omniglot_folder()
    first = load_omniglot_background(folder)
    first.images.zero_()  # the caller owns its tensor; the in-memory cache must not change
    omniglot_files._background_from_zips.cache_clear()
    fresh = load_omniglot_background(folder)
    assert torch.equal(fresh.images, omniglot.images) and fresh.class_names == omniglot.class_names


def test_omniglot_size_is_validated_and_applied():
    folder = _omniglot_folder()
    for bad in (0, -3, 28.5, "28", True):
        with pytest.raises(ValueError, match="size"):
            load_omniglot_background(folder, size=bad)
    assert load_omniglot_background(folder, size=14).images.shape == (242, 20, 1, 14, 14)


def test_one_shot_runs():
    runs = load_one_shot_runs(_omniglot_folder())
    assert len(runs) == 20 and [r.name for r in runs] == [f"run{i:02d}" for i in range(1, 21)]
    for run in runs:
        assert run.support.shape == run.query.shape == (20, 1, 28, 28)
        assert torch.equal(run.support_labels, torch.arange(20))
        assert run.query_labels.dtype == torch.long
        assert sorted(run.query_labels.tolist()) == list(range(20))  # each support class used once
        assert 0.0 <= run.query.min() and run.query.max() <= 1.0 and (run.query == 0).float().mean() > 0.6
    # run01/class_labels.txt, first line: "run01/test/item01.png run01/training/class08.png"
    assert runs[0].query_labels[0].item() == 7
    # Labels carry information: 1-nearest-neighbour in pixel space scores 21% over the 400 queries
    # (measured; Lake et al. 2015 report ~20% for pixel kNN), chance is 5%, a shuffled key gives ~5%.
    correct = sum((torch.cdist(r.query.flatten(1), r.support.flatten(1)).argmin(1) == r.query_labels).sum()
                  for r in runs)
    assert correct.item() / 400 > 0.12


def test_one_shot_class_labels_parser_rejects_malformed_files():
    good = ("run01/test/item01.png run01/training/class02.png\n"
            "run01/test/item02.png run01/training/class01.png\n")
    assert omniglot_files._parse_class_labels(good, "run01", 2, 2) == [1, 0]
    with pytest.raises(ValueError, match="no label"):
        omniglot_files._parse_class_labels(good.splitlines()[0], "run01", 2, 2)
    with pytest.raises(ValueError, match="repeated"):
        omniglot_files._parse_class_labels(good.splitlines()[0] + "\n" + good.splitlines()[0], "run01", 2, 2)
    with pytest.raises(ValueError, match="parse"):
        omniglot_files._parse_class_labels("item01 class02", "run01", 2, 2)


def _write_runs(path, labels_text, items=("item01", "item02")):
    with zipfile.ZipFile(path, "w") as archive:
        for k, name in enumerate(("class01", "class02")):
            archive.writestr(f"run01/training/{name}.png", _glyph_png(k))
        for k, name in enumerate(items):
            archive.writestr(f"run01/test/{name}.png", _glyph_png(10 + k))
        if labels_text is not None:
            archive.writestr("run01/class_labels.txt", labels_text)


def test_one_shot_fixture_zip(tmp_path):
    key = ("run01/test/item01.png run01/training/class02.png\n"
           "run01/test/item02.png run01/training/class01.png\n")
    _write_runs(tmp_path / data.ONE_SHOT_ZIP, key)
    (run,) = load_one_shot_runs(tmp_path, size=7)
    assert run.name == "run01" and run.support.shape == (2, 1, 7, 7)
    assert run.query_labels.tolist() == [1, 0] and run.support_labels.tolist() == [0, 1]
    _write_runs(tmp_path / "missing.zip", None)
    (tmp_path / "missing").mkdir()
    (tmp_path / "missing.zip").rename(tmp_path / "missing" / data.ONE_SHOT_ZIP)
    with pytest.raises(ValueError, match="class_labels.txt is missing"):
        load_one_shot_runs(tmp_path / "missing")
    (tmp_path / "gap").mkdir()
    _write_runs(tmp_path / "gap" / data.ONE_SHOT_ZIP, key, items=("item01", "item03"))
    with pytest.raises(ValueError, match="numbered 1..n"):
        load_one_shot_runs(tmp_path / "gap")


# -------------------------------------------------------------------- omniglot layouts (fixtures)
def _glyph_png(seed, side=21) -> bytes:
    """A 1-bit image like Omniglot's: white page (True), a dark random stroke."""
    rng = np.random.default_rng(seed)
    page = np.ones((side, side), dtype=bool)
    row = rng.integers(3, side - 3)
    page[row - 1:row + 1, 2:side - 2] = False
    page[2:side - 2, rng.integers(3, side - 3)] = False
    buffer = io.BytesIO()
    Image.fromarray(page).convert("1").save(buffer, format="PNG")
    return buffer.getvalue()


def _write_zip(path, top, characters, drawings=3):
    with zipfile.ZipFile(path, "w") as archive:
        for name, seed in characters.items():
            for k in range(drawings):
                archive.writestr(f"{top}/{name}/{seed:04d}_{k + 1:02d}.png", _glyph_png(seed * 10 + k))


def test_fixture_zips_are_deduplicated(tmp_path):
    _write_zip(tmp_path / data.BACKGROUND_ZIPS[0], "images_background_small1",
               {"Alpha/character01": 1, "Alpha/character02": 2, "Shared/character01": 3})
    _write_zip(tmp_path / data.BACKGROUND_ZIPS[1], "images_background_small2",
               {"Shared/character01": 3, "Beta/character01": 4})
    pool = load_omniglot_background(tmp_path, size=7)
    assert pool.class_names == ("Alpha/character01", "Alpha/character02", "Beta/character01",
                                "Shared/character01")
    assert pool.images.shape == (4, 3, 1, 7, 7)
    assert pool.images.mean() < 0.3 and pool.images.max() > 0.5  # inverted: ~12% strokes, bright


def test_fixture_zips_disagreeing_on_a_character_raise(tmp_path):
    _write_zip(tmp_path / data.BACKGROUND_ZIPS[0], "a", {"Shared/character01": 3})
    _write_zip(tmp_path / data.BACKGROUND_ZIPS[1], "b", {"Shared/character01": 5})
    with pytest.raises(ValueError, match="differs"):
        load_omniglot_background(tmp_path)


def test_missing_zip_and_empty_folder_raise(tmp_path, monkeypatch):
    with pytest.raises(FileNotFoundError, match="no Omniglot background data"):
        load_omniglot_background(tmp_path)
    with pytest.raises(FileNotFoundError, match="one_shot_runs.zip"):
        load_one_shot_runs(tmp_path)
    with pytest.raises(FileNotFoundError, match="does not exist"):
        load_omniglot_background(tmp_path / "absent")
    _write_zip(tmp_path / data.BACKGROUND_ZIPS[0], "a", {"Alpha/character01": 1})
    with pytest.raises(FileNotFoundError, match=data.BACKGROUND_ZIPS[1]):
        load_omniglot_background(tmp_path)
    # root=None reads METADP_DATA
    monkeypatch.setenv("METADP_DATA", str(tmp_path))
    with pytest.raises(FileNotFoundError, match=data.BACKGROUND_ZIPS[1]):
        load_omniglot_background()


def test_unpacked_folder_layout_matches_the_zip(tmp_path):
    characters = {"Alpha/character01": 1, "Beta/character02": 2}
    (tmp_path / "z").mkdir()
    _write_zip(tmp_path / "z" / data.BACKGROUND_ZIPS[0], "t", characters)
    _write_zip(tmp_path / "z" / data.BACKGROUND_ZIPS[1], "t", {})
    with zipfile.ZipFile(tmp_path / "z" / data.BACKGROUND_ZIPS[0]) as archive:
        archive.extractall(tmp_path / "unpacked")
    from_zip = load_omniglot_background(tmp_path / "z", size=9, rotations=True)
    from_folder = load_omniglot_background(tmp_path / "unpacked" / "t", size=9, rotations=True)
    assert from_folder.class_names == from_zip.class_names
    assert torch.equal(from_folder.images, from_zip.images)


# ---------------------------------------------------------------------------------------- synthetic
def test_synthetic_glyphs_shape_range_and_determinism():
    pool = synthetic_glyphs(12, 6, size=20, seed=1)
    assert pool.images.shape == (12, 6, 1, 20, 20) and pool.images.dtype == torch.float32
    assert pool.class_names[0] == "glyph0000" and len(set(pool.class_names)) == 12
    assert 0.0 <= pool.images.min() and pool.images.max() <= 1.0
    assert torch.equal(pool.images, synthetic_glyphs(12, 6, size=20, seed=1).images)
    assert not torch.equal(pool.images, synthetic_glyphs(12, 6, size=20, seed=2).images)
    assert pool.images[:, 0].mean() > 0.05  # strokes are visible


def test_synthetic_glyphs_are_separable_by_nearest_prototype():
    pool = synthetic_glyphs(20, 20, seed=0)
    flat = pool.images.flatten(2)  # [class, example, pixels]
    prototypes = flat[:, :10].mean(1)  # class means of the first 10 examples
    held_out = flat[:, 10:].reshape(-1, flat.shape[-1])
    labels = torch.arange(20).repeat_interleave(10)
    accuracy = (torch.cdist(held_out, prototypes).argmin(1) == labels).float().mean().item()
    assert accuracy > 0.6  # chance is 0.05
    # ... but examples differ from their prototype (shifts, jitter, noise)
    assert (flat[:, 10:] - prototypes[:, None]).abs().mean() > 0.02


def test_synthetic_glyphs_validation():
    with pytest.raises(ValueError, match="n_classes"):
        synthetic_glyphs(0, 5)
    with pytest.raises(ValueError, match="size"):
        synthetic_glyphs(2, 5, size=2)


# ------------------------------------------------------------------------------------------ folders
def _write_image(path, rng, mode, suffix):
    shape = (11, 13) if mode == "L" else (11, 13, 3)
    pixels = rng.integers(0, 256, size=shape, dtype=np.uint8)
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(pixels).save(path.with_suffix(suffix))


def test_image_folder(tmp_path):
    rng = np.random.default_rng(0)
    for c, count in (("cat", 3), ("dog", 4), ("emu", 3)):
        for k in range(count):
            _write_image(tmp_path / c / f"{k:03d}", rng, "RGB", ".png" if k % 2 else ".jpg")
    (tmp_path / "cat" / "notes.txt").write_text("not an image")
    with pytest.raises(ValueError, match="n_per_class=3"):
        load_image_folder(tmp_path, 8)
    pool = load_image_folder(tmp_path, 8, 3, n_per_class=3)
    assert pool.class_names == ("cat", "dog", "emu")
    assert pool.images.shape == (3, 3, 3, 8, 8)
    assert 0.0 <= pool.images.min() and pool.images.max() <= 1.0 and pool.images.std() > 0.1
    grey = load_image_folder(tmp_path, 5, channels=1, n_per_class=2)
    assert grey.images.shape == (3, 2, 1, 5, 5)
    # the first image of "dog" as PIL decodes it
    expected = Image.open(tmp_path / "dog" / "000.jpg").convert("RGB").resize((8, 8), Image.LANCZOS)
    expected = np.asarray(expected)
    assert np.allclose(pool.images[1, 0].permute(1, 2, 0).numpy(), expected / 255.0)
    with pytest.raises(ValueError, match="only 3"):
        load_image_folder(tmp_path, 8, n_per_class=4)


def test_image_folder_validation(tmp_path):
    with pytest.raises(FileNotFoundError):
        load_image_folder(tmp_path / "absent", 8)
    with pytest.raises(ValueError, match="no class folders"):
        load_image_folder(tmp_path, 8)
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="no images"):
        load_image_folder(tmp_path, 8)
    with pytest.raises(ValueError, match="channels"):
        load_image_folder(tmp_path, 8, channels=2)
    with pytest.raises(ValueError, match="size"):
        load_image_folder(tmp_path, 0)


def test_mini_imagenet_csv(tmp_path):
    rng = np.random.default_rng(1)
    images = tmp_path / "images"
    rows = []
    for label in ("n02", "n01"):
        for k in range(3):
            name = f"{label}{k:08d}.jpg"
            _write_image(images / name, rng, "RGB", ".jpg")
            rows.append(f"{name},{label}")
    csv_path = tmp_path / "train.csv"
    csv_path.write_text("filename,label\n" + "\n".join(rows) + "\n")
    pool = load_mini_imagenet_csv(csv_path, images, size=6)
    assert pool.class_names == ("n01", "n02") and pool.images.shape == (2, 3, 3, 6, 6)
    expected = np.asarray(Image.open(images / "n0200000002.jpg").convert("RGB").resize((6, 6), Image.LANCZOS))
    assert np.allclose(pool.images[1, 2].permute(1, 2, 0).numpy(), expected / 255.0)
    assert load_mini_imagenet_csv(csv_path, images, size=6, n_per_class=2).images.shape == (2, 2, 3, 6, 6)

    (images / "n0100000000.jpg").unlink()
    with pytest.raises(FileNotFoundError, match="n0100000000.jpg"):
        load_mini_imagenet_csv(csv_path, images, size=6)
    bad = tmp_path / "bad.csv"
    bad.write_text("file,class\nx.jpg,n01\n")
    with pytest.raises(ValueError, match="header"):
        load_mini_imagenet_csv(bad, images, size=6)
    bad.write_text("filename,label\n")
    with pytest.raises(ValueError, match="no images"):
        load_mini_imagenet_csv(bad, images, size=6)
    with pytest.raises(FileNotFoundError):
        load_mini_imagenet_csv(tmp_path / "absent.csv", images, size=6)


# ---------------------------------------------------------------------------------------- the pool
def test_image_pool_subset_and_validation():
    pool = synthetic_glyphs(5, 2, size=8)
    part = pool.subset([3, 1])
    assert part.class_names == ("glyph0003", "glyph0001") and torch.equal(part.images[0], pool.images[3])
    assert part.n_classes == 2 and part.n_per_class == 2 and part.image_shape == (1, 8, 8)
    with pytest.raises(ValueError, match="indices"):
        pool.subset([5])
    with pytest.raises(ValueError, match="class_names"):
        ImagePool(pool.images, ("a",))
    with pytest.raises(ValueError, match="n_classes, n_per_class"):
        ImagePool(pool.images[0], pool.class_names)
