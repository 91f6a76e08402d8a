"""The maintenance executor on the real Spark + Iceberg JDBC catalog.

Tables are format-version 2, merge-on-read, with identifier fields, written by small
``MERGE INTO`` commits the way iceberg-writer writes them. Each test compares the table's
rows before and after maintenance (or with an in-memory model while a writer runs).
"""

from __future__ import annotations

import json
import random
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from harness import Stack

from services.iceberg_writer.upserts import LeaseTakenError
from services.maintainer.execute import MaintenanceExecutor
from services.maintainer.health import compute_health
from services.maintainer.identifiers import parse_table
from services.maintainer.inspect import TableInspector
from services.maintainer.policy import COMPACTION_OPTIONS, MaintenancePolicy, evaluate
from services.maintainer.runner import SparkProcedureRunner
from shared.catalog import open_catalog
from shared.events import MaintenanceAction, MaintenanceRequest, MaintenanceResult
from shared.events import MaintenanceStatus as Status
from shared.lease import LEASE_PROPERTY, leased

pytestmark = pytest.mark.timeout(600)

Row = tuple[int, str, str]


def create_table(spark: Any, table: str, version: int = 2) -> None:
    """Merge-on-read with identifier fields, as iceberg-writer creates tables: format v2
    writes position delete files, v3 deletion vectors."""
    spark.sql(
        f"""CREATE TABLE icefjord.{table} (id BIGINT NOT NULL, region STRING, v STRING)
        USING iceberg PARTITIONED BY (region)
        TBLPROPERTIES ('format-version'='{version}', 'write.delete.mode'='merge-on-read',
                       'write.update.mode'='merge-on-read', 'write.merge.mode'='merge-on-read')"""
    )
    spark.sql(f"ALTER TABLE icefjord.{table} SET IDENTIFIER FIELDS id")


def region(key: int) -> str:
    return "eu" if key % 2 else "us"


def append(spark: Any, table: str, rows: list[Row], offsets: dict[str, int] | None = None) -> None:
    writer = spark.createDataFrame(rows, "id long, region string, v string").writeTo(
        f"icefjord.{table}"
    )
    if offsets is not None:
        writer = writer.option("snapshot-property.icefjord.offsets", json.dumps(offsets))
    writer.append()


def merge(spark: Any, table: str, changes: list[tuple[int, str | None]]) -> None:
    """Upsert ``(id, value)`` changes, deleting the ids whose value is None (one commit)."""
    view = f"changes_{uuid.uuid4().hex[:8]}"
    rows = [(key, region(key), value or "", value is None) for key, value in changes]
    spark.createDataFrame(
        rows, "id long, region string, v string, del boolean"
    ).createOrReplaceTempView(view)
    try:
        spark.sql(
            f"""MERGE INTO icefjord.{table} t USING {view} s ON t.id = s.id
            WHEN MATCHED AND s.del THEN DELETE
            WHEN MATCHED THEN UPDATE SET t.v = s.v
            WHEN NOT MATCHED AND NOT s.del THEN
                INSERT (id, region, v) VALUES (s.id, s.region, s.v)"""
        )
    finally:
        spark.catalog.dropTempView(view)


def contents(spark: Any, table: str) -> dict[int, tuple[str, str]]:
    rows = spark.sql(f"SELECT id, region, v FROM icefjord.{table}").collect()
    out = {r.id: (r.region, r.v) for r in rows}
    assert len(out) == len(rows), "an id appears twice"
    return out


def executor_with_lease(
    stack: Stack, spark: Any, catalog: Any, settle_s: float
) -> MaintenanceExecutor:
    """An executor that holds the compaction lease around its rewrites."""
    return MaintenanceExecutor(
        SparkProcedureRunner(spark),
        TableInspector(catalog),
        catalog=stack.catalog.name,
        retry_delay_s=0.5,
        max_attempts=4,
        lease_s=60.0,
        lease_settle_s=settle_s,
    )


