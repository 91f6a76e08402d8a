"""A decoded change record becomes a Change, and a batch's changes its staging table."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pyarrow as pa
import pytest

from services.iceberg_writer.changes import Change, Op
from services.iceberg_writer.records import change_of, staging_table
from services.iceberg_writer.types import STAGING_FLAG, UNCHANGED_COLUMNS, MetadataColumns

pytestmark = pytest.mark.unit


def record(op: Any, **fields: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "op": op,
        "position": "0000000000000042",
        "source_ts_ms": 1_700_000_000_123,
        "key": {"region": "eu", "id": 7},
        "after": {"region": "eu", "id": 7, "name": "Åsa"},
    }
    base.update(fields)
    return base


def test_a_record_becomes_a_change_with_its_key_in_column_order_and_converted() -> None:
    converters = {"id": lambda v: v * 10}
    change = change_of(record("UPDATE"), "shop.o", ("id", "region"), converters, "t", 2, 9, 5)
    assert change == Change(
        table="shop.o",
        op=Op.UPDATE,
        position="0000000000000042",
        source_ts_ms=1_700_000_000_123,
        key=(70, "eu"),
        row={"region": "eu", "id": 7, "name": "Åsa"},
        topic="t",
        partition=2,
        offset=9,
        schema_id=5,
        unchanged=None,
    )


def test_only_an_update_keeps_the_columns_the_source_left_out() -> None:
    update = change_of(record("UPDATE", unchanged=["name"]), "t", ("id",), {}, "t", 0, 0, 1)
    create = change_of(record("CREATE", unchanged=["name"]), "t", ("id",), {}, "t", 0, 0, 1)
    assert update.unchanged == ("name",)
    assert create.unchanged is None


def test_a_truncate_has_no_key_and_a_delete_keeps_its_key() -> None:
    truncate = change_of(record("TRUNCATE", key=None, after=None), "t", ("id",), {}, "t", 0, 0, 1)
    delete = change_of(record("DELETE", after=None), "t", ("id",), {}, "t", 0, 0, 1)
    assert (truncate.op, truncate.key) == (Op.TRUNCATE, ())
    assert (delete.op, delete.key, delete.row) == (Op.DELETE, (7,), None)


@pytest.mark.parametrize("op", ["MERGE", "update", None, 3])
def test_an_unknown_operation_is_a_value_error(op: Any) -> None:
    with pytest.raises(ValueError, match="is not a valid Op"):
        change_of(record(op), "t", ("id",), {}, "t", 0, 0, 1)


def test_a_missing_key_column_or_field_is_a_key_error() -> None:
    with pytest.raises(KeyError):
        change_of(record("CREATE", key={"region": "eu"}), "t", ("id",), {}, "t", 0, 0, 1)
    incomplete = record("CREATE")
    del incomplete["position"]
    with pytest.raises(KeyError):
        change_of(incomplete, "t", ("id",), {}, "t", 0, 0, 1)


def change(op: Op, row: dict[str, Any] | None, unchanged: tuple[str, ...] | None = None) -> Change:
    return Change(
        "t", op, "0000000000000042", 1_700_000_000_123, (7,), row, "t", 0, 0, 1, unchanged
    )


def _schema(*names: str, unchanged: bool = False) -> pa.Schema:
    types = {"id": pa.int64(), "_ts": pa.timestamp("us", tz="UTC"), STAGING_FLAG: pa.bool_()}
    fields = [pa.field(name, types.get(name, pa.string())) for name in names]
    if unchanged:
        fields.append(pa.field(UNCHANGED_COLUMNS, pa.list_(pa.string())))
    return pa.schema(fields)


def test_the_staging_table_carries_the_converted_row_its_key_and_the_metadata() -> None:
    schema = _schema("id", "name", "opens", "missing", "_op", "_pos", "_ts", STAGING_FLAG,
                     unchanged=True)  # fmt: skip
    table = staging_table(
        [
            change(Op.UPDATE, {"id": 8, "name": "Åsa", "opens": 5, "other": 1}, ("note",)),
            change(Op.DELETE, {"id": 7, "name": "gone"}),
        ],
        schema,
        ("id",),
        {"opens": str, "missing": str},
        MetadataColumns(op="_op", position="_pos", source_ts="_ts"),
    )
    when = dt.datetime(2023, 11, 14, 22, 13, 20, 123000, tzinfo=dt.UTC)
    assert table.schema == schema
    assert table.to_pylist() == [
        {
            "id": 7,  # the key wins over the row's own value
            "name": "Åsa",
            "opens": "5",
            "missing": None,  # a converter applies only to a value the row has
            "_op": "UPDATE",
            "_pos": "0000000000000042",
            "_ts": when,
            STAGING_FLAG: False,
            UNCHANGED_COLUMNS: ["note"],
        },
        {
            "id": 7,
            "name": None,  # a delete carries its key only
            "opens": None,
            "missing": None,
            "_op": "DELETE",
            "_pos": "0000000000000042",
            "_ts": when,
            STAGING_FLAG: True,
            UNCHANGED_COLUMNS: None,
        },
    ]


def test_metadata_columns_that_are_off_are_left_out() -> None:
    schema = _schema("id", "_pos", STAGING_FLAG)
    table = staging_table(
        [change(Op.CREATE, {"id": 7})],
        schema,
        ("id",),
        {},
        MetadataColumns(op=None, position="_pos", source_ts=""),
    )
    assert table.to_pylist() == [{"id": 7, "_pos": "0000000000000042", STAGING_FLAG: False}]


def test_an_empty_batch_is_an_empty_table_of_the_schema() -> None:
    schema = _schema("id", "_op", "_pos", "_ts", STAGING_FLAG)
    table = staging_table([], schema, ("id",), {}, MetadataColumns("_op", "_pos", "_ts"))
    assert (table.num_rows, table.schema) == (0, schema)
