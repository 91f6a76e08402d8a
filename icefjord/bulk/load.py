"""A bulk initial load of PostgreSQL tables, handed to iceberg-writer through the control topic.

Debezium's own snapshot sends every row through Kafka Connect, the JSON converter, the broker,
the normalizer and a MERGE, which costs about 350 microseconds of CPU per row on the local
stack. The bulk load copies each table once instead, columnar from end to end, and change
capture streams only what happens after the copy:

1. ``BulkLoad PLANNED`` for every table: iceberg-writer will hold the table's change records
   (read, not committed) until the copy is in.
2. Capture starts (``start_capture``): the connector creates its replication slot and
   snapshots at most one row per table (:func:`snapshot_overrides`), which gives the
   normalizer the table's schema and the writer its Iceberg table. The demo's
   ``start_capture`` creates the tables' Debezium and changes topics first
   (``PostgresDemoSource.start_capture``), so the normalizer and the writer are subscribed
   to them before the first row arrives.
3. Once the slot has its consistent point, every table is copied from one REPEATABLE READ
   snapshot, several tables at once on connections that share it
   (:func:`icefjord.bulk.postgres.copy_tables`). The slot came first, so each change the
   copy misses is in the stream; a change it already holds is applied again over it, which
   leaves the same row (the copy's rows carry the lowest position).
4. ``BulkLoad READY`` with the Parquet files, as soon as each table's copy is written: the
   writer appends it as one snapshot (while other tables are copied), records the load id
   in its summary, then applies the held changes.

A copy that fails publishes ``ABANDONED`` for every table not READY yet, so no table stays
held.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg

from icefjord.bulk.postgres import COPY_WORKERS, CopiedTable, copy_tables, quote_ident
from shared.control import ControlPublisher
from shared.events import BulkLoad, BulkLoadStatus, ControlEvent

PRODUCER = "icefjord-bulk"


@dataclass(frozen=True)
class BulkLoadResult:
    load_id: str
    copies: tuple[CopiedTable, ...]
    slot_wait_s: float  # from capture start until the slot had its consistent point
    copy_s: float  # the copy transaction

    @property
    def rows(self) -> int:
        return sum(c.rows for c in self.copies)


def snapshot_overrides(schema: str, tables: Sequence[str]) -> dict[str, str]:
    """Debezium Postgres settings that make its initial snapshot read at most one row of each
    of ``tables``: enough for the schema to reach the normalizer and the table to exist."""
    if not tables:
        return {}
    names = [f"{schema}.{t}" for t in tables]
    out = {"snapshot.select.statement.overrides": ",".join(names)}
    for table in tables:
        out[f"snapshot.select.statement.overrides.{schema}.{table}"] = (
            f"SELECT * FROM {quote_ident(schema)}.{quote_ident(table)} LIMIT 1"
        )
    return out


def wait_for_slot(conninfo: str, slot: str, timeout_s: float) -> None:
    """Wait until ``slot`` exists and has found its consistent point (a confirmed flush LSN):
    from then on every committed change is either before it or in the stream."""
    deadline = time.monotonic() + timeout_s
    with psycopg.connect(conninfo, autocommit=True) as conn:
        while True:
            row = conn.execute(
                "SELECT confirmed_flush_lsn IS NOT NULL FROM pg_replication_slots"
                " WHERE slot_name = %s",
                (slot,),
            ).fetchone()
            if row is not None and row[0]:
                return
            if time.monotonic() > deadline:
                raise TimeoutError(f"replication slot {slot!r} not ready in {timeout_s:.0f} s")
            time.sleep(0.1)


def bulk_load(
    conninfo: str,
    schema: str,
    tables: Mapping[str, str],
    slot: str,
    publisher: ControlPublisher,
    out_dir: Path,
    start_capture: Callable[[], Any],
    *,
    slot_timeout_s: float = 120.0,
    workers: int = COPY_WORKERS,
    progress: Callable[[str], None] = lambda message: None,
) -> BulkLoadResult:
    """Load ``tables`` (source table -> Iceberg ``<namespace>.<table>``) of ``schema``; see
    the module's description. ``start_capture`` registers the connector, configured with
    :func:`snapshot_overrides` and ``slot``. The files go to ``out_dir/<load id>``, which
    the writer must be able to read; it removes each file once committed. Up to ``workers``
    tables are copied at once (:func:`copy_tables`)."""
    load_id = uuid.uuid4().hex
    for name in tables.values():
        _publish(
            publisher,
            BulkLoad(
                load_id=load_id, table=name, status=BulkLoadStatus.PLANNED, requested_by=PRODUCER
            ),
        )
    publisher.flush()
    copies: list[CopiedTable] = []
    try:
        started = time.monotonic()
        start_capture()
        wait_for_slot(conninfo, slot, slot_timeout_s)
        slot_wait = time.monotonic() - started
        progress(f"slot {slot} ready after {slot_wait:.1f} s; copying {len(tables)} tables")
        began = time.monotonic()
        snapshot_ms = int(time.time() * 1000)

        def copied(copy: CopiedTable) -> None:
            # Ready at once: the writer appends this table while the others are copied.
            copies.append(copy)
            _publish(
                publisher,
                BulkLoad(
                    load_id=load_id,
                    table=tables[copy.table],
                    status=BulkLoadStatus.READY,
                    files=copy.files,
                    rows=copy.rows,
                    snapshot_ts_ms=snapshot_ms,
                    requested_by=PRODUCER,
                ),
            )
            publisher.flush()

        copy_tables(conninfo, schema, list(tables), out_dir / load_id, copied, workers=workers)
        copy_s = time.monotonic() - began
    except BaseException as exc:
        done = {tables[c.table] for c in copies}
        for name in tables.values():
            if name in done:
                continue
            _publish(
                publisher,
                BulkLoad(
                    load_id=load_id,
                    table=name,
                    status=BulkLoadStatus.ABANDONED,
                    reason=f"{type(exc).__name__}: {exc}"[:500],
                    requested_by=PRODUCER,
                ),
            )
        publisher.flush()
        raise
    result = BulkLoadResult(load_id, tuple(copies), slot_wait, copy_s)
    progress(f"copied {result.rows:,} rows in {copy_s:.1f} s (load {load_id})")
    return result


def _publish(publisher: ControlPublisher, load: BulkLoad) -> None:
    publisher.publish(ControlEvent.new(load.table, load, PRODUCER))
