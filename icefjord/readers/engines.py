"""One :data:`~icefjord.demo.verify.IcebergReader` per engine an analyst reads Icefjord
tables with, so each can be compared with the source by :func:`~icefjord.demo.verify.verify`.

Every reader returns the table's data columns (the writer's ``_icefjord_*`` columns left
out) as plain Python values in the shapes :func:`~icefjord.demo.canonical.canonical`
accepts, with instants (``timestamptz``) as microseconds since the epoch, as
:func:`~icefjord.demo.verify.spark_reader` does; None when the table does not exist.

Each factory takes ``snapshots``: the snapshot id to read per table (``"ns.table"``), so
every engine can read the same moment of a table that is still being written
(:func:`pin_snapshots`); a table not named there is read at its current snapshot.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from pyiceberg.catalog import Catalog
from pyiceberg.exceptions import NoSuchNamespaceError, NoSuchTableError
from pyiceberg.table import Table

from icefjord.demo.canonical import canonical
from icefjord.demo.model import Kind
from icefjord.demo.verify import METADATA_PREFIX, IcebergReader, IcebergRows, spark_reader
from icefjord.readers.trino import connect
from shared.errors import IcefjordError

Snapshots = Mapping[str, int]
"""The snapshot id to read, per table identifier ``"namespace.table"``."""


class ReaderError(IcefjordError, RuntimeError):
    """An engine could not read a table that exists; the message names engine and cause."""


def pin_snapshots(catalog: Catalog, identifiers: Iterable[str]) -> dict[str, int]:
    """Each table's current snapshot id (tables without a snapshot left out): the moment
    every engine then reads."""
    pinned: dict[str, int] = {}
    for identifier in identifiers:
        snapshot = catalog.load_table(identifier).current_snapshot()
        if snapshot is not None:
            pinned[identifier] = snapshot.snapshot_id
    return pinned


def _load(catalog: Catalog, namespace: str, table: str) -> Table | None:
    try:
        return catalog.load_table(f"{namespace}.{table}")
    except (NoSuchTableError, NoSuchNamespaceError):
        return None


def _instant(value: Any) -> Any:
    """An aware datetime (or pandas Timestamp) as microseconds since the epoch."""
    return canonical(Kind.TIMESTAMPTZ, value)


def _rows(
    names: Sequence[str], tuples: Iterable[Sequence[Any]], instants: frozenset[str] = frozenset()
) -> IcebergRows:
    """Rows as mappings over the data columns; ``instants`` converted to microseconds."""
    keep = [(i, n) for i, n in enumerate(names) if not n.startswith(METADATA_PREFIX)]
    rows = [{n: _instant(row[i]) if n in instants else row[i] for i, n in keep} for row in tuples]
    return IcebergRows(frozenset(n for _, n in keep), rows)


def pyiceberg_arrow(catalog: Catalog, snapshots: Snapshots | None = None) -> IcebergReader:
    """pyiceberg's scan to a PyArrow table (deletion vectors applied by pyiceberg)."""
    import pyarrow as pa

    def read(namespace: str, table: str) -> IcebergRows | None:
        loaded = _load(catalog, namespace, table)
        if loaded is None:
            return None
        arrow = loaded.scan(snapshot_id=(snapshots or {}).get(f"{namespace}.{table}")).to_arrow()
        columns = []
        for field, column in zip(arrow.schema, arrow.columns, strict=True):
            if pa.types.is_timestamp(field.type) and field.type.tz is not None:
                # Exact, and the same shape as Spark's: microseconds, not datetimes.
                column = column.cast(pa.timestamp("us", tz="UTC")).cast(pa.int64())
            columns.append(column)
        names = arrow.schema.names
        return _rows(names, zip(*(c.to_pylist() for c in columns), strict=True))

    return read


