"""The normalizer as a consumer group: two, then three instances as processes share a
6-partition Debezium topic; one is killed with SIGKILL while the group rebalances, another in
the middle of the stream, and each comes back under its own transactional id, as a
StatefulSet's pod does (deploy/k8s/base/cdc-normalizer.yaml). Every source record must then be
in the changes topic exactly once for a ``read_committed`` reader.

Then an instance alone is killed inside a transaction that wrote records (its last stable
offset below the high watermark), which holds every ``read_committed`` reader of those
partitions. The transaction timeout is 300 s here, so only the returning instance's fencing
(``init_transactions`` under the same id) can release them before it.
"""

from __future__ import annotations

import contextlib
import re
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    ConsumerGroupState,
    IsolationLevel,
    TopicPartition,
)
from confluent_kafka.admin import OffsetSpec
from debezium_support import json_envelope, json_key
from harness import Stack, free_port
from normalizer_support import COLUMNS, row
from process_support import ServiceProcess

from shared.avro import AvroCodec
from shared.kafka import (
    TopicRequest,
    ensure_topics,
    last_stable_offsets,
    make_admin,
    make_producer,
)
from shared.registry import make_registry_client

pytestmark = pytest.mark.timeout(900)

PARTITIONS = 6
WAVE = 1500  # source records per wave; three waves
TRANSACTION_TIMEOUT_S = 300


def _instance(index: int, env: dict[str, str], logs: Path) -> ServiceProcess:
    """Instance ``index`` of the group, under its own transactional id (a StatefulSet pod's)."""
    port = free_port()
    group = env["ICEFJORD_NORMALIZER_GROUP_ID"]
    own = {
        **env,
        "ICEFJORD_NORMALIZER_TRANSACTIONAL_ID": f"{group}-{index}",
        "ICEFJORD_NORMALIZER_METRICS__HOST": "127.0.0.1",
        "ICEFJORD_NORMALIZER_METRICS__PORT": str(port),
    }
    return ServiceProcess("services.cdc_normalizer", f"normalizer-{index}", own, port, logs)


def _wait(check: Callable[[], bool], timeout_s: float, what: str) -> None:
    started = time.monotonic()
    while not check():
        assert time.monotonic() - started < timeout_s, what
        time.sleep(0.05)


def _committed_ids(stack: Stack, topic: str) -> list[int]:
    """The row ids of every change a read_committed reader sees on ``topic`` now."""
    consumer = Consumer(
        stack.kafka.client_config()
        | {
            "group.id": f"reader-{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
            "enable.partition.eof": True,
        }
    )
    codec = AvroCodec(make_registry_client(stack.registry))
    try:
        metadata = consumer.list_topics(topic, timeout=10)
        if topic not in metadata.topics or metadata.topics[topic].error is not None:
            return []
        partitions = sorted(metadata.topics[topic].partitions)
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in partitions])
        ends: set[int] = set()
        ids: list[int] = []
        deadline = time.monotonic() + 30
        while len(ends) < len(partitions) and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is None:
                continue
            if message.error() is not None:
                ends.add(message.partition())
                continue
            value = codec.deserialize(message.value())[1]
            after = value["after"]
            ids.append(int((after[1] if isinstance(after, tuple) else after)["id"]))
        return ids
    finally:
        consumer.close()


def _group_state(admin: Any, group: str) -> Any:
    return admin.describe_consumer_groups([group])[group].result(timeout=10).state


def _open(admin: Any, topic: str) -> set[int]:
    """The partitions of ``topic`` where a transaction holds records not yet committed or
    aborted: its last stable offset is below its high watermark."""
    partitions = [TopicPartition(topic, p) for p in range(PARTITIONS)]
    stable = last_stable_offsets(admin, partitions)
    request = {TopicPartition(topic, p): OffsetSpec.latest() for p in range(PARTITIONS)}
    futures = admin.list_offsets(request, isolation_level=IsolationLevel.READ_UNCOMMITTED)
    high = {tp.partition: future.result().offset for tp, future in futures.items()}
    return {p for (_, p), offset in stable.items() if offset < high[p]}


@pytest.fixture
def source(stack: Stack, unique: Callable[[str], str]) -> Iterator[tuple[str, str]]:
    topic = f"{unique('shop')}.inventory.customers"
    table = unique("customers")
    admin = make_admin(stack.kafka)
    ensure_topics(admin, [TopicRequest(topic, PARTITIONS)])
    yield topic, table
    output = f"icefjord.changes.inventory.{table}"
    for future in admin.delete_topics([topic, output]).values():
        with contextlib.suppress(Exception):
            future.result()