def upsert(
    spark: Any,
    table: str,
    changes: list[tuple[int, str | None]],
    indexes: dict[str, Any] | None = None,
) -> None:
    """One commit on iceberg-writer's upsert path (``upserts.py``: the rows, and deletion
    vectors of the stored rows of their keys); a value of None deletes the key."""
    import pyarrow as pa

    from services.iceberg_writer.types import STAGING_FLAG
    from services.iceberg_writer.upserts import write_upserts

    batch = pa.table(
        {
            "id": pa.array([k for k, _ in changes], pa.int64()),
            "region": [region(k) for k, _ in changes],
            "v": [v or "" for _, v in changes],
            STAGING_FLAG: [v is None for _, v in changes],
        }
    )
    write_upserts(spark, f"icefjord.{table}", batch, ["id"], {}, indexes=indexes)


def apply_to_model(
    model: dict[int, tuple[str, str]], changes: list[tuple[int, str | None]]
) -> None:
    """What ``upsert(changes)`` does to a table, done to ``model`` (None deletes the key)."""
    for key, value in changes:
        if value is None:
            model.pop(key, None)
        else:
            model[key] = (region(key), value)


def read_by_pyiceberg(stack: Stack, table: str) -> dict[int, tuple[str, str]]:
    """``table``'s rows as pyiceberg scans them (it applies deletion vectors, and refuses
    equality deletes)."""
    rows = open_catalog(stack.catalog).load_table(table).scan().to_arrow().to_pylist()
    return {r["id"]: (r["region"], r["v"]) for r in rows}


def request(table: str, action: MaintenanceAction, **options: str) -> MaintenanceRequest:
    partition = options.pop("partition", None)
    return MaintenanceRequest(
        request_id=str(uuid.uuid4()),
        table=table,
        action=action,
        partition=partition,
        options=options,
        reason="integration test",
        requested_by="operator:test",
    )


def compact_while_writing(
    executor: MaintenanceExecutor,
    table: str,
    options: dict[str, str],
    *,
    rounds: int,
    pause_s: float,
    enough: Callable[[list[MaintenanceResult]], bool],
    failure: list[BaseException],
) -> list[MaintenanceResult]:
    """Compactions of ``table``, one every ``pause_s``, for at most ``rounds``, until
    ``enough`` says so or the writer thread has failed."""
    results: list[MaintenanceResult] = []
    for _round in range(rounds):
        if enough(results):
            break
        time.sleep(pause_s)
        if failure:
            break
        results.append(
            executor.execute(
                request(table, MaintenanceAction.COMPACT_DATA_FILES, **options),
                MaintenancePolicy(),
            )
        )
    return results


@pytest.fixture
def executor(stack: Stack, spark: Any) -> MaintenanceExecutor:
    return MaintenanceExecutor(
        SparkProcedureRunner(spark),
        TableInspector(open_catalog(stack.catalog)),
        catalog=stack.catalog.name,
        retry_delay_s=0.5,
        max_attempts=4,
        orphan_floor_ms=0,
    )


def make_fragmented(spark: Any, table: str, version: int = 2) -> str:
    """A table with 40 rows written by one append and eight small MERGE commits."""
    create_table(spark, table, version)
    append(spark, table, [(k, region(k), "v0") for k in range(40)], {"changes:0": 40})
    rng = random.Random(7)
    for step in range(8):
        keys = rng.sample(range(50), 6)
        merge(spark, table, [(k, None if k % 5 == 0 else f"v{step + 1}") for k in keys])
    return table


@pytest.fixture
def fragmented(spark: Any, namespace: str) -> str:
    return make_fragmented(spark, f"{namespace}.orders")


def test_inspection_agrees_with_sparks_metadata_tables(
    spark: Any, stack: Stack, fragmented: str
) -> None:
    inspection = TableInspector(open_catalog(stack.catalog)).inspect(parse_table(fragmented))
    by_content = {
        r.content: (r.files, r.records)
        for r in spark.sql(
            f"SELECT content, count(*) AS files, sum(record_count) AS records "
            f"FROM icefjord.{fragmented}.files GROUP BY content"
        ).collect()
    }
    for content in (0, 1):
        mine = [f for f in inspection.files if f.content == content]
        assert (len(mine), sum(f.record_count for f in mine)) == by_content[content]
    snapshots = spark.sql(f"SELECT snapshot_id, summary FROM icefjord.{fragmented}.snapshots")
    with_offsets = {r.snapshot_id for r in snapshots.collect() if "icefjord.offsets" in r.summary}
    assert {s.snapshot_id for s in inspection.snapshots if s.carries_offsets} == with_offsets
    assert len(with_offsets) == 1
    manifests = spark.sql(f"SELECT count(*) AS n FROM icefjord.{fragmented}.manifests").first()
    assert inspection.manifests == manifests.n


