"""The column-type model from JSON schema blocks and from Avro (Confluent-written or declared)."""

from __future__ import annotations

import pytest

from services.cdc_normalizer.connect_schema import (
    ConnectKind,
    ConnectSchema,
    LogicalName,
    connect_schema_from_avro,
    connect_schema_from_json,
)
from services.cdc_normalizer.errors import InvalidSchema, UnsupportedType
from services.cdc_normalizer.logical_types import RecordNamer, avro_type, struct_record

pytestmark = pytest.mark.unit

# The same MySQL table described twice: by the JsonConverter and by Confluent's AvroConverter.
JSON_BLOCK = {
    "type": "struct",
    "optional": False,
    "name": "mysql1.inventory.products.Value",
    "fields": [
        {"type": "int32", "optional": False, "field": "id"},
        {"type": "int16", "optional": True, "field": "stock"},
        {
            "type": "bytes",
            "optional": True,
            "name": "org.apache.kafka.connect.data.Decimal",
            "version": 1,
            "parameters": {"scale": "2", "connect.decimal.precision": "10"},
            "field": "price",
        },
        {
            "type": "int64",
            "optional": False,
            "name": "io.debezium.time.MicroTimestamp",
            "version": 1,
            "field": "created",
        },
        {
            "type": "string",
            "optional": True,
            "name": "io.debezium.data.Enum",
            "version": 1,
            "parameters": {"allowed": "S,M,L"},
            "field": "size",
        },
        {
            "type": "array",
            "optional": True,
            "items": {"type": "string", "optional": True},
            "field": "tags",
        },
    ],
}
AVRO_SCHEMA = {
    "type": "record",
    "name": "Value",
    "namespace": "mysql1.inventory.products",
    "fields": [
        {"name": "id", "type": "int"},
        {
            "name": "stock",
            "type": ["null", {"type": "int", "connect.type": "int16"}],
            "default": None,
        },
        {
            "name": "price",
            "type": [
                "null",
                {
                    "type": "bytes",
                    "scale": 2,
                    "precision": 10,
                    "connect.version": 1,
                    "connect.parameters": {"scale": "2", "connect.decimal.precision": "10"},
                    "connect.name": "org.apache.kafka.connect.data.Decimal",
                    "logicalType": "decimal",
                },
            ],
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
            "name": "size",
            "type": [
                "null",
                {
                    "type": "string",
                    "connect.version": 1,
                    "connect.parameters": {"allowed": "S,M,L"},
                    "connect.name": "io.debezium.data.Enum",
                },
            ],
            "default": None,
        },
        {"name": "tags", "type": ["null", {"type": "array", "items": ["null", "string"]}]},
    ],
    "connect.name": "mysql1.inventory.products.Value",
}


def test_json_block_and_confluent_avro_give_the_same_model() -> None:
    assert connect_schema_from_json(JSON_BLOCK) == connect_schema_from_avro(AVRO_SCHEMA)


def test_json_block_details() -> None:
    schema = connect_schema_from_json(JSON_BLOCK)
    price = schema.field("price")
    assert price is not None
    assert price.schema.name == LogicalName.DECIMAL
    assert price.schema.param("scale") == "2"
    assert price.schema.optional
    assert schema.field("id").schema == ConnectSchema(ConnectKind.INT32)


def test_named_type_references_resolve() -> None:
    value_without_namespace = {k: v for k, v in AVRO_SCHEMA.items() if k != "namespace"}
    envelope = {
        "type": "record",
        "name": "Envelope",
        "namespace": "srv.public.t",
        "fields": [
            {"name": "before", "type": ["null", value_without_namespace], "default": None},
            {"name": "after", "type": ["null", "Value"], "default": None},
            {"name": "again", "type": ["null", "srv.public.t.Value"], "default": None},
        ],
    }
    schema = connect_schema_from_avro(envelope)
    before = schema.field("before").schema
    assert schema.field("after").schema == before == schema.field("again").schema
    assert before == connect_schema_from_json({**JSON_BLOCK, "optional": True})


@pytest.mark.parametrize(
    "declared",
    [
        {"type": "bytes", "logicalType": "decimal", "precision": 12, "scale": 2},
        {"type": "int", "logicalType": "date"},
        {"type": "long", "logicalType": "time-micros"},
        {"type": "long", "logicalType": "timestamp-micros"},
        {"type": "long", "logicalType": "local-timestamp-micros"},
        {"type": "string", "logicalType": "uuid"},
        {"type": "string", "icefjord.semantic": "json"},
        {"type": "string", "icefjord.semantic": "decimal"},
        {"type": "string", "icefjord.semantic": "enum"},
        {"type": "long", "icefjord.semantic": "duration-micros"},
        {"type": "array", "items": "string", "icefjord.semantic": "enum-set"},
        {"type": "bytes", "icefjord.semantic": "bits"},
        {"type": "array", "items": ["null", "long"]},
        {"type": "map", "values": "double"},
        "boolean",
        "float",
        "bytes",
    ],
)
def test_declared_output_types_map_back_to_themselves(declared) -> None:
    """A normalized row schema, fed back in as a declared schema, means the same thing."""
    schema = connect_schema_from_avro(declared)
    assert avro_type(schema, ("c",), RecordNamer("T")) == declared


def test_declared_record_round_trip() -> None:
    declared = {
        "type": "record",
        "name": "TRow",
        "fields": [
            {"name": "id", "type": "long"},
            {
                "name": "address",
                "type": [
                    "null",
                    {
                        "type": "record",
                        "name": "TAddress",
                        "fields": [{"name": "zip", "type": ["null", "string"], "default": None}],
                    },
                ],
                "default": None,
            },
        ],
    }
    schema = connect_schema_from_avro(declared)
    namer = RecordNamer("T")
    assert struct_record(schema, (), namer.claim("TRow"), namer) == declared


def test_plain_timestamp_millis_is_an_instant() -> None:
    schema = connect_schema_from_avro({"type": "long", "logicalType": "timestamp-millis"})
    assert schema.name == LogicalName.TIMESTAMP_MILLIS_UTC
    connect = connect_schema_from_avro(
        {
            "type": "long",
            "logicalType": "timestamp-millis",
            "connect.name": "org.apache.kafka.connect.data.Timestamp",
        }
    )
    assert connect.name == LogicalName.CONNECT_TIMESTAMP


def test_bad_schemas() -> None:
    with pytest.raises(InvalidSchema):
        connect_schema_from_json({"type": "struct", "optional": False})
    with pytest.raises(InvalidSchema):
        connect_schema_from_json({"type": "array"})
    with pytest.raises(InvalidSchema):
        connect_schema_from_json("int32")
    with pytest.raises(InvalidSchema):
        connect_schema_from_avro({"type": "record", "name": "X", "fields": [{"type": "int"}]})
    with pytest.raises(InvalidSchema):
        connect_schema_from_avro("NoSuchType")
    with pytest.raises(UnsupportedType):
        connect_schema_from_avro(["null", "int", "string"])
