"""Trainer samplers (metadp/training/data/samplers.py): each realises the inclusion law its event assumes.

Every sampler's recorded output passes its test in metadp/verify/fidelity.py at alpha = 1e-3, and a
deliberately wrong sampler of the same shape fails it (seeded generators: each outcome is fixed; the
wrong ones fail by margins the sample sizes make decisive). Then determinism, checkpointed state,
the events, input checks and the speed of the DP-MAML episode draw.
"""

from __future__ import annotations

import statistics
import time
from fractions import Fraction

import numpy as np
import pytest
from scipy import stats

torch = pytest.importorskip("torch")

from metadp.plan import Plan  # noqa: E402
from metadp.core import events as ev  # noqa: E402
from metadp.amplification.multistage import Hierarchy, Level  # noqa: E402
from metadp.training.data import subsets  # noqa: E402
from metadp.accounting.ledger import Ledger  # noqa: E402
from metadp.training.data.samplers import (BallsInBinsSampler, EpisodicSampler, Episodes,  # noqa: E402
                                      FixedSizeSampler, PoissonSampler, random_subsets)
from metadp.verify.fidelity import (episodic_multiplicity_test, fixed_size_test, one_pass_test,  # noqa: E402
                                    poisson_inclusion_test)

ALPHA = 1e-3
Z = ev.Gaussian(1.0)
DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
OMNIGLOT = Hierarchy((Level("class", "fixed", size=5, units=1150), Level("drawing", "fixed", size=2, units=20)))


def gen(seed: int, device: str = "cpu") -> "torch.Generator":
    return torch.Generator(device).manual_seed(seed)


def masks(sampler, steps: int) -> np.ndarray:
    return torch.stack([sampler.sample() for _ in range(steps)]).cpu().numpy()


def index_masks(sampler, steps: int) -> np.ndarray:
    out = torch.zeros((steps, sampler.pool_size), dtype=torch.bool)
    for t in range(steps):
        out[t, sampler.sample().cpu()] = True
    return out.numpy()


# -- Poisson -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("device", DEVICES)
def test_poisson_sampler_passes_the_poisson_test(device):
    sampler = PoissonSampler(200, 0.05, gen(1, device))
    m = sampler.sample()
    assert m.dtype == torch.bool and m.shape == (200,) and m.device.type == device
    result = poisson_inclusion_test(masks(sampler, 2000), 0.05, ALPHA)
    assert result.passed, result.detail


def test_wrong_poisson_samplers_fail():
    # a rate 10% off: total 22,000 of 400,000 against 20,000 expected (z ~ 14)
    assert not poisson_inclusion_test(masks(PoissonSampler(200, 0.055, gen(2)), 2000), 0.05, ALPHA).passed
    # fixed-size batches of the right mean: no spread in the per-step counts
    assert not poisson_inclusion_test(index_masks(FixedSizeSampler(200, 10, gen(3)), 2000), 0.05, ALPHA).passed


def test_poisson_degenerate_rates_are_exact():
    assert not masks(PoissonSampler(50, 0.0, gen(4)), 20).any()
    assert masks(PoissonSampler(50, 1.0, gen(4)), 20).all()


# -- fixed size --------------------------------------------------------------------------------------


@pytest.mark.parametrize("pool, batch", [(100, 1), (100, 5), (100, 60), (100, 100), (2000, 5)])
@pytest.mark.parametrize("device", DEVICES)
def test_fixed_size_sampler_passes_the_fixed_size_test(pool, batch, device):
    sampler = FixedSizeSampler(pool, batch, gen(batch, device))
    idx = sampler.sample()
    assert idx.dtype == torch.int64 and idx.shape == (batch,) and idx.device.type == device
    assert len(set(idx.tolist())) == batch and 0 <= int(idx.min()) and int(idx.max()) < pool
    result = fixed_size_test(index_masks(sampler, 2000), batch, ALPHA)
    assert result.passed, result.detail


@pytest.mark.parametrize("draw", [subsets._floyd_subsets, subsets._key_subsets], ids=["floyd", "keys"])
@pytest.mark.parametrize("n, k", [(10, 1), (10, 4), (10, 10), (7, 6)])
def test_both_subset_algorithms_are_uniform_in_every_position(draw, n, k):
    """Floyd's raw order is not uniform (its last draws favour the largest items); the shuffle makes it so."""
    rows = 20000
    draws = draw(rows, n, k, gen(5)).numpy()  # [rows, k]
    assert (np.sort(draws, axis=1)[:, 1:] > np.sort(draws, axis=1)[:, :-1]).all()  # distinct
    for position in range(k):
        counts = np.bincount(draws[:, position], minlength=n)
        chi2 = float(((counts - rows / n) ** 2 / (rows / n)).sum())
        assert chi2 < stats.chi2.isf(1e-4, n - 1), (position, counts)


