"""The demo workload against PostgreSQL: schema, initial load and the timed CDC run.

:class:`PostgresWorkload` executes :class:`~icefjord.demo.plan.Transaction` s from a
:class:`~icefjord.demo.plan.Planner` with psycopg 3, one database transaction each, paced to
the planned rate. It remembers, per table, the transaction id of the last change; after the
run :meth:`PostgresWorkload.last_change_ms` turns those into commit times (the cluster runs
with ``track_commit_timestamp``): exactly the ``source.ts_ms`` Debezium reports for them,
so the demo knows when Iceberg has caught up.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import psycopg
from psycopg import sql
from psycopg.types.json import Json, Jsonb

from icefjord.demo.model import (
    ENUM_TYPES,
    Kind,
    TableDef,
    add_column_sql,
    create_enum_sql,
    create_table_sql,
    widen_column_sql,
)
from icefjord.demo.plan import (
    ROW_OPERATIONS,
    AddColumn,
    ChangeKey,
    CreateTable,
    Delete,
    Insert,
    Operation,
    Transaction,
    Update,
    UpdateMany,
    WidenColumn,
    row_operations,
)


@dataclass
class WorkloadProgress:
    """Counters the live display reads while the workload runs (single writer)."""

    transactions: int = 0
    inserts: int = 0
    updates: int = 0
    key_changes: int = 0
    deletes: int = 0
    schema_changes: int = 0
    started_at: float = field(default_factory=time.monotonic)
    finished: bool = False

    @property
    def row_changes(self) -> int:
        """Row operations so far (a key change counts once)."""
        return self.inserts + self.updates + self.key_changes + self.deletes

    def count(self, op: Operation) -> None:
        match op:
            case Insert():
                self.inserts += 1
            case Update() | UpdateMany():
                self.updates += row_operations(op)
            case ChangeKey():
                self.key_changes += 1
            case Delete():
                self.deletes += 1
            case _:
                self.schema_changes += 1


@dataclass(frozen=True)
class WorkloadResult:
    """What the run did; ``last_change_ms`` maps ``<schema>.<table>`` to the source commit
    time (ms since epoch) of the table's last row change."""

    transactions: int
    inserts: int
    updates: int
    key_changes: int
    deletes: int
    schema_changes: int
    seconds: float
    last_change_ms: Mapping[str, int]

    @property
    def row_changes(self) -> int:
        return self.inserts + self.updates + self.key_changes + self.deletes

    @property
    def changes_per_second(self) -> float:
        return self.row_changes / self.seconds if self.seconds > 0 else 0.0


def paced(
    transactions: Iterable[Transaction],
    stop: threading.Event,
    clock: Callable[[], float] = time.monotonic,
) -> Iterable[Transaction]:
    """Yield each transaction no earlier than its ``at_s`` after the first one; stop early
    when ``stop`` is set. Late transactions are not skipped: the run catches up."""
    start = clock()
    for tx in transactions:
        delay = start + tx.at_s - clock()
        if delay > 0 and stop.wait(delay):
            return
        if stop.is_set():
            return
        yield tx


