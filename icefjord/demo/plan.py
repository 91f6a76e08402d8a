"""The demo workload as a plan: a deterministic sequence of source transactions.

:class:`Planner` turns a :class:`WorkloadSpec` (rate, duration, seed) into transactions of
operations: inserts, updates, primary-key changes, deletes, and the schema changes of the run
(a table created, columns added, a column widened from integer to bigint). It keeps a
:class:`SourceModel` of every row, so updates and deletes always hit live rows, and the model
at the end is exactly what the source holds. The same plan drives PostgreSQL
(:mod:`icefjord.demo.workload`) and the Debezium envelope generator
(:mod:`icefjord.demo.envelopes`). Pure: no I/O, no clock.
"""

from __future__ import annotations

import datetime as dt
import math
import random
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from icefjord.demo.model import (
    ADDED_COLUMNS,
    INITIAL_TABLES,
    SHIPMENTS,
    WIDENED_COLUMN,
    Column,
    Kind,
    TableDef,
)

Key = tuple[Any, ...]
Row = dict[str, Any]


@dataclass(frozen=True)
class WorkloadSpec:
    """How much to change and how fast. ``rate`` counts row operations per second."""

    rate: float = 200.0
    duration_s: float = 60.0
    initial_rows: int = 200
    ops_per_tx: int = 4
    seed: int = 7
    create_table_at: float = 0.25
    add_columns_at: float = 0.45
    widen_at: float = 0.65

    def __post_init__(self) -> None:
        if self.rate <= 0 or self.duration_s <= 0 or self.ops_per_tx < 1:
            raise ValueError("rate, duration_s and ops_per_tx must be positive")
        for at in (self.create_table_at, self.add_columns_at, self.widen_at):
            if not 0 <= at < 1:
                raise ValueError("schema changes happen at a fraction of the run in [0, 1)")

    @property
    def transactions(self) -> int:
        """Timed transactions of the run (schema-change transactions not counted)."""
        return max(1, math.ceil(self.rate * self.duration_s / self.ops_per_tx))


@dataclass(frozen=True)
class Insert:
    table: str
    row: Mapping[str, Any]


@dataclass(frozen=True)
class Update:
    """Set ``values`` (non-key columns) on the row with primary key ``key``."""

    table: str
    key: Key
    values: Mapping[str, Any]


@dataclass(frozen=True)
class UpdateMany:
    """One statement setting ``values`` (non-key columns) on every row of ``keys`` (distinct):
    a batch job's ``UPDATE ... WHERE key IN (...)``. Debezium emits one update per row."""

    table: str
    keys: tuple[Key, ...]
    values: Mapping[str, Any]


@dataclass(frozen=True)
class ChangeKey:
    """``UPDATE ... SET <key> = new_key``: Debezium emits a delete and a create."""

    table: str
    key: Key
    new_key: Key


@dataclass(frozen=True)
class Delete:
    table: str
    key: Key


@dataclass(frozen=True)
class CreateTable:
    table: TableDef


@dataclass(frozen=True)
class AddColumn:
    table: str
    column: Column


@dataclass(frozen=True)
class WidenColumn:
    table: str
    column: str
    kind: Kind


Operation = (
    Insert | Update | UpdateMany | ChangeKey | Delete | CreateTable | AddColumn | WidenColumn
)
ROW_OPERATIONS = (Insert, Update, UpdateMany, ChangeKey, Delete)
# How often each table's rows change, relative to the others.
TABLE_WEIGHTS = {"customers": 3, "orders": 4, "payments": 2, "shipments": 2}


def row_operations(op: Operation) -> int:
    """Row operations ``op`` stands for: a key change counts once, a schema change never."""
    if isinstance(op, UpdateMany):
        return len(op.keys)
    return 1 if isinstance(op, ROW_OPERATIONS) else 0


DDL = (CreateTable, AddColumn, WidenColumn)


@dataclass(frozen=True)
class Transaction:
    """Operations committed together; ``at_s`` is the planned start, seconds into the run
    (0 for the initial load)."""

    index: int
    at_s: float
    ops: tuple[Operation, ...]

    @property
    def is_ddl(self) -> bool:
        return any(isinstance(op, DDL) for op in self.ops)


@dataclass(frozen=True)
class RowChange:
    """One row-level change as Debezium reports it: ``op`` c/u/d with full images."""

    table: str
    op: str
    before: Row | None
    after: Row | None


class _KeyBag:
    """Live keys of one table: O(1) add, remove and uniform random pick."""

    def __init__(self) -> None:
        self._keys: list[Key] = []
        self._index: dict[Key, int] = {}

    def __len__(self) -> int:
        return len(self._keys)

    def add(self, key: Key) -> None:
        self._index[key] = len(self._keys)
        self._keys.append(key)

    def remove(self, key: Key) -> None:
        position = self._index.pop(key)
        last = self._keys.pop()
        if position < len(self._keys):
            self._keys[position] = last
            self._index[last] = position

    def pick(self, rng: random.Random) -> Key:
        return self._keys[rng.randrange(len(self._keys))]


