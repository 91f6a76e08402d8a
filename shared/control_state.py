"""Checkpoints of a reader's fold of the control topic, so that a start does not grow with
history.

A reader (the writer's control view, the schema-watcher) folds the control topic's events into
a state that rests on few of them: the schema plans, each table's newest CommitDone and
BulkLoad, the operators' latest PAUSE or RESUME. The fold keeps those events as it meets them
(:class:`Retained`); a checkpoint is that set with the offsets it covers, saved as one record
on the compacted topic ``icefjord.control-state`` (:class:`StateStore`). A start folds the
checkpoint's events, then the control topic from the checkpoint's offsets to its end
(:func:`replay_control`), and saves a new checkpoint. A checkpoint is a pure function of the
control topic up to its offsets, so any instance may take another's; one that is missing,
unreadable, or ahead of the control topic is ignored and the fold starts from the beginning.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaError,
    KafkaException,
    Message,
    TopicPartition,
)

import contracts
from shared.avro import AvroCodec, WireFormatError
from shared.control import ControlReader
from shared.errors import RetryableError
from shared.events import ControlEvent
from shared.kafka import make_consumer, make_producer
from shared.settings import CONTROL_STATE_TOPIC, ControlStateSettings, KafkaSettings

log = logging.getLogger(__name__)

MAX_CHECKPOINT_BYTES = 15 * 1024 * 1024  # under the topic's max.message.bytes (16 MiB)


@dataclass(frozen=True, slots=True)
class Origin:
    """Where a control event was read: its partition, offset and value as read."""

    partition: int
    offset: int
    value: bytes


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """A fold's state at ``offsets`` (per partition, the first offset not folded in): the
    events it rests on, in the order to fold them."""

    offsets: Mapping[int, int]
    events: Sequence[Origin]


class Retained:
    """The control events a fold's state rests on, each under a key the fold chooses; an
    event replaces the one kept under its key."""

    def __init__(self) -> None:
        self._kept: dict[Hashable, tuple[int, Origin]] = {}
        self._seq = 0

    def keep(self, key: Hashable, origin: Origin | None) -> None:
        """Keep ``origin`` under ``key`` (nothing when None: an event from nowhere, a test's)."""
        if origin is not None:
            self._seq += 1
            self._kept[key] = (self._seq, origin)

    def __len__(self) -> int:
        return len(self._kept)

    def events(self) -> list[Origin]:
        """The kept events, each once, in the order they were kept (so in offset order per
        partition): folding them again in this order gives the same state."""
        latest: dict[tuple[int, int], tuple[int, Origin]] = {}
        for seq, origin in self._kept.values():
            coordinates = (origin.partition, origin.offset)
            if coordinates not in latest or latest[coordinates][0] < seq:
                latest[coordinates] = (seq, origin)
        return [origin for _, origin in sorted(latest.values(), key=lambda kept: kept[0])]


class ControlFold(Protocol):
    """A reader's fold of the control topic."""

    retained: Retained

    def apply(self, event: ControlEvent, origin: Origin | None, replay: bool) -> None:
        """Fold ``event`` in (``replay``: read back at start, not live)."""


class ReaderSettings(Protocol):
    """The settings of a service that folds the control topic."""

    @property
    def kafka(self) -> KafkaSettings: ...

    @property
    def control_topic(self) -> str: ...

    @property
    def producer(self) -> str: ...

    @property
    def control_state(self) -> ControlStateSettings: ...


def state_key(control_topic: str, fold: str) -> str:
    """The key of ``fold``'s checkpoints of ``control_topic``."""
    return f"{control_topic}/{fold}"


class StateStore:
    """One fold's checkpoints on the state topic: :meth:`load` the newest, :meth:`save` one.

    ``fold`` names the fold with the version of its rules (``"iceberg-writer.v1"``): a new
    version of the rules starts from the beginning once instead of misreading an old
    checkpoint.
    """

    def __init__(
        self,
        kafka: KafkaSettings,
        codec: AvroCodec,
        *,
        control_topic: str,
        fold: str,
        producer: str,
        state_topic: str = CONTROL_STATE_TOPIC,
    ) -> None:
        self._kafka = kafka
        self._codec = codec
        self.control_topic = control_topic
        self.fold = fold
        self._name = producer
        self.state_topic = state_topic
        self.key = state_key(control_topic, fold)
        self._schema = contracts.load_schema("control_state")
        self._failure: str | None = None

    @classmethod
    def of(cls, settings: ReaderSettings, codec: AvroCodec, fold: str) -> StateStore:
        """The checkpoints of ``fold`` of a service's control topic, as its settings say."""
        return cls(
            settings.kafka,
            codec,
            control_topic=settings.control_topic,
            fold=fold,
            producer=settings.producer,
            state_topic=settings.control_state.topic,
        )

    def load(self, timeout_s: float = 10.0) -> Checkpoint | None:
        """The newest checkpoint of this fold, or None when there is none or it cannot be
        read (logged). Raises RetryableError when Kafka does not answer."""
        consumer = make_consumer(
            self._kafka, f"icefjord-state-{uuid.uuid4().hex[:12]}", **{"enable.partition.eof": True}
        )
        try:
            return self._load(consumer, timeout_s)
        except KafkaException as exc:
            raise RetryableError(f"state topic {self.state_topic} unavailable: {exc}") from exc
        finally:
            consumer.close()

    def _load(self, consumer: Consumer, timeout_s: float) -> Checkpoint | None:
        topic = self.state_topic
        metadata = consumer.list_topics(topic, timeout=timeout_s).topics.get(topic)
        if metadata is None or metadata.error is not None or not metadata.partitions:
            return None  # not created yet: no checkpoint
        ends: dict[int, int] = {}
        for partition in metadata.partitions:
            low, high = consumer.get_watermark_offsets(
                TopicPartition(topic, partition), timeout=timeout_s, cached=False
            )
            if high > low:
                ends[partition] = high
        if not ends:
            return None
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in ends])
        newest: bytes | None = None
        key = self.key.encode()
        deadline = time.monotonic() + timeout_s
        while ends:
            if time.monotonic() > deadline:
                raise RetryableError(f"reading {topic} took over {timeout_s:.0f} s")
            for message in consumer.consume(100, 0.5):
                error = message.error()
                if error is not None:
                    if error.code() == KafkaError._PARTITION_EOF:
                        ends.pop(message.partition(), None)
                        continue
                    raise RetryableError(f"reading {topic} failed: {error}")
                if message.key() == key:
                    newest = message.value()  # None: a tombstone, the checkpoint dropped
                if message.offset() + 1 >= ends.get(message.partition(), 1 << 62):
                    ends.pop(message.partition(), None)
        return None if newest is None else self._decode(newest)

    def _decode(self, value: bytes) -> Checkpoint | None:
        try:
            _, record = self._codec.deserialize(value)
            if record["fold"] != self.fold or record["topic"] != self.control_topic:
                raise ValueError(f"it is {record['topic']}/{record['fold']}")
            return Checkpoint(
                offsets={int(o["partition"]): int(o["next_offset"]) for o in record["offsets"]},
                events=[
                    Origin(int(e["partition"]), int(e["offset"]), bytes(e["value"]))
                    for e in record["events"]
                ],
            )
        except (WireFormatError, KeyError, ValueError, TypeError) as exc:
            log.warning(
                "control checkpoint unreadable: folding the control topic from its beginning",
                extra={"key": self.key, "reason": str(exc)},
            )
            return None

    def save(self, checkpoint: Checkpoint) -> bool:
        """Save ``checkpoint`` and wait for it; False (logged) when it is too large or Kafka
        did not take it: the previous checkpoint stays, and a start replays more."""
        record: dict[str, Any] = {
            "fold": self.fold,
            "topic": self.control_topic,
            "offsets": [
                {"partition": p, "next_offset": n} for p, n in sorted(checkpoint.offsets.items())
            ],
            "events": [
                {"partition": e.partition, "offset": e.offset, "value": e.value}
                for e in checkpoint.events
            ],
            "saved_at_ms": int(time.time() * 1000),
            "producer": self._name,
        }
        try:
            value = self._codec.serialize(f"{self.state_topic}-value", self._schema, record)
        except Exception as exc:  # the registry down: keep the older checkpoint
            log.warning("control checkpoint not saved", extra={"reason": str(exc)})
            return False
        if len(value) > MAX_CHECKPOINT_BYTES:
            log.warning(
                "control checkpoint too large to save: starts replay the control topic further",
                extra={"bytes": len(value), "events": len(checkpoint.events)},
            )
            return False
        # A producer of its own for each save (about once a minute): nothing left open
        # between saves, and the 16 MiB limit only here.
        producer = make_producer(
            self._kafka,
            **{"compression.type": "zstd", "message.max.bytes": MAX_CHECKPOINT_BYTES + 65536},
        )
        self._failure = None
        try:
            producer.produce(
                self.state_topic, key=self.key.encode(), value=value, on_delivery=self._delivered
            )
            remaining = producer.flush(10)
        except (KafkaException, BufferError) as exc:
            log.warning("control checkpoint not saved", extra={"reason": str(exc)})
            return False
        if remaining or self._failure is not None:
            log.warning(
                "control checkpoint not saved",
                extra={"reason": self._failure or f"{remaining} pending after 10 s"},
            )
            return False
        log.info(
            "control checkpoint saved",
            extra={"key": self.key, "events": len(checkpoint.events), "bytes": len(value)},
        )
        return True

    def _delivered(self, error: KafkaError | None, _message: Any) -> None:
        if error is not None:
            self._failure = str(error)


