"""normalize() across input forms: MySQL, schemaless + declared schema, flattened, Avro."""

from __future__ import annotations

import datetime as dt
import io
from decimal import Decimal
from typing import Any

import fastavro
import pytest

from services.cdc_normalizer.connect_schema import connect_schema_from_avro
from services.cdc_normalizer.normalize import (
    DebeziumMessage,
    Normalized,
    NormalizeOptions,
    Operation,
    Origin,
    RejectedRecord,
    TableOverrides,
    normalize,
)
from services.cdc_normalizer.table_schema import TableId

pytestmark = pytest.mark.unit

MYSQL_EXPECTED = {
    "id": 101,
    "name": "scooter",
    "price": Decimal("-1.00"),
    "weight": 3.14,
    "stock": 7,
    "created": dt.datetime(2022, 1, 8, 10, 15, 30, 123456),
    "modified": dt.datetime(2022, 1, 8, 10, 15, 30, tzinfo=dt.UTC),
    "size": "M",
    "options": ["red", "blue"],
    "released": 2021,
    "picture": bytes.fromhex("deadbeef"),
}


def _change(result: Any) -> Any:
    assert isinstance(result, Normalized), result
    (change,) = result.changes
    return change


# ----------------------------------------------------------------- MySQL


def test_mysql_create(events) -> None:
    record = events.mysql_record("c", after=events.mysql_after())
    message = events.message(record, events.mysql_key(), topic="mysql1.inventory.products")
    change = _change(normalize(message))
    assert change.table == TableId("inventory", "products")
    assert change.after == MYSQL_EXPECTED
    assert change.key == {"id": 101}
    # mysql-bin.000003 -> 3, pos 154, row 0
    assert change.position == "00000000000000000003.00000000000000000154.00000000000000000000"
    assert change.tx_id == "3E11FA47-71CA-11E1-9E33-C80AA9429562:23"
    assert change.source["gtid"] == "3E11FA47-71CA-11E1-9E33-C80AA9429562:23"
    assert change.source["file"] == "mysql-bin.000003"


def test_mysql_multi_row_event_orders_by_row(events) -> None:
    positions = []
    for row in (0, 1, 2):
        source = events.mysql_source(row=row)
        record = events.mysql_record("u", after=events.mysql_after(), source=source)
        message = events.message(record, events.mysql_key(), topic="mysql1.inventory.products")
        positions.append(_change(normalize(message)).position)
    assert positions == sorted(positions) and len(set(positions)) == 3


def test_mysql_delete(events) -> None:
    record = events.mysql_record("d", before=events.mysql_after())
    message = events.message(record, events.mysql_key(), topic="mysql1.inventory.products")
    change = _change(normalize(message))
    assert change.op is Operation.DELETE and change.after is None and change.key == {"id": 101}


def test_mysql_empty_set_is_empty_list(events) -> None:
    after = events.mysql_after()
    after["options"] = ""
    record = events.mysql_record("c", after=after)
    message = events.message(record, events.mysql_key(), topic="mysql1.inventory.products")
    assert _change(normalize(message)).after["options"] == []


# ----------------------------------------------------------------- schemaless JSON

DECLARED_ORDERS = {
    "type": "record",
    "name": "OrdersRow",
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "customer_id", "type": "int"},
        {
            "name": "total",
            "type": [
                "null",
                {"type": "bytes", "logicalType": "decimal", "precision": 12, "scale": 2},
            ],
            "default": None,
        },
        {"name": "order_date", "type": ["null", {"type": "int", "logicalType": "date"}]},
        {"name": "created_at", "type": {"type": "long", "logicalType": "timestamp-micros"}},
        {"name": "metadata", "type": ["null", {"type": "string", "icefjord.semantic": "json"}]},
    ],
}


def _schemaless(events, after: dict[str, Any], key: Any = None) -> DebeziumMessage:
    value = events.pg_record("c", after=after, with_schema=False)
    return events.message(value, key if key is not None else {"id": after["id"]})


def _declared_options() -> NormalizeOptions:
    declared = connect_schema_from_avro(DECLARED_ORDERS)
    return NormalizeOptions(tables={"public.orders": TableOverrides(row_schema=declared)})


def test_schemaless_without_declared_schema_is_rejected(events) -> None:
    after = {"id": 1, "customer_id": 2, "total": "AeI6", "order_date": 19000}
    rejected = normalize(_schemaless(events, after))
    assert isinstance(rejected, RejectedRecord) and rejected.reason == "missing_schema"


