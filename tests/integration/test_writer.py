"""iceberg-writer against the real Kafka, registry, Spark and Iceberg catalog, in process."""

from __future__ import annotations

import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from decimal import Decimal
from typing import Any

import pytest
from changes_support import (
    Event,
    assert_equal_to_model,
    assert_readable_by_pyiceberg,
    change_schema,
    control_events,
    table_rows,
)
from harness import LostOnce, Stack
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from writer_support import (
    change_topic_in,
    producer_for,
    publish_schema_change,
    run_until_caught_up,
    start_writer,
    writer_settings,
)

from icefjord.bench.writer import bench_new_tables
from services.iceberg_writer.admission import WAIT
from services.iceberg_writer.batching import BatchClock
from services.iceberg_writer.state import TableState
from services.iceberg_writer.tables import SCHEMA_VERSION_PROPERTY, FencedError
from services.iceberg_writer.writer import Writer
from shared.avro import AvroCodec
from shared.events import CommitDone, SchemaChange, SchemaOperation, SchemaOperationKind, Verdict
from shared.kafka import TopicRequest, ensure_topics, make_admin
from shared.registry import make_registry_client

POSITION = "_icefjord_position"


@pytest.fixture
def change_topic(stack: Stack, namespace: str) -> Iterator[str]:
    with change_topic_in(stack, namespace, "items") as name:
        yield name


@st.composite
def histories(draw: st.DrawFn) -> tuple[list[Event], list[Event]]:
    """A source history over a few keys and its delivery with Debezium-style replays.

    A replay re-delivers a run of earlier changes, in order, from some point up to where it
    happens (what a connector restart from an older offset does); replayed changes are stale
    when they arrive. Some updates leave columns unchanged (:attr:`Event.unchanged`).
    """
    keys = draw(st.integers(2, 12))
    steps = draw(st.integers(1, 120))
    live: set[int] = set()
    history: list[Event] = []
    for seq in range(1, steps + 1):
        key = draw(st.integers(0, keys - 1))
        if draw(st.integers(0, 60)) == 0:
            history.append(Event(seq, "TRUNCATE", 0))
            live.clear()
            continue
        if key in live:
            op = draw(st.sampled_from(["UPDATE", "UPDATE", "DELETE"]))
        else:
            op = draw(st.sampled_from(["CREATE", "READ"]))
        amount = draw(st.none() | st.decimals(-1000, 1000, places=2).map(str))
        # An update may leave columns unchanged (unchanged TOASTed values): the stored ones stay.
        unchanged: tuple[str, ...] = ()
        if op == "UPDATE":
            unchanged = tuple(
                draw(st.lists(st.sampled_from(["name", "amount"]), unique=True, max_size=2))
            )
        history.append(Event(seq, op, key, name=f"n{seq}-ü", amount=amount, unchanged=unchanged))
        if op == "DELETE":
            live.discard(key)
        else:
            live.add(key)
    delivery = list(history)
    for _ in range(draw(st.integers(0, 3))):
        end = draw(st.integers(0, len(history)))
        start = draw(st.integers(0, end))
        at = draw(st.integers(0, len(delivery)))
        # Insert the replay after the end point was delivered, so its changes are stale.
        at = max(at, delivery.index(history[end - 1]) + 1) if end else at
        delivery[at:at] = history[start:end]
    return history, delivery


@settings(max_examples=4, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=histories())
def test_random_histories_end_equal_to_the_model(
    stack: Stack, spark: Any, namespace: str, data: tuple[list[Event], list[Event]]
) -> None:
    history, delivery = data
    admin = make_admin(stack.kafka)
    topic = f"icefjord.changes.{namespace}.h_{uuid.uuid4().hex[:8]}"
    ensure_topics(admin, [TopicRequest(topic, 3)])
    table = topic.removeprefix("icefjord.changes.")
    schema = change_schema(namespace, table.split(".")[1])
    producer = producer_for(stack, topic)
    writer = start_writer(writer_settings(stack, topic))
    half = len(delivery) // 2
    producer.send(schema, delivery[:half])
    run_until_caught_up(writer)
    producer.send(schema, delivery[half:])
    run_until_caught_up(writer)
    assert_equal_to_model(spark, table, history)


