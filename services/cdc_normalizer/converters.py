"""Compiled value converters: :func:`~.logical_types.convert_value`, decided once per schema.

``convert_value`` inspects the schema (decimal? which logical name? which kind?) for every
value it converts. :func:`compile_converter` makes that decision once per
:class:`ConnectSchema` and returns a function ``(value, where) -> Avro-ready value`` with the
same contract, so a table's rows are converted by a fixed list of per-column functions.

The contract is equality with ``convert_value``, result and exception alike: each compiled
converter has a fast path for the common, certainly-valid Python types (an ``int`` in range,
a ``str`` for a string column, base64 unscaled bytes of a decimal that fits, ...) and hands
every other value to ``convert_value`` itself, which then returns or raises exactly what it
always did. Structs, arrays and maps apply their children's compiled converters in the same
order as ``convert_value`` does, so the first failing column is the same one. The property
tests in ``tests/unit/normalizer/test_converters.py`` check the equality on random schemas
and values.
"""

from __future__ import annotations

import binascii
import datetime as dt
import decimal
from collections.abc import Callable
from typing import Any

from services.cdc_normalizer import temporal
from services.cdc_normalizer.connect_schema import ConnectKind, ConnectSchema, LogicalName
from services.cdc_normalizer.errors import NormalizeError
from services.cdc_normalizer.logical_types import (
    _INT_RANGES,
    _NAMED_CONVERTERS,
    _is_decimal_string,
    _to_decimal_string,
    _to_local_timestamp,
    _to_time,
    avro_name,
    convert_value,
    decimal_target,
)

__all__ = ["Converter", "compile_converter"]

Converter = Callable[[Any, str], Any]
"""``(value, where) -> converted value``; raises like ``convert_value``."""

_Decimal = decimal.Decimal
_FIRST_ORDINAL = 719_163  # date(1970, 1, 1).toordinal()
_MIN_DAYS = 1 - _FIRST_ORDINAL  # 0001-01-01
_MAX_DAYS = dt.date.max.toordinal() - _FIRST_ORDINAL  # 9999-12-31
_EPOCH_NAIVE = dt.datetime(1970, 1, 1)
_timedelta = dt.timedelta
_fromordinal = dt.date.fromordinal
# base64.b64decode(validate=True) is a regex match and then this: a third of the time.
# Whatever strict mode refuses takes the general path, which decides exactly.
_a2b_base64 = binascii.a2b_base64

_LOCAL_TIMESTAMP_UNITS: dict[str, tuple[int, bool]] = {
    LogicalName.CONNECT_TIMESTAMP: (1000, False),
    LogicalName.TIMESTAMP: (1000, False),
    LogicalName.MICRO_TIMESTAMP: (1, False),
    LogicalName.NANO_TIMESTAMP: (1, True),
}
_TIME_UNITS: dict[str, tuple[int, bool]] = {
    LogicalName.CONNECT_TIME: (1000, False),
    LogicalName.TIME: (1000, False),
    LogicalName.MICRO_TIME: (1, False),
    LogicalName.NANO_TIME: (1, True),
}


def compile_converter(schema: ConnectSchema) -> Converter:
    """A function equal to ``lambda value, where: convert_value(schema, value, where)``.

    Never raises itself; a schema ``convert_value`` would reject (a Decimal without a scale)
    gives a converter that defers to ``convert_value`` and so raises the same error per value.
    """
    try:
        return _compile(schema)
    except NormalizeError:
        return _generic(schema)


def _generic(schema: ConnectSchema) -> Converter:
    def convert(value: Any, where: str) -> Any:
        return convert_value(schema, value, where)

    return convert


def _compile(schema: ConnectSchema) -> Converter:
    # The same order of decisions as convert_value.
    if _is_decimal_string(schema):
        return _decimal_string(schema)
    target = decimal_target(schema)
    if target is not None:
        return _decimal(schema, *target)
    name = schema.name or ""
    if name in _LOCAL_TIMESTAMP_UNITS:
        return _local_timestamp(schema, name)
    if name in _TIME_UNITS:
        return _time(schema, name)
    if name in (LogicalName.DATE, LogicalName.CONNECT_DATE):
        return _date(schema)
    named = _NAMED_CONVERTERS.get(name)
    if named is not None:
        return _named(schema, named)
    return _plain(schema)


