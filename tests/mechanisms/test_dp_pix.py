"""DP-Pix (metadp.mechanisms.dp_pix): the release, its noise scale, its event and its dominating pair.

What could be wrong and which test would see it:
* the paper's 255 m / (b^2 eps) mis-converted to [0, 1] units: the empirical standard deviation of
  the noise against sqrt(2) m / (b^2 eps) and a Kolmogorov-Smirnov test against Laplace;
* the release not clip(cell mean + Laplace): ``test_release_is_the_clipped_noisy_cell_mean``;
* numpy and torch paths computing different releases: ``test_numpy_and_torch_agree_*``;
* 0-255 images taken as [0, 1] (the noise 255 times too small): ``test_0_255_images_are_refused``;
* a partial cell under-noised: the loss of random m-neighbours, computed from the cell means and the
  scales, never exceeds eps;
* the pair's claim (one 1-d Laplace pair with scale 1/eps dominates the multi-cell release for
  m-neighbours): the L1 sensitivity of the cell means on random neighbours (m / b^2, attained), the
  exact two-cell hockey-stick divergence (30-digit mpmath quadrature) against the pair's profile, and
  the pair's profile against the mpmath quadrature of its own densities;
* the event mis-scaled: the accountants' epsilon lies between a lower bound from the Laplace atoms and
  the basic composition n eps.
Seeds are fixed, so every statistical test is deterministic.
"""

from __future__ import annotations

import importlib
import inspect
import math

import mpmath
import numpy as np
import pytest
from scipy import stats

from metadp.accounting import Laplace, NoOp, RdpAccountant, SelfComposed
from metadp.accounting.pld import PldAccountant
from metadp.mechanisms import LaplacePair, _images
from metadp.mechanisms.dp_pix import (cell_means, cell_sizes, dp_pix, dp_pix_event, dp_pix_neighbours,
                                      dp_pix_noise_scale, dp_pix_pair, dp_pix_pairs)
from oracles.mp_reference import MpLaplace, rel_error


def test_import_gives_the_module():
    module = importlib.import_module("metadp.mechanisms.dp_pix")
    import metadp.mechanisms.dp_pix

    assert inspect.ismodule(metadp.mechanisms.dp_pix) and metadp.mechanisms.dp_pix is module
    assert module.dp_pix is dp_pix


def test_cell_means():
    image = np.arange(16, dtype=float).reshape(4, 4) / 16
    expected = np.array([[(0 + 1 + 4 + 5) / 4, (2 + 3 + 6 + 7) / 4],
                         [(8 + 9 + 12 + 13) / 4, (10 + 11 + 14 + 15) / 4]]) / 16
    np.testing.assert_array_equal(cell_means(image, 2), expected)
    batch = np.stack([image, image / 2, image / 4])[None]  # (1, 3, 4, 4): batch, channels
    out = cell_means(batch, 2)
    assert out.shape == (1, 3, 2, 2) and out.dtype == np.float64
    np.testing.assert_array_equal(out[0, 2], expected / 4)
    np.testing.assert_array_equal(cell_means(image, 1), image)
    np.testing.assert_array_equal(cell_means(image, 4), [[7.5 / 16]])
    np.testing.assert_array_equal(cell_means(image.astype(np.float16), 2), expected)  # exact in float16 too


