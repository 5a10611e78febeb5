"""The privacy views of each training algorithm (metadp.releases) against events derived by hand.

Every expected event below is written out from the derivation in the module docstring of
``metadp/releases.py`` (C the clip, z the central multiplier, z_in the inner one, S inner
steps, m query examples per task, k the record multiplicity, q the Poisson rate):

* task / client, central noise: a clipped task moves the sum by C: ``PoissonSampled(q, Gaussian(z))``,
  ``FixedSizeSampled(b, N, Gaussian(z), 2)`` (substitution), ``Gaussian(z)`` per pass;
* record, per-task clipping: one appearance shifts by s = 2 / z: ``EpisodicSampled(k, q, 1,
  Gaussian(1 / s), 1)``, ``Gaussian(1 / (k s))`` per pass, nothing for fixed-size batches;
* sample-level DP-MAML: s = max(sqrt(S) / z_in, 1 / z) first order, s^2 = S / z_in^2 + (2 m / z)^2
  second order; the task view ``Gaussian(z / m)``;
* local noise (DP-Reptile, DP-AGRLR against the server): ``Gaussian(1 / s)`` per visit.

The last tests check the reason the second-order record charge is larger, without the formula: with
first-order meta-gradients a support record reaches the query gradients only through the noisy inner
sum (hold that sum fixed and nothing changes); with second order it also reaches them through the
un-noised inner Jacobian.
"""

from __future__ import annotations

import dataclasses
import math

import pytest

torch = pytest.importorskip("torch")

from torch.func import functional_call, grad, jacrev  # noqa: E402

from metadp.core.events import RandomAllocation  # noqa: E402
from metadp.accounting import (EpisodicSampled, FixedSizeSampled, Gaussian, NonPrivate, PoissonSampled,  # noqa: E402
                               PoolSubstitution)
from metadp.accounting.pld import PldAccountant  # noqa: E402
from metadp.training.algorithms import private_steps as P  # noqa: E402
from metadp.training.data.sources import synthetic_glyphs  # noqa: E402
from metadp.training.algorithms.functional import param_dict  # noqa: E402
from metadp.training.algorithms.models import MLP  # noqa: E402
from metadp.training import algorithms  # noqa: E402
from metadp.training.algorithms import views  # noqa: E402
from metadp.sampling import BallsInBins, FixedSize, Poisson  # noqa: E402
from metadp.releases import _central_record  # noqa: E402
from metadp.training.data.tasks import EpisodePool  # noqa: E402
from metadp.training.run.trainer import TrainConfig, run_views  # noqa: E402

ALGORITHMS = algorithms.names(meta_loop=True)
PRIVATE_ALGORITHMS = algorithms.names(meta_loop=True, private=True)
CENTRAL_TASK_CLIP = algorithms.names(central_clip=True)


def default_unit(name: str) -> str:
    return algorithms.get(name).default_unit

POISSON = Poisson(0.05, 200)  # --sampler poisson over 200 tasks, rate 0.05
FIXED = FixedSize(10, 200)
ONE_PASS = BallsInBins(200, 20)  # --sampler one-pass: 20 steps a pass
PLANS = (POISSON, FIXED, ONE_PASS)


def same_event(a, b):
    """Structural equality of two events, floats to 1e-12 relative (1 / (2 / z) need not be z / 2 exactly)."""
    if type(a) is not type(b):
        return False
    if not dataclasses.is_dataclass(a):
        if isinstance(a, float) or isinstance(b, float):
            return a == pytest.approx(b, rel=1e-12, abs=0)
        return a == b
    return all(same_event(getattr(a, f.name), getattr(b, f.name)) for f in dataclasses.fields(a))


def assert_event(got, want):
    assert same_event(got, want), f"{got} != {want}"


def by_key(found):
    keys = [v.key for v in found]
    assert len(keys) == len(set(keys))
    return {v.key: v for v in found}


# --- central noise on a per-task clipped sum ------------------------------------------------------------

