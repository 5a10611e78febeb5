"""dp-accounting events <-> metadp events (metadp.integrations.dp_accounting): round trips, JSON, errors.

The round trips are exact: every multiplier is either kept or doubled and halved (exact in binary
floating point below the overflow threshold, which the strategies stay under: 1e300).
"""

from __future__ import annotations

import json
import math
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from metadp.accounting import (Composed, EpisodicSampled, FixedSizeSampled, Gaussian, Group, Laplace, NonPrivate,
                               NoOp, PoissonSampled, SelfComposed)
from metadp.integrations.dp_accounting import (UnsupportedDpEventError, default_relation, dp_event_from_dict,
                                               dp_event_to_dict, from_dp_event, to_dp_event, to_dp_event_dict)

dp = pytest.importorskip("dp_accounting")
from dp_accounting import dp_event as de  # noqa: E402

READINGS = ("norm_bound", "replace_one_sensitivity")
_multiplier = st.one_of(st.floats(min_value=1e-300, max_value=1e300), st.integers(1, 10**6), st.just(math.inf))
_leaves = st.one_of(st.builds(de.NoOpDpEvent), st.builds(de.NonPrivateDpEvent),
                    st.builds(de.GaussianDpEvent, _multiplier), st.builds(de.LaplaceDpEvent, _multiplier))


def _extend(children):
    wor = st.integers(1, 10**9).flatmap(lambda n: st.tuples(st.just(n), st.integers(0, n), children)).map(
        lambda t: de.SampledWithoutReplacementDpEvent(*t))
    return st.one_of(
        st.builds(de.PoissonSampledDpEvent, st.floats(0.0, 1.0), children),
        wor,
        st.builds(de.SelfComposedDpEvent, children, st.integers(0, 2**53)),
        st.builds(de.ComposedDpEvent, st.lists(children, max_size=4)),
    )


dp_events = st.recursive(_leaves, _extend, max_leaves=12)


@settings(max_examples=80, deadline=None, database=None, derandomize=True)
@given(dp_events, st.sampled_from(READINGS))
def test_round_trip_is_exact_for_every_supported_event(event, reading):
    converted = from_dp_event(event, noise_relative_to=reading)
    assert to_dp_event(converted, noise_relative_to=reading) == event


@settings(max_examples=40, deadline=None, database=None, derandomize=True)
@given(dp_events)
def test_json_named_tuple_form_round_trips(event):
    text = json.dumps(dp_event_to_dict(event), allow_nan=False)  # strict JSON: infinity is written "inf"
    assert dp_event_from_dict(json.loads(text)) == event
    assert from_dp_event(json.loads(text)) == from_dp_event(event)  # the dict form converts as the event does
    assert from_dp_event(event.to_named_tuple()) == from_dp_event(event)


def test_the_mapping_of_each_shared_event():
    g = de.GaussianDpEvent(1.5)
    assert from_dp_event(de.NoOpDpEvent()) == NoOp()
    assert from_dp_event(de.NonPrivateDpEvent()) == NonPrivate()
    assert from_dp_event(g) == Gaussian(1.5)
    assert from_dp_event(de.LaplaceDpEvent(3.0)) == Laplace(3.0)
    assert from_dp_event(de.PoissonSampledDpEvent(0.01, g)) == PoissonSampled(0.01, Gaussian(1.5))
    # dp-accounting's (source_dataset_size, sample_size) is metadp's (population, batch), in the other order
    assert from_dp_event(de.SampledWithoutReplacementDpEvent(1000, 10, g)) == FixedSizeSampled(10, 1000, Gaussian(1.5))
    assert from_dp_event(de.SelfComposedDpEvent(g, 7)) == SelfComposed(Gaussian(1.5), 7)
    assert from_dp_event(de.ComposedDpEvent([g, de.NoOpDpEvent()])) == Composed((Gaussian(1.5), NoOp()))


def test_replace_one_reading_doubles_multipliers_and_fixed_size_keeps_the_2c_factor():
    wor = de.SampledWithoutReplacementDpEvent(1000, 10, de.GaussianDpEvent(1.5))
    assert from_dp_event(wor, noise_relative_to="replace_one_sensitivity") == FixedSizeSampled(10, 1000, Gaussian(3.0))
    assert from_dp_event(de.LaplaceDpEvent(2.0), noise_relative_to="replace_one_sensitivity") == Laplace(4.0)
    # a metadp event stated relative to the substitution sensitivity (factor 1) goes out relative to C: x 2
    assert to_dp_event(FixedSizeSampled(10, 1000, Gaussian(1.5), sensitivity_factor=1.0)) == \
        de.SampledWithoutReplacementDpEvent(1000, 10, de.GaussianDpEvent(3.0))


@pytest.mark.parametrize("event, name", [
    (de.RandomizedResponseDpEvent(0.5, 3), "RandomizedResponseDpEvent"),
    (de.MixtureOfGaussiansDpEvent(1.0, [0.0, 1.0], [0.9, 0.1]), "MixtureOfGaussiansDpEvent"),
    (de.ZCDpEvent(0.5), "ZCDpEvent"),
    (de.UnsupportedDpEvent(), "UnsupportedDpEvent"),
    (de.SampledWithReplacementDpEvent(100, 10, de.GaussianDpEvent(1.0)), "SampledWithReplacementDpEvent"),
    (de.DiscreteLaplaceDpEvent(1.0, 1), "DiscreteLaplaceDpEvent"),
])
def test_an_event_metadp_lacks_is_refused_by_name(event, name):
    nested = de.ComposedDpEvent([de.GaussianDpEvent(1.0), de.SelfComposedDpEvent(event, 3)])
    with pytest.raises(UnsupportedDpEventError, match=rf"dp_event\.events\[1\]\.event \({name}\)") as info:
        from_dp_event(nested)
    assert info.value.class_name == name
    assert "supported: NoOpDpEvent" in str(info.value)


