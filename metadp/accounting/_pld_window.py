"""The FFT window of a tilted lattice sum (``metadp.accounting._pld_bounds``): where the window sits
(Chernoff quantiles of the tilted sum at a level, each end's parameter chosen on the pmfs' block cgf,
the bound then computed with the exact one), what it leaves outside (charged: the exact mass above it,
the tilted mass the FFT wraps in), and whether the untilted FFT is accurate enough to skip the tilt.
"""

from __future__ import annotations

import math
from typing import Optional, Sequence, Tuple, cast

import numpy as np
from scipy import fft as sfft

from metadp.accounting import _pld_compose as _comp
from metadp.core._typing import FloatArray

__all__ = ["DELTA_SHARE", "STEPS", "window", "untilted_is_enough", "untilted_prediction"]

DELTA_SHARE = 1e-5  # fraction of delta spent on each truncation (tails, window)
_UNTILTED_SHARE = 1e-4  # the untilted FFT is used where its round-off is predicted below this share of delta
# the block cgf's allowed error (nats) when it picks a window's Chernoff parameters: they sit on a grid
# 2.3x apart, where the bound is flat near its best, and the bound is then computed exactly
_WINDOW_GUARD = 0.5

# Chernoff parameters tried at a window's ends, in units of 1/sd of the tilted sum: heavy-tailed steps
# (small sampling rates) need far smaller ones than a Gaussian
STEPS = np.geomspace(1e-4, 16.0, 12)


def window(items: Sequence[_comp.Item], tilted: _comp.Tilted, level: float, max_memory: int,
           steps: FloatArray = STEPS,
           guessed: Optional[Tuple[FloatArray, FloatArray]] = None) -> Tuple[int, int, float, float]:
    """The FFT window [first, first + size) for the tilted sum: its Chernoff quantiles at ``level`` on
    each side (the whole support when that is shorter), size 2-3-5-smooth; also the log bound on the
    exact untilted mass above it and the tilted mass outside it (which the FFT wraps in). ``guessed``:
    (steps / sd, the block estimate at theta +- those steps) where the caller has it for this tilt
    (``untilted_prediction``): it only picks the Chernoff parameters."""
    low = sum(item.count * item.start for item in items)
    high = sum(item.count * (item.start + len(item.pmf) - 1) for item in items)
    theta, steps = tilted.theta, steps / tilted.sd
    log_level = math.log(level)
    # the best Chernoff parameter of each end chosen on the pmfs' blocks (any is valid), then the
    # bound computed exactly there
    if guessed is not None:
        steps, guess = guessed
    else:
        both = np.concatenate([theta + steps, theta - steps])  # a guess within ~_WINDOW_GUARD nats suffices
        guess = cast(FloatArray, sum(_comp.approximate_cgf(item.pmf, item.start, both, item.count, _WINDOW_GUARD)
                                     + item.count * _comp.log_inverse(item.rel_error) for item in items)
                     - tilted.log_scale)  # a sum of arrays (items is not empty)
    i_up = int(np.argmin((guess[: len(steps)] - log_level) / steps))
    i_down = int(np.argmax((log_level - guess[len(steps):]) / steps))
    up_step, down_step = steps[i_up:i_up + 1], steps[i_down:i_down + 1]
    both = np.concatenate([theta + up_step, theta - down_step])
    total = cast(FloatArray, sum(item.count * (_comp.cgf(item.pmf, item.start, both)
                                               + _comp.log_inverse(item.rel_error)) for item in items)
                 - tilted.log_scale)
    up, down = total[:1], total[1:]
    top = min(high, math.ceil(float(np.min((up - log_level) / up_step))))
    first = max(low, math.floor(float(np.max((log_level - down) / down_step))))
    size = sfft.next_fast_len(max(1024, top - first + 2), real=True)  # 2-3-5-smooth
    if size * 16 * 6 > max_memory:
        raise MemoryError(1.05 * size * 16 * 6 / max_memory)  # how much wider h must be
    if size >= high - low + 1:
        return low, size, -math.inf, 0.0
    first = min(first, high - size + 1)
    top = first + size - 1
    log_above = float(np.min(up + tilted.log_scale - (theta + up_step) * top)) if top < high else -math.inf
    outside = (math.exp(min(float(np.min(up - up_step * top)), 0.0)) if top < high else 0.0) + \
        (math.exp(min(float(np.min(down + down_step * first)), 0.0)) if first > low else 0.0)
    return first, size, log_above, outside


def untilted_is_enough(items: Sequence[_comp.Item], flat: _comp.Tilted, size: int, delta: float) -> bool:
    """Whether the untilted FFT's round-off is predicted below ``_UNTILTED_SHARE`` of delta: its l2 bound
    is about sum_i c_i gamma ||x_i||_2 (``_pld_compose.compose``), read on an l2 norm of about (N / 2)^(1/2)
    bins. The prediction only picks the tilt; the bound charged is the one computed."""
    gamma = _comp.fft_gamma(size)
    predicted = sum(item.count * gamma * float(np.linalg.norm(x)) for item, (x, _) in zip(items, flat.arrays))
    return bool(predicted * math.sqrt(size / 2.0) <= _UNTILTED_SHARE * delta)


def untilted_prediction(items: Sequence[_comp.Item],
                        level: float) -> Tuple[bool, Tuple[FloatArray, FloatArray]]:
    """(``untilted_is_enough`` predicted without the untilted sum's tilt and window: its moments and
    norm from the pmfs, its window from ``approximate_cgf`` (only the choice of tilt depends on it);
    the steps and block estimates it used, which ``_window`` reuses for the untilted sum)."""
    var, log_scale, norm = 0.0, 0.0, 0.0
    for item in items:
        total = float(item.pmf.sum())
        idx = np.arange(len(item.pmf), dtype=np.float64)
        mean = float(np.dot(item.pmf, idx)) / total
        var += item.count * float(np.dot(item.pmf, (idx - mean) ** 2)) / total
        log_scale += item.count * math.log(total)
        norm += item.count * float(np.linalg.norm(item.pmf)) / total
    steps = STEPS / math.sqrt(max(var, 1.0))
    guess = cast(FloatArray, sum(_comp.approximate_cgf(item.pmf, item.start, np.concatenate([steps, -steps]),
                                                       item.count)
                                 + item.count * _comp.log_inverse(item.rel_error) for item in items) - log_scale)
    low = sum(item.count * item.start for item in items)
    high = sum(item.count * (item.start + len(item.pmf) - 1) for item in items)
    top = min(high, math.ceil(float(np.min((guess[: len(steps)] - math.log(level)) / steps))))
    first = max(low, math.floor(float(np.max((math.log(level) - guess[len(steps):]) / steps))))
    size = sfft.next_fast_len(max(1024, top - first + 2), real=True)
    likely = norm * _comp.fft_gamma(size) * math.sqrt(size / 2.0) <= _UNTILTED_SHARE * level / DELTA_SHARE
    return likely, (steps, guess)
