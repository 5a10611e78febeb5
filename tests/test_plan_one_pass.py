"""One-pass plans (issue 18 items 3-4): ``scheme = "balls_in_bins"`` in plan files, and the shuffle's
certified lower bound, each printed as [lower, upper] beside Poisson at the same rate."""

from __future__ import annotations

from pathlib import Path

import pytest

from metadp.amplification import allocation_bounds as ab
from metadp.amplification.one_pass import gaussian_epsilon
from metadp.cli import main
from metadp.core import events as ev
from metadp.plan import Plan, load_plan, plan_epsilon
from metadp.sampling import BallsInBins, from_record

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def plan_dict(sampling, **extra):
    return {"unit": "task", "delta": 1e-5, "steps": 100, "sampling": sampling,
            "noise": {"mechanism": "gaussian", "multiplier": 1.0}} | extra


BIB = {"scheme": "balls_in_bins", "population": 1000, "batch_size": 10}


def test_a_balls_in_bins_plan_charges_random_allocation_per_pass():
    plan = Plan.from_dict(plan_dict(BIB, steps=250))
    assert plan.sampling == BallsInBins(1000, 100)
    g = plan.units()[0]
    assert g.charge == "pass" and g.steps == 3 and g.event == ev.RandomAllocation(100, ev.Gaussian(1.0))
    record = plan.sampling.to_dict()
    assert record == {"scheme": "balls_in_bins", "population": 1000, "batch_size": 10, "rate": None,
                      "steps_per_pass": 100}
    assert from_record(record) == plan.sampling  # the report's record rebuilds the scheme
    by_epochs = {k: v for k, v in plan_dict(BIB, epochs=2).items() if k != "steps"}
    assert Plan.from_dict(by_epochs).steps == 200


def test_a_balls_in_bins_report_prints_the_certified_interval():
    plan = Plan.from_dict(plan_dict(BIB, steps=200))
    report = plan_epsilon(plan)
    # the PLD bound of the allocation pair (metadp.accounting.allocation_pld) is tighter than the RDP one
    assert report.accountant == "pld"
    assert report.epsilon <= ab.allocation_upper(1.0, 100, 1e-5, 2) < gaussian_epsilon(1.0 / 2**0.5, 1e-5)
    assert report.epsilon_lower == ab.allocation_lower(1.0, 100, 1e-5, 2)
    assert 0 < report.epsilon_lower <= report.epsilon
    table = report.to_table()
    assert "certified interval [" in table and "Poisson sampling at the same rate (0.01)" in table
    # the allocation pair gives the PLD accountant no lower bound: its notes do not print a 100%-wide
    # interval as if refinement had failed, they say what stopped it
    assert "100.00% of epsilon" not in table and "this lattice gives no lower bound" in table
    # and its assumptions describe the construction that bound rests on, not the general lattice's two sides
    method = [a for a in report.assumptions if "lattice" in a]
    assert len(method) == 1 and "metadp.accounting.allocation_pld" in method[0] and "upper bound only" in method[0]
    assert "optimistic by one event" not in method[0]


def test_a_shuffle_report_prints_its_lower_bound_and_the_poisson_gap():
    plan = load_plan(EXAMPLES / "dp_fedmeta_one_pass_shuffle.toml")
    report = plan_epsilon(plan)
    z, t = plan.noise.multiplier, plan.sampling.population // plan.sampling.batch_size
    assert report.epsilon_lower == ab.shuffle_lower(z, t, plan.delta, 1)
    assert 0 < report.epsilon_lower < report.epsilon
    assert any("NOT a bound for this sampler" in w for w in report.warnings)


@pytest.mark.parametrize("sampling, extra, message", [
    ({**BIB, "batch_size": 7}, {}, "sampling.batch_size must divide sampling.population (1000)"),
    ({**BIB, "rate": 0.01}, {}, "sampling.rate does not apply to sampling.scheme = 'balls_in_bins'"),
    ({"scheme": "balls_in_bins", "population": 1000}, {}, "sampling.batch_size and sampling.population are required"),
    (BIB, {"relation": "substitute"}, "relation must be 'add_remove' for sampling.scheme = 'balls_in_bins'"),
    (BIB, {"unit": "group", "group_size": 2}, "unit = 'group' is not available with sampling.scheme = 'balls_in_bins'"),
])
def test_balls_in_bins_refusals_name_the_key(sampling, extra, message):
    with pytest.raises(ValueError) as err:
        Plan.from_dict(plan_dict(sampling, **extra))
    assert str(err.value).startswith(message)


def test_a_balls_in_bins_plan_is_accepted_by_the_pld_accountant():
    # the allocation pair's PLD upper bound (metadp.accounting.allocation_pld); it used to be refused
    assert Plan.from_dict(plan_dict(BIB, accountant="pld")).accountant == "pld"


def test_the_cli_refuses_a_bad_balls_in_bins_plan_in_one_line(tmp_path, capsys):
    path = tmp_path / "bad.toml"
    path.write_text('unit = "task"\ndelta = 1e-5\nsteps = 10\n[sampling]\nscheme = "balls_in_bins"\npopulation = 10\n'
                    'batch_size = 3\n[noise]\nmechanism = "gaussian"\nmultiplier = 1.0\n')
    assert main(["plan", str(path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("metadp: error:") and "batch_size must divide" in err[0]


def test_the_example_plan_loads_and_the_trainer_runs_its_sampler():
    assert load_plan(EXAMPLES / "dp_fedmeta_one_pass_balls_in_bins.toml").sampling == BallsInBins(400_000, 250)
    torch = pytest.importorskip("torch")
    from metadp.training.data.samplers import BallsInBinsSampler, sampler_for
    plan = Plan.from_dict(plan_dict(BIB))
    sampler = sampler_for(plan.sampling, torch.Generator().manual_seed(0))
    assert isinstance(sampler, BallsInBinsSampler) and sampler.steps == 100 and sampler.pool_size == 1000
    seen = sum(sampler.sample().long() for _ in range(100))
    assert bool((seen == 1).all())  # each unit in exactly one step of the pass
