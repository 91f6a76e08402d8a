"""The compiled Avro encoder writes fastavro's bytes, or fails exactly like fastavro."""

from __future__ import annotations

import datetime as dt
import io
import itertools
import json
import uuid
from decimal import Decimal
from typing import Any

import fastavro
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from icefjord.bench.normalizer import generate_messages
from services.cdc_normalizer.avro_encoder import AvroEncoder, encode_long
from services.cdc_normalizer.pipeline import Emit, Router
from services.cdc_normalizer.table_schema import key_schema_text, value_schema_text

pytestmark = pytest.mark.unit

_names = (f"R{i}" for i in itertools.count())

LOGICAL = [
    {"type": "int", "logicalType": "date"},
    {"type": "int", "logicalType": "time-millis"},
    {"type": "long", "logicalType": "time-micros"},
    {"type": "long", "logicalType": "timestamp-millis"},
    {"type": "long", "logicalType": "timestamp-micros"},
    {"type": "long", "logicalType": "local-timestamp-millis"},
    {"type": "long", "logicalType": "local-timestamp-micros"},
    {"type": "string", "logicalType": "uuid"},
    {"type": "string", "icefjord.semantic": "json"},
    {"type": "long", "logicalType": "no-such-type"},
]
PRIMITIVES = ["null", "boolean", "int", "long", "float", "double", "string", "bytes"]


def decimal_types() -> st.SearchStrategy[dict[str, Any]]:
    return st.builds(
        lambda precision, scale: {
            "type": "bytes",
            "logicalType": "decimal",
            "precision": precision,
            "scale": min(scale, precision),
        },
        st.integers(1, 38),
        st.integers(0, 12),
    )


def leaf_types() -> st.SearchStrategy[Any]:
    return st.one_of(
        st.sampled_from(PRIMITIVES),
        st.sampled_from(LOGICAL),
        decimal_types(),
        st.builds(
            lambda symbols: {"type": "enum", "name": next(_names), "symbols": symbols},
            st.lists(st.sampled_from(["A", "B", "C", "CREATE"]), min_size=1, unique=True),
        ),
    )


def avro_types() -> st.SearchStrategy[Any]:
    def extend(children: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
        records = st.builds(
            lambda types: {
                "type": "record",
                "name": next(_names),
                "fields": [{"name": f"f{i}", "type": t} for i, t in enumerate(types)],
            },
            st.lists(children, max_size=4),
        )
        optional = children.filter(lambda t: not isinstance(t, list) and t != "null").map(
            lambda t: ["null", t]
        )
        return st.one_of(
            records,
            optional,
            optional.map(lambda union: union[::-1]),
            st.builds(lambda t: {"type": "array", "items": t}, children),
            st.builds(lambda t: {"type": "map", "values": t}, children),
        )

    return st.recursive(leaf_types(), extend, max_leaves=10)


JUNK = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.floats(),
    st.text(max_size=4),
    st.binary(max_size=4),
    st.decimals(allow_nan=True),
    st.dates(),
    st.datetimes(),
    st.just(("R0", {})),
)


def datums(schema: Any) -> st.SearchStrategy[Any]:
    if isinstance(schema, list):
        return st.one_of(*(datums(branch) for branch in schema), JUNK)
    if isinstance(schema, str):
        schema = {"type": schema}
    kind, logical = schema["type"], schema.get("logicalType")
    options: list[st.SearchStrategy[Any]] = [JUNK]
    if logical == "decimal":
        precision, scale = schema["precision"], schema["scale"]
        options.append(
            st.builds(
                lambda unscaled, shift: Decimal(unscaled).scaleb(-scale + shift),
                st.integers(-(10**precision), 10**precision),
                st.integers(-2, 2),
            )
        )
        options.append(st.sampled_from([Decimal("-0"), Decimal("NaN"), Decimal("1E+2")]))
    elif logical == "date":
        options += [st.dates(), st.integers(-(2**31), 2**31), st.datetimes()]
    elif logical in ("time-millis", "time-micros"):
        options += [st.times(), st.integers(0, 86_400_000_000)]
    elif logical in ("timestamp-millis", "timestamp-micros"):
        options += [st.datetimes(timezones=st.just(dt.UTC)), st.integers(-(2**62), 2**62)]
    elif logical in ("local-timestamp-millis", "local-timestamp-micros"):
        options += [st.datetimes(), st.integers(-(2**62), 2**62)]
    elif logical == "uuid":
        options += [st.uuids().map(str), st.uuids()]
    if kind == "boolean":
        options.append(st.booleans())
    elif kind == "int":
        options.append(st.integers(-(2**31) - 1, 2**31))
    elif kind == "long":
        options.append(st.integers(-(2**63) - 1, 2**63))
    elif kind in ("float", "double"):
        options += [st.floats(), st.integers(-5, 5)]
    elif kind == "string":
        options.append(st.text(max_size=6))
    elif kind == "bytes":
        options += [st.binary(max_size=6), st.binary(max_size=3).map(bytearray)]
    elif kind == "enum":
        options.append(st.sampled_from(schema["symbols"] + ["Z"]))
    elif kind == "array":
        options += [st.lists(datums(schema["items"]), max_size=3), st.just(())]
    elif kind == "map":
        keys = st.one_of(st.text(max_size=3), st.integers(0, 3))
        options.append(st.dictionaries(keys, datums(schema["values"]), max_size=3))
    elif kind == "record":
        fields = {f["name"]: datums(f["type"]) for f in schema["fields"]}
        options.append(st.fixed_dictionaries(fields))
        options.append(st.fixed_dictionaries({}, optional=fields))
        options.append(st.fixed_dictionaries(fields).map(lambda d: {**d, "-type": "other"}))
    return st.one_of(*options)


