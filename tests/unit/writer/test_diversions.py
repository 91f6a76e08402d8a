"""Quarantined records and dead letters carry the headers contracts/topics.toml lists."""

from __future__ import annotations

from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from contracts import topic_catalog
from services.iceberg_writer.batching import BatchClock
from services.iceberg_writer.config import WriterSettings
from services.iceberg_writer.diversions import Diversions
from services.iceberg_writer.metrics import WriterMetrics
from services.iceberg_writer.state import TableState
from shared.headers import HEADER_REASON
from shared.settings import DEAD_LETTER_TOPIC, QUARANTINE_TOPIC

pytestmark = pytest.mark.unit

TOPIC = "icefjord.changes.shop.orders"


class Producing:
    def __init__(self) -> None:
        self.sent: list[tuple[str, bytes | None, list[tuple[str, bytes]]]] = []

    def produce(self, topic: str, *, key: bytes, value: bytes | None, headers: Any) -> None:
        self.sent.append((topic, value, headers))


class Message:
    def topic(self) -> str:
        return TOPIC

    def partition(self) -> int:
        return 2

    def offset(self) -> int:
        return 41

    def key(self) -> bytes:
        return b"k"

    def value(self) -> bytes:
        return b"\x00\x00\x00\x00\x07body"

    def headers(self) -> list[tuple[str, bytes]]:
        return [("traceparent", b"00-1")]


def contract_headers(topic: str) -> set[str]:
    return {h for spec in topic_catalog() if spec.name == topic for h in spec.headers}


def diversions() -> tuple[Diversions, Producing, TableState]:
    producer = Producing()
    metrics = WriterMetrics.create(CollectorRegistry())
    state = TableState(name="shop.orders", topic=TOPIC, clock=BatchClock(5.0, 0.2, 1000))
    return Diversions(producer, WriterSettings(), metrics), producer, state  # type: ignore[arg-type]


def test_a_dead_letter_has_the_contracts_headers_and_keeps_its_own() -> None:
    divert, producer, state = diversions()
    divert.dead_letter(state, Message(), ValueError("x" * 2000))  # type: ignore[arg-type]
    [(topic, value, headers)] = producer.sent
    names = {name for name, _ in headers}
    assert topic == DEAD_LETTER_TOPIC and value == Message().value()
    assert names == contract_headers(DEAD_LETTER_TOPIC) | {"traceparent"}
    values = dict(headers)
    assert values["icefjord.source.offset"] == b"41"
    assert len(values["icefjord.error.message"]) == 1024
    assert state.consumed[(TOPIC, 2)] == 42


def test_a_quarantined_record_has_the_contracts_headers_and_its_reason() -> None:
    divert, producer, state = diversions()
    divert.quarantine(state, Message(), 7, "schema version 3 quarantined")  # type: ignore[arg-type]
    [(topic, _value, headers)] = producer.sent
    assert topic == QUARANTINE_TOPIC
    assert {name for name, _ in headers} == contract_headers(QUARANTINE_TOPIC) | {HEADER_REASON}
    assert dict(headers)["icefjord.schema_id"] == b"7"
