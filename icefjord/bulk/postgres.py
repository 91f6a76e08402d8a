"""Whole PostgreSQL tables to Parquet, holding the values the CDC pipeline stores in Iceberg.

:func:`copy_table` reads one table with a single ``COPY (SELECT ...) TO STDOUT`` inside the
caller's REPEATABLE READ transaction, so several tables copied in one transaction come from
one snapshot. Each row leaves PostgreSQL as one CSV record of per-column SQL expressions
(:func:`column_plan`): exact numbers travel as text, instants as integer microseconds,
``bytea`` as hex, arrays as JSON. pyarrow parses the stream chunk by chunk and casts each
column to the Arrow type of the pipeline's Iceberg column (:func:`to_target`), all in C++.

The values equal what Debezium, the normalizer (``services/cdc_normalizer/logical_types.py``)
and the writer (``services/iceberg_writer/types.py``) make of the same rows; the integration
test holds them to it value by value.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import psycopg
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pa_csv
import pyarrow.json as pa_json
import pyarrow.parquet as pq
from psycopg import sql

from icefjord.demo.envelopes import field_schema
from icefjord.demo.model import Column, Kind, kind_from_pg
from services.cdc_normalizer.connect_schema import connect_schema_from_json
from services.cdc_normalizer.logical_types import decimal_target
from shared.errors import IcefjordError

__all__ = [
    "ColumnPlan",
    "CopiedTable",
    "SourceColumn",
    "UnsupportedColumn",
    "arrow_schema",
    "column_plan",
    "copy_sql",
    "copy_table",
    "copy_tables",
    "hex_to_binary",
    "json_lists",
    "plan_columns",
    "quote_ident",
    "snapshot_connections",
    "to_target",
]

CHUNK_BYTES = 32 * 1024 * 1024
# PostgreSQL renders one table's rows while pyarrow parses another's, so even on two cores
# two copies side by side finish sooner than one after the other (measured: HISTORY.md,
# "Figures moved out of code comments").
COPY_WORKERS = max(2, os.cpu_count() or 2)
_MIN_BLOCK_BYTES = 4 * 1024 * 1024
_SNAPSHOT_LEVELS = ("repeatable read", "serializable")
_UNSAFE_FILE_CHARS = re.compile(r"[^A-Za-z0-9_.-]")


class UnsupportedColumn(IcefjordError, ValueError):
    """A column whose type the pipeline has no fixed mapping for (outside :class:`Kind`)."""

    def __init__(self, schema: str, table: str, column: str, pg_type: str) -> None:
        super().__init__(
            f"{schema}.{table}.{column}: type {pg_type!r} is not one the bulk copy supports"
        )
        self.schema = schema
        self.table = table
        self.column = column
        self.pg_type = pg_type


@dataclass(frozen=True)
class CopiedTable:
    """What :func:`copy_table` wrote: Parquet files (absolute paths) holding ``rows`` rows of
    ``columns`` (source names, table order); no files when the table is empty."""

    schema: str
    table: str
    files: tuple[str, ...]
    rows: int
    columns: tuple[str, ...]


@dataclass(frozen=True)
class SourceColumn:
    """One column as PostgreSQL's catalog describes it (``format_type`` spelling)."""

    name: str
    pg_type: str
    is_enum: bool
    nullable: bool


@dataclass(frozen=True)
class ColumnPlan:
    """How one column travels: ``expression`` (SQL over the quoted column) gives a JSON value
    that pyarrow parses as ``wire``; :func:`to_target` turns that into ``target``."""

    name: str
    kind: Kind
    expression: str
    wire: pa.DataType
    target: pa.DataType


def quote_ident(name: str) -> str:
    """``name`` as a PostgreSQL quoted identifier (``"a""b"`` for ``a"b``)."""
    return '"' + name.replace('"', '""') + '"'


def _numeric_target(column: Column) -> pa.DataType:
    """The pipeline's own decision: ``decimal(p, s)`` widened to a legal one, or text when
    wider than 38 digits (``logical_types.decimal_target`` on Debezium's Connect schema)."""
    target = decimal_target(connect_schema_from_json(field_schema(column), column.name))
    return pa.string() if target is None else pa.decimal128(*target)


def _micros(ref: str) -> str:
    # Whole seconds and the microseconds within the second, each exact also where extract()
    # returns double precision (PostgreSQL 13); date_trunc keeps pre-1970 values right.
    return (
        f"(extract(epoch from date_trunc('second', {ref}))::bigint * 1000000"
        f" + extract(microseconds from {ref})::bigint % 1000000)"
    )