@dataclass
class SourceModel:
    """The source's tables and rows, as the operations so far leave them."""

    tables: dict[str, TableDef] = field(default_factory=dict)
    rows: dict[str, dict[Key, Row]] = field(default_factory=dict)

    def advance(self, op: Operation) -> None:
        """:meth:`apply` without building the row changes, for a planner that does not use
        them: an update's new row is the only copy made (a set-based benchmark's client
        spent most of its planning on the discarded images)."""
        match op:
            case UpdateMany(table, keys, values):
                rows = self.rows[table]
                for key in keys:
                    rows[key] = {**rows[key], **values}
            case Update(table, key, values):
                rows = self.rows[table]
                rows[key] = {**rows[key], **values}
            case _:
                self.apply(op)

    def apply(self, op: Operation) -> list[RowChange]:
        """Apply ``op``; return the row changes it causes (none for DDL). Raises KeyError for
        a missing row or table, ValueError for a duplicate key."""
        match op:
            case CreateTable(table):
                self.tables[table.name] = table
                self.rows[table.name] = {}
                return []
            case AddColumn(table, column):
                self.tables[table] = self.tables[table].with_column(column)
                for row in self.rows[table].values():
                    row[column.name] = None
                return []
            case WidenColumn(table, column, kind):
                self.tables[table] = self.tables[table].with_kind(column, kind)
                return []
            case Insert(table, row):
                full = {name: row.get(name) for name in self.tables[table].names}
                key = self.tables[table].key_of(full)
                if key in self.rows[table]:
                    raise ValueError(f"{table}: duplicate key {key}")
                self.rows[table][key] = full
                return [RowChange(table, "c", None, dict(full))]
            case Update(table, key, values):
                before = self.rows[table][key]
                after = {**before, **values}
                self.rows[table][key] = after
                return [RowChange(table, "u", dict(before), dict(after))]
            case UpdateMany(table, keys, values):
                out = []
                for key in keys:
                    before = self.rows[table][key]
                    after = {**before, **values}
                    self.rows[table][key] = after
                    out.append(RowChange(table, "u", dict(before), dict(after)))
                return out
            case ChangeKey(table, key, new_key):
                definition = self.tables[table]
                before = self.rows[table].pop(key)
                after = {**before, **dict(zip(definition.key, new_key, strict=True))}
                if new_key in self.rows[table]:
                    raise ValueError(f"{table}: duplicate key {new_key}")
                self.rows[table][new_key] = after
                return [
                    RowChange(table, "d", dict(before), None),
                    RowChange(table, "c", None, dict(after)),
                ]
            case Delete(table, key):
                before = self.rows[table].pop(key)
                return [RowChange(table, "d", dict(before), None)]
        raise TypeError(f"not an operation: {op!r}")


NAMES = (
    "Zoë Ångström",
    "Łukasz Żółć",
    "渡辺 さくら",
    "José Núñez",
    "Björk Guðmundsdóttir",
    "Nguyễn Văn An",
    "Мария Иванова",
    "محمد علي",
    "Ωmega Σigma",
    "🚀 Rocket Ltd",
    'O\'Brien "Quote"',
    "Ada Lovelace",
)
CARRIERS = ("DHL", "UPS", "La Poste", "Post Danmark", "ヤマト運輸", "Correos")
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


