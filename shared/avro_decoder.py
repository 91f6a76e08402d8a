"""Avro binary decoding, compiled once per writer schema: the normalizer's Debezium input
(Avro converters) and the writer's change records.

:class:`AvroDecoder` walks a writer schema once and keeps a reader function per node, so
decoding a record is a chain of direct calls. In plain CPython that is about as fast as
``fastavro.schemaless_reader``; compiled (mypyc) it is several times faster, which is why it
exists: see the Speed section of the normalizer's README. Top-level fields a caller does not
use can be skipped: read past without building their values (the writer skips a change
record's ``source`` map, a third of its decoding).

The result is fastavro's, value for value: the same dicts, lists, ``Decimal`` (read with the
schema's precision), ``date``, ``time``, UTC or naive ``datetime`` and ``UUID``. Each reader
handles only well-formed input of the common types; anything else (a truncated body, trailing
bytes, a varint past 64 bits, a value a logical type cannot hold, ``fixed``, an unresolvable
name) makes the decoder hand the whole body to fastavro, which then returns or raises exactly
what it always did. ``tests/unit/shared/test_avro_decoder.py`` checks the equality on
random schemas and data.
"""

from __future__ import annotations

import datetime as dt
import decimal
import io
import json
import re
import struct
import uuid
from collections.abc import Callable, Collection
from typing import Any

import fastavro

__all__ = ["CANONICAL_UUID", "AvroDecoder"]

_Read = Callable[[bytes, int], tuple[Any, int]]

_INT_MIN, _INT_MAX = -(1 << 31), (1 << 31) - 1
_EPOCH_UTC = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
_EPOCH_NAIVE = dt.datetime(1970, 1, 1)
_DAYS_SHIFT = dt.date(1970, 1, 1).toordinal()
_MICROS_PER_DAY = 86_400_000_000
_FLOAT = struct.Struct("<f").unpack_from
_DOUBLE = struct.Struct("<d").unpack_from
_timedelta = dt.timedelta
_Decimal = decimal.Decimal


class _Fallback(Exception):
    """Not input (or a schema) the compiled path reads: fastavro reads it instead."""


class AvroDecoder:
    """Decodes Avro binary bodies written with one schema (parsed JSON), like fastavro.

    ``parsed`` is the fastavro-parsed form of the same schema, used for the fallback.
    :meth:`decode` raises what ``fastavro.schemaless_reader`` raises for a body it cannot read.

    ``skip`` names fields of a record schema to leave out of the result. They are read past,
    not built, exactly as fastavro does with a reader schema without them (their structure is
    checked, their contents are not, e.g. a skipped string's UTF-8): the result and any error
    are that reader's. Where that reader schema is not valid on its own (a skipped field
    defines a named type that a kept one uses), the skipped fields are read and dropped.

    ``uuid_text``: a uuid comes as its canonical text, ``str(UUID(...))``, not as a ``UUID``
    (the writer stores uuids as strings: this saves building the object to print it). A body
    that goes to fastavro still gives ``UUID`` objects.
    """

    def __init__(
        self, schema: Any, parsed: Any, skip: Collection[str] = (), *, uuid_text: bool = False
    ) -> None:
        self._parsed = parsed
        self._reader: Any = None
        self._drop: tuple[str, ...] = ()
        plain = json.loads(json.dumps(schema))
        skipped = frozenset(skip) & _field_names(plain)
        if skipped:
            try:
                projected = dict(plain)
                projected["fields"] = [f for f in plain["fields"] if f["name"] not in skipped]
                self._reader = fastavro.parse_schema(projected)
            except Exception:  # a kept field uses a name only a skipped one defines
                self._drop = tuple(sorted(skipped))
                skipped = frozenset()
        try:
            self._read = _Compiler(uuid_text).compile(plain, None, skipped)
        except Exception:  # a schema shape not compiled here: fastavro reads every body
            self._read = _always_fallback

    def decode(self, body: bytes | memoryview) -> Any:
        """The datum in ``body`` (no header)."""
        data = bytes(body)
        try:
            value, end = self._read(data, 0)
            if end == len(data):
                return self._dropped(value)
        except Exception:  # any surprise: fastavro decides, with its own result or error
            pass
        return self._dropped(
            fastavro.schemaless_reader(io.BytesIO(data), self._parsed, self._reader)
        )

    def _dropped(self, value: Any) -> Any:
        for name in self._drop:
            value.pop(name, None)
        return value


