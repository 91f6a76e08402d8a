"""The bulk copier's pure parts: the SQL per column kind, the Arrow types, the parse of COPY
lines into the target columns, and the refusal of unsupported types."""

from __future__ import annotations

import datetime as dt
import json
import math
import struct
from dataclasses import replace
from decimal import Decimal

import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

from icefjord.bulk.postgres import (
    ColumnPlan,
    SourceColumn,
    UnsupportedColumn,
    arrow_schema,
    column_plan,
    copy_sql,
    hex_to_binary,
    json_lists,
    parse_lines,
    plan_columns,
    quote_ident,
    record_ends,
    to_target,
)
from icefjord.demo.model import Column, EnumType, Kind

pytestmark = pytest.mark.unit

MICROS = (
    "(extract(epoch from date_trunc('second', \"c\"))::bigint * 1000000"
    ' + extract(microseconds from "c")::bigint % 1000000)'
)
# Kind -> (SQL expression over column "c", CSV wire type, Parquet type)
EXPECTED: dict[Kind, tuple[str, pa.DataType, pa.DataType]] = {
    Kind.SMALLINT: ('"c"', pa.int32(), pa.int32()),
    Kind.INTEGER: ('"c"', pa.int32(), pa.int32()),
    Kind.BIGINT: ('"c"', pa.int64(), pa.int64()),
    Kind.NUMERIC: ('"c"::text', pa.string(), pa.decimal128(12, 2)),
    Kind.NUMERIC_ANY: ('trim_scale("c")::text', pa.string(), pa.string()),
    Kind.MONEY: ('"c"::numeric::text', pa.string(), pa.string()),
    Kind.REAL: ('"c"::float8::text', pa.string(), pa.float32()),
    Kind.DOUBLE: ('"c"::text', pa.string(), pa.float64()),
    Kind.BOOLEAN: ('"c"', pa.bool_(), pa.bool_()),
    Kind.TEXT: ('"c"', pa.string(), pa.string()),
    Kind.TIMESTAMPTZ: (MICROS, pa.int64(), pa.timestamp("us", tz="UTC")),
    Kind.TIMESTAMP: (MICROS, pa.int64(), pa.timestamp("us")),
    Kind.DATE: ("(\"c\" - date '1970-01-01')", pa.int32(), pa.date32()),
    Kind.TIME: ("to_char(\"c\", 'HH24:MI:SS.US')", pa.string(), pa.string()),
    Kind.JSON: ('"c"::text', pa.string(), pa.string()),
    Kind.JSONB: ('"c"::text', pa.string(), pa.string()),
    Kind.UUID: ('"c"::text', pa.string(), pa.string()),
    Kind.ENUM: ('"c"::text', pa.string(), pa.string()),
    Kind.INT_ARRAY: ('array_to_json("c")::text', pa.string(), pa.list_(pa.int32())),
    Kind.BYTEA: ("encode(\"c\", 'hex')", pa.string(), pa.binary()),
}


def _column(kind: Kind) -> Column:
    if kind is Kind.NUMERIC:
        return Column("c", kind, precision=12, scale=2)
    if kind is Kind.ENUM:
        return Column("c", kind, enum=EnumType("tier", ("a", "b")))
    return Column("c", kind)


def test_every_kind_has_a_plan() -> None:
    assert set(EXPECTED) == set(Kind)


@pytest.mark.parametrize("kind", list(Kind))
def test_each_kind_travels_as_planned(kind: Kind) -> None:
    expression, wire, target = EXPECTED[kind]
    assert column_plan(_column(kind)) == ColumnPlan("c", kind, expression, wire, target)


@pytest.mark.parametrize(
    ("precision", "scale", "target"),
    [
        (12, 2, pa.decimal128(12, 2)),
        (38, 10, pa.decimal128(38, 10)),
        (39, 2, pa.string()),  # wider than Iceberg's 38 digits: the normalizer's decimal text
        (5, -2, pa.decimal128(7, 0)),  # negative scale widened to hold every value
        (2, 5, pa.decimal128(5, 5)),  # scale beyond precision widened likewise
    ],
)
def test_numeric_targets_follow_the_normalizer(
    precision: int, scale: int, target: pa.DataType
) -> None:
    plan = column_plan(Column("n", Kind.NUMERIC, precision=precision, scale=scale))
    assert plan.target == target


