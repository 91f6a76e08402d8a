"""Exact date/time arithmetic for Debezium's temporal encodings.

Everything is computed in integers (days, microseconds) and only then turned into
:mod:`datetime` values, so no float rounding sneaks in. Sub-microsecond digits (``NanoTime``,
``NanoTimestamp``, nine-digit ISO fractions) are truncated toward negative infinity: Iceberg v2
``time``/``timestamp`` have microsecond precision, and flooring keeps the order of values intact
(a later nanosecond instant never maps before an earlier one).
"""

from __future__ import annotations

import datetime as dt
import re

from services.cdc_normalizer.errors import SchemaMismatch, ValueOutOfRange

__all__ = [
    "MICROS_PER_DAY",
    "date_from_days",
    "local_datetime_from_micros",
    "micros_from_iso_time_with_offset",
    "parse_iso_local_datetime",
    "parse_iso_offset_datetime",
    "time_from_micros",
    "utc_datetime_from_micros",
]

MICROS_PER_DAY = 86_400_000_000
_EPOCH_DATE = dt.date(1970, 1, 1)
_EPOCH_NAIVE = dt.datetime(1970, 1, 1)
_EPOCH_UTC = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)

_OFFSET = r"(?P<offset>Z|[+-]\d{2}(?::?\d{2}(?::?\d{2})?)?)"
_TIME = r"(?P<hour>\d{2}):(?P<minute>\d{2})(?::(?P<second>\d{2})(?:[.,](?P<fraction>\d{1,9}))?)?"
_DATE = r"(?P<year>[+-]?\d{4,})-(?P<month>\d{2})-(?P<day>\d{2})"
_DATETIME_RE = re.compile(rf"{_DATE}[T ]{_TIME}{_OFFSET}?")
_TIME_RE = re.compile(rf"{_TIME}{_OFFSET}?")
_SPECIAL = frozenset({"infinity", "-infinity", "+infinity"})
# What ZonedTimestamp renders: a UTC instant, ASCII digits, at most six fraction digits.
_UTC_TEXT = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(?:\.[0-9]{1,6})?Z")


def date_from_days(days: int, where: str) -> dt.date:
    """The date ``days`` after 1970-01-01; :class:`ValueOutOfRange` outside years 1..9999."""
    try:
        return _EPOCH_DATE + dt.timedelta(days=days)
    except OverflowError:
        raise ValueOutOfRange(
            f"{where}: date {days} days after 1970-01-01 is outside 1..9999"
        ) from None


def time_from_micros(micros: int, where: str) -> dt.time:
    """Time of day from microseconds after midnight; :class:`ValueOutOfRange` outside one day.

    Postgres ``24:00:00`` and MySQL ``TIME`` durations beyond a day are rejected rather than
    wrapped: wrapping would silently turn 24:00 into 00:00.
    """
    if not 0 <= micros < MICROS_PER_DAY:
        raise ValueOutOfRange(f"{where}: {micros} us is not a time of day (0 <= t < 24h)")
    seconds, micro = divmod(micros, 1_000_000)
    minutes, second = divmod(seconds, 60)
    hour, minute = divmod(minutes, 60)
    return dt.time(hour, minute, second, micro)


def local_datetime_from_micros(micros: int, where: str) -> dt.datetime:
    """Zone-less datetime ``micros`` after 1970-01-01T00:00; range-checked like dates."""
    try:
        return _EPOCH_NAIVE + dt.timedelta(microseconds=micros)
    except OverflowError:
        raise ValueOutOfRange(f"{where}: timestamp {micros} us is outside years 1..9999") from None


def utc_datetime_from_micros(micros: int, where: str) -> dt.datetime:
    """UTC-aware datetime ``micros`` after the Unix epoch; range-checked like dates."""
    try:
        return _EPOCH_UTC + dt.timedelta(microseconds=micros)
    except OverflowError:
        raise ValueOutOfRange(f"{where}: timestamp {micros} us is outside years 1..9999") from None


def _fraction_micros(fraction: str | None) -> int:
    """Microseconds of an ISO fraction; digits past the sixth are truncated."""
    if not fraction:
        return 0
    return int((fraction + "000000")[:6])


