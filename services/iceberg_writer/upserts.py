"""A batch newer than every stored row it touches, committed without a join.

A MERGE finds the stored row of each key by joining the batch with the whole table: about
1 s of Spark work per commit on a 2-core machine, whatever the batch's size, and most of
the writer's CPU when changes stream in. The join is only needed for the MERGE's guard (a
change applies only when its position is at least the stored row's). When every change of
the batch is known to be at least as new as the stored row of its key
(:class:`~services.iceberg_writer.changes.PositionBounds`), the guard always passes, and the
same result is two files in one commit (Iceberg's ``RowDelta``):

- a data file holding the rows of the inserts and updates;
- a Puffin file of deletion vectors (``deletion_vectors.py``): for each data file holding a
  stored row of a key of the batch, that row's position, merged with the file's earlier
  vector, which the commit replaces. The positions come from the key index
  (``key_index.py``), read from the snapshot the commit starts from; the commit validates
  that those data files and vectors are still the table's, so a compaction in between
  makes it a conflict that is planned again (``committer.py``), never a wrong delete.

Deletion vectors are what every engine reading format v3 applies (Spark, Trino, pyiceberg,
DuckDB). The path wrote equality deletes of every key until 2026-11-28: cheaper to write
(no lookup), but pyiceberg refuses to scan them and DuckDB did not apply them, so the tables
were readable by Spark and Trino only until the next compaction (HISTORY). A vector deletes
rows in stored files, so a compaction rewriting those files and this commit exclude each
other: the path now waits out the maintainer's lease as the MERGE does (``shared/lease.py``).

Both files are written into the table's ``data/`` directory (``files.py``: on the local
file system or S3), with the table's field ids, and committed through Iceberg's Java API
with the same snapshot summary as every commit.

An empty table's batch (``Path.APPEND``: deletes of rows that do not exist are no-ops)
goes in the same way without the vectors: its rows as one data file, in an append
snapshot, at a fraction of a Spark job's cost (HISTORY); a snapshot of many tables waits
on those first commits.

A partitioned table's batch becomes one data file per partition; each vector carries the
spec and partition of the file it deletes from, wherever an update moved its key. Only for
tables on storage the writer can write, like the bulk copy (``copyfiles.py``): the writer
chooses this path only for such tables, and merges into any other with Spark.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Mapping, Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pyiceberg.conversions import to_bytes
from pyiceberg.partitioning import PartitionSpec
from pyiceberg.types import StringType
from pyroaring import BitMap64
from pyspark.sql import SparkSession

from services.iceberg_writer.copyfiles import (
    WrittenFile,
    arrow_schema_of,
    commit_append,
    data_file,
    layout_of,
    parquet_codec,
    schema_of,
)
from services.iceberg_writer.deletion_vectors import puffin_file
from services.iceberg_writer.files import TableFiles, discard_uncommitted
from services.iceberg_writer.key_index import KeyIndex, LiveFile
from services.iceberg_writer.types import STAGING_FLAG
from shared.lease import LEASE_PROPERTY, leased
from shared.spark import java

__all__ = ["LeaseTakenError", "split_batch", "write_upserts"]


LEASE_GUARD = "io.icefjord.iceberg.LeaseGuard"
"""The Java side of the lease for an upsert commit (``deploy/iceberg-lease-guard``)."""

_log = logging.getLogger(__name__)


class LeaseTakenError(Exception):
    """The maintainer took the table's compaction lease while this commit was made: the
    commit was not made (its files are removed), and its changes wait for the lease's end
    like any held-back commit's."""


def _row_delta(jvm: Any, table: Any, lease: bool, claims: Mapping[str, str]) -> tuple[Any, bool]:
    """A ``RowDelta`` on ``table`` and whether the guard (``deploy/iceberg-lease-guard``)
    checks it: against the compaction lease when ``lease``, and against ``claims``.

    The writer looks at the lease before it plans a batch. A lease taken after that, while
    the batch's files are written or while Iceberg writes the commit's manifests, makes the
    catalog's swap fail; Iceberg would then retry the commit on the leased metadata, land
    it under the lease, and the maintainer's rewrite, planned before it, would lose to it
    and run again while the writer waits. The guard refuses a commit built on leased
    metadata, retries included, and likewise one built on metadata where another instance
    has claimed a partition of ``claims`` (its properties and this instance's token).
    Without its jar on Spark's classpath (a Spark set up by hand), the caller looks at the
    lease once more instead, which leaves the window of Iceberg's own commit open."""
    if not (lease or claims):
        return table.newRowDelta(), False
    if _guard_loadable(jvm):
        java_claims = java(jvm).java.util.HashMap()
        for key, token in claims.items():
            java_claims.put(key, token)
        guard = java(jvm).io.icefjord.iceberg.LeaseGuard
        guarded_table = guard.guard(table, LEASE_PROPERTY if lease else None, java_claims)
        return guarded_table.newRowDelta(), True
    if lease:
        _warn_unguarded()
    return table.newRowDelta(), False


