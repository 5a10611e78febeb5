"""Events as JSON-safe dictionaries, for ledgers, checkpoints and reports.

``event_to_dict(event)`` gives a dictionary of plain JSON values (str, int, float, list, dict) with a
``"type"`` key naming the event class and, at the top level, the format ``"version"``; nested events
(``inner``, ``events``) are dictionaries of the same form without the version. Every field of the
event is written, defaults included, so a stored event never changes meaning if a default does.
An infinite noise multiplier or scale (pure noise) is written as the string ``"inf"``, because JSON
has no infinity (``json.dumps(..., allow_nan=False)`` accepts every dictionary produced here).
Floats are written by Python's shortest round-trip repr, so ``event_from_dict(event_to_dict(e)) == e``
exactly.

``event_from_dict`` is strict: an unknown type or version, a missing or unknown key, or a value of the
wrong JSON kind raises ``ValueError`` naming it; the event's own constructor then checks the ranges.
A new event class is a new ``"type"`` (events never change meaning), registered in ``_SCHEMAS``.
"""

from __future__ import annotations

import math
import numbers
from typing import Any, Dict, Mapping, Tuple, Type, Union

from metadp.core import events as ev

__all__ = ["FORMAT_VERSION", "event_to_dict", "event_from_dict"]

FORMAT_VERSION = 1

# type name -> (class, {field: kind}); kinds: "real" (float, may be "inf"), "count" (int),
# "event" (one nested event), "events" (a list of nested events).
_SCHEMAS: Dict[str, Tuple[Type[ev.Event], Dict[str, str]]] = {
    "NoOp": (ev.NoOp, {}),
    "NonPrivate": (ev.NonPrivate, {}),
    "Gaussian": (ev.Gaussian, {"noise_multiplier": "real"}),
    "Laplace": (ev.Laplace, {"scale": "real"}),
    "PoissonSampled": (ev.PoissonSampled, {"rate": "real", "inner": "event"}),
    "ReplacementSampled": (ev.ReplacementSampled, {"draws": "count", "population": "count", "inner": "event"}),
    "FixedSizeSampled": (ev.FixedSizeSampled, {"batch": "count", "population": "count", "inner": "event",
                                               "sensitivity_factor": "real"}),
    "SelfComposed": (ev.SelfComposed, {"inner": "event", "count": "count"}),
    "Composed": (ev.Composed, {"events": "events"}),
    "EpisodicSampled": (ev.EpisodicSampled, {"episodes": "count", "unit_rate": "real", "within_rate": "real",
                                             "inner": "event", "shift": "real"}),
    "PoolSubstitution": (ev.PoolSubstitution, {"rate": "real", "inner": "event"}),
    "Group": (ev.Group, {"size": "count", "inner": "event"}),
    "RandomAllocation": (ev.RandomAllocation, {"steps": "count", "inner": "event", "selected": "count"}),
}
# fields written only where they differ from their default, and read as it where absent (files written before
# the field existed stay readable)
_OPTIONAL: Dict[str, Dict[str, Any]] = {"RandomAllocation": {"selected": 1}}
_NAMES = {cls: name for name, (cls, _) in _SCHEMAS.items()}
_RESERVED = ("type", "version")


def event_to_dict(event: ev.Event) -> Dict[str, Any]:
    """The JSON-safe dictionary of ``event`` (module docstring), with ``"type"`` and ``"version"``.

    Raises:
        ValueError: if ``event`` is not an instance of a registered event class (subclasses of a
            registered class are refused too: their meaning is not the registered one).
    """
    out = _encode(event, "event")
    return {"version": FORMAT_VERSION, **out}


def event_from_dict(d: Mapping[str, Any]) -> ev.Event:
    """The event described by ``d`` (as produced by :func:`event_to_dict`).

    Raises:
        ValueError: on a missing or unsupported ``"version"``, an unknown ``"type"``, a missing or
            unknown key, a value of the wrong kind, or a value the event's constructor rejects (the
            message names the path of the offending key, e.g. ``event.inner.rate``).
    """
    if not isinstance(d, Mapping):
        raise ValueError(f"event must be a dict, got {type(d).__name__}")
    if "version" not in d:
        raise ValueError("event.version is missing: a serialised event must state its format version "
                         f"(this metadp writes version {FORMAT_VERSION})")
    version = d["version"]
    if isinstance(version, bool) or version != FORMAT_VERSION:
        raise ValueError(f"event.version must be {FORMAT_VERSION} (the only format this metadp reads), "
                         f"got {version!r}")
    return _decode({k: v for k, v in d.items() if k != "version"}, "event")


def _encode(event: ev.Event, where: str) -> Dict[str, Any]:
    name = _NAMES.get(type(event))
    if name is None:
        raise ValueError(f"{where} must be an instance of one of the registered event classes "
                         f"({', '.join(_SCHEMAS)}), got {type(event).__name__}")
    out: Dict[str, Any] = {"type": name}
    for field, kind in _SCHEMAS[name][1].items():
        value = getattr(event, field)
        path = f"{where}.{field}"
        if _OPTIONAL.get(name, {}).get(field, object()) == value:
            continue
        if kind == "real":
            out[field] = "inf" if value == math.inf else float(value)
        elif kind == "count":
            out[field] = int(value)
        elif kind == "event":
            out[field] = _encode(value, path)
        else:
            out[field] = [_encode(e, f"{path}[{i}]") for i, e in enumerate(value)]
    return out


def _decode(d: object, where: str) -> ev.Event:
    if not isinstance(d, Mapping):
        raise ValueError(f"{where} must be a dict, got {type(d).__name__}")
    name = d.get("type")
    if not isinstance(name, str) or name not in _SCHEMAS:
        raise ValueError(f"{where}.type must be one of {', '.join(_SCHEMAS)}, got {name!r}")
    cls, schema = _SCHEMAS[name]
    unknown = [k for k in d if k not in schema and k not in _RESERVED]
    if unknown or "version" in d and where != "event":
        bad = unknown[0] if unknown else "version"
        raise ValueError(f"{where}.{bad} is not a field of {name}; its fields are: {', '.join(schema) or 'none'}")
    optional = _OPTIONAL.get(name, {})
    missing = [k for k in schema if k not in d and k not in optional]
    if missing:
        needs = ", ".join(k for k in schema if k not in optional)
        raise ValueError(f"{where}.{missing[0]} is missing ({name} needs {needs})")
    kwargs = {field: _decode_value(d[field], kind, f"{where}.{field}") if field in d else optional[field]
              for field, kind in schema.items()}
    try:
        return cls(**kwargs)
    except ValueError as err:
        raise ValueError(f"{where} ({name}): {err}") from None


def _decode_value(value: object, kind: str, path: str) -> Union[float, int, ev.Event, Tuple[ev.Event, ...]]:
    if kind == "real":
        if value == "inf":
            return math.inf
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            raise ValueError(f"{path} must be a number (or \"inf\"), got {value!r}")
        return float(value)
    if kind == "count":
        if isinstance(value, bool) or not isinstance(value, numbers.Integral):
            raise ValueError(f"{path} must be an integer, got {value!r}")
        return int(value)
    if kind == "event":
        return _decode(value, path)
    if not isinstance(value, list):
        raise ValueError(f"{path} must be a list of events, got {type(value).__name__}")
    return tuple(_decode(e, f"{path}[{i}]") for i, e in enumerate(value))
