"""Gaussian mixture pairs (metadp.mechanisms.gaussian) and their RDP (metadp.mechanisms._mixture_rdp).

Oracles:
* the analytic Gaussian profile (Balle & Wang 2018, arXiv:1805.06530, Thm. 8),
  delta(eps) = Phi(1/(2z) - eps z) - e^eps Phi(-1/(2z) - eps z), in mpmath at 50 digits;
* 30-digit mpmath quadratures of the densities (``mp_reference.py``): the hockey-stick divergence
  int_{L > eps} (p - e^eps q), the loss CDFs int_{L <= l} p and q, the Renyi moment int p^a q^(1-a);
* the Poisson-subsampled Gaussian RDP of ``metadp.core.rdp`` (itself checked at 60 digits).

Pairs: the plain Gaussian, the Poisson-subsampled Gaussian at the extremes q = 1e-6, 0.99 and
sigma = 0.3, 50, and the episodic mixture w_k = Bin(k; 8, 0.05), s_k = 2k (DESIGN.md 3.7), in both
directions. The default run samples this grid; ``-m slow`` runs all of it.

Tolerances. The profile is computed as Pr_P[L > eps] - e^eps Pr_Q[L > eps]: each term carries a
few ulps of relative error (the Newton threshold x(eps) enters only to second order, since the
integrand p - e^eps q vanishes there), so besides 1e-10 relative the test allows 8 ulps of the
larger term (this is what limits small-q, large-sigma pairs: delta(0) = 8e-9 from terms of 0.5).
Loss CDFs are compared to 1e-10 relative plus the effect of a backward error of 32 ulps of
max(1, |l|) in the loss level: the loss log(dP/dQ) is evaluated in double precision, with an
absolute error of about 1e-16 even where the whole loss distribution is 1e-6 wide. The one case
where that matters at all is pinned, as a known defect, by ``test_small_rate_cdf_forward_accuracy``.
"""

from __future__ import annotations

import functools
import math

import mpmath
import numpy as np
import pytest
from scipy import special, stats

from metadp.core.rdp import poisson_gaussian_rdp
from metadp.mechanisms import GaussianMixturePair, gaussian_pair, mixture_rdp, poisson_gaussian_pairs
from oracles.mp_reference import MpGaussianMixture, rel_error
from _grid import cover, product

EPS = np.finfo(float).eps
RTOL = 1e-10
_BINOM_W = tuple(float(stats.binom.pmf(k, 8, 0.05)) for k in range(9))
_BINOM_S = tuple(2.0 * k for k in range(9))

# name -> (weights, shifts, sigma)
CASES = {
    "gauss-z0.3": ((1.0,), (1.0,), 0.3),
    "gauss-z1": ((1.0,), (1.0,), 1.0),
    "gauss-z50": ((1.0,), (1.0,), 50.0),
    "poisson-q1e-6-z0.3": ((1 - 1e-6, 1e-6), (0.0, 1.0), 0.3),
    "poisson-q1e-6-z50": ((1 - 1e-6, 1e-6), (0.0, 1.0), 50.0),
    "poisson-q0.99-z0.3": ((0.01, 0.99), (0.0, 1.0), 0.3),
    "poisson-q0.99-z50": ((0.01, 0.99), (0.0, 1.0), 50.0),
    "binom-z0.3": (_BINOM_W, _BINOM_S, 0.3),
    "binom-z1": (_BINOM_W, _BINOM_S, 1.0),
    "binom-z50": (_BINOM_W, _BINOM_S, 50.0),
}
DIRECTIONS = ("add", "remove")
# The default run: every family, both extremes of q and sigma, both directions.
DEFAULT = {
    ("gauss-z1", "add"), ("gauss-z0.3", "remove"), ("gauss-z50", "add"),
    ("poisson-q1e-6-z50", "add"), ("poisson-q1e-6-z0.3", "remove"),
    ("poisson-q0.99-z0.3", "add"), ("poisson-q0.99-z50", "remove"),
    ("binom-z1", "add"), ("binom-z1", "remove"),
}


# The quadrature oracles (about 1-4 s a pair) keep one binomial direction each and leave the middle
# Gaussian (z = 1, between the two extremes) to the slow run.
_PROFILE_DEFAULT = DEFAULT - {("gauss-z1", "add"), ("binom-z1", "add")}
_CDF_DEFAULT = DEFAULT - {("gauss-z1", "add"), ("binom-z1", "remove")}


