"""dp-accounting's ``DpEvent`` trees as metadp events, and back (tested with dp-accounting 0.6).

``from_dp_event`` and ``to_dp_event`` map every event both libraries share:

=====================================  ===========================================================
dp-accounting                          metadp
=====================================  ===========================================================
``NoOpDpEvent()``                      ``NoOp()``
``NonPrivateDpEvent()``                ``NonPrivate()``
``GaussianDpEvent(s)``                 ``Gaussian(s)``
``LaplaceDpEvent(s)``                  ``Laplace(s)``
``PoissonSampledDpEvent(q, e)``        ``PoissonSampled(q, e)``
``SampledWithoutReplacementDpEvent(    ``FixedSizeSampled(m, n, e, sensitivity_factor=2)``
n, m, e)``
``SelfComposedDpEvent(e, k)``          ``SelfComposed(e, k)``
``ComposedDpEvent([e1, e2])``          ``Composed((e1, e2))``
``RandomAllocationDpEvent(e, t, k,     ``RandomAllocation(t, e, selected=k)``, composed E times
E)``
=====================================  ===========================================================

``RandomAllocationDpEvent`` (random allocation of k of t steps an epoch, Feldman & Shenfeld) is in
dp-accounting's main branch (google/differential-privacy PR #414) but in no release metadp was tested with
(0.6.0 predates it), so its fields could not be read off the class: metadp reads and writes ``event``,
``num_steps``, ``num_selected`` (default 1) and ``num_epochs`` (default 1), the names of pld-accounting 2.0's
API from the same authors, and reads their JSON with no dp-accounting installed (``from_dp_event`` of the dict;
``metadp plan --dp-event FILE``). Building the ``DpEvent`` itself (``to_dp_event``, ``dp_event_from_dict``)
needs a dp-accounting that has the class, and checks these field names against it.

Anything else raises ``UnsupportedDpEventError`` (a ``ValueError``) naming the class and where it sits in
the tree. In particular metadp has **no randomized-response event** (``metadp.mechanisms`` has its
dominating pair, but no accountant composes it) and **no event for an arbitrary mixture of Gaussians**
(``MixtureOfGaussiansDpEvent``; its two-point case, shifts [0, 1] with probabilities [1 - q, q], is
``PoissonSampledDpEvent(q, GaussianDpEvent(sigma))``). Going the other way, ``EpisodicSampled`` and
``Group`` have no dp-accounting event and are refused.

**What a noise multiplier means (the one thing the conversion must assume).** dp-accounting's
docstring defines ``GaussianDpEvent.noise_multiplier`` as s / C with C the bound on each record's norm,
which is metadp's definition (``Gaussian(z)``: z = sigma / the add/remove sensitivity C). Under
add/remove neighbours both libraries analyse exactly that. Under replace-one neighbours a clipped sum
moves by up to 2C: metadp analyses ``Gaussian(z)`` (and the inner Gaussian of ``FixedSizeSampled``,
``sensitivity_factor`` 2) at z / 2, but dp-accounting 0.6's accountants with
``NeighboringRelation.REPLACE_ONE`` analyse the multiplier as given, i.e. as if it were relative to
2C (its issue #378): for the same event its epsilon is the one for half the sensitivity. So:

* ``noise_relative_to="norm_bound"`` (default): multipliers are read as documented (s / C). metadp's
  substitution analysis then charges the 2C sensitivity; it is the safe reading when you do not know.
* ``noise_relative_to="replace_one_sensitivity"``: multipliers were stated relative to the replace-one
  sensitivity (2C), which is what dp-accounting's REPLACE_ONE accountants compute with: each is doubled
  on the way into metadp (and halved on the way out).

Under add/remove neighbours only ``"norm_bound"`` is meaningful (the sensitivity is C). To compare
numbers: an event accounted by dp-accounting under ``ADD_OR_REMOVE_ONE`` is metadp's event under
``relation="add_remove"``; one accounted under ``REPLACE_ONE`` matches metadp under
``relation="substitute"`` when converted with ``noise_relative_to="replace_one_sensitivity"``.
``REPLACE_SPECIAL`` has no metadp counterpart.

**JSON.** ``dp_event_to_dict`` writes a ``DpEvent`` as its named-tuple form (``to_named_tuple()``) as a
dictionary: ``{"module_name": "dp_accounting.dp_event", "class_name": "GaussianDpEvent",
"noise_multiplier": 1.0}``, nested events as nested dictionaries, an infinite value as the string
``"inf"``. ``dp_event_from_dict`` rebuilds the ``DpEvent`` (only classes of ``dp_accounting.dp_event``:
no other module is ever imported from a file), and ``from_dp_event`` also takes that dictionary
directly, so ``metadp plan --dp-event FILE.json`` needs no dp-accounting installed.
"""

