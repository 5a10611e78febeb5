"""Image obfuscations without a guarantee (metadp.mechanisms.obfuscation): pixelization, Gaussian blur,
Gaussian noise, and the guarantee texts of every obfuscation the trainer offers.

What could be wrong and which test would see it:
* a type, shape, dtype or range change (numpy and torch inputs, DP-Pix included):
  ``test_type_shape_dtype_range_are_kept_*``;
* cell means off, partial cells averaged over padding: ``test_pixelize_is_the_exact_cell_mean``;
* the blur kernel not Eq. 4 normalised, or far from Pillow's: the two blur tests;
* an obfuscation without a guarantee described as private: ``test_guarantee_texts_and_flags``.
Seeds are fixed, so every statistical test is deterministic.
"""

from __future__ import annotations

import inspect
import math
import subprocess
import sys

import numpy as np
import pytest

from metadp.accounting.pld import PldAccountant
from metadp.mechanisms import obfuscation
from metadp.mechanisms.dp_pix import dp_pix
from metadp.mechanisms.obfuscation import FORMAL_GUARANTEE, gaussian_blur, gaussian_noise, guarantee, pixelize

_OPS = {
    "pixelize": lambda x, rng: pixelize(x, 3),
    "gaussian_blur": lambda x, rng: gaussian_blur(x, 2),
    "gaussian_noise": lambda x, rng: gaussian_noise(x, 0.3, rng=rng),
    "dp_pix": lambda x, rng: dp_pix(x, epsilon=1.0, cell=3, rng=rng),
}
_SHAPES = [(7, 8), (5, 7, 8), (2, 3, 7, 8)]  # (H, W), (B, H, W), (B, C, H, W); 7 x 8 has partial cells for b = 3


@pytest.mark.parametrize("op", sorted(_OPS))
@pytest.mark.parametrize("shape", _SHAPES)
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16])
def test_type_shape_dtype_range_are_kept_numpy(op, shape, dtype):
    x = np.random.default_rng(1).random(shape).astype(dtype)
    y = _OPS[op](x, 7)
    assert type(y) is np.ndarray and y.shape == x.shape and y.dtype == x.dtype
    assert y.min() >= 0 and y.max() <= 1


@pytest.mark.parametrize("op", sorted(_OPS))
@pytest.mark.parametrize("shape", _SHAPES)
def test_type_shape_dtype_range_are_kept_torch(op, shape):
    torch = pytest.importorskip("torch")
    for dtype in (torch.float32, torch.float64, torch.bfloat16):
        x = torch.rand(shape, generator=torch.Generator().manual_seed(2)).to(dtype)
        y = _OPS[op](x, torch.Generator().manual_seed(3))
        assert isinstance(y, torch.Tensor) and y.shape == x.shape and y.dtype == x.dtype and y.device == x.device
        assert float(y.min()) >= 0 and float(y.max()) <= 1


def test_torch_and_numpy_agree_on_the_deterministic_operations():
    torch = pytest.importorskip("torch")
    x = np.random.default_rng(4).random((3, 11, 13))
    for f in (lambda a: pixelize(a, 4), lambda a: gaussian_blur(a, 3), lambda a: gaussian_blur(a, 2, sigma=0.7)):
        np.testing.assert_allclose(f(torch.from_numpy(x)).numpy(), f(x), rtol=0, atol=1e-14)


def test_numpy_path_does_not_import_torch():
    code = ("import sys, numpy as np\nfrom metadp.mechanisms.dp_pix import dp_pix\n"
            "from metadp.mechanisms.obfuscation import gaussian_blur\n"
            "dp_pix(np.zeros((4, 4)), epsilon=1.0, cell=2, rng=0); gaussian_blur(np.zeros((4, 4)), 1)\n"
            "assert 'torch' not in sys.modules, 'torch was imported'")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr


def _reference_means(x: np.ndarray, b: int) -> np.ndarray:
    out = np.empty_like(x)
    h, w = x.shape[-2:]
    for i in range(0, h, b):
        for j in range(0, w, b):
            out[..., i:i + b, j:j + b] = x[..., i:i + b, j:j + b].mean(axis=(-2, -1), keepdims=True)
    return out


@pytest.mark.parametrize("b", [1, 2, 3, 4, 10])
def test_pixelize_is_the_exact_cell_mean(b):
    # Values k / 64: every sum and every mean over <= 100 pixels of them below is exact in binary.
    x = np.random.default_rng(b).integers(0, 65, size=(2, 10, 11)) / 64.0
    y = pixelize(x, b)
    ref = _reference_means(x, b)
    if b in (1, 2, 4):  # cell sizes that are powers of two: the means are exact
        np.testing.assert_array_equal(y, ref)
    np.testing.assert_allclose(y, ref, rtol=0, atol=1e-15)
    if b == 1:
        np.testing.assert_array_equal(y, x)


