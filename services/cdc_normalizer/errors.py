"""Why a Debezium record cannot be normalized.

Every failure of the pure core is a :class:`NormalizeError` subclass with a stable, snake_case
``reason`` class attribute. The service puts the exception class name into the dead-letter
header ``icefjord.error.class`` and ``reason`` into metrics labels (bounded: one per class), so
neither may change once released. All of them are permanent: the same bytes always fail the same
way, so a record that raises one goes to the dead-letter topic and is never retried.
"""

from __future__ import annotations

from shared.errors import IcefjordError

__all__ = [
    "InvalidJson",
    "InvalidPosition",
    "InvalidSchema",
    "MalformedEnvelope",
    "MissingAfter",
    "MissingKey",
    "MissingSchema",
    "MissingTimestamp",
    "NormalizeError",
    "SchemaMismatch",
    "UnavailableValue",
    "UnknownOperation",
    "UnsupportedEnvelope",
    "UnsupportedType",
    "ValueOutOfRange",
]


class NormalizeError(IcefjordError, ValueError):
    """Base class: the record can never be normalized. ``reason`` names the class of failure."""

    reason: str = "normalize_error"

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class InvalidJson(NormalizeError):
    """Key or value bytes are not valid UTF-8 JSON."""

    reason = "invalid_json"


class MalformedEnvelope(NormalizeError):
    """The value is not a Debezium envelope: wrong JSON shape, ``payload`` not an object, ..."""

    reason = "malformed_envelope"


class UnsupportedEnvelope(NormalizeError):
    """A well-formed Debezium event the normalizer does not handle (e.g. MongoDB documents)."""

    reason = "unsupported_envelope"


class UnknownOperation(NormalizeError):
    """``op`` (or ``__op``) is missing or not one of c, u, d, r, t."""

    reason = "unknown_op"


class MissingAfter(NormalizeError):
    """A create, update or read event without an ``after`` row image."""

    reason = "missing_after"


class MissingKey(NormalizeError):
    """No primary key: no Debezium key struct, no configured key columns, or a null key value."""

    reason = "missing_key"


class MissingSchema(NormalizeError):
    """A schemaless record for which the caller declared no row schema (types are never guessed)."""

    reason = "missing_schema"


class InvalidSchema(NormalizeError):
    """A schema (JSON ``schema`` block, Avro writer schema, declared schema) that cannot be read."""

    reason = "invalid_schema"


class UnsupportedType(NormalizeError):
    """A schema type with no Iceberg-ready mapping (e.g. a map with non-string keys)."""

    reason = "unsupported_type"


class SchemaMismatch(NormalizeError):
    """A value that does not match its schema: wrong JSON type, missing required field, ..."""

    reason = "schema_mismatch"


class ValueOutOfRange(NormalizeError):
    """A value of the right type that the target type cannot hold losslessly.

    Examples: a decimal wider than its declared precision, a date past year 9999, Postgres
    ``infinity``, ``NaN`` for a decimal column, a MySQL ``TIME`` outside one day.
    """

    reason = "value_out_of_range"


class UnavailableValue(NormalizeError):
    """A column holds Debezium's unavailable-value placeholder (an unchanged TOASTed value).

    Postgres does not log unchanged TOASTed columns unless the table has ``REPLICA IDENTITY
    FULL``; Debezium then sends ``__debezium_unavailable_value`` instead of the value. Writing
    it would overwrite the real value with the placeholder, so the change is rejected; the fix
    is ``ALTER TABLE ... REPLICA IDENTITY FULL`` on the source.
    """

    reason = "unavailable_value"


class MissingTimestamp(NormalizeError):
    """No source timestamp: neither ``source.ts_ms``, the envelope ``ts_ms`` nor a Kafka one."""

    reason = "missing_timestamp"


class InvalidPosition(NormalizeError):
    """Source position fields that are present but cannot be read as non-negative integers."""

    reason = "invalid_position"
