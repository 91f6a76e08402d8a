"""Every engine reads the same tables, deletes applied, as Spark does.

Spark writes two tables (one unpartitioned, one by ``bucket(4, id)`` and ``days(ts)``) with
the demo's column kinds, in format v2 (Icefjord's default: the deletes are position delete
files) and in format v3 (deletion vectors), then deletes, updates and merges with
merge-on-read. Each engine's rows are compared with Spark's through :func:`compare_table`,
at the current snapshot and at the snapshot of the first insert. The writer's own delete
files are read by every engine in the writer's tests and the end-to-end demo.
"""

from __future__ import annotations

import datetime as dt
import decimal
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from harness import Stack, free_port

from icefjord.demo.model import Column, Kind
from icefjord.demo.verify import IcebergReader, SourceTable, compare_table
from icefjord.readers import engines
from icefjord.readers.trino import TrinoServer
from shared.catalog import catalog_properties, open_catalog

COLUMNS = (
    Column("id", Kind.BIGINT, nullable=False),
    Column("name", Kind.TEXT),
    Column("amount", Kind.NUMERIC, precision=14, scale=2),
    Column("qty", Kind.INTEGER),
    Column("ts", Kind.TIMESTAMPTZ),
    Column("d", Kind.DATE),
    Column("ok", Kind.BOOLEAN),
    Column("x", Kind.DOUBLE),
    Column("b", Kind.BYTEA),
)
DDL = (
    "id bigint NOT NULL, name string, amount decimal(14,2), qty int, ts timestamp, d date, "
    "ok boolean, x double, b binary, _icefjord_position bigint"
)
MERGE_ON_READ = (
    "'write.delete.mode'='merge-on-read', "
    "'write.update.mode'='merge-on-read', 'write.merge.mode'='merge-on-read'"
)
DELETE_FORMAT = {2: "PARQUET", 3: "PUFFIN"}
"""The delete files a Spark merge-on-read writes, by format version."""
ROWS = 60


@dataclass(frozen=True)
class WrittenTable:
    namespace: str
    name: str
    version: int
    first_snapshot: int
    """The snapshot of the first insert (no deletes yet)."""


def _row(i: int) -> str:
    """Row ``i`` as a Spark SQL tuple: every fifth row nulls all but the key."""
    if i % 5 == 0:
        return f"({i}, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, {i})"
    ts = dt.datetime(2024, 1, 1, tzinfo=dt.UTC) + dt.timedelta(hours=7 * i, microseconds=i)
    return (
        f"({i}, 'name {i} ''q'' ø', {decimal.Decimal(i * 1001) / 100}, {i * 3 - 40}, "
        f"TIMESTAMP '{ts.isoformat()}', DATE '{ts.date()}', {str(i % 2 == 0).lower()}, "
        f"{i / 7!r}D, X'{i:04x}', {i})"
    )


def _write(
    spark: Any, catalog: str, namespace: str, name: str, partitioning: str, version: int
) -> WrittenTable:
    table = f"{catalog}.{namespace}.{name}"
    spark.sql(
        f"CREATE TABLE {table} ({DDL}) USING iceberg {partitioning} "
        f"TBLPROPERTIES ('format-version'='{version}', {MERGE_ON_READ})"
    )
    spark.sql(f"INSERT INTO {table} VALUES {', '.join(_row(i) for i in range(1, ROWS + 1))}")
    first = spark.sql(f"SELECT snapshot_id FROM {table}.snapshots").collect()[0][0]
    spark.sql(f"DELETE FROM {table} WHERE id % 7 = 3")
    spark.sql(
        f"UPDATE {table} SET name = concat(name, ' updated'), amount = amount * 2, "
        "ts = ts + INTERVAL 1 DAY WHERE id % 4 = 1"
    )
    spark.sql(
        f"MERGE INTO {table} t USING (SELECT id, id * 10 AS qty FROM {table} WHERE id % 6 = 2 "
        f"UNION ALL SELECT {ROWS + 1} AS id, 7 AS qty) s ON t.id = s.id "
        "WHEN MATCHED AND s.id % 12 = 2 THEN DELETE "
        "WHEN MATCHED THEN UPDATE SET qty = s.qty "
        f"WHEN NOT MATCHED THEN INSERT (id, qty, _icefjord_position) VALUES (s.id, s.qty, 0)"
    )
    formats = {r[0] for r in spark.sql(f"SELECT file_format FROM {table}.delete_files").collect()}
    assert formats == {DELETE_FORMAT[version]}, f"format v{version} wrote {formats}"
    return WrittenTable(namespace, name, version, first)