def test_gaussian_blur_is_the_normalised_kernel_of_eq_4():
    r, sigma = 2, 1.3
    impulse = np.zeros((9, 9))
    impulse[4, 4] = 1.0
    y = gaussian_blur(impulse, r, sigma=sigma)
    k = np.arange(-r, r + 1)
    kernel = np.exp(-(k[:, None] ** 2 + k[None, :] ** 2) / (2 * sigma**2))
    np.testing.assert_allclose(y[2:7, 2:7], kernel / kernel.sum(), rtol=1e-13)  # Eq. 4 divided by its sum
    assert np.count_nonzero(y) == 25  # support (2r + 1) x (2r + 1)
    grey = np.full((6, 7), 0.3)
    np.testing.assert_allclose(gaussian_blur(grey, 3), grey, rtol=1e-14)  # edges repeated: brightness kept
    x = np.random.default_rng(0).random((5, 6))
    np.testing.assert_array_equal(gaussian_blur(x, 0), x)


@pytest.mark.parametrize("r", [1, 2, 3, 5])
def test_gaussian_blur_three_radii_wide_matches_pillow(r):
    pil = pytest.importorskip("PIL.Image")
    from PIL import ImageFilter

    a = np.random.default_rng(r).integers(0, 256, size=(84, 84)).astype(np.uint8)
    theirs = np.asarray(pil.fromarray(a).filter(ImageFilter.GaussianBlur(r)), dtype=float) / 255.0
    ours = gaussian_blur(a / 255.0, 3 * r, sigma=r)
    inner = np.s_[3 * r:-3 * r, 3 * r:-3 * r]  # borders differ: Pillow's box passes pad differently
    assert np.abs(ours - theirs)[inner].mean() < 0.005  # 8-bit rounding and box-filter approximation
    # The paper's kernel of half-width r blurs less than Pillow (documented in the docstring).
    assert gaussian_blur(a / 255.0, r).std() > theirs.std()


def test_gaussian_noise_std_and_seeding():
    grey = np.full((200, 50, 50), 0.5)
    sigma = 0.04  # 12.5 sigma from the clipping bounds: no clipping
    y = gaussian_noise(grey, sigma, rng=np.random.default_rng(0))
    assert abs((y - 0.5).std() / sigma - 1) < 5 * math.sqrt(0.5 / y.size)
    np.testing.assert_array_equal(gaussian_noise(grey[:2], sigma, rng=5), gaussian_noise(grey[:2], sigma, rng=5))
    np.testing.assert_array_equal(gaussian_noise(grey[:2], 0.0), grey[:2])


@pytest.mark.parametrize("call, name", [
    (lambda: pixelize(np.zeros((4, 4)), -1), "cell"),
    (lambda: gaussian_blur(np.zeros((4, 4)), -1), "radius"),
    (lambda: gaussian_blur(np.zeros((4, 4)), 1.5), "radius"),
    (lambda: gaussian_blur(np.zeros((4, 4)), 1, sigma=0.0), "sigma"),
    (lambda: gaussian_noise(np.zeros((4, 4)), -0.1), "sigma"),
    (lambda: gaussian_noise(np.zeros((4, 4)), math.inf), "sigma"),
    (lambda: guarantee("blur"), "name"),
    (lambda: guarantee("dp_pix", epsilon=-1), "epsilon"),])
def test_invalid_inputs_raise_value_error_naming_the_parameter(call, name):
    with pytest.raises(ValueError, match=name):
        call()


def test_guarantee_texts_and_flags():
    assert FORMAL_GUARANTEE["dp_pix"] and sum(FORMAL_GUARANTEE.values()) == 1
    assert guarantee("dp_pix").startswith("epsilon-DP for m-pixel neighbours (DP-Pix, Fan 2018)")
    assert guarantee("dp_pix", epsilon=3, m=1).startswith("3-DP for 1-pixel neighbours (DP-Pix, Fan 2018)")
    for name in ("pixelize", "gaussian_blur", "gaussian_noise"):
        assert not FORMAL_GUARANTEE[name]
        assert guarantee(name).startswith("none: no formal privacy guarantee")
        doc = " ".join(inspect.getdoc(getattr(obfuscation, name)).split()).lower()
        assert "no formal privacy guarantee" in doc


def test_gaussian_noise_guarantee_text_numbers():
    from metadp.accounting import Gaussian

    # The formal reading quoted in the text: epsilon at delta 1e-5 of one Gaussian release, m = 1.
    assert PldAccountant().compose(Gaussian(40 / 255)).get_epsilon(1e-5) == pytest.approx(47, abs=0.5)
    assert PldAccountant().compose(Gaussian(200 / 255)).get_epsilon(1e-5) == pytest.approx(5.8, abs=0.05)
