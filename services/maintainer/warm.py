"""Run the maintainer's Spark procedures once on a throwaway table, before the first real one.

The first ``rewrite_data_files`` in a fresh JVM loads and compiles most of Spark's and
Iceberg's rewrite path. In the end-to-end benchmark the first compaction in a fresh JVM took
about four times as long as the next, larger one (docs/benchmarks/HISTORY.md, "Figures
moved out of code comments"). A compaction holds the table's lease, so the writer's commits
for that table wait all that time (``shared.lease``).

The throwaway table lives in a session-only catalog on local disk, which leaves the real
catalog's and storage's code cold (an S3 client and its first connections, a JDBC or REST
catalog's load path). :func:`warm_up_storage` reads one real table for those, without
writing anything.
"""

from __future__ import annotations

import time
from collections.abc import Iterable

from pyspark.sql import SparkSession

from services.maintainer.identifiers import MalformedIdentifierError, TableId, parse_table
from services.maintainer.procedures import (
    expire_snapshots_sql,
    lease_sql,
    release_lease_sql,
    rewrite_data_files_sql,
    rewrite_manifests_sql,
    rewrite_position_deletes_sql,
)
from shared.spark import scratch_catalog

_PROPERTIES = {  # as iceberg-writer creates tables (its DEFAULT_PROPERTIES)
    "format-version": "2",
    "write.delete.mode": "merge-on-read",
    "write.update.mode": "merge-on-read",
    "write.merge.mode": "merge-on-read",
}


WARM_UP_ROWS = 100_000
"""Rows of the throwaway table, in ``WARM_UP_FILES`` files: enough that the per-row code of
a compaction (Parquet decoding and encoding, applying position deletes) runs often enough for
HotSpot's optimizing compiler to compile it here. With 400 rows only the first real
compactions compiled it, under their leases: on S3 the maintainer's JIT took 35 of its 74 CPU
s in the benchmark's 1,000/s phase, and its leases held the writer 12-16 s (HISTORY)."""
WARM_UP_FILES = 10


def warm_up(spark: SparkSession, rows: int = WARM_UP_ROWS) -> float:
    """Take and release a lease, compact, rewrite deletes and manifests, and expire
    snapshots of a merge-on-read table of ``rows`` rows (the column types the writer's tables
    have most) in a session-only catalog (``shared.spark.scratch_catalog``); return the
    seconds. Raises what Spark raises."""
    started = time.monotonic()
    with scratch_catalog(spark, "icefjord_maintainer_warm_up") as catalog:
        table = TableId("warm_up", "t")
        target = table.quoted(catalog)
        settings = ", ".join(f"'{k}'='{v}'" for k, v in _PROPERTIES.items())
        spark.sql(
            f"CREATE TABLE {target} (id BIGINT, v STRING, amount DECIMAL(12, 2), "
            "n INT, at TIMESTAMP, day DATE, items ARRAY<INT>) USING iceberg "
            f"TBLPROPERTIES ({settings})"
        )
        total = max(rows, 1)
        per_file = max(1, total // WARM_UP_FILES)
        for start in range(0, total, per_file):
            spark.sql(
                f"INSERT INTO {target} SELECT id, CONCAT('row ', CAST(id AS STRING)), "
                "CAST(id AS DECIMAL(12, 2)) / 100, CAST(id % 1000 AS INT), "
                "TIMESTAMP '2026-01-01 00:00:00' + make_interval(0, 0, 0, 0, 0, 0, id), "
                "DATE '2026-01-01' + CAST(id % 365 AS INT), array(CAST(id % 7 AS INT)) "
                f"FROM range({start}, {min(start + per_file, total)})"
            )
        spark.sql(f"DELETE FROM {target} WHERE id % 3 = 0")  # position deletes to rewrite
        options = {"min-input-files": 2, "delete-file-threshold": 1}
        # The lease's property commits: the first in a fresh JVM is slow, and held.
        spark.sql(lease_sql(catalog, table, int(time.time() * 1000)))
        spark.sql(release_lease_sql(catalog, table))
        spark.sql(rewrite_position_deletes_sql(catalog, table, None, {"rewrite-all": True}))
        spark.sql(rewrite_data_files_sql(catalog, table, None, options))
        spark.sql(rewrite_manifests_sql(catalog, table))
        spark.sql(expire_snapshots_sql(catalog, table, int(time.time() * 1000), 1))
        spark.sql(f"DROP TABLE IF EXISTS {target} PURGE")
    return time.monotonic() - started


def warm_up_storage(spark: SparkSession, catalog: str, tables: Iterable[str]) -> str | None:
    """Read the first of ``tables`` that parses (``<namespace>.<table>``) through ``catalog``:
    its snapshots, its files and one row, so that the first lease on S3 does not start the
    storage's client (the first lease's commit took 1.4-1.6 s against 0.1 s for the next
    ones; HISTORY, "2026-12-02, noon"). Returns the table read, or None when there was none.
    Writes nothing. Raises what Spark raises."""
    for name in tables:
        try:
            table = parse_table(name)
        except MalformedIdentifierError:
            continue
        target = table.quoted(catalog)
        spark.sql(f"SELECT count(*) FROM {target}.snapshots").collect()
        spark.sql(f"SELECT count(*) FROM {target}.files").collect()
        spark.sql(f"SELECT * FROM {target} LIMIT 1").collect()
        return name
    return None
