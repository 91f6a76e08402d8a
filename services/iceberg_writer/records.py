"""The writer's per-record work: a decoded change record to a :class:`Change`, and a batch's
changes to the staging rows Arrow builds its table from. Pure.

Both run once per change, so they do no per-record lookups they can avoid (the operation by
a dict, not an enum call). Their cost beside the decoding and Arrow's conversion is in
docs/benchmarks/HISTORY.md ("2026-11-27, late"); compiling them with mypyc saved too little
to add them to the compiled build.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from typing import Any

from services.iceberg_writer.changes import Change, Op
from services.iceberg_writer.types import STAGING_FLAG, UNCHANGED_COLUMNS, MetadataColumns

__all__ = ["change_of", "staging_rows"]

_OPS: dict[str, Op] = {op.value: op for op in Op}
_UTC = dt.UTC
_fromtimestamp = dt.datetime.fromtimestamp


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


def staging_rows(
    changes: Sequence[Change],
    keys: Sequence[str],
    converters: Mapping[str, Any],
    metadata: MetadataColumns,
    *,
    partial: bool,
) -> list[dict[str, Any]]:
    """One dict per change: its row with ``converters`` applied (none for a delete), its key
    columns, the metadata columns that are on, :data:`STAGING_FLAG` true for a delete, and
    for a ``partial`` batch :data:`UNCHANGED_COLUMNS`, the columns an update left out."""
    items = list(converters.items())
    op_column, position_column, source_ts_column = (
        metadata.op,
        metadata.position,
        metadata.source_ts,
    )
    rows: list[dict[str, Any]] = []
    for change in changes:
        row: dict[str, Any] = {}
        after = change.row
        if after is not None and change.op is not Op.DELETE:
            row.update(after)
            for name, convert in items:
                if name in row:
                    row[name] = convert(row[name])
        for name, value in zip(keys, change.key, strict=True):
            row[name] = value
        if op_column:
            row[op_column] = change.op.value
        row[position_column] = change.position
        if source_ts_column:
            row[source_ts_column] = _fromtimestamp(change.source_ts_ms / 1000, _UTC)
        row[STAGING_FLAG] = change.op is Op.DELETE
        if partial:
            unchanged = change.unchanged
            row[UNCHANGED_COLUMNS] = list(unchanged) if unchanged else None
        rows.append(row)
    return rows
