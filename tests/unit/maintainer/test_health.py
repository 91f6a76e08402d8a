"""The health model from hand-built metadata, and its advance by CommitDone events."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given
from hypothesis import strategies as st

from services.maintainer.health import (
    FileContent,
    FileStats,
    PartitionField,
    SnapshotStats,
    TableInspection,
    apply_commit,
    compute_health,
    partition_filter,
    resume_snapshots,
    small_file_threshold,
)
from services.maintainer.identifiers import parse_filter
from shared.events import CommitDone, TopicPartitionOffset

pytestmark = pytest.mark.unit

MIB = 1024 * 1024
REGION = (PartitionField("region", "region", "identity"),)


def data(region: str | None, size: int, records: int = 10) -> FileStats:
    partition = () if region is None else (("region", region),)
    return FileStats(FileContent.DATA, partition, records, size)


def deletes(
    region: str, records: int, kind: FileContent = FileContent.POSITION_DELETES
) -> FileStats:
    return FileStats(kind, (("region", region),), records, 1000)


def snap(sid: int, ms: int, op: str = "overwrite", offsets: bool = False) -> SnapshotStats:
    return SnapshotStats(sid, ms, op, offsets)


def inspection(
    files: list[FileStats], snapshots: list[SnapshotStats] = (), **kw: object
) -> TableInspection:
    fields: dict[str, object] = {
        "table": "shop.orders",
        "inspected_at_ms": 10_000,
        "files": tuple(files),
        "snapshots": tuple(snapshots),
        "current_snapshot_id": snapshots[-1].snapshot_id if snapshots else None,
        "manifests": 3,
        "manifest_bytes": 3000,
        "metadata_file_bytes": 500,
        "target_file_size_bytes": 128 * MIB,
        "partition_fields": REGION,
    }
    fields.update(kw)
    return TableInspection(**fields)  # type: ignore[arg-type]


def test_partition_figures() -> None:
    files = [data("eu", 1 * MIB, 100) for _ in range(3)] + [data("eu", 100 * MIB, 1000)]
    files += [data("us", 40 * MIB, 50)]
    files += [deletes("eu", 130), deletes("eu", 20, FileContent.EQUALITY_DELETES)]
    health = compute_health(inspection(files))
    eu, us = health.partitions
    assert (eu.key, eu.filter) == ("region=eu", "region = 'eu'")
    assert parse_filter(eu.filter).render() == eu.filter
    # 25 % of the 128 MiB target = 32 MiB: the 1 MiB files are small, 100 MiB and 40 MiB not.
    assert health.small_file_bytes == 32 * MIB
    assert (eu.data_files, eu.small_files, eu.data_records) == (4, 3, 1300)
    assert (eu.position_delete_files, eu.equality_delete_files, eu.delete_records) == (1, 1, 150)
    assert eu.small_file_ratio == pytest.approx(0.75)
    assert eu.delete_ratio == pytest.approx(150 / 1300)
    assert (us.data_files, us.small_files, us.delete_ratio) == (1, 0, 0.0)
    assert health.data_files == 5
    assert health.partition_files_max == 4
    assert health.small_file_ratio == pytest.approx(3 / 5)
    assert (health.position_delete_files, health.equality_delete_files) == (1, 1)
    assert health.metadata_bytes == 3500
    assert health.manifests == 3


def test_configured_small_file_bytes_wins_over_the_target_fraction() -> None:
    files = [data("eu", 10 * MIB), data("eu", 50 * MIB)]
    assert compute_health(inspection(files), small_file_bytes=60 * MIB).small_files == 2
    assert compute_health(inspection(files)).small_files == 1
    assert small_file_threshold(512 * MIB) == 128 * MIB
    assert small_file_threshold(512 * MIB, 1) == 1


def test_snapshots_compaction_and_offsets() -> None:
    snaps = [
        snap(1, 1000, "append", offsets=True),
        snap(2, 2000, offsets=True),
        snap(3, 3000, "replace"),
        snap(4, 4000, offsets=True),
        snap(5, 5000, "delete", offsets=True),
        snap(6, 6000, "replace"),
    ]
    health = compute_health(inspection([data("eu", 1)], snaps))
    assert health.snapshot_times_ms == (1000, 2000, 3000, 4000, 5000, 6000)
    assert health.last_compaction_ms == 6000
    assert health.commits_since_compaction == 0
    assert (health.offsets_snapshot_id, health.offsets_snapshot_ms) == (5, 5000)
    assert health.oldest_snapshot_age_s(now_ms=61_000) == 60.0
    before = compute_health(inspection([data("eu", 1)], snaps[:5]))
    assert (before.last_compaction_ms, before.commits_since_compaction) == (3000, 2)
    never = compute_health(inspection([data("eu", 1)], snaps[:2]))
    assert (never.last_compaction_ms, never.commits_since_compaction) == (None, 2)


def test_format_version_is_carried() -> None:
    assert compute_health(inspection([data("eu", 1)], format_version=3)).format_version == 3


def test_unpartitioned_table() -> None:
    health = compute_health(inspection([data(None, 1), data(None, 2)], partition_fields=()))
    (only,) = health.partitions
    assert (only.key, only.filter, only.data_files) == ("", None, 2)


@pytest.mark.parametrize(
    ("partition", "fields", "expected"),
    [
        ((("region", "eu"),), REGION, "region = 'eu'"),
        ((("region", None),), REGION, "region IS NULL"),
        ((("n", 7),), (PartitionField("n", "n", "identity"),), "n = 7"),
        ((("day", 19000),), (PartitionField("day", "ts", "day"),), None),
        ((("b", 3),), (PartitionField("b", "id", "bucket[16]"),), None),
        ((("region", "o'brien"),), REGION, None),
        ((("region", 1.5),), REGION, None),
        ((("__spec", 0), ("f0", "eu")), REGION, None),
        ((), REGION, None),
        ((("r_src", "eu"),), (PartitionField("r_src", "region", "identity"),), "region = 'eu'"),
    ],
)
def test_partition_filter(partition, fields, expected) -> None:  # type: ignore[no-untyped-def]
    assert partition_filter(partition, fields) == expected


def commit(
    snapshot_id: int, at_ms: int, files: int = 2, deletes: int = 1, offsets: bool = True
) -> CommitDone:
    return CommitDone(
        table="shop.orders",
        commit_id=f"c{snapshot_id}",
        snapshot_id=snapshot_id,
        writer_epoch=1,
        records=10,
        inserted=5,
        updated=4,
        deleted=1,
        data_files_added=files,
        delete_files_added=deletes,
        bytes_added=100,
        offsets=(TopicPartitionOffset(topic="t", partition=0, next_offset=9),) if offsets else (),
        committed_at_ms=at_ms,
        duration_ms=5,
    )


def test_commits_after_the_inspection_advance_the_estimate() -> None:
    health = compute_health(inspection([data("eu", 1), data("us", 1)], [snap(1, 9000)]))
    later = apply_commit(apply_commit(health, commit(2, 11_000)), commit(3, 12_000, offsets=False))
    assert later.commits_since_inspection == 2
    assert later.commits_since_compaction == health.commits_since_compaction + 2
    assert later.data_files == 2 + 4
    assert later.partition_files_max == 1 + 4  # pessimistic: all into the fullest partition
    assert later.small_files == 2 + 4
    assert later.position_delete_files == 2
    assert later.snapshots == 3
    assert (later.offsets_snapshot_id, later.offsets_snapshot_ms) == (2, 11_000)
    assert later.last_commit_ms == 12_000


def test_table_totals_of_v2_events_replace_the_added_counts() -> None:
    health = compute_health(inspection([data("eu", 1), data("us", 1), deletes("eu", 3)]))
    total = dataclasses.replace(commit(2, 11_000, files=9, deletes=9), total_data_files=5)
    total = dataclasses.replace(total, total_delete_files=2)
    later = apply_commit(health, total)
    assert (later.data_files, later.position_delete_files) == (5, 2)
    shrunk = dataclasses.replace(total, total_data_files=1, total_delete_files=0)
    assert apply_commit(health, shrunk).data_files == 2  # never below what was inspected


def test_commits_the_inspection_already_saw_change_nothing() -> None:
    health = compute_health(inspection([data("eu", 1)], [snap(1, 9000), snap(2, 9500)]))
    assert apply_commit(health, commit(2, 12_000)) == health  # the current snapshot
    assert apply_commit(health, commit(7, 9_999)) == health  # committed before the look


@given(
    st.lists(
        st.tuples(st.integers(0, 3), st.integers(1, 10**9), st.integers(0, 10**6)), max_size=40
    )
)
def test_totals_are_sums_of_partitions(entries: list[tuple[int, int, int]]) -> None:
    files = [
        FileStats(FileContent(kind % 3), (("region", f"r{size % 3}"),), records, size)
        for kind, size, records in entries
    ]
    health = compute_health(inspection(files))
    assert health.data_files == sum(1 for f in files if f.content is FileContent.DATA)
    assert sum(p.delete_files for p in health.partitions) == len(files) - health.data_files
    assert health.partition_files_max == max((p.data_files for p in health.partitions), default=0)
    assert all(0 <= p.small_file_ratio <= 1 for p in health.partitions)
    assert health.small_files == sum(
        1 for f in files if f.content is FileContent.DATA and f.size_bytes < health.small_file_bytes
    )


def test_the_writer_resumes_from_each_partitions_newest_carrier() -> None:
    def carrier(sid: int, partitions: str | None) -> SnapshotStats:
        names = None if partitions is None else frozenset(partitions)
        return SnapshotStats(sid, sid * 1000, "append", True, names)

    # One writer: its newest commit holds every partition.
    assert [s.snapshot_id for s in resume_snapshots([carrier(1, "ab"), carrier(2, "ab")])] == [2]
    # Two instances: a's partitions last in 2, b's in 4; 3 repeats b's, 5 records nothing.
    shared = [carrier(1, "a"), carrier(2, "a"), carrier(3, "b"), carrier(4, "b"), carrier(5, "")]
    assert [s.snapshot_id for s in resume_snapshots(shared)] == [2, 4]
    # Offsets it cannot read count as every partition's: nothing older is needed.
    assert [s.snapshot_id for s in resume_snapshots([carrier(1, "a"), carrier(2, None)])] == [2]
    health = compute_health(inspection([], shared))
    assert (health.offsets_snapshot_id, health.offsets_snapshot_ms) == (2, 2000)
