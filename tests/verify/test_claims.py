"""The claim an audit tests (metadp.verify.claims): the tightest accountant that reads a step, and its
profile as an elementwise function of epsilon."""

from __future__ import annotations

import math

import numpy as np
import pytest

from metadp.core import events as ev
from metadp.verify.claims import accountant_profile, tightest_accountant


def test_pld_first_then_rdp_then_a_value_error_naming_the_event():
    assert tightest_accountant(ev.PoissonSampled(0.1, ev.Gaussian(1.0)), 2, relation="add_remove").name == "pld"
    # PLD pairs fixed-size sampling (metadp.mechanisms.wor), but has no group pair for it: RDP (Mironov's
    # group rule) is the one that reads a group of fixed-size steps
    assert tightest_accountant(ev.FixedSizeSampled(4, 40, ev.Gaussian(1.0)), 2, relation="substitute").name == "pld"
    group = ev.Group(2, ev.FixedSizeSampled(4, 40, ev.Gaussian(1.0)))
    assert tightest_accountant(group, 2, relation="substitute").name == "rdp"
    with pytest.raises(ValueError, match="no accountant can analyse fixed-size sampling"):
        tightest_accountant(ev.FixedSizeSampled(4, 40, ev.Gaussian(1.0)), 2, relation="add_remove")
    with pytest.raises(ValueError, match="steps"):
        tightest_accountant(ev.Gaussian(1.0), 0, relation="add_remove")


def test_profile_is_elementwise_and_matches_the_closed_form():
    # Laplace(b = 1) under add/remove: delta(eps) = 1 - e^{(eps - 1)/2} for eps < 1, 0 from eps = 1 on.
    profile = accountant_profile(tightest_accountant(ev.Laplace(1.0), 1, relation="add_remove"))
    eps = np.array([0.0, 0.5, 2.0])
    got = profile(eps)
    assert got.shape == (3,) and profile(0.5).shape == (1,)
    expected = [-math.expm1(-0.5), -math.expm1(-0.25), 0.0]
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-12)  # the PLD grid: ~2e-5 pessimistic
    assert np.all(got >= np.array(expected) - 1e-15)  # an upper bound never below the exact value