def test_partial_updates_keep_the_stored_values_of_unchanged_columns(
    stack: Stack, spark: Any, change_topic: str
) -> None:
    """Updates that leave columns unchanged (Debezium's placeholder for an unchanged TOASTed
    value, under PostgreSQL's default replica identity) keep the stored values: alone in a
    commit (the MERGE reads the stored row), and after a whole update of the same key in the
    same batch (that update's values)."""
    table = change_topic.removeprefix("icefjord.changes.")
    schema = change_schema(*table.split("."))
    producer = producer_for(stack, change_topic)
    writer = start_writer(writer_settings(stack, change_topic))
    producer.send(
        schema,
        [
            Event(1, "CREATE", 1, name="stored-1", amount="1.00"),
            Event(2, "CREATE", 2, name="stored-2", amount="2.00"),
        ],
    )
    run_until_caught_up(writer)
    history = [
        Event(1, "CREATE", 1, name="stored-1", amount="1.00"),
        Event(2, "CREATE", 2, name="stored-2", amount="2.00"),
        Event(3, "UPDATE", 1, amount="3.00", unchanged=("name",)),
        Event(4, "UPDATE", 2, name="whole-2", amount="4.00"),
        Event(5, "UPDATE", 2, amount=None, unchanged=("name", "amount")),
    ]
    producer.send(schema, history[2:])
    run_until_caught_up(writer)
    rows = table_rows(spark, table)
    assert (rows[1]["name"], rows[1]["amount"]) == ("stored-1", Decimal("3.00"))
    assert (rows[2]["name"], rows[2]["amount"]) == ("whole-2", Decimal("4.00"))
    assert_equal_to_model(spark, table, history)