@dataclass
class Replayed:
    """What :func:`replay_control` did: the offsets reached, the events read from the
    checkpoint and from the control topic."""

    positions: dict[int, int]
    from_checkpoint: int
    from_topic: int


def replay_control(
    consumer: Consumer,
    reader: ControlReader,
    fold: ControlFold,
    *,
    store: StateStore | None,
    timeout_s: float,
    checkpoint_every: int = 100_000,
    clock: Callable[[], float] = time.monotonic,
) -> Replayed:
    """Fold the control topic into ``fold``: the newest checkpoint in ``store`` (none when
    ``store`` is None), then the topic from the checkpoint's offsets to its ends taken now;
    save a checkpoint every ``checkpoint_every`` events read and at the end.

    ``consumer`` is assigned to the topic's partitions (no group) and left assigned at the
    ends for the caller to read on. Raises RetryableError when Kafka does not answer or the
    replay does not finish within ``timeout_s`` (the checkpoints saved on the way stay, so
    the next attempt starts further on).
    """
    topic = reader.topic
    deadline = clock() + timeout_s
    try:
        metadata = consumer.list_topics(topic, timeout=10).topics.get(topic)
        if metadata is None or metadata.error is not None:
            reason = "missing" if metadata is None else str(metadata.error)
            raise RetryableError(f"control topic {topic} is not available: {reason}")
        lows: dict[int, int] = {}
        ends: dict[int, int] = {}
        for p in sorted(metadata.partitions):
            lows[p], ends[p] = consumer.get_watermark_offsets(
                TopicPartition(topic, p), timeout=10, cached=False
            )
        checkpoint = _usable(store.load() if store is not None else None, ends, topic)
        positions = {p: lows[p] for p in ends}
        from_checkpoint = 0
        if checkpoint is not None:
            for origin in checkpoint.events:
                event = reader.decode_value(origin.value, origin.partition, origin.offset)
                if event is not None:
                    fold.apply(event, origin, True)
                    from_checkpoint += 1
            for p, offset in checkpoint.offsets.items():
                positions[p] = max(offset, lows[p])
        consumer.assign([TopicPartition(topic, p, positions[p]) for p in sorted(ends)])
        read = since_save = 0
        # The consumer's position only says when a partition is done (it steps over
        # transaction markers); after an end-of-partition notice librdkafka puts it one past
        # the end, so the checkpoint takes the offsets of the records read instead.
        reached = dict(positions)
        while any(max(positions[p], reached[p]) < ends[p] for p in ends):
            if clock() > deadline:
                raise RetryableError(f"control topic replay did not finish in {timeout_s:.0f} s")
            count = fold_messages(consumer.consume(500, 0.5), reader, fold, positions, True)
            read += count
            since_save += count
            for tp in consumer.position([TopicPartition(topic, p) for p in ends]):
                if tp.offset >= 0:
                    reached[tp.partition] = max(reached[tp.partition], tp.offset)
            if store is not None and since_save >= checkpoint_every:
                store.save(Checkpoint(dict(positions), fold.retained.events()))
                since_save = 0
        if store is not None and (read > 0 or checkpoint is None):
            store.save(Checkpoint(dict(positions), fold.retained.events()))
    except KafkaException as exc:
        raise RetryableError(f"control topic unavailable: {exc}") from exc
    log.info(
        "control topic folded",
        extra={"from_checkpoint": from_checkpoint, "from_topic": read, "kept": len(fold.retained)},
    )
    return Replayed(positions, from_checkpoint, read)


