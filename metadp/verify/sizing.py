"""Sizing an audit before it runs: what the planner needs for the power asked, and what the machine can do.

An audit that finds nothing is only the absence of evidence at its sample size (``audit`` module
docstring). ``metadp verify`` therefore sizes every audit before it samples:

* :func:`plan_audit`: the draws per side the planner (:mod:`metadp.verify.planner`) needs to see a
  stated violation with probability ``power``, at the tested epsilon where that is cheapest (the audit
  flags a violation at any of its epsilons, so its power is at least the best single one). Below that
  n, an audit that finds nothing is ``INCONCLUSIVE``, never ``consistent``; a ``VIOLATION`` stands
  whatever the power (its false-alarm guarantee, alpha, does not depend on it).
* :func:`check_resources`: the time (measured draws per second on a small batch) and memory (the
  exploration sample is held in memory; :func:`explore_draws` caps it at 2^24 draws per side, ~1 GiB)
  an audit of n draws per side takes; refused beyond an hour without ``force_long``, and always
  beyond half of the machine's memory.
"""

from __future__ import annotations

import dataclasses
import math
import os
import time
from typing import Any, Dict, Optional, Sequence, Tuple

import numpy as np

from metadp.mechanisms.base import DominatingPair
from metadp.verify.audit import AuditResult, Profile, Sampler, format_draws
from metadp.verify.planner import pair_best_event, samples_needed

__all__ = ["AuditPlan", "cached_profile", "plan_audit", "check_resources", "explore_draws"]

_HOUR = 3600.0
_EXPLORE_MAX = 1 << 24  # exploration draws per side: n/10 up to here (thresholds need no more; memory does)
_BYTES_PER_EXPLORE_DRAW = 64  # both sides' draws, their sorted copies and the pooled sort: 8 float64 arrays
_WORKING_BYTES = 256 << 20  # confirmation chunks (2^20 draws per side) and the samplers' own buffers


@dataclasses.dataclass(frozen=True)
class AuditPlan:
    """What the planner needs: ``n_required`` draws per side (inf: no n suffices) to see ``what``."""

    n_required: float
    what: str  # the violation planned for, in words
    epsilon: Optional[float]  # where it is cheapest to see (None: nowhere)
    power: float
    alpha: float
    tests: int

    def _need(self) -> str:
        return "no number of" if not math.isfinite(self.n_required) else format_draws(self.n_required)

    def line(self) -> str:
        """One line for the output, before sampling."""
        if not math.isfinite(self.n_required):
            return (f"planner: no audit size sees {self.what} at these epsilons (power {self.power:g}), so "
                    "finding nothing will read INCONCLUSIVE")
        return (f"planner: {self._need()} draws per side see, with probability {self.power:g}, "
                f"{self.what} at eps={self.epsilon:g} (alpha {self.alpha:g}, {self.tests} tests; assumes the "
                f"exploration sample, n/10 more draws, finds the event)")

    def verdict_line(self, result: AuditResult) -> str:
        """The verdict in words, with its exit status."""
        need = self._need()
        if result.verdict == "VIOLATION":
            worst = max(result.rows, key=lambda r: r.margin)
            return (f"verdict: VIOLATION at eps={worst.epsilon:g}: the lower confidence bound on delta exceeds "
                    f"the claim; a false alarm has probability <= {result.alpha:g} (exit status 1)")
        if result.verdict == "INCONCLUSIVE":
            return (f"verdict: INCONCLUSIVE: no violation found, but the planner needs {need} draws per side "
                    f"to see, with probability {self.power:g}, {self.what}; this audit ran {result.n:,} "
                    "(exit status 3)")
        return (f"verdict: consistent: no violation found in {result.n:,} draws per side, at least the "
                f"{need} the planner needs to see, with probability {self.power:g}, {self.what} (exit status 0)")

    def to_dict(self) -> Dict[str, Any]:
        finite = math.isfinite(self.n_required)
        return {"n_required": (int(self.n_required) if self.n_required < 2**63 else float(self.n_required))
                if finite else None, "violation": self.what,
                "epsilon": self.epsilon, "power": self.power, "alpha": self.alpha, "tests": self.tests}


def cached_profile(profile: Profile) -> Profile:
    """``profile`` evaluated once per epsilon (a PLD accountant's get_delta can take a second)."""
    memo: Dict[float, float] = {}

    def cached(eps: np.ndarray) -> np.ndarray:
        eps = np.asarray(eps, dtype=np.float64)
        flat = eps.ravel()
        missing = sorted({float(e) for e in flat} - memo.keys())
        if missing:
            memo.update(zip(missing, np.asarray(profile(np.array(missing)), dtype=np.float64).tolist()))
        return np.array([memo[float(e)] for e in flat]).reshape(eps.shape)

    return cached