@pytest.mark.parametrize("algorithm", CENTRAL_TASK_CLIP)
@pytest.mark.parametrize("z,k", [(1.3, 1), (0.7, 3)])
def test_central_poisson_task_and_record_events(algorithm, z, k):
    found = views(algorithm, POISSON, noise=z, inner_noise=2.0, record_multiplicity=k)
    v = by_key(found)
    task, record = v["task"], v["record"]
    assert found[0].key == "task" == default_unit(algorithm)
    assert_event(task.event, PoissonSampled(0.05, Gaussian(z)))
    assert (task.unit, task.relation, task.charge) == ("task", "add_remove", "step")
    # a record's task exists either way: one appearance moves the clipped sum by up to 2C, s = 2 / z; in one
    # task, both contributions lie in the C-ball: the pool-substitution pair (metadp.mechanisms.pooled);
    # in k > 1 tasks, the revealed pair
    if k == 1:
        assert_event(record.event, PoolSubstitution(0.05, Gaussian(z)))
    else:
        assert_event(record.event, EpisodicSampled(k, 0.05, 1.0, Gaussian(z / 2), 1.0))
    assert (record.unit, record.relation, record.charge) == ("record", "add_remove", "step")
    assert task.basis and record.basis


@pytest.mark.parametrize("algorithm", CENTRAL_TASK_CLIP)
def test_central_fixed_size_batches_are_substitution_and_have_no_record_bound(algorithm):
    v = by_key(views(algorithm, FIXED, noise=1.1, inner_noise=2.0, record_multiplicity=2))
    assert_event(v["task"].event, FixedSizeSampled(10, 200, Gaussian(1.1), 2.0))
    assert v["task"].relation == "substitute" and v["task"].charge == "step"
    assert v["record"].event is None and "Poisson" in v["record"].reason


@pytest.mark.parametrize("algorithm", CENTRAL_TASK_CLIP)
@pytest.mark.parametrize("k", [1, 4])
def test_central_one_pass_is_random_allocation_per_pass(algorithm, k):
    z = 1.7
    v = by_key(views(algorithm, ONE_PASS, noise=z, inner_noise=2.0, record_multiplicity=k))
    # the trainer's one-pass sampler is random allocation: charged as a balls_in_bins plan charges it (issue 29;
    # it was the single Gaussian a pass)
    assert_event(v["task"].event, RandomAllocation(20, Gaussian(z)))
    assert v["task"].charge == "pass" and v["task"].relation == "add_remove"
    # the k appearances may share a pass: Gaussian(1 / (k s)), s = 2 / z
    assert_event(v["record"].event, Gaussian(z / (2 * k)))
    assert v["record"].charge == "pass"


# --- sample-level DP-MAML ----------------------------------------------------------------------------------

def _sample_level_shift(first_order, S, z_in, z, m):
    if first_order:
        return max(math.sqrt(S) / z_in, 1 / z)
    return math.sqrt(S / z_in**2 + (2 * m / z) ** 2)


@pytest.mark.parametrize("first_order", [True, False])
@pytest.mark.parametrize("S,z_in,z,m,k", [
    (1, 1.0, 1.0, 10, 1),  # first order: both terms equal
    (4, 1.5, 3.0, 5, 2),  # first order: the inner Gaussians dominate (sqrt(4)/1.5 > 1/3)
    (1, 8.0, 0.9, 3, 1),  # first order: the query appearance dominates (1/8 < 1/0.9)
])
def test_sample_level_maml_events(first_order, S, z_in, z, m, k):
    s = _sample_level_shift(first_order, S, z_in, z, m)
    kw = dict(noise=z, inner_noise=z_in, inner_steps=S, query_per_task=m, record_multiplicity=k,
              first_order=first_order)
    found = views("dp-maml-sample", POISSON, **kw)
    assert [v.key for v in found] == ["record", "task"] and default_unit("dp-maml-sample") == "record"
    v = by_key(found)
    assert_event(v["record"].event, EpisodicSampled(k, 0.05, 1.0, Gaussian(1 / s), 1.0))
    assert_event(v["task"].event, PoissonSampled(0.05, Gaussian(z / m)))  # m clipped query grads: m C
    assert v["record"].charge == v["task"].charge == "step"
    one_pass = by_key(views("dp-maml-sample", ONE_PASS, **kw))
    assert_event(one_pass["record"].event, Gaussian(1 / (k * s)))
    assert_event(one_pass["task"].event, RandomAllocation(20, Gaussian(z / m)))
    assert one_pass["record"].charge == one_pass["task"].charge == "pass"
    fixed = by_key(views("dp-maml-sample", FIXED, **kw))
    assert fixed["record"].event is None and fixed["record"].reason
    assert_event(fixed["task"].event, FixedSizeSampled(10, 200, Gaussian(z / m), 2.0))


