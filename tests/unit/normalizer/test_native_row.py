"""The compiled row path writes the Python path's bytes, or gives the record back to it.

For every column kind the Rust program takes (``services/cdc_normalizer/native_row.py``), rows
of random JSON values, the valid and the nearly valid, go through both paths: the program's
bytes must equal the plan converter's values written by the Avro encoder, and where the Python
path refuses a value the program must refuse it too. Then whole records, valid and not, through
the service's router with the compiled record path and without it: the same Kafka records, or
the same dead letter.
"""

from __future__ import annotations

import base64
import decimal
import json
from collections.abc import Callable
from typing import Any

import msgspec
import pytest
from hypothesis import event, example, given, settings
from hypothesis import strategies as st

from icefjord.bench.normalizer import generate_messages
from services.cdc_normalizer import native_row
from services.cdc_normalizer.avro_encoder import AvroEncoder
from services.cdc_normalizer.connect_schema import ConnectField, ConnectKind, ConnectSchema
from services.cdc_normalizer.converters import compile_converter
from services.cdc_normalizer.errors import NormalizeError
from services.cdc_normalizer.normalize import (
    DEFAULT_UNAVAILABLE_VALUE,
    NormalizeOptions,
    TableOverrides,
)
from services.cdc_normalizer.pipeline import Emit, EncodedChange, Router, SourceRecord
from services.cdc_normalizer.table_schema import (
    TableId,
    TableSchema,
    key_schema_text,
    key_struct,
    value_schema,
    value_schema_text,
)
from shared.avro import frame

pytestmark = [
    pytest.mark.unit,
    pytest.mark.skipif(not native_row.AVAILABLE, reason="icefjord_native is not built"),
]

_DEC = "org.apache.kafka.connect.data.Decimal"
_JSON = msgspec.json.Decoder(float_hook=decimal.Decimal)

# (column, Connect kind, Connect name, parameters)
COLUMNS: tuple[tuple[str, ConnectKind, str | None, tuple[tuple[str, str], ...]], ...] = (
    ("i8", ConnectKind.INT8, None, ()),
    ("i16", ConnectKind.INT16, None, ()),
    ("i32", ConnectKind.INT32, None, ()),
    ("i64", ConnectKind.INT64, None, ()),
    ("f32", ConnectKind.FLOAT32, None, ()),
    ("f64", ConnectKind.FLOAT64, None, ()),
    ("flag", ConnectKind.BOOLEAN, None, ()),
    ("text", ConnectKind.STRING, None, ()),
    ("doc", ConnectKind.STRING, "io.debezium.data.Json", ()),
    ("mood", ConnectKind.STRING, "io.debezium.data.Enum", (("allowed", "a,b"),)),
    ("blob", ConnectKind.BYTES, None, ()),
    ("uid", ConnectKind.STRING, "io.debezium.data.Uuid", ()),
    ("amount", ConnectKind.BYTES, _DEC, (("connect.decimal.precision", "12"), ("scale", "2"))),
    ("wide", ConnectKind.BYTES, _DEC, (("scale", "3"),)),
    ("loose", ConnectKind.STRUCT, "io.debezium.data.VariableScaleDecimal", ()),
    ("day", ConnectKind.INT32, "io.debezium.time.Date", ()),
    ("cday", ConnectKind.INT32, "org.apache.kafka.connect.data.Date", ()),
    ("ts_ms", ConnectKind.INT64, "io.debezium.time.Timestamp", ()),
    ("ts_us", ConnectKind.INT64, "io.debezium.time.MicroTimestamp", ()),
    ("ts_ns", ConnectKind.INT64, "io.debezium.time.NanoTimestamp", ()),
    ("cts", ConnectKind.INT64, "org.apache.kafka.connect.data.Timestamp", ()),
    ("t_ms", ConnectKind.INT32, "io.debezium.time.Time", ()),
    ("t_us", ConnectKind.INT64, "io.debezium.time.MicroTime", ()),
    ("t_ns", ConnectKind.INT64, "io.debezium.time.NanoTime", ()),
    ("zts", ConnectKind.STRING, "io.debezium.time.ZonedTimestamp", ()),
    ("year", ConnectKind.INT32, "io.debezium.time.Year", ()),
    ("span", ConnectKind.INT64, "io.debezium.time.MicroDuration", ()),
    ("ints", ConnectKind.ARRAY, None, ()),
    ("labels", ConnectKind.ARRAY, None, ()),
    ("days", ConnectKind.ARRAY, None, ()),
)
# The items of the array columns: nullable ints, text that may not be null, dates.
_ITEMS = {
    "ints": ConnectSchema(ConnectKind.INT32, optional=True),
    "labels": ConnectSchema(ConnectKind.STRING),
    "days": ConnectSchema(ConnectKind.INT32, optional=True, name="io.debezium.time.Date"),
}
_VSD_FIELDS = (
    ConnectField("scale", ConnectSchema(ConnectKind.INT32)),
    ConnectField("value", ConnectSchema(ConnectKind.BYTES)),
)


