"""Private adaptive clipping: the noisy count of unclipped updates and the noisy sum as one Gaussian.

Andrew, Thakkar, McMahan & Ramaswamy 2021 (arXiv:1905.03871, Sec. 3 and Thm. 1) adapt the clipping
threshold C towards a quantile of the update norms with a private estimate: each sampled unit also
reports b_i = 1[||update_i|| <= C] - 1/2 (sensitivity 1/2 under add/remove), and the server adds
N(0, sigma_b^2) to their sum. Both queries run on the same sample, so their Gaussian privacy losses
add: the step is one Gaussian mechanism with noise multiplier

    z = (z_sum^-2 + (2 sigma_b)^-2)^(-1/2)     (DESIGN.md 3.10).

To keep the accounted multiplier at a planned z, the sum's multiplier must be raised to
z_sum = (z^-2 - (2 sigma_b)^-2)^(-1/2), which needs 2 sigma_b > z. The threshold may only be updated
from the released noisy count (post-processing), after this step's noise used the current one.
Thresholds computed from raw (unnoised) norms, as in dp-maml.txt Alg. 1, are not private and are
not offered here.
"""

from __future__ import annotations

import math
from typing import cast

from metadp.core.validation import check_positive, check_real
from metadp.core import events as ev

__all__ = ["combined_noise_multiplier", "sum_noise_multiplier", "adaptive_clipping_event"]


def combined_noise_multiplier(sum_multiplier: float, count_noise: float) -> float:
    """The single-Gaussian multiplier of the noisy sum (``sum_multiplier``) and the noisy count of
    unclipped updates (noise std ``count_noise`` on a count with sensitivity 1/2) on one sample."""
    z_sum = check_positive("sum_multiplier", sum_multiplier)
    sigma_b = check_positive("count_noise", count_noise)
    # (a^-2 + b^-2)^-1/2 = m (1 + (m/M)^2)^-1/2 with m the smaller and M the larger: no power overflows
    small, large = sorted((z_sum, 2.0 * sigma_b))
    return small / math.sqrt(1.0 + (small / large) ** 2)


def sum_noise_multiplier(noise_multiplier: float, count_noise: float) -> float:
    """The sum's multiplier that keeps the combined multiplier at ``noise_multiplier``.

    Raises:
        ValueError: if 2 ``count_noise`` <= ``noise_multiplier`` (the count alone would spend more than
            the whole budget of the step).
    """
    z = check_positive("noise_multiplier", noise_multiplier)
    sigma_b = check_positive("count_noise", count_noise)
    if 2.0 * sigma_b <= z:
        raise ValueError(f"count_noise must be > noise_multiplier / 2 = {z / 2:g} for the sum to keep a finite "
                         f"multiplier, got {count_noise!r}")
    return cast(float, (z**-2 - (2.0 * sigma_b) ** -2) ** -0.5)  # a positive base: a float


def adaptive_clipping_event(sum_multiplier: float, count_noise: float) -> ev.Event:
    """One step's release on one sample: the noisy sum and the noisy count, composed (a Gaussian pair
    whose losses add; accountants fold it to ``combined_noise_multiplier``)."""
    z_sum = check_positive("sum_multiplier", sum_multiplier)
    sigma_b = check_real("count_noise", count_noise, low=0.0, low_open=True, allow_inf=True)
    if math.isinf(sigma_b):  # no count released
        return ev.Gaussian(z_sum)
    return ev.Composed((ev.Gaussian(z_sum), ev.Gaussian(2.0 * sigma_b)))
