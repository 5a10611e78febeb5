"""k-of-t random allocation (`sampling.selected = k` of a `balls_in_bins` plan): each unit in k distinct
uniformly random steps of every pass.

The upper bound charges a pass as k one-step allocations over floor(t/k) steps each. Its proof
(metadp.amplification.allocation_bounds docstring) rests on two exact facts checked here by enumeration:
a random partition into k blocks of sizes floor(t/k) or ceil(t/k), then one uniform step per block, draws a
uniformly random k-subset; and a 1-of-(m+1) allocation is the mixture over a revealed step r of a 1-of-m
allocation on the other steps. Where k = t every unit is in every step: the bound must be exactly t
Gaussians a pass. The certified lower bound (the max-over-steps test with k shifted coordinates) must stay
below the upper bound and below the exact value where that is known. The trainer's sampler draws uniform
k-subsets (a chi-square test) and every unit exactly k times a pass.
"""

import itertools
import math
from fractions import Fraction

import numpy as np
import pytest
from scipy import stats

from metadp.amplification.allocation_bounds import allocation_lower
from metadp.amplification.one_pass import gaussian_epsilon
from metadp.plan import loads_plan, plan_epsilon

PLAN = """\
name = "k of t"
unit = "record"
delta = {delta}
steps = {steps}

[sampling]
scheme = "balls_in_bins"
population = {population}
batch_size = {batch}
{selected}
[noise]
mechanism = "gaussian"
multiplier = {z}
"""


def _plan(population, batch, steps, z, selected=None, delta=1e-5):
    line = "" if selected is None else f"selected = {selected}\n"
    return loads_plan(PLAN.format(population=population, batch=batch, steps=steps, z=z, selected=line, delta=delta))


@pytest.mark.parametrize("t, k", [(4, 2), (5, 2), (6, 3), (7, 3), (6, 4)])
def test_a_random_block_partition_with_one_step_a_block_draws_a_uniform_k_subset(t, k):
    small, extra = divmod(t, k)
    sizes = [small + 1] * extra + [small] * (k - extra)
    law = {}
    orders = list(itertools.permutations(range(t)))
    for order in orders:  # a uniform permutation cut into consecutive blocks: a uniform ordered partition
        blocks, start = [], 0
        for size in sizes:
            blocks.append(order[start:start + size])
            start += size
        for choice in itertools.product(*blocks):
            weight = Fraction(1, len(orders))
            for block in blocks:
                weight /= len(block)
            key = frozenset(choice)
            assert len(key) == k  # one step from each of k disjoint blocks: k distinct steps
            law[key] = law.get(key, Fraction(0)) + weight
    assert len(law) == math.comb(t, k)
    assert set(law.values()) == {Fraction(1, math.comb(t, k))}


@pytest.mark.parametrize("m", [1, 2, 5])
def test_one_of_m_plus_one_is_a_revealed_mixture_of_one_of_m(m):
    # r uniform in m + 1 steps, then the unit uniform among the other m: the unit's step is uniform over m + 1
    law = [Fraction(0)] * (m + 1)
    for r in range(m + 1):
        for step in range(m + 1):
            if step != r:
                law[step] += Fraction(1, m + 1) * Fraction(1, m)
    assert law == [Fraction(1, m + 1)] * (m + 1)


@pytest.mark.parametrize("t, passes, z", [(4, 3, 1.0), (6, 2, 2.5)])
def test_k_equal_to_t_is_t_gaussians_a_pass(t, passes, z):
    plan = _plan(population=60, batch=60, steps=t * passes, z=z, selected=t)  # t = k N / b = t
    assert plan.sampling.steps_per_pass == t
    every = loads_plan(f'name = "all"\nunit = "record"\ndelta = 1e-5\nsteps = {t * passes}\n[sampling]\n'
                       f'scheme = "none"\npopulation = 60\n[noise]\nmechanism = "gaussian"\nmultiplier = {z}\n')
    assert plan_epsilon(plan).epsilon == pytest.approx(plan_epsilon(every).epsilon, rel=1e-9)
    exact = gaussian_epsilon(z / math.sqrt(t * passes), 1e-5)
    assert plan_epsilon(plan).epsilon >= exact * (1 - 1e-9)
    assert allocation_lower(z, t, 1e-5, passes, selected=t) <= exact


@pytest.mark.parametrize("t, k, z, passes", [(10, 2, 1.0, 2), (10, 3, 2.0, 3), (20, 2, 0.8, 1), (12, 4, 1.5, 2)])
def test_the_certified_interval_of_k_of_t_is_ordered_and_above_one_of_t(t, k, z, passes):
    plan = _plan(population=60 * t, batch=60 * k, steps=t * passes, z=z, selected=k)
    assert (plan.sampling.steps_per_pass, plan.sampling.selected) == (t, k)
    report = plan_epsilon(plan)
    lower = allocation_lower(z, t, 1e-5, passes, selected=k)
    assert report.epsilon_lower == pytest.approx(lower) and 0 < lower <= report.epsilon
    one = plan_epsilon(_plan(population=60 * t, batch=60, steps=t * passes, z=z))
    assert report.epsilon > one.epsilon  # k releases a pass cost more than one
    assert lower >= allocation_lower(z, t, 1e-5, passes)  # and the test sees more of them
    # never above the no-amplification bound of k Gaussians a pass
    assert report.epsilon <= gaussian_epsilon(z / math.sqrt(k * passes), 1e-5) * (1 + 1e-9)