def test_randomized_response_and_mixture_say_why():
    with pytest.raises(UnsupportedDpEventError, match="no randomized-response event"):
        from_dp_event(de.RandomizedResponseDpEvent(0.5, 3))
    with pytest.raises(UnsupportedDpEventError, match="PoissonSampledDpEvent"):
        from_dp_event(de.MixtureOfGaussiansDpEvent(1.0, [0.0, 1.0], [0.9, 0.1]))


@pytest.mark.parametrize("event, message", [
    (de.PoissonSampledDpEvent(1.5, de.GaussianDpEvent(1.0)),
     r"dp_event\.sampling_probability must be a number in \[0, 1\], got 1\.5"),
    (de.GaussianDpEvent(0.0),
     r"dp_event\.noise_multiplier must be a number in \(0, inf\], got 0\.0 \(.*NonPrivateDpEvent\)"),
    (de.LaplaceDpEvent(-1.0), r"dp_event\.noise_multiplier must be a number"),
    (de.GaussianDpEvent(math.nan), r"dp_event\.noise_multiplier .* got nan"),
    (de.SelfComposedDpEvent(de.NoOpDpEvent(), 2.5), r"dp_event\.count must be an integer"),
    (de.SelfComposedDpEvent(de.NoOpDpEvent(), -1), r"dp_event\.count must be an integer"),
    (de.SampledWithoutReplacementDpEvent(10, 11, de.NoOpDpEvent()),
     r"dp_event\.sample_size must be an integer in \[0, 10\]"),
    (de.SampledWithoutReplacementDpEvent(0, 0, de.NoOpDpEvent()), r"dp_event\.source_dataset_size"),
])
def test_out_of_range_fields_name_their_path(event, message):
    with pytest.raises(ValueError, match=message):
        from_dp_event(event)


def test_a_replace_one_multiplier_that_overflows_when_doubled_is_refused():
    with pytest.raises(ValueError, match="overflows when doubled"):
        from_dp_event(de.GaussianDpEvent(1e308), noise_relative_to="replace_one_sensitivity")


@pytest.mark.parametrize("bad, message", [
    ({"class_name": "GaussianDpEvent", "noise_multiplier": 1.0}, "module_name must be 'dp_accounting.dp_event'"),
    ({"module_name": "os", "class_name": "GaussianDpEvent", "noise_multiplier": 1.0}, "module_name"),
    ({"module_name": "dp_accounting.dp_event", "class_name": "GaussianDpEvent"}, "noise_multiplier is missing"),
    ({"module_name": "dp_accounting.dp_event", "class_name": "GaussianDpEvent", "noise_multiplier": 1.0, "x": 1},
     "x is not a field"),
    ({"module_name": "dp_accounting.dp_event", "class_name": "GaussianDpEvent", "noise_multiplier": "1"},
     "must be a number"),
    ({"module_name": "dp_accounting.dp_event", "class_name": "ComposedDpEvent", "events": "ab"}, "list of events"),
])
def test_the_dict_form_is_read_strictly(bad, message):
    with pytest.raises(ValueError, match=message):
        from_dp_event(bad)
    if "module_name" in message or "field" in message or "missing" in message:  # dp-accounting checks no values
        with pytest.raises(ValueError, match=message):
            dp_event_from_dict(bad)


def test_dp_event_from_dict_never_builds_a_class_outside_dp_event():
    with pytest.raises(ValueError, match="module_name"):
        dp_event_from_dict({"module_name": "subprocess", "class_name": "Popen", "args": ["true"]})
    with pytest.raises(ValueError, match="not an event class"):
        dp_event_from_dict({"module_name": "dp_accounting.dp_event", "class_name": "Protocol"})


@pytest.mark.parametrize("event, name", [(EpisodicSampled(2, 0.1, 0.5, Gaussian(1.0)), "EpisodicSampled"),
                                         (Group(2, Gaussian(1.0)), "Group")])
def test_metadp_events_without_a_dp_accounting_class_are_refused(event, name):
    with pytest.raises(UnsupportedDpEventError, match=rf"event\.events\[1\] \({name}\)"):
        to_dp_event(Composed((NoOp(), event)))


def test_bad_reading_is_refused():
    with pytest.raises(ValueError, match="noise_relative_to must be one of"):
        from_dp_event(de.NoOpDpEvent(), noise_relative_to="clip")


def test_default_relation_is_substitution_only_with_fixed_size_sampling():
    assert default_relation(Composed((Gaussian(1.0), SelfComposed(FixedSizeSampled(1, 10, Gaussian(1.0)), 3)))) == \
        "substitute"
    assert default_relation(SelfComposed(PoissonSampled(0.1, Gaussian(1.0)), 3)) == "add_remove"


def test_dict_forms_need_no_dp_accounting(monkeypatch):
    d = dp_event_to_dict(de.SelfComposedDpEvent(de.PoissonSampledDpEvent(0.1, de.GaussianDpEvent(1.0)), 5))
    for name in [m for m in sys.modules if m == "dp_accounting" or m.startswith("dp_accounting.")]:
        monkeypatch.setitem(sys.modules, name, None)  # `import dp_accounting` now fails
    assert from_dp_event(d) == SelfComposed(PoissonSampled(0.1, Gaussian(1.0)), 5)
    assert to_dp_event_dict(from_dp_event(d)) == d
    with pytest.raises(ImportError, match="metadp\\[crosscheck\\]"):
        to_dp_event(Gaussian(1.0))
