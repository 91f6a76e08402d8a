"""shared.control_state: the checkpointed fold of the control topic, and the folds of the
writer and the schema-watcher (what they keep, and that folding it again gives the same state)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
from confluent_kafka import KafkaError
from hypothesis import given
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry

from services.iceberg_writer.commands import OperatorCommands
from services.iceberg_writer.control_view import ControlView, PublishedCommits
from services.iceberg_writer.metrics import WriterMetrics
from services.schema_watcher.watcher import WatcherFold, recover_state
from shared.control_state import Checkpoint, Checkpoints, Origin, Retained, replay_control
from shared.errors import RetryableError
from shared.events import (
    BulkLoad,
    BulkLoadStatus,
    CommitDone,
    ControlEvent,
    OperatorCommand,
    OperatorCommandKind,
    SchemaChange,
    Verdict,
)

pytestmark = pytest.mark.unit

TOPIC = "control"


class FakeMessage:
    def __init__(self, partition: int, offset: int, value: Any, eof: bool = False) -> None:
        self._partition, self._offset, self._value, self._eof = partition, offset, value, eof

    def error(self) -> Any:
        return KafkaError(KafkaError._PARTITION_EOF) if self._eof else None

    def partition(self) -> int:
        return self._partition

    def offset(self) -> int:
        return self._offset

    def value(self) -> Any:
        return self._value


class FakeConsumer:
    """A control topic of two partitions with the given messages; partition 0's first
    ``low`` offsets have expired."""

    def __init__(self, log: dict[int, list[Any]], low: int = 0) -> None:
        self.log = log
        self.low = low
        self.assigned: list[tuple[int, int]] = []
        self._next: dict[int, int] = {}

    def list_topics(self, topic: str, timeout: float) -> Any:
        partitions = SimpleNamespace(error=None, partitions=dict.fromkeys(self.log))
        return SimpleNamespace(topics={topic: partitions})

    def get_watermark_offsets(self, tp: Any, timeout: float, cached: bool) -> tuple[int, int]:
        low = self.low if tp.partition == 0 else 0
        return (min(low, len(self.log[tp.partition])), len(self.log[tp.partition]))

    def assign(self, partitions: list[Any]) -> None:
        self.assigned = [(tp.partition, tp.offset) for tp in partitions]
        self._next = dict(self.assigned)

    def consume(self, count: int, timeout: float) -> list[FakeMessage]:
        batch = []
        for p, offset in self._next.items():
            if offset < len(self.log[p]):
                batch.append(FakeMessage(p, offset, self.log[p][offset]))
                self._next[p] = offset + 1
        return batch

    def position(self, partitions: list[Any]) -> list[Any]:
        return [
            SimpleNamespace(partition=tp.partition, offset=self._next[tp.partition])
            for tp in partitions
        ]


class FakeReader:
    """Values are the events themselves (or None for one that cannot be read)."""

    topic = TOPIC

    def decode_value(self, value: Any, partition: int, offset: int) -> ControlEvent | None:
        return value if isinstance(value, ControlEvent) else None


class FakeStore:
    def __init__(self, checkpoint: Checkpoint | None = None) -> None:
        self.checkpoint = checkpoint
        self.saved: list[Checkpoint] = []

    def load(self) -> Checkpoint | None:
        return self.checkpoint

    def save(self, checkpoint: Checkpoint) -> bool:
        self.saved.append(checkpoint)
        self.checkpoint = checkpoint
        return True


class RecordingFold:
    """Keeps every event, so the checkpoint holds them all."""

    def __init__(self) -> None:
        self.retained = Retained()
        self.seen: list[tuple[str, bool]] = []

    def apply(self, event: ControlEvent, origin: Origin | None, replay: bool) -> None:
        self.seen.append((event.event_id, replay))
        self.retained.keep(event.event_id, origin)


def commit(table: str, n: int) -> ControlEvent:
    done = CommitDone(
        table=table,
        commit_id=f"{table}-{n}",
        snapshot_id=n,
        writer_epoch=1,
        records=1,
        inserted=1,
        updated=0,
        deleted=0,
        data_files_added=1,
        delete_files_added=0,
        bytes_added=100,
        committed_at_ms=n,
        duration_ms=1,
    )
    return ControlEvent(
        event_id=f"{table}-{n}", table=table, produced_at_ms=n, producer="test", payload=done
    )


def replay(consumer: FakeConsumer, fold: Any, store: FakeStore | None, **kwargs: Any) -> Any:
    return replay_control(consumer, FakeReader(), fold, store=store, timeout_s=5, **kwargs)  # type: ignore[arg-type]


# --- replay_control -----------------------------------------------------------------------


def test_without_a_checkpoint_the_topic_is_folded_from_its_low_watermark_to_its_end() -> None:
    consumer = FakeConsumer({0: [commit("a.t", n) for n in range(5)], 1: []}, low=3)
    fold, store = RecordingFold(), FakeStore()
    done = replay(consumer, fold, store)
    assert consumer.assigned == [(0, 3), (1, 0)]
    assert fold.seen == [("a.t-3", True), ("a.t-4", True)]
    assert done.positions == {0: 5, 1: 0}
    assert [c.offsets for c in store.saved] == [{0: 5, 1: 0}]
    assert [o.offset for o in store.saved[0].events] == [3, 4]


def test_a_start_folds_the_checkpoint_and_only_the_events_after_it() -> None:
    events = [commit("a.t", n) for n in range(6)]
    consumer = FakeConsumer({0: events, 1: [None]})
    first = FakeStore()
    replay(FakeConsumer({0: events[:4], 1: [None]}), RecordingFold(), first)
    fold = RecordingFold()
    done = replay(consumer, fold, first)
    assert consumer.assigned == [(0, 4), (1, 1)]
    assert [event_id for event_id, _ in fold.seen] == [f"a.t-{n}" for n in range(6)]
    assert (done.from_checkpoint, done.from_topic) == (4, 2)
    assert first.saved[-1].offsets == {0: 6, 1: 1}


def test_nothing_new_after_the_checkpoint_saves_nothing() -> None:
    consumer = FakeConsumer({0: [commit("a.t", 0)], 1: []})
    store = FakeStore(Checkpoint({0: 1, 1: 0}, [Origin(0, 0, commit("a.t", 0))]))  # type: ignore[arg-type]
    replay(consumer, RecordingFold(), store)
    assert store.saved == []


def test_a_checkpoint_ahead_of_the_topic_is_ignored() -> None:
    consumer = FakeConsumer({0: [commit("a.t", 0)], 1: []})
    store = FakeStore(Checkpoint({0: 9, 1: 0}, [Origin(0, 8, commit("z.t", 8))]))  # type: ignore[arg-type]
    fold = RecordingFold()
    replay(consumer, fold, store)
    assert consumer.assigned == [(0, 0), (1, 0)]
    assert fold.seen == [("a.t-0", True)]


def test_undecodable_events_are_skipped_and_the_replay_ends_at_the_end() -> None:
    consumer = FakeConsumer({0: [None, b"junk", commit("a.t", 2)], 1: []})
    fold = RecordingFold()
    replay(consumer, fold, FakeStore())
    assert fold.seen == [("a.t-2", True)]


def test_long_replays_save_checkpoints_on_the_way() -> None:
    consumer = FakeConsumer({0: [commit("a.t", n) for n in range(10)], 1: []})
    store = FakeStore()
    replay(consumer, RecordingFold(), store, checkpoint_every=3)
    assert [c.offsets[0] for c in store.saved] == [3, 6, 9, 10]


def test_a_replay_that_does_not_finish_in_time_gives_up_retryably() -> None:
    ticks = iter(float(t) for t in range(100))

    class Stuck(FakeConsumer):
        def consume(self, count: int, timeout: float) -> list[FakeMessage]:
            return []

    consumer = Stuck({0: [commit("a.t", 0)], 1: []})
    with pytest.raises(RetryableError, match="did not finish"):
        replay_control(
            consumer,  # type: ignore[arg-type]
            FakeReader(),  # type: ignore[arg-type]
            RecordingFold(),
            store=None,
            timeout_s=3,
            clock=lambda: next(ticks),
        )


def test_a_position_past_the_end_never_reaches_the_checkpoint() -> None:
    class PastTheEnd(FakeConsumer):
        """librdkafka after an end-of-partition notice: the position one past the end."""

        def position(self, partitions: list[Any]) -> list[Any]:
            ends = {p: len(messages) for p, messages in self.log.items()}
            return [
                SimpleNamespace(partition=tp.partition, offset=n + (n == ends[tp.partition]))
                for tp in partitions
                for n in [self._next[tp.partition]]
            ]

    store = FakeStore()
    done = replay(
        PastTheEnd({0: [commit("a.t", 0), commit("a.t", 1)], 1: []}), RecordingFold(), store
    )
    assert done.positions == {0: 2, 1: 0}
    assert store.saved[-1].offsets == {0: 2, 1: 0}


def test_partition_eof_is_not_an_error() -> None:
    class WithEof(FakeConsumer):
        def consume(self, count: int, timeout: float) -> list[FakeMessage]:
            return [FakeMessage(1, 0, None, eof=True), *super().consume(count, timeout)]

    fold = RecordingFold()
    replay(WithEof({0: [commit("a.t", 0)], 1: []}), fold, None)
    assert fold.seen == [("a.t-0", True)]


# --- Retained and Checkpoints ---------------------------------------------------------------


def test_retained_keeps_the_newest_per_key_in_the_order_kept_each_event_once() -> None:
    retained = Retained()
    retained.keep("x", Origin(0, 1, b"1"))
    retained.keep("y", Origin(2, 0, b"2"))
    retained.keep("x", Origin(0, 5, b"3"))
    retained.keep("z", Origin(0, 5, b"3"))  # one event kept under two keys
    retained.keep("w", None)
    assert [(o.partition, o.offset) for o in retained.events()] == [(2, 0), (0, 5)]
    assert len(retained) == 3


def test_checkpoints_are_due_after_so_many_events_or_so_long() -> None:
    now = [0.0]
    store = FakeStore()
    checkpoints = Checkpoints(store, every=10, interval_s=60, clock=lambda: now[0])  # type: ignore[arg-type]
    assert not checkpoints.due()
    checkpoints.read(9)
    assert not checkpoints.due()
    checkpoints.read(1)
    assert checkpoints.due()
    checkpoints.save({0: 10}, RecordingFold())
    assert not checkpoints.due()
    checkpoints.read(1)
    now[0] = 59.0
    assert not checkpoints.due()
    now[0] = 61.0
    assert checkpoints.due()
    assert not Checkpoints(None).due()


def test_published_commits_are_bounded_per_table() -> None:
    published = PublishedCommits(per_table=3)
    for n in range(10):
        published.add("a.t", f"c{n}")
    published.add("b.t", "c9")
    assert [published.has("a.t", f"c{n}") for n in (6, 7, 9)] == [False, True, True]
    assert published.has("b.t", "c9") and not published.has("b.t", "c8")
    assert len(published) == 4


# --- the writer's and the watcher's folds ---------------------------------------------------


def writer_view() -> ControlView:
    metrics = WriterMetrics.create(CollectorRegistry())
    commands = OperatorCommands({}, None, producer="test", covers=lambda t: True, metrics=metrics)  # type: ignore[arg-type]
    return ControlView(None, None, None, TOPIC, {}, metrics, commands)  # type: ignore[arg-type]


def plan(table: str, version: int) -> ControlEvent:
    change = SchemaChange(
        table=table,
        subject=f"icefjord.changes.{table}-value",
        from_version=None,
        to_version=version,
        to_schema_id=100 + version,
        verdict=Verdict.APPLY,
    )
    return ControlEvent.new(table, change, producer="test")


def operator(table: str, kind: OperatorCommandKind, at_ms: int) -> ControlEvent:
    command = OperatorCommand(command=kind, table=table, requested_by="test")
    return ControlEvent(
        event_id=f"{table}-{kind.value}-{at_ms}",
        table=table,
        produced_at_ms=at_ms,
        producer="operator:test",
        payload=command,
    )


def bulk(table: str, n: int) -> ControlEvent:
    load = BulkLoad(
        load_id=f"load-{n}", table=table, status=BulkLoadStatus.PLANNED, requested_by="test"
    )
    return ControlEvent.new(table, load, producer="test")


TABLES = ["inv.a", "inv.b", "inv.c"]
KINDS = [OperatorCommandKind.PAUSE, OperatorCommandKind.RESUME, OperatorCommandKind.FLUSH]


@st.composite
def writer_logs(draw: st.DrawFn) -> list[ControlEvent]:
    """Plans, commits, bulk loads and commands for a few tables (and "*"), in log order."""
    log: list[ControlEvent] = []
    for n in range(draw(st.integers(1, 40))):
        table = draw(st.sampled_from(TABLES))
        kind = draw(st.sampled_from(["plan", "commit", "bulk", "command", "all"]))
        if kind == "plan":
            log.append(plan(table, draw(st.integers(1, 4))))
        elif kind == "commit":
            log.append(commit(table, n))
        elif kind == "bulk":
            log.append(bulk(table, n))
        else:
            scope = "*" if kind == "all" else table
            log.append(operator(scope, draw(st.sampled_from(KINDS)), 1000 + n))
    return log


def fold_writer(events: list[tuple[Origin, ControlEvent]]) -> ControlView:
    view = writer_view()
    for origin, event in events:
        view.handle(event, replay=True, origin=origin)
    return view


def writer_state(view: ControlView) -> Any:
    latest = {
        table: next((c for c in reversed(view_commits) if view.commits_seen.has(table, c)), None)
        for table, view_commits in ((t, [f"{t}-{n}" for n in range(40)]) for t in TABLES)
    }
    return (
        view.announced,
        {t: b.load_id for t, b in view.bulk_loads.items()},
        {t: view.commands.is_paused(t) for t in TABLES},
        latest,
    )


@given(writer_logs())
def test_the_writer_folding_what_it_kept_gets_the_state_of_the_whole_log(
    log: list[ControlEvent],
) -> None:
    located = [(Origin(0, offset, b""), event) for offset, event in enumerate(log)]
    whole = fold_writer(located)
    by_offset = dict(located)
    kept = [(o, by_offset[Origin(0, o.offset, b"")]) for o in whole.retained.events()]
    again = fold_writer(kept)
    assert writer_state(again) == writer_state(whole)
    assert len(whole.retained) <= 3 * (4 + 3) + 1  # plans, commit, bulk, pause per table; "*"


@st.composite
def watcher_logs(draw: st.DrawFn) -> list[SchemaChange]:
    """Versions of two subjects, mostly increasing, some repeated or late."""
    log: list[SchemaChange] = []
    for _ in range(draw(st.integers(1, 30))):
        table = draw(st.sampled_from(["inv.a", "inv.b"]))
        version = draw(st.integers(1, 12))
        verdict = draw(st.sampled_from(list(Verdict)))
        change = SchemaChange(
            table=table,
            subject=f"icefjord.changes.{table}-value",
            from_version=None,
            to_version=version,
            to_schema_id=100 + version,
            verdict=verdict,
            reason=None if verdict is Verdict.APPLY else "unsafe",
        )
        log.append(change)
    return log


@given(watcher_logs())
def test_the_watcher_folding_what_it_kept_gets_the_state_of_the_whole_log(
    log: list[SchemaChange],
) -> None:
    events = [ControlEvent.new(c.table, c, producer="test") for c in log]
    fold = WatcherFold()
    for offset, event in enumerate(events):
        fold.apply(event, Origin(0, offset, b""), True)
    assert fold.state == recover_state(events)
    kept = [events[o.offset] for o in fold.retained.events()]
    assert recover_state(kept) == fold.state
    assert len(fold.retained) <= 4  # announced and applied, per subject
