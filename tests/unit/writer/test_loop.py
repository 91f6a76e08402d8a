"""The writer loop with in-memory parts: a change record in, admission, decoding or a
diversion, and the commit of a due batch, in one step of milliseconds."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import pytest
from commands_support import command_event, operator_commands
from confluent_kafka import OFFSET_BEGINNING, KafkaError, TopicPartition
from prometheus_client import CollectorRegistry

from services.iceberg_writer.admission import WAIT, WRITE, Admission
from services.iceberg_writer.changes import Change, Op
from services.iceberg_writer.commands import OperatorCommands
from services.iceberg_writer.config import WriterSettings
from services.iceberg_writer.metrics import WriterMetrics
from services.iceberg_writer.ownership import PartitionsMovedError
from services.iceberg_writer.state import TableState
from services.iceberg_writer.writer import Writer
from shared.avro import encode
from shared.errors import RetryableError
from shared.events import OperatorCommandKind, OperatorCommandStatus
from shared.kafka import GroupMembership

pytestmark = pytest.mark.unit

TOPIC = "icefjord.changes.shop.orders"
TABLE = "shop.orders"


def record(schema_id: int) -> bytes:
    """A change record's bytes in the wire format (only the header is read here)."""
    return encode(schema_id, {"type": "record", "name": "R", "fields": []}, {})


class FakeError:
    def __init__(self, code: int) -> None:
        self._code = code

    def code(self) -> int:
        return self._code


class FakeMessage:
    def __init__(
        self, offset: int, value: bytes | None, partition: int = 0, error: Any = None
    ) -> None:
        self._offset = offset
        self._value = value
        self._partition = partition
        self._error = error

    def error(self) -> Any:
        return self._error

    def topic(self) -> str:
        return TOPIC

    def partition(self) -> int:
        return self._partition

    def offset(self) -> int:
        return self._offset

    def value(self) -> bytes | None:
        return self._value

    def key(self) -> bytes:
        return b"k"

    def headers(self) -> list[tuple[str, bytes]]:
        return []


class FakeConsumer:
    """Hands out ``waiting`` once; nothing is assigned, so lag and seeks are no-ops."""

    def __init__(self) -> None:
        self.waiting: list[FakeMessage] = []

    def consume(self, num_messages: int, timeout: float) -> list[FakeMessage]:
        taken, self.waiting = self.waiting[:num_messages], self.waiting[num_messages:]
        return taken

    def assignment(self) -> list[Any]:
        return []


class FakePartitions:
    def __init__(self) -> None:
        self.consumer = FakeConsumer()
        self.membership = GroupMembership()
        self.paused: list[Any] = []
        self.rejoins = 0
        self.group_offsets: dict[tuple[str, int], int] = {}

    def pause(self, partitions: list[Any]) -> None:
        self.paused.extend(partitions)

    def resume(self, partitions: list[Any]) -> None: ...

    def seek(self, partition: Any) -> None: ...

    def apply_pause(self, state: TableState) -> None: ...

    def lost(self) -> bool:
        return False

    def rejoin(self) -> None:
        self.rejoins += 1

    def replace(self) -> None: ...

    def commit_offsets(self, offsets: dict[tuple[str, int], int]) -> None:
        self.group_offsets.update(offsets)


class FakeControl:
    """Commands reach the real OperatorCommands through :meth:`say`, as the view hands them
    on; ``on_read_to_end`` stands for events that arrive while the topic is read to its end."""

    def __init__(self, commands: OperatorCommands) -> None:
        self.listener: Any = None
        self.reads_to_end = 0
        self.commands = commands
        self.on_read_to_end: list[Any] = []

    def replay(self, timeout_s: float) -> None: ...

    def poll(self, timeout: float = 0) -> None: ...

    def read_to_end(self, timeout_s: float = 10.0) -> None:
        self.reads_to_end += 1
        for event in self.on_read_to_end:
            self.say(event)
        self.on_read_to_end = []

    def say(self, event: Any) -> None:
        self.commands.received(event, event.payload, self.listener.pause_changed)

    def is_paused(self, state: TableState) -> bool:
        return self.commands.is_paused(state.name)

    def close(self) -> None: ...


