"""Every reject reason: bad input becomes a RejectedRecord, never an exception."""

from __future__ import annotations

import json
from typing import Any

import pytest

from services.cdc_normalizer import errors
from services.cdc_normalizer.normalize import (
    DebeziumMessage,
    Origin,
    RejectedRecord,
    normalize,
    normalize_or_raise,
)

pytestmark = pytest.mark.unit


def _rejected(message: DebeziumMessage) -> RejectedRecord:
    result = normalize(message)
    assert isinstance(result, RejectedRecord), result
    assert result.origin == message.origin
    return result


def _pg(events, mutate=None, key: Any = "default", op: str = "c") -> DebeziumMessage:
    record = events.pg_record(op, after=events.pg_after())
    if mutate is not None:
        mutate(record)
    return events.message(record, events.pg_key() if key == "default" else key)


def test_invalid_json(events) -> None:
    message = DebeziumMessage(b'{"schema": ', b"{nope", Origin("shop.public.orders", 0, 1))
    rejected = _rejected(message)
    assert (rejected.reason, rejected.error_class) == ("invalid_json", "InvalidJson")


def test_value_not_an_object(events) -> None:
    rejected = _rejected(events.message([1, 2, 3], events.pg_key()))
    assert (rejected.reason, rejected.error_class) == ("malformed_envelope", "MalformedEnvelope")


def test_after_not_an_object(events) -> None:
    rejected = _rejected(_pg(events, lambda r: r["payload"].update(after=[1])))
    assert rejected.reason == "malformed_envelope"


def test_key_not_a_struct(events) -> None:
    rejected = _rejected(_pg(events, key=42))
    assert rejected.reason == "malformed_envelope"


def test_mongodb_document_unsupported(events) -> None:
    value = {
        "after": '{"_id": {"$oid": "5f1e"}, "name": "x"}',
        "source": {"connector": "mongodb", "ts_ms": 1, "ord": 1, "db": "d", "collection": "c"},
        "op": "c",
        "ts_ms": 2,
    }
    rejected = _rejected(events.message(value, {"id": '{"$oid": "5f1e"}'}))
    assert rejected.reason == "unsupported_envelope"


@pytest.mark.parametrize("op", ["x", "m", None])
def test_unknown_op(events, op) -> None:
    rejected = _rejected(_pg(events, lambda r: r["payload"].update(op=op)))
    assert (rejected.reason, rejected.error_class) == ("unknown_op", "UnknownOperation")


@pytest.mark.parametrize("op", ["c", "u", "r"])
def test_missing_after(events, op) -> None:
    rejected = _rejected(_pg(events, lambda r: r["payload"].update(after=None), op=op))
    assert (rejected.reason, rejected.error_class) == ("missing_after", "MissingAfter")


def test_missing_key(events) -> None:
    assert _rejected(_pg(events, key=None)).reason == "missing_key"


def test_null_key_value(events) -> None:
    key = events.pg_key()
    key["payload"]["id"] = None
    assert _rejected(_pg(events, key=key)).reason == "missing_key"


def test_missing_schema(events) -> None:
    record = events.pg_record("c", after=events.pg_after(), with_schema=False)
    assert _rejected(events.message(record, {"id": 1001})).reason == "missing_schema"


def test_invalid_schema_block(events) -> None:
    def break_schema(record: dict[str, Any]) -> None:
        record["schema"]["fields"][1]["fields"][0]["type"] = "int128"

    rejected = _rejected(_pg(events, break_schema))
    assert (rejected.reason, rejected.error_class) == ("invalid_schema", "InvalidSchema")
    assert "int128" in rejected.message


def test_decimal_without_scale_is_invalid_schema(events) -> None:
    def drop_scale(record: dict[str, Any]) -> None:
        for image in record["schema"]["fields"][:2]:
            image["fields"][2]["parameters"] = {"connect.decimal.precision": "12"}

    assert _rejected(_pg(events, drop_scale)).reason == "invalid_schema"


