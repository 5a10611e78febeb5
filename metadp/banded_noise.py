"""The guarantee of a plan with banded correlated noise (``noise.correlation = "banded"``, issue 34): DP-FTRL's
banded matrix factorization (BandMF), certified with and without amplification.

The noise. Each step t adds (C^-1 Z)_t to the clipped sum, Z i.i.d. N(0, (z C_clip)^2) per step, C the n x n
lower-triangular b-banded Toeplitz strategy whose coefficients ``banded_coefficients(n, b)`` minimise the prefix
workload's expected error (``metadp.mechanisms.banded_opt.optimize_banded_toeplitz``, on at most ``_HORIZON``
steps; any coefficients are valid, the optimum only lowers the error). The released sums are a post-processing
of C G + Z (Denisov et al. 2022, arXiv:2202.08312; Choquette-Choo et al. 2023, arXiv:2306.08153), so a unit's
privacy is that of C G + Z: a Gaussian mechanism with the l2 sensitivity of C G over the unit's participations
(``metadp.mechanisms.banded``'s module docstring; doubled under substitution, which the accountants' relation
applies).

* ``sampling.scheme = "none"`` (every unit in every step): sensitivity Delta_every = sqrt(sum_ij |(C^T C)_ij|),
  exact where C^T C >= 0 (``every_step_sensitivity``, O(b^2) for any n); the run is one Gaussian release with
  multiplier z / Delta, i.e. mu-GDP with mu = Delta / z, charged once.
* ``"min_separation"`` (k participations at least s apart): for s >= b the participating columns have disjoint
  supports, so Delta = sqrt(k) zeta, zeta = ||c|| the largest column norm, exactly; for s < b the dense bound
  of ``banded.sensitivity_min_separation`` (n <= ``_DENSE``). Charged once.
* ``"cyclic_poisson"`` with groups >= b: Choquette-Choo et al. 2023, Thm. 4: every guarantee of DP-SGD with
  Poisson rate q, ceil(n / groups) steps and noise multiplier z / zeta (the scheme's own event with z / zeta).

b = 1 gives C = I: DP-SGD with independent noise under the same participation, exactly (tested).
"""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import Optional, Tuple, Union, cast

import numpy as np
from numpy.typing import ArrayLike

from metadp.core import events as ev
from metadp.core._typing import FloatArray
from metadp.mechanisms.banded import (EveryStep, MinSeparation, SingleParticipation, momentum_workload, prefix_workload,
                                     sensitivity_every_step, sensitivity_min_separation)
from metadp.mechanisms.banded_opt import banded_toeplitz, dpsgd_error, error, optimize_banded_toeplitz
from metadp.sampling.base import Sampling
from metadp.sampling.guarantee import Guarantee
from metadp.sampling.participation import CyclicPoisson, MinSeparation as MinSeparationSampling
from metadp.plan_fields import PlanFields


__all__ = ["banded_coefficients", "plan_coefficients", "every_step_sensitivity", "error_ratio", "banded_views", "banded_lower",
           "BANDED_SCHEMES"]

_HORIZON = 2048  # the optimiser's horizon: the coefficients of a longer plan are optimised on this many steps
_DENSE = 4096  # the largest n for a dense sensitivity bound (min-separation closer than the bands)
BANDED_SCHEMES = ("none", "min_separation", "cyclic_poisson")
CITATIONS = ("choquette2023amplified", "denisov2022improved")


@functools.lru_cache(maxsize=32)
def banded_coefficients(steps: int, bands: int, momentum: float = 0.0) -> Tuple[float, ...]:
    """The b band coefficients c_0..c_{b-1} (||c|| = 1 up to rounding) of the strategy for ``steps`` steps: the
    optimiser's (the prefix workload, or SGD with heavy-ball ``momentum``'s: :func:`workload`; at most ``_HORIZON``
    steps), rounded to 12 significant digits so that a run and
    its plan use the very same numbers (every bound here is computed from the rounded ones)."""
    if bands > steps:
        raise ValueError(f"noise.bands = {bands} is more than the plan's {steps} steps")
    c = optimize_banded_toeplitz(workload(min(steps, _HORIZON), momentum), bands) if bands > 1 else np.ones(1)
    return tuple(float(f"{x:.12g}") for x in c)