class FakeAdmission:
    """Admits by schema id from ``verdicts`` (WRITE for the others)."""

    def __init__(self, verdicts: dict[int, Admission]) -> None:
        self.verdicts = verdicts
        self.waits: list[tuple[int, int]] = []  # offset, schema id

    def admit(self, state: TableState, schema_id: int, topic: str) -> Admission:
        return self.verdicts.get(schema_id, WRITE)

    def load(self, state: TableState) -> None: ...

    def wait(self, state: TableState, message: Any, schema_id: int, now: float) -> None:
        state.waits[(message.topic(), message.partition())] = (message.offset(), schema_id, now)
        self.waits.append((message.offset(), schema_id))

    def wake_waits(self, state: TableState) -> None: ...

    def expire_waits(self, tables: Iterable[TableState], now: float) -> None: ...


class FakeDecoder:
    """Decodes every record to an insert of key = offset; ``broken`` offsets raise."""

    def __init__(self, broken: Iterable[int] = ()) -> None:
        self.broken = set(broken)

    def decode(self, state: TableState, message: Any, schema_id: int) -> Change:
        if message.offset() in self.broken:
            raise ValueError("decimal out of range")
        return Change(
            TABLE,
            Op.CREATE,
            f"{message.offset():020d}",
            1_700_000_000_000,
            (message.offset(),),
            {"id": message.offset()},
            message.topic(),
            message.partition(),
            message.offset(),
            schema_id,
        )


class FakeDiversions:
    def __init__(self) -> None:
        self.quarantined: list[tuple[int, str]] = []  # offset, reason
        self.dead: list[tuple[int, str]] = []  # offset, error class

    def quarantine(self, state: TableState, message: Any, schema_id: int, reason: str) -> None:
        self.quarantined.append((message.offset(), reason))

    def dead_letter(self, state: TableState, message: Any, exc: Exception) -> None:
        self.dead.append((message.offset(), type(exc).__name__))
        state.consumed[(message.topic(), message.partition())] = message.offset() + 1

    def flush(self, timeout: float) -> int:
        return 0


class FakeBulk:
    def hold(self, state: TableState) -> None: ...

    def bound_held(self, state: TableState) -> None: ...

    def commit_copies(self) -> None: ...


class FakeCommitter:
    """Records each commit's table, keys and offsets, as the real one would store them."""

    def __init__(self) -> None:
        self.commits = 0
        self.done: list[tuple[str, list[Any], dict[tuple[str, int], int]]] = []
        self.moved: list[int] = []  # partitions another instance claimed, said at next commit

    def claim(self, state: TableState, partitions: list[tuple[str, int]]) -> None:
        state.claimed.update(partitions)

    def commit_all(self, states: list[TableState]) -> None:
        for state in states:
            if not state.pending:
                continue
            if self.moved:
                moved, self.moved = self.moved, []
                raise PartitionsMovedError(f"partitions {moved} of {state.name} moved")
            offsets = {**state.committed, **state.consumed}
            self.done.append((state.name, [c.key[0] for c in state.pending], offsets))
            state.committed = offsets
            state.claimed.update(offsets)
            state.pending = []
            self.commits += 1


class Loop:
    """A writer whose parts are the fakes above; batches close at ``max_records``."""

    def __init__(
        self,
        verdicts: dict[int, Admission] | None = None,
        broken: Iterable[int] = (),
        max_records: int = 3,
    ) -> None:
        self.partitions = FakePartitions()
        tables: dict[str, TableState] = {}
        metrics = WriterMetrics.create(CollectorRegistry())
        self.commands, self.published = operator_commands(tables, metrics=metrics)
        self.control = FakeControl(self.commands)
        self.admission = FakeAdmission(verdicts or {})
        self.diversions = FakeDiversions()
        self.committer = FakeCommitter()
        settings = WriterSettings(max_batch_records=max_records, freshness_target_s=3600)
        self.writer = Writer(
            settings,
            tables=tables,
            partitions=self.partitions,  # type: ignore[arg-type]
            control=self.control,
            commands=self.commands,
            admission=self.admission,
            decoder=FakeDecoder(broken),
            diversions=self.diversions,  # type: ignore[arg-type]
            bulk=FakeBulk(),
            committer=self.committer,
            admin=None,  # type: ignore[arg-type]
            store=None,  # type: ignore[arg-type]
            batch_writer=None,  # type: ignore[arg-type]
            metrics=metrics,
            epoch=1,
        )

    def step(self, *messages: FakeMessage) -> None:
        self.partitions.consumer.waiting.extend(messages)
        self.writer.step()

    @property
    def state(self) -> TableState:
        return self.writer.tables[TABLE]


