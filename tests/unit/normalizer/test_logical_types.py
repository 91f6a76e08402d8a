"""Every Debezium / Connect type: its Avro type and its exact value conversion."""

from __future__ import annotations

import base64
import datetime as dt
import math
from decimal import Decimal
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from outcomes import outcome

from services.cdc_normalizer.connect_schema import (
    ConnectField,
    ConnectKind,
    ConnectSchema,
    connect_schema_from_json,
)
from services.cdc_normalizer.errors import SchemaMismatch, ValueOutOfRange
from services.cdc_normalizer.logical_types import (
    RecordNamer,
    avro_name,
    avro_type,
    convert_value,
    record_name,
)

pytestmark = pytest.mark.unit

UTC = dt.UTC


def col(type_: str, name: str | None = None, optional: bool = True, **params: str) -> Any:
    block: dict[str, Any] = {"type": type_, "optional": optional}
    if name:
        block["name"] = name
    if params:
        block["parameters"] = params
    return connect_schema_from_json(block)


def decimal_col(scale: int, precision: int | None = None) -> ConnectSchema:
    params = {"scale": str(scale)}
    if precision is not None:
        params["connect.decimal.precision"] = str(precision)
    return col("bytes", "org.apache.kafka.connect.data.Decimal", **params)


def avro(schema: ConnectSchema) -> Any:
    return avro_type(schema, ("c",), RecordNamer("T"))


def conv(schema: ConnectSchema, value: Any) -> Any:
    return convert_value(schema, value, "c")