def workload(n: int, momentum: float = 0.0) -> FloatArray:
    """The n x n workload C is optimised for: prefix sums (SGD's iterates), or with ``momentum`` > 0 the iterates of
    SGD with heavy-ball momentum (``metadp.mechanisms.banded.momentum_workload``)."""
    return momentum_workload(n, momentum) if momentum else prefix_workload(n)


def plan_coefficients(plan: PlanFields) -> Tuple[float, ...]:
    """The coefficients a banded plan's noise uses: optimised for ``noise.horizon`` steps, or the plan's steps (the
    run's own numbers, also when a run stopped early is reported as a plan of fewer steps)."""
    return banded_coefficients(plan.noise.horizon or plan.steps, plan.noise.bands, plan.noise.momentum or 0.0)


def every_step_sensitivity(coefficients: ArrayLike, steps: int) -> Tuple[float, bool]:
    """(sensitivity, exact): sqrt(sum_ij |(C^T C)_ij|) for the n x n lower-triangular banded Toeplitz C of ``coefficients``: the l2
    sensitivity of C G when the unit is in every step (an upper bound, exact where C^T C >= 0; ``banded.
    sensitivity_every_step``), in O(b^2); exact where every entry of C^T C is >= 0 (attained by a unit in every
    step with one constant unit gradient). (C^T C)_{i,i+d} = sum_m c_m c_{m+d} over m <= min(b-1-d, n-1-i-d):
    the full sum r_d for the n - b + 1 columns i <= n - b, partial sums for the last ones."""
    c = np.asarray(coefficients, dtype=np.float64)
    b, n = len(c), int(steps)
    if n < b:  # fewer steps than bands: the dense formula on the top-left block
        dense = banded_toeplitz(c, n)
        return float(sensitivity_every_step(dense)), bool(np.all(dense.T @ dense >= 0.0))
    total, exact = 0.0, True
    for d in range(b):
        products = c[: b - d] * c[d:]  # c_m c_{m+d}, m = 0..b-1-d
        partial = np.cumsum(products)  # partial[t] = sum_{m <= t}: every entry of C^T C is one of these
        exact = exact and bool(np.all(partial >= 0.0))
        inner = (n - b + 1) * abs(partial[-1]) + float(np.sum(np.abs(partial[: b - 1 - d])))
        total += inner if d == 0 else 2.0 * inner
    return math.sqrt(total * (1.0 + 4 * b * b * 2.0**-52)), exact  # the float sums, rounded up


def error_ratio(coefficients: ArrayLike, steps: int, pattern: object, momentum: float = 0.0) -> Tuple[float, int]:
    """(ratio, n): the expected squared error of the released workload (prefix sums, or momentum SGD's iterates)
    with the strategy over that of
    independent noise (C = I) at the same epsilon, on the first n = min(steps, ``_HORIZON``) steps: Delta(C)^2
    ||A C^-1||_F^2 over Delta(I)^2 ||A||_F^2 (``banded_opt.error``), Delta the sensitivity under ``pattern``
    (single participation where the guarantee is amplified: the same z / ||c|| gives the same epsilon there)."""
    n = min(int(steps), _HORIZON)
    A = workload(n, momentum)
    return error(A, banded_toeplitz(np.asarray(coefficients), n), pattern) / dpsgd_error(A, pattern), n


@functools.lru_cache(maxsize=32)  # (a calibration builds the plan's views at every noise it tries: the error is z-free)
def _error_words(coefficients: Tuple[float, ...], steps: int, pattern: object, momentum: float) -> str:
    ratio, n = error_ratio(coefficients, steps, pattern, momentum)
    on = "" if n == steps else f", on the first {n:,} steps"
    sums = f"momentum-{momentum:g} SGD iterates" if momentum else "prefix sums"
    return (f"the expected squared error of the released {sums} is {ratio:.3g} x that of independent noise at "
            f"the same epsilon (metadp.mechanisms.banded_opt{on})")