def _plain(schema: ConnectSchema) -> Converter:
    kind = schema.kind
    if kind in _INT_RANGES:
        return _integer(schema, _INT_RANGES[kind])
    if kind in (ConnectKind.FLOAT32, ConnectKind.FLOAT64):
        return _exact_type(schema, float)
    if kind is ConnectKind.BOOLEAN:
        return _exact_type(schema, bool)
    if kind is ConnectKind.STRING:
        return _exact_type(schema, str)
    if kind is ConnectKind.BYTES:
        return _bytes(schema)
    if kind is ConnectKind.STRUCT:
        return _struct(schema)
    if kind is ConnectKind.ARRAY:
        return _array(schema)
    return _map(schema)


def _integer(schema: ConnectSchema, bits: int) -> Converter:
    low, high = -(1 << (bits - 1)), 1 << (bits - 1)
    optional = schema.optional

    def convert(value: Any, where: str) -> Any:
        if type(value) is int and low <= value < high:
            return value
        if value is None and optional:
            return None
        return convert_value(schema, value, where)

    return convert


def _exact_type(schema: ConnectSchema, python_type: type) -> Converter:
    """Values of exactly ``python_type`` pass unchanged (``convert_value`` returns them as is:
    ``float(x)`` of a float is x); everything else takes the general path."""
    optional = schema.optional

    def convert(value: Any, where: str) -> Any:
        if type(value) is python_type:
            return value
        if value is None and optional:
            return None
        return convert_value(schema, value, where)

    return convert


def _bytes(schema: ConnectSchema) -> Converter:
    optional = schema.optional

    def convert(value: Any, where: str) -> Any:
        if type(value) is bytes:
            return value
        if value is None and optional:
            return None
        return convert_value(schema, value, where)

    return convert


def _decimal_string(schema: ConnectSchema) -> Converter:
    """A Connect Decimal's base64 (its scale a schema parameter) and a VariableScaleDecimal's
    ``{"scale", "value"}`` are an unscaled integer and a scale: their text is written from
    the integer's digits. Anything else, and any scale past ``_TEXT_SCALE_LIMIT``, takes the
    general path through a ``Decimal``."""
    optional = schema.optional
    bytes_scale: int | None = None
    if schema.name == LogicalName.DECIMAL:
        try:
            bytes_scale = int(schema.param("scale") or 0)
        except ValueError:  # the general path raises it per value
            bytes_scale = None

    def convert(value: Any, where: str) -> Any:
        kind = type(value)
        data = b""
        scale = bytes_scale
        if (kind is str or kind is bytes) and scale is not None:
            data = _unscaled_data(value)
        elif kind is dict:
            scale = value.get("scale")
            if type(scale) is int:
                data = _unscaled_data(value.get("value"))
        elif value is None:
            return None if optional else convert_value(schema, value, where)
        if data and scale is not None and -_TEXT_SCALE_LIMIT <= scale <= _TEXT_SCALE_LIMIT:
            return _decimal_text(int.from_bytes(data, "big", signed=True), scale)
        return _to_decimal_string(schema, value, where)

    return convert


_TEXT_SCALE_LIMIT = 1000


def _unscaled_data(raw: Any) -> bytes:
    """The bytes of unscaled bytes or of their base64 text; empty when that is not certain
    (the general path then decides)."""
    kind = type(raw)
    if kind is bytes:
        return raw  # type: ignore[no-any-return]
    if kind is str:
        try:
            return _a2b_base64(raw, strict_mode=True)
        except (binascii.Error, ValueError):
            return b""
    return b""


def _decimal_text(unscaled: int, scale: int) -> str:
    """``format(Decimal((sign, digits of unscaled, -scale)), "f")``, written directly."""
    if scale <= 0:
        return "0" if unscaled == 0 else f"{unscaled}{'0' * -scale}"
    digits = str(-unscaled if unscaled < 0 else unscaled)
    if len(digits) <= scale:
        digits = "0" * (scale + 1 - len(digits)) + digits
    sign = "-" if unscaled < 0 else ""
    return f"{sign}{digits[:-scale]}.{digits[-scale:]}"


