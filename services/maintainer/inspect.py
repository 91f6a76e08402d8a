"""Reads a table's metadata through pyiceberg into a :class:`TableInspection`.

pyiceberg reads the manifests directly (no Spark job, no JVM), so the service and the CLI
can look at every table cheaply. It reads position and equality delete files correctly for
format-version 2 tables (an integration test holds its counts equal to Spark's ``files``
metadata table). Everything here is I/O; the meaning is in :mod:`health`.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from typing import Any

from pyiceberg.catalog import Catalog
from pyiceberg.exceptions import NoSuchTableError

from services.maintainer.health import (
    DEFAULT_TARGET_FILE_SIZE_BYTES,
    FileContent,
    FileStats,
    PartitionField,
    PartitionValue,
    SnapshotStats,
    TableInspection,
)
from services.maintainer.identifiers import TableId
from shared.errors import IcefjordError, RetryableError

__all__ = [
    "OFFSETS_PROPERTY",
    "TARGET_FILE_SIZE_PROPERTY",
    "TableInspector",
    "UnknownTableError",
    "list_tables",
]

log = logging.getLogger(__name__)

OFFSETS_PROPERTY = "icefjord.offsets"
TARGET_FILE_SIZE_PROPERTY = "write.target-file-size-bytes"
OLD_SPEC_FIELD = "__spec"


class UnknownTableError(IcefjordError, LookupError):
    """The catalog has no such table."""


def list_tables(catalog: Catalog) -> list[str]:
    """Every ``<namespace>.<table>`` in the catalog (single-level namespaces), sorted.

    Raises RetryableError when the catalog cannot be read.
    """
    try:
        names: list[str] = []
        for namespace in catalog.list_namespaces():
            for identifier in catalog.list_tables(namespace):
                names.append(".".join(identifier))
        return sorted(names)
    except Exception as exc:  # catalog back-ends raise their own driver errors
        raise RetryableError(f"cannot list the catalog's tables: {exc}") from exc


def _value(raw: Any) -> PartitionValue:
    if raw is None or isinstance(raw, str | int | float | bool):
        return raw
    return str(raw)


class TableInspector:
    """Inspects tables of one catalog; ``clock`` gives Unix time in seconds."""

    def __init__(self, catalog: Catalog, clock: Callable[[], float] = time.time) -> None:
        self._catalog = catalog
        self._clock = clock

    def exists(self, table: TableId) -> bool:
        """Whether the catalog has ``table``. Raises RetryableError when it cannot say."""
        try:
            return bool(self._catalog.table_exists(str(table)))
        except Exception as exc:
            raise RetryableError(f"catalog lookup of {table} failed: {exc}") from exc

    def columns(self, table: TableId) -> frozenset[str]:
        """Top-level column names of ``table``'s current schema."""
        return frozenset(f.name for f in self._load(table).schema().fields)

    def current_snapshot_id(self, table: TableId) -> int | None:
        """The id of ``table``'s current snapshot (None while it has none): one catalog
        lookup and one metadata file, no manifests."""
        current = self._load(table).current_snapshot()
        return None if current is None else int(current.snapshot_id)

    def _load(self, table: TableId) -> Any:
        try:
            return self._catalog.load_table(str(table))
        except NoSuchTableError as exc:
            raise UnknownTableError(f"table {table} does not exist") from exc
        except Exception as exc:
            raise RetryableError(f"cannot load {table}: {exc}") from exc

    def inspect(self, table: TableId) -> TableInspection:
        """Read ``table``'s current snapshot, snapshot log and metadata sizes.

        Raises UnknownTableError when it is gone, RetryableError when storage or the catalog
        fails (a file vanishing under a concurrent expiry included: the next look succeeds).
        """
        loaded = self._load(table)
        now_ms = int(self._clock() * 1000)
        try:
            return self._read(table, loaded, now_ms)
        except (OSError, ValueError) as exc:
            raise RetryableError(f"cannot read the metadata of {table}: {exc}") from exc

    def _read(self, table: TableId, loaded: Any, now_ms: int) -> TableInspection:
        io = loaded.io
        spec = loaded.spec()
        schema = loaded.schema()
        fields = tuple(
            PartitionField(f.name, schema.find_column_name(f.source_id) or "", str(f.transform))
            for f in spec.fields
        )
        snapshots = tuple(
            SnapshotStats(
                snapshot_id=s.snapshot_id,
                committed_at_ms=s.timestamp_ms,
                operation=None if s.summary is None else s.summary.operation.value,
                # Not ``in summary``: pyiceberg's Summary answers every key with None, so a
                # membership test is always true.
                carries_offsets=s.summary is not None
                and OFFSETS_PROPERTY in s.summary.additional_properties,
                offset_partitions=_offset_partitions(s.summary),
            )
            for s in loaded.metadata.snapshots
        )
        current = loaded.current_snapshot()
        files: list[FileStats] = []
        manifests = 0
        manifest_bytes = 0
        names = [f.name for f in fields]
        if current is not None:
            for manifest in current.manifests(io):
                manifests += 1
                manifest_bytes += manifest.manifest_length
                for entry in manifest.fetch_manifest_entry(io, discard_deleted=True):
                    files.append(self._file(entry.data_file, spec.spec_id, names))
        target = loaded.properties.get(TARGET_FILE_SIZE_PROPERTY)
        return TableInspection(
            table=str(table),
            inspected_at_ms=now_ms,
            files=tuple(files),
            snapshots=snapshots,
            current_snapshot_id=None if current is None else current.snapshot_id,
            manifests=manifests,
            manifest_bytes=manifest_bytes,
            metadata_file_bytes=len(io.new_input(loaded.metadata_location)),
            target_file_size_bytes=int(target) if target else DEFAULT_TARGET_FILE_SIZE_BYTES,
            partition_fields=fields,
            format_version=int(loaded.metadata.format_version),
        )

    @staticmethod
    def _file(data_file: Any, current_spec_id: int, names: list[str]) -> FileStats:
        raw = data_file.partition
        width = len(raw) if raw is not None else 0
        if data_file.spec_id == current_spec_id and width == len(names):
            partition = tuple((names[i], _value(raw[i])) for i in range(width))
        else:
            # A file written under an older spec: keep it apart, never scope a filter to it.
            values = tuple((f"f{i}", _value(raw[i])) for i in range(width))
            partition = ((OLD_SPEC_FIELD, data_file.spec_id), *values)
        return FileStats(
            content=FileContent(int(data_file.content)),
            partition=partition,
            record_count=int(data_file.record_count),
            size_bytes=int(data_file.file_size_in_bytes),
        )


def _offset_partitions(summary: Any) -> frozenset[str] | None:
    """The partitions (``topic:partition``) whose offsets a snapshot summary carries; None
    when it carries offsets that cannot be read (taken as every partition)."""
    text = summary.additional_properties.get(OFFSETS_PROPERTY) if summary is not None else None
    if text is None:
        return frozenset()
    try:
        return frozenset(str(name) for name in json.loads(text))
    except (ValueError, TypeError):
        return None
