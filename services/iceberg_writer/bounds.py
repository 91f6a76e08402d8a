"""Each partition's position bound, recorded in the writer's commits.

The upsert path skips the MERGE's guard when every change of a batch is at least as new as
the stored row of its key (:class:`~services.iceberg_writer.changes.PositionBounds`). Change
topics are keyed, so the rows of a partition's keys can only have come from that
partition's changes (and a bulk load's copy, whose rows sit below every change). Each
commit records, for every partition it records an offset for, an upper bound on the
positions of those keys' stored rows: the bound it started from, raised by the changes it
commits. A writer that takes a partition over (a restart, a rebalance between instances
that share a table) starts from the bound the partition's newest commit recorded instead of
the table's highest position, which is another instance's when the table is shared: the
other instance's newer rows no longer send its first batches down the MERGE.

A key travels in one partition only while the topic keeps its partition count (Kafka's
partitioner hashes the key modulo the count), so each commit also records the count, and a
bound recorded under another count is not used.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

from pyiceberg.table import Table

from services.iceberg_writer.tables import BULK_LOAD_ID, OFFSETS, decode_offsets

POSITION_BOUNDS = "icefjord.position-bounds"
PARTITION_COUNT = "icefjord.partition-count"

# Snapshots that add no row: a compaction or a delete rewrite (replace), a delete.
_NO_NEW_ROWS = frozenset({"replace", "delete"})


def encode_bounds(topic: str, bounds: Mapping[int, str]) -> str:
    return json.dumps({f"{topic}:{p}": bound for p, bound in sorted(bounds.items())})


def decode_bounds(text: str, topic: str) -> dict[int, str]:
    """The bounds of ``topic``'s partitions in a summary's text (others are left out)."""
    out: dict[int, str] = {}
    for name, value in json.loads(text).items():
        recorded, _, partition = str(name).rpartition(":")
        if recorded == topic:
            out[int(partition)] = str(value)
    return out


def bound_summary(topic: str, count: int, bounds: Mapping[int, str]) -> dict[str, str]:
    """The summary properties that record ``bounds`` of ``topic`` with ``count`` partitions."""
    return {POSITION_BOUNDS: encode_bounds(topic, bounds), PARTITION_COUNT: str(count)}


def _operation(summary: object) -> str:
    operation = getattr(summary, "operation", None)
    return str(getattr(operation, "value", operation) or "")


def recorded_bounds(table: Table, topic: str, count: int) -> dict[int, str]:
    """Each partition of ``topic`` whose newest commit recorded a bound under ``count``
    partitions, with that bound; walks back from the current snapshot.

    A partition is left out (its bound is not known) when its newest commit recorded none
    (a writer of an earlier version, the upsert path off) or recorded it under another
    partition count, and every partition not met yet is left out once the walk reaches a
    snapshot that added rows without a writer's record of them (another program's append
    or overwrite): those rows' positions are not known. A bulk load's copy is stepped over
    (its rows sit below every change), and so are snapshots that add no rows (compaction,
    a delete rewrite).
    """
    found: dict[int, str | None] = {}
    snapshot = table.current_snapshot()
    while snapshot is not None:
        summary = snapshot.summary.additional_properties if snapshot.summary else {}
        if BULK_LOAD_ID in summary:
            pass
        elif OFFSETS in summary:
            same = summary.get(PARTITION_COUNT) == str(count) and POSITION_BOUNDS in summary
            bounds = decode_bounds(summary[POSITION_BOUNDS], topic) if same else {}
            for recorded, partition in decode_offsets(summary[OFFSETS]):
                if recorded == topic:
                    found.setdefault(partition, bounds.get(partition))
        elif snapshot.summary is None or _operation(snapshot.summary) not in _NO_NEW_ROWS:
            break
        if len(found) >= count or snapshot.parent_snapshot_id is None:
            break
        snapshot = table.snapshot_by_id(snapshot.parent_snapshot_id)
    return {p: bound for p, bound in found.items() if bound is not None}
