"""Speed of metadp's RdpAccountant against dp-accounting's RdpAccountant on common plans.

Run: ``python benchmarks/accounting_speed.py`` (about a minute). Prints, for each plan, both
epsilons and the median wall time over several repeats of "build accountant, compose the plan, get
epsilon" (time.perf_counter). metadp is timed cold: its process-level RDP-curve cache
(``rdp_accountant._cached_curve``) is cleared before every repeat, so caching does not flatter it.
Then: the cost of a 10,000-point ``trajectory`` relative to one ``get_epsilon`` (both cold), and,
if ``metadp.accounting.calibration`` exists, the time of ``calibrate_noise`` on the default plan.

What differs between the two (see tests/crosscheck/test_dp_accounting.py): metadp optimises the
order continuously over a wider grid (so its epsilon is a little lower), evaluates fractional orders
of the Poisson-subsampled Gaussian by quadrature without cancellation, and for fixed-size sampling
uses Wang-Balle-Kasiviswanathan Thm 9 where dp-accounting also uses the tighter Thm 27 at orders <= 256.
"""

from __future__ import annotations

import logging
import os
import platform
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

from metadp.accounting import FixedSizeSampled, Gaussian, PoissonSampled, RdpAccountant, SelfComposed  # noqa: E402
from metadp.accounting import rdp_accountant as _metadp_rdp  # noqa: E402

try:
    from dp_accounting import dp_event as de
    from dp_accounting.privacy_accountant import NeighboringRelation
    from dp_accounting.rdp import rdp_privacy_accountant as dp_rdp
except ImportError:  # the table still prints metadp's side
    de = None

REPEATS = 5
TIME_BUDGET_S = 8.0  # per plan and library: fewer repeats (at least 1) when one run is slow


# (name, metadp relation, metadp event, dp-accounting event factory or None, count, delta)
def _plans():
    def poisson(q, z):
        return PoissonSampled(q, Gaussian(z)), (lambda: de.PoissonSampledDpEvent(q, de.GaussianDpEvent(z)))

    plans = []
    for name, q, z, steps, delta in [
        ("DP-MAML default: q=0.004 z=1 T=250", 0.004, 1.0, 250, 1e-6),
        ("DP-SGD MNIST: q=256/60000 z=1.1 T=14062", 256 / 60000, 1.1, 14062, 1e-5),
        ("q=1e-4 z=0.8 T=1e6", 1e-4, 0.8, 10**6, 1e-7),
        ("q=0.5 z=2 T=1000", 0.5, 2.0, 1000, 1e-5),
        ("q=0.01 z=20 T=1e5", 0.01, 20.0, 10**5, 1e-5),
    ]:
        event, dp_factory = poisson(q, z)
        plans.append((name, "add_remove", event, dp_factory, steps, delta))
    plans.append(("no sampling: z=10 T=100", "add_remove", Gaussian(10.0),
                  lambda: de.GaussianDpEvent(10.0), 100, 1e-5))
    # Fixed-size batches, substitution. metadp's z is relative to the add/remove sensitivity C and
    # it doubles the sensitivity; dp-accounting's REPLACE_ONE multiplier is relative to 2C: z / 2.
    plans.append(("WOR 256 of 60000, z=1.1, T=14062 (subst.)", "substitute",
                  FixedSizeSampled(256, 60000, Gaussian(1.1)),
                  lambda: de.SampledWithoutReplacementDpEvent(60000, 256, de.GaussianDpEvent(0.55)), 14062, 1e-5))
    return plans


def _median_time(run, cold=None):
    """Median wall time of run() over up to REPEATS repeats (fewer if it exceeds the budget)."""
    times, value = [], None
    start = time.perf_counter()
    for _ in range(REPEATS):
        if cold is not None:
            cold()
        t0 = time.perf_counter()
        value = run()
        times.append(time.perf_counter() - t0)
        if time.perf_counter() - start > TIME_BUDGET_S:
            break
    return statistics.median(times), value, len(times)


