"""Avro binary encoding of change records, compiled once per schema.

``fastavro.schemaless_writer`` looks up each value's schema, logical type and union branch
on every call (and validates a datum against every union branch), which costs more than the
whole normalization of a record. :class:`AvroEncoder` walks the schema once and keeps a
writer function per node; encoding a datum is then a chain of direct calls.

The output is fastavro's, byte for byte. Each node writes only the exact Python types the
normalizer produces for it (``int`` in range, ``str``, ``bytes``, ``Decimal``, ``date``,
naive or UTC ``datetime``, ``time``, ``dict``, ``list``, ``None``) and mirrors fastavro's
conversions for them (``prepare_bytes_decimal`` keeps its byte length, for instance). Any
other datum, or a schema construct not compiled here (fixed, named references, unions of
several types), makes the encoder hand the whole datum to fastavro, which then returns or
raises exactly what it always did. ``tests/unit/normalizer/test_avro_encoder.py`` checks the
byte equality on random schemas and datums.
"""

from __future__ import annotations

import datetime as dt
import decimal
import io
import json
import struct
from collections.abc import Callable
from typing import Any

import fastavro

__all__ = ["AvroEncoder"]

_Out = Callable[[bytes], Any]
_Write = Callable[[_Out, Any], None]

_HEADER = struct.Struct(">bI")
_FLOAT = struct.Struct("<f").pack
_DOUBLE = struct.Struct("<d").pack
_INT_RANGE = (-(1 << 31), (1 << 31) - 1)
_LONG_RANGE = (-(1 << 63), (1 << 63) - 1)
_EPOCH_UTC = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
_EPOCH_NAIVE = dt.datetime(1970, 1, 1)
_DAYS_SHIFT = dt.date(1970, 1, 1).toordinal()
_Decimal = decimal.Decimal
_datetime = dt.datetime
_date = dt.date
_time = dt.time

# zigzag varint of -64..63: one byte each
_SMALL_LONGS = tuple(bytes([(n << 1) ^ (n >> 63)]) for n in range(-64, 64))
_LENGTHS_CACHED = 4096
_TRUE, _FALSE = b"\x01", b"\x00"
_END_OF_BLOCKS = b"\x00"


class _Fallback(Exception):
    """Not a datum (or schema) the compiled path writes: fastavro writes it instead."""


_EIGHT_GROUPS = 1 << 56  # zigzag values below fit eight 7-bit groups


def encode_long(n: int) -> bytes:
    """Avro ``long`` (zigzag varint) of ``n``, which must fit 64 bits."""
    if -64 <= n < 64:
        return _SMALL_LONGS[n + 64]
    z = (n << 1) ^ (n >> 63)
    if z < _EIGHT_GROUPS:
        # Up to 8 bytes (a microsecond timestamp's 8) gathered in one integer: a third of
        # the time of a bytearray appended to per byte.
        gathered = 0
        shift = 0
        while z > 0x7F:
            gathered |= ((z & 0x7F) | 0x80) << shift
            z >>= 7
            shift += 8
        return (gathered | (z << shift)).to_bytes((shift >> 3) + 1, "little")
    out = bytearray()
    while z > 0x7F:
        out.append((z & 0x7F) | 0x80)
        z >>= 7
    out.append(z)
    return bytes(out)


# Avro length prefixes of 0..4095 (strings, bytes, block counts), precomputed
_LENGTHS = tuple(encode_long(n) for n in range(_LENGTHS_CACHED))


def _length(n: int) -> bytes:
    return _LENGTHS[n] if n < _LENGTHS_CACHED else encode_long(n)


class AvroEncoder:
    """Encodes datums of one Avro schema (JSON text or parsed JSON) like fastavro does.

    Raises what ``fastavro.parse_schema`` raises for an invalid schema. :meth:`encode` and
    :meth:`frame` raise what ``fastavro.schemaless_writer`` raises for a datum that does not
    fit (ValueError, TypeError, KeyError, ...).
    """

    def __init__(self, schema: Any) -> None:
        raw = json.loads(schema) if isinstance(schema, str) else schema
        self._parsed = fastavro.parse_schema(json.loads(json.dumps(raw)))
        self._write = _compile(raw)

    def encode(self, datum: Any) -> bytes:
        """The Avro binary body of ``datum`` (no header)."""
        return self._encode([], datum)

    def frame(self, schema_id: int, datum: Any) -> bytes:
        """``datum`` in the Confluent wire format: magic byte 0, schema id, body."""
        return self._encode([_HEADER.pack(0, schema_id)], datum)

    def _encode(self, parts: list[bytes], datum: Any) -> bytes:
        head = len(parts)
        try:
            self._write(parts.append, datum)
        except Exception:  # any surprise: fastavro decides, with its own result or error
            del parts[head:]
            body = io.BytesIO()
            fastavro.schemaless_writer(body, self._parsed, datum)
            parts.append(body.getvalue())
        return b"".join(parts)


