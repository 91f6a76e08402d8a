"""Compiled converters equal convert_value: same result (type, value, Decimal exponent) or the
same exception (class and message), on random schemas and on random, often invalid, values."""

from __future__ import annotations

import base64
import datetime as dt
import math
from decimal import Decimal
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from outcomes import outcome

from services.cdc_normalizer.connect_schema import (
    ConnectField,
    ConnectKind,
    ConnectSchema,
    LogicalName,
)
from services.cdc_normalizer.converters import compile_converter
from services.cdc_normalizer.logical_types import convert_value

pytestmark = pytest.mark.unit

PRIMITIVES = [
    ConnectKind.INT8,
    ConnectKind.INT16,
    ConnectKind.INT32,
    ConnectKind.INT64,
    ConnectKind.FLOAT32,
    ConnectKind.FLOAT64,
    ConnectKind.BOOLEAN,
    ConnectKind.STRING,
    ConnectKind.BYTES,
]
# Logical names with their usual physical kind (a mismatched kind is drawn too).
NAMED = {
    LogicalName.DATE: ConnectKind.INT32,
    LogicalName.CONNECT_DATE: ConnectKind.INT32,
    LogicalName.TIME: ConnectKind.INT32,
    LogicalName.CONNECT_TIME: ConnectKind.INT32,
    LogicalName.MICRO_TIME: ConnectKind.INT64,
    LogicalName.NANO_TIME: ConnectKind.INT64,
    LogicalName.ZONED_TIME: ConnectKind.STRING,
    LogicalName.TIMESTAMP: ConnectKind.INT64,
    LogicalName.CONNECT_TIMESTAMP: ConnectKind.INT64,
    LogicalName.MICRO_TIMESTAMP: ConnectKind.INT64,
    LogicalName.NANO_TIMESTAMP: ConnectKind.INT64,
    LogicalName.ZONED_TIMESTAMP: ConnectKind.STRING,
    LogicalName.TIMESTAMP_MICROS_UTC: ConnectKind.INT64,
    LogicalName.TIMESTAMP_MILLIS_UTC: ConnectKind.INT64,
    LogicalName.YEAR: ConnectKind.INT32,
    LogicalName.MICRO_DURATION: ConnectKind.INT64,
    LogicalName.INTERVAL: ConnectKind.STRING,
    LogicalName.JSON: ConnectKind.STRING,
    LogicalName.UUID: ConnectKind.STRING,
    LogicalName.ENUM: ConnectKind.STRING,
    LogicalName.ENUM_SET: ConnectKind.STRING,
    LogicalName.BITS: ConnectKind.BYTES,
    LogicalName.DECIMAL_STRING: ConnectKind.STRING,
    LogicalName.VARIABLE_SCALE_DECIMAL: ConnectKind.STRUCT,
}
SOURCE_TYPE = "__debezium.source.column.type"


