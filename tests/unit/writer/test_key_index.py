"""The key index's lookups over real Parquet files on the local file system."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from pyiceberg.io.pyarrow import PyArrowFileIO
from pyiceberg.typedef import Record
from pyroaring import BitMap64

from services.iceberg_writer.deletion_vectors import puffin_file
from services.iceberg_writer.key_index import KeyIndex, LiveFile, StoredVector


def data_file(path: Path, ids: list[int], regions: list[str] | None = None) -> str:
    """A data file whose key columns carry Iceberg field ids (1: id, 2: region), as
    the writer and Spark write them; columns named otherwise, as after a rename."""
    fields = [pa.field("renamed_id", pa.int64(), metadata={b"PARQUET:field_id": b"1"})]
    columns: list[pa.Array] = [pa.array(ids, pa.int64())]
    if regions is not None:
        fields.append(pa.field("region", pa.string(), metadata={b"PARQUET:field_id": b"2"}))
        columns.append(pa.array(regions))
    fields.append(pa.field("v", pa.string(), metadata={b"PARQUET:field_id": b"3"}))
    columns.append(pa.array(["x"] * len(ids)))
    pq.write_table(pa.Table.from_arrays(columns, schema=pa.schema(fields)), path)
    return f"file://{path}"


def live(location: str, rows: int, vector: StoredVector | None = None) -> LiveFile:
    return LiveFile(location, 0, Record(), rows, vector)


def test_positions_are_found_in_every_file_that_holds_a_key(tmp_path: Path) -> None:
    a = data_file(tmp_path / "a.parquet", [1, 2, 3, 4])
    b = data_file(tmp_path / "b.parquet", [10, 3, 11])
    c = data_file(tmp_path / "c.parquet", [100, 101])  # outside the batch's key range
    index = KeyIndex(PyArrowFileIO(), ["id"], [1])
    files = [live(a, 4), live(b, 3), live(c, 2)]
    found = index.positions(files, pa.table({"id": pa.array([3, 11, 50], pa.int64())}))
    assert found == {a: BitMap64([2]), b: BitMap64([1, 2])}


def test_positions_a_vector_already_deletes_are_left_out(tmp_path: Path) -> None:
    a = data_file(tmp_path / "a.parquet", [1, 2, 3])
    b = data_file(tmp_path / "b.parquet", [2, 5])
    puffin = puffin_file([(a, BitMap64([1])), (b, BitMap64([0]))])
    (tmp_path / "dv.puffin").write_bytes(puffin.content)
    vectors = [
        StoredVector(f"file://{tmp_path}/dv.puffin", len(puffin.content), p.offset, p.length, 1)
        for p in puffin.blobs
    ]
    index = KeyIndex(PyArrowFileIO(), ["id"], [1])
    files = [live(a, 3, vectors[0]), live(b, 2, vectors[1])]
    # Key 2 is at a:1 (deleted) and b:0 (deleted): nothing new in either file.
    assert index.positions(files, pa.table({"id": pa.array([2], pa.int64())})) == {}
    assert index.positions(files, pa.table({"id": pa.array([2, 3], pa.int64())})) == {
        a: BitMap64([2])
    }


def test_composite_keys_are_matched_on_every_column(tmp_path: Path) -> None:
    a = data_file(tmp_path / "a.parquet", [1, 1, 2], ["eu", "us", "eu"])
    index = KeyIndex(PyArrowFileIO(), ["id", "region"], [1, 2])
    batch = pa.table({"id": pa.array([1, 2], pa.int64()), "region": ["us", "us"]})
    assert index.positions([live(a, 3)], batch) == {a: BitMap64([1])}


def test_a_file_the_writer_wrote_is_remembered_not_read(tmp_path: Path) -> None:
    index = KeyIndex(PyArrowFileIO(), ["id"], [1])
    location = f"file://{tmp_path}/never-written.parquet"
    index.remember(location, pa.table({"id": pa.array([7, 8], pa.int64()), "v": ["a", "b"]}))
    found = index.positions([live(location, 2)], pa.table({"id": pa.array([8], pa.int64())}))
    assert found == {location: BitMap64([1])}


def test_positions_a_position_delete_file_deletes_are_left_out(tmp_path: Path) -> None:
    a = data_file(tmp_path / "a.parquet", [1, 2, 3])
    index = KeyIndex(PyArrowFileIO(), ["id"], [1])
    index.remember_deletes(f"file://{tmp_path}/pos-delete.parquet", {a: BitMap64([0, 2])})
    batch = pa.table({"id": pa.array([1, 2, 3], pa.int64())})
    assert index.positions([live(a, 3)], batch) == {a: BitMap64([1])}
    assert index.deleted(live(a, 3)) == BitMap64([0, 2])