def _field_names(schema: Any) -> frozenset[str]:
    """The field names of a record schema; empty for any other."""
    if not isinstance(schema, dict) or schema.get("type") not in ("record", "error"):
        return frozenset()
    return frozenset(str(field["name"]) for field in schema.get("fields", []))


def _always_fallback(data: bytes, position: int) -> tuple[Any, int]:
    raise _Fallback


def read_long(data: bytes, position: int) -> tuple[int, int]:
    """The zigzag varint at ``position`` and the position after it (at most 64 bits)."""
    byte = data[position]
    position += 1
    if byte < 0x80:
        return (byte >> 1) ^ -(byte & 1), position
    n = byte & 0x7F
    shift = 7
    while True:
        byte = data[position]
        position += 1
        n |= (byte & 0x7F) << shift
        if byte < 0x80:
            break
        shift += 7
        if shift > 63:
            raise _Fallback
    if n >> 64:
        raise _Fallback
    return (n >> 1) ^ -(n & 1), position


def _read_null(data: bytes, position: int) -> tuple[Any, int]:
    return None, position


def _read_boolean(data: bytes, position: int) -> tuple[Any, int]:
    byte = data[position]
    if byte > 1:
        raise _Fallback
    return byte == 1, position + 1


def _read_int(data: bytes, position: int) -> tuple[Any, int]:
    value, position = read_long(data, position)
    if not _INT_MIN <= value <= _INT_MAX:
        raise _Fallback
    return value, position


def _read_float(data: bytes, position: int) -> tuple[Any, int]:
    return _FLOAT(data, position)[0], position + 4


def _read_double(data: bytes, position: int) -> tuple[Any, int]:
    return _DOUBLE(data, position)[0], position + 8


def _read_bytes(data: bytes, position: int) -> tuple[Any, int]:
    size, position = read_long(data, position)
    end = position + size
    if size < 0 or end > len(data):
        raise _Fallback
    return data[position:end], end


def _read_string(data: bytes, position: int) -> tuple[Any, int]:
    size = data[position]
    if size < 0x80 and not size & 1:  # a length below 64: one byte, zigzag 2n
        position += 1
        end = position + (size >> 1)
    else:
        size, position = read_long(data, position)
        end = position + size
        if size < 0:
            raise _Fallback
    if end > len(data):
        raise _Fallback
    return data[position:end].decode(), end


def _skip_bytes(data: bytes, position: int) -> tuple[Any, int]:
    size, position = read_long(data, position)
    end = position + size
    if size < 0 or end > len(data):
        raise _Fallback
    return None, end


def _skip_boolean(data: bytes, position: int) -> tuple[Any, int]:
    if position >= len(data):
        raise _Fallback
    return None, position + 1


def _skip_float(data: bytes, position: int) -> tuple[Any, int]:
    if position + 4 > len(data):
        raise _Fallback
    return None, position + 4


def _skip_double(data: bytes, position: int) -> tuple[Any, int]:
    if position + 8 > len(data):
        raise _Fallback
    return None, position + 8


_PRIMITIVES: dict[str, _Read] = {
    "null": _read_null,
    "boolean": _read_boolean,
    "int": _read_int,
    "long": read_long,
    "float": _read_float,
    "double": _read_double,
    "bytes": _read_bytes,
    "string": _read_string,
}


