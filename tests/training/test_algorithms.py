"""Every training algorithm end to end (metadp.training.run.trainer), and the private per-task kernels.

What is checked, and against what:

* each algorithm runs and leaves its files; each private view with a guarantee has its own ledger;
* with z = 0 and C = inf every DP path reproduces its non-private path (the trainer's docstring):
  bit-exactly where the computation is the same (dp-maml, dp-agr against maml), to float32 rounding
  where the per-example sums take another route (dp-maml-sample, dp-agrlr, dp-reptile);
* ``per_example_query_grads`` against a Python loop of ``torch.autograd.grad`` calls that builds the DP
  inner loop by hand (float64, first and second order, clipping active);
* ``clip_rows``: the clipped norm never exceeds C, from 1e-30 to 1e30 and with 0 / inf / NaN rows; its
  Jacobian against the closed form; finite second derivatives;
* the budget: the loop stops at the last step, pass or visit within it (checked by composing the event
  with ``PldAccountant`` independently), a resume keeps every ledger entry, calibration spends the budget.

Four of these tests found bugs, since fixed: zero inner noise with an infinite inner clip gave NaN
(0 x inf); sample-level DP-MAML clipped each task's sum a second time; the per-visit cap was limited to
the number of steps (a record in k tasks is visited up to k times a step); and the PLD accountant
divided by zero when a loss range collapsed to a point (z <= 0.05).
"""

from __future__ import annotations

import dataclasses
import json
import math
import shutil

import pytest

torch = pytest.importorskip("torch")

import torch.nn.functional as TF  # noqa: E402
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from torch.func import functional_call  # noqa: E402

from metadp.accounting import Gaussian, RandomAllocation  # noqa: E402
from metadp.accounting.certify import certify  # noqa: E402
from metadp.accounting.pld import PldAccountant  # noqa: E402
from metadp.training.algorithms import functional  # noqa: E402
from metadp.training.algorithms import private_steps as P  # noqa: E402
from metadp.training.data.sources import synthetic_glyphs  # noqa: E402
from metadp.training.algorithms.functional import inner_adapt, param_dict, per_task_meta_grads  # noqa: E402
from metadp.accounting.ledger import Ledger  # noqa: E402
from metadp.training.algorithms.models import MLP, Conv4  # noqa: E402
from metadp.training.data.tasks import EpisodePool, SinusoidPool  # noqa: E402
from metadp.training.run.trainer import ALGORITHMS, TrainConfig, calibrate, train  # noqa: E402

INF = math.inf
DELTA = 1e-5


def mse(out, y):
    return ((out - y) ** 2).mean()


def pool40():
    return SinusoidPool(40, 5, 5, seed=1)


def pool20():
    return SinusoidPool(20, 5, 5, seed=1)  # with meta_batch 4 and one-pass sampling: 5 steps a pass


def run(config, out, pool=None, **kwargs):
    torch.manual_seed(0)  # the same initial MLP for every run
    return train(MLP(), pool if pool is not None else pool40(), mse, config, out, **kwargs)


def initial_params():
    torch.manual_seed(0)
    return param_dict(MLP())


def ledger_entries(path):
    ledger = Ledger.open(path, readonly=True)
    try:
        return ledger.entries
    finally:
        ledger.close()


def max_abs_diff(a, b):
    return max(float((a[k] - b[k]).abs().max()) for k in a)


def pld_epsilon(event, count):
    return PldAccountant().compose(event, count).get_epsilon(DELTA)


def pld_cap(event, epsilon, limit=50):
    """The most compositions of ``event`` within ``epsilon`` (a plain loop, not calibration.max_steps)."""
    n = 0
    while n < limit and pld_epsilon(event, n + 1) <= epsilon:
        n += 1
    return n


# --- every algorithm runs and writes its files --------------------------------------------------------