def _min_separation_sensitivity(c: FloatArray, steps: int, k: int, separation: int) -> Tuple[float, bool]:
    """(sensitivity, exact) for k participations at least ``separation`` apart."""
    b = len(c)
    zeta = float(np.linalg.norm(c))
    if separation >= b:  # attained where k participations fit with full columns: (k - 1) s + b <= n
        return math.sqrt(k) * zeta * (1.0 + 2.0**-50), (k - 1) * separation + b <= steps
    if steps > _DENSE:
        raise ValueError(f"sampling.separation = {separation} below noise.bands = {b} needs the dense sensitivity "
                         f"bound, computed for at most {_DENSE} steps (the plan has {steps}): raise the separation to "
                         "at least the bands, or lower the bands")
    return float(sensitivity_min_separation(banded_toeplitz(c, steps), k, separation)) * (1.0 + 2.0**-40), False


@functools.lru_cache(maxsize=32)
def _sensitivity(coefficients: Tuple[float, ...], steps: int,
                 scheme: Sampling) -> Tuple[float, bool, Union[EveryStep, MinSeparation]]:
    """(sensitivity of C G in clip norms, exact, the participation pattern of ``metadp.mechanisms.banded``) for a
    plan without amplification (``scheme``: ``none`` or ``min_separation``), computed once for the views and the
    lower end (``banded_views``, ``banded_lower``)."""
    c = np.asarray(coefficients)
    if scheme.scheme == "none":
        return (*every_step_sensitivity(c, steps), EveryStep())
    separated = cast(MinSeparationSampling, scheme)  # the scheme is none or min_separation
    k = separated.participations_in(steps)
    return (*_min_separation_sensitivity(c, steps, k, separated.separation), MinSeparation(k, separated.separation))


def _column_norm(coefficients: Tuple[float, ...], up: bool) -> float:
    """||c||, the largest column norm of C (steps >= bands), rounded up (for the upper bound's event) or down (for
    an event whose lower end bounds the mechanism)."""
    return float(np.linalg.norm(coefficients)) * (1.0 + (2.0**-50 if up else -2.0**-50))


def banded_views(plan: PlanFields) -> Tuple[Guarantee, ...]:
    """The plan's own unit's guarantee under banded noise (module docstring), or a ValueError naming what is not
    supported."""
    scheme, noise, bands, n = plan.sampling, plan.noise, plan.noise.bands, plan.steps
    if scheme.scheme not in BANDED_SCHEMES:
        raise ValueError(f"noise.correlation = 'banded' is certified with sampling.scheme one of "
                         f"{', '.join(BANDED_SCHEMES)}, got '{scheme.scheme}'")
    if plan.unit == "group" or plan.hierarchy is not None or plan.record_multiplicity is not None:
        raise ValueError("noise.correlation = 'banded' is certified for one unit without [[hierarchy]] levels or "
                         "record_multiplicity")
    if noise.mechanism != "gaussian" or noise.count_noise is not None:
        raise ValueError("noise.correlation = 'banded' needs noise.mechanism = 'gaussian' (no count_noise)")
    if plan.release is not None and plan.release.form != "task_clip":
        raise ValueError(f"noise.correlation = 'banded' is certified for the clipped sum of the tasks' updates "
                         f"(release.form = 'task_clip'), not release.form = '{plan.release.form}'")
    if bands > n:
        raise ValueError(f"noise.bands = {bands} is more than the plan's {n} steps")
    coefficients = plan_coefficients(plan)
    c = np.asarray(coefficients)
    zeta = _column_norm(coefficients, up=True)
    z, m = cast(float, noise.multiplier), noise.momentum or 0.0  # (gaussian: checked above)
    words = (f"C is the {n:,} x {n:,} lower-triangular Toeplitz strategy with {bands} band(s) (coefficients "
             f"{', '.join(f'{x:.6g}' for x in c[:4])}{', ...' if bands > 4 else ''}; DP-FTRL BandMF, optimised for the "
             f"{f'momentum-{m:g} SGD' if m else 'prefix'} workload"
             f"{'' if noise.horizon is None else f' of {noise.horizon:,} steps'}); the released sums are a post-processing of C G + Z")
    if scheme.scheme == "cyclic_poisson":
        cyclic = cast(CyclicPoisson, scheme)
        if bands > cyclic.groups:
            raise ValueError(f"noise.bands = {bands} exceeds sampling.groups = {cyclic.groups}: the amplified "
                             "bound (Choquette-Choo et al. 2023, Thm. 4) needs at most as many bands as groups")
        g = cyclic.guarantees(plan.unit, plan.relation, ev.Gaussian(z / zeta), n)[0]
        how = (f"{words}; with cyclic Poisson participation of {cyclic.groups:,} groups (at least the bands), every "
               f"guarantee of DP-SGD with Poisson rate {cyclic.rate:g}, {g.steps:,} steps and noise multiplier "
               f"z / ||c|| = {z / zeta:.6g} (Choquette-Choo et al. 2023, arXiv:2306.08153, Thm. 4); {g.reason}; "
               f"{_error_words(coefficients, n, SingleParticipation(), m)}")
        return (dataclasses.replace(g, reason=how, citations=tuple(dict.fromkeys(g.citations + CITATIONS))),)
    delta_c, exact, shape = _sensitivity(coefficients, n, scheme)
    pattern = (f"every {plan.unit} in every one of the {n:,} steps" if scheme.scheme == "none" else
               f"each {plan.unit} in at most {cast(MinSeparation, shape).max_participations:,} steps at least "
               f"{cast(MinSeparationSampling, scheme).separation:,} apart, "
               "in any order")
    how = (f"{words}; {pattern}: the l2 sensitivity of C G is {'' if exact else 'at most '}{delta_c:.6g} clip norms, "
           f"so the run is one Gaussian release with multiplier z / {delta_c:.6g} = {z / delta_c:.6g} (mu-GDP, "
           f"mu = {delta_c / z:.6g}), charged once; no amplification; {_error_words(coefficients, n, shape, m)}")
    return (Guarantee.of_plan(plan.unit, plan.relation, (ev.Gaussian(z / delta_c),), 1, how, True, charge="pass",
                              basis="banded matrix factorization: one Gaussian with the strategy's sensitivity",
                              citations=CITATIONS),)