@pytest.mark.parametrize("version", [2, 3])
def test_compaction_and_delete_rewrite_keep_every_row(
    spark: Any, executor: MaintenanceExecutor, namespace: str, version: int
) -> None:
    fragmented = make_fragmented(spark, f"{namespace}.orders", version)
    before = contents(spark, fragmented)
    policy = MaintenancePolicy()
    scoped = executor.execute(
        request(
            fragmented,
            MaintenanceAction.COMPACT_DATA_FILES,
            partition="region = 'eu'",
            **{"min-input-files": "2"},
        ),
        policy,
    )
    assert scoped.status is Status.SUCCEEDED, scoped
    assert contents(spark, fragmented) == before
    us_files = spark.sql(
        f"SELECT count(*) AS n FROM icefjord.{fragmented}.files "
        "WHERE content = 0 AND partition.region = 'us'"
    ).first()
    assert us_files.n > 1, "a scoped compaction leaves other partitions alone"

    whole = executor.execute(
        request(
            fragmented,
            MaintenanceAction.COMPACT_DATA_FILES,
            **{"min-input-files": "2", "remove-dangling-deletes": "true"},
        ),
        policy,
    )
    assert whole.status is Status.SUCCEEDED, whole
    assert whole.files_before is not None and whole.files_after is not None
    assert whole.files_after < whole.files_before
    assert whole.files_after == 2  # one file per partition
    deletes = executor.execute(
        request(fragmented, MaintenanceAction.REWRITE_POSITION_DELETES, **{"rewrite-all": "true"}),
        policy,
    )
    assert deletes.status in (Status.SUCCEEDED, Status.SKIPPED), deletes
    remaining = spark.sql(
        f"SELECT count(*) AS n FROM icefjord.{fragmented}.files WHERE content = 1"
    ).first()
    assert remaining.n == 0, "compaction applied the deletes; nothing dangling stays live"
    assert contents(spark, fragmented) == before


def test_expiry_never_removes_the_latest_offsets_snapshot(
    spark: Any, executor: MaintenanceExecutor, namespace: str
) -> None:
    table = f"{namespace}.events"
    create_table(spark, table)
    append(spark, table, [(1, "eu", "a")], {"changes:0": 1})
    append(spark, table, [(2, "us", "b")], {"changes:0": 2})
    protected = (
        spark.sql(
            f"SELECT snapshot_id FROM icefjord.{table}.snapshots ORDER BY committed_at DESC LIMIT 1"
        )
        .first()
        .snapshot_id
    )
    # Later commits without offsets (maintenance, or another engine).
    for key in range(3, 6):
        append(spark, table, [(key, region(key), "c")])
    time.sleep(0.05)
    result = executor.execute(
        request(
            table,
            MaintenanceAction.EXPIRE_SNAPSHOTS,
            older_than_ms=str(int(time.time() * 1000) + 60_000),
            retain_last="1",
        ),
        MaintenancePolicy(),
    )
    assert result.status is Status.SUCCEEDED, result
    assert (result.files_before, result.files_after) == (5, 4)
    remaining = [
        r.snapshot_id
        for r in spark.sql(
            f"SELECT snapshot_id FROM icefjord.{table}.snapshots ORDER BY committed_at"
        ).collect()
    ]
    assert remaining[0] == protected
    at_offsets = spark.sql(
        f"SELECT count(*) AS n FROM icefjord.{table} VERSION AS OF {protected}"
    ).first()
    assert at_offsets.n == 2, "the writer can still read the snapshot it resumes from"
    assert len(contents(spark, table)) == 5


