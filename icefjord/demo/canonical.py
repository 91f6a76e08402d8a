"""One comparable form per source column type, whichever engine a value was read from.

PostgreSQL (psycopg), Spark reading Iceberg, and the generator's model hand the same value
over in different Python shapes: a ``money`` as ``Decimal`` or as text, a ``timestamptz`` as
an aware datetime or as microseconds, a ``jsonb`` as a dict or as text with other
whitespace and key order, a ``bytea`` as ``bytes`` or ``bytearray``, a ``real`` as the
float32 it is or as the decimal it was written as. :func:`canonical` maps each to one
hashable value, so equal data compares equal and a checksum can be summed over rows.
"""

from __future__ import annotations

import datetime as dt
import decimal
import hashlib
import json
import struct
import uuid
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from icefjord.demo.model import Column, Kind

_EPOCH_UTC = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
_EPOCH = dt.datetime(1970, 1, 1)
_MICRO = dt.timedelta(microseconds=1)
_WIDE = decimal.Context(prec=1000)
_MASK = (1 << 64) - 1


def decimal_text(value: Any) -> str:
    """The exact number without trailing zeros or exponent: ``Decimal('1.50')`` and
    ``"1.5"`` give ``"1.5"``; zero (also ``-0.00``) gives ``"0"``. Raises
    decimal.InvalidOperation for text that is not a number, ValueError for NaN/infinity."""
    number = value if isinstance(value, decimal.Decimal) else decimal.Decimal(str(value))
    if not number.is_finite():
        raise ValueError(f"not a finite number: {value!r}")
    if number.is_zero():
        return "0"
    return format(_WIDE.normalize(number), "f")


def _micros_utc(value: Any) -> int:
    if isinstance(value, int):
        return value
    if isinstance(value, str):
        value = dt.datetime.fromisoformat(value)
    if isinstance(value, dt.datetime):
        aware = value if value.tzinfo is not None else value.replace(tzinfo=dt.UTC)
        return (aware - _EPOCH_UTC) // _MICRO
    raise TypeError(f"not an instant: {value!r}")


def _micros_local(value: Any) -> int:
    if isinstance(value, int):
        return value
    if isinstance(value, str):
        value = dt.datetime.fromisoformat(value)
    if isinstance(value, dt.datetime):
        wall: dt.datetime = value
        if wall.tzinfo is not None:
            wall = wall.astimezone(dt.UTC).replace(tzinfo=None)
        return (wall - _EPOCH) // _MICRO
    raise TypeError(f"not a timestamp: {value!r}")


def _date(value: Any) -> dt.date:
    if isinstance(value, dt.datetime):
        raise TypeError(f"a datetime is not a date: {value!r}")
    if isinstance(value, dt.date):
        return value
    if isinstance(value, int):
        return dt.date(1970, 1, 1) + dt.timedelta(days=value)
    if isinstance(value, str):
        return dt.date.fromisoformat(value)
    raise TypeError(f"not a date: {value!r}")


def _time_micros(value: Any) -> int:
    if isinstance(value, int):
        return value
    if isinstance(value, dt.timedelta):
        return value // _MICRO
    if isinstance(value, str):
        value = dt.time.fromisoformat(value)
    if isinstance(value, dt.time):
        seconds = value.hour * 3600 + value.minute * 60 + value.second
        return seconds * 1_000_000 + value.microsecond
    raise TypeError(f"not a time of day: {value!r}")


def json_value(value: Any) -> Any:
    """JSON as a hashable tree: objects sorted by key, numbers by :func:`decimal_text`
    (``1``, ``1.0`` and ``1.00`` are one number), booleans tagged apart from numbers.
    Text is parsed first."""
    if isinstance(value, str | bytes):
        value = json.loads(value, parse_float=decimal.Decimal)
    return _json_tree(value)


def _json_tree(value: Any) -> Any:
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, bool):
        return ("bool", value)
    if isinstance(value, int | float | decimal.Decimal):
        number = decimal.Decimal(repr(value)) if isinstance(value, float) else value
        return ("num", decimal_text(number))
    if isinstance(value, Mapping):
        return ("obj", tuple(sorted((str(k), _json_tree(v)) for k, v in value.items())))
    if isinstance(value, list | tuple):
        return ("arr", tuple(_json_tree(v) for v in value))
    raise TypeError(f"not JSON: {value!r}")


def _float32(value: Any) -> float:
    result: float = struct.unpack("<f", struct.pack("<f", float(value)))[0]
    return result


def canonical(kind: Kind, value: Any) -> Any:
    """The comparable form of ``value`` read for a column of ``kind`` (None stays None).
    Raises TypeError/ValueError for a value that cannot be that kind."""
    if value is None:
        return None
    match kind:
        case Kind.SMALLINT | Kind.INTEGER | Kind.BIGINT:
            if isinstance(value, bool) or not isinstance(value, int):
                raise TypeError(f"not an integer: {value!r}")
            return value
        case Kind.NUMERIC | Kind.NUMERIC_ANY | Kind.MONEY:
            return decimal_text(value)
        case Kind.REAL:
            return _float32(value)
        case Kind.DOUBLE:
            return float(value)
        case Kind.BOOLEAN:
            if not isinstance(value, bool):
                raise TypeError(f"not a boolean: {value!r}")
            return value
        case Kind.TEXT | Kind.ENUM:
            return str(value)
        case Kind.TIMESTAMPTZ:
            return _micros_utc(value)
        case Kind.TIMESTAMP:
            return _micros_local(value)
        case Kind.DATE:
            return _date(value)
        case Kind.TIME:
            return _time_micros(value)
        case Kind.JSON | Kind.JSONB:
            return json_value(value)
        case Kind.UUID:
            return str(uuid.UUID(str(value)))
        case Kind.INT_ARRAY:
            return tuple(None if v is None else int(v) for v in value)
        case Kind.BYTEA:
            return bytes(value)
    raise ValueError(f"unknown kind {kind!r}")


def canonical_row(columns: Sequence[Column], row: Mapping[str, Any]) -> tuple[Any, ...]:
    """The row's columns, in ``columns`` order, in canonical form (absent counts as None)."""
    return tuple(canonical(c.kind, row.get(c.name)) for c in columns)


def row_digest(row: tuple[Any, ...]) -> int:
    """A 64-bit digest of a canonical row (its ``repr`` is deterministic)."""
    return int.from_bytes(hashlib.blake2b(repr(row).encode(), digest_size=8).digest(), "big")


def checksum(rows: Iterable[tuple[Any, ...]]) -> int:
    """Order-independent checksum of canonical rows: the sum of their digests mod 2**64
    (a sum, not a XOR, so a duplicated pair does not cancel out)."""
    total = 0
    for row in rows:
        total = (total + row_digest(row)) & _MASK
    return total
