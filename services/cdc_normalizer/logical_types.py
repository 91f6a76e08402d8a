"""Debezium / Kafka Connect types -> Avro (Iceberg-ready) types, and exact value conversion.

Two functions share one decision per type, so a schema and its values never disagree:

* :func:`avro_type` gives the Avro type a column gets in the normalized row schema;
* :func:`convert_value` turns a Debezium value (as the JSON converter or a fastavro decode of
  Confluent Avro delivers it) into the Python value fastavro writes for that Avro type:
  ``decimal`` -> :class:`decimal.Decimal`, ``date`` -> :class:`datetime.date`, ``time-micros``
  -> :class:`datetime.time`, ``timestamp-micros`` -> UTC-aware :class:`datetime.datetime`,
  ``local-timestamp-micros`` -> naive :class:`datetime.datetime`, ``uuid`` -> canonical
  lower-case ``str``, records -> ``dict`` keyed by Avro field name, arrays -> ``list``.

The full table, and why each choice, is in this service's README. The key choices:

* ``Decimal`` with precision p <= 38 -> ``decimal(p, s)`` (a negative or over-large scale is
  widened to the smallest legal decimal that holds every value); without a precision or wider
  than 38 (Iceberg's maximum) -> ``string`` with ``icefjord.semantic: decimal``.
* ``VariableScaleDecimal`` -> ``string`` with ``icefjord.semantic: decimal``: each value has its
  own scale (Postgres unconstrained ``numeric``: up to 131072 integer and 16383 fractional
  digits), so any fixed ``decimal(38, S)`` would round or overflow; the plain decimal text keeps
  every digit and the scale, and is what Iceberg readers can ``CAST`` from.
* ``decimal.handling.mode=string|double``: the column is a plain string/double. Only when the
  connector propagates the source type (``column.propagate.source.type``, parameters
  ``__debezium.source.column.type/length/scale``) with NUMERIC/DECIMAL is it typed back to
  ``decimal(length, scale)``: strings exactly, doubles rounded half-even to the scale (exact
  whenever the source had <= 15 significant digits, the most a double carries). Otherwise it
  stays a string/double: the type is never guessed.
* Times and timestamps are always micros: ``time.precision.mode`` (adaptive,
  adaptive_time_microseconds, connect) only changes which Connect name arrives, and each name
  says its unit. Nanosecond names are floored to micros (Iceberg v2 precision).
"""

from __future__ import annotations

import base64
import binascii
import datetime as dt
import decimal
import json
import math
import re
import uuid
from collections.abc import Callable, Mapping
from typing import Any

from services.cdc_normalizer import temporal
from services.cdc_normalizer.connect_schema import ConnectKind, ConnectSchema, LogicalName
from services.cdc_normalizer.errors import (
    InvalidSchema,
    SchemaMismatch,
    UnsupportedType,
    ValueOutOfRange,
)
from shared.avro_decoder import CANONICAL_UUID

__all__ = [
    "MAX_DECIMAL_PRECISION",
    "RecordNamer",
    "avro_name",
    "avro_type",
    "convert_value",
    "decimal_target",
    "record_name",
]

MAX_DECIMAL_PRECISION = 38
SOURCE_TYPE = "__debezium.source.column.type"
SOURCE_LENGTH = "__debezium.source.column.length"
SOURCE_SCALE = "__debezium.source.column.scale"
_NUMERIC_SOURCE_TYPES = frozenset({"NUMERIC", "DECIMAL", "DEC", "FIXED", "NUMBER"})
_INT_RANGES = {
    ConnectKind.INT8: 8,
    ConnectKind.INT16: 16,
    ConnectKind.INT32: 32,
    ConnectKind.INT64: 64,
}
_FLOAT_WORDS = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}
_INVALID_NAME_CHAR = re.compile(r"[^A-Za-z0-9_]")

AvroType = Any  # Avro schema JSON: a str, a dict or a list


# --------------------------------------------------------------------------- names