def test_admitted_records_commit_once_the_batch_is_full() -> None:
    loop = Loop(max_records=3)
    loop.step(FakeMessage(0, record(1)), FakeMessage(1, record(1)))
    assert loop.committer.done == []
    assert [c.key[0] for c in loop.state.pending] == [0, 1]
    loop.step(FakeMessage(2, record(1)))
    assert loop.committer.done == [(TABLE, [0, 1, 2], {(TOPIC, 0): 3})]
    assert loop.control.reads_to_end == 1, "a table's first commit reads the control topic"
    assert loop.state.pending == []


def test_rows_of_a_version_without_a_plan_wait_and_are_not_consumed() -> None:
    loop = Loop(verdicts={2: WAIT})
    loop.step(FakeMessage(0, record(1)), FakeMessage(1, record(2)), FakeMessage(2, record(1)))
    assert loop.admission.waits == [(1, 2)]
    # The record after the waiting one was fetched before the pause took effect.
    assert [c.key[0] for c in loop.state.pending] == [0]
    assert loop.state.consumed[(TOPIC, 0)] == 1


def test_quarantined_rows_are_diverted_with_their_reason_and_read_past() -> None:
    loop = Loop(verdicts={2: Admission.quarantine("schema version 2 quarantined: drop")})
    loop.step(FakeMessage(0, record(2)), FakeMessage(1, record(1)))
    assert loop.diversions.quarantined == [(0, "schema version 2 quarantined: drop")]
    assert [c.key[0] for c in loop.state.pending] == [1]
    assert loop.state.consumed[(TOPIC, 0)] == 2


def test_records_that_never_decode_go_to_the_dead_letter_topic() -> None:
    loop = Loop(broken=[1])
    loop.step(FakeMessage(0, record(1)), FakeMessage(1, record(1)), FakeMessage(2, b"\x07"))
    assert loop.diversions.dead == [(1, "ValueError"), (2, "WireFormatError")]
    assert [c.key[0] for c in loop.state.pending] == [0]
    assert loop.state.consumed[(TOPIC, 0)] == 3


def test_a_tombstone_only_moves_the_offset() -> None:
    loop = Loop()
    loop.step(FakeMessage(0, None))
    assert loop.state.pending == [] and loop.state.consumed[(TOPIC, 0)] == 1


def test_a_read_error_drops_uncommitted_work_and_is_retryable() -> None:
    loop = Loop()
    broken = FakeMessage(1, None, error=FakeError(KafkaError._TRANSPORT))
    with pytest.raises(RetryableError):
        loop.step(FakeMessage(0, record(1)), broken)
    assert loop.state.pending == [] and loop.state.consumed == {}
    assert loop.committer.done == []


class OutageAdmission(FakeAdmission):
    """Admission whose table evolution meets an unreachable object store (pyarrow's
    file systems raise OSError) for rows of schema id 2."""

    def admit(self, state: TableState, schema_id: int, topic: str) -> Admission:
        if schema_id == 2:
            raise OSError("When reading information for key 'warehouse/...': curlCode: 7")
        return super().admit(state, schema_id, topic)


def test_a_warehouse_outage_mid_batch_rewinds_instead_of_skipping_the_records_after_it() -> None:
    loop = Loop(max_records=10)
    loop.writer.admission = OutageAdmission({})
    seeks: list[Any] = []
    loop.partitions.seek = seeks.append  # type: ignore[method-assign]
    loop.partitions.consumer.assignment = lambda: [  # type: ignore[method-assign]
        TopicPartition(TOPIC, 0)
    ]
    with pytest.raises(RetryableError, match="warehouse unavailable"):
        loop.step(FakeMessage(0, record(1)), FakeMessage(1, record(2)), FakeMessage(2, record(1)))
    # Nothing of the batch stays half-read: the partition goes back to its checkpoint (none
    # yet: the beginning), so record 1 and the one after it are read again.
    assert loop.state.pending == [] and loop.state.consumed == {}
    assert [(tp.topic, tp.partition, tp.offset) for tp in seeks] == [(TOPIC, 0, OFFSET_BEGINNING)]