def test_schemaless_with_declared_schema(events) -> None:
    after = {
        "id": 1,
        "customer_id": 2,
        "total": "AeI6",
        "order_date": 19000,
        "created_at": "2022-01-08T11:15:30.5+01:00",
        "metadata": None,
    }
    change = _change(normalize(_schemaless(events, after), _declared_options()))
    assert change.after == {
        "id": 1,
        "customer_id": 2,
        "total": Decimal("1234.50"),
        "order_date": dt.date(2022, 1, 8),
        "created_at": dt.datetime(2022, 1, 8, 10, 15, 30, 500000, tzinfo=dt.UTC),
        "metadata": None,
    }
    assert change.key == {"id": 1}


def test_schemaless_column_missing_from_declared_schema_is_rejected(events) -> None:
    after = {"id": 1, "customer_id": 2, "created_at": "2022-01-08T10:00:00Z", "extra": 5}
    rejected = normalize(_schemaless(events, after), _declared_options())
    assert isinstance(rejected, RejectedRecord) and rejected.reason == "schema_mismatch"
    assert "extra" in rejected.message


# ----------------------------------------------------------------- flattened

FLAT_SCHEMA = {
    "type": "struct",
    "fields": [
        {"type": "int64", "optional": False, "field": "id"},
        {"type": "string", "optional": True, "field": "status"},
        {
            "type": "int32",
            "optional": True,
            "name": "io.debezium.time.Date",
            "version": 1,
            "field": "order_date",
        },
        {"type": "string", "optional": True, "field": "__op"},
        {"type": "string", "optional": True, "field": "__table"},
        {"type": "int64", "optional": True, "field": "__lsn"},
        {"type": "int64", "optional": True, "field": "__source_ts_ms"},
        {"type": "string", "optional": True, "field": "__deleted"},
    ],
    "optional": False,
    "name": "shop.public.orders.Value",
}


def _flat(op: str | None, deleted: str, with_schema: bool = True, **columns: Any) -> Any:
    payload: dict[str, Any] = {"id": 7, "status": "paid", "order_date": 19000, **columns}
    payload.update({"__table": "orders", "__lsn": 24023200, "__source_ts_ms": 1641636930500})
    payload["__deleted"] = deleted
    if op is not None:
        payload["__op"] = op
    return {"schema": FLAT_SCHEMA, "payload": payload} if with_schema else payload


def test_flattened_create(events) -> None:
    change = _change(normalize(events.message(_flat("c", "false"), {"id": 7})))
    assert change.op is Operation.CREATE
    assert change.after == {"id": 7, "status": "paid", "order_date": dt.date(2022, 1, 8)}
    assert change.table == TableId("public", "orders")  # namespace from the topic
    assert change.source_ts_ms == 1641636930500
    assert change.position == "00000000000024023200.00000000000000000000"
    assert change.source["lsn"] == "24023200"
    assert change.source["table"] == "orders"


def test_flattened_rewrite_delete(events) -> None:
    change = _change(normalize(events.message(_flat("d", "true"), {"id": 7})))
    assert change.op is Operation.DELETE and change.after is None and change.key == {"id": 7}


def test_flattened_without_op_is_upsert_or_delete(events) -> None:
    upsert = _change(normalize(events.message(_flat(None, "false"), {"id": 7})))
    assert upsert.op is Operation.UPDATE
    deleted = _change(normalize(events.message(_flat(None, "true"), {"id": 7})))
    assert deleted.op is Operation.DELETE


def test_flattened_key_from_configured_columns(events) -> None:
    options = NormalizeOptions(default=TableOverrides(key_columns=("id",)))
    change = _change(normalize(events.message(_flat("u", "false"), None), options))
    assert change.key == {"id": 7}


def test_flattened_bad_deleted_flag_rejected(events) -> None:
    rejected = normalize(events.message(_flat("u", "maybe"), {"id": 7}))
    assert isinstance(rejected, RejectedRecord) and rejected.reason == "malformed_envelope"


# ----------------------------------------------------------------- Avro (Confluent wire)

