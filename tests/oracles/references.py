"""High-precision mpmath references for the RDP formulas that metadp computes fast.

These functions are oracles: slow, simple, and written so that each result can be
trusted to many more digits than a float64 carries. The fast code in
`metadp.core.rdp` is tested against them (`tests/core/test_rdp_oracle.py`)
and they are tested against each other (`tests/oracles/test_references.py`).

Conventions:
  * Every function works inside a local `mpmath.workdps(dps + guard)` context and
    never touches the global `mpmath.mp.dps`; `dps` (default 60) is the number of
    decimal digits the caller may rely on, the guard digits absorb rounding.
  * Results are `mpmath.mpf`. Inputs may be int, float or mpf; a float input is
    taken as the exact binary number it is.
  * Noise multiplier z = sigma / sensitivity; the neighbouring relation is stated
    in each docstring.
  * Invalid input raises ValueError naming the parameter, its value and the range.

The Poisson-subsampled Gaussian's references live in `oracles.poisson_reference` (re-exported
here); the input checks in `oracles.mp_checks`.
"""

from __future__ import annotations

import mpmath

from oracles.stored import stored
from oracles.mp_checks import DEFAULT_DPS, GUARD_DPS, check_dps, mp_order, mp_positive, mp_rate, mp_real
from oracles.poisson_reference import ref_poisson_gaussian_log_a, ref_poisson_gaussian_rdp

__all__ = [
    "DEFAULT_DPS",
    "ref_gaussian_rdp",
    "ref_laplace_rdp",
    "ref_poisson_gaussian_log_a",
    "ref_poisson_gaussian_rdp",
    "ref_wor_gaussian_rdp",
    "ref_wor27_gaussian_rdp",
    "ref_rdp_to_epsilon",
    "ref_rdp_to_epsilon_classic",
    "ref_rdp_to_delta",
]


# --------------------------------------------------------------------------- Gaussian


def ref_gaussian_rdp(noise_multiplier, order, *, dps: int = DEFAULT_DPS) -> mpmath.mpf:
    """RDP of the Gaussian mechanism, eps(alpha) = alpha / (2 z^2).

    D_alpha(N(1, z^2) || N(0, z^2)) = alpha / (2 z^2) for sensitivity 1 (either
    relation, whatever the sensitivity is relative to).
    Mironov 2017, "Renyi Differential Privacy" (arXiv:1702.07476), Prop. 7.

    Args:
      noise_multiplier: z = sigma / sensitivity, > 0.
      order: alpha > 1.
      dps: decimal digits of the result (>= 60).

    Returns:
      alpha / (2 z^2) as mpf.

    Raises:
      ValueError: z <= 0, alpha <= 1, or dps < 60.
    """
    check_dps(dps)
    z = mp_positive(noise_multiplier, "noise_multiplier")
    a = mp_order(order)
    with mpmath.workdps(dps + GUARD_DPS):
        return a / (2 * z * z)


# --------------------------------------------------------------------------- Laplace


@stored
def ref_laplace_rdp(scale, order, *, dps: int = DEFAULT_DPS) -> mpmath.mpf:
    """RDP of the Laplace mechanism with scale b and sensitivity 1.

    D_alpha(Lap(0, b) || Lap(1, b)) =
        1/(alpha-1) * log( alpha/(2 alpha - 1) * exp((alpha-1)/b)
                           + (alpha-1)/(2 alpha - 1) * exp(-alpha/b) ),  alpha > 1.
    Mironov 2017 (arXiv:1702.07476), Prop. 6 (Table II). The divergence is symmetric
    in the two distributions, so this is also the RDP under either relation when
    the query's l1 sensitivity is 1 relative to b.

    Args:
      scale: Laplace scale b > 0 (relative to the sensitivity).
      order: alpha > 1.
      dps: decimal digits of the result (>= 60).

    Returns:
      The RDP epsilon as mpf.

    Raises:
      ValueError: b <= 0, alpha <= 1, or dps < 60.
    """
    check_dps(dps)
    b = mp_positive(scale, "scale")
    a = mp_order(order)
    with mpmath.workdps(dps + GUARD_DPS):
        first = a / (2 * a - 1) * mpmath.exp((a - 1) / b)
        second = (a - 1) / (2 * a - 1) * mpmath.exp(-a / b)
        return mpmath.log(first + second) / (a - 1)