def _decimal(schema: dict[str, Any]) -> _Read:
    """fastavro reads with a context of the schema's precision; values with at most that many
    digits are exact, so only those are built here."""
    precision, scale = schema.get("precision"), schema.get("scale", 0)
    if type(precision) is not int or type(scale) is not int or precision < 1:
        return _always_fallback
    limit = 10**precision
    suffix = f"E{-scale}"

    def read(data: bytes, position: int) -> tuple[Any, int]:
        raw, position = _read_bytes(data, position)
        unscaled = int.from_bytes(raw, "big", signed=True)
        if not -limit < unscaled < limit:
            raise _Fallback
        return _Decimal(f"{unscaled}{suffix}"), position

    return read


def _date(schema: dict[str, Any]) -> _Read:
    def read(data: bytes, position: int) -> tuple[Any, int]:
        days, position = _read_int(data, position)
        return dt.date.fromordinal(days + _DAYS_SHIFT), position

    return read


def _timestamp(micros_per_unit: int, epoch: dt.datetime) -> Callable[[dict[str, Any]], _Read]:
    def build(schema: dict[str, Any]) -> _Read:
        def read(data: bytes, position: int) -> tuple[Any, int]:
            value, position = read_long(data, position)
            return epoch + _timedelta(0, 0, value * micros_per_unit), position

        return read

    return build