def _grid(default=DEFAULT):
    return cover(product(CASES, DIRECTIONS), default=default, every_value=False)


def _pair(case: str, direction: str) -> GaussianMixturePair:
    w, s, sig = CASES[case]
    return GaussianMixturePair(w, s, sig, direction)


@functools.lru_cache(maxsize=None)
def _ref(case: str, direction: str) -> MpGaussianMixture:
    pair = _pair(case, direction)  # the weights the pair holds, taken as exact (see MpGaussianMixture)
    return MpGaussianMixture(pair.weights, pair.shifts, pair.sigma, direction, normalize=False)


@functools.lru_cache(maxsize=None)
def _ref_call(case, direction, method, *args):
    return getattr(_ref(case, direction), method)(*args)


# --------------------------------------------------------------------------- profile

def _closed_form_tails(case, direction, eps):
    """(Pr_P[L > eps], Pr_Q[L > eps]) in mpmath from normal CDFs: only used to size the tolerance."""
    ref = _ref(case, direction)
    with mpmath.workdps(30):
        if direction == "add":
            x0 = ref.x_of(eps)
            mix = mpmath.fsum(w * mpmath.ncdf(-(x0 - s) / ref.sigma) for w, s in zip(ref.w, ref.s))
            return mix, mpmath.ncdf(-x0 / ref.sigma)
        x0 = ref.x_of(-eps)
        if x0 == -mpmath.inf:
            return mpmath.mpf(0), mpmath.mpf(0)
        mix = mpmath.fsum(w * mpmath.ncdf((x0 - s) / ref.sigma) for w, s in zip(ref.w, ref.s))
        return mpmath.ncdf(x0 / ref.sigma), mix


def _check_profile(fast: float, ref, tail_p, tail_q, eps: float, label: str):
    if ref < mpmath.mpf("1e-300"):
        assert 0.0 <= fast <= 1e-290, f"{label}: fast {fast!r} where the reference is {mpmath.nstr(ref, 5)}"
        return
    allowed = RTOL * ref + 8 * EPS * (tail_p + mpmath.exp(eps) * tail_q)
    err = abs(mpmath.mpf(fast) - ref)
    assert err <= allowed, (f"{label}: fast {fast!r}, reference {mpmath.nstr(ref, 20)}, error "
                            f"{mpmath.nstr(err, 3)} > allowed {mpmath.nstr(allowed, 3)}")


@pytest.mark.parametrize("z", [0.3, 0.5, 1.0, 2.0, 10.0, 50.0])
def test_analytic_gaussian_closed_form(z):
    # Balle & Wang 2018, Thm. 8, at 50 digits, over eps from 0 to 200 (wherever delta > 1e-300).
    epsilons = [0.0, 0.01, 0.1, 0.5, 1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0]
    pairs = {"add": gaussian_pair(z), "remove": GaussianMixturePair([1.0], [1.0], z, "remove")}
    with mpmath.workdps(50):
        zz = mpmath.mpf(z)
        for eps in epsilons:
            tail_p = mpmath.ncdf(1 / (2 * zz) - eps * zz)
            tail_q = mpmath.ncdf(-1 / (2 * zz) - eps * zz)
            ref = tail_p - mpmath.exp(eps) * tail_q
            for direction, pair in pairs.items():
                _check_profile(float(pair.profile(eps)), ref, tail_p, tail_q, eps, f"z={z} {direction} eps={eps}")


_PROFILE_EPS = (0.0, 0.1, 1.0, 5.0, 30.0)


@pytest.mark.parametrize("case,direction", _grid(_PROFILE_DEFAULT))
def test_profile_matches_quadrature(case, direction):
    pair = _pair(case, direction)
    epsilons = _PROFILE_EPS if (case, direction) not in _PROFILE_DEFAULT else _PROFILE_EPS[::2]
    for eps in epsilons:
        ref = _ref_call(case, direction, "hockey_stick", eps)
        tail_p, tail_q = _closed_form_tails(case, direction, eps)
        _check_profile(float(pair.profile(eps)), ref, tail_p, tail_q, eps, f"{case} {direction} eps={eps}")