def test_commit_carries_offsets_and_publishes_commit_done(
    stack: Stack, spark: Any, change_topic: str
) -> None:
    table = change_topic.removeprefix("icefjord.changes.")
    schema = change_schema(*table.split("."))
    settings_ = writer_settings(stack, change_topic)
    writer = start_writer(settings_)
    history = [Event(i, "READ", i, name=f"r{i}", amount="1.50") for i in range(1, 201)]
    producer_for(stack, change_topic).send(schema, history)
    run_until_caught_up(writer)
    assert_equal_to_model(spark, table, history)
    # The table records the registry version of the schema it was created from.
    registered = make_registry_client(stack.registry).get_latest_version(f"{change_topic}-value")
    properties = spark.sql(f"SHOW TBLPROPERTIES icefjord.{table}").collect()
    assert {r["key"]: r["value"] for r in properties}["icefjord.schema.version"] == str(
        registered.version
    )
    snapshots = spark.sql(
        f"SELECT committed_at, operation, summary FROM icefjord.{table}.snapshots"
    ).collect()
    data_commits = sorted(
        (s for s in snapshots if "icefjord.offsets" in s["summary"]),
        key=lambda s: s["committed_at"],
    )
    assert data_commits, "no commit carries offsets"
    # The first batch goes into the empty table as a plain append. When the 200 reads reach
    # the writer in more than one batch, the later ones are newer than every stored row:
    # upserts (rows, and deletion vectors of the stored rows), never the MERGE.
    assert data_commits[0]["operation"] == "append", "the first batch must append"
    assert {path for path, n in commits_by_path(writer, table).items() if n} <= {"append", "upsert"}
    events = control_events(stack, settings_.control_topic)
    done = {e.commit_id for e in events if isinstance(e, CommitDone)}
    assert {s["summary"]["icefjord.commit-id"] for s in data_commits} <= done
    # Updates and deletes, and a replay of an earlier change of one of their keys (dropped
    # within the batch, which keeps the latest change of each key).
    later = [Event(300 + i, "UPDATE", i, name=f"u{i}") for i in range(1, 51)]
    later += [Event(400 + i, "DELETE", i) for i in range(51, 61)]
    stale = [Event(5, "UPDATE", 5, name="stale")]
    producer_for(stack, change_topic).send(schema, later + stale)
    run_until_caught_up(writer)
    assert_equal_to_model(spark, table, history + later + stale)
    # Changes newer than every stored row go in without a join: deletion vectors of their
    # keys' stored rows plus their rows. A replay after them still changes nothing.
    newer = [Event(500 + i, "UPDATE", i, name=f"v{i}") for i in range(1, 31)]
    newer += [Event(600 + i, "DELETE", i) for i in range(31, 41)]
    newer += [Event(700 + i, "CREATE", i, name=f"c{i}") for i in range(51, 56)]
    producer_for(stack, change_topic).send(schema, newer)
    run_until_caught_up(writer)
    assert commits_by_path(writer, table).get("upsert", 0) >= 1
    assert commits_by_path(writer, table).get("merge", 0) == 0
    replay = [Event(510, "UPDATE", 10, name="v10"), Event(400, "UPDATE", 20, name="replayed")]
    producer_for(stack, change_topic).send(schema, replay)
    run_until_caught_up(writer)
    assert commits_by_path(writer, table).get("merge", 0) >= 1  # older than a stored row
    assert_equal_to_model(spark, table, history + later + stale + newer + replay)
    # Every CommitDone names the path of its commit (the maintainer's boost goes by it).
    reported = Counter(
        e.write_path
        for e in control_events(stack, settings_.control_topic)
        if isinstance(e, CommitDone) and e.table == table
    )
    assert reported == Counter(commits_by_path(writer, table))
    kinds = spark.sql(f"SELECT content, file_format FROM icefjord.{table}.delete_files").collect()
    assert kinds, "the upserts deleted nothing"
    # Position deletes (format v2, the default): no equality delete for any engine to refuse.
    assert {(r["content"], r["file_format"]) for r in kinds} == {(1, "PARQUET")}
    assert_readable_by_pyiceberg(stack, spark, table)
    # A clean stop leaves the group, so a successor is not kept waiting for this member.
    assert writer._data.assignment()
    writer.close()
    admin = make_admin(stack.kafka)
    group = admin.describe_consumer_groups([settings_.group_id])[settings_.group_id].result(30)
    assert group.members == []


@pytest.mark.parametrize("partitioned", [False, True], ids=["unpartitioned", "partitioned"])
def test_a_new_tables_first_rows_are_appended_by_arrow_where_the_table_allows(
    stack: Stack, spark: Any, change_topic: str, partitioned: bool
) -> None:
    table = change_topic.removeprefix("icefjord.changes.")
    schema = change_schema(*table.split("."))
    # A batch waits 2 s for its records, so all of them make the one batch the test is about
    # even when the partitions' fetches reach a busy writer apart (CI saw a second batch,
    # which a partitioned table rightly merges).
    overrides: dict[str, Any] = {"min_batch_s": 2.0}
    if partitioned:
        overrides["tables"] = {table: {"partition_by": ["bucket(4, id)"]}}
    writer = start_writer(writer_settings(stack, change_topic, **overrides))
    # One batch into the empty table: created, updated and deleted keys (a deleted key's
    # row must not go in).
    history = [Event(i, "CREATE", i, name=f"n{i}-ü", amount="2.25") for i in range(1, 101)]
    history += [Event(200, "UPDATE", 3, name="u3"), Event(201, "DELETE", 7)]
    producer_for(stack, change_topic).send(schema, history)
    run_until_caught_up(writer)
    assert_equal_to_model(spark, table, history)
    assert commits_by_path(writer, table) == {"append": 1.0}
    files = spark.sql(f"SELECT file_path FROM icefjord.{table}.files").collect()
    names = [r["file_path"].rsplit("/", 1)[-1] for r in files]
    assert names
    deletes = spark.sql(f"SELECT * FROM icefjord.{table}.delete_files").collect()
    assert deletes == []
    # Written by Arrow and committed through Iceberg's Java API: one file per partition.
    assert all(name.startswith("append-") for name in names)
    if partitioned:
        buckets = spark.sql(f"SELECT DISTINCT partition FROM icefjord.{table}.files").collect()
        assert len(names) == len(buckets) > 1
    else:
        assert len(names) == 1