class PostgresWorkload:
    """Executes the plan in schema ``schema`` of the database at ``conninfo``."""

    def __init__(self, conninfo: str, schema: str) -> None:
        self.conninfo = conninfo
        self.schema = schema
        self.tables: dict[str, TableDef] = {}
        self.progress = WorkloadProgress()
        self._last_xid: dict[str, int] = {}
        self._statements: dict[tuple[str, str, tuple[str, ...]], bytes] = {}
        self._conn: psycopg.Connection[Any] | None = None

    def connection(self) -> psycopg.Connection[Any]:
        if self._conn is None or self._conn.closed:
            self._conn = psycopg.connect(self.conninfo, autocommit=True)
        return self._conn

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()

    def create_schema(self, tables: Iterable[TableDef], publication: str) -> None:
        """Create the schema, its enum types, ``tables`` and a publication that also covers
        tables created later: ``FOR TABLES IN SCHEMA`` (PostgreSQL 15+), else ``FOR ALL
        TABLES`` (the demo's cluster holds nothing else). Raises
        psycopg.errors.DuplicateSchema when the schema exists."""
        conn = self.connection()
        with conn.transaction():
            conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(self.schema)))
            for enum in ENUM_TYPES:
                conn.execute(create_enum_sql(self.schema, enum).encode())
            for table in tables:
                self._create(table)
            scope = (
                sql.SQL("FOR TABLES IN SCHEMA {}").format(sql.Identifier(self.schema))
                if conn.info.server_version >= 150000
                else sql.SQL("FOR ALL TABLES")
            )
            conn.execute(
                sql.SQL("CREATE PUBLICATION {} {}").format(sql.Identifier(publication), scope)
            )

    def drop(self, publication: str, slot: str) -> None:
        """Drop the schema with its tables, the publication and the replication slot (each
        only if present; an active slot is left alone)."""
        conn = self.connection()
        conn.execute(sql.SQL("DROP PUBLICATION IF EXISTS {}").format(sql.Identifier(publication)))
        conn.execute(
            "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots "
            "WHERE slot_name = %s AND NOT active",
            (slot,),
        )
        conn.execute(
            sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(self.schema))
        )

    def run(self, transactions: Iterable[Transaction]) -> WorkloadResult:
        """Execute every transaction (pace them with :func:`paced`); return the totals.
        :attr:`progress` starts from zero for each call."""
        began = time.monotonic()
        self.progress = WorkloadProgress(started_at=began)
        try:
            for tx in transactions:
                self.execute(tx)
        finally:
            self.progress.finished = True
        p = self.progress
        return WorkloadResult(
            transactions=p.transactions,
            inserts=p.inserts,
            updates=p.updates,
            key_changes=p.key_changes,
            deletes=p.deletes,
            schema_changes=p.schema_changes,
            seconds=time.monotonic() - began,
            last_change_ms=self.last_change_ms(),
        )

    def execute(self, tx: Transaction) -> None:
        """Run ``tx`` as one database transaction. Row changes are pipelined (one round trip
        per transaction, not per statement); schema changes run one by one."""
        conn = self.connection()
        with conn.transaction():
            if tx.is_ddl:
                for op in tx.ops:
                    self._execute(op)
                    self.progress.count(op)
            else:
                with conn.pipeline():
                    xid_cursor = conn.execute("SELECT txid_current()")
                    for op in tx.ops:
                        self._execute(op)
                xid_row = xid_cursor.fetchone()
                assert xid_row is not None
                for op in tx.ops:
                    self.progress.count(op)
                    if isinstance(op, ROW_OPERATIONS):
                        self._last_xid[op.table] = int(xid_row[0])
        self.progress.transactions += 1

    def last_change_ms(self) -> dict[str, int]:
        """Commit time (ms, floored as Debezium does) of each table's last row change."""
        conn = self.connection()
        out: dict[str, int] = {}
        for table, xid in self._last_xid.items():
            row = conn.execute(
                "SELECT (extract(epoch FROM pg_xact_commit_timestamp((%s::bigint %% 4294967296)"
                "::text::xid)) * 1000000)::bigint",
                (xid,),
            ).fetchone()
            if row is not None and row[0] is not None:
                out[f"{self.schema}.{table}"] = int(row[0]) // 1000
        return out

    # -- one operation ---------------------------------------------------------------------

    def _qualified(self, table: str) -> sql.Composed:
        return sql.SQL("{}.{}").format(sql.Identifier(self.schema), sql.Identifier(table))

    def _create(self, table: TableDef) -> None:
        for statement in create_table_sql(self.schema, table):
            self.connection().execute(statement.encode())
        self.tables[table.name] = table
        self._statements = {k: v for k, v in self._statements.items() if k[1] != table.name}

    def adapt(self, table: str, column: str, value: Any) -> Any:
        """``value`` of ``table.column`` as psycopg should send it (JSON wrapped)."""
        if value is None:
            return None
        kind = self.tables[table].column(column).kind
        if kind == Kind.JSON:
            return Json(value)
        if kind == Kind.JSONB:
            return Jsonb(value)
        return value

    def _statement(self, kind: str, table: str, names: tuple[str, ...]) -> bytes:
        """The DML text for ``kind`` of ``names`` in ``table``, composed once and kept: the
        composition cost more client CPU than sending the statement (the key columns'
        placeholders come last, in key order)."""
        cache_key = (kind, table, names)
        text = self._statements.get(cache_key)
        if text is None:
            condition = sql.SQL(" AND ").join(
                sql.SQL("{} = %s").format(sql.Identifier(n)) for n in self.tables[table].key
            )
            statement: sql.Composed
            if kind == "insert":
                statement = sql.SQL("INSERT INTO {} ({}) VALUES ({})").format(
                    self._qualified(table),
                    sql.SQL(", ").join(map(sql.Identifier, names)),
                    sql.SQL(", ").join(sql.Placeholder() * len(names)),
                )
            elif kind == "update":
                assignments = sql.SQL(", ").join(
                    sql.SQL("{} = %s").format(sql.Identifier(n)) for n in names
                )
                statement = sql.SQL("UPDATE {} SET {} WHERE {}").format(
                    self._qualified(table), assignments, condition
                )
            else:
                statement = sql.SQL("DELETE FROM {} WHERE {}").format(
                    self._qualified(table), condition
                )
            text = statement.as_bytes(self.connection())
            self._statements[cache_key] = text
        return text

    def _update_many_statement(self, table: str, names: tuple[str, ...]) -> bytes:
        """``UPDATE t SET ... FROM unnest(<key arrays>) WHERE <key> = <unnested key>``: one
        array parameter per key column, each cast to the column's type (composite keys too)."""
        cache_key = ("update_many", table, names)
        text = self._statements.get(cache_key)
        if text is None:
            definition = self.tables[table]
            key_columns = [definition.column(k) for k in definition.key]
            arrays = sql.SQL(", ").join(
                sql.SQL("%s::{}[]").format(sql.SQL(c.pg_type(self.schema))) for c in key_columns
            )
            statement = sql.SQL("UPDATE {} AS t SET {} FROM unnest({}) AS k({}) WHERE {}").format(
                self._qualified(table),
                sql.SQL(", ").join(sql.SQL("{} = %s").format(sql.Identifier(n)) for n in names),
                arrays,
                sql.SQL(", ").join(sql.Identifier(c.name) for c in key_columns),
                sql.SQL(" AND ").join(
                    sql.SQL("t.{0} = k.{0}").format(sql.Identifier(c.name)) for c in key_columns
                ),
            )
            text = statement.as_bytes(self.connection())
            self._statements[cache_key] = text
        return text

    def _execute(self, op: Operation) -> None:
        conn = self.connection()
        match op:
            case CreateTable(table):
                self._create(table)
            case AddColumn(table, column):
                conn.execute(add_column_sql(self.schema, table, column).encode())
                self.tables[table] = self.tables[table].with_column(column)
            case WidenColumn(table, column, kind):
                conn.execute(widen_column_sql(self.schema, table, column, kind).encode())
                self.tables[table] = self.tables[table].with_kind(column, kind)
            case Insert(table, row):
                names = tuple(row)
                conn.execute(
                    self._statement("insert", table, names),
                    [self.adapt(table, n, row[n]) for n in names],
                )
            case Update(table, key, values):
                conn.execute(
                    self._statement("update", table, tuple(values)),
                    [*(self.adapt(table, n, v) for n, v in values.items()), *key],
                )
            case ChangeKey(table, key, new_key):
                conn.execute(
                    self._statement("update", table, self.tables[table].key), [*new_key, *key]
                )
            case UpdateMany(table, keys, values):
                conn.execute(
                    self._update_many_statement(table, tuple(values)),
                    [
                        *(self.adapt(table, n, v) for n, v in values.items()),
                        *(list(column) for column in zip(*keys, strict=True)),
                    ],
                )
            case Delete(table, key):
                conn.execute(self._statement("delete", table, ()), list(key))