def _compile(schema: Any) -> _Write:
    if isinstance(schema, list):
        return _union(schema)
    if isinstance(schema, str):
        return _PRIMITIVES.get(schema, _always_fallback)
    if not isinstance(schema, dict):
        return _always_fallback
    kind = schema.get("type")
    if isinstance(kind, (dict, list)):
        return _compile(kind)
    logical = schema.get("logicalType")
    if isinstance(logical, str) and f"{kind}-{logical}" in _LOGICAL:
        return _LOGICAL[f"{kind}-{logical}"](schema)
    if kind == "record":
        return _record(schema)
    if kind == "enum":
        return _enum(schema)
    if kind == "array":
        return _array(schema)
    if kind == "map":
        return _map(schema)
    if kind == "fixed" or not isinstance(kind, str):
        return _always_fallback
    return _PRIMITIVES.get(kind, _always_fallback)


def _always_fallback(out: _Out, value: Any) -> None:
    raise _Fallback


def _write_null(out: _Out, value: Any) -> None:
    if value is not None:
        raise _Fallback


def _write_boolean(out: _Out, value: Any) -> None:
    if value is True:
        out(_TRUE)
    elif value is False:
        out(_FALSE)
    else:
        raise _Fallback


def _integer(low: int, high: int) -> _Write:
    def write(out: _Out, value: Any) -> None:
        if type(value) is not int or not low <= value <= high:
            raise _Fallback
        out(_SMALL_LONGS[value + 64] if -64 <= value < 64 else encode_long(value))

    return write


def _write_float(out: _Out, value: Any) -> None:
    if type(value) is not float:
        raise _Fallback
    out(_FLOAT(value))


def _write_double(out: _Out, value: Any) -> None:
    if type(value) is not float:
        raise _Fallback
    out(_DOUBLE(value))


def _write_string(out: _Out, value: Any) -> None:
    if type(value) is not str:
        raise _Fallback
    data = value.encode()
    out(_LENGTHS[len(data)] if len(data) < _LENGTHS_CACHED else encode_long(len(data)))
    out(data)


def _write_bytes(out: _Out, value: Any) -> None:
    if type(value) is not bytes:
        raise _Fallback
    out(_length(len(value)))
    out(value)


_PRIMITIVES: dict[str, _Write] = {
    "null": _write_null,
    "boolean": _write_boolean,
    "int": _integer(*_INT_RANGE),
    "long": _integer(*_LONG_RANGE),
    "float": _write_float,
    "double": _write_double,
    "string": _write_string,
    "bytes": _write_bytes,
}


def _as_long(value: int) -> bytes:
    if not _LONG_RANGE[0] <= value <= _LONG_RANGE[1]:
        raise _Fallback
    return encode_long(value)


