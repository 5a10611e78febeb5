"""Renyi divergence of one direction of a Gaussian mixture pair, by log-space quadrature.

For ``GaussianMixturePair(w, s, sigma, direction)`` let M = sum_k w_k N(s_k, sigma^2), N = N(0, sigma^2)
and 1 + y(x) = dM/dN(x) = e^{L_add(x)}, so y(x) = sum_k w_k expm1((2 s_k x - s_k^2) / (2 sigma^2)). Then

    add    (P = M, Q = N):  e^{(alpha-1) D_alpha(P||Q)} = E_N[(1 + y)^alpha],
    remove (P = N, Q = M):  e^{(alpha-1) D_alpha(P||Q)} = E_M[(1 + y)^-alpha] = E_N[(1 + y)^(1-alpha)],

i.e. A = E_N[(1 + y)^beta] with beta = alpha (add) or 1 - alpha (remove). As in
:mod:`metadp.core.rdp` (Mironov, Talwar & Zhang 2019, arXiv:1908.10530, for the Poisson case),
A - 1 is computed directly so that small divergences keep their digits: E_N[y] = 0, hence

    A - 1 = E_N[g(y)],   g(y) = (1 + y)^beta - 1 - beta y >= 0   (convexity, beta >= 1 or beta <= 0),

a non-negative integrand, integrated by adaptive Gauss-Kronrod in log space
(:func:`metadp.core._quadrature.integrate_log`) on panels that resolve every peak. g is
evaluated as a series for |y| <= 1/(2 (|beta| + 1)) (terms shrink by >= 1/2) and otherwise as
(1 + y) expm1((beta - 1) u) - (beta - 1) y (beta >= 1) or expm1(beta u) - beta y (beta <= 0), u = log1p(y),
whose two parts then differ by a bounded factor. Checked against 30-digit mpmath quadrature, a
multinomial closed form at integer orders and the exact Poisson-subsampled Gaussian RDP in
``tests/mechanisms/test_gaussian_pair.py``.
"""

from __future__ import annotations

import math

import numpy as np
from scipy import optimize, special

from metadp.mechanisms.gaussian import GaussianMixturePair
from metadp.core._logmath import log1mexp, log_binomial_series_remainder, log_expm1, log_sum_exp_signed
from metadp.core._quadrature import integrate_log
from metadp.core.rdp import orders_array

__all__ = ["mixture_rdp"]

_SERIES_TERMS = 56  # ratio <= 1/2 per term: 2^-56 < 1.4e-17 relative truncation
_WINDOW = 20.0  # half-width of each window, in local scales: Gaussian tails beyond are e^-200
_PANELS_PER_WINDOW = 80
_GAP_PANELS = 16  # between windows; refined adaptively where mass sits


def mixture_rdp(pair, orders) -> np.ndarray:
    """RDP eps(alpha) = D_alpha(P || Q) of one direction of a :class:`GaussianMixturePair`.

    For a relation whose worst case spans both directions (add/remove), evaluate every pair
    (e.g. from :func:`poisson_gaussian_pairs`) and take the elementwise maximum.

    Args:
        pair: a ``GaussianMixturePair`` (weights, shifts, sigma, direction).
        orders: Renyi orders alpha > 1 (+inf allowed).

    Returns:
        float64 array of eps(alpha), one per order. alpha = inf gives sup L: +inf for "add", and
        -log(weight of the zero shifts) for "remove" (+inf without a zero shift).

    Raises:
        ValueError: on invalid orders.
        ArithmeticError: if the quadrature misses its error target (never a silently wrong value).
    """
    # Imported here: metadp.accounting may import the mechanisms package (PLD accountant).

    orders = orders_array(orders)
    if not isinstance(pair, GaussianMixturePair):
        raise ValueError(f"pair must be a GaussianMixturePair, got {type(pair).__name__}")
    mix = _Mixture(pair)
    out = np.empty_like(orders)
    for i, alpha in enumerate(orders):
        if math.isinf(alpha):
            out[i] = math.inf if pair.direction == "add" else mix.sup_remove_loss
            continue
        beta = alpha if pair.direction == "add" else 1.0 - alpha
        log_a_minus_1 = mix.log_moment_minus_1(beta)
        out[i] = float(np.logaddexp(0.0, log_a_minus_1)) / (alpha - 1.0)
    # D_alpha <= D_inf: for "remove" with a zero shift the curve saturates at -log w_0 (sigma 0.1,
    # shifts 2k: from alpha ~ 1), where the cap removes rounding above the bound.
    return np.minimum(out, math.inf if pair.direction == "add" else mix.sup_remove_loss)


