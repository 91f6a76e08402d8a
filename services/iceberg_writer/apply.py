"""One Iceberg commit per table and batch, through Spark, with the checkpoint in its summary.

The batch travels Python -> Arrow -> a Parquet staging file -> Spark (never Python tuples):
Arrow types the values once, Spark reads them with its vectorised reader, and the staging
file is deleted after the commit. The commit's snapshot summary carries the offsets, commit
id, epoch and watermark, set through Iceberg's ``CommitMetadata`` for the calling thread.
"""

from __future__ import annotations

import logging
import os
import tempfile
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from pyiceberg.io.pyarrow import schema_to_pyarrow
from pyiceberg.table import Table
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from services.iceberg_writer.changes import BatchPlan, Path
from services.iceberg_writer.copyfiles import write_copy
from services.iceberg_writer.key_index import KeyIndex
from services.iceberg_writer.records import staging_table
from services.iceberg_writer.tables import quote, sql_literal
from services.iceberg_writer.types import (
    STAGING_FLAG,
    UNCHANGED_COLUMNS,
    Converter,
    MetadataColumns,
)
from services.iceberg_writer.upserts import write_upserts
from shared.errors import IcefjordError
from shared.spark import java, scratch_catalog

log = logging.getLogger(__name__)

DELETE_FLAG = STAGING_FLAG


class CommitConflictError(IcefjordError, RuntimeError):
    """Iceberg refused the commit because another commit changed what the batch touched."""


@dataclass(frozen=True, slots=True)
class WriteResult:
    path: Path
    seconds: float


@contextmanager
def commit_properties(spark: SparkSession, properties: Mapping[str, str]) -> Iterator[None]:
    """Make every Iceberg commit this thread runs carry ``properties`` in its summary."""
    jvm: Any = spark.sparkContext._jvm
    loader = java(jvm).java.lang.Thread.currentThread().getContextClassLoader()
    cls = java(jvm).java.lang.Class.forName("org.apache.iceberg.spark.CommitMetadata", True, loader)
    holder = cls.getDeclaredField("COMMIT_PROPERTIES")
    holder.setAccessible(True)
    local = holder.get(None)
    values = java(jvm).java.util.HashMap()
    for key, value in properties.items():
        values.put(key, value)
    local.set(values)
    try:
        yield
    finally:
        local.remove()


def arrow_batch(
    plan: BatchPlan,
    table: Table,
    keys: Sequence[str],
    converters: Mapping[str, Converter],
    metadata: MetadataColumns,
) -> pa.Table:
    """The batch as an Arrow table: every table column (all nullable) plus the delete flag,
    and for a partial batch (:attr:`BatchPlan.partial`) each row's unchanged columns."""
    schema = schema_to_pyarrow(table.schema(), include_field_ids=False)
    fields = [pa.field(f.name, f.type, nullable=True) for f in schema]
    fields.append(pa.field(DELETE_FLAG, pa.bool_(), nullable=False))
    partial = plan.partial
    if partial:
        fields.append(pa.field(UNCHANGED_COLUMNS, pa.list_(pa.string()), nullable=True))
    arrow_schema = pa.schema(fields)
    return staging_table(plan.upserts + plan.deletes, arrow_schema, keys, converters, metadata)


