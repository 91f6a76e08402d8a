"""Avro row schemas (as the normalizer registers them) into Iceberg schemas and Arrow columns.

The mapping is lossless and fixed (service README, "Types"). Spark 3.5 cannot write Iceberg's
``time`` type, so a time of day becomes the fixed-width text ``HH:MM:SS.ffffff``, which sorts
and compares like the time itself; UUIDs, JSON and enum symbols become strings.
"""

from __future__ import annotations

import datetime as dt
import itertools
import json
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pyiceberg.schema import Schema
from pyiceberg.types import (
    BinaryType,
    BooleanType,
    DateType,
    DecimalType,
    DoubleType,
    FixedType,
    FloatType,
    IcebergType,
    IntegerType,
    ListType,
    LongType,
    MapType,
    NestedField,
    StringType,
    StructType,
    TimestampType,
    TimestamptzType,
)

from shared.avro_types import decimal_parameters, expand_named_types, split_nullable
from shared.errors import IcefjordError

Converter = Callable[[Any], Any]
STAGING_FLAG = "_icefjord_delete"  # a batch-only column marking deletes; never a table column
# A batch-only column: the columns each change left unchanged (partial batches only).
UNCHANGED_COLUMNS = "_icefjord_unchanged"


class UnsupportedTypeError(IcefjordError, ValueError):
    """An Avro type the writer cannot store losslessly (a union of several non-null types)."""


@dataclass(frozen=True, slots=True)
class MetadataColumns:
    """Names of the columns recording each row's last change; ``None`` turns one off.

    The position column cannot be turned off: it is what keeps a stale change from
    overwriting a newer row.
    """

    op: str | None = "_icefjord_op"
    position: str = "_icefjord_position"
    source_ts: str | None = "_icefjord_source_ts"

    def fields(self) -> list[tuple[str, IcebergType]]:
        out: list[tuple[str, IcebergType]] = []
        if self.op:
            out.append((self.op, StringType()))
        out.append((self.position, StringType()))
        if self.source_ts:
            out.append((self.source_ts, TimestamptzType()))
        return out

    def names(self) -> list[str]:
        return [name for name, _ in self.fields()]


def _primitive(base: str) -> IcebergType:
    mapping: dict[str, IcebergType] = {
        "boolean": BooleanType(),
        "int": IntegerType(),
        "long": LongType(),
        "float": FloatType(),
        "double": DoubleType(),
        "string": StringType(),
        "bytes": BinaryType(),
        "enum": StringType(),
    }
    if base not in mapping:
        raise UnsupportedTypeError(f"Avro type {base!r} has no Iceberg column type")
    return mapping[base]


def iceberg_type(avro_type: Any, ids: Iterator[int]) -> tuple[IcebergType, bool]:
    """(Iceberg type, required) of an expanded Avro type; nested ids are drawn from ``ids``."""
    nullable, base = split_nullable(avro_type)
    if isinstance(base, list):
        raise UnsupportedTypeError(f"union of several types {base!r} cannot be a column")
    return _base_type(base, ids), not nullable


def _base_type(base: Any, ids: Iterator[int]) -> IcebergType:
    if isinstance(base, str):
        return _primitive(base)
    kind = base.get("type")
    logical = base.get("logicalType")
    if logical == "decimal" and kind in ("bytes", "fixed"):
        precision, scale = decimal_parameters(base)
        return DecimalType(precision, scale)
    if logical == "date" and kind == "int":
        return DateType()
    if logical in ("time-millis", "time-micros") or logical == "uuid":
        return StringType()
    if logical in ("timestamp-millis", "timestamp-micros") and kind == "long":
        return TimestamptzType()
    if logical in ("local-timestamp-millis", "local-timestamp-micros") and kind == "long":
        return TimestampType()
    if kind in ("record", "error"):
        return StructType(*_fields(base["fields"], ids))
    if kind == "array":
        element, required = iceberg_type(base["items"], ids)
        return ListType(next(ids), element, element_required=required)
    if kind == "map":
        value, required = iceberg_type(base["values"], ids)
        return MapType(next(ids), StringType(), next(ids), value, value_required=required)
    if kind == "enum":
        return StringType()
    if kind == "fixed":
        return FixedType(int(base["size"]))
    if isinstance(kind, str):
        return _primitive(kind)
    raise UnsupportedTypeError(f"Avro type {base!r} has no Iceberg column type")


def _fields(fields: Sequence[Mapping[str, Any]], ids: Iterator[int]) -> list[NestedField]:
    out = []
    for field in fields:
        field_id = next(ids)
        field_type, required = iceberg_type(field["type"], ids)
        out.append(
            NestedField(
                field_id, field["name"], field_type, required=required, doc=field.get("doc")
            )
        )
    return out


