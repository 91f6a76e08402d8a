"""The compiled Avro decoder reads what fastavro reads, or fails exactly like fastavro, on
random schemas with valid, truncated, padded and corrupted bodies."""

from __future__ import annotations

import datetime as dt
import io
import itertools
import math
import re
import uuid
from decimal import Decimal
from typing import Any
from unittest import mock

import fastavro
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from shared.avro_decoder import AvroDecoder, read_long

pytestmark = pytest.mark.unit

_names = (f"T{i}" for i in itertools.count())

LOGICAL: list[Any] = [
    {"type": "int", "logicalType": "date"},
    {"type": "int", "logicalType": "time-millis"},
    {"type": "long", "logicalType": "time-micros"},
    {"type": "long", "logicalType": "timestamp-millis"},
    {"type": "long", "logicalType": "timestamp-micros"},
    {"type": "long", "logicalType": "local-timestamp-millis"},
    {"type": "long", "logicalType": "local-timestamp-micros"},
    {"type": "string", "logicalType": "uuid"},
    {"type": "long", "connect.name": "io.debezium.time.MicroTimestamp"},
    {"type": "int", "connect.type": "int16"},
]
PRIMITIVES = ["null", "boolean", "int", "long", "float", "double", "string", "bytes"]


def leaf_types() -> st.SearchStrategy[Any]:
    decimals = st.builds(
        lambda p, s: {
            "type": "bytes",
            "logicalType": "decimal",
            "precision": p,
            "scale": min(s, p),
        },
        st.integers(1, 30),
        st.integers(0, 8),
    )
    enums = st.builds(
        lambda symbols: {"type": "enum", "name": next(_names), "symbols": symbols},
        st.lists(st.sampled_from(["A", "B", "C"]), min_size=1, unique=True),
    )
    fixed = st.builds(
        lambda size: {"type": "fixed", "name": next(_names), "size": size}, st.just(2)
    )
    return st.one_of(st.sampled_from(PRIMITIVES), st.sampled_from(LOGICAL), decimals, enums, fixed)


def avro_types() -> st.SearchStrategy[Any]:
    def extend(children: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
        records = st.builds(
            lambda types, space: {
                "type": "record",
                "name": next(_names),
                **({"namespace": space} if space else {}),
                "fields": [{"name": f"f{i}", "type": t} for i, t in enumerate(types)],
            },
            st.lists(children, max_size=4),
            st.sampled_from([None, "a.b", ""]),
        )
        unions = st.lists(
            children.filter(lambda t: not isinstance(t, list)), min_size=1, max_size=3
        ).filter(_distinct_branches)
        return st.one_of(
            records,
            unions,
            st.builds(lambda t: {"type": "array", "items": t}, children),
            st.builds(lambda t: {"type": "map", "values": t}, children),
        )

    return st.recursive(leaf_types(), extend, max_leaves=8)


def _distinct_branches(branches: list[Any]) -> bool:
    kinds = [b if isinstance(b, str) else b.get("name", b["type"]) for b in branches]
    unnamed = [b["type"] for b in branches if isinstance(b, dict) and "name" not in b]
    return len(set(kinds)) == len(kinds) and len(set(unnamed)) == len(unnamed)


def datums(schema: Any) -> st.SearchStrategy[Any]:
    if isinstance(schema, list):
        return st.one_of(*(datums(branch) for branch in schema))
    if isinstance(schema, str):
        schema = {"type": schema}
    kind, logical = schema["type"], schema.get("logicalType")
    if logical == "decimal":
        p, s = schema["precision"], schema["scale"]
        return st.integers(-(10**p) + 1, 10**p - 1).map(lambda u: Decimal(u).scaleb(-s))
    if logical == "date":
        return st.dates()
    if logical in ("time-millis", "time-micros"):
        return st.times()
    if logical in ("timestamp-millis", "timestamp-micros"):
        return st.datetimes(timezones=st.just(dt.UTC))
    if logical in ("local-timestamp-millis", "local-timestamp-micros"):
        return st.datetimes()
    if logical == "uuid":
        return st.uuids().map(str)
    simple: dict[str, st.SearchStrategy[Any]] = {
        "null": st.none(),
        "boolean": st.booleans(),
        "int": st.integers(-(2**31), 2**31 - 1),
        "long": st.integers(-(2**63), 2**63 - 1),
        "float": st.floats(width=32),
        "double": st.floats(),
        "string": st.text(max_size=5),
        "bytes": st.binary(max_size=5),
        "fixed": st.binary(min_size=2, max_size=2),
    }
    if kind in simple:
        return simple[kind]
    if kind == "enum":
        return st.sampled_from(schema["symbols"])
    if kind == "array":
        return st.lists(datums(schema["items"]), max_size=3)
    if kind == "map":
        return st.dictionaries(st.text(max_size=3), datums(schema["values"]), max_size=3)
    return st.fixed_dictionaries({f["name"]: datums(f["type"]) for f in schema["fields"]})


def outcome(read: Any) -> tuple[str, Any]:
    try:
        return ("ok", read())
    except Exception as exc:  # fastavro names its BytesIO object: its address varies
        return ("raised", (type(exc), re.sub(r"0x[0-9a-f]+", "0x...", str(exc))))


def same(a: Any, b: Any) -> bool:
    if type(a) is not type(b):
        return False
    if isinstance(a, Decimal):
        return a.as_tuple() == b.as_tuple()
    if isinstance(a, float):
        return a == b or (math.isnan(a) and math.isnan(b))
    if isinstance(a, dict):
        return list(a) == list(b) and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, (dt.datetime, dt.time)):
        return a == b and a.tzinfo == b.tzinfo
    return bool(a == b)