@pytest.mark.parametrize(
    ("spec", "version"),
    [("bucket(4, id)", 2), ("truncate(2, name)", 2), ("truncate(2, name)", 3)],
    ids=["partitioned-by-key", "partitioned-by-value", "partitioned-by-value-v3"],
)
def test_partitioned_tables_take_the_upsert_path_and_end_equal_to_the_model(
    stack: Stack, spark: Any, change_topic: str, spec: str, version: int
) -> None:
    """Partitioned tables commit without a join too. Each delete file is in the spec and
    partition of the data file it deletes from: partitioned by a value an update changes
    (the names here move every row to another partition), the old row is deleted where it
    was, and the new one lands in its new partition. Format v2 (the default) gets position
    delete files, a table that asks for v3 deletion vectors."""
    table = change_topic.removeprefix("icefjord.changes.")
    schema = change_schema(*table.split("."))
    layout = {"partition_by": [spec], "properties": {"format-version": str(version)}}
    overrides: dict[str, Any] = {"tables": {table: layout}}
    writer = start_writer(writer_settings(stack, change_topic, **overrides))
    producer = producer_for(stack, change_topic)
    history = [Event(i, "CREATE", i, name=f"a{i}", amount="1.00") for i in range(1, 61)]
    producer.send(schema, history)
    run_until_caught_up(writer)
    later = [Event(100 + i, "UPDATE", i, name=f"b{i}", amount="2.00") for i in range(1, 61)]
    later += [Event(200 + i, "DELETE", i) for i in range(1, 11)]
    later += [Event(300 + i, "UPDATE", i, name=f"c{i}", amount="3.00") for i in range(20, 31)]
    for event in later:  # in three batches
        producer.send(schema, [event])
        if event.seq in (160, 210):
            run_until_caught_up(writer)
    run_until_caught_up(writer)
    history += later
    assert_equal_to_model(spark, table, history)
    assert_readable_by_pyiceberg(stack, spark, table)
    assert commits_by_path(writer, table).get("upsert", 0) >= 1
    kinds = spark.sql(f"SELECT content, file_format FROM icefjord.{table}.delete_files").collect()
    kind = "PARQUET" if version == 2 else "PUFFIN"
    assert {(k["content"], k["file_format"]) for k in kinds} == {(1, kind)}
    # A position delete file may cover several data files of its partition (it then names
    # none as its referenced file), so each deleted position is checked against its file.
    deleted = spark.sql(
        f"""SELECT p.spec_id = f.spec_id AND p.partition = f.partition AS beside
            FROM icefjord.{table}.position_deletes p
            LEFT JOIN icefjord.{table}.data_files f ON p.file_path = f.file_path"""
    ).collect()
    assert deleted
    assert all(d["beside"] for d in deleted), "a delete outside its data file's partition"


def test_the_new_tables_benchmark_times_a_burst_and_checks_every_table(stack: Stack) -> None:
    settings_ = writer_settings(stack, "icefjord.changes.unused.none")
    result = bench_new_tables(settings_, tables=3, rows=5)  # raises if a table lacks rows
    assert (result.tables, result.rows) == (3, 5)
    assert 0 < result.seconds < 60


