"""The health model of one table: pure, computed from an inspection of its metadata.

:class:`TableInspection` is what the inspector reads from the catalog (live files of the
current snapshot, the snapshot log, manifests, metadata sizes); :func:`compute_health`
turns it into a :class:`TableHealth`; :func:`apply_commit` advances an existing health with
a writer's ``CommitDone`` between two inspections (an estimate: a commit does not say which
partitions it touched, so its files count towards the table and towards the partition with
the most files, the pessimistic choice that triggers re-inspection early).

Definitions used throughout:

- **small file**: a data file under ``small_file_bytes``: the configured value, or 25 % of
  the table's ``write.target-file-size-bytes`` (Iceberg's default 512 MiB, so 128 MiB).
- **delete ratio**: delete *records* over data *records* of the partition (position-delete
  rows plus equality-delete rows, over rows in data files): the share of rows a reader
  fetches and then throws away, which is what slows scans. File counts would weigh a
  one-row delete file like a million-row one. Deletion vectors (format v3) are position
  deletes here: one per data file, their record count is the rows they delete.
- **last compaction**: the newest snapshot whose operation is ``replace`` (what
  ``rewrite_data_files`` and ``rewrite_position_delete_files`` commit); commits since then
  count the snapshots after it whose operation is not ``replace``.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass, replace

from services.maintainer.identifiers import (
    Comparison,
    IsNull,
    MalformedIdentifierError,
    PartitionFilter,
    Term,
    quote_identifier,
)
from shared.events import CommitDone

__all__ = [
    "DEFAULT_TARGET_FILE_SIZE_BYTES",
    "SMALL_FILE_FRACTION",
    "FileContent",
    "FileStats",
    "PartitionField",
    "PartitionHealth",
    "SnapshotStats",
    "TableHealth",
    "TableInspection",
    "apply_commit",
    "compute_health",
    "partition_filter",
    "small_file_threshold",
]

DEFAULT_TARGET_FILE_SIZE_BYTES = 512 * 1024 * 1024
SMALL_FILE_FRACTION = 0.25
REPLACE_OPERATION = "replace"


class FileContent(enum.IntEnum):
    """Iceberg's ``content`` of a file entry."""

    DATA = 0
    POSITION_DELETES = 1
    EQUALITY_DELETES = 2


PartitionValue = str | int | float | bool | None
"""A partition value as the inspector reads it (dates and times arrive as ints)."""


@dataclass(frozen=True, slots=True)
class PartitionField:
    """One field of the table's current partition spec."""

    name: str
    source_column: str
    transform: str


@dataclass(frozen=True, slots=True)
class FileStats:
    """One live file of the current snapshot; ``partition`` maps partition field names to
    values, in spec order (empty for an unpartitioned table)."""

    content: FileContent
    partition: tuple[tuple[str, PartitionValue], ...]
    record_count: int
    size_bytes: int


@dataclass(frozen=True, slots=True)
class SnapshotStats:
    """One snapshot in the table metadata."""

    snapshot_id: int
    committed_at_ms: int
    operation: str | None
    carries_offsets: bool
    offset_partitions: frozenset[str] | None = None
    """The partitions whose offsets it carries ("topic:partition"); None: not known, so
    taken as every partition."""


def resume_snapshots(snapshots: Iterable[SnapshotStats]) -> list[SnapshotStats]:
    """The snapshots the writer resumes from, oldest first: for each partition, the newest
    snapshot carrying its offset. Writer instances that share a table each record only
    their own partitions, so this can be several snapshots, and expiry must keep them all
    (one writer: only the newest carrier)."""
    carriers = sorted(
        (s for s in snapshots if s.carries_offsets),
        key=lambda s: (s.committed_at_ms, s.snapshot_id),
        reverse=True,
    )
    covered: set[str] = set()
    needed: list[SnapshotStats] = []
    for snapshot in carriers:
        if snapshot.offset_partitions is None:
            needed.append(snapshot)
            break  # every partition: nothing older is needed
        if not snapshot.offset_partitions <= covered:
            needed.append(snapshot)
            covered |= snapshot.offset_partitions
    return needed[::-1]


@dataclass(frozen=True, slots=True)
class TableInspection:
    """What one look at a table's metadata found."""

    table: str
    inspected_at_ms: int
    files: tuple[FileStats, ...]
    snapshots: tuple[SnapshotStats, ...]
    current_snapshot_id: int | None
    manifests: int
    manifest_bytes: int
    metadata_file_bytes: int
    target_file_size_bytes: int = DEFAULT_TARGET_FILE_SIZE_BYTES
    partition_fields: tuple[PartitionField, ...] = ()
    format_version: int = 2


