"""The compiled record path: a JsonConverter record straight to its change record's bytes.

The normalizer spent its CPU per change on Python objects: the payload's dicts, the converted
row, the source map, the change and its Avro datum, each built, walked and collected per record.
``icefjord_native`` (``native/``, a Rust extension built with maturin and pyo3) takes one
record of a PostgreSQL connector, its key and value payloads after their (remembered) schema
blocks, and writes the Kafka key and value bodies of the change record in one call: the table,
the operation, the position, the timestamps, the transaction id, the source map, the key and the
row, exactly as ``normalize`` and the Avro encoder write them.

:func:`record_program` decides, once per (value schema, key schema), whether every column of
the row and of the key is of a kind the program writes, mirroring ``converters._compile``'s
decisions and checking each column's Avro type. An array of items of a kind it writes is
written item by item; a table with any other column (structs, maps, arrays of those or of
arrays, bits, zoned times, numerics read through their source type) stays on the Python path.
Per record the program returns nothing for anything it is not certain about (another connector,
the flattened shape, a TRUNCATE, a type, range or text form the converters' fast paths would not
take, the unavailable-value placeholder, a source value that is neither text, boolean nor
integer), and that record takes the Python path, which returns or raises what it always did.
``tests/unit/normalizer/test_native_row.py`` checks the bytes on random rows and records.

Without the extension (a build without Rust) or with ``ICEFJORD_NATIVE_ROWS=off``,
:data:`AVAILABLE` is False and every record takes the Python path.
"""

from __future__ import annotations

import base64
import os
from dataclasses import dataclass
from typing import Any

from services.cdc_normalizer.connect_schema import ConnectKind, ConnectSchema, LogicalName
from services.cdc_normalizer.converters import _LOCAL_TIMESTAMP_UNITS, _TIME_UNITS
from services.cdc_normalizer.envelope import row_schema_of_envelope
from services.cdc_normalizer.errors import NormalizeError
from services.cdc_normalizer.logical_types import (
    _DATE,
    _LOCAL_TS,
    _TIME_MICROS,
    _UTC_TS,
    RecordNamer,
    _is_decimal_string,
    avro_type,
    decimal_target,
)
from services.cdc_normalizer.table_schema import key_struct

# The ignores hold for a type check without the extension installed (an image built with
# no wheel of native/): the module is then unknown, and None fits it.
try:
    import icefjord_native  # type: ignore[import-not-found,unused-ignore]
except ImportError:  # pragma: no cover - make install and CI build it; a bare checkout may not
    icefjord_native = None  # type: ignore[assignment,unused-ignore]

__all__ = ["AVAILABLE", "RecordProgram", "record_program", "row_program"]

AVAILABLE = icefjord_native is not None and os.environ.get("ICEFJORD_NATIVE_ROWS") != "off"
"""Whether records may take the compiled path: the extension is built, and the environment
does not say ``ICEFJORD_NATIVE_ROWS=off`` (for side-by-side measurements)."""

ColumnSpec = tuple[str, int, int]
"""``(kind, a, b)`` of one column, as ``icefjord_native.RowProgram`` takes it."""

_INT_BITS = {ConnectKind.INT8: 8, ConnectKind.INT16: 16, ConnectKind.INT32: 32}
_PLAIN: dict[ConnectKind, tuple[ColumnSpec, Any]] = {
    ConnectKind.INT64: (("long", 0, 0), "long"),
    ConnectKind.FLOAT64: (("double", 0, 0), "double"),
    ConnectKind.FLOAT32: (("float", 0, 0), "float"),
    ConnectKind.BOOLEAN: (("boolean", 0, 0), "boolean"),
    ConnectKind.BYTES: (("bytes", 0, 0), "bytes"),
}
_STRING_LIKE = (None, LogicalName.JSON, LogicalName.XML, LogicalName.ENUM, LogicalName.INTERVAL)


def _spec(schema: ConnectSchema) -> tuple[ColumnSpec, Any] | None:
    """The compiled kind of a column and the Avro type it must have, or None: the same order
    of decisions as ``converters._compile``."""
    name = schema.name
    if _is_decimal_string(schema):
        if name == LogicalName.DECIMAL:
            return ("decimal-text", 1, int(schema.param("scale") or "0")), {
                "type": "string",
                "icefjord.semantic": "decimal",
            }
        return ("decimal-text", 0, 0), {"type": "string", "icefjord.semantic": "decimal"}
    target = decimal_target(schema)
    if target is not None:
        precision, target_scale = target
        if name != LogicalName.DECIMAL or int(schema.param("scale") or 0) != target_scale:
            return None  # read through a Decimal: the Python path
        avro = {
            "type": "bytes",
            "logicalType": "decimal",
            "precision": precision,
            "scale": target_scale,
        }
        return ("decimal", precision, target_scale), avro
    if name in _LOCAL_TIMESTAMP_UNITS:
        unit, nanos = _LOCAL_TIMESTAMP_UNITS[name]
        return ("local-timestamp", unit, int(nanos)), _LOCAL_TS
    if name in _TIME_UNITS:
        unit, nanos = _TIME_UNITS[name]
        return ("time", unit, int(nanos)), _TIME_MICROS
    if name in (LogicalName.DATE, LogicalName.CONNECT_DATE):
        return ("date", 0, 0), _DATE
    if name == LogicalName.UUID:
        return ("uuid", 0, 0), {"type": "string", "logicalType": "uuid"}
    if name == LogicalName.ZONED_TIMESTAMP:
        return ("zoned-timestamp", 0, 0), _UTC_TS
    if name == LogicalName.YEAR:
        return ("named-int", 32, 0), "int"
    if name == LogicalName.MICRO_DURATION:
        return ("named-int", 64, 0), {"type": "long", "icefjord.semantic": "duration-micros"}
    if schema.kind is ConnectKind.STRING and name in _STRING_LIKE:
        return ("text", 0, 0), None  # "string", or a string with a semantic
    if name is not None and name.startswith(("io.debezium.", "org.apache.kafka.", "io.icefjord.")):
        return None  # a logical type not listed above
    if schema.kind is ConnectKind.ARRAY:
        return _array_spec(schema)
    if schema.kind in _INT_BITS:
        return ("int", _INT_BITS[schema.kind], 0), "int"
    return _PLAIN.get(schema.kind)


