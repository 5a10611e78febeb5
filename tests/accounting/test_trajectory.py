"""RdpAccountant.trajectory: the per-step schedule the trainer will stop on."""

import numpy as np
import pytest

from metadp.accounting import Gaussian, PoissonSampled, RdpAccountant


@pytest.mark.parametrize("rate, noise, steps, delta", [
    (0.004, 1.0, 250, 1e-6),        # default DP-MAML plan: the RDP curve is steep near order 10.7
    (256 / 60000, 1.1, 14062, 1e-5),  # DP-SGD
    (0.01, 20.0, 100000, 1e-6),     # very noisy: optimal orders 90..2000
])
def test_trajectory_is_a_tight_valid_schedule(rate, noise, steps, delta):
    step = PoissonSampled(rate, Gaussian(noise))
    acc = RdpAccountant().compose(step, steps)
    trajectory = acc.trajectory(range(1, steps + 1), delta)
    assert np.all(np.diff(trajectory) >= 0)
    assert trajectory[-1] == pytest.approx(acc.get_epsilon(delta), rel=1e-9)
    for k in np.unique(np.geomspace(1, steps, 15).astype(int)):
        fresh = RdpAccountant().compose(step, int(k)).get_epsilon(delta)
        assert fresh * (1 - 1e-12) <= trajectory[k - 1] <= fresh * (1 + 5e-3), k
