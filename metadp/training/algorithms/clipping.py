"""Clipping-threshold policies for the per-task (per-client) clip of DP-MAML, DP-AGR and DP-AGRLR.

A threshold may change during training only as a function of what was already released with noise
(post-processing), or through a release that is itself accounted (DESIGN.md 3.10):

* ``fixed``: C never changes.
* ``noisy-window`` (dp-fedmeta.txt Sec. 3.1, Eq. 2): after each step, the norm of the released noisy
  average enters a window of the last W; once the window is full, C <- min(C, the k-th percentile of
  the window) (the paper's smoothing: C only decreases). Post-processing: no privacy cost.
* ``quantile`` (Andrew, Thakkar, McMahan & Ramaswamy 2021, arXiv:1905.03871, Alg. 1): each sampled
  task also reports b_i = 1[||g_i|| <= C] - 1/2; the server releases sum_i b_i + N(0, sigma_b^2) on the
  same sample and moves C <- C exp(-eta (b - gamma)), b the noisy fraction unclipped. Both releases
  compose to one Gaussian of multiplier (z_sum^-2 + (2 sigma_b)^-2)^-1/2
  (``metadp.accounting.adaptive_clipping``); the trainer raises the sum's multiplier to z_sum so the
  accounted multiplier stays the planned z.
* ``raw-percentile`` (dp-maml.txt Sec. 5.2.1): C <- min(C, k-th percentile of the raw per-task norms of
  the last W tasks). **Not private**: the threshold, and so the noise scale of every later release,
  depends on raw data. Offered only so the published method can be reproduced; a run that uses it has
  no privacy guarantee and its report says so.

The update happens after the step's release, so the step's noise always used the threshold in force
when it was drawn.
"""

from __future__ import annotations

import dataclasses
import math
from collections import deque
from typing import Any, Dict, Optional

from metadp.core.validation import check_count, check_positive, check_probability, check_real, lookup

__all__ = ["POLICIES", "RULES", "ClipRule", "clip_rule", "ClipPolicy"]


@dataclasses.dataclass(frozen=True)
class ClipRule:
    """What a policy's threshold moves with, which decides what its run's accounting must hold (module
    docstring): the callers ask these properties, never the policy's name."""

    name: str
    adapts: bool  # the threshold changes during training
    from_released: bool  # it moves with the released noisy sums only: post-processing, no privacy cost
    releases_count: bool  # a noisy count of unclipped contributions is released with each sum (accounted)
    reads_raw_norms: bool  # it moves with raw norms: the run has NO privacy guarantee

    @property
    def private(self) -> bool:
        return not self.reads_raw_norms


RULES = {r.name: r for r in (
    ClipRule("fixed", adapts=False, from_released=False, releases_count=False, reads_raw_norms=False),
    ClipRule("noisy-window", adapts=True, from_released=True, releases_count=False, reads_raw_norms=False),
    ClipRule("quantile", adapts=True, from_released=False, releases_count=True, reads_raw_norms=False),
    ClipRule("raw-percentile", adapts=True, from_released=False, releases_count=False, reads_raw_norms=True),
)}
POLICIES = tuple(RULES)


def clip_rule(name: str) -> ClipRule:
    """The rule of the policy ``name``.

    Raises:
        ValueError: an unknown name (the message lists the known ones).
    """
    return lookup("clip policy", name, RULES)


class ClipPolicy:
    """The current threshold and how it moves (module docstring).

    Args:
        policy: one of ``POLICIES``.
        initial: the starting threshold C_0 > 0.
        window: W, the window length (noisy-window: releases; raw-percentile: tasks).
        percentile: k in [0, 100] (noisy-window, raw-percentile).
        target: gamma, the target fraction unclipped (quantile).
        learning_rate: eta (quantile).
        count_noise: sigma_b, the std of the noise on the count (quantile).
    """

    def __init__(self, policy: str = "fixed", initial: float = 1.0, *, window: int = 64, percentile: float = 50.0,
                 target: float = 0.5, learning_rate: float = 0.2, count_noise: Optional[float] = None):
        self.rule = clip_rule(policy)
        self.policy = policy
        self.threshold = check_real("initial clip", initial, low=0.0, low_open=True, allow_inf=True)
        self.window = check_count("window", window, minimum=1)
        self.percentile = check_real("percentile", percentile, low=0.0, high=100.0)
        self.target = check_probability("target", target)
        self.learning_rate = check_real("learning_rate", learning_rate, low=0.0)
        self.count_noise = None if count_noise is None else check_positive("count_noise", count_noise)
        if self.rule.releases_count and self.count_noise is None:
            raise ValueError("the quantile policy needs count_noise (sigma_b > 0, the noise on the unclipped count)")
        self._history: deque = deque(maxlen=self.window)

    @property
    def private(self) -> bool:
        """False for ``raw-percentile`` (thresholds from raw norms)."""
        return self.rule.private

    def _percentile(self) -> float:
        values = sorted(self._history)
        position = (len(values) - 1) * self.percentile / 100.0
        low, high = math.floor(position), math.ceil(position)
        return values[low] + (values[high] - values[low]) * (position - low)

    def after_release(self, released_norm: float) -> None:
        """noisy-window: record the norm of the released noisy average; update C once the window is full."""
        if not self.rule.from_released:
            return
        if math.isfinite(released_norm):
            self._history.append(float(released_norm))
        if len(self._history) == self.window:
            candidate = self._percentile()
            if 0.0 < candidate < self.threshold:
                self.threshold = candidate

    def after_count(self, noisy_count: float, expected: float) -> None:
        """quantile: C <- C exp(-eta (b - gamma)), b = noisy_count / expected + 1/2 (the noisy fraction unclipped)."""
        if not self.rule.releases_count:
            return
        fraction = noisy_count / expected + 0.5
        self.threshold *= math.exp(-self.learning_rate * (fraction - self.target))

    def after_raw_norms(self, norms) -> None:
        """raw-percentile (not private): C <- min(C, percentile of the raw norms of the last W tasks)."""
        if not self.rule.reads_raw_norms:
            return
        self._history.extend(float(n) for n in norms if math.isfinite(float(n)))
        if len(self._history) == self.window:
            self.threshold = min(self.threshold, self._percentile())

    def state_dict(self) -> Dict[str, Any]:
        return {"threshold": self.threshold, "history": list(self._history)}

    def load_state_dict(self, state: Dict[str, Any]) -> None:
        self.threshold = check_positive("threshold", state["threshold"])
        self._history = deque(state["history"], maxlen=self.window)
