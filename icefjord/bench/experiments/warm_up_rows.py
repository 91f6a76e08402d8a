"""What the maintainer's warm-up buys the first compaction after it, by the warm-up's size.

``make`` prepares a 110,000-row merge-on-read table (41 inserts, 40 position deletes) in a
Hadoop catalog under ``/tmp/icefjord-warm-up-rows``. Each run then starts a cold Spark
session with the maintainer's settings, runs ``warm_up(rows)`` (none for -1), compacts a copy
of that table, and prints the wall time and CPU seconds (this process and its JVM) of both:

    .venv/bin/python icefjord/bench/experiments/warm_up_rows.py make
    .venv/bin/python icefjord/bench/experiments/warm_up_rows.py 400
    .venv/bin/python icefjord/bench/experiments/warm_up_rows.py 100000
    .venv/bin/python icefjord/bench/experiments/warm_up_rows.py -1

Run the sizes alternately, on an otherwise idle machine.
"""

from __future__ import annotations

import os
import shutil
import sys
import time
from pathlib import Path

from pyspark.sql import SparkSession

from icefjord.bench.cpu import read_processes
from services.maintainer.config import MaintainerSettings
from services.maintainer.warm import warm_up
from shared.spark import build_spark_session

ROOT = Path("/tmp/icefjord-warm-up-rows")
COLUMNS = "id BIGINT, v STRING, amount DECIMAL(14,2), n INT, at TIMESTAMP, day DATE"
ROW = (
    "id, CAST(id AS STRING), CAST(id AS DECIMAL(14,2)), CAST(id AS INT), "
    "TIMESTAMP '2026-01-01 00:00:00', DATE '2026-01-01'"
)
MERGE_ON_READ = (
    "'format-version'='2', 'write.delete.mode'='merge-on-read', "
    "'write.update.mode'='merge-on-read', 'write.merge.mode'='merge-on-read'"
)


def _cpu_seconds() -> float:
    """CPU seconds of this process and its children (the JVM) so far."""
    me = os.getpid()
    ticks = sum(p.own_ticks for p in read_processes() if me in (p.pid, p.ppid))
    return ticks / os.sysconf("SC_CLK_TCK")


def _catalog(spark: SparkSession, warehouse: Path) -> None:
    spark.conf.set("spark.sql.catalog.exp", "org.apache.iceberg.spark.SparkCatalog")
    spark.conf.set("spark.sql.catalog.exp.type", "hadoop")
    spark.conf.set("spark.sql.catalog.exp.warehouse", f"file://{warehouse}")


def _make(spark: SparkSession) -> None:
    shutil.rmtree(ROOT, ignore_errors=True)
    _catalog(spark, ROOT / "table")
    spark.sql(f"CREATE TABLE exp.ns.t ({COLUMNS}) USING iceberg TBLPROPERTIES ({MERGE_ON_READ})")
    spark.sql(f"INSERT INTO exp.ns.t SELECT {ROW} FROM range(0, 80000)")
    for batch in range(40):
        low = 80_000 + batch * 750
        spark.sql(f"INSERT INTO exp.ns.t SELECT {ROW} FROM range({low}, {low + 750})")
        spark.sql(
            f"DELETE FROM exp.ns.t WHERE id >= {batch * 800} AND id < {batch * 800 + 800} "
            "AND id % 2 = 0"
        )
    print(f"made {ROOT / 'table'}")


def _run(spark: SparkSession, rows: int) -> None:
    work = ROOT / "run"
    shutil.rmtree(work, ignore_errors=True)
    shutil.copytree(ROOT / "table", work)
    started, cpu = time.monotonic(), _cpu_seconds()
    if rows >= 0:
        warm_up(spark, rows)
    warmed, warm_cpu = time.monotonic(), _cpu_seconds()
    _catalog(spark, work)
    spark.sql("SELECT count(*) FROM exp.ns.t").collect()
    before, before_cpu = time.monotonic(), _cpu_seconds()
    spark.sql(
        "CALL exp.system.rewrite_data_files(table => 'ns.t', "
        "options => map('min-input-files', '2', 'delete-file-threshold', '1'))"
    ).collect()
    after, after_cpu = time.monotonic(), _cpu_seconds()
    print(
        f"warm-up rows={rows}: {warmed - started:.1f} s wall, {warm_cpu - cpu:.1f} CPU s; "
        f"first compaction {after - before:.1f} s wall, {after_cpu - before_cpu:.1f} CPU s"
    )


def main() -> None:
    settings = MaintainerSettings()
    spark = build_spark_session("warm-up-rows", settings.spark, settings.catalog)
    try:
        if sys.argv[1:] == ["make"]:
            _make(spark)
        else:
            _run(spark, int(sys.argv[1]))
    finally:
        spark.stop()


if __name__ == "__main__":
    main()