def test_random_subsets_picks_floyd_for_small_subsets_of_large_pools(monkeypatch):
    used = []
    monkeypatch.setattr(subsets, "_floyd_subsets", lambda *a: used.append("floyd") or torch.zeros((1, 1)))
    monkeypatch.setattr(subsets, "_key_subsets", lambda *a: used.append("keys") or torch.zeros((1, 1)))
    for rows, n, k in [(1600, 1150, 5), (8000, 20, 2), (1, 10**6, 5), (1, 100, 5), (1, 100, 60)]:
        random_subsets(rows, n, k, gen(0))
    assert used == ["floyd", "floyd", "floyd", "keys", "keys"]
    assert random_subsets(3, 10, 0, gen(0)).shape == (3, 0)


def _biased_floyd(rows, n, k, g):
    """Floyd's algorithm with a bug: every draw is uniform on [0, n) instead of [0, j]."""
    out = torch.empty((rows, k), dtype=torch.int64)
    for i in range(k):
        j = n - k + i
        t = torch.randint(0, n, (rows,), generator=g)
        taken = (out[:, :i] == t[:, None]).any(dim=1) | (t > j)
        out[:, i] = torch.where(taken, j, t)
    return out


def test_wrong_fixed_size_samplers_fail():
    g = gen(6)
    with_replacement = torch.zeros((2000, 100), dtype=torch.bool)
    with_replacement[torch.arange(2000)[:, None], torch.randint(0, 100, (2000, 5), generator=g)] = True
    assert not fixed_size_test(with_replacement.numpy(), 5, ALPHA).passed  # duplicates: short batches
    biased = torch.zeros((8000, 20), dtype=torch.bool)
    biased[torch.arange(8000)[:, None], _biased_floyd(8000, 20, 5, g)] = True
    result = fixed_size_test(biased.numpy(), 5, ALPHA)
    assert not result.passed, result.detail  # the last units are drawn far too often


# -- balls in bins -----------------------------------------------------------------------------------


@pytest.mark.parametrize("device", DEVICES)
def test_balls_in_bins_passes_the_one_pass_test(device):
    sampler = BallsInBinsSampler(300, 10, gen(7, device))
    m = masks(sampler, 1000)  # 100 passes
    for scheme in ("random_allocation", "any"):
        result = one_pass_test(m, 10, scheme, ALPHA)
        assert result.passed, result.detail


def test_wrong_one_pass_samplers_fail():
    g = gen(8)
    partition = np.zeros((1000, 300), dtype=bool)  # shuffle, cut into 10 batches of 30: DESIGN.md 3.9(b)
    for p in range(100):
        partition[10 * p + np.arange(10)[:, None], torch.randperm(300, generator=g).view(10, 30).numpy()] = True
    assert one_pass_test(partition, 10, "partition", ALPHA).passed
    assert not one_pass_test(partition, 10, "random_allocation", ALPHA).passed  # no spread in step sizes
    poisson = masks(PoissonSampler(300, 0.1, g), 1000)  # the Poisson proxy is not a pass
    assert not one_pass_test(poisson, 10, "random_allocation", ALPHA).passed


def test_balls_in_bins_events_and_pass_position():
    sampler = BallsInBinsSampler(30, 3, gen(9))
    assert sampler.pass_event(Z) is Z and sampler.relation == "add_remove"
    with pytest.raises(ValueError, match="no per-step event.*pass_event"):
        sampler.step_event(Z)
    assert sampler.assignment is None
    positions = []
    for _ in range(7):
        positions.append(sampler.step_in_pass)
        sampler.sample()
    assert positions == [0, 1, 2, 0, 1, 2, 0]
    assert sorted(sampler.assignment.unique().tolist()) <= [0, 1, 2]


# -- episodic ----------------------------------------------------------------------------------------


def record_counts(sampler, steps, records):
    """[steps, len(records)]: the number of a step's episodes that contain each record."""
    return torch.stack([sampler.element_counts(sampler.sample())[records] for _ in range(steps)]).cpu().numpy()