def banded_lower(plan: PlanFields) -> Optional[Tuple[Optional[Tuple[ev.Event, int]], Optional[str]]]:
    """Where the accountant's lower end of a banded plan's event is not one on the mechanism: (attained, note),
    ``attained`` the (event, count) whose certified lower end is (None: no lower bound, 0), ``note`` what the report
    says of it (None: nothing to say), else None.

    * cyclic Poisson, b > 1: group 0 joins steps 0, g, 2g, ...; a participation at step i <= n - b has its full
      column (norm ||c||) in rows i..i+b-1, disjoint from the others' (g >= b), so those releases are exactly
      Poisson-subsampled Gaussians with multiplier z / ||c||: floor((n - b) / g) + 1 of them attain the bound
      (the DP-SGD pair of each: named datasets); a last participation with a truncated column is less revealing;
    * every step, or min-separation: the Gaussian is attained when its sensitivity is exact (C^T C >= 0, or the
      k participations fit with full columns); otherwise the lower end is that of the bound, not the mechanism's.
    """
    scheme, bands, n = plan.sampling, plan.noise.bands, plan.steps
    if scheme.scheme == "cyclic_poisson":
        groups = cast(CyclicPoisson, scheme).groups
        if bands == 1:  # C = I: DP-SGD itself, whose lower end the accountant gives
            return None
        full = (n - bands) // groups + 1 if n >= bands else 0
        note = None if full == math.ceil(n / groups) else (
            f"the lower end is attained by a unit of group 0 in its {full:,} participations with full columns (the "
            "last one's column is truncated by the end of training): the DP-SGD reduction's own lower end, over "
            f"{math.ceil(n / groups):,} steps, is not one on BandMF")
        # ||c|| rounded down here: the event's lower end is then one on the mechanism, whose z / ||c|| is no smaller
        z = cast(float, plan.noise.multiplier)  # (a banded plan is gaussian)
        attained = scheme.step_event(ev.Gaussian(z / _column_norm(plan_coefficients(plan), up=False)))
        return ((attained, full) if full else None), note
    if _sensitivity(plan_coefficients(plan), n, scheme)[1]:  # exact: the Gaussian of the view is attained
        return None
    return None, ("no lower bound: the sensitivity is an upper bound here (C^T C has negative entries, or the "
                  "participations cannot all have full columns), so the Gaussian's lower end is not one on the mechanism")
