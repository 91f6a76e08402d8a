"""Dead letters back where they came from, once each: ``icefjord deadletter list|replay``.

A dead letter (``icefjord.deadletter``) keeps the original record's key, value and headers,
and says where it was consumed (``icefjord.source.topic``, ``.partition``, ``.offset``). A
replay produces the original record again to that topic and partition, and marks it done on
``icefjord.replays`` in the same Kafka transaction. Readers that read committed records only
(every Icefjord consumer) see either both or neither, so:

- a replay killed in the middle leaves an open transaction that the next replay's
  ``init_transactions`` aborts (same transactional id), and that next replay skips only what
  a committed marker names;
- two replays at once: the later one fences the earlier, whose next commit fails.

Records of one key keep their order: a dead letter is keyed by the original key, so one
key's dead letters sit in one partition in the order they failed, and are replayed in it.
:func:`replay` is the same for any diverted record (:class:`PutBack`); the quarantine's use
it too (:mod:`icefjord.quarantine`).
"""

from __future__ import annotations

import fnmatch
import json
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Message, Producer

from shared.headers import (
    DEAD_LETTER_HEADERS,
    HEADER_ERROR_CLASS,
    HEADER_ERROR_MESSAGE,
    HEADER_FAILED_AT_MS,
    HEADER_SOURCE_OFFSET,
    HEADER_SOURCE_PARTITION,
    HEADER_SOURCE_TOPIC,
)
from shared.kafka import read_committed
from shared.settings import DEAD_LETTER_TOPIC, KafkaSettings

REPLAYS_TOPIC = "icefjord.replays"
HEADER_REPLAYED_FROM = "icefjord.replayed_from"
"""Added to a replayed record: where it was diverted to, ``<topic>:<partition>:<offset>``."""

TRANSACTIONAL_ID_PREFIX = "icefjord-replay-"
"""Followed by the diversion topic's name: one replay of a topic at a time."""
BATCH = 500  # records per transaction


class ReplayError(RuntimeError):
    """A replay could not go on; the message says why. What was committed before stays."""


@dataclass(frozen=True)
class PutBack:
    """One record for a replay to produce: where to, what, and the marker's key."""

    coordinates: str  # where it was diverted to, "<topic>:<partition>:<offset>"
    topic: str
    partition: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes], ...]


@dataclass(frozen=True)
class DeadLetter:
    """One record of the dead-letter topic, its diversion headers read."""

    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes], ...]  # the original record's own
    error_class: str
    error_message: str
    source_topic: str
    source_partition: int
    source_offset: int
    failed_at_ms: int

    topic: str = DEAD_LETTER_TOPIC

    @property
    def coordinates(self) -> str:
        """Where it is on the dead-letter topic: the key of its replay marker."""
        return f"{self.topic}:{self.partition}:{self.offset}"

    def put_back(self) -> PutBack:
        """The original record, to its source topic and partition, marked as replayed."""
        return PutBack(
            coordinates=self.coordinates,
            topic=self.source_topic,
            partition=self.source_partition,
            key=self.key,
            value=self.value,
            headers=(*self.headers, (HEADER_REPLAYED_FROM, self.coordinates.encode())),
        )

    @property
    def table(self) -> str:
        """``<namespace>.<table>`` of its source topic (Debezium's ``<server>.<schema>.<table>``
        or ``icefjord.changes.<namespace>.<table>``): its last two name segments."""
        return ".".join(self.source_topic.split(".")[-2:])


