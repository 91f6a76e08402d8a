"""iceberg-writer and a bulk load's copy, against the real Kafka, registry, Spark and catalog.

The copy is a Parquet file as the bulk loader writes it; the BulkLoad events go through the
real control topic. The writer must hold the table's changes until the copy is in, apply
them on top of it, and never append the copy twice.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from changes_support import Event, assert_equal_to_model, change_schema, control_events
from harness import Stack
from writer_support import (
    change_topic_in,
    producer_for,
    run_until_caught_up,
    start_writer,
    writer_settings,
)

from services.iceberg_writer.tables import BULK_LOAD_ID
from shared.avro import AvroCodec
from shared.control import ControlPublisher
from shared.events import BulkLoad, BulkLoadStatus, CommitDone, ControlEvent
from shared.kafka import TopicRequest, ensure_topics, make_admin, make_producer
from shared.registry import make_registry_client


@pytest.fixture
def change_topic(stack: Stack, namespace: str) -> Iterator[str]:
    with change_topic_in(stack, namespace, "bulk") as name:
        yield name


COPY_SEQ = 0  # a copy's rows carry the lowest position: every change applies over them


def publish(stack: Stack, topic: str, load: BulkLoad) -> None:
    ensure_topics(make_admin(stack.kafka), [TopicRequest(topic, 1)])
    publisher = ControlPublisher(
        make_producer(stack.kafka), AvroCodec(make_registry_client(stack.registry)), topic
    )
    publisher.publish(ControlEvent.new(load.table, load, "test"))
    publisher.flush()


def write_copy(path: Path, events: list[Event]) -> str:
    """The copy as the loader writes it: source columns only, values as Iceberg holds them."""
    rows = [e.row() for e in events]
    table = pa.table(
        {
            "id": pa.array([r["id"] for r in rows if r], pa.int64()),
            "name": pa.array([r["name"] for r in rows if r], pa.string()),
            "amount": pa.array([r["amount"] for r in rows if r], pa.decimal128(12, 2)),
            "updated_at": pa.array(
                [r["updated_at"] for r in rows if r], pa.timestamp("us", tz="UTC")
            ),
            "tags": pa.array([r["tags"] for r in rows if r], pa.list_(pa.string())),
        }
    )
    pq.write_table(table, path)
    return str(path)


def iceberg_count(spark: Any, table: str) -> int:
    try:
        return int(spark.sql(f"SELECT count(*) AS n FROM icefjord.{table}").collect()[0]["n"])
    except Exception:  # not created yet
        return 0


def test_changes_wait_for_the_copy_and_apply_over_it_once(
    stack: Stack, spark: Any, change_topic: str, tmp_path: Path
) -> None:
    table = change_topic.removeprefix("icefjord.changes.")
    schema = change_schema(*table.split("."))
    settings_ = writer_settings(stack, change_topic)
    load_id = f"load-{time.time_ns()}"
    planned = BulkLoad(
        load_id=load_id, table=table, status=BulkLoadStatus.PLANNED, requested_by="test"
    )
    publish(stack, settings_.control_topic, planned)
    writer = start_writer(settings_)
    # What capture emits while the copy is read: the snapshot's one row, changes the copy
    # already holds (replayed from before its snapshot) and changes after it.
    stream = [
        Event(5, "READ", 1, name="snapshot 1", amount="9.00"),
        Event(6, "CREATE", 7, name="copy 7", amount="1.50"),  # also in the copy
        Event(10, "UPDATE", 2, name="updated 2", amount="2.25"),
        Event(11, "DELETE", 3),
        Event(12, "CREATE", 500, name="new 500", amount="0.01"),
    ]
    producer = producer_for(stack, change_topic)
    producer.send(schema, stream)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        writer.step()
    state = writer.tables[table]
    assert state.bulk is not None and state.pending, "the changes must be held"
    assert iceberg_count(spark, table) == 0, "nothing may be committed before the copy"

    copy = [Event(COPY_SEQ, "READ", k, name=f"copy {k}", amount="1.50") for k in range(1, 101)]
    path = write_copy(tmp_path / "part-0.parquet", copy)
    ready = BulkLoad(
        load_id=load_id,
        table=table,
        status=BulkLoadStatus.READY,
        files=(path,),
        rows=len(copy),
        snapshot_ts_ms=int(time.time() * 1000),
        requested_by="test",
    )
    publish(stack, settings_.control_topic, ready)
    run_until_caught_up(writer)
    assert state.bulk is None
    assert_equal_to_model(spark, table, copy + stream)
    copied = spark.sql(
        f"SELECT record_count FROM icefjord.{table}.files "
        "WHERE content = 0 AND file_path LIKE '%/data/copy-%'"
    ).collect()
    # An empty unpartitioned table takes the copy as a data file of its own (copyfiles.py).
    assert [r["record_count"] for r in copied] == [len(copy)]
    assert not os.path.exists(path), "the writer removes a committed copy's files"
    summaries = [
        s["summary"] for s in spark.sql(f"SELECT summary FROM icefjord.{table}.snapshots").collect()
    ]
    assert sum(1 for s in summaries if s.get(BULK_LOAD_ID) == load_id) == 1
    done = [e for e in control_events(stack, settings_.control_topic) if isinstance(e, CommitDone)]
    assert any(e.inserted == len(copy) for e in done), "the copy's commit is announced"
    writer.close()

    # A restarted writer replays PLANNED and READY but finds the copy in the table.
    again = start_writer(settings_)
    later = [Event(20, "UPDATE", 4, name="later 4", amount="4.00")]
    producer.send(schema, later)
    run_until_caught_up(again)
    assert again.tables[table].bulk is None
    assert_equal_to_model(spark, table, copy + stream + later)
    again.close()


def test_an_abandoned_load_releases_the_held_changes(
    stack: Stack, spark: Any, change_topic: str
) -> None:
    table = change_topic.removeprefix("icefjord.changes.")
    schema = change_schema(*table.split("."))
    settings_ = writer_settings(stack, change_topic)
    load_id = f"load-{time.time_ns()}"
    publish(
        stack,
        settings_.control_topic,
        BulkLoad(load_id=load_id, table=table, status=BulkLoadStatus.PLANNED, requested_by="t"),
    )
    writer = start_writer(settings_)
    stream = [Event(i, "CREATE", i, name=f"row {i}", amount="1.00") for i in range(1, 11)]
    producer_for(stack, change_topic).send(schema, stream)
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        writer.step()
    assert iceberg_count(spark, table) == 0
    publish(
        stack,
        settings_.control_topic,
        BulkLoad(
            load_id=load_id,
            table=table,
            status=BulkLoadStatus.ABANDONED,
            reason="test",
            requested_by="t",
        ),
    )
    run_until_caught_up(writer)
    assert_equal_to_model(spark, table, stream)
    writer.close()