def test_orphans_and_manifests(
    spark: Any, stack: Stack, executor: MaintenanceExecutor, fragmented: str
) -> None:
    """A planted orphan goes, a file younger than the cutoff (a commit in flight) stays, and
    no live file goes: on local disk and on S3 alike, through the table's own FileIO (S3
    keeps modification times in whole seconds, hence the pauses around the cutoff)."""
    before = contents(spark, fragmented)
    table = open_catalog(stack.catalog).load_table(fragmented)
    data_dir = f"{table.location().rstrip('/')}/data"

    def plant(name: str, body: bytes) -> str:
        path = f"{data_dir}/{name}-{uuid.uuid4().hex}.parquet"
        with table.io.new_output(path).create() as out:
            out.write(body)
        return path

    orphan = plant("orphan", b"not referenced by any snapshot")
    time.sleep(2.5)
    cutoff_ms = int((time.time() - 1.0) * 1000)
    time.sleep(1.5)
    fresh = plant("in-flight", b"maybe a commit in flight")
    result = executor.execute(
        request(fragmented, MaintenanceAction.REMOVE_ORPHAN_FILES, older_than_ms=str(cutoff_ms)),
        MaintenancePolicy(),
    )
    assert result.status is Status.SUCCEEDED, result
    assert not table.io.new_input(orphan).exists()
    assert table.io.new_input(fresh).exists(), "files younger than the cutoff are never touched"
    assert result.files_before == 1
    assert contents(spark, fragmented) == before
    manifests = executor.execute(
        request(fragmented, MaintenanceAction.REWRITE_MANIFESTS), MaintenancePolicy()
    )
    assert manifests.status is Status.SUCCEEDED, manifests
    assert manifests.files_after is not None and manifests.files_before is not None
    assert manifests.files_after < manifests.files_before
    assert contents(spark, fragmented) == before
    table.io.delete(fresh)


def test_rejected_requests(executor: MaintenanceExecutor, fragmented: str, namespace: str) -> None:
    unknown = executor.execute(
        request(f"{namespace}.missing", MaintenanceAction.COMPACT_DATA_FILES), MaintenancePolicy()
    )
    assert (unknown.status, unknown.error) == (
        Status.REJECTED,
        f"unknown table {namespace}.missing",
    )
    malformed = executor.execute(
        request(f"{namespace}.orders') --", MaintenanceAction.COMPACT_DATA_FILES),
        MaintenancePolicy(),
    )
    assert malformed.status is Status.REJECTED
    assert "malformed table identifier" in (malformed.error or "")


def test_v3_compaction_one_partition_per_lease_leaves_no_deletion_vector_behind(
    stack: Stack, spark: Any, namespace: str
) -> None:
    """The policy's options for a format-v3 table (no ``remove-dangling-deletes``): the
    deletion vectors of the rewritten files go with them. Under the lease, a whole-table
    compaction runs one partition at a time, and the rows stay the same."""
    from services.maintainer.policy import DANGLING_DELETES_OPTION

    table = make_fragmented(spark, f"{namespace}.vectors", version=3)
    before = contents(spark, table)
    dvs = spark.sql(f"SELECT count(*) AS n FROM icefjord.{table}.delete_files").first().n
    assert dvs > 0, "the fixture wrote no deletion vector: the test would prove nothing"
    options = {k: v for k, v in COMPACTION_OPTIONS.items() if k != DANGLING_DELETES_OPTION}
    leased_executor = MaintenanceExecutor(
        SparkProcedureRunner(spark),
        TableInspector(open_catalog(stack.catalog)),
        catalog=stack.catalog.name,
        lease_s=60.0,
        lease_settle_s=0.5,
    )
    result = leased_executor.execute(
        request(table, MaintenanceAction.COMPACT_DATA_FILES, **options, **{"min-input-files": "2"}),
        MaintenancePolicy(),
    )
    assert result.status is Status.SUCCEEDED, result
    assert "in 2 partitions, one lease each" in (result.message or ""), result.message
    live = {
        r.file_path
        for r in spark.sql(f"SELECT file_path FROM icefjord.{table}.data_files").collect()
    }
    vectors = spark.sql(f"SELECT referenced_data_file FROM icefjord.{table}.delete_files").collect()
    assert all(v.referenced_data_file in live for v in vectors), "a deletion vector dangles"
    assert result.files_after == 2  # one file per region
    assert contents(spark, table) == before
    assert LEASE_PROPERTY not in open_catalog(stack.catalog).load_table(table).properties