@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_each_algorithm_runs_and_writes_its_files(algorithm, tmp_path):
    config = TrainConfig(algorithm=algorithm, steps=3, meta_batch=4, inner_steps=1, seed=5)
    result = run(config, tmp_path)
    for name in ("privacy_report.json", "checkpoint.pt", "metrics.jsonl"):
        assert (tmp_path / name).is_file(), name
    report = json.loads((tmp_path / "privacy_report.json").read_text())
    assert report["algorithm"] == algorithm and report["steps"] == 3 and len(result.losses) == 3
    assert all(math.isfinite(loss) for loss in result.losses)
    assert all(bool(torch.isfinite(p).all()) for p in result.params.values())
    init = initial_params()
    assert any(not torch.equal(init[k], result.params[k]) for k in init)  # the steps moved the model
    ledgers = sorted(p.name for p in tmp_path.glob("ledger-*.jsonl"))
    if algorithm in ("maml", "reptile"):
        assert report["private"] is False and report["views"] == [] and ledgers == []
        return
    assert report["private"] is True and report["views"]
    with_event = sorted(f"ledger-{v['view']}.jsonl" for v in report["views"] if v["event"] is not None)
    assert ledgers == with_event  # exactly one ledger per view with a guarantee, none for the others
    for view in report["views"]:
        if view["event"] is None:
            assert view["charges"] == 0 and view["epsilon"] is None and view["note"]
            continue
        entries = ledger_entries(tmp_path / f"ledger-{view['view']}.jsonl")
        assert view["charges"] == len(entries) >= 1
        assert all(e.event.describe() == view["event"] for e in entries)
        assert view["epsilon"] is not None and view["epsilon"] > 0 and view["guarantee"] == "upper bound"
    assert report["budget_unit"] == report["views"][0]["view"]  # the default unit is listed first


@pytest.mark.parametrize("algorithm", ["dp-maml", "dp-maml-sample", "dp-agr", "dp-agrlr"])
def test_the_central_noise_is_drawn_once_a_step_with_std_z_c(algorithm, tmp_path, monkeypatch):
    stds, real = [], functional.noisy_sum

    def spy(grads, weights, std, **kw):
        stds.append(std)
        return real(grads, weights, std, **kw)

    monkeypatch.setattr(functional, "noisy_sum", spy)
    config = TrainConfig(algorithm=algorithm, steps=3, meta_batch=4, noise_multiplier=1.7, clip=0.3, inner_clip=0.2,
                         inner_noise=1.1, seed=1)
    run(config, tmp_path)
    assert stds == pytest.approx([1.7 * 0.3] * 3, rel=1e-15)



@pytest.mark.parametrize("algorithm,private", [
    ("dp-maml-sample", True),
    ("dp-maml-sample", False),  # z = 0: the same sum without noise
    ("dp-agrlr", False),  # the client's local sum (clip C_in), divided by m; no local noise at z_in = 0
])
def test_per_example_clipped_query_gradients_are_summed_per_task(algorithm, private, tmp_path, monkeypatch):
    per_example, released, real_query, real_sum = [], [], P.per_example_query_grads, functional.masked_sum

    def query_spy(*args, **kwargs):
        out = real_query(*args, **kwargs)
        per_example.append(out[0])
        return out

    def sum_spy(grads, weights, *args, **kw):  # the trainer's sum of the step's per-task contributions
        released.append((grads, weights))
        return real_sum(grads, weights, *args, **kw)

    monkeypatch.setattr(P, "per_example_query_grads", query_spy)
    monkeypatch.setattr(functional, "masked_sum", sum_spy)
    m = 5
    noise = 1.0 if private else 0.0
    config = TrainConfig(algorithm=algorithm, steps=2, meta_batch=8, clip=1.0,
                         noise_multiplier=noise, inner_clip=1.0, inner_noise=noise, first_order=True, seed=0)
    C = config.clip if algorithm == "dp-maml-sample" else config.inner_clip  # the per-example query clip
    run(config, tmp_path)
    assert len(per_example) == len(released) == 2
    exceeds = False
    for raw, (grads, weights) in zip(per_example, released):
        # by hand: each query example's gradient clipped to C (flat over all tensors), summed per task
        norms = torch.stack([g.flatten(start_dim=2).double().square().sum(-1) for g in raw.values()]).sum(0).sqrt()
        factor = torch.clamp(C / norms, max=1.0)
        want = {k: (g * factor.reshape(factor.shape + (1,) * (g.dim() - 2)).to(g.dtype)).sum(1) for k, g in raw.items()}
        if algorithm == "dp-agrlr":
            want = {k: g / m for k, g in want.items()}  # the client's mean (dp-fedmeta.txt Alg. 3, line 13)
        rows = weights > 0
        for k in want:
            torch.testing.assert_close(grads[k][rows], want[k][rows], rtol=1e-4, atol=1e-6)
        task_norms = torch.stack([g[rows].flatten(start_dim=1).double().square().sum(-1)
                                  for g in grads.values()]).sum(0).sqrt()
        bound = m * C if algorithm == "dp-maml-sample" else C
        assert float(task_norms.max()) <= bound * (1 + 1e-6)
        exceeds |= bool((norms > C).any())
    assert exceeds  # the per-example clip was active


# --- one task, one step: the direction of the update --------------------------------------------------------

