"""The writer's tables: creation, schema evolution, epoch claims and checkpoints.

Reads go through pyiceberg (metadata only, cheap); every change goes through Spark SQL,
because the tables are format v3 (deletion vectors) and pyiceberg 0.12 cannot write v3
metadata. Identifiers reach SQL only through :func:`quote`, after validation.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pyiceberg.catalog import Catalog
from pyiceberg.exceptions import NoSuchTableError
from pyiceberg.manifest import DataFile, ManifestContent
from pyiceberg.schema import Schema
from pyiceberg.table import Table
from pyiceberg.types import (
    BinaryType,
    BooleanType,
    DateType,
    DecimalType,
    DoubleType,
    FixedType,
    FloatType,
    IcebergType,
    IntegerType,
    ListType,
    LongType,
    MapType,
    StringType,
    StructType,
    TimestampType,
    TimestamptzType,
)
from pyspark.sql import SparkSession

from services.iceberg_writer.files import writable_scheme
from services.iceberg_writer.partitions import supported_spec
from services.iceberg_writer.types import MetadataColumns, table_schema, type_from_json
from shared.errors import IcefjordError, warehouse_unavailable
from shared.events import SchemaChange, SchemaOperationKind

OFFSETS = "icefjord.offsets"
COMMIT_ID = "icefjord.commit-id"
EPOCH = "icefjord.writer-epoch"
WATERMARK = "icefjord.watermark-ms"
TRUNCATED_AT = "icefjord.truncated-at"
BULK_LOAD_ID = "icefjord.bulk-load-id"
SCHEMA_ID_PROPERTY = "icefjord.schema.id"
SCHEMA_IDS_PROPERTY = "icefjord.schema.ids"
SCHEMA_VERSION_PROPERTY = "icefjord.schema.version"

DEFAULT_PROPERTIES: Mapping[str, str] = {
    # Format v2: its deletes are position delete files, which every engine reads (Spark,
    # Trino 476, pyiceberg, DuckDB). v3 stores them as deletion vectors, which Trino reads
    # only from a release after 476; a table's `properties` may still ask for "3", and the
    # writer then writes deletion vectors (upserts.py, docs/readers.md).
    "format-version": "2",
    "write.delete.mode": "merge-on-read",
    "write.update.mode": "merge-on-read",
    "write.merge.mode": "merge-on-read",
    "write.parquet.compression-codec": "zstd",
    "write.distribution-mode": "none",
    # Every commit adds a manifest, and every MERGE plans by reading them all; merging at
    # 10 (Iceberg's default is 100) keeps planning cheap in a table committed every second.
    "commit.manifest.min-count-to-merge": "10",
    # The writer and the maintainer's rewrites commit to a table at the same time (upsert
    # commits go ahead under a compaction lease, shared/lease.py). A commit that finds the
    # metadata changed re-applies itself to the new metadata (after 0.1, 0.2, 0.4 ... s);
    # with Iceberg's default of 4 tries a rewrite could lose to a writer committing twice a
    # second, and the maintainer then ran the whole rewrite again.
    "commit.retry.num-retries": "6",
}

log = logging.getLogger("services.iceberg_writer")

_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")
_PARTITION = re.compile(
    r"^(?:(?P<fn>identity|years|months|days|hours)\((?P<col>[A-Za-z_][A-Za-z0-9_]*)\)"
    r"|(?P<pfn>bucket|truncate)\((?P<n>[1-9][0-9]{0,5}),\s*(?P<pcol>[A-Za-z_][A-Za-z0-9_]*)\)"
    r"|(?P<bare>[A-Za-z_][A-Za-z0-9_]*))$"
)


class FencedError(IcefjordError, RuntimeError):
    """A writer of another consumer group claimed partitions of a table this one writes
    (``ownership.py``): two deployments write one table, and the older one must stop."""


def quote(name: str) -> str:
    """Backtick-quote one identifier part after checking it is a plain name."""
    if not _NAME.fullmatch(name):
        raise ValueError(f"{name!r} is not a valid identifier (letters, digits, underscore)")
    return f"`{name}`"


def sql_literal(value: str) -> str:
    """A Spark SQL string literal of ``value``, escaped."""
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def partition_sql(expression: str) -> str:
    """A validated Spark partition transform, e.g. ``days(created_at)``, ``bucket(16, id)``."""
    match = _PARTITION.fullmatch(expression.strip())
    if match is None:
        raise ValueError(
            f"partition {expression!r} is not one of identity|years|months|days|hours(col), "
            "bucket|truncate(n, col) or a column name"
        )
    if match["fn"]:
        return f"{match['fn']}({quote(match['col'])})"
    if match["pfn"]:
        return f"{match['pfn']}({int(match['n'])}, {quote(match['pcol'])})"
    return quote(match["bare"])


def spark_type(iceberg: IcebergType) -> str:
    """Spark SQL DDL for an Iceberg type."""
    simple: list[tuple[type[IcebergType], str]] = [
        (BooleanType, "BOOLEAN"),
        (IntegerType, "INT"),
        (LongType, "BIGINT"),
        (FloatType, "FLOAT"),
        (DoubleType, "DOUBLE"),
        (StringType, "STRING"),
        (BinaryType, "BINARY"),
        (FixedType, "BINARY"),
        (DateType, "DATE"),
        (TimestamptzType, "TIMESTAMP"),
        (TimestampType, "TIMESTAMP_NTZ"),
    ]
    for kind, ddl in simple:
        if isinstance(iceberg, kind):
            return ddl
    if isinstance(iceberg, DecimalType):
        return f"DECIMAL({iceberg.precision}, {iceberg.scale})"
    if isinstance(iceberg, ListType):
        return f"ARRAY<{spark_type(iceberg.element_type)}>"
    if isinstance(iceberg, MapType):
        return f"MAP<{spark_type(iceberg.key_type)}, {spark_type(iceberg.value_type)}>"
    if isinstance(iceberg, StructType):
        parts = [
            f"{quote(f.name)}: {spark_type(f.field_type)}{' NOT NULL' if f.required else ''}"
            for f in iceberg.fields
        ]
        return f"STRUCT<{', '.join(parts)}>"
    raise ValueError(f"no Spark type for {iceberg}")


@dataclass(frozen=True, slots=True)
class TableConfig:
    """Per-table layout: partition transforms and extra table properties."""

    partition_by: tuple[str, ...] = ()
    properties: Mapping[str, str] | None = None


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """What the latest writer commit in a table's history recorded."""

    snapshot_id: int
    commit_id: str
    epoch: int
    watermark_ms: int | None
    offsets: Mapping[tuple[str, int], int]
    truncated_at: str | None = None


