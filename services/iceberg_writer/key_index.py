"""Where each key's stored row is: the data file and row position the upsert path deletes.

An upsert replaces a key's stored row. Iceberg records that as a delete of the row's
position in the file holding it: a deletion vector in format v3 (``deletion_vectors.py``),
a position delete file in format v2. So the writer must know the file and position of
every key it touches. The index reads them from the table itself:

- the live data files, their vectors and the position delete files come from the
  snapshot's manifests, each manifest and each position delete file read once (files
  never change), so that a position deleted already is not deleted again;
- each data file's key columns are read once, by field id (a file never changes, and
  the writer's own files are remembered as they are written), with the lowest and highest
  key of a one-column key so that files outside a batch's key range are skipped;
- a batch's keys are looked up in every other file with one hash lookup over all of them.

Because everything comes from the snapshot the commit starts from, a compaction, a Spark
MERGE or a restart in between needs nothing special: the next lookup reads the manifests
the new snapshot added. Memory is the key columns of the live files (8 bytes a row for a
``bigint`` key); files that leave the table leave the index.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pyiceberg.avro.file import AvroFile
from pyiceberg.io import FileIO
from pyiceberg.manifest import (
    DATA_FILE_TYPE,
    MANIFEST_ENTRY_SCHEMAS,
    DataFile,
    DataFileContent,
    FileFormat,
    ManifestEntry,
    ManifestEntryStatus,
    ManifestFile,
    read_manifest_list,
)
from pyiceberg.typedef import Record
from pyroaring import BitMap64

from services.iceberg_writer.deletion_vectors import decode_vector

__all__ = ["KeyIndex", "LiveFile", "StoredVector"]

_FIELD_ID = b"PARQUET:field_id"
_V3 = 3
_FIELDS = {f.name: i for i, f in enumerate(DATA_FILE_TYPE[_V3].fields)}


@dataclass(frozen=True, slots=True)
class _Entry:
    """A live manifest entry: the file, and its manifest's partition spec."""

    file: DataFile
    spec_id: int

    def field(self, name: str) -> Any:
        return self.file[_FIELDS[name]]


def _live_entries(io: FileIO, manifest: ManifestFile) -> list[_Entry]:
    """The live entries of ``manifest``, read with format v3's fields: pyiceberg's own
    ``fetch_manifest_entry`` reads v2's, without a vector's offset and length."""
    with AvroFile[ManifestEntry](
        io.new_input(manifest.manifest_path),
        MANIFEST_ENTRY_SCHEMAS[_V3],
        read_types={-1: ManifestEntry, 2: DataFile},
        read_enums={0: ManifestEntryStatus, 101: FileFormat, 134: DataFileContent},
    ) as reader:
        return [
            _Entry(entry.data_file, manifest.partition_spec_id)
            for entry in reader
            if entry.status != ManifestEntryStatus.DELETED
        ]


@dataclass(frozen=True, slots=True)
class StoredVector:
    """A data file's deletion vector as the table's manifests record it."""

    location: str
    """The Puffin file."""
    size: int
    offset: int
    length: int
    cardinality: int


@dataclass(frozen=True, slots=True)
class LiveFile:
    """A data file of the snapshot, with its deletion vector if it has one (format v3)."""

    location: str
    spec_id: int
    partition: Record
    rows: int
    vector: StoredVector | None


@dataclass(frozen=True, slots=True)
class _Keys:
    table: pa.Table
    """The key columns, one row per position, named by key."""
    low: Any
    high: Any


