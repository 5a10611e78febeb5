"""A plan's ``[release]`` (metadp.releases): what each sampled task contributes, and the guarantees that
follow, so that every training algorithm's run is a plan (issue 29). Checked against closed forms (the
composition of Gaussians is a Gaussian; its exact epsilon, Balle & Wang 2018), the views' derivation in
``metadp.releases`` and every refusal of the schema."""

from __future__ import annotations

import math

import pytest
from scipy.optimize import brentq
from scipy.stats import norm

from metadp.core import events as ev
from metadp.plan import Plan, plan_epsilon
from metadp.plan_solve import calibrate_plan, noise_keys
from metadp.releases import FORMS, Release, release_views
from metadp.sampling import BallsInBins, Poisson


def exact_gaussian_epsilon(sigma: float, delta: float) -> float:
    """The exact epsilon at ``delta`` of the Gaussian mechanism with sensitivity 1 and noise std ``sigma``
    (Balle & Wang 2018, Thm. 8): delta(eps) = Phi(1/(2 sigma) - eps sigma) - e^eps Phi(-1/(2 sigma) - eps sigma)."""
    def gap(eps):
        return norm.cdf(0.5 / sigma - eps * sigma) - math.exp(eps) * norm.cdf(-0.5 / sigma - eps * sigma) - delta
    return brentq(gap, 0.0, 500.0, xtol=1e-12)


def _plan(**top):
    d = {"name": "pool", "unit": "record", "delta": 1e-5, "steps": 40, "record_multiplicity": 2,
         "sampling": {"scheme": "balls_in_bins", "population": 200, "batch_size": 10},
         "noise": {"mechanism": "gaussian", "multiplier": 1.0}}
    d.update(top)
    return d


REPTILE = {"noise": {"mechanism": "none"}, "release": {"form": "inner_dp", "inner_steps": 4, "inner_noise": 6.0}}
AGRLR = {"release": {"form": "local_noise", "inner_steps": 3, "inner_noise": 5.0, "query_per_task": 10,
                     "first_order": True}}


def test_the_task_global_record_view_is_the_composed_gaussian_of_its_visits():
    # 40 steps of 20-step passes: 2 passes; the record is in 2 tasks, each visited once a pass: 4 visits, each
    # full-batch DP-SGD of 4 steps at z_in = 6 (a Gaussian of multiplier 6 / 2); 4 of them: multiplier 6 / 4
    plan = Plan.from_dict(_plan(**REPTILE))
    record = plan.units()[0]
    assert record.key == "record" and record.charge == "visit" and record.steps == 4
    assert record.event == ev.Gaussian(3.0)
    report = plan_epsilon(plan)
    exact = exact_gaussian_epsilon(1.5, 1e-5)
    assert exact <= report.epsilon <= exact * 1.001
    # balls in bins: a visit's Gaussian ignores the allocation's randomness, so its lower end is not the run's
    assert report.epsilon_lower is None and "no certified lower bound" in " ".join(report.warnings)
    assert "no task-level guarantee" in " ".join(report.warnings)


def test_a_visit_charge_under_poisson_sampling_counts_every_step_a_priori():
    d = _plan(sampling={"scheme": "poisson", "population": 200, "batch_size": 10}, **REPTILE)
    record = Plan.from_dict(d).units()[0]
    assert record.steps == 40 * 2 and "a-priori bound" in record.reason


def test_the_record_against_the_server_is_the_plans_unit_where_it_says_so():
    plan = Plan.from_dict(_plan(against="server", **AGRLR))
    views = {v.key: v for v in plan.units()}
    assert plan.units()[0].key == "record-vs-server" and plan.units()[0].primary
    assert set(views) == {"record-vs-server", "task", "record"}
    s = math.sqrt(3) / 5.0  # first order: max(S, 1) / z_0^2 per visit
    assert views["record-vs-server"].event == ev.Gaussian(1.0 / s) and views["record-vs-server"].steps == 4
    assert views["task"].event == ev.RandomAllocation(20, ev.Gaussian(1.0)) and views["task"].steps == 2
    report = plan_epsilon(plan)
    exact = exact_gaussian_epsilon(1.0 / (s * 2), 1e-5)  # 4 visits: multiplier (1 / s) / 2
    assert exact <= report.epsilon <= exact * 1.001
    assert "the guarantee holds against the server" in report.assumptions[0]
    assert {o.get("view", o["unit"]) for o in report.to_dict()["other_units"]} == {"task", "record"}


def test_release_views_are_the_forms_derivations():
    scheme = Poisson(0.05, 200)
    for form in FORMS:
        release = Release(form, 3, 2.0, 5, False) if form != "task_clip" else Release()
        keys = tuple(v.key for v in release_views(release, scheme, 1.5, 2))
        assert keys == release.views_keys
    sample = release_views(Release("example_clip", 3, 2.0, 5, False), scheme, 1.5, 1)
    # second order: s^2 = S / z_in^2 + (2 m / z)^2 (the support record moves the m query gradients by 2C)
    s = math.sqrt(3 / 4.0 + (2 * 5 / 1.5) ** 2)
    assert sample[0].event == ev.EpisodicSampled(1, 0.05, 1.0, ev.Gaussian(1 / s), 1.0)
    assert sample[1].event == ev.PoissonSampled(0.05, ev.Gaussian(1.5 / 5))