@functools.cache
def _guard_loadable(jvm: Any) -> bool:
    """Whether the guard's class is on the JVM's classpath: asked once per JVM, not at
    every commit (the classpath is fixed when the JVM starts)."""
    return bool(jvm.org.apache.spark.util.Utils.classIsLoadable(LEASE_GUARD))


@functools.cache
def _warn_unguarded() -> None:
    _log.warning(
        "the lease guard is not on Spark's classpath: a compaction lease taken while a "
        "commit is made can let the commit in",
        extra={"class": LEASE_GUARD},
    )


def _lease_taken(table: Any) -> bool:
    """Whether the table, read again now, is under the compaction lease (the look before
    the commit when there is no guard)."""
    table.refresh()
    return leased(table.properties(), int(time.time() * 1000))  # a java.util.Map: .get


def _refused(exc: Exception) -> bool:
    """Whether ``exc`` is the guard refusing a commit under the lease (a claim it refuses
    is a conflict: ``apply.py``)."""
    cause = getattr(exc, "java_exception", None)
    return cause is not None and str(cause.getClass().getName()) == _LEASE_TAKEN


_LEASE_TAKEN = f"{LEASE_GUARD}$LeaseTakenException"


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
    indexes: dict[str, KeyIndex] | None = None,
    claims: Mapping[str, str] | None = None,
) -> float:
    """Commit ``batch`` to ``target`` (a quoted Spark name) as a data file of its rows and
    deletion vectors of the stored rows of its keys, in ONE snapshot with ``summary``;
    return the seconds. ``deletes=False``: the rows alone, as an append snapshot (an empty
    table's batch, whose keys delete nothing). ``indexes``: the key index of each table
    (``key_index.py``) by ``target``, kept by the caller from commit to commit (without
    it, every data file's keys are read for this commit alone). ``claims``: the owner
    properties of the partitions the commit records, with this instance's token
    (``ownership.Owner.claims``); the guard then refuses the commit once another instance
    holds one of them, and deletes of other instances committed meanwhile (their own
    partitions' keys) no longer make it a conflict.

    Raises ValueError for a table this path cannot write (on storage the writer cannot
    write, or with a partition it cannot compute); the Java commit's own exceptions pass
    through, a validation failure when the table changed under the commit among them.
    Files of a commit that certainly failed are removed."""
    started = time.monotonic()
    jvm: Any = spark.sparkContext._jvm
    iceberg = java(jvm).org.apache.iceberg
    table = iceberg.spark.Spark3Util.loadIcebergTable(spark._jsparkSession, target)
    files = TableFiles.of(jvm, table)
    layout = layout_of(iceberg, table)
    rows, deleted = split_batch(batch, arrow_schema_of(iceberg, table), keys)
    codec = parquet_codec(table)
    written: list[str] = []
    added: list[tuple[str, pa.Table]] = []
    remembered: list[tuple[str, dict[str, BitMap64]]] = []

    def write(frame: pa.Table, prefix: str) -> WrittenFile:
        path = files.new_path(prefix)
        written.append(path)
        added.append((files.uri(path), frame))
        return path, files.write(frame, path, codec)

    try:
        if not deletes:  # an append snapshot, as readers of appends expect
            parts = layout.split(rows) if rows.num_rows else []
            commit_append(files, [(write(part, "append"), p) for p, part in parts], summary)
            return time.monotonic() - started
        base = table.currentSnapshot()
        ids = [table.schema().findField(name).fieldId() for name in keys]
        index = (indexes or {}).get(target)
        if index is None or not index.serves(keys, ids):
            index = KeyIndex(files.io, keys, ids)
            if indexes is not None:
                indexes[target] = index
        live: Sequence[LiveFile] = []
        located: Mapping[str, BitMap64] = {}
        if base is not None and deleted.num_rows:
            live = index.live_files(str(base.manifestListLocation()))
            located = index.positions(live, deleted)
        # Only deletes in stored files wait for a lease: a rewrite cannot lose to new rows.
        deletes_stored = bool(located)
        delta, guarded = _row_delta(jvm, table, deletes_stored, claims or {})
        if base is not None and deleted.num_rows:
            delta.validateFromSnapshot(base.snapshotId())
        if located:
            _validate_deletes_in(files, delta, located, concurrent=not (guarded and claims))
            if int(table.operations().current().formatVersion()) >= 3:
                path = files.new_path("dv", ".puffin")
                written.append(path)
                _add_vectors(files, delta, index, live, located, path)
            else:
                for path, positions in _add_position_deletes(files, delta, live, located, codec):
                    written.append(path)
                    remembered.append((files.uri(path), positions))
        if rows.num_rows:
            for partition, part in layout.split(rows):
                delta.addRows(data_file(files, write(part, "upsert"), partition))
        for key, value in summary.items():
            delta.set(key, value)
        if deletes_stored and not guarded and _lease_taken(table):
            raise LeaseTakenError(f"the compaction lease of {target} was taken")
        try:
            delta.commit()
        except Exception as exc:
            if _refused(exc):
                raise LeaseTakenError(f"the compaction lease of {target} was taken") from exc
            raise
    except Exception as exc:
        discard_uncommitted(exc, files, written)
        raise
    for location, frame in added:  # read back otherwise, by the next commit
        index.remember(location, frame)
    for location, positions in remembered:
        index.remember_deletes(location, positions)
    return time.monotonic() - started


