"""Type-aware normalisation for the table comparison: one value, read three ways, compares equal."""

from __future__ import annotations

import datetime as dt
import decimal
import struct
import uuid
from decimal import Decimal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from icefjord.demo.canonical import canonical, canonical_row, checksum, decimal_text, json_value
from icefjord.demo.model import Column, Kind

pytestmark = pytest.mark.unit

UTC = dt.UTC


@given(st.integers(-(10**30), 10**30), st.integers(0, 12), st.integers(0, 6))
def test_decimal_text_ignores_scale_but_not_value(unscaled: int, scale: int, pad: int) -> None:
    with decimal.localcontext(prec=100):
        value = Decimal(unscaled).scaleb(-scale)
        padded = value.quantize(Decimal(1).scaleb(-(scale + pad)))  # same number, more zeros
        nudged = value + Decimal(1).scaleb(-scale - 1)
    assert decimal_text(value) == decimal_text(padded) == decimal_text(str(padded))
    assert Decimal(decimal_text(value)) == value
    assert decimal_text(nudged) != decimal_text(value)


def test_decimal_text_shapes() -> None:
    assert decimal_text(Decimal("-0.00")) == "0"
    assert decimal_text(Decimal("1E+3")) == "1000"
    assert decimal_text("12.3400") == "12.34"
    with pytest.raises(ValueError):
        decimal_text(Decimal("NaN"))


@pytest.mark.parametrize(
    ("kind", "postgres", "iceberg"),
    [
        (Kind.MONEY, Decimal("1234.50"), "1234.5"),  # money as text decimal from the normalizer
        (Kind.NUMERIC, Decimal("12.30"), Decimal("12.3000")),
        (Kind.NUMERIC_ANY, Decimal("3.14159"), "3.14159"),
        (
            Kind.TIMESTAMPTZ,
            dt.datetime(2024, 5, 1, 14, 0, 0, 123456, tzinfo=dt.timezone(dt.timedelta(hours=2))),
            1714564800123456,  # Spark: unix_micros
        ),
        (Kind.TIMESTAMPTZ, dt.datetime(2024, 5, 1, 12, tzinfo=UTC), "2024-05-01T12:00:00Z"),
        (Kind.TIMESTAMP, dt.datetime(2024, 5, 1, 12, 0, 0, 5), 1714564800000005),
        (Kind.TIME, dt.time(13, 14, 15, 123456), 47655123456),
        (Kind.TIME, dt.time(0, 0, 1), "00:00:01"),
        (Kind.DATE, dt.date(2022, 1, 8), 19000),
        (Kind.JSONB, '{"b": [1, 2.50], "a": {"x": true}}', '{"a":{"x":true},"b":[1,2.5]}'),
        (Kind.JSON, {"score": 96.65, "n": None}, '{"n": null, "score": 96.65}'),
        (
            Kind.UUID,
            uuid.UUID("4d66f73f-2b44-4945-bae5-a1715ee345fb"),
            "4D66F73F-2B44-4945-BAE5-A1715EE345FB",
        ),
        (Kind.INT_ARRAY, [1, None, 3], (1, None, 3)),
        (Kind.BYTEA, memoryview(b"\x00\xff"), bytearray(b"\x00\xff")),
        (Kind.REAL, 0.1, struct.unpack("<f", struct.pack("<f", 0.1))[0]),
        (Kind.ENUM, "gold", "gold"),
        (Kind.TEXT, "Zoë 渡辺 🚀", "Zoë 渡辺 🚀"),
    ],
)
def test_the_same_value_from_both_engines_is_equal(
    kind: Kind, postgres: object, iceberg: object
) -> None:
    assert canonical(kind, postgres) == canonical(kind, iceberg)


@pytest.mark.parametrize(
    ("kind", "left", "right"),
    [
        (Kind.NUMERIC, Decimal("12.30"), Decimal("12.31")),
        (Kind.TIMESTAMPTZ, dt.datetime(2024, 5, 1, 12, tzinfo=UTC), 1714564800000001),
        (Kind.TIMESTAMP, dt.datetime(2024, 5, 1, 12), dt.datetime(2024, 5, 1, 12, 0, 0, 1)),
        (Kind.JSONB, '{"a": 1}', '{"a": "1"}'),
        (Kind.JSONB, '{"a": true}', '{"a": 1}'),  # a boolean is not the number 1
        (Kind.INT_ARRAY, [1, None], [1, 0]),
        (Kind.REAL, 0.1, 0.2),
        (Kind.BYTEA, b"\x00", b""),
    ],
)
def test_different_values_stay_different(kind: Kind, left: object, right: object) -> None:
    assert canonical(kind, left) != canonical(kind, right)


def test_wrong_shapes_are_rejected() -> None:
    with pytest.raises(TypeError):
        canonical(Kind.INTEGER, True)
    with pytest.raises(TypeError):
        canonical(Kind.DATE, dt.datetime(2024, 1, 1))
    with pytest.raises(TypeError):
        canonical(Kind.BOOLEAN, 1)
    assert canonical(Kind.INTEGER, None) is None


def test_json_value_orders_keys_recursively() -> None:
    assert json_value({"b": {"d": 1, "c": [2]}, "a": None}) == json_value(
        '{"a": null, "b": {"c": [2.0], "d": 1.00}}'
    )


rows = st.lists(
    st.tuples(st.integers(0, 50), st.text(max_size=5), st.none() | st.integers()), max_size=20
)


@given(rows, st.randoms())
def test_checksum_ignores_order_but_sees_duplicates(
    data: list[tuple[object, ...]], rnd: object
) -> None:
    shuffled = list(data)
    rnd.shuffle(shuffled)  # type: ignore[attr-defined]
    assert checksum(shuffled) == checksum(data)
    if data:
        assert checksum([*data, data[0], data[0]]) != checksum(data)


def test_canonical_row_follows_column_order_and_treats_absent_as_null() -> None:
    columns = [Column("b", Kind.INTEGER), Column("a", Kind.MONEY)]
    assert canonical_row(columns, {"a": Decimal("1.10"), "b": 7}) == (7, "1.1")
    assert canonical_row(columns, {"b": 7}) == (7, None)
