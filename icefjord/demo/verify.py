"""Proof that every Iceberg table equals its source table: counts, checksums, then rows.

The source is read from PostgreSQL (:func:`read_postgres`) or taken from the generator's
model (:func:`source_from_model`); Iceberg is read through Spark (:func:`spark_reader`),
which applies the writer's position deletes. :func:`compare_table` is pure: both sides are
turned into canonical rows (:mod:`icefjord.demo.canonical`) over the source's columns, the
writer's ``_icefjord_*`` columns left out. Equal row counts and checksums settle a table;
otherwise every key is compared and missing, extra, differing and duplicated keys are
counted, with a few samples for the report.

Iceberg identifier: Debezium topic ``<server>.<schema>.<table>`` -> normalizer namespace
``<schema>`` -> Iceberg ``<schema>.<table>`` (Spark ``<catalog>.<schema>.<table>``).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from icefjord.demo.canonical import canonical, checksum
from icefjord.demo.model import Column, Kind, kind_from_pg
from icefjord.demo.plan import SourceModel

METADATA_PREFIX = "_icefjord_"
SAMPLES = 10


@dataclass(frozen=True)
class SourceTable:
    """One source table's columns, primary key and rows (column name -> value)."""

    namespace: str
    name: str
    columns: tuple[Column, ...]
    key: tuple[str, ...]
    rows: Sequence[Mapping[str, Any]]

    @property
    def identifier(self) -> str:
        return f"{self.namespace}.{self.name}"


@dataclass(frozen=True)
class IcebergRows:
    """What was read from one Iceberg table: its data columns and rows."""

    columns: frozenset[str]
    rows: Sequence[Mapping[str, Any]]


@dataclass(frozen=True)
class TableReport:
    """The comparison of one table. ``samples`` describe a few differences."""

    table: str
    source_rows: int
    iceberg_rows: int
    source_checksum: int
    iceberg_checksum: int
    table_missing: bool = False
    missing_columns: tuple[str, ...] = ()
    missing_keys: int = 0
    extra_keys: int = 0
    differing_keys: int = 0
    duplicate_keys: int = 0
    samples: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        return (
            not self.table_missing
            and not self.missing_columns
            and self.source_rows == self.iceberg_rows
            and self.source_checksum == self.iceberg_checksum
            and self.missing_keys == self.extra_keys == 0
            and self.differing_keys == self.duplicate_keys == 0
        )


@dataclass(frozen=True)
class VerifyReport:
    """Every table's comparison; ``ok`` when there is at least one table and all match."""

    tables: tuple[TableReport, ...]

    @property
    def ok(self) -> bool:
        return bool(self.tables) and all(t.ok for t in self.tables)

    @property
    def duplicate_keys(self) -> int:
        return sum(t.duplicate_keys for t in self.tables)


def _lenient(kind: Kind, value: Any) -> Any:
    """Canonical form, or a marker that equals no valid value (and names the problem)."""
    try:
        return canonical(kind, value)
    except (TypeError, ValueError, ArithmeticError) as exc:
        return ("invalid", type(value).__name__, repr(value), str(exc))


def compare_table(source: SourceTable, iceberg: IcebergRows | None) -> TableReport:
    """Compare one source table with what Iceberg holds for it (None: no such table)."""
    columns = [c for c in source.columns if iceberg is None or c.name in iceberg.columns]
    key_index = [i for i, c in enumerate(columns) if c.name in source.key]
    source_rows = [tuple(canonical(c.kind, r.get(c.name)) for c in columns) for r in source.rows]
    source_sum = checksum(source_rows)
    if iceberg is None:
        return TableReport(
            source.identifier,
            len(source_rows),
            0,
            source_sum,
            0,
            table_missing=True,
            missing_keys=len(source_rows),
            samples=(f"table {source.identifier} does not exist in Iceberg",),
        )
    missing_columns = tuple(c.name for c in source.columns if c.name not in iceberg.columns)
    iceberg_rows = [tuple(_lenient(c.kind, r.get(c.name)) for c in columns) for r in iceberg.rows]
    iceberg_sum = checksum(iceberg_rows)
    report = TableReport(
        source.identifier,
        len(source_rows),
        len(iceberg_rows),
        source_sum,
        iceberg_sum,
        missing_columns=missing_columns,
        samples=tuple(f"column {name} is missing in Iceberg" for name in missing_columns),
    )
    if report.ok:
        return report

    def key_of(row: tuple[Any, ...]) -> tuple[Any, ...]:
        return tuple(row[i] for i in key_index)

    expected = {key_of(row): row for row in source_rows}
    found: dict[tuple[Any, ...], list[tuple[Any, ...]]] = defaultdict(list)
    for row in iceberg_rows:
        found[key_of(row)].append(row)
    samples = list(report.samples)
    counts = {"missing": 0, "extra": 0, "differing": 0, "duplicate": 0}

    def note(kind: str, text: str) -> None:
        counts[kind] += 1
        if len(samples) < SAMPLES:
            samples.append(text)

    for key, row in expected.items():
        got = found.get(key)
        if not got:
            note("missing", f"key {key} missing in Iceberg")
            continue
        if len(got) > 1:
            note("duplicate", f"key {key} appears {len(got)} times in Iceberg")
        wrong = [other for other in got if other != row]
        if wrong:
            names = [c.name for c, a, b in zip(columns, row, wrong[0], strict=True) if a != b]
            detail = ", ".join(
                f"{c.name}: source {a!r} != iceberg {b!r}"
                for c, a, b in zip(columns, row, wrong[0], strict=True)
                if a != b
            )
            note("differing", f"key {key} differs in {', '.join(names)} ({detail})"[:400])
    for key, rows in found.items():
        if key not in expected:
            note("extra", f"key {key} in Iceberg ({len(rows)}x) but not in the source")
    return TableReport(
        source.identifier,
        len(source_rows),
        len(iceberg_rows),
        source_sum,
        iceberg_sum,
        missing_columns=missing_columns,
        missing_keys=counts["missing"],
        extra_keys=counts["extra"],
        differing_keys=counts["differing"],
        duplicate_keys=counts["duplicate"],
        samples=tuple(samples),
    )


