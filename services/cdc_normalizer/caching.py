"""A bounded cache keyed by object identity, for values derived from long-lived schema objects.

Schemas (``ConnectSchema``, ``TableSchema``) are frozen and hashable, but hashing one walks the
whole tree on every call. The objects a record's schema comes from are long-lived (the writer
schema of an Avro id, the parsed JsonConverter block of a prefix), so deriving per identity is
exact and cheap: the cache holds each key object, so its ``id`` is not reused while the entry
lives, and a hit is checked with ``is``. Failures (exceptions from ``compute``) are never cached.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Generic, TypeVar

__all__ = ["IdentityCache"]

K = TypeVar("K")
V = TypeVar("V")


class IdentityCache(Generic[K, V]):
    """``get(key, compute)`` = ``compute(key)``, remembered per ``key`` object (bounded)."""

    def __init__(self, size: int = 1024) -> None:
        self._size = size
        self._entries: dict[int, tuple[K, V]] = {}

    def get(self, key: K, compute: Callable[[K], V]) -> V:
        """The value for ``key``, computed once per object while it is remembered."""
        entry = self._entries.get(id(key))
        if entry is not None and entry[0] is key:
            return entry[1]
        value = compute(key)
        if len(self._entries) >= self._size:
            self._entries.clear()
        self._entries[id(key)] = (key, value)
        return value
