"""Adaptive Gauss-Kronrod (7-15) quadrature of a log-space integrand, vectorised over panels.

Used for integrals whose integrand spans hundreds of orders of magnitude (RDP moment integrals):
the integrand is given by its logarithm, each panel keeps its own scale, and panels whose
Kronrod-minus-Gauss error estimate exceeds ``rtol`` times the running total are bisected until
none does. Accuracy is tested against mpmath quadrature in ``tests/accounting/test_rdp_oracle.py``.
"""

from __future__ import annotations

from typing import Callable

import numpy as np
from numpy.typing import ArrayLike
from scipy import special

from metadp.core._typing import FloatArray

LogIntegrand = Callable[[FloatArray], FloatArray]
"""log f(z), vectorised over an array of points z."""

# Kronrod 15-point nodes on [-1, 1] (abscissae of K15; the odd-indexed ones are the G7 nodes).
_XK = np.array([
    0.991455371120812639206854697526329, 0.949107912342758524526189684047851,
    0.864864423359769072789712788640926, 0.741531185599394439863864773280788,
    0.586087235467691130294144845693013, 0.405845151377397166906606412076961,
    0.207784955007898467600689403773245, 0.000000000000000000000000000000000,
])
_WK = np.array([
    0.022935322010529224963732008058970, 0.063092092629978553290700663189204,
    0.104790010322250183839876322541518, 0.140653259715525918745189590510238,
    0.169004726639267902826583426598550, 0.190350578064785409913256402421014,
    0.204432940075298892414161999234649, 0.209482141084727828012999174891714,
])
_WG = np.array([
    0.129484966168869693270611432679082, 0.279705391489276667901467771423780,
    0.381830050505118944950369775488975, 0.417959183673469387755102040816327,
])
_NODES = np.concatenate([-_XK[:-1], [0.0], _XK[:-1][::-1]])  # 15 nodes, ascending
_W15 = np.concatenate([_WK[:-1], [_WK[-1]], _WK[:-1][::-1]])
_W7 = np.zeros(15)
_W7[[1, 3, 5, 7, 9, 11, 13]] = np.concatenate([_WG[:3], [_WG[3]], _WG[:3][::-1]])


def _panel_estimates(log_f: LogIntegrand, a: FloatArray, b: FloatArray) -> tuple[FloatArray, FloatArray]:
    """Log of the K15 estimate and of its error estimate for each panel [a_i, b_i].

    The error estimate is QUADPACK's (Piessens et al. 1983, QK15): |K15 - G7| scaled by
    min(1, (200 |K15 - G7| / |K15|)^1.5); an estimate below the round-off level
    50 eps max(1, |log f|) |K15| is reported as -inf (converged: splitting cannot improve it).
    """
    half = 0.5 * (b - a)
    mid = 0.5 * (a + b)
    z = mid[:, None] + half[:, None] * _NODES[None, :]  # (panels, 15)
    lf = log_f(z)
    scale = np.max(lf, axis=1, keepdims=True)
    scale = np.where(np.isfinite(scale), scale, 0.0)
    f = np.exp(lf - scale)
    k15 = f @ _W15
    g7 = f @ _W7
    with np.errstate(divide="ignore", invalid="ignore"):
        raw = np.abs(k15 - g7)
        ratio = np.where(k15 > 0, 200.0 * raw / k15, 1.0)
        # log f carries absolute rounding error ~eps |log f|, i.e. relative error eps |log f| in f.
        floor = 50.0 * np.finfo(float).eps * np.maximum(1.0, np.abs(scale[:, 0])) * k15
        err = raw * np.minimum(1.0, ratio ** 1.5)
        log_half = np.log(half)
        log_k = np.log(k15) + log_half + scale[:, 0]
        # A panel at its round-off floor cannot be improved by splitting: report it as converged.
        log_err = np.where(err <= floor, -np.inf, np.log(err) + log_half + scale[:, 0])
    return log_k, log_err


def integrate_log(log_f: LogIntegrand, edges: ArrayLike, *, rtol: float = 1e-15,
                  max_panels: int = 200_000) -> float:
    """log of the integral of exp(log_f) over [edges[0], edges[-1]].

    Args:
        log_f: vectorised function returning log f(z) (may be -inf) for an array of points.
        edges: increasing panel boundaries; place them so every peak of f is resolved initially.
        rtol: a panel is accepted when its error estimate is below rtol times the running total
            (so the total relative error is at most rtol times the number of panels).
        max_panels: refinement budget.

    Returns:
        log of the integral (-inf if f vanishes).

    Raises:
        ArithmeticError: if the error target is not met within max_panels (never silently wrong).
    """
    edge_array = np.asarray(edges, dtype=np.float64)
    a, b = edge_array[:-1], edge_array[1:]
    accepted: list[FloatArray] = []
    n_panels = len(a)
    while True:
        log_k, log_err = _panel_estimates(log_f, a, b)
        log_total = special.logsumexp(np.concatenate([log_k] + accepted))
        if not np.isfinite(log_total):
            return float(log_total)
        bad = log_err > np.log(rtol) + log_total
        accepted.append(log_k[~bad])
        if not np.any(bad):
            return float(special.logsumexp(np.concatenate(accepted)))
        n_panels += int(np.sum(bad))
        if n_panels > max_panels:
            raise ArithmeticError("adaptive quadrature did not reach its error target; report this case")
        mid = 0.5 * (a[bad] + b[bad])
        a, b = np.concatenate([a[bad], mid]), np.concatenate([mid, b[bad]])