def fastavro_outcome(schema: Any, datum: Any) -> tuple[str, Any]:
    try:
        buffer = io.BytesIO()
        fastavro.schemaless_writer(buffer, fastavro.parse_schema(schema), datum)
        return ("ok", buffer.getvalue())
    except Exception as exc:
        return ("raised", (type(exc), str(exc)))


def encoder_outcome(schema: Any, datum: Any) -> tuple[str, Any]:
    try:
        return ("ok", AvroEncoder(json.dumps(schema)).encode(datum))
    except Exception as exc:
        return ("raised", (type(exc), str(exc)))


def small_types() -> st.SearchStrategy[Any]:
    """A leaf, the leaf made optional, or a union of several leaves."""
    leaves = leaf_types().filter(lambda t: t != "null")
    return st.one_of(
        leaves,
        leaves.map(lambda t: ["null", t]),
        leaves.map(lambda t: [t, "null"]),
        st.lists(st.sampled_from(PRIMITIVES), min_size=2, max_size=3, unique=True),
    )


@settings(max_examples=600)
@given(data=st.data(), schema=small_types())
def test_leaf_bytes_equal_fastavro_or_the_same_error(data: st.DataObject, schema: Any) -> None:
    datum = data.draw(datums(schema))
    assert encoder_outcome(schema, datum) == fastavro_outcome(schema, datum)


@settings(max_examples=200)
@given(data=st.data(), schema=avro_types())
def test_nested_bytes_equal_fastavro_or_the_same_error(data: st.DataObject, schema: Any) -> None:
    datum = data.draw(datums(schema))
    assert encoder_outcome(schema, datum) == fastavro_outcome(schema, datum)


@settings(max_examples=400)
@given(
    precision=st.integers(1, 38),
    data=st.data(),
)
def test_decimals_at_the_schemas_scale_equal_fastavro_up_to_their_precision(
    precision: int, data: st.DataObject
) -> None:
    """What the converters build (exponent = -scale), around 10**precision, and the same
    values written at another exponent: the fast path agrees with fastavro, or both refuse."""
    scale = data.draw(st.integers(0, precision))
    bound = 10**precision
    unscaled = data.draw(
        st.one_of(
            st.integers(-bound - 2, -bound + 2),
            st.integers(bound - 2, bound + 2),
            st.integers(-bound * 10, bound * 10),
        )
    )
    shift = data.draw(st.integers(-2, 2))
    value = Decimal(f"{unscaled}E{-scale}")
    other = Decimal(f"{unscaled * 10**shift if shift >= 0 else unscaled}E{-scale - shift}")
    schema = {"type": "bytes", "logicalType": "decimal", "precision": precision, "scale": scale}
    for datum in (value, other, -value):
        assert encoder_outcome(schema, datum) == fastavro_outcome(schema, datum)


def assert_long_as_fastavro_writes_it(n: int) -> None:
    buffer = io.BytesIO()
    fastavro.schemaless_writer(buffer, fastavro.parse_schema("long"), n)
    assert encode_long(n) == buffer.getvalue()


@given(st.integers(-(2**63), 2**63 - 1))
def test_longs_are_zigzag_varints(n: int) -> None:
    assert_long_as_fastavro_writes_it(n)


def test_longs_at_every_varint_length_boundary_are_zigzag_varints() -> None:
    """Each zigzag value ``2**(7k)`` starts a varint one byte longer; ``2**56`` is where the
    encoder's gathered-integer path ends."""
    edges = {0, 2**63 - 1, -(2**63)}
    for bits in range(7, 64, 7):
        for zigzag in (2**bits - 1, 2**bits, 2**bits + 1):
            edges |= {zigzag >> 1, -((zigzag + 1) >> 1)}  # the longs whose zigzag is near
    for n in sorted(edges):
        if -(2**63) <= n < 2**63:
            assert_long_as_fastavro_writes_it(n)


def test_frame_is_the_confluent_wire_format() -> None:
    encoder = AvroEncoder(
        {"type": "record", "name": "K", "fields": [{"name": "id", "type": "long"}]}
    )
    assert encoder.frame(258, {"id": 1}) == b"\x00\x00\x00\x01\x02" + b"\x02"
    with pytest.raises(TypeError, match="an integer is required"):  # fastavro's own error
        encoder.frame(1, {"id": "one"})


@pytest.mark.parametrize("fmt", ["json", "avro"])
def test_change_records_encode_like_fastavro(fmt: str) -> None:
    router = Router(
        lookup=_bench_writers().__getitem__,
        clock_ms=lambda: 0,
        dead_letter_topic="dlq",
        max_record_bytes=1 << 20,
    )
    for record in generate_messages(60, fmt):  # type: ignore[arg-type]
        routing = router.route(record)
        assert isinstance(routing, Emit)
        (change,) = routing.changes
        assert change.schema is not None and change.key is not None
        for text, datum in (
            (value_schema_text(change.schema), change.value),
            (key_schema_text(change.schema), change.key),
        ):
            schema = json.loads(text)
            assert AvroEncoder(text).encode(datum) == fastavro_outcome(schema, datum)[1]


def test_uuid_objects_and_naive_instants_are_left_to_fastavro() -> None:
    for schema, datum in (
        ({"type": "string", "logicalType": "uuid"}, uuid.UUID(int=5)),
        ({"type": "long", "logicalType": "timestamp-micros"}, dt.datetime(2024, 1, 1, 12)),
    ):
        assert encoder_outcome(schema, datum) == fastavro_outcome(schema, datum)


def _bench_writers() -> Any:
    from icefjord.bench.normalizer import writer_schemas

    return writer_schemas()