def column_plan(column: Column) -> ColumnPlan:
    """The SQL expression, CSV wire type and Arrow target type for ``column``."""
    ref = quote_ident(column.name)
    text = f"{ref}::text"
    plans: dict[Kind, tuple[str, pa.DataType, pa.DataType]] = {
        Kind.SMALLINT: (ref, pa.int32(), pa.int32()),
        Kind.INTEGER: (ref, pa.int32(), pa.int32()),
        Kind.BIGINT: (ref, pa.int64(), pa.int64()),
        # Debezium sends unconstrained numeric as VariableScaleDecimal with trailing fraction
        # zeros stripped (1.50 -> scale 1): trim_scale gives that text, never an exponent.
        Kind.NUMERIC_ANY: (f"trim_scale({ref})::text", pa.string(), pa.string()),
        # money is a Decimal of scale 2 without precision: decimal text with two digits.
        Kind.MONEY: (f"{ref}::numeric::text", pa.string(), pa.string()),
        # Shortest exact text, NaN and Infinity included, parsed by Arrow exactly.
        Kind.REAL: (f"{ref}::float8::text", pa.string(), pa.float32()),
        Kind.DOUBLE: (text, pa.string(), pa.float64()),
        Kind.BOOLEAN: (ref, pa.bool_(), pa.bool_()),
        Kind.TEXT: (ref, pa.string(), pa.string()),
        Kind.TIMESTAMPTZ: (_micros(ref), pa.int64(), pa.timestamp("us", tz="UTC")),
        Kind.TIMESTAMP: (_micros(ref), pa.int64(), pa.timestamp("us")),
        Kind.DATE: (f"({ref} - date '1970-01-01')", pa.int32(), pa.date32()),
        Kind.TIME: (f"to_char({ref}, 'HH24:MI:SS.US')", pa.string(), pa.string()),
        Kind.JSON: (text, pa.string(), pa.string()),
        Kind.JSONB: (text, pa.string(), pa.string()),
        Kind.UUID: (text, pa.string(), pa.string()),
        Kind.ENUM: (text, pa.string(), pa.string()),
        Kind.INT_ARRAY: (f"array_to_json({ref})::text", pa.string(), pa.list_(pa.int32())),
        Kind.BYTEA: (f"encode({ref}, 'hex')", pa.string(), pa.binary()),
    }
    if column.kind is Kind.NUMERIC:
        target = _numeric_target(column)
        return ColumnPlan(column.name, column.kind, text, pa.string(), target)
    expression, wire, target = plans[column.kind]
    return ColumnPlan(column.name, column.kind, expression, wire, target)


def plan_columns(
    schema: str, table: str, columns: Sequence[SourceColumn]
) -> tuple[ColumnPlan, ...]:
    """One plan per column, in table order. Raises :class:`UnsupportedColumn` for the first
    column whose type is outside the supported kinds."""
    plans = []
    for source in columns:
        try:
            column = kind_from_pg(source.name, source.pg_type, source.is_enum, source.nullable)
        except ValueError:
            raise UnsupportedColumn(schema, table, source.name, source.pg_type) from None
        plans.append(column_plan(column))
    return tuple(plans)


def copy_sql(schema: str, table: str, plans: Sequence[ColumnPlan]) -> str:
    """``COPY`` of the plans' expressions in plan order, as PostgreSQL's CSV: NULL is an
    unquoted empty field, an empty string a quoted one, and any field holding a comma, quote
    or line break is quoted (quotes doubled), so text travels unescaped.

    CSV rather than one JSON object per row (``row_to_json``): PostgreSQL renders it in
    about 60% of the time, and it is PostgreSQL's share of the copy that bounds it.
    """
    members = ", ".join(f"{plan.expression} AS c{i}" for i, plan in enumerate(plans))
    source = f"{quote_ident(schema)}.{quote_ident(table)}"
    return f"COPY (SELECT {members} FROM {source}) TO STDOUT (FORMAT csv)"


def wire_schema(plans: Sequence[ColumnPlan]) -> pa.Schema:
    """The schema pyarrow parses the CSV records with."""
    return pa.schema([pa.field(f"c{i}", plan.wire) for i, plan in enumerate(plans)])