def row_record(change_schema: Mapping[str, Any]) -> dict[str, Any]:
    """The expanded row record inside a change record schema's ``after`` field."""
    expanded = expand_named_types(change_schema, allow_redefinition=True)
    for field in expanded["fields"]:
        if field["name"] == "after":
            _, row = split_nullable(field["type"])
            return dict(row)
    raise UnsupportedTypeError("schema has no 'after' field: not an Icefjord change record")


def key_columns(change_schema: Mapping[str, Any]) -> tuple[str, ...]:
    """The primary-key column names, from ``icefjord.key`` or the ``key`` record's fields."""
    listed = change_schema.get("icefjord.key")
    if isinstance(listed, list) and listed:
        return tuple(str(name) for name in listed)
    for field in change_schema.get("fields", []):
        if field.get("name") == "key" and isinstance(field.get("type"), Mapping):
            return tuple(item["name"] for item in field["type"]["fields"])
    raise UnsupportedTypeError("schema names no key columns")


def table_schema(
    change_schema: Mapping[str, Any], metadata: MetadataColumns
) -> tuple[Schema, tuple[str, ...]]:
    """The Iceberg schema for a new table (row columns, then metadata columns) and its key.

    Key columns become required identifier fields even where the source declared them
    nullable, since Iceberg's identifier fields must be required.
    """
    row = row_record(change_schema)
    keys = key_columns(change_schema)
    ids = itertools.count(1)
    fields = _fields(row["fields"], ids)
    names = {field.name for field in fields}
    missing = [key for key in keys if key not in names]
    if missing:
        raise UnsupportedTypeError(f"key columns {missing} are not in the row")
    clashes = [
        name for name in [*metadata.names(), STAGING_FLAG, UNCHANGED_COLUMNS] if name in names
    ]
    if clashes:
        raise UnsupportedTypeError(f"row columns {clashes} clash with the metadata columns")
    fields = [
        NestedField(f.field_id, f.name, f.field_type, required=True, doc=f.doc)
        if f.name in keys
        else f
        for f in fields
    ]
    for name, field_type in metadata.fields():
        fields.append(NestedField(next(ids), name, field_type, required=False))
    by_name = {field.name: field.field_id for field in fields}
    schema = Schema(*fields, identifier_field_ids=[by_name[key] for key in keys])
    return schema, keys


def _time_text(micros_per_unit: int) -> Converter:
    def convert(value: Any) -> Any:
        if isinstance(value, dt.time):
            return value.isoformat(timespec="microseconds")
        if isinstance(value, int):  # a reader without logical types gives the raw count
            moment = dt.datetime.min + dt.timedelta(microseconds=value * micros_per_unit)
            return moment.time().isoformat("microseconds")
        return value

    return convert


def _uuid_text(value: Any) -> Any:
    return str(value) if isinstance(value, uuid.UUID) else value


def value_converter(avro_type: Any) -> Converter | None:
    """A function turning a decoded Avro value into what Arrow stores, or None if none is needed."""
    _, base = split_nullable(avro_type)
    if isinstance(base, (str, list)):
        return None
    logical = base.get("logicalType")
    kind = base.get("type")
    if logical in ("time-millis", "time-micros"):
        return _nullsafe(_time_text(1000 if logical == "time-millis" else 1))
    if logical == "uuid":
        return _nullsafe(_uuid_text)
    if kind in ("record", "error"):
        inner = {f["name"]: value_converter(f["type"]) for f in base["fields"]}
        active = {name: conv for name, conv in inner.items() if conv is not None}
        if not active:
            return None

        def record(value: Mapping[str, Any]) -> dict[str, Any]:
            out = dict(value)
            for name, conv in active.items():
                out[name] = conv(out.get(name))
            return out

        return _nullsafe(record)
    if kind == "array":
        item = value_converter(base["items"])
        if item is None:
            return None
        return _nullsafe(lambda values: [item(v) for v in values])
    if kind == "map":
        inner_value = value_converter(base["values"])
        if inner_value is None:
            return _nullsafe(lambda mapping: list(mapping.items()))
        return _nullsafe(lambda mapping: [(k, inner_value(v)) for k, v in mapping.items()])
    return None


def _nullsafe(function: Converter) -> Converter:
    return lambda value: None if value is None else function(value)


def row_converters(row: Mapping[str, Any]) -> dict[str, Converter]:
    """Per top-level column, the converter it needs (columns that need none are left out)."""
    out = {}
    for field in row["fields"]:
        conv = value_converter(field["type"])
        if conv is not None:
            out[field["name"]] = conv
    return out


def type_from_json(type_json: str) -> IcebergType:
    """The Iceberg type of a SchemaChange operation's ``type_json`` (an Avro type)."""
    avro_type = json.loads(type_json)
    _, base = split_nullable(expand_named_types(avro_type, allow_redefinition=True))
    if isinstance(base, list):
        raise UnsupportedTypeError(f"union of several types {base!r} cannot be a column")
    return _base_type(base, itertools.count(10_000_000))
