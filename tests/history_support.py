"""A table's snapshot history for the writer's unit tests: what the checkpoint and bounds
walks read of a pyiceberg ``Table`` (current snapshot, parents, summaries), and nothing else."""

from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any


@dataclass
class FakeSnapshot:
    snapshot_id: int
    parent_snapshot_id: int | None
    summary: Any


@dataclass
class FakeTable:
    """A table's history, oldest first; each snapshot's parent is the one before it. A
    summary's ``operation`` is its Iceberg operation (append, overwrite, replace, delete);
    None is a snapshot without a summary."""

    snapshots: dict[int, FakeSnapshot] = field(default_factory=dict)
    current: int | None = None

    @classmethod
    def of(cls, *summaries: dict[str, str] | None, expired: tuple[int, ...] = ()) -> FakeTable:
        table = cls()
        parent = None
        for i, properties in enumerate(summaries, start=1):
            summary = (
                None
                if properties is None
                else SimpleNamespace(
                    additional_properties=properties, operation=properties.get("operation")
                )
            )
            snapshot_id = 100 + i
            table.snapshots[snapshot_id] = FakeSnapshot(snapshot_id, parent, summary)
            parent = snapshot_id
        for snapshot_id in expired:
            del table.snapshots[snapshot_id]
        table.current = parent
        return table

    def current_snapshot(self) -> FakeSnapshot | None:
        return None if self.current is None else self.snapshots[self.current]

    def snapshot_by_id(self, snapshot_id: int) -> FakeSnapshot | None:
        return self.snapshots.get(snapshot_id)