def _cold():
    _metadp_rdp._cached_curve.cache_clear()


def _metadp_epsilon(relation, event, count, delta):
    return RdpAccountant(relation=relation).compose(event, count).get_epsilon(delta)


def _dp_epsilon(relation, dp_factory, count, delta):
    rel = NeighboringRelation.REPLACE_ONE if relation == "substitute" else NeighboringRelation.ADD_OR_REMOVE_ONE
    acc = dp_rdp.RdpAccountant(neighboring_relation=rel)
    acc.compose(de.SelfComposedDpEvent(dp_factory(), count))
    return acc.get_epsilon(delta)


def _fmt_time(seconds):
    return f"{seconds * 1e3:9.1f} ms" if seconds < 10 else f"{seconds:9.2f} s "


def main():
    logging.getLogger("absl").setLevel(logging.ERROR)  # dp-accounting's non-convergence warnings
    total_start = time.perf_counter()
    print(f"machine: {platform.platform()}, {platform.processor() or platform.machine()}, "
          f"{os.cpu_count()} CPUs, Python {platform.python_version()}")
    if de is not None:
        from importlib import metadata
        print(f"dp-accounting {metadata.version('dp-accounting')}; "
              f"median of up to {REPEATS} cold repeats (metadp curve cache cleared before each)")
    print()

    header = (f"{'plan':44s} {'metadp eps':>11s} {'dp-acc eps':>11s} {'metadp time':>12s} "
              f"{'dp-acc time':>12s} {'ratio':>7s}")
    print(header)
    print("-" * len(header))
    for name, relation, event, dp_factory, count, delta in _plans():
        t_m, eps_m, _ = _median_time(lambda: _metadp_epsilon(relation, event, count, delta), cold=_cold)
        if de is not None:
            t_d, eps_d, _ = _median_time(lambda: _dp_epsilon(relation, dp_factory, count, delta))
            row = f"{eps_d:11.5f} {_fmt_time(t_m):>12s} {_fmt_time(t_d):>12s} {t_d / t_m:6.1f}x"
        else:
            row = f"{'n/a':>11s} {_fmt_time(t_m):>12s} {'n/a':>12s} {'n/a':>7s}"
        print(f"{name:44s} {eps_m:11.5f} {row}")
    print("ratio = dp-accounting time / metadp time (> 1: metadp faster); delta per plan as in the source.")
    print()

    # Trajectory vs one get_epsilon, both cold, default plan.
    step, delta, n = PoissonSampled(0.004, Gaussian(1.0)), 1e-6, 10_000
    t_eps, _, _ = _median_time(lambda: RdpAccountant().compose(step, n).get_epsilon(delta), cold=_cold)
    t_traj, traj, _ = _median_time(lambda: RdpAccountant().trajectory(range(1, n + 1), delta, step_event=step),
                                   cold=_cold)
    print(f"trajectory (default plan step, {n:,} points, delta {delta:g}): {_fmt_time(t_traj).strip()} "
          f"vs one get_epsilon at T={n:,}: {_fmt_time(t_eps).strip()} -> {t_traj / t_eps:.1f}x one call "
          f"({t_traj / n * 1e6:.1f} us per point); final epsilon {traj[-1]:.4f}")
    print()

    try:
        from metadp.accounting import calibration
    except ImportError:
        print("calibration: metadp.accounting.calibration not available, skipped")
    else:
        def calibrate():
            return calibration.calibrate_noise(
                lambda z: SelfComposed(PoissonSampled(0.004, Gaussian(z)), 250), 1.0, 1e-6)

        t_cal, z, reps = _median_time(calibrate, cold=_cold)
        print(f"calibrate_noise (default plan: q=0.004, T=250, target eps 1, delta 1e-6): z = {z:.5f} in "
              f"{_fmt_time(t_cal).strip()} (median of {reps}, cold) = {t_cal / t_eps:.0f}x one get_epsilon")
    print(f"\ntotal benchmark time {time.perf_counter() - total_start:.1f} s")


if __name__ == "__main__":
    main()
