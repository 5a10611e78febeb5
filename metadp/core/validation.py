"""Input checks for the public boundary: each raises ValueError naming the parameter, the value and
the allowed range, so a caller (or the CLI, which prints the message on one line) sees what to fix."""

from __future__ import annotations

import math
import numbers
from typing import Any, Mapping, Optional, TypeVar

_V = TypeVar("_V")

__all__ = [
    "lookup",
    "check_real",
    "check_probability",
    "check_positive",
    "check_delta",
    "check_count",
    "check_order",
]


def check_real(name: str, value: object, *, low: float = -math.inf, high: float = math.inf,
               low_open: bool = False, high_open: bool = False, allow_inf: bool = False) -> float:
    """Returns value as a float if it is a real number in the given interval, else raises ValueError."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ValueError(f"{name} must be a real number, got {value!r}")
    x = float(value)
    left = "(" if low_open or math.isinf(low) else "["
    right = ")" if high_open or math.isinf(high) else "]"
    allowed = f"{left}{low:g}, {high:g}{right}"
    if math.isnan(x):
        raise ValueError(f"{name} must be in {allowed}, got nan")
    if math.isinf(x) and not allow_inf:
        raise ValueError(f"{name} must be finite and in {allowed}, got {x}")
    if x < low or x > high or (low_open and x == low) or (high_open and x == high):
        raise ValueError(f"{name} must be in {allowed}, got {value!r}")
    return x


def check_probability(name: str, value: object) -> float:
    """A probability in [0, 1] (sampling rates)."""
    return check_real(name, value, low=0.0, high=1.0)


def check_positive(name: str, value: object, *, allow_inf: bool = False) -> float:
    """A real number > 0 (noise multipliers, scales)."""
    return check_real(name, value, low=0.0, low_open=True, allow_inf=allow_inf)


def check_delta(name: str, value: object) -> float:
    """A delta strictly inside (0, 1)."""
    return check_real(name, value, low=0.0, high=1.0, low_open=True, high_open=True)


def check_count(name: str, value: object, *, minimum: int = 0, maximum: Optional[int] = None) -> int:
    """A whole number >= minimum (steps, batch sizes), and <= maximum if given; integral floats such as
    250.0 are accepted."""
    allowed = f">= {minimum}" if maximum is None else f">= {minimum} and <= {maximum}"
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ValueError(f"{name} must be an integer {allowed}, got {value!r}")
    if isinstance(value, numbers.Integral):
        n = int(value)
    else:
        x = float(value)
        if not math.isfinite(x) or x != math.floor(x):
            raise ValueError(f"{name} must be an integer {allowed}, got {value!r}")
        n = int(x)
    if n < minimum or (maximum is not None and n > maximum):
        raise ValueError(f"{name} must be an integer {allowed}, got {_short(value)}")
    return n


def lookup(name: str, value: object, table: Mapping[Any, _V]) -> _V:
    """``table[value]``, or ValueError "<name> must be one of <keys>, got <value>" (an unknown or unhashable
    value): the registries' one lookup."""
    try:
        return table[value]
    except (KeyError, TypeError):
        raise ValueError(f"{name} must be one of {', '.join(map(str, table))}, got {value!r}") from None


def _short(value: numbers.Real) -> str:
    """repr(value), with a whole number of more than 16 digits in scientific notation (1e+400 fits)."""
    digits = str(abs(value)) if isinstance(value, numbers.Integral) else ""
    if len(digits) <= 16:
        return repr(value)
    return f"{'-' if value < 0 else ''}{digits[0]}.{digits[1:4]}e+{len(digits) - 1}"


def check_order(name: str, value: object) -> float:
    """A Renyi order alpha > 1 (may be +inf)."""
    return check_real(name, value, low=1.0, low_open=True, allow_inf=True)