def avro_name(name: str) -> str:
    """``name`` made a legal Avro name: other characters become ``_``, a leading digit gets ``_``.

    Legal names pass unchanged, so Debezium's own sanitized names (``field.name.adjustment.mode``)
    and ordinary column names keep their spelling.
    """
    cleaned = _INVALID_NAME_CHAR.sub("_", name)
    return "_" + cleaned if not cleaned or cleaned[0].isdigit() else cleaned


def record_name(*parts: str) -> str:
    """CamelCase record name from ``parts``: ("order_items", "ship to") -> ``OrderItemsShipTo``."""
    words = [word for part in parts for word in re.split(r"[^A-Za-z0-9]+", part) if word]
    joined = "".join(word[0].upper() + word[1:] for word in words) or "Record"
    return "_" + joined if joined[0].isdigit() else joined


class RecordNamer:
    """Hands out record names that are unique within one schema, deterministically.

    A nested record is named after the table and its field path (``CustomersAddress``), the
    style of ``contracts/avro/change_record``; a clash (``address.zip`` vs ``address_zip``) gets
    a numeric suffix in field order.
    """

    def __init__(self, table_name: str) -> None:
        self.table_name = table_name
        self._used: set[str] = set()

    def claim(self, name: str) -> str:
        """Reserve ``name`` (or ``name2``, ``name3``... if taken) and return what was reserved."""
        candidate, counter = name, 1
        while candidate in self._used:
            counter += 1
            candidate = f"{name}{counter}"
        self._used.add(candidate)
        return candidate

    def nested(self, path: tuple[str, ...]) -> str:
        """A fresh name for the record at field ``path`` under the table."""
        return self.claim(record_name(self.table_name, *path))


# --------------------------------------------------------------------------- decimals


def decimal_target(schema: ConnectSchema) -> tuple[int, int] | None:
    """``(precision, scale)`` of the Avro decimal for ``schema``, or None if not a decimal.

    None too for decimals that go to a decimal string (no precision, or wider than 38).
    Raises :class:`InvalidSchema` when a Decimal has no integer ``scale`` parameter.
    """
    if schema.name == LogicalName.DECIMAL:
        scale_text = schema.param("scale")
        precision_text = schema.param("connect.decimal.precision")
        if scale_text is None or not _is_int(scale_text):
            raise InvalidSchema(f"Decimal schema without an integer scale: {schema.parameters}")
        if precision_text is None or not _is_int(precision_text):
            return None
        return _legal_decimal(int(precision_text), int(scale_text))
    if _propagated_numeric(schema):
        length, scale = schema.param(SOURCE_LENGTH), schema.param(SOURCE_SCALE)
        assert length is not None and scale is not None
        return _legal_decimal(int(length), int(scale))
    return None


def _is_int(text: str) -> bool:
    return re.fullmatch(r"-?\d+", text) is not None


def _legal_decimal(precision: int, scale: int) -> tuple[int, int] | None:
    """Smallest Avro-legal ``(p, s)`` (0 <= s <= p) holding every value of ``decimal(p, s)``."""
    integer_digits = max(precision - scale, 0)
    target_scale = max(scale, 0)
    target_precision = max(integer_digits + target_scale, 1)
    if target_precision > MAX_DECIMAL_PRECISION:
        return None
    return target_precision, target_scale


def _propagated_numeric(schema: ConnectSchema) -> bool:
    if schema.name is not None or schema.kind not in (ConnectKind.STRING, ConnectKind.FLOAT64):
        return False
    source_type = (schema.param(SOURCE_TYPE) or "").upper().replace(" UNSIGNED", "").strip()
    length, scale = schema.param(SOURCE_LENGTH), schema.param(SOURCE_SCALE)
    return (
        source_type in _NUMERIC_SOURCE_TYPES
        and length is not None
        and scale is not None
        and _is_int(length)
        and _is_int(scale)
    )


def _is_decimal_string(schema: ConnectSchema) -> bool:
    if schema.name in (LogicalName.VARIABLE_SCALE_DECIMAL, LogicalName.DECIMAL_STRING):
        return True
    is_decimal = schema.name == LogicalName.DECIMAL or _propagated_numeric(schema)
    return is_decimal and decimal_target(schema) is None