def test_catalog_spellings_map_to_kinds() -> None:
    plans = plan_columns(
        "shop",
        "orders",
        [
            SourceColumn("a", "character varying(20)", False, True),
            SourceColumn("b", "timestamp(3) without time zone", False, True),
            SourceColumn("c", "shop.order_status", True, False),
            SourceColumn("d", "numeric(14,4)", False, False),
            SourceColumn("e", "integer[]", False, True),
        ],
    )
    assert [p.kind for p in plans] == [
        Kind.TEXT,
        Kind.TIMESTAMP,
        Kind.ENUM,
        Kind.NUMERIC,
        Kind.INT_ARRAY,
    ]
    assert arrow_schema(plans) == pa.schema(
        [
            ("a", pa.string()),
            ("b", pa.timestamp("us")),
            ("c", pa.string()),
            ("d", pa.decimal128(14, 4)),
            ("e", pa.list_(pa.int32())),
        ]
    )


@pytest.mark.parametrize("pg_type", ["interval", "text[]", "point", "shop.some_domain"])
def test_an_unsupported_type_names_table_column_and_type(pg_type: str) -> None:
    columns = [SourceColumn("id", "bigint", False, False), SourceColumn("x", pg_type, False, True)]
    with pytest.raises(UnsupportedColumn) as caught:
        plan_columns("shop", "orders", columns)
    assert isinstance(caught.value, ValueError)
    assert (caught.value.table, caught.value.column, caught.value.pg_type) == (
        "orders",
        "x",
        pg_type,
    )
    assert f"shop.orders.x: type {pg_type!r}" in str(caught.value)


def test_copy_sql_quotes_names_and_asks_for_csv() -> None:
    plans = plan_columns(
        'we"ird',
        "Orders",
        [
            SourceColumn('Mixed "Case"', "bigint", False, False),
            SourceColumn("t", "text", False, True),
        ],
    )
    assert quote_ident('a"b') == '"a""b"'
    assert copy_sql('we"ird', "Orders", plans) == (
        'COPY (SELECT "Mixed ""Case""" AS c0, "t" AS c1 FROM "we""ird"."Orders") '
        "TO STDOUT (FORMAT csv)"
    )


def _field(value: object) -> str:
    if value is None:
        return ""  # NULL: an unquoted empty field
    if isinstance(value, bool):
        text = "t" if value else "f"
    elif isinstance(value, list):
        text = json.dumps(value)  # array_to_json
    else:
        text = str(value)
    if text == "" or any(c in text for c in ',"\r\n'):
        return '"' + text.replace('"', '""') + '"'
    return text


def _line(**members: object) -> bytes:
    """One record as PostgreSQL's ``COPY ... (FORMAT csv)`` writes it, fields in order."""
    return (",".join(_field(v) for v in members.values()) + "\n").encode()


def test_parsed_lines_become_the_target_values() -> None:
    kinds = [
        Kind.BIGINT,
        Kind.NUMERIC,
        Kind.REAL,
        Kind.DOUBLE,
        Kind.TIMESTAMPTZ,
        Kind.TIMESTAMP,
        Kind.DATE,
        Kind.BYTEA,
        Kind.INT_ARRAY,
        Kind.TEXT,
    ]
    plans = tuple(column_plan(replace(_column(kind), name=f"k{i}")) for i, kind in enumerate(kinds))
    lines = _line(
        c0=-9223372036854775808,
        c1="-1869712.88",
        c2="0.1",
        c3="1e-300",
        c4=-500000,
        c5=1_700_000_000_123_456,
        c6=-1,
        c7="00ff0a",
        c8=[None, 1],
        c9='Zürich \x01\x02 \\ "',
    ) + _line(**{f"c{i}": None for i in range(len(kinds))})
    table = to_target(parse_lines(lines, plans), plans)
    assert table.schema == arrow_schema(plans)
    assert [table.column(i)[0].as_py() for i in range(len(kinds))] == [
        -9223372036854775808,
        Decimal("-1869712.88"),
        struct.unpack("<f", struct.pack("<f", 0.1))[0],  # the float32 nearest 0.1
        1e-300,
        dt.datetime(1969, 12, 31, 23, 59, 59, 500000, tzinfo=dt.UTC),
        dt.datetime(2023, 11, 14, 22, 13, 20, 123456),
        dt.date(1969, 12, 31),
        b"\x00\xff\n",
        [None, 1],
        'Zürich \x01\x02 \\ "',
    ]
    assert [table.column(i)[1].as_py() for i in range(len(kinds))] == [None] * len(kinds)


