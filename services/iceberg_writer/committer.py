"""The committer: a table's pending changes in as one Iceberg snapshot, then its CommitDone.

Each commit checks that this instance still owns the partitions it records
(``ownership.py``), waits while the maintainer's compaction lease holds a path that must
wait, picks the write path, retries a conflicting commit a bounded number of times, records
its partitions' offsets, commit id, epoch and watermark in the snapshot summary, and
publishes CommitDone (again on restart when a crash came between the two).
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Protocol, TypeVar

from pyiceberg.table import Table

from services.iceberg_writer.apply import BatchWriter, CommitConflictError, arrow_batch
from services.iceberg_writer.bounds import bound_summary, recorded_bounds
from services.iceberg_writer.changes import BatchPlan, Op, Path, PositionBounds, plan_batch
from services.iceberg_writer.config import WriterSettings
from services.iceberg_writer.metrics import WriterMetrics
from services.iceberg_writer.ownership import (
    OvertakenError,
    Owner,
    PartitionsMovedError,
    lost_claims,
)
from services.iceberg_writer.state import TP, TableState, holds_no_rows
from services.iceberg_writer.tables import (
    COMMIT_ID,
    EPOCH,
    OFFSETS,
    TRUNCATED_AT,
    WATERMARK,
    Checkpoint,
    FencedError,
    TableStore,
    checkpoint_of,
    commit_in,
    encode_offsets,
    position_ceiling,
    position_floor,
    recorded_since,
    writes_own_files,
)
from services.iceberg_writer.upserts import LeaseTakenError
from shared.errors import FatalError, RetryableError
from shared.events import CommitDone, ControlEvent, TopicPartitionOffset
from shared.histograms import observe_many
from shared.lease import leased

if TYPE_CHECKING:
    from services.iceberg_writer.control_view import PublishedCommits

log = logging.getLogger("services.iceberg_writer")

T = TypeVar("T")
R = TypeVar("R")


class EventPublisher(Protocol):
    """What :class:`shared.control.ControlPublisher` offers."""

    def publish(self, event: ControlEvent) -> None: ...

    def flush(self, timeout: float = 30.0) -> None: ...


class CommitObserver(Protocol):
    """Told of every data commit once it is in the table and before its CommitDone is
    published. For tests and benchmarks (fault injection, freshness samples); it runs in
    the committing thread, so it must be thread-safe."""

    def committed(self, table: str, freshness_s: Sequence[float], commits: int) -> None:
        """``freshness_s``: each change's source commit to now; ``commits``: this writer's
        data commits so far, this one included."""


def _first(errors: Sequence[BaseException | None]) -> BaseException | None:
    return next((e for e in errors if e is not None), None)


def _fatal_first(errors: Sequence[BaseException | None]) -> BaseException | None:
    fatal = [e for e in errors if e is not None and not isinstance(e, RetryableError)]
    return fatal[0] if fatal else _first(errors)


class CommitPool:
    """Runs tables' commits ``parallelism`` at a time. Each table's commit is independent
    (its own snapshot, offsets and CommitDone); every commit is waited for before an error
    is raised, so a rewind never races a commit in flight."""

    def __init__(self, parallelism: int) -> None:
        self._executor = (
            ThreadPoolExecutor(parallelism, thread_name_prefix="commit")
            if parallelism > 1
            else None
        )

    def run(
        self,
        work: Callable[[T], R],
        items: Sequence[T],
        pick: Callable[[Sequence[BaseException | None]], BaseException | None] = _first,
    ) -> list[R]:
        """``work`` on every item, side by side; their results in order. Once all are done,
        raises the error ``pick`` chooses (by default the first); one at a time (and so
        stopping at the first error) when the parallelism or the items are fewer than two."""
        if self._executor is None or len(items) < 2:
            return [work(item) for item in items]
        futures = [self._executor.submit(work, item) for item in items]
        error = pick([f.exception() for f in futures])
        if error is not None:
            raise error
        return [f.result() for f in futures]

    def commit_all(self, commit: Callable[[TableState], None], states: list[TableState]) -> None:
        """``commit`` each state that has pending changes; a fatal error wins over a
        retryable one."""
        self.run(commit, [s for s in states if s.pending], _fatal_first)


class Committer:
    """Commits tables' pending changes and publishes their CommitDone events.

    ``published`` holds each table's newest commit ids whose CommitDone is on the control
    topic (:attr:`services.iceberg_writer.control_view.ControlView.commits_seen`), shared.
    """

    def __init__(
        self,
        settings: WriterSettings,
        *,
        store: TableStore,
        batch_writer: BatchWriter,
        publisher: EventPublisher,
        flush_diversions: Callable[[float], int],
        published: PublishedCommits,
        metrics: WriterMetrics,
        epoch: int,
        owner: Owner,
        observer: CommitObserver | None = None,
        partition_count: Callable[[str], int | None] | None = None,
    ) -> None:
        self.settings = settings
        self._store = store
        self._batch_writer = batch_writer
        self._publisher = publisher
        self._flush_diversions = flush_diversions
        self._published = published
        self.metrics = metrics
        self.epoch = epoch
        self.owner = owner
        self._observer = observer
        # The topic's partition count, under which recorded position bounds hold (bounds.py).
        self._partition_count = partition_count or (lambda _topic: None)
        self.pool = CommitPool(settings.commit_parallelism)
        self.commits = 0
        self._commits_lock = threading.Lock()

    def commit_all(self, states: list[TableState]) -> None:
        """Commit several tables, ``commit_parallelism`` at a time (:class:`CommitPool`)."""
        self.pool.commit_all(self.commit, states)

    def claim(self, state: TableState, partitions: list[TP]) -> None:
        """Claim ``partitions`` of the table for this instance, then read their offsets
        from the table (``ownership.py``: in this order, so that no commit of a previous
        owner lands behind the offsets read). A table not made yet is claimed when it is
        made (``SchemaAdmission``)."""
        if state.table is None or not partitions:
            return
        self._store.set_properties(state.name, self.owner.claims(p for _, p in partitions))
        table = self._store.load(state.name)
        if table is None:
            return
        state.table = table
        checkpoint = checkpoint_of(table)
        for tp in partitions:
            stored = checkpoint.offsets.get(tp) if checkpoint is not None else None
            if stored is None:
                state.committed.pop(tp, None)
            else:
                state.committed[tp] = stored
        if checkpoint is not None and (checkpoint.truncated_at or "") > (state.truncated_at or ""):
            state.truncated_at = checkpoint.truncated_at
        state.claimed.update(partitions)
        if state.seen_snapshot is None:
            current = table.current_snapshot()
            state.seen_snapshot = current.snapshot_id if current is not None else None
        log.info(
            "partitions claimed",
            extra={"table": state.name, "partitions": sorted(p for _, p in partitions)},
        )

    def check_claims(self, state: TableState, table: Table) -> None:
        """Raise unless this instance still owns every partition it would record: a
        partition claimed by another instance of its group moved in a rebalance not seen
        yet (retryable: the writer drops it and rejoins); one claimed by another group's
        writer fences this one. Also takes a newer truncate another instance recorded in
        the table's current snapshot (every commit repeats its writer's newest)."""
        lost = lost_claims(table.properties, [p for _, p in state.claimed], self.owner)
        if lost.taken:
            raise FencedError(
                f"partitions of {state.name} are claimed by another writer group: "
                + ", ".join(f"{p} by {token}" for p, token in sorted(lost.taken.items()))
            )
        if lost.moved:
            raise PartitionsMovedError(
                f"partitions {list(lost.moved)} of {state.name} moved to another instance"
            )
        snapshot = table.current_snapshot()
        summary = snapshot.summary.additional_properties if snapshot and snapshot.summary else {}
        truncated_at = summary.get(TRUNCATED_AT)
        if truncated_at and truncated_at > (state.truncated_at or ""):
            state.truncated_at = truncated_at
        self._check_overtaken(state, table)

    def _check_overtaken(self, state: TableState, table: Table) -> None:
        """Raise :class:`OvertakenError` when a commit since the last look recorded a
        partition this instance claimed beyond the offset it holds for it (offsets only grow,
        so that commit applied changes this one holds as uncommitted)."""
        ahead: dict[TP, int] = {}
        for _, offsets in recorded_since(table, state.seen_snapshot):
            for tp, offset in offsets.items():
                if tp in state.claimed and tp not in ahead and offset > state.committed.get(tp, -1):
                    ahead[tp] = offset
        current = table.current_snapshot()
        state.seen_snapshot = current.snapshot_id if current is not None else None
        if ahead:
            state.committed.update(ahead)
            state.bounds = None  # that commit's rows: read the bounds afresh
            log.warning(
                "partitions committed by their previous owner after the claim, reading on",
                extra={"table": state.name, "offsets": {p: n for (_, p), n in ahead.items()}},
            )
            raise OvertakenError(
                f"partitions {sorted(p for _, p in ahead)} of {state.name} were committed "
                "further by another instance"
            )

    def recorded(self, state: TableState) -> dict[TP, int]:
        """The offsets a commit records: those of the partitions this instance owns and
        has claimed, each the next to read (consumed) or, with nothing consumed since, the
        table's."""
        offsets: dict[TP, int] = {}
        for tp in state.claimed:
            offset = state.consumed.get(tp, state.committed.get(tp))
            if offset is not None:
                offsets[tp] = offset
        return offsets

    def commit(self, state: TableState) -> None:
        """Commit the table's pending changes as one snapshot, then publish CommitDone. A
        table held for a bulk load's copy commits nothing."""
        if not state.pending or state.bulk is not None:
            return
        if self._flush_diversions(30) > 0:
            raise RetryableError("quarantine/dead-letter records not acknowledged")
        table = self._store.load(state.name)
        assert table is not None
        self.check_claims(state, table)
        if not self.may_pass_lease(table) and self.lease_holds(state, table):
            return  # every batch would take a path that waits: no planning under the lease
        bounds = self.bounds(state, table)
        committed = bounds.committed() if bounds is not None else None
        plan = plan_batch(state.name, state.pending, state.truncated_at, committed)
        offsets = self.recorded(state)
        watermark = max(c.source_ts_ms for c in state.pending)
        commit_id = str(uuid.uuid4())
        summary = {
            OFFSETS: encode_offsets(offsets),
            COMMIT_ID: commit_id,
            EPOCH: str(self.epoch),
            WATERMARK: str(watermark),
        }
        if bounds is not None and bounds.count is not None:
            after = bounds.after(state.pending, (p for t, p in offsets if t == state.topic))
            summary.update(bound_summary(state.topic, bounds.count, after))
        if state.truncated_at is not None or plan.truncate_position is not None:
            # Every commit repeats it, so expiring old snapshots never loses it.
            summary[TRUNCATED_AT] = plan.truncate_position or state.truncated_at or ""
        started = time.monotonic()
        claims = self.owner.claims(p for t, p in offsets if t == state.topic)
        written = self._write(state, table, plan, summary, claims)
        if written is None:
            return
        path = written
        seconds = time.monotonic() - started
        now_ms = time.time() * 1000
        committed_table = self._store.load(state.name)
        assert committed_table is not None
        freshness = [max(0.0, (now_ms - c.source_ts_ms) / 1000) for c in state.pending]
        observe_many(self.metrics.freshness.labels(state.name), freshness)
        for op, count in Counter(change.op for change in plan.changes).items():
            self.metrics.changes_applied.labels(state.name, op.value).inc(count)
        self.metrics.batch_records.labels(state.name).observe(len(state.pending))
        self.metrics.commit_duration.labels(state.name).observe(seconds)
        self.metrics.commits.labels(state.name, path.value).inc()
        self.metrics.last_commit.labels(state.name).set(time.time())
        state.committed.update(offsets)
        if state.bounds is not None:
            state.bounds.record(state.pending)
        if plan.truncate_position is not None:
            state.truncated_at = plan.truncate_position
        state.pending = []
        state.clock.committed(seconds)
        with self._commits_lock:
            self.commits += 1
            commits = self.commits
        checkpoint = commit_in(committed_table, commit_id)
        if checkpoint is not None:
            state.seen_snapshot = checkpoint.snapshot_id
        log.info(
            "committed",
            extra={
                "table": state.name,
                "path": path.value,
                "records": len(plan.changes),
                "seconds": round(seconds, 3),
            },
        )
        if self._observer is not None:
            self._observer.committed(state.name, freshness, commits)
        if checkpoint is not None:
            updated = sum(1 for c in plan.upserts if c.op is Op.UPDATE)
            counts = (len(plan.upserts) - updated, updated, len(plan.deletes))
            self.publish(state, committed_table, checkpoint, seconds, freshness, counts, path)

    def _write(
        self,
        state: TableState,
        table: Table,
        plan: BatchPlan,
        summary: dict[str, str],
        claims: dict[str, str],
    ) -> Path | None:
        """Write ``plan`` on the path the table allows now, retrying a conflicting commit up
        to ``commit_retries`` times; the path taken, or None when the lease holds it back.
        ``claims``: this instance's claims of the partitions the commit records, which the
        upsert path's commit checks at the catalog's swap (``upserts.py``); a refusal is a
        conflict, and its retry finds the partitions moved (:meth:`check_claims`)."""
        attempt = 0
        while True:
            # Planned against the table as it is now: a retry sees the conflicting commit.
            empty = holds_no_rows(table)
            floor = None
            if self.settings.insert_path and plan.reads_only and not empty:
                floor = position_floor(table, self._store.metadata.position)
            path = plan.path(empty, floor, self.newer(state, table, plan))
            if path.waits_for_lease and self.lease_holds(state, table):
                return None
            batch = arrow_batch(plan, table, state.keys, state.converters, self._store.metadata)
            try:
                result = self._batch_writer.write(
                    self._store.sql_name(state.name),
                    plan,
                    batch,
                    state.columns,
                    state.keys,
                    self._store.metadata.position,
                    path,
                    summary,
                    claims,
                )
                return result.path
            except LeaseTakenError:
                # Taken while the batch's files were written: held back like any commit
                # the lease finds (upserts.py), and not landed under it.
                self.metrics.lease_deferrals.labels(state.name).inc()
                log.info(
                    "compaction lease taken during the commit, held back",
                    extra={"table": state.name},
                )
                return None
            except CommitConflictError as exc:
                self.metrics.commit_conflicts.labels(state.name).inc()
                if attempt >= self.settings.commit_retries:
                    raise FatalError(
                        f"commit to {state.name} still conflicts after {attempt} retries: {exc}"
                    ) from exc
                attempt += 1
                self.metrics.commit_retries.labels(state.name).inc()
                log.warning(
                    "commit conflict, retrying",
                    extra={"table": state.name, "attempt": attempt, "reason": str(exc)},
                )
                time.sleep(min(5.0, 0.2 * 2**attempt))
                table = self._store.load(state.name) or table
                self.check_claims(state, table)

    def may_pass_lease(self, table: Table) -> bool:
        """Whether a batch for ``table`` can take a path that goes ahead under a compaction
        lease (:attr:`Path.waits_for_lease`): APPEND, into an empty table. Every other
        path deletes rows in stored files or reads them, and waits."""
        return holds_no_rows(table)

    def lease_holds(self, state: TableState, table: Table) -> bool:
        """Whether the maintainer's compaction lease (``shared/lease.py``) holds this commit
        back: the changes then wait in memory and go in the first commit after it."""
        if leased(table.properties, int(time.time() * 1000)):
            self.metrics.lease_deferrals.labels(state.name).inc()
            return True
        return False

    def newer(self, state: TableState, table: Table, plan: BatchPlan) -> bool:
        """Whether every change of ``plan`` is at least as new as the stored row of its key
        (so the upsert path gives what the MERGE would)."""
        bounds = self.bounds(state, table)
        return bounds is not None and bounds.admits(plan.changes)

    def bounds(self, state: TableState, table: Table) -> PositionBounds | None:
        """The table's position bounds for the upsert path (None with it off). Read when
        tracking (re)starts: each claimed partition from the bound its newest commit
        recorded (``bounds.py``), the table's highest stored position for the others;
        then kept up by each commit."""
        if not self.settings.upsert_path:
            return None
        if state.bounds is None:
            floors: dict[int, str] = {}
            count: int | None = None
            base = None
            if writes_own_files(table):
                count = self._partition_count(state.topic)
                claimed = {p for t, p in state.claimed if t == state.topic}
                if count is not None:
                    recorded = recorded_bounds(table, state.topic, count)
                    floors = {p: b for p, b in recorded.items() if p in claimed}
                if not claimed or not claimed <= floors.keys():
                    base = position_ceiling(table, self._store.metadata.position)
            state.bounds = PositionBounds(base, floors=floors, count=count)
        return state.bounds

    def publish(
        self,
        state: TableState,
        table: Table,
        checkpoint: Checkpoint,
        seconds: float,
        freshness_ms: list[float] | None = None,
        counts: tuple[int, int, int] | None = None,
        path: Path | None = None,
    ) -> None:
        """Publish CommitDone for ``checkpoint``; ``counts`` (inserted, updated, deleted) come
        from the batch plan, or from the snapshot summary when republishing after a crash
        (which does not know the commit's ``path`` either)."""
        snapshot = table.snapshot_by_id(checkpoint.snapshot_id)
        assert snapshot is not None
        summary: Mapping[str, str] = (
            snapshot.summary.additional_properties if snapshot.summary else {}
        )

        def number(name: str) -> int:
            return int(summary.get(name) or 0)

        inserted, updated, deleted = counts or (
            number("added-records"),
            0,
            number("added-position-deletes"),
        )
        ordered = sorted(freshness_ms or [])
        event = CommitDone(
            table=state.name,
            commit_id=checkpoint.commit_id,
            snapshot_id=checkpoint.snapshot_id,
            writer_epoch=checkpoint.epoch,
            records=inserted + updated + deleted,
            inserted=inserted,
            updated=updated,
            deleted=deleted,
            data_files_added=number("added-data-files"),
            delete_files_added=number("added-delete-files"),
            bytes_added=number("added-files-size"),
            watermark_ms=checkpoint.watermark_ms,
            freshness_ms=int(ordered[-1]) if ordered else None,
            freshness_p50_ms=int(ordered[len(ordered) // 2]) if ordered else None,
            sequence_number=snapshot.sequence_number,
            total_records=number("total-records"),
            total_data_files=number("total-data-files"),
            total_delete_files=number("total-delete-files"),
            write_path=path.value if path is not None else None,
            offsets=tuple(
                TopicPartitionOffset(topic=topic, partition=partition, next_offset=n)
                for (topic, partition), n in sorted(checkpoint.offsets.items())
            ),
            committed_at_ms=int(snapshot.timestamp_ms),
            duration_ms=int(seconds * 1000),
        )
        control = ControlEvent(
            event_id=checkpoint.commit_id,
            table=state.name,
            produced_at_ms=int(time.time() * 1000),
            producer=self.settings.producer,
            payload=event,
        )
        self._publisher.publish(control)
        self._publisher.flush()
        self._published.add(state.name, checkpoint.commit_id)

    def republish_if_missing(self, state: TableState, table: Table, checkpoint: Checkpoint) -> None:
        """Publish the CommitDone of the table's newest writer commit when the control topic
        does not hold it (a crash came between the commit and its CommitDone)."""
        if checkpoint.commit_id and not self._published.has(state.name, checkpoint.commit_id):
            log.info(
                "publishing the CommitDone a previous run did not",
                extra={"table": state.name, "commit_id": checkpoint.commit_id},
            )
            self.publish(state, table, checkpoint, 0.0)
