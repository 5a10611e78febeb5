"""A registry: named entries in registration order (a dict from name to entry) that the flags, the
checks and the command read (``metadp.training.algorithms``, ``metadp.training.data.datasets``). No torch."""

from __future__ import annotations

from typing import Optional, Sequence, Tuple

__all__ = ["Registry"]


class Registry(dict):
    """Entries of one type by their ``name``; ``kind`` names them in messages."""

    def __init__(self, kind: str, entry_type: type):
        super().__init__()
        self.kind, self.entry_type = kind, entry_type

    def register(self, entry):
        """Adds ``entry`` (a name may be registered once) and returns it."""
        if not isinstance(entry, self.entry_type):
            raise TypeError(f"a {self.kind} registry takes a {self.entry_type.__name__}, got {type(entry).__name__}")
        if entry.name in self:
            raise ValueError(f"{self.kind} {entry.name!r} is already registered")
        self[entry.name] = entry
        return entry

    def lookup(self, name: str, allowed: Optional[Sequence[str]] = None):
        """The entry ``name``; a ValueError naming ``allowed`` (default: every name) otherwise."""
        try:
            return self[name]
        except (KeyError, TypeError):
            raise ValueError(f"{self.kind} must be one of {tuple(allowed or self)}, got {name!r}") from None

    def names(self, **where) -> Tuple[str, ...]:
        """Names, in order, of the entries whose attributes equal ``where``."""
        return tuple(n for n, e in self.items() if all(getattr(e, k) == v for k, v in where.items()))