def test_omniglot_events_match_the_plan():
    sampler = EpisodicSampler(OMNIGLOT, 1600, gen(10))
    record = sampler.record_event(Z, 2.0)
    assert record == ev.EpisodicSampled(1600, 5 / 1150, 2 / 20, Z, 2.0)
    plan = Plan.from_dict({"unit": "record", "delta": 1e-5, "steps": 10,
                           "sampling": {"scheme": "episodic", "episodes": 1600},
                           "noise": {"mechanism": "gaussian", "multiplier": Z.noise_multiplier},
                           "hierarchy": [{"name": "class", "size": 5, "units": 1150},
                                         {"name": "drawing", "size": 2, "units": 20}]})
    assert plan.units()[0].events == (record,)  # what the plan composes for its record
    assert sampler.record_event(Z, 1.0).shift == 1.0
    assert sampler.unit_event(Z) == ev.EpisodicSampled(1600, 1.0, 5 / 1150, Z, 2.0)
    assert sampler.unit_event(Z, float("inf")) == ev.NonPrivate()
    assert sampler.eta == Fraction(1, 2300) and sampler.elements == 23000 and sampler.relation == "add_remove"
    with pytest.raises(ValueError, match="inner must be a Gaussian"):
        sampler.record_event(ev.Laplace(1.0), 2.0)
    with pytest.raises(ValueError, match="shift"):
        sampler.record_event(Z, 0.0)


def test_the_ledger_of_the_sampled_events_reproduces_the_planned_bound(tmp_path):
    """DP-MAML record level, 250 steps, z = 1, delta 1e-6: the revealed-J pair's PLD interval
    [848.33, 849.76] measured by the lead (tests/accounting/test_episodic_group_events.py docstring)."""
    sampler = EpisodicSampler(OMNIGLOT, 1600, gen(15))
    with Ledger.create(tmp_path / "ledger.jsonl", sampler.relation, "record", 1e-6) as ledger:
        for step in range(250):
            sampler.sample()
            ledger.append(sampler.record_event(Z, 2.0), step=step)
        assert len(set(r.event for r in ledger.entries)) == 1
        assert ledger.spent() == pytest.approx(849.76, rel=1e-4)