# --------------------------------------------------------------------------- sampling without replacement


def _wor_cgf_integer(gamma, z, n: int) -> mpmath.mpf:
    """(n - 1) eps'(n) for integer n >= 2: the log of WBK19 Thm 9's bracket."""
    eps2 = 1 / (z * z)  # eps(2) = 2 / (2 z^2)
    total = 1 + gamma**2 * mpmath.binomial(n, 2) * min(4 * mpmath.expm1(eps2), 2 * mpmath.exp(eps2))
    binom = mpmath.binomial(n, 2)
    for j in range(3, n + 1):
        binom = binom * (n - j + 1) / j  # C(n, j)
        # e^{(j-1) eps(j)} with eps(j) = j / (2 z^2)
        total += gamma**j * binom * 2 * mpmath.exp(mpmath.mpf(j * (j - 1)) / (2 * z * z))
    return mpmath.log(total)


@stored
def ref_wor_gaussian_rdp(rate, noise_multiplier, order, *, dps: int = DEFAULT_DPS) -> mpmath.mpf:
    """RDP upper bound for a Gaussian run on a subsample drawn without replacement.

    Wang, Balle & Kasiviswanathan 2019, "Subsampled Renyi Differential Privacy and
    Analytical Moments Accountant" (arXiv:1808.00087), Theorem 9: for a subsample of
    m of n records (gamma = m/n), under the substitution ("replace-one") relation,
    for integer alpha >= 2,

        eps'(alpha) <= 1/(alpha-1) log( 1 + gamma^2 C(alpha,2)
                         min{ 4 (e^{eps(2)} - 1), e^{eps(2)} min{2, (e^{eps(inf)} - 1)^2} }
                       + sum_{j=3}^{alpha} gamma^j C(alpha,j) e^{(j-1) eps(j)}
                         min{2, (e^{eps(inf)} - 1)^j} ).

    Implemented form: the base is a Gaussian with eps(j) = j / (2 z^2), z relative to
    the *substitution* sensitivity (the caller doubles a clipped sum's C), and
    eps(inf) = inf, so both inner minima equal 2:

        eps'(alpha) = 1/(alpha-1) log( 1 + gamma^2 C(alpha,2) min{4 (e^{1/z^2} - 1), 2 e^{1/z^2}}
                       + sum_{j=3}^{alpha} gamma^j C(alpha,j) 2 e^{j (j-1)/(2 z^2)} ).

    The theorem text itself could not be retrieved while writing this; the form
    above is the published statement as recalled, and it agrees term by term with
    dp-accounting's `_compute_rdp_sample_wor_gaussian_int` for alpha > 256 (where that
    code uses this bound rather than the tighter Thm 27); the tests check this.

    Fractional alpha >= 2: (alpha-1) eps'(alpha) is linearly interpolated between
    floor(alpha) and ceil(alpha) (valid because the cumulant generating function is
    convex; WBK19 Cor. 10). 1 < alpha < 2: eps'(2), since RDP is non-decreasing in
    the order. gamma = 0 gives 0; gamma = 1 (no subsampling) gives the Gaussian's
    own alpha / (2 z^2), which is exact and below the theorem's bound.

    Args:
      rate: gamma = m / n in [0, 1].
      noise_multiplier: z = sigma / (substitution sensitivity) > 0.
      order: alpha > 1.
      dps: decimal digits of the result (>= 60).

    Returns:
      The RDP upper bound as mpf.
    """
    return _wor_rdp(rate, noise_multiplier, order, dps, _wor_cgf_integer)