def test_non_finite_floats_parse() -> None:
    plans = (column_plan(Column("r", Kind.REAL)), column_plan(Column("d", Kind.DOUBLE)))
    lines = _line(c0="NaN", c1="-Infinity") + _line(c0="Infinity", c1="NaN")
    real, double = to_target(parse_lines(lines, plans), plans).columns
    assert math.isnan(real[0].as_py()) and real[1].as_py() == math.inf
    assert double[0].as_py() == -math.inf and math.isnan(double[1].as_py())


def test_a_line_longer_than_a_parse_block_is_parsed() -> None:
    plans = (column_plan(Column("c", Kind.TEXT)),)
    long_text = "x" * (9 * 1024 * 1024)
    lines = _line(c0="short") + _line(c0=long_text) + _line(c0="after")
    assert to_target(parse_lines(lines, plans), plans).column(0).to_pylist() == [
        "short",
        long_text,
        "after",
    ]


def test_a_record_ends_only_at_a_line_break_outside_quotes() -> None:
    data = b'1,"a\nb"\n2,"say ""hi""\n"\n3,\n'
    assert [int(i) for i in record_ends(data)] == [7, 23, 26]
    assert record_ends(b'1,"open\n').tolist() == []


_TEXT = st.one_of(st.none(), st.text(alphabet=st.sampled_from("ab ,\"\r\n\t\\'{}é東"), max_size=12))
_INTS = st.one_of(
    st.none(),
    st.lists(st.one_of(st.none(), st.integers(-(2**31), 2**31 - 1)), max_size=5),
)


@given(st.lists(st.tuples(_TEXT, _INTS, st.one_of(st.none(), st.booleans())), max_size=40))
def test_csv_records_parse_back_to_their_values(
    rows: list[tuple[str | None, list[int | None] | None, bool | None]],
) -> None:
    # NULL and the empty string stay apart; quotes, commas and line breaks in text survive.
    plans = (
        column_plan(Column("t", Kind.TEXT)),
        column_plan(Column("a", Kind.INT_ARRAY)),
        column_plan(Column("b", Kind.BOOLEAN)),
    )
    data = b"".join(_line(c0=t, c1=a, c2=b) for t, a, b in rows)
    if not data:
        return
    table = to_target(parse_lines(data, plans), plans)
    assert len(record_ends(data)) == len(rows)
    assert table.to_pylist() == [{"t": t, "a": a, "b": b} for t, a, b in rows]


def test_json_lists_keep_nulls_and_refuse_other_text() -> None:
    kind = pa.list_(pa.int32())
    got = json_lists(pa.array(["[1,null]", None, "[]"]), kind)
    assert got.to_pylist() == [[1, None], None, []]
    assert json_lists(pa.array([], pa.string()), kind).to_pylist() == []
    with pytest.raises(pa.ArrowInvalid):
        json_lists(pa.array(["[[1]]"]), kind)


@given(st.lists(st.one_of(st.none(), st.binary(max_size=40)), max_size=30), st.integers(0, 5))
def test_hex_decoding_gives_back_the_bytes(values: list[bytes | None], skip: int) -> None:
    texts = pa.array([None if v is None else v.hex() for v in values], pa.string())
    sliced = texts.slice(min(skip, len(values)))  # an array with an offset decodes too
    assert hex_to_binary(sliced).to_pylist() == values[min(skip, len(values)) :]


def test_hex_decoding_refuses_text_that_is_not_hex() -> None:
    with pytest.raises(ValueError, match="not hex"):
        hex_to_binary(pa.array(["0g"]))
    with pytest.raises(ValueError, match="not hex"):
        hex_to_binary(pa.array(["abc"]))