def arrow_schema(plans: Sequence[ColumnPlan]) -> pa.Schema:
    """The Parquet files' schema: source column names, target types, all nullable."""
    return pa.schema([pa.field(plan.name, plan.target) for plan in plans])


_HEX_DIGITS = np.full(256, 255, dtype=np.uint8)
for _digit, _char in enumerate(b"0123456789abcdef"):
    _HEX_DIGITS[_char] = _digit
for _digit, _char in enumerate(b"ABCDEF", start=10):
    _HEX_DIGITS[_char] = _digit


def hex_to_binary(values: pa.Array) -> pa.Array:
    """A string array of hex text (``encode(b, 'hex')``) as the binary array of its bytes,
    decoded in one vectorised pass; nulls stay null. Raises ValueError for text not hex."""
    offsets = np.frombuffer(values.buffers()[1], dtype=np.int32)
    offsets = offsets[values.offset : values.offset + len(values) + 1]
    first, last = int(offsets[0]), int(offsets[-1])
    data_buffer = values.buffers()[2]
    data = (
        np.frombuffer(data_buffer, dtype=np.uint8)[first:last]
        if data_buffer is not None
        else np.empty(0, dtype=np.uint8)
    )
    digits = _HEX_DIGITS[data]
    if np.any(np.diff(offsets) & 1) or np.any(digits == 255):
        raise ValueError("bytea text is not hex")
    decoded = (digits[0::2] << 4) | digits[1::2]
    validity = values.is_valid().buffers()[1] if values.null_count else None
    return pa.Array.from_buffers(
        pa.binary(),
        len(values),
        [validity, pa.py_buffer((offsets - first) // 2), pa.py_buffer(decoded.tobytes())],
        null_count=values.null_count,
    )


def to_target(parsed: pa.Table, plans: Sequence[ColumnPlan]) -> pa.Table:
    """The parsed wire columns (``c0``...) as the target columns, named after the source."""
    columns: list[pa.ChunkedArray] = []
    for i, plan in enumerate(plans):
        column = parsed.column(i)
        if plan.kind is Kind.BYTEA:
            column = pa.chunked_array(
                [hex_to_binary(chunk) for chunk in column.chunks], type=pa.binary()
            )
        elif plan.kind is Kind.INT_ARRAY:
            column = pa.chunked_array(
                [json_lists(chunk, plan.target) for chunk in column.chunks], type=plan.target
            )
        elif plan.kind is Kind.REAL:
            column = column.cast(pa.float64()).cast(pa.float32())
        elif plan.wire != plan.target:
            column = column.cast(plan.target)
        columns.append(column)
    return pa.Table.from_arrays(columns, schema=arrow_schema(plans))


def json_lists(values: pa.Array, list_type: pa.DataType) -> pa.Array:
    """A string array of JSON arrays (``array_to_json``) as ``list_type``, parsed by pyarrow's
    JSON reader in one pass; nulls stay null. Raises pyarrow's error for other text."""
    if len(values) == 0:
        return pa.array([], list_type)
    lines = pc.binary_join_element_wise('{"v":', values.fill_null("null"), "}\n", "")
    lengths = pc.binary_length(lines)
    longest = pc.max(lengths).as_py()
    parsed = pa_json.read_json(
        pa.BufferReader(lines.buffers()[2][: pc.sum(lengths).as_py()]),
        read_options=pa_json.ReadOptions(block_size=max(_MIN_BLOCK_BYTES, longest + 1)),
        parse_options=pa_json.ParseOptions(
            explicit_schema=pa.schema([("v", list_type)]), unexpected_field_behavior="error"
        ),
    )
    return parsed.column(0).combine_chunks()


def record_ends(data: bytes | bytearray) -> np.ndarray[Any, np.dtype[np.int64]]:
    """Positions of the line breaks that end a CSV record: those outside quotes, where an
    even number of quote characters precedes them (a quote inside a field is doubled)."""
    array = np.frombuffer(data, dtype=np.uint8)
    newlines = np.flatnonzero(array == ord("\n"))
    quotes = np.flatnonzero(array == ord('"'))
    ends: np.ndarray[Any, np.dtype[np.int64]] = newlines[np.searchsorted(quotes, newlines) % 2 == 0]
    return ends


def parse_lines(lines: bytes | bytearray, plans: Sequence[ColumnPlan]) -> pa.Table:
    """Whole CSV records (as COPY wrote them) parsed with the wire schema."""
    ends = record_ends(lines)
    longest = int(np.diff(ends, prepend=-1).max()) if len(ends) else len(lines)
    # A block must hold every whole record; past that, blocks are parsed in parallel.
    block = max(_MIN_BLOCK_BYTES, longest + 1)
    wire = wire_schema(plans)
    return pa_csv.read_csv(
        pa.BufferReader(pa.py_buffer(lines)),
        read_options=pa_csv.ReadOptions(column_names=wire.names, block_size=block),
        parse_options=pa_csv.ParseOptions(newlines_in_values=True),
        convert_options=pa_csv.ConvertOptions(
            column_types=wire,
            null_values=[""],
            strings_can_be_null=True,
            quoted_strings_can_be_null=False,
            true_values=["t"],
            false_values=["f"],
        ),
    )


def read_columns(conn: psycopg.Connection[Any], schema: str, table: str) -> list[SourceColumn]:
    """The table's live columns in order. Raises LookupError when there is no such table."""
    rows = conn.execute(
        """
        SELECT a.attname, format_type(a.atttypid, a.atttypmod), t.typtype = 'e',
               NOT a.attnotnull
          FROM pg_attribute a
          JOIN pg_class c ON c.oid = a.attrelid
          JOIN pg_namespace n ON n.oid = c.relnamespace
          JOIN pg_type t ON t.oid = a.atttypid
         WHERE n.nspname = %s AND c.relname = %s AND a.attnum > 0 AND NOT a.attisdropped
         ORDER BY a.attnum
        """,
        (schema, table),
    ).fetchall()
    if not rows:
        raise LookupError(f"no table {schema}.{table} (or it has no columns)")
    return [SourceColumn(str(r[0]), str(r[1]), bool(r[2]), bool(r[3])) for r in rows]


def _check_snapshot(conn: psycopg.Connection[Any]) -> None:
    if conn.info.transaction_status != psycopg.pq.TransactionStatus.INTRANS:
        raise ValueError("copy_table runs in the caller's open REPEATABLE READ transaction")
    row = conn.execute("SHOW transaction_isolation").fetchone()
    level = "" if row is None else str(row[0])
    if level not in _SNAPSHOT_LEVELS:
        raise ValueError(f"copy_table needs a REPEATABLE READ transaction, not {level!r}")


def _line_chunks(
    conn: psycopg.Connection[Any], statement: str, chunk_bytes: int
) -> Iterator[bytearray]:
    """COPY output in buffers of about ``chunk_bytes``, each ending at a record's end."""
    buffer = bytearray()
    threshold = chunk_bytes
    with conn.cursor() as cursor, cursor.copy(statement) as copy:
        for data in copy:
            buffer += data
            if len(buffer) >= threshold:
                ends = record_ends(buffer)
                if len(ends):
                    cut = int(ends[-1]) + 1
                    yield buffer[:cut]
                    buffer = buffer[cut:]
                    threshold = chunk_bytes
                else:  # one record longer than a chunk: look again once it may have ended
                    threshold = 2 * len(buffer)
    if buffer:
        yield buffer


def copy_table(
    conn: psycopg.Connection[Any],
    schema: str,
    table: str,
    out_dir: Path,
    *,
    rows_per_file: int = 1_000_000,
    chunk_bytes: int = CHUNK_BYTES,
) -> CopiedTable:
    """Copy ``schema.table`` into Parquet files of at most ``rows_per_file`` rows in
    ``out_dir`` (created), named ``<schema>.<table>.<n>.parquet``.

    ``conn`` must be inside a REPEATABLE READ (or SERIALIZABLE) transaction the caller opened
    and will end; the copy reads the catalog and the rows from its snapshot. Sets
    ``client_encoding`` and ``extra_float_digits`` for that transaction only. Raises
    :class:`UnsupportedColumn` before reading any row, LookupError for a missing table,
    ValueError without such a transaction, and psycopg errors from the server.
    """
    if rows_per_file < 1:
        raise ValueError("rows_per_file must be at least 1")
    _check_snapshot(conn)
    plans = plan_columns(schema, table, read_columns(conn, schema, table))
    # UTF-8 lines for the JSON parser; shortest exact float text (the default since
    # PostgreSQL 12, unless a session lowered it).
    conn.execute("SET LOCAL client_encoding = 'UTF8'")
    conn.execute("SET LOCAL extra_float_digits = 3")
    out_dir.mkdir(parents=True, exist_ok=True)
    target_schema = arrow_schema(plans)
    stem = _UNSAFE_FILE_CHARS.sub("_", f"{schema}.{table}")
    files: list[str] = []
    rows = 0
    in_file = 0
    writer: pq.ParquetWriter | None = None
    try:
        for lines in _line_chunks(conn, copy_sql(schema, table, plans), chunk_bytes):
            batch = to_target(parse_lines(lines, plans), plans)
            while batch.num_rows:
                if writer is None or in_file >= rows_per_file:
                    if writer is not None:
                        writer.close()
                    path = (out_dir / f"{stem}.{len(files):05d}.parquet").resolve()
                    writer = pq.ParquetWriter(path, target_schema)
                    files.append(str(path))
                    in_file = 0
                part = batch.slice(0, rows_per_file - in_file)
                writer.write_table(part)
                in_file += part.num_rows
                rows += part.num_rows
                batch = batch.slice(part.num_rows)
    finally:
        if writer is not None:
            writer.close()
    columns = tuple(plan.name for plan in plans)
    return CopiedTable(schema, table, tuple(files), rows, columns)


def _largest_first(conn: psycopg.Connection[Any], schema: str, tables: Sequence[str]) -> list[str]:
    """``tables`` by their size on disk, largest first (unknown ones last, in given order)."""
    sizes = dict(
        conn.execute(
            "SELECT c.relname, pg_table_size(c.oid) FROM pg_class c"
            " JOIN pg_namespace n ON n.oid = c.relnamespace"
            " WHERE n.nspname = %s AND c.relname = ANY(%s)",
            (schema, list(tables)),
        ).fetchall()
    )
    return sorted(tables, key=lambda table: -int(sizes.get(table, -1)))


@contextmanager
def snapshot_connections(conninfo: str, count: int) -> Iterator[list[psycopg.Connection[Any]]]:
    """``count`` connections, each in a REPEATABLE READ transaction, all on one snapshot.

    The first exports its snapshot (``pg_export_snapshot``), the others import it before
    they run anything else, so each sees exactly what the first does. On exit every
    transaction ends (they only read) and every connection closes.
    """
    with ExitStack() as stack:
        lead = stack.enter_context(psycopg.connect(conninfo, autocommit=True))
        lead.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
        stack.callback(lead.execute, "COMMIT")
        exported = lead.execute("SELECT pg_export_snapshot()").fetchone()
        assert exported is not None
        connections: list[psycopg.Connection[Any]] = [lead]
        for _ in range(count - 1):
            conn = stack.enter_context(psycopg.connect(conninfo, autocommit=True))
            conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
            stack.callback(conn.execute, "COMMIT")
            conn.execute(sql.SQL("SET TRANSACTION SNAPSHOT {}").format(sql.Literal(exported[0])))
            connections.append(conn)
        yield connections


def copy_tables(
    conninfo: str,
    schema: str,
    tables: Sequence[str],
    out_dir: Path,
    on_copied: Callable[[CopiedTable], None],
    *,
    workers: int = COPY_WORKERS,
) -> list[CopiedTable]:
    """Copy ``tables`` of ``schema`` (:func:`copy_table`, files in ``out_dir``) from one
    snapshot, up to ``workers`` at once, largest first.

    The connections share one snapshot (:func:`snapshot_connections`), so all copies see the
    same rows, as if one transaction had copied them in turn. ``on_copied`` is called in the
    calling thread with each table as soon as it is written. The first error stops the
    copies not yet started and is raised once the running ones end.
    """
    if workers < 1:
        raise ValueError("workers must be at least 1")
    if not tables:
        return []
    with snapshot_connections(conninfo, min(workers, len(tables))) as connections:
        order = _largest_first(connections[0], schema, tables)
        idle = list(connections)

        def copy(table: str) -> CopiedTable:
            conn = idle.pop()  # one per worker thread: never empty, list.pop is atomic
            try:
                return copy_table(conn, schema, table, out_dir)
            finally:
                idle.append(conn)

        copied: list[CopiedTable] = []
        with ThreadPoolExecutor(len(connections), thread_name_prefix="bulk-copy") as pool:
            pending: set[Future[CopiedTable]] = {pool.submit(copy, table) for table in order}
            try:
                while pending:
                    done, pending = wait(pending, return_when=FIRST_COMPLETED)
                    for future in done:
                        copied.append(future.result())
                        on_copied(copied[-1])
            except BaseException:
                for other in pending:
                    other.cancel()
                raise
        return copied
