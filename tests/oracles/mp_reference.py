"""mpmath references for dominating pairs: densities, loss regions, hockey-stick divergences, RDP.

Every quantity is computed from the densities p and q alone, by quadrature at ``DPS`` digits, so
that it checks the closed forms and the inverse-loss computations of ``metadp.mechanisms``
independently: the privacy profile is delta(eps) = int_{L > eps} (p - e^eps q) dx, integrated
over the region where the loss exceeds eps only (whose boundary is found by an mpmath root
solve), so that the integrand is smooth and positive; loss CDFs are integrals of p or q over
{x : L(x) <= l}. Discrete pairs (randomized response) sum their two atoms.
"""

from __future__ import annotations

import math
from typing import Sequence

import mpmath

from oracles.stored import stored

DPS = 30


def _scaled_quad(f, points):
    """mpmath.quad of f over the panels, with f scaled to O(1) first.

    mpmath's tanh-sinh stops on an *absolute* error estimate (about 10^-dps), so an integrand of
    size 1e-140 would be accepted after a few nodes; dividing by the largest |f| at the
    breakpoints makes the tolerance relative.
    """
    finite = [t for t in points if mpmath.isfinite(t)]
    scale = max(abs(f(t)) for t in finite) if finite else mpmath.mpf(1)
    if scale == 0:
        scale = mpmath.mpf(1)
    return scale * mpmath.quad(lambda x: f(x) / scale, points)