class _Mixture:
    """The log-space pieces of one mixture: y(x), g(y) and the quadrature panels."""

    def __init__(self, pair):
        self.w = np.asarray(pair.weights, dtype=np.float64)
        self.s = np.asarray(pair.shifts, dtype=np.float64)
        self.sigma = float(pair.sigma)
        self.log_w = np.log(self.w)
        self.a = self.s / self.sigma**2
        self.b = self.s**2 / (2.0 * self.sigma**2)
        zero = self.s == 0
        self.sup_remove_loss = -math.log(float(self.w[zero].sum())) if np.any(zero) else math.inf
        self.log_norm = -0.5 * math.log(2.0 * math.pi) - math.log(self.sigma)

    # -- integrand ----------------------------------------------------------------------------

    def _y(self, x: np.ndarray):
        """(sign of y, log|y|, u = log1p(y)) at points x, y = sum_k w_k expm1(a_k x - b_k)."""
        z = self.a * x[..., None] - self.b  # (..., K)
        with np.errstate(divide="ignore"):
            log_abs = np.where(z > 0, log_expm1(np.abs(z)), log1mexp(-np.abs(z)))
        log_abs_y, sign = log_sum_exp_signed(self.log_w + log_abs, np.sign(z), axis=-1)
        log_abs_y, sign = np.asarray(log_abs_y), np.asarray(sign)
        # u from y where |y| is small (keeps u's relative accuracy); from logsumexp near y = -1.
        u_direct = special.logsumexp(self.log_w + z, axis=-1)
        with np.errstate(divide="ignore", invalid="ignore"):
            u_pos = np.logaddexp(0.0, log_abs_y)
            u_neg = log1mexp(np.minimum(log_abs_y, 0.0))
        u = np.where(sign > 0, u_pos, np.where(log_abs_y < math.log(0.5), u_neg, u_direct))
        return sign, log_abs_y, np.where(sign == 0, 0.0, u)

    def log_integrand(self, x: np.ndarray, beta: float) -> np.ndarray:
        sign, log_abs_y, u = self._y(x)
        return self.log_norm - x * x / (2.0 * self.sigma**2) + _log_g(sign, log_abs_y, u, beta)

    def log_moment_minus_1(self, beta: float) -> float:
        edges = self._edges(beta)
        for _ in range(8):
            total = integrate_log(lambda x: self.log_integrand(x, beta), edges)
            if not np.isfinite(total):
                return total
            # Safety net: the integrand at both ends must be negligible against the total.
            ends = self.log_integrand(np.array([edges[0], edges[-1]]), beta) + math.log(self.sigma)
            if np.all(ends < total - 150.0):
                return total
            span = _WINDOW * self.sigma
            edges = np.concatenate([np.linspace(edges[0] - span, edges[0], _GAP_PANELS + 1)[:-1], edges,
                                    np.linspace(edges[-1], edges[-1] + span, _GAP_PANELS + 1)[1:]])
        raise ArithmeticError("mixture_rdp: the integrand does not decay within the window; report this case")

    # -- panels -------------------------------------------------------------------------------

    def _edges(self, beta: float) -> np.ndarray:
        """Windows of fine panels around every point where mass can concentrate, coarse gaps between."""
        sig = self.sigma
        s = np.unique(self.s)
        wide = [0.0, *s, *(2.0 * s), *(beta * s), *(s[:, None] + s[None, :]).ravel()]
        windows = [(c, sig) for c in wide]
        # Crossovers of two components of L_add: transitions of width sigma^2 / |s_j - s_k|.
        for j in range(len(self.s)):
            for k in range(j + 1, len(self.s)):
                ds = self.s[k] - self.s[j]
                if ds != 0:
                    c = (self.log_w[j] - self.log_w[k] + self.b[k] - self.b[j]) / (self.a[k] - self.a[j])
                    windows.append((c, min(sig, sig * sig / abs(ds))))
        for c in self._stationary_points(beta, [c for c, _ in windows]):
            windows.append((c, self._local_scale(c, beta)))
        edges = []
        spans = []
        for c, h in windows:
            if math.isfinite(c):
                edges.append(np.linspace(c - _WINDOW * h, c + _WINDOW * h, _PANELS_PER_WINDOW + 1))
                spans.append((c - _WINDOW * h, c + _WINDOW * h))
        spans.sort()
        merged = [list(spans[0])]
        for lo, hi in spans[1:]:
            if lo <= merged[-1][1]:
                merged[-1][1] = max(merged[-1][1], hi)
            else:
                merged.append([lo, hi])
        for (_, hi), (lo, _) in zip(merged[:-1], merged[1:]):
            edges.append(np.linspace(hi, lo, _GAP_PANELS + 1))
        e = np.unique(np.concatenate(edges))
        # Drop edges closer than a few ulps to their neighbour (overlapping grids).
        keep = np.concatenate([[True], np.diff(e) > 1e-12 * np.maximum(1.0, np.abs(e[1:]))])
        return e[keep]

    def _sbar(self, x: np.ndarray) -> np.ndarray:
        """sigma^2 L_add'(x): the posterior mean shift, non-decreasing in x."""
        pi = special.softmax(self.log_w + self.a * np.asarray(x, dtype=np.float64)[..., None] - self.b, axis=-1)
        return pi @ self.s

    def _stationary_points(self, beta: float, seeds) -> list:
        """Roots of x = beta * sbar(x): the stationary points of log phi(x) + beta L_add(x)."""
        lo, hi = sorted((beta * self.s.min(), beta * self.s.max()))
        grid = np.unique(np.concatenate([np.linspace(lo - 1.0, hi + 1.0, 2001),
                                         [c for c in seeds if lo - 1.0 <= c <= hi + 1.0]]))

        def h(x):
            return x - beta * self._sbar(x)

        values = h(grid)
        roots = []
        for i in np.nonzero(np.sign(values[:-1]) != np.sign(values[1:]))[0]:
            roots.append(optimize.brentq(h, grid[i], grid[i + 1], xtol=1e-12 * max(1.0, abs(grid[i]))))
        return roots

    def _local_scale(self, x: float, beta: float) -> float:
        """1 / sqrt(-f''(x)) for f = log phi + beta L_add where f is concave there, capped at sigma."""
        pi = special.softmax(self.log_w + self.a * x - self.b)
        var = float(pi @ self.s**2 - (pi @ self.s) ** 2)  # sigma^4 L_add''(x)
        curvature = 1.0 / self.sigma**2 - beta * var / self.sigma**4
        return self.sigma if curvature <= 1.0 / self.sigma**2 else min(self.sigma, 1.0 / math.sqrt(curvature))