class ValueFactory:
    """Random but valid values for each :class:`Kind` (within what PostgreSQL stores
    exactly and Debezium and Iceberg represent: no NaN, no infinity, years 1990-2035)."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng

    def value(self, column: Column) -> Any:
        rng = self.rng
        if column.nullable and rng.random() < 0.1:
            return None
        match column.kind:
            case Kind.SMALLINT:
                return rng.randint(-32768, 32767)
            case Kind.INTEGER:
                return rng.randint(1, 1_000_000)
            case Kind.BIGINT:
                return rng.randint(1, 10_000_000_000)
            case Kind.NUMERIC:
                assert column.precision is not None and column.scale is not None
                limit = 10 ** min(column.precision, 12) - 1
                return Decimal(rng.randint(-limit, limit)).scaleb(-column.scale)
            case Kind.NUMERIC_ANY:
                return Decimal(rng.randint(-(10**9), 10**9)).scaleb(-rng.randint(0, 6))
            case Kind.MONEY:
                return Decimal(rng.randint(-(10**9), 10**9)).scaleb(-2)
            case Kind.REAL:
                return round(rng.uniform(0, 1000), 2)
            case Kind.DOUBLE:
                return round(rng.uniform(0.5, 2.0), 9)
            case Kind.BOOLEAN:
                return rng.random() < 0.5
            case Kind.TEXT:
                return f"{rng.choice(NAMES)} #{rng.randint(1, 9999)}"
            case Kind.TIMESTAMPTZ:
                seconds = rng.randint(631152000, 2051222400)  # 1990 .. 2035
                return _EPOCH + dt.timedelta(seconds=seconds, microseconds=rng.randint(0, 999_999))
            case Kind.TIMESTAMP:
                digits = 6 if column.precision is None else column.precision
                step = 10 ** (6 - min(digits, 6))
                micros = rng.randint(0, 999_999) // step * step
                seconds = rng.randint(631152000, 2051222400)
                return dt.datetime(1970, 1, 1) + dt.timedelta(seconds=seconds, microseconds=micros)
            case Kind.DATE:
                return dt.date(1990, 1, 1) + dt.timedelta(days=rng.randint(0, 16_000))
            case Kind.TIME:
                micros = rng.randint(0, 86_400 * 10**6 - 1)
                return (dt.datetime.min + dt.timedelta(microseconds=micros)).time()
            case Kind.JSON | Kind.JSONB:
                return self._json()
            case Kind.UUID:
                return uuid.UUID(int=rng.getrandbits(128), version=4)
            case Kind.ENUM:
                assert column.enum is not None
                return rng.choice(column.enum.labels)
            case Kind.INT_ARRAY:
                length = rng.randint(0, 5)
                return [
                    None if rng.random() < 0.1 else rng.randint(-1000, 10**5) for _ in range(length)
                ]
            case Kind.BYTEA:
                return rng.randbytes(rng.randint(0, 48))
        raise ValueError(f"no values for {column.kind}")

    def _json(self) -> dict[str, Any]:
        rng = self.rng
        return {
            "visits": rng.randint(0, 500),
            "score": round(rng.uniform(0, 100), 2),
            "tags": rng.sample(["vip", "früh", "夜", "b2b", "new"], k=rng.randint(0, 3)),
            "address": {
                "city": rng.choice(["Zürich", "København", "東京", "Reykjavík"]),
                "zip": f"{rng.randint(1000, 99999)}",
            },
            "opt_in": rng.random() < 0.5,
            "note": None,
        }


class Planner:
    """Generates the plan for one :class:`WorkloadSpec`; :attr:`model` follows along."""

    def __init__(self, spec: WorkloadSpec) -> None:
        self.spec = spec
        self.rng = random.Random(spec.seed)
        self.values = ValueFactory(self.rng)
        self.model = SourceModel()
        self._keys: dict[str, _KeyBag] = {}
        self._next_id: dict[str, int] = {}
        self._index = 0
        for table in INITIAL_TABLES:
            self._apply(CreateTable(table))

    @property
    def initial_tables(self) -> tuple[TableDef, ...]:
        """The tables that exist before capture starts (already in :attr:`model`)."""
        return INITIAL_TABLES

    def seed(self, batch: int = 100) -> Iterator[Transaction]:
        """The initial load: ``initial_rows`` inserts per initial table (captured by
        Debezium's snapshot)."""
        for table in INITIAL_TABLES:
            remaining = self.spec.initial_rows
            while remaining > 0:
                count = min(batch, remaining)
                ops = tuple(self._apply(self._insert(table.name)) for _ in range(count))
                remaining -= count
                yield self._transaction(0.0, ops)

    def changes(self) -> Iterator[Transaction]:
        """The timed run: DML transactions spaced ``ops_per_tx / rate`` seconds apart, with
        the schema changes at their fractions of the run."""
        spec = self.spec
        total = spec.transactions
        interval = spec.ops_per_tx / spec.rate
        ddl_at: dict[int, list[Operation]] = {}
        for fraction, ops in (
            (spec.create_table_at, [CreateTable(SHIPMENTS)]),
            (spec.add_columns_at, [AddColumn(t, c) for t, c in ADDED_COLUMNS]),
            (spec.widen_at, [WidenColumn(*WIDENED_COLUMN)]),
        ):
            ddl_at.setdefault(math.floor(fraction * total), []).extend(ops)
        for i in range(total):
            at = i * interval
            for op in ddl_at.get(i, []):
                yield self._transaction(at, (self._apply(op),))
            count = self.rng.randint(1, 2 * spec.ops_per_tx - 1)
            yield self._transaction(at, tuple(self._apply(self._dml()) for _ in range(count)))

    def steady(
        self,
        rate: float | None,
        duration_s: float | None = None,
        ops_per_tx: int | None = None,
        rows_per_statement: int = 1,
    ) -> Iterator[Transaction]:
        """DML only (no schema change), for benchmarks: transactions of ``ops_per_tx`` row
        operations on average (default: the spec's), spaced to ``rate`` row operations per
        second for ``duration_s`` seconds: each transaction is due when the row operations
        planned before it are, so the stream offers ``rate`` exactly, whatever the random
        transaction sizes add up to. ``rate`` None: every ``at_s`` is 0 (as fast as the
        source goes); ``duration_s`` None: endless (the consumer stops when it wants).

        ``rows_per_statement`` above 1: every operation is an :class:`UpdateMany` of up to
        that many live rows of one table (fewer where the table has fewer), so the source
        spends its time in the database rather than in its client; ``ops_per_tx`` then
        counts statements."""
        per_tx = ops_per_tx or self.spec.ops_per_tx
        if per_tx < 1 or rows_per_statement < 1 or (rate is not None and rate <= 0):
            raise ValueError("rate, ops_per_tx and rows_per_statement must be positive")
        if rate is None and duration_s is not None:
            raise ValueError("an unpaced stream has no duration: pass duration_s=None")
        rows = 0  # planned so far: each transaction starts when the rows before it are due
        while True:
            at = 0.0 if rate is None else rows / rate
            if duration_s is not None and at >= duration_s:
                return
            count = self.rng.randint(1, 2 * per_tx - 1)
            ops = tuple(
                self._apply(
                    self._dml()
                    if rows_per_statement == 1
                    else self._update_many(rows_per_statement)
                )
                for _ in range(count)
            )
            rows += sum(row_operations(op) for op in ops)
            yield self._transaction(at, ops)

    # -- internals -------------------------------------------------------------------------

    def _transaction(self, at: float, ops: tuple[Operation, ...]) -> Transaction:
        self._index += 1
        return Transaction(self._index, at, ops)

    def _apply(self, op: Operation) -> Operation:
        self.model.advance(op)
        match op:
            case CreateTable(table):
                self._keys[table.name] = _KeyBag()
            case Insert(table, row):
                self._keys[table].add(self.model.tables[table].key_of(row))
            case ChangeKey(table, key, new_key):
                self._keys[table].remove(key)
                self._keys[table].add(new_key)
            case Delete(table, key):
                self._keys[table].remove(key)
        return op

    def _dml(self) -> Operation:
        rng = self.rng
        tables = [t for t in TABLE_WEIGHTS if t in self.model.tables]
        table = rng.choices(tables, [TABLE_WEIGHTS[t] for t in tables])[0]
        live = len(self._keys[table])
        roll = rng.random()
        if live < 20 or roll < 0.4:
            return self._insert(table)
        key = self._keys[table].pick(rng)
        if roll < 0.75:
            return self._update(table, key)
        if roll < 0.85 and self.model.tables[table].key == ("id",) and table != "orders":
            return ChangeKey(table, key, (self._new_id(table),))
        return Delete(table, key)

    def _update_many(self, rows: int) -> UpdateMany:
        tables = [t for t in TABLE_WEIGHTS if t in self.model.tables and len(self._keys[t]) > 0]
        table = self.rng.choices(tables, [TABLE_WEIGHTS[t] for t in tables])[0]
        bag = self._keys[table]
        keys = dict.fromkeys(bag.pick(self.rng) for _ in range(min(rows, len(bag))))
        one = self._update(table, next(iter(keys)))
        return UpdateMany(table, tuple(keys), one.values)

    def _new_id(self, table: str) -> int:
        self._next_id[table] = self._next_id.get(table, 0) + 1
        return self._next_id[table]

    def _insert(self, table: str) -> Insert:
        definition = self.model.tables[table]
        row = {c.name: self._column_value(table, c) for c in definition.columns}
        if definition.key == ("id",) and definition.column("id").kind == Kind.BIGINT:
            row["id"] = self._new_id(table)
        if table == "payments":
            row["seq"] = self._new_id(table)
            orders = self._keys.get("orders")
            if orders is not None and len(orders) > 0 and self.rng.random() < 0.8:
                row["order_id"] = orders.pick(self.rng)[0]
        return Insert(table, row)

    def _update(self, table: str, key: Key) -> Update:
        definition = self.model.tables[table]
        candidates = [c for c in definition.columns if c.name not in definition.key]
        chosen = self.rng.sample(candidates, k=min(len(candidates), self.rng.randint(1, 3)))
        return Update(table, key, {c.name: self._column_value(table, c) for c in chosen})

    def _column_value(self, table: str, column: Column) -> Any:
        if column.name == "carrier":
            return self.rng.choice(CARRIERS)
        if (table, column.name, column.kind) == WIDENED_COLUMN:
            # Only a bigint holds these: proof that the widening reached Iceberg.
            return self.rng.randint(2**31, 2**40)
        return self.values.value(column)