@dataclass(frozen=True, slots=True)
class PartitionHealth:
    """File and delete figures of one partition (``key`` "" for an unpartitioned table).

    ``filter`` is the partition as a request scope when every partition field is an
    identity transform with a plain value, else None (compact the whole table instead).
    """

    key: str
    filter: str | None = None
    data_files: int = 0
    small_files: int = 0
    data_bytes: int = 0
    data_records: int = 0
    position_delete_files: int = 0
    equality_delete_files: int = 0
    delete_records: int = 0
    delete_bytes: int = 0

    @property
    def delete_files(self) -> int:
        return self.position_delete_files + self.equality_delete_files

    @property
    def small_file_ratio(self) -> float:
        return self.small_files / self.data_files if self.data_files else 0.0

    @property
    def delete_ratio(self) -> float:
        """Delete records over data records (see the module doc); 0 with no data."""
        return self.delete_records / self.data_records if self.data_records else 0.0


@dataclass(frozen=True, slots=True)
class TableHealth:
    """The health of one table at ``inspected_at_ms``, advanced by later commits.

    ``snapshot_times_ms`` holds every snapshot's commit time, ascending;
    ``offsets_snapshot_*`` name the oldest snapshot the writer resumes from
    (:func:`resume_snapshots`; one writer: the latest carrying ``icefjord.offsets``), which
    bounds what expiry may remove. ``commits_since_inspection`` and
    ``data_files_since_inspection`` come from ``CommitDone`` events after the inspection.
    """

    table: str
    inspected_at_ms: int
    partitions: tuple[PartitionHealth, ...] = ()
    snapshot_times_ms: tuple[int, ...] = ()
    current_snapshot_id: int | None = None
    manifests: int = 0
    metadata_bytes: int = 0
    last_compaction_ms: int | None = None
    commits_since_compaction: int = 0
    offsets_snapshot_id: int | None = None
    offsets_snapshot_ms: int | None = None
    target_file_size_bytes: int = DEFAULT_TARGET_FILE_SIZE_BYTES
    small_file_bytes: int = int(DEFAULT_TARGET_FILE_SIZE_BYTES * SMALL_FILE_FRACTION)
    commits_since_inspection: int = 0
    data_files_since_inspection: int = 0
    delete_files_since_inspection: int = 0
    last_commit_ms: int | None = None
    format_version: int = 2

    @property
    def snapshots(self) -> int:
        return len(self.snapshot_times_ms) + self.commits_since_inspection

    @property
    def data_files(self) -> int:
        return sum(p.data_files for p in self.partitions) + self.data_files_since_inspection

    @property
    def partition_files_max(self) -> int:
        """Data files in the fullest partition, counting commits since the inspection."""
        if not self.partitions:
            return self.data_files_since_inspection
        return max(p.data_files for p in self.partitions) + self.data_files_since_inspection

    @property
    def small_files(self) -> int:
        # New files from the writer's micro-batches are small: count them as such.
        return sum(p.small_files for p in self.partitions) + self.data_files_since_inspection

    @property
    def small_file_ratio(self) -> float:
        return self.small_files / self.data_files if self.data_files else 0.0

    @property
    def position_delete_files(self) -> int:
        inspected = sum(p.position_delete_files for p in self.partitions)
        return inspected + self.delete_files_since_inspection

    @property
    def equality_delete_files(self) -> int:
        return sum(p.equality_delete_files for p in self.partitions)

    @property
    def delete_ratio(self) -> float:
        records = sum(p.data_records for p in self.partitions)
        deletes = sum(p.delete_records for p in self.partitions)
        return deletes / records if records else 0.0

    def oldest_snapshot_age_s(self, now_ms: int) -> float:
        """Seconds since the oldest snapshot was committed (0 without snapshots)."""
        if not self.snapshot_times_ms:
            return 0.0
        return max(now_ms - self.snapshot_times_ms[0], 0) / 1000.0


def small_file_threshold(target_file_size_bytes: int, configured: int | None = None) -> int:
    """Bytes under which a data file is small: ``configured`` if given, else 25 % of the
    table's target file size."""
    if configured is not None:
        return configured
    return int(target_file_size_bytes * SMALL_FILE_FRACTION)


def _render_key(partition: Iterable[tuple[str, PartitionValue]]) -> str:
    return "/".join(f"{name}={'null' if value is None else value}" for name, value in partition)


def _plain_string(value: str) -> bool:
    """A string the filter grammar can hold: printable, without quotes or backslashes."""
    return value.isprintable() and not any(c in value for c in "'\\")


def partition_filter(
    partition: tuple[tuple[str, PartitionValue], ...], fields: tuple[PartitionField, ...]
) -> str | None:
    """The request scope selecting exactly ``partition``, or None when it cannot be written
    as a plain filter (a non-identity transform such as ``day`` or ``bucket``, a float, or
    an unsupported name or string)."""
    if not partition:
        return None
    by_name = {f.name: f for f in fields}
    terms: list[Term] = []
    for name, value in partition:
        spec = by_name.get(name)
        if spec is None or spec.transform != "identity":
            return None
        try:
            quote_identifier(spec.source_column)
        except MalformedIdentifierError:
            return None
        if value is None:
            terms.append(IsNull(spec.source_column))
        elif isinstance(value, bool | int) or (isinstance(value, str) and _plain_string(value)):
            terms.append(Comparison(spec.source_column, "=", value))
        else:
            return None
    return PartitionFilter(tuple(terms)).render()