def _log_g(sign: np.ndarray, log_abs_y: np.ndarray, u: np.ndarray, beta: float) -> np.ndarray:
    """log g(y), g(y) = (1 + y)^beta - 1 - beta y >= 0, for beta >= 1 or beta <= 0 (y in sign/log form)."""
    with np.errstate(divide="ignore", invalid="ignore", over="ignore", under="ignore"):
        abs_y = np.exp(log_abs_y)
        small = abs_y <= 0.5 / (abs(beta) + 1.0)
        # Series: g = y^2 sum_j C(beta, j + 2) y^j; |C(beta, j+1) / C(beta, j)| |y| <= 1/2 here.
        ys = np.where(small, sign * abs_y, 0.0)
        series = log_binomial_series_remainder(ys, log_abs_y, beta, _SERIES_TERMS)

        # Direct: g = A - B with both parts positive and A >= B; log g = log A + log1mexp(log B - log A).
        pos = sign > 0
        ud = np.where(small, 1.0, u)  # keeps the unused branch finite
        if beta >= 1.0:
            gamma = beta - 1.0  # g = (1 + y) expm1(gamma u) - gamma y
            log_gy = math.log(gamma) + log_abs_y
            log_expm1_pos = log_expm1(np.maximum(gamma * ud, 0.0)) + np.maximum(ud, 0.0)
            log_1mexp_neg = log1mexp(np.minimum(gamma * ud, 0.0)) + np.minimum(ud, 0.0)
            log_big = np.where(pos, log_expm1_pos, log_gy)
            log_small = np.where(pos, log_gy, log_1mexp_neg)
        else:
            nb = -beta  # g = expm1(beta u) - beta y = |beta| y - (1 - e^{beta u}) (y > 0) or expm1(|beta||u|) - |beta||y|
            log_by = math.log(nb) + log_abs_y
            log_big = np.where(pos, log_by, log_expm1(np.maximum(beta * ud, 0.0)))
            log_small = np.where(pos, log1mexp(np.minimum(beta * ud, 0.0)), log_by)
        direct = log_big + log1mexp(np.minimum(log_small - log_big, 0.0))
        out = np.where(small, series, direct)
    return np.where(sign == 0, -np.inf, out)