def plan_audit(profile: Profile, epsilons: Sequence[float], alternative: Optional[Tuple[str, DominatingPair]],
               *, samples: int, alpha: float, power: float, violation: Optional[float]) -> AuditPlan:
    """The planner's n for this audit: the minimum over the tested epsilons (module docstring).

    Args:
        profile: the claimed delta(eps).
        epsilons: the tested epsilons (one test each: the Bonferroni count is their number).
        alternative: (words, true pair): plan for that mechanism's best loss half-line; None, or a
            ``violation`` given: plan for a true delta ``violation`` above the claim (default 10% of the
            claim, at least 1e-4), attained by whatever event is hardest to see.
        samples: the draws per side the audit will run (only to skip work).
        alpha, power: the audit's level and the power asked for.
        violation: the delta excess to see, or None.
    """
    tests = len(epsilons)
    if alternative is not None and violation is None:
        what, true_pair = alternative

        def need(eps: float, exact: bool) -> int:
            return pair_best_event(true_pair, profile, eps, alpha=alpha, power=power, tests=tests, exact=exact)[3]
    else:
        claims = dict(zip(epsilons, np.asarray(profile(np.asarray(epsilons, dtype=np.float64)), dtype=np.float64)))
        excess = {e: violation if violation is not None else max(0.1 * c, 1e-4) for e, c in claims.items()}

        def need(eps: float, exact: bool) -> int:
            if claims[eps] + excess[eps] >= 1.0:  # the claim leaves no room for it here
                raise ValueError("no room")
            return samples_needed(profile, eps, excess[eps], alpha=alpha, power=power, tests=tests, exact=exact)
    rough: Dict[float, int] = {}
    for eps in epsilons:  # the normal approximation first; exact powers only where the minimum may be
        try:
            rough[eps] = need(eps, False)
        except ValueError:  # nothing to see at this epsilon (the true delta is not above the claim)
            continue
    best: Tuple[float, Optional[float]] = (math.inf, None)
    for eps in sorted(rough, key=rough.__getitem__):
        if rough[eps] > 1.25 * rough[min(rough, key=rough.__getitem__)]:
            break
        best = min(best, (need(eps, True), eps), key=lambda b: b[0])
    if alternative is None or violation is not None:
        if violation is not None:
            what = f"a true delta {violation:g} above the claim, attained by any event"
        elif best[1] is not None:
            what = (f"a true delta {excess[best[1]]:.3g} above the claim ({claims[best[1]]:.3g}; 10% of it, at least "
                    "1e-4), attained by any event")
        else:
            what = "a true delta 10% above the claim (at least 1e-4)"
    return AuditPlan(best[0], what, best[1], power, alpha, tests)


def _draw_seconds(sample_d: Sampler, sample_dp: Sampler, seed: int) -> Tuple[float, int]:
    """Seconds per draw (both sides, and the sort the counting does) on a growing probe batch."""
    rng = np.random.default_rng([seed, 2718])  # its own stream: the audit's draws are not disturbed
    k = 256
    while True:
        start = time.perf_counter()
        for sampler in (sample_d, sample_dp):
            np.sort(np.asarray(sampler(k, rng), dtype=np.float64))
        elapsed = time.perf_counter() - start
        if elapsed >= 0.05 or k >= 1 << 18:
            return elapsed / k, k
        k *= 8


def _memory_bytes() -> Optional[int]:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):  # not every platform reports it
        return None


def explore_draws(samples: int) -> int:
    """Exploration draws per side for an audit of ``samples``: n/10, at most 2^24 (~1 GiB in memory)."""
    return min(max(1, samples // 10), _EXPLORE_MAX)


def check_resources(sample_d: Sampler, sample_dp: Sampler, samples: int, *, seed: int,
                    force_long: bool) -> float:
    """Estimated seconds for an audit of ``samples`` draws per side (plus :func:`explore_draws`).

    Raises:
        ValueError: naming --samples, when the estimate exceeds an hour and ``force_long`` is False,
            or when the exploration sample would need more than half of the machine's memory.
    """
    explore = explore_draws(samples)
    per_draw, probe = _draw_seconds(sample_d, sample_dp, seed)
    seconds = (samples + explore) * per_draw
    if seconds > _HOUR and not force_long:
        raise ValueError(f"--samples {samples:,}: this audit would take about {seconds / _HOUR:.3g} hours here "
                         f"({1.0 / per_draw:.3g} draws per second per side, measured on {probe:,}); lower "
                         "--samples, or pass --force-long to run it anyway")
    memory = _memory_bytes()
    need = explore * _BYTES_PER_EXPLORE_DRAW + _WORKING_BYTES
    if memory is not None and need > memory / 2:
        fits = max(0, int((memory / 2 - _WORKING_BYTES) / _BYTES_PER_EXPLORE_DRAW)) * 10
        raise ValueError(f"--samples {samples:,}: the exploration sample ({explore:,} draws per side, held "
                         f"in memory) needs about {need / 2**30:.3g} GiB, more than half of this machine's "
                         f"{memory / 2**30:.3g} GiB; at most about {fits:,} samples fit")
    return seconds
