"""What :func:`~.normalize.normalize` decides once per table schema, not once per record.

A :class:`TablePlan` holds, for one (table, row schema, key columns, key schema): the
:class:`TableSchema` (its Avro text already built, so every column is known to have an Avro
form), a compiled converter per key column and one for the whole row, and the columns that can
hold Debezium's unavailable-value placeholder. :func:`table_plan` builds it, or returns the one
built for the same schema objects before; a schema that cannot be planned raises the same
:class:`~.errors.NormalizeError` every time (failures are not remembered).
"""

from __future__ import annotations

import base64
import functools
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from services.cdc_normalizer.connect_schema import ConnectKind, ConnectSchema
from services.cdc_normalizer.converters import Converter, compile_converter
from services.cdc_normalizer.errors import UnavailableValue
from services.cdc_normalizer.logical_types import avro_name
from services.cdc_normalizer.table_schema import (
    TableId,
    TableSchema,
    key_struct,
    value_schema_text,
)

__all__ = ["TablePlan", "table_plan"]

_PLACEHOLDER_KINDS = (ConnectKind.STRING, ConnectKind.BYTES, ConnectKind.ARRAY)


@dataclass(frozen=True, slots=True)
class TablePlan:
    """The per-table decisions; see the module docstring.

    ``key_fields`` are ``(column, Avro name, converter, where)`` in key order; ``row`` converts
    a row image (where ``"after"``); ``placeholder_columns`` are the ``(column, kind,
    optional)`` of the string, bytes and array columns, in column order.
    """

    schema: TableSchema
    key_fields: tuple[tuple[str, str, Converter, str], ...]
    row: Converter
    placeholder_columns: tuple[tuple[str, ConnectKind, bool], ...]

    def unavailable(self, image: Mapping[str, Any], placeholder: str) -> tuple[str, ...]:
        """The columns of ``image`` that hold the unavailable-value placeholder (an unchanged
        TOASTed value Debezium did not get), in column order; empty for most images."""
        encoded, as_base64 = _placeholder_forms(placeholder)
        missing: list[str] = []
        for column, kind, _ in self.placeholder_columns:
            value = image.get(column)
            if value is None:
                continue
            if (
                (kind is ConnectKind.STRING and value == placeholder)
                or (kind is ConnectKind.BYTES and value in (encoded, as_base64))
                or (kind is ConnectKind.ARRAY and value == [placeholder])
            ):
                missing.append(column)
        return tuple(missing)

    def check_available(self, image: Mapping[str, Any], placeholder: str) -> None:
        """Reject an image holding the unavailable-value placeholder: a row that must be
        whole (an insert or a snapshot read). Raises :class:`UnavailableValue` for the first
        such column, in column order."""
        missing = self.unavailable(image, placeholder)
        if missing:
            raise UnavailableValue(
                f"column {missing[0]!r} holds {placeholder!r}, which only an update may carry"
                " (an unchanged TOASTed value)"
            )

    def with_stand_ins(self, image: Mapping[str, Any], columns: tuple[str, ...]) -> dict[str, Any]:
        """``image`` with each of ``columns`` (from :meth:`unavailable`) replaced by a value
        its type accepts: null where the column is optional, else an empty string, bytes or
        array. The change record lists the columns as ``unchanged``, so the writer keeps the
        stored value and never stores the stand-in over it."""
        out = dict(image)
        for column, kind, optional in self.placeholder_columns:
            if column not in columns:
                continue
            if optional:
                out[column] = None
            elif kind is ConnectKind.ARRAY:
                out[column] = []
            elif kind is ConnectKind.BYTES:
                out[column] = b"" if isinstance(image[column], bytes) else ""
            else:
                out[column] = ""
        return out


@functools.lru_cache(maxsize=16)
def _placeholder_forms(placeholder: str) -> tuple[bytes, str]:
    encoded = placeholder.encode()
    return encoded, base64.b64encode(encoded).decode()


_PlanKey = tuple[TableId, tuple[str, ...], int, int]
_PLANS: dict[_PlanKey, tuple[ConnectSchema, ConnectSchema | None, TablePlan]] = {}
_PLANS_SIZE = 1024


def table_plan(
    table: TableId,
    row_schema: ConnectSchema,
    columns: tuple[str, ...],
    key_schema: ConnectSchema | None,
) -> TablePlan:
    """The plan for ``table`` with ``row_schema`` (made required), keyed by ``columns``, whose
    types come from the row, else from ``key_schema``.

    Remembered per (table, columns) and the identity of both schema objects. Raises
    :class:`~.errors.InvalidSchema` / :class:`~.errors.UnsupportedType` when a key column is
    missing or a column has no Avro form.
    """
    cache_key = (table, columns, id(row_schema), id(key_schema))
    known = _PLANS.get(cache_key)
    if known is not None and known[0] is row_schema and known[1] is key_schema:
        return known[2]
    plan = _build(table, row_schema.as_required(), columns, key_schema)
    if len(_PLANS) >= _PLANS_SIZE:
        _PLANS.clear()
    _PLANS[cache_key] = (row_schema, key_schema, plan)
    return plan


def _build(
    table: TableId, row: ConnectSchema, columns: tuple[str, ...], key_schema: ConnectSchema | None
) -> TablePlan:
    schema = TableSchema(table, row, key_struct(row, columns, key_schema))
    value_schema_text(schema)  # every column must have an Avro form before values are typed
    key_fields = tuple(
        (field.name, avro_name(field.name), compile_converter(field.schema), f"key.{field.name}")
        for field in schema.key.fields
    )
    placeholder_columns = tuple(
        (field.name, field.schema.kind, field.schema.optional)
        for field in row.fields
        if field.schema.kind in _PLACEHOLDER_KINDS
    )
    return TablePlan(schema, key_fields, compile_converter(row), placeholder_columns)
