"""The one-run audit of sample-level DP-MAML's support records (README Findings, 4; issue 20's last control):
the audit replays each sampled task's released inner step exactly, its first-order correct run is consistent
with the support record's inner-Gaussian claim, and the second-order run accounted by that claim is flagged."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from metadp.cli import main  # noqa: E402
from metadp.plan import Plan  # noqa: E402
from metadp.training.algorithms import private_steps as P  # noqa: E402
from metadp.training.run.trainer import TrainConfig, train  # noqa: E402
from metadp.training.algorithms import models  # noqa: E402
from metadp.verify.canaries import canary_pool, sinusoid_mse  # noqa: E402
from metadp.verify.canaries import run_canary_audit  # noqa: E402
from metadp.verify.support_canaries import SupportAudit, run_support_audit, support_bounds  # noqa: E402


def _plan(population, batch, z, steps, delta=1e-5):
    return Plan.from_dict({"name": "support audit", "unit": "task", "relation": "add_remove", "delta": delta,
                           "steps": steps, "sampling": {"scheme": "poisson", "population": population,
                                                        "batch_size": batch},
                           "noise": {"mechanism": "gaussian", "multiplier": z}})


class _Checked(SupportAudit):
    """Checks, at every step, that the replayed pair holds the trainer's own contribution of each sampled
    host (a where the canary is in, b where it is out) and its own inner noisy sum."""

    checked = 0

    def _score(self, params, rows, noise, contribution, release, std):
        real = int(self.sampler.last.sum())
        hosts = np.nonzero(rows[:real].numpy() >= self.first)[0]
        if hosts.size:
            a, b, inner = self._pair(params, rows[hosts], {n: t[hosts] for n, t in noise.items()})
            index = rows[hosts].numpy() - self.first
            mine = np.where(self.k.included[index][:, None], a, b)
            np.testing.assert_allclose(mine, contribution[hosts], rtol=1e-4, atol=1e-5)
            if self.c.inner_steps == 1:  # the inner llr is log N(v; sum_in) / N(v; sum_out), v the run's noisy sum
                v, s_in, s_out = (self._inner_sums(params, rows[hosts], pool, noise, hosts) for pool in
                                  (self.k.pool, self.k.pool_in, self.k.pool_out))
                expected = (np.sum((v - s_out) ** 2, 1) - np.sum((v - s_in) ** 2, 1)) / (2 * self.std_in**2)
                np.testing.assert_allclose(inner, expected, rtol=1e-6, atol=1e-6)
            _Checked.checked += hosts.size
        super()._score(params, rows, noise, contribution, release, std)

    def _inner_sums(self, params, rows, pool, noise, hosts):
        """The clipped support sum of ``pool``'s tasks at ``params``; for the run's own pool plus s_in N."""
        x_s, y_s = pool.batch(rows)[:2]
        g = torch.vmap(lambda x, y: P._per_example(self.model, self.loss_fn, params, x, y))(x_s, y_s)
        g = P.clip_rows(g, self.c.inner_clip, batch_dims=2)
        out = torch.cat([g[n].sum(1).reshape(rows.numel(), -1) for n in self.names], 1).double().numpy()
        if pool is self.k.pool:
            out = out + self.std_in * torch.cat([noise[n][hosts, 0].reshape(rows.numel(), -1)
                                                 for n in self.names], 1).double().numpy()
        return out


@pytest.mark.parametrize("first_order,inner_steps", [(True, 1), (False, 1), (True, 3), (False, 3)])
def test_replayed_inner_steps_give_the_trainers_own_contributions(tmp_path, first_order, inner_steps):
    k = canary_pool(40, 10, "record", 1.0, 0, "data")
    config = TrainConfig(algorithm="dp-maml-sample", unit="record", sampler="poisson", steps=4, meta_batch=10,
                         delta=1e-5, epsilon=math.inf, noise_multiplier=1.0, inner_noise=5.0, inner_clip=1.0,
                         inner_steps=inner_steps, inner_lr=1.0, first_order=first_order, seed=0, checkpoint_every=4)
    torch.manual_seed(0)
    audit = _Checked(k, models.MLP((1, 8, 8, 1)), sinusoid_mse, config)
    _Checked.checked = 0
    train(audit.model, k.pool, sinusoid_mse, config, tmp_path / "run", audit=audit)
    assert audit.steps == 4 and _Checked.checked >= 5 and audit.appearances.sum() == _Checked.checked
    shifts = np.asarray(audit.shifts)
    if first_order:  # given theta_i the outer contribution does not depend on the support set
        assert shifts.max() < 1e-4 and np.abs(audit.outer).max() < 1e-4
    else:  # the Jacobian carries the support record to the release
        assert np.median(shifts) > 0.05
    np.testing.assert_allclose(audit.scores, audit.inner + audit.outer, rtol=1e-12, atol=1e-12)


def test_support_bounds_against_the_gaussian_closed_form():
    """With every task in every step (rate 1) the revealed pair is one Gaussian per step: T steps of shift s
    are mu-GDP with mu = s sqrt(T), delta(eps) = Phi(mu/2 - eps/mu) - e^eps Phi(-mu/2 - eps/mu)."""
    from scipy.stats import norm

    plan = _plan(20, 20, 2.0, 9)
    inner, second = support_bounds(plan, 9, noise=2.0, inner_noise=8.0, query_per_task=5, first_order=False)
    assert inner["shift"] == pytest.approx(0.25) and second["shift"] == pytest.approx(math.sqrt(0.25**2 + 5.0**2))
    four = support_bounds(plan, 9, noise=2.0, inner_noise=8.0, query_per_task=5, first_order=False, inner_steps=4)
    assert four[0]["shift"] == pytest.approx(0.5) and four[1]["shift"] == pytest.approx(math.sqrt(0.5**2 + 25.0))
    assert not inner["holds_for_this_run"] and second["holds_for_this_run"] and "NOT" in inner["note"]
    for b in (inner, second):
        mu = b["shift"] * 3.0
        delta = lambda e: norm.cdf(mu / 2 - e / mu) - math.exp(e) * norm.cdf(-mu / 2 - e / mu)  # noqa: E731
        assert delta(b["epsilon"]) <= 1e-5 * (1 + 1e-6)  # an upper bound on epsilon
        assert delta(b["epsilon"] * 0.99) > 1e-5  # and within 1% of the exact one
    first = support_bounds(plan, 9, noise=2.0, inner_noise=8.0, query_per_task=5, first_order=True)[0]
    assert first["holds_for_this_run"] and first["epsilon"] == inner["epsilon"]


SMALL = dict(canaries=30, sizes=(1, 16, 16, 1), power_runs=50, seed=0)


SMALL_PLAN = dict(population=60, batch=6, z=1.0, steps=60)  # seed 0, 30 canaries, z_in = 40, inner lr 1 (seconds)


def test_first_order_run_is_consistent_with_the_inner_gaussian_claim():
    correct = run_support_audit(_plan(**SMALL_PLAN), **SMALL)
    assert correct["verdict"] == "consistent" and correct["control"] is None
    assert correct["epsilon_lower"] <= correct["certified"]["epsilon"]
    assert correct["shift"]["max"] < 1e-4 and correct["settings"]["first_order"]
    # the claim audited: the inner Gaussian alone, 60 steps at rate 0.1 (closed-form check in the test above)
    assert correct["record_bounds"][0]["shift"] == pytest.approx(2.0 / 40.0)


def test_second_order_control_is_flagged():
    """Predicted power 0.92; seen 19/20 right: 0.90 > the claim's 0.494."""
    control = run_support_audit(_plan(**SMALL_PLAN), defect="second-order", **SMALL)
    assert control["certified"]["epsilon"] == control["record_bounds"][0]["epsilon"]  # the claim, audited
    assert control["control"]["defect"] == "second-order" and control["control"]["predicted_power"] >= 0.8
    assert control["verdict"] == "VIOLATION" and control["epsilon_lower"] > control["certified"]["epsilon"]
    second = control["record_bounds"][1]
    assert second["bound"] == "second order (metadp)" and control["epsilon_lower"] <= second["epsilon"]
    assert not control["settings"]["first_order"] and control["shift"]["median"] > 0.1