def twos_complement(unscaled: int) -> bytes:
    return unscaled.to_bytes((unscaled.bit_length() + 8) // 8, "big", signed=True)


@st.composite
def decimal_schemas(draw: st.DrawFn) -> ConnectSchema:
    params = {"scale": str(draw(st.integers(-3, 8)))}
    if draw(st.booleans()):
        params["connect.decimal.precision"] = str(draw(st.integers(1, 42)))
    if draw(st.integers(0, 20)) == 0:
        params["scale"] = draw(st.sampled_from(["", "x", "1.5"]))
    return ConnectSchema(
        ConnectKind.BYTES,
        optional=draw(st.booleans()),
        name=LogicalName.DECIMAL.value,
        parameters=tuple(sorted(params.items())),
    )


@st.composite
def propagated_schemas(draw: st.DrawFn) -> ConnectSchema:
    params = {
        SOURCE_TYPE: draw(st.sampled_from(["NUMERIC", "DECIMAL", "numeric unsigned", "TEXT"])),
        "__debezium.source.column.length": str(draw(st.integers(1, 42))),
        "__debezium.source.column.scale": str(draw(st.integers(-2, 8))),
    }
    kind = draw(st.sampled_from([ConnectKind.STRING, ConnectKind.FLOAT64]))
    return ConnectSchema(
        kind, optional=draw(st.booleans()), parameters=tuple(sorted(params.items()))
    )


@st.composite
def leaf_schemas(draw: st.DrawFn) -> ConnectSchema:
    optional = draw(st.booleans())
    choice = draw(st.integers(0, 9))
    if choice == 0:
        return draw(decimal_schemas())
    if choice == 1:
        return draw(propagated_schemas())
    if choice <= 5:
        name, kind = draw(st.sampled_from(sorted(NAMED.items())))
        if draw(st.integers(0, 9)) == 0:
            kind = draw(st.sampled_from(PRIMITIVES))
        return ConnectSchema(kind, optional=optional, name=name.value)
    return ConnectSchema(draw(st.sampled_from(PRIMITIVES)), optional=optional)


FIELD_NAMES = st.sampled_from(["id", "a", "b-c", "2fa", "scale", "value", "wkb", "srid", "x"])


def schemas() -> st.SearchStrategy[ConnectSchema]:
    def extend(children: st.SearchStrategy[ConnectSchema]) -> st.SearchStrategy[ConnectSchema]:
        fields = st.lists(
            st.tuples(FIELD_NAMES, children), max_size=4, unique_by=lambda pair: pair[0]
        )
        structs = st.builds(
            lambda pairs, optional, name: ConnectSchema(
                ConnectKind.STRUCT,
                optional=optional,
                name=name,
                fields=tuple(ConnectField(n, s) for n, s in pairs),
            ),
            fields,
            st.booleans(),
            st.sampled_from([None, None, LogicalName.GEOMETRY.value, "x.Value"]),
        )
        arrays = st.builds(
            lambda items, optional: ConnectSchema(
                ConnectKind.ARRAY, optional=optional, items=items
            ),
            children,
            st.booleans(),
        )
        maps = st.builds(
            lambda keys, values, optional: ConnectSchema(
                ConnectKind.MAP, optional=optional, keys=ConnectSchema(keys), values=values
            ),
            st.sampled_from([ConnectKind.STRING, ConnectKind.INT32]),
            children,
            st.booleans(),
        )
        return structs | arrays | maps

    return st.recursive(leaf_schemas(), extend, max_leaves=8)


JUNK = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(allow_nan=True),
    st.text(max_size=8),
    st.binary(max_size=6),
    st.sampled_from(["NaN", "Infinity", "-Infinity", "infinity", "", "AAAA", "/w==", "x y"]),
)


def _iso_datetimes() -> st.SearchStrategy[str]:
    return st.builds(
        lambda moment, sep, zone: moment.isoformat(sep=sep) + zone,
        st.datetimes(min_value=dt.datetime(1, 1, 2), max_value=dt.datetime(9999, 12, 30)),
        st.sampled_from(["T", " "]),
        st.sampled_from(["", "Z", "+02:00", "-05:30"]),
    )


def _decimals() -> st.SearchStrategy[Any]:
    unscaled = st.one_of(st.integers(-(10**12), 10**12), st.integers(-(10**45), 10**45))
    as_bytes = unscaled.map(twos_complement)
    return st.one_of(
        as_bytes,
        as_bytes.map(lambda data: base64.b64encode(data).decode()),
        st.builds(lambda u, e: Decimal(u).scaleb(e), unscaled, st.integers(-10, 4)),
        st.decimals(allow_nan=True, places=None),
        st.floats(allow_nan=True),
        st.integers(),
        st.text(alphabet="0123456789.-eE ", max_size=10),
        st.sampled_from([Decimal("-0.00"), Decimal("0E-5"), Decimal("0E+3"), b"", "", "@@"]),
    )