def _scaled(unscaled: int, scale: int) -> decimal.Decimal:
    """``unscaled * 10**-scale`` exactly (``Decimal.scaleb`` would round to 28 digits)."""
    digits = tuple(int(digit) for digit in str(abs(unscaled)))
    return decimal.Decimal((1 if unscaled < 0 else 0, digits, -scale))


def _unscaled(raw: Any, where: str) -> int:
    """Big-endian two's-complement integer from bytes (or base64 text of them)."""
    data = _bytes(raw, where)
    if not data:
        raise SchemaMismatch(f"{where}: empty bytes are not a decimal")
    return int.from_bytes(data, "big", signed=True)


def _decimal_from_any(value: Any, where: str, scale: int | None) -> decimal.Decimal:
    """The exact decimal in ``value``; ``scale`` is the Connect scale for unscaled bytes."""
    if isinstance(value, decimal.Decimal):
        result = value
    elif isinstance(value, bool):
        raise SchemaMismatch(f"{where}: a boolean is not a decimal")
    elif isinstance(value, int):
        result = decimal.Decimal(value)
    elif isinstance(value, float):
        result = decimal.Decimal(repr(value)) if math.isfinite(value) else decimal.Decimal(value)
    elif isinstance(value, (bytes, bytearray, memoryview)) or (
        isinstance(value, str) and scale is not None
    ):
        result = _scaled(_unscaled(value, where), scale or 0)
    elif isinstance(value, str):
        try:
            result = decimal.Decimal(value.strip())
        except decimal.InvalidOperation:
            raise SchemaMismatch(f"{where}: {value!r} is not a decimal number") from None
    elif isinstance(value, Mapping) and "scale" in value and "value" in value:
        value_scale = value["scale"]
        if not isinstance(value_scale, int) or isinstance(value_scale, bool):
            raise SchemaMismatch(f"{where}: VariableScaleDecimal scale must be an integer")
        result = _scaled(_unscaled(value["value"], where), value_scale)
    else:
        raise SchemaMismatch(f"{where}: {type(value).__name__} is not a decimal")
    if not result.is_finite():
        raise ValueOutOfRange(f"{where}: {result} has no decimal representation")
    return result


def _to_decimal(schema: ConnectSchema, value: Any, where: str) -> decimal.Decimal:
    target = decimal_target(schema)
    assert target is not None
    precision, scale = target
    # Doubles (decimal.handling.mode=double, or a JSON number) are approximations of the
    # source decimal: rounding them to the declared scale recovers it. Anything else is exact.
    rounding = schema.kind is ConnectKind.FLOAT64 or isinstance(value, float)
    # Only a Connect Decimal carries unscaled bytes; string mode text is the number itself.
    bytes_scale = int(schema.param("scale") or 0) if schema.name == LogicalName.DECIMAL else None
    exact = _decimal_from_any(value, where, bytes_scale)
    if exact != 0 and exact.adjusted() >= precision - scale:
        raise ValueOutOfRange(f"{where}: {exact} does not fit decimal({precision}, {scale})")
    context = decimal.Context(prec=precision + 1, rounding=decimal.ROUND_HALF_EVEN)
    quantized = exact.quantize(decimal.Decimal(1).scaleb(-scale), context=context)
    if quantized != exact and not rounding:
        raise ValueOutOfRange(f"{where}: {exact} has more than {scale} fractional digits")
    if len(quantized.as_tuple().digits) > precision and quantized != 0:
        raise ValueOutOfRange(f"{where}: {exact} does not fit decimal({precision}, {scale})")
    return quantized


def _to_decimal_string(schema: ConnectSchema, value: Any, where: str) -> str:
    scale: int | None = None
    if schema.name == LogicalName.DECIMAL:
        scale = int(schema.param("scale") or 0)
    return format(_decimal_from_any(value, where, scale), "f")


