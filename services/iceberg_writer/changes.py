"""Planning one table's batch: the latest change per key, truncates, and the write path.

Pure functions over decoded change records; no Kafka, no Spark. The rules (service README,
"Apply"):

- Within a batch each key keeps only its latest change, by source position, with the Kafka
  offset breaking ties (a replay of the same change gives the same row).
- A truncate empties the table: changes ordered before the latest truncate are dropped, and
  the batch is applied with "delete every row the batch does not write".
- Against the table, a change applies only if its position is at least the stored row's
  (that comparison happens in the MERGE itself, see ``apply.py``), unless every change is
  known to be at least that new (:class:`PositionBounds`): then the batch goes in without a
  join (``upserts.py``).
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from shared.lease import holds_writer_back


class Op(enum.StrEnum):
    CREATE = "CREATE"
    UPDATE = "UPDATE"
    DELETE = "DELETE"
    READ = "READ"
    TRUNCATE = "TRUNCATE"


class Change(NamedTuple):
    """One decoded change record and where it came from.

    A named tuple, not a frozen dataclass: one is built per consumed record, and a frozen
    dataclass's ``__init__`` costs several times a tuple's (HISTORY).
    """

    table: str
    op: Op
    position: str
    source_ts_ms: int
    key: tuple[Any, ...]
    row: Mapping[str, Any] | None
    topic: str
    partition: int
    offset: int
    schema_id: int
    unchanged: tuple[str, ...] | None = None
    """Columns of an UPDATE whose values the source did not send (an unchanged TOASTed value
    under PostgreSQL's default replica identity): ``row`` holds stand-ins there, and the
    stored values stay. None: the row is whole."""

    @property
    def order(self) -> tuple[str, int, int]:
        """Sort key among the changes of one key: position, then partition and offset."""
        return (self.position, self.partition, self.offset)


class Path(enum.StrEnum):
    """How a batch reaches the table."""

    APPEND = "append"  # the table is empty: plain append of the upserts, no merge
    INSERT = "insert"  # snapshot reads no newer than any stored row: only new keys go in
    MERGE = "merge"  # upserts and deletes guarded by the stored position
    UPSERT = "upsert"  # every change at least as new as its stored row: no join needed
    REPLACE = "replace"  # a truncate: the batch's rows become the whole table

    @property
    def waits_for_lease(self) -> bool:
        """Whether a commit on this path waits out the maintainer's compaction lease
        (``shared/lease.py``).

        A rewrite fails when a commit meanwhile deleted rows in a file it replaces
        (deletion vectors: the MERGE's and the UPSERT's) or removed the file (REPLACE), and
        INSERT's anti-join reads the files. Only APPEND, into an empty table, adds files
        alone and goes ahead under the lease (``shared.lease.PATHS_NOT_HELD``, which the
        maintainer reads ``CommitDone.write_path`` against).
        """
        return holds_writer_back(self.value)


@dataclass(frozen=True, slots=True)
class BatchPlan:
    """What one commit writes for one table."""

    table: str
    upserts: tuple[Change, ...]
    deletes: tuple[Change, ...]
    truncated: bool
    received: Mapping[Op, int] = field(default_factory=dict)
    truncate_position: str | None = None

    @property
    def changes(self) -> tuple[Change, ...]:
        return self.upserts + self.deletes

    @property
    def partial(self) -> bool:
        """Some upsert keeps stored values (:attr:`Change.unchanged`): only the MERGE, which
        reads the stored row, can write it."""
        return any(c.unchanged for c in self.upserts)

    @property
    def reads_only(self) -> bool:
        """Only snapshot reads: the batch inserts or overwrites, and deletes nothing."""
        return (
            bool(self.upserts) and not self.deletes and all(c.op is Op.READ for c in self.upserts)
        )

    def path(
        self, table_is_empty: bool, stored_floor: str | None = None, newer: bool = False
    ) -> Path:
        """How to write the batch; ``stored_floor`` is the lowest position of any stored row
        (None: unknown, or a row without one); ``newer``: every change is known to be at
        least as new as the stored row of its key (:meth:`PositionBounds.admits`), so the
        MERGE's guard would pass for all of them and UPSERT gives the same table.

        INSERT writes only the keys the table lacks. It equals the MERGE when every change is
        a snapshot read at or below ``stored_floor``: the MERGE's guard then refuses every
        matched key, except at an equal position, which is the same source event replayed
        (a position orders the changes of one key), so the row it would overwrite is the
        same row. Debezium gives all the reads of one snapshot one position, so every batch
        of a snapshot after the first takes this path: an anti-join and an append instead of
        a join that also plans deletes.
        """
        if self.truncated:
            return Path.REPLACE
        if self.partial:
            return Path.MERGE
        if table_is_empty:
            return Path.APPEND  # deletes of rows that do not exist are no-ops
        newest = max((c.position for c in self.upserts), default=None)
        if (
            self.reads_only
            and stored_floor is not None
            and newest is not None
            and newest <= stored_floor
        ):
            return Path.INSERT
        return Path.UPSERT if newer else Path.MERGE


@dataclass(slots=True)
class PositionBounds:
    """Upper bounds on the positions of a table's stored rows, by the Kafka partition that
    carries their keys: what lets a batch skip the MERGE's guard.

    Tracking starts from a floor for each partition: the bound the partition's newest
    commit recorded (``floors``, from :func:`~services.iceberg_writer.bounds.recorded_bounds`)
    or else ``base``, which bounds every row stored before tracking began (the highest
    position in the table's data files; None when that is unknown or not needed: then a
    partition without a floor admits nothing). After that, each committed change raises the
    bound of its partition. A key's changes all travel in one partition (change topics are
    keyed), so a change at or above its partition's floor and bound is at least as new as
    the stored row of its key: the guard would let it through. A replay (older positions
    arriving again) falls below its partition's bound and takes the MERGE.

    The writer starts tracking afresh whenever its assignment changes (a topic that gained
    partitions moves keys between partitions, and a rebalance is how the consumer learns of
    it), after a commit of rows that came from no partition (a bulk load's copy), and when
    another instance's commit of its partitions landed (``ownership.py``). ``count`` is the
    topic's partition count the floors hold for (None: not known, and then nothing is
    recorded for a later owner).
    """

    base: str | None
    partitions: dict[int, str] = field(default_factory=dict)
    floors: dict[int, str] = field(default_factory=dict)
    count: int | None = None

    def floor(self, partition: int) -> str | None:
        return self.floors.get(partition, self.base)

    def committed(self) -> dict[int, str]:
        """Per partition, a position every change of it up to which is in the table: its
        recorded floor or the bound this writer raised. ``base`` bounds the rows of every
        partition together, not each one's, so it is not used."""
        out = dict(self.floors)
        for partition, bound in self.partitions.items():
            if bound > out.get(partition, ""):
                out[partition] = bound
        return out

    def admits(self, changes: Iterable[Change]) -> bool:
        """Whether every change is at least as new as the stored row of its key."""
        floors, base, bounds = self.floors, self.base, self.partitions
        if base is None and not floors:
            return False
        for c in changes:
            floor = floors.get(c.partition, base)
            if floor is None or c.position < floor or c.position < bounds.get(c.partition, ""):
                return False
        return True

    def record(self, changes: Iterable[Change]) -> None:
        """``changes`` were committed: their positions bound their partitions' rows."""
        _raise(self.partitions, changes)

    def after(self, changes: Iterable[Change], partitions: Iterable[int]) -> dict[int, str]:
        """Each of ``partitions``' bound once ``changes`` are committed, for the commit to
        record; a partition without a known floor is left out."""
        raised = dict(self.partitions)
        _raise(raised, changes)
        out: dict[int, str] = {}
        for partition in partitions:
            floor = self.floor(partition)
            if floor is not None:
                out[partition] = max(floor, raised.get(partition, ""))
        return out