def test_reptile_with_outer_lr_one_lands_on_the_adapted_parameters(tmp_path):
    # a pool of one task, sampled every step (expected batch 1): theta <- theta + 1 (theta_1 - theta) = theta_1
    pool = SinusoidPool(1, 5, 5, seed=2)
    init = initial_params()
    x, y = pool.joint_batch(torch.arange(1))
    adapted = inner_adapt(MLP(), init, x[0], y[0], mse, 3, 0.02, first_order=True)  # full-batch SGD, by hand
    for algorithm, kw in (("reptile", {}), ("dp-reptile", dict(inner_noise=0.0, inner_clip=1e6))):
        config = TrainConfig(algorithm=algorithm, sampler="one-pass", steps=1, meta_batch=1, inner_steps=3,
                             inner_lr=0.02, outer_lr=1.0, **kw)
        result = run(config, tmp_path / algorithm, pool=pool)
        for k in init:
            torch.testing.assert_close(result.params[k], adapted[k], rtol=1e-5, atol=1e-6, msg=f"{algorithm} {k}")


@pytest.mark.parametrize("algorithm", ["maml", "dp-maml", "dp-agr"])
def test_maml_family_first_step_descends_the_meta_gradient(algorithm, tmp_path):
    # one task, no clipping, no noise: Adam's first step is -lr g / (|g| + eps), elementwise
    pool = SinusoidPool(1, 5, 5, seed=2)
    init = initial_params()
    g = per_task_meta_grads(MLP(), init, pool.batch(torch.arange(1)), mse, 1, 0.01, False)
    extra = {} if algorithm == "maml" else dict(noise_multiplier=0.0, clip=INF)
    config = TrainConfig(algorithm=algorithm, sampler="poisson", steps=1, meta_batch=1, outer_lr=1e-3, **extra)
    result = run(config, tmp_path, pool=pool)
    for k in init:
        want = init[k] - 1e-3 * g[k][0] / (g[k][0].abs() + 1e-8)
        torch.testing.assert_close(result.params[k], want, rtol=1e-5, atol=1e-6, msg=k)


# --- zero noise and no clipping reproduce the non-private path ----------------------------------------

def test_zero_noise_needs_an_infinite_budget():
    for algorithm, kw in (("dp-maml", dict(noise_multiplier=0.0)), ("dp-maml", dict(clip=INF, noise_multiplier=0.0)),
                          ("dp-maml-sample", dict(inner_noise=0.0)), ("dp-reptile", dict(inner_noise=0.0)),
                          ("dp-agr", dict(noise_multiplier=0.0)), ("dp-agrlr", dict(inner_noise=0.0))):
        with pytest.raises(ValueError, match="infinite budget"):
            TrainConfig(algorithm=algorithm, epsilon=1.0, **kw)
        TrainConfig(algorithm=algorithm, epsilon=INF, **kw)  # allowed: the run claims nothing
    with pytest.raises(ValueError, match="unbounded sensitivity"):  # noise calibrated to an infinite clip
        TrainConfig(algorithm="dp-maml", clip=INF, noise_multiplier=1.0)


@pytest.mark.parametrize("first_order", [True, False])
def test_dp_maml_without_noise_or_clipping_is_maml_bit_for_bit(first_order, tmp_path):
    common = dict(steps=3, meta_batch=4, seed=3, first_order=first_order, inner_steps=2)
    plain = run(TrainConfig(algorithm="maml", **common), tmp_path / "a")
    dp = run(TrainConfig(algorithm="dp-maml", clip=INF, noise_multiplier=0.0, **common), tmp_path / "b")
    for k in plain.params:
        assert torch.equal(plain.params[k], dp.params[k]), k
    assert plain.losses == dp.losses
    assert dp.epsilon_spent == INF and dp.report["views"][0]["guarantee"] == "none"


def test_dp_agr_poisson_without_noise_or_clipping_is_maml_bit_for_bit(tmp_path):
    common = dict(steps=4, meta_batch=6, seed=4, sampler="poisson")
    plain = run(TrainConfig(algorithm="maml", **common), tmp_path / "a")
    dp = run(TrainConfig(algorithm="dp-agr", clip=INF, noise_multiplier=0.0, **common), tmp_path / "b")
    for k in plain.params:
        assert torch.equal(plain.params[k], dp.params[k]), k
    assert plain.losses == dp.losses


def _close(a, b):
    for k in a.params:
        torch.testing.assert_close(a.params[k], b.params[k], rtol=1e-4, atol=1e-5, msg=k)
    assert a.losses == pytest.approx(b.losses, rel=1e-4, abs=1e-5)



