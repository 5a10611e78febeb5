"""A certified lower end is one the sampler's own mechanism attains (issue found 2026-11-29): for the one-pass
schemes (shuffled passes, balls in bins) the accountant is given a looser event than the sampler (one Gaussian a
pass), whose lower end the sampler need not reach. Their plans print the scheme's own lower bound where it has one
(the plain unit over whole batches), and no lower end elsewhere: a pooled plan's views (record_multiplicity), a
population that is not a whole number of batches, a group unit.

Oracle: with record_multiplicity = 1 a record is in one task, so any record-level lower end above the task-level
upper bound is false; and a shuffled plan's lower end never exceeds that of the same plan without record
multiplicity (the same sampler)."""

import pytest

from metadp.plan import Plan, plan_epsilon


def _plan(scheme, population=10_000, record_multiplicity=None, unit="task"):
    d = {"name": "one pass", "unit": unit, "delta": 1e-6, "steps": 100, "accountant": "all",
         "sampling": {"scheme": scheme, "population": population, "batch_size": 100},
         "noise": {"mechanism": "gaussian", "multiplier": 1.0}}
    if record_multiplicity is not None:
        d["record_multiplicity"] = record_multiplicity
    return Plan.from_dict(d)


@pytest.mark.parametrize("scheme", ["shuffle", "balls_in_bins"])
def test_a_pooled_one_pass_plan_prints_no_lower_end_its_sampler_does_not_attain(scheme):
    plain = plan_epsilon(_plan(scheme))
    pooled = plan_epsilon(_plan(scheme, record_multiplicity=1))
    assert plain.epsilon_lower is not None and plain.epsilon_lower < plain.epsilon
    assert pooled.epsilon == pytest.approx(plain.epsilon, rel=1e-12)
    assert pooled.epsilon_lower is None or pooled.epsilon_lower <= plain.epsilon_lower * (1 + 1e-12)
    assert all(a.get("epsilon_lower") is None for a in pooled.alternatives)  # no accountant's lower end either
    for other in pooled.other_units:  # a record in one task: no lower end above the task's upper bound
        assert other.get("epsilon_lower") is None or other["epsilon_lower"] <= pooled.epsilon


def test_shuffled_passes_of_a_partial_batch_print_no_lower_end():
    report = plan_epsilon(_plan("shuffle", population=10_050))
    assert report.epsilon_lower is None
    assert any("no certified lower bound" in warning for warning in report.warnings)
