"""confluent-kafka factories: every client gets the same connection and security settings."""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import (
    Consumer,
    IsolationLevel,
    KafkaError,
    KafkaException,
    Message,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, NewTopic, OffsetSpec

from shared.errors import RetryableError
from shared.settings import KafkaSettings

log = logging.getLogger(__name__)


def consume_ready(consumer: Consumer, limit: int, timeout: float) -> list[Message]:
    """Up to ``limit`` messages: wait at most ``timeout`` for the first one, then take only
    what the client has already fetched.

    librdkafka's ``consume(limit, timeout)`` returns early only once ``limit`` messages are
    there, so below that rate every batch waited out the whole timeout and each record's
    latency grew by up to ``timeout``. Here a batch closes as soon as something arrives and
    grows with the arrival rate instead.
    """
    first: list[Message] = consumer.consume(1, timeout)
    if not first or limit <= 1:
        return first
    rest: list[Message] = consumer.consume(limit - 1, 0)
    return first + rest


def make_producer(settings: KafkaSettings, **overrides: Any) -> Producer:
    """An idempotent producer (acks=all); ``overrides`` are librdkafka properties."""
    config = settings.client_config() | {"enable.idempotence": True, "acks": "all"}
    config.update(overrides)
    return Producer(config)


SESSION_TIMEOUT_MS = 10_000


def make_consumer(settings: KafkaSettings, group_id: str, **overrides: Any) -> Consumer:
    """A consumer that commits nothing by itself and reads only committed transactions.

    ``session.timeout.ms`` is 10 s instead of the client's 45 s. A member that was killed
    (or was cut off when its broker stopped) stays in its group until its session runs out,
    and its successor gets no partition before that: after a ``kill -9`` the replacement
    writer or normalizer sat idle for up to 45 s. Heartbeats come from librdkafka's own
    thread, so a long Spark commit does not end a session; ``max.poll.interval.ms`` (5 min)
    still guards a stuck loop.
    """
    config = settings.client_config() | {
        "group.id": group_id,
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
        "isolation.level": "read_committed",
        "session.timeout.ms": SESSION_TIMEOUT_MS,
        "heartbeat.interval.ms": SESSION_TIMEOUT_MS // 4,
    }
    config.update(overrides)
    return Consumer(config)


REJOIN_LIMIT_S = 3 * SESSION_TIMEOUT_MS / 1000


class GroupMembership:
    """Notices a subscribed consumer that fell out of its group and does not come back.

    When a session times out while the group coordinator is unknown (the broker is
    restarting), librdkafka 2.12 revokes the assignment to rejoin, and sometimes never sends
    the JoinGroup: the consumer polls on with no member id and no partition, and the
    service stalls while looking healthy. The fault test (with shorter fetch waits) caught
    it in two of 11 runs, once in the normalizer and once in the writer. :meth:`lost` is
    true once a consumer that had joined has been without a member id for ``limit_s``; the
    caller then closes it and subscribes a new one, which starts from the committed
    offsets. A consumer that never joined (its pattern matches no topic yet) is left alone.
    """

    def __init__(
        self, limit_s: float = REJOIN_LIMIT_S, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.limit_s = limit_s
        self._clock = clock
        self._joined = False
        self._since: float | None = None

    def lost(self, consumer: Consumer) -> bool:
        """Whether ``consumer`` joined its group once and has now been out of it for
        ``limit_s``. Call it after each poll; after a true answer, :meth:`reset`."""
        if consumer.memberid():
            self._joined = True
            self._since = None
            return False
        if not self._joined:
            return False
        now = self._clock()
        if self._since is None:
            self._since = now
        return now - self._since >= self.limit_s

    def reset(self) -> None:
        """Start over, for a new consumer."""
        self._joined = False
        self._since = None


def read_committed(
    settings: KafkaSettings,
    topic: str,
    since: Mapping[int, int] | None = None,
    timeout_s: float = 30.0,
) -> Iterator[Message]:
    """Every committed record of ``topic`` after the offsets ``since`` (a partition left out:
    from 0), partition by partition up to the end each had when it was reached, or until
    ``timeout_s`` runs out. Nothing when the topic does not exist."""
    consumer = Consumer(
        settings.client_config()
        | {
            "group.id": f"icefjord-reader-{uuid.uuid4().hex[:12]}",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
            "enable.partition.eof": True,
        }
    )
    try:
        info = consumer.list_topics(topic, timeout=10).topics.get(topic)
        if info is None or info.error is not None:
            return
        starts = since or {}
        consumer.assign([TopicPartition(topic, p, starts.get(p, 0)) for p in info.partitions])
        left = set(info.partitions)
        deadline = time.monotonic() + timeout_s
        while left and time.monotonic() < deadline:
            for message in consumer.consume(10_000, 0.5):
                error = message.error()
                if error is None:
                    yield message
                elif error.code() == KafkaError._PARTITION_EOF:
                    left.discard(message.partition())
    finally:
        consumer.close()


def partition_count(admin: AdminClient, topic: str, timeout_s: float = 10.0) -> int | None:
    """How many partitions ``topic`` has; None when the broker does not say (unreachable,
    no such topic)."""
    try:
        info = admin.list_topics(topic, timeout=timeout_s).topics.get(topic)
    except KafkaException:
        return None
    if info is None or info.error is not None or not info.partitions:
        return None
    return len(info.partitions)


def make_admin(settings: KafkaSettings) -> AdminClient:
    """An admin client with the shared settings."""
    return AdminClient(settings.client_config())


def last_stable_offsets(
    admin: AdminClient, partitions: Iterable[TopicPartition], timeout_s: float = 5.0
) -> dict[tuple[str, int], int]:
    """Where a ``read_committed`` reader of each partition ends now, in one request.

    A consumer's own ``get_watermark_offsets`` asks one partition at a time on the
    connection its fetches use, and each request queued behind a fetch waiting for data
    (``fetch.wait.max.ms``): for the six partitions of the control topic that took
    iceberg-writer seconds, while nothing else in its loop ran (docs/benchmarks/HISTORY.md,
    "Figures moved out of code comments"). The admin client has a
    connection of its own. Raises KafkaException when the broker does not answer.
    """
    request = {TopicPartition(tp.topic, tp.partition): OffsetSpec.latest() for tp in partitions}
    if not request:
        return {}
    futures = admin.list_offsets(
        request, isolation_level=IsolationLevel.READ_COMMITTED, request_timeout=timeout_s
    )
    return {(tp.topic, tp.partition): future.result().offset for tp, future in futures.items()}


@dataclass(frozen=True)
class TopicRequest:
    """A topic to create if missing."""

    name: str
    partitions: int = 1
    replication_factor: int = 1
    config: dict[str, str] = field(default_factory=dict)


def ensure_topics(admin: AdminClient, topics: Iterable[TopicRequest], timeout: float = 15) -> None:
    """Create the topics that do not exist yet; existing ones are left as they are.

    Raises :class:`RetryableError` when the broker cannot be reached or refuses.
    """
    wanted = list(topics)
    if not wanted:
        return
    try:
        metadata = admin.list_topics(timeout=timeout)
    except KafkaException as exc:
        raise RetryableError(f"Kafka unreachable: {exc}") from exc
    missing = [t for t in wanted if t.name not in metadata.topics]
    if not missing:
        return
    # A development cluster of one broker cannot hold three replicas; cap rather than fail,
    # and say so, so that the same catalog serves the laptop and production.
    brokers = max(len(metadata.brokers), 1)
    futures = admin.create_topics([_fitted(t, brokers) for t in missing], operation_timeout=timeout)
    for name, future in futures.items():
        try:
            future.result()
            log.info("created topic", extra={"topic": name})
        except KafkaException as exc:
            error = exc.args[0]
            if isinstance(error, KafkaError) and error.code() == KafkaError.TOPIC_ALREADY_EXISTS:
                continue
            raise RetryableError(f"cannot create topic {name}: {exc}") from exc
    _await_metadata(admin, [t.name for t in missing], timeout)


def _await_metadata(admin: AdminClient, names: list[str], timeout: float) -> None:
    """Return once every topic in ``names`` shows in the cluster metadata: creation is
    acknowledged by the controller before brokers serve it, and callers produce at once."""
    deadline = time.monotonic() + timeout
    while True:
        known = admin.list_topics(timeout=timeout).topics
        if all(name in known and known[name].error is None for name in names):
            return
        if time.monotonic() > deadline:
            raise RetryableError(f"topics {names} created but not yet in metadata")
        time.sleep(0.1)


def _fitted(topic: TopicRequest, brokers: int) -> NewTopic:
    """The NewTopic for ``topic``, its replication (and min ISR) capped at ``brokers``."""
    replication = min(topic.replication_factor, brokers)
    config = dict(topic.config)
    if replication < topic.replication_factor:
        log.warning(
            "replication factor capped at the broker count",
            extra={"topic": topic.name, "wanted": topic.replication_factor, "brokers": brokers},
        )
        if "min.insync.replicas" in config:
            config["min.insync.replicas"] = str(
                min(int(config["min.insync.replicas"]), replication)
            )
    return NewTopic(topic.name, topic.partitions, replication, config=config)