def _zero_noise_pairs(inner_clip):
    clip = INF if math.isinf(inner_clip) else 1e6
    return {
        "dp-maml-sample-first": (dict(algorithm="maml", first_order=True),
                                 dict(algorithm="dp-maml-sample", first_order=True, noise_multiplier=0.0, clip=clip,
                                      inner_noise=0.0, inner_clip=inner_clip)),
        "dp-maml-sample-second": (dict(algorithm="maml", first_order=False),
                                  dict(algorithm="dp-maml-sample", first_order=False, noise_multiplier=0.0,
                                       clip=clip, inner_noise=0.0, inner_clip=inner_clip)),
        "dp-reptile": (dict(algorithm="reptile", sampler="one-pass", outer_lr=0.5),
                       dict(algorithm="dp-reptile", sampler="one-pass", outer_lr=0.5, inner_noise=0.0,
                            inner_clip=inner_clip)),
        "dp-agrlr": (dict(algorithm="maml", sampler="poisson", first_order=False),
                     dict(algorithm="dp-agrlr", sampler="poisson", first_order=False, noise_multiplier=0.0,
                          clip=clip, inner_noise=0.0, inner_clip=inner_clip)),
    }


@pytest.mark.parametrize("case", sorted(_zero_noise_pairs(INF)))
def test_per_example_paths_without_noise_or_clipping_match_their_non_private_path(case, tmp_path):
    plain_kw, dp_kw = _zero_noise_pairs(INF)[case]
    common = dict(steps=2, meta_batch=4, seed=2, inner_steps=2, inner_lr=0.05)
    _close(run(TrainConfig(**plain_kw, **common), tmp_path / "a"), run(TrainConfig(**dp_kw, **common), tmp_path / "b"))


@pytest.mark.parametrize("case", sorted(_zero_noise_pairs(1e6)))
def test_per_example_paths_with_zero_noise_and_a_huge_clip_match_their_non_private_path(case, tmp_path, monkeypatch):
    # The same comparison with a finite clip no gradient reaches (1e6): the per-example sums, the
    # divisions by m and by the expected batch, the inner loop and the sampling all agree with MAML /
    # Reptile; only the floating-point order of the sums differs. Adam is blind to a constant factor
    # on the gradient, so the gradients handed to the optimiser are compared too, step by step.
    grads = []
    for cls in (torch.optim.Adam, torch.optim.SGD):
        real = cls.step

        def step(self, *args, _real=real, **kwargs):
            grads.append([p.grad.detach().clone() for group in self.param_groups for p in group["params"]])
            return _real(self, *args, **kwargs)

        monkeypatch.setattr(cls, "step", step)
    plain_kw, dp_kw = _zero_noise_pairs(1e6)[case]
    common = dict(steps=3, meta_batch=4, seed=2, inner_steps=2, inner_lr=0.05)
    plain = run(TrainConfig(**plain_kw, **common), tmp_path / "a")
    dp = run(TrainConfig(**dp_kw, **common), tmp_path / "b")
    _close(plain, dp)
    init = initial_params()
    assert max_abs_diff(init, plain.params) > 1e-4  # the runs did move: the comparison is not vacuous
    assert len(grads) == 6
    for a, b in zip(grads[:3], grads[3:]):
        for ga, gb in zip(a, b):
            torch.testing.assert_close(ga, gb, rtol=1e-4, atol=1e-5)
    assert max(float(g.abs().max()) for g in grads[0]) > 1e-2


# --- per_example_query_grads against a loop of autograd calls -----------------------------------------

def _oracle(model, params, tasks, steps, lr, clip, std, noise, first_order):
    """Per task and query example, the DP inner loop by hand (explicit per-example clipping to
    C (1 - 1e-6) as documented, the given noise), then d query loss / d meta-parameters."""
    x_s, y_s, x_q, y_q = tasks
    names = list(params)
    n, m = x_s.shape[1], x_q.shape[1]
    grads = {k: torch.zeros((x_s.shape[0], m) + params[k].shape, dtype=torch.float64) for k in names}
    losses, clipped, kept = [], 0, 0
    for i in range(x_s.shape[0]):
        phi = {k: params[k].detach().clone().requires_grad_(True) for k in names}
        p = dict(phi)
        for s in range(steps):
            total = {k: torch.zeros_like(params[k]) for k in names}
            for j in range(n):
                loss = mse(functional_call(model, p, (x_s[i, j:j + 1],)), y_s[i, j:j + 1])
                g = torch.autograd.grad(loss, [p[k] for k in names], create_graph=not first_order)
                norm = torch.sqrt(sum(t.square().sum() for t in g))
                if float(norm.detach()) > clip * (1 - 1e-6):
                    factor, clipped = clip * (1 - 1e-6) / norm, clipped + 1
                else:
                    factor, kept = 1.0, kept + 1
                for k, t in zip(names, g):
                    total[k] = total[k] + factor * t
            step = {k: (total[k] + std * noise[k][i, s]) / n for k in names}
            if first_order:
                step = {k: t.detach() for k, t in step.items()}
            p = {k: p[k] - lr * step[k] for k in names}
        for j in range(m):
            loss = mse(functional_call(model, p, (x_q[i, j:j + 1],)), y_q[i, j:j + 1])
            g = torch.autograd.grad(loss, [phi[k] for k in names], retain_graph=True)
            for k, t in zip(names, g):
                grads[k][i, j] = t
        losses.append(float(mse(functional_call(model, p, (x_q[i],)), y_q[i]).detach()))
    return grads, torch.tensor(losses, dtype=torch.float64), clipped, kept