def assert_reads_like_fastavro(schema: Any, body: bytes, *, uuid_text: bool = False) -> None:
    """The decoder's result (or error) is fastavro's; with ``uuid_text``, uuids compare as
    text on both sides (what goes to fastavro keeps its UUIDs)."""
    parsed = fastavro.parse_schema(schema)
    expected = outcome(lambda: fastavro.schemaless_reader(io.BytesIO(body), parsed, None))
    actual = outcome(lambda: AvroDecoder(schema, parsed, uuid_text=uuid_text).decode(body))
    assert actual[0] == expected[0], (actual, expected)
    if expected[0] == "ok":
        if uuid_text:
            actual, expected = ("ok", as_text(actual[1])), ("ok", as_text(expected[1]))
        assert same(actual[1], expected[1]), (actual, expected)
    else:
        assert actual[1] == expected[1]


def encoded(schema: Any, datum: Any) -> bytes:
    buffer = io.BytesIO()
    try:
        fastavro.schemaless_writer(buffer, fastavro.parse_schema(schema), datum)
    except ValueError:  # fastavro cannot pick a union branch for some generated datums
        assume(False)
    return buffer.getvalue()


@settings(max_examples=250)
@given(data=st.data(), schema=avro_types())
def test_reads_what_fastavro_reads(data: st.DataObject, schema: Any) -> None:
    body = encoded(schema, data.draw(datums(schema)))
    assert_reads_like_fastavro(schema, body)


@settings(max_examples=200)
@given(data=st.data(), schema=avro_types())
def test_damaged_bodies_fail_or_read_like_fastavro(data: st.DataObject, schema: Any) -> None:
    assume(not counts_without_bytes(schema))
    body = damaged(data, encoded(schema, data.draw(datums(schema))), ["truncate", "append", "flip"])
    assert_reads_like_fastavro(schema, body)


def zero_width(schema: Any) -> bool:
    """Whether a value of ``schema`` can take no bytes at all (null, a record of such)."""
    if schema == "null" or schema == {"type": "null"}:
        return True
    if isinstance(schema, dict) and schema.get("type") in ("record", "error"):
        return all(zero_width(f["type"]) for f in schema["fields"])
    return False


