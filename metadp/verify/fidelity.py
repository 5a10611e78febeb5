"""Sampler fidelity: do a sampler's inclusion counts follow the law the accountant assumes? (DESIGN.md 6)

An accountant's bound holds for the sampling law it was given (Poisson rate q, fixed batches of m of
n, one pass over the units, K ~ Binomial(L, eta) episodes per record: DESIGN.md 3.2, 3.3, 3.7, 3.9),
not for whatever a trainer's sampler actually does. These tests take the sampler's recorded output
and test it against that law:

* exact constraints first (every batch has m units; every unit once per pass): a single breach fails
  with p-value 0;
* then goodness of fit of count histograms by Pearson's chi-square test, with adjacent bins pooled
  until every expected count is >= 5 (the usual validity rule; Cochran 1954), and exact binomial tests
  of totals. Several tests on one sample are combined by Bonferroni: p = min(1, k min_i p_i), valid
  whatever their dependence.

A test passes when p >= alpha. Passing is evidence, not proof: these tests see marginal counts, not
every dependence (e.g. between steps), and a small sample has little power.
"""

from __future__ import annotations

import dataclasses
from typing import List, Optional, Tuple

import numpy as np
from numpy.typing import ArrayLike
from scipy import stats

from metadp.core.validation import check_count, check_probability, check_real

__all__ = ["FidelityResult", "poisson_inclusion_test", "fixed_size_test", "one_pass_test",
           "episodic_multiplicity_test"]

_MIN_EXPECTED = 5.0  # pooled bins' expected counts, for the chi-square approximation
_SCHEMES = ("any", "random_allocation", "partition")


@dataclasses.dataclass(frozen=True)
class FidelityResult:
    """The outcome of a fidelity test.

    Attributes:
        passed: p_value >= alpha (and every exact constraint holds).
        p_value: the combined p-value (Bonferroni over the component tests; 0 for a breached constraint).
        statistic: the statistic of the component with the smallest p-value (for a breached constraint,
            the number of breaches).
        detail: every component, in words.
    """

    passed: bool
    p_value: float
    statistic: float
    detail: str


Component = Tuple[str, float, float]  # (description, statistic, p-value)


def _check_alpha(alpha: float) -> float:
    return check_real("alpha", alpha, low=0.0, high=1.0, low_open=True, high_open=True)


def _check_mask(mask: ArrayLike) -> np.ndarray:
    """A 2-D (steps, units) boolean array; 0/1 integers are accepted."""
    m = np.asarray(mask)
    if m.ndim != 2 or m.size == 0:
        raise ValueError(f"mask must be a non-empty 2-d (steps, units) array, got shape {m.shape}")
    if m.dtype != bool:
        if not np.issubdtype(m.dtype, np.integer) or np.any((m != 0) & (m != 1)):
            raise ValueError(f"mask must be boolean (or 0/1 integers), got dtype {m.dtype}")
        m = m.astype(bool)
    return m