@pytest.mark.parametrize("first_order", [True, False])
@pytest.mark.parametrize("inner_clip", [0.05, 3.0])
def test_per_example_query_grads_match_an_autograd_loop(first_order, inner_clip):
    torch.manual_seed(0)
    model = MLP((1, 8, 8, 1)).double()
    params = param_dict(model)
    tasks = tuple(t.double() for t in SinusoidPool(3, 4, 3, seed=7).batch(torch.arange(3)))
    steps, lr, std = 2, 0.1, 0.03 * inner_clip
    noise = P.draw_inner_noise(params, 3, steps, torch.Generator().manual_seed(11))
    got, losses = P.per_example_query_grads(model, params, tasks, mse, steps, lr, inner_clip, std, noise, first_order)
    want, want_losses, clipped, kept = _oracle(model, params, tasks, steps, lr, inner_clip, std, noise, first_order)
    if inner_clip < 1:
        assert clipped > 0  # the threshold is active: the clipping's derivative is exercised
    else:
        assert kept > 0
    for k in want:
        assert got[k].shape == want[k].shape
        torch.testing.assert_close(got[k], want[k], rtol=1e-9, atol=1e-12, msg=k)
    torch.testing.assert_close(losses, want_losses, rtol=1e-9, atol=1e-12)


def test_second_order_query_grads_differ_from_first_order():
    # the oracle test above would pass for both orders if the flag were ignored by both; it is not
    torch.manual_seed(0)
    model = MLP((1, 8, 8, 1)).double()
    params = param_dict(model)
    tasks = tuple(t.double() for t in SinusoidPool(2, 4, 3, seed=7).batch(torch.arange(2)))
    noise = P.draw_inner_noise(params, 2, 1, torch.Generator().manual_seed(1))
    first, _ = P.per_example_query_grads(model, params, tasks, mse, 1, 0.3, 1.0, 0.1, noise, True)
    second, _ = P.per_example_query_grads(model, params, tasks, mse, 1, 0.3, 1.0, 0.1, noise, False)
    assert max_abs_diff(first, second) > 1e-6


# --- clip_rows ---------------------------------------------------------------------------------------

def _rows_norm64(rows):
    return torch.stack([r.flatten(start_dim=1).double().square().sum(-1) for r in rows.values()]).sum(0).sqrt()


@settings(max_examples=60, derandomize=True, database=None, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**31 - 1), log_scale=st.floats(-30, 30), log_clip=st.floats(-30, 30),
       special=st.sampled_from(["none", "zero", "inf", "nan", "neg-inf"]))
def test_clip_rows_never_exceeds_the_threshold(seed, log_scale, log_clip, special):
    g = torch.Generator().manual_seed(seed)
    n = 6
    # rows at scales spread around 10^log_scale (and so above and below C = 10^log_clip)
    row_scale = 10.0 ** (log_scale + 2 * torch.rand(n, 1, generator=g, dtype=torch.float64) - 1)
    rows = {"w": (torch.randn(n, 3, 2, generator=g, dtype=torch.float64) * row_scale[:, :, None]).float(),
            "b": (torch.randn(n, 4, generator=g, dtype=torch.float64) * row_scale).float()}
    rows["w"][0] = {"none": rows["w"][0], "zero": 0.0, "inf": math.inf, "nan": math.nan, "neg-inf": -math.inf}[special]
    if special == "zero":
        rows["b"][0] = 0.0
    C = 10.0 ** log_clip
    before = _rows_norm64(rows)
    out = P.clip_rows(rows, C)
    after = _rows_norm64(out)
    assert all(out[k].dtype == torch.float32 and out[k].shape == rows[k].shape for k in rows)
    assert bool(torch.isfinite(after).all())
    assert bool((after <= C).all()), (after.max().item(), C)
    if special in ("inf", "nan", "neg-inf"):
        assert float(after[0]) == 0.0  # a row with a non-finite norm becomes 0
    below = torch.isfinite(before) & (before <= C)
    for k in rows:
        # rows already within C: unchanged up to the documented factor 1 - 1e-6
        a, b = rows[k][below].double(), out[k][below].double()
        assert bool(((b - a).abs() <= 1.2e-6 * a.abs() + 1e-44).all())
    above = torch.isfinite(before) & (before > C) & (after > 0)
    # rows above C keep their direction and land just below C (unless float32 underflowed them to 0)
    assert bool((after[above] >= C * (1 - 1e-5)).all())