def counts_without_bytes(schema: Any) -> bool:
    """Whether ``schema`` holds an array of zero-width items: a damaged block count there
    makes fastavro build a list of up to 2**63 items from a few bytes (and the decoder,
    which falls back to it or skips them one by one, likewise)."""
    if isinstance(schema, list):
        return any(counts_without_bytes(branch) for branch in schema)
    if not isinstance(schema, dict):
        return False
    kind = schema.get("type")
    if kind == "array":
        return zero_width(schema["items"]) or counts_without_bytes(schema["items"])
    if kind == "map":
        return counts_without_bytes(schema["values"])
    if kind in ("record", "error"):
        return any(counts_without_bytes(f["type"]) for f in schema["fields"])
    return False


def damaged(data: st.DataObject, body: bytes, kinds: list[str]) -> bytes:
    """``body`` truncated, with bytes appended, with one byte flipped, or as it is ("none")."""
    out = bytearray(body)
    damage = data.draw(st.sampled_from(kinds))
    if damage == "truncate" and out:
        del out[data.draw(st.integers(0, len(out) - 1)) :]
    elif damage == "append":
        out += data.draw(st.binary(min_size=1, max_size=3))
    elif damage == "flip" and out:
        out[data.draw(st.integers(0, len(out) - 1))] ^= data.draw(st.integers(1, 255))
    return bytes(out)


@settings(max_examples=200)
@given(data=st.data(), schema=leaf_types())
def test_arbitrary_bytes_for_a_leaf_read_like_fastavro(data: st.DataObject, schema: Any) -> None:
    assert_reads_like_fastavro(schema, data.draw(st.binary(max_size=12)))


def test_named_types_are_resolved_by_full_and_short_name() -> None:
    row = {"type": "record", "name": "Value", "fields": [{"name": "id", "type": "long"}]}
    schema = {
        "type": "record",
        "name": "Envelope",
        "namespace": "shop.public.orders",
        "fields": [
            {"name": "before", "type": ["null", row]},
            {"name": "after", "type": ["null", "shop.public.orders.Value"]},
            {"name": "again", "type": ["null", "Value"]},
        ],
    }
    datum = {"before": {"id": 1}, "after": {"id": 2}, "again": None}
    parsed = fastavro.parse_schema(schema)
    assert AvroDecoder(schema, parsed).decode(encoded(schema, datum)) == datum


