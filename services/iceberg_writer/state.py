"""What the writer holds per table between commits, and the change topic's naming rule."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pyiceberg.table import Table

from services.iceberg_writer.batching import BatchClock
from services.iceberg_writer.changes import Change, PositionBounds
from services.iceberg_writer.tables import Checkpoint
from shared.events import BulkLoad
from shared.settings import CHANGES_TOPIC_PREFIX

TP = tuple[str, int]


def table_of(topic: str) -> str:
    """``icefjord.changes.<namespace>.<table>`` -> ``<namespace>.<table>``."""
    if not topic.startswith(CHANGES_TOPIC_PREFIX):
        raise ValueError(f"{topic!r} is not a change topic")
    return topic.removeprefix(CHANGES_TOPIC_PREFIX)


@dataclass
class TableState:
    """What the writer holds for one table between commits."""

    name: str
    topic: str
    clock: BatchClock
    table: Table | None = None
    keys: tuple[str, ...] = ()
    columns: tuple[str, ...] = ()
    current_id: int = 0
    current_version: int = 0
    applied_ids: set[int] = field(default_factory=set)
    reader: Any = None
    converters: dict[str, Any] = field(default_factory=dict)
    pending: list[Change] = field(default_factory=list)
    consumed: dict[TP, int] = field(default_factory=dict)
    committed: dict[TP, int] = field(default_factory=dict)
    checkpoint: Checkpoint | None = None
    flush: bool = False  # an operator's FLUSH waits for the changes held now
    owned: set[TP] = field(default_factory=set)  # assigned to this instance
    claimed: set[TP] = field(default_factory=set)  # owned, claimed and its offset read since
    waits: dict[TP, tuple[int, int, float]] = field(default_factory=dict)  # offset, id, since
    expired_ids: set[int] = field(default_factory=set)
    truncated_at: str | None = None
    bulk: BulkLoad | None = None  # a bulk load whose copy the table's changes wait for
    bulk_paused: bool = False  # its partitions paused because the held batch is full
    control_synced: bool = False  # the control topic was read to its end before a commit
    bulk_warned_at: float = 0.0
    bulk_looked_at: float = 0.0  # when another instance's copy was last looked for
    bounds: PositionBounds | None = None  # for the upsert path; None: to be read afresh
    seen_snapshot: int | None = None  # the newest snapshot checked for others' commits


def holds_no_rows(table: Table) -> bool:
    """No current snapshot, or one whose summary counts no records."""
    snapshot = table.current_snapshot()
    total = snapshot.summary.get("total-records") if snapshot and snapshot.summary else None
    return snapshot is None or int(total or 0) == 0
