"""The writer's view of the control topic: the schema plans announced, the CommitDone events
already published, each table's newest bulk load, and the operators' pause, resume and flush
commands (kept and answered by :class:`~services.iceberg_writer.commands.OperatorCommands`).

The topic is folded on start (:meth:`ControlView.replay`): the newest checkpoint on
``icefjord.control-state`` (``shared.control_state``), then the topic from the checkpoint's
offsets to its end; then it is polled each round, and a checkpoint is saved every
``control_checkpoint_every`` events or ``control_checkpoint_interval_s``. The state rests on
few events, kept as they pass (:data:`FOLD`): every schema plan, each table's newest
CommitDone and BulkLoad, and the latest PAUSE or RESUME per table and for "*". So a start
reads about one checkpoint interval of events whatever the history, and the memory grows with
the tables, not with the commits. The replay rebuilds the operators' pauses but runs no FLUSH
again. Side effects on other parts (waking rows that wait for a plan, holding a table for a
bulk load, pausing partitions) go through a :class:`ControlListener`.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Mapping
from typing import Protocol

from confluent_kafka import Consumer, KafkaException
from confluent_kafka.admin import AdminClient

from services.iceberg_writer.commands import OperatorCommands
from services.iceberg_writer.metrics import WriterMetrics
from services.iceberg_writer.state import TableState
from shared.control import ControlReader
from shared.control_state import (
    Checkpoints,
    Origin,
    Replayed,
    Retained,
    StateStore,
    fold_messages,
    replay_control,
)
from shared.errors import RetryableError
from shared.events import (
    BulkLoad,
    CommitDone,
    ControlEvent,
    OperatorCommand,
    OperatorCommandKind,
    SchemaChange,
)
from shared.kafka import last_stable_offsets

log = logging.getLogger("services.iceberg_writer")

FOLD = "iceberg-writer.v1"  # the name and version of the rules below for what is kept
COMMITS_KEPT = 8  # CommitDone ids remembered per table


class PublishedCommits:
    """The ids of each table's newest CommitDone events on the control topic (the last
    :data:`COMMITS_KEPT`): a restarted writer publishes its newest commit's CommitDone when
    they lack it. Bounded by the tables, not by the commits."""

    def __init__(self, per_table: int = COMMITS_KEPT) -> None:
        self._ids: dict[str, deque[str]] = {}
        self._per_table = per_table

    def add(self, table: str, commit_id: str) -> None:
        """``commit_id``'s CommitDone for ``table`` is on the control topic."""
        ids = self._ids.setdefault(table, deque(maxlen=self._per_table))
        if commit_id not in ids:
            ids.append(commit_id)

    def has(self, table: str, commit_id: str) -> bool:
        """Whether ``commit_id`` is among ``table``'s newest published commits."""
        return commit_id in self._ids.get(table, ())

    def __len__(self) -> int:
        return sum(map(len, self._ids.values()))


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
        checkpoints: Checkpoints | None = None,
    ) -> None:
        self._consumer = consumer
        self._reader = reader
        self._admin = admin
        self._topic = topic
        self._tables = tables
        self._metrics = metrics
        self.commands = commands
        self.checkpoints = checkpoints or Checkpoints(None)
        self.listener: ControlListener | None = None
        self.announced: dict[str, dict[int, SchemaChange]] = {}
        self.commits_seen = PublishedCommits()
        self.bulk_loads: dict[str, BulkLoad] = {}  # the newest BulkLoad event per table
        self.retained = Retained()
        self._positions: dict[int, int] = {}  # per control partition, the next offset to fold
        self.last_replay: Replayed | None = None

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
        """Fold the newest checkpoint and the control topic after it, up to its end (taken
        now). Raises RetryableError when Kafka does not answer (a broker restarting) or the
        replay does not finish within ``timeout_s`` (checkpoints saved on the way stay)."""
        store: StateStore | None = self.checkpoints.store
        replayed = replay_control(
            self._consumer, self._reader, self, store=store, timeout_s=timeout_s
        )
        self._positions = replayed.positions
        self.last_replay = replayed
        self.commands.count_paused()
        log.info(
            "control topic replayed",
            extra={
                "schema_plans": sum(map(len, self.announced.values())),
                "from_checkpoint": replayed.from_checkpoint,
                "from_topic": replayed.from_topic,
            },
        )

    def apply(self, event: ControlEvent, origin: Origin | None, replay: bool) -> None:
        """:class:`shared.control_state.ControlFold`: :meth:`handle`."""
        self.handle(event, replay=replay, origin=origin)

    def poll(self, timeout: float = 0) -> None:
        """Handle the control events that have arrived (up to 500); save a checkpoint when
        one is due."""
        try:
            messages = self._consumer.consume(500, timeout)
        except KafkaException as exc:
            raise RetryableError(f"control topic read failed: {exc}") from exc
        read = fold_messages(messages, self._reader, self, self._positions, False)
        self.checkpoints.read(read)
        if self.checkpoints.due():
            self.checkpoints.save(self._positions, self)

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
            # The events folded say where each partition stands: a partition assigned at its
            # end (from a checkpoint) has no consumer position until a record arrives.
            positions = dict(self._positions)
            for tp in self._consumer.position(assignment):
                positions[tp.partition] = max(positions.get(tp.partition, -1), tp.offset)
            if all(high == 0 or positions.get(p, -1) >= high for p, high in ends.items()):
                return
            if time.monotonic() > deadline:
                raise RetryableError(f"control topic not read to its end in {timeout_s:.0f} s")
            self.poll(timeout=0.2)

    def handle(
        self, event: ControlEvent, replay: bool = False, origin: Origin | None = None
    ) -> None:
        """Record ``event`` (read at ``origin``, kept there when the state rests on it);
        outside the replay, act on plans and commands at once."""
        payload = event.payload
        if isinstance(payload, SchemaChange):
            self.announced.setdefault(payload.table, {})[payload.to_schema_id] = payload
            self.retained.keep(("plan", payload.table, payload.to_schema_id), origin)
            state = self._tables.get(payload.table)
            if state is not None and not replay and self.listener is not None:
                self.listener.schema_announced(state)
        elif isinstance(payload, CommitDone):
            self.commits_seen.add(payload.table, payload.commit_id)
            self.retained.keep(("commit", payload.table), origin)
        elif isinstance(payload, OperatorCommand):
            if payload.command is not OperatorCommandKind.FLUSH:  # a replay runs no FLUSH
                self.retained.keep(("pause", event.table), origin)
            if replay:
                self.commands.replayed(event, payload)
            else:
                self.commands.received(event, payload, self._pause_changed)
        elif isinstance(payload, BulkLoad):
            self.bulk_loads[payload.table] = payload
            self.retained.keep(("bulk", payload.table), origin)
            state = self._tables.get(payload.table)
            if state is not None and self.listener is not None:
                self.listener.bulk_load_seen(state)

    def _pause_changed(self, state: TableState) -> None:
        if self.listener is not None:
            self.listener.pause_changed(state)