@pytest.mark.parametrize("table, words", [
    ('scheme = "balls_in_bins"\npopulation = 100\nbatch_size = 30\nselected = 2\n', "must divide selected x"),
    ('scheme = "balls_in_bins"\npopulation = 100\nsteps_per_pass = 3\nselected = 4\n', "sampling.selected"),
    ('scheme = "balls_in_bins"\npopulation = 100\nbatch_size = 20\nselected = 0\n', "sampling.selected"),
    ('scheme = "poisson"\npopulation = 100\nbatch_size = 20\nselected = 2\n', "applies only to sampling.scheme"),
    ('scheme = "shuffle"\npopulation = 100\nbatch_size = 20\nselected = 2\n', "applies only to sampling.scheme"),
])
def test_bad_selected_is_refused_naming_the_key(table, words):
    with pytest.raises(ValueError, match=words):
        loads_plan(f'name = "x"\nunit = "record"\ndelta = 1e-5\nsteps = 4\n[sampling]\n{table}[noise]\n'
                   'mechanism = "gaussian"\nmultiplier = 1.0\n')


def test_a_k_of_t_plan_round_trips_through_its_table():
    plan = _plan(population=100, batch=40, steps=10, z=1.0, selected=2)
    table = plan.sampling.plan_table()
    assert table == {"scheme": "balls_in_bins", "population": 100, "batch_size": 40, "selected": 2}
    assert plan.sampling.to_dict()["selected"] == 2 and plan.sampling.expected_batch == 40
    assert "selected" not in _plan(population=100, batch=20, steps=10, z=1.0).sampling.to_dict()


def test_the_trainers_sampler_draws_uniform_k_subsets_of_each_pass():
    torch = pytest.importorskip("torch")
    from metadp.training.data.samplers import sampler_for

    plan = _plan(population=3000, batch=1500, steps=4, z=1.0, selected=2)  # t = 4, k = 2: 6 subsets
    sampler = sampler_for(plan.sampling, torch.Generator().manual_seed(5))
    masks = torch.stack([sampler.sample() for _ in range(4)])  # one pass: [4 steps, 3000 units]
    assert bool((masks.sum(0) == 2).all())  # every unit in exactly 2 distinct steps
    codes = (masks.long() * torch.tensor([[1], [2], [4], [8]])).sum(0)
    counts = np.bincount(codes.numpy(), minlength=16)[[3, 5, 6, 9, 10, 12]]
    assert counts.sum() == 3000
    assert stats.chisquare(counts).pvalue > 1e-4


def test_a_k_of_t_plan_trains_and_its_report_is_the_plans(tmp_path, capsys):
    pytest.importorskip("torch")
    import json

    from metadp.cli import main

    path = tmp_path / "plan.toml"
    path.write_text(PLAN.format(population=20, batch=10, steps=8, z=1.0, selected="selected = 2\n", delta=1e-5)
                    .replace('unit = "record"', 'unit = "task"'))
    out = tmp_path / "run"
    assert main(["train", "dp-maml", "--plan", str(path), "--data", "sinusoid", "--first-order", "--eval-tasks", "2",
                 "--out", str(out)]) == 0
    assert "each task in 2 distinct uniformly random steps of each 4-step pass" in capsys.readouterr().out
    assert main(["plan", str(path), "--json"]) == 0
    expected = json.loads(capsys.readouterr().out)
    report = json.loads((out / "privacy_report.json").read_text())
    assert report["epsilon"] == pytest.approx(expected["epsilon"], rel=1e-12)
    assert report["sampling"]["selected"] == 2 and all(v["ledger_matches_plan"] for v in report["views"])


@pytest.mark.parametrize("t, k, shift", [(5, 2, 1.0), (8, 3, 0.0), (4, 4, 1.0)])
def test_the_lower_bounds_event_probability_with_k_shifted_steps_matches_simulation(t, k, shift):
    # Pr[max_i x_i > tau] for N(0, z^2 I_t) with k coordinates shifted: the closed form the k-of-t lower bound
    # rests on, against 400,000 draws (a 6-sigma binomial band)
    from metadp.amplification.allocation_bounds import _event_probs

    z, taus, n = 1.3, np.array([-0.5, 0.8, 2.0, 3.5]), 400_000
    rng = np.random.default_rng(7)
    x = rng.normal(0.0, z, size=(n, t))
    x[:, :k] += shift
    empirical = (x.max(axis=1)[:, None] > taus[None, :]).mean(axis=0)
    exact = _event_probs(z, t, shift, taus, k)
    band = 6 * np.sqrt(exact * (1 - exact) / n) + 1e-6
    assert np.all(np.abs(empirical - exact) <= band), (empirical, exact)