def fold_messages(
    messages: Sequence[Message],
    reader: ControlReader,
    fold: ControlFold,
    positions: dict[int, int],
    replay: bool,
) -> int:
    """Fold the control topic's ``messages`` into ``fold`` (undecodable ones are skipped,
    by the reader's log) and move ``positions`` past them; how many records they held.
    Raises RetryableError on a read error (end-of-partition notices aside)."""
    count = 0
    for message in messages:
        error = message.error()
        if error is not None:
            if error.code() == KafkaError._PARTITION_EOF:
                continue
            raise RetryableError(f"control topic read failed: {error}")
        p, offset, value = message.partition(), message.offset(), message.value()
        positions[p] = max(positions.get(p, 0), offset + 1)
        count += 1
        if value is None:
            continue
        event = reader.decode_value(value, p, offset)
        if event is not None:
            fold.apply(event, Origin(p, offset, value), replay)
    return count


def _usable(
    checkpoint: Checkpoint | None, ends: Mapping[int, int], topic: str
) -> Checkpoint | None:
    """``checkpoint`` unless it names a partition the topic lacks or an offset past its end
    (the topic was recreated): then None, and the fold starts from the beginning."""
    if checkpoint is None:
        return None
    for p, offset in checkpoint.offsets.items():
        if p not in ends or offset > ends[p]:
            log.warning(
                "control checkpoint is ahead of the control topic (recreated?): ignored",
                extra={"topic": topic, "partition": p, "offset": offset, "end": ends.get(p)},
            )
            return None
    return checkpoint


class Checkpoints:
    """When a running fold saves a checkpoint: after ``every`` events or ``interval_s``
    seconds with at least one event, whichever comes first."""

    @classmethod
    def of(cls, store: StateStore, settings: ControlStateSettings) -> Checkpoints:
        """Checkpoints into ``store`` at the intervals ``settings`` give."""
        return cls(store, every=settings.every, interval_s=settings.interval_s)

    def __init__(
        self,
        store: StateStore | None,
        *,
        every: int = 20_000,
        interval_s: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.store = store
        self._every = every
        self._interval_s = interval_s
        self._clock = clock
        self._since = 0
        self._last = clock()

    def read(self, events: int) -> None:
        """``events`` more were folded in."""
        self._since += events

    def due(self) -> bool:
        """Whether a checkpoint should be saved now."""
        if self.store is None or self._since == 0:
            return False
        return self._since >= self._every or self._clock() - self._last >= self._interval_s

    def save(self, positions: Mapping[int, int], fold: ControlFold) -> None:
        """Save the fold at ``positions`` (a failure is logged; the next try is due later)."""
        if self.store is not None:
            self.store.save(Checkpoint(dict(positions), fold.retained.events()))
        self._since = 0
        self._last = self._clock()