@pytest.fixture(params=[2, 3], ids=["v2", "v3"])
def written(stack: Stack, spark: Any, namespace: str, request: Any) -> list[WrittenTable]:
    catalog = stack.catalog.name
    version = int(request.param)
    parted = "PARTITIONED BY (bucket(4, id), days(ts))"
    return [
        _write(spark, catalog, namespace, "plain", "", version),
        _write(spark, catalog, namespace, "parted", parted, version),
    ]


def _spark_source(
    spark: Any, catalog: str, table: WrittenTable, snapshot: int | None
) -> SourceTable:
    """What Spark reads, as the source the other engines must equal."""
    pinned = {} if snapshot is None else {f"{table.namespace}.{table.name}": snapshot}
    read = engines.spark_snapshot_reader(spark, catalog, pinned)(table.namespace, table.name)
    assert read is not None
    assert read.columns == frozenset(c.name for c in COLUMNS)
    return SourceTable(table.namespace, table.name, COLUMNS, ("id",), read.rows)


def _assert_equal(reader: IcebergReader, source: SourceTable) -> None:
    report = compare_table(source, reader(source.namespace, source.name))
    assert report.ok, "\n".join(report.samples) or report


ReaderFactory = Callable[[Stack, engines.Snapshots], IcebergReader]
LOCAL_ENGINES: dict[str, ReaderFactory] = {
    "pyiceberg_arrow": lambda s, p: engines.pyiceberg_arrow(open_catalog(s.catalog), p),
    "pyiceberg_pandas": lambda s, p: engines.pyiceberg_pandas(open_catalog(s.catalog), p),
    "pyiceberg_duckdb": lambda s, p: engines.pyiceberg_duckdb(open_catalog(s.catalog), p),
    "duckdb_iceberg": lambda s, p: engines.duckdb_iceberg(
        open_catalog(s.catalog), catalog_properties(s.catalog), p
    ),
}


def test_the_tables_change_between_the_two_snapshots(
    stack: Stack, spark: Any, written: list[WrittenTable]
) -> None:
    """The comparisons below would not notice a reader ignoring the snapshot otherwise."""
    for table in written:
        now = _spark_source(spark, stack.catalog.name, table, None)
        then = _spark_source(spark, stack.catalog.name, table, table.first_snapshot)
        assert len(then.rows) == ROWS
        assert not compare_table(
            now,
            engines.spark_snapshot_reader(
                spark, stack.catalog.name, {f"{table.namespace}.{table.name}": table.first_snapshot}
            )(table.namespace, table.name),
        ).ok


@pytest.mark.parametrize("engine", sorted(LOCAL_ENGINES))
def test_every_engine_reads_what_spark_reads(
    stack: Stack, spark: Any, written: list[WrittenTable], engine: str
) -> None:
    catalog = stack.catalog.name
    for table in written:
        identifier = f"{table.namespace}.{table.name}"
        current = engines.pin_snapshots(open_catalog(stack.catalog), [identifier])
        for pinned in (current, {identifier: table.first_snapshot}):
            source = _spark_source(spark, catalog, table, pinned[identifier])
            _assert_equal(LOCAL_ENGINES[engine](stack, pinned), source)
        assert LOCAL_ENGINES[engine](stack, {})(table.namespace, "no_such_table") is None


@pytest.fixture(scope="session")
def trino_server(stack: Stack) -> Iterator[TrinoServer]:
    if stack.local is None:
        pytest.skip("Trino is started for the session's own local stack only")
    settings = stack.local.settings.model_copy(update={"trino_port": free_port()})
    server = TrinoServer(settings, stack.catalog.name, catalog_properties(stack.catalog))
    seconds = server.start(progress=print)
    print(f"\nTrino {settings.trino_version} ready in {seconds:.1f} s on {server.url}")
    yield server
    server.stop()


@pytest.mark.trino
def test_trino_reads_what_spark_reads_and_names_the_deletion_vectors_it_cannot_read(
    stack: Stack, spark: Any, written: list[WrittenTable], trino_server: TrinoServer
) -> None:
    """Trino 476 (the newest this network's Maven mirror serves) reads format v2 tables
    with their position deletes, and v3 tables but not their deletion vectors: Trino's own
    support came later (trinodb/trino#27788)."""
    settings = trino_server.settings
    catalog = stack.catalog.name
    for table in written:
        identifier = f"{table.namespace}.{table.name}"
        first = {identifier: table.first_snapshot}
        source = _spark_source(spark, catalog, table, table.first_snapshot)
        _assert_equal(
            engines.trino_reader(settings.host, settings.trino_port, catalog, first), source
        )
        current = engines.trino_reader(settings.host, settings.trino_port, catalog)
        if table.version == 2:
            _assert_equal(current, _spark_source(spark, catalog, table, None))
        else:
            with pytest.raises(engines.ReaderError, match="PUFFIN"):
                current(table.namespace, table.name)
        assert current(table.namespace, "no_such_table") is None