class FlakyLoadAdmission(FakeAdmission):
    """The table's first load meets the object store down; the next finds its checkpoint at
    offset 5."""

    def __init__(self) -> None:
        super().__init__({})
        self.failures = 1

    def load(self, state: TableState) -> None:
        if self.failures:
            self.failures -= 1
            raise OSError("When getting information for key 'warehouse/...': curlCode: 7")
        state.committed = {(TOPIC, 0): 5}


def test_a_table_whose_load_failed_is_loaded_again_and_read_on_from_its_checkpoint() -> None:
    loop = Loop(max_records=10)
    loop.writer.admission = FlakyLoadAdmission()
    seeks: list[Any] = []
    loop.partitions.seek = seeks.append  # type: ignore[method-assign]
    with pytest.raises(RetryableError, match="warehouse unavailable"):
        loop.step(FakeMessage(0, record(1)))
    assert TABLE not in loop.writer.tables, "a table whose load failed passed for loaded"
    # The partition was read from the beginning meanwhile: what the checkpoint holds is
    # skipped, with one seek to it.
    loop.step(*(FakeMessage(offset, record(1)) for offset in range(7)))
    assert [c.key[0] for c in loop.state.pending] == [5, 6]
    assert [(tp.topic, tp.partition, tp.offset) for tp in seeks] == [(TOPIC, 0, 5)]
    assert loop.state.consumed[(TOPIC, 0)] == 7


class Assigning:
    """What a rebalance hands the writer's assignment callback, and what it assigns."""

    def __init__(self) -> None:
        self.assigned: list[tuple[str, int, int]] = []

    def assign(self, partitions: list[TopicPartition]) -> None:
        self.assigned = [(tp.topic, tp.partition, tp.offset) for tp in partitions]

    def pause(self, partitions: list[TopicPartition]) -> None: ...


def test_an_assignment_while_the_store_is_down_is_taken_and_its_table_loaded_later() -> None:
    loop = Loop(max_records=10)
    loop.writer.admission = FlakyLoadAdmission()
    consumer = Assigning()
    loop.writer._on_assign(consumer, [TopicPartition(TOPIC, 0)])  # type: ignore[arg-type]
    assert consumer.assigned == [(TOPIC, 0, OFFSET_BEGINNING)]
    assert TABLE not in loop.writer.tables
    loop.step(*(FakeMessage(offset, record(1)) for offset in range(7)))
    assert [c.key[0] for c in loop.state.pending] == [5, 6]


def test_a_paused_table_commits_nothing_until_flushed_and_the_flush_is_answered_after() -> None:
    loop = Loop(max_records=2)
    loop.step(FakeMessage(0, record(1)))
    pause = command_event(OperatorCommandKind.PAUSE, TABLE)
    loop.control.say(pause)
    loop.step(FakeMessage(1, record(1)), FakeMessage(2, record(1)))
    assert loop.committer.done == []
    flush = command_event(OperatorCommandKind.FLUSH, TABLE, at_ms=2_000)
    loop.control.say(flush)
    assert [r.command for r in loop.published.results] == [OperatorCommandKind.PAUSE]
    loop.step()
    assert loop.committer.done == [(TABLE, [0, 1, 2], {(TOPIC, 0): 3})]
    answer = loop.published.results[-1]
    assert (answer.command_event_id, answer.status, answer.records) == (
        flush.event_id,
        OperatorCommandStatus.APPLIED,
        3,
    )
    # The flush was one-shot: the table is paused again.
    loop.step(FakeMessage(3, record(1)), FakeMessage(4, record(1)))
    assert len(loop.committer.done) == 1 and not loop.state.flush


def test_a_pause_read_while_due_tables_wait_for_the_control_topic_holds_their_commit() -> None:
    loop = Loop(max_records=2)
    loop.control.on_read_to_end = [command_event(OperatorCommandKind.PAUSE, TABLE)]
    loop.step(FakeMessage(0, record(1)), FakeMessage(1, record(1)))
    assert loop.control.reads_to_end == 1
    assert loop.committer.done == [], "a commit followed the answered pause"
    assert loop.published.results[0].status is OperatorCommandStatus.APPLIED
    loop.control.say(command_event(OperatorCommandKind.RESUME, TABLE, at_ms=2_000))
    loop.step()
    assert loop.committer.done == [(TABLE, [0, 1], {(TOPIC, 0): 2})]