@pytest.mark.slow
def test_benchmark_plan_control_flagged_correct_run_consistent():
    """benchmarks/audit_sinusoid_support.toml with 100 canaries (README table, seed 0)."""
    plan = _plan(200, 20, 1.0, 80)
    correct = run_support_audit(plan, canaries=100, seed=0)
    assert correct["verdict"] == "consistent" and correct["epsilon_lower"] <= correct["certified"]["epsilon"]
    control = run_support_audit(plan, canaries=100, seed=0, defect="second-order")
    assert control["control"]["predicted_power"] >= 0.9
    assert control["verdict"] == "VIOLATION" and control["epsilon_lower"] > 3 * control["certified"]["epsilon"]


def test_support_audit_refusals():
    plan = _plan(60, 6, 1.0, 4)
    for kwargs, word in ((dict(defect="low-noise"), "second-order"), (dict(canaries=31), "--canaries"),
                         (dict(inner_noise=0.0), "inner_noise"), (dict(inner_lr=math.inf), "inner_lr")):
        with pytest.raises(ValueError, match=word):
            run_support_audit(plan, **{"canaries": 10, **kwargs})
    fixed = Plan.from_dict({"name": "f", "unit": "task", "delta": 1e-5, "steps": 4,
                            "sampling": {"scheme": "fixed", "population": 60, "batch_size": 6},
                            "noise": {"mechanism": "gaussian", "multiplier": 1.0}})
    with pytest.raises(ValueError, match="Poisson"):
        run_support_audit(fixed, canaries=10)
    by_rate = Plan.from_dict({"name": "r", "unit": "task", "delta": 1e-5, "steps": 4,  # no population to hold canaries
                              "sampling": {"scheme": "poisson", "rate": 0.1},
                              "noise": {"mechanism": "gaussian", "multiplier": 1.0}})
    for audit in (run_support_audit, run_canary_audit):
        with pytest.raises(ValueError, match="needs the plan's sampling.population"):
            audit(by_rate, canaries=10)