IcebergReader = Callable[[str, str], IcebergRows | None]


def verify(sources: Iterable[SourceTable], read_iceberg: IcebergReader) -> VerifyReport:
    """Compare each source table with ``read_iceberg(namespace, table)``."""
    return VerifyReport(tuple(compare_table(s, read_iceberg(s.namespace, s.name)) for s in sources))


def source_from_model(model: SourceModel, namespace: str) -> list[SourceTable]:
    """The generator's source: the model's tables and rows."""
    return [
        SourceTable(namespace, name, table.columns, table.key, list(model.rows[name].values()))
        for name, table in sorted(model.tables.items())
    ]


_COLUMNS_SQL = """
SELECT c.relname, a.attname, format_type(a.atttypid, a.atttypmod), t.typtype = 'e',
       NOT a.attnotnull
FROM pg_attribute a
JOIN pg_class c ON c.oid = a.attrelid
JOIN pg_namespace n ON n.oid = c.relnamespace
JOIN pg_type t ON t.oid = a.atttypid
WHERE n.nspname = %s AND c.relkind IN ('r', 'p') AND a.attnum > 0 AND NOT a.attisdropped
ORDER BY c.relname, a.attnum
"""
_KEY_SQL = """
SELECT c.relname, a.attname
FROM pg_index i
JOIN pg_class c ON c.oid = i.indrelid
JOIN pg_namespace n ON n.oid = c.relnamespace
CROSS JOIN LATERAL unnest(i.indkey) WITH ORDINALITY AS k(attnum, ord)
JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum = k.attnum
WHERE i.indisprimary AND n.nspname = %s
ORDER BY c.relname, k.ord
"""


def _select_expression(column: Column) -> str:
    """Read money as numeric (its text form depends on lc_monetary), JSON as its text,
    enums as text."""
    quoted = '"' + column.name.replace('"', '""') + '"'
    cast = {Kind.MONEY: "numeric", Kind.JSON: "text", Kind.JSONB: "text", Kind.ENUM: "text"}
    if column.kind in cast:
        return f"{quoted}::{cast[column.kind]} AS {quoted}"
    return quoted


def read_postgres(conninfo: str, schema: str) -> list[SourceTable]:
    """Every table of ``schema`` with all rows, in one repeatable-read snapshot."""
    import psycopg
    from psycopg import sql
    from psycopg.rows import dict_row

    columns: dict[str, list[Column]] = defaultdict(list)
    keys: dict[str, list[str]] = defaultdict(list)
    tables: list[SourceTable] = []
    with psycopg.connect(conninfo) as conn:
        conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        for table, name, formatted, is_enum, nullable in conn.execute(_COLUMNS_SQL, (schema,)):
            columns[table].append(kind_from_pg(name, formatted, is_enum, nullable))
        for table, name in conn.execute(_KEY_SQL, (schema,)):
            keys[table].append(name)
        for table in sorted(columns):
            select = ", ".join(_select_expression(c) for c in columns[table])
            query = sql.SQL("SELECT {} FROM {}.{}").format(
                sql.SQL(select), sql.Identifier(schema), sql.Identifier(table)
            )
            with conn.cursor(row_factory=dict_row) as cursor:
                rows = cursor.execute(query).fetchall()
            tables.append(
                SourceTable(schema, table, tuple(columns[table]), tuple(keys[table]), rows)
            )
    return tables


def spark_reader(spark: Any, catalog: str) -> IcebergReader:
    """Read ``<catalog>.<namespace>.<table>`` with Spark: data columns only, instants as
    microseconds (Spark would turn them into naive local datetimes)."""
    from pyspark.errors import AnalysisException
    from pyspark.sql import functions as F
    from pyspark.sql.types import TimestampType

    def read(namespace: str, table: str) -> IcebergRows | None:
        try:
            frame = spark.table(f"{catalog}.{namespace}.{table}")
        except AnalysisException:
            return None
        fields = [f for f in frame.schema.fields if not f.name.startswith(METADATA_PREFIX)]
        selected = [
            F.unix_micros(F.col(f"`{f.name}`")).alias(f.name)
            if isinstance(f.dataType, TimestampType)
            else F.col(f"`{f.name}`")
            for f in fields
        ]
        rows = [row.asDict(recursive=True) for row in frame.select(*selected).collect()]
        return IcebergRows(frozenset(f.name for f in fields), rows)

    return read
