"""A stand-in for a consumer whose client has already fetched a fixed number of records."""

from __future__ import annotations


class FetchedConsumer:
    """``fetched`` records wait in the client; nothing more arrives, so consume never waits.
    Each call is recorded as (count, timeout); the records are plain strings."""

    def __init__(self, fetched: int) -> None:
        self.fetched = fetched
        self.calls: list[tuple[int, float]] = []

    def consume(self, count: int, timeout: float) -> list[str]:
        self.calls.append((count, timeout))
        taken = min(count, self.fetched)
        self.fetched -= taken
        return ["record"] * taken
