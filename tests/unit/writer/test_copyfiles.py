"""Conforming a bulk load's copy to its table with Arrow (copyfiles.py)."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pyarrow as pa
import pytest

from services.iceberg_writer.copyfiles import CopyMismatchError, conform, same_type
from services.iceberg_writer.files import writable_scheme

pytestmark = pytest.mark.unit

UTC = dt.UTC


def table_schema() -> pa.Schema:
    """As pyiceberg renders a table: large types, field ids, required keys."""

    def field(name: str, kind: pa.DataType, field_id: int, nullable: bool = True) -> pa.Field:
        return pa.field(name, kind, nullable=nullable, metadata={"PARQUET:field_id": str(field_id)})

    return pa.schema(
        [
            field("id", pa.int64(), 1, nullable=False),
            field("name", pa.large_string(), 2),
            field("amount", pa.decimal128(12, 2), 3),
            field("tags", pa.large_list(pa.int32()), 4),
            field("at", pa.timestamp("us", "UTC"), 5),
            field("nickname", pa.large_string(), 6),
            field("_op", pa.large_string(), 7),
            field("_position", pa.large_string(), 8),
            field("_source_ts", pa.timestamp("us", "UTC"), 9),
        ]
    )


def copy() -> pa.Table:
    return pa.table(
        {
            "at": pa.array(
                [dt.datetime(2026, 1, 1, tzinfo=UTC), None], pa.timestamp("us", "+00:00")
            ),
            "id": pa.array([1, 2], pa.int64()),
            "name": pa.array(["a", "ü"], pa.string()),
            "amount": pa.array([Decimal("1.50"), None], pa.decimal128(12, 2)),
            "tags": pa.array([[1, 2], None], pa.list_(pa.int32())),
        }
    )


METADATA = {
    "_op": "r",
    "_position": "0" * 20,
    "_source_ts": dt.datetime(2026, 11, 25, tzinfo=UTC),
}


def test_the_copy_takes_the_tables_order_field_ids_and_the_metadata_values() -> None:
    out = conform(copy(), table_schema(), METADATA)
    assert out.schema.equals(table_schema(), check_metadata=True)
    assert out.column("id").to_pylist() == [1, 2]
    assert out.column("name").to_pylist() == ["a", "ü"]
    assert out.column("amount").to_pylist() == [Decimal("1.50"), None]
    assert out.column("tags").to_pylist() == [[1, 2], None]
    assert out.column("at").to_pylist() == [dt.datetime(2026, 1, 1, tzinfo=UTC), None]
    assert out.column("nickname").to_pylist() == [None, None]  # the copy lacks it
    assert out.column("_op").to_pylist() == ["r", "r"]
    assert out.column("_position").to_pylist() == ["0" * 20] * 2
    assert out.column("_source_ts").to_pylist() == [METADATA["_source_ts"]] * 2


def test_a_column_the_table_lacks_makes_the_copy_wait() -> None:
    extra = copy().append_column("loyalty_points", pa.array([1, 2], pa.int32()))
    with pytest.raises(CopyMismatchError, match="columns the table lacks: loyalty_points"):
        conform(extra, table_schema(), METADATA)


def test_a_column_of_another_type_makes_the_copy_wait_rather_than_overflow() -> None:
    wider = copy().set_column(1, "id", pa.array([1, 2], pa.int64()))
    narrow = table_schema().set(0, pa.field("id", pa.int32(), nullable=False))
    with pytest.raises(CopyMismatchError, match=r"id \(int64, table int32\)"):
        conform(wider, narrow, METADATA)


@pytest.mark.parametrize(
    ("left", "right", "same"),
    [
        (pa.string(), pa.large_string(), True),
        (pa.binary(), pa.large_binary(), True),
        (pa.list_(pa.string()), pa.large_list(pa.large_string()), True),
        (pa.timestamp("us", "+00:00"), pa.timestamp("us", "UTC"), True),
        (pa.timestamp("us"), pa.timestamp("us", "UTC"), False),
        (pa.int32(), pa.int64(), False),
        (pa.decimal128(12, 2), pa.decimal128(14, 2), False),
    ],
)
def test_types_are_the_same_when_they_store_the_same_iceberg_type(
    left: pa.DataType, right: pa.DataType, same: bool
) -> None:
    assert same_type(left, right) is same


def test_the_writer_writes_its_own_files_on_local_disk_and_object_stores() -> None:
    assert writable_scheme("file:///w/db/t")
    assert writable_scheme("/w/db/t")
    assert writable_scheme("s3://bucket/db/t")
    assert writable_scheme("s3a://bucket/db/t")
    assert not writable_scheme("hdfs://namenode/db/t")