def compute_health(
    inspection: TableInspection, *, small_file_bytes: int | None = None
) -> TableHealth:
    """The health of ``inspection.table`` from one inspection (see the module doc)."""
    threshold = small_file_threshold(inspection.target_file_size_bytes, small_file_bytes)
    partitions: dict[tuple[tuple[str, PartitionValue], ...], PartitionHealth] = {}
    for entry in inspection.files:
        current = partitions.get(entry.partition)
        if current is None:
            current = PartitionHealth(
                key=_render_key(entry.partition),
                filter=partition_filter(entry.partition, inspection.partition_fields),
            )
        if entry.content is FileContent.DATA:
            current = replace(
                current,
                data_files=current.data_files + 1,
                small_files=current.small_files + (entry.size_bytes < threshold),
                data_bytes=current.data_bytes + entry.size_bytes,
                data_records=current.data_records + entry.record_count,
            )
        else:
            is_position = entry.content is FileContent.POSITION_DELETES
            current = replace(
                current,
                position_delete_files=current.position_delete_files + is_position,
                equality_delete_files=current.equality_delete_files + (not is_position),
                delete_records=current.delete_records + entry.record_count,
                delete_bytes=current.delete_bytes + entry.size_bytes,
            )
        partitions[entry.partition] = current
    snapshots = sorted(inspection.snapshots, key=lambda s: (s.committed_at_ms, s.snapshot_id))
    compactions = [s for s in snapshots if s.operation == REPLACE_OPERATION]
    last_compaction = compactions[-1].committed_at_ms if compactions else None
    commits_since = sum(
        1
        for s in snapshots
        if s.operation != REPLACE_OPERATION
        and (last_compaction is None or s.committed_at_ms > last_compaction)
    )
    with_offsets = resume_snapshots(snapshots)
    return TableHealth(
        table=inspection.table,
        inspected_at_ms=inspection.inspected_at_ms,
        partitions=tuple(sorted(partitions.values(), key=lambda p: p.key)),
        snapshot_times_ms=tuple(s.committed_at_ms for s in snapshots),
        current_snapshot_id=inspection.current_snapshot_id,
        manifests=inspection.manifests,
        metadata_bytes=inspection.metadata_file_bytes + inspection.manifest_bytes,
        last_compaction_ms=last_compaction,
        commits_since_compaction=commits_since,
        offsets_snapshot_id=with_offsets[0].snapshot_id if with_offsets else None,
        offsets_snapshot_ms=with_offsets[0].committed_at_ms if with_offsets else None,
        target_file_size_bytes=inspection.target_file_size_bytes,
        small_file_bytes=threshold,
        last_commit_ms=snapshots[-1].committed_at_ms if snapshots else None,
        format_version=inspection.format_version,
    )


def apply_commit(health: TableHealth, commit: CommitDone) -> TableHealth:
    """``health`` advanced by one writer commit seen after the inspection.

    A commit already covered by the inspection (its snapshot is the current one, or it is
    older than the inspection) changes nothing, so replaying events is harmless. The files
    since the inspection come from the event's table totals when it has them (contract v2),
    else from its added counts.
    """
    if commit.snapshot_id == health.current_snapshot_id:
        return health
    if commit.committed_at_ms <= health.inspected_at_ms:
        return health
    carries_offsets = bool(commit.offsets)
    new_data = health.data_files_since_inspection + commit.data_files_added
    new_deletes = health.delete_files_since_inspection + commit.delete_files_added
    # Version-2 events carry the table's totals after the commit: exact where the added
    # counts are not (a merge-on-read commit also replaces older delete files).
    if commit.total_data_files is not None:
        inspected = sum(p.data_files for p in health.partitions)
        new_data = max(commit.total_data_files - inspected, 0)
    if commit.total_delete_files is not None:
        inspected = sum(p.delete_files for p in health.partitions)
        new_deletes = max(commit.total_delete_files - inspected, 0)
    return replace(
        health,
        offsets_snapshot_id=commit.snapshot_id if carries_offsets else health.offsets_snapshot_id,
        offsets_snapshot_ms=(
            commit.committed_at_ms if carries_offsets else health.offsets_snapshot_ms
        ),
        commits_since_inspection=health.commits_since_inspection + 1,
        commits_since_compaction=health.commits_since_compaction + 1,
        data_files_since_inspection=new_data,
        delete_files_since_inspection=new_deletes,
        last_commit_ms=max(commit.committed_at_ms, health.last_commit_ms or 0),
    )