def test_reference_quadrature_matches_closed_form():
    # The quadrature reference itself, against normal CDFs at 30 digits, where delta is tiny
    # (z = 50, eps = 0.5: 3.1e-141, the case that first exposed mpmath's absolute tolerance).
    for case, direction, eps in [("gauss-z50", "add", 0.5), ("binom-z1", "remove", 1.0),
                                 ("poisson-q1e-6-z50", "add", 0.0)]:
        quad = _ref_call(case, direction, "hockey_stick", eps)
        tail_p, tail_q = _closed_form_tails(case, direction, eps)
        with mpmath.workdps(30):
            closed = tail_p - mpmath.exp(eps) * tail_q
            # 30 digits minus the cancellation of the closed form itself (tails of 0.5, delta 8e-9).
            assert abs(quad - closed) <= mpmath.mpf("1e-20") * abs(closed), (case, direction, eps)


def test_profile_is_a_hockey_stick_divergence():
    # delta is in [0, 1], non-increasing in eps, 1 - e^eps <= delta, and delta(eps) = 0 beyond
    # sup L (a "remove" pair with a zero shift has sup L = -log w_0).
    eps = np.linspace(-5.0, 60.0, 400)
    for case in CASES:
        for direction in DIRECTIONS:
            d = _pair(case, direction).profile(eps)
            assert np.all((d >= 0) & (d <= 1)), case
            assert np.all(np.diff(d) <= 1e-15), (case, direction)
            assert np.all(d >= -np.expm1(np.minimum(eps, 0)) - 1e-15), (case, direction)
    remove = _pair("poisson-q0.99-z0.3", "remove")
    assert remove.profile(-math.log(0.01) + 1e-9) == 0.0


# --------------------------------------------------------------------------- loss distribution

def _loss_levels(case: str, direction: str, n: int):
    """n levels strictly inside loss_range(1e-20) (its ends can sit on the loss floor)."""
    pair = _pair(case, direction)
    lo, hi = pair.loss_range(1e-20)
    levels = np.linspace(lo, hi, n + 2)[1:-1]
    return [float(l) for l in levels]


@pytest.mark.parametrize("case,direction", _grid())
def test_cdf_plus_sf_is_one(case, direction):
    pair = _pair(case, direction)
    lo, hi = pair.loss_range(1e-30)
    levels = np.concatenate([np.linspace(lo - 1, hi + 1, 2001), [lo, hi, -np.inf, np.inf, 0.0]])
    for under in "PQ":
        cdf, sf = pair.loss_cdf(levels, under), pair.loss_sf(levels, under)
        assert np.all((cdf >= 0) & (cdf <= 1) & (sf >= 0) & (sf <= 1))
        np.testing.assert_allclose(cdf + sf, 1.0, rtol=0, atol=4 * EPS)
        order = np.argsort(levels)
        assert np.all(np.diff(cdf[order]) >= 0), "loss_cdf must be non-decreasing"
        assert cdf[levels == -np.inf] == 0 and cdf[levels == np.inf] == 1


def _check_tail(fast: float, ref, density, level: float, label: str):
    """Forward error within 1e-10 relative plus a 32-ulp backward error in the level."""
    if ref < mpmath.mpf("1e-300"):
        assert fast <= 1e-290, label
        return
    allowed = RTOL * ref + abs(density) * 32 * EPS * max(1.0, abs(level))
    err = abs(mpmath.mpf(fast) - ref)
    assert err <= allowed, (f"{label}: fast {fast!r}, reference {mpmath.nstr(ref, 20)}, "
                            f"rel. error {rel_error(fast, ref):.2e}, allowed {mpmath.nstr(allowed / ref, 3)} rel.")


@pytest.mark.parametrize("case,direction", _grid(_CDF_DEFAULT))
def test_loss_cdf_matches_quadrature(case, direction):
    # For each level, the smaller of Pr[L <= l] and Pr[L > l] (the one a 1 - x would ruin) is
    # compared with the integral of the density over that side; the other follows from cdf + sf = 1.
    pair = _pair(case, direction)
    n = (2 if case.startswith("binom") else 3) if (case, direction) in _CDF_DEFAULT else 7
    for level in _loss_levels(case, direction, n):
        for under in "PQ":
            cdf = float(pair.loss_cdf(level, under))
            kind = "loss_cdf" if cdf <= 0.5 else "loss_sf"
            fast = cdf if kind == "loss_cdf" else float(pair.loss_sf(level, under))
            ref = _ref_call(case, direction, kind, level, under)
            density = _ref_call(case, direction, "loss_density", level, under)
            _check_tail(fast, ref, density, level, f"{case} {direction} {kind}({level!r}, {under})")