def parse_dead_letter(message: Message) -> DeadLetter:
    """``message`` of the dead-letter topic as a :class:`DeadLetter`. Raises ValueError when
    a diversion header is missing or unreadable (it was not written by Icefjord)."""
    own: list[tuple[str, bytes]] = []
    diversion: dict[str, str] = {}
    for name, raw in message.headers() or []:
        if name in DEAD_LETTER_HEADERS:
            diversion[name] = (raw or b"").decode("utf-8", "replace")
        else:
            own.append((name, raw or b""))
    missing = [
        h
        for h in (HEADER_SOURCE_TOPIC, HEADER_SOURCE_PARTITION, HEADER_SOURCE_OFFSET)
        if h not in diversion
    ]
    if missing:
        raise ValueError(f"no {', '.join(missing)} header")
    partition, offset, topic = message.partition(), message.offset(), message.topic()
    assert partition is not None and offset is not None and topic is not None
    return DeadLetter(
        topic=topic,
        partition=partition,
        offset=offset,
        key=message.key(),
        value=message.value(),
        headers=tuple(own),
        error_class=diversion.get(HEADER_ERROR_CLASS, ""),
        error_message=diversion.get(HEADER_ERROR_MESSAGE, ""),
        source_topic=diversion[HEADER_SOURCE_TOPIC],
        source_partition=int(diversion[HEADER_SOURCE_PARTITION]),
        source_offset=int(diversion[HEADER_SOURCE_OFFSET]),
        failed_at_ms=int(diversion.get(HEADER_FAILED_AT_MS) or 0),
    )


@dataclass(frozen=True)
class Filter:
    """Which dead letters a list or a replay takes; every given condition must hold."""

    table: str | None = None  # fnmatch pattern on DeadLetter.table
    reason: str | None = None  # substring of the error class or message, any case
    since_ms: int | None = None  # failed at or after
    until_ms: int | None = None  # failed before

    def __call__(self, letter: DeadLetter) -> bool:
        if self.table is not None and not fnmatch.fnmatchcase(letter.table, self.table):
            return False
        if self.reason is not None:
            needle = self.reason.casefold()
            text = f"{letter.error_class}: {letter.error_message}".casefold()
            if needle not in text:
                return False
        if self.since_ms is not None and letter.failed_at_ms < self.since_ms:
            return False
        return self.until_ms is None or letter.failed_at_ms < self.until_ms


def parse_time_ms(text: str) -> int:
    """An ISO 8601 time (UTC when it names no zone) in ms since the epoch. Raises ValueError."""
    moment = datetime.fromisoformat(text)
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return int(moment.timestamp() * 1000)


def replayed_markers(settings: KafkaSettings, timeout_s: float = 60.0) -> set[str]:
    """The coordinates every committed replay marker names."""
    return {
        message.key().decode()
        for message in read_committed(settings, REPLAYS_TOPIC, timeout_s=timeout_s)
        if message.key() is not None and message.value() is not None
    }


def dead_letters(
    settings: KafkaSettings,
    keep: Callable[[DeadLetter], bool],
    unreadable: Callable[[Message, str], None],
    topic: str = DEAD_LETTER_TOPIC,
    timeout_s: float = 60.0,
) -> Iterator[DeadLetter]:
    """Every committed dead letter of ``topic`` that ``keep`` takes, partition by partition
    in offset order. A record without Icefjord's headers goes to ``unreadable`` with the
    reason."""
    for message in read_committed(settings, topic, timeout_s=timeout_s):
        try:
            letter = parse_dead_letter(message)
        except ValueError as exc:
            unreadable(message, str(exc))
            continue
        if keep(letter):
            yield letter


def ensure_replays_topic(settings: KafkaSettings, replication_factor: int | None) -> None:
    """Create ``icefjord.replays`` as the topic catalog declares it, if missing; with no
    ``replication_factor``, the catalog's or the number of brokers, whichever is lower."""
    from confluent_kafka.admin import AdminClient

    from shared.kafka import ensure_topics
    from shared.topics import catalog_topic_request

    admin = AdminClient(settings.client_config() | {"log_level": 2})
    try:
        brokers = len(admin.list_topics(timeout=10).brokers)
    except KafkaException as exc:
        raise ReplayError(f"Kafka at {settings.bootstrap_servers}: {exc.args[0]}") from None
    request = catalog_topic_request(REPLAYS_TOPIC, REPLAYS_TOPIC)
    replication = replication_factor or min(request.replication_factor, max(brokers, 1))
    ensure_topics(
        admin, [catalog_topic_request(REPLAYS_TOPIC, REPLAYS_TOPIC, replication_factor=replication)]
    )


