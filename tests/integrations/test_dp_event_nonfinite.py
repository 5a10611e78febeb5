"""dp-accounting events carrying non-finite or non-positive numbers are refused by the conversion, the field
named (issue 28, class 5). Infinite noise and rate or count 0 are valid there (they release nothing)."""

from __future__ import annotations

import math

import pytest

from metadp.integrations.dp_accounting import from_dp_event

dp = pytest.importorskip("dp_accounting")

BAD = [math.nan, math.inf, -math.inf, 0.0, -1.0]
ENTRIES = [
    ("GaussianDpEvent", "noise_multiplier", lambda v: dp.GaussianDpEvent(v), {math.inf}),
    ("LaplaceDpEvent", "noise_multiplier", lambda v: dp.LaplaceDpEvent(v), {math.inf}),
    ("PoissonSampledDpEvent", "sampling_probability",
     lambda v: dp.PoissonSampledDpEvent(v, dp.GaussianDpEvent(1.0)), {0.0}),
    ("SelfComposedDpEvent", "count", lambda v: dp.SelfComposedDpEvent(dp.GaussianDpEvent(1.0), v), {0.0}),
]


@pytest.mark.parametrize("make, name, value", [
    pytest.param(make, name, value, id=f"{cls}-{value}") for cls, name, make, valid in ENTRIES
    for value in BAD if value not in valid])
def test_conversion_refuses_and_names_the_field(make, name, value):
    with pytest.raises(ValueError, match=name):
        from_dp_event(make(value))
    with pytest.raises(ValueError, match=name):  # the named-tuple form (what JSON files are read into)
        from_dp_event(make(value).to_named_tuple())

