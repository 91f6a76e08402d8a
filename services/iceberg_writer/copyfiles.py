"""A bulk load's copy into an empty table as data files of its own, without Spark's rewrite.

The copy (``icefjord.bulk``) arrives as Parquet files whose columns are the table's, in the types
Iceberg stores. Appending them through Spark reads and rewrites every row, CPU a large snapshot's
copy needs on the same cores (HISTORY). Here each file is read with Arrow, conformed to the table
(the metadata columns' constant values added, columns in the table's order with its field ids),
written once as the table's data file, and all of them are committed in ONE append through Iceberg's
Java API, with the same snapshot summary as any commit.

Each file is split by the table's partition spec (``partitions.py``) on storage the writer
can write (``files.py``: the local file system or S3). Anything else takes the Spark path,
which also handles a table that already holds rows (an anti-join, so no key goes in twice).
"""

from __future__ import annotations

import functools
import time
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from pyiceberg.io.pyarrow import schema_to_pyarrow
from pyiceberg.schema import Schema
from pyspark.sql import SparkSession

from services.iceberg_writer.files import TableFiles, discard_uncommitted
from services.iceberg_writer.partitions import Partition, PartitionLayout, java_partition
from shared.errors import IcefjordError
from shared.spark import java

__all__ = [
    "CopyMismatchError",
    "WrittenFile",
    "arrow_schema_of",
    "built_file",
    "commit_append",
    "conform",
    "data_file",
    "layout_of",
    "parquet_codec",
    "same_type",
    "schema_of",
    "write_copy",
]

_CODECS = {"zstd": "zstd", "snappy": "snappy", "gzip": "gzip", "lz4": "lz4", "uncompressed": None}


class CopyMismatchError(IcefjordError, ValueError):
    """The copy holds a column the table lacks, or one of another type: it must wait."""


def _plain(kind: pa.DataType) -> pa.DataType:
    """``kind`` with Arrow's large variants as the plain ones (the same Parquet types)."""
    if pa.types.is_large_string(kind):
        return pa.string()
    if pa.types.is_large_binary(kind):
        return pa.binary()
    if pa.types.is_list(kind) or pa.types.is_large_list(kind):
        return pa.list_(_plain(kind.value_type))
    if pa.types.is_timestamp(kind):  # any zone: adjusted to UTC, Iceberg's timestamptz
        return pa.timestamp(kind.unit, "UTC" if kind.tz else None)
    return kind


def same_type(left: pa.DataType, right: pa.DataType) -> bool:
    """Whether two Arrow types store the same Iceberg type (large variants are equal, and
    so are time zones: Iceberg knows only with or without)."""
    return bool(_plain(left).equals(_plain(right)))


def _constant(value: Any, kind: pa.DataType, rows: int) -> pa.Array:
    if value is None:
        return pa.nulls(rows, kind)
    return pa.array([value], kind).take(pa.array(np.zeros(rows, dtype=np.int32)))


def conform(source: pa.Table, target: pa.Schema, metadata: Mapping[str, Any]) -> pa.Table:
    """``source`` as a table of ``target``'s schema: its columns cast (same types only),
    ``metadata`` columns set to their value on every row, missing ones null.

    Raises :class:`CopyMismatchError` for a column ``target`` lacks, or one of another
    type (a cast could overflow: the copy was read after the source column changed type)."""
    names = set(target.names)
    extra = [c for c in source.column_names if c not in names]
    if extra:
        raise CopyMismatchError(f"the copy has columns the table lacks: {', '.join(extra)}")
    changed = [
        f"{f.name} ({f.type}, table {target.field(f.name).type})"
        for f in source.schema
        if f.name not in metadata and not same_type(f.type, target.field(f.name).type)
    ]
    if changed:
        raise CopyMismatchError(f"the copy's types differ from the table's: {', '.join(changed)}")
    rows = source.num_rows
    columns: list[pa.Array | pa.ChunkedArray] = []
    for field in target:
        if field.name in metadata:
            columns.append(_constant(metadata[field.name], field.type, rows))
        elif field.name in source.column_names:
            columns.append(source.column(field.name).cast(field.type))
        else:
            columns.append(pa.nulls(rows, field.type))
    return pa.Table.from_arrays(columns, schema=target)


def schema_of(iceberg: Any, table: Any) -> Schema:
    """The pyiceberg schema of a Java Iceberg ``table``."""
    return _parsed_schema(str(iceberg.SchemaParser.toJson(table.schema())))


