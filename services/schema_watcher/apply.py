"""Applying an evolution plan to an Avro row schema, and comparing row schemas.

`apply_plan` is the executable meaning of a plan: for an APPLY plan,
`schemas_equivalent(apply_plan(old, plan_evolution(old, new)), new)` holds. Equivalence is
Iceberg-level (see `normalize_type`): docs, defaults, aliases, type names, field order and enum
symbols do not count, and soft-dropped fields, which stay in the applied schema as optional
fields marked `"icefjord.deprecated": true`, are left out of the comparison.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping
from typing import Any

from services.schema_watcher.plan import EvolutionPlan
from shared.avro_types import (
    DEPRECATED_PROPERTY,
    family,
    normalize_type,
    split_nullable,
)
from shared.events import SchemaOperation, SchemaOperationKind, Verdict
from shared.schema_view import read_schema

# Operations name fields by their OLD names; the applied tree remembers them under this key
# until the end, so a renamed parent still resolves for its children's operations.
_ORIGINAL_NAME = "__icefjord_original_name"


def apply_plan(old_row_schema: Mapping[str, Any], plan: EvolutionPlan) -> dict[str, Any]:
    """Return the row schema that results from applying `plan` to `old_row_schema`.

    `old_row_schema` is a bare row record or a full change record (its `after` row is used);
    it is not modified. The result has named types inlined at every use, so a named type used
    twice appears twice: it is meant for comparison and for deriving the Iceberg schema, not for
    registering. Renamed fields keep their old name in `aliases`; soft-dropped fields become
    optional and carry `"icefjord.deprecated": true`.

    Raises ValueError for a QUARANTINE plan, a malformed schema, or an operation whose path
    does not exist in the old schema.
    """
    if plan.verdict is not Verdict.APPLY:
        raise ValueError("a quarantined plan must not be applied")
    row = copy.deepcopy(read_schema(old_row_schema, side="old", validate=False).row)
    _tag_original_names(row)
    for operation in plan.operations:
        _apply(row, operation)
    _tag_original_names(row, remove=True)
    return row


def normalize_row_schema(schema: Mapping[str, Any], *, drop_deprecated: bool = False) -> Any:
    """The canonical Iceberg-level form of a row record, or of a change record's row.

    Raises ValueError (MalformedSchemaError) if the schema is not a usable record.
    """
    row = read_schema(schema, side="compared", validate=False).row
    return normalize_type(row, drop_deprecated=drop_deprecated)


def schemas_equivalent(applied: Mapping[str, Any], expected: Mapping[str, Any]) -> bool:
    """True when both rows normalize to the same form, soft-dropped fields left out."""
    applied_form = normalize_row_schema(applied, drop_deprecated=True)
    expected_form = normalize_row_schema(expected, drop_deprecated=True)
    return bool(applied_form == expected_form)


def _apply(row: dict[str, Any], operation: SchemaOperation) -> None:
    if operation.kind is SchemaOperationKind.ADD_COLUMN:
        _add(row, operation)
        return
    holder, key, field = _locate(row, operation.path)
    if operation.kind is SchemaOperationKind.WIDEN_TYPE:
        if operation.type_json is None:
            raise ValueError(f"WIDEN_TYPE at {operation.path} has no type_json")
        new_base = json.loads(operation.type_json)
        current = holder[key]
        if isinstance(current, list):
            holder[key] = [b if b == "null" else new_base for b in current]
        else:
            holder[key] = new_base
    elif operation.kind is SchemaOperationKind.MAKE_OPTIONAL:
        _make_optional(holder, key, field)
    elif operation.kind is SchemaOperationKind.RENAME_COLUMN:
        if field is None or operation.new_name is None:
            raise ValueError(f"RENAME_COLUMN at {operation.path} does not name a field")
        aliases = [*field.get("aliases", []), field["name"]]
        field["name"] = operation.new_name
        field["aliases"] = list(dict.fromkeys(aliases))
    elif operation.kind is SchemaOperationKind.SOFT_DROP_COLUMN:
        if field is None:
            raise ValueError(f"SOFT_DROP_COLUMN at {operation.path} does not name a field")
        _make_optional(holder, key, field)
        field[DEPRECATED_PROPERTY] = True


def _add(row: dict[str, Any], operation: SchemaOperation) -> None:
    if not operation.path or operation.type_json is None:
        raise ValueError(f"ADD_COLUMN needs a path and a type: {operation}")
    parent = row
    if len(operation.path) > 1:
        holder, key, _ = _locate(row, operation.path[:-1])
        _, parent = split_nullable(holder[key])
    if family(parent) != "record":
        raise ValueError(f"ADD_COLUMN at {operation.path}: parent is not a record")
    name = operation.path[-1]
    new_type = json.loads(operation.type_json)
    added: dict[str, Any] = {"name": name, "type": new_type, _ORIGINAL_NAME: name}
    if isinstance(new_type, list) and new_type and new_type[0] == "null":
        added["default"] = None
    if operation.doc is not None:
        added["doc"] = operation.doc
    parent["fields"].append(added)


def _make_optional(holder: dict[str, Any], key: str, field: dict[str, Any] | None) -> None:
    current = holder[key]
    nullable, _ = split_nullable(current)
    if nullable:
        return
    holder[key] = ["null", *current] if isinstance(current, list) else ["null", current]
    if field is not None:
        field["default"] = None


def _locate(
    row: dict[str, Any], path: tuple[str, ...]
) -> tuple[dict[str, Any], str, dict[str, Any] | None]:
    """(holder, key, field): `holder[key]` is the type at `path`; `field` is set for fields."""
    if not path:
        raise ValueError("an operation needs a non-empty path")
    current: Any = row
    holder: dict[str, Any] | None = None
    key = ""
    field: dict[str, Any] | None = None
    for step in path:
        _, base = split_nullable(current)
        kind = family(base)
        if kind == "record":
            field = next((f for f in base["fields"] if f.get(_ORIGINAL_NAME) == step), None)
            if field is None:
                raise ValueError(f"path {list(path)}: no field {step!r}")
            holder, key = field, "type"
        elif kind == "array" and step == "element":
            holder, key, field = base, "items", None
        elif kind == "map" and step == "value":
            holder, key, field = base, "values", None
        else:
            raise ValueError(f"path {list(path)}: cannot step into {step!r} of a {kind}")
        current = holder[key]
    assert holder is not None
    return holder, key, field


def _tag_original_names(avro_type: Any, *, remove: bool = False) -> None:
    _, base = split_nullable(avro_type)
    kind = family(base)
    if kind == "record":
        for item in base["fields"]:
            if remove:
                item.pop(_ORIGINAL_NAME, None)
            else:
                item[_ORIGINAL_NAME] = item["name"]
            _tag_original_names(item["type"], remove=remove)
    elif kind == "array":
        _tag_original_names(base["items"], remove=remove)
    elif kind == "map":
        _tag_original_names(base["values"], remove=remove)
    elif kind == "union":
        for branch in base:
            _tag_original_names(branch, remove=remove)
