"""The writer's own files in a table's location, on whatever storage holds the table.

The bulk copy and the upsert path write Parquet files with Arrow and commit them through
Iceberg's Java API, skipping Spark's jobs. The files go where Iceberg's own writers would
put them, ``<table location>/data/``, through pyarrow's file system for the location's
scheme: the local file system, or S3 (and the other stores pyiceberg's ``PyArrowFileIO``
serves) configured from the properties of the table's own Java ``FileIO``, so the writer
uses exactly the endpoint and credentials that Spark uses for the same table.

Iceberg's metrics of each file (counts and bounds, which readers prune with and the
upsert path's position bounds rely on) are read from its footer by the JVM through
Parquet's plain configuration (:class:`_FooterMetrics`). A file for remote storage is
written to a local scratch file first, its metrics read there, and then uploaded: reading
them back from the store through the table's ``FileIO`` costs requests to the store and a
Hadoop ``Configuration`` per file.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from pyiceberg.io.pyarrow import PyArrowFileIO

from shared.spark import java

__all__ = ["TableFiles", "discard_uncommitted", "writable_scheme"]

# The schemes pyiceberg's PyArrowFileIO writes to (``_initialize_fs``).
_SCHEMES = frozenset({"file", "s3", "s3a", "s3n", "gs", "gcs", "abfs", "abfss", "oss"})


def writable_scheme(location: str) -> bool:
    """Whether the writer can put files of its own under ``location``."""
    scheme, _, _ = PyArrowFileIO.parse_location(location)
    return scheme in _SCHEMES


class _FooterMetrics:
    """Iceberg's metrics of local Parquet files, from footers read with Parquet's plain
    configuration. ``ParquetUtil.fileMetrics`` opens each file with default read options,
    which build a Hadoop ``Configuration`` that parses Hadoop's XML defaults out of the jars
    again for every file (several times the cost of reading the footer itself). The Java
    classes are looked up once per JVM."""

    def __init__(self, jvm: Any) -> None:
        parquet = jvm.org.apache.iceberg.shaded.org.apache.parquet
        iceberg = jvm.org.apache.iceberg
        self.client = jvm._gateway_client
        self._options = parquet.ParquetReadOptions.builder(
            parquet.conf.PlainParquetConfiguration()
        ).build()
        self._file = jvm.java.io.File
        self._input = parquet.io.LocalInputFile
        self._open = parquet.hadoop.ParquetFileReader.open
        self._no_field_metrics = jvm.java.util.stream.Stream.empty
        self._metrics = iceberg.parquet.ParquetUtil.footerMetrics
        self._config = iceberg.MetricsConfig.forTable

    def of(self, table: Any, path: str) -> Any:
        reader = self._open(self._input(self._file(path).toPath()), self._options)
        try:
            footer = reader.getFooter()
        finally:
            reader.close()
        return self._metrics(footer, self._no_field_metrics(), self._config(table), None)


_footer_metrics: _FooterMetrics | None = None
_file_ios: dict[frozenset[tuple[str, str]], PyArrowFileIO] = {}


def _local_metrics(jvm: Any, table: Any, path: str) -> Any:
    global _footer_metrics
    if _footer_metrics is None or _footer_metrics.client is not jvm._gateway_client:
        _footer_metrics = _FooterMetrics(jvm)
    return _footer_metrics.of(table, path)


def _file_io(table: Any) -> PyArrowFileIO:
    """pyiceberg's FileIO with the properties of the Java ``table``'s FileIO (endpoint,
    credentials, region); one per distinct set of properties."""
    try:
        properties = {str(k): str(v) for k, v in dict(table.io().properties()).items()}
    except Exception:  # a FileIO without properties (HadoopFileIO before it is used)
        properties = {}
    key = frozenset(properties.items())
    io = _file_ios.get(key)
    if io is None:
        io = _file_ios[key] = PyArrowFileIO(properties)
    return io


@dataclass(frozen=True)
class TableFiles:
    """New files in one Java Iceberg table's ``data/`` directory."""

    jvm: Any
    table: Any
    io: PyArrowFileIO
    """pyiceberg's FileIO for the table (its Java FileIO's properties)."""
    fs: Any
    """pyarrow's file system for the table's location."""
    scheme: str
    netloc: str
    directory: str
    """The data directory as ``fs`` names it (no scheme)."""
    footers: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)
    """Metrics of the remote files written through this object, read before the upload."""

    @classmethod
    def of(cls, jvm: Any, table: Any) -> TableFiles:
        """The files of ``table``. Raises ValueError for a location no file system here
        serves."""
        location = str(table.location()).rstrip("/")
        if not writable_scheme(location):
            raise ValueError(f"no file system for the table location {location}")
        io = _file_io(table)
        scheme, netloc, path = PyArrowFileIO.parse_location(location, io.properties)
        fs = io.fs_by_scheme(scheme, netloc)
        directory = f"{path}/data" if scheme == "file" else f"{netloc}{path}/data"
        return cls(jvm, table, io, fs, scheme, netloc, directory)

    @property
    def local(self) -> bool:
        return self.scheme == "file"

    def new_path(self, prefix: str, suffix: str = ".parquet") -> str:
        """A fresh file's path as ``fs`` names it (partitions are in the metadata, so every
        file goes straight into ``data/``)."""
        return f"{self.directory}/{prefix}-{uuid.uuid4().hex}{suffix}"

    def uri(self, path: str) -> str:
        """The location Iceberg records for ``path``."""
        return f"file://{path}" if self.local else f"{self.scheme}://{path}"

    def write(self, frame: pa.Table, path: str, codec: str | None) -> int:
        """Write ``frame`` as Parquet to ``path``; return its size in bytes."""
        if self.local:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with self.fs.open_output_stream(path) as sink:
                pq.write_table(frame, sink, compression=codec)
                return int(sink.tell())
        with tempfile.NamedTemporaryFile(suffix=".parquet") as scratch:
            pq.write_table(frame, scratch.name, compression=codec)
            self.footers[path] = _local_metrics(self.jvm, self.table, scratch.name)
            with open(scratch.name, "rb") as source, self.fs.open_output_stream(path) as sink:
                shutil.copyfileobj(source, sink, length=1 << 20)
                return int(sink.tell())

    def write_bytes(self, content: bytes, path: str) -> int:
        """Write ``content`` to ``path``; return its size in bytes."""
        if self.local:
            os.makedirs(os.path.dirname(path), exist_ok=True)
        with self.fs.open_output_stream(path) as sink:
            sink.write(content)
        return len(content)

    def metrics(self, path: str) -> Any:
        """Iceberg's metrics of the Parquet file ``path``, by the table's settings."""
        if self.local:
            return _local_metrics(self.jvm, self.table, path)
        if path in self.footers:
            return self.footers.pop(path)
        iceberg = java(self.jvm).org.apache.iceberg
        source = self.table.io().newInputFile(self.uri(path))
        return iceberg.parquet.ParquetUtil.fileMetrics(
            source, iceberg.MetricsConfig.forTable(self.table)
        )

    def remove(self, paths: Sequence[str]) -> None:
        for path in paths:
            with contextlib.suppress(FileNotFoundError):
                self.fs.delete_file(path)


def discard_uncommitted(exc: Exception, files: TableFiles, written: Sequence[str]) -> None:
    """Remove the files of a commit that failed with ``exc``: in no snapshot, they would
    only be orphans. Kept when the commit's outcome is unknown (it may have landed)."""
    if "CommitStateUnknown" in str(exc):
        return
    files.remove(written)