# --------------------------------------------------------------------------- Avro types

_TIME_MICROS = {"type": "long", "logicalType": "time-micros"}
_LOCAL_TS = {"type": "long", "logicalType": "local-timestamp-micros"}
_UTC_TS = {"type": "long", "logicalType": "timestamp-micros"}
_DATE = {"type": "int", "logicalType": "date"}

_NAMED_AVRO: dict[str, AvroType] = {
    LogicalName.CONNECT_DATE: _DATE,
    LogicalName.DATE: _DATE,
    LogicalName.CONNECT_TIME: _TIME_MICROS,
    LogicalName.TIME: _TIME_MICROS,
    LogicalName.MICRO_TIME: _TIME_MICROS,
    LogicalName.NANO_TIME: _TIME_MICROS,
    LogicalName.ZONED_TIME: _TIME_MICROS,
    LogicalName.CONNECT_TIMESTAMP: _LOCAL_TS,
    LogicalName.TIMESTAMP: _LOCAL_TS,
    LogicalName.MICRO_TIMESTAMP: _LOCAL_TS,
    LogicalName.NANO_TIMESTAMP: _LOCAL_TS,
    LogicalName.ZONED_TIMESTAMP: _UTC_TS,
    LogicalName.TIMESTAMP_MICROS_UTC: _UTC_TS,
    LogicalName.TIMESTAMP_MILLIS_UTC: _UTC_TS,
    LogicalName.YEAR: "int",
    LogicalName.MICRO_DURATION: {"type": "long", "icefjord.semantic": "duration-micros"},
    LogicalName.INTERVAL: {"type": "string", "icefjord.semantic": "duration-iso"},
    LogicalName.JSON: {"type": "string", "icefjord.semantic": "json"},
    LogicalName.XML: {"type": "string", "icefjord.semantic": "xml"},
    LogicalName.UUID: {"type": "string", "logicalType": "uuid"},
    LogicalName.ENUM: {"type": "string", "icefjord.semantic": "enum"},
    LogicalName.ENUM_SET: {"type": "array", "items": "string", "icefjord.semantic": "enum-set"},
    LogicalName.BITS: {"type": "bytes", "icefjord.semantic": "bits"},
}
_GEO_SEMANTIC: dict[str, str] = {
    LogicalName.GEOMETRY: "geometry",
    LogicalName.GEOGRAPHY: "geography",
    LogicalName.POINT: "point",
}
_PRIMITIVE_AVRO = {
    ConnectKind.INT8: "int",
    ConnectKind.INT16: "int",
    ConnectKind.INT32: "int",
    ConnectKind.INT64: "long",
    ConnectKind.FLOAT32: "float",
    ConnectKind.FLOAT64: "double",
    ConnectKind.BOOLEAN: "boolean",
    ConnectKind.STRING: "string",
    ConnectKind.BYTES: "bytes",
}


def nullable(avro: AvroType, optional: bool) -> AvroType:
    """``["null", avro]`` when ``optional``, else ``avro`` unchanged."""
    return ["null", avro] if optional else avro


def _copy(avro: AvroType) -> AvroType:
    return json.loads(json.dumps(avro)) if isinstance(avro, (dict, list)) else avro


def avro_type(schema: ConnectSchema, path: tuple[str, ...], namer: RecordNamer) -> AvroType:
    """The Avro type (without the null branch) for a column of ``schema`` at field ``path``.

    Deterministic: the same schema, path and naming state give the same JSON. Raises
    :class:`UnsupportedType` for maps whose keys are not strings and :class:`InvalidSchema`
    for a Decimal without a scale.
    """
    if _is_decimal_string(schema):
        return {"type": "string", "icefjord.semantic": "decimal"}
    target = decimal_target(schema)
    if target is not None:
        precision, scale = target
        return {"type": "bytes", "logicalType": "decimal", "precision": precision, "scale": scale}
    if schema.name in _NAMED_AVRO:
        return _copy(_NAMED_AVRO[schema.name])
    if schema.kind is ConnectKind.STRUCT:
        return struct_record(schema, path, namer.nested(path), namer)
    if schema.kind is ConnectKind.ARRAY:
        assert schema.items is not None
        items = avro_type(schema.items, path, namer)
        return {"type": "array", "items": nullable(items, schema.items.optional)}
    if schema.kind is ConnectKind.MAP:
        assert schema.keys is not None and schema.values is not None
        if schema.keys.kind is not ConnectKind.STRING:
            raise UnsupportedType(f"{'.'.join(path)}: map keys must be strings")
        values = avro_type(schema.values, path, namer)
        return {"type": "map", "values": nullable(values, schema.values.optional)}
    return _PRIMITIVE_AVRO[schema.kind]