def _pool(observed: np.ndarray, expected: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
    """Adjacent bins merged left to right until each expected count is >= 5; a short remainder joins
    the last bin (for a unimodal law this pools the two tails)."""
    obs, exp = [], []
    acc_o = acc_e = 0.0
    for o, e in zip(observed, expected):
        acc_o, acc_e = acc_o + o, acc_e + e
        if acc_e >= _MIN_EXPECTED:
            obs.append(acc_o)
            exp.append(acc_e)
            acc_o = acc_e = 0.0
    if acc_e > 0 or acc_o > 0:
        if obs:
            obs[-1] += acc_o
            exp[-1] += acc_e
        else:
            obs.append(acc_o)
            exp.append(acc_e)
    return np.asarray(obs), np.asarray(exp)


def _chi_square(name: str, values: np.ndarray, pmf: np.ndarray) -> Component:
    """Pearson's goodness of fit of integer values in [0, len(pmf)) to the law pmf."""
    observed = np.bincount(values, minlength=len(pmf)).astype(np.float64)
    obs, exp = _pool(observed, len(values) * pmf / pmf.sum())
    if len(obs) < 2:
        return f"{name}: too few observations for a chi-square test (one pooled bin)", 0.0, 1.0
    statistic = float(np.sum((obs - exp) ** 2 / exp))
    p = float(stats.chi2.sf(statistic, len(obs) - 1))
    return f"{name}: chi2 = {statistic:.4g} on {len(obs) - 1} df ({len(obs)} pooled bins), p = {p:.3g}", statistic, p


def _binomial_total(name: str, successes: int, trials: int, rate: float) -> Component:
    p = float(stats.binomtest(successes, trials, rate).pvalue)
    return f"{name}: {successes} of {trials} at rate {rate:.6g} (expected {trials * rate:.6g}), exact p = {p:.3g}", \
        float(successes), p


def _combine(components: List[Component], alpha: float) -> FidelityResult:
    k = len(components)
    worst = min(range(k), key=lambda i: components[i][2])
    p = min(1.0, k * components[worst][2])
    detail = "; ".join(c[0] for c in components)
    if k > 1:
        detail += f"; Bonferroni over {k}: p = {p:.3g}"
    return FidelityResult(p >= alpha, p, components[worst][1], detail + f" (alpha {alpha:g})")


def _breach(count: int, detail: str) -> FidelityResult:
    return FidelityResult(False, 0.0, float(count), detail)


def _degenerate(values: np.ndarray, required: float, what: str) -> FidelityResult:
    """The exact check of a deterministic law: every entry must equal ``required``."""
    wrong = int(np.count_nonzero(values != required))
    if wrong:
        return _breach(wrong, f"{what}: {wrong} entries differ from {required}")
    return FidelityResult(True, 1.0, 0.0, f"{what}: every entry is {required}, as required")


def poisson_inclusion_test(mask: ArrayLike, rate: float, alpha: float = 1e-3) -> FidelityResult:
    """Poisson sampling: every (step, unit) included independently with probability q (DESIGN.md 3.2).

    Components: the total count against Binomial(steps x units, q) (exact two-sided test), the per-step
    counts against Binomial(units, q) and the per-unit counts against Binomial(steps, q) (chi-square).
    Fixed-size batches fail the per-step test (no spread); one-pass or shuffled samplers the per-unit
    test (every unit the same number of times).

    Args:
        mask: (steps, units) booleans, True where the unit is in the step's sample.
        rate: q in [0, 1] (0 and 1 are checked exactly).
        alpha: significance level in (0, 1).

    Returns:
        A FidelityResult.

    Raises:
        ValueError: on a malformed mask, a rate outside [0, 1] or alpha outside (0, 1).
    """
    m = _check_mask(mask)
    q = check_probability("rate", rate)
    alpha = _check_alpha(alpha)
    if q in (0.0, 1.0):
        return _degenerate(m, q == 1.0, f"Poisson sampling at rate {q:g}")
    steps, units = m.shape
    components = [
        _binomial_total("total inclusions", int(np.count_nonzero(m)), steps * units, q),
        _chi_square(f"per-step counts vs Binomial({units}, {q:.6g})", m.sum(axis=1), stats.binom.pmf(
            np.arange(units + 1), units, q)),
        _chi_square(f"per-unit counts vs Binomial({steps}, {q:.6g})", m.sum(axis=0), stats.binom.pmf(
            np.arange(steps + 1), steps, q)),
    ]
    return _combine(components, alpha)


def fixed_size_test(mask: ArrayLike, batch: int, alpha: float = 1e-3) -> FidelityResult:
    """Fixed-size sampling: every step a uniformly random subset of exactly m of the n units (DESIGN.md 3.3).

    Exact: every row sums to m. Then each unit's count, Binomial(steps, m/n) marginally, by a chi-square
    test of the per-unit counts. The units' counts are weakly dependent (they sum to steps x m;
    correlation -1/(n-1)), so the chi-square law of the statistic is an approximation.

    Args:
        mask: (steps, units) booleans.
        batch: m, 0 <= m <= units.
        alpha: significance level in (0, 1).

    Returns:
        A FidelityResult.

    Raises:
        ValueError: on a malformed mask, a batch outside [0, units] or alpha outside (0, 1).
    """
    m = _check_mask(mask)
    steps, units = m.shape
    batch = check_count("batch", batch)
    if batch > units:
        raise ValueError(f"batch must be in [0, {units}] (the mask's units), got {batch}")
    alpha = _check_alpha(alpha)
    sizes = m.sum(axis=1)
    bad = np.nonzero(sizes != batch)[0]
    if len(bad):
        shown = ", ".join(f"step {i}: {sizes[i]}" for i in bad[:5])
        return _breach(len(bad), f"{len(bad)} of {steps} steps do not have exactly {batch} units ({shown}"
                                 f"{', ...' if len(bad) > 5 else ''})")
    if batch in (0, units):
        return FidelityResult(True, 1.0, 0.0, f"every step has exactly {batch} of {units} units (deterministic)")
    q = batch / units
    component = _chi_square(f"per-unit counts vs Binomial({steps}, {batch}/{units})", m.sum(axis=0),
                            stats.binom.pmf(np.arange(steps + 1), steps, q))
    result = _combine([component], alpha)
    return dataclasses.replace(result, detail=f"every step has exactly {batch} units; " + result.detail)


def one_pass_test(mask: ArrayLike, steps_per_pass: Optional[int] = None, scheme: str = "any",
                  alpha: float = 1e-3) -> FidelityResult:
    """One pass over the units: within each pass of k steps, every unit appears exactly once (DESIGN.md 3.9).

    Exact: every unit once per pass. Then the step each unit lands on, pooled over units and passes,
    against the uniform law on the k steps (chi-square): both random allocation (a) and a shuffled
    partition (b) put each unit in a uniformly random step. ``scheme`` adds the check that tells them
    apart, which the accounting depends on:

    * ``"random_allocation"``: steps are chosen independently, so per-step counts follow
      Binomial(units, 1/k) (chi-square; within a pass they are multinomial, so approximate);
    * ``"partition"``: every step of a pass holds floor(units/k) or ceil(units/k) units (exact).

    Args:
        mask: (steps, units) booleans.
        steps_per_pass: k, dividing the number of steps (default: all steps are one pass).
        scheme: ``"any"``, ``"random_allocation"`` or ``"partition"``.
        alpha: significance level in (0, 1).

    Returns:
        A FidelityResult.

    Raises:
        ValueError: on a malformed mask, a steps_per_pass that does not divide the steps, an unknown
            scheme or alpha outside (0, 1).
    """
    m = _check_mask(mask)
    steps, units = m.shape
    k = steps if steps_per_pass is None else check_count("steps_per_pass", steps_per_pass, minimum=1)
    if steps % k:
        raise ValueError(f"steps_per_pass must divide the mask's {steps} steps, got {steps_per_pass}")
    if scheme not in _SCHEMES:
        raise ValueError(f"scheme must be one of {_SCHEMES}, got {scheme!r}")
    alpha = _check_alpha(alpha)
    passes = steps // k
    blocks = m.reshape(passes, k, units)
    appearances = blocks.sum(axis=1)  # (passes, units)
    bad = np.argwhere(appearances != 1)
    if len(bad):
        shown = ", ".join(f"unit {u} in pass {p}: {appearances[p, u]} times" for p, u in bad[:5])
        return _breach(len(bad), f"{len(bad)} (pass, unit) pairs without exactly one appearance ({shown}"
                                 f"{', ...' if len(bad) > 5 else ''})")
    header = f"every unit appears once in each of {passes} passes of {k} steps"
    if k == 1:
        return FidelityResult(True, 1.0, 0.0, header + " (one step per pass: deterministic)")
    positions = blocks.argmax(axis=1).ravel()  # the step of each (pass, unit)
    components = [_chi_square(f"steps of the units vs uniform on {k}", positions, np.full(k, 1.0 / k))]
    sizes = blocks.sum(axis=2).ravel()  # (passes x k,) units per step
    if scheme == "partition":
        low, high = units // k, -(-units // k)
        wrong = int(np.count_nonzero((sizes < low) | (sizes > high)))
        if wrong:
            held = low if low == high else f"{low}-{high}"
            return _breach(wrong, f"{header}; {wrong} steps do not hold {held} units (not a partition)")
        header += f"; every step holds {low if low == high else f'{low}-{high}'} units"
    elif scheme == "random_allocation":
        components.append(_chi_square(f"per-step counts vs Binomial({units}, 1/{k})", sizes,
                                      stats.binom.pmf(np.arange(units + 1), units, 1.0 / k)))
    result = _combine(components, alpha)
    return dataclasses.replace(result, detail=header + "; " + result.detail)


def episodic_multiplicity_test(counts: ArrayLike, episodes: int, eta: float, alpha: float = 1e-3) -> FidelityResult:
    """Episodic sampling seen from one record: the number of a step's L episodes that contain it is
    K ~ Binomial(L, eta), independently over steps (DESIGN.md 3.7).

    Components: the histogram of K against Binomial(L, eta) (chi-square, tail bins pooled to expected
    counts >= 5) and the total against Binomial(steps x L, eta) (exact). A sampler that counts the
    record at most once per step, K in {0, 1}, fails both once the sample shows K >= 2 should occur.

    Args:
        counts: (steps,) integers in [0, L], the record's episode count in each step.
        episodes: L >= 1.
        eta: the per-episode inclusion probability, in [0, 1] (0 and 1 are checked exactly).
        alpha: significance level in (0, 1).

    Returns:
        A FidelityResult (failed, p-value 0, if a count lies outside [0, L]).

    Raises:
        ValueError: on non-integer or non-1-d counts, L < 1, eta outside [0, 1] or alpha outside (0, 1).
    """
    c = np.asarray(counts)
    if c.ndim != 1 or c.size == 0:
        raise ValueError(f"counts must be a non-empty 1-d array, got shape {c.shape}")
    if not np.issubdtype(c.dtype, np.integer):
        if not np.issubdtype(c.dtype, np.floating) or not np.all(np.isfinite(c)) or np.any(c != np.floor(c)):
            raise ValueError(f"counts must be integers, got dtype {c.dtype}")
        c = c.astype(np.int64)
    L = check_count("episodes", episodes, minimum=1)
    eta = check_probability("eta", eta)
    alpha = _check_alpha(alpha)
    outside = int(np.count_nonzero((c < 0) | (c > L)))
    if outside:
        return _breach(outside, f"{outside} counts outside [0, {L}]")
    if eta in (0.0, 1.0):
        return _degenerate(c, L if eta == 1.0 else 0, f"episode counts at eta {eta:g}")
    components = [
        _chi_square(f"episode counts vs Binomial({L}, {eta:.6g})", c, stats.binom.pmf(np.arange(L + 1), L, eta)),
        _binomial_total("total appearances", int(c.sum()), c.size * L, eta),
    ]
    return _combine(components, alpha)
