"""The writer's per-record work: a decoded change record to a :class:`Change`, and a batch's
changes to the Arrow table it stages. Pure.

Both run once per change, so they do no per-record lookups they can avoid (the operation by
a dict, not an enum call). Their cost beside the decoding and Arrow's conversion is in
docs/benchmarks/HISTORY.md ("2026-11-27, late"); compiling them with mypyc saved too little
to add them to the compiled build.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pyarrow as pa

from services.iceberg_writer.changes import Change, Op
from services.iceberg_writer.native_changes import arrow_columns
from services.iceberg_writer.types import STAGING_FLAG, UNCHANGED_COLUMNS, MetadataColumns

__all__ = ["change_of", "staging_table"]

_OPS: dict[str, Op] = {op.value: op for op in Op}
_MILLIS_UTC = pa.timestamp("ms", tz="UTC")


def change_of(
    record: dict[str, Any],
    table: str,
    keys: tuple[str, ...],
    converters: Mapping[str, Any],
    topic: str,
    partition: int,
    offset: int,
    schema_id: int,
) -> Change:
    """The :class:`Change` of one decoded change record (``contracts/``'s change schema:
    ``op``, ``position``, ``source_ts_ms``, ``key``, ``after``, ``unchanged``).

    ``keys`` are the table's key columns, in order; ``converters`` turn a column's decoded
    value into the one the table stores. Raises ValueError for an unknown operation and
    KeyError for a missing field or key column, as the record is then not a change record.
    """
    name = record["op"]
    op = _OPS.get(name) if isinstance(name, str) else None
    if op is None:
        op = Op(name)  # raises ValueError, naming the value
    unchanged = record.get("unchanged") if op is Op.UPDATE else None
    key: tuple[Any, ...] = ()
    if op is not Op.TRUNCATE:
        key_record = record.get("key") or {}
        values: list[Any] = []
        for column in keys:
            convert = converters.get(column)
            value = key_record[column]
            values.append(value if convert is None else convert(value))
        key = tuple(values)
    return Change(
        table,
        op,
        record["position"],
        int(record["source_ts_ms"]),
        key,
        record.get("after"),
        topic,
        partition,
        offset,
        schema_id,
        tuple(unchanged) if unchanged else None,
    )


def staging_table(
    changes: Sequence[Change],
    schema: pa.Schema,
    keys: Sequence[str],
    converters: Mapping[str, Any],
    metadata: MetadataColumns,
) -> pa.Table:
    """A batch's changes as one Arrow table of ``schema``, built column by column: each row's
    values with ``converters`` applied (none for a delete), its key columns, the metadata
    columns that are on, :data:`STAGING_FLAG` true for a delete, and (when ``schema`` has
    it) :data:`UNCHANGED_COLUMNS`, the columns an update left out.

    One list per column and one Arrow conversion per column: a dict per row for
    ``Table.from_pylist`` cost about twice as much, and the source commit time goes to Arrow
    as milliseconds instead of a ``datetime`` per row (HISTORY, "2026-11-29").
    """
    names = schema.names
    special = {metadata.op, metadata.position, metadata.source_ts, STAGING_FLAG, UNCHANGED_COLUMNS}
    columns: dict[str, list[Any]] = {name: [] for name in names}
    data = [
        (name, columns[name], converters.get(name))
        for name in names
        if name not in special and name not in keys
    ]
    # The compiled path reads the rows' columns straight into Arrow (native_changes).
    built = arrow_columns(
        [None if change.op is Op.DELETE else change.row for change in changes],
        [schema.field(name) for name, _, _ in data],
    )
    ready: dict[str, pa.Array] = {}
    if built is not None:
        ready = {name: array for (name, _, _), array in zip(data, built, strict=True)}
        data = []
    for change in changes if data else ():
        after = change.row
        if after is None or change.op is Op.DELETE:
            for _, values, _ in data:
                values.append(None)
            continue
        for name, values, convert in data:
            value = after.get(name)
            if convert is not None and name in after:
                value = convert(value)
            values.append(value)
    for index, name in enumerate(keys):
        if name in columns:
            columns[name] = [change.key[index] for change in changes]
    if metadata.op:
        columns[metadata.op] = [change.op.value for change in changes]
    columns[metadata.position] = [change.position for change in changes]
    columns[STAGING_FLAG] = [change.op is Op.DELETE for change in changes]
    if UNCHANGED_COLUMNS in columns:
        columns[UNCHANGED_COLUMNS] = [
            list(change.unchanged) if change.unchanged else None for change in changes
        ]
    arrays = []
    for field in schema:
        if field.name in ready:
            arrays.append(ready[field.name])
        elif field.name == metadata.source_ts:
            millis = pa.array([change.source_ts_ms for change in changes], pa.int64())
            arrays.append(millis.cast(_MILLIS_UTC).cast(field.type))
        else:
            arrays.append(pa.array(columns[field.name], field.type))
    return pa.Table.from_arrays(arrays, schema=schema)