def encode_offsets(offsets: Mapping[tuple[str, int], int]) -> str:
    return json.dumps(
        {f"{topic}:{partition}": n for (topic, partition), n in sorted(offsets.items())}
    )


def decode_offsets(text: str) -> dict[tuple[str, int], int]:
    out: dict[tuple[str, int], int] = {}
    for name, value in json.loads(text).items():
        topic, _, partition = str(name).rpartition(":")
        out[(topic, int(partition))] = int(value)
    return out


def checkpoint_of(table: Table) -> Checkpoint | None:
    """Walk back from the current snapshot to the newest one a writer commit made.

    Maintenance commits (compaction, expiry) carry no offsets and are stepped over. Each
    partition's offset comes from the newest commit that carries it: writer instances that
    share a table each record only the partitions they own (``ownership.py``). The truncate
    position is the highest any commit recorded: an instance that had not seen another's
    truncate repeats an older one.
    """
    snapshot = table.current_snapshot()
    newest: Checkpoint | None = None
    offsets: dict[tuple[str, int], int] = {}
    truncated_at: str | None = None
    while snapshot is not None:
        summary = snapshot.summary.additional_properties if snapshot.summary else {}
        if summary.get(TRUNCATED_AT) and summary[TRUNCATED_AT] > (truncated_at or ""):
            truncated_at = summary[TRUNCATED_AT]
        if OFFSETS in summary:
            for tp, n in decode_offsets(summary[OFFSETS]).items():
                offsets.setdefault(tp, n)
            if newest is None:
                newest = Checkpoint(
                    snapshot_id=snapshot.snapshot_id,
                    commit_id=summary.get(COMMIT_ID, ""),
                    epoch=int(summary.get(EPOCH, "0")),
                    watermark_ms=int(summary[WATERMARK]) if WATERMARK in summary else None,
                    offsets={},
                )
        if snapshot.parent_snapshot_id is None:
            break
        snapshot = table.snapshot_by_id(snapshot.parent_snapshot_id)
    if newest is None:
        return None
    return Checkpoint(
        newest.snapshot_id,
        newest.commit_id,
        newest.epoch,
        newest.watermark_ms,
        offsets,
        truncated_at,
    )


