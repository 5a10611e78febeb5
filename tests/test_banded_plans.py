"""Plans with banded correlated noise (DP-FTRL BandMF, issue 34) and the participation schemes they run under
(metadp.sampling.participation, metadp.banded_noise).

Oracles:
* bands = 1 is DP-SGD with independent noise under the same participation: the same certified interval;
* without amplification the plan is one Gaussian with the strategy's sensitivity: its epsilon equals the mu-GDP
  closed form (Dong, Roth & Su 2022, Cor. 2.13) at mu = Delta / z, with Delta computed densely from C;
* cyclic Poisson: one pass is one Poisson-subsampled Gaussian with multiplier z / ||c|| (Choquette-Choo et al.
  2023, Thm. 4), checked against dp-accounting's PLD of that mechanism.
"""

import math

import numpy as np
import pytest

from metadp.accounting._pld_gaussian import gaussian_epsilon_bounds
from metadp.cli import main
from metadp.mechanisms.banded import sensitivity_every_step, sensitivity_min_separation
from metadp.mechanisms.banded_opt import banded_toeplitz
from metadp.plan import Plan, plan_epsilon
from metadp.banded_noise import banded_coefficients, every_step_sensitivity


def _plan(sampling, steps=64, z=2.0, bands=None, delta=1e-6, unit="task"):
    noise = {"mechanism": "gaussian", "multiplier": z}
    if bands is not None:
        noise.update(correlation="banded", bands=bands)
    return Plan.from_dict({"name": "banded", "unit": unit, "delta": delta, "steps": steps, "sampling": sampling,
                           "noise": noise, "accountant": "pld"})


CYCLIC = {"scheme": "cyclic_poisson", "rate": 0.05, "groups": 4}


@pytest.mark.parametrize("sampling", [{"scheme": "none"}, {"scheme": "min_separation", "participations": 5,
                                                            "separation": 8}, dict(CYCLIC, groups=1)])
def test_one_band_is_dp_sgd_with_independent_noise(sampling):
    banded, independent = plan_epsilon(_plan(sampling, bands=1)), plan_epsilon(_plan(sampling))
    assert banded.epsilon == pytest.approx(independent.epsilon, rel=1e-9)
    assert banded.epsilon_lower == pytest.approx(independent.epsilon_lower, rel=1e-9)


def test_cyclic_poisson_with_one_group_is_poisson_sampling():
    cyclic = plan_epsilon(_plan(dict(CYCLIC, groups=1)))
    poisson = plan_epsilon(_plan({"scheme": "poisson", "rate": 0.05}))
    assert (cyclic.epsilon, cyclic.epsilon_lower) == (poisson.epsilon, poisson.epsilon_lower)


def test_o_b2_every_step_sensitivity_equals_the_dense_one():
    for n, b in [(40, 4), (64, 8), (7, 8)]:
        c = banded_coefficients(max(n, b), b)  # (7, 8): fewer steps than bands, the dense branch
        fast, _ = every_step_sensitivity(c, n)
        assert fast == pytest.approx(sensitivity_every_step(banded_toeplitz(np.array(c), n)), rel=1e-12)


@pytest.mark.parametrize("sampling", [{"scheme": "none"}, {"scheme": "min_separation", "participations": 3,
                                                            "separation": 4}])
def test_without_amplification_the_plan_is_the_gaussian_of_its_sensitivity(sampling):
    n, b, z = 64, 8, 6.0
    report = plan_epsilon(_plan(sampling, steps=n, z=z, bands=b))
    C = banded_toeplitz(np.array(banded_coefficients(n, b)), n)
    dense = (sensitivity_every_step(C) if sampling["scheme"] == "none"
             else sensitivity_min_separation(C, 3, 4))
    low, high = gaussian_epsilon_bounds((dense / z, 0.0), 1e-6)
    assert report.epsilon == pytest.approx(high, rel=1e-6) and report.epsilon >= low
    assert "banded correlated Gaussian noise" in " ".join(report.assumptions)


def test_separated_participations_cost_what_independent_noise_costs_and_every_step_costs_more():
    # separation >= bands: a unit's columns never overlap, sensitivity sqrt(k) exactly, as with independent noise
    # (BandMF then only lowers the error); every step: the columns overlap, ||C 1|| > sqrt(n) for c >= 0
    separated = {"scheme": "min_separation", "participations": 4, "separation": 16}
    banded, independent = plan_epsilon(_plan(separated, z=4.0, bands=8)), plan_epsilon(_plan(separated, z=4.0))
    assert banded.epsilon == pytest.approx(independent.epsilon, rel=1e-9) and banded.epsilon_lower > 0
    delta_c, exact = every_step_sensitivity(banded_coefficients(64, 8), 64)
    assert exact and delta_c > 8.0  # sqrt(64) = 8: single-participation strategies do not suit every-step use
    every = plan_epsilon(_plan({"scheme": "none"}, z=40.0, bands=8))
    low, high = gaussian_epsilon_bounds((delta_c / 40.0, 0.0), 1e-6)
    assert every.epsilon_lower == pytest.approx(low, rel=1e-9) and every.epsilon == pytest.approx(high, rel=1e-6)