def pyiceberg_pandas(catalog: Catalog, snapshots: Snapshots | None = None) -> IcebergReader:
    """pyiceberg's scan to a pandas DataFrame with pyarrow-backed dtypes: NumPy's would
    turn an integer column holding nulls into floats, and big integers lose digits."""
    import pandas as pd

    def read(namespace: str, table: str) -> IcebergRows | None:
        loaded = _load(catalog, namespace, table)
        if loaded is None:
            return None
        scan = loaded.scan(snapshot_id=(snapshots or {}).get(f"{namespace}.{table}"))
        frame = scan.to_pandas(types_mapper=pd.ArrowDtype)
        instants = frozenset(
            str(name)
            for name, dtype in frame.dtypes.items()
            if isinstance(dtype, pd.ArrowDtype)
            and getattr(dtype.pyarrow_dtype, "tz", None) is not None
        )
        names = [str(n) for n in frame.columns]
        tuples = (
            tuple(None if v is pd.NA or v is pd.NaT else v for v in row)
            for row in frame.itertuples(index=False, name=None)
        )
        return _rows(names, tuples, instants)

    return read


def _duckdb_connection() -> Any:
    """An in-memory DuckDB that loads nothing on its own: extensions come from the pinned
    PyPI wheels (:func:`duckdb_extension`), never from DuckDB's download site."""
    import duckdb

    return duckdb.connect(
        config={"autoinstall_known_extensions": False, "autoload_known_extensions": False}
    )


def _duckdb_rows(connection: Any, relation: str) -> IcebergRows:
    """``SELECT`` the data columns of ``relation`` (SQL), instants as ``epoch_us``."""
    described = connection.execute(f"DESCRIBE SELECT * FROM {relation}").fetchall()
    names = [str(r[0]) for r in described if not str(r[0]).startswith(METADATA_PREFIX)]
    select = ", ".join(
        f'epoch_us("{n}") AS "{n}"' if kind == "TIMESTAMP WITH TIME ZONE" else f'"{n}"'
        for n, kind in ((str(r[0]), str(r[1])) for r in described)
        if n in names
    )
    return _rows(names, connection.execute(f"SELECT {select} FROM {relation}").fetchall())


def pyiceberg_duckdb(catalog: Catalog, snapshots: Snapshots | None = None) -> IcebergReader:
    """pyiceberg's scan registered in DuckDB (``DataScan.to_duckdb``), read with SQL."""

    def read(namespace: str, table: str) -> IcebergRows | None:
        loaded = _load(catalog, namespace, table)
        if loaded is None:
            return None
        scan = loaded.scan(snapshot_id=(snapshots or {}).get(f"{namespace}.{table}"))
        connection = scan.to_duckdb("scanned", connection=_duckdb_connection())
        try:
            return _duckdb_rows(connection, "scanned")
        finally:
            connection.close()

    return read


def duckdb_extension(name: str) -> Path:
    """The ``.duckdb_extension`` file inside the ``duckdb-extension-<name>`` wheel.
    Raises ReaderError when that package is not installed."""
    spec = importlib.util.find_spec(f"duckdb_extension_{name}")
    for directory in (spec.submodule_search_locations or []) if spec is not None else []:
        found = sorted(Path(directory).glob(f"extensions/*/{name}.duckdb_extension"))
        if found:
            return found[-1]
    raise ReaderError(f"DuckDB's {name} extension is missing: pip install duckdb-extension-{name}")


