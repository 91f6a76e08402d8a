"""Sortable source positions: one string per change that orders the changes of one key.

A position is a tuple of non-negative integers rendered as 20-digit zero-padded decimals joined
by ``"."`` (the ``position`` field of ``contracts/avro/change_record.v2.avsc``), so string
order equals tuple order. Which integers, per connector (``source.connector``, or recognised
by its fields when that is absent):

================  =====================================================================
postgresql        ``sequence`` = ``[last_commit_lsn, lsn]`` when present, else ``(lsn,)``;
                  then ``txId``. Postgres emits transactions in commit order but the LSNs of
                  interleaved transactions overlap, so the commit LSN must come first; within
                  a transaction the event LSN increases. A null element counts as 0.
mysql / mariadb   ``(binlog file index, pos, row)``; the index is the numeric suffix of
                  ``file`` (``mysql-bin.000003`` -> 3), ``row`` orders the rows of one
                  multi-row event. ``gtid`` is kept in the source map only: GTIDs of
                  different servers are not comparable.
sqlserver         ``commit_lsn``, ``change_lsn`` (three components each: virtual log file,
                  block, slot of ``"00000027:00000758:0005"``, hex), ``event_serial_no``.
                  An LSN is 80 bits, more than 20 decimal digits, so each part is its own
                  component; a null LSN counts as zeros.
mongodb           ``(ts_ms, ord)``: the change stream cluster time in ms and the ordinal
                  within that second.
fallback          ``(ts_ms, partition, offset)``: source commit time, then the Kafka
                  coordinates. Correct for one key only if the source clock never goes
                  backwards for it; used when no connector-specific field is present.
================  =====================================================================

Positions are only compared between changes of the same key, which come from the same
connector, so the different shapes never meet.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from services.cdc_normalizer.errors import InvalidPosition

__all__ = [
    "POSITION_DIGITS",
    "PositionKind",
    "SourcePosition",
    "detect_kind",
    "format_position",
    "parse_position",
    "source_position",
    "sqlserver_lsn_parts",
]

POSITION_DIGITS = 20
_MAX_COMPONENT = 10**POSITION_DIGITS
_FILE_INDEX = re.compile(r"(\d+)$")
_PG_LSN_TEXT = re.compile(r"([0-9A-Fa-f]{1,8})/([0-9A-Fa-f]{1,8})")
_JSON_WHITESPACE = " \t\n\r"


class PositionKind(StrEnum):
    """Which rule built a position."""

    POSTGRES = "postgresql"
    MYSQL = "mysql"
    SQLSERVER = "sqlserver"
    MONGODB = "mongodb"
    FALLBACK = "fallback"


@dataclass(frozen=True, slots=True, order=True, init=False)
class SourcePosition:
    """A source position: ``components`` compare like the rendered ``text``."""

    components: tuple[int, ...]
    kind: PositionKind

    # Written out: mypyc compiles it; the one dataclass generates stays interpreted.
    def __init__(self, components: tuple[int, ...], kind: PositionKind) -> None:
        object.__setattr__(self, "components", components)
        object.__setattr__(self, "kind", kind)

    @property
    def text(self) -> str:
        """The sortable string form (see :func:`format_position`)."""
        return format_position(self.components)


def format_position(components: tuple[int, ...]) -> str:
    """Render components as 20-digit zero-padded decimals joined by ``"."``.

    Raises :class:`InvalidPosition` for a negative component or one of 21+ digits.
    """
    _check_range(components)
    template = _TEMPLATES.get(len(components))
    if template is None:
        return ".".join([f"{component:020d}" for component in components])
    return template % components


# "%020d.%020d.%020d" % components: one formatting call instead of one per component.
_TEMPLATES = {n: ".".join([f"%0{POSITION_DIGITS}d"] * n) for n in range(1, 9)}


def _check_range(components: tuple[int, ...]) -> None:
    for component in components:
        if not 0 <= component < _MAX_COMPONENT:
            raise InvalidPosition(f"position component {component} is not in [0, 10^20)")


def parse_position(text: str) -> tuple[int, ...]:
    """Inverse of :func:`format_position`; raises :class:`InvalidPosition` on other text."""
    parts = text.split(".")
    if not all(len(part) == POSITION_DIGITS and part.isdigit() for part in parts):
        raise InvalidPosition(f"{text!r} is not a position string")
    return tuple(int(part) for part in parts)


def _number(value: Any, field: str) -> int:
    """A non-negative integer from an int, a decimal string or a Postgres ``X/Y`` LSN text."""
    if isinstance(value, bool):
        raise InvalidPosition(f"{field}: boolean {value!r} is not a position")
    if isinstance(value, int):
        number = value
    elif isinstance(value, str) and value.strip().isdigit():
        number = int(value.strip())
    elif isinstance(value, str) and (match := _PG_LSN_TEXT.fullmatch(value.strip())):
        number = (int(match[1], 16) << 32) | int(match[2], 16)
    else:
        raise InvalidPosition(f"{field}: {value!r} is not a non-negative integer")
    if number < 0:
        raise InvalidPosition(f"{field}: {number} is negative")
    return number


def _optional_number(source: Mapping[str, Any], field: str) -> int:
    value = source.get(field)
    return 0 if value is None else _number(value, field)


def detect_kind(source: Mapping[str, Any]) -> PositionKind:
    """The position rule for ``source``: by ``connector``, else by the fields present."""
    connector = str(source.get("connector") or "").lower()
    if connector == "postgresql" or (not connector and source.get("lsn") is not None):
        return PositionKind.POSTGRES
    if connector in ("mysql", "mariadb") or (
        not connector and source.get("file") is not None and source.get("pos") is not None
    ):
        return PositionKind.MYSQL
    if connector == "sqlserver" or (not connector and source.get("commit_lsn") is not None):
        return PositionKind.SQLSERVER
    if connector == "mongodb" or (not connector and source.get("ord") is not None):
        return PositionKind.MONGODB
    return PositionKind.FALLBACK


def _plain_sequence(text: str) -> tuple[int, int] | None:
    """``'["24023120","24023128"]'`` (Debezium's form, JSON whitespace allowed around items)
    as two integers without a JSON parse; None for any other text, which then takes the
    general path (null items, LSN text, malformed input)."""
    if text[:1] != "[" or text[-1:] != "]":
        return None
    items = text[1:-1].split(",")
    if len(items) != 2:
        return None
    first, second = _quoted_digits(items[0]), _quoted_digits(items[1])
    if first is None or second is None:
        return None
    return first, second


def _quoted_digits(item: str) -> int | None:
    digits = item.strip(_JSON_WHITESPACE)
    if len(digits) < 3 or digits[0] != '"' or digits[-1] != '"':
        return None
    digits = digits[1:-1]
    return int(digits) if digits.isascii() and digits.isdigit() else None


def _postgres(source: Mapping[str, Any]) -> tuple[int, ...] | None:
    sequence = source.get("sequence")
    if type(sequence) is str and (pair := _plain_sequence(sequence)) is not None:
        return (pair[0], pair[1], _optional_number(source, "txId"))
    if isinstance(sequence, str) and sequence.strip():
        try:
            sequence = json.loads(sequence)
        except json.JSONDecodeError:
            raise InvalidPosition(f"sequence: {sequence!r} is not a JSON array") from None
    if sequence is not None and not isinstance(sequence, str):
        if not isinstance(sequence, list) or len(sequence) != 2:
            raise InvalidPosition(f"sequence: {sequence!r} is not [last_commit_lsn, lsn]")
        commit, lsn = (0 if item is None else _number(item, "sequence") for item in sequence)
        return (commit, lsn, _optional_number(source, "txId"))
    if source.get("lsn") is None:
        return None
    return (_number(source["lsn"], "lsn"), _optional_number(source, "txId"))


def _mysql(source: Mapping[str, Any]) -> tuple[int, ...] | None:
    file_name, pos = source.get("file"), source.get("pos")
    if file_name is None or pos is None:
        return None
    match = _FILE_INDEX.search(str(file_name))
    if match is None:
        raise InvalidPosition(f"file: {file_name!r} has no numeric binlog index")
    return (int(match[1]), _number(pos, "pos"), _optional_number(source, "row"))


def sqlserver_lsn_parts(value: Any, field: str) -> tuple[int, int, int]:
    """``"00000027:00000758:0005"`` -> ``(0x27, 0x758, 0x5)``; null or ``"NULL"`` -> zeros."""
    if value is None or (isinstance(value, str) and value.upper() == "NULL"):
        return (0, 0, 0)
    parts = str(value).split(":")
    if len(parts) != 3:
        raise InvalidPosition(f"{field}: {value!r} is not a SQL Server LSN")
    try:
        vlf, block, slot = (int(part, 16) for part in parts)
    except ValueError:
        raise InvalidPosition(f"{field}: {value!r} is not a SQL Server LSN") from None
    return (vlf, block, slot)


def _sqlserver(source: Mapping[str, Any]) -> tuple[int, ...] | None:
    if source.get("commit_lsn") is None and source.get("change_lsn") is None:
        return None
    return (
        *sqlserver_lsn_parts(source.get("commit_lsn"), "commit_lsn"),
        *sqlserver_lsn_parts(source.get("change_lsn"), "change_lsn"),
        _optional_number(source, "event_serial_no"),
    )


def _mongodb(source: Mapping[str, Any]) -> tuple[int, ...] | None:
    if source.get("ts_ms") is None or source.get("ord") is None:
        return None
    return (_number(source["ts_ms"], "ts_ms"), _number(source["ord"], "ord"))


_RULES = {
    PositionKind.POSTGRES: _postgres,
    PositionKind.MYSQL: _mysql,
    PositionKind.SQLSERVER: _sqlserver,
    PositionKind.MONGODB: _mongodb,
}


def source_position(
    source: Mapping[str, Any], *, ts_ms: int, partition: int, offset: int
) -> SourcePosition:
    """The position of a change from its Debezium ``source`` block.

    ``ts_ms`` (the source timestamp already chosen by the caller), ``partition`` and ``offset``
    (the Kafka coordinates of the consumed record) feed the documented fallback, used when the
    connector's own position fields are absent. Raises :class:`InvalidPosition` when position
    fields are present but malformed (never falls back silently over bad data).
    """
    kind = detect_kind(source)
    rule = _RULES.get(kind)
    components = rule(source) if rule is not None else None
    if components is None:
        kind, components = (
            PositionKind.FALLBACK,
            (
                _number(ts_ms, "ts_ms"),
                _number(partition, "partition"),
                _number(offset, "offset"),
            ),
        )
    _check_range(components)
    return SourcePosition(components, kind)