def test_a_writer_with_an_older_epoch_is_fenced(
    stack: Stack, spark: Any, change_topic: str
) -> None:
    table = change_topic.removeprefix("icefjord.changes.")
    schema = change_schema(*table.split("."))
    old = start_writer(writer_settings(stack, change_topic, epoch=5))
    producer = producer_for(stack, change_topic)
    producer.send(schema, [Event(1, "CREATE", 1, name="a")])
    run_until_caught_up(old)
    new = start_writer(writer_settings(stack, change_topic, epoch=9))
    producer.send(schema, [Event(2, "UPDATE", 1, name="b")])
    run_until_caught_up(new)
    producer.send(schema, [Event(3, "UPDATE", 1, name="c")])
    with pytest.raises(FencedError):
        run_until_caught_up(old, timeout_s=60)
    assert table_rows(spark, table)[1]["name"] == "b"


def test_schema_change_waits_applies_and_quarantines(
    stack: Stack, spark: Any, change_topic: str, unique: Callable[[str], str]
) -> None:
    ns, name = change_topic.removeprefix("icefjord.changes.").split(".")
    table = f"{ns}.{name}"
    v1 = change_schema(ns, name)
    extra = {"name": "note", "type": ["null", "string"], "default": None}
    v2 = change_schema(ns, name, [extra])
    settings_ = writer_settings(stack, change_topic, schema_wait_s=60)
    writer = start_writer(settings_)
    producer = producer_for(stack, change_topic)
    producer.send(v1, [Event(i, "CREATE", i, name=f"v1-{i}") for i in range(1, 6)])
    run_until_caught_up(writer)
    producer.send(
        v2, [Event(10 + i, "UPDATE", i, name=f"v2-{i}") for i in range(1, 4)], extra={"note": "hi"}
    )
    for _ in range(30):
        writer.step()
    state = writer.tables[table]
    assert state.waits, "rows of an unannounced version must wait"
    assert "note" not in table_rows(spark, table)[1]
    codec = AvroCodec(make_registry_client(stack.registry))
    v2_id = codec.register(f"{change_topic}-value", v2)
    v1_id = codec.register(f"{change_topic}-value", v1)
    publish_schema_change(
        stack,
        settings_.control_topic,
        SchemaChange(
            table=table,
            subject=f"{change_topic}-value",
            from_version=1,
            to_version=2,
            from_schema_id=v1_id,
            to_schema_id=v2_id,
            operations=(
                SchemaOperation(
                    kind=SchemaOperationKind.ADD_COLUMN,
                    path=("note",),
                    type_json='["null", "string"]',
                ),
            ),
            verdict=Verdict.APPLY,
        ),
    )
    run_until_caught_up(writer)
    rows = table_rows(spark, table)
    assert rows[1]["note"] == "hi" and rows[1]["name"] == "v2-1"
    assert rows[5]["note"] is None and rows[5]["name"] == "v1-5"


def test_a_table_found_made_keeps_its_version_and_newer_rows_wait_for_their_plan(
    stack: Stack, change_topic: str
) -> None:
    """A writer that meets a record of a newer version for a table it holds no state of (made
    by another writer meanwhile, or its own load failed) finds the table as it is: the
    version is not stamped on it without its columns, and the rows wait for their plan."""
    ns, name = change_topic.removeprefix("icefjord.changes.").split(".")
    table = f"{ns}.{name}"
    v1 = change_schema(ns, name)
    v2 = change_schema(ns, name, [{"name": "note", "type": ["null", "string"], "default": None}])
    writer = start_writer(writer_settings(stack, change_topic))
    producer_for(stack, change_topic).send(v1, [Event(1, "CREATE", 1, name="v1")])
    run_until_caught_up(writer)
    v2_id = AvroCodec(make_registry_client(stack.registry)).register(f"{change_topic}-value", v2)
    fresh = TableState(name=table, topic=change_topic, clock=BatchClock(5.0, 0.2, 1000))
    assert writer.admission.admit(fresh, v2_id, change_topic) == WAIT
    assert fresh.table is not None
    assert fresh.table.properties[SCHEMA_VERSION_PROPERTY] == "1"
    assert fresh.current_version == 1 and v2_id not in fresh.applied_ids
    assert "note" not in [f.name for f in fresh.table.schema().fields]