from __future__ import annotations

import math
import numbers
from typing import Any, Dict, List, Mapping, Tuple, cast

from metadp.accounting import (
    Composed,
    EpisodicSampled,
    Event,
    FixedSizeSampled,
    Gaussian,
    Group,
    Laplace,
    NonPrivate,
    NoOp,
    PoissonSampled,
    RandomAllocation,
    SelfComposed,
)
from metadp.core.events import MAX_DEPTH
from metadp.integrations._dp_event_json import KEYS, MODULE, dp_event_from_dict, dp_event_to_dict, load_dp_event

__all__ = ["NOISE_READINGS", "UnsupportedDpEventError", "from_dp_event", "to_dp_event", "to_dp_event_dict",
           "dp_event_to_dict", "dp_event_from_dict", "load_dp_event", "default_relation", "conversion_assumptions"]

NOISE_READINGS = ("norm_bound", "replace_one_sensitivity")
_MAX_COUNT = 2**53  # metadp's largest composition count (float64 holds every whole number up to it)

# dp-accounting event classes that map to metadp events, with their fields in dp-accounting's order
_FIELDS: Dict[str, Tuple[str, ...]] = {
    "NoOpDpEvent": (),
    "NonPrivateDpEvent": (),
    "GaussianDpEvent": ("noise_multiplier",),
    "LaplaceDpEvent": ("noise_multiplier",),
    "PoissonSampledDpEvent": ("sampling_probability", "event"),
    "SampledWithoutReplacementDpEvent": ("source_dataset_size", "sample_size", "event"),
    "SelfComposedDpEvent": ("event", "count"),
    "ComposedDpEvent": ("events",),
    "RandomAllocationDpEvent": ("event", "num_steps", "num_selected", "num_epochs"),
}
# fields a dict may leave out, read as these defaults (and written only where they differ)
_DEFAULTS: Dict[str, Dict[str, Any]] = {"RandomAllocationDpEvent": {"num_selected": 1, "num_epochs": 1}}
_WHY_NOT = {
    "RandomizedResponseDpEvent": "metadp has no randomized-response event (metadp.mechanisms has its dominating "
                                 "pair, but no accountant composes it)",
    "MixtureOfGaussiansDpEvent": "metadp has no event for an arbitrary mixture of Gaussians (the two-point mixture "
                                 "with shifts [0, 1] and probabilities [1 - q, q] is PoissonSampledDpEvent(q, "
                                 "GaussianDpEvent(sigma)))",
}


class UnsupportedDpEventError(ValueError):
    """A dp-accounting event (or a metadp event) that has no counterpart on the other side.

    Attributes:
        class_name: the event's class name; path: where it sits in the tree (e.g. ``dp_event.events[1]``).
    """

    def __init__(self, class_name: str, path: str, reason: str):
        self.class_name, self.path = class_name, path
        super().__init__(f"{path} ({class_name}) cannot be converted: {reason}")


def _unsupported_dp(name: str, path: str) -> UnsupportedDpEventError:
    reason = _WHY_NOT.get(name, "metadp has no event for it")
    return UnsupportedDpEventError(name, path, f"{reason}; supported: {', '.join(_FIELDS)}")


def _factor(noise_relative_to: str) -> float:
    if noise_relative_to not in NOISE_READINGS:
        raise ValueError(f"noise_relative_to must be one of {NOISE_READINGS}, got {noise_relative_to!r}")
    return 2.0 if noise_relative_to == "replace_one_sensitivity" else 1.0


