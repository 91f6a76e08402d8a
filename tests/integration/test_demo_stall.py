"""The demo's stall report against the real broker and catalog: what each stage has not yet
read, from the normalizer group's committed offsets and the tables' checkpoints."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable

import pyarrow as pa
import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from harness import Stack

from icefjord.demo.stall import stall_report
from services.iceberg_writer.tables import OFFSETS, encode_offsets
from shared.catalog import open_catalog


def _produce(stack: Stack, topic: str, counts: dict[int, int]) -> None:
    producer = Producer(stack.kafka.client_config())
    for partition, n in counts.items():
        for i in range(n):
            producer.produce(topic, value=f"r{i}".encode(), partition=partition)
    assert producer.flush(15) == 0


def test_report_counts_what_each_stage_has_not_read(
    stack: Stack, topic_factory: Callable[..., str], namespace: str
) -> None:
    prefix = f"src{uuid.uuid4().hex[:6]}"
    source = topic_factory(f"{prefix}.s", partitions=2)
    changes = topic_factory("changes", partitions=2)
    _produce(stack, source, {0: 5, 1: 2})
    _produce(stack, changes, {0: 4, 1: 3})

    group = f"norm-{uuid.uuid4().hex[:6]}"
    consumer = Consumer(stack.kafka.client_config() | {"group.id": group})
    deadline = time.monotonic() + 30
    while True:  # on a fresh broker the offsets topic may still be loading
        try:
            consumer.commit(offsets=[TopicPartition(source, 0, 2)], asynchronous=False)
            break
        except KafkaException:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)
    consumer.close()

    # One table has a checkpoint at offsets 4 and 1; another has none: all of its topic.
    catalog = open_catalog(stack.catalog)
    table = catalog.create_table(f"{namespace}.t", pa.schema([("id", pa.int64())]))
    table.append(
        pa.table({"id": [1]}, schema=pa.schema([("id", pa.int64())])),
        snapshot_properties={OFFSETS: encode_offsets({(changes, 0): 4, (changes, 1): 1})},
    )
    other = topic_factory("changes", partitions=1)
    _produce(stack, other, {0: 6})

    lines = stall_report(
        stack.kafka,
        catalog,
        source_pattern=rf"^{prefix}\.",
        normalizer_group=group,
        writer_group=f"writer-{uuid.uuid4().hex[:6]}",
        tables={f"{namespace}.t": changes, f"{namespace}.missing": other},
    )

    normalizer, writer = lines
    # p0: 5 - 2 committed; p1: 2, nothing committed.
    assert f"normalizer (group {group} EMPTY, 0 members): unread: {source} 5" == normalizer
    # changes: p0 4 - 4, p1 3 - 1; other: 6, no table.
    expected = ", ".join(f"{t} {n}" for t, n in sorted({changes: 2, other: 6}.items()))
    assert writer.endswith(f"past the tables' checkpoints: {expected}"), writer


def test_the_demo_asks_the_services_groups_by_their_settings(stack: Stack) -> None:
    """``where_stalled`` names the groups the services would use: their defaults here, or
    what a service's environment sets."""
    from icefjord.demo.run import where_stalled
    from icefjord.local.services import service_processes

    if stack.local is None:
        pytest.skip("needs the session's own stack")
    settings = stack.local.settings
    services = service_processes(
        settings,
        ("normalizer",),
        extra_env={"normalizer": {"ICEFJORD_NORMALIZER_GROUP_ID": "norm-from-env"}},
    )
    catalog = open_catalog(stack.catalog)
    lines = where_stalled(settings, object(), services, ["ns_absent.t"], catalog)  # type: ignore[arg-type]
    assert lines[0].startswith("normalizer (group norm-from-env "), lines
    assert lines[1].startswith("writer (group icefjord-writer "), lines
    assert lines[1].endswith("nothing past the tables' checkpoints"), lines
