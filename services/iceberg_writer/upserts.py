"""A batch newer than every stored row it touches, committed without a join.

A MERGE finds the stored row of each key by joining the batch with the whole table: about
1 s of Spark work per commit on a 2-core machine, whatever the batch's size, and most of
the writer's CPU when changes stream in. The join is only needed for the MERGE's guard (a
change applies only when its position is at least the stored row's). When every change of
the batch is known to be at least as new as the stored row of its key
(:class:`~services.iceberg_writer.changes.PositionBounds`), the guard always passes, and the
same result is two files in one commit (Iceberg's ``RowDelta``):

- an equality delete file holding the key of every change: it removes the key's stored row
  (any data file committed before), and is a no-op for a key the table lacks;
- a data file holding the rows of the inserts and updates, committed with the same sequence
  number, so the deletes of its own commit do not apply to it.

Both files are written by Arrow into the table's ``data/`` directory (``files.py``: on the
local file system or S3), with the table's field ids, and committed through Iceberg's Java
API with the same snapshot summary as every commit. Readers apply equality deletes (Spark,
Trino, Flink); the maintainer compacts them away and then removes the delete files no data
file needs (``services/maintainer``).

An empty table's batch (``Path.APPEND``: deletes of rows that do not exist are no-ops)
goes in the same way without the delete file: its rows as one data file, in an append
snapshot, at a fraction of a Spark job's cost (HISTORY); a snapshot of many tables waits
on those first commits.

A partitioned table's batch becomes one data file per partition, and its deletes are
scoped to partitions or global as its spec allows (``partitions.py``). Only for tables on
storage the writer can write, like the bulk copy (``copyfiles.py``): the writer chooses
this path only for such tables, and merges into any other with Spark.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import SparkSession

from services.iceberg_writer.copyfiles import (
    WrittenFile,
    arrow_schema_of,
    built_file,
    commit_append,
    data_file,
    layout_of,
    parquet_codec,
)
from services.iceberg_writer.files import TableFiles, discard_uncommitted
from services.iceberg_writer.partitions import unpartitioned_spec
from services.iceberg_writer.types import STAGING_FLAG

__all__ = ["split_batch", "write_upserts"]


def split_batch(
    batch: pa.Table, schema: pa.Schema, keys: Sequence[str]
) -> tuple[pa.Table, pa.Table]:
    """The batch (``apply.arrow_batch``: the table's columns and the delete flag) as the
    rows to add (inserts and updates, in ``schema``) and the keys to delete (every row's
    key columns, in ``schema``'s fields)."""
    upserts = batch.filter(pc.invert(batch.column(STAGING_FLAG)))
    rows = pa.Table.from_arrays(
        [upserts.column(f.name).cast(f.type) for f in schema], schema=schema
    )
    key_schema = pa.schema([schema.field(k) for k in keys])
    deleted = pa.Table.from_arrays(
        [batch.column(f.name).cast(f.type) for f in key_schema], schema=key_schema
    )
    return rows, deleted


def write_upserts(
    spark: SparkSession,
    target: str,
    batch: pa.Table,
    keys: Sequence[str],
    summary: Mapping[str, str],
    *,
    deletes: bool = True,
) -> float:
    """Commit ``batch`` to ``target`` (a quoted Spark name) as equality deletes of its keys
    and a data file of its rows, in ONE snapshot with ``summary``; return the seconds.
    ``deletes=False``: the rows alone, as an append snapshot (an empty table's batch, whose
    keys delete nothing).

    Raises ValueError for a table this path cannot write (on storage the writer cannot
    write, or with a partition it cannot compute); the Java commit's own exceptions pass
    through. Files of a commit that certainly failed are removed."""
    started = time.monotonic()
    jvm: Any = spark.sparkContext._jvm
    iceberg = jvm.org.apache.iceberg
    table = iceberg.spark.Spark3Util.loadIcebergTable(spark._jsparkSession, target)
    files = TableFiles.of(jvm, table)
    layout = layout_of(iceberg, table, keys)
    rows, deleted = split_batch(batch, arrow_schema_of(iceberg, table), keys)
    codec = parquet_codec(table)
    written: list[str] = []

    def write(frame: pa.Table, prefix: str) -> WrittenFile:
        path = files.new_path(prefix)
        written.append(path)
        return path, files.write(frame, path, codec)

    try:
        if not deletes:  # an append snapshot, as readers of appends expect
            parts = layout.split(rows) if rows.num_rows else []
            commit_append(files, [(write(part, "append"), p) for p, part in parts], summary)
            return time.monotonic() - started
        delta = table.newRowDelta()
        if rows.num_rows:
            for partition, part in layout.split(rows):
                delta.addRows(data_file(files, write(part, "upsert"), partition))
        if deleted.num_rows:
            gateway: Any = spark.sparkContext._gateway
            field_ids = gateway.new_array(jvm.int, len(keys))
            for i, name in enumerate(keys):
                field_ids[i] = table.schema().findField(name).fieldId()
            # Partition-scoped deletes where a key's row cannot change partition, else
            # global ones (partitions.py).
            scoped = layout.unpartitioned or layout.keyed
            spec = table.spec() if scoped else unpartitioned_spec(table)
            for partition, keys_part in layout.split(deleted) if scoped else [((), deleted)]:
                builder = iceberg.FileMetadata.deleteFileBuilder(spec).ofEqualityDeletes(field_ids)
                written_keys = write(keys_part, "eq-delete")
                delta.addDeletes(built_file(builder, files, written_keys, spec, partition))
        for key, value in summary.items():
            delta.set(key, value)
        delta.commit()
    except Exception as exc:
        discard_uncommitted(exc, files, written)
        raise
    return time.monotonic() - started