def struct_record(
    schema: ConnectSchema, path: tuple[str, ...], name: str, namer: RecordNamer
) -> dict[str, Any]:
    """An Avro record named ``name`` for a STRUCT schema; optional fields default to null.

    A field whose name is not a legal Avro name is renamed by :func:`avro_name` and keeps its
    source spelling in ``icefjord.source_name``. Raises :class:`InvalidSchema` when two fields
    collide after renaming.
    """
    fields: list[dict[str, Any]] = []
    seen: dict[str, str] = {}
    for field in schema.fields:
        name_in_avro = avro_name(field.name)
        if name_in_avro in seen:
            raise InvalidSchema(
                f"fields {seen[name_in_avro]!r} and {field.name!r} both map to {name_in_avro!r}"
            )
        seen[name_in_avro] = field.name
        field_type = avro_type(field.schema, (*path, field.name), namer)
        entry: dict[str, Any] = {"name": name_in_avro, "type": field_type}
        if field.schema.optional:
            entry = {"name": name_in_avro, "type": ["null", field_type], "default": None}
        if name_in_avro != field.name:
            entry["icefjord.source_name"] = field.name
        fields.append(entry)
    record: dict[str, Any] = {"type": "record", "name": name, "fields": fields}
    semantic = _GEO_SEMANTIC.get(schema.name or "")
    if semantic is not None:
        record["icefjord.semantic"] = semantic
    return record


# --------------------------------------------------------------------------- values


def _bytes(value: Any, where: str) -> bytes:
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value)
    if isinstance(value, str):
        try:
            return base64.b64decode(value, validate=True)
        except (binascii.Error, ValueError):
            raise SchemaMismatch(f"{where}: {value[:40]!r} is not base64") from None
    raise SchemaMismatch(f"{where}: {type(value).__name__} is not bytes")


def _int(value: Any, where: str) -> int:
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    raise SchemaMismatch(f"{where}: expected an integer, got {type(value).__name__}")


def _str(value: Any, where: str) -> str:
    if isinstance(value, str):
        return value
    raise SchemaMismatch(f"{where}: expected a string, got {type(value).__name__}")


def _float(value: Any, where: str) -> float:
    if isinstance(value, (int, float, decimal.Decimal)) and not isinstance(value, bool):
        return float(value)
    if isinstance(value, str) and value in _FLOAT_WORDS:
        return _FLOAT_WORDS[value]  # Jackson quotes non-finite doubles by default
    raise SchemaMismatch(f"{where}: expected a number, got {type(value).__name__}")


def _scaled_micros(value: Any, where: str, micros_per_unit: int, nanos: bool = False) -> int:
    number = _int(value, where)
    return number // 1000 if nanos else number * micros_per_unit


def _to_date(value: Any, where: str) -> dt.date:
    if isinstance(value, dt.datetime):
        raise SchemaMismatch(f"{where}: a datetime is not a date")
    if isinstance(value, dt.date):
        return value
    if isinstance(value, str):
        try:
            return dt.date.fromisoformat(value)
        except ValueError:
            raise SchemaMismatch(f"{where}: {value!r} is not an ISO date") from None
    return temporal.date_from_days(_int(value, where), where)