def twos_complement(unscaled: int) -> bytes:
    length = max(1, (unscaled + (unscaled < 0)).bit_length() // 8 + 1)
    return unscaled.to_bytes(length, "big", signed=True)


# ------------------------------------------------------------------ decimals


def test_decimal_bytes_by_hand() -> None:
    schema = decimal_col(2, 10)
    assert avro(schema) == {"type": "bytes", "logicalType": "decimal", "precision": 10, "scale": 2}
    # "AN/A" = 00 DF C0 -> unscaled 0xDFC0 = 57280 -> 572.80
    assert conv(schema, "AN/A") == Decimal("572.80")
    # "/4A=" = FF 80 -> unscaled -128 -> -1.28
    assert conv(schema, "/4A=") == Decimal("-1.28")
    assert conv(schema, bytes([0x00, 0xDF, 0xC0])) == Decimal("572.80")
    assert conv(schema, "AN/A").as_tuple().exponent == -2


def test_decimal_from_avro_and_numeric_forms() -> None:
    schema = decimal_col(2, 10)
    assert conv(schema, Decimal("19.9")) == Decimal("19.90")
    assert conv(schema, 7) == Decimal("7.00")
    with pytest.raises(ValueOutOfRange):
        conv(schema, Decimal("1.234"))  # would lose a digit
    with pytest.raises(ValueOutOfRange):
        conv(schema, Decimal("123456789.00"))  # 11 digits > precision 10
    with pytest.raises(ValueOutOfRange):
        conv(schema, Decimal("NaN"))


def test_decimal_precision_limits() -> None:
    wide = decimal_col(4, 40)
    assert avro(wide) == {"type": "string", "icefjord.semantic": "decimal"}
    assert conv(wide, "AN/A") == "5.7280"
    no_precision = decimal_col(2)
    assert avro(no_precision) == {"type": "string", "icefjord.semantic": "decimal"}
    assert conv(no_precision, "nA==") == "-1.00"


def test_decimal_negative_and_oversized_scale_are_widened() -> None:
    # numeric(5, -2): up to 7 integer digits, no fraction
    negative = decimal_col(-2, 5)
    assert avro(negative)["precision"] == 7 and avro(negative)["scale"] == 0
    assert conv(negative, twos_complement(12345)) == Decimal("1234500")
    # numeric(2, 5): |v| < 0.001, five fractional digits
    tiny = decimal_col(5, 2)
    assert (avro(tiny)["precision"], avro(tiny)["scale"]) == (5, 5)
    assert conv(tiny, twos_complement(99)) == Decimal("0.00099")


def test_variable_scale_decimal_is_exact_text() -> None:
    schema = connect_schema_from_json(
        {
            "type": "struct",
            "name": "io.debezium.data.VariableScaleDecimal",
            "optional": True,
            "fields": [
                {"type": "int32", "optional": False, "field": "scale"},
                {"type": "bytes", "optional": False, "field": "value"},
            ],
        }
    )
    assert avro(schema) == {"type": "string", "icefjord.semantic": "decimal"}
    assert conv(schema, {"scale": 3, "value": "MDk="}) == "12.345"  # 0x3039 = 12345
    assert conv(schema, {"scale": 0, "value": "/w=="}) == "-1"
    assert conv(schema, {"scale": 2, "value": b"\x01\x00"}) == "2.56"
    # trailing zeros are kept: the scale is part of the value
    assert conv(schema, {"scale": 3, "value": base64.b64encode(b"\x05\xdc").decode()}) == "1.500"
    assert conv(schema, None) is None


def test_decimal_handling_mode_string_and_double() -> None:
    plain_string = col("string")
    assert avro(plain_string) == "string"
    assert conv(plain_string, "12.30") == "12.30"  # never guessed to be a decimal
    plain_double = col("float64")
    assert avro(plain_double) == "double"
    propagated = {
        "__debezium.source.column.type": "NUMERIC",
        "__debezium.source.column.length": "8",
        "__debezium.source.column.scale": "3",
    }
    as_string = col("string", **propagated)
    assert avro(as_string) == {
        "type": "bytes",
        "logicalType": "decimal",
        "precision": 8,
        "scale": 3,
    }
    assert conv(as_string, "-12.5") == Decimal("-12.500")
    with pytest.raises(ValueOutOfRange):
        conv(as_string, "NaN")
    with pytest.raises(ValueOutOfRange):
        conv(as_string, "1.23456")  # string mode is exact: no rounding
    as_double = col("float64", **propagated)
    assert conv(as_double, 0.1 + 0.2) == Decimal("0.300")  # rounded to the declared scale


# ------------------------------------------------------------------ dates and times


@pytest.mark.parametrize(
    ("name", "raw", "expected"),
    [
        ("io.debezium.time.Date", 19000, dt.date(2022, 1, 8)),
        ("io.debezium.time.Date", -1, dt.date(1969, 12, 31)),
        ("org.apache.kafka.connect.data.Date", 0, dt.date(1970, 1, 1)),
    ],
)
def test_dates(name, raw, expected) -> None:
    schema = col("int32", name)
    assert avro(schema) == {"type": "int", "logicalType": "date"}
    assert conv(schema, raw) == expected


@pytest.mark.parametrize(
    ("type_", "name", "raw", "expected"),
    [
        ("int32", "io.debezium.time.Time", 36930123, dt.time(10, 15, 30, 123000)),
        ("int64", "io.debezium.time.MicroTime", 36930123456, dt.time(10, 15, 30, 123456)),
        ("int64", "io.debezium.time.NanoTime", 36930123456789, dt.time(10, 15, 30, 123456)),
        ("int32", "org.apache.kafka.connect.data.Time", 36930123, dt.time(10, 15, 30, 123000)),
        ("string", "io.debezium.time.ZonedTime", "10:15:30.123456Z", dt.time(10, 15, 30, 123456)),
        ("string", "io.debezium.time.ZonedTime", "01:00:00+02:00", dt.time(23, 0)),
    ],
)
def test_times_are_time_micros(type_, name, raw, expected) -> None:
    schema = col(type_, name)
    assert avro(schema) == {"type": "long", "logicalType": "time-micros"}
    assert conv(schema, raw) == expected


@pytest.mark.parametrize(
    ("name", "raw", "expected"),
    [
        ("io.debezium.time.Timestamp", 1641636930123, dt.datetime(2022, 1, 8, 10, 15, 30, 123000)),
        (
            "io.debezium.time.MicroTimestamp",
            1641636930123456,
            dt.datetime(2022, 1, 8, 10, 15, 30, 123456),
        ),
        (
            "io.debezium.time.NanoTimestamp",
            1641636930123456789,
            dt.datetime(2022, 1, 8, 10, 15, 30, 123456),
        ),
        ("io.debezium.time.NanoTimestamp", -1, dt.datetime(1969, 12, 31, 23, 59, 59, 999999)),
        ("io.debezium.time.MicroTimestamp", -1, dt.datetime(1969, 12, 31, 23, 59, 59, 999999)),
        (
            "org.apache.kafka.connect.data.Timestamp",
            1641636930123,
            dt.datetime(2022, 1, 8, 10, 15, 30, 123000),
        ),
    ],
)
def test_zone_less_timestamps(name, raw, expected) -> None:
    schema = col("int64", name)
    assert avro(schema) == {"type": "long", "logicalType": "local-timestamp-micros"}
    assert conv(schema, raw) == expected


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("2022-01-08T10:15:30Z", dt.datetime(2022, 1, 8, 10, 15, 30, tzinfo=UTC)),
        ("2022-01-08T10:15:30.5Z", dt.datetime(2022, 1, 8, 10, 15, 30, 500000, tzinfo=UTC)),
        (
            "2022-01-08T12:15:30.123456+02:00",
            dt.datetime(2022, 1, 8, 10, 15, 30, 123456, tzinfo=UTC),
        ),
        ("2022-01-08T10:15:30.123456789Z", dt.datetime(2022, 1, 8, 10, 15, 30, 123456, tzinfo=UTC)),
        ("2022-01-08T00:30:00-05:30", dt.datetime(2022, 1, 8, 6, 0, tzinfo=UTC)),
    ],
)
def test_zoned_timestamp_is_utc_instant(raw, expected) -> None:
    schema = col("string", "io.debezium.time.ZonedTimestamp")
    assert avro(schema) == {"type": "long", "logicalType": "timestamp-micros"}
    result = conv(schema, raw)
    assert result == expected and result.utcoffset() == dt.timedelta(0)


