"""Pearson-Vajda moments of the Gaussian mechanism, for the RDP bound of sampling without replacement.

For the Gaussian pair P = N(1, z^2), Q = N(0, z^2) with likelihood ratio L = dP/dQ, E_Q[L^i] =
exp(i (i - 1) / (2 z^2)) (the RDP curve eps(i) = i / (2 z^2) is attained), and the central moments

    D_n = E_Q[(L - 1)^n] = sum_{i=0}^{n} C(n, i) (-1)^{n-i} exp(i (i - 1) / (2 z^2))

are the Pearson-Vajda |chi|^n divergences (n even) that Wang, Balle & Kasiviswanathan 2019
(arXiv:1808.00087), Thm 27, put in place of the generic 2 e^{(j-1) eps(j)} of their Thm 9. The
alternating sum cancels almost entirely when z is large (terms about 2^n, value about (n-1)!! / z^n),
so D_n is computed instead as an integral of a non-negative function (n even): with Y = log L ~
N(-c, 2c) under Q, c = 1 / (2 z^2),

    D_n = E[(e^Y - 1)^n] = integral of exp(n log|expm1(y)| + log phi_{-c, 2c}(y)) dy,

by composite 16-point Gauss-Legendre in log space on panels half of Y's standard deviation wide
over [-c - 40 s, 2 c n_max + 40 s] (s = sqrt(2c); the integrand's peaks lie at y ~ 2 c n and within
sqrt(n) s of -c). Checked against the alternating sum in mpmath at enough digits in
``tests/core/test_rdp_oracle.py`` (via ``ref_wor27_gaussian_rdp``). Each returned log moment carries
a margin of 1e-12 (1 + |log D_n|) upward, well above the quadrature's and the logsumexp's round-off
(measured against 60-digit sums: below 1.1e-12 relative in D_n, 2e-16 |log D_n| in its log).
"""

from __future__ import annotations

import functools
import math

import numpy as np
from scipy import special

__all__ = ["MAX_MOMENT_ORDER", "log_gaussian_central_moments"]

MAX_MOMENT_ORDER = 256  # as dp-accounting's Thm 27 (its orders <= 256); larger orders keep Thm 9's terms
_NODES, _WEIGHTS = np.polynomial.legendre.leggauss(16)
_MARGIN = 1e-12


@functools.lru_cache(maxsize=256)
def log_gaussian_central_moments(noise_multiplier: float, max_order: int = MAX_MOMENT_ORDER) -> np.ndarray:
    """log E_Q[(L - 1)^n] for n = 0..max_order of the Gaussian pair with multiplier z (read-only array).

    Even n are computed; odd entries are nan (the bound uses even moments only).
    """
    z = float(noise_multiplier)
    if not (z > 0.0 and math.isfinite(z)):
        raise ValueError(f"noise_multiplier must be finite and > 0, got {noise_multiplier!r}")
    c = 1.0 / (2.0 * z * z)
    s = math.sqrt(2.0 * c)
    lo, hi = -c - 40.0 * s, 2.0 * c * max_order + 40.0 * s
    width = s / 2.0
    panels = int(math.ceil((hi - lo) / width))
    if panels > 2_000_000:
        raise ValueError(f"noise_multiplier {z:g} needs {panels} quadrature panels (use z >= 0.1)")
    edges = lo + width * np.arange(panels + 1)
    mid, half = 0.5 * (edges[1:] + edges[:-1]), 0.5 * width
    y = (mid[:, None] + half * _NODES[None, :]).ravel()
    log_w = np.log(np.tile(_WEIGHTS * half, panels))
    log_phi = -0.5 * math.log(2.0 * math.pi) - math.log(s) - (y + c) ** 2 / (2.0 * s * s)
    with np.errstate(divide="ignore"):  # log|e^y - 1|: -inf only at y == 0 exactly; y + log(1 - e^-y) above 1
        log_gap = np.where(y > 1.0, y + np.log1p(-np.exp(-np.maximum(y, 1.0))),
                           np.log(np.abs(np.expm1(np.minimum(y, 1.0)))))
    base = log_w + log_phi
    out = np.full(max_order + 1, np.nan)
    out[0] = 0.0
    for n in range(2, max_order + 1, 2):
        value = float(special.logsumexp(base + n * log_gap))
        out[n] = value + _MARGIN * (1.0 + abs(value))
    out.setflags(write=False)
    return out
