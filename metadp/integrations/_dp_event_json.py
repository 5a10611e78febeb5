"""dp-accounting events as JSON: the dict of a ``DpEvent``'s named-tuple form, and back.

``dp_event_to_dict`` writes ``to_named_tuple()`` as a dict (nested events as dicts, infinity as the
string ``"inf"``, so strict JSON holds it); ``dp_event_from_dict`` rebuilds the ``DpEvent``, building only
classes of ``dp_accounting.dp_event`` (a file never names a module to import); ``load_dp_event`` reads a
file. Re-exported by ``metadp.integrations.dp_accounting``.
"""

from __future__ import annotations

import json
import math
import numbers
import os
from pathlib import Path
from typing import Any, Dict, Mapping, Union, cast

__all__ = ["MODULE", "KEYS", "dp_event_to_dict", "dp_event_from_dict", "load_dp_event"]

MODULE = "dp_accounting.dp_event"
KEYS = ("module_name", "class_name")


def dp_event_to_dict(dp_event: Any) -> Dict[str, Any]:
    """The JSON-safe dict of a ``DpEvent``'s named-tuple form (``to_named_tuple()``), nested events as
    dicts, infinity as ``"inf"``. Any DpEvent class works here, also one metadp cannot convert."""
    if not hasattr(dp_event, "to_named_tuple"):
        raise ValueError(f"dp_event must be a dp-accounting DpEvent, got {type(dp_event).__name__}")
    return cast(Dict[str, Any], _plain(dp_event.to_named_tuple(), "dp_event"))  # (a named tuple: a dict)


def _plain(value: Any, path: str) -> Any:
    """``value`` as JSON values (dicts, lists, str, int, float, bool, None)."""
    if hasattr(value, "_fields") and hasattr(value, "_asdict"):
        return {key: _plain(v, f"{path}.{key}") for key, v in value._asdict().items()}
    if isinstance(value, Mapping):
        return {str(key): _plain(v, f"{path}.{key}") for key, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v, f"{path}[{i}]") for i, v in enumerate(value)]
    if isinstance(value, float) and math.isnan(value):
        raise ValueError(f"{path} is nan, which no event allows")
    if isinstance(value, float) and math.isinf(value):
        if value < 0:
            raise ValueError(f"{path} is -inf, which no event allows")
        return "inf"
    if isinstance(value, (str, bool, numbers.Integral)) or value is None:
        return value
    if isinstance(value, numbers.Real):
        return float(value)
    raise ValueError(f"{path} has a value of type {type(value).__name__}, which JSON cannot hold")


def dp_event_from_dict(d: Mapping[str, Any]) -> Any:
    """The ``DpEvent`` a dict of its named-tuple form describes (the inverse of ``dp_event_to_dict``).

    Only classes of ``dp_accounting.dp_event`` are built (a file never names a module to import).

    Raises:
        ImportError: if dp-accounting is not installed.
        ValueError: for another module, an unknown class, or a missing or unknown field, naming its path.
    """
    try:
        from dp_accounting import dp_event as dp_events
    except ImportError as err:
        raise ImportError('building a DpEvent needs dp-accounting: pip install "metadp[crosscheck]"') from err
    return _build(d, "dp_event", dp_events)


def _build(value: Any, path: str, dp_events: Any) -> Any:
    if isinstance(value, Mapping) and "class_name" in value:
        name, module = value.get("class_name"), value.get("module_name")
        if module != MODULE:
            raise ValueError(f"{path}.module_name must be {MODULE!r}, got {module!r}")
        cls = getattr(dp_events, name, None) if isinstance(name, str) else None
        if not (isinstance(cls, type) and issubclass(cls, dp_events.DpEvent)):
            newer = (" in the installed dp-accounting (it predates the class: metadp.integrations.dp_accounting."
                     "from_dp_event reads the dict without it)" if name == "RandomAllocationDpEvent" else "")
            raise ValueError(f"{path}.class_name {name!r} is not an event class of {MODULE}{newer}")
        fields = [a.name for a in cast(Any, cls).__attrs_attrs__]  # (an attrs class)
        extra = [key for key in value if key not in fields and key not in KEYS]
        missing = [key for key in fields if key not in value]
        if extra or missing:
            what = f"{extra[0]} is not a field" if extra else f"{missing[0]} is missing"
            raise ValueError(f"{path}.{what} ({name} has: {', '.join(fields) or 'no fields'})")
        return cls(**{key: _build(value[key], f"{path}.{key}", dp_events) for key in fields})
    if isinstance(value, Mapping):
        raise ValueError(f"{path} is a dict without class_name: nested events need module_name and class_name")
    if isinstance(value, list):
        return [_build(v, f"{path}[{i}]", dp_events) for i, v in enumerate(value)]
    return math.inf if value == "inf" else value


def load_dp_event(path: Union[str, os.PathLike[str]]) -> Dict[str, Any]:
    """Reads a dp-accounting event from a JSON file (the dict of its named-tuple form).

    Raises:
        ValueError: naming the file, if it is missing, unreadable, not JSON, or not an event's dict.
    """
    p = Path(path)
    if not p.is_file():
        raise ValueError(f"dp event file {str(p)!r} {'is not a file' if p.exists() else 'does not exist'}")
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
    except UnicodeDecodeError:
        raise ValueError(f"dp event file {str(p)!r} is not UTF-8 text (JSON is expected)") from None
    except json.JSONDecodeError as err:
        raise ValueError(f"dp event file {str(p)!r} is not valid JSON: {err.msg} (line {err.lineno}, "
                         f"column {err.colno})") from None
    except RecursionError:  # the parser recurses per level: nesting deeper than any event is refused
        raise ValueError(f"dp event file {str(p)!r} nests JSON too deeply to read (about a thousand levels or "
                         "more; an event nests a few)") from None
    except OSError as err:
        raise ValueError(f"dp event file {str(p)!r} cannot be read: {err.strerror or err}") from None
    if not isinstance(data, dict) or "class_name" not in data:
        raise ValueError(f"dp event file {str(p)!r} must hold one JSON object with module_name and class_name "
                         "(a DpEvent's named-tuple form, as metadp.integrations.dp_accounting.dp_event_to_dict "
                         "writes it)")
    return data
