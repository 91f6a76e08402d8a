"""The operator's side of the control topic, as ``icefjord control`` uses it: publish one
event and, if asked, wait for the event that answers it; and the command line's exit codes.

Both the maintainer's requests (answered by a ``MaintenanceResult``) and the writer's
commands (answered by an ``OperatorCommandResult``) go through :func:`publish_and_await`.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

from confluent_kafka import KafkaError, KafkaException, TopicPartition

from shared.errors import IcefjordError

if TYPE_CHECKING:
    from shared.events import ControlEvent
    from shared.settings import KafkaSettings, RegistrySettings

# The registry client and the Avro codec are imported when publishing: importing this
# module (to build ``icefjord``'s app) must stay cheap.

__all__ = [
    "EXIT_FAILED",
    "EXIT_NO_RESULT",
    "EXIT_OK",
    "EXIT_REJECTED",
    "EXIT_UNREACHABLE",
    "ControlUnreachableError",
    "publish_and_await",
]

EXIT_OK = 0  # done (or only published, when not waiting)
EXIT_FAILED = 1  # the service answered that it failed
EXIT_REJECTED = 2  # refused: locally before publishing, or by the service
EXIT_NO_RESULT = 3  # published, no answer in time
EXIT_UNREACHABLE = 4  # Kafka or the registry did not answer: nothing was published

CONNECT_TIMEOUT_S = 10.0
PUBLISH_TIMEOUT_S = 15.0

A = TypeVar("A")


class ControlUnreachableError(IcefjordError):
    """Kafka, the control topic or the registry cannot be reached; the event was not
    published (or its delivery was never confirmed, and the producer dropped it)."""


def publish_and_await(
    kafka: KafkaSettings,
    registry: RegistrySettings,
    topic: str,
    event: ControlEvent,
    answer: Callable[[ControlEvent], A | None],
    wait_s: float,
) -> A | None:
    """Publish ``event`` on the control topic ``topic``; when ``wait_s`` > 0, read the topic
    from its end as it was before publishing until ``answer`` returns something for an
    event (returned) or ``wait_s`` passes (None). Raises ControlUnreachableError when Kafka
    or the registry does not answer, or the control topic does not exist."""
    from shared.avro import AvroCodec
    from shared.control import ControlPublisher, ControlReader
    from shared.kafka import make_consumer, make_producer
    from shared.registry import make_registry_client

    # librdkafka's own log lines (connection refused, ...) would repeat the one error raised.
    quiet = {"log_level": 2}
    consumer = make_consumer(kafka, f"icefjord-cli-{uuid.uuid4().hex[:12]}", **quiet)
    try:
        try:
            metadata = consumer.list_topics(topic, timeout=CONNECT_TIMEOUT_S)
        except KafkaException as exc:
            raise ControlUnreachableError(
                f"Kafka at {kafka.bootstrap_servers} does not answer: {_reason(exc)}"
            ) from None
        found = metadata.topics.get(topic)
        if found is None or found.error is not None or not found.partitions:
            raise ControlUnreachableError(
                f"the control topic {topic} does not exist on {kafka.bootstrap_servers} "
                "(the services create it at their start; check CONTROL_TOPIC)"
            )
        if wait_s > 0:
            # Start reading at the current end, before publishing: the answer comes later.
            ends = [
                TopicPartition(
                    topic, p, consumer.get_watermark_offsets(TopicPartition(topic, p), 10)[1]
                )
                for p in found.partitions
            ]
            consumer.assign(ends)
        codec = AvroCodec(make_registry_client(registry))
        publisher = ControlPublisher(make_producer(kafka, **quiet), codec, topic)
        try:
            publisher.publish(event)
            publisher.flush(PUBLISH_TIMEOUT_S)
        except (IcefjordError, KafkaException, BufferError) as exc:
            raise ControlUnreachableError(str(exc)) from None
        if wait_s <= 0:
            return None
        reader = ControlReader(consumer, codec, topic)
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline:
            try:
                events = reader.poll(timeout=min(1.0, max(0.0, deadline - time.monotonic())))
            except (IcefjordError, KafkaException) as exc:
                raise ControlUnreachableError(
                    f"published, but the answer cannot be read: {exc}"
                ) from None
            for candidate in events:
                found_answer = answer(candidate)
                if found_answer is not None:
                    return found_answer
        return None
    except KafkaException as exc:
        raise ControlUnreachableError(
            f"Kafka at {kafka.bootstrap_servers} failed: {_reason(exc)}"
        ) from None
    finally:
        consumer.close()


def _reason(exc: KafkaException) -> str:
    error = exc.args[0] if exc.args else None
    return str(error.str()) if isinstance(error, KafkaError) else str(exc)