def missing_targets(settings: KafkaSettings, records: Iterable[PutBack]) -> list[str]:
    """The topics and partitions ``records`` go to that Kafka does not have now."""
    from confluent_kafka.admin import AdminClient

    admin = AdminClient(settings.client_config() | {"log_level": 2})
    topics = admin.list_topics(timeout=10).topics
    missing: set[str] = set()
    for record in records:
        found = topics.get(record.topic)
        if found is None or found.error is not None:
            missing.add(record.topic)
        elif record.partition not in found.partitions:
            missing.add(f"{record.topic} partition {record.partition}")
    return sorted(missing)


@dataclass
class ReplayReport:
    replayed: int = 0
    already: int = 0  # named by an earlier replay's marker


def replay(
    settings: KafkaSettings,
    records: Callable[[], Iterable[PutBack]],
    stream: str,
    progress: Callable[[int, int], None] = lambda done, total: None,
    batch: int = BATCH,
    timeout_s: float = 60.0,
    producer_factory: Callable[[dict[str, Any]], Producer] = Producer,
    replication_factor: int | None = None,
) -> ReplayReport:
    """Produce each record ``records`` yields (read from the diversion topic ``stream``) to
    its topic and partition, with a marker on ``icefjord.replays`` in the same transaction,
    ``batch`` records per transaction; skip those an earlier replay marked. ``records`` is
    called once the transactional id (one per ``stream``) is ours, so it reads after any
    earlier replay ended; it may raise ReplayError to refuse. Nothing is produced when a
    target topic or partition is gone. Raises ReplayError (what was committed before stays
    committed). Creates ``icefjord.replays`` when missing (``replication_factor``: see
    :func:`ensure_replays_topic`)."""
    ensure_replays_topic(settings, replication_factor)
    producer = producer_factory(
        settings.client_config()
        | {
            "transactional.id": TRANSACTIONAL_ID_PREFIX + stream,
            "enable.idempotence": True,
            "transaction.timeout.ms": 60_000,
            "log_level": 2,
        }
    )
    try:
        producer.init_transactions(timeout_s)
    except KafkaException as exc:
        raise ReplayError(f"Kafka at {settings.bootstrap_servers}: {exc.args[0]}") from None
    # Any earlier replay is now fenced and its open transaction aborted: the markers read
    # next are final.
    done = replayed_markers(settings, timeout_s)
    report = ReplayReport()
    todo: list[PutBack] = []
    for record in records():
        if record.coordinates in done:
            report.already += 1
        else:
            todo.append(record)
    missing = missing_targets(settings, todo)
    if missing:
        raise ReplayError(
            f"nothing replayed: {len(todo)} record(s) would go to what Kafka does not have: "
            + ", ".join(missing)
        )
    failures: list[str] = []

    def delivered(error: KafkaError | None, message: Message) -> None:
        if error is not None:
            failures.append(f"{message.topic()} partition {message.partition()}: {error.str()}")

    for start in range(0, len(todo), batch):
        chunk = todo[start : start + batch]
        producer.begin_transaction()
        now_ms = int(time.time() * 1000)
        for record in chunk:
            producer.produce(
                record.topic,
                value=record.value,
                key=record.key,
                partition=record.partition,
                headers=list(record.headers),
                on_delivery=delivered,
            )
            marker = {
                "to_topic": record.topic,
                "to_partition": record.partition,
                "replayed_at_ms": now_ms,
            }
            producer.produce(
                REPLAYS_TOPIC,
                key=record.coordinates,
                value=json.dumps(marker),
                on_delivery=delivered,
            )
            producer.poll(0)
        try:
            producer.commit_transaction(timeout_s)
        except KafkaException as exc:
            error = exc.args[0]
            if not error.txn_requires_abort():
                raise ReplayError(f"the replay's transaction failed: {error}") from None
            producer.abort_transaction(timeout_s)
            why = failures[0] if failures else error.str()
            raise ReplayError(f"the replay's transaction was aborted: {why}") from None
        report.replayed += len(chunk)
        progress(report.replayed, len(todo))
    return report
