"""Writer instances sharing one table: three ``python -m services.iceberg_writer`` processes
in one consumer group on a 6-partition change topic of one table, with kill -9 of one while
the group rebalances and then of another, and one frozen (SIGSTOP) past its group session
with changes in hand and then let go, while changes flow.

Each instance commits the changes of the partitions Kafka assigns it, recording only those
partitions' offsets (``services/iceberg_writer/ownership.py``). The table must end equal to
the history of changes, with one row per key, and its history must show commits of more
than one instance; the group's committed offsets (for an autoscaler's lag) reach the end.
"""

from __future__ import annotations

import itertools
import json
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from changes_support import Event, assert_equal_to_model, change_schema, equal_to_model
from confluent_kafka import ConsumerGroupState, TopicPartition
from harness import Stack, free_port
from process_support import ServiceProcess, writer_env
from writer_support import producer_for

from shared.catalog import open_catalog
from shared.kafka import TopicRequest, ensure_topics, make_admin, make_consumer

pytestmark = [pytest.mark.timeout(1200), pytest.mark.production_layout]

PARTITIONS = 6
KEYS = 600
REBALANCING = (ConsumerGroupState.PREPARING_REBALANCING, ConsumerGroupState.COMPLETING_REBALANCING)


def _wait(check: Callable[[], bool], timeout_s: float, what: str) -> None:
    started = time.monotonic()
    while not check():
        assert time.monotonic() - started < timeout_s, what
        time.sleep(0.2)


def _sharing(admin: Any, group: str, members: int) -> Callable[[], bool]:
    """Whether ``members`` instances of the group each hold partitions, the group stable."""

    def check() -> bool:
        described = admin.describe_consumer_groups([group])[group].result(timeout=10)
        holding = [m for m in described.members if m.assignment.topic_partitions]
        return described.state == ConsumerGroupState.STABLE and len(holding) == members

    return check


def _writer_instances(stack: Stack, table: str) -> list[tuple[str, set[int]]]:
    """Per writer commit in the table's history, oldest first: its epoch and the
    partitions whose offsets it recorded."""
    loaded = open_catalog(stack.catalog).load_table(table)
    commits = []
    for snapshot in sorted(loaded.metadata.snapshots, key=lambda s: s.sequence_number):
        summary = snapshot.summary.additional_properties if snapshot.summary else {}
        if "icefjord.offsets" in summary:
            offsets = json.loads(summary["icefjord.offsets"])
            partitions = {int(k.rpartition(":")[2]) for k in offsets}
            commits.append((summary.get("icefjord.writer-epoch", ""), partitions))
    return commits