def commit_in(table: Table, commit_id: str) -> Checkpoint | None:
    """The writer commit ``commit_id`` in ``table``'s history, walking back from the current
    snapshot (a commit just made is the current one or a few back, when instances sharing
    the table committed after it), with the offsets it recorded."""
    snapshot = table.current_snapshot()
    while snapshot is not None:
        summary = snapshot.summary.additional_properties if snapshot.summary else {}
        if summary.get(COMMIT_ID) == commit_id and OFFSETS in summary:
            return Checkpoint(
                snapshot_id=snapshot.snapshot_id,
                commit_id=commit_id,
                epoch=int(summary.get(EPOCH, "0")),
                watermark_ms=int(summary[WATERMARK]) if WATERMARK in summary else None,
                offsets=decode_offsets(summary[OFFSETS]),
                truncated_at=summary.get(TRUNCATED_AT),
            )
        if snapshot.parent_snapshot_id is None:
            return None
        snapshot = table.snapshot_by_id(snapshot.parent_snapshot_id)
    return None


def recorded_since(
    table: Table, snapshot_id: int | None
) -> Iterator[tuple[int, dict[tuple[str, int], int]]]:
    """Each writer commit after ``snapshot_id`` (None, or a snapshot no longer in the
    history: all of them), newest first: its snapshot id and the offsets it recorded."""
    snapshot = table.current_snapshot()
    while snapshot is not None and snapshot.snapshot_id != snapshot_id:
        summary = snapshot.summary.additional_properties if snapshot.summary else {}
        if OFFSETS in summary:
            yield snapshot.snapshot_id, decode_offsets(summary[OFFSETS])
        if snapshot.parent_snapshot_id is None:
            return
        snapshot = table.snapshot_by_id(snapshot.parent_snapshot_id)


def live_data_files(table: Table) -> Iterator[DataFile]:
    """The data files of ``table``'s current snapshot, read from its data manifests.

    Not ``table.scan().plan_files()``: pyiceberg refuses to plan a scan of a table with
    equality delete files (the upsert path writes them), and these bounds need no deletes.
    """
    snapshot = table.current_snapshot()
    if snapshot is None:
        return
    for manifest in snapshot.manifests(table.io):
        if manifest.content != ManifestContent.DATA:
            continue
        for entry in manifest.fetch_manifest_entry(table.io, discard_deleted=True):
            yield entry.data_file


def position_floor(table: Table, column: str) -> str | None:
    """The lowest position of any row in ``table``'s data files, from their column bounds.

    None when it is not known for certain: no data files, a file without a lower bound for
    ``column`` or without a null count, or a null position in any file (a row the MERGE's
    guard always overwrites). A bound of a deleted row only lowers the floor, which is safe.
    Bounds are only exact with full metrics for ``column`` (set at creation); a truncated
    bound is a prefix, lower than the position, so the floor is then merely too low.
    """
    field_id = table.schema().find_field(column).field_id
    floor: str | None = None
    for data in live_data_files(table):
        lower = (data.lower_bounds or {}).get(field_id)
        nulls = (data.null_value_counts or {}).get(field_id)
        if lower is None or nulls is None or nulls > 0:
            return None
        bound = lower.decode("utf-8")
        floor = bound if floor is None else min(floor, bound)
    return floor


