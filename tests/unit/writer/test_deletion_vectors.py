"""Deletion vectors as Iceberg's Puffin spec lays them out, read back by pyiceberg's own
reader (an implementation independent of the writer's)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pyiceberg.table.deletion_vector import deletion_vectors_from_puffin_file
from pyiceberg.table.puffin import PuffinFile
from pyroaring import BitMap64

from services.iceberg_writer.deletion_vectors import (
    VectorError,
    decode_vector,
    encode_vector,
    puffin_file,
)

# Never empty: the writer writes a vector only where it deletes. pyiceberg 0.12 reads
# positions of one 32-bit key (its arrays fail on an empty key before a used one); Spark
# and Java's reader are tested on real tables (tests/integration).
positions = st.sets(st.integers(min_value=0, max_value=2**32 - 1), min_size=1, max_size=300)
wide = st.sets(st.integers(min_value=0, max_value=2**40), max_size=300)


@given(wide)
def test_a_vector_reads_back_as_written_beyond_32_bits(bitmap: set[int]) -> None:
    assert decode_vector(encode_vector(BitMap64(bitmap))) == BitMap64(bitmap)


@given(st.lists(positions, min_size=1, max_size=4))
def test_pyiceberg_reads_every_vector_of_a_puffin_file(vectors: list[set[int]]) -> None:
    named = [(f"s3://bucket/t/data/f{i}.parquet", BitMap64(v)) for i, v in enumerate(vectors)]
    layout = puffin_file(named)
    read = {
        dv.referenced_data_file: dv.to_vector().to_pylist()
        for dv in deletion_vectors_from_puffin_file(PuffinFile(layout.content))
    }
    assert read == {name: sorted(v) for name, v in named}
    for blob, (name, bitmap) in zip(layout.blobs, named, strict=True):
        assert blob.referenced == name
        assert blob.cardinality == len(bitmap)
        raw = layout.content[blob.offset : blob.offset + blob.length]
        assert decode_vector(raw) == bitmap


def test_the_footer_describes_each_blob_as_the_spec_asks() -> None:
    layout = puffin_file([("file:/t/a.parquet", BitMap64([3, 5]))])
    footer = PuffinFile(layout.content).footer
    (blob,) = footer.blobs
    assert blob.type == "deletion-vector-v1"
    assert (blob.snapshot_id, blob.sequence_number) == (-1, -1)
    assert blob.fields == [2147483645]  # _pos
    assert blob.properties == {"referenced-data-file": "file:/t/a.parquet", "cardinality": "2"}
    assert blob.compression_codec is None
    assert (blob.offset, blob.length) == (layout.blobs[0].offset, layout.blobs[0].length)


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        (lambda b: b[:-1], "length"),
        (lambda b: b[:4] + b"\x00" + b[5:], "magic"),
        (lambda b: b[:-1] + bytes([b[-1] ^ 1]), "checksum"),
        (lambda b: b[:6], "at least 12"),
    ],
)
def test_a_damaged_blob_is_refused_with_its_reason(damage: object, message: str) -> None:
    blob = encode_vector(BitMap64([1, 2, 2**33]))
    assert callable(damage)
    with pytest.raises(VectorError, match=message):
        decode_vector(damage(blob))