def test_temporal_out_of_range() -> None:
    with pytest.raises(ValueOutOfRange):
        conv(col("int32", "io.debezium.time.Date"), 2_932_897)  # 10000-01-01
    with pytest.raises(ValueOutOfRange):
        conv(col("int64", "io.debezium.time.MicroTime"), -1)  # MySQL negative TIME
    with pytest.raises(ValueOutOfRange):
        conv(col("string", "io.debezium.time.ZonedTimestamp"), "-infinity")
    with pytest.raises(SchemaMismatch):
        conv(col("string", "io.debezium.time.ZonedTimestamp"), "yesterday")


# ------------------------------------------------------------------ other logical types


@pytest.mark.parametrize(
    ("type_", "name", "raw", "expected_avro", "expected"),
    [
        ("int32", "io.debezium.time.Year", 2024, "int", 2024),
        (
            "int64",
            "io.debezium.time.MicroDuration",
            90061000000,
            {"type": "long", "icefjord.semantic": "duration-micros"},
            90061000000,
        ),
        (
            "string",
            "io.debezium.time.Interval",
            "P1DT1H1M1S",
            {"type": "string", "icefjord.semantic": "duration-iso"},
            "P1DT1H1M1S",
        ),
        (
            "string",
            "io.debezium.data.Json",
            '{"a": [1, 2]}',
            {"type": "string", "icefjord.semantic": "json"},
            '{"a": [1, 2]}',
        ),
        (
            "string",
            "io.debezium.data.Xml",
            "<a/>",
            {"type": "string", "icefjord.semantic": "xml"},
            "<a/>",
        ),
        (
            "string",
            "io.debezium.data.Uuid",
            "A0EEBC99-9C0B-4EF8-BB6D-6BB9BD380A11",
            {"type": "string", "logicalType": "uuid"},
            "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11",
        ),
        (
            "string",
            "io.debezium.data.Enum",
            "paid",
            {"type": "string", "icefjord.semantic": "enum"},
            "paid",
        ),
        (
            "string",
            "io.debezium.data.EnumSet",
            "a,c",
            {"type": "array", "items": "string", "icefjord.semantic": "enum-set"},
            ["a", "c"],
        ),
        (
            "bytes",
            "io.debezium.data.Bits",
            "BQ==",
            {"type": "bytes", "icefjord.semantic": "bits"},
            b"\x05",
        ),
        ("boolean", None, True, "boolean", True),  # bit(1)
        ("int8", None, -128, "int", -128),
        ("int16", None, 32767, "int", 32767),
        ("int32", None, -(2**31), "int", -(2**31)),
        ("int64", None, 2**63 - 1, "long", 2**63 - 1),
        ("float32", None, 1.5, "float", 1.5),
        ("float64", None, Decimal("0.1"), "double", 0.1),
        ("string", None, "héllo", "string", "héllo"),
        ("bytes", None, "3q2+7w==", "bytes", bytes.fromhex("deadbeef")),
    ],
)
def test_simple_types(type_, name, raw, expected_avro, expected) -> None:
    schema = col(type_, name)
    assert avro(schema) == expected_avro
    assert conv(schema, raw) == expected


