"""Gradient (Dirac) canaries in a real training run (metadp.verify.gradient_canaries, issue 20): they go
through the trainer's own clip, sum and noise; the low-noise control they were added for is caught."""

from __future__ import annotations

import math
import tempfile
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from metadp.plan import Plan  # noqa: E402
from metadp.training.algorithms import models  # noqa: E402
from metadp.training.run.trainer import train  # noqa: E402
from metadp.verify import canaries as cn  # noqa: E402
from metadp.verify.gradient_canaries import GRADIENT_NORM, DiracCanaries  # noqa: E402


def _plan(population, batch, z, steps, delta=1e-5):
    return Plan.from_dict({"name": "audit", "unit": "task", "relation": "add_remove", "delta": delta, "steps": steps,
                           "sampling": {"scheme": "poisson", "population": population, "batch_size": batch},
                           "noise": {"mechanism": "gaussian", "multiplier": z}})


def _params(sizes=(1, 4, 1)):
    torch.manual_seed(0)
    return {n: p.detach().clone() for n, p in models.MLP(sizes).named_parameters()}


def test_dirac_directions_are_orthonormal_coordinates_and_too_many_are_refused():
    params = _params()  # 4 + 4 + 4 + 1 = 13 parameters
    d = DiracCanaries(params, torch.arange(7, 13), 13, 0.5, torch.Generator().manual_seed(1))
    u = d.directions.numpy()
    np.testing.assert_array_equal(u @ u.T, np.eye(6))  # distinct coordinates, signs +-1
    assert set(np.abs(u).sum(axis=1)) == {1.0}
    flat = torch.cat([v.reshape(6, -1) for v in d.vectors(torch.ones(6)).values()], dim=1)
    np.testing.assert_allclose(flat.numpy(), GRADIENT_NORM * 0.5 * u)  # GRADIENT_NORM C u_i, model order
    with pytest.raises(ValueError, match="--canaries.*13 parameters"):
        DiracCanaries(params, torch.arange(0, 14), 14, 1.0, torch.Generator())


def test_wrap_replaces_only_canary_rows():
    params = _params()
    d = DiracCanaries(params, torch.tensor([3, 5]), 8, 1.0, torch.Generator().manual_seed(2))
    d.set_run(torch.tensor([1.0, -1.0]))  # canary 0 in (+v), canary 1 at its antipode (-v)

    def real(alg, model, p, pool, rows, loss_fn, c, gen):
        return {n: torch.full((rows.numel(),) + v.shape, 7.0) for n, v in params.items()}, torch.zeros(rows.numel())

    out, _ = d.wrap(real)(None, None, params, None, torch.tensor([0, 5, 3, 3, 6]), None, None, None)
    flat = torch.cat([v.reshape(5, -1) for v in out.values()], dim=1).double()
    assert (flat[[0, 4]] == 7.0).all()
    np.testing.assert_allclose(flat[2].numpy(), GRADIENT_NORM * d.directions[0].numpy())
    np.testing.assert_allclose(flat[3].numpy(), GRADIENT_NORM * d.directions[0].numpy())
    np.testing.assert_allclose(flat[1].numpy(), -GRADIENT_NORM * d.directions[1].numpy())


@pytest.mark.parametrize("view", ["task", "record"])
def test_releases_are_the_trainers_clipped_sum_with_the_canaries_in_it(view):
    """At noise 0.01 C each release is the clipped sum of what was sampled: the base tasks' clipped
    meta-gradients plus C u_i for each sampled canary (task: included ones only; record: +C u_i in, -C u_i
    out), the canary vectors (norm GRADIENT_NORM C) clipped by the trainer's own clip."""
    plan = _plan(16, 8, 0.01, 3)  # (z = 1e-3: the PLD accountant overflows, a RuntimeWarning; not this module's)
    k = cn.canary_pool(16, 6, view, 50.0, 0, "gradient")
    config = cn._config(plan, "dp-maml", view, clip=0.5, outer_lr=None, inner_lr=0.01, seed=0, first_order=True)
    model = models.MLP((1, 4, 1))
    seen = []

    class Recording(cn.CanaryAudit):
        def observe(self, step, params, release, std):
            mask = self.sampler.last
            rows = torch.nonzero(mask[: 16 - 6]).flatten()
            expected = self._flat(self.k.pool, rows, params).sum(axis=0) if rows.numel() else 0.0
            a, b = self._canary_pair(params)
            sampled = mask[16 - 6:].numpy()
            inc = self.k.included
            expected = expected + a[sampled & inc].sum(axis=0) + b[sampled & ~inc].sum(axis=0)
            r = torch.cat([release[n].reshape(-1) for n in self.names]).double().numpy()
            seen.append((r, expected, sampled.copy()))

    audit = Recording(k, model, cn.sinusoid_mse, config, None, 0)
    with tempfile.TemporaryDirectory() as tmp:
        if view == "task":
            train(model, k.pool, cn.sinusoid_mse, config, Path(tmp) / "r", plan=plan, audit=audit)
        else:
            import dataclasses
            train(model, k.pool, cn.sinusoid_mse, dataclasses.replace(config, sampler="poisson", unit="record"),
                  Path(tmp) / "r", audit=audit)
    a, b = audit._canary_pair(None)
    np.testing.assert_allclose(np.linalg.norm(a, axis=1), 0.5, rtol=1e-6)  # clipped from GRADIENT_NORM C to C
    if view == "record":
        np.testing.assert_allclose(b, -a)
    assert len(seen) == 3 and any(s[2].any() for s in seen)
    for r, expected, _ in seen:
        np.testing.assert_allclose(r, expected, atol=0.03)  # noise sd 0.01 x 0.5; a canary moves a coordinate by 0.5


def test_no_clipping_lets_the_whole_canary_vector_through():
    k = cn.canary_pool(16, 6, "task", 50.0, 0, "gradient")
    plan = _plan(16, 8, 1.0, 1)
    config = cn._config(plan, "dp-maml", "task", clip=0.5, outer_lr=None, inner_lr=0.01, seed=0, first_order=True)
    audit = cn.CanaryAudit(k, models.MLP((1, 4, 1)), cn.sinusoid_mse, config, "no-clipping", 0)
    audit.threshold = 0.5
    a, _ = audit._canary_pair(None)
    np.testing.assert_allclose(np.linalg.norm(a, axis=1), GRADIENT_NORM * 0.5)


# 100 tasks (50 gradient canaries), Poisson rate 0.02, z = 1.5, 150 steps: certified 0.7520 (PLD); the idealised
# game predicts power 0.845 (200 games) for the low-noise control. Observed (seed 0, MLP 1-8-8-1): the correct run
# consistent, the control caught; about 3 minutes each on 2 loaded cores
SMALL = dict(population=100, batch=2, z=1.5, steps=150)


@pytest.mark.slow
@pytest.mark.parametrize("defect", [None, "low-noise"])
def test_small_plan_low_noise_caught_correct_run_consistent(defect):
    p = SMALL
    r = cn.run_canary_audit(_plan(p["population"], p["batch"], p["z"], p["steps"]), canaries=50, defect=defect,
                            seed=0, sizes=(1, 8, 8, 1), power_runs=50)
    assert r["canary_kind"] == "gradient"
    if defect is None:
        assert r["verdict"] == "consistent" and r["epsilon_lower"] <= r["certified"]["epsilon"]
    else:
        assert r["verdict"] == "VIOLATION" and r["epsilon_lower"] > r["certified"]["epsilon"]
        assert math.isfinite(r["control"]["predicted_power"])