# ---------------------------------------------------------------------------------------------
# dp-accounting -> metadp


def from_dp_event(dp_event: Any, *, noise_relative_to: str = "norm_bound") -> Event:
    """The metadp event equivalent to a dp-accounting event (module docstring for the mapping).

    Args:
        dp_event: a ``dp_accounting.DpEvent``, its ``to_named_tuple()`` form, or that form as a dict
            (``dp_event_to_dict``; what ``metadp plan --dp-event`` reads from JSON).
        noise_relative_to: ``"norm_bound"`` (default: noise multipliers are sigma / C, C the per-record
            norm bound, as dp-accounting documents) or ``"replace_one_sensitivity"`` (they are relative
            to the replace-one sensitivity 2C, as its REPLACE_ONE accountants compute with).

    Raises:
        UnsupportedDpEventError: for an event class metadp has no event for, naming it and its place.
        ValueError: for a missing, unknown or out-of-range field, naming its path and the allowed range.
    """
    return _from(dp_event, "dp_event", _factor(noise_relative_to))


def _node(x: Any, path: str) -> Mapping[str, Any]:
    """The field mapping of a DpEvent, its named tuple, or a dict of that form."""
    if isinstance(x, Mapping):
        return x
    if hasattr(x, "to_named_tuple") and not hasattr(x, "_fields"):
        fields = getattr(type(x), "__attrs_attrs__", None)
        if fields is not None:  # one level only: to_named_tuple converts the whole tree, recursively (a
            # RecursionError for a few thousand levels, before metadp's depth check could refuse it)
            return {"module_name": type(x).__module__, "class_name": type(x).__name__,
                    **{f.name: getattr(x, f.name) for f in fields}}
        x = x.to_named_tuple()
    if hasattr(x, "_fields") and hasattr(x, "_asdict") and "class_name" in x._fields:
        return cast(Mapping[str, Any], x._asdict())
    raise ValueError(f"{path} must be a dp-accounting DpEvent, its named tuple or a dict of that form "
                     f"(with module_name and class_name), got {type(x).__name__}")


def _from(x: Any, path: str, k: float, depth: int = 1) -> Event:
    if depth > MAX_DEPTH:
        raise ValueError(f"the dp event nests more than {MAX_DEPTH} levels deep (at {path.split('.')[0]} ... "
                         f"{path.rsplit('.', 1)[-1]}); metadp accepts at most {MAX_DEPTH} (flatten it: a "
                         "SelfComposedDpEvent with a count instead of nested compositions)")
    d = _node(x, path)
    name = d.get("class_name")
    if not isinstance(name, str):
        raise ValueError(f"{path}.class_name must name a dp-accounting event class, got {name!r}")
    if d.get("module_name") != MODULE:
        raise ValueError(f"{path}.module_name must be {MODULE!r} (dp-accounting's events), "
                         f"got {d.get('module_name')!r}")
    if name not in _FIELDS:
        raise _unsupported_dp(name, path)
    fields, defaults = _FIELDS[name], _DEFAULTS.get(name, {})
    extra = [key for key in d if key not in fields and key not in KEYS]
    missing = [key for key in fields if key not in d and key not in defaults]
    if extra or missing:
        what = f"{extra[0]} is not a field" if extra else f"{missing[0]} is missing"
        raise ValueError(f"{path}.{what} ({name} has: {', '.join(fields) or 'no fields'})")
    if name == "NoOpDpEvent":
        return NoOp()
    if name == "NonPrivateDpEvent":
        return NonPrivate()
    if name in ("GaussianDpEvent", "LaplaceDpEvent"):
        s = _number(d, "noise_multiplier", path, low=0.0, low_open=True, allow_inf=True)
        if math.isfinite(s) and not math.isfinite(s * k):
            raise ValueError(f"{path}.noise_multiplier = {s!r} overflows when doubled (noise_relative_to="
                             "'replace_one_sensitivity')")
        return Gaussian(s * k) if name == "GaussianDpEvent" else Laplace(s * k)
    if name == "PoissonSampledDpEvent":
        q = _number(d, "sampling_probability", path, low=0.0, high=1.0)
        return PoissonSampled(q, _from(d["event"], f"{path}.event", k, depth + 1))
    if name == "SampledWithoutReplacementDpEvent":
        n = int(_number(d, "source_dataset_size", path, low=1.0, integer=True))
        m = int(_number(d, "sample_size", path, low=0.0, high=float(n), integer=True))
        return FixedSizeSampled(m, n, _from(d["event"], f"{path}.event", k, depth + 1), sensitivity_factor=2.0)
    if name == "SelfComposedDpEvent":
        count = int(_number(d, "count", path, low=0.0, high=float(_MAX_COUNT), integer=True))
        return SelfComposed(_from(d["event"], f"{path}.event", k, depth + 1), count)
    if name == "RandomAllocationDpEvent":
        return _allocation({**defaults, **d}, path, _from(d["event"], f"{path}.event", k, depth + 1))
    events = d["events"]
    if isinstance(events, (str, bytes, Mapping)) or not hasattr(events, "__iter__"):
        raise ValueError(f"{path}.events must be a list of events, got {type(events).__name__}")
    return Composed(tuple(_from(e, f"{path}.events[{i}]", k, depth + 1) for i, e in enumerate(events)))