def _decimal(schema: ConnectSchema, precision: int, scale: int) -> Converter:
    """Unscaled two's-complement bytes (or their base64) of a Connect Decimal whose scale is
    the target scale, and Decimals already at the target scale, are exact when they have at
    most ``precision`` digits: no rounding and no check can fail, so they are built directly."""
    optional = schema.optional
    # convert_value reads unscaled bytes with the Connect scale; decimal_target validated it.
    is_connect_decimal = schema.name == LogicalName.DECIMAL
    unscaled_ok = is_connect_decimal and int(schema.param("scale") or 0) == scale
    limit = 10**precision
    max_adjusted = precision - scale
    exponent = -scale
    suffix = f"E{exponent}"

    def convert(value: Any, where: str) -> Any:
        kind = type(value)
        if kind is _Decimal:
            if value.as_tuple().exponent == exponent and (
                not value or value.adjusted() < max_adjusted
            ):
                return value
        elif unscaled_ok and (kind is str or kind is bytes):
            try:
                data = _a2b_base64(value, strict_mode=True) if kind is str else value
            except (binascii.Error, ValueError):
                data = b""
            if data:
                unscaled = int.from_bytes(data, "big", signed=True)
                if -limit < unscaled < limit:
                    return _Decimal(f"{unscaled}{suffix}")
        elif value is None and optional:
            return None
        return convert_value(schema, value, where)

    return convert


def _date(schema: ConnectSchema) -> Converter:
    optional = schema.optional

    def convert(value: Any, where: str) -> Any:
        kind = type(value)
        if kind is int:
            if _MIN_DAYS <= value <= _MAX_DAYS:
                return _fromordinal(value + _FIRST_ORDINAL)
        elif kind is dt.date:
            return value
        elif value is None and optional:
            return None
        return convert_value(schema, value, where)

    return convert


def _local_timestamp(schema: ConnectSchema, name: str) -> Converter:
    optional = schema.optional
    micros_per_unit, nanos = _LOCAL_TIMESTAMP_UNITS[name]

    def convert(value: Any, where: str) -> Any:
        kind = type(value)
        if kind is int:
            micros = value // 1000 if nanos else value * micros_per_unit
            try:
                return _EPOCH_NAIVE + _timedelta(0, 0, micros)
            except OverflowError:
                pass
        elif kind is dt.datetime and value.tzinfo is None:
            return value
        elif value is None and optional:
            return None
        elif kind is str:
            return _to_local_timestamp(name, value, where)
        return convert_value(schema, value, where)

    return convert


def _time(schema: ConnectSchema, name: str) -> Converter:
    optional = schema.optional
    micros_per_unit, nanos = _TIME_UNITS[name]

    def convert(value: Any, where: str) -> Any:
        if type(value) is int:
            micros = value // 1000 if nanos else value * micros_per_unit
            if 0 <= micros < temporal.MICROS_PER_DAY:
                return temporal.time_from_micros(micros, where)
        elif value is None and optional:
            return None
        elif type(value) is dt.time:
            return _to_time(name, value, where)
        return convert_value(schema, value, where)

    return convert


def _named(schema: ConnectSchema, named: Callable[[ConnectSchema, Any, str], Any]) -> Converter:
    optional = schema.optional

    def convert(value: Any, where: str) -> Any:
        if value is None:
            return None if optional else convert_value(schema, value, where)
        return named(schema, value, where)

    return convert


def _struct(schema: ConnectSchema) -> Converter:
    optional = schema.optional
    known = frozenset(field.name for field in schema.fields)
    fields = tuple(
        (field.name, avro_name(field.name), compile_converter(field.schema), "." + field.name)
        for field in schema.fields
    )

    def convert(value: Any, where: str) -> Any:
        if type(value) is dict and known.issuperset(value):
            get = value.get
            return {
                name_out: column(get(name), where + suffix)
                for name, name_out, column, suffix in fields
            }
        if value is None and optional:
            return None
        return convert_value(schema, value, where)

    return convert


def _array(schema: ConnectSchema) -> Converter:
    if schema.items is None:
        return _generic(schema)
    optional = schema.optional
    item = compile_converter(schema.items)

    def convert(value: Any, where: str) -> Any:
        if type(value) is list:
            return [item(element, f"{where}[{i}]") for i, element in enumerate(value)]
        if value is None and optional:
            return None
        return convert_value(schema, value, where)

    return convert


def _map(schema: ConnectSchema) -> Converter:
    if schema.values is None:
        return _generic(schema)
    optional = schema.optional
    entry = compile_converter(schema.values)

    def convert(value: Any, where: str) -> Any:
        if type(value) is dict and all(type(key) is str for key in value):
            return {key: entry(item, f"{where}.{key}") for key, item in value.items()}
        if value is None and optional:
            return None
        return convert_value(schema, value, where)

    return convert