@pytest.mark.parametrize("direction", ["add", pytest.param("remove", marks=pytest.mark.slow)])
def test_narrow_loss_distribution_forward_accuracy(direction):
    # q = 2^-20, sigma = 50, three components (Newton path): the whole loss law is ~1e-6 wide, so a
    # loss evaluated with 1e-16 absolute error would lose 10 digits. No backward slack here.
    pair = GaussianMixturePair([1 - 2.0**-19, 2.0**-20, 2.0**-20], [0.0, 1.0, 2.0], 50.0, direction)
    ref = MpGaussianMixture(pair.weights, pair.shifts, pair.sigma, direction, normalize=False)
    lo, hi = pair.loss_range(1e-12)
    for level in np.linspace(lo, hi, 5)[1:-1]:
        for under in "PQ":
            cdf = float(pair.loss_cdf(level, under))
            kind = "loss_cdf" if cdf <= 0.5 else "loss_sf"
            fast = float(getattr(pair, kind)(level, under))
            assert rel_error(fast, getattr(ref, kind)(float(level), under)) <= 1e-12, (level, under, kind)


_GL_X, _GL_W = np.polynomial.legendre.leggauss(40)


def _tilted_mass(pair, lo: float, hi: float, pieces: int = 400) -> float:
    """int_{(lo, hi]} e^-l dF_P(l) from loss_cdf(., "P") alone, integrating by parts.

    Gauss-Legendre (40 nodes) on each piece, all nodes in one vectorised loss_cdf call.
    e^-l F_P(l) <= F_Q(l) <= 1, but e^-l alone can overflow: the product is formed in log space.
    """
    def tilted(l):
        with np.errstate(divide="ignore"):
            return np.exp(-l + np.log(pair.loss_cdf(l, "P")))

    # Geometric breakpoints at both ends: with sigma = 0.3 and shifts 2k, 85% of the law sits
    # within 1e-13 of the loss floor (add) or of sup L (remove).
    ends = (hi - lo) * np.logspace(-16, -1, 61)
    points = np.unique(np.concatenate([np.linspace(lo, hi, pieces + 1), lo + ends, hi - ends]))
    a, b = points[:-1, None], points[1:, None]
    nodes = 0.5 * (a + b) + 0.5 * (b - a) * _GL_X  # (pieces, 40)
    middle = float(np.sum(0.5 * (b - a)[:, 0] * (tilted(nodes) @ _GL_W)))
    return float(tilted(hi) - tilted(lo)) + middle


@pytest.mark.parametrize("case,direction", _grid(default={(c, d) for c in CASES for d in DIRECTIONS
                                                          if c not in ("binom-z50", "binom-z0.3")}
                                                 | {("binom-z0.3", "remove")}))