def _allocation(d: Mapping[str, Any], path: str, inner: Event) -> Event:
    """``RandomAllocationDpEvent(event, num_steps, num_selected, num_epochs)``: each record in num_selected of the
    num_steps releases of ``event`` an epoch, epochs independent."""
    steps = int(_number(d, "num_steps", path, low=1.0, high=float(_MAX_COUNT), integer=True))
    selected = int(_number(d, "num_selected", path, low=1.0, high=float(steps), integer=True))
    epochs = int(_number(d, "num_epochs", path, low=0.0, high=float(_MAX_COUNT), integer=True))
    one = RandomAllocation(steps, inner, selected)
    return one if epochs == 1 else SelfComposed(one, epochs)


def _number(d: Mapping[str, Any], field: str, path: str, *, low: float, high: float = math.inf, low_open: bool = False,
            allow_inf: bool = False, integer: bool = False) -> float:
    """A field's value as a float, checked against [low, high] (``"inf"`` reads as infinity)."""
    value = d[field]
    x = math.inf if value == "inf" else value
    kind = "an integer" if integer else "a number"
    allowed = f"{'(' if low_open else '['}{low:g}, {high:g}{']' if math.isfinite(high) or allow_inf else ')'}"
    fractional = integer and isinstance(x, float) and not x.is_integer()
    if isinstance(x, bool) or not isinstance(x, numbers.Real) or fractional:
        raise ValueError(f"{path}.{field} must be {kind} in {allowed}, got {value!r}")
    x = float(x)
    if math.isnan(x) or x < low or x > high or (low_open and x == low) or (math.isinf(x) and not allow_inf):
        hint = " (a multiplier of 0 releases the data unperturbed: NonPrivateDpEvent)" if allow_inf and x == 0 else ""
        raise ValueError(f"{path}.{field} must be {kind} in {allowed}, got {value!r}{hint}")
    return x


# ---------------------------------------------------------------------------------------------
# metadp -> dp-accounting


def to_dp_event_dict(event: Event, *, noise_relative_to: str = "norm_bound") -> Dict[str, Any]:
    """The dict (named-tuple) form of the dp-accounting event equivalent to ``event``; needs no
    dp-accounting. ``json.dumps`` accepts it (an infinite value is written ``"inf"``).

    ``FixedSizeSampled(m, n, e, sensitivity_factor=f)`` becomes ``SampledWithoutReplacementDpEvent(n, m,
    e')`` with each multiplier of ``e`` scaled by 2 / f, so that it is relative to the per-record norm
    bound as dp-accounting documents (or, with ``"replace_one_sensitivity"``, by 1 / f).

    Raises:
        UnsupportedDpEventError: for ``EpisodicSampled``, ``Group`` or any other event dp-accounting
            has no class for.
    """
    return _to(event, "event", _factor(noise_relative_to), 1.0)