def row_schema(optional: dict[str, bool]) -> ConnectSchema:
    fields = [ConnectField("id", ConnectSchema(ConnectKind.INT64))]
    for column, kind, name, params in COLUMNS:
        schema = ConnectSchema(
            kind,
            optional=optional.get(column, True),
            name=name,
            parameters=params,
            fields=_VSD_FIELDS if kind is ConnectKind.STRUCT else (),
            items=_ITEMS.get(column),
        )
        fields.append(ConnectField(column, schema))
    return ConnectSchema(ConnectKind.STRUCT, fields=tuple(fields))


def python_path(row: ConnectSchema, image_text: bytes) -> bytes | None:
    """What the normalizer's Python path writes for this image, or None where it refuses."""
    schema = TableSchema(TableId("s", "t"), row, key_struct(row, ("id",), None))
    row_record = value_schema(schema)["fields"][6]["type"][1]
    image = _JSON.decode(image_text)
    try:
        values = compile_converter(row)(image, "after")
        return AvroEncoder(row_record).encode(values)
    except (NormalizeError, ValueError, TypeError, OverflowError):
        return None


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def signed_bytes(n: int) -> bytes:
    return n.to_bytes((n.bit_length() + 8) // 8, "big", signed=True)


def _numbers(*extra: str) -> st.SearchStrategy[str]:
    return st.one_of(
        st.integers(-(2**70), 2**70).map(str),
        st.integers(-200, 200).map(str),
        st.sampled_from(["-0", "0", "1.5", "-0.0", "1e3", "1E-2", "12.50", "1e400", *extra]),
        st.floats(allow_nan=False, allow_infinity=False).map(repr),
    )


_TEXTS = st.one_of(
    st.text(max_size=12),
    st.sampled_from([DEFAULT_UNAVAILABLE_VALUE, b64(DEFAULT_UNAVAILABLE_VALUE.encode()), ""]),
)
_BASE64 = st.one_of(
    st.binary(max_size=20).map(b64),
    st.integers(-(10**14), 10**14).map(lambda n: b64(signed_bytes(n))),
    st.sampled_from(["", "QR==", "QQ", "Q===", "QQ=A", "A===", "////", "-_=="]),
)
_ZONED = st.one_of(
    st.builds(
        lambda y, mo, d, h, mi, s, f: f"{y:04d}-{mo:02d}-{d:02d}T{h:02d}:{mi:02d}:{s:02d}{f}Z",
        st.integers(0, 9999),
        st.integers(0, 13),
        st.integers(0, 32),
        st.integers(0, 24),
        st.integers(0, 60),
        st.integers(0, 60),
        st.sampled_from(["", ".1", ".123", ".123456", ".1234567", "."]),
    ),
    st.sampled_from(["2024-02-29T10:00:00+01:00", "2023-02-29T00:00:00Z", "infinity"]),
)
_UUIDS = st.one_of(
    st.uuids().map(str),
    st.uuids().map(lambda u: str(u).upper()),
    st.sampled_from(["not-a-uuid", "{12345678-1234-1234-1234-123456789abc}"]),
)


def _json_text(value: str) -> str:
    return json.dumps(value)


# A value per kind: JSON text, mostly of the column's own type, sometimes another.
_ANY = st.sampled_from(["null", "true", '"x"', "[]", "{}", "1", "1.0"])
VALUES: dict[str, st.SearchStrategy[str]] = {
    "i8": _numbers("127", "128", "-129"),
    "i16": _numbers("32767", "32768"),
    "i32": _numbers("2147483647", "2147483648"),
    "i64": _numbers("9223372036854775807", "9223372036854775808"),
    "f32": _numbers("3.4028235e38", "3.5e38", "1e-46"),
    "f64": _numbers(),
    "flag": st.sampled_from(["true", "false", "0", "1"]),
    "text": _TEXTS.map(_json_text),
    "doc": st.sampled_from(['"{\\"a\\": 1}"', '"[]"']),
    "mood": _TEXTS.map(_json_text),
    "blob": st.one_of(_BASE64, _TEXTS).map(_json_text),
    "uid": _UUIDS.map(_json_text),
    "amount": _BASE64.map(_json_text),
    "wide": _BASE64.map(_json_text),
    "loose": st.one_of(
        st.builds(
            lambda scale, value: json.dumps({"scale": scale, "value": value}),
            st.integers(-1002, 1002),
            _BASE64,
        ),
        st.sampled_from(['{"scale": 1.0, "value": "AQ=="}', '{"value": "AQ=="}', '"AQ=="']),
    ),
    "day": _numbers("-719162", "-719163", "2932896", "2932897"),
    "cday": _numbers("0"),
    "ts_ms": _numbers("253402300799999", "253402300800000", "-62135596800000"),
    "ts_us": _numbers("253402300799999999", "-62135596800000001"),
    "ts_ns": _numbers("-1", "-999", "-1001", "9223372036854775807"),
    "cts": _numbers("1700000000000"),
    "t_ms": _numbers("86399999", "86400000", "-1"),
    "t_us": _numbers("86399999999", "86400000000"),
    "t_ns": _numbers("86399999999999", "-1"),
    "zts": _ZONED.map(_json_text),
    "year": _numbers("2024", "2147483648"),
    "span": _numbers("-5"),
}


def _arrays(item: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    """JSON arrays of item texts (a null among them now and then), the unchanged-TOAST
    placeholder as Debezium sends it for an array, and a few that are not arrays."""
    return st.one_of(
        st.lists(st.one_of(item, st.just("null")), max_size=5).map(lambda t: f"[{', '.join(t)}]"),
        st.sampled_from([f'["{DEFAULT_UNAVAILABLE_VALUE}"]', '"[1]"', "{}"]),
    )


VALUES["ints"] = _arrays(VALUES["i32"])
VALUES["labels"] = _arrays(VALUES["text"])
VALUES["days"] = _arrays(VALUES["day"])


@st.composite
def images(draw: Callable[..., Any]) -> tuple[dict[str, bool], bytes]:
    """A row of one to three columns besides the key, so that most rows are valid: a row
    takes the compiled path only when every value in it is one the program writes."""
    optional = {column: draw(st.booleans()) for column, *_ in COLUMNS}
    chosen = draw(st.lists(st.sampled_from(COLUMNS), min_size=1, max_size=3, unique=True))
    for column, *_ in COLUMNS:
        optional[column] = optional[column] or all(column != c for c, *_ in chosen)
    parts = [f'"id": {draw(st.integers(-(2**63), 2**63 - 1))}']
    for column, *_ in chosen:
        value = draw(_ANY if draw(st.integers(0, 9)) == 0 else VALUES[column])
        parts.append(f"{json.dumps(column)}: {value}")
    if draw(st.integers(0, 30)) == 0:
        parts.append('"not_a_column": 1')
    return optional, ("{" + ", ".join(parts) + "}").encode()


def _valid_image() -> bytes:
    row = {
        "id": 7,
        "i8": -128,
        "i16": 300,
        "i32": -70000,
        "i64": 2**40,
        "f32": 1.5,
        "f64": 2.25,
        "flag": True,
        "text": "é ☃ \\u00e9",
        "doc": '{"a": [1, 2]}',
        "mood": "b",
        "blob": b64(b"\x00\xff"),
        "uid": "0b8e2d6c-9a5e-4d1e-8a1a-3c4f5e6d7a8b",
        "amount": b64(signed_bytes(-12345)),
        "wide": b64(signed_bytes(-(10**30))),
        "loose": {"scale": 3, "value": b64(signed_bytes(-5))},
        "day": 19723,
        "cday": -1,
        "ts_ms": 1700000000123,
        "ts_us": -1,
        "ts_ns": -1500,
        "cts": 0,
        "t_ms": 45296789,
        "t_us": 86399999999,
        "t_ns": 1999,
        "zts": "2024-02-29T23:59:59.5Z",
        "year": 2024,
        "span": -86400000000,
        "ints": [1, None, -2147483648],
        "labels": ["a", "", "ü"],
        "days": [],
    }
    return json.dumps(row).encode()


@settings(max_examples=1500, deadline=None)
@given(images())
@example(({}, _valid_image()))
def test_the_program_writes_the_python_paths_bytes_or_gives_the_row_back(
    case: tuple[dict[str, bool], bytes],
) -> None:
    optional, image = case
    row = row_schema(optional)
    program = native_row.row_program(row, DEFAULT_UNAVAILABLE_VALUE)
    assert program is not None
    compiled = program.row(image)
    event("compiled" if compiled is not None else "given back")
    if compiled is not None:
        assert compiled == python_path(row, image), image


def test_a_valid_row_of_every_kind_takes_the_compiled_path() -> None:
    """A program that gave every row back would pass the test above."""
    for optional in (False, True):
        row = row_schema(dict.fromkeys((c for c, *_ in COLUMNS), optional))
        program = native_row.row_program(row, DEFAULT_UNAVAILABLE_VALUE)
        written = program.row(_valid_image())
        assert written is not None
        assert written == python_path(row, _valid_image())


def test_columns_the_program_does_not_write_keep_the_table_on_the_python_path() -> None:
    strings = ConnectSchema(ConnectKind.ARRAY, items=ConnectSchema(ConnectKind.STRING))
    nested = ConnectSchema(ConnectKind.ARRAY, items=strings)
    geometry = ConnectSchema(ConnectKind.STRUCT, name="io.debezium.data.geometry.Point")
    geometries = ConnectSchema(ConnectKind.ARRAY, items=geometry)
    zoned_time = ConnectSchema(ConnectKind.STRING, name="io.debezium.time.ZonedTime")
    for column in (nested, geometry, geometries, zoned_time):
        fields = (ConnectField("id", ConnectSchema(ConnectKind.INT64)), ConnectField("c", column))
        row = ConnectSchema(ConnectKind.STRUCT, fields=fields)
        assert native_row.row_program(row, DEFAULT_UNAVAILABLE_VALUE) is None


_BASE = generate_messages(1, "json")[0]
_VALUE = json.loads(_BASE.value or b"")
_KEY = json.loads(_BASE.key or b"")
_ROW = _VALUE["payload"]["after"]
_SOURCE = _VALUE["payload"]["source"]
_ABSENT = object()


def _maybe(*choices: Any) -> st.SearchStrategy[Any]:
    return st.sampled_from(choices)


_SOURCES = st.fixed_dictionaries(
    {},
    optional={
        "connector": _maybe("postgresql", "postgresql", "mysql", "PostgreSQL", None),
        "txId": _maybe(None, 5000, 0, "42", "abc", -1, True, 10**21),
        "sequence": _maybe(
            None,
            '["23456725","23456789"]',
            '[ "1" , "2" ]',
            '["1",null]',
            "[1,2]",
            "",
            ["1", "2"],
            7,
            '["123456789012345678901","1"]',
        ),
        "lsn": _maybe(None, 23456789, 10**19, "0/16B3748", -5),
        "ts_ms": _maybe(None, 1704067200000, "soon", 1.5, True),
        "schema": _maybe("public", "public", "", 5),
        "table": _maybe("orders", "orders", "", None),
        "flag": st.booleans(),
        "ratio": _maybe(1.5, 2, -0, "text", {"a": 1}, [1], None),
        "origin_topic": _maybe("shadow"),
        "gtid": _maybe(None, "g-1", 9),
    },
)
_ROWS = st.one_of(
    st.just(_ROW),
    st.builds(
        lambda status, quantity, note: {
            **_ROW,
            "status": status,
            "quantity": quantity,
            "note": note,
        },
        _maybe("paid", DEFAULT_UNAVAILABLE_VALUE, "", "é"),
        _maybe(1, 40000, -32768, "x"),
        _maybe(None, "n", 3),
    ),
    st.builds(lambda: {**_ROW, "extra": 1}),
    _maybe(None, "a string", 5, {}),
)


@st.composite
def records(draw: Callable[..., Any]) -> SourceRecord:
    source = {**_SOURCE, **draw(_SOURCES)}
    payload: dict[str, Any] = {}
    fields = {
        "op": draw(_maybe("c", "c", "u", "u", "d", "r", "t", "x", 5, _ABSENT)),
        "before": draw(_maybe(None, None, _ROW, 5, _ABSENT)),
        "after": draw(_ROWS) if draw(st.integers(0, 9)) else _ABSENT,
        "source": source if draw(st.integers(0, 19)) else draw(_maybe(None, "s", _ABSENT)),
        "ts_ms": draw(_maybe(1704067200050, None, "x", _ABSENT)),
        "transaction": draw(
            _maybe(_ABSENT, _ABSENT, None, {"id": "571:9"}, {"id": 5}, {"id": True}, {}, "t")
        ),
    }
    for name, value in fields.items():
        if value is not _ABSENT:
            payload[name] = value
    key_payload = draw(
        _maybe({"id": 7}, {"id": 7}, {}, {"id": None}, {"id": "7"}, {"id": 7, "x": 1})
    )
    value = {"schema": _VALUE["schema"], "payload": payload}
    key = {"schema": _KEY["schema"], "payload": key_payload}
    stamp = draw(_maybe(None, 1704067200999))
    return SourceRecord(
        _BASE.topic,
        draw(st.integers(0, 5)),
        draw(st.integers(0, 10**12)),
        json.dumps(key).encode(),
        json.dumps(value).encode(),
        stamp,
    )


class _Framer:
    """Frames what either path gives as the service does, with an id per schema text."""

    def __init__(self) -> None:
        self.ids: dict[str, int] = {}

    def _id(self, text: str) -> int:
        return self.ids.setdefault(text, 100 + len(self.ids))

    def __call__(self, routing: Any) -> Any:
        if isinstance(routing, EncodedChange):
            key_id = self._id(key_schema_text(routing.schema))
            value_id = self._id(value_schema_text(routing.schema))
            return [(routing.topic, frame(key_id, routing.key), frame(value_id, routing.value))]
        if isinstance(routing, Emit) and all(c.key is not None for c in routing.changes):
            out = []
            for change in routing.changes:
                assert change.schema is not None and change.key is not None
                key_text, value_text = (
                    key_schema_text(change.schema),
                    value_schema_text(change.schema),
                )
                out.append(
                    (
                        change.topic,
                        AvroEncoder(key_text).frame(self._id(key_text), change.key),
                        AvroEncoder(value_text).frame(self._id(value_text), change.value),
                    )
                )
            return out
        return routing


def _router(compiled: bool, options: NormalizeOptions | None = None) -> Router:
    def lookup(schema_id: int) -> Any:
        raise AssertionError("no Avro input here")

    return Router(
        lookup=lookup,
        clock_ms=lambda: 0,
        dead_letter_topic="dlq",
        max_record_bytes=1_000_000,
        options=options or NormalizeOptions(),
        compiled_records=compiled,
    )


_COMPILED, _PYTHON, _FRAME = _router(True), _router(False), _Framer()
_COMPILED.route(_BASE)  # the first record of a schema teaches the prefixes


@settings(max_examples=2000, deadline=None)
@given(records())
def test_a_record_gives_the_same_kafka_records_on_both_paths(record: SourceRecord) -> None:
    compiled = _COMPILED.route(record)
    event("compiled" if isinstance(compiled, EncodedChange) else "Python path")
    assert _FRAME(compiled) == _FRAME(_PYTHON.route(record))


def test_the_benchmarks_records_take_the_compiled_path_and_equal_the_python_paths() -> None:
    """Every record of the benchmark is one the program writes (a test of records it gave
    back would pass the test above), and what it writes is what the Python path writes."""
    messages = generate_messages(300, "json")
    _COMPILED.route(messages[0])
    routed = [_COMPILED.route(record) for record in messages[1:]]
    assert all(isinstance(routing, EncodedChange) for routing in routed)
    expected = [_FRAME(_PYTHON.route(record)) for record in messages[1:]]
    assert [_FRAME(routing) for routing in routed] == expected


def test_table_overrides_keep_every_record_on_the_python_path() -> None:
    options = NormalizeOptions(default=TableOverrides(key_columns=("id", "status")))
    router = _router(True, options)
    messages = generate_messages(20, "json")
    routed = [router.route(record) for record in messages]
    assert not any(isinstance(routing, EncodedChange) for routing in routed)
    assert [_FRAME(r) for r in routed] == [
        _FRAME(_router(False, options).route(m)) for m in messages
    ]