class KeyIndex:
    """The key positions of one table, for the upsert path's deletes."""

    def __init__(self, io: FileIO, keys: Sequence[str], key_ids: Sequence[int]) -> None:
        self._io = io
        self._names = list(keys)
        self._ids = list(key_ids)
        self._manifests: dict[str, list[_Entry]] = {}
        self._keys: dict[str, _Keys] = {}
        self._vectors: dict[tuple[str, int], BitMap64] = {}
        self._position_files: dict[str, dict[str, BitMap64]] = {}
        """Format v2's position delete files: the positions each deletes, by data file."""

    def serves(self, keys: Sequence[str], key_ids: Sequence[int]) -> bool:
        """Whether this index is of the key ``keys`` with field ids ``key_ids``."""
        return self._names == list(keys) and self._ids == list(key_ids)

    def live_files(self, manifest_list: str) -> list[LiveFile]:
        """The data files of the snapshot whose manifest list is ``manifest_list``.

        Position delete files (format v2) are read once each, for :meth:`deleted`."""
        manifests = list(read_manifest_list(self._io.new_input(manifest_list)))
        present: dict[str, list[_Entry]] = {}
        for manifest in manifests:
            entries = self._manifests.get(manifest.manifest_path)
            if entries is None:
                entries = _live_entries(self._io, manifest)
            present[manifest.manifest_path] = entries
        self._manifests = present
        data: list[_Entry] = []
        vectors: dict[str, StoredVector] = {}
        positional: list[str] = []
        for entries in present.values():
            for entry in entries:
                file = entry.file
                if file.content == DataFileContent.DATA:
                    data.append(entry)
                elif file.content == DataFileContent.POSITION_DELETES:
                    referenced = entry.field("referenced_data_file")
                    if file.file_format != FileFormat.PUFFIN:
                        positional.append(file.file_path)
                        continue
                    vectors[referenced] = StoredVector(
                        file.file_path,
                        file.file_size_in_bytes,
                        int(entry.field("content_offset")),
                        int(entry.field("content_size_in_bytes")),
                        file.record_count,
                    )
        live = [
            LiveFile(
                e.file.file_path,
                e.spec_id,
                e.file.partition,
                e.file.record_count,
                vectors.get(e.file.file_path),
            )
            for e in data
        ]
        locations = {f.location for f in live}
        self._keys = {k: v for k, v in self._keys.items() if k in locations}
        kept = {(v.location, v.offset) for v in vectors.values()}
        self._vectors = {k: v for k, v in self._vectors.items() if k in kept}
        self._position_files = {p: self._positions_of(p) for p in positional}
        return live

    def remember_deletes(self, location: str, deleted: Mapping[str, BitMap64]) -> None:
        """The positions a position delete file just written at ``location`` deletes."""
        self._position_files[location] = dict(deleted)

    def deleted(self, file: LiveFile) -> BitMap64:
        """The positions of ``file`` that its vector or position delete files delete."""
        dead = BitMap64(self.vector(file.vector)) if file.vector is not None else BitMap64()
        for positions in self._position_files.values():
            more = positions.get(file.location)
            if more is not None:
                dead |= more
        return dead

    def _positions_of(self, location: str) -> dict[str, BitMap64]:
        cached = self._position_files.get(location)
        if cached is None:
            with self._io.new_input(location).open() as source:
                rows = pq.read_table(source, columns=["file_path", "pos"])
            grouped = rows.group_by("file_path").aggregate([("pos", "list")])
            cached = {
                path: BitMap64(positions)
                for path, positions in zip(
                    grouped.column("file_path").to_pylist(),
                    grouped.column("pos_list").to_pylist(),
                    strict=True,
                )
            }
        return cached

    def remember(self, location: str, keys: pa.Table) -> None:
        """The key columns of a data file just written at ``location``, in its row order."""
        self._keys[location] = self._summarised(keys.select(self._names))

    def positions(self, files: Iterable[LiveFile], keys: pa.Table) -> dict[str, BitMap64]:
        """The positions of ``keys``' stored rows that no vector deletes yet, per data
        file location (files without such a position left out)."""
        batch = keys.select(self._names)
        if batch.num_rows == 0:
            return {}
        candidates = [(f, self._stored(f)) for f in files]
        if len(self._names) == 1:
            values = batch.column(0).combine_chunks()
            extremes = pc.min_max(values)
            low, high = extremes["min"].as_py(), extremes["max"].as_py()
            candidates = [
                (f, k) for f, k in candidates if k.low is None or not (k.high < low or k.low > high)
            ]
        found: dict[str, BitMap64] = {}
        if not candidates:
            return found
        if len(self._names) == 1:
            # Arrays, not chunked arrays: pyarrow converts those value by value in Python.
            chunks = [c for _, k in candidates for c in k.table.column(0).cast(values.type).chunks]
            column = pa.chunked_array(chunks, values.type)
            mask = pc.is_in(column, value_set=values)
            for (file, _), chunk in zip(candidates, _chunks(mask, candidates), strict=True):
                hits = pc.indices_nonzero(chunk)
                if len(hits):
                    found[file.location] = BitMap64(hits.to_numpy())
        else:
            for file, stored in candidates:
                hits = _joined(stored.table, batch)
                if len(hits):
                    found[file.location] = BitMap64(hits.to_numpy())
        by_location = {f.location: f for f, _ in candidates}
        fresh: dict[str, BitMap64] = {}
        for location, hits in found.items():
            new = hits - self.deleted(by_location[location])
            if new:
                fresh[location] = new
        return fresh

    def vector(self, stored: StoredVector) -> BitMap64:
        """The positions ``stored`` deletes."""
        cached = self._vectors.get((stored.location, stored.offset))
        if cached is None:
            with self._io.new_input(stored.location).open() as source:
                source.seek(stored.offset)
                cached = decode_vector(source.read(stored.length))
            self._vectors[(stored.location, stored.offset)] = cached
        return cached

    def _stored(self, file: LiveFile) -> _Keys:
        cached = self._keys.get(file.location)
        if cached is None:
            with self._io.new_input(file.location).open() as source:
                parquet = pq.ParquetFile(source)
                by_id = {
                    int(f.metadata[_FIELD_ID]): f.name
                    for f in parquet.schema_arrow
                    if f.metadata and _FIELD_ID in f.metadata
                }
                missing = [n for n, i in zip(self._names, self._ids, strict=True) if i not in by_id]
                if missing:
                    raise ValueError(f"data file {file.location} lacks key columns {missing}")
                read = parquet.read(columns=[by_id[i] for i in self._ids])
            cached = self._summarised(read.rename_columns(self._names))
            self._keys[file.location] = cached
        return cached

    def _summarised(self, keys: pa.Table) -> _Keys:
        if len(self._names) != 1 or keys.num_rows == 0:
            return _Keys(keys, None, None)
        try:
            extremes = pc.min_max(keys.column(0))
        except pa.ArrowNotImplementedError:
            return _Keys(keys, None, None)
        return _Keys(keys, extremes["min"].as_py(), extremes["max"].as_py())


def _chunks(mask: pa.ChunkedArray, candidates: Sequence[tuple[LiveFile, _Keys]]) -> list[Any]:
    """``mask`` cut back into one array per candidate file (the lookup may re-chunk)."""
    flat = mask.combine_chunks()
    cuts: list[Any] = []
    start = 0
    for _, stored in candidates:
        cuts.append(flat.slice(start, stored.table.num_rows))
        start += stored.table.num_rows
    return cuts


def _joined(stored: pa.Table, batch: pa.Table) -> pa.Array:
    """The positions in ``stored`` of the rows whose composite key is in ``batch``."""
    names = batch.column_names
    conformed = pa.Table.from_arrays(
        [stored.column(n).cast(batch.column(n).type) for n in names], names=names
    ).append_column("__position", pa.array(range(stored.num_rows), pa.uint64()))
    matched = conformed.join(batch, keys=names, join_type="inner")
    return matched.column("__position").combine_chunks()
