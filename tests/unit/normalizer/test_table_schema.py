"""Per-table Avro schemas: the change-record contract's shape, determinism, fastavro round trips."""

from __future__ import annotations

import dataclasses
import io
from typing import Any

import fastavro
import pytest

from services.cdc_normalizer.connect_schema import ConnectField, ConnectKind, ConnectSchema
from services.cdc_normalizer.errors import InvalidSchema
from services.cdc_normalizer.normalize import Normalized, normalize
from services.cdc_normalizer.plan import table_plan
from services.cdc_normalizer.table_schema import (
    TableId,
    TableSchema,
    key_schema,
    schema_json,
    value_schema,
    value_schema_text,
)

pytestmark = pytest.mark.unit


def _orders(pg_message, events) -> Normalized:
    result = normalize(pg_message("c", after=events.pg_after()))
    assert isinstance(result, Normalized)
    return result


def _field(schema: dict[str, Any], name: str) -> dict[str, Any]:
    return next(f for f in schema["fields"] if f["name"] == name)


def test_value_schema_has_the_common_shape(pg_message, events) -> None:
    result = _orders(pg_message, events)
    schema = value_schema(result.schema)
    assert schema["type"] == "record"
    assert schema["name"] == "OrdersChange"
    assert schema["namespace"] == "io.icefjord.changes.public"
    assert schema["icefjord.table"] == "public.orders"
    assert schema["icefjord.key"] == ["id"]
    assert [f["name"] for f in schema["fields"]] == [
        "op",
        "position",
        "source_ts_ms",
        "tx_id",
        "source",
        "key",
        "after",
        "unchanged",
    ]
    assert _field(schema, "unchanged") == {
        "name": "unchanged",
        "type": ["null", {"type": "array", "items": "string"}],
        "default": None,
    }
    assert _field(schema, "op")["type"] == {
        "type": "enum",
        "name": "Operation",
        "namespace": "io.icefjord",
        "symbols": ["CREATE", "UPDATE", "DELETE", "READ", "TRUNCATE"],
    }
    assert _field(schema, "tx_id") == {"name": "tx_id", "type": ["null", "string"], "default": None}
    assert _field(schema, "source")["type"] == {"type": "map", "values": "string"}
    assert _field(schema, "key")["type"] == {
        "type": "record",
        "name": "OrdersKey",
        "fields": [{"name": "id", "type": "long"}],
    }
    after = _field(schema, "after")
    assert after["default"] is None and after["type"][0] == "null"
    row = after["type"][1]
    assert row["name"] == "OrdersRow"
    assert _field(row, "id") == {"name": "id", "type": "long"}
    assert _field(row, "total") == {
        "name": "total",
        "type": ["null", {"type": "bytes", "logicalType": "decimal", "precision": 12, "scale": 2}],
        "default": None,
    }
    assert _field(row, "created_at")["type"][1] == {
        "type": "long",
        "logicalType": "timestamp-micros",
    }
    assert _field(row, "location")["type"][1]["name"] == "OrdersLocation"


def test_key_schema_is_the_embedded_key_record(pg_message, events) -> None:
    result = _orders(pg_message, events)
    key = key_schema(result.schema)
    embedded = _field(value_schema(result.schema), "key")["type"]
    assert key == {**embedded, "namespace": "io.icefjord.changes.public"}


def test_schema_text_is_deterministic(pg_message, events) -> None:
    first = _orders(pg_message, events).schema
    # Equal, but other objects: the Avro text is cached per schema object.
    second = dataclasses.replace(first, row=dataclasses.replace(first.row))
    assert first is not second and first.row is not second.row
    assert value_schema_text(first) == value_schema_text(second)
    assert schema_json(value_schema(first)) == value_schema_text(first)


def test_changes_round_trip_through_fastavro(pg_message, events) -> None:
    result = _orders(pg_message, events)
    parsed = fastavro.parse_schema(value_schema(result.schema))
    record = result.changes[0].to_record()
    buffer = io.BytesIO()
    fastavro.schemaless_writer(buffer, parsed, record)
    buffer.seek(0)
    read = fastavro.schemaless_reader(buffer, parsed)
    read["after"]["external_id"] = str(read["after"]["external_id"])  # fastavro reads UUID objects
    assert read == record
    key_parsed = fastavro.parse_schema(key_schema(result.schema))
    buffer = io.BytesIO()
    fastavro.schemaless_writer(buffer, key_parsed, result.changes[0].key)
    buffer.seek(0)
    assert fastavro.schemaless_reader(buffer, key_parsed) == {"id": 1001}


