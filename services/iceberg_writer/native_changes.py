"""The writer's compiled change path (``native/src/change.rs``): a change record's envelope
decoded without its row, and a batch's rows read straight into Arrow columns.

:func:`change_program` compiles one registered change record schema with the table's key
columns; ``ChangeDecoder`` uses it for the records of a table's current schema. A change it
decodes carries an :class:`EncodedRow`: the row still in the record's bytes. ``staging_table``
hands a batch of them to :func:`arrow_columns`, which builds each data column in one call
instead of a Python object per value and a list per column.

What the program does not read takes the Python path, with the result it always had: a
schema with a column of another kind (a record, map or fixed, an array of any of those or of
arrays, a union of several types) gets no program; an array of the kinds it reads becomes a
list column; a body it is not certain about (trailing bytes, invalid UTF-8, a value
outside the range of the Python type the decoder builds) is decoded by ``AvroDecoder``; a
batch with a row of another schema, or a table column whose type is not the one the row's
Avro type maps to, is built in Python. Anything else that reads an :class:`EncodedRow` (a
partial update's fill-in, the tests' model) gets the decoder's dict, decoded once.

Without the extension built, or with ``ICEFJORD_NATIVE_ROWS=off`` (for side-by-side
measurements), :data:`AVAILABLE` is False and every record takes the Python path.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import pyarrow as pa

from shared.avro_types import expand_named_types
from shared.errors import IcefjordError

# As in services/cdc_normalizer/native_row.py: without the extension, None fits the name.
try:
    import icefjord_native  # type: ignore[import-not-found,unused-ignore]
except ImportError:  # pragma: no cover - make install and CI build it; a bare checkout may not
    icefjord_native = None  # type: ignore[assignment,unused-ignore]

__all__ = ["AVAILABLE", "EncodedRow", "arrow_columns", "arrow_target", "change_program"]

AVAILABLE = icefjord_native is not None and os.environ.get("ICEFJORD_NATIVE_ROWS") != "off"
"""Whether changes may take the compiled path (see the module doc)."""


def change_program(raw_schema: Mapping[str, Any], keys: Sequence[str]) -> Any | None:
    """The compiled program of change records written with ``raw_schema`` (the registry's
    JSON) for a table keyed by ``keys``; None when the path is off or the schema has a part
    the program does not read."""
    if not AVAILABLE:
        return None
    try:
        expanded = expand_named_types(raw_schema)
        return icefjord_native.ChangeProgram(json.dumps(expanded), list(keys))
    except (IcefjordError, ValueError, TypeError):
        return None


class EncodedRow(Mapping[str, Any]):
    """A change's row left in its record: ``value[start:]`` read by ``program``.

    As a mapping it is the row ``decode`` gives (the decoder's dict of the whole record's
    ``after``), decoded on first use and kept.
    """

    __slots__ = ("_decode", "_row", "program", "start", "value")

    def __init__(
        self, program: Any, value: bytes, start: int, decode: Callable[[], Mapping[str, Any]]
    ) -> None:
        self.program = program
        self.value = value
        self.start = start
        self._decode = decode
        self._row: Mapping[str, Any] | None = None

    def _rows(self) -> Mapping[str, Any]:
        if self._row is None:
            self._row = self._decode()
        return self._row

    def __getitem__(self, name: str) -> Any:
        return self._rows()[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._rows())

    def __len__(self) -> int:
        return len(self._rows())

    def __repr__(self) -> str:
        return f"EncodedRow({dict(self._rows())!r})"


def arrow_target(field: pa.Field) -> tuple[str, int, int] | None:
    """How the program names ``field``'s Arrow type, with its two parameters; None for a
    type it does not build."""
    kind = field.type
    simple = _SIMPLE.get(kind)
    if simple is not None:
        return (simple, 0, 0)
    if pa.types.is_timestamp(kind) and kind.unit == "us":
        return ("timestamp_us", 1 if kind.tz is not None else 0, 0)
    if pa.types.is_decimal128(kind):
        return ("decimal128", kind.precision, kind.scale)
    if pa.types.is_list(kind) or pa.types.is_large_list(kind):
        item = arrow_target(kind.value_field)
        if item is not None and "list:" not in item[0]:
            prefix = "large_list" if pa.types.is_large_list(kind) else "list"
            return (f"{prefix}:{item[0]}", item[1], item[2])
    return None


_SIMPLE: dict[pa.DataType, str] = {
    pa.bool_(): "bool",
    pa.int32(): "int32",
    pa.int64(): "int64",
    pa.float32(): "float32",
    pa.float64(): "float64",
    pa.date32(): "date32",
    pa.string(): "string",
    pa.large_string(): "large_string",
    pa.binary(): "binary",
    pa.large_binary(): "large_binary",
}


def arrow_columns(
    rows: Sequence[Mapping[str, Any] | None], fields: Sequence[pa.Field]
) -> list[pa.Array] | None:
    """The Arrow arrays of ``fields`` (table columns, by name in the row) over ``rows`` (None:
    a null in every column), built by the rows' program; None when a row is not an
    :class:`EncodedRow` of one program, or a field's type is not the one its column maps to
    (the caller then builds them in Python)."""
    program: Any = None
    refs: list[tuple[bytes, int] | None] = []
    for row in rows:
        if row is None:
            refs.append(None)
            continue
        if type(row) is not EncodedRow:
            return None
        if program is None:
            program = row.program
        elif row.program is not program:
            return None
        refs.append((row.value, row.start))
    if program is None or not fields:
        return None
    targets = []
    for field in fields:
        target = arrow_target(field)
        if target is None:
            return None
        targets.append((field.name, *target))
    built = program.columns(refs, targets)
    if built is None:
        return None
    arrays = []
    for field, (nulls, validity, offsets, data, items) in zip(fields, built, strict=True):
        if items is None:
            arrays.append(_array(field.type, len(refs), nulls, validity, offsets, data))
            continue
        count, (item_nulls, item_validity, item_offsets, item_data) = items
        values = _array(
            field.type.value_type, count, item_nulls, item_validity, item_offsets, item_data
        )
        buffers = [_buffer(validity), pa.py_buffer(offsets)]
        arrays.append(
            pa.Array.from_buffers(
                field.type, len(refs), buffers, null_count=nulls, children=[values]
            )
        )
    return arrays


def _buffer(data: bytes | None) -> pa.Buffer | None:
    return None if data is None else pa.py_buffer(data)


def _array(
    kind: pa.DataType,
    length: int,
    nulls: int,
    validity: bytes | None,
    offsets: bytes | None,
    data: bytes,
) -> pa.Array:
    buffers = [_buffer(validity)]
    if offsets is not None:
        buffers.append(pa.py_buffer(offsets))
    buffers.append(pa.py_buffer(data))
    return pa.Array.from_buffers(kind, length, buffers, null_count=nulls)
