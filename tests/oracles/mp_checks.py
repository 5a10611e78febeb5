"""Input checks and precision settings shared by the mpmath oracles (``references``, ``poisson_reference``)."""

from __future__ import annotations

import mpmath

DEFAULT_DPS = 60
GUARD_DPS = 15  # working digits beyond `dps`, absorbing rounding in sums and quadrature


def mp_real(value, name: str) -> mpmath.mpf:
    """Converts an int/float/mpf (exactly) or a decimal string to mpf, rejecting NaN."""
    if isinstance(value, bool):
        raise ValueError(f"{name} must be a real number, got {value!r}")
    try:
        if isinstance(value, mpmath.mpf):
            x = value  # keep every digit the caller computed
        else:
            with mpmath.workdps(100):  # exact for int/float, 100 digits for a string
                x = mpmath.mpf(value)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{name} must be a real number, got {value!r}") from exc
    if mpmath.isnan(x):
        raise ValueError(f"{name} must be a real number, got NaN")
    return x


def mp_rate(value) -> mpmath.mpf:
    q = mp_real(value, "rate")
    if not 0 <= q <= 1:
        raise ValueError(f"rate must be in [0, 1], got {value!r}")
    return q


def mp_order(value, minimum_exclusive: float = 1.0) -> mpmath.mpf:
    a = mp_real(value, "order")
    if not (a > minimum_exclusive and mpmath.isfinite(a)):
        raise ValueError(f"order must be finite and > {minimum_exclusive}, got {value!r}")
    return a


def mp_positive(value, name: str) -> mpmath.mpf:
    x = mp_real(value, name)
    if not (x > 0 and mpmath.isfinite(x)):
        raise ValueError(f"{name} must be finite and > 0, got {value!r}")
    return x


def check_dps(dps: int) -> None:
    if int(dps) != dps or dps < 60:
        raise ValueError(f"dps must be an integer >= 60, got {dps!r}")


def is_integer(a: mpmath.mpf) -> bool:
    return a == mpmath.floor(a)