DEC = {
    "type": "bytes",
    "scale": 2,
    "precision": 10,
    "connect.version": 1,
    "connect.parameters": {"scale": "2", "connect.decimal.precision": "10"},
    "connect.name": "org.apache.kafka.connect.data.Decimal",
    "logicalType": "decimal",
}
AVRO_ENVELOPE = {
    "type": "record",
    "name": "Envelope",
    "namespace": "mysql1.inventory.products",
    "fields": [
        {
            "name": "before",
            "type": [
                "null",
                {
                    "type": "record",
                    "name": "Value",
                    "fields": [
                        {"name": "id", "type": "int"},
                        {"name": "price", "type": ["null", DEC], "default": None},
                        {
                            "name": "stock",
                            "type": ["null", {"type": "int", "connect.type": "int16"}],
                            "default": None,
                        },
                        {
                            "name": "created",
                            "type": {
                                "type": "long",
                                "connect.version": 1,
                                "connect.name": "io.debezium.time.MicroTimestamp",
                            },
                        },
                        {
                            "name": "launched",
                            "type": [
                                "null",
                                {
                                    "type": "int",
                                    "connect.version": 1,
                                    "connect.name": "org.apache.kafka.connect.data.Date",
                                    "logicalType": "date",
                                },
                            ],
                            "default": None,
                        },
                        {
                            "name": "modified",
                            "type": [
                                "null",
                                {
                                    "type": "long",
                                    "connect.version": 1,
                                    "connect.name": "org.apache.kafka.connect.data.Timestamp",
                                    "logicalType": "timestamp-millis",
                                },
                            ],
                            "default": None,
                        },
                        {"name": "picture", "type": ["null", "bytes"], "default": None},
                    ],
                    "connect.name": "mysql1.inventory.products.Value",
                },
            ],
            "default": None,
        },
        {"name": "after", "type": ["null", "Value"], "default": None},
        {
            "name": "source",
            "type": {
                "type": "record",
                "name": "Source",
                "namespace": "io.debezium.connector.mysql",
                "fields": [
                    {"name": "connector", "type": "string"},
                    {"name": "ts_ms", "type": "long"},
                    {"name": "db", "type": "string"},
                    {"name": "table", "type": ["null", "string"], "default": None},
                    {"name": "file", "type": "string"},
                    {"name": "pos", "type": "long"},
                    {"name": "row", "type": "int"},
                ],
                "connect.name": "io.debezium.connector.mysql.Source",
            },
        },
        {"name": "op", "type": "string"},
        {"name": "ts_ms", "type": ["null", "long"], "default": None},
    ],
    "connect.version": 2,
    "connect.name": "mysql1.inventory.products.Envelope",
}
AVRO_KEY = {
    "type": "record",
    "name": "Key",
    "namespace": "mysql1.inventory.products",
    "fields": [{"name": "id", "type": "int"}],
    "connect.name": "mysql1.inventory.products.Key",
}


def _avro_round_trip(schema: dict[str, Any], datum: dict[str, Any]) -> Any:
    parsed = fastavro.parse_schema(schema)
    buffer = io.BytesIO()
    fastavro.schemaless_writer(buffer, parsed, datum)
    buffer.seek(0)
    return fastavro.schemaless_reader(buffer, parsed)


def test_avro_decoded_envelope(events) -> None:
    row = {
        "id": 101,
        "price": Decimal("19.99"),
        "stock": 3,
        "created": 1641636930123456,
        "launched": dt.date(2022, 1, 8),
        "modified": dt.datetime(2022, 1, 8, 10, 15, 30, 123000, tzinfo=dt.UTC),
        "picture": b"\x00\x01",
    }
    source = {
        "connector": "mysql",
        "ts_ms": 1641636930000,
        "db": "inventory",
        "table": "products",
        "file": "mysql-bin.000012",
        "pos": 9876,
        "row": 1,
    }
    envelope = {"before": None, "after": row, "source": source, "op": "c", "ts_ms": 1}
    value = _avro_round_trip(AVRO_ENVELOPE, envelope)
    key = _avro_round_trip(AVRO_KEY, {"id": 101})
    message = DebeziumMessage(
        key=key,
        value=value,
        origin=Origin("mysql1.inventory.products", 2, 40),
        key_schema=connect_schema_from_avro(AVRO_KEY),
        value_schema=connect_schema_from_avro(AVRO_ENVELOPE),
    )
    change = _change(normalize(message))
    assert change.after == {
        "id": 101,
        "price": Decimal("19.99"),
        "stock": 3,
        "created": dt.datetime(2022, 1, 8, 10, 15, 30, 123456),
        "launched": dt.date(2022, 1, 8),
        # Connect Timestamp is a zone-less datetime in Debezium: same wall clock, no zone.
        "modified": dt.datetime(2022, 1, 8, 10, 15, 30, 123000),
        "picture": b"\x00\x01",
    }
    assert change.position == "00000000000000000012.00000000000000009876.00000000000000000001"
    assert change.key == {"id": 101}


def test_avro_without_schema_is_missing_schema() -> None:
    message = DebeziumMessage(
        key={"id": 1},
        value={"before": None, "after": {"id": 1}, "source": {"ts_ms": 1}, "op": "c"},
        origin=Origin("mysql1.inventory.products", 0, 0),
    )
    rejected = normalize(message)
    assert isinstance(rejected, RejectedRecord) and rejected.reason == "missing_schema"