def test_unknown_logical_name_keeps_physical_type() -> None:
    schema = col("string", "io.debezium.data.Ltree")
    assert avro(schema) == "string"
    assert conv(schema, "a.b.c") == "a.b.c"


def test_non_finite_doubles_quoted_by_jackson() -> None:
    assert math.isnan(conv(col("float64"), "NaN"))
    assert conv(col("float32"), "-Infinity") == -math.inf


@pytest.mark.parametrize(("kind", "value"), [("int8", 128), ("int16", -32769), ("int64", 2**63)])
def test_integer_ranges(kind, value) -> None:
    with pytest.raises(SchemaMismatch):
        conv(col(kind), value)


def test_geometry_and_point_records() -> None:
    geometry = connect_schema_from_json(
        {
            "type": "struct",
            "name": "io.debezium.data.geometry.Geometry",
            "optional": True,
            "fields": [
                {"type": "bytes", "optional": False, "field": "wkb"},
                {"type": "int32", "optional": True, "field": "srid"},
            ],
        }
    )
    assert avro(geometry) == {
        "type": "record",
        "name": "TC",
        "fields": [
            {"name": "wkb", "type": "bytes"},
            {"name": "srid", "type": ["null", "int"], "default": None},
        ],
        "icefjord.semantic": "geometry",
    }
    assert conv(geometry, {"wkb": "AQ==", "srid": None}) == {"wkb": b"\x01", "srid": None}
    assert conv(geometry, {"wkb": "AQ=="}) == {"wkb": b"\x01", "srid": None}


def test_nested_struct_array_and_map() -> None:
    address = ConnectSchema(
        ConnectKind.STRUCT,
        optional=True,
        fields=(
            ConnectField("zip code", ConnectSchema(ConnectKind.STRING)),
            ConnectField(
                "lines",
                ConnectSchema(
                    ConnectKind.ARRAY, items=ConnectSchema(ConnectKind.STRING, optional=True)
                ),
            ),
        ),
    )
    namer = RecordNamer("Customers")
    assert avro_type(address, ("address",), namer) == {
        "type": "record",
        "name": "CustomersAddress",
        "fields": [
            {"name": "zip_code", "type": "string", "icefjord.source_name": "zip code"},
            {"name": "lines", "type": {"type": "array", "items": ["null", "string"]}},
        ],
    }
    value = {"zip code": "0150", "lines": ["a", None]}
    assert conv(address, value) == {"zip_code": "0150", "lines": ["a", None]}
    counts = ConnectSchema(
        ConnectKind.MAP,
        keys=ConnectSchema(ConnectKind.STRING),
        values=ConnectSchema(ConnectKind.INT32),
    )
    assert avro(counts) == {"type": "map", "values": "int"}
    assert conv(counts, {"a": 1}) == {"a": 1}


def test_names() -> None:
    assert avro_name("order-id") == "order_id"
    assert avro_name("2fa") == "_2fa"
    assert avro_name("ok_name") == "ok_name"
    assert record_name("order_items", "ship to") == "OrderItemsShipTo"


# ------------------------------------------------------------------ properties


@given(unscaled=st.integers(min_value=-(10**30), max_value=10**30), scale=st.integers(0, 12))
def test_decimal_round_trip_through_unscaled_bytes(unscaled: int, scale: int) -> None:
    schema = decimal_col(scale, 38)
    raw = twos_complement(unscaled)
    expected = Decimal(f"{unscaled}E-{scale}")
    from_bytes = conv(schema, raw)
    from_base64 = conv(schema, base64.b64encode(raw).decode())
    assert from_bytes == expected == from_base64
    assert from_bytes.as_tuple().exponent == -scale
    # and back: the Avro decimal encodes the same unscaled integer
    sign, digits, _ = from_bytes.as_tuple()
    assert (-1 if sign else 1) * int("".join(map(str, digits))) == unscaled