class MpGaussianMixture:
    """GaussianMixturePair(weights, shifts, sigma, direction) in mpmath.

    ``normalize=False`` takes the weights as exact (pass ``pair.weights``): float weights such as
    (1 - 1e-6, 1e-6) sum to 1 - 3e-17, and renormalising them exactly moves the loss floor by 3e-17,
    which is 1e-10 of a loss distribution only 1e-7 wide; the reference must describe the pair the
    code actually holds.
    """

    def __init__(self, weights: Sequence[float], shifts: Sequence[float], sigma: float, direction: str,
                 normalize: bool = True):
        with mpmath.workdps(DPS):
            total = mpmath.fsum(mpmath.mpf(w) for w in weights) if normalize else mpmath.mpf(1)
            keep = [(mpmath.mpf(w) / total, mpmath.mpf(s)) for w, s in zip(weights, shifts) if w > 0]
            self.w = [w for w, _ in keep]
            self.s = [s for _, s in keep]
            self.sigma = mpmath.mpf(sigma)
        self.direction = direction

    def _null(self, x):
        return mpmath.exp(-x * x / (2 * self.sigma ** 2)) / (self.sigma * mpmath.sqrt(2 * mpmath.pi))

    def _mix(self, x):
        two_s2 = 2 * self.sigma ** 2
        total = mpmath.fsum(w * mpmath.exp(-(x - s) ** 2 / two_s2) for w, s in zip(self.w, self.s))
        return total / (self.sigma * mpmath.sqrt(2 * mpmath.pi))

    def density(self, x, under: str):
        mixture = (under == "P") == (self.direction == "add")
        return self._mix(x) if mixture else self._null(x)

    def loss_add(self, x):
        """log(mixture / null)(x), increasing in x."""
        s2 = self.sigma ** 2
        return mpmath.log(mpmath.fsum(w * mpmath.exp((2 * s * x - s * s) / (2 * s2)) for w, s in zip(self.w, self.s)))

    @stored
    def loss_density(self, level, under: str):
        """d/dl Pr[L <= l] at l = level (0 outside the support): used to size tolerances."""
        with mpmath.workdps(DPS):
            level = mpmath.mpf(level)
            x0 = self.x_of(level if self.direction == "add" else -level)
            if not mpmath.isfinite(x0):
                return mpmath.mpf(0)
            slope = mpmath.diff(self.loss_add, x0)
            return self.density(x0, under) / slope

    def floor(self):
        z = mpmath.fsum(w for w, s in zip(self.w, self.s) if s == 0)
        return mpmath.log(z) if z > 0 else -mpmath.inf

    @stored
    def x_of(self, level):
        """x with loss_add(x) = level (-inf at or below the floor)."""
        level = mpmath.mpf(level)
        if level <= self.floor():
            return -mpmath.inf
        smax = max(self.s)
        lo, hi = mpmath.mpf(-1), mpmath.mpf(1)
        while self.loss_add(lo) > level:
            lo = 2 * lo - smax
        while self.loss_add(hi) < level:
            hi = 2 * hi + smax
        # Plain bisection (loss_add is increasing) down to below the working precision: slow but
        # immune to the flat stretches where secant-type solvers divide by zero.
        for _ in range(mpmath.mp.prec + 20):
            mid = (lo + hi) / 2
            if self.loss_add(mid) < level:
                lo = mid
            else:
                hi = mid
        return (lo + hi) / 2

    def _points(self, *extra):
        pts = sorted(set([mpmath.mpf(0)] + list(self.s) + [mpmath.mpf(e) for e in extra if mpmath.isfinite(e)]))
        return pts

    def _integral(self, f, a, b):
        """int_a^b f over a panelled interval (every shift and the ends are breakpoints)."""
        pts = [p for p in self._points() if a < p < b]
        sig = self.sigma
        # Breakpoints every 3 sigma around each shift keep tanh-sinh on smooth Gaussian pieces. From
        # a finite end deep in a tail the integrand falls by e^-1 per decay length sigma^2 / |x - s|,
        # too fast for a 3-sigma panel: panels of 1 and then 3 decay lengths cover the first e^-85
        # (beyond 30 digits) before the 3-sigma panels take over.
        fine = set()
        for c in list(self.s) + [mpmath.mpf(0)]:
            for j in range(-5, 6):
                t = c + 3 * j * sig
                if a < t < b:
                    fine.add(t)
        for end, direction in ((a, 1), (b, -1)):
            if mpmath.isfinite(end):
                decay = min(sig, sig ** 2 / max(abs(end - s) for s in self.s + [mpmath.mpf(0)]))
                steps = [j * decay for j in range(1, 11)] + [(10 + 3 * j) * decay for j in range(1, 26)]
                for step in steps:
                    t = end + direction * step
                    if a < t < b:
                        fine.add(t)
                for j in range(1, 7):
                    t = end + direction * (85 * decay + 3 * j * sig)
                    if a < t < b:
                        fine.add(t)
        nodes = sorted(set(pts) | fine)
        return _scaled_quad(f, [a] + nodes + [b])

    @stored
    def hockey_stick(self, eps):
        """delta(eps) = int_{L > eps} (p - e^eps q) dx."""
        with mpmath.workdps(DPS):
            eps = mpmath.mpf(eps)
            g = mpmath.exp(eps)

            def f(x):
                return self.density(x, "P") - g * self.density(x, "Q")

            if self.direction == "add":  # L > eps  <=>  x > x(eps)
                x0 = self.x_of(eps)
                return self._integral(f, x0, mpmath.inf)
            x0 = self.x_of(-eps)  # remove: L = -L_add > eps  <=>  x < x(-eps)
            if x0 == -mpmath.inf:
                return mpmath.mpf(0)
            return self._integral(f, -mpmath.inf, x0)

    @stored
    def loss_cdf(self, level, under: str):
        """Pr[L <= level] = int_{L(x) <= level} density."""
        with mpmath.workdps(DPS):
            level = mpmath.mpf(level)
            d = lambda x: self.density(x, under)  # noqa: E731
            if self.direction == "add":
                x0 = self.x_of(level)
                return mpmath.mpf(0) if x0 == -mpmath.inf else self._integral(d, -mpmath.inf, x0)
            x0 = self.x_of(-level)
            return mpmath.mpf(1) if x0 == -mpmath.inf else self._integral(d, x0, mpmath.inf)

    @stored
    def loss_sf(self, level, under: str):
        with mpmath.workdps(DPS):
            level = mpmath.mpf(level)
            d = lambda x: self.density(x, under)  # noqa: E731
            if self.direction == "add":
                x0 = self.x_of(level)
                return mpmath.mpf(1) if x0 == -mpmath.inf else self._integral(d, x0, mpmath.inf)
            x0 = self.x_of(-level)
            return mpmath.mpf(0) if x0 == -mpmath.inf else self._integral(d, -mpmath.inf, x0)

    @stored
    def renyi_moment_minus_1(self, alpha):
        """E_Q[(p/q)^alpha] - 1 = int N(x) g(y(x)) dx with 1 + y = mixture/null and
        g(y) = (1 + y)^beta - 1 - beta y (beta = alpha for "add", 1 - alpha for "remove"): the same
        moment minus E_N[1 + beta y] = 1, as a non-negative integrand. (The moment itself, 1 + 1e-10
        at q = 1e-6 and alpha = 1.01, lost 7 digits in mpmath's quadrature.)"""
        with mpmath.workdps(DPS):
            a = mpmath.mpf(alpha)
            beta = a if self.direction == "add" else 1 - a
            s2 = self.sigma ** 2

            def f(x):
                y = mpmath.fsum(w * mpmath.expm1((2 * s * x - s * s) / (2 * s2)) for w, s in zip(self.w, self.s))
                g = (1 + y) ** beta - 1 - beta * y
                return mpmath.exp(-x * x / (2 * s2)) / (self.sigma * mpmath.sqrt(2 * mpmath.pi)) * g

            # Panels of width sigma within 12 sigma of every point where a term of the integrand
            # peaks: 0, the shifts, their pairwise sums (the y^2 term), beta times the shifts.
            centers = set([mpmath.mpf(0)] + [beta * s for s in self.s] + list(self.s)
                          + [s + t for s in self.s for t in self.s])
            nodes = sorted(set(c + j * self.sigma for c in centers for j in range(-12, 13)))
            return _scaled_quad(f, [-mpmath.inf] + nodes + [mpmath.inf])

    @stored
    def rdp(self, alpha):
        with mpmath.workdps(DPS):
            return mpmath.log1p(self.renyi_moment_minus_1(alpha)) / (mpmath.mpf(alpha) - 1)