def test_cli_support_audit_json_table_and_refusals(tmp_path, capsys):
    plan = tmp_path / "p.toml"
    plan.write_text('name = "a"\nunit = "task"\ndelta = 1e-5\nsteps = 4\n[sampling]\nscheme = "poisson"\n'
                    'population = 40\nbatch_size = 4\n[noise]\nmechanism = "gaussian"\nmultiplier = 1.0\n')
    base = ["verify", "run", "dp-maml-sample", "--plan", str(plan), "--data", "sinusoid", "--canaries", "10",
            "--hidden", "8"]
    assert main(base + ["--json", "--inner-noise", "20"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["verdict"] == "consistent" and out["algorithm"] == "dp-maml-sample" and out["view"] == "record"
    assert out["settings"]["inner_noise"] == 20.0 and out["settings"]["model"] == [1, 8, 8, 1]
    assert out["canary_kind"] == "support record" and out["plan_file"] == str(plan)
    # the run's own record view, as its ledger certifies it (add/remove, upper bound), beside the claim audited
    assert out["run_record_view"]["relation"] == "add_remove" and out["run_record_view"]["epsilon"] > 0
    status = main(base + ["--plant-defect", "second-order"])
    table = capsys.readouterr().out
    assert status in (0, 1) and "CONTROL: planted defect 'second-order'" in table
    assert "the claim: a support record costs the inner Gaussian only" in table
    assert "neighbours: substitution (one support record replaced)" in table
    assert "inner Gaussian only" in table and "it does NOT hold for this run" in table
    assert ("(control caught)" in table) == (status == 1)
    for argv, flag in ((["--view", "task"], "--view record"), (["--canary-kind", "gradient"], "--canary-kind data"),
                       (["--plant-defect", "low-noise"], "second-order"), (["--inner-lr", "0"], "--inner-lr"),
                       (["--inner-noise", "nan"], "--inner-noise"), (["--inner-steps", "0"], "--inner-steps")):
        assert main(base + argv) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("metadp: error:") and flag in err[0], err
    maml = ["verify", "run", "dp-maml", "--plan", str(plan), "--data", "sinusoid", "--canaries", "10"]
    for argv, flag in ((["--plant-defect", "second-order"], "dp-maml-sample"), (["--inner-lr", "1"], "--inner-lr"),
                       (["--inner-noise", "3"], "--inner-noise"), (["--inner-steps", "2"], "--inner-steps")):
        assert main(maml + argv) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and flag in err[0], err


@pytest.mark.slow
def test_first_order_runs_rarely_flag_the_claim_they_satisfy():
    """False alarms: 12 first-order runs (seeds 0-11) audited against the claim they satisfy at confidence 0.95;
    each flags with probability at most 0.05, so 3 or more flags would have probability below 0.02."""
    plan = _plan(60, 6, 1.0, 60)
    verdicts = [run_support_audit(plan, canaries=30, sizes=(1, 8, 8, 1), seed=seed)["verdict"] for seed in range(12)]
    assert verdicts.count("VIOLATION") <= 2, verdicts