@given(unscaled=st.integers(min_value=-(10**60), max_value=10**60), scale=st.integers(-5, 40))
def test_variable_scale_decimal_text_is_lossless(unscaled: int, scale: int) -> None:
    schema = ConnectSchema(ConnectKind.STRUCT, name="io.debezium.data.VariableScaleDecimal")
    text = conv(schema, {"scale": scale, "value": twos_complement(unscaled)})
    assert Decimal(text) == Decimal(f"{unscaled}E{-scale}")
    assert "E" not in text and "e" not in text


@given(micros=st.integers(min_value=-62135596800000000, max_value=253402300799999999))
def test_micro_timestamps_are_exact(micros: int) -> None:
    local = conv(col("int64", "io.debezium.time.MicroTimestamp"), micros)
    delta = local - dt.datetime(1970, 1, 1)
    assert (delta.days * 86400 + delta.seconds) * 1_000_000 + delta.microseconds == micros


@given(
    nanos_a=st.integers(min_value=-(10**18), max_value=10**18),
    nanos_b=st.integers(min_value=-(10**18), max_value=10**18),
)
def test_nano_truncation_keeps_order(nanos_a: int, nanos_b: int) -> None:
    schema = col("int64", "io.debezium.time.NanoTimestamp")
    a, b = conv(schema, nanos_a), conv(schema, nanos_b)
    if nanos_a <= nanos_b:
        assert a <= b
    delta = a - dt.datetime(1970, 1, 1)
    micros = (delta.days * 86400 + delta.seconds) * 1_000_000 + delta.microseconds
    assert micros * 1000 <= nanos_a < (micros + 1) * 1000


@given(
    instant=st.datetimes(
        min_value=dt.datetime(1900, 1, 1), max_value=dt.datetime(2200, 1, 1), timezones=st.just(UTC)
    ),
    offset_minutes=st.integers(min_value=-14 * 60, max_value=14 * 60),
)
def test_zoned_timestamp_round_trip(instant: dt.datetime, offset_minutes: int) -> None:
    zone = dt.timezone(dt.timedelta(minutes=offset_minutes))
    text = instant.astimezone(zone).isoformat()
    assert conv(col("string", "io.debezium.time.ZonedTimestamp"), text) == instant


@given(micros=st.integers(min_value=0, max_value=86_400_000_000 - 1))
def test_micro_time_round_trip(micros: int) -> None:
    value = conv(col("int64", "io.debezium.time.MicroTime"), micros)
    assert ((value.hour * 60 + value.minute) * 60 + value.second) * 10**6 + value.microsecond == (
        micros
    )


# Text shaped like Debezium's ZonedTimestamp, valid or not as a date (month 13, hour 24, year 0).
_UTC_SHAPED = st.from_regex(
    r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]{1,6})?Z", fullmatch=True
)


@given(
    text=_UTC_SHAPED
    | st.datetimes(
        min_value=dt.datetime(1, 1, 1), max_value=dt.datetime(9999, 12, 31), timezones=st.just(UTC)
    ).map(lambda d: d.isoformat().replace("+00:00", "Z"))
)
def test_the_utc_fast_path_agrees_with_the_general_parser(text: str) -> None:
    """parse_iso_offset_datetime hands Debezium's UTC form to datetime.fromisoformat; the
    result, or the error, is the general parser's."""
    from services.cdc_normalizer import temporal

    fast = outcome(temporal.parse_iso_offset_datetime, text, "t")
    general = outcome(temporal._parse_iso_offset_datetime, text, "t")
    assert fast == general
    if fast[0] == "ok":
        assert fast[1].tzinfo is UTC


@given(
    text=st.uuids().map(str)
    | st.from_regex(
        r"[0-9a-fA-F]{8}-?[0-9a-fA-F]{4}-[0-9a-f]{4}-[0-9a-fA-F]{4}-[0-9a-f]{11,13}", fullmatch=True
    )
)
def test_uuid_text_is_what_the_uuid_module_makes_of_it(text: str) -> None:
    """Canonical text passes through unchanged; any other form is still parsed and
    rewritten (or refused) by uuid.UUID."""
    import uuid

    schema = col("string", "io.debezium.data.Uuid")
    try:
        expected = str(uuid.UUID(text))
    except ValueError:
        with pytest.raises(SchemaMismatch):
            conv(schema, text)
        return
    assert conv(schema, text) == expected