def test_q_is_the_exponentially_tilted_p(case, direction):
    # E_P[e^-L] = 1 - Q(P = 0) = 1 (Gaussian mixtures have full support), from the law of L under P
    # alone: int_{(lo, hi]} e^-l dF_P(l) = e^-hi F_P(hi) - e^-lo F_P(lo) + int_lo^hi e^-l F_P(l) dl,
    # with lo, hi where the Q-tails outside are below 1e-14 (they are added, from loss_cdf(., "Q")),
    # except that lo stays above -600: below, F_P(l) <= e^l underflows (binom-z0.3 "remove" has Q-mass
    # 4e-7 at losses below -700), and the Q-tail at lo carries that mass instead.
    pair = _pair(case, direction)
    lo, hi = pair.loss_range(1e-16)
    while pair.loss_cdf(lo, "Q") > 1e-14 and lo > -600.0:
        lo = max(lo - max(1.0, abs(lo)), -600.0)
    mass = _tilted_mass(pair, lo, hi) + float(pair.loss_cdf(lo, "Q")) + float(pair.loss_sf(hi, "Q"))
    assert abs(mass - 1.0) <= 1e-10, f"{case} {direction}: E_P[e^-L] = {mass!r}"


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("direction", DIRECTIONS)
@pytest.mark.parametrize("tail", [1e-3, 1e-10, 1e-30, 0.0])
def test_loss_range_tails(case, direction, tail):
    # loss_range bisects on loss_cdf/loss_sf with a relative margin of 1e-9 for their rounding,
    # so the tails are strictly below the request (here by the pair's own CDFs; below, exactly).
    pair = _pair(case, direction)
    lo, hi = pair.loss_range(tail)
    assert math.isfinite(lo) and math.isfinite(hi) and lo <= hi
    below = float(pair.loss_cdf(np.nextafter(lo, -np.inf), "P"))  # Pr_P[L < lo]
    above = float(pair.loss_sf(hi, "P"))
    assert below <= tail and above <= tail, (lo, hi, below, above)
    lo_b, hi_b = pair.loss_bracket(tail)
    assert lo_b <= lo and hi <= hi_b


@pytest.mark.parametrize("case,direction", [("binom-z1", "add"), ("poisson-q1e-6-z50", "remove"),
                                            ("gauss-z0.3", "add")])
def test_loss_range_tails_against_quadrature(case, direction):
    pair = _pair(case, direction)
    for tail in (1e-6, 1e-20) if case != "binom-z1" else (1e-20,):
        lo, hi = pair.loss_range(tail)
        assert _ref_call(case, direction, "loss_sf", hi, "P") <= tail
        assert _ref_call(case, direction, "loss_cdf", float(np.nextafter(lo, -np.inf)), "P") <= tail


# Regression: loss_range once bisected to the exact boundary (tail exceeded by 5.8e-15 relative).
def test_loss_range_tail_is_strict():
    case, direction, tail = "gauss-z0.3", "add", 1e-6
    _, hi = _pair(case, direction).loss_range(tail)
    assert _ref_call(case, direction, "loss_sf", hi, "P") <= tail


def test_inverse_near_the_floor_and_at_infinity():
    pair = _pair("poisson-q0.99-z0.3", "add")
    floor = math.log(0.01)
    assert pair.loss_cdf(floor - 1e-3, "P") == 0 and pair.loss_sf(floor - 1e-3, "P") == 1
    assert pair.loss_cdf(np.inf, "Q") == 1 and pair.loss_sf(np.inf, "P") == 0
    remove = _pair("poisson-q0.99-z0.3", "remove")
    assert remove.loss_sf(-floor + 1e-3, "P") == 0 and remove.loss_cdf(-floor + 1e-3, "Q") == 1


# --------------------------------------------------------------------------- samplers

# Family-wise level 1e-3 over every goodness-of-fit test in this module (Bonferroni over the
# 2 statistics x 2 laws x 20 pair/direction combinations): a correct sampler fails some seed
# with probability <= 1e-3. The seeds are fixed, so the run is deterministic.
_GOF_TESTS = 2 * 2 * len(CASES) * len(DIRECTIONS)
_LEVEL = 1e-3 / _GOF_TESTS


def _mixture_cdf(x, weights, shifts, sigma):
    return sum(w * special.ndtr((x - s) / sigma) for w, s in zip(weights, shifts))


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("direction", DIRECTIONS)
def test_sampler_goodness_of_fit(case, direction):
    w, s, sig = CASES[case]
    pair = _pair(case, direction)
    rng = np.random.default_rng(20240 + list(CASES).index(case) * 2 + DIRECTIONS.index(direction))
    for under in "PQ":
        x = pair.sample(20_000, rng, under)
        mixture = (under == "P") == (direction == "add")
        cdf = (lambda t: _mixture_cdf(t, w, s, sig)) if mixture else (lambda t: special.ndtr(t / sig))
        # Outputs against the distribution, independently of the pair's loss functions.
        assert stats.kstest(x, cdf).pvalue > _LEVEL, (case, direction, under)
        # Their losses against loss_cdf: chi-square over bins fixed in advance from the model.
        edges = _loss_bins(pair, under)
        if edges is None:  # the whole law is compressed within a few ulps (binom-z0.3 under Q)
            continue
        expected = np.diff(pair.loss_cdf(edges, under)) * len(x)
        observed = np.histogram(pair.log_ratio(x), bins=edges)[0]
        stat = np.sum((observed - expected) ** 2 / expected)
        assert stats.chi2.sf(stat, len(expected) - 1) > _LEVEL, (case, direction, under, stat)


