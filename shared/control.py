"""Publishing and reading control events on the control topic.

Events are keyed by table, so all events of one table land on one partition in order.
The value is the ``ControlEvent`` envelope of ``contracts/avro/control_event`` in the
Confluent wire format, registered under ``<topic>-value``.
"""

from __future__ import annotations

import logging
from typing import Any, Protocol

from confluent_kafka import Consumer, KafkaError, Message, Producer

import contracts
from shared.avro import AvroCodec, WireFormatError
from shared.errors import RetryableError
from shared.events import ControlEvent

log = logging.getLogger(__name__)


def control_schema() -> dict[str, Any]:
    """The latest control envelope schema."""
    return contracts.load_schema("control_event")


class EventPublisher(Protocol):
    """What a service needs to announce control events: :class:`ControlPublisher` in
    production, a list-backed fake in unit tests."""

    def publish(self, event: ControlEvent) -> None: ...

    def flush(self, timeout: float = 30.0) -> None: ...


class ControlPublisher:
    """Publishes control events; ``flush`` confirms delivery or raises RetryableError."""

    def __init__(self, producer: Producer, codec: AvroCodec, topic: str) -> None:
        self._producer = producer
        self._codec = codec
        self._topic = topic
        self._schema = control_schema()
        self._failures: list[str] = []

    def _on_delivery(self, error: KafkaError | None, _message: Message) -> None:
        if error is not None:
            self._failures.append(str(error))

    def publish(self, event: ControlEvent) -> None:
        """Queue ``event`` for delivery; call :meth:`flush` to wait for it."""
        value = self._codec.serialize(f"{self._topic}-value", self._schema, event.to_record())
        self._producer.produce(
            self._topic, key=event.table.encode(), value=value, on_delivery=self._on_delivery
        )
        self._producer.poll(0)

    def flush(self, timeout: float = 30.0) -> None:
        """Wait until every queued event is acknowledged."""
        remaining = self._producer.flush(timeout)
        failures, self._failures = self._failures, []
        if remaining or failures:
            raise RetryableError(
                f"control events not delivered: {remaining} pending, failures={failures}"
            )


class ControlReader:
    """Reads and decodes control events; undecodable ones are logged and skipped."""

    def __init__(self, consumer: Consumer, codec: AvroCodec, topic: str) -> None:
        self._consumer = consumer
        self._codec = codec
        self._topic = topic
        self.rejected = 0

    @property
    def topic(self) -> str:
        """The control topic read."""
        return self._topic

    def subscribe(self) -> None:
        self._consumer.subscribe([self._topic])

    def poll(self, timeout: float = 1.0, max_events: int = 500) -> list[ControlEvent]:
        """The next batch of events (possibly empty)."""
        events: list[ControlEvent] = []
        for message in self._consumer.consume(max_events, timeout):
            error = message.error()
            if error is not None:
                if error.code() == KafkaError._PARTITION_EOF:
                    continue
                raise RetryableError(f"control topic read failed: {error}")
            event = self.decode(message)
            if event is not None:
                events.append(event)
        return events

    def decode(self, message: Message) -> ControlEvent | None:
        """The event in ``message``, or None (logged, counted) when it cannot be read."""
        value = message.value()
        if value is None:
            return None
        return self.decode_value(value, message.partition(), message.offset())

    def decode_value(self, value: bytes, partition: int, offset: int) -> ControlEvent | None:
        """The event in ``value`` read at ``partition`` and ``offset``, or None (logged,
        counted) when it cannot be read."""
        try:
            _, record = self._codec.deserialize(value)
            return ControlEvent.from_record(record)
        except (WireFormatError, KeyError, ValueError, TypeError) as exc:
            self.rejected += 1
            log.warning(
                "control event rejected",
                extra={"reason": str(exc), "partition": partition, "offset": offset},
            )
            return None