def _offset_seconds(offset: str | None, text: str, where: str) -> int:
    if offset is None:
        raise SchemaMismatch(f"{where}: {text!r} has no zone offset (needed for an instant)")
    if offset == "Z":
        return 0
    sign = -1 if offset[0] == "-" else 1
    digits = offset[1:].replace(":", "")
    hours, minutes, seconds = int(digits[0:2]), int(digits[2:4] or 0), int(digits[4:6] or 0)
    return sign * (hours * 3600 + minutes * 60 + seconds)


def _check_special(text: str, where: str) -> None:
    if text.strip().lower() in _SPECIAL:
        raise ValueOutOfRange(f"{where}: {text!r} has no Iceberg representation")


def _naive_from_match(match: re.Match[str], text: str, where: str) -> dt.datetime:
    try:
        return dt.datetime(
            int(match["year"]),
            int(match["month"]),
            int(match["day"]),
            int(match["hour"]),
            int(match["minute"]),
            int(match["second"] or 0),
            _fraction_micros(match["fraction"]),
        )
    except ValueError as exc:
        if "year" in str(exc):
            raise ValueOutOfRange(f"{where}: {text!r} is outside years 1..9999") from None
        raise SchemaMismatch(f"{where}: {text!r} is not a valid datetime: {exc}") from None


def parse_iso_offset_datetime(text: str, where: str) -> dt.datetime:
    """An ISO-8601 datetime with zone offset (``ZonedTimestamp``) as a UTC-aware datetime.

    ``2022-01-08T10:00:00.123456+01:00`` -> 2022-01-08 09:00:00.123456 UTC. Raises
    :class:`SchemaMismatch` for other text (including a missing offset: an instant is never
    guessed from a local time) and :class:`ValueOutOfRange` for ``infinity`` or years past 9999.
    """
    if _UTC_TEXT.fullmatch(text) is not None:
        # Debezium's own form (UTC, at most six fraction digits): the C parser gives the
        # same datetime. What it refuses (month 13, year 0) the general path reports.
        try:
            return dt.datetime.fromisoformat(text)
        except ValueError:
            pass
    return _parse_iso_offset_datetime(text, where)


def _parse_iso_offset_datetime(text: str, where: str) -> dt.datetime:
    _check_special(text, where)
    match = _DATETIME_RE.fullmatch(text.strip())
    if match is None:
        raise SchemaMismatch(f"{where}: {text!r} is not an ISO-8601 datetime")
    offset = _offset_seconds(match["offset"], text, where)
    naive = _naive_from_match(match, text, where)
    try:
        return (naive - dt.timedelta(seconds=offset)).replace(tzinfo=dt.UTC)
    except OverflowError:
        raise ValueOutOfRange(f"{where}: {text!r} is outside years 1..9999") from None


def parse_iso_local_datetime(text: str, where: str) -> dt.datetime:
    """An ISO-8601 datetime without offset as a naive datetime; an offset is a mismatch."""
    _check_special(text, where)
    match = _DATETIME_RE.fullmatch(text.strip())
    if match is None or match["offset"] is not None:
        raise SchemaMismatch(f"{where}: {text!r} is not a zone-less ISO-8601 datetime")
    return _naive_from_match(match, text, where)


def micros_from_iso_time_with_offset(text: str, where: str) -> int:
    """Microseconds after UTC midnight of a ``ZonedTime`` such as ``10:15:30.123456+02:00``.

    Debezium already renders ``ZonedTime`` in UTC (``...Z``); other offsets are shifted to UTC
    modulo one day, the only way a zoned time of day can be expressed as a UTC time of day.
    """
    match = _TIME_RE.fullmatch(text.strip())
    if match is None:
        raise SchemaMismatch(f"{where}: {text!r} is not an ISO-8601 time with offset")
    hour, minute, second = int(match["hour"]), int(match["minute"]), int(match["second"] or 0)
    if hour > 23 or minute > 59 or second > 59:
        raise ValueOutOfRange(f"{where}: {text!r} is not a time of day")
    offset = _offset_seconds(match["offset"], text, where)
    local = ((hour * 60 + minute) * 60 + second) * 1_000_000 + _fraction_micros(match["fraction"])
    return (local - offset * 1_000_000) % MICROS_PER_DAY