class MpLaplace:
    """P = Lap(0, b), Q = Lap(1, b) in mpmath."""

    def __init__(self, scale: float):
        with mpmath.workdps(DPS):
            self.b = mpmath.mpf(scale)
            self.e0 = 1 / self.b

    def density(self, x, under: str):
        mu = 0 if under == "P" else 1
        return mpmath.exp(-abs(x - mu) / self.b) / (2 * self.b)

    def loss(self, x):
        return (abs(x - 1) - abs(x)) / self.b

    def _region_le(self, level):
        """{x : L(x) <= level} as an interval (a, b) (possibly empty: None)."""
        if level < -self.e0:
            return None
        if level >= self.e0:
            return (-mpmath.inf, mpmath.inf)
        return ((1 - self.b * level) / 2, mpmath.inf)  # L is decreasing on [0, 1]

    def _integral(self, f, a, b):
        nodes = [t for t in (mpmath.mpf(0), mpmath.mpf(1)) if a < t < b]
        return _scaled_quad(f, [a] + nodes + [b])

    @stored
    def loss_cdf(self, level, under: str):
        with mpmath.workdps(DPS):
            region = self._region_le(mpmath.mpf(level))
            if region is None:
                return mpmath.mpf(0)
            return self._integral(lambda x: self.density(x, under), *region)

    @stored
    def loss_sf(self, level, under: str):
        """Pr[L > level] = integral over the complement, {x < x(level)} (or all, or nothing)."""
        with mpmath.workdps(DPS):
            level = mpmath.mpf(level)
            if level >= self.e0:
                return mpmath.mpf(0)
            hi = mpmath.inf if level < -self.e0 else (1 - self.b * level) / 2
            return self._integral(lambda x: self.density(x, under), -mpmath.inf, hi)

    @stored
    def hockey_stick(self, eps):
        with mpmath.workdps(DPS):
            eps = mpmath.mpf(eps)
            if eps >= self.e0:
                return mpmath.mpf(0)
            g = mpmath.exp(eps)
            hi = mpmath.inf if eps < -self.e0 else (1 - self.b * eps) / 2
            return self._integral(lambda x: self.density(x, "P") - g * self.density(x, "Q"), -mpmath.inf, hi)

    @stored
    def rdp(self, alpha):
        with mpmath.workdps(DPS):
            a = mpmath.mpf(alpha)
            f = lambda x: self.density(x, "P") ** a * self.density(x, "Q") ** (1 - a)  # noqa: E731
            return mpmath.log(self._integral(f, -mpmath.inf, mpmath.inf)) / (a - 1)


class MpRandomizedResponse:
    """P = Bernoulli(p), Q = Bernoulli(1 - p); atoms summed exactly."""

    def __init__(self, p=None, epsilon0=None):
        # Built at 100 digits (the RDP below needs them; mpf values keep their precision).
        with mpmath.workdps(100):
            if epsilon0 is not None:
                e = mpmath.exp(mpmath.mpf(epsilon0))
                self.p, self.r = e / (1 + e), 1 / (1 + e)
            else:
                self.p = mpmath.mpf(p)
                self.r = 1 - self.p
            self.e0 = mpmath.log(self.p / self.r)

    def _atoms(self, under):
        """[(loss, mass)] under P or Q: output 1 has loss +e0, output 0 loss -e0."""
        m1 = self.p if under == "P" else self.r
        return [(self.e0, m1), (-self.e0, 1 - m1)]

    @stored
    def loss_cdf(self, level, under):
        with mpmath.workdps(DPS):
            return mpmath.fsum(m for l, m in self._atoms(under) if l <= level)

    @stored
    def loss_sf(self, level, under):
        with mpmath.workdps(DPS):
            return mpmath.fsum(m for l, m in self._atoms(under) if l > level)

    @stored
    def hockey_stick(self, eps):
        with mpmath.workdps(DPS):
            g = mpmath.exp(mpmath.mpf(eps))
            return mpmath.fsum(max(mpmath.mpf(0), pm - g * qm) for pm, qm in ((self.p, self.r), (self.r, self.p)))

    @stored
    def rdp(self, alpha):
        # 100 digits: for eps0 ~ 1e-12 the sum is 1 + 1e-24 and its log keeps 70 of them.
        with mpmath.workdps(100):
            a = mpmath.mpf(alpha)
            s = self.p ** a * self.r ** (1 - a) + self.r ** a * self.p ** (1 - a)
            return mpmath.log(s) / (a - 1)


def rel_error(fast: float, ref) -> float:
    """|fast - ref| / |ref| (exact 0 demanded when ref is 0; inf for a non-finite fast value)."""
    if not math.isfinite(fast):
        return 0.0 if (mpmath.isinf(ref) and fast == float(ref)) else math.inf
    with mpmath.workdps(DPS):
        if ref == 0:
            return 0.0 if fast == 0 else math.inf
        return float(abs(mpmath.mpf(fast) - ref) / abs(ref))