def _array_spec(schema: ConnectSchema) -> tuple[ColumnSpec, Any] | None:
    """An array of items of one compiled kind (``converters._array``): ``items:<kind>``, or
    ``nullable-items:<kind>`` when an item may be null. Arrays of arrays, maps or structs stay
    on the Python path."""
    items = schema.items
    if items is None or items.kind in (ConnectKind.ARRAY, ConnectKind.MAP, ConnectKind.STRUCT):
        return None
    item = _spec(items)
    if item is None:
        return None
    (kind, a, b), expected = item
    prefix = "nullable-items:" if items.optional else "items:"
    return (prefix + kind, a, b), _ArrayOf(expected, items.optional)


@dataclass(frozen=True, slots=True)
class _ArrayOf:
    """The Avro type an array column must have: an array of the item's type, in a union with
    null when an item may be null."""

    item: Any
    nullable: bool

    def matches(self, actual: Any) -> bool:
        if not isinstance(actual, dict) or actual.get("type") != "array" or len(actual) != 2:
            return False
        items = actual.get("items")
        if self.nullable:
            if not (isinstance(items, list) and len(items) == 2 and items[0] == "null"):
                return False
            items = items[1]
        return _matches(self.item, items)


def _matches(expected: Any, actual: Any) -> bool:
    if isinstance(expected, _ArrayOf):
        return expected.matches(actual)
    if expected is None:  # a text column: a plain Avro string, with any semantic
        kind = actual.get("type") if isinstance(actual, dict) else actual
        return kind == "string" and not (isinstance(actual, dict) and "logicalType" in actual)
    return bool(expected == actual)


def _columns(row: ConnectSchema) -> list[tuple[str, str, int, int, bool]] | None:
    if row.kind is not ConnectKind.STRUCT:
        return None
    namer = RecordNamer("row")
    columns: list[tuple[str, str, int, int, bool]] = []
    for field in row.fields:
        try:
            spec = _spec(field.schema)
            if spec is None:
                return None
            (kind, a, b), expected = spec
            if not _matches(expected, avro_type(field.schema, (field.name,), namer)):
                return None
        except (NormalizeError, ValueError):
            return None
        columns.append((field.name, kind, a, b, field.schema.optional))
    return columns


def _placeholder_base64(placeholder: str) -> str:
    return base64.b64encode(placeholder.encode()).decode()


def row_program(row: ConnectSchema, placeholder: str) -> Any:
    """An ``icefjord_native.RowProgram`` of a row schema (the tests' view of one record's
    columns), or None when a column is not of a kind the program writes."""
    columns = _columns(row) if AVAILABLE else None
    if columns is None:
        return None
    return icefjord_native.RowProgram(columns, placeholder, _placeholder_base64(placeholder))


class RecordProgram:
    """What a (value schema, key schema) pair compiles to: the program, the row schema and the
    key columns ``normalize`` would use for its records."""

    __slots__ = ("columns", "compiled", "key_schema", "row")

    def __init__(
        self, compiled: Any, row: ConnectSchema, columns: tuple[str, ...], key_schema: ConnectSchema
    ) -> None:
        self.compiled = compiled
        self.row = row
        self.columns = columns
        self.key_schema = key_schema


_RECORDS: dict[tuple[int, int, str], tuple[ConnectSchema, ConnectSchema, RecordProgram | None]] = {}
_RECORDS_SIZE = 1024


def record_program(
    value_schema: ConnectSchema, key_schema: ConnectSchema, placeholder: str
) -> RecordProgram | None:
    """The program for records whose value carries ``value_schema`` (a full envelope's) and
    whose key carries ``key_schema``, or None. Remembered per pair of schema objects."""
    cache_key = (id(value_schema), id(key_schema), placeholder)
    known = _RECORDS.get(cache_key)
    if known is not None and known[0] is value_schema and known[1] is key_schema:
        return known[2]
    program = _record_program(value_schema, key_schema, placeholder)
    if len(_RECORDS) >= _RECORDS_SIZE:
        _RECORDS.clear()
    _RECORDS[cache_key] = (value_schema, key_schema, program)
    return program


def _record_program(
    value_schema: ConnectSchema, key_schema: ConnectSchema, placeholder: str
) -> RecordProgram | None:
    if not AVAILABLE or value_schema.kind is not ConnectKind.STRUCT:
        return None
    if key_schema.kind is not ConnectKind.STRUCT or not key_schema.fields:
        return None
    columns = tuple(field.name for field in key_schema.fields)
    try:
        # The very row schema object normalize plans with, so the plans are the same too.
        row = row_schema_of_envelope(value_schema)
        if row is None:
            return None
        key = key_struct(row, columns, key_schema)
    except NormalizeError:
        return None
    row_specs, key_specs = _columns(row), _columns(key)
    if row_specs is None or key_specs is None:
        return None
    encoded = _placeholder_base64(placeholder)
    compiled = icefjord_native.RecordProgram(row_specs, key_specs, placeholder, encoded)
    return RecordProgram(compiled, row, columns, key_schema)
