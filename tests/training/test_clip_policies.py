"""Clipping-threshold policies (metadp.training.algorithms.clipping) and how the trainer admits and accounts them.

References: the noisy-window and raw-percentile thresholds are checked against ``numpy.percentile``
(linear interpolation) over the last W values, replayed by a few lines of reference code; the quantile
update against the closed form C exp(-eta (b - gamma)) of Andrew, Thakkar, McMahan & Ramaswamy 2021
(arXiv:1905.03871, Alg. 1), b = noisy count / expected + 1/2.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from metadp.accounting import Gaussian, RandomAllocation  # noqa: E402
from metadp.accounting.adaptive_clipping import combined_noise_multiplier, sum_noise_multiplier  # noqa: E402
from metadp.training.algorithms import functional  # noqa: E402
from metadp.training.algorithms.clipping import POLICIES, ClipPolicy  # noqa: E402
from metadp.accounting.ledger import Ledger  # noqa: E402
from metadp.training.algorithms.models import MLP  # noqa: E402
from metadp.training.data.samplers import PoissonSampler  # noqa: E402
from metadp.training.data.tasks import SinusoidPool  # noqa: E402
from metadp.training.run.trainer import TrainConfig, train  # noqa: E402


def mse(out, y):
    return ((out - y) ** 2).mean()


def run(config, out):
    torch.manual_seed(0)
    return train(MLP(), SinusoidPool(20, 5, 5, seed=1), mse, config, out)  # meta_batch 4: 5 steps a pass


# --- the policies on their own -----------------------------------------------------------------------------

def test_fixed_never_moves():
    policy = ClipPolicy("fixed", 2.5, window=2)
    for value in (0.1, 1e-9, 100.0, 0.0):
        policy.after_release(value)
        policy.after_count(-10.0, 4.0)
        policy.after_raw_norms([value] * 5)
    assert policy.threshold == 2.5 and policy.private


def test_noisy_window_waits_for_w_releases_only_decreases_and_is_the_window_percentile():
    W, p = 5, 30.0
    policy = ClipPolicy("noisy-window", 3.0, window=W, percentile=p)
    rng = np.random.default_rng(0)
    released = list(rng.uniform(0.5, 6.0, size=40))
    reference, history = 3.0, []
    for i, value in enumerate(released):
        before = policy.threshold
        policy.after_release(value)
        history.append(value)
        if len(history) >= W:
            candidate = float(np.percentile(history[-W:], p))  # linear interpolation, numpy's default
            reference = min(reference, candidate)
        if i < W - 1:
            assert policy.threshold == 3.0  # nothing happens before the window is full
        assert policy.threshold <= before  # only decreases
        assert policy.threshold == pytest.approx(reference, rel=1e-12)
    assert policy.threshold < 3.0  # the sequence did move it
    # the other updates are not this policy's
    policy.after_count(-100.0, 1.0)
    policy.after_raw_norms([1e-6] * 10)
    assert policy.threshold == pytest.approx(reference, rel=1e-12)


def test_noisy_window_ignores_non_finite_releases_and_stays_positive():
    policy = ClipPolicy("noisy-window", 1.0, window=3, percentile=50.0)
    for value in (math.inf, math.nan, 0.4, math.inf, 0.2):
        policy.after_release(value)
    assert policy.threshold == 1.0  # two finite values: the window is not full
    policy.after_release(0.9)
    assert policy.threshold == pytest.approx(float(np.percentile([0.4, 0.2, 0.9], 50.0)))
    for _ in range(3):
        policy.after_release(0.0)  # a zero percentile would make the clip (and the noise) vanish
    assert policy.threshold > 0


def test_quantile_update_is_geometric_in_the_noisy_unclipped_fraction():
    eta, gamma, C = 0.3, 0.7, 2.0
    policy = ClipPolicy("quantile", C, target=gamma, learning_rate=eta, count_noise=1.0)
    expected = 8.0
    for count in (-4.0, 4.0, 0.0, 1.3, -2.6, 10.0):  # counts of b_i = 1[unclipped] - 1/2, noisy
        b = count / expected + 0.5
        C = C * math.exp(-eta * (b - gamma))
        policy.after_count(count, expected)
        assert policy.threshold == pytest.approx(C, rel=1e-12)
    # all clipped (b = 0): the threshold grows; none clipped (b = 1): it shrinks
    grow = ClipPolicy("quantile", 1.0, target=0.5, learning_rate=0.2, count_noise=1.0)
    grow.after_count(-0.5 * 4, 4.0)
    assert grow.threshold == pytest.approx(math.exp(0.1))
    shrink = ClipPolicy("quantile", 1.0, target=0.5, learning_rate=0.2, count_noise=1.0)
    shrink.after_count(0.5 * 4, 4.0)
    assert shrink.threshold == pytest.approx(math.exp(-0.1))
    before = shrink.threshold
    shrink.after_release(1e-9)
    shrink.after_raw_norms([1e-9] * 100)
    assert shrink.threshold == before


def test_quantile_needs_count_noise():
    with pytest.raises(ValueError, match="count_noise"):
        ClipPolicy("quantile", 1.0)


def test_raw_percentile_is_the_percentile_of_the_last_w_raw_norms():
    W, p = 6, 75.0
    policy = ClipPolicy("raw-percentile", 5.0, window=W, percentile=p)
    assert not policy.private
    rng = np.random.default_rng(1)
    norms, reference = [], 5.0
    for batch in range(8):
        values = list(rng.uniform(0.1, 8.0, size=int(rng.integers(1, 4))))
        policy.after_raw_norms(values + [math.inf, math.nan])  # non-finite norms are dropped
        norms.extend(values)
        if len(norms) >= W:
            reference = min(reference, float(np.percentile(norms[-W:], p)))
        else:
            assert policy.threshold == 5.0
        assert policy.threshold == pytest.approx(reference, rel=1e-12)
    assert policy.threshold < 5.0
    policy.after_release(1e-9)  # released norms are the noisy-window policy's
    assert policy.threshold == pytest.approx(reference, rel=1e-12)


@pytest.mark.parametrize("name", POLICIES)
def test_state_dict_round_trip_continues_identically(name):
    kw = dict(window=4, percentile=40.0, target=0.6, learning_rate=0.25, count_noise=1.5)
    original = ClipPolicy(name, 4.0, **kw)
    rng = np.random.default_rng(2)

    def feed(policy, r):
        value = float(r.uniform(0.1, 5.0))
        policy.after_release(value)
        policy.after_count(float(r.normal(0.0, 2.0)), 4.0)
        policy.after_raw_norms([value, value / 2])

    for _ in range(3):  # a partly filled window: the history must travel too
        feed(original, rng)
    state = json.loads(json.dumps(original.state_dict()))  # plain data (a checkpoint could hold it as JSON)
    copy = ClipPolicy(name, 4.0, **kw)
    copy.load_state_dict(state)
    assert copy.threshold == original.threshold
    ra, rb = np.random.default_rng(3), np.random.default_rng(3)
    for _ in range(6):
        feed(original, ra)
        feed(copy, rb)
        assert copy.threshold == original.threshold
    with pytest.raises(ValueError):
        copy.load_state_dict({"threshold": 0.0, "history": []})


def test_policy_arguments_are_validated():
    with pytest.raises(ValueError, match="clip policy must be one of"):
        ClipPolicy("median", 1.0)
    for bad in (dict(initial=0.0), dict(initial=-1.0), dict(percentile=101.0), dict(window=0), dict(target=1.5)):
        args = {"initial": 1.0, **bad}
        with pytest.raises(ValueError):
            ClipPolicy("noisy-window", args.pop("initial"), **args)


# --- what TrainConfig admits -------------------------------------------------------------------------------

def test_raw_percentile_cannot_have_a_budget():
    with pytest.raises(ValueError, match="raw-percentile.*no privacy guarantee"):
        TrainConfig(algorithm="dp-maml", clip_policy="raw-percentile", epsilon=8.0)
    TrainConfig(algorithm="dp-maml", clip_policy="raw-percentile")  # epsilon = inf: reproduce, claim nothing


@pytest.mark.parametrize("algorithm", ["dp-maml", "dp-agr", "dp-agrlr"])
def test_quantile_needs_count_noise_above_half_the_multiplier(algorithm):
    with pytest.raises(ValueError, match="count_noise > z / 2"):
        TrainConfig(algorithm=algorithm, clip_policy="quantile", noise_multiplier=1.0, count_noise=0.5)
    with pytest.raises(ValueError, match="count_noise > z / 2"):  # default sigma_b = meta_batch / 20 = 0.2
        TrainConfig(algorithm=algorithm, clip_policy="quantile", noise_multiplier=1.0, meta_batch=4)
    TrainConfig(algorithm=algorithm, clip_policy="quantile", noise_multiplier=1.0, count_noise=0.51)
    TrainConfig(algorithm=algorithm, clip_policy="quantile", noise_multiplier=1.0, meta_batch=32)  # 1.6 > 0.5


@pytest.mark.parametrize("algorithm", ["dp-maml-sample", "dp-reptile"])
@pytest.mark.parametrize("policy", ["noisy-window", "quantile", "raw-percentile"])
def test_per_example_algorithms_keep_fixed_thresholds(algorithm, policy):
    with pytest.raises(ValueError, match="clips per example with fixed thresholds"):
        TrainConfig(algorithm=algorithm, clip_policy=policy, count_noise=10.0)
    TrainConfig(algorithm=algorithm, clip_policy="fixed")


# --- in a run ------------------------------------------------------------------------------------------------

def _ledger_events(path):
    ledger = Ledger.open(path, readonly=True)
    try:
        return [(e.event, e.count) for e in ledger.entries]
    finally:
        ledger.close()


def test_quantile_run_moves_the_threshold_and_keeps_the_accounted_events(tmp_path):
    z, sigma_b = 1.0, 0.6
    common = dict(algorithm="dp-agr", steps=6, meta_batch=4, noise_multiplier=z, clip_lr=0.2, clip_target=0.5,
                  count_noise=sigma_b, seed=4)
    # every task's meta-gradient is far above C = 1e-4: the unclipped fraction is ~0, so C grows
    small = run(TrainConfig(clip=1e-4, clip_policy="quantile", **common), tmp_path / "small")
    assert small.report["final_clip"] > 1e-4 and small.report["clip_policy"] == "quantile"
    # ... and far below C = 1e4: ~1, so C shrinks
    large = run(TrainConfig(clip=1e4, clip_policy="quantile", **common), tmp_path / "large")
    assert large.report["final_clip"] < 1e4
    fixed = run(TrainConfig(clip=1e-4, clip_policy="fixed", **common), tmp_path / "fixed")
    assert fixed.report["final_clip"] == 1e-4
    # the count's release is folded into the step: the views and the ledgers still charge z (the task a pass of
    # random allocation over its 5 steps, the record one Gaussian a pass)
    strip = ("event", "view", "charges", "epsilon", "relation", "charged_per")
    for out in (small, large):
        assert [{k: v[k] for k in strip} for v in out.report["views"]] == \
               [{k: v[k] for k in strip} for v in fixed.report["views"]]
    for view, event in (("task", RandomAllocation(5, Gaussian(z))), ("record", Gaussian(z / 2))):
        charged = _ledger_events(tmp_path / "small" / f"ledger-{view}.jsonl")
        assert charged == _ledger_events(tmp_path / "fixed" / f"ledger-{view}.jsonl") == [(event, 1)] * 2  # 2 passes
    # why that is right: the sum's raised multiplier and the count's combine to exactly z
    assert combined_noise_multiplier(sum_noise_multiplier(z, sigma_b), sigma_b) == pytest.approx(z, rel=1e-12)
    assert sum_noise_multiplier(z, sigma_b) > z


def test_quantile_noise_uses_the_raised_multiplier_and_the_threshold_in_force(tmp_path, monkeypatch):
    # spy on the one noisy release of each step: its std must be z_sum C_t, with z_sum raised so that the
    # sum and the count together stay Gaussian(z), and C_t the threshold before this step's update
    stds, real = [], functional.noisy_sum

    def spy(grads, weights, std, **kw):
        stds.append(std)
        return real(grads, weights, std, **kw)

    monkeypatch.setattr(functional, "noisy_sum", spy)
    counts, real_count = [], ClipPolicy.after_count

    def count_spy(self, noisy_count, expected):
        counts.append((noisy_count, expected))
        return real_count(self, noisy_count, expected)

    monkeypatch.setattr(ClipPolicy, "after_count", count_spy)
    z, sigma_b, C = 1.0, 0.6, 1e-3
    config = TrainConfig(algorithm="dp-agr", steps=5, meta_batch=4, noise_multiplier=z, clip=C, clip_policy="quantile",
                         count_noise=sigma_b, checkpoint_every=1, seed=2)
    run(config, tmp_path)
    clips = [json.loads(line)["clip"] for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert len(stds) == len(clips) == 5 and len(set(clips)) == 5  # the threshold moved every step
    z_sum = (z**-2 - (2 * sigma_b) ** -2) ** -0.5  # adaptive_clipping docstring
    assert stds == pytest.approx([z_sum * c for c in [C] + clips[:-1]], rel=1e-12)
    # each update used that step's noisy count over the expected batch (20 tasks, 5 steps a pass: 4)
    assert len(counts) == 5 and all(e == 4.0 for _, e in counts)
    replay = C
    for (count, _), clip in zip(counts, clips):
        replay *= math.exp(-0.2 * (count / 4.0 + 0.5 - 0.5))  # default clip_lr 0.2, clip_target 0.5
        assert clip == pytest.approx(replay, rel=1e-12)


def test_quantile_counts_only_the_sampled_tasks_of_a_poisson_step(tmp_path, monkeypatch):
    # Poisson steps are padded to a static batch with rows of weight 0; the count of unclipped tasks must
    # ignore those. With C = 1e-4 every real task is clipped (b_i = -1/2) and sigma_b = 0.16 is small
    # (allowed since z = 0.3 < 2 sigma_b), so the noisy count is -|sample| / 2 to within 5 sigma_b; the
    # 17-row padded batch (expected 4 + 6 sqrt(4) + 1) would give about -8.5.
    masks, counts = [], []
    real_sample, real_count = PoissonSampler.sample, ClipPolicy.after_count

    def sample_spy(self):
        mask = real_sample(self)
        masks.append(mask.clone())
        return mask

    def count_spy(self, noisy_count, expected):
        counts.append(noisy_count)
        return real_count(self, noisy_count, expected)

    monkeypatch.setattr(PoissonSampler, "sample", sample_spy)
    monkeypatch.setattr(ClipPolicy, "after_count", count_spy)
    config = TrainConfig(algorithm="dp-maml", steps=4, meta_batch=4, clip=1e-4, noise_multiplier=0.3,
                         clip_policy="quantile", count_noise=0.16, seed=5)
    result = run(config, tmp_path)
    sizes = [int(m.sum()) for m in masks]
    assert len(sizes) == len(counts) == 4 and result.report["sampling"]["scheme"] == "poisson"
    assert counts == pytest.approx([-0.5 * n for n in sizes], abs=5 * 0.16)
    assert result.report["final_clip"] > 1e-4  # all clipped: the threshold grows


def test_raw_percentile_run_moves_the_threshold_and_claims_nothing(tmp_path):
    config = TrainConfig(algorithm="dp-maml", steps=4, meta_batch=6, clip=1e4, noise_multiplier=1.0,
                         clip_policy="raw-percentile", clip_window=4, seed=1)
    result = run(config, tmp_path)
    report = result.report
    assert report["final_clip"] < 1e4  # raw per-task norms are far below 1e4
    assert report["views"] and all(v["event"] is None and v["guarantee"] == "none" and "NOT PRIVATE" in v["note"]
                                   for v in report["views"])
    assert not list(tmp_path.glob("ledger-*.jsonl")) and result.epsilon_spent == math.inf