def _add_vectors(
    files: TableFiles,
    delta: Any,
    index: KeyIndex,
    live: Sequence[LiveFile],
    located: Mapping[str, BitMap64],
    path: str,
) -> None:
    """Write one Puffin file at ``path`` with a vector per data file of ``located`` (its
    earlier vector merged in) and add them to ``delta``, replacing the earlier ones."""
    by_location = {f.location: f for f in live}
    merged: list[tuple[str, BitMap64]] = []
    for location, positions in sorted(located.items()):
        merged.append((location, positions | index.deleted(by_location[location])))
    puffin = puffin_file(merged)
    size = files.write_bytes(puffin.content, path)
    partitions = _Partitions(files)
    for blob in puffin.blobs:
        data = by_location[blob.referenced]
        delta.addDeletes(
            partitions.vector(
                data, files.uri(path), size, blob.offset, blob.length, blob.cardinality
            )
        )
        if data.vector is not None:
            earlier = data.vector
            delta.removeDeletes(
                partitions.vector(
                    data,
                    earlier.location,
                    earlier.size,
                    earlier.offset,
                    earlier.length,
                    earlier.cardinality,
                )
            )


def _validate_deletes_in(
    files: TableFiles, delta: Any, located: Mapping[str, BitMap64], concurrent: bool
) -> None:
    """Make ``delta`` fail unless every data file it deletes from is still the table's
    when it commits: a rewrite that replaced one makes the commit a conflict, planned
    again from the new files (``committer.py``).

    ``concurrent``: also fail when any delete file was committed since the commit's base
    (Iceberg's ``validateNoConflictingDeleteFiles``, which cannot tell whose rows they
    delete). Without it, a commit lands beside another writer instance's deletes, which
    are of other keys: each key's changes are on one partition, and the guard refuses a
    commit of a partition another instance has claimed. Format v3 keeps one deletion
    vector per data file: Iceberg still refuses a vector over a file another commit gave
    one meanwhile, and the commit is planned again."""
    referenced = java(files.jvm).java.util.ArrayList()
    for location in located:
        referenced.add(location)
    delta.validateDataFilesExist(referenced)
    delta.validateDeletedFiles()
    if concurrent:
        delta.validateNoConflictingDeleteFiles()


_FILE_PATH_ID = 2**31 - 1 - 101
_POS_ID = 2**31 - 1 - 102
_POSITION_DELETES = pa.schema(
    [
        pa.field("file_path", pa.string(), False, {b"PARQUET:field_id": str(_FILE_PATH_ID)}),
        pa.field("pos", pa.int64(), False, {b"PARQUET:field_id": str(_POS_ID)}),
    ]
)
"""Iceberg's position delete file schema (reserved field ids of ``file_path`` and ``pos``)."""


