"""The column-type model: Kafka Connect schemas, read from JSON ``schema`` blocks or Avro.

Debezium describes every column with a Kafka Connect schema: a physical type (``int32``,
``bytes``, ``struct``, ...), an optional logical ``name`` (``io.debezium.time.Date``,
``org.apache.kafka.connect.data.Decimal``, ...) and string ``parameters``. That triple is the one
internal model here, whatever the wire format was:

* :func:`connect_schema_from_json` reads the ``schema`` block of the Kafka JSON converter;
* :func:`connect_schema_from_avro` reads an Avro schema, either one written by Confluent's
  AvroConverter (which keeps the Connect view in ``connect.name`` / ``connect.parameters`` /
  ``connect.type``) or a declared one that uses plain Avro logical types (``decimal``, ``date``,
  ``timestamp-micros``, ...) and Icefjord's ``icefjord.semantic`` property. Plain logical types
  map to the Debezium name with the same meaning, or to an ``io.icefjord.*`` name where Debezium
  has none (an int64 UTC instant), so ``logical_types`` has one mapping per meaning.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from enum import StrEnum
from typing import Any

from services.cdc_normalizer.errors import InvalidSchema, UnsupportedType

__all__ = [
    "ConnectField",
    "ConnectKind",
    "ConnectSchema",
    "LogicalName",
    "connect_schema_from_avro",
    "connect_schema_from_json",
    "struct",
]


class ConnectKind(StrEnum):
    """Kafka Connect physical types (``Schema.Type``), spelled as in the JSON converter."""

    INT8 = "int8"
    INT16 = "int16"
    INT32 = "int32"
    INT64 = "int64"
    FLOAT32 = "float32"
    FLOAT64 = "float64"
    BOOLEAN = "boolean"
    STRING = "string"
    BYTES = "bytes"
    ARRAY = "array"
    MAP = "map"
    STRUCT = "struct"


class LogicalName(StrEnum):
    """Connect schema names with a meaning beyond their physical type."""

    DECIMAL = "org.apache.kafka.connect.data.Decimal"
    CONNECT_DATE = "org.apache.kafka.connect.data.Date"
    CONNECT_TIME = "org.apache.kafka.connect.data.Time"
    CONNECT_TIMESTAMP = "org.apache.kafka.connect.data.Timestamp"
    VARIABLE_SCALE_DECIMAL = "io.debezium.data.VariableScaleDecimal"
    DATE = "io.debezium.time.Date"
    TIME = "io.debezium.time.Time"
    MICRO_TIME = "io.debezium.time.MicroTime"
    NANO_TIME = "io.debezium.time.NanoTime"
    TIMESTAMP = "io.debezium.time.Timestamp"
    MICRO_TIMESTAMP = "io.debezium.time.MicroTimestamp"
    NANO_TIMESTAMP = "io.debezium.time.NanoTimestamp"
    ZONED_TIMESTAMP = "io.debezium.time.ZonedTimestamp"
    ZONED_TIME = "io.debezium.time.ZonedTime"
    YEAR = "io.debezium.time.Year"
    MICRO_DURATION = "io.debezium.time.MicroDuration"
    INTERVAL = "io.debezium.time.Interval"
    JSON = "io.debezium.data.Json"
    UUID = "io.debezium.data.Uuid"
    XML = "io.debezium.data.Xml"
    ENUM = "io.debezium.data.Enum"
    ENUM_SET = "io.debezium.data.EnumSet"
    BITS = "io.debezium.data.Bits"
    GEOMETRY = "io.debezium.data.geometry.Geometry"
    GEOGRAPHY = "io.debezium.data.geometry.Geography"
    POINT = "io.debezium.data.geometry.Point"
    # Meanings Debezium has no name for, reached only from declared Avro schemas.
    TIMESTAMP_MICROS_UTC = "io.icefjord.time.TimestampMicros"
    TIMESTAMP_MILLIS_UTC = "io.icefjord.time.TimestampMillis"
    DECIMAL_STRING = "io.icefjord.data.DecimalString"


@dataclass(frozen=True, slots=True)
class ConnectField:
    """One field of a struct: its source name and its schema."""

    name: str
    schema: ConnectSchema


@dataclass(frozen=True, slots=True)
class ConnectSchema:
    """A Kafka Connect schema. Hashable, so equal schemas compare and cache as equal.

    ``parameters`` is a sorted tuple of pairs (Connect parameters are a string map).
    ``fields`` is set for STRUCT, ``items`` for ARRAY, ``keys``/``values`` for MAP.
    """

    kind: ConnectKind
    optional: bool = False
    name: str | None = None
    parameters: tuple[tuple[str, str], ...] = ()
    fields: tuple[ConnectField, ...] = ()
    items: ConnectSchema | None = None
    keys: ConnectSchema | None = None
    values: ConnectSchema | None = None
    doc: str | None = None

    def param(self, key: str) -> str | None:
        """The parameter ``key``, or None."""
        for name, value in self.parameters:
            if name == key:
                return value
        return None

    def field(self, name: str) -> ConnectField | None:
        """The struct field called ``name``, or None."""
        for candidate in self.fields:
            if candidate.name == name:
                return candidate
        return None

    def as_required(self) -> ConnectSchema:
        """The same schema with ``optional`` False."""
        return self if not self.optional else replace(self, optional=False)


def struct(
    fields: Sequence[ConnectField], *, name: str | None = None, optional: bool = False
) -> ConnectSchema:
    """A STRUCT schema with ``fields`` (a convenience for callers and tests)."""
    return ConnectSchema(ConnectKind.STRUCT, optional=optional, name=name, fields=tuple(fields))


def _parameters(raw: Any, where: str) -> tuple[tuple[str, str], ...]:
    if raw is None:
        return ()
    if not isinstance(raw, Mapping):
        raise InvalidSchema(f"{where}: parameters must be an object, got {type(raw).__name__}")
    return tuple(sorted((str(key), str(value)) for key, value in raw.items()))


def connect_schema_from_json(block: Any, where: str = "schema") -> ConnectSchema:
    """Read a Kafka JSON converter ``schema`` block into a :class:`ConnectSchema`.

    ``where`` prefixes error messages (a field path). Raises :class:`InvalidSchema` for a block
    that is not a schema (unknown ``type``, struct without ``fields``, array without ``items``).
    """
    if not isinstance(block, Mapping):
        raise InvalidSchema(f"{where}: a schema must be an object, got {type(block).__name__}")
    try:
        raw_type = str(block.get("type"))
        # Kafka's JsonConverter writes FLOAT32/FLOAT64 as "float"/"double" in its envelope.
        kind = _JSON_FLOAT_NAMES.get(raw_type) or ConnectKind(raw_type)
    except ValueError:
        raise InvalidSchema(f"{where}: unknown Connect type {block.get('type')!r}") from None
    name = block.get("name")
    doc = block.get("doc")
    schema = ConnectSchema(
        kind=kind,
        optional=bool(block.get("optional", False)),
        name=name if isinstance(name, str) else None,
        parameters=_parameters(block.get("parameters"), where),
        doc=doc if isinstance(doc, str) else None,
    )
    if kind is ConnectKind.STRUCT:
        raw_fields = block.get("fields")
        if not isinstance(raw_fields, list):
            raise InvalidSchema(f"{where}: a struct needs a 'fields' list")
        fields = []
        for raw in raw_fields:
            field_name = raw.get("field") if isinstance(raw, Mapping) else None
            if not isinstance(field_name, str):
                raise InvalidSchema(f"{where}: a struct field needs a string 'field' name")
            fields.append(
                ConnectField(field_name, connect_schema_from_json(raw, f"{where}.{field_name}"))
            )
        return replace(schema, fields=tuple(fields))
    if kind is ConnectKind.ARRAY:
        if "items" not in block:
            raise InvalidSchema(f"{where}: an array needs 'items'")
        return replace(schema, items=connect_schema_from_json(block["items"], f"{where}[]"))
    if kind is ConnectKind.MAP:
        if "keys" not in block or "values" not in block:
            raise InvalidSchema(f"{where}: a map needs 'keys' and 'values'")
        return replace(
            schema,
            keys=connect_schema_from_json(block["keys"], f"{where}{{key}}"),
            values=connect_schema_from_json(block["values"], f"{where}{{value}}"),
        )
    return schema


_JSON_FLOAT_NAMES = {"float": ConnectKind.FLOAT32, "double": ConnectKind.FLOAT64}

_AVRO_PRIMITIVES = {
    "boolean": ConnectKind.BOOLEAN,
    "int": ConnectKind.INT32,
    "long": ConnectKind.INT64,
    "float": ConnectKind.FLOAT32,
    "double": ConnectKind.FLOAT64,
    "bytes": ConnectKind.BYTES,
    "string": ConnectKind.STRING,
}

# Plain Avro logical types (no connect.name) -> the Connect name with the same meaning.
_AVRO_LOGICAL = {
    ("int", "date"): LogicalName.DATE,
    ("int", "time-millis"): LogicalName.TIME,
    ("long", "time-micros"): LogicalName.MICRO_TIME,
    ("long", "timestamp-millis"): LogicalName.TIMESTAMP_MILLIS_UTC,
    ("long", "timestamp-micros"): LogicalName.TIMESTAMP_MICROS_UTC,
    ("long", "local-timestamp-millis"): LogicalName.TIMESTAMP,
    ("long", "local-timestamp-micros"): LogicalName.MICRO_TIMESTAMP,
    ("string", "uuid"): LogicalName.UUID,
}

# icefjord.semantic on a declared schema -> the Connect name it stands for.
_SEMANTICS = {
    ("string", "json"): LogicalName.JSON,
    ("string", "decimal"): LogicalName.DECIMAL_STRING,
    ("string", "enum"): LogicalName.ENUM,
    ("string", "xml"): LogicalName.XML,
    ("string", "time-utc"): LogicalName.ZONED_TIME,
    ("string", "duration-iso"): LogicalName.INTERVAL,
    ("long", "duration-micros"): LogicalName.MICRO_DURATION,
    ("int", "year"): LogicalName.YEAR,
    ("bytes", "bits"): LogicalName.BITS,
    ("array", "enum-set"): LogicalName.ENUM_SET,
    ("record", "geometry"): LogicalName.GEOMETRY,
    ("record", "geography"): LogicalName.GEOGRAPHY,
    ("record", "point"): LogicalName.POINT,
}


class _AvroReader:
    """Walks one Avro schema, remembering named types so later references resolve."""

    def __init__(self) -> None:
        self.named: dict[str, ConnectSchema] = {}

    def read(self, avro: Any, where: str, namespace: str | None) -> ConnectSchema:
        if isinstance(avro, list):
            return self._union(avro, where, namespace)
        if isinstance(avro, str):
            if avro in _AVRO_PRIMITIVES:
                return ConnectSchema(_AVRO_PRIMITIVES[avro])
            full = avro if "." in avro or namespace is None else f"{namespace}.{avro}"
            for candidate in (full, avro):
                if candidate in self.named:
                    return self.named[candidate]
            raise InvalidSchema(f"{where}: unknown Avro type {avro!r}")
        if not isinstance(avro, Mapping):
            raise InvalidSchema(f"{where}: not an Avro schema: {avro!r}")
        avro_type = avro.get("type")
        if isinstance(avro_type, (list, Mapping)):
            return self.read(avro_type, where, namespace)
        if avro_type == "record":
            return self._record(avro, where, namespace)
        if avro_type == "array":
            items = self.read(avro.get("items"), f"{where}[]", namespace)
            return self._named_by_props(ConnectSchema(ConnectKind.ARRAY, items=items), avro)
        if avro_type == "map":
            values = self.read(avro.get("values"), f"{where}{{value}}", namespace)
            keys = ConnectSchema(ConnectKind.STRING)
            return self._named_by_props(
                ConnectSchema(ConnectKind.MAP, keys=keys, values=values), avro
            )
        if avro_type == "enum":
            enum = ConnectSchema(ConnectKind.STRING, name=LogicalName.ENUM.value)
            self._register(avro, namespace, enum)
            return enum
        if avro_type == "fixed":
            fixed = self._primitive(ConnectKind.BYTES, "bytes", avro, where)
            self._register(avro, namespace, fixed)
            return fixed
        if avro_type in _AVRO_PRIMITIVES:
            return self._primitive(_AVRO_PRIMITIVES[avro_type], avro_type, avro, where)
        raise InvalidSchema(f"{where}: unknown Avro type {avro_type!r}")

    def _union(self, branches: list[Any], where: str, namespace: str | None) -> ConnectSchema:
        non_null = [branch for branch in branches if branch != "null"]
        if len(non_null) != 1:
            raise UnsupportedType(f'{where}: only ["null", T] unions are supported: {branches}')
        inner = self.read(non_null[0], where, namespace)
        return replace(inner, optional=len(branches) == 2)

    def _register(self, avro: Mapping[str, Any], namespace: str | None, schema: Any) -> None:
        name = avro.get("name")
        if isinstance(name, str):
            space = avro.get("namespace", namespace)
            self.named[name if "." in name or not space else f"{space}.{name}"] = schema

    def _record(self, avro: Mapping[str, Any], where: str, namespace: str | None) -> ConnectSchema:
        name = avro.get("name")
        space = avro.get("namespace", namespace)
        if isinstance(name, str) and "." in name:
            space = name.rsplit(".", 1)[0]
        raw_fields = avro.get("fields")
        if not isinstance(raw_fields, list):
            raise InvalidSchema(f"{where}: a record needs a 'fields' list")
        fields = []
        for raw in raw_fields:
            if not isinstance(raw, Mapping) or not isinstance(raw.get("name"), str):
                raise InvalidSchema(f"{where}: a record field needs a string 'name'")
            field_schema = self.read(raw.get("type"), f"{where}.{raw['name']}", space)
            doc = raw.get("doc")
            if isinstance(doc, str) and field_schema.doc is None:
                field_schema = replace(field_schema, doc=doc)
            fields.append(ConnectField(raw["name"], field_schema))
        schema = self._named_by_props(ConnectSchema(ConnectKind.STRUCT, fields=tuple(fields)), avro)
        self._register(avro, namespace, schema)
        return schema

    def _named_by_props(self, schema: ConnectSchema, avro: Mapping[str, Any]) -> ConnectSchema:
        connect_name = avro.get("connect.name")
        if isinstance(connect_name, str):
            params = _parameters(avro.get("connect.parameters"), "connect.parameters")
            return replace(schema, name=connect_name, parameters=params)
        avro_type = avro.get("type")
        semantic = _SEMANTICS.get((str(avro_type), str(avro.get("icefjord.semantic"))))
        return replace(schema, name=semantic.value) if semantic else schema

    def _primitive(
        self, kind: ConnectKind, avro_type: str, avro: Mapping[str, Any], where: str
    ) -> ConnectSchema:
        connect_type = avro.get("connect.type")
        if avro_type == "int" and connect_type in ("int8", "int16"):
            kind = ConnectKind(connect_type)
        connect_name = avro.get("connect.name")
        params = _parameters(avro.get("connect.parameters"), where)
        if isinstance(connect_name, str):
            return ConnectSchema(kind, name=connect_name, parameters=params)
        logical = avro.get("logicalType")
        if logical == "decimal" and avro_type in ("bytes", "fixed"):
            scale, precision = avro.get("scale", 0), avro.get("precision")
            if not isinstance(scale, int) or not isinstance(precision, int):
                raise InvalidSchema(f"{where}: a decimal needs integer precision and scale")
            decimal_params = (("connect.decimal.precision", str(precision)), ("scale", str(scale)))
            return ConnectSchema(kind, name=LogicalName.DECIMAL.value, parameters=decimal_params)
        mapped = _AVRO_LOGICAL.get((avro_type, str(logical)))
        if mapped is not None:
            return ConnectSchema(kind, name=mapped.value)
        return self._named_by_props(ConnectSchema(kind, parameters=params), avro)


def connect_schema_from_avro(avro: Any) -> ConnectSchema:
    """Read an Avro schema (parsed JSON: dict, list or str) into a :class:`ConnectSchema`.

    Accepts what Confluent's AvroConverter writes for Debezium topics (``connect.name``,
    ``connect.parameters``, ``connect.type`` properties win over Avro logical types, because
    they carry Debezium's meaning: a Connect ``Timestamp`` is a zone-less datetime in Debezium
    even though AvroData spells it ``timestamp-millis``) and declared row schemas using plain
    Avro logical types or ``icefjord.semantic``. ``["null", T]`` unions become optional
    schemas. Raises :class:`InvalidSchema` for malformed input and :class:`UnsupportedType`
    for unions of several non-null types.
    """
    return _AvroReader().read(avro, "avro", None)