@pytest.mark.parametrize("version", [2, 3])
def test_no_lost_duplicated_or_resurrected_row_under_a_running_writer(
    spark: Any, executor: MaintenanceExecutor, namespace: str, version: int
) -> None:
    """A writer thread upserts and deletes continuously while compactions and delete
    rewrites repeat; at the end the table equals the writer's model, row for row."""
    table = f"{namespace}.accounts"
    create_table(spark, table, version)
    model: dict[int, tuple[str, str]] = {k: (region(k), "v0") for k in range(60)}
    append(spark, table, [(k, r, v) for k, (r, v) in model.items()], {"changes:0": 60})
    stop = threading.Event()
    stats = {"commits": 0, "conflicts": 0}
    failure: list[BaseException] = []

    def writer() -> None:
        rng = random.Random(11)
        step = 0
        try:
            while not stop.is_set():
                step += 1
                keys = rng.sample(range(90), 6)
                changes = [(k, None if rng.random() < 0.3 else f"w{step}") for k in keys]
                for _attempt in range(20):
                    try:
                        merge(spark, table, changes)
                        break
                    except Exception as exc:  # a conflict with maintenance: retry the batch
                        if "ValidationException" not in str(exc) and "CommitFailed" not in str(exc):
                            raise
                        stats["conflicts"] += 1
                else:
                    raise AssertionError(f"batch {step} never committed")
                for key, value in changes:
                    if value is None:
                        model.pop(key, None)
                    else:
                        model[key] = (region(key), value)
                stats["commits"] += 1
        except BaseException as exc:
            failure.append(exc)

    thread = threading.Thread(target=writer, name="writer", daemon=True)
    thread.start()
    results: list[MaintenanceResult] = []
    try:
        deadline = time.monotonic() + 300
        rounds = 0
        while rounds < 4 and time.monotonic() < deadline and not failure:
            time.sleep(3)
            results.append(
                executor.execute(
                    request(
                        table,
                        MaintenanceAction.COMPACT_DATA_FILES,
                        **{
                            "min-input-files": "2",
                            "partial-progress.enabled": "true",
                            "remove-dangling-deletes": "true",
                        },
                    ),
                    MaintenancePolicy(),
                )
            )
            results.append(
                executor.execute(
                    request(
                        table,
                        MaintenanceAction.REWRITE_POSITION_DELETES,
                        **{"rewrite-all": "true", "partial-progress.enabled": "true"},
                    ),
                    MaintenancePolicy(),
                )
            )
            rounds += 1
    finally:
        stop.set()
        thread.join(timeout=120)
    assert not failure, failure
    assert stats["commits"] >= 4, stats
    compactions = [r for r in results if r.action is MaintenanceAction.COMPACT_DATA_FILES]
    assert any(r.status is Status.SUCCEEDED for r in compactions), results
    assert all(r.status is not Status.REJECTED for r in results), results
    # A compaction may lose every race to the writer (FAILED, nothing committed); it must
    # never commit a wrong table, which the comparison below checks.
    assert contents(spark, table) == model
    print(
        f"\nformat v{version}: writer commits {stats['commits']}, "
        f"writer conflicts {stats['conflicts']}, "
        f"maintenance results {[(r.action.value, r.status.value) for r in results]}"
    )


def test_an_upsert_that_finds_the_lease_taken_before_its_commit_is_held_back(
    stack: Stack, spark: Any, namespace: str
) -> None:
    """A lease taken after the writer last looked (it looks before it plans and writes the
    batch) holds an upsert commit that deletes stored rows back: the lease guard refuses
    the commit Iceberg builds on the leased metadata, where it would land under the lease
    and the maintainer's rewrite would lose to it and run again."""
    table = f"{namespace}.late_lease"
    create_table(spark, table, 2)
    append(spark, table, [(k, region(k), "v0") for k in range(10)])
    catalog = open_catalog(stack.catalog)
    snapshots = len(catalog.load_table(table).metadata.snapshots)
    until = int(time.time() * 1000) + 60_000
    spark.sql(f"ALTER TABLE icefjord.{table} SET TBLPROPERTIES ('{LEASE_PROPERTY}'='{until}')")
    with pytest.raises(LeaseTakenError):
        upsert(spark, table, [(1, "v1"), (2, None)])
    assert len(catalog.load_table(table).metadata.snapshots) == snapshots
    # Rows of new keys delete nothing stored: no rewrite can lose to them, they go in.
    upsert(spark, table, [(20, "v1")])
    spark.sql(f"ALTER TABLE icefjord.{table} UNSET TBLPROPERTIES ('{LEASE_PROPERTY}')")
    upsert(spark, table, [(1, "v1"), (2, None)])
    expected = {k: (region(k), "v0") for k in range(10) if k != 2}
    expected |= {1: (region(1), "v1"), 20: (region(20), "v1")}
    assert contents(spark, table) == expected


