"""``icefjord bench commit-cost``: what one upsert commit costs as its table grows.

The writer's upsert path commits a batch as files of its own (a data file of its rows and
deletion vectors of its keys' stored rows, found by the writer's key index,
``services/iceberg_writer/upserts.py``) where a MERGE would join the whole table, so a
commit's cost should grow with the table far less than a MERGE's. This
measures it on the stack's own catalog and warehouse (local disk, or S3 with
``ICEFJORD_LOCAL_WAREHOUSE_STORE=s3``): for each size, a table of the writer's properties
filled with that many generated rows (Spark-less appends of 1,000,000 rows each), then
``commits`` commits of ``batch`` upserts of random stored keys into each, the sizes taking
turns, after one warm-up round. The key index lives from commit to commit, as in the
writer; the warm-up round's commit, which reads every data file's keys into it (what
the writer's first commit to a table after a start pays), is reported apart.
Each commit is timed (wall) and charged (CPU of this process and of its Spark JVM, which
together are what the writer spends on it). Reports the median of each.
"""

from __future__ import annotations

import datetime as dt
import os
import random
import resource
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from icefjord.bench.cpu import parse_stat
from icefjord.local.settings import LocalSettings
from services.iceberg_writer.tables import DEFAULT_PROPERTIES, quote
from services.iceberg_writer.types import STAGING_FLAG
from services.iceberg_writer.upserts import write_upserts
from shared.settings import CatalogSettings
from shared.spark import SparkSettings, build_spark_session

NAMESPACE = "bench_commit"
_FILL_CHUNK = 1_000_000
_TICK_S = 1.0 / os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class CommitCost:
    """One table size: the medians of its commits, and how long filling it took."""

    rows: int
    batch: int
    commits: int
    wall_s: float
    cpu_s: float
    fill_s: float
    first_s: float
    """Wall seconds of the warm-up commit (the key index read from the table)."""


def _cpu_s(jvm_pid: int) -> float:
    """CPU seconds of this process and of its Spark JVM so far."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    stat = parse_stat(Path(f"/proc/{jvm_pid}/stat").read_text())
    return own.ru_utime + own.ru_stime + stat.own_ticks * _TICK_S


def _rows(keys: Sequence[int] | range, label: str, now: dt.datetime) -> pa.Table:
    """Rows of the bench table (``id``, ``name``, ``amount``, ``updated_at``) for ``keys``,
    with the writer's staging flag (nothing deleted); built column by column."""
    ids = pa.array(np.asarray(keys, dtype=np.int64))
    count = len(ids)
    micros = int(now.timestamp() * 1_000_000)
    return pa.table(
        {
            "id": ids,
            "name": pc.binary_join_element_wise(label, pc.cast(ids, pa.string()), "-"),
            "amount": pc.cast(pc.bit_wise_and(ids, 0xFFFF), pa.int32()).cast(pa.decimal128(14, 2)),
            "updated_at": pa.array(np.full(count, micros, dtype=np.int64)).cast(
                pa.timestamp("us", "UTC")
            ),
            STAGING_FLAG: pa.array(np.zeros(count, dtype=np.bool_)),
        }
    )


def bench_commit_cost(
    settings: LocalSettings,
    sizes: Sequence[int],
    *,
    batch: int = 3_000,
    commits: int = 7,
    seed: int = 5,
    keep: bool = False,
    progress: Callable[[str], None] = lambda message: None,
) -> list[CommitCost]:
    """Fill a table of each size in ``sizes``, then time ``commits`` upsert commits of
    ``batch`` random stored keys into each, the tables taking turns (so a noisy moment of
    a shared machine falls on every size alike), after one warm-up round. Needs the stack
    up."""
    jars = settings.dist_dir / f"spark-jars-{settings.iceberg_version}" / "*.jar"
    spark = build_spark_session(
        "icefjord-bench-commit-cost",
        SparkSettings(master="local[2]", jars=str(jars)),
        CatalogSettings(name=settings.catalog_name, local_state_dir=settings.state),
    )
    jvm: Any = spark.sparkContext._jvm
    jvm_pid = int(jvm.java.lang.management.ManagementFactory.getRuntimeMXBean().getPid())
    catalog = quote(settings.catalog_name)
    spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {catalog}.{NAMESPACE}")
    rng = random.Random(seed)
    now = dt.datetime.now(dt.UTC)
    targets = {rows: f"{catalog}.{NAMESPACE}.{quote(f't_{rows}')}" for rows in sizes}
    try:
        fill_s = {rows: _fill(spark, targets[rows], rows, now, progress) for rows in sizes}
        walls: dict[int, list[float]] = {rows: [] for rows in sizes}
        cpus: dict[int, list[float]] = {rows: [] for rows in sizes}
        first: dict[int, float] = {}
        indexes: dict[str, Any] = {}
        for step in range(commits + 1):
            for rows in sizes:
                frame = _rows(rng.sample(range(rows), batch), f"v{step + 1}", now)
                cpu, wall = _cpu_s(jvm_pid), time.monotonic()
                summary = {"icefjord.bench": str(step)}
                write_upserts(spark, targets[rows], frame, ["id"], summary, indexes=indexes)
                if step:  # the first round warms each table's code paths up
                    walls[rows].append(time.monotonic() - wall)
                    cpus[rows].append(_cpu_s(jvm_pid) - cpu)
                else:
                    first[rows] = time.monotonic() - wall
            progress(f"round {step} of {commits} timed" if step else "warm-up round done")
        if not keep:
            for target in targets.values():
                spark.sql(f"DROP TABLE IF EXISTS {target} PURGE")
    finally:
        spark.stop()
    return [
        CommitCost(
            rows=rows,
            batch=batch,
            commits=commits,
            wall_s=statistics.median(walls[rows]),
            cpu_s=statistics.median(cpus[rows]),
            fill_s=fill_s[rows],
            first_s=first[rows],
        )
        for rows in sizes
    ]


def _fill(
    spark: Any, target: str, rows: int, now: dt.datetime, progress: Callable[[str], None]
) -> float:
    """Create ``target`` with the writer's table properties and ``rows`` rows; the seconds."""
    properties = ", ".join(f"'{k}'='{v}'" for k, v in DEFAULT_PROPERTIES.items())
    spark.sql(f"DROP TABLE IF EXISTS {target} PURGE")
    spark.sql(
        f"CREATE TABLE {target} (id BIGINT NOT NULL, name STRING, amount DECIMAL(14,2), "
        f"updated_at TIMESTAMP) USING iceberg TBLPROPERTIES ({properties})"
    )
    began = time.monotonic()
    for start in range(0, rows, _FILL_CHUNK):
        chunk = range(start, min(rows, start + _FILL_CHUNK))
        write_upserts(spark, target, _rows(chunk, "v0", now), ["id"], {}, deletes=False)
        progress(f"{target}: {start + len(chunk):,} of {rows:,} rows")
    return time.monotonic() - began
