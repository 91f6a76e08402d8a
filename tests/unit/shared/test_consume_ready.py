"""consume_ready: wait for the first record only, then take what is already fetched."""

from __future__ import annotations

from typing import Any

import pytest
from fetched_consumer import FetchedConsumer as Fetched

from shared.kafka import consume_ready

pytestmark = pytest.mark.unit


def test_a_batch_is_what_was_fetched_without_waiting_for_the_limit() -> None:
    consumer = Fetched(37)
    got = consume_ready(consumer, 500, 1.0)  # type: ignore[arg-type]
    assert len(got) == 37
    assert consumer.calls == [(1, 1.0), (499, 0)]


def test_a_full_queue_gives_the_limit() -> None:
    consumer: Any = Fetched(10_000)
    assert len(consume_ready(consumer, 500, 1.0)) == 500
    assert consumer.fetched == 9_500


def test_nothing_fetched_waits_once_and_returns_nothing() -> None:
    consumer: Any = Fetched(0)
    assert consume_ready(consumer, 500, 0.2) == []
    assert consumer.calls == [(1, 0.2)]


def test_a_limit_of_one_takes_one() -> None:
    consumer: Any = Fetched(5)
    assert len(consume_ready(consumer, 1, 0.2)) == 1
    assert consumer.calls == [(1, 0.2)]
