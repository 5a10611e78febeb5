"""Type aliases shared by the package (annotations only: nothing here runs at import but the aliases)."""

from __future__ import annotations

from typing import Union

import numpy as np
from numpy.typing import NDArray

__all__ = ["FloatArray", "FloatOrArray"]

FloatArray = NDArray[np.float64]
"""An array of float64 (any shape)."""

FloatOrArray = Union[float, FloatArray]
"""A float for scalar input, an array of float64 for array input (the log-space kit's results)."""