def _add_position_deletes(
    files: TableFiles,
    delta: Any,
    live: Sequence[LiveFile],
    located: Mapping[str, BitMap64],
    codec: str | None,
) -> list[tuple[str, dict[str, BitMap64]]]:
    """Format v2: one position delete file per partition of the data files in ``located``
    (rows sorted by file and position, as the spec asks), added to ``delta``; the files
    written, as ``fs`` names them, with the positions each deletes."""
    iceberg = java(files.jvm).org.apache.iceberg
    by_location = {f.location: f for f in live}
    groups: dict[tuple[int, str], list[str]] = {}
    for location in sorted(located):
        data = by_location[location]
        groups.setdefault((data.spec_id, repr(data.partition)), []).append(location)
    partitions = _Partitions(files)
    out: list[tuple[str, dict[str, BitMap64]]] = []
    for locations in groups.values():
        paths: list[str] = []
        positions: list[int] = []
        for location in locations:
            deleted = list(located[location])
            paths += [location] * len(deleted)
            positions += deleted
        frame = pa.Table.from_arrays(
            [pa.array(paths, pa.string()), pa.array(positions, pa.int64())],
            schema=_POSITION_DELETES,
        )
        path = files.new_path("pos-delete")
        size = files.write(frame, path, codec)
        data = by_location[locations[0]]
        spec = partitions.spec(data.spec_id)
        builder = (
            iceberg.FileMetadata.deleteFileBuilder(spec)
            .ofPositionDeletes()
            .withFormat(iceberg.FileFormat.PARQUET)
            .withPath(files.uri(path))
            .withFileSizeInBytes(size)
            .withRecordCount(frame.num_rows)
            .withMetrics(files.metrics(path))
        )
        if len(locations) == 1:
            builder = builder.withReferencedDataFile(locations[0])
        if not spec.isUnpartitioned():
            builder = builder.withPartition(partitions.partition(spec, data))
        delta.addDeletes(builder.build())
        out.append((path, {location: located[location] for location in locations}))
    return out


class _Partitions:
    """Java ``DeleteFile`` entries of vectors in the spec and partition of their data file
    (the partition's values read from the manifest by pyiceberg, handed over in Iceberg's
    single-value serialization; text as it is, which Java holds as a ``String``)."""

    def __init__(self, files: TableFiles) -> None:
        self._files = files
        self._iceberg = java(files.jvm).org.apache.iceberg
        self._specs = files.table.specs()
        self._types: dict[int, tuple[Any, Any]] = {}

    def spec(self, spec_id: int) -> Any:
        return self._specs.get(spec_id)

    def vector(
        self, data: LiveFile, location: str, size: int, offset: int, length: int, rows: int
    ) -> Any:
        spec = self._specs.get(data.spec_id)
        builder = (
            self._iceberg.FileMetadata.deleteFileBuilder(spec)
            .ofPositionDeletes()
            .withFormat(self._iceberg.FileFormat.PUFFIN)
            .withPath(location)
            .withFileSizeInBytes(size)
            .withRecordCount(rows)
            .withReferencedDataFile(data.location)
            .withContentOffset(offset)
            .withContentSizeInBytes(length)
        )
        if not spec.isUnpartitioned():
            builder = builder.withPartition(self.partition(spec, data))
        return builder.build()

    def partition(self, spec: Any, data: LiveFile) -> Any:
        """The Java partition of ``data`` in its ``spec``."""
        kinds = self._types.get(data.spec_id)
        if kinds is None:
            iceberg = self._iceberg
            spec_json = str(iceberg.PartitionSpecParser.toJson(spec))
            parsed = PartitionSpec.model_validate_json(spec_json)
            python = parsed.partition_type(schema_of(iceberg, self._files.table))
            kinds = self._types[data.spec_id] = (spec.partitionType(), python)
        java_type, python = kinds
        partition = self._iceberg.PartitionData(java_type)
        buffer = java(self._files.jvm).java.nio.ByteBuffer
        for i, field in enumerate(python.fields):
            value = data.partition[i]
            if value is not None and not isinstance(field.field_type, StringType):
                serialized = to_bytes(field.field_type, value)
                value = self._iceberg.types.Conversions.fromByteBuffer(
                    java_type.fields().get(i).type(), buffer.wrap(bytearray(serialized))
                )
            partition.set(i, value)
        return partition
