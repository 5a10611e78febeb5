"""Empirical audit (metadp/verify/audit.py): Clopper-Pearson bounds, negative and positive controls.

Negative controls audit a mechanism against its own exact profile (the claim is true, so a VIOLATION
is a false alarm, probability <= alpha per audit by the Bonferroni argument in the module docstring).
Positive controls audit a mechanism with 20% less noise than claimed. True profiles come from the
closed forms in metadp.mechanisms (Gaussian: Balle & Wang 2018; Laplace and randomized response:
the module docstrings there).
"""

from __future__ import annotations

import json
import sys

import mpmath as mp
import numpy as np
import pytest
from scipy import optimize, stats

from metadp.mechanisms.gaussian import GaussianMixturePair, gaussian_pair, poisson_gaussian_pairs
from metadp.mechanisms.laplace import LaplacePair
from metadp.mechanisms.randomized_response import RandomizedResponsePair
from metadp.verify.audit import AuditResult, _count, audit, audit_pair, cp_lower, cp_upper
from metadp.verify.plot import plot_audit

ALPHA = 0.01
GAUSS_EPS = [0.25, 0.5, 1.0, 2.0]
LAPLACE_EPS = [0.25, 0.5, 1.0, 1.5]  # b = 1: eps0 = 1, the claim is 0 at eps >= 1


def _max_profile(*pairs):
    return lambda e: np.max([p.profile(e) for p in pairs], axis=0)


def _poisson():
    add, remove = poisson_gaussian_pairs(0.1, 1.0)
    return add, _max_profile(add, remove)


def _mixture():
    args = ([0.5, 0.3, 0.2], [0.0, 1.0, 2.0], 1.0)
    add, remove = GaussianMixturePair(*args, "add"), GaussianMixturePair(*args, "remove")
    return add, _max_profile(add, remove)


NEGATIVE = {  # name -> (true pair sampled as (D, D'), claimed profile = the truth, eps grid)
    "gaussian": lambda: (gaussian_pair(1.0), gaussian_pair(1.0).profile, GAUSS_EPS),
    "laplace": lambda: (LaplacePair(1.0), LaplacePair(1.0).profile, LAPLACE_EPS),
    "poisson_gaussian": lambda: (*_poisson(), GAUSS_EPS),
    "gaussian_mixture": lambda: (*_mixture(), GAUSS_EPS),
}


# -- Clopper-Pearson ---------------------------------------------------------------------------