class BatchWriter:
    """Writes planned batches into tables with Spark."""

    def __init__(self, spark: SparkSession, staging_dir: str | None = None) -> None:
        self._spark = spark
        self._staging = staging_dir or tempfile.mkdtemp(prefix="icefjord-writer-")
        self._indexes: dict[str, KeyIndex] = {}
        """The key index of each table the upsert path wrote (``key_index.py``)."""
        os.makedirs(self._staging, exist_ok=True)

    def write(
        self,
        target: str,
        plan: BatchPlan,
        batch: pa.Table,
        columns: Sequence[str],
        keys: Sequence[str],
        position_column: str,
        path: Path,
        summary: Mapping[str, str],
        claims: Mapping[str, str] | None = None,
    ) -> WriteResult:
        """Commit ``batch`` to ``target`` (a quoted Spark name) as ONE Iceberg snapshot, the
        way ``path`` (from :meth:`BatchPlan.path`) says. ``claims``: the owner properties
        of the partitions the commit records (``upserts.write_upserts``)."""
        started = time.monotonic()
        if path is Path.UPSERT:
            with _conflicts():
                write_upserts(
                    self._spark,
                    target,
                    batch,
                    keys,
                    summary,
                    indexes=self._indexes,
                    claims=claims,
                )
            return WriteResult(path, time.monotonic() - started)
        if path is Path.APPEND:
            # Without a Spark job where the table allows: a new table's first commit
            # costs a fraction of a Spark job's (HISTORY). ValueError (storage or a
            # partition the writer cannot write, or a value Arrow cannot cast) comes before
            # any file is written, and Spark's append below takes the batch.
            try:
                with _conflicts():
                    write_upserts(self._spark, target, batch, keys, summary, deletes=False)
                return WriteResult(path, time.monotonic() - started)
            except ValueError:
                pass
        staged = os.path.join(self._staging, f"batch-{uuid.uuid4().hex}.parquet")
        pq.write_table(batch, staged)
        try:
            frame = self._spark.read.parquet(staged)
            with commit_properties(self._spark, summary), _conflicts():
                if path is Path.APPEND:
                    upserts = frame.where(f"NOT {quote(DELETE_FLAG)}")
                    upserts.drop(DELETE_FLAG).writeTo(target).append()
                else:
                    self._merge(target, frame, path, columns, keys, position_column)
        finally:
            os.remove(staged)
        return WriteResult(path, time.monotonic() - started)

    def append_copy(
        self,
        target: str,
        files: Sequence[str],
        metadata: Mapping[str, Any],
        keys: Sequence[str],
        position_column: str,
        insert_only: bool,
        summary: Mapping[str, str],
    ) -> WriteResult:
        """Commit a bulk load's copy (Parquet ``files``, columns named as the table's) to
        ``target`` as ONE snapshot. Each table column is cast to the table's type; a column
        the files lack is null; ``metadata`` gives the metadata columns' values (the same for
        every row). ``insert_only``: the table already holds rows, so only keys it lacks go
        in (a MERGE that Spark plans as an anti-join); otherwise a plain append, of the
        files conformed by Arrow where the table allows (``copyfiles.write_copy``).

        Raises ValueError when the files hold a column the table does not have, or one of
        another type (the copy was read under a newer source schema than the table's):
        committing would drop or overflow it."""
        started = time.monotonic()
        if not insert_only:
            seconds = write_copy(self._spark, target, files, metadata, summary)
            if seconds is not None:
                return WriteResult(Path.APPEND, seconds)
        frame = self._spark.read.parquet(*files)
        schema = self._spark.table(target).schema
        names = {f.name for f in schema.fields}
        extra = [c for c in frame.columns if c not in names]
        if extra:
            raise ValueError(f"the copy has columns the table lacks: {', '.join(extra)}")
        # The copy's types are the table's (icefjord.bulk writes what Iceberg stores). One
        # that differs was read after the source column changed type (a widening the table
        # has not had yet): a cast could overflow, so the copy waits like a missing column.
        table_types = {f.name: f.dataType.simpleString() for f in schema.fields}
        changed = [
            f"{f.name} ({f.dataType.simpleString()}, table {table_types[f.name]})"
            for f in frame.schema.fields
            if f.dataType.simpleString() != table_types[f.name]
        ]
        if changed:
            raise ValueError(f"the copy's types differ from the table's: {', '.join(changed)}")
        present = set(frame.columns)
        columns = []
        for f in schema.fields:
            if f.name in metadata:
                value = F.lit(metadata[f.name])
            elif f.name in present:
                value = F.col(quote(f.name))
            else:
                value = F.lit(None)
            columns.append(value.cast(f.dataType).alias(f.name))
        rows = frame.select(*columns)
        with commit_properties(self._spark, summary), _conflicts():
            if insert_only:
                flagged = rows.withColumn(DELETE_FLAG, F.lit(False))
                names_in_order = [f.name for f in schema.fields]
                self._merge(target, flagged, Path.INSERT, names_in_order, keys, position_column)
            else:
                rows.writeTo(target).append()
        return WriteResult(Path.INSERT if insert_only else Path.APPEND, time.monotonic() - started)

    def warm_up(
        self,
        properties: Mapping[str, str],
        paths: Sequence[Path] = (Path.APPEND, Path.MERGE, Path.INSERT, Path.UPSERT),
    ) -> float:
        """Create a throwaway table as a new table is created, commit a bulk copy to it, then
        run each of ``paths`` once; return the seconds.

        A JVM's first MERGE loads and compiles most of Spark and Iceberg (tens of seconds on 2
        cores, HISTORY), which would otherwise land on the first real commits (an initial snapshot,
        or the commits right after a restart). The table lives in a Hadoop catalog in the staging
        directory, registered for this session only, so the real catalog never sees it.
        """
        started = time.monotonic()
        with scratch_catalog(self._spark, "icefjord_warm_up", self._staging) as catalog:
            target = f"{catalog}.warm_up.t"
            settings = ", ".join(
                f"{sql_literal(k)}={sql_literal(v)}" for k, v in properties.items()
            )
            # The statements a new table's creation runs (TableStore.create): the first
            # ALTER ... SET IDENTIFIER FIELDS in a JVM took most of a second.
            self._spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {catalog}.warm_up")
            self._spark.sql(
                f"CREATE TABLE {target} (id BIGINT NOT NULL, v STRING, pos STRING) "
                f"USING iceberg TBLPROPERTIES ({settings})"
            )
            self._spark.sql(f"ALTER TABLE {target} SET IDENTIFIER FIELDS id")
            rows = pa.table(
                {
                    "id": pa.array(range(100), pa.int64()),
                    "v": [f"v{i}" for i in range(100)],
                    "pos": [f"{i:020d}" for i in range(100)],
                    DELETE_FLAG: [i % 10 == 0 for i in range(100)],
                }
            )
            # A bulk load's copy (copyfiles.write_copy): Arrow reads and rewrites the file,
            # Iceberg's Java API measures it and appends it.
            copied = os.path.join(self._staging, "warm-up-copy.parquet")
            pq.write_table(rows.drop([DELETE_FLAG]), copied)
            try:
                write_copy(self._spark, target, [copied], {}, {"icefjord.warm-up": "copy"})
            finally:
                os.remove(copied)
            for path in paths:
                if path is Path.UPSERT:
                    write_upserts(self._spark, target, rows, ["id"], {})
                    continue
                staged = os.path.join(self._staging, f"warm-up-{path.value}.parquet")
                pq.write_table(rows, staged)
                try:
                    frame = self._spark.read.parquet(staged)
                    if path is Path.APPEND:
                        frame.where(f"NOT {quote(DELETE_FLAG)}").drop(DELETE_FLAG).writeTo(
                            target
                        ).append()
                    else:
                        self._merge(target, frame, path, ["id", "v", "pos"], ["id"], "pos")
                finally:
                    os.remove(staged)
            self._spark.sql(f"DROP TABLE IF EXISTS {target} PURGE")
        return time.monotonic() - started

    def _merge(
        self,
        target: str,
        frame: DataFrame,
        path: Path,
        columns: Sequence[str],
        keys: Sequence[str],
        position_column: str,
    ) -> None:
        view = f"icefjord_batch_{uuid.uuid4().hex}"
        frame.createOrReplaceTempView(view)
        try:
            on = " AND ".join(f"t.{quote(k)} = s.{quote(k)}" for k in keys)
            pos = quote(position_column)
            guard = "" if path is Path.REPLACE else f" AND (t.{pos} IS NULL OR s.{pos} >= t.{pos})"
            partial = path is not Path.REPLACE and UNCHANGED_COLUMNS in frame.columns
            updates = ", ".join(
                f"t.{quote(c)} = {_kept(c) if partial else f's.{quote(c)}'}"
                for c in columns
                if c not in keys
            )
            names = ", ".join(quote(c) for c in columns)
            values = ", ".join(f"s.{quote(c)}" for c in columns)
            flag = quote(DELETE_FLAG)
            matched = (
                f"WHEN MATCHED AND s.{flag}{guard} THEN DELETE "
                f"WHEN MATCHED AND NOT s.{flag}{guard} THEN UPDATE SET {updates} "
            )
            if path is Path.INSERT:
                matched = ""  # Spark plans a MERGE without these as an anti-join
            statement = (
                f"MERGE INTO {target} t USING {view} s ON {on} {matched}"
                f"WHEN NOT MATCHED AND NOT s.{flag} THEN INSERT ({names}) VALUES ({values})"
            )
            if path is Path.REPLACE:
                statement += " WHEN NOT MATCHED BY SOURCE THEN DELETE"
            self._spark.sql(statement)
        finally:
            self._spark.catalog.dropTempView(view)


def _kept(column: str) -> str:
    """The MERGE's new value of ``column``: the stored one where the change left it unchanged
    (:attr:`~services.iceberg_writer.changes.Change.unchanged`), else the change's. A whole
    row's list is null, so ``array_contains`` is null and the change's value is taken."""
    return (
        f"CASE WHEN array_contains(s.{quote(UNCHANGED_COLUMNS)}, {sql_literal(column)}) "
        f"THEN t.{quote(column)} ELSE s.{quote(column)} END"
    )


_CONFLICTS = (
    "CommitFailedException",
    "ValidationException",
    "Found conflicting files",
    "Cannot commit",
    "ClaimLostException",  # the guard's: another instance claimed a partition meanwhile
)


@contextmanager
def _conflicts() -> Iterator[None]:
    """Raise a commit that lost to another one as :class:`CommitConflictError`."""
    try:
        yield
    except Exception as exc:
        if _is_conflict(exc):
            raise CommitConflictError(_first_line(exc)) from exc
        raise


def _is_conflict(exc: BaseException) -> bool:
    text = f"{type(exc).__name__}: {exc}"
    return any(marker in text for marker in _CONFLICTS)


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0][:500]