def _produce(stack: Stack, topic: str, table: str, ids: range) -> None:
    producer = make_producer(stack.kafka)
    for i in ids:
        value = json_envelope(
            "shop.inventory.customers",
            COLUMNS,
            table,
            "c",
            None,
            row(i, f"c{i}@example.com", i, 19_000 + i % 300),
            1_000 + i,
        )
        producer.produce(topic, key=json_key("shop.inventory.customers", i), value=value)
        if i % 500 == 0:
            producer.poll(0)
    assert producer.flush(30) == 0


def test_a_group_of_normalizers_loses_and_repeats_nothing_through_kills_and_rebalances(
    stack: Stack, source: tuple[str, str], tmp_path: Path
) -> None:
    topic, table = source
    output = f"icefjord.changes.inventory.{table}"
    group = f"normalizer-{uuid.uuid4().hex[:8]}"
    env = {
        "ICEFJORD_NORMALIZER_KAFKA": stack.kafka.model_dump_json(),
        "ICEFJORD_NORMALIZER_REGISTRY": stack.registry.model_dump_json(),
        "ICEFJORD_NORMALIZER_INCLUDE_PATTERN": f"^{re.escape(topic)}$",
        "ICEFJORD_NORMALIZER_GROUP_ID": group,
        "ICEFJORD_NORMALIZER_DEAD_LETTER_TOPIC": f"deadletter-{group}",
        "ICEFJORD_NORMALIZER_TOPIC_REPLICATION_FACTOR": "1",
        "ICEFJORD_NORMALIZER_OUTPUT_PARTITIONS": str(PARTITIONS),
        "ICEFJORD_NORMALIZER_POLL_TIMEOUT_S": "0.5",
        # Small transactions, so that a kill nearly always lands inside one.
        "ICEFJORD_NORMALIZER_BATCH_SIZE": "100",
        "ICEFJORD_NORMALIZER_TRANSACTION_TIMEOUT_MS": str(TRANSACTION_TIMEOUT_S * 1000),
        "ICEFJORD_NORMALIZER_LOG_FORMAT": "console",
    }
    instances = [_instance(i, env, tmp_path) for i in range(3)]
    _produce(stack, topic, table, range(0, WAVE))
    try:
        for instance in instances[:2]:
            instance.start()
        _wait(lambda: all(i.ready() for i in instances[:2]), 120, "two instances never ready")
        _wait(lambda: len(_committed_ids(stack, output)) >= WAVE // 3, 120, "no output")

        # A third instance joins; the second is killed while the group rebalances.
        admin = make_admin(stack.kafka)
        instances[2].start()
        _wait(
            lambda: (
                _group_state(admin, group)
                in (
                    ConsumerGroupState.PREPARING_REBALANCING,
                    ConsumerGroupState.COMPLETING_REBALANCING,
                )
            ),
            120,
            "the group never rebalanced for the third instance",
        )
        instances[1].kill()
        _produce(stack, topic, table, range(WAVE, 2 * WAVE))
        time.sleep(2)
        instances[1].start()  # back under its transactional id, as a StatefulSet pod
        _wait(lambda: all(i.ready() for i in instances), 120, "three instances never ready")

        # The first is killed in the middle of the stream, and comes back.
        _produce(stack, topic, table, range(2 * WAVE, 3 * WAVE))
        time.sleep(1)
        instances[0].kill()
        instances[0].start()
        seen: list[int] = []

        def visible(count: int) -> Callable[[], bool]:
            def check() -> bool:
                seen[:] = _committed_ids(stack, output)
                return len(set(seen)) >= count

            return check

        _wait(visible(3 * WAVE), 240, "not every change became visible")
        assert sorted(seen) == list(range(3 * WAVE)), "a change was lost or repeated"

        # Alone, the first instance is killed inside a transaction that wrote records: a
        # read_committed reader is held at it. Back under its id, the instance aborts it.
        for instance in instances[1:]:
            assert instance.stop() == 0, instance.tail()
        produced = 3 * WAVE
        held: set[int] = set()
        for _attempt in range(5):
            _produce(stack, topic, table, range(produced, produced + 4 * WAVE))
            produced += 4 * WAVE
            _wait(lambda: bool(_open(admin, output)), 120, "no transaction ever open")
            instances[0].kill()
            time.sleep(3)
            held = _open(admin, output)
            if held:
                break
            instances[0].start()  # the kill came between two transactions: again
            _wait(instances[0].ready, 120, "the first instance never ready")
        assert held, "no kill in five landed inside a transaction"
        instances[0].start()
        back = time.monotonic()
        _wait(lambda: not _open(admin, output), TRANSACTION_TIMEOUT_S - 60, "still held")
        released = time.monotonic() - back
        _wait(visible(produced), 240, "not every change became visible")
        print(f"partitions {sorted(held)} held until {released:.1f} s after the return")
    finally:
        codes = [instance.stop() for instance in instances]
    assert sorted(seen) == list(range(produced)), "a change was lost or repeated"
    assert all(code in (0, None) for code in codes), (codes, [i.tail() for i in instances])