def _wor_rdp(rate, noise_multiplier, order, dps: int, cgf_integer) -> mpmath.mpf:
    """The RDP bound at any order > 1 from the integer-order cumulants ``cgf_integer(gamma, z, n)`` =
    (n - 1) eps(n): at a fractional order the cumulant interpolated linearly between its integer
    neighbours (it is convex in the order, so the chord is above it), below 2 the order-2 value."""
    check_dps(dps)
    gamma = mp_rate(rate)
    z = mp_positive(noise_multiplier, "noise_multiplier")
    a = mp_order(order)
    with mpmath.workdps(dps + GUARD_DPS):
        if gamma == 0:
            return mpmath.mpf(0)
        if gamma == 1:
            return a / (2 * z * z)
        if a < 2:
            return cgf_integer(gamma, z, 2)
        lo = int(mpmath.floor(a))
        if lo == a:
            return cgf_integer(gamma, z, lo) / (a - 1)
        t = a - lo
        cgf = (1 - t) * cgf_integer(gamma, z, lo) + t * cgf_integer(gamma, z, lo + 1)
        return cgf / (a - 1)


def _pv_moments(z: mpmath.mpf, top: int = 256) -> dict:
    """E_Q[(L - 1)^n] of the Gaussian pair N(1, z^2) vs N(0, z^2) for even n <= top, summed from
    E_Q[L^i] = exp(i (i - 1) / (2 z^2)) at enough digits for the alternating sum's cancellation."""
    key = (str(z), top)
    if key not in _PV_CACHE:
        digits = 60 + int(top * (0.31 + max(0.0, float(mpmath.log10(z)))))
        with mpmath.workdps(digits):
            c = 1 / (2 * mpmath.mpf(z) ** 2)
            powers = [mpmath.exp(c * i * (i - 1)) for i in range(top + 1)]
            _PV_CACHE[key] = {n: +mpmath.fsum(mpmath.binomial(n, i) * (-1) ** (n - i) * powers[i] for i in range(n + 1))
                              for n in range(0, top + 1, 2)}
    return _PV_CACHE[key]


_PV_CACHE: dict = {}