def test_second_order_sample_level_maml_charges_a_record_more():
    kw = dict(noise=1.0, inner_noise=1.0, inner_steps=1, query_per_task=5)
    first = by_key(views("dp-maml-sample", POISSON, first_order=True, **kw))["record"].event
    second = by_key(views("dp-maml-sample", POISSON, first_order=False, **kw))["record"].event
    assert second.inner.noise_multiplier < first.inner.noise_multiplier
    assert PldAccountant().compose(second, 5).get_epsilon(1e-5) > PldAccountant().compose(first, 5).get_epsilon(1e-5)
    assert "second-order" in by_key(views("dp-maml-sample", POISSON, first_order=False, **kw))["record"].reason


# --- local noise: DP-Reptile and DP-AGRLR against the server ---------------------------------------------

@pytest.mark.parametrize("plan", PLANS)
@pytest.mark.parametrize("S,z_in", [(1, 1.0), (5, 3.0)])
def test_dp_reptile_record_per_visit_and_no_task_guarantee(plan, S, z_in):
    found = views("dp-reptile", plan, noise=0.5, inner_noise=z_in, inner_steps=S, record_multiplicity=3)
    assert found[0].key == "record" == default_unit("dp-reptile")
    v = by_key(found)
    assert_event(v["record"].event, Gaussian(z_in / math.sqrt(S)))  # s^2 = S / z_in^2, no amplification
    assert (v["record"].unit, v["record"].relation, v["record"].charge) == ("record", "add_remove", "visit")
    assert "meta-learner" in v["record"].adversary
    assert v["task"].event is None and "no task-level guarantee" in v["task"].reason


@pytest.mark.parametrize("plan", PLANS)
@pytest.mark.parametrize("first_order", [True, False])
@pytest.mark.parametrize("S,m", [(0, 4), (1, 1), (3, 6)])
def test_dp_agrlr_record_against_the_server(plan, first_order, S, m):
    z_in = 2.5
    found = views("dp-agrlr", plan, noise=1.0, inner_noise=z_in, inner_steps=S, query_per_task=m,
                  record_multiplicity=2, first_order=first_order)
    v = by_key(found)
    assert set(v) == {"task", "record", "record-vs-server"} and found[0].key == "task"
    s2 = (max(S, 1) if first_order else S + 4 * m * m) / z_in**2
    local = v["record-vs-server"]
    assert_event(local.event, Gaussian(1 / math.sqrt(s2)))
    assert (local.unit, local.relation, local.charge) == ("record", "add_remove", "visit")
    assert "server" in local.adversary


# --- what voids the views --------------------------------------------------------------------------------

@pytest.mark.parametrize("algorithm", PRIVATE_ALGORITHMS)
@pytest.mark.parametrize("plan", PLANS)
def test_thresholds_from_raw_norms_void_every_view(algorithm, plan):
    private = views(algorithm, plan, noise=1.0, inner_noise=1.0)
    void = views(algorithm, plan, noise=1.0, inner_noise=1.0, private_clipping=False)
    assert [v.key for v in void] == [v.key for v in private] and void
    assert all(v.event is None and "NOT PRIVATE" in v.reason for v in void)


def test_non_private_and_unknown_algorithms():
    assert views("maml", POISSON, noise=1.0) == () and views("reptile", ONE_PASS, noise=1.0) == ()
    assert set(ALGORITHMS) - set(PRIVATE_ALGORITHMS) == {"maml", "reptile"}
    with pytest.raises(ValueError, match="algorithm must be one of"):
        views("dp-sgd", POISSON, noise=1.0)


def test_record_epsilon_exceeds_task_epsilon_and_grows_with_multiplicity():
    steps, delta = 10, 1e-5

    def eps(event):
        return PldAccountant().compose(event, steps).get_epsilon(delta)

    task = eps(by_key(views("dp-maml", POISSON, noise=1.0))["task"].event)
    records = [eps(by_key(views("dp-maml", POISSON, noise=1.0, record_multiplicity=k))["record"].event)
               for k in (1, 2, 4)]
    assert 0 < task < records[0] < records[1] < records[2]


# --- the trainer passes the pool's numbers to the views --------------------------------------------------