@pytest.mark.parametrize("top, words", [
    ({"release": {"form": "inner"}}, "release.form must be one of"),
    ({"release": {"form": "inner_dp", "inner_steps": 2}, "noise": {"mechanism": "none"}}, "needs release.inner_noise"),
    ({"release": {"form": "inner_dp", "inner_steps": 2, "inner_noise": 1.0, "query_per_task": 3},
      "noise": {"mechanism": "none"}}, "release.query_per_task does not apply"),
    ({"release": {"form": "inner_dp", "inner_steps": 2, "inner_noise": 1.0}}, "needs noise.mechanism = 'none'"),
    ({"release": {"form": "inner_dp", "inner_steps": 2, "inner_noise": 0}, "noise": {"mechanism": "none"}},
     "release.inner_noise must be"),
    ({"release": {"form": "example_clip", "inner_steps": 2, "inner_noise": 1.0, "query_per_task": 3},
      "noise": {"mechanism": "gaussian", "multiplier": 1.0, "count_noise": 5.0}}, "count_noise"),
    ({"release": {"form": "local_noise", "inner_steps": 2, "inner_noise": 1.0, "query_per_task": 3,
                  "first_order": "yes"}}, "release.first_order must be true or false"),
    ({"release": {"form": "local_noise", "inner_steps": 2, "inner_noise": 1.0, "query_per_task": 3},
      "record_multiplicity": None}, "give record_multiplicity"),
    ({"against": "server"}, "against = 'server' applies to unit = 'record' with release.form = 'local_noise'"),
    ({"against": "client"}, "against must be 'server'"),
    ({"noise": {"mechanism": "none"}, "record_multiplicity": None}, "noise.mechanism = 'none' describes a fixed pool"),
    ({"noise": {"mechanism": "gaussian", "multiplier": 1.0, "clip": "sometimes"}}, "noise.clip must be one of"),
    ({"noise": {"mechanism": "none", "multiplier": 1.0}}, "noise.multiplier applies to the gaussian mechanism"),
    ({"relation": "substitute", "sampling": {"scheme": "shuffle", "population": 200, "batch_size": 10},
      **AGRLR}, "relation must be 'add_remove' with release.form = 'local_noise'"),
])
def test_release_refusals_name_their_key(top, words):
    d = _plan(**top)
    d = {k: v for k, v in d.items() if v is not None}
    with pytest.raises(ValueError, match=words):
        Plan.from_dict(d)


def test_a_baseline_or_raw_norm_plan_certifies_nothing_and_says_why():
    baseline = plan_epsilon(Plan.from_dict(_plan(unit="task", noise={"mechanism": "none"})))
    assert math.isinf(baseline.epsilon) and "no noise: no guarantee" in baseline.assumptions[0]
    raw = Plan.from_dict(_plan(unit="task", noise={"mechanism": "gaussian", "multiplier": 1.0, "clip": "raw_norms"}))
    assert all(v.event is None and v.reason.startswith("NOT PRIVATE") for v in raw.units())
    report = plan_epsilon(raw)
    assert math.isinf(report.epsilon) and any(w.startswith("NOT PRIVATE") for w in report.warnings)
    unbounded = Plan.from_dict(_plan(noise={"mechanism": "gaussian", "multiplier": 1.0, "clip": "none"}, **{
        "release": {"form": "example_clip", "inner_steps": 2, "inner_noise": 0, "query_per_task": 3}}))
    assert all(isinstance(v.event, ev.NonPrivate) for v in unbounded.units())
    assert math.isinf(plan_epsilon(unbounded).epsilon)


@pytest.mark.parametrize("top, keys", [
    (REPTILE, ("release.inner_noise",)),
    (dict(AGRLR, against="server"), ("release.inner_noise",)),
    (dict(AGRLR, unit="task"), ("noise.multiplier",)),
    ({"release": {"form": "example_clip", "inner_steps": 2, "inner_noise": 1.0, "query_per_task": 3}},
     ("noise.multiplier", "release.inner_noise")),
    ({}, ("noise.multiplier",)),
])
def test_calibration_solves_the_noise_of_the_plans_unit(top, keys):
    d = _plan(**top)
    assert noise_keys(d) == keys
    solved = calibrate_plan(d, "noise", 2.0)
    report = plan_epsilon(solved.plan)
    assert report.epsilon <= 2.0 and report.epsilon == pytest.approx(2.0, rel=2e-3)
    if "release.inner_noise" in keys:
        assert solved.plan.release.inner_noise == solved.value
    if "noise.multiplier" in keys:
        assert solved.plan.noise.multiplier == solved.value


def test_a_release_table_loads_back():
    for release in (Release("inner_dp", 4, 6.0), Release("local_noise", 3, 5.0, 10, False),
                    Release("example_clip", 1, 0.5, 2, True)):
        assert Release.from_table(release.to_table()) == release
    assert Release().to_table() is None and BallsInBins(40, 10).plan_table()["batch_size"] == 4
