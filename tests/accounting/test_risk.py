"""Certified attack risk (metadp.accounting.risk): upper bounds on the best membership test's TPR at a FPR.

Oracles:
* mu-GDP in closed form, TPR = Phi(Phi^-1(FPR) + mu) (Dong, Roth & Su, Cor. 3.3), for plain Gaussian plans: the
  exact route equals it to 1e-6 and is never below it; the PLD-profile route, forced on the same plan, is above
  it and within 1e-5 of it;
* one Poisson-subsampled Gaussian step, whose likelihood ratio is monotone in the output: the Neyman-Pearson test
  is a threshold c, FPR = Phi(-c / z), TPR = (1 - q) FPR + q Phi((1 - c) / z), exact;
* riskcal 1.5.1 (dp-accounting's PLD, Kulynych et al.'s Algorithm 1) on a Poisson DP-SGD plan, where installed.
"""

import numpy as np
import pytest
from scipy import special

import metadp.accounting.risk as risk
from metadp.accounting import PldAccountant, RdpAccountant
from metadp.accounting.risk import FPRS, attack_risk, gaussian_tpr, tpr_from_profile
from metadp.core import events as ev


def _pld(event, count=1):
    acc = PldAccountant()
    acc.compose(event, count)
    return acc


def test_a_gaussian_plan_is_exact_mu_gdp_and_certified_above():
    r = attack_risk(_pld(ev.Gaussian(2.0), 4))  # mu = sqrt(4) / 2 = 1
    exact = gaussian_tpr(1.0, FPRS)
    assert r.method == "exact mu-GDP" and r.mu == pytest.approx(1.0, rel=1e-15)
    assert np.all(np.array(r.tpr) >= exact) and np.allclose(r.tpr, exact, rtol=0, atol=1e-6)
    assert r.advantage >= 2 * special.ndtr(0.5) - 1 and r.advantage == pytest.approx(2 * special.ndtr(0.5) - 1,
                                                                                      abs=1e-6)


def test_the_profile_route_on_a_gaussian_plan_is_above_the_exact_curve_and_close(monkeypatch):
    monkeypatch.setattr(risk, "gaussian_mu", lambda items: None)
    r = attack_risk(_pld(ev.Gaussian(2.0), 4))
    exact = gaussian_tpr(1.0, FPRS)
    assert r.method == "PLD profile"
    assert np.all(np.array(r.tpr) >= exact) and np.all(np.array(r.tpr) <= exact * (1 + 1e-5))
    assert 2 * special.ndtr(0.5) - 1 <= r.advantage <= (2 * special.ndtr(0.5) - 1) * (1 + 1e-5)


@pytest.mark.parametrize("q, z", [(0.3, 0.8), (0.01, 1.0)])
def test_one_poisson_step_matches_the_neyman_pearson_test(q, z):
    r = attack_risk(_pld(ev.PoissonSampled(q, ev.Gaussian(z))))
    a = np.array(r.fpr)
    c = z * special.ndtri(1 - a)
    exact = (1 - q) * a + q * special.ndtr((1 - c) / z)
    assert np.all(np.array(r.tpr) >= exact) and np.all(np.array(r.tpr) <= exact * (1 + 1e-4))


def test_the_rdp_route_is_valid_and_looser():
    event = ev.PoissonSampled(0.01, ev.Gaussian(1.0))
    pld = attack_risk(_pld(event, 50))
    acc = RdpAccountant()
    acc.compose(event, 50)
    rdp = attack_risk(acc)
    assert rdp.method == "RDP-implied (looser)"
    assert all(r >= p for r, p in zip(rdp.tpr, pld.tpr)) and rdp.advantage >= pld.advantage


def test_no_noise_is_no_protection_and_nothing_composed_is_none():
    assert attack_risk(_pld(ev.NonPrivate())).tpr == (1.0, 1.0, 1.0)
    nothing = attack_risk(PldAccountant())
    assert nothing.tpr == FPRS and nothing.advantage == 0.0