def test_unsupported_map_keys(events) -> None:
    def add_map(record: dict[str, Any]) -> None:
        column = {
            "type": "map",
            "keys": {"type": "int32", "optional": False},
            "values": {"type": "string", "optional": True},
            "optional": True,
            "field": "attrs",
        }
        for image in record["schema"]["fields"][:2]:
            image["fields"].append(column)
        record["payload"]["after"]["attrs"] = None

    rejected = _rejected(_pg(events, add_map))
    assert (rejected.reason, rejected.error_class) == ("unsupported_type", "UnsupportedType")


@pytest.mark.parametrize(
    ("column", "bad"),
    [
        ("customer_id", "42"),  # string for int32
        ("customer_id", 2**31),  # does not fit int32
        ("is_gift", 1),  # int for boolean
        ("total", "not base64!"),
        ("external_id", "not-a-uuid"),
        ("created_at", "2022-01-08T10:15:30"),  # ZonedTimestamp without offset
        ("tags", "gift"),
        ("id", None),  # required column
        ("location", {"wkb": "AAAA", "srid": 1, "extra": 1}),
    ],
)
def test_schema_mismatch(events, column, bad) -> None:
    rejected = _rejected(_pg(events, lambda r: r["payload"]["after"].update({column: bad})))
    assert (rejected.reason, rejected.error_class) == ("schema_mismatch", "SchemaMismatch")
    assert column in rejected.message


@pytest.mark.parametrize(
    ("column", "bad"),
    [
        ("total", "AQAAAAAAAAAAAA=="),  # 2^72 unscaled: wider than decimal(12, 2)
        ("order_date", 3_000_000),  # year > 9999
        ("created_at", "infinity"),
        ("pickup_time", 86_400_000_000),  # 24:00:00
    ],
)
def test_value_out_of_range(events, column, bad) -> None:
    rejected = _rejected(_pg(events, lambda r: r["payload"]["after"].update({column: bad})))
    assert (rejected.reason, rejected.error_class) == ("value_out_of_range", "ValueOutOfRange")


def test_missing_timestamp(events) -> None:
    def strip(record: dict[str, Any]) -> None:
        del record["payload"]["source"]["ts_ms"]
        record["payload"]["ts_ms"] = None

    record = events.pg_record("c", after=events.pg_after())
    strip(record)
    message = events.message(record, events.pg_key(), timestamp_ms=None)
    assert _rejected(message).reason == "missing_timestamp"


@pytest.mark.parametrize(
    "source_change",
    [{"sequence": "[not json"}, {"sequence": '["1"]'}, {"lsn": -5, "sequence": None}],
)
def test_invalid_position(events, source_change) -> None:
    rejected = _rejected(_pg(events, lambda r: r["payload"]["source"].update(source_change)))
    assert (rejected.reason, rejected.error_class) == ("invalid_position", "InvalidPosition")


def test_unavailable_value(events) -> None:
    rejected = _rejected(
        _pg(events, lambda r: r["payload"]["after"].update(tags=["__debezium_unavailable_value"]))
    )
    assert rejected.reason == "unavailable_value"


def test_normalize_or_raise_raises_the_typed_error(events) -> None:
    with pytest.raises(errors.MissingAfter):
        normalize_or_raise(_pg(events, lambda r: r["payload"].update(after=None)))


def test_reasons_are_unique_and_stable() -> None:
    classes = [
        getattr(errors, name)
        for name in errors.__all__
        if name != "NormalizeError" and issubclass(getattr(errors, name), errors.NormalizeError)
    ]
    reasons = [cls.reason for cls in classes]
    assert len(reasons) == len(set(reasons)) == 14
    assert all(reason.isidentifier() and reason.islower() for reason in reasons)


def test_rejected_message_is_json_safe(events) -> None:
    rejected = _rejected(_pg(events, key=None))
    json.dumps({"reason": rejected.reason, "message": rejected.message})