def _to(event: Event, path: str, k: float, scale: float) -> Dict[str, Any]:
    def node(name: str, **fields: Any) -> Dict[str, Any]:
        return {"module_name": MODULE, "class_name": name, **fields}

    if type(event) is NoOp:
        return node("NoOpDpEvent")
    if type(event) is NonPrivate:
        return node("NonPrivateDpEvent")
    if type(event) is Gaussian:
        return node("GaussianDpEvent", noise_multiplier=_json_float(event.noise_multiplier * scale / k))
    if type(event) is Laplace:
        return node("LaplaceDpEvent", noise_multiplier=_json_float(event.scale * scale / k))
    if type(event) is PoissonSampled:
        return node("PoissonSampledDpEvent", sampling_probability=event.rate,
                    event=_to(event.inner, f"{path}.inner", k, scale))
    if type(event) is FixedSizeSampled:
        return node("SampledWithoutReplacementDpEvent", source_dataset_size=event.population,
                    sample_size=event.batch,
                    event=_to(event.inner, f"{path}.inner", k, scale * 2.0 / event.sensitivity_factor))
    if type(event) is SelfComposed:
        return node("SelfComposedDpEvent", event=_to(event.inner, f"{path}.inner", k, scale), count=event.count)
    if type(event) is Composed:
        return node("ComposedDpEvent", events=[_to(e, f"{path}.events[{i}]", k, scale)
                                               for i, e in enumerate(event.events)])
    if type(event) is RandomAllocation:
        extra = {"num_selected": event.selected} if event.selected != 1 else {}
        return node("RandomAllocationDpEvent", event=_to(event.inner, f"{path}.inner", k, scale),
                    num_steps=event.steps, **extra)
    name = type(event).__name__
    why = {EpisodicSampled: "dp-accounting has no event for episodic sampling (its MixtureOfGaussiansDpEvent "
                            "hides which episodes selected the record's unit, which is not a dominating pair "
                            "for multistage sampling: DESIGN.md 3.7)",
           Group: "dp-accounting has no group-privacy event"}.get(type(event), "dp-accounting has no event for it")
    raise UnsupportedDpEventError(name, path, why)


def _json_float(x: float) -> Any:  # a number, or "inf" (strict JSON has no infinity)
    return "inf" if x == math.inf else x


def to_dp_event(event: Event, *, noise_relative_to: str = "norm_bound") -> Any:
    """The ``dp_accounting.DpEvent`` equivalent to ``event`` (needs dp-accounting installed).

    ``to_dp_event(from_dp_event(e, noise_relative_to=r), noise_relative_to=r) == e`` for every
    supported dp-accounting event ``e`` (tested with Hypothesis). See ``to_dp_event_dict``.
    """
    return dp_event_from_dict(to_dp_event_dict(event, noise_relative_to=noise_relative_to))


def default_relation(event: Event) -> str:
    """``"substitute"`` if ``event`` contains fixed-size sampling (analysed only under substitution),
    else ``"add_remove"``."""
    stack: List[Event] = [event]
    while stack:
        e = stack.pop()
        if isinstance(e, FixedSizeSampled):
            return "substitute"
        stack.extend(getattr(e, "events", ()))
        inner = getattr(e, "inner", None)
        if isinstance(inner, Event):
            stack.append(inner)
    return "add_remove"


def conversion_assumptions(noise_relative_to: str, relation: str) -> Tuple[str, ...]:
    """What a bound on a converted dp-accounting event assumes about it (printed in its report)."""
    k = _factor(noise_relative_to)
    if k == 1.0:
        read = ("each noise multiplier in the dp-accounting event is sigma / C with C the bound on one unit's "
                "norm (dp-accounting's definition; metadp.integrations.dp_accounting)")
    else:
        read = ("each noise multiplier in the dp-accounting event is sigma / 2C, relative to the replace-one "
                "sensitivity 2C (as dp-accounting's REPLACE_ONE accountants read it): metadp doubled it")
    if relation == "substitute":
        return (read, "under substitution a clipped sum moves by up to 2C, so Gaussian and Laplace noise is "
                      "analysed at half its multiplier (dp-accounting 0.6 under REPLACE_ONE analyses the multiplier "
                      "as given: its issue #378)")
    return (read,)