def _timestamp(unit: int, aware: bool) -> Callable[[dict[str, Any]], _Write]:
    """``(long, timestamp-*)`` for UTC-aware datetimes, ``(long, local-timestamp-*)`` for naive
    ones (fastavro turns naive instants into local time: left to it); ints pass as they are."""
    epoch = _EPOCH_UTC if aware else _EPOCH_NAIVE

    def build(schema: dict[str, Any]) -> _Write:
        def write(out: _Out, value: Any) -> None:
            kind = type(value)
            if kind is int:
                out(_as_long(value))
                return
            if kind is not _datetime or (value.tzinfo is not None) is not aware:
                raise _Fallback
            delta = value - epoch
            seconds = delta.days * 86400 + delta.seconds
            if unit == 1_000_000:
                out(_as_long(seconds * 1_000_000 + delta.microseconds))
            else:
                out(_as_long(seconds * 1000 + delta.microseconds // 1000))

        return write

    return build


def _date_writer(schema: dict[str, Any]) -> _Write:
    low, high = _INT_RANGE

    def write(out: _Out, value: Any) -> None:
        kind = type(value)
        if kind is _date:
            out(encode_long(value.toordinal() - _DAYS_SHIFT))
        elif kind is int and low <= value <= high:
            out(encode_long(value))
        else:
            raise _Fallback

    return write


def _time_writer(unit: int, low: int, high: int) -> Callable[[dict[str, Any]], _Write]:
    def build(schema: dict[str, Any]) -> _Write:
        def write(out: _Out, value: Any) -> None:
            kind = type(value)
            if kind is _time:
                seconds = (value.hour * 60 + value.minute) * 60 + value.second
                if unit == 1_000_000:
                    out(encode_long(seconds * 1_000_000 + value.microsecond))
                else:
                    out(encode_long(seconds * 1000 + value.microsecond // 1000))
            elif kind is int and low <= value <= high:
                out(encode_long(value))
            else:
                raise _Fallback

        return write

    return build


def _decimal_writer(schema: dict[str, Any]) -> _Write:
    """fastavro's ``prepare_bytes_decimal``: the unscaled integer at the schema's scale, in
    ``(bit_length(|unscaled|) + 8) // 8`` two's-complement bytes."""
    precision, scale = schema.get("precision"), schema.get("scale", 0)
    if type(precision) is not int or type(scale) is not int or scale < 0:
        return _always_fallback
    power = 10**scale
    limit = 10**precision
    quantum = _Decimal(1).scaleb(-scale)  # 10**-scale, whose exponent is -scale

    def write(out: _Out, value: Any) -> None:
        if type(value) is not _Decimal:
            raise _Fallback
        if not value.same_quantum(quantum):
            # An exponent other than -scale (the converters build -scale): fastavro's checks.
            _, digits, exponent = value.as_tuple()
            if type(exponent) is not int or len(digits) > precision or exponent + scale < 0:
                raise _Fallback
        # value = numerator / denominator exactly, and denominator divides 10**scale
        numerator, denominator = value.as_integer_ratio()
        unscaled = numerator * (power // denominator)
        # At exponent -scale the coefficient is the unscaled integer, and this bound is
        # fastavro's digit check; a wider one at another exponent goes to fastavro, which
        # writes the same bytes.
        if not -limit < unscaled < limit:
            raise _Fallback
        size = (unscaled.bit_length() + 8) // 8  # bit_length ignores the sign, like fastavro
        out(_length(size))
        out(unscaled.to_bytes(size, "big", signed=True))

    return write


def _uuid_writer(schema: dict[str, Any]) -> _Write:
    return _write_string


_LOGICAL: dict[str, Callable[[dict[str, Any]], _Write]] = {
    "long-timestamp-millis": _timestamp(1000, aware=True),
    "long-timestamp-micros": _timestamp(1_000_000, aware=True),
    "long-local-timestamp-millis": _timestamp(1000, aware=False),
    "long-local-timestamp-micros": _timestamp(1_000_000, aware=False),
    "int-date": _date_writer,
    "int-time-millis": _time_writer(1000, *_INT_RANGE),
    "long-time-micros": _time_writer(1_000_000, *_LONG_RANGE),
    "bytes-decimal": _decimal_writer,
    "string-uuid": _uuid_writer,
}


def _record(schema: dict[str, Any]) -> _Write:
    fields = schema.get("fields")
    if not isinstance(fields, list) or not all(
        isinstance(field, dict) and isinstance(field.get("name"), str) for field in fields
    ):
        return _always_fallback
    writers = tuple((field["name"], _compile(field.get("type"))) for field in fields)

    def write(out: _Out, value: Any) -> None:
        # "-type" selects a union branch by name in fastavro: left to it.
        if type(value) is not dict or "-type" in value:
            raise _Fallback
        for name, write_field in writers:
            write_field(out, value[name])

    return write


def _enum(schema: dict[str, Any]) -> _Write:
    symbols = schema.get("symbols")
    if not isinstance(symbols, list):
        return _always_fallback
    indexes: dict[Any, bytes] = {}
    for index, symbol in enumerate(symbols):
        indexes.setdefault(symbol, encode_long(index))

    def write(out: _Out, value: Any) -> None:
        if type(value) is not str or value not in indexes:
            raise _Fallback
        out(indexes[value])

    return write


def _array(schema: dict[str, Any]) -> _Write:
    write_item = _compile(schema.get("items"))

    def write(out: _Out, value: Any) -> None:
        if type(value) is not list:
            raise _Fallback
        if value:
            out(_length(len(value)))
            for item in value:
                write_item(out, item)
        out(_END_OF_BLOCKS)

    return write


def _map(schema: dict[str, Any]) -> _Write:
    write_value = _compile(schema.get("values"))
    strings = write_value is _write_string
    # Map keys repeat from record to record (a change's source coordinates): encode each once.
    keys: dict[str, bytes] = {}

    def encoded_key(key: Any) -> bytes:
        if type(key) is not str:
            raise _Fallback
        data = key.encode()
        known = _length(len(data)) + data
        if len(keys) < 4096:
            keys[key] = known
        return known

    def write(out: _Out, value: Any) -> None:
        if type(value) is not dict:
            raise _Fallback
        if value:
            out(_length(len(value)))
            for key, item in value.items():
                out(keys.get(key) or encoded_key(key))
                if strings and type(item) is str:  # map<string>, the change's source map
                    data = item.encode()
                    out(_LENGTHS[len(data)] if len(data) < _LENGTHS_CACHED else _length(len(data)))
                    out(data)
                else:
                    write_value(out, item)
        out(_END_OF_BLOCKS)

    return write


def _union(branches: list[Any]) -> _Write:
    nulls = [index for index, branch in enumerate(branches) if branch == "null"]
    others = [index for index, branch in enumerate(branches) if branch != "null"]
    if len(nulls) > 1 or len(others) != 1:
        return _always_fallback
    null_index = encode_long(nulls[0]) if nulls else None
    value_index = encode_long(others[0])
    write_value = _compile(branches[others[0]])

    def write(out: _Out, value: Any) -> None:
        if value is None:
            if null_index is None:
                raise _Fallback
            out(null_index)
            return
        if type(value) is tuple:  # fastavro's (branch name, datum) notation
            raise _Fallback
        out(value_index)
        write_value(out, value)

    return write
