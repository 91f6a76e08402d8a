"""Avro type helpers for schema evolution: inlining named types, nullability, type families.

Everything here works on parsed Avro JSON (dicts, lists, strings) and never mutates its input.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from shared.errors import IcefjordError

PRIMITIVES = frozenset({"null", "boolean", "int", "long", "float", "double", "bytes", "string"})
NAMED = frozenset({"record", "error", "enum", "fixed"})

# Logical types Iceberg knows, with the Avro types they may annotate. A logical type on any other
# base is kept as a family of its own rather than ignored: a change to it is never silently safe.
LOGICAL_BASES: Mapping[str, frozenset[str]] = {
    "date": frozenset({"int"}),
    "time-millis": frozenset({"int"}),
    "time-micros": frozenset({"long"}),
    "timestamp-millis": frozenset({"long"}),
    "timestamp-micros": frozenset({"long"}),
    "timestamp-nanos": frozenset({"long"}),
    "local-timestamp-millis": frozenset({"long"}),
    "local-timestamp-micros": frozenset({"long"}),
    "local-timestamp-nanos": frozenset({"long"}),
    "uuid": frozenset({"string", "fixed"}),
    "decimal": frozenset({"bytes", "fixed"}),
    "duration": frozenset({"fixed"}),
}

# The only type changes Iceberg can apply in place (besides decimal precision, handled apart).
WIDENINGS = frozenset({("int", "long"), ("float", "double")})
NARROWINGS = frozenset({(new, old) for old, new in WIDENINGS})

DEPRECATED_PROPERTY = "icefjord.deprecated"


class MalformedSchemaError(IcefjordError, ValueError):
    """The schema is not a usable Avro schema; the message says what and where."""


def expand_named_types(schema: Any, *, allow_redefinition: bool = False) -> Any:
    """Return a deep copy of `schema` with every named-type reference replaced by its definition.

    Named types are resolved with Avro's namespace rules. Raises MalformedSchemaError for an
    unknown name, a recursive type (Iceberg has none), a redefined name (unless
    `allow_redefinition`, for schemas that were already expanded), duplicate field names, a
    field without a name, a union nested in a union, or a decimal without a valid precision.
    """
    return _Expander(allow_redefinition).expand(schema, None, ())


class _Expander:
    def __init__(self, allow_redefinition: bool) -> None:
        self._named: dict[str, Any] = {}
        self._allow_redefinition = allow_redefinition

    def expand(self, schema: Any, namespace: str | None, stack: tuple[str, ...]) -> Any:
        if isinstance(schema, str):
            return self._reference(schema, namespace, stack)
        if isinstance(schema, list):
            return self._union(schema, namespace, stack)
        if not isinstance(schema, Mapping):
            raise MalformedSchemaError(f"not an Avro type: {schema!r}")
        kind = schema.get("type")
        if isinstance(kind, str) and kind in NAMED:
            return self._named_type(schema, kind, namespace, stack)
        if kind == "array":
            if "items" not in schema:
                raise MalformedSchemaError("array type without 'items'")
            return {**schema, "items": self.expand(schema["items"], namespace, stack)}
        if kind == "map":
            if "values" not in schema:
                raise MalformedSchemaError("map type without 'values'")
            return {**schema, "values": self.expand(schema["values"], namespace, stack)}
        if isinstance(kind, str) and kind in PRIMITIVES:
            if schema.get("logicalType") == "decimal":
                decimal_parameters(schema)
            return dict(schema)
        if isinstance(kind, str):
            return self._reference(kind, namespace, stack)
        raise MalformedSchemaError(f"not an Avro type: {schema!r}")

    def _reference(self, name: str, namespace: str | None, stack: tuple[str, ...]) -> Any:
        if name in PRIMITIVES:
            return name
        candidates = [name] if "." in name or not namespace else [f"{namespace}.{name}", name]
        for full in candidates:
            if full in stack:
                raise MalformedSchemaError(f"recursive type {full} cannot be an Iceberg column")
            if full in self._named:
                return copy.deepcopy(self._named[full])
        raise MalformedSchemaError(f"unknown type name {name!r}")

    def _union(self, branches: list[Any], namespace: str | None, stack: tuple[str, ...]) -> Any:
        if any(isinstance(branch, list) for branch in branches):
            raise MalformedSchemaError("a union may not directly contain another union")
        expanded = [self.expand(branch, namespace, stack) for branch in branches]
        if expanded.count("null") > 1:
            raise MalformedSchemaError("a union may contain 'null' only once")
        return expanded

    def _named_type(
        self, schema: Mapping[str, Any], kind: str, namespace: str | None, stack: tuple[str, ...]
    ) -> Any:
        name = schema.get("name")
        if not isinstance(name, str) or not name:
            raise MalformedSchemaError(f"{kind} type without a name")
        own_namespace: str | None
        if "." in name:
            full, own_namespace = name, name.rpartition(".")[0]
        else:
            declared = schema.get("namespace", namespace)
            own_namespace = declared if isinstance(declared, str) and declared else None
            full = f"{own_namespace}.{name}" if own_namespace else name
        if full in self._named and not self._allow_redefinition:
            raise MalformedSchemaError(f"named type {full} is defined twice")
        result = dict(schema)
        if kind in ("record", "error"):
            result["fields"] = self._fields(schema, full, own_namespace, (*stack, full))
        elif kind == "fixed" and schema.get("logicalType") == "decimal":
            decimal_parameters(schema)
        self._named[full] = result
        return copy.deepcopy(result)

    def _fields(
        self,
        record: Mapping[str, Any],
        full: str,
        namespace: str | None,
        stack: tuple[str, ...],
    ) -> list[dict[str, Any]]:
        fields = record.get("fields")
        if not isinstance(fields, list):
            raise MalformedSchemaError(f"record {full} has no 'fields' list")
        seen: set[str] = set()
        expanded: list[dict[str, Any]] = []
        for item in fields:
            name = item.get("name") if isinstance(item, Mapping) else None
            if not isinstance(name, str) or not name:
                raise MalformedSchemaError(f"record {full} has a field without a name")
            if name in seen:
                raise MalformedSchemaError(f"record {full} has two fields named {name!r}")
            if "type" not in item:
                raise MalformedSchemaError(f"field {full}.{name} has no type")
            aliases = item.get("aliases", [])
            if not isinstance(aliases, list) or not all(isinstance(a, str) for a in aliases):
                raise MalformedSchemaError(f"field {full}.{name}: 'aliases' must be strings")
            seen.add(name)
            expanded.append({**item, "type": self.expand(item["type"], namespace, stack)})
        return expanded


def decimal_parameters(schema: Mapping[str, Any]) -> tuple[int, int]:
    """(precision, scale) of a decimal type; MalformedSchemaError if they are not valid."""
    precision = schema.get("precision")
    scale = schema.get("scale", 0)
    valid = (
        isinstance(precision, int)
        and isinstance(scale, int)
        and not isinstance(precision, bool)
        and not isinstance(scale, bool)
        and precision > 0
        and 0 <= scale <= precision
    )
    if not valid:
        raise MalformedSchemaError(f"invalid decimal precision/scale in {dict(schema)!r}")
    assert isinstance(precision, int) and isinstance(scale, int)
    return precision, scale


def split_nullable(avro_type: Any) -> tuple[bool, Any]:
    """(nullable, base) of an expanded type.

    `["null", T]` and `[T, "null"]` give `(True, T)`; a union with several non-null branches
    gives the list of those branches as its base; any other type is `(False, type)`.
    The base is the very object inside the input (not a copy), so callers may edit it in place.
    """
    if not isinstance(avro_type, list):
        return False, avro_type
    branches = [branch for branch in avro_type if branch != "null"]
    nullable = len(branches) < len(avro_type)
    if len(branches) == 1:
        return nullable, branches[0]
    if not branches:
        return nullable, "null"
    return nullable, branches


def family(base: Any) -> str:
    """The type family of a non-null base: the unit Iceberg can (or cannot) change in place.

    Known logical types are families of their own ("date", "timestamp-micros", "uuid",
    "decimal", ...), distinct from their underlying primitive. Complex types give "record",
    "array", "map", "enum", "fixed" and "union" (several non-null branches).
    """
    if isinstance(base, list):
        return "union"
    if isinstance(base, str):
        return "record" if base == "error" else base
    kind = base.get("type")
    if kind in ("record", "error"):
        return "record"
    if kind in ("array", "map", "enum"):
        return str(kind)
    logical = base.get("logicalType")
    if isinstance(logical, str):
        if kind in LOGICAL_BASES.get(logical, ()):
            return logical
        return f"{kind}[{logical}]"
    return str(kind)


def normalize_type(avro_type: Any, *, drop_deprecated: bool = False) -> Any:
    """The Iceberg-relevant canonical form of an expanded Avro type.

    Kept: record fields (sorted by name; field order means nothing to Iceberg), field names,
    nullability, families, decimal precision and scale, fixed sizes, array items, map values,
    and the deprecation mark of soft-dropped fields (or such fields are left out entirely when
    `drop_deprecated`). Ignored: docs, defaults, aliases, type names and namespaces, enum
    symbols (Iceberg stores enums as strings), the underlying type of decimal and uuid, and any
    other custom property (such as "icefjord.semantic", which does not change the column type).
    """
    nullable, base = split_nullable(avro_type)
    if isinstance(base, list):
        branches = [normalize_type(b, drop_deprecated=drop_deprecated) for b in base]
        return ["null", *branches] if nullable else branches
    shape = _normalize_base(base, drop_deprecated)
    return ["null", shape] if nullable else shape


def _normalize_base(base: Any, drop_deprecated: bool) -> Any:
    kind = family(base)
    if kind == "record":
        fields = []
        for item in base["fields"]:
            deprecated = item.get(DEPRECATED_PROPERTY) is True
            if deprecated and drop_deprecated:
                continue
            entry = {
                "name": item["name"],
                "type": normalize_type(item["type"], drop_deprecated=drop_deprecated),
            }
            if deprecated:
                entry[DEPRECATED_PROPERTY] = True
            fields.append(entry)
        return {"type": "record", "fields": sorted(fields, key=lambda f: str(f["name"]))}
    if kind == "array":
        return {
            "type": "array",
            "items": normalize_type(base["items"], drop_deprecated=drop_deprecated),
        }
    if kind == "map":
        return {
            "type": "map",
            "values": normalize_type(base["values"], drop_deprecated=drop_deprecated),
        }
    if kind == "enum":
        return {"type": "enum"}
    if kind == "fixed":
        return {"type": "fixed", "size": base.get("size")}
    if kind == "decimal":
        precision, scale = decimal_parameters(base)
        return {"logicalType": "decimal", "precision": precision, "scale": scale}
    if kind == "duration" or kind in LOGICAL_BASES:
        return {"logicalType": kind}
    if isinstance(base, Mapping) and "logicalType" in base:
        return {"type": base.get("type"), "logicalType": base["logicalType"]}
    return kind


def type_label(base: Any) -> str:
    """A short human name for a non-null base type, for quarantine reasons."""
    kind = family(base)
    if kind == "decimal":
        precision, scale = decimal_parameters(base)
        return f"decimal({precision},{scale})"
    if kind == "fixed":
        return f"fixed({base.get('size')})"
    if kind == "array":
        return f"array<{_nullable_label(base['items'])}>"
    if kind == "map":
        return f"map<{_nullable_label(base['values'])}>"
    if kind == "union":
        return "union<" + ",".join(type_label(b) for b in base) + ">"
    return kind


def _nullable_label(avro_type: Any) -> str:
    nullable, base = split_nullable(avro_type)
    return f"optional {type_label(base)}" if nullable else type_label(base)


def unsupported_union(avro_type: Any) -> bool:
    """True when the type holds a union of several non-null types anywhere (Iceberg has none)."""
    _, base = split_nullable(avro_type)
    kind = family(base)
    if kind == "union":
        return True
    if kind == "record":
        return any(unsupported_union(item["type"]) for item in base["fields"])
    if kind == "array":
        return unsupported_union(base["items"])
    if kind == "map":
        return unsupported_union(base["values"])
    return False
