"""Realistic Debezium records for the normalizer tests.

Shapes follow what Debezium 2.x/3.x connectors write with the Kafka JsonConverter
(``schemas.enable=true`` unless a test strips the schema): a Postgres table
``shop.public.orders`` (server name ``shop``) and a MySQL table ``mysql1.inventory.products``.
Helpers are handed out as fixtures because test modules are imported in importlib mode.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from typing import Any

import pytest

from services.cdc_normalizer.normalize import DebeziumMessage, Origin


def _field(field_name: str, type_: str, optional: bool = True, **extra: Any) -> dict[str, Any]:
    return {"type": type_, "optional": optional, "field": field_name, **extra}


PG_ORDERS_COLUMNS: list[dict[str, Any]] = [
    _field("id", "int64", optional=False),
    _field("customer_id", "int32", optional=False),
    _field(
        "total",
        "bytes",
        name="org.apache.kafka.connect.data.Decimal",
        version=1,
        parameters={"scale": "2", "connect.decimal.precision": "12"},
    ),
    {
        "type": "struct",
        "fields": [
            {"type": "int32", "optional": False, "field": "scale"},
            {"type": "bytes", "optional": False, "field": "value"},
        ],
        "optional": True,
        "name": "io.debezium.data.VariableScaleDecimal",
        "version": 1,
        "doc": "Variable scaled decimal",
        "field": "discount",
    },
    _field("order_date", "int32", name="io.debezium.time.Date", version=1),
    _field("created_at", "string", name="io.debezium.time.ZonedTimestamp", version=1),
    _field("updated_at", "int64", name="io.debezium.time.MicroTimestamp", version=1),
    _field("pickup_time", "int64", name="io.debezium.time.MicroTime", version=1),
    {
        "type": "array",
        "items": {"type": "string", "optional": True},
        "optional": True,
        "field": "tags",
    },
    _field("metadata", "string", name="io.debezium.data.Json", version=1),
    _field("external_id", "string", name="io.debezium.data.Uuid", version=1),
    _field(
        "status",
        "string",
        name="io.debezium.data.Enum",
        version=1,
        parameters={"allowed": "new,paid,shipped"},
    ),
    _field("is_gift", "boolean"),
    _field("flag", "boolean"),
    _field("mask", "bytes", name="io.debezium.data.Bits", version=1, parameters={"length": "8"}),
    {
        "type": "struct",
        "fields": [
            {"type": "bytes", "optional": False, "field": "wkb"},
            {"type": "int32", "optional": True, "field": "srid"},
        ],
        "optional": True,
        "name": "io.debezium.data.geometry.Geometry",
        "version": 1,
        "doc": "Geometry",
        "field": "location",
    },
]

PG_SOURCE_SCHEMA: dict[str, Any] = {
    "type": "struct",
    "fields": [
        _field("version", "string", optional=False),
        _field("connector", "string", optional=False),
        _field("name", "string", optional=False),
        _field("ts_ms", "int64", optional=False),
        _field(
            "snapshot",
            "string",
            name="io.debezium.data.Enum",
            version=1,
            parameters={"allowed": "true,last,false,incremental"},
            default="false",
        ),
        _field("db", "string", optional=False),
        _field("sequence", "string"),
        _field("ts_us", "int64"),
        _field("ts_ns", "int64"),
        _field("schema", "string", optional=False),
        _field("table", "string", optional=False),
        _field("txId", "int64"),
        _field("lsn", "int64"),
        _field("xmin", "int64"),
    ],
    "optional": False,
    "name": "io.debezium.connector.postgresql.Source",
    "field": "source",
}

TRANSACTION_SCHEMA: dict[str, Any] = {
    "type": "struct",
    "fields": [
        _field("id", "string", optional=False),
        _field("total_order", "int64", optional=False),
        _field("data_collection_order", "int64", optional=False),
    ],
    "optional": True,
    "name": "event.block",
    "version": 1,
    "field": "transaction",
}


def envelope_schema(
    topic: str, columns: list[dict[str, Any]], source: dict[str, Any]
) -> dict[str, Any]:
    """The JsonConverter schema block of a Debezium envelope for a table with ``columns``."""
    value = {
        "type": "struct",
        "fields": copy.deepcopy(columns),
        "optional": True,
        "name": f"{topic}.Value",
    }
    return {
        "type": "struct",
        "fields": [
            {**copy.deepcopy(value), "field": "before"},
            {**value, "field": "after"},
            copy.deepcopy(source),
            _field("op", "string", optional=False),
            _field("ts_ms", "int64"),
            TRANSACTION_SCHEMA,
        ],
        "optional": False,
        "name": f"{topic}.Envelope",
        "version": 2,
    }


PG_AFTER: dict[str, Any] = {
    "id": 1001,
    "customer_id": 42,
    "total": "AeI6",  # unscaled 123450 = 0x01E23A -> 1234.50
    "discount": {"scale": 3, "value": "MDk="},  # unscaled 12345 = 0x3039 -> 12.345
    "order_date": 19000,  # 2022-01-08
    "created_at": "2022-01-08T10:15:30.123456Z",
    "updated_at": 1641636930123456,  # 2022-01-08T10:15:30.123456 (no zone)
    "pickup_time": 36930123456,  # 10:15:30.123456
    "tags": ["gift", None, "express"],
    "metadata": '{"channel": "web", "items": [1, 2]}',
    "external_id": "A0EEBC99-9C0B-4EF8-BB6D-6BB9BD380A11",
    "status": "paid",
    "is_gift": True,
    "flag": False,
    "mask": "/w==",  # 0xFF
    "location": {"wkb": "AQEAAAAAAAAAAADwPwAAAAAAAABA", "srid": 4326},
}


def pg_source(**overrides: Any) -> dict[str, Any]:
    """A Postgres ``source`` block as Debezium 2.7 writes it while streaming."""
    source = {
        "version": "2.7.3.Final",
        "connector": "postgresql",
        "name": "shop",
        "ts_ms": 1641636930500,
        "snapshot": "false",
        "db": "shop",
        "sequence": '["24023120","24023128"]',
        "ts_us": 1641636930500123,
        "ts_ns": 1641636930500123000,
        "schema": "public",
        "table": "orders",
        "txId": 555,
        "lsn": 24023128,
        "xmin": None,
    }
    source.update(overrides)
    return source


PG_KEY: dict[str, Any] = {
    "schema": {
        "type": "struct",
        "fields": [_field("id", "int64", optional=False)],
        "optional": False,
        "name": "shop.public.orders.Key",
    },
    "payload": {"id": 1001},
}


def pg_record(
    op: str,
    *,
    before: dict[str, Any] | None = None,
    after: dict[str, Any] | None = None,
    source: dict[str, Any] | None = None,
    transaction: dict[str, Any] | None = None,
    with_schema: bool = True,
) -> dict[str, Any]:
    """A Postgres ``shop.public.orders`` value, with or without the schema block."""
    payload = {
        "before": before,
        "after": after,
        "source": source or pg_source(),
        "op": op,
        "ts_ms": 1641636931000,
        "transaction": transaction,
    }
    if not with_schema:
        return payload
    schema = envelope_schema("shop.public.orders", PG_ORDERS_COLUMNS, PG_SOURCE_SCHEMA)
    return {"schema": schema, "payload": payload}


MYSQL_COLUMNS: list[dict[str, Any]] = [
    _field("id", "int32", optional=False),
    _field("name", "string", optional=False),
    _field(
        "price",
        "bytes",
        name="org.apache.kafka.connect.data.Decimal",
        version=1,
        parameters={"scale": "2", "connect.decimal.precision": "10"},
    ),
    _field("weight", "float64"),
    _field("stock", "int16"),
    _field("created", "int64", name="io.debezium.time.MicroTimestamp", version=1),
    _field("modified", "string", name="io.debezium.time.ZonedTimestamp", version=1),
    _field(
        "size",
        "string",
        name="io.debezium.data.Enum",
        version=1,
        parameters={"allowed": "S,M,L"},
    ),
    _field(
        "options",
        "string",
        name="io.debezium.data.EnumSet",
        version=1,
        parameters={"allowed": "red,green,blue"},
    ),
    _field("released", "int32", name="io.debezium.time.Year", version=1),
    _field("picture", "bytes"),
]

MYSQL_SOURCE_SCHEMA: dict[str, Any] = {
    "type": "struct",
    "fields": [
        _field("version", "string", optional=False),
        _field("connector", "string", optional=False),
        _field("name", "string", optional=False),
        _field("ts_ms", "int64", optional=False),
        _field("snapshot", "string"),
        _field("db", "string", optional=False),
        _field("sequence", "string"),
        _field("table", "string"),
        _field("server_id", "int64", optional=False),
        _field("gtid", "string"),
        _field("file", "string", optional=False),
        _field("pos", "int64", optional=False),
        _field("row", "int32", optional=False),
        _field("thread", "int64"),
        _field("query", "string"),
    ],
    "optional": False,
    "name": "io.debezium.connector.mysql.Source",
    "field": "source",
}

MYSQL_AFTER: dict[str, Any] = {
    "id": 101,
    "name": "scooter",
    "price": "nA==",  # unscaled -100 (0x9C, two's complement) -> -1.00
    "weight": 3.14,
    "stock": 7,
    "created": 1641636930123456,
    "modified": "2022-01-08T10:15:30Z",
    "size": "M",
    "options": "red,blue",
    "released": 2021,
    "picture": "3q2+7w==",  # DE AD BE EF
}


def mysql_source(**overrides: Any) -> dict[str, Any]:
    """A MySQL ``source`` block as Debezium 2.x writes it while reading the binlog."""
    source = {
        "version": "2.7.3.Final",
        "connector": "mysql",
        "name": "mysql1",
        "ts_ms": 1641636930000,
        "snapshot": "false",
        "db": "inventory",
        "sequence": None,
        "table": "products",
        "server_id": 223344,
        "gtid": "3E11FA47-71CA-11E1-9E33-C80AA9429562:23",
        "file": "mysql-bin.000003",
        "pos": 154,
        "row": 0,
        "thread": 7,
        "query": None,
    }
    source.update(overrides)
    return source


def mysql_record(
    op: str,
    *,
    before: dict[str, Any] | None = None,
    after: dict[str, Any] | None = None,
    source: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """A MySQL ``mysql1.inventory.products`` value with its schema block."""
    schema = envelope_schema("mysql1.inventory.products", MYSQL_COLUMNS, MYSQL_SOURCE_SCHEMA)
    payload = {
        "before": before,
        "after": after,
        "source": source or mysql_source(),
        "op": op,
        "ts_ms": 1641636930999,
        "transaction": None,
    }
    return {"schema": schema, "payload": payload}


MYSQL_KEY: dict[str, Any] = {
    "schema": {
        "type": "struct",
        "fields": [_field("id", "int32", optional=False)],
        "optional": False,
        "name": "mysql1.inventory.products.Key",
    },
    "payload": {"id": 101},
}


class Events:
    """Builders for realistic records, handed to tests through the ``events`` fixture."""

    pg_after = staticmethod(lambda: copy.deepcopy(PG_AFTER))
    pg_key = staticmethod(lambda: copy.deepcopy(PG_KEY))
    pg_columns = staticmethod(lambda: copy.deepcopy(PG_ORDERS_COLUMNS))
    pg_source = staticmethod(pg_source)
    pg_record = staticmethod(pg_record)
    mysql_after = staticmethod(lambda: copy.deepcopy(MYSQL_AFTER))
    mysql_key = staticmethod(lambda: copy.deepcopy(MYSQL_KEY))
    mysql_source = staticmethod(mysql_source)
    mysql_record = staticmethod(mysql_record)
    envelope_schema = staticmethod(envelope_schema)

    @staticmethod
    def message(
        value: Any,
        key: Any = None,
        *,
        topic: str = "shop.public.orders",
        partition: int = 0,
        offset: int = 17,
        timestamp_ms: int | None = 1641636931100,
        as_bytes: bool = True,
    ) -> DebeziumMessage:
        """A consumed record; by default key and value are JSON bytes as read from Kafka."""

        def encode(obj: Any) -> Any:
            return json.dumps(obj).encode() if as_bytes and obj is not None else obj

        return DebeziumMessage(
            key=encode(key),
            value=encode(value),
            origin=Origin(topic, partition, offset, timestamp_ms),
        )


@pytest.fixture
def events() -> type[Events]:
    """The record builders."""
    return Events


@pytest.fixture
def pg_message(events: type[Events]) -> Callable[..., DebeziumMessage]:
    """``pg_message(op, after=..., before=...)``: a Postgres orders record with key."""

    def build(op: str, **kwargs: Any) -> DebeziumMessage:
        return events.message(events.pg_record(op, **kwargs), events.pg_key())

    return build