def test_debezium_logical_values() -> None:
    schema = {
        "type": "record",
        "name": "R",
        "fields": [
            {"name": "d", "type": {"type": "bytes", "logicalType": "decimal", "precision": 4}},
            {"name": "u", "type": {"type": "string", "logicalType": "uuid"}},
            {"name": "t", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        ],
    }
    datum = {
        "d": Decimal("12"),
        "u": str(uuid.UUID(int=7)),
        "t": dt.datetime(2024, 1, 2, tzinfo=dt.UTC),
    }
    assert_reads_like_fastavro(schema, encoded(schema, datum))
    decoded = AvroDecoder(schema, fastavro.parse_schema(schema)).decode(encoded(schema, datum))
    assert decoded == {"d": Decimal("12"), "u": uuid.UUID(int=7), "t": datum["t"]}


@given(st.integers(-(2**63), 2**63 - 1))
def test_read_long_inverts_the_zigzag_varint(n: int) -> None:
    body = encoded("long", n)
    assert read_long(body, 0) == (n, len(body))


@given(
    unscaled=st.integers(-(10**40), 10**40),
    precision=st.integers(1, 38),
    scale=st.integers(0, 10),
)
def test_decimals_wider_than_their_precision_read_like_fastavro(
    unscaled: int, precision: int, scale: int
) -> None:
    schema = {
        "type": "bytes",
        "logicalType": "decimal",
        "precision": precision,
        "scale": min(scale, precision),
    }
    raw = unscaled.to_bytes((unscaled.bit_length() + 8) // 8, "big", signed=True)
    assert_reads_like_fastavro(schema, encoded("bytes", raw))


@given(value=st.integers(-(2**63), 2**63 - 1), logical=st.sampled_from(LOGICAL[:7]))
def test_logical_values_out_of_range_read_like_fastavro(value: int, logical: Any) -> None:
    if logical["type"] == "int":
        value = max(-(2**31), min(2**31 - 1, value))
    assert_reads_like_fastavro(logical, encoded(logical["type"], value))


@pytest.mark.parametrize("schema", ["string", "bytes", ["null", "string"], ["null", "long"]])
def test_every_leading_byte_reads_like_fastavro(schema: Any) -> None:
    # Length prefixes (odd = negative), union indexes (only 0 and 2 are branches), varints.
    for first in range(256):
        for body in (bytes([first]) + b"a" * (first >> 1), bytes([first, 4]) + b"ab"):
            assert_reads_like_fastavro(schema, body)


def record_schemas() -> st.SearchStrategy[Any]:
    return st.lists(avro_types(), min_size=1, max_size=5).map(
        lambda types: {
            "type": "record",
            "name": next(_names),
            "fields": [{"name": f"f{i}", "type": t} for i, t in enumerate(types)],
        }
    )


def expected_without(schema: Any, body: bytes, skip: set[str]) -> tuple[str, Any]:
    """What fastavro reads with a reader schema that leaves ``skip`` out, or, where that
    schema is not valid alone, its full result without them."""
    parsed = fastavro.parse_schema(schema)
    kept = [f for f in schema["fields"] if f["name"] not in skip]
    try:
        reader = fastavro.parse_schema({**schema, "fields": kept})
    except Exception:  # a kept field names a type only a skipped one defines
        full = outcome(lambda: fastavro.schemaless_reader(io.BytesIO(body), parsed, None))
        if full[0] == "ok":
            full = ("ok", {k: v for k, v in full[1].items() if k not in skip})
        return full
    return outcome(lambda: fastavro.schemaless_reader(io.BytesIO(body), parsed, reader))


@settings(max_examples=300)
@given(data=st.data(), schema=record_schemas())
def test_skipped_fields_read_like_fastavro_without_them(data: st.DataObject, schema: Any) -> None:
    assume(not counts_without_bytes(schema))
    names = [f["name"] for f in schema["fields"]]
    skip = data.draw(st.sets(st.sampled_from(names)))
    kinds = ["none", "truncate", "append", "flip"]
    body = damaged(data, encoded(schema, data.draw(datums(schema))), kinds)
    expected = expected_without(schema, body, skip)
    decoder = AvroDecoder(schema, fastavro.parse_schema(schema), skip)
    actual = outcome(lambda: decoder.decode(body))
    assert actual[0] == expected[0], (actual, expected)
    if expected[0] == "ok":
        assert same(actual[1], expected[1]), (actual, expected)
    else:
        assert actual[1] == expected[1]


def test_a_skipped_map_is_read_past_and_left_out() -> None:
    """The writer's case: a change record's ``source`` map between the fields it reads."""
    schema = {
        "type": "record",
        "name": "Change",
        "fields": [
            {"name": "op", "type": "string"},
            {"name": "source", "type": {"type": "map", "values": "string"}},
            {"name": "tx_id", "type": ["null", "string"]},
            {"name": "after", "type": ["null", {"type": "long", "logicalType": "date"}]},
        ],
    }
    datum = {"op": "UPDATE", "source": {"lsn": "42", "db": "shop"}, "tx_id": "7", "after": None}
    decoder = AvroDecoder(schema, fastavro.parse_schema(schema), {"source", "tx_id", "absent"})
    assert decoder.decode(encoded(schema, datum)) == {"op": "UPDATE", "after": None}


@settings(max_examples=300)
@given(
    data=st.data(),
    values=st.sampled_from(["string", "bytes"]),
    kind=st.sampled_from(["none", "truncate", "append", "flip"]),
)
def test_a_skipped_map_of_strings_reads_like_fastavro_without_it(
    data: st.DataObject, values: str, kind: str
) -> None:
    """The source map's own skip loop: long and short keys and values, several blocks'
    worth of entries, then a field after it; the body as written or damaged."""
    schema = {
        "type": "record",
        "name": next(_names),
        "fields": [
            {"name": "source", "type": {"type": "map", "values": values}},
            {"name": "after", "type": ["null", "long"]},
        ],
    }
    text = st.text(max_size=80) if values == "string" else st.binary(max_size=80)
    datum = {
        "source": data.draw(st.dictionaries(st.text(max_size=70), text, max_size=20)),
        "after": data.draw(st.none() | st.integers(-(2**63), 2**63 - 1)),
    }
    body = damaged(data, encoded(schema, datum), [kind])
    expected = expected_without(schema, body, {"source"})
    decoder = AvroDecoder(schema, fastavro.parse_schema(schema), {"source"})
    if kind == "none":  # read by the compiled path itself, not handed to fastavro
        with mock.patch.object(fastavro, "schemaless_reader", side_effect=AssertionError):
            assert decoder.decode(body) == {"after": datum["after"]}
    actual = outcome(lambda: decoder.decode(body))
    assert actual[0] == expected[0], (actual, expected)
    assert same(actual[1], expected[1]) if expected[0] == "ok" else actual[1] == expected[1]


def test_arrays_of_zero_width_items_are_told_apart() -> None:
    empty = {"type": "record", "name": next(_names), "fields": []}
    assert counts_without_bytes({"type": "array", "items": "null"})
    assert counts_without_bytes({"type": "map", "values": {"type": "array", "items": empty}})
    assert not counts_without_bytes({"type": "array", "items": ["null", "long"]})
    assert not counts_without_bytes({"type": "map", "values": "null"})


def as_text(value: Any) -> Any:
    """``value`` with every ``UUID`` as its canonical text, as ``uuid_text`` reads it."""
    if isinstance(value, uuid.UUID):
        return str(value)
    if isinstance(value, dict):
        return {k: as_text(v) for k, v in value.items()}
    if isinstance(value, list):
        return [as_text(v) for v in value]
    return value


@given(data=st.data(), schema=avro_types())
def test_uuids_as_text_read_like_fastavro(data: st.DataObject, schema: Any) -> None:
    body = encoded(schema, data.draw(datums(schema)))
    if data.draw(st.booleans()) and not counts_without_bytes(schema):
        body = damaged(data, body, ["truncate", "append", "flip"])
    assert_reads_like_fastavro(schema, body, uuid_text=True)


UUID_TEXTS = st.one_of(
    st.uuids().map(str),
    st.uuids().map(lambda u: str(u).upper()),
    st.uuids().map(lambda u: u.hex),
    st.uuids().map(lambda u: "{" + str(u) + "}"),
    st.uuids().map(lambda u: u.urn),
    st.text(max_size=40),
)


@given(texts=st.lists(UUID_TEXTS, min_size=1, max_size=4))
def test_uuid_text_is_the_canonical_form_of_any_uuid_and_refuses_the_rest(
    texts: list[str],
) -> None:
    fields = [
        {"name": f"u{i}", "type": {"type": "string", "logicalType": "uuid"}}
        for i in range(len(texts))
    ]
    schema = {"type": "record", "name": "R", "fields": fields}
    datum = {f"u{i}": text for i, text in enumerate(texts)}
    body = encoded(schema, datum)
    assert_reads_like_fastavro(schema, body, uuid_text=True)
    result = outcome(
        lambda: AvroDecoder(schema, fastavro.parse_schema(schema), uuid_text=True).decode(body)
    )
    if result[0] == "ok":  # the compiled path: plain text, never a UUID object
        assert result[1] == {f"u{i}": str(uuid.UUID(text)) for i, text in enumerate(texts)}
        assert all(type(value) is str for value in result[1].values())