def _to_time(name: str, value: Any, where: str) -> dt.time:
    if isinstance(value, dt.time):
        return value.replace(tzinfo=None)
    if name == LogicalName.ZONED_TIME:
        micros = temporal.micros_from_iso_time_with_offset(_str(value, where), where)
    elif name in (LogicalName.TIME, LogicalName.CONNECT_TIME):
        micros = _scaled_micros(value, where, 1000)
    elif name == LogicalName.NANO_TIME:
        micros = _scaled_micros(value, where, 1, nanos=True)
    else:
        micros = _scaled_micros(value, where, 1)
    return temporal.time_from_micros(micros, where)


def _to_local_timestamp(name: str, value: Any, where: str) -> dt.datetime:
    if isinstance(value, dt.datetime):
        if value.tzinfo is None:
            return value
        # fastavro decodes Connect Timestamp (timestamp-millis) as UTC-aware: same wall clock.
        return value.astimezone(dt.UTC).replace(tzinfo=None)
    if isinstance(value, str):
        return temporal.parse_iso_local_datetime(value, where)
    if name in (LogicalName.TIMESTAMP, LogicalName.CONNECT_TIMESTAMP):
        micros = _scaled_micros(value, where, 1000)
    elif name == LogicalName.NANO_TIMESTAMP:
        micros = _scaled_micros(value, where, 1, nanos=True)
    else:
        micros = _scaled_micros(value, where, 1)
    return temporal.local_datetime_from_micros(micros, where)


def _to_utc_timestamp(name: str, value: Any, where: str) -> dt.datetime:
    if isinstance(value, dt.datetime):
        if value.tzinfo is None:
            raise SchemaMismatch(f"{where}: a zone-less datetime is not an instant")
        return value.astimezone(dt.UTC)
    if isinstance(value, str):
        return temporal.parse_iso_offset_datetime(value, where)
    if name == LogicalName.ZONED_TIMESTAMP:
        raise SchemaMismatch(f"{where}: ZonedTimestamp must be ISO-8601 text")
    unit = 1000 if name == LogicalName.TIMESTAMP_MILLIS_UTC else 1
    return temporal.utc_datetime_from_micros(_scaled_micros(value, where, unit), where)


def _to_uuid(value: Any, where: str) -> str:
    if type(value) is str and CANONICAL_UUID.fullmatch(value) is not None:
        return value  # what str(uuid.UUID(value)) gives back, without building one
    if isinstance(value, uuid.UUID):
        return str(value)
    try:
        return str(uuid.UUID(_str(value, where)))
    except ValueError:
        raise SchemaMismatch(f"{where}: {value!r} is not a UUID") from None


def _to_json_text(value: Any, where: str) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, (Mapping, list)):
        return json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    raise SchemaMismatch(f"{where}: expected JSON text, got {type(value).__name__}")


def _to_enum_set(value: Any, where: str) -> list[str]:
    if isinstance(value, list) and all(isinstance(item, str) for item in value):
        return list(value)
    text = _str(value, where)
    return text.split(",") if text else []


def _to_struct(schema: ConnectSchema, value: Any, where: str) -> dict[str, Any]:
    if not isinstance(value, Mapping):
        raise SchemaMismatch(f"{where}: expected an object, got {type(value).__name__}")
    known = {field.name for field in schema.fields}
    unknown = [name for name in value if name not in known]
    if unknown:
        raise SchemaMismatch(f"{where}: fields {sorted(unknown)} are not in the schema")
    return {
        avro_name(field.name): convert_value(
            field.schema, value.get(field.name), f"{where}.{field.name}"
        )
        for field in schema.fields
    }