def _raise(bounds: dict[int, str], changes: Iterable[Change]) -> None:
    """Raise each partition's bound in ``bounds`` to its changes' highest position."""
    for change in changes:
        if change.position > bounds.get(change.partition, ""):
            bounds[change.partition] = change.position


def plan_batch(
    table: str,
    changes: Iterable[Change],
    truncated_at: str | None = None,
    committed: Mapping[int, str] | None = None,
) -> BatchPlan:
    """Reduce ``changes`` (any order) to at most one change per key, honouring truncates.

    ``truncated_at`` is the position of the table's last committed truncate: a change from
    before it that arrives late (on another partition) belongs to the emptied table and is
    dropped, and so is that truncate when it comes again (a connector's replay): applied
    again, it would empty the table of every row committed since.

    ``committed``: per partition, a position up to which its changes are in the table
    (:meth:`PositionBounds.committed`). A change at or below it is a replay of one already
    stored, so it gives a partial update none of its values: the stored row is at least as
    new.
    """
    items = [
        c
        for c in changes
        if truncated_at is None
        or c.position > truncated_at
        or (c.position == truncated_at and c.op is not Op.TRUNCATE)
    ]
    received: dict[Op, int] = {}
    for change in items:
        received[change.op] = received.get(change.op, 0) + 1
    truncates = [c for c in items if c.op is Op.TRUNCATE]
    cutoff = max((c.order for c in truncates), default=None)
    latest: dict[tuple[Any, ...], Change] = {}
    for change in items:
        if change.op is Op.TRUNCATE:
            continue
        if cutoff is not None and change.order < cutoff:
            continue
        held = latest.get(change.key)
        if held is None or change.order >= held.order:
            latest[change.key] = change
    if any(c.unchanged for c in latest.values()):
        _fill_unchanged(latest, items, cutoff, committed or {})
    upserts = tuple(c for c in latest.values() if c.op is not Op.DELETE)
    deletes = tuple(c for c in latest.values() if c.op is Op.DELETE)
    position = max((c.position for c in truncates), default=None)
    return BatchPlan(table, upserts, deletes, cutoff is not None, received, position)