def values_for(schema: ConnectSchema) -> st.SearchStrategy[Any]:
    kind, name = schema.kind, schema.name
    options: list[st.SearchStrategy[Any]] = [JUNK]
    if name == LogicalName.DECIMAL or schema.param(SOURCE_TYPE) is not None:
        options.append(_decimals())
    if name == LogicalName.VARIABLE_SCALE_DECIMAL:
        options.append(
            st.fixed_dictionaries(
                {"scale": st.integers(-3, 10), "value": _decimals().filter(_is_bytes_like)}
            )
        )
    if name in (LogicalName.DATE, LogicalName.CONNECT_DATE):
        options += [
            st.integers(-800_000, 3_000_000),
            st.dates(),
            st.datetimes(),
            st.dates().map(dt.date.isoformat),
        ]
    if name in (LogicalName.TIME, LogicalName.MICRO_TIME, LogicalName.NANO_TIME):
        options += [st.integers(-(10**6), 10**14), st.times(), st.times().map(str)]
    if name in (LogicalName.CONNECT_TIME, LogicalName.ZONED_TIME):
        options += [st.integers(-1, 90_000_000), st.times(), st.just("10:15:30.123456Z")]
    if name is not None and "Timestamp" in name:
        options += [
            st.integers(-(10**19), 10**19),
            st.integers(-(10**12), 10**16),
            st.datetimes(),
            st.datetimes(timezones=st.just(dt.UTC)),
            _iso_datetimes(),
        ]
    if kind in (ConnectKind.INT8, ConnectKind.INT16, ConnectKind.INT32, ConnectKind.INT64):
        options.append(st.integers(-(2**64), 2**64))
    if kind in (ConnectKind.FLOAT32, ConnectKind.FLOAT64):
        options += [st.floats(), st.decimals(allow_nan=False, places=3)]
    if kind is ConnectKind.BYTES:
        options += [st.binary(max_size=8), st.binary(max_size=8).map(_b64)]
    if kind is ConnectKind.STRUCT:
        known = {f.name: values_for(f.schema) for f in schema.fields}
        extra = st.dictionaries(FIELD_NAMES, JUNK, max_size=1)
        options.append(
            st.builds(
                lambda given, more: {**more, **given},
                st.fixed_dictionaries({}, optional=known),
                st.one_of(st.just({}), st.just({}), extra),
            )
        )
    if kind is ConnectKind.ARRAY and schema.items is not None:
        options += [st.lists(values_for(schema.items), max_size=3), st.tuples(st.integers())]
    if kind is ConnectKind.MAP and schema.values is not None:
        keys = st.one_of(st.text(max_size=3), st.integers())
        options.append(st.dictionaries(keys, values_for(schema.values), max_size=3))
    return st.one_of(*options)


def _is_bytes_like(value: Any) -> bool:
    return isinstance(value, (bytes, str))


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def same(a: Any, b: Any) -> bool:
    """Equal values of the same type; Decimals also with the same digits and exponent."""
    if type(a) is not type(b):
        return False
    if isinstance(a, Decimal):
        return a.as_tuple() == b.as_tuple()
    if isinstance(a, float):
        return a == b or (math.isnan(a) and math.isnan(b))
    if isinstance(a, dict):
        return list(a) == list(b) and all(same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, (dt.datetime, dt.time)):
        return a == b and a.tzinfo == b.tzinfo
    return bool(a == b)


def assert_sameoutcome(schema: ConnectSchema, value: Any) -> None:
    expected = outcome(convert_value, schema, value, "col")
    actual = outcome(compile_converter(schema), value, "col")
    assert actual[0] == expected[0], (actual, expected)
    if expected[0] == "ok":
        assert same(actual[1], expected[1]), (actual, expected)
    else:
        assert actual[1] == expected[1]


@settings(max_examples=600)
@given(data=st.data(), schema=leaf_schemas())
def test_compiled_leaf_converter_equals_convert_value(
    data: st.DataObject, schema: ConnectSchema
) -> None:
    assert_sameoutcome(schema, data.draw(values_for(schema)))


@settings(max_examples=200)
@given(data=st.data(), schema=schemas())
def test_compiled_nested_converter_equals_convert_value(
    data: st.DataObject, schema: ConnectSchema
) -> None:
    assert_sameoutcome(schema, data.draw(values_for(schema)))


