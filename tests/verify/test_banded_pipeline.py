"""The audit of banded correlated noise (metadp.verify.banded_pipeline): the correlated mechanism, its noise
streamed as the trainer streams it, against the plan's certified claim; a run with less noise than the plan's
is flagged. Oracle for the statistic: under the true claim, S is N(mu^2 / 2, mu^2) with mu = ||C s|| / z."""

import json

import numpy as np
import pytest

from metadp.cli import main
from metadp.plan import Plan
from metadp.verify.audit import audit
from metadp.verify.banded_pipeline import banded_pipeline
from metadp.verify.claims import accountant_profile, tightest_accountant


def _plan(sampling, steps=32, z=8.0, bands=4):
    return Plan.from_dict({"name": "banded audit", "unit": "task", "delta": 1e-6, "steps": steps,
                           "sampling": sampling, "noise": {"mechanism": "gaussian", "multiplier": z,
                                                           "correlation": "banded", "bands": bands}})


def _claim(plan):
    view = plan.units()[0]
    return accountant_profile(tightest_accountant(view.events[0], view.steps, relation=view.relation))


def test_the_statistic_is_the_claimed_gaussian():
    plan = _plan({"scheme": "none"})
    mu = 1.0 / plan.units()[0].events[0].noise_multiplier  # the view's Gaussian: multiplier z / Delta
    rng = np.random.default_rng(3)
    d, d_prime = (banded_pipeline(plan).sample_d(100_000, rng), banded_pipeline(plan).sample_d_prime(100_000, rng))
    for sample, mean in ((d, mu**2 / 2), (d_prime, -mu**2 / 2)):
        assert abs(sample.mean() - mean) < 5 * mu / np.sqrt(len(sample))
        assert abs(sample.std() / mu - 1) < 0.02


@pytest.mark.parametrize("sampling", [{"scheme": "none"}, {"scheme": "min_separation", "participations": 3,
                                                            "separation": 8},
                                      {"scheme": "cyclic_poisson", "rate": 0.3, "groups": 4}])
def test_a_true_claim_is_consistent_and_less_noise_is_flagged(sampling):
    plan = _plan(sampling, z=8.0 if sampling["scheme"] != "cyclic_poisson" else 1.0)
    eps = np.array([0.5, 1.0, 2.0])
    right = banded_pipeline(plan)
    result = audit(right.sample_d, right.sample_d_prime, _claim(plan), eps, n=100_000, rng=1)
    assert result.verdict != "VIOLATION"
    wrong = banded_pipeline(plan, noise_factor=0.6)  # the noise streamed 40% below the plan's
    result = audit(wrong.sample_d, wrong.sample_d_prime, _claim(plan), eps, n=100_000, rng=2)
    assert result.verdict == "VIOLATION"


def test_metadp_verify_plan_audits_a_banded_plan(tmp_path, capsys):
    path = tmp_path / "banded.toml"
    path.write_text('unit = "task"\ndelta = 1e-6\nsteps = 32\n[sampling]\nscheme = "none"\n[noise]\n'
                    'mechanism = "gaussian"\nmultiplier = 8.0\ncorrelation = "banded"\nbands = 4\n')
    code = main(["verify", "plan", str(path), "--samples", "100000", "--quiet", "--json"])
    out = json.loads(capsys.readouterr().out)
    assert code == 0 and out["verdict"] == "consistent"
    assert "banded correlated noise (4 band(s), z = 8, streamed as the trainer streams it)" in out["description"]