def arrow_schema_of(iceberg: Any, table: Any) -> pa.Schema:
    """The Arrow schema of a Java Iceberg ``table``, with its field ids (for Parquet)."""
    return _arrow_schema(str(iceberg.SchemaParser.toJson(table.schema())))


@functools.lru_cache(maxsize=256)
def _parsed_schema(text: str) -> Schema:
    """A schema's JSON parsed once: every commit of a table asks for it, unchanged."""
    return Schema.model_validate_json(text)


@functools.lru_cache(maxsize=256)
def _arrow_schema(text: str) -> pa.Schema:
    return schema_to_pyarrow(_parsed_schema(text), include_field_ids=True)


def layout_of(iceberg: Any, table: Any) -> PartitionLayout:
    """The partition layout of a Java Iceberg ``table``.
    Raises ValueError for a spec the writer cannot compute."""
    spec = str(iceberg.PartitionSpecParser.toJson(table.spec()))
    return PartitionLayout.of(spec, schema_of(iceberg, table))


def parquet_codec(table: Any) -> str | None:
    """The Parquet codec a Java Iceberg ``table`` asks for, as Arrow names it."""
    codec = str(table.properties().getOrDefault("write.parquet.compression-codec", "zstd"))
    return _CODECS.get(codec.lower(), "zstd")


WrittenFile = tuple[str, int]
"""A file the writer wrote: its path (as ``TableFiles`` names it) and size in bytes."""


def built_file(
    builder: Any, files: TableFiles, written: WrittenFile, spec: Any, partition: Partition
) -> Any:
    """A data or delete file's entry from its Java ``builder`` (``DataFiles.builder`` or
    ``FileMetadata.deleteFileBuilder`` of ``spec``): the Parquet file ``written``, its
    metrics and, in a partitioned spec, its ``partition``."""
    iceberg = java(files.jvm).org.apache.iceberg
    path, size = written
    builder = (
        builder.withPath(files.uri(path))
        .withFormat(iceberg.FileFormat.PARQUET)
        .withFileSizeInBytes(size)
        .withMetrics(files.metrics(path))
    )
    if partition:
        builder = builder.withPartition(java_partition(iceberg, spec, partition))
    return builder.build()


def data_file(files: TableFiles, written: WrittenFile, partition: Partition = ()) -> Any:
    """An Iceberg ``DataFile`` for a Parquet file written to the table, in ``partition`` of
    its default spec."""
    spec = files.table.spec()
    builder = java(files.jvm).org.apache.iceberg.DataFiles.builder(spec)
    return built_file(builder, files, written, spec, partition)


def commit_append(
    files: TableFiles,
    written: Sequence[tuple[WrittenFile, Partition]],
    summary: Mapping[str, str],
) -> None:
    """Commit the Parquet files ``written`` (in the table's schema, with its field ids, each
    with its partition) as one append snapshot with ``summary``."""
    append = files.table.newAppend()
    for file, partition in written:
        append.appendFile(data_file(files, file, partition))
    for key, value in summary.items():
        append.set(key, value)
    append.commit()


def write_copy(
    spark: SparkSession,
    target: str,
    copies: Sequence[str],
    metadata: Mapping[str, Any],
    summary: Mapping[str, str],
) -> float | None:
    """Append ``copies`` (local Parquet files) to ``target`` (a quoted Spark name) as data
    files of their own, in one snapshot with ``summary``; return the seconds. None: this
    table needs the Spark path (storage the writer cannot write, or a partition it cannot
    compute), nothing was written.

    Raises :class:`CopyMismatchError` as :func:`conform` does, before anything is written."""
    started = time.monotonic()
    jvm: Any = spark.sparkContext._jvm
    iceberg = java(jvm).org.apache.iceberg
    table = iceberg.spark.Spark3Util.loadIcebergTable(spark._jsparkSession, target)
    try:
        files = TableFiles.of(jvm, table)
        layout = layout_of(iceberg, table)
    except ValueError:
        return None
    arrow_schema = arrow_schema_of(iceberg, table)
    codec = parquet_codec(table)
    conformed = [conform(pq.read_table(f), arrow_schema, metadata) for f in copies]
    written: list[str] = []
    try:
        sized: list[tuple[WrittenFile, Partition]] = []
        for rows in conformed:
            for partition, part in layout.split(rows):
                path = files.new_path("copy")
                written.append(path)
                sized.append(((path, files.write(part, path, codec)), partition))
        commit_append(files, sized, summary)
    except Exception as exc:
        discard_uncommitted(exc, files, written)
        raise
    return time.monotonic() - started