def test_run_views_uses_the_pools_multiplicity_and_query_size():
    images = synthetic_glyphs(6, 4, size=16, seed=0).images  # 6 classes, 4 images each: images shared by tasks
    pool = EpisodePool(images, 30, n_way=3, k_shot=1, k_query=2, seed=0)
    k, m = pool.record_multiplicity(), pool.query_per_task
    assert k > 1 and m == 6
    config = TrainConfig(algorithm="dp-maml-sample", meta_batch=3, noise_multiplier=2.0, inner_noise=1.5,
                         inner_steps=2, first_order=False)
    plan, found = run_views(pool, config)
    assert plan == Poisson(0.1, 30)
    s = _sample_level_shift(False, 2, 1.5, 2.0, m)
    v = by_key(found)
    assert_event(v["record"].event, EpisodicSampled(k, 0.1, 1.0, Gaussian(1 / s), 1.0))
    assert_event(v["task"].event, PoissonSampled(0.1, Gaussian(2.0 / m)))
    # zero noise: the same views, each release non-private
    zero = by_key(run_views(pool, dataclasses.replace(config, noise_multiplier=0.0))[1])
    assert all(isinstance(x.event, NonPrivate) for x in zero.values())
    # raw-norm thresholds: no view keeps a guarantee
    raw = run_views(pool, dataclasses.replace(config, algorithm="dp-maml", clip_policy="raw-percentile"))[1]
    assert all(x.event is None and x.reason.startswith("NOT PRIVATE") for x in raw)


# --- why a support record costs more with second-order meta-gradients -----------------------------------

def mse(out, y):
    return ((out - y) ** 2).mean()


def _linear_task():
    """One linear-regression task (float64): support of 4, query of 3, and a neighbour support set with
    the first record replaced. Inner clip 10: no per-example gradient is clipped (so the records'
    Hessians reach the inner Jacobian)."""
    torch.manual_seed(0)
    model = MLP((1, 1)).double()  # y = w x + b
    params = param_dict(model)
    x_s = torch.tensor([[[0.5], [-1.0], [2.0], [0.3]]], dtype=torch.float64)
    y_s = torch.tensor([[[1.0], [0.2], [-0.7], [0.4]]], dtype=torch.float64)
    x_q = torch.tensor([[[1.5], [-0.4], [0.8]]], dtype=torch.float64)
    y_q = torch.tensor([[[0.1], [0.9], [-0.3]]], dtype=torch.float64)
    x_s2, y_s2 = x_s.clone(), y_s.clone()
    x_s2[0, 0, 0], y_s2[0, 0, 0] = 2.5, -1.2
    return model, params, (x_s, y_s, x_q, y_q), (x_s2, y_s2, x_q, y_q)


def _clipped_sum(model, params, x, y, clip):
    """Sum over examples of each per-example gradient clipped to ``clip`` (by hand, a loop)."""
    total = {k: torch.zeros_like(v) for k, v in params.items()}
    for j in range(x.shape[0]):
        g = grad(lambda p: mse(functional_call(model, p, (x[j:j + 1],)), y[j:j + 1]))(params)
        norm = math.sqrt(sum(float(t.square().sum()) for t in g.values()))
        factor = min(1.0, clip * (1 - 1e-6) / norm)
        total = {k: total[k] + factor * g[k] for k in total}
    return total


def _matched_noise(model, params, task, neighbour, noise, std, clip):
    """Noise for the neighbour such that its noisy inner sum equals the task's: nu' = nu + (sum - sum') / std."""
    a = _clipped_sum(model, params, task[0][0], task[1][0], clip)
    b = _clipped_sum(model, params, neighbour[0][0], neighbour[1][0], clip)
    return {k: noise[k] + ((a[k] - b[k]) / std)[None, None] for k in noise}


LR, CLIP_IN, STD = 0.3, 10.0, 0.5


