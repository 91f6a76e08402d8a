"""Table comparison: equal tables pass on checksums; each kind of difference is found."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from typing import Any

import pytest

from icefjord.demo.model import Column, Kind
from icefjord.demo.plan import Planner, WorkloadSpec
from icefjord.demo.verify import (
    IcebergRows,
    SourceTable,
    compare_table,
    source_from_model,
    verify,
)

pytestmark = pytest.mark.unit

COLUMNS = (
    Column("id", Kind.BIGINT, nullable=False),
    Column("price", Kind.MONEY),
    Column("at", Kind.TIMESTAMPTZ),
    Column("doc", Kind.JSONB),
)
T0 = dt.datetime(2024, 5, 1, 12, tzinfo=dt.UTC)


def source(rows: list[dict[str, Any]]) -> SourceTable:
    return SourceTable("shop", "items", COLUMNS, ("id",), rows)


def pg_row(i: int) -> dict[str, Any]:
    return {
        "id": i,
        "price": Decimal(f"{i}.50"),
        "at": T0 + dt.timedelta(seconds=i),
        "doc": f'{{"n": {i}, "tags": ["a"]}}',
    }


def iceberg_row(i: int) -> dict[str, Any]:
    """The same row as Spark returns it: money as decimal text, instants as micros, JSON
    with other whitespace, plus the writer's metadata column."""
    micros = int((T0 + dt.timedelta(seconds=i)).timestamp()) * 1_000_000
    return {"id": i, "price": f"{i}.5", "at": micros, "doc": f'{{"tags":["a"],"n":{i}.0}}'}


def iceberg(rows: list[dict[str, Any]], columns: set[str] | None = None) -> IcebergRows:
    return IcebergRows(frozenset(columns or {c.name for c in COLUMNS}), rows)


def test_equal_tables_match_on_count_and_checksum() -> None:
    report = compare_table(
        source([pg_row(i) for i in range(5)]), iceberg([iceberg_row(i) for i in reversed(range(5))])
    )
    assert report.ok
    assert report.source_checksum == report.iceberg_checksum and report.iceberg_rows == 5
    assert report.samples == ()


def test_missing_extra_differing_and_duplicate_keys_are_counted() -> None:
    changed = iceberg_row(2) | {"price": "2.51"}
    rows = [iceberg_row(0), iceberg_row(1), iceberg_row(1), changed, iceberg_row(9)]
    report = compare_table(source([pg_row(i) for i in range(4)]), iceberg(rows))
    assert not report.ok
    assert (
        report.missing_keys,
        report.extra_keys,
        report.differing_keys,
        report.duplicate_keys,
    ) == (1, 1, 1, 1)
    text = "\n".join(report.samples)
    assert "key (3,) missing" in text and "(9,)" in text and "appears 2 times" in text
    assert "key (2,) differs in price" in text


def test_missing_table_and_missing_column() -> None:
    missing = compare_table(source([pg_row(1)]), None)
    assert missing.table_missing and missing.missing_keys == 1 and not missing.ok
    rows = [{k: v for k, v in iceberg_row(1).items() if k != "doc"}]
    no_doc = compare_table(source([pg_row(1)]), iceberg(rows, {"id", "price", "at"}))
    assert no_doc.missing_columns == ("doc",) and not no_doc.ok


def test_a_value_of_the_wrong_type_in_iceberg_is_a_difference_not_a_crash() -> None:
    bad = iceberg_row(1) | {"at": "not a timestamp"}
    report = compare_table(source([pg_row(1)]), iceberg([bad]))
    assert report.differing_keys == 1 and "at:" in report.samples[0]


def test_verify_compares_every_model_table() -> None:
    planner = Planner(WorkloadSpec(rate=50, duration_s=2, initial_rows=3))
    for _ in planner.seed():
        pass
    tables = source_from_model(planner.model, "shop")
    assert [t.identifier for t in tables] == ["shop.customers", "shop.orders", "shop.payments"]
    by_name = {t.name: t for t in tables}

    def read(namespace: str, table: str) -> IcebergRows | None:
        assert namespace == "shop"
        if table == "payments":
            return None
        t = by_name[table]
        return IcebergRows(frozenset(c.name for c in t.columns), list(t.rows))

    report = verify(tables, read)
    assert [t.ok for t in report.tables] == [True, True, False]
    assert not report.ok
