"""Events to JSON-safe dicts and back (metadp/core/serialize.py): exact round trips, strict reading."""

from __future__ import annotations

import json
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from metadp.core import events as ev
from metadp.core.serialize import FORMAT_VERSION, event_from_dict, event_to_dict

GAUSS = ev.Gaussian(1.1)

EXAMPLES = [
    ev.NoOp(),
    ev.NonPrivate(),
    ev.Gaussian(0.7),
    ev.Gaussian(math.inf),
    ev.Laplace(2.5),
    ev.Laplace(math.inf),
    ev.PoissonSampled(5 / 1150, GAUSS),
    ev.PoissonSampled(0.0, ev.Laplace(1.0)),
    ev.ReplacementSampled(30, 720, GAUSS),
    ev.FixedSizeSampled(5, 1150, GAUSS),
    ev.FixedSizeSampled(3, 7, GAUSS, sensitivity_factor=1.0),
    ev.SelfComposed(ev.PoissonSampled(0.01, GAUSS), 250),
    ev.SelfComposed(GAUSS, 0),
    ev.Composed(()),
    ev.Composed((GAUSS, ev.Laplace(3.0), ev.NoOp())),
    ev.EpisodicSampled(1600, 5 / 1150, 2 / 20, GAUSS),
    ev.EpisodicSampled(10, 1.0, 0.3, ev.Gaussian(2.0), shift=1.0),
    ev.PoolSubstitution(0.0032, GAUSS),
    ev.Group(3, GAUSS),
    ev.RandomAllocation(250, GAUSS),
    # nested: every container inside every other
    ev.Composed((
        ev.SelfComposed(ev.Group(2, ev.PoissonSampled(0.1, ev.Composed((GAUSS, ev.Gaussian(3.0))))), 7),
        ev.Group(4, ev.SelfComposed(ev.Composed((ev.FixedSizeSampled(1, 2, ev.Gaussian(math.inf)),)), 3)),
        ev.SelfComposed(ev.EpisodicSampled(3, 0.5, 0.25, GAUSS), 11),
        ev.Composed((ev.Composed((ev.NonPrivate(),)),)),
    )),
]


def test_every_event_class_is_covered():
    exported = {getattr(ev, name) for name in ev.__all__} - {ev.Event}
    covered = set()

    def walk(e):
        covered.add(type(e))
        for child in ([e.inner] if hasattr(e, "inner") else []) + list(getattr(e, "events", ())):
            walk(child)

    for e in EXAMPLES:
        walk(e)
    assert covered == exported, f"add examples (and a schema) for {exported - covered}"


@pytest.mark.parametrize("event", EXAMPLES, ids=lambda e: type(e).__name__)
def test_round_trip_is_exact_and_json_safe(event):
    d = event_to_dict(event)
    assert d["version"] == FORMAT_VERSION and d["type"] == type(event).__name__
    text = json.dumps(d, allow_nan=False)  # strict JSON: no NaN or Infinity tokens
    back = event_from_dict(json.loads(text))
    assert back == event and type(back) is type(event)
    assert event_to_dict(back) == d


def test_infinite_noise_is_written_as_a_string():
    assert event_to_dict(ev.Gaussian(math.inf)) == {"version": 1, "type": "Gaussian", "noise_multiplier": "inf"}


def test_defaults_are_written():
    d = event_to_dict(ev.FixedSizeSampled(5, 10, GAUSS))
    assert d["sensitivity_factor"] == 2.0
    assert event_to_dict(ev.EpisodicSampled(2, 0.5, 0.5, GAUSS))["shift"] == 2.0


def test_nested_dicts_carry_no_version():
    d = event_to_dict(ev.SelfComposed(ev.Composed((GAUSS,)), 2))
    assert "version" not in d["inner"] and "version" not in d["inner"]["events"][0]


@settings(max_examples=200, deadline=None)
@given(z=st.floats(1e-6, 1e6), q=st.floats(0.0, 1.0), count=st.integers(0, 10**12))
def test_floats_round_trip_bit_for_bit(z, q, count):
    event = ev.SelfComposed(ev.PoissonSampled(q, ev.Gaussian(z)), count)
    back = event_from_dict(json.loads(json.dumps(event_to_dict(event))))
    assert back.inner.rate == q and back.inner.inner.noise_multiplier == z and back.count == count


@pytest.mark.parametrize("bad, match", [
    ({"version": 1, "type": "Multistage"}, "type must be one of"),
    ({"version": 1}, "type must be one of"),
    ({"version": 1, "type": "gaussian", "noise_multiplier": 1.0}, "type must be one of"),
    ({"type": "Gaussian", "noise_multiplier": 1.0}, "version is missing"),
    ({"version": 2, "type": "Gaussian", "noise_multiplier": 1.0}, "version must be 1"),
    ({"version": True, "type": "Gaussian", "noise_multiplier": 1.0}, "version must be 1"),
    ({"version": 1, "type": "Gaussian"}, r"event.noise_multiplier is missing"),
    ({"version": 1, "type": "Gaussian", "noise_multiplier": 1.0, "sigma": 2.0}, r"event.sigma is not a field"),
    ({"version": 1, "type": "Gaussian", "noise_multiplier": "1.0"}, "must be a number"),
    ({"version": 1, "type": "Gaussian", "noise_multiplier": True}, "must be a number"),
    ({"version": 1, "type": "Gaussian", "noise_multiplier": -1.0}, r"event \(Gaussian\): noise_multiplier must be"),
    ({"version": 1, "type": "SelfComposed", "inner": {"type": "NoOp"}, "count": 2.0}, "must be an integer"),
    ({"version": 1, "type": "Composed", "events": {"type": "NoOp"}}, "must be a list of events"),
    ({"version": 1, "type": "Composed", "events": [{"type": "NoOp"}, {"type": "Bogus"}]},
     r"event.events\[1\].type must be one of"),
    ({"version": 1, "type": "PoissonSampled", "rate": 0.1, "inner": {"type": "Gaussian", "noise_multiplier": 1.0,
                                                                     "version": 1}},
     r"event.inner.version is not a field"),
    ({"version": 1, "type": "PoissonSampled", "rate": 1.5, "inner": {"type": "NoOp"}}, "rate must be in"),
    ({"version": 1, "type": "PoissonSampled", "rate": 0.1, "inner": "Gaussian"}, r"event.inner must be a dict"),
])
def test_malformed_dicts_raise_value_error_naming_the_key(bad, match):
    with pytest.raises(ValueError, match=match):
        event_from_dict(bad)


def test_non_dict_raises():
    with pytest.raises(ValueError, match="must be a dict"):
        event_from_dict([1, 2])


def test_unregistered_event_classes_are_refused():
    class Custom(ev.Event):
        pass

    class MyGaussian(ev.Gaussian):  # a subclass may mean something else: not silently a Gaussian
        pass

    with pytest.raises(ValueError, match="Custom"):
        event_to_dict(Custom())
    with pytest.raises(ValueError, match=r"event.inner must be an instance .* got MyGaussian"):
        event_to_dict(ev.PoissonSampled(0.1, MyGaussian(1.0)))
    with pytest.raises(ValueError, match="got int"):
        event_to_dict(3)
