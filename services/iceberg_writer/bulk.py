"""Bulk loads: a table's changes held while a bulk load's copy is on its way, and the copy
appended as one snapshot before them.

A table is held from its newest BulkLoad event (PLANNED or READY) until that load's copy is
in the table; a held table reads on until one full batch waits, then pauses. A READY copy is
appended with the table's unchanged offsets and a CommitDone, like any commit, by the writer
instance that owns partition 0 of the table's changes (when several share it).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import logging
import os
import time
import uuid
from collections.abc import Mapping
from typing import Any

from pyiceberg.table import Table

from services.iceberg_writer.apply import BatchWriter, CommitConflictError
from services.iceberg_writer.changes import Op
from services.iceberg_writer.committer import Committer
from services.iceberg_writer.control_view import ControlView
from services.iceberg_writer.data_consumer import DataConsumer
from services.iceberg_writer.metrics import WriterMetrics
from services.iceberg_writer.state import TableState, holds_no_rows
from services.iceberg_writer.tables import (
    BULK_LOAD_ID,
    COMMIT_ID,
    EPOCH,
    OFFSETS,
    TRUNCATED_AT,
    WATERMARK,
    TableStore,
    commit_in,
    encode_offsets,
)
from shared.events import BulkLoad, BulkLoadStatus
from shared.lease import leased

log = logging.getLogger("services.iceberg_writer")

COPY_POSITION = "0" * 20  # a bulk copy's rows: before every change of the stream they precede
COPY_LOOK_S = 2.0  # how often an instance that does not commit a copy looks for it


def copy_committed(table: Table, load_id: str) -> bool:
    """Whether a snapshot of ``table`` (expired ones aside) appended the copy of ``load_id``."""
    for snapshot in table.metadata.snapshots:
        summary = snapshot.summary.additional_properties if snapshot.summary else {}
        if summary.get(BULK_LOAD_ID) == load_id:
            return True
    return False


class BulkLoads:
    """Holds and releases tables for bulk loads and commits their copies."""

    def __init__(
        self,
        *,
        tables: Mapping[str, TableState],
        control: ControlView,
        partitions: DataConsumer,
        committer: Committer,
        store: TableStore,
        batch_writer: BatchWriter,
        metrics: WriterMetrics,
        epoch: int,
    ) -> None:
        self._tables = tables
        self._control = control
        self._partitions = partitions
        self._committer = committer
        self._store = store
        self._batch_writer = batch_writer
        self._metrics = metrics
        self._epoch = epoch

    def hold(self, state: TableState) -> None:
        """Set ``state.bulk`` from the table's newest BulkLoad event: held while that load is
        PLANNED or READY and its copy is not in the table yet."""
        load = self._control.bulk_loads.get(state.name)
        held = load is not None and load.status is not BulkLoadStatus.ABANDONED
        if held and load is not None and state.table is not None:
            held = not copy_committed(state.table, load.load_id)
        if held:
            if state.bulk is None:
                log.info(
                    "changes held for a bulk load",
                    extra={"table": state.name, "load_id": load.load_id if load else None},
                )
            state.bulk = load
        else:
            self.release(state)
        self._count_held()

    def release(self, state: TableState) -> None:
        """Let the table's changes go (and its partitions, if a full batch paused them)."""
        if state.bulk is not None:
            log.info(
                "bulk hold released", extra={"table": state.name, "load_id": state.bulk.load_id}
            )
        state.bulk = None
        if state.bulk_paused:
            state.bulk_paused = False
            self._partitions.apply_pause(state)
        self._count_held()

    def _count_held(self) -> None:
        self._metrics.held_tables.set(sum(1 for s in self._tables.values() if s.bulk is not None))

    def bound_held(self, state: TableState) -> None:
        """A held table reads on until a full batch waits, then pauses until the copy."""
        if state.bulk_paused or len(state.pending) < state.clock.max_records:
            return
        assigned = self._partitions.assigned(state)
        if assigned:
            self._partitions.pause(assigned)
            state.bulk_paused = True

    def commit_copies(self) -> None:
        """Commit every READY copy whose table exists (``commit_parallelism`` at a time),
        then release those tables' held changes.

        A copy still awaited may have become READY while this round read change records
        and created tables (most of a second for a bulk load's first records): the control
        topic is read again first, so it is committed in this round, beside the others."""
        if any(
            state.bulk is not None and state.bulk.status is not BulkLoadStatus.READY
            for state in self._tables.values()
        ):
            self._control.poll()
        ready = [
            (state, state.bulk)
            for state in self._tables.values()
            if state.bulk is not None
            and state.bulk.status is BulkLoadStatus.READY
            # The table is created by its first change record, which is on its way.
            and state.table is not None
            # An operator's pause holds the copy's commit too.
            and not self._control.is_paused(state)
        ]
        done = self._committer.pool.run(lambda pair: self.commit_copy(*pair), ready)
        for (state, _), released in zip(ready, done, strict=True):
            if released:
                self.release(state)

    def _copied_by_another(self, state: TableState, load: BulkLoad) -> bool:
        """Whether the copy is in the table, for an instance that does not commit it: when
        instances share a table, the one that owns its partition 0 commits the copy (two
        would append it twice), and the others release their held changes once it is in.
        Looked at every ``COPY_LOOK_S`` at most."""
        now = time.monotonic()
        if now - state.bulk_looked_at < COPY_LOOK_S:
            return False
        state.bulk_looked_at = now
        table = self._store.load(state.name)
        return table is not None and copy_committed(table, load.load_id)

    def commit_copy(self, state: TableState, load: BulkLoad) -> bool:
        """Append the copy of ``load`` as one snapshot (its load id, the table's unchanged
        offsets and a CommitDone, like any commit). True: the load is done and the table's
        held changes may go (the caller releases them); False: try again later."""
        files = [f for f in load.files if "://" in f or os.path.exists(f)]
        if len(files) < len(load.files):
            table = self._store.load(state.name)
            if table is not None and copy_committed(table, load.load_id):
                return True
            log.error(
                "bulk copy files missing; the load is released without them",
                extra={"table": state.name, "load_id": load.load_id, "files": len(load.files)},
            )
            return True
        if not files:
            return True
        if (state.topic, 0) not in state.owned:
            return self._copied_by_another(state, load)
        table = self._store.load(state.name)
        assert table is not None
        if copy_committed(table, load.load_id):
            return True
        self._committer.check_claims(state, table)
        if leased(table.properties, int(time.time() * 1000)):
            self._metrics.lease_deferrals.labels(state.name).inc()
            return False
        empty = holds_no_rows(table)
        source_ms = (
            load.snapshot_ts_ms if load.snapshot_ts_ms is not None else int(time.time() * 1000)
        )
        commit_id = str(uuid.uuid4())
        summary = {
            OFFSETS: encode_offsets(
                {tp: n for tp, n in state.committed.items() if tp in state.claimed}
            ),
            COMMIT_ID: commit_id,
            EPOCH: str(self._epoch),
            WATERMARK: str(source_ms),
            BULK_LOAD_ID: load.load_id,
        }
        if state.truncated_at is not None:
            summary[TRUNCATED_AT] = state.truncated_at
        columns = self._store.metadata
        values: dict[str, Any] = {columns.position: COPY_POSITION}
        if columns.op:
            values[columns.op] = Op.READ.value
        if columns.source_ts:
            values[columns.source_ts] = dt.datetime.fromtimestamp(source_ms / 1000, dt.UTC)
        try:
            result = self._batch_writer.append_copy(
                self._store.sql_name(state.name),
                files,
                values,
                state.keys,
                columns.position,
                insert_only=not empty,
                summary=summary,
            )
        except ValueError as exc:  # a column the table lacks: wait for its SchemaChange
            now = time.monotonic()
            if now - state.bulk_warned_at > 30:
                state.bulk_warned_at = now
                log.warning(
                    "bulk copy waits for the table's schema",
                    extra={"table": state.name, "load_id": load.load_id, "error": str(exc)},
                )
            return False
        except CommitConflictError as exc:
            self._metrics.commit_conflicts.labels(state.name).inc()
            log.warning(
                "bulk copy commit conflict, retrying",
                extra={"table": state.name, "error": str(exc)},
            )
            return False
        committed_table = self._store.load(state.name)
        assert committed_table is not None
        state.bounds = None  # rows from no partition: read the bounds afresh
        rows = load.rows or 0
        self._metrics.bulk_rows.labels(state.name).inc(rows)
        self._metrics.commit_duration.labels(state.name).observe(result.seconds)
        self._metrics.commits.labels(state.name, "bulk").inc()
        self._metrics.last_commit.labels(state.name).set(time.time())
        log.info(
            "bulk copy committed",
            extra={
                "table": state.name,
                "load_id": load.load_id,
                "rows": rows,
                "path": result.path.value,
                "seconds": round(result.seconds, 3),
            },
        )
        checkpoint = commit_in(committed_table, commit_id)
        if checkpoint is not None:
            self._committer.publish(
                state, committed_table, checkpoint, result.seconds, None, (rows, 0, 0), result.path
            )
        for path in files:
            if "://" not in path:
                with contextlib.suppress(OSError):
                    os.remove(path)
        return True