_NAMED_CONVERTERS: dict[str, Callable[[ConnectSchema, Any, str], Any]] = {
    LogicalName.CONNECT_DATE: lambda _s, v, w: _to_date(v, w),
    LogicalName.DATE: lambda _s, v, w: _to_date(v, w),
    LogicalName.UUID: lambda _s, v, w: _to_uuid(v, w),
    LogicalName.JSON: lambda _s, v, w: _to_json_text(v, w),
    LogicalName.ENUM_SET: lambda _s, v, w: _to_enum_set(v, w),
    LogicalName.BITS: lambda _s, v, w: _bytes(v, w),
    LogicalName.YEAR: lambda _s, v, w: _int(v, w),
    LogicalName.MICRO_DURATION: lambda _s, v, w: _int(v, w),
    LogicalName.ZONED_TIMESTAMP: lambda s, v, w: _to_utc_timestamp(s.name or "", v, w),
    LogicalName.TIMESTAMP_MICROS_UTC: lambda s, v, w: _to_utc_timestamp(s.name or "", v, w),
    LogicalName.TIMESTAMP_MILLIS_UTC: lambda s, v, w: _to_utc_timestamp(s.name or "", v, w),
}
for _name in (LogicalName.CONNECT_TIME, LogicalName.TIME, LogicalName.MICRO_TIME):
    _NAMED_CONVERTERS[_name] = lambda s, v, w: _to_time(s.name or "", v, w)
for _name in (LogicalName.NANO_TIME, LogicalName.ZONED_TIME):
    _NAMED_CONVERTERS[_name] = lambda s, v, w: _to_time(s.name or "", v, w)
for _name in (LogicalName.CONNECT_TIMESTAMP, LogicalName.TIMESTAMP):
    _NAMED_CONVERTERS[_name] = lambda s, v, w: _to_local_timestamp(s.name or "", v, w)
for _name in (LogicalName.MICRO_TIMESTAMP, LogicalName.NANO_TIMESTAMP):
    _NAMED_CONVERTERS[_name] = lambda s, v, w: _to_local_timestamp(s.name or "", v, w)


def _convert_plain(schema: ConnectSchema, value: Any, where: str) -> Any:
    kind = schema.kind
    if kind in _INT_RANGES:
        number = _int(value, where)
        bits = _INT_RANGES[kind]
        if not -(1 << (bits - 1)) <= number < (1 << (bits - 1)):
            raise SchemaMismatch(f"{where}: {number} does not fit {kind.value}")
        return number
    if kind in (ConnectKind.FLOAT32, ConnectKind.FLOAT64):
        return _float(value, where)
    if kind is ConnectKind.BOOLEAN:
        if isinstance(value, bool):
            return value
        raise SchemaMismatch(f"{where}: expected a boolean, got {type(value).__name__}")
    if kind is ConnectKind.STRING:
        return _str(value, where)
    if kind is ConnectKind.BYTES:
        return _bytes(value, where)
    if kind is ConnectKind.STRUCT:
        return _to_struct(schema, value, where)
    if kind is ConnectKind.ARRAY:
        assert schema.items is not None
        if not isinstance(value, list):
            raise SchemaMismatch(f"{where}: expected an array, got {type(value).__name__}")
        return [convert_value(schema.items, item, f"{where}[{i}]") for i, item in enumerate(value)]
    assert schema.values is not None
    if not isinstance(value, Mapping) or not all(isinstance(key, str) for key in value):
        raise SchemaMismatch(f"{where}: expected an object with string keys")
    return {
        key: convert_value(schema.values, item, f"{where}.{key}") for key, item in value.items()
    }


def convert_value(schema: ConnectSchema, value: Any, where: str) -> Any:
    """``value`` (JSON-decoded or fastavro-decoded) as the Python value of its Avro type.

    ``where`` names the column path in error messages. Null is allowed only for optional
    schemas. Raises :class:`SchemaMismatch` when the value has the wrong shape for its schema
    and :class:`ValueOutOfRange` when the target type cannot hold it exactly.
    """
    if value is None:
        if schema.optional:
            return None
        raise SchemaMismatch(f"{where}: null in a required field")
    if _is_decimal_string(schema):
        return _to_decimal_string(schema, value, where)
    if decimal_target(schema) is not None:
        return _to_decimal(schema, value, where)
    converter = _NAMED_CONVERTERS.get(schema.name or "")
    if converter is not None:
        return converter(schema, value, where)
    return _convert_plain(schema, value, where)