@pytest.mark.parametrize("n", [1, 7, 100, 10_000])
def test_clopper_pearson_matches_binomtest(n):
    # two-sided exact interval at confidence 1 - 2a has each one-sided bound at level a; binomtest
    # finds it by root-finding (to ~1e-9 relative: 5.01241619056e-05 vs mpmath's 5.01241619777e-05 at
    # n = 100, k = 1), so the tight check is against mpmath below
    level = 0.005
    for k in sorted({0, 1, n // 3, n - 1, n}):
        ci = stats.binomtest(k, n).proportion_ci(confidence_level=1 - 2 * level, method="exact")
        assert cp_lower(k, n, level) == pytest.approx(ci.low, rel=1e-7, abs=1e-300)
        assert cp_upper(k, n, level) == pytest.approx(ci.high, rel=1e-7, abs=1e-300)


@pytest.mark.parametrize("n,k,level", [(100, 1, 0.005), (10_000, 3, 1e-8), (10_000, 9_990, 1e-3), (50, 25, 0.2)])
@mp.workdps(40)
def test_clopper_pearson_against_mpmath(n, k, level):
    def root(f, guess):  # bracketing solver around our value: the secant default stalls near p = 1
        return mp.findroot(f, (guess * (1 - 1e-6), min(1.0, guess * (1 + 1e-6))), solver="anderson")

    lower = root(lambda p: mp.betainc(k, n - k + 1, 0, p, regularized=True) - level, float(cp_lower(k, n, level)))
    upper = root(lambda p: mp.betainc(k + 1, n - k, p, 1, regularized=True) - level, float(cp_upper(k, n, level)))
    assert float(cp_lower(k, n, level)) == pytest.approx(float(lower), rel=1e-12)
    assert float(cp_upper(k, n, level)) == pytest.approx(float(upper), rel=1e-12)


def test_clopper_pearson_defining_tail_equations():
    # p_L solves Pr[Bin(n, p_L) >= k] = a; q_U solves Pr[Bin(n, q_U) <= k] = a, down to tiny levels
    n = 5000
    for level in (0.05, 1e-6, 1e-30):
        for k in (1, 17, 2500, 4999):
            p_lo, q_up = float(cp_lower(k, n, level)), float(cp_upper(k, n, level))
            assert stats.binom.sf(k - 1, n, p_lo) == pytest.approx(level, rel=1e-6)
            assert stats.binom.cdf(k, n, q_up) == pytest.approx(level, rel=1e-6)
    assert cp_lower(0, n, 1e-3) == 0.0 and cp_upper(n, n, 1e-3) == 1.0
    assert cp_upper(0, n, 1e-3) == pytest.approx(1 - 1e-3 ** (1 / n), rel=1e-10)  # closed form at k = 0


def test_clopper_pearson_coverage_is_at_least_one_minus_level():
    rng = np.random.default_rng(7)
    n, p, level = 200, 0.03, 0.05
    k = rng.binomial(n, p, size=20_000)
    assert np.mean(cp_lower(k, n, level) > p) <= level
    assert np.mean(cp_upper(k, n, level) < p) <= level


# -- negative controls: the claim is the truth -------------------------------------------------

def _false_alarms(name, audits, n, seed):
    pair, claim, eps = NEGATIVE[name]()
    rng = np.random.default_rng(seed)
    results = [audit_pair(pair, claim, eps, n=n, alpha=ALPHA, rng=rng) for _ in range(audits)]
    for r in results:  # the bounds also sit below the truth (all rows, not only the verdict)
        assert all(row.delta_lower <= row.claimed + 1e-12 or r.verdict == "VIOLATION" for row in r.rows)
    return sum(r.verdict == "VIOLATION" for r in results), results


@pytest.mark.parametrize("name", sorted(NEGATIVE))
def test_negative_controls_no_false_alarm(name):
    alarms, results = _false_alarms(name, audits=20, n=200_000, seed=2024)
    assert alarms == 0
    # the audits are not vacuous: at the smallest eps the bound comes close to the (true) claim
    closest = max(r.rows[0].delta_lower / r.rows[0].claimed for r in results)
    assert closest > 0.6


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(NEGATIVE))
def test_negative_controls_no_false_alarm_large(name):
    alarms, _ = _false_alarms(name, audits=100, n=1_000_000, seed=99)
    assert alarms <= 1  # expected <= 1 at alpha = 0.01; observed 0 (see the module docstring)


def test_negative_control_with_separate_reverse_claim():
    add, remove = poisson_gaussian_pairs(0.1, 1.0)
    r = audit_pair(add, add.profile, GAUSS_EPS, claimed_profile_reverse=remove.profile, n=200_000, rng=5)
    assert r.verdict == "consistent"
    for t in r.tests:
        truth = add.profile(t.epsilon) if t.direction == "D||D'" else remove.profile(t.epsilon)
        assert t.claimed == pytest.approx(float(truth), rel=1e-12)


def test_zero_claim_beyond_pure_dp_is_never_exceeded():
    # Laplace b = 1 is pure 1-DP: at eps = 1.5 every event has P(E) <= e^eps Q(E), so delta_L is 0
    r = audit_pair(LaplacePair(1.0), LaplacePair(1.0).profile, [1.5], n=200_000, rng=3, tests_per_epsilon=4)
    assert r.verdict == "consistent" and all(t.delta_lower == 0.0 for t in r.tests)


# -- positive controls: 20% less noise than claimed --------------------------------------------

def test_gaussian_20_percent_less_noise_is_flagged():
    claimed, true = gaussian_pair(1.0), gaussian_pair(0.8)
    r = audit_pair(true, claimed.profile, [0.5, 1.0, 2.0], n=200_000, rng=11)
    assert r.verdict == "VIOLATION"
    for row in r.rows:
        assert row.delta_lower > row.claimed and row.p_value < ALPHA
        assert row.delta_lower <= float(true.profile(row.epsilon))  # a lower bound on the truth
    # delta_L at eps = 1: truth 0.2209 (mu = 1.25 GDP), claim 0.1269 (mu = 1)
    assert r.rows[1].delta_lower > 0.2
    # implied epsilon at delta = 0.05: between the claim's eps(0.05) and the truth's
    eps_claim, eps_true = _epsilon_of(claimed, 0.05), _epsilon_of(true, 0.05)
    assert eps_claim < r.epsilon_lower(0.05) <= eps_true


def _epsilon_of(pair, delta):
    return optimize.brentq(lambda e: float(pair.profile(e)) - delta, 0.0, 50.0, xtol=1e-12)


def test_laplace_20_percent_smaller_scale_is_flagged():
    # claim b = 1 (pure 1-DP); truth b = 0.8 (eps0 = 1.25): delta(1) = 1 - e^{-0.125} = 0.1175 > 0 = claim
    true = LaplacePair(0.8)
    r = audit_pair(true, LaplacePair(1.0).profile, LAPLACE_EPS, n=200_000, rng=12)
    assert r.verdict == "VIOLATION"
    by_eps = {row.epsilon: row for row in r.rows}
    assert by_eps[1.5].margin <= 0.0  # truth is 1.25-DP: nothing to find at eps = 1.5
    assert by_eps[1.0].delta_lower > 0.1 and by_eps[1.0].claimed == 0.0
    for row in r.rows:
        assert row.delta_lower <= float(true.profile(row.epsilon))
    assert 1.0 < r.epsilon_lower(0.0) <= 1.25  # pure eps lower bound between the claim and the truth


def test_discrete_outputs_randomized_response():
    true, claimed = RandomizedResponsePair.from_epsilon(1.5), RandomizedResponsePair.from_epsilon(1.0)
    good = audit_pair(claimed, claimed.profile, [0.0, 0.5], n=100_000, rng=1)
    bad = audit_pair(true, claimed.profile, [0.0, 0.5, 1.0], n=100_000, rng=1)
    assert good.verdict == "consistent" and bad.verdict == "VIOLATION"
    assert {t.threshold for t in bad.tests} <= {0.0, 1.0}  # events are {x > 0} = {1}, {x < 1} = {0}


# -- result object, determinism, chunking ------------------------------------------------------

def test_result_is_deterministic_for_a_seed_and_serialisable():
    pair = gaussian_pair(0.9)
    a = audit_pair(pair, gaussian_pair(1.0).profile, [0.5, 1.0], n=50_000, rng=np.random.default_rng(4))
    b = audit_pair(pair, gaussian_pair(1.0).profile, [0.5, 1.0], n=50_000, rng=4)
    assert a == b and isinstance(a, AuditResult)
    d = json.loads(json.dumps(a.to_dict()))
    assert d["verdict"] == a.verdict and len(d["rows"]) == 2 and d["worst_margin"] == a.worst_margin
    table = a.to_table()
    assert "delta_L" in table and "lower confidence bound" in table and len(table.splitlines()) == 4


def test_p_values_agree_with_verdict():
    for z, seed in ((0.93, 1), (0.97, 2), (1.0, 3)):
        r = audit_pair(gaussian_pair(z), gaussian_pair(1.0).profile, [0.5, 1.0, 2.0], n=100_000, rng=seed)
        for row in r.rows:
            assert (row.margin > 0) == (row.p_value <= ALPHA * (1 + 1e-6))
            assert 0.0 <= row.p_value <= 1.0
        assert r.level == ALPHA / (2 * len(r.tests))


def test_chunks_and_progress():
    calls = []
    r = audit_pair(gaussian_pair(1.0), gaussian_pair(1.0).profile, [1.0], n=10_001, chunk=1000,
                   rng=0, progress=lambda done, total: calls.append((done, total)))
    assert calls[-1] == (10_001, 10_001) and len(calls) == 11
    assert all(a[0] < b[0] for a, b in zip(calls, calls[1:]))
    assert r.n == 10_001 and r.n_explore == 1000


def test_all_four_tests_per_epsilon():
    eps = np.linspace(0.1, 2.0, 8)
    r = audit_pair(gaussian_pair(1.0), gaussian_pair(1.0).profile, eps, n=20_000, tests_per_epsilon=4, rng=8)
    assert len(r.tests) == 32 and r.verdict == "consistent"
    assert {(t.direction, t.orientation) for t in r.tests} == {
        ("D||D'", ">"), ("D||D'", "<"), ("D'||D", ">"), ("D'||D", "<")}


def test_counting_by_comparison_and_by_sorting_agree():
    # small event sets are counted by comparisons, large ones on the sorted chunk; ties included
    rng = np.random.default_rng(0)
    x = np.round(rng.standard_normal(5000), 1)
    t = np.round(rng.standard_normal(40), 1)
    gt_direct, lt_direct = _count(x, t[:5], t[5:10])
    gt_sorted, lt_sorted = _count(x, t[:20], t[20:])
    assert np.array_equal(gt_direct, [np.sum(x > v) for v in t[:5]])
    assert np.array_equal(lt_direct, [np.sum(x < v) for v in t[5:10]])
    assert np.array_equal(gt_sorted, [np.sum(x > v) for v in t[:20]])
    assert np.array_equal(lt_sorted, [np.sum(x < v) for v in t[20:]])


@pytest.mark.slow
def test_ten_million_samples_under_ten_seconds():
    import time

    start = time.perf_counter()
    r = audit_pair(gaussian_pair(1.0), gaussian_pair(1.0).profile, [0.5, 1.0, 2.0], n=10_000_000, rng=0)
    assert time.perf_counter() - start < 10.0 and r.verdict == "consistent"


# -- invalid inputs ----------------------------------------------------------------------------

def _normal(k, rng):
    return rng.standard_normal(k)


@pytest.mark.parametrize("kwargs", [
    {"epsilons": []}, {"epsilons": [-0.1]}, {"epsilons": [float("nan")]}, {"epsilons": [1.0, 1.0]},
    {"epsilons": [1e4]}, {"n": 0}, {"n": 2.5}, {"n_explore": 0}, {"alpha": 0.0}, {"alpha": 1.0},
    {"tests_per_epsilon": 0}, {"tests_per_epsilon": 5}, {"chunk": 0}, {"rng": "seed"},
    {"progress": 3}, {"claimed_profile": 0.1}, {"claimed_profile": lambda e: np.full_like(e, 1.5)},
    {"claimed_profile": lambda e: np.zeros(7)}, {"claimed_profile_reverse": lambda e: -e},
    {"sample_d": lambda k, rng: rng.standard_normal(k + 1)},
    {"sample_d_prime": lambda k, rng: np.full(k, np.nan)}, {"sample_d": None},
])
def test_invalid_inputs_raise(kwargs):
    args = {"sample_d": _normal, "sample_d_prime": _normal, "claimed_profile": gaussian_pair(1.0).profile,
            "epsilons": [1.0], "n": 1000, "rng": 0}
    args.update(kwargs)
    with pytest.raises(ValueError):
        audit(args.pop("sample_d"), args.pop("sample_d_prime"), args.pop("claimed_profile"),
              args.pop("epsilons"), **args)


def test_invalid_pair_and_delta():
    with pytest.raises(ValueError):
        audit_pair(lambda k, rng: rng.standard_normal(k), gaussian_pair(1.0).profile, [1.0])
    r = audit_pair(gaussian_pair(1.0), gaussian_pair(1.0), [1.0], n=1000, rng=0)  # a pair as the claim
    for delta in (-0.1, 1.0, float("nan")):
        with pytest.raises(ValueError):
            r.epsilon_lower(delta)


# -- plot --------------------------------------------------------------------------------------

def test_plot_writes_png_and_svg(tmp_path):
    pytest.importorskip("matplotlib")
    r = audit_pair(gaussian_pair(0.8), gaussian_pair(1.0).profile, [0.5, 1.0, 2.0, 6.0], n=20_000, rng=2)
    for suffix, magic in ((".png", b"\x89PNG"), (".svg", b"<?xml")):
        out = plot_audit(r, tmp_path / f"audit{suffix}")
        assert out.read_bytes().startswith(magic)
    with pytest.raises(ValueError):
        plot_audit(r, tmp_path / "audit.pdf")
    with pytest.raises(ValueError):
        plot_audit(r.to_dict(), tmp_path / "audit.png")


def test_plot_without_matplotlib_says_how_to_install(tmp_path, monkeypatch):
    r = audit_pair(gaussian_pair(1.0), gaussian_pair(1.0).profile, [1.0], n=1000, rng=0)
    monkeypatch.setitem(sys.modules, "matplotlib.figure", None)
    monkeypatch.setitem(sys.modules, "matplotlib.backends.backend_agg", None)
    with pytest.raises(ImportError, match=r'pip install "metadp\[plot\]"'):
        plot_audit(r, tmp_path / "audit.png")


@pytest.mark.parametrize("k, n", [(1000, 10**9), (1000, 10**10), (20, 10**9)])
def test_clopper_pearson_bounds_solve_their_binomial_tails_at_large_n(k, n):
    # scipy 1.17's beta quantile gave cp_lower(1000, 1e9, 0.0025) = 1.9e-6, above the estimate k / n
    # = 1e-6 (an overstated lower bound); each bound must solve its tail equation (mpmath, 30 digits)
    level = 0.0025
    lower, upper = float(cp_lower(k, n, level)), float(cp_upper(k, n, level))
    assert lower < k / n < upper
    with mp.workdps(30):
        tail_lower = mp.betainc(k, n - k + 1, 0, lower, regularized=True)  # Pr[Bin(n, lower) >= k]
        tail_upper = mp.betainc(k + 1, n - k, upper, 1, regularized=True)  # Pr[Bin(n, upper) <= k]
    assert abs(tail_lower / level - 1) < 1e-6 and abs(tail_upper / level - 1) < 1e-6
