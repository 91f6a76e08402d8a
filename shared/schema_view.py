"""Reading a registered schema: a full normalized change record, or a bare row record.

A change record (``contracts/avro/change_record.v2.avsc``) is recognised by its `after`
field; its row is the record inside `after`, its key columns come from the `icefjord.key`
property or, failing that, from the fields of the `key` record. Any other record is taken as
a bare row with no key.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import fastavro

from shared.avro_types import (
    MalformedSchemaError,
    expand_named_types,
    family,
    normalize_type,
    split_nullable,
)

KEY_PROPERTY = "icefjord.key"


@dataclass(frozen=True, slots=True)
class SchemaView:
    """What evolution needs from one schema version.

    `row` is the expanded row record (named types inlined). For a change record,
    `key_columns` lists the key column names in order and `key_types` maps each to its
    normalized type as declared in the `key` record (or in the row, when there is no `key`
    record); for a bare row both are None.
    """

    row: dict[str, Any]
    key_columns: tuple[str, ...] | None
    key_types: Mapping[str, Any] | None

    @property
    def is_change_record(self) -> bool:
        return self.key_columns is not None


def read_schema(schema: Any, *, side: str, validate: bool = True) -> SchemaView:
    """Check `schema` and split it into row and key.

    `side` ("old" or "new") only prefixes error messages. With `validate`, the schema must
    also parse with fastavro. Raises MalformedSchemaError when it is not an Avro record, does
    not parse, or its key columns are not consistent with its row.
    """
    if not isinstance(schema, Mapping):
        raise MalformedSchemaError(f"{side} schema is not a JSON object")
    if schema.get("type") not in ("record", "error"):
        raise MalformedSchemaError(f"{side} schema is not an Avro record")
    if validate:
        try:
            fastavro.parse_schema(copy.deepcopy(dict(schema)))
        except Exception as exc:  # fastavro raises several unrelated types for bad input
            raise MalformedSchemaError(f"{side} schema does not parse: {exc}") from exc
    try:
        expanded = expand_named_types(schema, allow_redefinition=not validate)
    except MalformedSchemaError as exc:
        raise MalformedSchemaError(f"{side} schema: {exc}") from exc
    fields = {item["name"]: item for item in expanded["fields"]}
    if "after" not in fields:
        return SchemaView(row=expanded, key_columns=None, key_types=None)
    _, row = split_nullable(fields["after"]["type"])
    if family(row) != "record":
        raise MalformedSchemaError(f"{side} schema: field 'after' is not a record")
    key_columns, key_types = _key(schema, fields.get("key"), row, side)
    return SchemaView(row=row, key_columns=key_columns, key_types=key_types)


def _key(
    schema: Mapping[str, Any],
    key_field: Mapping[str, Any] | None,
    row: Mapping[str, Any],
    side: str,
) -> tuple[tuple[str, ...], dict[str, Any]]:
    row_types = {item["name"]: item["type"] for item in row["fields"]}
    declared_types: dict[str, Any] = dict(row_types)
    record_columns: tuple[str, ...] | None = None
    if key_field is not None:
        key_record = key_field["type"]
        if family(key_record) != "record":
            raise MalformedSchemaError(f"{side} schema: field 'key' is not a record")
        record_columns = tuple(item["name"] for item in key_record["fields"])
        declared_types = {item["name"]: item["type"] for item in key_record["fields"]}
    listed = schema.get(KEY_PROPERTY)
    if listed is not None:
        if not isinstance(listed, list) or not all(isinstance(c, str) for c in listed):
            raise MalformedSchemaError(f"{side} schema: '{KEY_PROPERTY}' must list column names")
        columns = tuple(listed)
        if record_columns is not None and set(record_columns) != set(columns):
            raise MalformedSchemaError(
                f"{side} schema: '{KEY_PROPERTY}' {list(columns)} does not match "
                f"the key record's fields {list(record_columns)}"
            )
    else:
        columns = record_columns or ()
    for column in columns:
        if column not in row_types:
            raise MalformedSchemaError(f"{side} schema: key column {column!r} is not in the row")
    return columns, {column: normalize_type(declared_types[column]) for column in columns}
