"""schema-watcher against the real registry and Kafka: announce once, also across restarts."""

from __future__ import annotations

import json
import re
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

from confluent_kafka import TopicPartition
from confluent_kafka.schema_registry import Schema
from harness import Stack
from prometheus_client import CollectorRegistry

from services.schema_watcher.__main__ import run
from services.schema_watcher.config import WatcherSettings
from services.schema_watcher.metrics import WatcherMetrics
from services.schema_watcher.watcher import SchemaWatcher, build_watcher
from shared.avro import AvroCodec
from shared.control import ControlReader
from shared.events import SchemaChange, SchemaOperationKind, Verdict
from shared.kafka import make_consumer, make_producer
from shared.registry import make_registry_client

NICKNAME = {"name": "nickname", "type": ["null", "string"], "default": None}
EMAIL = {"name": "email", "type": ["null", "string"], "default": None}


def customers(ns: str, *extra: dict[str, Any], visits: str = "long") -> dict[str, Any]:
    """The normalized change-record value schema of <ns>.customers, shaped as
    contracts/avro/change_record.v2.avsc."""
    row_fields = [
        {"name": "id", "type": "int"},
        {"name": "first_name", "type": "string"},
        {"name": "visits", "type": visits},
        *extra,
    ]
    return {
        "type": "record",
        "name": "CustomersChange",
        "namespace": f"io.icefjord.changes.{ns}",
        "icefjord.table": f"{ns}.customers",
        "icefjord.key": ["id"],
        "fields": [
            {
                "name": "op",
                "type": {
                    "type": "enum",
                    "name": "Operation",
                    "namespace": "io.icefjord",
                    "symbols": ["CREATE", "UPDATE", "DELETE", "READ", "TRUNCATE"],
                },
            },
            {"name": "position", "type": "string"},
            {"name": "source_ts_ms", "type": "long"},
            {"name": "tx_id", "type": ["null", "string"], "default": None},
            {"name": "source", "type": {"type": "map", "values": "string"}},
            {
                "name": "key",
                "type": {
                    "type": "record",
                    "name": "CustomersKey",
                    "fields": [{"name": "id", "type": "int"}],
                },
            },
            {
                "name": "after",
                "type": ["null", {"type": "record", "name": "CustomersRow", "fields": row_fields}],
                "default": None,
            },
        ],
    }


def schema_changes(stack: Stack, topic: str) -> list[SchemaChange]:
    """Every SchemaChange on ``topic``, read by an independent consumer up to the end."""
    consumer = make_consumer(stack.kafka, f"check-{uuid.uuid4().hex[:8]}")
    try:
        metadata = consumer.list_topics(topic, timeout=10).topics[topic]
        total = sum(
            consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10, cached=False)[1]
            for p in metadata.partitions
        )
        reader = ControlReader(consumer, AvroCodec(make_registry_client(stack.registry)), topic)
        reader.subscribe()
        events = []
        deadline = time.monotonic() + 30
        while len(events) < total and time.monotonic() < deadline:
            events.extend(reader.poll(timeout=1.0))
        # More than counted: published while reading (a watcher service runs alongside).
        assert len(events) >= total, "every message on the control topic must decode"
        assert reader.rejected == 0
        return [e.payload for e in events if isinstance(e.payload, SchemaChange)]
    finally:
        consumer.close()


def test_versions_are_announced_once_and_restarts_do_not_repeat_them(
    stack: Stack, topic_factory: Callable[..., str], unique: Callable[[str], str]
) -> None:
    ns = unique("ns")
    subject = f"icefjord.changes.{ns}.customers-value"
    control = topic_factory("control", partitions=3)
    registry = make_registry_client(stack.registry)

    def register(schema: dict[str, Any]) -> int:
        return int(registry.register_schema(subject, Schema(json.dumps(schema), "AVRO")))

    ids = [
        register(customers(ns)),
        register(customers(ns, NICKNAME)),
        register(customers(ns, NICKNAME, visits="int")),  # long -> int narrows: quarantine
    ]
    settings = WatcherSettings(
        kafka=stack.kafka,
        registry=stack.registry,
        control_topic=control,
        subject_pattern=rf"^icefjord\.changes\.{re.escape(ns)}\..+-value$",
        recovery_timeout_s=30,
    )

    def start() -> SchemaWatcher:
        """A fresh watcher with its own clients, as after a process restart."""
        return build_watcher(
            settings,
            producer=make_producer(stack.kafka),
            registry=make_registry_client(stack.registry),
            metrics=WatcherMetrics.create(CollectorRegistry()),
        )

    first = start()
    first.step()
    first.step()  # a second poll finds nothing new
    changes = schema_changes(stack, control)
    assert [(c.from_version, c.to_version, c.verdict) for c in changes] == [
        (None, 1, Verdict.APPLY),
        (1, 2, Verdict.APPLY),
        (2, 3, Verdict.QUARANTINE),
    ]
    assert [c.to_schema_id for c in changes] == ids
    assert {(c.table, c.subject) for c in changes} == {(f"{ns}.customers", subject)}
    assert [(op.kind, op.path) for op in changes[1].operations] == [
        (SchemaOperationKind.ADD_COLUMN, ("nickname",))
    ]
    assert changes[2].reason is not None and "visits" in changes[2].reason

    restarted = start()
    restarted.step()
    assert restarted.state is not None and restarted.state.announced(subject) == 3
    assert len(schema_changes(stack, control)) == 3

    ids.append(register(customers(ns, NICKNAME, EMAIL)))
    restarted.step()
    changes = schema_changes(stack, control)
    assert len(changes) == 4
    latest = changes[-1]
    # Planned from v2, the version the table has, not from the quarantined v3.
    assert (latest.from_version, latest.to_version, latest.verdict) == (2, 4, Verdict.APPLY)
    assert (latest.from_schema_id, latest.to_schema_id) == (ids[1], ids[3])
    assert [op.path for op in latest.operations] == [("email",)]


def test_the_service_announces_a_new_version_at_its_next_probe_not_its_next_poll(
    stack: Stack, topic_factory: Callable[..., str], unique: Callable[[str], str]
) -> None:
    ns = unique("ns")
    subject = f"icefjord.changes.{ns}.customers-value"
    control = topic_factory("control", partitions=3)
    registry = make_registry_client(stack.registry)

    def register(schema: dict[str, Any]) -> None:
        registry.register_schema(subject, Schema(json.dumps(schema), "AVRO"))

    def announced(count: int, within_s: float) -> None:
        deadline = time.monotonic() + within_s
        while len(schema_changes(stack, control)) < count:
            assert time.monotonic() < deadline, f"{count} changes not announced in {within_s} s"
            time.sleep(0.2)

    register(customers(ns))
    settings = WatcherSettings(
        kafka=stack.kafka,
        registry=stack.registry,
        control_topic=control,
        subject_pattern=rf"^icefjord\.changes\.{re.escape(ns)}\..+-value$",
        recovery_timeout_s=30,
        poll_interval_s=600,  # only the probe can start a second poll during the test
        probe_interval_s=0.1,
        metrics={"port": 0},
    )
    stop = threading.Event()
    service = threading.Thread(target=run, args=(settings, stop), daemon=True)
    service.start()
    try:
        announced(1, within_s=60)  # the first poll, at start
        register(customers(ns, NICKNAME))
        announced(2, within_s=20)
    finally:
        stop.set()
        service.join(30)
    assert not service.is_alive()
    changes = schema_changes(stack, control)
    assert [(c.from_version, c.to_version) for c in changes] == [(None, 1), (1, 2)]
