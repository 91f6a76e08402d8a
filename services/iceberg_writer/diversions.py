"""Records the writer does not write: quarantined rows (their schema version was refused)
and dead letters (they will never decode), each with headers saying why and where from.

The header names are those ``contracts/topics.toml`` lists for ``icefjord.quarantine`` and
``icefjord.deadletter`` (a unit test holds them to it).
"""

from __future__ import annotations

import time

from confluent_kafka import Message, Producer

from services.iceberg_writer.config import WriterSettings
from services.iceberg_writer.metrics import WriterMetrics
from services.iceberg_writer.state import TableState
from shared.headers import (
    HEADER_ERROR_CLASS,
    HEADER_ERROR_MESSAGE,
    HEADER_FAILED_AT_MS,
    HEADER_QUARANTINED_AT_MS,
    HEADER_REASON,
    HEADER_SCHEMA_ID,
    HEADER_SOURCE_OFFSET,
    HEADER_SOURCE_PARTITION,
    HEADER_SOURCE_TOPIC,
    HEADER_TABLE,
)

MAX_TEXT_BYTES = 1024  # a reason or error message is cut to 1 KiB


class Diversions:
    """Produces quarantined records and dead letters; ``flush`` waits for them."""

    def __init__(self, producer: Producer, settings: WriterSettings, metrics: WriterMetrics):
        self._producer = producer
        self._settings = settings
        self._metrics = metrics

    def quarantine(self, state: TableState, message: Message, schema_id: int, reason: str) -> None:
        """Divert ``message`` to the quarantine topic, as it is, with ``reason``."""
        now_ms = str(int(time.time() * 1000)).encode()
        headers = [
            (HEADER_TABLE, state.name.encode()),
            (HEADER_SCHEMA_ID, str(schema_id).encode()),
            (HEADER_SOURCE_TOPIC, message.topic().encode()),
            (HEADER_SOURCE_PARTITION, str(message.partition()).encode()),
            (HEADER_SOURCE_OFFSET, str(message.offset()).encode()),
            (HEADER_QUARANTINED_AT_MS, now_ms),
            (HEADER_REASON, reason.encode()[:MAX_TEXT_BYTES]),
        ]
        self._producer.produce(
            self._settings.quarantine_topic,
            key=message.key(),
            value=message.value(),
            headers=headers,
        )
        self._metrics.quarantined_rows.labels(state.name).inc()

    def dead_letter(self, state: TableState, message: Message, exc: Exception) -> None:
        """Send ``message`` to the dead-letter topic with the error, and read on past it."""
        headers = [
            *list(message.headers() or []),
            (HEADER_ERROR_CLASS, type(exc).__name__.encode()),
            (HEADER_ERROR_MESSAGE, str(exc).encode()[:MAX_TEXT_BYTES]),
            (HEADER_SOURCE_TOPIC, message.topic().encode()),
            (HEADER_SOURCE_PARTITION, str(message.partition()).encode()),
            (HEADER_SOURCE_OFFSET, str(message.offset()).encode()),
            (HEADER_FAILED_AT_MS, str(int(time.time() * 1000)).encode()),
        ]
        self._producer.produce(
            self._settings.dead_letter_topic,
            key=message.key(),
            value=message.value(),
            headers=headers,
        )
        state.consumed[(message.topic(), message.partition())] = message.offset() + 1
        self._metrics.dead_letters.labels(state.name).inc()

    def flush(self, timeout: float) -> int:
        """Wait up to ``timeout`` s for every record produced; the number still unacknowledged."""
        return int(self._producer.flush(timeout))
