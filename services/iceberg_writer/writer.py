"""The writer loop: consume change records, hold them per table, commit batches to Iceberg.

Exactly once comes from the table, not from Kafka: every data commit records the next offset
of each partition it consumed (plus commit id, epoch and watermark) in its own snapshot
summary, and a starting writer seeks every assigned partition to the offsets of the table's
newest writer commit. Consumer-group offsets are never used. A crash before a commit loses
only uncommitted work, which is read again; a crash after it leaves offsets and rows
consistent, and the missing CommitDone is published on restart.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import io
import json
import logging
import os
import threading
import time
import uuid
from collections import Counter, deque
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import fastavro
from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaError,
    KafkaException,
    Message,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient
from confluent_kafka.schema_registry import SchemaRegistryClient
from pyiceberg.table import Table

from services.iceberg_writer.apply import BatchWriter, CommitConflictError, arrow_batch
from services.iceberg_writer.batching import BatchClock
from services.iceberg_writer.changes import (
    BatchPlan,
    Change,
    Op,
    Path,
    PositionBounds,
    plan_batch,
)
from services.iceberg_writer.config import WriterSettings
from services.iceberg_writer.metrics import WriterMetrics
from services.iceberg_writer.records import change_of
from services.iceberg_writer.tables import (
    BULK_LOAD_ID,
    COMMIT_ID,
    DEFAULT_PROPERTIES,
    EPOCH,
    EPOCH_PROPERTY,
    OFFSETS,
    SCHEMA_VERSION_PROPERTY,
    TRUNCATED_AT,
    WATERMARK,
    Checkpoint,
    TableStore,
    applied_schema_ids,
    checkpoint_of,
    encode_offsets,
    position_ceiling,
    position_floor,
    writes_own_files,
)
from services.iceberg_writer.types import row_converters, row_record
from shared.avro import AvroCodec, WireFormatError, split_header
from shared.avro_decoder import AvroDecoder
from shared.control import ControlPublisher, ControlReader
from shared.errors import FatalError, RetryableError
from shared.events import (
    BulkLoad,
    BulkLoadStatus,
    CommitDone,
    ControlEvent,
    OperatorCommand,
    OperatorCommandKind,
    SchemaChange,
    TopicPartitionOffset,
    Verdict,
)
from shared.histograms import observe_many
from shared.kafka import GroupMembership, consume_ready, last_stable_offsets
from shared.lease import leased

log = logging.getLogger("services.iceberg_writer")

TOPIC_PREFIX = "icefjord.changes."
TP = tuple[str, int]
CONSUME_BATCH = 5000  # change records taken per consume call
COPY_POSITION = "0" * 20  # a bulk copy's rows: before every change of the stream they precede
# The change record's fields _decode reads; the others are skipped (AvroDecoder).
DECODED = frozenset({"op", "position", "source_ts_ms", "key", "after", "unchanged"})
TAKE_WAITING_S = 2.0  # longest a due commit waits while already-fetched records are taken


def table_of(topic: str) -> str:
    """``icefjord.changes.<namespace>.<table>`` -> ``<namespace>.<table>``."""
    if not topic.startswith(TOPIC_PREFIX):
        raise ValueError(f"{topic!r} is not a change topic")
    return topic.removeprefix(TOPIC_PREFIX)


@dataclass
class TableState:
    """What the writer holds for one table between commits."""

    name: str
    topic: str
    clock: BatchClock
    table: Table | None = None
    keys: tuple[str, ...] = ()
    columns: tuple[str, ...] = ()
    current_id: int = 0
    current_version: int = 0
    applied_ids: set[int] = field(default_factory=set)
    reader: Any = None
    converters: dict[str, Any] = field(default_factory=dict)
    pending: list[Change] = field(default_factory=list)
    consumed: dict[TP, int] = field(default_factory=dict)
    committed: dict[TP, int] = field(default_factory=dict)
    checkpoint: Checkpoint | None = None
    paused: bool = False
    flush: bool = False
    claimed: bool = False
    waits: dict[TP, tuple[int, int, float]] = field(default_factory=dict)  # offset, id, since
    expired_ids: set[int] = field(default_factory=set)
    truncated_at: str | None = None
    bulk: BulkLoad | None = None  # a bulk load whose copy the table's changes wait for
    bulk_paused: bool = False  # its partitions paused because the held batch is full
    control_synced: bool = False  # the control topic was read to its end before a commit
    bulk_warned_at: float = 0.0
    bounds: PositionBounds | None = None  # for the upsert path; None: to be read afresh


class Writer:
    """Owns the consumers, the producer, Spark and the per-table state."""

    def __init__(
        self,
        settings: WriterSettings,
        *,
        data: Consumer,
        control: Consumer,
        new_data: Callable[[], Consumer] | None = None,
        admin: AdminClient,
        producer: Producer,
        registry: SchemaRegistryClient,
        store: TableStore,
        batch_writer: BatchWriter,
        metrics: WriterMetrics,
        epoch: int,
    ) -> None:
        self.settings = settings
        self._data = data
        self._new_data = new_data  # replaces a data consumer that fell out of its group
        self._membership = GroupMembership()
        self._control = control
        self._admin = admin
        self._producer = producer
        self._registry = registry
        self._codec = AvroCodec(registry)
        self._store = store
        self._batch_writer = batch_writer
        self.metrics = metrics
        self.epoch = epoch
        self._publisher = ControlPublisher(producer, self._codec, settings.control_topic)
        self._control_reader = ControlReader(control, self._codec, settings.control_topic)
        self.tables: dict[str, TableState] = {}
        self.announced: dict[str, dict[int, SchemaChange]] = {}
        self._commit_events_seen: set[str] = set()
        self.bulk_loads: dict[str, BulkLoad] = {}  # the newest BulkLoad event per table
        self._raw_schemas: dict[int, dict[str, Any]] = {}
        self._decoders: dict[int, AvroDecoder] = {}
        self._paused_all = False
        self._last_lag = 0.0
        self.commits = 0
        self._commits_lock = threading.Lock()
        self._committers = (
            ThreadPoolExecutor(settings.commit_parallelism, thread_name_prefix="commit")
            if settings.commit_parallelism > 1
            else None
        )
        self.freshness_samples: deque[float] = deque(maxlen=200_000)  # seconds, for benchmarks
        # The per-record counter's children, so a record does not look its labels up.
        self._received: dict[tuple[str, Op], Any] = {}

    # -- start ----------------------------------------------------------------------------

    def start(self, timeout_s: float = 60.0) -> None:
        """Read the control topic to its end (schema plans, published commits), then subscribe."""
        self._replay_control(timeout_s)
        self._subscribe()
        log.info(
            "writer subscribed", extra={"pattern": self.settings.topic_pattern, "epoch": self.epoch}
        )

    def _subscribe(self) -> None:
        self._data.subscribe(
            [self.settings.topic_pattern], on_assign=self._on_assign, on_revoke=self._on_revoke
        )

    def _resubscribe_if_lost(self) -> None:
        """Replace a data consumer that has been out of its group too long
        (shared.kafka.GroupMembership); the new one reads on from each table's checkpoint."""
        if self._new_data is None or not self._membership.lost(self._data):
            return
        log.warning(
            "data consumer out of its group, subscribing a new one",
            extra={"after_s": self._membership.limit_s},
        )
        self._membership.reset()
        self._drop_uncommitted()
        for state in self.tables.values():
            state.bounds = None
            state.bulk_paused = False
        try:
            self._data.close()
        except Exception as exc:  # closing a consumer in that state must not stop the writer
            log.warning("closing the old data consumer failed", extra={"error": str(exc)})
        self._data = self._new_data()
        self._subscribe()

    def warm_up(self) -> None:
        """Open the catalog in Spark (``TableStore.warm_up``) and run the table creation and
        write paths once on a throwaway table (``BatchWriter.warm_up``), so the first real
        table and commits do not pay for the JVM's first use of them. Best effort: a failure
        only means slower first commits."""
        try:
            paths = [Path.APPEND, Path.MERGE]
            paths += [Path.INSERT] if self.settings.insert_path else []
            paths += [Path.UPSERT] if self.settings.upsert_path else []
            began = time.monotonic()
            self._store.warm_up()
            self._batch_writer.warm_up(DEFAULT_PROPERTIES, paths)
            seconds = time.monotonic() - began
        except Exception as exc:
            log.warning("warm-up failed, first commits will be slower", extra={"error": str(exc)})
            return
        log.info("spark warmed up", extra={"seconds": round(seconds, 1)})

    def warm_up_in_background(self, done: Callable[[], None]) -> threading.Thread:
        """:meth:`warm_up` in a daemon thread, then ``done()``, while the loop runs.

        A restarted writer then reads and commits at once instead of after the warm-up
        (9-21 s): its first commits pay for the JVM's first use of their own path, which
        the warm-up would have paid anyway. The warm-up's table is in a scratch catalog and
        its commits' summaries are per thread (``commit_properties``), so it shares nothing
        with the loop's commits but the SparkSession, which takes jobs from several threads.
        """

        def run() -> None:
            try:
                self.warm_up()
            finally:
                done()

        thread = threading.Thread(target=run, name="spark-warm-up", daemon=True)
        thread.start()
        return thread

    def _replay_control(self, timeout_s: float) -> None:
        topic = self.settings.control_topic
        metadata = self._control.list_topics(topic, timeout=10)
        partitions = sorted(metadata.topics[topic].partitions) if topic in metadata.topics else []
        ends: dict[int, int] = {}
        for p in partitions:
            try:
                _, high = self._control.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
            except KafkaException as exc:
                raise RetryableError(f"control topic offsets unavailable: {exc}") from exc
            ends[p] = high
        self._control.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in partitions])
        deadline = time.monotonic() + timeout_s
        done = {p for p, high in ends.items() if high == 0}
        while len(done) < len(partitions):
            if time.monotonic() > deadline:
                raise RetryableError(f"control topic replay did not finish in {timeout_s:.0f} s")
            for message in self._control.consume(500, 0.5):
                if message.error() is not None:
                    continue
                event = self._control_reader.decode(message)
                if event is not None:
                    self._on_control(event, replay=True)
                if message.offset() + 1 >= ends[message.partition()]:
                    done.add(message.partition())
            for p, high in ends.items():
                position = self._control.position([TopicPartition(topic, p)])[0].offset
                if position >= high:
                    done.add(p)
        log.info(
            "control topic replayed", extra={"schema_plans": sum(map(len, self.announced.values()))}
        )

    # -- assignment -----------------------------------------------------------------------

    def _state(self, topic: str) -> TableState:
        name = table_of(topic)
        state = self.tables.get(name)
        if state is None:
            clock = BatchClock(
                self.settings.freshness_target(name),
                self.settings.min_batch_s,
                self.settings.max_batch_records,
            )
            state = TableState(name=name, topic=topic, clock=clock)
            self.tables[name] = state
            self._load(state)
            self._hold(state)
        return state

    def _load(self, state: TableState) -> None:
        table = self._store.load(state.name)
        state.table = table
        if table is None:
            return
        schema = table.schema()
        identifiers = schema.identifier_field_names()
        state.columns = tuple(f.name for f in schema.fields)
        state.keys = tuple(name for name in state.columns if name in identifiers)
        current, ids = applied_schema_ids(table)
        state.current_id = current
        state.applied_ids = set(ids)
        state.current_version = int(table.properties.get("icefjord.schema.version", "0"))
        raw = self._raw_schema(current)
        state.reader = self._codec.writer_schema(current)
        state.converters = row_converters(row_record(raw))
        state.checkpoint = checkpoint_of(table)
        if state.checkpoint is not None:
            state.committed = dict(state.checkpoint.offsets)
            state.truncated_at = state.checkpoint.truncated_at
            self._republish_if_missing(state, table, state.checkpoint)

    def _on_assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        for tp in partitions:
            state = self._state(tp.topic)
            stored = state.committed.get((tp.topic, tp.partition))
            tp.offset = stored if stored is not None else OFFSET_BEGINNING
            state.consumed[(tp.topic, tp.partition)] = stored or 0
            state.bounds = None  # keys may have moved between partitions
        consumer.assign(partitions)
        paused = [tp for tp in partitions if self._is_paused(self.tables[table_of(tp.topic)])]
        if paused:
            consumer.pause(paused)
        log.info("partitions assigned", extra={"count": len(partitions)})

    def _on_revoke(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        # Uncommitted work is dropped: it is read again from the table's checkpoint.
        for tp in partitions:
            state = self.tables.get(table_of(tp.topic))
            if state is None:
                continue
            key = (tp.topic, tp.partition)
            state.pending = [c for c in state.pending if (c.topic, c.partition) != key]
            state.consumed.pop(key, None)
            state.waits.pop(key, None)
            state.bounds = None
            if not state.pending:
                state.clock.first_at = None

    # -- control events -------------------------------------------------------------------

    def _on_control(self, event: ControlEvent, replay: bool = False) -> None:
        payload = event.payload
        if isinstance(payload, SchemaChange):
            self.announced.setdefault(payload.table, {})[payload.to_schema_id] = payload
            state = self.tables.get(payload.table)
            if state is not None and not replay:
                self._wake_waits(state)
        elif isinstance(payload, CommitDone):
            self._commit_events_seen.add(payload.commit_id)
        elif isinstance(payload, OperatorCommand) and not replay:
            self._on_command(payload)
        elif isinstance(payload, BulkLoad):
            self.bulk_loads[payload.table] = payload
            state = self.tables.get(payload.table)
            if state is not None:
                self._hold(state)

    # -- bulk loads -----------------------------------------------------------------------

    def _hold(self, state: TableState) -> None:
        """Set ``state.bulk`` from the table's newest BulkLoad event: held while that load is
        PLANNED or READY and its copy is not in the table yet."""
        load = self.bulk_loads.get(state.name)
        held = load is not None and load.status is not BulkLoadStatus.ABANDONED
        if held and load is not None and state.table is not None:
            held = not _copy_committed(state.table, load.load_id)
        if held:
            if state.bulk is None:
                log.info(
                    "changes held for a bulk load",
                    extra={"table": state.name, "load_id": load.load_id if load else None},
                )
            state.bulk = load
        else:
            self._release(state)
        self.metrics.held_tables.set(sum(1 for s in self.tables.values() if s.bulk is not None))

    def _release(self, state: TableState) -> None:
        if state.bulk is not None:
            log.info(
                "bulk hold released", extra={"table": state.name, "load_id": state.bulk.load_id}
            )
        state.bulk = None
        if state.bulk_paused:
            state.bulk_paused = False
            self._apply_pause(state)
        self.metrics.held_tables.set(sum(1 for s in self.tables.values() if s.bulk is not None))

    def _commit_copies(self) -> None:
        """Commit every READY copy whose table exists (``commit_parallelism`` at a time),
        then release those tables' held changes.

        A copy still awaited may have become READY while this round read change records
        and created tables (most of a second for a bulk load's first records): the control
        topic is read again first, so it is committed in this round, beside the others."""
        if any(
            state.bulk is not None and state.bulk.status is not BulkLoadStatus.READY
            for state in self.tables.values()
        ):
            for event in self._control_reader.poll(timeout=0, max_events=500):
                self._on_control(event)
        ready = [
            (state, state.bulk)
            for state in self.tables.values()
            if state.bulk is not None
            and state.bulk.status is BulkLoadStatus.READY
            # The table is created by its first change record, which is on its way.
            and state.table is not None
        ]
        if self._committers is None or len(ready) < 2:
            done = [self.commit_copy(state, load) for state, load in ready]
        else:
            futures = [self._committers.submit(self.commit_copy, s, load) for s, load in ready]
            errors = [f.exception() for f in futures]
            first = next((e for e in errors if e is not None), None)
            if first is not None:
                raise first
            done = [f.result() for f in futures]
        for (state, _), released in zip(ready, done, strict=True):
            if released:
                self._release(state)

    def commit_copy(self, state: TableState, load: BulkLoad) -> bool:
        """Append the copy of ``load`` as one snapshot (its load id, the table's unchanged
        offsets and a CommitDone, like any commit). True: the load is done and the table's
        held changes may go (the caller releases them); False: try again later."""
        files = [f for f in load.files if "://" in f or os.path.exists(f)]
        if len(files) < len(load.files):
            table = self._store.load(state.name)
            if table is not None and _copy_committed(table, load.load_id):
                return True
            log.error(
                "bulk copy files missing; the load is released without them",
                extra={"table": state.name, "load_id": load.load_id, "files": len(load.files)},
            )
            return True
        if not files:
            return True
        self._claim(state)
        self._store.check_epoch(state.name, self.epoch)
        table = self._store.load(state.name)
        assert table is not None
        if _copy_committed(table, load.load_id):
            return True
        if leased(table.properties, int(time.time() * 1000)):
            self.metrics.lease_deferrals.labels(state.name).inc()
            return False
        empty = _holds_no_rows(table)
        source_ms = (
            load.snapshot_ts_ms if load.snapshot_ts_ms is not None else int(time.time() * 1000)
        )
        commit_id = str(uuid.uuid4())
        summary = {
            OFFSETS: encode_offsets(state.committed),
            COMMIT_ID: commit_id,
            EPOCH: str(self.epoch),
            WATERMARK: str(source_ms),
            BULK_LOAD_ID: load.load_id,
        }
        if state.truncated_at is not None:
            summary[TRUNCATED_AT] = state.truncated_at
        columns = self._store.metadata
        values: dict[str, Any] = {columns.position: COPY_POSITION}
        if columns.op:
            values[columns.op] = Op.READ.value
        if columns.source_ts:
            values[columns.source_ts] = dt.datetime.fromtimestamp(source_ms / 1000, dt.UTC)
        try:
            result = self._batch_writer.append_copy(
                self._store.sql_name(state.name),
                files,
                values,
                state.keys,
                columns.position,
                insert_only=not empty,
                summary=summary,
            )
        except ValueError as exc:  # a column the table lacks: wait for its SchemaChange
            now = time.monotonic()
            if now - state.bulk_warned_at > 30:
                state.bulk_warned_at = now
                log.warning(
                    "bulk copy waits for the table's schema",
                    extra={"table": state.name, "load_id": load.load_id, "error": str(exc)},
                )
            return False
        except CommitConflictError as exc:
            self.metrics.commit_conflicts.labels(state.name).inc()
            log.warning(
                "bulk copy commit conflict, retrying",
                extra={"table": state.name, "error": str(exc)},
            )
            return False
        committed_table = self._store.load(state.name)
        assert committed_table is not None
        state.bounds = None  # rows from no partition: read the bounds afresh
        rows = load.rows or 0
        self.metrics.bulk_rows.labels(state.name).inc(rows)
        self.metrics.commit_duration.labels(state.name).observe(result.seconds)
        self.metrics.commits.labels(state.name, "bulk").inc()
        self.metrics.last_commit.labels(state.name).set(time.time())
        log.info(
            "bulk copy committed",
            extra={
                "table": state.name,
                "load_id": load.load_id,
                "rows": rows,
                "path": result.path.value,
                "seconds": round(result.seconds, 3),
            },
        )
        checkpoint = checkpoint_of(committed_table)
        if checkpoint is not None and checkpoint.commit_id == commit_id:
            self._publish_commit(
                state, committed_table, checkpoint, result.seconds, None, (rows, 0, 0), result.path
            )
        for path in files:
            if "://" not in path:
                with contextlib.suppress(OSError):
                    os.remove(path)
        return True

    def _read_control_to_end(self, timeout_s: float = 10.0) -> None:
        """Handle every control event published before now (the topic's ends, taken now)."""
        assignment = self._control.assignment()
        try:
            stable = last_stable_offsets(self._admin, assignment)
        except KafkaException as exc:
            raise RetryableError(f"control topic offsets unavailable: {exc}") from exc
        ends = {partition: offset for (_, partition), offset in stable.items()}
        deadline = time.monotonic() + timeout_s
        while True:
            positions = {tp.partition: tp.offset for tp in self._control.position(assignment)}
            if all(high == 0 or positions.get(p, -1) >= high for p, high in ends.items()):
                return
            if time.monotonic() > deadline:
                raise RetryableError(f"control topic not read to its end in {timeout_s:.0f} s")
            for event in self._control_reader.poll(timeout=0.2, max_events=500):
                self._on_control(event)

    def _on_command(self, command: OperatorCommand) -> None:
        if command.all_tables:
            targets = list(self.tables.values())
        else:
            targets = [self.tables[command.table]] if command.table in self.tables else []
        if command.command is OperatorCommandKind.PAUSE and command.all_tables:
            self._paused_all = True
        if command.command is OperatorCommandKind.RESUME and command.all_tables:
            self._paused_all = False
        for state in targets:
            if command.command is OperatorCommandKind.PAUSE:
                state.paused = True
            elif command.command is OperatorCommandKind.RESUME:
                state.paused = False
            elif command.command is OperatorCommandKind.FLUSH:
                state.flush = True
            self._apply_pause(state)
        log.info(
            "operator command",
            extra={
                "command": command.command.value,
                "table": command.table,
                "by": command.requested_by,
            },
        )
        self.metrics.paused_tables.set(sum(1 for s in self.tables.values() if self._is_paused(s)))

    def _is_paused(self, state: TableState) -> bool:
        return state.paused or self._paused_all

    def _apply_pause(self, state: TableState) -> None:
        assigned = [tp for tp in self._data.assignment() if tp.topic == state.topic]
        if not assigned:
            return
        if self._is_paused(state) or state.bulk_paused:
            self._data.pause(assigned)
        else:
            waiting = set(state.waits)
            self._data.resume([tp for tp in assigned if (tp.topic, tp.partition) not in waiting])

    # -- the loop -------------------------------------------------------------------------

    def step(self) -> None:
        """One round: control events, a poll of change records, due commits, waits, lag.

        A RetryableError (registry or broker unreachable) leaves no half-read batch behind:
        uncommitted work is dropped and every partition is read again from the checkpoint.
        """
        try:
            self._step()
        except RetryableError:
            self.rewind()
            raise

    def rewind(self) -> None:
        """Forget uncommitted changes and seek every assigned partition to its checkpoint."""
        self._drop_uncommitted()
        for tp in self._data.assignment():
            held = self.tables.get(table_of(tp.topic))
            stored = held.committed.get((tp.topic, tp.partition)) if held else None
            offset = stored if stored is not None else OFFSET_BEGINNING
            try:
                self._data.seek(TopicPartition(tp.topic, tp.partition, offset))
                if held is not None and not self._is_paused(held):
                    self._data.resume([tp])
            except Exception as exc:  # the broker may be the thing that is down
                log.warning("rewind seek failed", extra={"error": str(exc)})

    def _drop_uncommitted(self) -> None:
        for state in self.tables.values():
            state.pending = []
            state.consumed = {}
            state.waits = {}
            state.clock.first_at = None

    def _step(self) -> None:
        for event in self._control_reader.poll(timeout=0, max_events=500):
            self._on_control(event)
        self._resubscribe_if_lost()
        messages = consume_ready(self._data, CONSUME_BATCH, 0.2)
        now = time.monotonic()
        for message in messages:
            self._on_message(message, now)
        self._expire_waits(now)
        self._commit_copies()
        due: list[TableState] = []
        for state in list(self.tables.values()):
            if state.bulk is not None:
                self._bound_held(state)
                continue
            if self._is_paused(state) and not state.flush:
                continue
            if state.clock.should_close(now, len(state.pending), state.flush):
                due.append(state)
            state.flush = False
        if any(not state.control_synced for state in due):
            # A BulkLoad PLANNED is published before the table's first change exists, so
            # once the control topic is read to its end, a table's first commit cannot
            # come before the hold it should wait for.
            self._read_control_to_end()
            for state in due:
                state.control_synced = True
            due = [state for state in due if state.bulk is None]
        if due:
            self._take_waiting(due)
        self.commit_all(due)
        if now - self._last_lag > 5:
            self._update_lag()
            self._last_lag = now

    def _bound_held(self, state: TableState) -> None:
        """A held table reads on until a full batch waits, then pauses until the copy."""
        if state.bulk_paused or len(state.pending) < state.clock.max_records:
            return
        assigned = [tp for tp in self._data.assignment() if tp.topic == state.topic]
        if assigned:
            self._data.pause(assigned)
            state.bulk_paused = True

    def _take_waiting(self, due: list[TableState]) -> None:
        """Before due tables commit, take the change records already fetched, without
        waiting, until none are left, a due table's batch is full or ``TAKE_WAITING_S`` has
        passed. A table that is behind (a snapshot load, a restart, a burst) then commits its
        backlog in a few large batches instead of linger-sized ones: one MERGE of 50,000
        changes costs little more than one of 5,000. A table that is up to date finds
        nothing waiting and commits at once."""
        deadline = time.monotonic() + TAKE_WAITING_S
        while time.monotonic() < deadline:
            if any(len(state.pending) >= state.clock.max_records for state in due):
                return
            messages = self._data.consume(CONSUME_BATCH, 0)
            now = time.monotonic()
            for message in messages:
                self._on_message(message, now)
            if len(messages) < CONSUME_BATCH:
                return

    def _on_message(self, message: Message, now: float) -> None:
        error = message.error()
        if error is not None:
            if error.code() in (KafkaError._PARTITION_EOF, KafkaError.UNKNOWN_TOPIC_OR_PART):
                return
            raise RetryableError(f"change topic read failed: {error}")
        topic, partition, offset = message.topic(), message.partition(), message.offset()
        state = self._state(topic)
        tp = (topic, partition)
        if tp in state.waits:
            return  # fetched before the pause took effect; read again on resume
        value = message.value()
        if value is None:
            state.consumed[tp] = offset + 1
            return
        try:
            schema_id, _ = split_header(value)
        except WireFormatError as exc:
            self._dead_letter(state, message, exc)
            return
        verdict = self._admit(state, schema_id, topic)
        if verdict == "wait":
            state.waits[tp] = (offset, schema_id, now)
            self._data.pause([TopicPartition(topic, partition)])
            self._data.seek(TopicPartition(topic, partition, offset))
            log.info(
                "rows wait for a schema plan",
                extra={"table": state.name, "schema_id": schema_id, "partition": partition},
            )
            return
        if verdict != "ok":
            self._quarantine(state, message, schema_id, verdict)
            state.consumed[tp] = offset + 1
            return
        try:
            change = self._decode(state, message, schema_id)
        except (WireFormatError, KeyError, ValueError, TypeError) as exc:
            self._dead_letter(state, message, exc)
            return
        state.pending.append(change)
        state.consumed[tp] = offset + 1
        state.clock.added(now)
        counter = self._received.get((state.name, change.op))
        if counter is None:
            counter = self.metrics.changes_received.labels(state.name, change.op.value)
            self._received[(state.name, change.op)] = counter
        counter.inc()

    def _decode(self, state: TableState, message: Message, schema_id: int) -> Change:
        value = message.value()
        assert value is not None
        writer = self._codec.writer_schema(schema_id)
        _, body = split_header(value)
        # An older version is resolved into the current schema by fastavro.
        decoder = self._decoder(schema_id, writer) if schema_id == state.current_id else None
        try:
            if decoder is not None:
                decoded: Any = decoder.decode(body)
            else:
                decoded = fastavro.schemaless_reader(io.BytesIO(body), writer, state.reader)
        except Exception as exc:  # fastavro raises many kinds on corrupt input
            raise WireFormatError(f"body does not match schema {schema_id}: {exc}") from exc
        return change_of(
            decoded,
            state.name,
            state.keys,
            state.converters,
            message.topic(),
            message.partition(),
            message.offset(),
            schema_id,
        )

    def _decoder(self, schema_id: int, parsed: Any) -> AvroDecoder:
        """The decoder of ``schema_id``'s change records, skipping the fields a commit does
        not use (``source``, ``tx_id``), uuids as text (what the table stores). The
        benchmark's ``orders`` record: fastavro 22 us, this decoder 13 us in plain CPython
        and 7 us compiled."""
        decoder = self._decoders.get(schema_id)
        if decoder is None:
            raw = self._raw_schema(schema_id)
            unused = [str(f["name"]) for f in raw.get("fields", []) if f.get("name") not in DECODED]
            decoder = AvroDecoder(raw, parsed, unused, uuid_text=True)
            self._decoders[schema_id] = decoder
        return decoder

    # -- schema versions ------------------------------------------------------------------

    def _raw_schema(self, schema_id: int) -> dict[str, Any]:
        raw = self._raw_schemas.get(schema_id)
        if raw is None:
            try:
                text = self._registry.get_schema(schema_id).schema_str or ""
            except Exception as exc:
                raise RetryableError(f"registry: schema {schema_id}: {exc}") from exc
            raw = json.loads(text)
            self._raw_schemas[schema_id] = raw
        return raw

    def _admit(self, state: TableState, schema_id: int, topic: str) -> str:
        """ "ok" to write rows of ``schema_id`` now, "wait", or a quarantine reason."""
        if state.table is None:
            self._create(state, schema_id, topic)
            return "ok"
        if schema_id in state.applied_ids:
            return "ok"
        plan = self.announced.get(state.name, {}).get(schema_id)
        if plan is None:
            if schema_id in state.expired_ids:
                return (
                    f"no SchemaChange for schema id {schema_id} within "
                    f"{self.settings.schema_wait_s:.0f} s"
                )
            return "wait"
        if plan.verdict is Verdict.QUARANTINE:
            return f"schema version {plan.to_version} quarantined: {plan.reason or 'no reason'}"
        if plan.to_version <= state.current_version:
            return "ok"  # an older version, read into the current schema
        self._evolve(state, plan)
        return "ok"

    def _create(self, state: TableState, schema_id: int, topic: str) -> None:
        started = time.monotonic()
        raw = self._raw_schema(schema_id)
        version = 0
        try:
            version = self._version_of(f"{topic}-value", schema_id)
        except Exception as exc:
            log.warning("schema version lookup failed", extra={"error": str(exc)})
        # The version and this writer's claim go into the CREATE: two metadata commits
        # fewer on the way to a new table's first rows.
        properties = {EPOCH_PROPERTY: str(self.epoch)}
        if version:
            properties[SCHEMA_VERSION_PROPERTY] = str(version)
        created = self._store.create(state.name, raw, schema_id, properties)
        if version and created.properties.get(SCHEMA_VERSION_PROPERTY) != str(version):
            # The table was there already (another writer made it in between).
            self._store.set_properties(state.name, {SCHEMA_VERSION_PROPERTY: str(version)})
        log.info(
            "table created",
            extra={
                "table": state.name,
                "schema_id": schema_id,
                "seconds": round(time.monotonic() - started, 3),
            },
        )
        committed = dict(state.committed)
        self._load(state)
        state.committed = committed or state.committed
        if created.properties.get(EPOCH_PROPERTY) == str(self.epoch):
            state.claimed = True
        self._claim(state)

    def _version_of(self, subject: str, schema_id: int) -> int:
        """The version of ``subject`` registered with ``schema_id`` (0: none has it).

        By id, not by the schema's text: a lookup by text (``lookup_schema``) never matched
        on Apicurio, whose comparison is stricter than the Avro canonical form. A new table's
        first schema is nearly always the subject's latest version: one request."""
        latest = self._registry.get_latest_version(subject)
        if latest.schema_id == schema_id:
            return int(latest.version or 0)
        for version in sorted(self._registry.get_versions(subject), reverse=True):
            if self._registry.get_version(subject, version).schema_id == schema_id:
                return int(version)
        return 0

    def _evolve(self, state: TableState, plan: SchemaChange) -> None:
        if state.pending:
            self.commit(state)  # rows of the old schema go in under the old schema
        self._claim(state)
        self._store.apply_schema_change(state.name, plan)
        committed = dict(state.committed)
        self._load(state)
        state.committed = committed
        log.info(
            "schema change applied",
            extra={"table": state.name, "to_version": plan.to_version, "ops": len(plan.operations)},
        )

    def _wake_waits(self, state: TableState) -> None:
        now = time.monotonic()
        for tp, (_offset, schema_id, since) in list(state.waits.items()):
            if schema_id in self.announced.get(state.name, {}):
                self.metrics.schema_wait.labels(state.name).observe(now - since)
                del state.waits[tp]
                if not self._is_paused(state):
                    self._data.resume([TopicPartition(tp[0], tp[1])])

    def _expire_waits(self, now: float) -> None:
        for state in self.tables.values():
            for tp, (_offset, schema_id, since) in list(state.waits.items()):
                if now - since >= self.settings.schema_wait_s:
                    self.metrics.schema_wait.labels(state.name).observe(now - since)
                    state.expired_ids.add(schema_id)
                    del state.waits[tp]
                    if not self._is_paused(state):
                        self._data.resume([TopicPartition(tp[0], tp[1])])
                    log.warning(
                        "schema plan did not arrive; rows go to quarantine",
                        extra={"table": state.name, "schema_id": schema_id},
                    )

    # -- diversions -----------------------------------------------------------------------

    def _quarantine(self, state: TableState, message: Message, schema_id: int, reason: str) -> None:
        now_ms = str(int(time.time() * 1000)).encode()
        headers = [
            ("icefjord.table", state.name.encode()),
            ("icefjord.schema_id", str(schema_id).encode()),
            ("icefjord.source.topic", message.topic().encode()),
            ("icefjord.source.partition", str(message.partition()).encode()),
            ("icefjord.source.offset", str(message.offset()).encode()),
            ("icefjord.quarantined_at_ms", now_ms),
            ("icefjord.reason", reason.encode()[:1024]),
        ]
        self._producer.produce(
            self.settings.quarantine_topic,
            key=message.key(),
            value=message.value(),
            headers=headers,
        )
        self.metrics.quarantined_rows.labels(state.name).inc()

    def _dead_letter(self, state: TableState, message: Message, exc: Exception) -> None:
        headers = [
            *list(message.headers() or []),
            ("icefjord.error.class", type(exc).__name__.encode()),
            ("icefjord.error.message", str(exc).encode()[:1024]),
            ("icefjord.source.topic", message.topic().encode()),
            ("icefjord.source.partition", str(message.partition()).encode()),
            ("icefjord.source.offset", str(message.offset()).encode()),
            ("icefjord.failed_at_ms", str(int(time.time() * 1000)).encode()),
        ]
        self._producer.produce(
            self.settings.dead_letter_topic,
            key=message.key(),
            value=message.value(),
            headers=headers,
        )
        state.consumed[(message.topic(), message.partition())] = message.offset() + 1
        self.metrics.dead_letters.labels(state.name).inc()

    # -- commits --------------------------------------------------------------------------

    def commit_all(self, states: list[TableState]) -> None:
        """Commit several tables, ``commit_parallelism`` at a time. Each table's commit is
        independent (its own snapshot, offsets and CommitDone); every commit is waited for
        before the first error is raised, so a rewind never races a commit in flight."""
        states = [s for s in states if s.pending]
        if self._committers is None or len(states) < 2:
            for state in states:
                self.commit(state)
            return
        futures = [self._committers.submit(self.commit, state) for state in states]
        errors = [f.exception() for f in futures]
        fatal = [e for e in errors if e is not None and not isinstance(e, RetryableError)]
        first = fatal[0] if fatal else next((e for e in errors if e is not None), None)
        if first is not None:
            raise first

    def _claim(self, state: TableState) -> None:
        if not state.claimed:
            self._store.claim(state.name, self.epoch)
            state.claimed = True

    def commit(self, state: TableState) -> None:
        """Commit the table's pending changes as one snapshot, then publish CommitDone. A
        table held for a bulk load's copy commits nothing."""
        if not state.pending or state.bulk is not None:
            return
        if self._producer.flush(30) > 0:
            raise RetryableError("quarantine/dead-letter records not acknowledged")
        self._claim(state)
        self._store.check_epoch(state.name, self.epoch)
        table = self._store.load(state.name)
        assert table is not None
        if not self._may_pass_lease(table) and self._lease_holds(state, table):
            return  # every batch would take a path that waits: no planning under the lease
        plan = plan_batch(state.name, state.pending, state.truncated_at)
        offsets = {**state.committed, **state.consumed}
        watermark = max(c.source_ts_ms for c in state.pending)
        commit_id = str(uuid.uuid4())
        summary = {
            OFFSETS: encode_offsets(offsets),
            COMMIT_ID: commit_id,
            EPOCH: str(self.epoch),
            WATERMARK: str(watermark),
        }
        if state.truncated_at is not None or plan.truncate_position is not None:
            # Every commit repeats it, so expiring old snapshots never loses it.
            summary[TRUNCATED_AT] = plan.truncate_position or state.truncated_at or ""
        started = time.monotonic()
        attempt = 0
        while True:
            # Planned against the table as it is now: a retry sees the conflicting commit.
            empty = _holds_no_rows(table)
            floor = None
            if self.settings.insert_path and plan.reads_only and not empty:
                floor = position_floor(table, self._store.metadata.position)
            path = plan.path(empty, floor, self._newer(state, table, plan))
            if path.waits_for_lease and self._lease_holds(state, table):
                return
            batch = arrow_batch(plan, table, state.keys, state.converters, self._store.metadata)
            try:
                result = self._batch_writer.write(
                    self._store.sql_name(state.name),
                    plan,
                    batch,
                    state.columns,
                    state.keys,
                    self._store.metadata.position,
                    path,
                    summary,
                )
                break
            except CommitConflictError as exc:
                self.metrics.commit_conflicts.labels(state.name).inc()
                if attempt >= self.settings.commit_retries:
                    raise FatalError(
                        f"commit to {state.name} still conflicts after {attempt} retries: {exc}"
                    ) from exc
                attempt += 1
                self.metrics.commit_retries.labels(state.name).inc()
                log.warning(
                    "commit conflict, retrying", extra={"table": state.name, "attempt": attempt}
                )
                time.sleep(min(5.0, 0.2 * 2**attempt))
                self._store.check_epoch(state.name, self.epoch)
                table = self._store.load(state.name) or table
        seconds = time.monotonic() - started
        now_ms = time.time() * 1000
        committed_table = self._store.load(state.name)
        assert committed_table is not None
        freshness = [max(0.0, (now_ms - c.source_ts_ms) / 1000) for c in state.pending]
        observe_many(self.metrics.freshness.labels(state.name), freshness)
        for op, count in Counter(change.op for change in plan.changes).items():
            self.metrics.changes_applied.labels(state.name, op.value).inc(count)
        self.metrics.batch_records.labels(state.name).observe(len(state.pending))
        self.metrics.commit_duration.labels(state.name).observe(seconds)
        self.metrics.commits.labels(state.name, result.path.value).inc()
        self.metrics.last_commit.labels(state.name).set(time.time())
        self.freshness_samples.extend(freshness)
        state.committed = offsets
        if state.bounds is not None:
            state.bounds.record(state.pending)
        if plan.truncate_position is not None:
            state.truncated_at = plan.truncate_position
        state.pending = []
        state.clock.committed(seconds)
        with self._commits_lock:
            self.commits += 1
            crash = self.commits == self.settings.crash_after_commits
        checkpoint = checkpoint_of(committed_table)
        log.info(
            "committed",
            extra={
                "table": state.name,
                "path": result.path.value,
                "records": len(plan.changes),
                "seconds": round(seconds, 3),
            },
        )
        if crash:
            log.warning("fault injection: exiting between commit and CommitDone")
            os._exit(137)
        if checkpoint is not None and checkpoint.commit_id == commit_id:
            updated = sum(1 for c in plan.upserts if c.op is Op.UPDATE)
            counts = (len(plan.upserts) - updated, updated, len(plan.deletes))
            self._publish_commit(
                state, committed_table, checkpoint, seconds, freshness, counts, result.path
            )

    def _may_pass_lease(self, table: Table) -> bool:
        """Whether a batch for ``table`` can take a path that goes ahead under a compaction
        lease (:attr:`Path.waits_for_lease`): APPEND into an empty table, or UPSERT where
        the writer may write it. Elsewhere every batch takes the MERGE, which waits."""
        return _holds_no_rows(table) or (self.settings.upsert_path and writes_own_files(table))

    def _lease_holds(self, state: TableState, table: Table) -> bool:
        """Whether the maintainer's compaction lease (``shared/lease.py``) holds this commit
        back: the changes then wait in memory and go in the first commit after it."""
        if leased(table.properties, int(time.time() * 1000)):
            self.metrics.lease_deferrals.labels(state.name).inc()
            return True
        return False

    def _newer(self, state: TableState, table: Table, plan: BatchPlan) -> bool:
        """Whether every change of ``plan`` is at least as new as the stored row of its key
        (so the upsert path gives what the MERGE would). The bounds are read from the
        table's data files when tracking (re)starts, then kept up by each commit."""
        if not self.settings.upsert_path:
            return False
        if state.bounds is None:
            base = None
            if writes_own_files(table):
                base = position_ceiling(table, self._store.metadata.position)
            state.bounds = PositionBounds(base)
        return state.bounds.admits(plan.changes)

    def _publish_commit(
        self,
        state: TableState,
        table: Table,
        checkpoint: Checkpoint,
        seconds: float,
        freshness_ms: list[float] | None = None,
        counts: tuple[int, int, int] | None = None,
        path: Path | None = None,
    ) -> None:
        """Publish CommitDone for ``checkpoint``; ``counts`` (inserted, updated, deleted) come
        from the batch plan, or from the snapshot summary when republishing after a crash
        (which does not know the commit's ``path`` either)."""
        snapshot = table.snapshot_by_id(checkpoint.snapshot_id)
        assert snapshot is not None
        summary: Mapping[str, str] = (
            snapshot.summary.additional_properties if snapshot.summary else {}
        )

        def number(name: str) -> int:
            return int(summary.get(name) or 0)

        inserted, updated, deleted = counts or (
            number("added-records"),
            0,
            number("added-position-deletes"),
        )
        ordered = sorted(freshness_ms or [])
        event = CommitDone(
            table=state.name,
            commit_id=checkpoint.commit_id,
            snapshot_id=checkpoint.snapshot_id,
            writer_epoch=checkpoint.epoch,
            records=inserted + updated + deleted,
            inserted=inserted,
            updated=updated,
            deleted=deleted,
            data_files_added=number("added-data-files"),
            delete_files_added=number("added-delete-files"),
            bytes_added=number("added-files-size"),
            watermark_ms=checkpoint.watermark_ms,
            freshness_ms=int(ordered[-1]) if ordered else None,
            freshness_p50_ms=int(ordered[len(ordered) // 2]) if ordered else None,
            sequence_number=snapshot.sequence_number,
            total_records=number("total-records"),
            total_data_files=number("total-data-files"),
            total_delete_files=number("total-delete-files"),
            write_path=path.value if path is not None else None,
            offsets=tuple(
                TopicPartitionOffset(topic=topic, partition=partition, next_offset=n)
                for (topic, partition), n in sorted(checkpoint.offsets.items())
            ),
            committed_at_ms=int(snapshot.timestamp_ms),
            duration_ms=int(seconds * 1000),
        )
        control = ControlEvent(
            event_id=checkpoint.commit_id,
            table=state.name,
            produced_at_ms=int(time.time() * 1000),
            producer=self.settings.producer,
            payload=event,
        )
        self._publisher.publish(control)
        self._publisher.flush()
        self._commit_events_seen.add(checkpoint.commit_id)

    def _republish_if_missing(
        self, state: TableState, table: Table, checkpoint: Checkpoint
    ) -> None:
        if checkpoint.commit_id and checkpoint.commit_id not in self._commit_events_seen:
            log.info(
                "publishing the CommitDone a previous run did not",
                extra={"table": state.name, "commit_id": checkpoint.commit_id},
            )
            self._publish_commit(state, table, checkpoint, 0.0)

    def flush_all(self) -> None:
        """Commit every table's pending changes (used on a clean stop)."""
        self.commit_all([s for s in self.tables.values() if not self._is_paused(s)])

    def close(self) -> None:
        """Leave the consumer group and close the clients. Without the leave, the group
        keeps the stopped member until its session runs out, and the next writer gets no
        partition before that."""
        self._producer.flush(10)
        for consumer in (self._data, self._control):
            try:
                consumer.close()
            except Exception as exc:  # the broker may be the thing that is down
                log.warning("consumer close failed", extra={"error": str(exc)})

    def _update_lag(self) -> None:
        assignment = self._data.assignment()
        if not assignment:
            return
        try:
            positions = self._data.position(assignment)
        except Exception:
            return
        for tp in positions:
            try:
                _, high = self._data.get_watermark_offsets(tp, timeout=1, cached=True)
            except Exception:
                continue
            if tp.offset >= 0 and high >= 0:
                self.metrics.consumer_lag.labels(tp.topic, str(tp.partition)).set(
                    max(0, high - tp.offset)
                )

    def caught_up(self) -> bool:
        """True when nothing is pending and every assigned partition is at its end (its
        last stable offset: as far as a ``read_committed`` reader gets)."""
        if any(s.pending or s.waits for s in self.tables.values()):
            return False
        assignment = self._data.assignment()
        if not assignment:
            return False
        try:
            # One request for every partition: the consumer's own watermark queries wait
            # behind its fetches, about 0.5 s each; for 30 partitions that took 16 s.
            ends = last_stable_offsets(self._admin, assignment)
            for tp in self._data.position(assignment):
                high = ends[(tp.topic, tp.partition)]
                offset = tp.offset
                if offset < 0:  # nothing fetched since the assignment: where it started
                    state = self.tables.get(table_of(tp.topic))
                    offset = state.committed.get((tp.topic, tp.partition), 0) if state else 0
                if offset < high:
                    return False
        except KafkaException:  # leadership moving, broker restarting: not known yet
            return False
        return True


def _holds_no_rows(table: Table) -> bool:
    """No current snapshot, or one whose summary counts no records."""
    snapshot = table.current_snapshot()
    total = snapshot.summary.get("total-records") if snapshot and snapshot.summary else None
    return snapshot is None or int(total or 0) == 0


def _copy_committed(table: Table, load_id: str) -> bool:
    """Whether a snapshot of ``table`` (expired ones aside) appended the copy of ``load_id``."""
    for snapshot in table.metadata.snapshots:
        summary = snapshot.summary.additional_properties if snapshot.summary else {}
        if summary.get(BULK_LOAD_ID) == load_id:
            return True
    return False