def _loss_bins(pair, under: str, n_bins: int = 20) -> np.ndarray:
    """Edges near the j/n_bins quantiles of the loss under ``under`` (from loss_cdf, not the data).

    Edges where the law is compressed below the resolution of a double are avoided (sigma = 0.3,
    shifts 2k: 85% of the law within 1e-13 of the loss floor): there the rounding of log_ratio(x)
    would decide on which side of an edge a sample falls.
    """
    lo, hi = pair.loss_range(1e-6)
    span = hi - lo
    near_ends = span * np.logspace(-16, 0, 321)  # laws compressed against an end of the range
    grid = np.unique(np.concatenate([np.linspace(lo - span, hi + span, 3001), lo + near_ends, hi - near_ends]))
    # Keep edges where 64 ulps of the level move less than 1e-4 of the mass.
    ulps = 64 * EPS * np.maximum(1.0, np.abs(grid))
    grid = grid[pair.loss_cdf(grid + ulps, under) - pair.loss_cdf(grid - ulps, under) < 1e-4]
    cdf = pair.loss_cdf(grid, under)
    targets = np.arange(1, n_bins) / n_bins
    inner = np.unique(grid[np.searchsorted(cdf, targets).clip(0, len(grid) - 1)])
    edges = np.concatenate([[-np.inf], inner, [np.inf]])
    # Merge bins expected to hold fewer than 1% of the samples into a neighbour.
    probs = np.diff(pair.loss_cdf(edges, under))
    keep = np.concatenate([[True], probs[:-1] >= 0.01, [True]])
    edges = edges[keep]
    if len(edges) > 2 and pair.loss_sf(edges[-2], under) < 0.01:
        edges = np.delete(edges, -2)
    return edges if len(edges) >= 4 else None  # fewer than 3 bins: nothing worth testing


# --------------------------------------------------------------------------- RDP of mixtures

_ORDERS = [1.01, 1.5, 2.0, 3.0, 10.0, 64.5, 256.0, 1024.0, 4096.0]


@pytest.mark.parametrize("rate", [1e-6, 1e-3, 0.1, 0.5, 0.99])
@pytest.mark.parametrize("noise", [0.3, 1.0, 5.0, 50.0])
def test_poisson_mixture_rdp_matches_closed_form(rate, noise):
    # The "add" direction is the MTZ moment E_N0[(M/N0)^alpha] (Mironov, Talwar & Zhang 2019), which
    # metadp.core.rdp computes independently; "remove" is never larger (their Thm. 5).
    add, remove = poisson_gaussian_pairs(rate, noise)
    ref = poisson_gaussian_rdp(rate, noise, _ORDERS)
    fast_add = mixture_rdp(add, _ORDERS)
    fast_remove = mixture_rdp(remove, _ORDERS)
    np.testing.assert_allclose(fast_add, ref, rtol=RTOL)
    assert np.all(fast_remove <= ref * (1 + 1e-12)), (fast_remove, ref)
    assert np.all(fast_remove > 0)


def test_full_rate_is_the_gaussian():
    (pair,) = poisson_gaussian_pairs(1.0, 2.0)
    np.testing.assert_allclose(mixture_rdp(pair, _ORDERS), np.asarray(_ORDERS) / 8.0, rtol=1e-12)


_RDP_GRID = cover(product(("binom-z0.3", "binom-z1", "binom-z50", "poisson-q1e-6-z0.3"), DIRECTIONS),
                  default=[("binom-z1", "add")], every_value=False)