def _time(micros_per_unit: int, read_number: _Read) -> Callable[[dict[str, Any]], _Read]:
    def build(schema: dict[str, Any]) -> _Read:
        def read(data: bytes, position: int) -> tuple[Any, int]:
            value, position = read_number(data, position)
            micros = value * micros_per_unit
            if not 0 <= micros < _MICROS_PER_DAY:
                raise _Fallback
            seconds, micro = divmod(micros, 1_000_000)
            return dt.time(seconds // 3600, seconds // 60 % 60, seconds % 60, micro), position

        return read

    return build


def _uuid(schema: dict[str, Any]) -> _Read:
    def read(data: bytes, position: int) -> tuple[Any, int]:
        text, position = _read_string(data, position)
        return uuid.UUID(text), position

    return read


CANONICAL_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
"""A uuid as ``str(UUID(...))`` writes it; text that matches needs no parsing."""


def _uuid_text(data: bytes, position: int) -> tuple[Any, int]:
    """A uuid as ``str(UUID(text))``: canonical text as it is, anything else through UUID
    (which raises for what is not a uuid, as fastavro's reading does)."""
    text, position = _read_string(data, position)
    if CANONICAL_UUID.fullmatch(text) is None:
        text = str(uuid.UUID(text))
    return text, position


# Skipping checks only what fastavro's skipping does: lengths, union and enum indexes, bytes
# in range. A boolean's byte, an int's width and strings' UTF-8 go unchecked.
_SKIPS: dict[str, _Read] = {
    "null": _read_null,
    "boolean": _skip_boolean,
    "int": read_long,
    "long": read_long,
    "float": _skip_float,
    "double": _skip_double,
    "bytes": _skip_bytes,
    "string": _skip_bytes,
}

_LOGICAL: dict[str, Callable[[dict[str, Any]], _Read]] = {
    "bytes-decimal": _decimal,
    "int-date": _date,
    "long-timestamp-millis": _timestamp(1000, _EPOCH_UTC),
    "long-timestamp-micros": _timestamp(1, _EPOCH_UTC),
    "long-local-timestamp-millis": _timestamp(1000, _EPOCH_NAIVE),
    "long-local-timestamp-micros": _timestamp(1, _EPOCH_NAIVE),
    "int-time-millis": _time(1000, _read_int),
    "long-time-micros": _time(1, read_long),
    "string-uuid": _uuid,
}


def _reference(name: str, namespace: str | None) -> str:
    """The full name a type reference ``name`` means inside ``namespace``."""
    return name if "." in name or not namespace else f"{namespace}.{name}"


class _Compiler:
    """Builds readers, resolving named types (records, enums) by their Avro full names."""

    def __init__(self, uuid_text: bool = False) -> None:
        self._named: dict[str, _Read] = {}
        self._named_skips: dict[str, _Read] = {}
        self._uuid_text = uuid_text

    def compile(
        self, schema: Any, namespace: str | None, skip: frozenset[str] = frozenset()
    ) -> _Read:
        """The reader of ``schema``; a record leaves out its fields named in ``skip``."""
        if isinstance(schema, list):
            return self._union(schema, namespace)
        if isinstance(schema, str):
            if schema in _PRIMITIVES:
                return _PRIMITIVES[schema]
            return self._named.get(_reference(schema, namespace), _always_fallback)
        if not isinstance(schema, dict):
            return _always_fallback
        kind = schema.get("type")
        if isinstance(kind, (dict, list)):
            return self.compile(kind, namespace)
        logical = schema.get("logicalType")
        if isinstance(logical, str) and f"{kind}-{logical}" in _LOGICAL:
            if self._uuid_text and kind == "string" and logical == "uuid":
                return _uuid_text
            return _LOGICAL[f"{kind}-{logical}"](schema)
        if kind == "record" or kind == "error":
            return self._record(schema, namespace, skip)
        if kind == "enum":
            return self._enum(schema, namespace)
        if kind == "array":
            return _array(self.compile(schema.get("items"), namespace))
        if kind == "map":
            return _map(self.compile(schema.get("values"), namespace))
        if isinstance(kind, str) and kind in _PRIMITIVES:
            return _PRIMITIVES[kind]
        return _always_fallback

    def _full_name(self, schema: dict[str, Any], namespace: str | None) -> tuple[str, str | None]:
        name = schema["name"]
        if "." in name:
            return name, name.rsplit(".", 1)[0]
        space = schema.get("namespace", namespace)
        return (f"{space}.{name}" if space else name), space or None

    def _record(self, schema: dict[str, Any], namespace: str | None, skip: frozenset[str]) -> _Read:
        full, space = self._full_name(schema, namespace)
        fields: list[tuple[str, _Read]] = []
        kept: list[bool] = []

        def read(data: bytes, position: int) -> tuple[Any, int]:
            record: dict[str, Any] = {}
            for name, read_field in fields:
                record[name], position = read_field(data, position)
            return record, position

        def read_kept(data: bytes, position: int) -> tuple[Any, int]:
            record: dict[str, Any] = {}
            value: Any = None
            for (name, read_field), keep in zip(fields, kept, strict=True):
                value, position = read_field(data, position)
                if keep:
                    record[name] = value
            return record, position

        self._named[full] = read  # registered first: a record may refer to itself
        for field in schema["fields"]:
            reader = self.compile(field["type"], space)  # defines the names it holds
            if field["name"] in skip:
                reader = self.skipper(field["type"], space)
            fields.append((field["name"], reader))
            kept.append(field["name"] not in skip)
        return read_kept if skip else read

    def skipper(self, schema: Any, namespace: str | None) -> _Read:
        """A reader that moves past a value of ``schema`` without building it (returns
        None); anything it does not know (``fixed``, blocks with sizes) falls back."""
        if isinstance(schema, list):
            return _skip_union(tuple(self.skipper(branch, namespace) for branch in schema))
        if isinstance(schema, str):
            if schema in _SKIPS:
                return _SKIPS[schema]
            return self._named_skips.get(_reference(schema, namespace), _always_fallback)
        if not isinstance(schema, dict):
            return _always_fallback
        kind = schema.get("type")
        if isinstance(kind, (dict, list)):
            return self.skipper(kind, namespace)
        if kind == "record" or kind == "error":
            full, space = self._full_name(schema, namespace)
            parts: list[_Read] = []

            def skip_record(data: bytes, position: int) -> tuple[Any, int]:
                for part in parts:
                    _, position = part(data, position)
                return None, position

            self._named_skips[full] = skip_record
            parts.extend(self.skipper(field["type"], space) for field in schema["fields"])
            return skip_record
        if kind == "enum":
            full, _ = self._full_name(schema, namespace)
            self._named_skips[full] = read_long
            return read_long
        if kind == "array":
            return _skip_blocks(None, self.skipper(schema.get("items"), namespace))
        if kind == "map":
            values = self.skipper(schema.get("values"), namespace)
            if values is _skip_bytes:  # map<string> or map<bytes>: a change's source map
                return _skip_bytes_map
            return _skip_blocks(_skip_bytes, values)
        if isinstance(kind, str) and kind in _SKIPS:
            return _SKIPS[kind]
        return _always_fallback

    def _enum(self, schema: dict[str, Any], namespace: str | None) -> _Read:
        full, _ = self._full_name(schema, namespace)
        symbols = tuple(schema["symbols"])

        def read(data: bytes, position: int) -> tuple[Any, int]:
            index, position = read_long(data, position)
            if not 0 <= index < len(symbols):
                raise _Fallback
            return symbols[index], position

        self._named[full] = read
        return read

    def _union(self, branches: list[Any], namespace: str | None) -> _Read:
        readers = tuple(self.compile(branch, namespace) for branch in branches)
        if len(branches) == 2 and branches[0] == "null":
            return _optional(readers[1])

        def read(data: bytes, position: int) -> tuple[Any, int]:
            index, position = read_long(data, position)
            if not 0 <= index < len(readers):
                raise _Fallback
            return readers[index](data, position)

        return read


def _optional(read_value: _Read) -> _Read:
    """``["null", T]``, the shape of every optional Debezium column: index byte 0 or 2."""

    def read(data: bytes, position: int) -> tuple[Any, int]:
        index = data[position]
        if index == 0:
            return None, position + 1
        if index != 2:
            raise _Fallback
        return read_value(data, position + 1)

    return read


def _array(read_item: _Read) -> _Read:
    def read(data: bytes, position: int) -> tuple[Any, int]:
        items: list[Any] = []
        count, position = read_long(data, position)
        while count:
            if count < 0:  # a block with its byte size: rare, left to fastavro
                raise _Fallback
            for _ in range(count):
                item, position = read_item(data, position)
                items.append(item)
            count, position = read_long(data, position)
        return items, position

    return read


def _map(read_value: _Read) -> _Read:
    def read(data: bytes, position: int) -> tuple[Any, int]:
        entries: dict[str, Any] = {}
        count, position = read_long(data, position)
        while count:
            if count < 0:
                raise _Fallback
            for _ in range(count):
                key, position = _read_string(data, position)
                entries[key], position = read_value(data, position)
            count, position = read_long(data, position)
        return entries, position

    return read


def _skip_union(skips: tuple[_Read, ...]) -> _Read:
    def skip(data: bytes, position: int) -> tuple[Any, int]:
        index, position = read_long(data, position)
        if not 0 <= index < len(skips):
            raise _Fallback
        return skips[index](data, position)

    return skip


def _skip_bytes_map(data: bytes, position: int) -> tuple[Any, int]:
    """``_skip_blocks(_skip_bytes, _skip_bytes)`` in one loop: a key and a value per entry,
    each a length and that many bytes. A length below 64 is one byte (zigzag 2n); it is read
    here instead of through two calls and a tuple per string, which was most of the skip."""
    end = len(data)
    count, position = read_long(data, position)
    while count:
        if count < 0:  # a block with its byte size: rare, left to fastavro
            raise _Fallback
        for _ in range(2 * count):
            size = data[position]
            if size < 0x80 and not size & 1:
                position += 1 + (size >> 1)
            else:
                size, position = read_long(data, position)
                if size < 0:
                    raise _Fallback
                position += size
            if position > end:
                raise _Fallback
        count, position = read_long(data, position)
    return None, position


def _skip_blocks(skip_key: _Read | None, skip_item: _Read) -> _Read:
    """An array's (no key) or a map's items, block by block."""

    def skip(data: bytes, position: int) -> tuple[Any, int]:
        count, position = read_long(data, position)
        while count:
            if count < 0:  # a block with its byte size: rare, left to fastavro
                raise _Fallback
            for _ in range(count):
                if skip_key is not None:
                    _, position = skip_key(data, position)
                _, position = skip_item(data, position)
            count, position = read_long(data, position)
        return None, position

    return skip
