"""The writer loop: consume change records, hold them per table, commit batches to Iceberg.

Exactly once comes from the table, not from Kafka: every data commit records the next offset
of each partition it consumed (plus commit id, epoch and watermark) in its own snapshot
summary, and a starting writer seeks every assigned partition to the offsets of the table's
newest writer commit. Consumer-group offsets are never used. A crash before a commit loses
only uncommitted work, which is read again; a crash after it leaves offsets and rows
consistent, and the missing CommitDone is published on restart.

Each round (:meth:`Writer.step`) takes a record through its parts: the control view
(``control_view.py``), schema admission (``admission.py``), decoding (``decoding.py``) or a
diversion (``diversions.py``), bulk-load holds (``bulk.py``) and the committer
(``committer.py``). The loop owns only the tables' states, the assignment and the order.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any, Protocol

from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaError,
    KafkaException,
    Message,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient

from services.iceberg_writer.admission import Admission, Decision
from services.iceberg_writer.apply import BatchWriter
from services.iceberg_writer.batching import BatchClock
from services.iceberg_writer.changes import Change, Op, Path
from services.iceberg_writer.config import WriterSettings
from services.iceberg_writer.control_view import ControlListener
from services.iceberg_writer.decoding import DECODED
from services.iceberg_writer.metrics import WriterMetrics
from services.iceberg_writer.ownership import PartitionsMovedError
from services.iceberg_writer.state import TableState, table_of
from services.iceberg_writer.tables import DEFAULT_PROPERTIES, TableStore
from shared.avro import WireFormatError, split_header
from shared.errors import RetryableError, waiting_for_warehouse, warehouse_unavailable
from shared.kafka import GroupMembership, consume_ready, last_stable_offsets

__all__ = ["CONSUME_BATCH", "DECODED", "TAKE_WAITING_S", "Writer", "take_waiting"]

log = logging.getLogger("services.iceberg_writer")

CONSUME_BATCH = 5000  # change records taken per consume call
TAKE_WAITING_S = 2.0  # longest a due commit waits while already-fetched records are taken


class Fetched(Protocol):
    """A consumer's batch call, as :func:`take_waiting` uses it."""

    def consume(self, num_messages: int, timeout: float) -> list[Any]: ...


def take_waiting(
    consumer: Fetched, due: list[TableState], on_message: Callable[[Any, float], None]
) -> None:
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
        messages = consumer.consume(CONSUME_BATCH, 0)
        now = time.monotonic()
        for message in messages:
            on_message(message, now)
        if len(messages) < CONSUME_BATCH:
            return


# -- the parts, as the loop uses them (fakes in tests/unit/writer/test_loop.py) -----------


class Partitions(Protocol):
    """:class:`~services.iceberg_writer.data_consumer.DataConsumer`."""

    consumer: Consumer
    membership: GroupMembership

    def pause(self, partitions: list[TopicPartition]) -> None: ...

    def resume(self, partitions: list[TopicPartition]) -> None: ...

    def seek(self, partition: TopicPartition) -> None: ...

    def apply_pause(self, state: TableState) -> None: ...

    def lost(self) -> bool: ...

    def rejoin(self) -> None: ...

    def replace(self) -> None: ...

    def commit_offsets(self, offsets: dict[tuple[str, int], int]) -> None: ...


class Control(Protocol):
    """:class:`~services.iceberg_writer.control_view.ControlView`."""

    listener: ControlListener | None

    def replay(self, timeout_s: float) -> None: ...

    def poll(self, timeout: float = 0) -> None: ...

    def read_to_end(self, timeout_s: float = 10.0) -> None: ...

    def is_paused(self, state: TableState) -> bool: ...

    def close(self) -> None: ...


class Commands(Protocol):
    """:class:`~services.iceberg_writer.commands.OperatorCommands`."""

    def loaded(self, state: TableState) -> None: ...

    def is_paused(self, table: str) -> bool: ...

    def flushed(self) -> None: ...

    def revoked(self, partitions: Iterable[tuple[str, int]]) -> None: ...

    def stopped(self) -> None: ...


class Admitter(Protocol):
    """:class:`~services.iceberg_writer.admission.SchemaAdmission`."""

    def admit(self, state: TableState, schema_id: int, topic: str) -> Admission: ...

    def load(self, state: TableState) -> None: ...

    def wait(self, state: TableState, message: Message, schema_id: int, now: float) -> None: ...

    def wake_waits(self, state: TableState) -> None: ...

    def expire_waits(self, tables: Iterable[TableState], now: float) -> None: ...


