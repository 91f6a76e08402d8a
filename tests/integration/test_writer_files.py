"""The writer's own data and delete files: their Iceberg metrics against Iceberg's reader."""

from __future__ import annotations

import datetime as dt
import decimal
import math
from typing import Any

import pyarrow as pa

from services.iceberg_writer.copyfiles import arrow_schema_of
from services.iceberg_writer.files import TableFiles

METRICS = (
    "columnSizes",
    "valueCounts",
    "nullValueCounts",
    "nanValueCounts",
    "lowerBounds",
    "upperBounds",
)


def test_file_metrics_are_what_iceberg_reads_from_the_file(spark: Any, namespace: str) -> None:
    """A file the writer writes to the table's storage has the metrics Iceberg's reader
    finds in it: on local disk read with Parquet's plain configuration instead of
    ParquetUtil.fileMetrics' Hadoop one, every count and bound the same."""
    table_name = f"icefjord.{namespace}.metrics"
    spark.sql(
        f"CREATE TABLE {table_name} (id bigint, name string, amount decimal(10,2), "
        "ts timestamp, day date, ratio double, note string) USING iceberg"
    )
    jvm = spark.sparkContext._jvm
    table = jvm.org.apache.iceberg.spark.Spark3Util.loadIcebergTable(
        spark._jsparkSession, table_name
    )
    schema = arrow_schema_of(jvm.org.apache.iceberg, table)
    rows = 500
    frame = pa.Table.from_pydict(
        {
            "id": list(range(-rows // 2, rows // 2)),
            "name": [f"name-{i}-é" for i in range(rows)],
            "amount": [decimal.Decimal(i) / 100 for i in range(rows)],
            "ts": [
                dt.datetime(2026, 11, 26, tzinfo=dt.UTC) + dt.timedelta(seconds=i)
                for i in range(rows)
            ],
            "day": [dt.date(2026, 1, 1) + dt.timedelta(days=i) for i in range(rows)],
            "ratio": [math.nan if i % 7 == 0 else i / 3 for i in range(rows)],
            "note": [None if i % 2 else "x" * (i % 40) for i in range(rows)],
        },
        schema=schema,
    )
    files = TableFiles.of(jvm, table)
    path = files.new_path("metrics")
    size = files.write(frame, path, "zstd")

    ours = files.metrics(path)
    iceberg = jvm.org.apache.iceberg
    stored = table.io().newInputFile(files.uri(path))
    assert stored.getLength() == size
    theirs = iceberg.parquet.ParquetUtil.fileMetrics(stored, iceberg.MetricsConfig.forTable(table))
    assert ours.recordCount() == theirs.recordCount() == rows
    for name in METRICS:
        mine, reference = getattr(ours, name)(), getattr(theirs, name)()
        assert mine.equals(reference), (name, str(mine), str(reference))
    # Not empty: bounds for every column, the nulls of ``note`` counted.
    assert ours.lowerBounds().size() == ours.upperBounds().size() == len(schema)
    assert ours.nullValueCounts().get(7) == rows // 2