def test_cyclic_poisson_one_pass_agrees_with_dp_accounting():
    pytest.importorskip("dp_accounting")
    from dp_accounting.pld import privacy_loss_distribution as pld_module

    b, z = 4, 1.0
    report = plan_epsilon(_plan(dict(CYCLIC, groups=b), steps=b, z=z, bands=b, delta=1e-5))
    zeta = float(np.linalg.norm(banded_coefficients(b, b)))
    theirs = pld_module.from_gaussian_mechanism(z / zeta, sampling_prob=0.05, value_discretization_interval=1e-4)
    eps = theirs.get_epsilon_for_delta(1e-5)  # pessimistic: at least the truth
    assert report.epsilon_lower <= eps * (1 + 1e-3) and report.epsilon == pytest.approx(eps, rel=5e-3)


def test_cyclic_poisson_lower_end_counts_only_the_participations_with_full_columns():
    # 10 steps, 4 groups and bands: group 0 joins steps 0, 4, 8; step 8's column is cut at row 9 (2 of 4 rows)
    report = plan_epsilon(_plan(dict(CYCLIC), steps=10, z=1.0, bands=4, delta=1e-5))
    two = plan_epsilon(_plan(dict(CYCLIC), steps=8, z=1.0, bands=4, delta=1e-5))
    assert report.epsilon_lower == pytest.approx(two.epsilon_lower, rel=1e-9) and report.epsilon_lower < report.epsilon
    assert any("full columns" in note for note in report.warnings)  # the accountant's notes travel as warnings


def test_refusals_name_the_key():
    with pytest.raises(ValueError, match="exceeds sampling.groups"):
        _plan(dict(CYCLIC, groups=2), bands=4)
    with pytest.raises(ValueError, match="noise.correlation = 'banded' is certified with sampling.scheme"):
        _plan({"scheme": "poisson", "rate": 0.1}, bands=4)
    with pytest.raises(ValueError, match="noise.bands applies to noise.correlation = 'banded'"):
        Plan.from_dict({"name": "x", "unit": "task", "delta": 1e-6, "steps": 4, "sampling": {"scheme": "none"},
                        "noise": {"mechanism": "gaussian", "multiplier": 1.0, "bands": 2}})
    with pytest.raises(ValueError, match="sampling.groups is required"):
        _plan({"scheme": "cyclic_poisson", "rate": 0.1})
    with pytest.raises(ValueError, match="sampling.participations is required"):
        _plan({"scheme": "min_separation"})
    with pytest.raises(ValueError, match="relation must be"):
        Plan.from_dict({"name": "x", "unit": "task", "delta": 1e-6, "steps": 4, "relation": "substitute",
                        "sampling": dict(CYCLIC), "noise": {"mechanism": "gaussian", "multiplier": 1.0}})


def test_the_example_plans_print_and_cite(capsys):
    from pathlib import Path

    root = Path(__file__).resolve().parents[1] / "examples"
    for name in ("dp_fedmeta_bandmf_cyclic.toml", "dp_fedmeta_bandmf_min_separation.toml"):
        assert main(["plan", str(root / name), "--no-risk"]) == 0
        out = capsys.readouterr().out
        assert "banded correlated noise" in out and "choquette2023amplified" in out and "C is the 1,000 x 1,000" in out
        assert main(["cite", str(root / name), "--no-risk"]) == 0
        assert "Choquette-Choo" in capsys.readouterr().out


def test_one_pass_min_separation_with_independent_noise_composes_its_participations():
    report = plan_epsilon(_plan({"scheme": "min_separation", "participations": 4, "separation": 16}, z=2.0))
    low, high = gaussian_epsilon_bounds((math.sqrt(4) / 2.0, 0.0), 1e-6)
    assert report.epsilon == pytest.approx(high, rel=1e-6)