@pytest.mark.parametrize("guarded", [True, False], ids=["guarded", "bare"])
def test_a_commit_rebased_onto_a_lease_lands_only_without_the_guard(
    stack: Stack, spark: Any, namespace: str, guarded: bool
) -> None:
    """A lease that lands while a commit is being made: Iceberg makes the commit again on
    the refreshed metadata, the lease's, and swaps it in. Through the writer's lease guard
    (``deploy/iceberg-lease-guard``) that commit is refused, with no snapshot; on the bare
    table it lands under the lease. The commit here is a transaction's, staged before the
    lease is taken and rebased by Iceberg onto the lease at its commit."""
    table = f"{namespace}.rebased_{'guarded' if guarded else 'bare'}"
    create_table(spark, table, 3)
    append(spark, table, [(k, region(k), "v0") for k in range(10)])
    jvm = spark.sparkContext._jvm
    loaded = jvm.org.apache.iceberg.spark.Spark3Util.loadIcebergTable(
        spark._jsparkSession, f"icefjord.{table}"
    )
    if guarded:
        loaded = jvm.io.icefjord.iceberg.LeaseGuard.guard(loaded, LEASE_PROPERTY)
    transaction = loaded.newTransaction()
    eu = jvm.org.apache.iceberg.expressions.Expressions.equal("region", "eu")
    transaction.newDelete().deleteFromRowFilter(eu).commit()  # staged, not yet in
    until = int(time.time() * 1000) + 60_000
    spark.sql(f"ALTER TABLE icefjord.{table} SET TBLPROPERTIES ('{LEASE_PROPERTY}'='{until}')")
    catalog = open_catalog(stack.catalog)
    snapshots = len(catalog.load_table(table).metadata.snapshots)
    everything = {k: (region(k), "v0") for k in range(10)}
    if guarded:
        with pytest.raises(Exception, match="LeaseTakenException"):
            transaction.commitTransaction()
        assert len(catalog.load_table(table).metadata.snapshots) == snapshots
        assert contents(spark, table) == everything
    else:
        transaction.commitTransaction()
        assert len(catalog.load_table(table).metadata.snapshots) == snapshots + 1
        assert contents(spark, table) == {k: r for k, r in everything.items() if k % 2 == 0}
    assert leased(catalog.load_table(table).properties, int(time.time() * 1000))