@settings(max_examples=150)
@given(
    data=st.data(),
    columns=st.lists(st.tuples(FIELD_NAMES, leaf_schemas()), max_size=5, unique_by=lambda p: p[0]),
)
def test_compiled_row_converter_equals_convert_value(
    data: st.DataObject, columns: list[tuple[str, ConnectSchema]]
) -> None:
    row = ConnectSchema(
        ConnectKind.STRUCT, fields=tuple(ConnectField(name, s) for name, s in columns)
    )
    assert_sameoutcome(row, data.draw(values_for(row)))


@given(
    unscaled=st.integers(-(10**40), 10**40),
    scale=st.integers(0, 10),
    precision=st.integers(1, 38),
)
def test_decimal_fast_path_matches_at_the_precision_edge(
    unscaled: int, scale: int, precision: int
) -> None:
    params = (("connect.decimal.precision", str(precision)), ("scale", str(scale)))
    schema = ConnectSchema(ConnectKind.BYTES, name=LogicalName.DECIMAL.value, parameters=params)
    edge = 10**precision - 1 if unscaled > 0 else -(10**precision) + 1
    compiled = compile_converter(schema)
    for candidate in (unscaled, edge, edge + (1 if edge > 0 else -1)):
        raw = twos_complement(candidate)
        for value in (raw, _b64(raw), Decimal(f"{candidate}E-{scale}")):
            expected = outcome(convert_value, schema, value, "c")
            actual = outcome(compiled, value, "c")
            assert actual[0] == expected[0]
            assert same(actual[1], expected[1]) if actual[0] == "ok" else actual == expected


def test_an_unreadable_decimal_schema_raises_per_value_like_convert_value() -> None:
    schema = ConnectSchema(
        ConnectKind.BYTES,
        optional=True,
        name=LogicalName.DECIMAL.value,
        parameters=(("scale", "x"),),
    )
    compiled = compile_converter(schema)
    assert compiled(None, "c") is None
    assert outcome(compiled, "AQ==", "c") == outcome(convert_value, schema, "AQ==", "c")
    assert outcome(compiled, "AQ==", "c")[0] == "raised"


_VARIABLE_SCALE = ConnectSchema(
    ConnectKind.STRUCT,
    optional=True,
    name=LogicalName.VARIABLE_SCALE_DECIMAL.value,
    fields=(
        ConnectField("scale", ConnectSchema(ConnectKind.INT32)),
        ConnectField("value", ConnectSchema(ConnectKind.BYTES)),
    ),
)


def _unscaled_forms(unscaled: int) -> st.SearchStrategy[Any]:
    raw = twos_complement(unscaled)
    return st.sampled_from([raw, _b64(raw), _b64(raw) + "\n", b"", "", "A==="])


@settings(max_examples=400)
@given(
    data=st.data(),
    unscaled=st.one_of(st.integers(-1000, 1000), st.integers(-(10**45), 10**45)),
    scale=st.one_of(st.integers(-6, 40), st.sampled_from([-1001, -1000, 1000, 1001])),
    optional=st.booleans(),
)
def test_decimal_text_without_a_precision_equals_convert_value(
    data: st.DataObject, unscaled: int, scale: int, optional: bool
) -> None:
    """A Connect Decimal without a precision (PostgreSQL's money, an unconstrained numeric)
    and a VariableScaleDecimal become text: written from the unscaled integer's digits on the
    fast path, through a Decimal otherwise; both give the same text or the same error."""
    form = data.draw(_unscaled_forms(unscaled))
    money = ConnectSchema(
        ConnectKind.BYTES,
        optional=optional,
        name=LogicalName.DECIMAL.value,
        parameters=(("scale", str(scale)),),
    )
    assert_sameoutcome(money, form)
    assert_sameoutcome(money, data.draw(JUNK))
    scale_value = data.draw(st.one_of(st.just(scale), st.booleans(), st.text(max_size=2)))
    assert_sameoutcome(_VARIABLE_SCALE, {"scale": scale_value, "value": form})
    assert_sameoutcome(_VARIABLE_SCALE, data.draw(JUNK))