def test_the_report_states_the_error_beside_independent_noise_at_the_same_epsilon():
    from metadp.banded_noise import error_ratio
    from metadp.mechanisms.banded import MinSeparation as Pattern, SingleParticipation, prefix_workload
    from metadp.mechanisms.banded_opt import dpsgd_error, error

    assert error_ratio((1.0,), 50, SingleParticipation()) == (pytest.approx(1.0, rel=1e-12), 50)  # b = 1: DP-SGD
    c = banded_coefficients(200, 8)
    ratio, n = error_ratio(c, 200, Pattern(3, 16))
    A = prefix_workload(200)  # dense oracle: the same strategy and pattern, errors at noise multiplier 1
    expected = error(A, banded_toeplitz(np.array(c), 200), Pattern(3, 16)) / dpsgd_error(A, Pattern(3, 16))
    assert n == 200 and ratio == pytest.approx(expected, rel=1e-12) and ratio < 0.5
    report = plan_epsilon(_plan({"scheme": "min_separation", "participations": 3, "separation": 16}, steps=200,
                                bands=8))
    assert f"{ratio:.3g} x that of independent noise at the same epsilon" in " ".join(report.assumptions)


def test_the_attack_risk_has_no_lower_end_where_the_epsilon_has_none():
    from metadp.plan_risk import with_risk

    # separation 4 < 8 bands: the sensitivity is only a bound, so neither lower end is the mechanism's
    plan = _plan({"scheme": "min_separation", "participations": 3, "separation": 4}, z=6.0, bands=8)
    report = with_risk(plan_epsilon(plan), plan)
    assert report.epsilon_lower == 0.0 and report.risk["tpr_lower"] is None and report.risk["tpr"][0] > 1e-3
    exact = _plan({"scheme": "min_separation", "participations": 3, "separation": 8}, z=6.0, bands=8)
    assert with_risk(plan_epsilon(exact), exact).risk["tpr_lower"] is not None


def test_the_cyclic_risk_lower_end_is_that_of_the_participations_with_full_columns():
    from metadp.banded_noise import banded_lower
    from metadp.plan_risk import view_risk, with_risk

    plan = _plan(dict(CYCLIC), steps=10, z=1.0, bands=4, delta=1e-5)  # group 0: steps 0, 4 whole, 8 cut
    (event, count), note = banded_lower(plan)
    assert count == 2 and "full columns" in note
    risk = with_risk(plan_epsilon(plan), plan).risk
    attained = view_risk((event,), count, "add_remove", "pld")
    assert risk["tpr_lower"] == pytest.approx(attained["tpr_lower"], rel=1e-12)
    assert all(lo <= up for lo, up in zip(risk["tpr_lower"], risk["tpr"]))
    whole = _plan(dict(CYCLIC), steps=8, z=1.0, bands=4, delta=1e-5)  # both of group 0's columns whole: no note
    assert banded_lower(whole)[0][1] == 2 and banded_lower(whole)[1] is None


def test_a_momentum_workload_changes_c_and_its_error_not_a_min_separation_epsilon():
    from metadp.banded_noise import error_ratio, workload
    from metadp.mechanisms.banded import MinSeparation as Pattern
    from metadp.mechanisms.banded_opt import error

    sampling = {"scheme": "min_separation", "participations": 3, "separation": 8}
    plain = _plan(sampling, bands=4)
    table = {"name": "m", "unit": "task", "delta": 1e-6, "steps": 64, "sampling": sampling, "accountant": "pld",
             "noise": {"mechanism": "gaussian", "multiplier": 2.0, "correlation": "banded", "bands": 4,
                       "momentum": 0.9}}
    momentum = Plan.from_dict(table)
    c_m, c_p = banded_coefficients(64, 4, 0.9), banded_coefficients(64, 4)
    assert max(abs(a - b) for a, b in zip(c_m, c_p)) > 1e-3
    # separation >= bands: sensitivity sqrt(k) ||c|| for any unit-norm c, so the same epsilon
    assert plan_epsilon(momentum).epsilon == pytest.approx(plan_epsilon(plain).epsilon, rel=1e-9)
    A, pattern = workload(64, 0.9), Pattern(3, 8)
    assert error(A, banded_toeplitz(np.asarray(c_m), 64), pattern) <= error(A, banded_toeplitz(np.asarray(c_p), 64),
                                                                           pattern) * (1 + 1e-9)
    assert error_ratio(c_m, 64, pattern, 0.9)[0] < 1.0  # better than independent noise on its own workload
    text = momentum.units()[0].reason
    assert "momentum-0.9 SGD workload" in text and "momentum-0.9 SGD iterates" in text
    for bad, words in [({"momentum": 1.0}, "noise.momentum"), ({"correlation": "independent", "momentum": 0.5},
                                                                 "applies to noise.correlation")]:
        noise = dict(table["noise"], **bad)
        if noise["correlation"] == "independent":
            noise.pop("bands")
        with pytest.raises(ValueError, match=words):
            Plan.from_dict(dict(table, noise=noise))