class Decoder(Protocol):
    """:class:`~services.iceberg_writer.decoding.ChangeDecoder`."""

    def decode(self, state: TableState, message: Message, schema_id: int) -> Change: ...


class Diverter(Protocol):
    """:class:`~services.iceberg_writer.diversions.Diversions`."""

    def quarantine(
        self, state: TableState, message: Message, schema_id: int, reason: str
    ) -> None: ...

    def dead_letter(self, state: TableState, message: Message, exc: Exception) -> None: ...

    def flush(self, timeout: float) -> int: ...


class Holds(Protocol):
    """:class:`~services.iceberg_writer.bulk.BulkLoads`."""

    def hold(self, state: TableState) -> None: ...

    def bound_held(self, state: TableState) -> None: ...

    def commit_copies(self) -> None: ...


class Commits(Protocol):
    """:class:`~services.iceberg_writer.committer.Committer`."""

    commits: int

    def commit_all(self, states: list[TableState]) -> None: ...

    def claim(self, state: TableState, partitions: list[tuple[str, int]]) -> None: ...


class Writer:
    """The loop: the tables' states, the data consumer's assignment and each round's order.
    :func:`services.iceberg_writer.__main__.build_writer` wires the real parts; tests
    pass their own."""

    def __init__(
        self,
        settings: WriterSettings,
        *,
        tables: dict[str, TableState],
        partitions: Partitions,
        control: Control,
        commands: Commands,
        admission: Admitter,
        decoder: Decoder,
        diversions: Diverter,
        bulk: Holds,
        committer: Commits,
        admin: AdminClient,
        store: TableStore,
        batch_writer: BatchWriter,
        metrics: WriterMetrics,
        epoch: int,
    ) -> None:
        self.settings = settings
        self.tables = tables
        self.partitions = partitions
        self.control = control
        self.commands = commands
        self.admission = admission
        self.decoder = decoder
        self.diversions = diversions
        self.bulk = bulk
        self.committer = committer
        self._admin = admin
        self._store = store
        self._batch_writer = batch_writer
        self.metrics = metrics
        self.epoch = epoch
        self._last_lag = 0.0
        # Changes received since the counter was last added to, by (table, op): a record
        # adds to this dict, and the counter (a lock and two calls per increment, 4.5% of
        # the writer's samples at 10,000/s when each record incremented it) takes the sums
        # once per step.
        self._received: dict[tuple[str, Op], int] = {}
        control.listener = self

    @property
    def _data(self) -> Consumer:
        """The data consumer (replaced when it falls out of its group)."""
        return self.partitions.consumer

    @property
    def commits(self) -> int:
        """Data commits this writer made (bulk copies aside)."""
        return self.committer.commits

    # -- start ----------------------------------------------------------------------------

    def start(self, timeout_s: float = 60.0) -> None:
        """Read the control topic to its end (schema plans, published commits), then subscribe."""
        self.control.replay(timeout_s)
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
        if not self.partitions.lost():
            return
        self._drop_uncommitted()
        for state in self.tables.values():
            state.bounds = None
            state.bulk_paused = False
            state.owned.clear()
            state.claimed.clear()
        self.partitions.replace()
        self._subscribe()

    def warm_up(self) -> None:
        """Open the catalog in Spark (``TableStore.warm_up``) and run the table creation and
        write paths once on a throwaway table (``BatchWriter.warm_up``), so the first real
        table and commits do not pay for the JVM's first use of them. Best effort: a failure
        only means slower first commits."""
        try:
            # The paths of a running writer's commits: with the upsert path on, a new table's
            # first commit and every later one go without Spark SQL, and Spark's append and
            # the MERGE are fallbacks (a partial row, a replay) that pay their first use when
            # it comes. Warming those too cost 7-8 CPU s more per start (HISTORY, 2026-11-30).
            paths = [Path.UPSERT] if self.settings.upsert_path else [Path.APPEND, Path.MERGE]
            paths += [Path.INSERT] if self.settings.insert_path else []
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

        A restarted writer then reads and commits at once instead of after the warm-up (seconds to
        tens of seconds): its first commits pay for the JVM's first use of their own path, which the
        warm-up would have paid anyway. The warm-up's table is in a scratch catalog and its commits'
        summaries are per thread (``commit_properties``), so it shares nothing with the loop's
        commits but the SparkSession, which takes jobs from several threads.
        """

        def run() -> None:
            try:
                self.warm_up()
            finally:
                done()

        thread = threading.Thread(target=run, name="spark-warm-up", daemon=True)
        thread.start()
        return thread

    # -- control events (ControlListener) -------------------------------------------------

    def schema_announced(self, state: TableState) -> None:
        self.admission.wake_waits(state)

    def bulk_load_seen(self, state: TableState) -> None:
        self.bulk.hold(state)

    def pause_changed(self, state: TableState) -> None:
        self.partitions.apply_pause(state)

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
            # Held only once loaded: a state whose load failed (the object store down) would
            # pass for a table that does not exist, and its checkpoint for none.
            self.admission.load(state)
            self.tables[name] = state
            self.bulk.hold(state)
            self.commands.loaded(state)
        return state

    def _on_assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        topics: dict[str, list[TopicPartition]] = {}
        for tp in partitions:
            topics.setdefault(tp.topic, []).append(tp)
        for topic, assigned in topics.items():
            keys = [(tp.topic, tp.partition) for tp in assigned]
            try:
                state = self._state(topic)
                state.owned.update(keys)
                # Claimed before their offsets are read (ownership.py).
                self.committer.claim(state, keys)
            except Exception as exc:
                if not warehouse_unavailable(exc):
                    raise
                # Assigned all the same: its records load and claim the table when they come,
                # and what its checkpoint holds is then read past (_on_message).
                log.warning(
                    "table not loaded at assignment: the warehouse is unreachable",
                    extra={"topic": topic, "error": str(exc)[:300]},
                )
                held = self.tables.get(table_of(topic))
                if held is not None:
                    held.owned.update(keys)
                for tp in assigned:
                    tp.offset = OFFSET_BEGINNING
                continue
            for tp in assigned:
                key = (tp.topic, tp.partition)
                stored = state.committed.get(key) if key in state.claimed else None
                tp.offset = stored if stored is not None else OFFSET_BEGINNING
                state.consumed[key] = stored or 0
            state.bounds = None  # keys may have moved between partitions
        consumer.assign(partitions)
        paused = [tp for tp in partitions if self.commands.is_paused(table_of(tp.topic))]
        if paused:
            consumer.pause(paused)
        log.info("partitions assigned", extra={"count": len(partitions)})

    def _on_revoke(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        # Uncommitted work is dropped: it is read again from the table's checkpoint.
        self.commands.revoked((tp.topic, tp.partition) for tp in partitions)
        for tp in partitions:
            state = self.tables.get(table_of(tp.topic))
            if state is None:
                continue
            key = (tp.topic, tp.partition)
            state.pending = [c for c in state.pending if (c.topic, c.partition) != key]
            state.consumed.pop(key, None)
            state.waits.pop(key, None)
            state.owned.discard(key)
            state.claimed.discard(key)
            state.bounds = None
            # Its lag is its next owner's to report now: summed over instances, a stale
            # series would count it twice.
            with contextlib.suppress(KeyError):
                self.metrics.consumer_lag.remove(tp.topic, str(tp.partition))
            if not state.pending:
                state.clock.first_at = None

    # -- the loop -------------------------------------------------------------------------

    def step(self) -> None:
        """One round: control events, a poll of change records, due commits, waits, lag.

        A RetryableError (registry, broker or warehouse unreachable) leaves no half-read
        batch behind: uncommitted work is dropped and every partition is read again from the
        checkpoint. A warehouse outage counts as one here, inside the step: classified only
        by the caller, the records polled after the one that met it were skipped for good.
        """
        try:
            waiting_for_warehouse(self._step)()
        except PartitionsMovedError:
            # Another instance claimed partitions this one holds: a rebalance it has not
            # seen. Its view of the group is stale, so it rejoins (ownership.py).
            self.rewind()
            self.partitions.rejoin()
            raise
        except RetryableError:
            self.rewind()
            raise

    def rewind(self) -> None:
        """Forget uncommitted changes and seek every assigned partition to its checkpoint."""
        self._drop_uncommitted()
        for tp in self._data.assignment():
            held = self.tables.get(table_of(tp.topic))
            key = (tp.topic, tp.partition)
            # A partition not claimed yet may hold an older owner's offset: from the start,
            # and read past its checkpoint once claimed (_on_message).
            stored = held.committed.get(key) if held and key in held.claimed else None
            offset = stored if stored is not None else OFFSET_BEGINNING
            try:
                self.partitions.seek(TopicPartition(tp.topic, tp.partition, offset))
                if held is not None and not self.control.is_paused(held):
                    self.partitions.resume([tp])
            except Exception as exc:  # the broker may be the thing that is down
                log.warning("rewind seek failed", extra={"error": str(exc)})

    def _drop_uncommitted(self) -> None:
        for state in self.tables.values():
            state.pending = []
            state.consumed = {}
            state.waits = {}
            state.clock.first_at = None

    def _step(self) -> None:
        self.control.poll()
        self._resubscribe_if_lost()
        messages = consume_ready(self._data, CONSUME_BATCH, 0.2)
        now = time.monotonic()
        for message in messages:
            self._on_message(message, now)
        self.admission.expire_waits(self.tables.values(), now)
        self.bulk.commit_copies()
        due: list[TableState] = []
        for state in list(self.tables.values()):
            if state.bulk is not None:
                self.bulk.bound_held(state)
                continue
            if self.control.is_paused(state) and not state.flush:
                continue
            if state.clock.should_close(now, len(state.pending), state.flush):
                due.append(state)
        if any(not state.control_synced for state in due):
            # A BulkLoad PLANNED is published before the table's first change exists, so
            # once the control topic is read to its end, a table's first commit cannot
            # come before the hold it should wait for.
            self.control.read_to_end()
            for state in due:
                state.control_synced = True
            # A PAUSE read just now holds too: once answered, no commit may follow it.
            due = [
                state
                for state in due
                if state.bulk is None and (state.flush or not self.control.is_paused(state))
            ]
        if due:
            take_waiting(self._data, due, self._on_message)
        self._count_received()
        self.committer.commit_all(due)
        if due:
            self._commit_group_offsets(due)
        self.commands.flushed()
        if now - self._last_lag > 5:
            self._update_lag()
            self._last_lag = now

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
        if tp not in state.claimed and state.table is not None:
            state.owned.add(tp)
            self.committer.claim(state, [tp])  # then read past what its checkpoint holds
        checkpoint = state.committed.get(tp)
        if checkpoint is not None and offset < checkpoint:
            # In the table already: the partition was assigned or rewound before the table's
            # checkpoint was known (its load failed). Read on from the checkpoint.
            if state.consumed.get(tp) != checkpoint:
                self.partitions.seek(TopicPartition(topic, partition, checkpoint))
                state.consumed[tp] = checkpoint
            return
        value = message.value()
        if value is None:
            state.consumed[tp] = offset + 1
            return
        try:
            schema_id, _ = split_header(value)
        except WireFormatError as exc:
            self.diversions.dead_letter(state, message, exc)
            return
        admission = self.admission.admit(state, schema_id, topic)
        if admission.decision is Decision.WAIT:
            self.admission.wait(state, message, schema_id, now)
            return
        if admission.decision is Decision.QUARANTINE:
            self.diversions.quarantine(state, message, schema_id, admission.reason)
            state.consumed[tp] = offset + 1
            return
        try:
            change = self.decoder.decode(state, message, schema_id)
        except (WireFormatError, KeyError, ValueError, TypeError) as exc:
            self.diversions.dead_letter(state, message, exc)
            return
        state.pending.append(change)
        state.consumed[tp] = offset + 1
        state.clock.added(now)
        received = (state.name, change.op)
        self._received[received] = self._received.get(received, 0) + 1

    def _count_received(self) -> None:
        """Add the changes received since the last call to ``changes_received``."""
        for (table, op), count in self._received.items():
            self.metrics.changes_received.labels(table, op.value).inc(count)
        self._received.clear()

    def _commit_group_offsets(self, states: list[TableState]) -> None:
        """Tell the consumer group how far the tables hold the changes of these tables'
        partitions. The writer never reads these offsets back (a table's own checkpoint
        says where to resume); they make the group's lag true for ``kafka-consumer-groups``
        and for an autoscaler watching it (KEDA, ``deploy/k8s``)."""
        offsets = {
            tp: state.committed[tp]
            for state in states
            for tp in state.claimed
            if tp in state.committed
        }
        if offsets:
            self.partitions.commit_offsets(offsets)

    # -- stop and progress ----------------------------------------------------------------

    def flush_all(self) -> None:
        """Commit the pending changes of every table not paused, or with a FLUSH waiting
        (used on a clean stop)."""
        self.committer.commit_all(
            [s for s in self.tables.values() if s.flush or not self.control.is_paused(s)]
        )
        self.commands.flushed()

    def close(self) -> None:
        """Leave the consumer group and close the clients. Without the leave, the group
        keeps the stopped member until its session runs out, and the next writer gets no
        partition before that."""
        self.commands.stopped()
        self.diversions.flush(10)
        for consumer in (self._data, self.control):
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
            # behind its fetches, one by one (HISTORY: 30 partitions).
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