def commits_by_path(writer: Writer, table: str) -> dict[str, float]:
    return {
        sample.labels["path"]: sample.value
        for metric in writer.metrics.commits.collect()
        for sample in metric.samples
        if sample.name.endswith("_total") and sample.labels["table"] == table
    }


def test_a_restarted_writer_upserts_from_its_partitions_recorded_bounds(
    stack: Stack, spark: Any, change_topic: str
) -> None:
    """Each commit records its partitions' position bounds (bounds.py), and a writer that
    takes partitions over starts from them rather than from the table's highest position:
    changes of a partition whose rows are all older than another partition's newest row
    take the upsert path, not the MERGE (which a second instance sharing the table would
    otherwise take for every batch behind the other's positions)."""
    table = change_topic.removeprefix("icefjord.changes.")
    schema = change_schema(*table.split("."))
    settings_ = writer_settings(stack, change_topic)
    producer = producer_for(stack, change_topic)
    older = [Event(i, "CREATE", i, name=f"a{i}") for i in range(1, 11)]
    newer = [Event(100 + i, "CREATE", 100 + i, name=f"a{100 + i}") for i in range(1, 11)]
    producer.send(schema, older, partition=0)
    producer.send(schema, newer, partition=1)
    writer = start_writer(settings_)
    run_until_caught_up(writer)
    writer.close()
    # Newer than partition 0's rows, older than the table's newest (partition 1's).
    later = [Event(50 + i, "UPDATE", i, name=f"b{i}") for i in range(1, 11)]
    producer.send(schema, later, partition=0)
    restarted = start_writer(settings_)
    run_until_caught_up(restarted)
    assert_equal_to_model(spark, table, older + newer + later)
    paths = commits_by_path(restarted, table)
    assert paths.get("upsert", 0) >= 1 and paths.get("merge", 0) == 0, paths
    restarted.close()


def test_snapshot_reads_into_a_table_with_rows_insert_only_the_missing_keys(
    stack: Stack, spark: Any, change_topic: str
) -> None:
    from services.iceberg_writer.tables import position_floor
    from shared.catalog import open_catalog

    table = change_topic.removeprefix("icefjord.changes.")
    schema = change_schema(*table.split("."))
    # Each send lands in one batch: split, the older reads' second batch would meet the
    # first one's rows (now the oldest stored) and rightly take the MERGE path.
    writer = start_writer(writer_settings(stack, change_topic, insert_path=True, min_batch_s=2.0))
    producer = producer_for(stack, change_topic)
    stored = [Event(1000 + k, "READ", k, name=f"stored {k}") for k in range(1, 101)]
    producer.send(schema, stored)
    run_until_caught_up(writer)
    # Full bounds on the position column: the floor is the oldest stored position itself.
    floor = position_floor(open_catalog(stack.catalog).load_table(table), POSITION)
    assert floor == stored[0].position
    # Reads older than every stored row: keys 51-100 keep their newer rows, 101-150 go in.
    older = [Event(k - 50, "READ", k, name=f"older {k}") for k in range(51, 151)]
    producer.send(schema, older)
    run_until_caught_up(writer)
    assert_equal_to_model(spark, table, stored + older)
    assert commits_by_path(writer, table).get("insert", 0) >= 1
    deletes = spark.sql(f"SELECT count(*) AS n FROM icefjord.{table}.delete_files").collect()
    assert deletes[0]["n"] == 0
    # A newer read of a stored key is not insert-only: it must overwrite the row.
    newer = [Event(5000, "READ", 7, name="newer 7")]
    producer.send(schema, newer)
    run_until_caught_up(writer)
    assert_equal_to_model(spark, table, stored + older + newer)
    # Newer than every stored row, so it overwrites without a join (the upsert path).
    assert commits_by_path(writer, table).get("upsert", 0) >= 1
    writer.close()


