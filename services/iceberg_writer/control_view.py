"""The writer's view of the control topic: the schema plans announced, the CommitDone events
already published, each table's newest bulk load, and the operators' pause, resume and flush
commands (kept and answered by :class:`~services.iceberg_writer.commands.OperatorCommands`).

The topic is replayed to its end on start (:meth:`ControlView.replay`), then polled each
round. The replay rebuilds the operators' pauses but runs no FLUSH again. Side effects on
other parts (waking rows that wait for a plan, holding a table for a bulk load, pausing
partitions) go through a :class:`ControlListener`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from typing import Protocol

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient

from services.iceberg_writer.commands import OperatorCommands
from services.iceberg_writer.metrics import WriterMetrics
from services.iceberg_writer.state import TableState
from shared.control import ControlReader
from shared.errors import RetryableError
from shared.events import (
    BulkLoad,
    CommitDone,
    ControlEvent,
    OperatorCommand,
    SchemaChange,
)
from shared.kafka import last_stable_offsets

log = logging.getLogger("services.iceberg_writer")


class ControlListener(Protocol):
    """What the rest of the writer does when the control topic says something new."""

    def schema_announced(self, state: TableState) -> None:
        """A SchemaChange for ``state``'s table arrived (not during the replay)."""

    def bulk_load_seen(self, state: TableState) -> None:
        """A BulkLoad event for ``state``'s table arrived."""

    def pause_changed(self, state: TableState) -> None:
        """An operator's PAUSE or RESUME addressed ``state``'s table."""


class ControlView:
    """Everything the control topic has said that the writer acts on.

    ``tables`` is the writer's own map of table states (shared, not copied): events name
    tables, and only tables the writer already holds are acted on; ``commands`` keeps the
    operators' commands, also for tables that appear later.
    """

    def __init__(
        self,
        consumer: Consumer,
        reader: ControlReader,
        admin: AdminClient,
        topic: str,
        tables: Mapping[str, TableState],
        metrics: WriterMetrics,
        commands: OperatorCommands,
    ) -> None:
        self._consumer = consumer
        self._reader = reader
        self._admin = admin
        self._topic = topic
        self._tables = tables
        self._metrics = metrics
        self.commands = commands
        self.listener: ControlListener | None = None
        self.announced: dict[str, dict[int, SchemaChange]] = {}
        self.commits_seen: set[str] = set()
        self.bulk_loads: dict[str, BulkLoad] = {}  # the newest BulkLoad event per table

    def plan(self, table: str, schema_id: int) -> SchemaChange | None:
        """The announced SchemaChange to ``schema_id`` of ``table``, or None."""
        return self.announced.get(table, {}).get(schema_id)

    def is_paused(self, state: TableState) -> bool:
        """Whether an operator paused ``state``'s table (or every table)."""
        return self.commands.is_paused(state.name)

    def close(self) -> None:
        """Close the control consumer."""
        self._consumer.close()

    def replay(self, timeout_s: float) -> None:
        """Read the control topic from its beginning to its end (taken now). Raises
        RetryableError when Kafka does not answer (a broker restarting) or the replay does
        not finish within ``timeout_s``."""
        try:
            self._replay(timeout_s)
        except KafkaException as exc:
            raise RetryableError(f"control topic unavailable: {exc}") from exc

    def _replay(self, timeout_s: float) -> None:
        topic = self._topic
        metadata = self._consumer.list_topics(topic, timeout=10)
        partitions = sorted(metadata.topics[topic].partitions) if topic in metadata.topics else []
        ends: dict[int, int] = {}
        for p in partitions:
            _, high = self._consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
            ends[p] = high
        self._consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in partitions])
        deadline = time.monotonic() + timeout_s
        done = {p for p, high in ends.items() if high == 0}
        while len(done) < len(partitions):
            if time.monotonic() > deadline:
                raise RetryableError(f"control topic replay did not finish in {timeout_s:.0f} s")
            for message in self._consumer.consume(500, 0.5):
                if message.error() is not None:
                    continue
                event = self._reader.decode(message)
                if event is not None:
                    self.handle(event, replay=True)
                if message.offset() + 1 >= ends[message.partition()]:
                    done.add(message.partition())
            for p, high in ends.items():
                position = self._consumer.position([TopicPartition(topic, p)])[0].offset
                if position >= high:
                    done.add(p)
        self.commands.count_paused()
        log.info(
            "control topic replayed", extra={"schema_plans": sum(map(len, self.announced.values()))}
        )

    def poll(self, timeout: float = 0) -> None:
        """Handle the control events that have arrived (up to 500)."""
        for event in self._reader.poll(timeout=timeout, max_events=500):
            self.handle(event)

    def read_to_end(self, timeout_s: float = 10.0) -> None:
        """Handle every control event published before now (the topic's ends, taken now)."""
        assignment = self._consumer.assignment()
        try:
            stable = last_stable_offsets(self._admin, assignment)
        except KafkaException as exc:
            raise RetryableError(f"control topic offsets unavailable: {exc}") from exc
        ends = {partition: offset for (_, partition), offset in stable.items()}
        deadline = time.monotonic() + timeout_s
        while True:
            positions = {tp.partition: tp.offset for tp in self._consumer.position(assignment)}
            if all(high == 0 or positions.get(p, -1) >= high for p, high in ends.items()):
                return
            if time.monotonic() > deadline:
                raise RetryableError(f"control topic not read to its end in {timeout_s:.0f} s")
            self.poll(timeout=0.2)

    def handle(self, event: ControlEvent, replay: bool = False) -> None:
        """Record ``event``; outside the replay, act on plans and commands at once."""
        payload = event.payload
        if isinstance(payload, SchemaChange):
            self.announced.setdefault(payload.table, {})[payload.to_schema_id] = payload
            state = self._tables.get(payload.table)
            if state is not None and not replay and self.listener is not None:
                self.listener.schema_announced(state)
        elif isinstance(payload, CommitDone):
            self.commits_seen.add(payload.commit_id)
        elif isinstance(payload, OperatorCommand):
            if replay:
                self.commands.replayed(event, payload)
            else:
                self.commands.received(event, payload, self._pause_changed)
        elif isinstance(payload, BulkLoad):
            self.bulk_loads[payload.table] = payload
            state = self._tables.get(payload.table)
            if state is not None and self.listener is not None:
                self.listener.bulk_load_seen(state)

    def _pause_changed(self, state: TableState) -> None:
        if self.listener is not None:
            self.listener.pause_changed(state)