def test_writer_instances_share_a_table_through_kills_and_rebalances(
    stack: Stack, spark: Any, namespace: str, tmp_path: Path
) -> None:
    name = f"g_{uuid.uuid4().hex[:8]}"
    table = f"{namespace}.{name}"
    topic = f"icefjord.changes.{table}"
    admin = make_admin(stack.kafka)
    ensure_topics(admin, [TopicRequest(topic, PARTITIONS)])
    group = f"writers-{uuid.uuid4().hex[:8]}"
    instances = []
    for i in range(3):
        port = free_port()
        env = writer_env(stack, topic, group, port, warm_up="false", freshness_target_s="1")
        instances.append(ServiceProcess("services.iceberg_writer", f"w{i}", env, port, tmp_path))
    schema = change_schema(namespace, name)
    producer = producer_for(stack, topic)
    history: list[Event] = []
    seq = itertools.count(1)

    def send(op: str, keys: range, tag: str = "") -> None:
        events = [
            Event(next(seq), op, k, name=None if op == "DELETE" else f"{tag}{k}", amount="1.50")
            for k in keys
        ]
        for start in range(0, len(events), 50):
            producer.send(schema, events[start : start + 50])
            history.extend(events[start : start + 50])
            time.sleep(0.05)

    try:
        # The first instance alone makes the table and takes its first changes.
        instances[0].start()
        _wait(instances[0].ready, 240, "the first instance never ready")
        send("CREATE", range(1, KEYS + 1), "n")
        _wait(lambda: equal_to_model(spark, table, history), 240, "the first changes never arrived")

        # A second joins: the partitions are shared while changes flow.
        instances[1].start()
        send("UPDATE", range(1, KEYS + 1, 2), "a")
        _wait(instances[1].ready, 240, "the second instance never ready")
        _wait(_sharing(admin, group, 2), 120, "the two instances never shared the partitions")
        send("UPDATE", range(2, KEYS + 1, 2), "b")
        _wait(
            lambda: equal_to_model(spark, table, history), 240, "the shared changes never arrived"
        )
        epochs = {epoch for epoch, _ in _writer_instances(stack, table)}
        assert len(epochs) == 2, "both instances should have committed"

        # A third joins, and the first is killed while the group rebalances for it.
        instances[2].start()
        _wait(
            lambda: (
                admin.describe_consumer_groups([group])[group].result(timeout=10).state
                in REBALANCING
            ),
            240,
            "the group never rebalanced for the third instance",
        )
        instances[0].kill()
        send("UPDATE", range(1, KEYS + 1, 3), "c")
        send("DELETE", range(5, KEYS + 1, 7))
        _wait(instances[2].ready, 240, "the third instance never ready")
        send("CREATE", range(KEYS + 1, KEYS + 201), "d")

        # Then the second is killed in the middle of the stream.
        send("UPDATE", range(1, KEYS + 1, 4), "e")
        instances[1].kill()
        send("UPDATE", range(2, KEYS + 201, 5), "f")
        send("DELETE", range(3, KEYS + 1, 11))
        _wait(lambda: equal_to_model(spark, table, history), 300, "not every change arrived")

        # A zombie: the first comes back and shares the table; then the third stops
        # answering (SIGSTOP) with changes in hand, for longer than its group session, and
        # the first takes its partitions. Let go, it must not apply what it held again.
        instances[0].start()
        _wait(instances[0].ready, 240, "the first instance never ready again")
        _wait(_sharing(admin, group, 2), 120, "the two instances never shared the partitions")
        send("UPDATE", range(1, KEYS + 201, 2), "g")
        instances[2].freeze()
        send("UPDATE", range(2, KEYS + 201, 3), "h")
        _wait(_sharing(admin, group, 1), 120, "the group never gave up the frozen instance")
        send("DELETE", range(7, KEYS + 1, 13))
        _wait(lambda: equal_to_model(spark, table, history), 300, "the first never took over")
        instances[2].thaw()
        send("UPDATE", range(3, KEYS + 201, 4), "i")
        _wait(_sharing(admin, group, 2), 120, "the thawed instance never rejoined")
        send("UPDATE", range(1, KEYS + 201, 5), "j")
        _wait(lambda: equal_to_model(spark, table, history), 300, "not every change arrived after")
    finally:
        codes = [instance.stop() for instance in instances]

    assert_equal_to_model(spark, table, history)
    rows, keys = spark.sql(f"SELECT count(*), count(DISTINCT id) FROM icefjord.{table}").first()
    assert rows == keys, f"{rows - keys} duplicate rows"
    commits = _writer_instances(stack, table)
    shared = [parts for _, parts in commits if 0 < len(parts) < PARTITIONS]
    assert shared, "no commit recorded a share of the partitions"
    assert len({epoch for epoch, _ in commits}) >= 3
    # The surviving instance leaves the group's offsets where the table holds the changes.
    consumer = make_consumer(stack.kafka, group)
    try:
        committed = consumer.committed(
            [TopicPartition(topic, p) for p in range(PARTITIONS)], timeout=10
        )
        ends = [consumer.get_watermark_offsets(tp, timeout=10)[1] for tp in committed]
        assert [tp.offset for tp in committed] == ends
    finally:
        consumer.close()
    assert (codes[0], codes[2]) == (0, 0), (instances[0].tail(), instances[2].tail())