def test_clip_rows_with_an_infinite_threshold_returns_the_rows():
    rows = {"a": torch.tensor([[1e30, -2.0], [0.0, math.inf]])}
    out = P.clip_rows(rows, math.inf)
    assert torch.equal(out["a"], rows["a"])


def test_clip_rows_jacobian_and_second_derivatives_are_finite_and_exact():
    C = 1.0
    x = torch.tensor([[0.0, 0.0, 0.0], [0.3, -0.2, 0.1], [3.0, 4.0, 12.0]], dtype=torch.float64, requires_grad=True)

    def clipped(t):
        return P.clip_rows({"a": t}, C)["a"]

    jac = torch.autograd.functional.jacobian(clipped, x, create_graph=True)  # [3, 3, 3, 3]
    second = torch.autograd.grad(jac.sum(), x)[0]  # d/dx of a Jacobian contraction (second order)
    jac = jac.detach()
    assert bool(torch.isfinite(jac).all())
    eye = torch.eye(3, dtype=torch.float64)
    torch.testing.assert_close(jac[0, :, 0, :], eye)  # the zero row: identity (below C)
    torch.testing.assert_close(jac[1, :, 1, :], eye)
    g = x.detach()[2]
    r = float(g.norm())  # 13
    analytic = C * (1 - 1e-6) * (eye / r - torch.outer(g, g) / r**3)  # d (C' g / ||g||) / d g
    torch.testing.assert_close(jac[2, :, 2, :], analytic, rtol=1e-12, atol=1e-15)
    assert float(jac[0, :, 1, :].abs().max()) == 0.0  # rows do not interact
    # second order: finite, the zero row included
    assert bool(torch.isfinite(second).all())
    assert float(second[2].abs().max()) > 0  # the clipped row has curvature


# --- budgets and sampling ------------------------------------------------------------------------------

def test_an_empty_poisson_sample_still_releases_noise(tmp_path):
    common = dict(algorithm="dp-maml", steps=3, meta_batch=4e-8, seed=0)  # rate 1e-9: no task is sampled
    noisy = run(TrainConfig(clip=1.0, noise_multiplier=1.0, **common), tmp_path / "noisy")
    assert noisy.losses == (0.0, 0.0, 0.0)  # the mean query loss over no sampled task
    init = initial_params()
    assert all(not torch.equal(init[k], noisy.params[k]) for k in init)  # the noise moved every tensor
    for view in ("task", "record"):
        entries = ledger_entries(tmp_path / "noisy" / f"ledger-{view}.jsonl")
        assert [e.step for e in entries] == [0, 1, 2] and all(e.count == 1 for e in entries)
    # without noise the same empty steps leave the model where it was (the change above is the noise)
    quiet = run(TrainConfig(clip=INF, noise_multiplier=0.0, **common), tmp_path / "quiet")
    assert quiet.losses == (0.0, 0.0, 0.0)
    assert all(torch.equal(init[k], quiet.params[k]) for k in init)


def test_dp_reptile_one_pass_stops_at_the_last_visit_within_budget(tmp_path):
    z_in, S, eps = 4.0, 2, 2.0
    per_visit = Gaussian(z_in / math.sqrt(S))  # privacy.py docstring: DP-Reptile, s^2 = S / z_in^2
    cap = pld_cap(per_visit, eps)
    assert 1 <= cap < 6  # the budget binds before the 8 passes asked for
    config = TrainConfig(algorithm="dp-reptile", sampler="one-pass", steps=40, meta_batch=4, inner_steps=S,
                         inner_noise=z_in, inner_clip=1.0, epsilon=eps, delta=DELTA, seed=1)
    result = run(config, tmp_path, pool=pool20())
    entries = ledger_entries(tmp_path / "ledger-record.jsonl")
    assert sum(e.count for e in entries) == cap
    assert all(e.event == per_visit for e in entries)
    report = result.report
    assert report["max_record_visits"] == cap and report["sampling_run"]["steps_per_pass"] == 5
    # the loop ran every step of the cap passes (each task visited cap times), and stopped in the next pass
    assert 5 * cap <= result.steps_done < 5 * (cap + 1) and report["steps"] == result.steps_done
    assert result.epsilon_spent == pytest.approx(pld_epsilon(per_visit, cap), rel=1e-6)
    assert result.epsilon_spent <= eps < pld_epsilon(per_visit, cap + 1)
    record = next(v for v in report["views"] if v["view"] == "record")
    assert record["event"] == per_visit.describe() and record["charged_per"] == "visit"


