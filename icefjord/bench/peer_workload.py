"""The peer workload: one table of the shape a Flink SQL job can read, changed by set-based SQL.

The side-by-side with Flink (``icefjord bench peer``) drains one Debezium backlog through both
pipelines, so the table is what Flink's ``debezium-json`` format handles: a bigint key, text,
numeric(14,2), integer, timestamptz and date, at ``REPLICA IDENTITY FULL`` (``debezium-json``
fails on an update without its before image). ``rows`` inserts, then every row updated once,
then a quarter of them deleted: 2.25 changes per row, 600,000 rows making the 1,350,000
changes of the issue's measurement. Statements change ``batch`` rows each, one transaction
each, so the source is quick and Debezium's transactions stay moderate.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg import sql

TABLE = "items"

CREATE = """
CREATE TABLE {table} (
    id bigint PRIMARY KEY,
    name text NOT NULL,
    amount numeric(14,2) NOT NULL,
    quantity integer NOT NULL,
    updated_at timestamptz NOT NULL,
    day date NOT NULL
)
"""

# Values derived from the key: distinct, every column's encoding exercised (microseconds, a
# negative-free decimal with cents, dates over two years).
INSERT = """
INSERT INTO {table}
SELECT g, 'item ' || g, (g * 7919 %% 10000000) / 100.0, g %% 1000,
       timestamptz '2024-01-01 00:00:00+00' + g * interval '1 second'
           + (g %% 999983) * interval '1 microsecond',
       date '2024-01-01' + (g %% 730)::int
FROM generate_series(%s::bigint, %s::bigint) AS g
"""

UPDATE = """
UPDATE {table}
SET name = name || ' v2', amount = amount + 1.25, quantity = quantity + 1,
    updated_at = updated_at + interval '1 hour 0.000001 second', day = day + 1
WHERE id BETWEEN %s AND %s
"""

DELETE = "DELETE FROM {table} WHERE id BETWEEN %s AND %s AND id %% 4 = 0"

NOW_MS = "SELECT floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint"


@dataclass(frozen=True)
class PeerChanges:
    """What the workload changed, and the time (ms) of its last statement, no later than its
    transaction's commit (Debezium's ``source.ts_ms``)."""

    inserts: int
    updates: int
    deletes: int
    last_change_ms: int


def _ranges(rows: int, batch: int) -> list[tuple[int, int]]:
    return [(start, min(start + batch - 1, rows)) for start in range(1, rows + 1, batch)]


def create(conn: psycopg.Connection[Any], schema: str, publication: str) -> None:
    """The schema, its table at REPLICA IDENTITY FULL, and a publication of it."""
    table = sql.Identifier(schema, TABLE)
    with conn.transaction():
        conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(schema)))
        conn.execute(sql.SQL(CREATE).format(table=table))
        conn.execute(sql.SQL("ALTER TABLE {} REPLICA IDENTITY FULL").format(table))
        conn.execute(
            sql.SQL("CREATE PUBLICATION {} FOR TABLE {}").format(sql.Identifier(publication), table)
        )


def run(
    conn: psycopg.Connection[Any],
    schema: str,
    rows: int,
    batch: int = 10_000,
    progress: Callable[[str], None] = lambda message: None,
) -> PeerChanges:
    """Insert ``rows`` rows, update each once, delete every fourth; one transaction per
    statement of ``batch`` rows."""
    table = sql.Identifier(schema, TABLE)
    counts = {"inserted": 0, "updated": 0, "deleted": 0}
    last = 0
    for name, statement in (("inserted", INSERT), ("updated", UPDATE), ("deleted", DELETE)):
        for low, high in _ranges(rows, batch):
            with conn.transaction():
                cursor = conn.execute(sql.SQL(statement).format(table=table), (low, high))
                counts[name] += cursor.rowcount
                row = conn.execute(NOW_MS).fetchone()
                assert row is not None
                last = int(row[0])
        progress(f"{name} {counts[name]:,} rows")
    return PeerChanges(counts["inserted"], counts["updated"], counts["deleted"], last)