@pytest.mark.parametrize("device", DEVICES)
def test_omniglot_episodes_have_the_right_shapes_and_the_worst_record_the_right_law(device):
    sampler = EpisodicSampler(OMNIGLOT, 1600, gen(11, device))
    episodes = sampler.sample()
    classes, drawings = episodes.indices
    assert classes.shape == (1600, 5) and drawings.shape == (1600, 5, 2) and episodes.masks == (None, None)
    assert classes.device.type == device and drawings.dtype == torch.int64
    assert bool((classes.sort(dim=1).values.diff(dim=1) > 0).all())  # 5 distinct classes per episode
    assert bool((drawings // 20 == classes[..., None]).all())  # drawings of the episode's classes
    assert bool((drawings[..., 0] != drawings[..., 1]).all())
    # the worst record (every record is one: equal unit counts), and two others, over 300 steps
    counts = record_counts(sampler, 300, [0, 11499, 22999])
    for k in range(3):
        result = episodic_multiplicity_test(counts[:, k], 1600, 1 / 2300, ALPHA)
        assert result.passed, result.detail


HIERARCHIES = {
    "fixed-fixed": Hierarchy((Level("class", "fixed", size=5, units=40), Level("drawing", "fixed", size=2, units=10))),
    "poisson-fixed": Hierarchy((Level("class", "poisson", rate="0.1", units=40),
                                Level("drawing", "fixed", size=2, units=10))),
    "fixed-poisson": Hierarchy((Level("class", "fixed", size=5, units=40),
                                Level("drawing", "poisson", rate="0.3", units=10))),
    "three levels": Hierarchy((Level("user", "fixed", size=2, units=10), Level("task", "poisson", rate="1/2", units=4),
                               Level("example", "fixed", size=3, units=5))),
}


@pytest.mark.parametrize("name", HIERARCHIES)
def test_episodic_sampler_passes_the_multiplicity_test(name):
    h = HIERARCHIES[name]
    sampler = EpisodicSampler(h, 64, gen(12))
    episodes = sampler.sample()
    for index, mask, level in zip(episodes.indices, episodes.masks, h.levels):
        assert mask is None or mask.shape == index.shape
        assert index.shape[-1] == (level.size if level.draw == "fixed" else level.units)
    n = sampler.elements
    counts = record_counts(sampler, 2000, [0, n // 2, n - 1])
    for k in range(3):
        result = episodic_multiplicity_test(counts[:, k], 64, float(sampler.eta), ALPHA)
        assert result.passed, (name, result.detail)


def test_poisson_levels_report_their_events():
    assert (EpisodicSampler(HIERARCHIES["poisson-fixed"], 64, gen(0)).record_event(Z, 2.0)
            == ev.EpisodicSampled(64, 0.1, 0.2, Z, 2.0))
    assert (EpisodicSampler(HIERARCHIES["fixed-poisson"], 64, gen(0)).record_event(Z, 1.0)
            == ev.EpisodicSampled(64, 5 / 40, 0.3, Z, 1.0))


def test_an_episodic_sampler_that_shares_classes_across_a_step_fails():
    """All L episodes of a step use the same 5 classes: K is over-dispersed (0 w.p. 7/8, else ~Bin(64, 1/5))."""
    g = gen(13)
    counts = np.empty(2000, dtype=np.int64)
    for t in range(2000):
        classes = random_subsets(1, 40, 5, g).expand(64, 5)
        drawings = classes[..., None] * 10 + random_subsets(64 * 5, 10, 2, g).view(64, 5, 2)
        counts[t] = int((drawings == 0).sum())
    assert not episodic_multiplicity_test(counts, 64, 1 / 40, ALPHA).passed


def test_episodic_sampler_is_fast():
    """1,600 episodes of 5 of 1,150 classes and 2 of 20 drawings: about 1 ms per step on 2 idle CPU cores."""
    sampler = EpisodicSampler(OMNIGLOT, 1600, gen(14))
    for _ in range(5):
        sampler.sample()
    times = []
    for _ in range(50):
        start = time.perf_counter()
        sampler.sample()
        times.append(time.perf_counter() - start)
    # a generous ceiling (benchmarks time it): a per-episode Python loop would take ~100 ms a step
    assert statistics.median(times) < 5e-2, f"median {statistics.median(times) * 1e3:.2f} ms per step"


# -- determinism, state, inputs ----------------------------------------------------------------------


def _draws(sampler, steps):
    out = []
    for _ in range(steps):
        s = sampler.sample()
        out.append(torch.cat([t.reshape(-1).long() for t in s.indices]) if isinstance(s, Episodes) else s.long())
    return torch.stack(out)


FACTORIES = {
    "poisson": lambda g: PoissonSampler(100, 0.1, g),
    "fixed": lambda g: FixedSizeSampler(100, 7, g),
    "balls": lambda g: BallsInBinsSampler(100, 4, g),
    "episodic": lambda g: EpisodicSampler(HIERARCHIES["fixed-fixed"], 8, g),
}


@pytest.mark.parametrize("kind", FACTORIES)
def test_same_seed_same_draws_and_resume_from_state(kind):
    make = FACTORIES[kind]
    assert torch.equal(_draws(make(gen(1)), 6), _draws(make(gen(1)), 6))
    assert not torch.equal(_draws(make(gen(1)), 6), _draws(make(gen(2)), 6))
    first = make(gen(3))
    _draws(first, 3)  # mid-pass for balls-in-bins
    state = first.state_dict()
    expected = _draws(first, 6)
    resumed = make(gen(99))
    resumed.load_state_dict(state)
    assert torch.equal(_draws(resumed, 6), expected)


def test_balls_in_bins_refuses_a_state_from_another_pass_length():
    state = BallsInBinsSampler(100, 8, gen(0))
    for _ in range(6):
        state.sample()
    with pytest.raises(ValueError, match=r"position.*\[0, 3\]"):
        BallsInBinsSampler(100, 4, gen(0)).load_state_dict(state.state_dict())


def test_without_a_generator_the_seed_comes_from_the_system():
    a, b = PoissonSampler(1000, 0.5), PoissonSampler(1000, 0.5)
    assert a.generator.initial_seed() != torch.Generator().initial_seed()  # not the fixed default seed
    assert not torch.equal(a.sample(), b.sample())


def test_events_and_relations():
    assert PoissonSampler(10, 0.2, gen(0)).step_event(Z) == ev.PoissonSampled(0.2, Z)
    fixed = FixedSizeSampler(1150, 5, gen(0))
    assert fixed.relation == "substitute" and fixed.step_event(Z) == ev.FixedSizeSampled(5, 1150, Z)
    assert fixed.step_event(Z, 1.0).sensitivity_factor == 1.0
    with pytest.raises(ValueError, match="inner must be a metadp Event"):
        PoissonSampler(10, 0.2, gen(0)).step_event(1.0)


@pytest.mark.parametrize("make, match", [
    (lambda: PoissonSampler(0, 0.1), "pool_size"),
    (lambda: PoissonSampler(10, 1.5), "rate"),
    (lambda: PoissonSampler(10, 0.1, generator=np.random.default_rng(0)), "torch.Generator"),
    (lambda: FixedSizeSampler(10, 11), r"batch must be in \[0, 10\]"),
    (lambda: BallsInBinsSampler(10, 0), "steps"),
    (lambda: EpisodicSampler(OMNIGLOT, 0), "episodes"),
    (lambda: EpisodicSampler("tasks", 10), "Hierarchy"),
    (lambda: EpisodicSampler(Hierarchy((Level("u", "fixed", size=1, units=2),
                                        Level("e", "fixed", size=1, units=(3, 4)))), 10), "one unit count per level"),
])
def test_invalid_inputs_raise_value_error(make, match):
    with pytest.raises(ValueError, match=match):
        make()