def test_first_order_a_support_record_acts_only_through_the_noisy_inner_sum():
    model, params, task, neighbour = _linear_task()
    noise = P.draw_inner_noise(params, 1, 1, torch.Generator().manual_seed(3))
    noise2 = _matched_noise(model, params, task, neighbour, noise, STD, CLIP_IN)
    assert max(float((noise2[k] - noise[k]).abs().max()) for k in noise) > 0.1  # the neighbour really differs
    g1, l1 = P.per_example_query_grads(model, params, task, mse, 1, LR, CLIP_IN, STD, noise, True)
    g2, l2 = P.per_example_query_grads(model, params, neighbour, mse, 1, LR, CLIP_IN, STD, noise2, True)
    # same noisy inner sum -> same adapted parameters -> the same per-example query gradients (post-processing)
    for k in g1:
        torch.testing.assert_close(g1[k], g2[k], rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(l1, l2, rtol=1e-12, atol=1e-12)


def test_second_order_a_support_record_also_acts_through_the_inner_jacobian():
    model, params, task, neighbour = _linear_task()
    noise = P.draw_inner_noise(params, 1, 1, torch.Generator().manual_seed(3))
    noise2 = _matched_noise(model, params, task, neighbour, noise, STD, CLIP_IN)

    def adapt(phi, x, y, nz):
        # one DP inner step by hand: phi - lr (sum_j clip(g_j(phi)) + std nu) / n (no example is clipped at C_in 10)
        n = x.shape[0]
        per = [grad(lambda p, j=j: mse(functional_call(model, p, (x[j:j + 1],)), y[j:j + 1]))(phi) for j in range(n)]
        return {k: phi[k] - LR * (sum(g[k] for g in per) + STD * nz[k][0, 0]) / n for k in phi}

    def query_grads(t, nz):
        x_s, y_s, x_q, y_q = (a[0] for a in t)
        out = []
        for j in range(x_q.shape[0]):
            out.append(grad(lambda phi: mse(functional_call(model, adapt(phi, x_s, y_s, nz), (x_q[j:j + 1],)),
                                            y_q[j:j + 1]))(params))
        return out

    a1 = adapt(params, task[0][0], task[1][0], noise)
    a2 = adapt(params, neighbour[0][0], neighbour[1][0], noise2)
    for k in a1:  # the released noisy inner step is the same for both support sets ...
        torch.testing.assert_close(a1[k], a2[k], rtol=1e-12, atol=1e-12)
    j1 = jacrev(lambda phi: adapt(phi, task[0][0], task[1][0], noise))(params)
    j2 = jacrev(lambda phi: adapt(phi, neighbour[0][0], neighbour[1][0], noise2))(params)
    jac_gap = max(float((j1[k][k2] - j2[k][k2]).abs().max()) for k in j1 for k2 in j1[k])
    assert jac_gap > 1e-3  # ... but d theta / d phi holds the changed record's Hessian, without noise
    want1, want2 = query_grads(task, noise), query_grads(neighbour, noise2)
    g1, _ = P.per_example_query_grads(model, params, task, mse, 1, LR, CLIP_IN, STD, noise, False)
    g2, _ = P.per_example_query_grads(model, params, neighbour, mse, 1, LR, CLIP_IN, STD, noise2, False)
    for j in range(3):
        for k in params:
            torch.testing.assert_close(g1[k][0, j], want1[j][k], rtol=1e-10, atol=1e-12)
            torch.testing.assert_close(g2[k][0, j], want2[j][k], rtol=1e-10, atol=1e-12)
    # so every query example's meta-gradient moves with the support record, noise held fixed
    moved = [math.sqrt(sum(float((g1[k][0, j] - g2[k][0, j]).square().sum()) for k in params)) for j in range(3)]
    assert min(moved) > 1e-3


def test_the_numbers_the_readme_quotes_for_findings_4_and_the_persistent_task_record():
    # README (Findings 4; Training section) and privacy.py's docstring quote these, rounded up: they must
    # stay upper bounds of what the accountant certifies, and within 0.5% of it
    from metadp.accounting.pld import PldAccountant

    plan = Poisson(32 / 10000, 10000)

    def eps(event):
        return PldAccountant().compose(event, 1000).get_epsilon(1e-5)

    first, second = (views("dp-maml-sample", plan, noise=1.0, inner_noise=1.0, query_per_task=5,
                           record_multiplicity=1, first_order=fo)[0].event for fo in (True, False))
    record, task = (views("dp-maml", plan, noise=1.0, record_multiplicity=1)[i].event for i in (1, 0))
    revealed = _central_record(plan, 2.0, 1)[1]  # the revealed pair the record view used before
    for quoted, event in ((13.55, first), (688.1, second), (1.871, record), (37.55, revealed), (0.5327, task)):
        assert eps(event) <= quoted <= 1.005 * eps(event), (quoted, eps(event))