def test_mysql_changes_round_trip_through_fastavro(events) -> None:
    record = events.mysql_record("c", after=events.mysql_after())
    message = events.message(record, events.mysql_key(), topic="mysql1.inventory.products")
    result = normalize(message)
    assert isinstance(result, Normalized)
    parsed = fastavro.parse_schema(value_schema(result.schema))
    buffer = io.BytesIO()
    fastavro.schemaless_writer(buffer, parsed, result.changes[0].to_record())
    buffer.seek(0)
    assert fastavro.schemaless_reader(buffer, parsed) == result.changes[0].to_record()


def _table(*fields: ConnectField, key: tuple[str, ...] = ("id",)) -> TableSchema:
    row = ConnectSchema(ConnectKind.STRUCT, fields=fields)
    key_fields = tuple(f for f in fields if f.name in key)
    return TableSchema(
        TableId("my-db", "order items"),
        row,
        ConnectSchema(ConnectKind.STRUCT, fields=key_fields),
    )


def test_names_are_sanitized() -> None:
    schema = value_schema(
        _table(
            ConnectField("id", ConnectSchema(ConnectKind.INT32)),
            ConnectField("unit-price", ConnectSchema(ConnectKind.FLOAT64, optional=True)),
        )
    )
    assert schema["name"] == "OrderItemsChange"
    assert schema["namespace"] == "io.icefjord.changes.my_db"
    assert schema["icefjord.table"] == "my-db.order items"
    row = _field(schema, "after")["type"][1]
    assert row["fields"][1] == {
        "name": "unit_price",
        "type": ["null", "double"],
        "default": None,
        "icefjord.source_name": "unit-price",
    }
    fastavro.parse_schema(schema)


def test_colliding_names_are_an_invalid_schema() -> None:
    table = _table(
        ConnectField("id", ConnectSchema(ConnectKind.INT32)),
        ConnectField("a-b", ConnectSchema(ConnectKind.INT32)),
        ConnectField("a_b", ConnectSchema(ConnectKind.INT32)),
    )
    with pytest.raises(InvalidSchema):
        value_schema(table)


def test_nested_record_name_clash_gets_a_suffix() -> None:
    inner = ConnectSchema(
        ConnectKind.STRUCT, fields=(ConnectField("v", ConnectSchema(ConnectKind.INT32)),)
    )
    outer = ConnectSchema(ConnectKind.STRUCT, fields=(ConnectField("zip", inner),))
    schema = value_schema(
        _table(
            ConnectField("id", ConnectSchema(ConnectKind.INT32)),
            ConnectField("address", outer),
            ConnectField("address_zip", inner),
        )
    )
    row = _field(schema, "after")["type"][1]
    address = row["fields"][1]["type"]
    assert address["name"] == "OrderItemsAddress"
    assert address["fields"][0]["type"]["name"] == "OrderItemsAddressZip"
    assert row["fields"][2]["type"]["name"] == "OrderItemsAddressZip2"
    fastavro.parse_schema(schema)


def test_stand_ins_take_the_type_of_a_required_column() -> None:
    """A NOT NULL column's stand-in is an empty value of its type (null would not encode);
    the writer never stores it over the kept value."""

    def column(name: str, kind: ConnectKind, optional: bool) -> ConnectField:
        items = ConnectSchema(ConnectKind.STRING) if kind is ConnectKind.ARRAY else None
        return ConnectField(name, ConnectSchema(kind, optional=optional, items=items))

    row = ConnectSchema(
        ConnectKind.STRUCT,
        fields=(
            column("id", ConnectKind.INT64, False),
            column("body", ConnectKind.STRING, False),
            column("blob", ConnectKind.BYTES, False),
            column("labels", ConnectKind.ARRAY, False),
            column("note", ConnectKind.STRING, True),
        ),
    )
    plan = table_plan(TableId("public", "docs"), row, ("id",), None)
    placeholder = "__debezium_unavailable_value"
    image = {
        "id": 1,
        "body": placeholder,
        "blob": placeholder.encode(),
        "labels": [placeholder],
        "note": placeholder,
    }
    missing = plan.unavailable(image, placeholder)
    assert missing == ("body", "blob", "labels", "note")
    filled = plan.with_stand_ins(image, missing)
    assert filled == {"id": 1, "body": "", "blob": b"", "labels": [], "note": None}
    assert image["body"] == placeholder  # the image itself is left as it was
    converted = plan.row(filled, "after")
    assert converted["body"] == "" and converted["blob"] == b"" and converted["labels"] == []
