"""The demo's source tables: column kinds, table definitions and their PostgreSQL DDL.

A :class:`Kind` is one PostgreSQL column type as the demo uses it; everything else (the
DDL, Debezium's Connect schema in :mod:`icefjord.demo.envelopes`, value generation in
:mod:`icefjord.demo.plan`, comparison in :mod:`icefjord.demo.canonical`) is keyed by it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from enum import StrEnum
from typing import Any


class Kind(StrEnum):
    """The PostgreSQL column types of the demo (and the ones :func:`kind_from_pg` reads)."""

    SMALLINT = "smallint"
    INTEGER = "integer"
    BIGINT = "bigint"
    NUMERIC = "numeric"  # numeric(p, s): Debezium Decimal
    NUMERIC_ANY = "numeric_any"  # numeric without a typmod: VariableScaleDecimal
    MONEY = "money"
    REAL = "real"
    DOUBLE = "double"
    BOOLEAN = "boolean"
    TEXT = "text"
    TIMESTAMPTZ = "timestamptz"
    TIMESTAMP = "timestamp"  # timestamp(p) without time zone
    DATE = "date"
    TIME = "time"
    JSON = "json"
    JSONB = "jsonb"
    UUID = "uuid"
    ENUM = "enum"
    INT_ARRAY = "int_array"
    BYTEA = "bytea"


@dataclass(frozen=True)
class EnumType:
    """A PostgreSQL enum type (created in the demo schema)."""

    name: str
    labels: tuple[str, ...]


@dataclass(frozen=True)
class Column:
    """One column. ``precision``/``scale`` for NUMERIC, ``precision`` (fraction digits) for
    TIMESTAMP, ``enum`` for ENUM."""

    name: str
    kind: Kind
    nullable: bool = True
    precision: int | None = None
    scale: int | None = None
    enum: EnumType | None = None

    def pg_type(self, schema: str) -> str:
        """The type as written in ``CREATE TABLE``."""
        match self.kind:
            case Kind.NUMERIC:
                return f"numeric({self.precision},{self.scale})"
            case Kind.NUMERIC_ANY:
                return "numeric"
            case Kind.DOUBLE:
                return "double precision"
            case Kind.TIMESTAMP:
                return f"timestamp({6 if self.precision is None else self.precision})"
            case Kind.TIME:
                return "time"
            case Kind.ENUM:
                assert self.enum is not None
                return f"{schema}.{self.enum.name}"
            case Kind.INT_ARRAY:
                return "integer[]"
            case _:
                return self.kind.value


@dataclass(frozen=True)
class TableDef:
    """A table: its columns in order and its primary key."""

    name: str
    columns: tuple[Column, ...]
    key: tuple[str, ...]

    def column(self, name: str) -> Column:
        for column in self.columns:
            if column.name == name:
                return column
        raise KeyError(f"{self.name} has no column {name!r}")

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(c.name for c in self.columns)

    def with_column(self, column: Column) -> TableDef:
        """This table with ``column`` appended (``ALTER TABLE ... ADD COLUMN``)."""
        return replace(self, columns=(*self.columns, column))

    def with_kind(self, name: str, kind: Kind) -> TableDef:
        """This table with column ``name`` changed to ``kind`` (``ALTER COLUMN ... TYPE``)."""
        columns = tuple(replace(c, kind=kind) if c.name == name else c for c in self.columns)
        return replace(self, columns=columns)

    def key_of(self, row: Mapping[str, Any]) -> tuple[Any, ...]:
        return tuple(row[name] for name in self.key)


CUSTOMER_TIER = EnumType("customer_tier", ("bronze", "silver", "gold", "platinum"))
ORDER_STATUS = EnumType("order_status", ("new", "paid", "shipped", "cancelled"))
ENUM_TYPES = (CUSTOMER_TIER, ORDER_STATUS)

CUSTOMERS = TableDef(
    "customers",
    (
        Column("id", Kind.BIGINT, nullable=False),
        Column("name", Kind.TEXT, nullable=False),
        Column("email", Kind.TEXT),
        Column("tier", Kind.ENUM, nullable=False, enum=CUSTOMER_TIER),
        Column("balance", Kind.NUMERIC, nullable=False, precision=12, scale=2),
        Column("credit", Kind.MONEY),
        Column("signup_date", Kind.DATE),
        Column("created_at", Kind.TIMESTAMPTZ, nullable=False),
        Column("updated_at", Kind.TIMESTAMP, precision=6),
        Column("profile", Kind.JSONB),
        Column("avatar", Kind.BYTEA),
    ),
    ("id",),
)
ORDERS = TableDef(
    "orders",
    (
        Column("id", Kind.UUID, nullable=False),
        Column("customer_id", Kind.BIGINT, nullable=False),
        Column("status", Kind.ENUM, nullable=False, enum=ORDER_STATUS),
        Column("amount", Kind.NUMERIC, nullable=False, precision=14, scale=4),
        Column("quantity", Kind.INTEGER, nullable=False),
        Column("tags", Kind.INT_ARRAY),
        Column("note", Kind.TEXT),
        Column("ordered_at", Kind.TIMESTAMPTZ, nullable=False),
        Column("delivery_window", Kind.TIME),
        Column("attrs", Kind.JSON),
    ),
    ("id",),
)
PAYMENTS = TableDef(
    "payments",
    (
        Column("order_id", Kind.UUID, nullable=False),
        Column("seq", Kind.INTEGER, nullable=False),
        Column("amount", Kind.NUMERIC, nullable=False, precision=10, scale=2),
        Column("fee", Kind.REAL),
        Column("fx_rate", Kind.DOUBLE),
        Column("settled", Kind.BOOLEAN, nullable=False),
        Column("paid_at", Kind.TIMESTAMP, precision=3),
        Column("score", Kind.NUMERIC_ANY),
        Column("retries", Kind.SMALLINT),
    ),
    ("order_id", "seq"),
)
# Created while the workload runs.
SHIPMENTS = TableDef(
    "shipments",
    (
        Column("id", Kind.BIGINT, nullable=False),
        Column("order_id", Kind.UUID, nullable=False),
        Column("carrier", Kind.TEXT, nullable=False),
        Column("shipped_at", Kind.TIMESTAMPTZ),
        Column("weight_kg", Kind.NUMERIC, precision=8, scale=3),
        Column("parcel_codes", Kind.INT_ARRAY),
        Column("label", Kind.BYTEA),
    ),
    ("id",),
)
INITIAL_TABLES = (CUSTOMERS, ORDERS, PAYMENTS)
# Added while the workload runs; no DEFAULT, so rows written before stay NULL in PostgreSQL
# exactly as in Iceberg (a default would fill old rows without any change event).
ADDED_COLUMNS = (
    ("customers", Column("loyalty_points", Kind.INTEGER)),
    ("customers", Column("nickname", Kind.TEXT)),
)
WIDENED_COLUMN = ("orders", "quantity", Kind.BIGINT)


def _ident(name: str) -> str:
    if not re.fullmatch(r"[a-z_][a-z0-9_]*", name):
        raise ValueError(f"{name!r} is not a plain lower-case SQL identifier")
    return name


def create_enum_sql(schema: str, enum: EnumType) -> str:
    labels = ", ".join("'" + label.replace("'", "''") + "'" for label in enum.labels)
    return f"CREATE TYPE {_ident(schema)}.{_ident(enum.name)} AS ENUM ({labels})"


def create_table_sql(schema: str, table: TableDef) -> list[str]:
    """``CREATE TABLE`` with PostgreSQL's default replica identity (the primary key), as a
    user's tables have it: an update's event has no before-image, a delete's only the key,
    and an unchanged TOASTed value arrives as Debezium's placeholder, which the pipeline
    keeps the stored value for (the change record's ``unchanged`` columns)."""
    columns = [
        f"{_ident(c.name)} {c.pg_type(schema)}{'' if c.nullable else ' NOT NULL'}"
        for c in table.columns
    ]
    key = ", ".join(_ident(k) for k in table.key)
    qualified = f"{_ident(schema)}.{_ident(table.name)}"
    return [f"CREATE TABLE {qualified} ({', '.join(columns)}, PRIMARY KEY ({key}))"]


def add_column_sql(schema: str, table: str, column: Column) -> str:
    return (
        f"ALTER TABLE {_ident(schema)}.{_ident(table)} "
        f"ADD COLUMN {_ident(column.name)} {column.pg_type(schema)}"
    )


def widen_column_sql(schema: str, table: str, column: str, kind: Kind) -> str:
    return (
        f"ALTER TABLE {_ident(schema)}.{_ident(table)} "
        f"ALTER COLUMN {_ident(column)} TYPE {Column(column, kind).pg_type(schema)}"
    )


_NUMERIC = re.compile(r"numeric\((\d+),(-?\d+)\)")
_TIMESTAMP = re.compile(r"timestamp(?:\((\d)\))? without time zone")
_SIMPLE = {
    "smallint": Kind.SMALLINT,
    "integer": Kind.INTEGER,
    "bigint": Kind.BIGINT,
    "numeric": Kind.NUMERIC_ANY,
    "money": Kind.MONEY,
    "real": Kind.REAL,
    "double precision": Kind.DOUBLE,
    "boolean": Kind.BOOLEAN,
    "text": Kind.TEXT,
    "timestamp with time zone": Kind.TIMESTAMPTZ,
    "date": Kind.DATE,
    "time without time zone": Kind.TIME,
    "json": Kind.JSON,
    "jsonb": Kind.JSONB,
    "uuid": Kind.UUID,
    "integer[]": Kind.INT_ARRAY,
    "bytea": Kind.BYTEA,
}


def kind_from_pg(name: str, formatted: str, is_enum: bool, nullable: bool) -> Column:
    """A column from PostgreSQL's catalog: ``format_type(atttypid, atttypmod)`` and whether
    the type is an enum. Types outside the demo's set raise ValueError."""
    if is_enum:
        return Column(name, Kind.ENUM, nullable=nullable, enum=EnumType(formatted, ()))
    if formatted.startswith("character varying") or formatted.startswith("character("):
        return Column(name, Kind.TEXT, nullable=nullable)
    if (match := _NUMERIC.fullmatch(formatted)) is not None:
        precision, scale = int(match[1]), int(match[2])
        return Column(name, Kind.NUMERIC, nullable, precision=precision, scale=scale)
    if (match := _TIMESTAMP.fullmatch(formatted)) is not None:
        precision = int(match[1]) if match[1] is not None else 6
        return Column(name, Kind.TIMESTAMP, nullable, precision=precision)
    if formatted in _SIMPLE:
        return Column(name, _SIMPLE[formatted], nullable=nullable)
    raise ValueError(f"column {name}: type {formatted!r} is not one the demo compares")