def test_the_bound_from_a_profile_is_the_smaller_of_the_two_inequalities():
    eps = np.array([0.0, 1.0])
    delta = np.array([0.5, 0.1])
    # e^0 0.01 + 0.5 = 0.51; e^1 0.01 + 0.1 = 0.127; 1 - e^-1 (0.99 - 0.1) = 0.673
    assert tpr_from_profile(0.01, eps, delta) == pytest.approx(np.e * 0.01 + 0.1)
    assert tpr_from_profile(0.01, eps, np.array([1.0, 1.0])) == 1.0


def test_bad_fprs_are_refused():
    with pytest.raises(ValueError, match="FPR must be in"):
        attack_risk(PldAccountant(), (0.0, 0.1))


@pytest.mark.slow  # 7 s: riskcal's own PLD of 1,000 steps
def test_poisson_dp_sgd_agrees_with_riskcal():
    pytest.importorskip("riskcal")
    from dp_accounting.pld import privacy_loss_distribution as pld_module
    from riskcal.analysis.conversions import get_beta_from_pld

    ours = attack_risk(_pld(ev.PoissonSampled(0.01, ev.Gaussian(1.0)), 1000))
    theirs = 1 - get_beta_from_pld(pld_module.from_gaussian_mechanism(
        1.0, sampling_prob=0.01, value_discretization_interval=1e-3).self_compose(1000), alpha=np.array(FPRS))
    # ours is certified (the profile's delta at the best eps is certified within 4e-5 of itself); riskcal's moves
    # by 1.4% at FPR 0.1% between discretisations 1e-3 (0.004070) and 1e-4 (0.004014); ours 0.0040685
    assert np.allclose(ours.tpr, theirs, rtol=2e-3)


def test_metadp_plan_carries_each_units_risk_in_json_and_leaves_it_out_on_request(capsys):
    import json

    from metadp.cli import main

    plan = "examples/dp_reptile_group.toml"  # a Gaussian plan without sampling: exact mu-GDP
    assert main(["plan", plan, "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["risk"]["method"] == "exact mu-GDP" and d["risk"]["fpr"] == list(FPRS) and d["risk"]["bound"] == "upper"
    assert np.allclose(d["risk"]["tpr"], gaussian_tpr(d["risk"]["mu"], FPRS), rtol=0, atol=1e-6)
    assert all(u.get("risk") is not None for u in d["other_units"])
    assert main(["plan", plan, "--json", "--no-risk"]) == 0
    assert json.loads(capsys.readouterr().out)["risk"] is None


def test_calibrating_the_noise_for_a_tpr_target_is_conservative_and_tight():
    from metadp.plan_risk import calibrate_noise_for_tpr, plan_tpr

    d = {"name": "gaussian", "unit": "record", "delta": 1e-5, "steps": 16, "sampling": {"scheme": "none"},
         "noise": {"mechanism": "gaussian", "multiplier": 1.0}}
    solved = calibrate_noise_for_tpr(d, 0.05, 0.01)
    exact = 4.0 / (special.ndtri(0.05) - special.ndtri(0.01))  # mu = sqrt(16) / z meets Phi(Phi^-1(a) + mu) = 0.05
    assert exact <= solved.value <= exact * 1.002
    assert plan_tpr(solved.plan, 0.01) <= 0.05
    with pytest.raises(ValueError, match="guessing already has TPR = FPR"):
        calibrate_noise_for_tpr(d, 0.01, 0.01)


def test_metadp_calibrate_takes_one_target(capsys):
    from metadp.cli import main

    base = ["calibrate", "--delta", "1e-5", "--sampling", "none", "--steps", "16"]
    assert main(base + ["--target-tpr", "0.05", "--at-fpr", "0.01"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("smallest noise multiplier meeting TPR <= 0.05 at FPR 0.01") and "TPR <= 0.05" in out
    assert main(base + ["--target-tpr", "0.05"]) == 2
    assert "--target-tpr and --at-fpr go together" in capsys.readouterr().err
    assert main(base + ["--target-tpr", "0.05", "--at-fpr", "0.01", "--target-epsilon", "1"]) == 2
    assert "give one target" in capsys.readouterr().err
