"""The shared runtime against the real local Kafka and Apicurio registry."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable

from confluent_kafka import TopicPartition
from harness import Stack

from shared.avro import AvroCodec
from shared.control import ControlPublisher, ControlReader
from shared.events import (
    CommitDone,
    ControlEvent,
    OperatorCommand,
    OperatorCommandKind,
    TopicPartitionOffset,
)
from shared.kafka import (
    TopicRequest,
    ensure_topics,
    last_stable_offsets,
    make_admin,
    make_consumer,
    make_producer,
)
from shared.registry import make_registry_client


def test_codec_registers_once_and_decodes_by_id(stack: Stack, unique: Callable[[str], str]) -> None:
    codec = AvroCodec(make_registry_client(stack.registry))
    subject = f"{unique('codec')}-value"
    v1 = {"type": "record", "name": "R", "fields": [{"name": "id", "type": "long"}]}
    v2 = {
        "type": "record",
        "name": "R",
        "fields": [
            {"name": "id", "type": "long"},
            {"name": "note", "type": ["null", "string"], "default": None},
        ],
    }
    first = codec.serialize(subject, v1, {"id": 7})
    again = codec.serialize(subject, v1, {"id": 8})
    second = codec.serialize(subject, v2, {"id": 9, "note": "hi"})
    assert first[1:5] == again[1:5] != second[1:5]
    # A fresh codec (another process) resolves writer schemas through the registry.
    reader = AvroCodec(make_registry_client(stack.registry))
    assert reader.deserialize(first)[1] == {"id": 7}
    assert reader.deserialize(second)[1] == {"id": 9, "note": "hi"}
    versions = make_registry_client(stack.registry).get_versions(subject)
    assert len(versions) == 2


def test_control_events_round_trip_in_table_order(
    stack: Stack, topic_factory: Callable[..., str]
) -> None:
    topic = topic_factory("control", partitions=3)
    registry = make_registry_client(stack.registry)
    publisher = ControlPublisher(make_producer(stack.kafka), AvroCodec(registry), topic)
    sent = []
    for i in range(5):
        table = "inventory.orders" if i % 2 == 0 else "inventory.customers"
        payload = (
            OperatorCommand(
                command=OperatorCommandKind.PAUSE, table=table, reason="test", requested_by="t"
            )
            if i % 2
            else CommitDone(
                table=table,
                commit_id=f"c{i}",
                snapshot_id=i,
                writer_epoch=1,
                records=10,
                inserted=5,
                updated=3,
                deleted=2,
                data_files_added=1,
                delete_files_added=1,
                bytes_added=1024,
                watermark_ms=1_700_000_000_000,
                freshness_ms=1200,
                offsets=(TopicPartitionOffset(topic="t", partition=0, next_offset=i),),
                committed_at_ms=1_700_000_001_000,
                duration_ms=800,
            )
        )
        event = ControlEvent.new(table, payload, producer="test")
        publisher.publish(event)
        sent.append(event)
    publisher.flush()

    consumer = make_consumer(stack.kafka, f"g-{uuid.uuid4().hex[:8]}")
    reader = ControlReader(consumer, AvroCodec(registry), topic)
    reader.subscribe()
    received: list[ControlEvent] = []
    deadline = time.monotonic() + 30
    while len(received) < len(sent) and time.monotonic() < deadline:
        received.extend(reader.poll(timeout=1.0))
    consumer.close()
    assert sorted(received, key=lambda e: e.event_id) == sorted(sent, key=lambda e: e.event_id)
    for table in ("inventory.orders", "inventory.customers"):
        assert [e for e in received if e.table == table] == [e for e in sent if e.table == table]


def test_garbage_on_the_control_topic_is_skipped_not_fatal(
    stack: Stack, topic_factory: Callable[..., str]
) -> None:
    topic = topic_factory("control")
    registry = make_registry_client(stack.registry)
    producer = make_producer(stack.kafka)
    producer.produce(topic, key=b"x", value=b"not avro at all")
    publisher = ControlPublisher(producer, AvroCodec(registry), topic)
    good = ControlEvent.new(
        "a.b",
        OperatorCommand(
            command=OperatorCommandKind.FLUSH, table="a.b", reason=None, requested_by="t"
        ),
        producer="test",
    )
    publisher.publish(good)
    publisher.flush()
    consumer = make_consumer(stack.kafka, f"g-{uuid.uuid4().hex[:8]}")
    reader = ControlReader(consumer, AvroCodec(registry), topic)
    reader.subscribe()
    received: list[ControlEvent] = []
    deadline = time.monotonic() + 30
    while not received and time.monotonic() < deadline:
        received.extend(reader.poll(timeout=1.0))
    consumer.close()
    assert received == [good]
    assert reader.rejected == 1


def test_ensure_topics_is_idempotent(stack: Stack, unique: Callable[[str], str]) -> None:
    admin = make_admin(stack.kafka)
    name = unique("topic")
    request = TopicRequest(name, partitions=2, config={"cleanup.policy": "compact"})
    ensure_topics(admin, [request])
    ensure_topics(admin, [request])
    metadata = admin.list_topics(timeout=10)
    assert len(metadata.topics[name].partitions) == 2
    admin.delete_topics([name])[name].result()


def test_replication_is_capped_at_the_broker_count(
    stack: Stack, unique: Callable[[str], str]
) -> None:
    admin = make_admin(stack.kafka)
    brokers = len(admin.list_topics(timeout=10).brokers)
    name = unique("replicated")
    ensure_topics(
        admin,
        [TopicRequest(name, replication_factor=brokers + 2, config={"min.insync.replicas": "2"})],
    )
    deadline = time.monotonic() + 15
    topics = admin.list_topics(timeout=10).topics
    while name not in topics and time.monotonic() < deadline:  # metadata propagates async
        time.sleep(0.2)
        topics = admin.list_topics(timeout=10).topics
    assert len(topics[name].partitions[0].replicas) == brokers
    admin.delete_topics([name])[name].result()


def test_last_stable_offsets_end_before_an_open_transaction(
    stack: Stack, unique: Callable[[str], str]
) -> None:
    """Where a read_committed reader ends: after the committed records, before the records
    of a transaction still open; every partition in one answer."""
    admin = make_admin(stack.kafka)
    name = unique("stable")
    ensure_topics(admin, [TopicRequest(name, partitions=2)])
    plain = make_producer(stack.kafka)
    for _ in range(3):
        plain.produce(name, b"committed", partition=0)
    plain.flush(10)
    pending = make_producer(stack.kafka, **{"transactional.id": unique("tx")})
    pending.init_transactions(30)
    pending.begin_transaction()
    pending.produce(name, b"open", partition=0)
    pending.produce(name, b"open", partition=1)
    pending.flush(10)
    try:
        ends = last_stable_offsets(admin, [TopicPartition(name, 0), TopicPartition(name, 1)])
        assert ends == {(name, 0): 3, (name, 1): 0}
        pending.commit_transaction(30)
        # The coordinator writes the commit markers after it answers: poll for them.
        deadline = time.monotonic() + 15
        while ends != {(name, 0): 5, (name, 1): 2} and time.monotonic() < deadline:
            time.sleep(0.1)
            ends = last_stable_offsets(admin, [TopicPartition(name, 0), TopicPartition(name, 1)])
        assert ends == {(name, 0): 5, (name, 1): 2}  # each commit marker takes an offset
        assert last_stable_offsets(admin, []) == {}
    finally:
        admin.delete_topics([name])[name].result()
