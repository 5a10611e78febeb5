"""Poisson-subsampled Gaussian at noise 1e-6 (issue 28, class 7a): what metadp prints, against the exact value.

``metadp epsilon --sampling poisson --rate 0.01 --noise 1e-6 --steps 1000 --delta 1e-5`` printed the PLD
interval [1.295e13, 1.302e13] on 2026-11-25 (faa6485) and prints the RDP bound 5.001e14 since 4a94c8b
(2026-11-26, proven round-off bounds): its lattice charges each cell with only an absolute mass bound
(the non-sampled component's flat loss near log(1 - q): 0.99 of the mass, relative bound 2.8e-6) to the
infinity atom, so the PLD bound is infinite and the RDP one is reported. Both numbers are upper bounds; the
old one is 38x tighter. Since bfdea33 the PLD accountant falls back to a revealed-count bound
(``metadp.accounting._revealed_count``) when its lattice interval is wide, which restores the tight number.

Reference (exact to far below the printed digits): at noise z << 1 a step's loss is log(1 - q) unless the
record is sampled (K ~ Bin(T, q) steps), then log q + 1/(2 z^2) + N(0, 1/z^2) (the neglected terms are
e^(-5e11) relative), so delta(eps) = sum_k Bin(k; T, q) E[(1 - e^(eps - L_k))_+] with L_k Gaussian, in
closed form; bisected with mpmath at 60 digits (200 halvings) and, independently, with scipy in log space
(brentq): both give epsilon(1e-5) = 1.30000007407947e13 (q = 0.01, T = 1000) and 3.99999238963289e12
(q = 0.001). (An earlier version of this file said 1.30000007448e13 and 3.99999239107e12, about 3e-10
too high; metadp's upper bound 1.30000007418e13 sat between, which this test then read as a violation.) The remove direction's loss is at most -T log(1 - q) = 10.05.
"""

from __future__ import annotations

import pytest

from metadp.accounting import Gaussian, PldAccountant, PoissonSampled, RdpAccountant, SelfComposed

EXACT = {0.01: 1.30000007407947e13, 0.001: 3.99999238963289e12}  # mpmath, see the module docstring
RDP_FACTOR = {0.01: 40.0, 0.001: 130.0}  # measured 38.47 and 125.0: RDP's orders near 1 cannot see q here


def _plan(q):
    return SelfComposed(PoissonSampled(q, Gaussian(1e-6)), 1000)


@pytest.mark.parametrize("q", sorted(EXACT))
def test_rdp_bound_at_noise_1e6_is_an_upper_bound_within_its_stated_factor(q):
    eps = RdpAccountant().compose(_plan(q)).get_epsilon(1e-5)
    assert EXACT[q] <= eps <= RDP_FACTOR[q] * EXACT[q]


@pytest.mark.slow
@pytest.mark.parametrize("q", sorted(EXACT))
def test_pld_bound_at_noise_1e6_is_an_upper_bound(q):
    result = PldAccountant().compose(_plan(q)).get_epsilon_bounds(1e-5)
    assert result.epsilon_lower <= EXACT[q] <= result.epsilon_upper


@pytest.mark.slow
@pytest.mark.parametrize("q", sorted(EXACT))
def test_pld_bound_at_noise_1e6_is_tight_again(q):
    # faa6485 printed [1.295e13, 1.302e13] at q = 0.01; 4a94c8b..a738283 printed RDP's 5.001e14
    result = PldAccountant().compose(_plan(q)).get_epsilon_bounds(1e-5)
    assert result.epsilon_upper <= 1.001 * EXACT[q]