def _wor27_cgf_integer(gamma, z, n: int) -> mpmath.mpf:
    """(n - 1) eps'(n) of WBK19 Thm 27 as metadp applies it: term j's bound is min{4 sqrt(D_{2 floor(j/2)}
    D_{2 ceil(j/2)}), 2 e^{(j-1) eps(j)}} for j <= 256 when 0.3 <= z <= 1e3, Thm 9's 2 e^{(j-1) eps(j)} else."""
    eps2 = 1 / (z * z)
    total = 1 + gamma**2 * mpmath.binomial(n, 2) * min(4 * mpmath.expm1(eps2), 2 * mpmath.exp(eps2))
    moments = _pv_moments(z) if mpmath.mpf("0.3") <= z <= 1000 else None
    binom = mpmath.binomial(n, 2)
    for j in range(3, n + 1):
        binom = binom * (n - j + 1) / j
        term = 2 * mpmath.exp(mpmath.mpf(j * (j - 1)) / (2 * z * z))
        if moments is not None and j <= 256:
            term = min(term, 4 * mpmath.sqrt(moments[2 * (j // 2)] * moments[2 * ((j + 1) // 2)]))
        total += gamma**j * binom * term
    return mpmath.log(total)


def ref_wor27_gaussian_rdp(rate, noise_multiplier, order, *, dps: int = DEFAULT_DPS) -> mpmath.mpf:
    """As ``ref_wor_gaussian_rdp`` with Wang, Balle & Kasiviswanathan 2019 (arXiv:1808.00087) Thm 27's
    terms (the Gaussian's Pearson-Vajda moments D_n = E_Q[(L-1)^n]) where metadp uses them."""
    return _wor_rdp(rate, noise_multiplier, order, dps, _wor27_cgf_integer)


# --------------------------------------------------------------------------- conversions


def _rdp_point(rdp_value, order, dps: int):
    """(rdp, alpha) as mpf after the checks every conversion shares: dps >= 60, rdp >= 0, alpha > 1."""
    check_dps(dps)
    r = mp_real(rdp_value, "rdp_value")
    if r < 0:
        raise ValueError(f"rdp_value must be >= 0, got {rdp_value!r}")
    return r, mp_order(order)


def ref_rdp_to_epsilon(rdp_value, order, delta, *, dps: int = DEFAULT_DPS) -> mpmath.mpf:
    """(eps, delta)-DP from one RDP point, the improved conversion.

    eps = max(0, rdp + log((alpha-1)/alpha) - (log delta + log alpha)/(alpha-1)).
    Canonne, Kamath & Steinke 2020 (arXiv:2004.00010), Prop. 12; Asoodeh, Liao,
    Calmon, Kosut & Sankar 2021 (arXiv:2001.05990).

    Args:
      rdp_value: RDP epsilon at `order`, >= 0 (may be +inf).
      order: alpha > 1.
      delta: target delta in (0, 1).
      dps: decimal digits of the result (>= 60).

    Returns:
      eps as mpf (inf if rdp_value is inf).
    """
    r, a = _rdp_point(rdp_value, order, dps)
    d = mp_real(delta, "delta")
    if not 0 < d < 1:
        raise ValueError(f"delta must be in (0, 1), got {delta!r}")
    with mpmath.workdps(dps + GUARD_DPS):
        if mpmath.isinf(r):
            return mpmath.inf
        eps = r + mpmath.log((a - 1) / a) - (mpmath.log(d) + mpmath.log(a)) / (a - 1)
        return max(eps, mpmath.mpf(0))


def ref_rdp_to_epsilon_classic(rdp_value, order, delta, *, dps: int = DEFAULT_DPS) -> mpmath.mpf:
    """(eps, delta)-DP from one RDP point, the classic conversion.

    eps = rdp + log(1/delta) / (alpha - 1). Mironov 2017 (arXiv:1702.07476), Prop. 3.

    Args:
      rdp_value: RDP epsilon at `order`, >= 0 (may be +inf).
      order: alpha > 1.
      delta: target delta in (0, 1).
      dps: decimal digits of the result (>= 60).

    Returns:
      eps as mpf.
    """
    r, a = _rdp_point(rdp_value, order, dps)
    d = mp_real(delta, "delta")
    if not 0 < d < 1:
        raise ValueError(f"delta must be in (0, 1), got {delta!r}")
    with mpmath.workdps(dps + GUARD_DPS):
        return r + mpmath.log(1 / d) / (a - 1)


def ref_rdp_to_delta(rdp_value, order, epsilon, *, dps: int = DEFAULT_DPS) -> mpmath.mpf:
    """delta at a given eps from one RDP point: the inverse of `ref_rdp_to_epsilon`.

    delta = min(1, exp((alpha-1)(rdp - eps) + (alpha-1) log(1 - 1/alpha) - log alpha)).
    Canonne, Kamath & Steinke 2020 (arXiv:2004.00010), Prop. 12, solved for delta.

    Args:
      rdp_value: RDP epsilon at `order`, >= 0.
      order: alpha > 1.
      epsilon: target eps >= 0.
      dps: decimal digits of the result (>= 60).

    Returns:
      delta as mpf in [0, 1].
    """
    r, a = _rdp_point(rdp_value, order, dps)
    e = mp_real(epsilon, "epsilon")
    if e < 0:
        raise ValueError(f"epsilon must be >= 0, got {epsilon!r}")
    with mpmath.workdps(dps + GUARD_DPS):
        if mpmath.isinf(r):
            return mpmath.mpf(1)
        log_delta = (a - 1) * (r - e) + (a - 1) * mpmath.log1p(-1 / a) - mpmath.log(a)
        return min(mpmath.mpf(1), mpmath.exp(log_delta))
