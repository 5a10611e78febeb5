"""dp-accounting's RandomAllocationDpEvent as JSON (k of t steps an epoch), with no dp-accounting needed.

The class is in dp-accounting's main branch but in no release (0.6.0 predates it), so these tests read and
write its dict form only: event, num_steps, num_selected (default 1), num_epochs (default 1). Oracles: the
round trip is exact; the converted event is certified like the plan file of the same sampler (a balls-in-bins
plan with selected = k), and like the reduction it is bounded by (k one-step allocations of floor(t / k) steps).
"""

from __future__ import annotations

import json

import pytest

from metadp.accounting import PldAccountant
from metadp.cli import main
from metadp.core import events as ev
from metadp.core.serialize import event_from_dict, event_to_dict
from metadp.integrations.dp_accounting import from_dp_event, to_dp_event, to_dp_event_dict
from metadp.plan import loads_plan, plan_epsilon

MODULE = "dp_accounting.dp_event"


def _gaussian(z):
    return {"module_name": MODULE, "class_name": "GaussianDpEvent", "noise_multiplier": z}


def _allocation(t, z, **extra):
    return {"module_name": MODULE, "class_name": "RandomAllocationDpEvent", "event": _gaussian(z), "num_steps": t,
            **extra}


@pytest.mark.parametrize("extra, expected", [
    ({}, ev.RandomAllocation(10, ev.Gaussian(1.0))),
    ({"num_selected": 1, "num_epochs": 1}, ev.RandomAllocation(10, ev.Gaussian(1.0))),
    ({"num_selected": 3}, ev.RandomAllocation(10, ev.Gaussian(1.0), selected=3)),
    ({"num_selected": 2, "num_epochs": 4}, ev.SelfComposed(ev.RandomAllocation(10, ev.Gaussian(1.0), 2), 4)),
    ({"num_selected": 10}, ev.RandomAllocation(10, ev.Gaussian(1.0), selected=10)),
])
def test_the_json_form_round_trips(extra, expected):
    d = _allocation(10, 1.0, **extra)
    event = from_dp_event(json.loads(json.dumps(d)))
    assert event == expected
    back = to_dp_event_dict(event)
    assert from_dp_event(json.loads(json.dumps(back))) == event
    # the canonical form: defaults left out, epochs as a SelfComposedDpEvent around one epoch
    inner = back["event"] if back["class_name"] == "SelfComposedDpEvent" else back
    assert inner["class_name"] == "RandomAllocationDpEvent" and inner["num_steps"] == 10
    assert inner.get("num_selected", 1) == extra.get("num_selected", 1) and "num_epochs" not in inner


@pytest.mark.parametrize("d, message", [
    (_allocation(10, 1.0, num_selected=11), r"dp_event.num_selected must be an integer in \[1, 10\]"),
    (_allocation(0, 1.0), r"dp_event.num_steps must be an integer in \[1, "),
    (_allocation(10, 1.0, num_selected=1.5), "num_selected must be an integer"),
    (_allocation(10, 1.0, num_epochs=-1), r"num_epochs must be an integer in \[0, "),
    (_allocation(10, 1.0, sampling_probability=0.1), "sampling_probability is not a field"),
    ({k: v for k, v in _allocation(10, 1.0).items() if k != "num_steps"}, "num_steps is missing"),
])
def test_bad_fields_are_refused_naming_their_path(d, message):
    with pytest.raises(ValueError, match=message):
        from_dp_event(d)


def _epsilon(event, delta=1e-5):
    acc = PldAccountant()
    acc.compose(event)
    return acc.certify(delta, lower=False).epsilon


def test_k_of_t_is_accounted_by_its_reduction():
    z, t, k = 2.0, 12, 3
    assert _epsilon(ev.RandomAllocation(t, ev.Gaussian(z), k)) == _epsilon(
        ev.SelfComposed(ev.RandomAllocation(t // k, ev.Gaussian(z)), k))
    # k = t: every step, no amplification left
    assert _epsilon(ev.RandomAllocation(4, ev.Gaussian(z), 4)) == _epsilon(ev.SelfComposed(ev.Gaussian(z), 4))


def test_metadp_plan_of_the_json_prints_the_balls_in_bins_plan(tmp_path, capsys):
    # 2 epochs of 20 steps, each record in 2 of them: the plan of 400 records, batches of 40, selected = 2
    path = tmp_path / "allocation.json"
    path.write_text(json.dumps(_allocation(20, 1.5, num_selected=2, num_epochs=2)), encoding="utf-8")
    assert main(["plan", "--dp-event", str(path), "--delta", "1e-5", "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    plan = plan_epsilon(loads_plan('name = "k of t"\nunit = "record"\ndelta = 1e-5\nsteps = 40\n[sampling]\n'
                                   'scheme = "balls_in_bins"\npopulation = 400\nbatch_size = 40\nselected = 2\n'
                                   '[noise]\nmechanism = "gaussian"\nmultiplier = 1.5\n'))
    assert printed["epsilon"] == pytest.approx(plan.epsilon, rel=1e-12)


def test_ledgers_keep_reading_allocations_written_before_selected_existed():
    one = ev.RandomAllocation(7, ev.Gaussian(2.0))
    assert "selected" not in event_to_dict(one)  # written as before
    assert event_from_dict({"version": 1, "type": "RandomAllocation", "steps": 7,
                            "inner": {"type": "Gaussian", "noise_multiplier": 2.0}}) == one
    k = ev.RandomAllocation(7, ev.Gaussian(2.0), 3)
    assert event_to_dict(k)["selected"] == 3 and event_from_dict(event_to_dict(k)) == k
    with pytest.raises(ValueError, match="selected"):
        ev.RandomAllocation(3, ev.Gaussian(1.0), 4)


def test_building_the_dp_event_needs_a_dp_accounting_that_has_the_class():
    dp = pytest.importorskip("dp_accounting")
    if hasattr(dp.dp_event, "RandomAllocationDpEvent"):  # a release with the class: the names must be its own
        built = to_dp_event(ev.RandomAllocation(10, ev.Gaussian(1.0), 2))
        assert from_dp_event(built) == ev.RandomAllocation(10, ev.Gaussian(1.0), 2)
    else:
        with pytest.raises(ValueError, match="predates the class"):
            to_dp_event(ev.RandomAllocation(10, ev.Gaussian(1.0), 2))
