"""Planning the Iceberg schema evolution between two versions of a registered Avro schema.

Safe (APPLY): add an optional column (nullable, or with a default), also inside nested records,
records in arrays and map values; widen int -> long, float -> double, decimal precision up at
the same scale; required -> optional; rename through Avro `aliases`; soft-drop of a field the
new version no longer has. Doc-only, default-only, field-order, enum-symbol and other metadata
changes are no-ops.

Unsafe (QUARANTINE): narrowing, a change across type families (logical types are families of
their own: int/date, long/timestamp-micros/local-timestamp-micros, string/uuid, ...), a decimal
scale change, optional -> required, a new required field without a default, any change to a key
column, ambiguous aliases, unions of several types, and schemas that are malformed.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from services.schema_watcher.plan import EvolutionPlan
from shared.avro_types import (
    NARROWINGS,
    WIDENINGS,
    MalformedSchemaError,
    decimal_parameters,
    family,
    normalize_type,
    split_nullable,
    type_label,
    unsupported_union,
)
from shared.events import SchemaOperation, SchemaOperationKind, Verdict
from shared.schema_view import SchemaView, read_schema


def plan_evolution(old: Mapping[str, Any] | None, new: Mapping[str, Any]) -> EvolutionPlan:
    """Plan the Iceberg schema update from `old` to `new` (parsed Avro JSON).

    Each side is either a full normalized change-record value schema (its `after` row is
    diffed, its key columns must not change) or a bare row record. `old=None` is the first
    version: an APPLY plan without operations (creating the table is the writer's business).

    Never raises: a malformed schema, or any unexpected failure, gives a QUARANTINE plan whose
    reason says what went wrong.
    """
    try:
        new_view = read_schema(new, side="new")
        if old is None:
            return EvolutionPlan(Verdict.APPLY)
        old_view = read_schema(old, side="old")
        return _plan(old_view, new_view)
    except MalformedSchemaError as exc:
        return EvolutionPlan(Verdict.QUARANTINE, reasons=(str(exc),))
    except Exception as exc:  # the contract is a verdict, never a crash of the watcher
        reason = f"internal error while planning: {type(exc).__name__}: {exc}"
        return EvolutionPlan(Verdict.QUARANTINE, reasons=(reason,))


def _plan(old: SchemaView, new: SchemaView) -> EvolutionPlan:
    if old.is_change_record != new.is_change_record:
        shapes = {True: "a change record", False: "a bare row record"}
        reason = (
            f"old schema is {shapes[old.is_change_record]} but new schema is "
            f"{shapes[new.is_change_record]}"
        )
        return EvolutionPlan(Verdict.QUARANTINE, reasons=(reason,))
    diff = _RowDiff()
    diff.fields((), old.row["fields"], new.row["fields"])
    operations = (*diff.operations, *diff.drops)
    reasons = list(diff.reasons)
    if old.key_columns is not None and new.key_columns is not None:
        reasons.extend(_key_reasons(old, new, operations))
    verdict = Verdict.QUARANTINE if reasons else Verdict.APPLY
    return EvolutionPlan(verdict, tuple(operations), tuple(reasons))


def _key_reasons(
    old: SchemaView, new: SchemaView, operations: Sequence[SchemaOperation]
) -> list[str]:
    assert old.key_columns is not None and new.key_columns is not None
    assert old.key_types is not None and new.key_types is not None
    reasons: list[str] = []
    if old.key_columns != new.key_columns:
        reasons.append(
            f"key columns changed from {list(old.key_columns)} to {list(new.key_columns)}"
        )
    for column in old.key_columns:
        if column in new.key_types and old.key_types[column] != new.key_types[column]:
            reasons.append(
                f"key column {column!r} changed type from "
                f"{json.dumps(old.key_types[column])} to {json.dumps(new.key_types[column])}"
            )
    touched = [op for op in operations if op.path[0] in old.key_columns]
    reasons.extend(
        f"key column {op.path[0]!r}: {op.kind.value} at {_dotted(op.path)} is not allowed"
        for op in touched
    )
    return reasons


class _RowDiff:
    """Walks the old and new rows together, collecting operations and reasons."""

    def __init__(self) -> None:
        self.operations: list[SchemaOperation] = []
        self.drops: list[SchemaOperation] = []
        self.reasons: list[str] = []

    def fields(
        self, path: tuple[str, ...], old_fields: Sequence[Any], new_fields: Sequence[Any]
    ) -> None:
        pairs = self._match(path, old_fields, new_fields)
        matched = {old_field["name"] for _, old_field in pairs if old_field is not None}
        self.drops.extend(
            SchemaOperation(
                kind=SchemaOperationKind.SOFT_DROP_COLUMN, path=(*path, old_field["name"])
            )
            for old_field in old_fields
            if old_field["name"] not in matched
        )
        for new_field, old_field in pairs:
            if old_field is None:
                self._add((*path, new_field["name"]), new_field)
            else:
                self._field((*path, old_field["name"]), old_field, new_field)

    def _match(
        self, path: tuple[str, ...], old_fields: Sequence[Any], new_fields: Sequence[Any]
    ) -> list[tuple[Any, Any | None]]:
        """Pair each new field with its old field: by name first, then by alias."""
        old_by_name = {item["name"]: item for item in old_fields}
        new_names = {item["name"] for item in new_fields}
        claimed: dict[str, str] = {}
        pairs: list[tuple[Any, Any | None]] = []
        for new_field in new_fields:
            name = new_field["name"]
            if name in old_by_name:
                pairs.append((new_field, old_by_name[name]))
                continue
            aliases = new_field.get("aliases", [])
            sources = list(
                dict.fromkeys(a for a in aliases if a in old_by_name and a not in new_names)
            )
            if len(sources) > 1:
                self.reasons.append(
                    f"field {_dotted((*path, name))}: aliases match several old fields {sources}"
                )
                continue
            if sources and sources[0] in claimed:
                self.reasons.append(
                    f"fields {_dotted((*path, claimed[sources[0]]))} and "
                    f"{_dotted((*path, name))} both claim old field "
                    f"{_dotted((*path, sources[0]))} through aliases"
                )
                continue
            if sources:
                claimed[sources[0]] = name
                pairs.append((new_field, old_by_name[sources[0]]))
            else:
                pairs.append((new_field, None))
        return pairs

    def _add(self, path: tuple[str, ...], new_field: Mapping[str, Any]) -> None:
        new_type = new_field["type"]
        nullable, base = split_nullable(new_type)
        if unsupported_union(new_type):
            self.reasons.append(
                f"new field {_dotted(path)}: unions of several types are not supported by Iceberg"
            )
        elif not nullable and "default" not in new_field:
            self.reasons.append(
                f"new field {_dotted(path)} ({type_label(base)}) is required and has no "
                "default; existing rows cannot be filled"
            )
        else:
            self.operations.append(
                SchemaOperation(
                    kind=SchemaOperationKind.ADD_COLUMN,
                    path=path,
                    type_json=json.dumps(new_type, sort_keys=True),
                    doc=_doc(new_field),
                )
            )

    def _field(
        self, path: tuple[str, ...], old_field: Mapping[str, Any], new_field: Mapping[str, Any]
    ) -> None:
        doc = _doc(new_field)
        if old_field["name"] != new_field["name"]:
            self.operations.append(
                SchemaOperation(
                    kind=SchemaOperationKind.RENAME_COLUMN,
                    path=path,
                    new_name=new_field["name"],
                    doc=doc,
                )
            )
        self._type(path, old_field["type"], new_field["type"], doc)

    def _type(self, path: tuple[str, ...], old_type: Any, new_type: Any, doc: str | None) -> None:
        old_nullable, old_base = split_nullable(old_type)
        new_nullable, new_base = split_nullable(new_type)
        if old_nullable and not new_nullable:
            self.reasons.append(
                f"field {_dotted(path)}: optional {type_label(old_base)} -> required "
                f"{type_label(new_base)} is not allowed (existing nulls)"
            )
        elif new_nullable and not old_nullable:
            self.operations.append(
                SchemaOperation(kind=SchemaOperationKind.MAKE_OPTIONAL, path=path, doc=doc)
            )
        self._base(path, old_base, new_base, doc)

    def _base(self, path: tuple[str, ...], old_base: Any, new_base: Any, doc: str | None) -> None:
        old_family, new_family = family(old_base), family(new_base)
        if old_family == new_family == "record":
            self.fields(path, old_base["fields"], new_base["fields"])
        elif old_family == new_family == "array":
            self._type((*path, "element"), old_base["items"], new_base["items"], None)
        elif old_family == new_family == "map":
            self._type((*path, "value"), old_base["values"], new_base["values"], None)
        elif normalize_type(old_base) == normalize_type(new_base):
            return
        elif _is_widening(old_base, new_base):
            self.operations.append(
                SchemaOperation(
                    kind=SchemaOperationKind.WIDEN_TYPE,
                    path=path,
                    type_json=json.dumps(new_base, sort_keys=True),
                    doc=doc,
                )
            )
        else:
            self.reasons.append(_unsafe_change(path, old_base, new_base))


def _is_widening(old_base: Any, new_base: Any) -> bool:
    old_family, new_family = family(old_base), family(new_base)
    if (old_family, new_family) in WIDENINGS:
        return True
    if old_family == new_family == "decimal":
        old_precision, old_scale = decimal_parameters(old_base)
        new_precision, new_scale = decimal_parameters(new_base)
        return old_scale == new_scale and new_precision > old_precision
    return False


def _unsafe_change(path: tuple[str, ...], old_base: Any, new_base: Any) -> str:
    old_family, new_family = family(old_base), family(new_base)
    change = f"{type_label(old_base)} -> {type_label(new_base)}"
    where = f"field {_dotted(path)}"
    if old_family == new_family == "decimal":
        _, old_scale = decimal_parameters(old_base)
        _, new_scale = decimal_parameters(new_base)
        if old_scale != new_scale:
            return f"{where}: decimal scale change {change} is not allowed"
        return f"{where}: narrowing {change} is not allowed"
    if (old_family, new_family) in NARROWINGS:
        return f"{where}: narrowing {change} is not allowed"
    if old_family == new_family:
        return f"{where}: incompatible change {change}"
    return f"{where}: type change {change} crosses type families"


def _doc(avro_field: Mapping[str, Any]) -> str | None:
    doc = avro_field.get("doc")
    return doc if isinstance(doc, str) else None


def _dotted(path: Sequence[str]) -> str:
    return "'" + ".".join(path) + "'"