def _fill_unchanged(
    latest: dict[tuple[Any, ...], Change],
    items: Sequence[Change],
    cutoff: tuple[str, int, int] | None,
    committed: Mapping[int, str],
) -> None:
    """Give each key whose latest change is partial the values its earlier changes in the
    batch set: the stored row would be replaced by them before the partial change applies,
    so the partial change keeps those, and only what no change of the batch set stays
    ``unchanged`` (kept from the stored row by the MERGE). A replay of a change already
    committed sets nothing: the stored row is newer than it or is it."""
    partial = {key for key, change in latest.items() if change.unchanged}
    history: dict[tuple[Any, ...], list[Change]] = {key: [] for key in partial}
    for change in items:
        if change.op is Op.TRUNCATE or change.key not in history:
            continue
        if cutoff is not None and change.order < cutoff:
            continue
        if change is not latest[change.key] and change.position <= committed.get(
            change.partition, ""
        ):
            continue
        history[change.key].append(change)
    for key, changes in history.items():
        state: Change | None = None
        for change in sorted(changes, key=lambda c: c.order):
            if change.unchanged and state is not None and state.op is not Op.DELETE:
                state = _over(state, change)
            else:
                state = change
        assert state is not None
        latest[key] = state


def _over(earlier: Change, partial: Change) -> Change:
    """``partial`` with its unchanged columns taken from ``earlier`` (an upsert of the same
    key) where ``earlier`` has them; the rest stay unchanged."""
    assert partial.row is not None and partial.unchanged is not None
    before = earlier.row or {}
    kept = set(earlier.unchanged or ())
    row = dict(partial.row)
    still: list[str] = []
    for column in partial.unchanged:
        if column in kept or column not in before:
            still.append(column)
        else:
            row[column] = before[column]
    return partial._replace(row=row, unchanged=tuple(still) or None)


def apply_to_model(
    model: dict[tuple[Any, ...], tuple[str, Mapping[str, Any]]], plan: BatchPlan
) -> None:
    """The reference semantics of one commit on an in-memory table ``key -> (position, row)``.

    Used by tests as the plain model the Iceberg table must equal, and documents the rule the
    MERGE implements.
    """
    if plan.truncated:
        model.clear()
    for change in plan.deletes:
        held = model.get(change.key)
        if held is not None and (plan.truncated or change.position >= held[0]):
            del model[change.key]
    for change in plan.upserts:
        held = model.get(change.key)
        if held is None or plan.truncated or change.position >= held[0]:
            assert change.row is not None
            row = change.row
            if change.unchanged and held is not None:
                row = {**row, **{c: held[1][c] for c in change.unchanged if c in held[1]}}
            model[change.key] = (change.position, row)


def offsets_after(changes: Sequence[Change]) -> dict[tuple[str, int], int]:
    """The next offset to consume per topic-partition after ``changes``."""
    out: dict[tuple[str, int], int] = {}
    for change in changes:
        tp = (change.topic, change.partition)
        out[tp] = max(out.get(tp, 0), change.offset + 1)
    return out