def test_the_warm_up_runs_every_write_path_and_leaves_no_trace(
    stack: Stack, spark: Any, tmp_path: Any
) -> None:
    """BatchWriter.warm_up runs each write path on a table in a session-only Hadoop catalog:
    the real catalog's namespaces are unchanged and the staging directory is empty after."""
    from services.iceberg_writer.apply import BatchWriter
    from services.iceberg_writer.tables import DEFAULT_PROPERTIES
    from shared.catalog import open_catalog

    catalog = open_catalog(stack.catalog)
    before = set(catalog.list_namespaces())
    staging = tmp_path / "staging"
    writer = BatchWriter(spark, str(staging))
    writer.warm_up(DEFAULT_PROPERTIES)  # raises if a write path fails
    assert set(catalog.list_namespaces()) == before
    assert list(staging.iterdir()) == []


def test_the_loop_commits_while_spark_warms_up_in_the_background(
    stack: Stack, spark: Any, change_topic: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A restarted writer commits before its warm-up is done: the warm-up runs in a thread
    (held here until the loop has committed), then calls ``done``; the loop's commits during
    and after it are exact."""
    table = change_topic.removeprefix("icefjord.changes.")
    schema = change_schema(*table.split("."))
    writer = start_writer(writer_settings(stack, change_topic))
    entered, gate, done = threading.Event(), threading.Event(), threading.Event()
    real = writer._batch_writer.warm_up

    def held(*args: Any, **kwargs: Any) -> float:
        entered.set()
        assert gate.wait(300), "the test never let the warm-up go on"
        return real(*args, **kwargs)

    monkeypatch.setattr(writer._batch_writer, "warm_up", held)
    warming = writer.warm_up_in_background(done.set)
    try:
        assert entered.wait(60), "the warm-up never started"
        history = [Event(i, "READ", i, name=f"r{i}", amount="1.50") for i in range(1, 101)]
        producer_for(stack, change_topic).send(schema, history)
        run_until_caught_up(writer)
        assert_equal_to_model(spark, table, history)
        assert not done.is_set(), "the warm-up finished before the loop committed"
        # Let the warm-up run while the loop commits more.
        gate.set()
        later = [Event(200 + i, "UPDATE", i, name=f"u{i}") for i in range(1, 51)]
        later += [Event(300 + i, "DELETE", i) for i in range(51, 61)]
        producer_for(stack, change_topic).send(schema, later)
        run_until_caught_up(writer)
        warming.join(300)
        assert done.is_set() and not warming.is_alive()
        assert_equal_to_model(spark, table, history + later)
    finally:
        gate.set()
        warming.join(300)
        writer.close()


def test_a_data_consumer_out_of_its_group_is_replaced_and_nothing_is_lost_or_repeated(
    stack: Stack, spark: Any, change_topic: str
) -> None:
    table = change_topic.removeprefix("icefjord.changes.")
    schema = change_schema(*table.split("."))
    # Batches linger for seconds, so the replacement finds changes read and not committed.
    writer = start_writer(
        writer_settings(stack, change_topic, min_batch_s=3.0, freshness_target_s=30.0)
    )
    watch = LostOnce()
    writer.partitions.membership = watch
    try:
        first = [Event(i, "READ", i, name=f"r{i}", amount="1.50") for i in range(1, 101)]
        producer_for(stack, change_topic).send(schema, first)
        run_until_caught_up(writer)
        later = [Event(200 + i, "UPDATE", i, name=f"u{i}") for i in range(1, 61)]
        later += [Event(300 + i, "CREATE", i, name=f"c{i}") for i in range(101, 131)]
        producer_for(stack, change_topic).send(schema, later)
        deadline = time.monotonic() + 60
        while not any(state.pending for state in writer.tables.values()):
            assert time.monotonic() < deadline, "the later changes were never read"
            writer.step()
        old = writer._data
        watch.armed = True
        writer.step()
        assert watch.fired and writer._data is not old
        run_until_caught_up(writer)
        assert_equal_to_model(spark, table, first + later)
        (count,) = spark.sql(f"SELECT count(*) FROM icefjord.{table}").first()
        assert count == 130, "a key is stored twice"
    finally:
        writer.close()
