"""Non-finite and non-positive numbers stop at metadp's own API boundary, each named (issue 28, class 5).

Every entry point x {nan, inf, -inf, 0, negative}, where the value is invalid there: a ValueError whose
message names the parameter. Values that are valid are listed beside each entry point with the reason
(rate 0 and count 0 release nothing; epsilon 0 asks for delta at 0; infinite noise releases nothing, an
exact degenerate case whose epsilon is 0)."""

from __future__ import annotations

import math

import pytest

from metadp.accounting import Gaussian, Laplace, PldAccountant, PoissonSampled, RdpAccountant, SelfComposed
from metadp.accounting import calibration as cal

NAN, INF = math.nan, math.inf
BAD = [NAN, INF, -INF, 0.0, -1.0]


def _plan(z):
    return SelfComposed(PoissonSampled(0.01, Gaussian(z)), 10)


def _rate_plan(q):
    return SelfComposed(PoissonSampled(q, Gaussian(1.0)), 10)


# (entry point, parameter named in the message, call, values that are valid there)
ENTRIES = [
    ("Gaussian", "noise_multiplier", lambda v: Gaussian(v), {INF}),
    ("Laplace", "scale", lambda v: Laplace(v), {INF}),
    ("PoissonSampled", "rate", lambda v: PoissonSampled(v, Gaussian(1.0)), {0.0}),
    ("SelfComposed", "count", lambda v: SelfComposed(Gaussian(1.0), v), {0.0}),
    ("RdpAccountant.get_epsilon", "delta", lambda v: RdpAccountant().compose(Gaussian(1.0)).get_epsilon(v), set()),
    ("RdpAccountant.get_delta", "epsilon", lambda v: RdpAccountant().compose(Gaussian(1.0)).get_delta(v), {0.0}),
    ("PldAccountant.get_epsilon", "delta", lambda v: PldAccountant().compose(Gaussian(1.0)).get_epsilon(v), set()),
    ("PldAccountant.get_epsilon_bounds", "delta",
     lambda v: PldAccountant().compose(Gaussian(1.0)).get_epsilon_bounds(v), set()),
    ("PldAccountant.get_delta", "epsilon", lambda v: PldAccountant().compose(Gaussian(1.0)).get_delta(v),
     {0.0, INF}),
    ("certified_epsilon", "delta", lambda v: cal.certified_epsilon(Gaussian(1.0), v), set()),
    ("calibrate_noise", "target_epsilon", lambda v: cal.calibrate_noise(_plan, v, 1e-5), set()),
    ("calibrate_noise", "delta", lambda v: cal.calibrate_noise(_plan, 1.0, v), set()),
    ("max_steps", "target_epsilon", lambda v: cal.max_steps(PoissonSampled(0.01, Gaussian(1.0)), v, 1e-5), set()),
    ("max_steps", "delta", lambda v: cal.max_steps(PoissonSampled(0.01, Gaussian(1.0)), 1.0, v), set()),
    ("max_rate", "target_epsilon", lambda v: cal.max_rate(_rate_plan, v, 1e-5), set()),
    ("max_rate", "delta", lambda v: cal.max_rate(_rate_plan, 1.0, v), set()),
]
CASES = [pytest.param(call, name, value, id=f"{where}-{name}-{value}")
         for where, name, call, valid in ENTRIES for value in BAD if value not in valid]


@pytest.mark.parametrize("call, name, value", CASES)
def test_refused_with_the_parameter_named(call, name, value):
    with pytest.raises(ValueError, match=name):
        call(value)


def test_infinite_noise_is_the_exact_degenerate_case():
    # not a refusal: the output does not depend on the data, so epsilon is 0 under both accountants
    assert RdpAccountant().compose(SelfComposed(Gaussian(INF), 10)).get_epsilon(1e-5) == 0.0
    assert PldAccountant().compose(SelfComposed(Gaussian(INF), 10)).get_epsilon(1e-5) == 0.0