def _sql_text(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


def duckdb_s3_secret(properties: Mapping[str, str]) -> str | None:
    """DuckDB's ``CREATE SECRET`` for the warehouse's S3 (pyiceberg's ``s3.*`` catalog
    properties), or None when the catalog names no S3 endpoint or keys."""
    if "s3.access-key-id" not in properties:
        return None
    endpoint = properties.get("s3.endpoint", "")
    scheme, _, address = endpoint.rpartition("://")
    parts = {
        "TYPE": "s3",
        "KEY_ID": _sql_text(properties["s3.access-key-id"]),
        "SECRET": _sql_text(properties.get("s3.secret-access-key", "")),
        "REGION": _sql_text(properties.get("client.region") or properties.get("s3.region", "")),
    }
    if address:
        parts["ENDPOINT"] = _sql_text(address)
        parts["USE_SSL"] = "false" if scheme == "http" else "true"
    if properties.get("s3.path-style-access", "false").lower() == "true":
        parts["URL_STYLE"] = "'path'"
    return "CREATE SECRET icefjord_s3 (" + ", ".join(f"{k} {v}" for k, v in parts.items()) + ")"


def duckdb_iceberg(
    catalog: Catalog, properties: Mapping[str, str], snapshots: Snapshots | None = None
) -> IcebergReader:
    """DuckDB's own iceberg extension: ``iceberg_scan`` on the table's current metadata
    file, which the catalog names (DuckDB has no client for a JDBC catalog); a pinned
    snapshot through its ``snapshot_from_id``. S3 through httpfs with the catalog's keys."""
    secret = duckdb_s3_secret(properties)

    def read(namespace: str, table: str) -> IcebergRows | None:
        loaded = _load(catalog, namespace, table)
        if loaded is None:
            return None
        connection = _duckdb_connection()
        try:
            for name in ("avro", "iceberg", *(("httpfs",) if secret else ())):
                connection.execute(f"LOAD {_sql_text(str(duckdb_extension(name)))}")
            if secret:
                connection.execute(secret)
            snapshot = (snapshots or {}).get(f"{namespace}.{table}")
            option = "" if snapshot is None else f", snapshot_from_id={int(snapshot)}"
            relation = f"iceberg_scan({_sql_text(loaded.metadata_location)}{option})"
            return _duckdb_rows(connection, relation)
        finally:
            connection.close()

    return read


def _trino_identifier(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def trino_reader(
    host: str,
    port: int,
    catalog_name: str,
    snapshots: Snapshots | None = None,
    user: str = "icefjord",
) -> IcebergReader:
    """Trino's Iceberg connector (catalog ``catalog_name`` of the server at
    ``host:port``); a pinned snapshot through ``FOR VERSION AS OF``. Raises ReaderError
    with Trino's message when Trino cannot read a table that exists."""
    from trino.exceptions import TrinoQueryError

    missing = {"TABLE_NOT_FOUND", "SCHEMA_NOT_FOUND"}

    def read(namespace: str, table: str) -> IcebergRows | None:
        snapshot = (snapshots or {}).get(f"{namespace}.{table}")
        version = "" if snapshot is None else f" FOR VERSION AS OF {int(snapshot)}"
        query = f"SELECT * FROM {_trino_identifier(namespace)}.{_trino_identifier(table)}{version}"
        with connect(host, port, catalog_name, user) as conn:
            cursor = conn.cursor()
            try:
                cursor.execute(query)
                tuples = cursor.fetchall()
            except TrinoQueryError as exc:
                if exc.error_name in missing:
                    return None
                raise ReaderError(f"Trino cannot read {namespace}.{table}: {exc.message}") from exc
            description = cursor.description
        names = [str(d[0]) for d in description]
        instants = frozenset(str(d[0]) for d in description if str(d[1]).endswith("with time zone"))
        return _rows(names, tuples, instants)

    return read


class _SnapshotSession:
    """What :func:`spark_reader` needs of a SparkSession (``table``), answering with the
    pinned snapshot of each table that has one (``VERSION AS OF``)."""

    def __init__(self, spark: Any, catalog_name: str, snapshots: Snapshots) -> None:
        self._spark = spark
        self._prefix = f"{catalog_name}."
        self._snapshots = snapshots

    def table(self, name: str) -> Any:
        snapshot = self._snapshots.get(name.removeprefix(self._prefix))
        if snapshot is None:
            return self._spark.table(name)
        return self._spark.sql(f"SELECT * FROM {name} VERSION AS OF {int(snapshot)}")


def spark_snapshot_reader(
    spark: Any, catalog_name: str, snapshots: Snapshots | None = None
) -> IcebergReader:
    """:func:`~icefjord.demo.verify.spark_reader`, at the pinned snapshots."""
    return spark_reader(_SnapshotSession(spark, catalog_name, snapshots or {}), catalog_name)
