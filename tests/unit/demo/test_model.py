"""Demo table definitions: DDL text and reading PostgreSQL's catalog types back."""

from __future__ import annotations

import pytest

from icefjord.demo.model import (
    CUSTOMER_TIER,
    CUSTOMERS,
    INITIAL_TABLES,
    PAYMENTS,
    SHIPMENTS,
    Column,
    Kind,
    add_column_sql,
    create_enum_sql,
    create_table_sql,
    kind_from_pg,
    widen_column_sql,
)

pytestmark = pytest.mark.unit


def test_create_table_has_types_not_null_key_and_the_default_replica_identity() -> None:
    [create] = create_table_sql("shop", PAYMENTS)
    assert create.startswith("CREATE TABLE shop.payments (order_id uuid NOT NULL, seq integer")
    assert "amount numeric(10,2) NOT NULL" in create
    assert "paid_at timestamp(3)," in create
    assert "fx_rate double precision," in create
    assert "score numeric," in create
    assert create.endswith("PRIMARY KEY (order_id, seq))")
    assert "tier shop.customer_tier NOT NULL" in create_table_sql("shop", CUSTOMERS)[0]


def test_schema_changes_and_enums() -> None:
    assert add_column_sql("s", "customers", Column("n", Kind.TEXT)) == (
        "ALTER TABLE s.customers ADD COLUMN n text"
    )
    assert widen_column_sql("s", "orders", "quantity", Kind.BIGINT) == (
        "ALTER TABLE s.orders ALTER COLUMN quantity TYPE bigint"
    )
    assert create_enum_sql("s", CUSTOMER_TIER) == (
        "CREATE TYPE s.customer_tier AS ENUM ('bronze', 'silver', 'gold', 'platinum')"
    )
    with pytest.raises(ValueError):
        create_table_sql("bad name; drop", SHIPMENTS)


@pytest.mark.parametrize(
    ("formatted", "is_enum", "kind", "precision", "scale"),
    [
        ("numeric(12,2)", False, Kind.NUMERIC, 12, 2),
        ("numeric", False, Kind.NUMERIC_ANY, None, None),
        ("timestamp(3) without time zone", False, Kind.TIMESTAMP, 3, None),
        ("timestamp without time zone", False, Kind.TIMESTAMP, 6, None),
        ("timestamp with time zone", False, Kind.TIMESTAMPTZ, None, None),
        ("time without time zone", False, Kind.TIME, None, None),
        ("double precision", False, Kind.DOUBLE, None, None),
        ("integer[]", False, Kind.INT_ARRAY, None, None),
        ("character varying(20)", False, Kind.TEXT, None, None),
        ("shop.customer_tier", True, Kind.ENUM, None, None),
        ("money", False, Kind.MONEY, None, None),
    ],
)
def test_kind_from_pg(
    formatted: str, is_enum: bool, kind: Kind, precision: int | None, scale: int | None
) -> None:
    column = kind_from_pg("c", formatted, is_enum, nullable=True)
    assert (column.kind, column.precision, column.scale) == (kind, precision, scale)


def test_every_demo_column_type_reads_back_as_itself() -> None:
    for table in (*INITIAL_TABLES, SHIPMENTS):
        for column in table.columns:
            rendered = column.pg_type("shop")
            formatted = {
                "timestamp(6)": "timestamp without time zone",
                "timestamp(3)": "timestamp(3) without time zone",
                "timestamptz": "timestamp with time zone",
                "time": "time without time zone",
            }.get(rendered, rendered)
            back = kind_from_pg(column.name, formatted, column.kind == Kind.ENUM, True)
            assert back.kind == column.kind, column


def test_unknown_types_are_refused() -> None:
    with pytest.raises(ValueError):
        kind_from_pg("g", "geometry", False, True)