def _tightest(event, count):
    return certify(event, DELTA, steps=count).epsilon


def test_dp_agr_one_pass_stops_at_the_last_pass_within_budget(tmp_path):
    z, eps = 2.0, 2.0
    # privacy.py docstring: one pass is random allocation (each task in one uniformly random step of the pass),
    # charged as a balls_in_bins plan charges it, the tightest accountant (issue 29: it was one Gaussian a pass)
    per_pass = RandomAllocation(5, Gaussian(z))
    cap = 0
    while cap < 50 and _tightest(per_pass, cap + 1) <= eps:
        cap += 1
    assert pld_cap(Gaussian(z), eps) < cap < 6  # the single-Gaussian charge would have stopped after fewer passes
    config = TrainConfig(algorithm="dp-agr", steps=30, meta_batch=4, noise_multiplier=z, clip=1.0, epsilon=eps,
                         delta=DELTA, seed=2)
    result = run(config, tmp_path, pool=pool20())
    task = ledger_entries(tmp_path / "ledger-task.jsonl")
    assert len(task) == cap and all(e.event == per_pass and e.count == 1 for e in task)
    assert [e.step for e in task] == [5 * i for i in range(cap)]  # charged at the first step of each pass
    assert result.steps_done == result.last_step == 5 * cap
    assert result.epsilon_spent <= eps < _tightest(per_pass, cap + 1)
    record = ledger_entries(tmp_path / "ledger-record.jsonl")
    assert len(record) == cap and all(e.event == Gaussian(z / 2) for e in record)


def _glyph_pool():
    images = synthetic_glyphs(6, 4, size=16, seed=0).images  # 24 images shared by the 12 episodes
    return EpisodePool(images, 12, n_way=3, k_shot=1, k_query=1, seed=0)  # with meta_batch 6: 2 steps a pass


def _glyph_run(config, out, pool):
    torch.manual_seed(0)
    return train(Conv4(3, hidden=8, norm="group", image_size=16), pool, TF.cross_entropy, config, out)


def test_dp_reptile_charges_every_visit_of_a_record_shared_by_tasks(tmp_path):
    pool = _glyph_pool()
    k = pool.record_multiplicity()
    assert k >= 3
    config = TrainConfig(algorithm="dp-reptile", sampler="one-pass", steps=2, meta_batch=6, inner_noise=3.0, seed=0)
    result = _glyph_run(config, tmp_path, pool)
    # one pass: every episode once, so the most shared image is visited k times, in at most 2 steps
    entries = ledger_entries(tmp_path / "ledger-record.jsonl")
    assert sum(e.count for e in entries) == k == result.report["max_record_visits"]
    assert len(entries) <= 2 and result.report["steps"] == 2
    assert result.epsilon_spent == pytest.approx(pld_epsilon(Gaussian(3.0), k), rel=1e-6)



def test_calibrated_dp_reptile_with_shared_records_runs_and_spends_its_budget(tmp_path):
    pool = _glyph_pool()
    base = TrainConfig(algorithm="dp-reptile", sampler="one-pass", steps=2, meta_batch=6, epsilon=4.0, delta=DELTA,
                       seed=0)
    tuned = calibrate(pool, base)
    assert pld_epsilon(Gaussian(tuned.inner_noise), pool.record_multiplicity()) <= 4.0  # k visits fit the budget
    result = _glyph_run(tuned, tmp_path, pool)
    assert result.report["steps"] == 2
    assert 0.95 * 4.0 < result.epsilon_spent <= 4.0


def _agr_config(steps, **kw):
    # budget 2.0: four passes of random allocation fit (the single-Gaussian charge fitted two of 3.0)
    return TrainConfig(algorithm="dp-agr", steps=steps, meta_batch=4, noise_multiplier=2.0, clip=1.0, epsilon=2.0,
                       delta=DELTA, seed=3, checkpoint_every=3, **kw)


def _agr(steps, out, **kw):
    return run(_agr_config(steps), out, pool=pool20(), **kw)