def position_ceiling(table: Table, column: str) -> str | None:
    """The highest position of any row in ``table``'s data files, from their column bounds
    ("" for a table without data files: below every position).

    None when it is not known: a file holding non-null positions without an upper bound
    for ``column`` (or without the counts to tell). A null position needs no bound (the
    MERGE's guard always overwrites such a row), and a bound of a deleted row only raises
    the ceiling, which is safe. A truncated upper bound is rounded up, so it stays above.
    """
    field_id = table.schema().find_field(column).field_id
    ceiling = ""
    for data in live_data_files(table):
        upper = (data.upper_bounds or {}).get(field_id)
        if upper is None:
            nulls = (data.null_value_counts or {}).get(field_id)
            if nulls is None or nulls < data.record_count:
                return None
            continue
        ceiling = max(ceiling, upper.decode("utf-8"))
    return ceiling


def writes_own_files(table: Table) -> bool:
    """Whether ``table`` can take commits of files the writer writes itself (the bulk
    copy's and the upsert path's): on storage the writer can write (``files.py``: the local
    file system or S3), with partition values it can compute (``partitions.py``)."""
    return writable_scheme(table.location()) and supported_spec(table.spec(), table.schema())


class TableStore:
    """Creates and evolves tables through Spark; reads their metadata through pyiceberg."""

    def __init__(
        self,
        spark: SparkSession,
        catalog: Catalog,
        catalog_name: str,
        metadata: MetadataColumns,
        configs: Mapping[str, TableConfig],
    ) -> None:
        self._spark = spark
        self._catalog = catalog
        self._catalog_name = catalog_name
        self.metadata = metadata
        self._configs = configs
        self._namespaces: set[str] = set()  # created (or found) by this store

    def sql_name(self, table: str) -> str:
        namespace, _, name = table.partition(".")
        return f"{quote(self._catalog_name)}.{quote(namespace)}.{quote(name)}"

    def warm_up(self) -> None:
        """List the catalog's namespaces through Spark: its first use in a JVM opens the
        catalog (and its JDBC connection), which the first table creation would pay for."""
        self._spark.sql(f"SHOW NAMESPACES IN {quote(self._catalog_name)}").collect()

    def load(self, table: str) -> Table | None:
        try:
            return self._catalog.load_table(table)
        except NoSuchTableError:
            return None

    def create(
        self,
        table: str,
        change_schema: Mapping[str, Any],
        schema_id: int,
        properties: Mapping[str, str] | None = None,
    ) -> Table:
        """Create ``table`` from a change-record schema, with ``properties`` over the defaults
        and the table's configured ones (no-op if it exists); return it."""
        schema, keys = table_schema(change_schema, self.metadata)
        namespace = table.partition(".")[0]
        if namespace not in self._namespaces:
            self._spark.sql(
                f"CREATE NAMESPACE IF NOT EXISTS {quote(self._catalog_name)}.{quote(namespace)}"
            )
            self._namespaces.add(namespace)
        config = self._configs.get(table, TableConfig())
        properties = {**DEFAULT_PROPERTIES, **(config.properties or {}), **(properties or {})}
        properties[SCHEMA_ID_PROPERTY] = str(schema_id)
        properties[SCHEMA_IDS_PROPERTY] = str(schema_id)
        # Whole positions in the files' bounds, not 16-character prefixes: position_floor
        # reads them to let snapshot batches skip the MERGE.
        properties.setdefault(f"write.metadata.metrics.column.{self.metadata.position}", "full")
        columns = ", ".join(
            f"{quote(f.name)} {spark_type(f.field_type)}{' NOT NULL' if f.required else ''}"
            for f in schema.fields
        )
        partition = ""
        if config.partition_by:
            partition = (
                f" PARTITIONED BY ({', '.join(partition_sql(p) for p in config.partition_by)})"
            )
        props = ", ".join(
            f"{sql_literal(k)}={sql_literal(v)}" for k, v in sorted(properties.items())
        )
        try:
            self._spark.sql(
                f"CREATE TABLE IF NOT EXISTS {self.sql_name(table)} ({columns}) USING iceberg"
                f"{partition} TBLPROPERTIES ({props})"
            )
        except Exception:
            self._namespaces.discard(namespace)  # it may have been dropped since
            raise
        self._spark.sql(
            f"ALTER TABLE {self.sql_name(table)} SET IDENTIFIER FIELDS "
            + ", ".join(quote(k) for k in keys)
        )
        loaded = self.load(table)
        assert loaded is not None
        return loaded

    def set_properties(self, table: str, properties: Mapping[str, str]) -> None:
        props = ", ".join(
            f"{sql_literal(k)}={sql_literal(v)}" for k, v in sorted(properties.items())
        )
        self._spark.sql(f"ALTER TABLE {self.sql_name(table)} SET TBLPROPERTIES ({props})")

    def apply_schema_change(self, table: str, change: SchemaChange) -> None:
        """Apply an APPLY plan's operations, idempotently, then record the schema id.

        Writer instances that share a table each apply the plan; one whose ALTER lost to
        another's (the column was added in between) reads the table again and skips what
        is done."""
        try:
            loaded = self._apply_operations(table, change)
        except Exception as exc:
            if warehouse_unavailable(exc):
                raise
            log.info(
                "schema change raced another writer's, applying again",
                extra={"table": table, "error": str(exc)[:300]},
            )
            loaded = self._apply_operations(table, change)
        ids = loaded.properties.get(SCHEMA_IDS_PROPERTY, "")
        known = [i for i in ids.split(",") if i]
        if str(change.to_schema_id) not in known:
            known.append(str(change.to_schema_id))
        self.set_properties(
            table,
            {
                SCHEMA_ID_PROPERTY: str(change.to_schema_id),
                SCHEMA_IDS_PROPERTY: ",".join(known),
                SCHEMA_VERSION_PROPERTY: str(change.to_version),
            },
        )

    def _apply_operations(self, table: str, change: SchemaChange) -> Table:
        loaded = self.load(table)
        assert loaded is not None
        target = self.sql_name(table)
        for op in change.operations:
            current = loaded.schema()
            path = ".".join(quote(part) for part in op.path)
            exists = _find(current, op.path)
            if op.kind is SchemaOperationKind.ADD_COLUMN:
                if exists:
                    continue
                assert op.type_json is not None
                ddl = spark_type(type_from_json(op.type_json))
                self._spark.sql(f"ALTER TABLE {target} ADD COLUMN {path} {ddl}")
            elif op.kind is SchemaOperationKind.WIDEN_TYPE:
                assert op.type_json is not None
                wanted = type_from_json(op.type_json)
                if exists and str(_field_type(current, op.path)) == str(wanted):
                    continue
                self._spark.sql(
                    f"ALTER TABLE {target} ALTER COLUMN {path} TYPE {spark_type(wanted)}"
                )
            elif op.kind in (
                SchemaOperationKind.MAKE_OPTIONAL,
                SchemaOperationKind.SOFT_DROP_COLUMN,
            ):
                if exists and _is_required(current, op.path):
                    self._spark.sql(f"ALTER TABLE {target} ALTER COLUMN {path} DROP NOT NULL")
            elif op.kind is SchemaOperationKind.RENAME_COLUMN:
                if not exists:
                    continue  # renamed before a crash
                assert op.new_name is not None
                self._spark.sql(
                    f"ALTER TABLE {target} RENAME COLUMN {path} TO {quote(op.new_name)}"
                )
            loaded = self.load(table) or loaded
        return loaded


def applied_schema_ids(table: Table) -> tuple[int, tuple[int, ...]]:
    """(current schema id, every schema id applied so far) from the table's properties."""
    current = int(table.properties.get(SCHEMA_ID_PROPERTY, "0"))
    ids = tuple(int(i) for i in table.properties.get(SCHEMA_IDS_PROPERTY, "").split(",") if i)
    return current, ids


def _find(schema: Schema, path: Sequence[str]) -> bool:
    try:
        schema.find_field(".".join(path))
    except ValueError:
        return False
    return True


def _field_type(schema: Schema, path: Sequence[str]) -> IcebergType:
    return schema.find_field(".".join(path)).field_type


def _is_required(schema: Schema, path: Sequence[str]) -> bool:
    return bool(schema.find_field(".".join(path)).required)