@pytest.mark.parametrize("case,direction", _RDP_GRID)
def test_mixture_rdp_matches_quadrature(case, direction):
    # binom-z0.3 and poisson: an order near 1, an integer and a large fractional one (binom-z0.3's references
    # cost ~40 s an order: 203 s for five orders of remove in a slow run on 2 cores); binom-z1 (the default
    # run's case): 1.5 and 8; binom-z50 (~65 s an order, quadrature at sigma = 50): one end per direction,
    # near 1 for add and large for remove
    orders = {"binom-z1": [1.5, 8.0],
              "binom-z50": [1.01] if direction == "add" else [32.5]}.get(case, [1.01, 2.0, 32.5])
    fast = mixture_rdp(_pair(case, direction), orders)
    for alpha, value in zip(orders, fast):
        ref = _ref_call(case, direction, "rdp", alpha)
        assert rel_error(float(value), ref) <= RTOL, (case, direction, alpha, value, mpmath.nstr(ref, 20))


def test_renyi_reference_matches_multinomial_sum():
    # Integer alpha, add direction: E_N0[(sum_k w_k e^{(2 s_k x - s_k^2)/(2 s^2)})^alpha] expands by
    # the multinomial theorem into sum_n C(alpha; n) prod w^n exp(((sum n s)^2 - sum n s^2) / (2 s^2)).
    w, s, sig = (0.5, 0.3, 0.2), (0.0, 1.0, 3.0), 1.5
    ref = MpGaussianMixture(w, s, sig, "add")
    fast = mixture_rdp(GaussianMixturePair(w, s, sig, "add"), [2.0, 5.0])
    with mpmath.workdps(40):
        for alpha, value in zip((2, 5), fast):
            total = mpmath.mpf(0)
            for n0 in range(alpha + 1):
                for n1 in range(alpha + 1 - n0):
                    n2 = alpha - n0 - n1
                    n = (n0, n1, n2)
                    coef = mpmath.factorial(alpha) / mpmath.fprod(mpmath.factorial(k) for k in n)
                    first = mpmath.fsum(k * mpmath.mpf(sh) for k, sh in zip(n, s))
                    second = mpmath.fsum(k * mpmath.mpf(sh) ** 2 for k, sh in zip(n, s))
                    weight = mpmath.fprod(mpmath.mpf(wk) ** k for wk, k in zip(w, n))
                    total += coef * weight * mpmath.exp((first ** 2 - second) / (2 * mpmath.mpf(sig) ** 2))
            exact = mpmath.log(total) / (alpha - 1)
            assert abs(ref.rdp(alpha) - exact) <= mpmath.mpf("1e-25") * exact
            assert rel_error(float(value), exact) <= RTOL


def test_mixture_rdp_infinite_order_and_validation():
    add, remove = poisson_gaussian_pairs(0.25, 1.0)
    assert mixture_rdp(add, [np.inf])[0] == np.inf
    assert mixture_rdp(remove, [np.inf])[0] == pytest.approx(-math.log(0.75), rel=1e-15)
    assert mixture_rdp(gaussian_pair(1.0), [np.inf])[0] == np.inf
    with pytest.raises(ValueError, match="orders"):
        mixture_rdp(add, [1.0])
    with pytest.raises(ValueError, match="orders"):
        mixture_rdp(add, [np.nan])


def test_mixture_rdp_saturates_at_sup_loss():
    # "remove" with sigma = 0.1 and shifts 2k: D_alpha reaches D_inf = -log w_0 = -8 log 0.95 by
    # alpha ~ 1 (the other components are 20 sigma away); never above it.
    pair = GaussianMixturePair(_BINOM_W, _BINOM_S, 0.1, "remove")
    values = mixture_rdp(pair, [1.01, 2.0, 64.0, 4096.0, np.inf])
    sup = -math.log(_BINOM_W[0] / sum(_BINOM_W))
    assert np.all(values <= sup) and np.all(np.diff(values) >= 0)
    assert values[0] == pytest.approx(sup, rel=1e-12)
    with pytest.raises(ValueError, match="GaussianMixturePair"):
        mixture_rdp(object(), [2.0])


def test_mixture_rdp_monotone_in_order_and_noise():
    orders = np.array([1.1, 2, 8, 64, 512])
    for direction in DIRECTIONS:
        values = [mixture_rdp(GaussianMixturePair(_BINOM_W, _BINOM_S, sig, direction), orders)
              for sig in (2.0, 8.0, 32.0)]
        for v in values:
            assert np.all(np.diff(v) > 0), "D_alpha is non-decreasing in alpha"
        assert np.all(values[0] > values[1]) and np.all(values[1] > values[2]), "more noise, less divergence"