def test_partial_cells_are_means_of_their_own_pixels():
    image = np.full((84, 84), 0.5)  # the paper's image size, with its cell sizes 2..10
    for b in (2, 4, 6, 8, 10):
        assert cell_means(image, b).shape == (-(-84 // b), -(-84 // b))
        np.testing.assert_allclose(cell_means(image, b), 0.5, rtol=1e-15)  # no padding in the means
    ramp = np.arange(5 * 6, dtype=float).reshape(5, 6) / 32
    means = cell_means(ramp, 2)
    assert means.shape == (3, 3)
    np.testing.assert_array_equal(means[:2], cell_means(ramp[:4], 2))
    np.testing.assert_allclose(means[2], ramp[4].reshape(3, 2).mean(axis=1), rtol=1e-15)  # 1 x 2 edge cells


@pytest.mark.parametrize("bad", [0, -2, 2.5, True, "2", None])
def test_invalid_cell(bad):
    with pytest.raises(ValueError, match="cell"):
        cell_means(np.ones((4, 4)), bad)
    with pytest.raises(ValueError, match="cell"):
        dp_pix(np.ones((4, 4)), epsilon=1.0, cell=bad)


def test_0_255_images_are_refused():
    eight_bit = np.arange(256, dtype=np.float64).reshape(16, 16)  # 0-255 pixels stored as floats
    with pytest.raises(ValueError, match=r"values in \[0, 1\].*divide 8-bit images by 255.*up to 255"):
        dp_pix(eight_bit, epsilon=1.0, cell=4, rng=0)
    with pytest.raises(ValueError, match="floating point"):  # the uint8 array itself
        dp_pix(eight_bit.astype(np.uint8), epsilon=1.0, cell=4, rng=0)
    dp_pix(eight_bit / 255, epsilon=1.0, cell=4, rng=0)  # rescaled: accepted
    torch = pytest.importorskip("torch")
    with pytest.raises(ValueError, match="divide 8-bit images by 255"):
        dp_pix(torch.from_numpy(eight_bit), epsilon=1.0, cell=4, rng=0)


def test_scale():
    # The paper's setting: eps = 3, m = 1, b = 4: 255 / (16 * 3) = 5.3125 on the 0-255 scale.
    assert 255 * dp_pix_noise_scale(epsilon=3.0, cell=4) == pytest.approx(5.3125, rel=1e-15)
    assert dp_pix_noise_scale(epsilon=0.5, cell=2, m=5) == 5 / (4 * 0.5)
    np.testing.assert_array_equal(dp_pix_noise_scale(epsilon=2.0, cell=2, pixels=np.array([4, 2, 1])),
                                  [1 / 8, 1 / 4, 1 / 2])


def test_release_is_the_clipped_noisy_cell_mean():
    # scale 1 / (4 * 0.5) = 0.5 in [0, 1] units: many noisy means leave [0, 1] and are clipped
    images = np.random.default_rng(4).random((50, 6, 5))
    out = dp_pix(images, epsilon=0.5, cell=2, rng=np.random.default_rng(5))
    noise = np.random.default_rng(5).laplace(0.0, 1.0, size=(50, 3, 3))
    scales = 1.0 / (cell_sizes(6, 5, 2) * 0.5)  # 4, 2 (edge column) pixels per cell
    noisy = np.clip(cell_means(images, 2) + scales * noise, 0.0, 1.0)
    expected = np.repeat(np.repeat(noisy, 2, axis=-2), 2, axis=-1)[..., :6, :5]
    np.testing.assert_allclose(out, expected, rtol=0, atol=1e-15)
    assert (out == 0).any() and (out == 1).any()


def test_numpy_and_torch_agree_on_the_same_noise(monkeypatch):
    torch = pytest.importorskip("torch")
    draws = np.random.default_rng(21).laplace(0.0, 1.0, size=(4, 2, 3, 3))  # fixed seed, one draw for both

    def fixed_noise(kind, x, shape, rng):
        assert kind == "laplace" and tuple(shape) == draws.shape
        return torch.from_numpy(draws).to(x.dtype) if _images.is_torch(x) else draws

    monkeypatch.setattr(_images, "standard_noise", fixed_noise)
    x = np.random.default_rng(22).random((4, 2, 7, 9))  # partial cells for b = 3: 7 x 9 -> 3 x 3 cells
    ours = dp_pix(x, epsilon=2.0, cell=3, m=2)
    theirs = dp_pix(torch.from_numpy(x), epsilon=2.0, cell=3, m=2)
    assert isinstance(theirs, torch.Tensor) and theirs.dtype == torch.float64
    np.testing.assert_allclose(theirs.numpy(), ours, rtol=0, atol=1e-14)


# Family-wise level 1e-3 over the Kolmogorov-Smirnov tests below.
_KS_LEVEL = 1e-3 / 6


@pytest.mark.parametrize("b,m,eps,shape", [(2, 1, 50.0, (400, 40, 40)), (4, 1, 20.0, (400, 40, 40)),
                                           (4, 3, 40.0, (400, 40, 40)), (10, 1, 3.0, (100, 84, 84))])
def test_dp_pix_noise_has_the_papers_scale(b, m, eps, shape):
    grey = np.full(shape, 0.5)  # mid-grey, small noise: clipping has probability < 1e-40 for b <= 4
    out = dp_pix(grey, epsilon=eps, cell=b, m=m, rng=np.random.default_rng(b * 100 + m))
    sizes = cell_sizes(shape[-2], shape[-1], b)
    cells = out[..., ::b, ::b]  # one pixel per cell
    for i in range(0, b):  # every pixel of a cell shows the cell's value
        for j in range(0, b):
            sub = out[..., i::b, j::b]
            np.testing.assert_array_equal(sub, cells[..., :sub.shape[-2], :sub.shape[-1]])
    full = sizes == b * b
    residual = (cells - 0.5)[..., full].ravel()
    scale = m / (b * b * eps)
    assert scale == pytest.approx(dp_pix_noise_scale(epsilon=eps, cell=b, m=m), rel=1e-15)
    assert 255 * scale == pytest.approx(255.0 * m / (b * b * eps), rel=1e-15)  # the paper's units times 1/255
    # std sqrt(2) scale; the sample std's relative error is ~ sqrt(5 / (4 N)) for Laplace (kurtosis 6)
    assert abs(residual.std() / (math.sqrt(2) * scale) - 1) < 5 * math.sqrt(1.25 / residual.size)
    assert stats.kstest(residual, stats.laplace(scale=scale).cdf).pvalue > _KS_LEVEL


def test_dp_pix_partial_cells_get_their_own_larger_scale():
    eps, b = 40.0, 4
    grey = np.full((4000, 10, 10), 0.5)  # cells of 16, 8 and 4 pixels
    out = dp_pix(grey, epsilon=eps, cell=b, rng=np.random.default_rng(11))
    sizes = cell_sizes(10, 10, b)
    for (i, j), s in np.ndenumerate(sizes):
        residual = out[:, i * b, j * b] - 0.5
        expected = 1.0 / (s * eps)
        assert expected >= 1.0 / (b * b * eps)  # never below the full-cell scale
        assert abs(residual.std() / (math.sqrt(2) * expected) - 1) < 5 * math.sqrt(1.25 / residual.size)


@pytest.mark.parametrize("b,m", [(2, 1), (3, 2), (4, 5), (4, 40)])
def test_dp_pix_loss_of_random_neighbours_never_exceeds_epsilon(b, m):
    # The release is the cell means plus independent Laplace noise of the given scales; its privacy loss
    # for neighbours x, x' is at most sum_c |mean_c(x) - mean_c(x')| / scale_c, attained far out.
    eps, h, w = 0.7, 11, 10  # partial cells of 3 or 2 rows/columns and corners
    rng = np.random.default_rng(b * 10 + m)
    scales = dp_pix_noise_scale(epsilon=eps, cell=b, m=m, pixels=cell_sizes(h, w, b))
    worst = 0.0
    for _ in range(300):
        x = rng.random((h, w))
        other = x.copy()
        where = rng.choice(h * w, size=m, replace=False)
        corner = rng.random() < 0.5  # half the trials: the changes packed into the last (partial) cells
        if corner:
            where = np.arange(h * w - m, h * w)
        other.flat[where] = rng.integers(0, 2, size=m) if corner else rng.random(m)
        diff = np.abs(cell_means(x, b) - cell_means(other, b))
        worst = max(worst, float((diff / scales).sum()))
    assert worst <= eps * (1 + 1e-12)
    # Attained: m values of the smallest cell from 0 to 1 (when they fit in it).
    sizes = cell_sizes(h, w, b)
    s = int(sizes.min())
    if m <= s:
        x = np.zeros((h, w))
        other = x.copy()
        i, j = np.unravel_index(np.argmin(sizes), sizes.shape)
        rows, cols = np.nonzero(np.ones((b, b))[: min(b, h - i * b), : min(b, w - j * b)])
        other[i * b + rows[:m], j * b + cols[:m]] = 1.0
        loss = (np.abs(cell_means(x, b) - cell_means(other, b)) / scales).sum()
        assert loss == pytest.approx(eps, rel=1e-12)


def test_dp_pix_torch_noise_scale_and_generator():
    torch = pytest.importorskip("torch")
    eps, b = 25.0, 2
    grey = torch.full((200, 40, 40), 0.5, dtype=torch.float64)
    out = dp_pix(grey, epsilon=eps, cell=b, rng=torch.Generator().manual_seed(0))
    residual = (out[..., ::b, ::b] - 0.5).flatten()
    scale = 1.0 / (b * b * eps)
    assert abs(float(residual.std()) / (math.sqrt(2) * scale) - 1) < 5 * math.sqrt(1.25 / residual.numel())
    assert stats.kstest(residual.numpy(), stats.laplace(scale=scale).cdf).pvalue > _KS_LEVEL
    again = dp_pix(grey, epsilon=eps, cell=b, rng=torch.Generator().manual_seed(0))
    assert torch.equal(out, again) and torch.equal(out, dp_pix(grey, epsilon=eps, cell=b, rng=0))

def test_numpy_and_torch_agree_in_law_on_fixed_seeds():
    torch = pytest.importorskip("torch")
    eps, b = 25.0, 2
    grey = np.full((100, 40, 40), 0.5)
    ours = dp_pix(grey, epsilon=eps, cell=b, rng=7)[..., ::b, ::b].ravel()
    theirs = dp_pix(torch.from_numpy(grey), epsilon=eps, cell=b, rng=7)[..., ::b, ::b].flatten().numpy()
    assert not np.array_equal(ours, theirs)  # different generators ...
    assert stats.ks_2samp(ours, theirs).pvalue > _KS_LEVEL  # ... the same law
    np.testing.assert_array_equal(ours, dp_pix(grey, epsilon=eps, cell=b, rng=7)[..., ::b, ::b].ravel())


def test_torch_images_reject_a_numpy_generator():
    torch = pytest.importorskip("torch")
    with pytest.raises(ValueError, match="rng"):
        dp_pix(torch.zeros(4, 4), epsilon=1.0, cell=2, rng=np.random.default_rng(0))
    with pytest.raises(ValueError, match="floating"):
        dp_pix(torch.zeros(4, 4, dtype=torch.uint8), epsilon=1.0, cell=2)


@pytest.mark.parametrize("call, name", [
    (lambda: dp_pix(np.zeros((4, 4)), epsilon=0.0, cell=2), "epsilon"),
    (lambda: dp_pix(np.zeros((4, 4)), epsilon=-1.0, cell=2), "epsilon"),
    (lambda: dp_pix(np.zeros((4, 4)), epsilon=math.nan, cell=2), "epsilon"),
    (lambda: dp_pix(np.zeros((4, 4)), epsilon=math.inf, cell=2), "epsilon"),
    (lambda: dp_pix(np.zeros((4, 4)), epsilon=1.0, cell=0), "cell"),
    (lambda: dp_pix(np.zeros((4, 4)), epsilon=1.0, cell=2.5), "cell"),
    (lambda: dp_pix(np.zeros((4, 4)), epsilon=1.0, cell=True), "cell"),
    (lambda: dp_pix(np.zeros((4, 4)), epsilon=1.0, cell=2, m=0), "m"),
    (lambda: dp_pix(np.zeros((4, 4)), epsilon=1.0, cell=2, m=1.5), "m"),
    (lambda: dp_pix(np.full((4, 4), 255.0), epsilon=1.0, cell=2), r"\[0, 1\]"),
    (lambda: dp_pix(np.full((4, 4), -0.1), epsilon=1.0, cell=2), r"\[0, 1\]"),
    (lambda: dp_pix(np.full((4, 4), np.nan), epsilon=1.0, cell=2), r"\[0, 1\]"),
    (lambda: dp_pix(np.zeros((4, 4), dtype=np.uint8), epsilon=1.0, cell=2), "floating"),
    (lambda: dp_pix(np.zeros(4), epsilon=1.0, cell=2), "shape"),
    (lambda: dp_pix(np.zeros((4, 0)), epsilon=1.0, cell=2), "shape"),
    (lambda: dp_pix([[0.0, 1.0]], epsilon=1.0, cell=1), "numpy array or a torch tensor"),
    (lambda: dp_pix(np.zeros((4, 4)), epsilon=1.0, cell=2, rng="seed"), "rng"),
    (lambda: dp_pix_noise_scale(epsilon=1.0, cell=2, pixels=5), "pixels"),
    (lambda: dp_pix_noise_scale(epsilon=1.0, cell=2, pixels=0), "pixels"),
    (lambda: dp_pix_event(0.0), "epsilon"),
    (lambda: dp_pix_event(1.0, -1), "images"),
    (lambda: dp_pix_event(1.0, 2.5), "images"),
])
def test_invalid_inputs_raise_value_error_naming_the_parameter(call, name):
    with pytest.raises(ValueError, match=name):
        call()


@pytest.mark.parametrize("cell,m", [(2, 1), (4, 3), (4, 16), (3, 20)])
def test_l1_sensitivity_of_the_cell_means(cell, m):
    # ||P_b(I) - P_b(I')||_1 <= m / b^2 for images differing in at most m pixel values; attained when
    # m <= b^2 values of one cell go from 0 to 1.
    rng = np.random.default_rng(cell + 7 * m)
    bound = m / cell**2
    for _ in range(200):
        image = rng.random((12, 12))
        other = image.copy()
        where = rng.choice(144, size=rng.integers(1, m + 1), replace=False)
        other.flat[where] = rng.random(len(where))
        diff = np.abs(cell_means(image, cell) - cell_means(other, cell)).sum()
        assert diff <= bound * (1 + 1e-12)
    if m <= cell * cell:
        worst = dp_pix_neighbours(cell, m)
        assert np.abs(cell_means(worst.neighbour, cell) - cell_means(worst.image, cell)).sum() == pytest.approx(bound)


def test_neighbours_attain_the_bound_in_one_cell():
    pair = dp_pix_neighbours(4, 3)
    assert pair.size == 8 and pair.side == 4 and pair.pixel == (0, 0)
    assert np.count_nonzero(pair.image) == 0 and pair.neighbour.sum() == 3 and pair.neighbour[:4, :4].sum() == 3
    corner = dp_pix_neighbours(4, 4, partial_cell=True)  # a 6 x 6 image: the 2 x 2 corner cell changes
    assert corner.size == 6 and corner.side == 2 and corner.pixel == (4, 4)
    assert corner.neighbour[4:, 4:].sum() == 4 and corner.neighbour.sum() == 4
    bad = ((lambda: dp_pix_neighbours(2, 5), "m"), (lambda: dp_pix_neighbours(1, 1, partial_cell=True), "cell"),
           (lambda: dp_pix_neighbours(4, 5, partial_cell=True), "m"), (lambda: dp_pix_neighbours(0), "cell"))
    for call, name in bad:
        with pytest.raises(ValueError, match=name):
            call()


def _two_cell_profile(s1: float, s2: float, eps: float) -> float:
    """delta of the release on two cells whose means move by (s1, s2) noise scales (Lap(0, 1)^2 vs
    Lap((s1, s2), 1)): E_{X2}[delta_{s1}(eps - L_2(X2))], the coordinate split of the laplace module."""
    first = LaplacePair(1.0 / s1)
    with mpmath.workdps(30):
        def integrand(x):
            l2 = abs(x - s2) - abs(x)
            return mpmath.mpf(float(first.profile(eps - float(l2)))) * mpmath.exp(-abs(x)) / 2
        return float(mpmath.quad(integrand, [-mpmath.inf, 0, s2, mpmath.inf]))


@pytest.mark.parametrize("epsilon", [0.1, 1.0, 3.0])
def test_pair_dominates_split_changes_and_is_tight_in_one_cell(epsilon):
    pair = dp_pix_pair(epsilon)
    assert isinstance(pair, LaplacePair) and pair.scale == pytest.approx(1.0 / epsilon, rel=1e-15)
    assert len(dp_pix_pairs(epsilon)) == 1
    cell, m = 4, 2
    lam = dp_pix_noise_scale(epsilon=epsilon, cell=cell, m=m)
    unit = 1.0 / cell**2 / lam  # one value 0 -> 1 moves its cell mean by 1 / b^2: eps / m noise scales
    for e in (0.0, 0.25 * epsilon, 0.5 * epsilon, 0.9 * epsilon):
        # Two changed pixels in two cells: the split shift (unit, unit) is dominated...
        split = _two_cell_profile(unit, unit, e)
        assert split <= float(pair.profile(e)) * (1 + 1e-9)
        # ...and two pixels in one cell (shift 2 unit = eps on one coordinate) attain the pair.
        assert float(LaplacePair(1.0 / (2 * unit)).profile(e)) == pytest.approx(float(pair.profile(e)), rel=1e-12)
    assert float(pair.profile(0.0)) == pytest.approx(-math.expm1(-epsilon / 2), rel=1e-14)
    assert float(pair.profile(epsilon)) == 0.0


@pytest.mark.parametrize("epsilon", [0.1, 3.0])
def test_pair_profile_matches_quadrature(epsilon):
    pair = dp_pix_pair(epsilon)
    ref = MpLaplace(pair.scale)
    for e in (0.0, 0.3 * epsilon, 0.99 * epsilon):
        assert rel_error(float(pair.profile(e)), ref.hockey_stick(e)) <= 1e-10


def test_dp_pix_event_is_the_laplace_event():
    assert dp_pix_event(2.0) == Laplace(0.5)
    assert dp_pix_event(2.0, 5) == SelfComposed(Laplace(0.5), 5)
    assert dp_pix_event(2.0, 0) == NoOp()


def _atom_lower_epsilon(eps: float, n: int, delta: float) -> float:
    """A lower bound on epsilon(delta) of n composed Laplace(1/eps) releases, from the loss atoms only.

    Each release's loss under P is +eps with probability 1/2 and -eps with probability e^-eps / 2
    (laplace module docstring); the other outcomes add non-negative terms to
    delta(e) = E[(1 - e^{e - L})_+], so delta(e) >= sum_j C(n, j) 2^-n e^{-eps (n - j)} (1 - e^{e - (2j - n) eps})_+.
    Bisection for the e where this lower bound meets delta.
    """
    def lower_delta(e):
        return sum(math.comb(n, j) * 2.0**-n * math.exp(-eps * (n - j)) * max(0.0, -math.expm1(e - (2 * j - n) * eps))
                   for j in range(n + 1))

    lo, hi = 0.0, n * eps
    if lower_delta(lo) <= delta:
        return 0.0
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if lower_delta(mid) > delta else (lo, mid)
    return lo


@pytest.mark.parametrize("eps,n", [(3.0, 1), (3.0, 2), (3.0, 10), (0.5, 1), (0.1, 100)])
def test_accountants_compose_dp_pix_between_the_atom_bound_and_n_epsilon(eps, n):
    event = dp_pix_event(eps, n)
    for accountant in (PldAccountant(), RdpAccountant()):
        accountant.compose(event)
        # Pure DP: nothing beyond n eps (the exact profile vanishes there; the PLD keeps a charged
        # truncation term, ~1e-250), and just below it a positive delta.
        assert accountant.get_delta(n * eps * (1 + 1e-9)) <= 1e-15
        assert accountant.get_delta(n * eps * (1 - 1e-3)) > 0.0
        for delta in (1e-10, 1e-6, 1e-3):
            got = accountant.get_epsilon(delta)
            assert got <= n * eps * (1 + 1e-12)  # basic composition, exact for pure DP as delta -> 0
            assert got >= _atom_lower_epsilon(eps, n, delta) * (1 - 1e-9)
    # With delta > 0 and many releases the PLD beats basic composition (advanced composition would too).
    if n == 100:
        assert PldAccountant().compose(event).get_epsilon(1e-6) < 0.6 * n * eps


def test_dp_pix_event_under_substitution_is_safe_and_twice_as_loose():
    event = dp_pix_event(1.0, 3)
    add_remove = PldAccountant().compose(event).get_epsilon(1e-6)
    substitute = PldAccountant(relation="substitute").compose(event).get_epsilon(1e-6)
    assert substitute == pytest.approx(2 * add_remove, rel=1e-2)
