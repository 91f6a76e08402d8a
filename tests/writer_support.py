"""Helpers for tests that run iceberg-writer in process against the real stack."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from changes_support import ChangeProducer
from harness import Stack
from prometheus_client import CollectorRegistry

from services.iceberg_writer.__main__ import build_writer
from services.iceberg_writer.config import WriterSettings, WriterSparkSettings
from services.iceberg_writer.writer import Writer
from shared.avro import AvroCodec
from shared.errors import Backoff, retry
from shared.events import SchemaChange
from shared.kafka import TopicRequest, ensure_topics, make_admin, make_producer
from shared.registry import make_registry_client


def writer_settings(stack: Stack, table_topic: str, **overrides: Any) -> WriterSettings:
    suffix = uuid.uuid4().hex[:8]
    values: dict[str, Any] = {
        "kafka": stack.kafka,
        "registry": stack.registry,
        "catalog": stack.catalog,
        "spark": WriterSparkSettings(master="local[2]"),
        "topic_pattern": f"^{table_topic.replace('.', '[.]')}$",
        "group_id": f"writer-{suffix}",
        "control_topic": f"control-{suffix}",
        "dead_letter_topic": f"dlq-{suffix}",
        "quarantine_topic": f"quarantine-{suffix}",
        "topic_replication_factor": 1,
        "min_batch_s": 0.2,
        "freshness_target_s": 2.0,
        **overrides,
    }
    return WriterSettings(**values)


def start_writer(settings: WriterSettings) -> Writer:
    from shared.kafka import ensure_topics as ensure

    ensure(make_admin(settings.kafka), settings.topic_requests())
    writer = build_writer(settings, CollectorRegistry())
    retry(writer.start, what="start writer", backoff=Backoff(attempts=10))
    return writer


def run_until_caught_up(writer: Writer, timeout_s: float = 180.0) -> None:
    deadline = time.monotonic() + timeout_s
    settled = 0
    while time.monotonic() < deadline:
        writer.step()
        if writer.caught_up():
            settled += 1
            if settled >= 3:
                return
        else:
            settled = 0
    raise AssertionError("writer did not catch up in time")


def producer_for(stack: Stack, topic: str) -> ChangeProducer:
    codec = AvroCodec(make_registry_client(stack.registry))
    return ChangeProducer(make_producer(stack.kafka), codec, topic)


@contextmanager
def change_topic_in(stack: Stack, namespace: str, prefix: str) -> Iterator[str]:
    """A fresh 3-partition change topic ``icefjord.changes.<namespace>.<prefix>_<hex>``,
    deleted afterwards."""
    admin = make_admin(stack.kafka)
    name = f"icefjord.changes.{namespace}.{prefix}_{uuid.uuid4().hex[:6]}"
    ensure_topics(admin, [TopicRequest(name, 3)])
    yield name
    for future in admin.delete_topics([name]).values():
        future.result()


def publish_schema_change(stack: Stack, topic: str, change: SchemaChange) -> None:
    """``change`` on the control topic ``topic``, as schema-watcher would publish it."""
    from shared.control import ControlPublisher
    from shared.events import ControlEvent

    publisher = ControlPublisher(
        make_producer(stack.kafka), AvroCodec(make_registry_client(stack.registry)), topic
    )
    publisher.publish(ControlEvent.new(change.table, change, "test"))
    publisher.flush()


@contextmanager
def stepping(writer: Writer) -> Iterator[None]:
    """The writer's loop in a thread, as the service runs it, while a test acts."""
    stop = threading.Event()
    errors: list[BaseException] = []

    def run() -> None:
        while not stop.is_set():
            try:
                writer.step()
            except BaseException as exc:
                errors.append(exc)
                return

    thread = threading.Thread(target=run, name="writer-loop", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(120)
    if errors:
        raise errors[0]