def test_dp_agr_resume_at_a_checkpoint_continues_the_same_run(tmp_path):
    full = _agr(30, tmp_path / "full")
    cap = len(ledger_entries(tmp_path / "full" / "ledger-task.jsonl"))
    assert 2 <= cap < 6 and full.steps_done == 5 * cap  # the budget stops the run before step 30
    _agr(7, tmp_path / "split")  # stopped after 7 steps (a checkpoint is written at the end)
    first = ledger_entries(tmp_path / "split" / "ledger-task.jsonl")
    assert len(first) == 2
    resumed = _agr(30, tmp_path / "split", resume=True, resume_changed=True)  # more steps: a changed setting
    after = ledger_entries(tmp_path / "split" / "ledger-task.jsonl")
    assert [e.hash for e in after[:len(first)]] == [e.hash for e in first]  # the old entries are kept
    assert len(after) == cap and resumed.steps_done == full.steps_done
    assert resumed.epsilon_spent == pytest.approx(full.epsilon_spent, rel=1e-9) and resumed.epsilon_spent <= 2.0
    for k in full.params:  # sampler, optimiser and noise generator states came back with the checkpoint
        assert torch.equal(full.params[k], resumed.params[k]), k


def test_dp_agr_resume_from_an_older_checkpoint_counts_the_later_releases(tmp_path):
    out = tmp_path / "run"
    _agr(5, out)  # one pass; checkpoint at step 5
    saved = tmp_path / "checkpoint-step5.pt"
    shutil.copy(out / "checkpoint.pt", saved)
    _agr(7, out, resume=True, resume_changed=True)  # a second pass starts (charged at step 5) ...
    released = ledger_entries(out / "ledger-task.jsonl")
    assert len(released) == 2
    shutil.copy(saved, out / "checkpoint.pt")  # ... and the process dies before its next checkpoint
    full = _agr(30, tmp_path / "full")
    cap = len(ledger_entries(tmp_path / "full" / "ledger-task.jsonl"))
    resumed = _agr(30, out, resume=True, resume_changed=True)
    after = ledger_entries(out / "ledger-task.jsonl")
    assert [e.hash for e in after[:2]] == [e.hash for e in released]  # nothing released is forgotten
    assert len(after) <= cap  # the redone pass is charged again, and the budget still holds
    assert resumed.epsilon_spent <= 2.0 and resumed.steps_done <= full.steps_done
    assert resumed.epsilon_spent == pytest.approx(_tightest(RandomAllocation(5, Gaussian(2.0)), len(after)), rel=1e-6)



def test_a_low_noise_run_reports_a_finite_epsilon(tmp_path):
    # z = 0.05 is weak but finite noise: the report must still give a (huge) certified epsilon; Gaussian(0.05)
    # alone costs ~284 at delta 1e-5, and sampling at q = 0.1 removes about log(1 / q) from so large an epsilon
    result = run(TrainConfig(algorithm="dp-maml", steps=2, meta_batch=4, noise_multiplier=0.05), tmp_path)
    assert math.isfinite(result.epsilon_spent) and result.epsilon_spent > 100


def test_a_budget_below_one_step_raises(tmp_path):
    # second-order sample-level DP-MAML: s^2 = S / z_in^2 + (2 m / z)^2 = 1 + 100 per record appearance
    config = TrainConfig(algorithm="dp-maml-sample", first_order=False, steps=10, meta_batch=4, noise_multiplier=1.0,
                         inner_noise=1.0, epsilon=1.0, delta=DELTA)
    with pytest.raises(ValueError, match=r"does not cover one step of the record view.*raise the noise"):
        run(config, tmp_path)
    assert not (tmp_path / "checkpoint.pt").exists()


def test_a_view_without_a_guarantee_cannot_be_budgeted(tmp_path):
    config = TrainConfig(algorithm="dp-reptile", unit="task", steps=3, meta_batch=4, epsilon=5.0)
    with pytest.raises(ValueError, match="no task-level guarantee"):
        run(config, tmp_path)


@pytest.mark.parametrize("algorithm,unit,sampler,steps", [
    ("dp-maml", "task", "poisson", 8),
    ("dp-reptile", "record", "one-pass", 10),  # 2 passes: every record visited twice
    ("dp-agrlr", "record-vs-server", "one-pass", 10),
])
def test_calibrated_noise_spends_the_budget(algorithm, unit, sampler, steps, tmp_path):
    eps = 2.0
    pool = pool20()
    base = TrainConfig(algorithm=algorithm, unit=unit, sampler=sampler, steps=steps, meta_batch=4, epsilon=eps,
                       delta=DELTA, seed=6, first_order=True)
    tuned = calibrate(pool, base)
    changed = {f.name for f in dataclasses.fields(base) if getattr(base, f.name) != getattr(tuned, f.name)}
    assert changed == ({"inner_noise"} if unit != "task" else {"noise_multiplier"})
    result = run(tuned, tmp_path, pool=pool)
    assert result.report["steps"] == steps  # the calibrated noise lets every step asked for run
    view = next(v for v in result.report["views"] if v["view"] == unit)
    assert 0.95 * eps < view["epsilon"] <= eps
    assert result.epsilon_spent == view["epsilon"]