def test_a_flush_outlives_a_rewind_and_is_answered_once_the_changes_are_read_and_committed() -> (
    None
):
    loop = Loop(max_records=10)
    loop.step(FakeMessage(0, record(1)), FakeMessage(1, record(1)))
    flush = command_event(OperatorCommandKind.FLUSH, TABLE)
    loop.control.say(flush)
    broken = FakeMessage(2, None, error=FakeError(KafkaError._TRANSPORT))
    with pytest.raises(RetryableError):
        loop.step(broken)  # the held changes are dropped, to be read again
    assert loop.published.results == [] and loop.state.flush
    loop.step(FakeMessage(0, record(1)), FakeMessage(1, record(1)))
    assert loop.committer.done == [(TABLE, [0, 1], {(TOPIC, 0): 2})]
    assert [(r.command_event_id, r.records) for r in loop.published.results] == [
        (flush.event_id, 2)
    ]


def test_a_table_paused_before_it_appears_is_paused_from_its_first_record() -> None:
    loop = Loop(max_records=2)
    loop.control.say(command_event(OperatorCommandKind.PAUSE, TABLE))
    assert loop.published.results[0].status is OperatorCommandStatus.NOT_LOADED
    loop.step(FakeMessage(0, record(1)), FakeMessage(1, record(1)), FakeMessage(2, record(1)))
    assert loop.committer.done == []
    assert paused_gauge(loop.writer.metrics) == 1


def test_a_clean_stop_commits_a_flushed_paused_table_and_fails_what_it_could_not() -> None:
    loop = Loop(max_records=10)
    loop.step(FakeMessage(0, record(1)))
    loop.control.say(command_event(OperatorCommandKind.PAUSE, TABLE))
    loop.control.say(command_event(OperatorCommandKind.FLUSH, TABLE, at_ms=2_000))
    loop.writer.flush_all()
    assert loop.committer.done == [(TABLE, [0], {(TOPIC, 0): 1})]
    assert loop.published.results[-1].status is OperatorCommandStatus.APPLIED
    loop.step(FakeMessage(1, record(1)))  # fetched before the pause took effect
    loop.control.say(command_event(OperatorCommandKind.FLUSH, TABLE, at_ms=3_000))
    loop.committer.commit_all = lambda states: None  # type: ignore[method-assign]
    loop.writer.flush_all()
    loop.writer.close()
    assert loop.published.results[-1].status is OperatorCommandStatus.FAILED


def paused_gauge(metrics: WriterMetrics) -> float:
    (metric,) = metrics.paused_tables.collect()
    return float(metric.samples[0].value)


def test_a_partition_another_instance_claimed_drops_the_batch_and_rejoins_the_group() -> None:
    loop = Loop(max_records=2)
    loop.step(FakeMessage(0, record(1)), FakeMessage(1, record(1)))
    assert loop.committer.done and loop.partitions.group_offsets == {(TOPIC, 0): 2}
    seeks: list[Any] = []
    loop.partitions.seek = seeks.append  # type: ignore[method-assign]
    loop.writer._data.assignment = lambda: [TopicPartition(TOPIC, 0)]  # type: ignore[method-assign]
    loop.committer.moved = [0]
    with pytest.raises(PartitionsMovedError):
        loop.step(FakeMessage(2, record(1)), FakeMessage(3, record(1)))
    # Nothing of it committed; the partition is read again from the table's checkpoint once
    # the group says whose it is, and the stale member rejoins.
    assert len(loop.committer.done) == 1 and loop.state.pending == []
    assert [(tp.topic, tp.partition, tp.offset) for tp in seeks] == [(TOPIC, 0, 2)]
    assert loop.partitions.rejoins == 1


def test_a_revoked_partition_leaves_its_lag_to_its_next_owner() -> None:
    loop = Loop(max_records=10)
    loop.step(FakeMessage(0, record(1)))
    lag = loop.writer.metrics.consumer_lag
    lag.labels(TOPIC, "0").set(40)
    loop.writer._on_revoke(None, [TopicPartition(TOPIC, 0)])  # type: ignore[arg-type]
    assert loop.state.pending == [] and (TOPIC, 0) not in loop.state.owned
    samples = [s for m in lag.collect() for s in m.samples]
    assert samples == [], "summed over instances, a stale series counts the lag twice"
