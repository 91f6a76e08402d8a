"""Deletion vectors in Puffin files, as Iceberg's format v3 stores row-level deletes.

A deletion vector marks deleted row positions of ONE data file: a 64-bit Roaring bitmap in
a ``deletion-vector-v1`` blob of a Puffin file (Iceberg's Puffin spec). Every engine that
reads v3 tables applies them (Spark, Trino, pyiceberg, DuckDB); equality deletes, which
the upsert path wrote before, pyiceberg and DuckDB refuse or mis-read.

The blob is: the length of magic and vector (4 bytes, big-endian), the magic ``D1 D3 39
64``, the bitmap in Roaring's portable 64-bit layout (what ``pyroaring.BitMap64`` reads and
writes), and a CRC-32 of magic and bitmap (4 bytes, big-endian). A Puffin file is ``PFA1``,
the blobs, then a footer: ``PFA1``, a JSON payload describing each blob, the payload's size
(4 bytes, little-endian), 4 flag bytes and ``PFA1`` again.

A table holds at most one vector per data file: a new vector for a file that has one is
the union of both, and the commit replaces the old one (``upserts.py``).
"""

from __future__ import annotations

import json
import struct
import zlib
from collections.abc import Sequence
from dataclasses import dataclass

from pyroaring import BitMap64

__all__ = ["Blob", "PuffinLayout", "decode_vector", "encode_vector", "puffin_file"]

PUFFIN_MAGIC = b"PFA1"
VECTOR_MAGIC = bytes.fromhex("d1d33964")
VECTOR_BLOB = "deletion-vector-v1"
ROW_POSITION_FIELD_ID = 2**31 - 1 - 2
"""Iceberg's reserved field id of ``_pos`` (``MetadataColumns.ROW_POSITION``)."""
CREATED_BY = "Icefjord iceberg-writer"


class VectorError(ValueError):
    """Bytes that are not a deletion vector blob."""


def encode_vector(positions: BitMap64) -> bytes:
    """The ``deletion-vector-v1`` blob of ``positions``."""
    body = VECTOR_MAGIC + positions.serialize()
    return struct.pack(">I", len(body)) + body + struct.pack(">I", zlib.crc32(body))


def decode_vector(blob: bytes) -> BitMap64:
    """The positions of a ``deletion-vector-v1`` blob; raises :class:`VectorError` for a
    blob whose length, magic or checksum is wrong."""
    if len(blob) < 12:
        raise VectorError(f"a deletion vector blob has at least 12 bytes, not {len(blob)}")
    (length,) = struct.unpack(">I", blob[:4])
    if length != len(blob) - 8:
        raise VectorError(f"deletion vector length {length} in a blob of {len(blob)} bytes")
    body = blob[4 : 4 + length]
    if body[:4] != VECTOR_MAGIC:
        raise VectorError(f"deletion vector magic {body[:4].hex()}, expected d1d33964")
    (crc,) = struct.unpack(">I", blob[4 + length :])
    if crc != zlib.crc32(body):
        raise VectorError("deletion vector checksum mismatch")
    return BitMap64.deserialize(body[4:])


@dataclass(frozen=True, slots=True)
class Blob:
    """Where one data file's vector sits in a Puffin file, as the table records it."""

    referenced: str
    """The data file's location, exactly as the table's metadata names it."""
    offset: int
    length: int
    cardinality: int


@dataclass(frozen=True, slots=True)
class PuffinLayout:
    """A Puffin file's bytes and its blobs."""

    content: bytes
    blobs: tuple[Blob, ...]


def puffin_file(vectors: Sequence[tuple[str, BitMap64]]) -> PuffinLayout:
    """One Puffin file holding a vector per ``(data file location, positions)``."""
    parts = [PUFFIN_MAGIC]
    offset = len(PUFFIN_MAGIC)
    blobs: list[Blob] = []
    described: list[dict[str, object]] = []
    for referenced, positions in vectors:
        blob = encode_vector(positions)
        parts.append(blob)
        cardinality = len(positions)
        blobs.append(Blob(referenced, offset, len(blob), cardinality))
        described.append(
            {
                "type": VECTOR_BLOB,
                "fields": [ROW_POSITION_FIELD_ID],
                "snapshot-id": -1,
                "sequence-number": -1,
                "offset": offset,
                "length": len(blob),
                "properties": {
                    "referenced-data-file": referenced,
                    "cardinality": str(cardinality),
                },
            }
        )
        offset += len(blob)
    payload = json.dumps(
        {"blobs": described, "properties": {"created-by": CREATED_BY}}, separators=(",", ":")
    ).encode()
    parts += [PUFFIN_MAGIC, payload, struct.pack("<I", len(payload)), bytes(4), PUFFIN_MAGIC]
    return PuffinLayout(b"".join(parts), tuple(blobs))