@pytest.mark.parametrize("path", ["merge", "upsert"])
def test_with_the_lease_compaction_wins_against_updates_spread_over_every_file(
    stack: Stack, spark: Any, namespace: str, path: str
) -> None:
    """Updates spread evenly over the table delete rows in nearly every data file at every
    commit, so an uncoordinated rewrite keeps losing to them. With the compaction lease
    (shared/lease.py) honoured by the writer, as iceberg-writer does on its MERGE and its
    upsert path (whose deletion vectors a rewrite must not miss either), every compaction
    commits, the writer goes on afterwards, and the table equals the writer's model, read
    by Spark and by pyiceberg."""
    table = f"{namespace}.spread"
    indexes: dict[str, Any] = {}

    def write(changes: list[tuple[int, str | None]]) -> None:
        if path == "merge":
            merge(spark, table, changes)
        else:
            upsert(spark, table, changes, indexes)

    create_table(spark, table, 3)
    model: dict[int, tuple[str, str]] = {k: (region(k), "v0") for k in range(120)}
    append(spark, table, [(k, r, v) for k, (r, v) in model.items()], {"changes:0": 120})
    catalog = open_catalog(stack.catalog)
    leased_executor = executor_with_lease(stack, spark, catalog, settle_s=3.0)
    stop = threading.Event()
    stats = {"commits": 0, "conflicts": 0, "lease_waits": 0}
    failure: list[BaseException] = []

    def writer() -> None:
        rng = random.Random(5)
        step = 0
        try:
            while not stop.is_set():
                step += 1
                # One key from every tenth of the key space: every file gets a delete.
                keys = [tenth * 12 + rng.randrange(12) for tenth in range(10)]
                changes = [(k, None if rng.random() < 0.2 else f"w{step}") for k in keys]
                for _attempt in range(20):
                    while leased(catalog.load_table(table).properties, int(time.time() * 1000)):
                        stats["lease_waits"] += 1
                        if stop.wait(0.1):
                            return
                    try:
                        write(changes)
                        break
                    except LeaseTakenError:  # taken while the files were written: wait
                        stats["lease_waits"] += 1
                    except Exception as exc:  # lost a race to a rewrite in flight: again
                        if "ValidationException" not in str(exc) and "CommitFailed" not in str(exc):
                            raise
                        stats["conflicts"] += 1
                else:
                    raise AssertionError(f"batch {step} never committed")
                for key, value in changes:
                    if value is None:
                        model.pop(key, None)
                    else:
                        model[key] = (region(key), value)
                stats["commits"] += 1
        except BaseException as exc:
            failure.append(exc)

    thread = threading.Thread(target=writer, name="writer", daemon=True)
    thread.start()
    try:
        # Three rounds at least; more (up to six) while the writer has not yet met a lease:
        # on a loaded machine one MERGE can outlast a whole rewrite.
        results = compact_while_writing(
            leased_executor,
            table,
            {"min-input-files": "2", "partial-progress.enabled": "true"},
            rounds=6,
            pause_s=4,
            enough=lambda done: len(done) >= 3 and stats["lease_waits"] > 0,
            failure=failure,
        )
        commits_after_maintenance = stats["commits"]
        time.sleep(3)
    finally:
        stop.set()
        thread.join(timeout=120)
    assert not failure, failure
    assert len(results) >= 3
    for result in results:
        assert result.status is Status.SUCCEEDED, results
        assert result.files_before is not None and result.files_after is not None
        assert result.files_after < result.files_before, result
    assert stats["lease_waits"] > 0, "the writer never met the lease: it proved nothing"
    assert stats["commits"] > commits_after_maintenance, "the writer did not go on afterwards"
    assert LEASE_PROPERTY not in catalog.load_table(table).properties
    assert contents(spark, table) == model
    if path == "upsert":
        assert read_by_pyiceberg(stack, table) == model
    print(f"\nlease: writer {stats}, results {[(r.status.value, r.message) for r in results]}")


@pytest.mark.parametrize(
    "partition_by",
    [None, "region", "bucket(4, id)"],
    ids=["unpartitioned", "partitioned-by-value", "partitioned-by-key"],
)
def test_compaction_applies_the_writers_deletion_vectors_and_drops_them(
    stack: Stack,
    spark: Any,
    executor: MaintenanceExecutor,
    namespace: str,
    partition_by: str | None,
) -> None:
    """The writer's upsert path (``upserts.py``) deletes stored rows with deletion vectors:
    at most one per data file, merged commit after commit, in the data file's partition
    (an update that moves a key to another partition deletes where the row was). pyiceberg
    reads the table equal to Spark at every step; a compaction rewriting the files with
    deletes leaves no vector behind."""
    table = f"{namespace}.upserted"
    partitioned = f"PARTITIONED BY ({partition_by})" if partition_by else ""
    spark.sql(
        f"""CREATE TABLE icefjord.{table} (id BIGINT NOT NULL, region STRING, v STRING)
        USING iceberg {partitioned}
        TBLPROPERTIES ('format-version'='3', 'write.merge.mode'='merge-on-read')"""
    )
    append(spark, table, [(k, region(k), "v0") for k in range(40)])
    model = {k: (region(k), "v0") for k in range(40)}
    rng = random.Random(11)
    indexes: dict[str, Any] = {}
    for step in range(6):
        keys = rng.sample(range(50), 8)
        changes = [(k, None if k % 4 == 0 else f"u{step}") for k in keys]
        upsert(spark, table, changes, indexes)
        apply_to_model(model, changes)
        assert read_by_pyiceberg(stack, table) == contents(spark, table) == model
    same = "d.partition = f.partition" if partition_by else "f.file_path IS NOT NULL"
    vectors = spark.sql(
        f"""SELECT d.content, d.file_format, d.referenced_data_file, {same} AS same_partition
            FROM icefjord.{table}.delete_files d
            LEFT JOIN icefjord.{table}.data_files f ON d.referenced_data_file = f.file_path"""
    ).collect()
    assert vectors, "the upserts deleted nothing"
    assert {(v.content, v.file_format) for v in vectors} == {(1, "PUFFIN")}
    assert all(v.same_partition for v in vectors), "a vector outside its file's partition"
    referenced = [v.referenced_data_file for v in vectors]
    assert len(referenced) == len(set(referenced)), "two vectors for one data file"
    result = executor.execute(
        request(
            table,
            MaintenanceAction.COMPACT_DATA_FILES,
            **{**COMPACTION_OPTIONS, "delete-file-threshold": "1"},
        ),
        MaintenancePolicy(),
    )
    assert result.status is Status.SUCCEEDED, result
    assert read_by_pyiceberg(stack, table) == contents(spark, table) == model
    left = spark.sql(f"SELECT count(*) AS n FROM icefjord.{table}.delete_files").first().n
    assert left == 0, "deletion vectors left behind after the compaction"


