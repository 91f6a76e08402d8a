"""Per-table normalized Avro schemas (``contracts/avro/change_record.v2.avsc``'s shape), built
from the column model.

:func:`value_schema` and :func:`key_schema` are pure and deterministic: equal
:class:`TableSchema` values give byte-identical :func:`schema_json`, so a source schema that did
not change registers once (the registry deduplicates identical text) and a changed one becomes a
new version for schema-watcher to diff.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from services.cdc_normalizer.connect_schema import ConnectField, ConnectKind, ConnectSchema
from services.cdc_normalizer.errors import InvalidSchema
from services.cdc_normalizer.logical_types import (
    RecordNamer,
    avro_name,
    record_name,
    struct_record,
)

__all__ = [
    "OPERATION_SYMBOLS",
    "TableId",
    "TableSchema",
    "key_schema",
    "key_schema_text",
    "schema_json",
    "value_schema",
    "value_schema_text",
]

OPERATION_SYMBOLS = ("CREATE", "UPDATE", "DELETE", "READ", "TRUNCATE")
_CHANGES_NAMESPACE = "io.icefjord.changes"


@dataclass(frozen=True, slots=True)
class TableId:
    """A source table: ``namespace`` (Postgres/SQL Server schema, MySQL database) and ``name``."""

    namespace: str
    name: str

    # Written out: mypyc compiles them, the ones dataclass generates stay interpreted, and
    # every record's TableId is hashed and compared in the plan and topic caches.
    def __eq__(self, other: object) -> bool:
        if type(other) is not TableId:
            return NotImplemented
        return self.namespace == other.namespace and self.name == other.name

    def __hash__(self) -> int:
        return hash((self.namespace, self.name))

    # Ordered by (namespace, name), as ``order=True`` would (mypyc's comparison slot leaves
    # dataclass no room to add them).
    def __lt__(self, other: TableId) -> bool:
        return (self.namespace, self.name) < (other.namespace, other.name)

    def __le__(self, other: TableId) -> bool:
        return (self.namespace, self.name) <= (other.namespace, other.name)

    def __gt__(self, other: TableId) -> bool:
        return (self.namespace, self.name) > (other.namespace, other.name)

    def __ge__(self, other: TableId) -> bool:
        return (self.namespace, self.name) >= (other.namespace, other.name)

    def __str__(self) -> str:
        return f"{self.namespace}.{self.name}"


@dataclass(frozen=True, slots=True)
class TableSchema:
    """What a table's normalized schemas are built from.

    ``row`` is the STRUCT of all columns (source names, in source order); ``key`` is the STRUCT
    of the key columns in key order, each required, typed as in ``row`` (or as in the Debezium
    key schema for a key column the row lacks).
    """

    table: TableId
    row: ConnectSchema
    key: ConnectSchema

    @property
    def key_columns(self) -> tuple[str, ...]:
        """Source names of the key columns, in key order."""
        return tuple(field.name for field in self.key.fields)

    def __post_init__(self) -> None:
        if self.row.kind is not ConnectKind.STRUCT or self.key.kind is not ConnectKind.STRUCT:
            raise InvalidSchema(f"{self.table}: row and key schemas must be structs")


def key_struct(
    row: ConnectSchema, columns: tuple[str, ...], fallback: ConnectSchema | None
) -> ConnectSchema:
    """The key STRUCT for ``columns``: types from ``row``, else from ``fallback``, all required.

    Raises :class:`InvalidSchema` for a key column found in neither.
    """
    fields = []
    for column in columns:
        found = row.field(column) or (fallback.field(column) if fallback is not None else None)
        if found is None:
            raise InvalidSchema(f"key column {column!r} is not a column of the table")
        fields.append(ConnectField(column, found.schema.as_required()))
    return ConnectSchema(ConnectKind.STRUCT, fields=tuple(fields))


def _names(table: TableId) -> tuple[str, str]:
    namespace = f"{_CHANGES_NAMESPACE}.{avro_name(table.namespace)}"
    return namespace, record_name(table.name)


def key_schema(schema: TableSchema) -> dict[str, Any]:
    """The Avro KEY schema: record ``<TableName>Key`` of the key columns.

    It is the same record as the ``key`` field of :func:`value_schema`, so the Kafka key and the
    value's ``key`` field agree.
    """
    namespace, table_name = _names(schema.table)
    namer = RecordNamer(table_name)
    record = struct_record(schema.key, ("key",), namer.claim(f"{table_name}Key"), namer)
    return {**record, "namespace": namespace}


def value_schema(schema: TableSchema) -> dict[str, Any]:
    """The Avro VALUE schema ``<TableName>Change`` in the shape of
    ``contracts/avro/change_record.v2.avsc`` (envelope rules: ``contracts/COMPATIBILITY.md``).

    Returns a fresh dict each call. Raises :class:`InvalidSchema` / :class:`UnsupportedType`
    (from the type mapping) when a column has no Avro form.
    """
    loaded: dict[str, Any] = json.loads(value_schema_text(schema))
    return loaded


def value_schema_text(schema: TableSchema) -> str:
    """:func:`schema_json` of :func:`value_schema`, cached per distinct table schema.

    This is what the service registers; a table whose source schema did not change costs one
    dictionary lookup per record (by the identity of its row and key schemas first: hashing a
    whole TableSchema walks every column).
    """
    return _VALUE_TEXTS.get(schema, _value_schema_text)


@functools.lru_cache(maxsize=4096)
def _value_schema_text(schema: TableSchema) -> str:
    return schema_json(_build_value_schema(schema))


def key_schema_text(schema: TableSchema) -> str:
    """:func:`schema_json` of :func:`key_schema`, cached like :func:`value_schema_text`."""
    return _KEY_TEXTS.get(schema, lambda table: schema_json(key_schema(table)))


class _TextCache:
    """Schema text per (table, row object, key object): equal TableSchemas built from the same
    parts (one per record) share one entry. Bounded; failures are not cached."""

    def __init__(self, size: int = 1024) -> None:
        self._size = size
        self._texts: dict[tuple[TableId, int, int], tuple[ConnectSchema, ConnectSchema, str]] = {}

    def get(self, schema: TableSchema, build: Callable[[TableSchema], str]) -> str:
        key = (schema.table, id(schema.row), id(schema.key))
        known = self._texts.get(key)
        if known is not None and known[0] is schema.row and known[1] is schema.key:
            return known[2]
        text = build(schema)
        if len(self._texts) >= self._size:
            self._texts.clear()
        self._texts[key] = (schema.row, schema.key, text)
        return text


_VALUE_TEXTS = _TextCache()
_KEY_TEXTS = _TextCache()


def _build_value_schema(schema: TableSchema) -> dict[str, Any]:
    namespace, table_name = _names(schema.table)
    namer = RecordNamer(table_name)
    change_name = namer.claim(f"{table_name}Change")
    key_record = struct_record(schema.key, ("key",), namer.claim(f"{table_name}Key"), namer)
    row_record = struct_record(schema.row, (), namer.claim(f"{table_name}Row"), namer)
    return {
        "type": "record",
        "name": change_name,
        "namespace": namespace,
        "icefjord.table": str(schema.table),
        "icefjord.key": [avro_name(column) for column in schema.key_columns],
        "fields": [
            {
                "name": "op",
                "type": {
                    "type": "enum",
                    "name": "Operation",
                    "namespace": "io.icefjord",
                    "symbols": list(OPERATION_SYMBOLS),
                },
            },
            {"name": "position", "type": "string"},
            {"name": "source_ts_ms", "type": "long"},
            {"name": "tx_id", "type": ["null", "string"], "default": None},
            {"name": "source", "type": {"type": "map", "values": "string"}},
            {"name": "key", "type": key_record},
            {"name": "after", "type": ["null", row_record], "default": None},
            {
                "name": "unchanged",
                "type": ["null", {"type": "array", "items": "string"}],
                "default": None,
            },
        ],
    }


def schema_json(schema: dict[str, Any]) -> str:
    """Canonical text of an Avro schema: compact separators, keys in insertion order.

    Insertion order is fixed by the builders above, so equal inputs give identical text.
    """
    return json.dumps(schema, separators=(",", ":"), ensure_ascii=False)
