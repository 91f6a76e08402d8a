"""take_waiting: a due commit first takes the change records already fetched."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
from fetched_consumer import FetchedConsumer

from services.iceberg_writer import writer as writer_module
from services.iceberg_writer.writer import CONSUME_BATCH, take_waiting

pytestmark = pytest.mark.unit


class Taking:
    """Fetched records that all belong to one table and only count."""

    def __init__(self, waiting: int, max_records: int = 200_000) -> None:
        self.consumer = FetchedConsumer(waiting)
        self.table = SimpleNamespace(pending=[], clock=SimpleNamespace(max_records=max_records))

    def on_message(self, message: Any, now: float) -> None:
        self.table.pending.append(message)

    def take(self) -> None:
        take_waiting(self.consumer, [self.table], self.on_message)  # type: ignore[list-item]


def test_a_backlog_is_taken_whole_before_the_commit() -> None:
    writer = Taking(waiting=2 * CONSUME_BATCH + 1234)
    writer.take()
    assert len(writer.table.pending) == 2 * CONSUME_BATCH + 1234
    assert writer.consumer.fetched == 0
    assert all(timeout == 0 for _, timeout in writer.consumer.calls)


def test_an_up_to_date_table_looks_once_and_commits_at_once() -> None:
    writer = Taking(waiting=0)
    writer.take()
    assert writer.table.pending == []
    assert len(writer.consumer.calls) == 1


def test_taking_stops_once_a_due_batch_is_full() -> None:
    writer = Taking(waiting=10 * CONSUME_BATCH, max_records=2 * CONSUME_BATCH)
    writer.take()
    assert len(writer.table.pending) == 2 * CONSUME_BATCH
    assert writer.consumer.fetched == 8 * CONSUME_BATCH


def test_taking_stops_at_its_time_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(writer_module, "TAKE_WAITING_S", 0.0)
    writer = Taking(waiting=3 * CONSUME_BATCH)
    writer.take()
    assert writer.table.pending == []
    assert writer.consumer.calls == []