def test_the_writers_v2_delete_files_over_little_data_are_compacted_away(
    stack: Stack, spark: Any, executor: MaintenanceExecutor, namespace: str
) -> None:
    """The writer's format-v2 upserts write one position delete file per commit, over every
    data file it touches. At the delete-file trigger, with the table's data smaller than one
    target-size file, the policy asks for a compaction (with the delete cache) rather than
    a delete rewrite; it applies every delete and leaves no delete file."""
    table = f"{namespace}.v2upserted"
    spark.sql(
        f"""CREATE TABLE icefjord.{table} (id BIGINT NOT NULL, region STRING, v STRING)
        USING iceberg TBLPROPERTIES ('format-version'='2', 'write.merge.mode'='merge-on-read')"""
    )
    append(spark, table, [(k, region(k), "v0") for k in range(60)])
    model = {k: (region(k), "v0") for k in range(60)}
    rng = random.Random(5)
    indexes: dict[str, Any] = {}
    for step in range(8):
        keys = rng.sample(range(60), 12)
        changes = [(k, None if k % 5 == 0 else f"u{step}") for k in keys]
        upsert(spark, table, changes, indexes)
        apply_to_model(model, changes)
    deletes = spark.sql(
        f"SELECT count(*) AS n, count_if(referenced_data_file IS NULL) AS spanning"
        f" FROM icefjord.{table}.delete_files"
    ).first()
    assert deletes.n >= 5 and deletes.spanning >= 3, deletes

    # The delete-file trigger alone (this little table is far over the delete ratio).
    policy = MaintenancePolicy(
        rewrite_deletes_min_files=5, compact_delete_ratio=1.0, orphan_interval_s=1e9
    )
    inspection = TableInspector(open_catalog(stack.catalog)).inspect(parse_table(table))
    found = {
        c.action: c
        for c in evaluate(compute_health(inspection), policy, int(time.time() * 1000), {})
        if c.action is not MaintenanceAction.REMOVE_ORPHAN_FILES
    }
    assert set(found) == {MaintenanceAction.COMPACT_DATA_FILES}, found
    candidate = found[MaintenanceAction.COMPACT_DATA_FILES]
    assert candidate.policy == "delete-files"
    assert candidate.options["cache-delete-files"] == "true"
    result = executor.execute(candidate.to_request(str(uuid.uuid4())), policy)
    assert result.status is Status.SUCCEEDED, result
    assert read_by_pyiceberg(stack, table) == contents(spark, table) == model
    # The newest delete file has the rewrite's starting sequence number (as the rewritten
    # file has), so Iceberg keeps it live until the next compaction; it names only files
    # that are gone, so it deletes nothing.
    left = spark.sql(f"SELECT file_path FROM icefjord.{table}.delete_files").collect()
    assert len(left) <= 1, f"{len(left)} of {deletes.n} delete files left live"
    named = {
        r.file_path
        for r in spark.sql(f"SELECT file_path FROM icefjord.{table}.position_deletes").collect()
    }
    live = {
        r.file_path
        for r in spark.sql(f"SELECT file_path FROM icefjord.{table}.data_files").collect()
    }
    assert not named & live, "a live delete file still deletes rows of a live data file"
