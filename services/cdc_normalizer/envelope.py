"""Reading the shapes a Debezium record arrives in, before any typing happens.

Value shapes:

* JSON with schemas: ``{"schema": {...}, "payload": {...}}`` (Kafka JsonConverter,
  ``schemas.enable=true``); the schema block types the payload.
* JSON without schemas, or a fastavro-decoded Avro value: the payload alone; its schema comes
  from the caller (the Avro writer schema, or a declared row schema).
* Full envelope: ``before``, ``after``, ``source``, ``op``, ``ts_ms``, ``transaction``.
* Flattened by ``ExtractNewRecordState``: the row's columns plus ``__``-prefixed metadata
  (``__op``, ``__deleted``, ``__lsn``, ``__source_ts_ms``, ``__ts_ms``, ``__table``, ``__db``,
  ...). Every ``__`` field is metadata, never a column (the SMT's ``add.fields.prefix``).

Keys: the Debezium key struct, JSON with or without schema, or fastavro-decoded Avro.
"""

from __future__ import annotations

import decimal
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import msgspec

from services.cdc_normalizer.caching import IdentityCache
from services.cdc_normalizer.connect_schema import (
    ConnectKind,
    ConnectSchema,
    connect_schema_from_json,
)
from services.cdc_normalizer.errors import InvalidJson, MalformedEnvelope, UnsupportedEnvelope

__all__ = [
    "METADATA_PREFIX",
    "Envelope",
    "KeyStruct",
    "decode_json",
    "known_payloads",
    "parse_key",
    "parse_value",
    "row_schema_of_envelope",
]

METADATA_PREFIX = "__"
# Flattened metadata that is about the envelope, not the source position.
_ENVELOPE_METADATA = frozenset({"op", "deleted", "ts_ms", "transaction_id"})


@dataclass(frozen=True, slots=True, init=False)
class Envelope:
    """A Debezium value taken apart, still untyped.

    ``row`` is the flattened row image (columns only); ``before``/``after`` the full envelope's
    images. ``row_schema`` is the STRUCT of the table's columns when the record carries one.
    ``deleted`` is the flattened ``__deleted`` flag (None when absent).
    """

    op: str | None
    before: Mapping[str, Any] | None
    after: Mapping[str, Any] | None
    row: Mapping[str, Any] | None
    source: Mapping[str, Any]
    ts_ms: Any
    transaction_id: str | None
    row_schema: ConnectSchema | None
    flattened: bool
    deleted: bool | None = None

    # Written out: mypyc compiles it; the one dataclass generates stays interpreted.
    def __init__(
        self,
        op: str | None,
        before: Mapping[str, Any] | None,
        after: Mapping[str, Any] | None,
        row: Mapping[str, Any] | None,
        source: Mapping[str, Any],
        ts_ms: Any,
        transaction_id: str | None,
        row_schema: ConnectSchema | None,
        flattened: bool,
        deleted: bool | None = None,
    ) -> None:
        object.__setattr__(self, "op", op)
        object.__setattr__(self, "before", before)
        object.__setattr__(self, "after", after)
        object.__setattr__(self, "row", row)
        object.__setattr__(self, "source", source)
        object.__setattr__(self, "ts_ms", ts_ms)
        object.__setattr__(self, "transaction_id", transaction_id)
        object.__setattr__(self, "row_schema", row_schema)
        object.__setattr__(self, "flattened", flattened)
        object.__setattr__(self, "deleted", deleted)


@dataclass(frozen=True, slots=True, init=False)
class KeyStruct:
    """The Debezium key: its field values and, when the record carries one, its schema."""

    payload: Mapping[str, Any] | None
    schema: ConnectSchema | None

    # Written out: mypyc compiles it; the one dataclass generates stays interpreted.
    def __init__(self, payload: Mapping[str, Any] | None, schema: ConnectSchema | None) -> None:
        object.__setattr__(self, "payload", payload)
        object.__setattr__(self, "schema", schema)


_DECIMAL_JSON = json.JSONDecoder(parse_float=decimal.Decimal)


def decode_json(raw: bytes | str, what: str) -> Any:
    """Parse JSON text exactly: non-integral numbers become :class:`decimal.Decimal`.

    Raises :class:`InvalidJson` for bytes that are not UTF-8 JSON.
    """
    try:
        return json.loads(raw, parse_float=decimal.Decimal)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InvalidJson(f"{what} is not JSON: {exc}") from None


_SCHEMA_CACHE: dict[tuple[str, str], ConnectSchema] = {}
_SCHEMA_CACHE_SIZE = 1024


def _tagged(value: Any) -> str:
    return f"\x00{type(value).__name__}:{value}"


def _cached_schema(block: Any, where: str) -> ConnectSchema:
    """:func:`connect_schema_from_json`, cached by the block's JSON text (every JsonConverter
    record repeats the same block). Failures are not cached; the cache is bounded."""
    key = (json.dumps(block, default=_tagged), where)
    schema = _SCHEMA_CACHE.get(key)
    if schema is None:
        schema = connect_schema_from_json(block, where)
        if len(_SCHEMA_CACHE) >= _SCHEMA_CACHE_SIZE:
            _SCHEMA_CACHE.clear()
        _SCHEMA_CACHE[key] = schema
    return schema


def _split_schema(value: Any, given: ConnectSchema | None, what: str) -> tuple[Any, Any]:
    """``(payload, schema)`` of a value that may be a JsonConverter schema/payload pair."""
    is_pair_sized = len(value) == 2 if type(value) is dict else isinstance(value, Mapping)
    if is_pair_sized and set(value) == {"schema", "payload"}:
        block = value["schema"]
        schema = _cached_schema(block, f"{what}.schema") if block is not None else None
        return value["payload"], schema or given
    return value, given


_PAIR_HEAD = re.compile(r'\{[ \t\n\r]*"schema"[ \t\n\r]*:[ \t\n\r]*')
_PAIR_MIDDLE = re.compile(r'[ \t\n\r]*,[ \t\n\r]*"payload"[ \t\n\r]*:[ \t\n\r]*')
_PAYLOAD_TOKEN = b'"payload"'
_JSON_WHITESPACE = " \t\n\r"


class _SchemaPrefixes:
    """JsonConverter bytes ``{"schema": S, "payload": P}`` repeat the same S in every record of
    a table. This remembers, per distinct ``{"schema": S, "payload":`` prefix (as bytes), the
    ConnectSchema of S, so a record that starts with a known prefix only has P decoded.

    A hit is exact: bytes that start with the prefix and end in ``P }`` parse to the same
    ``{"schema": S, "payload": P}`` as the whole text would. Anything else (another key order,
    trailing content, invalid UTF-8 or JSON in P) takes the full path, which then returns or
    raises exactly what it always did. Bounded; failures are never remembered.
    """

    _SIZE = 256

    def __init__(self, what: str) -> None:
        self._what = what
        # bytes before the "payload" token -> (whole prefix, schema of S or None for null)
        self._by_head: dict[bytes, tuple[bytes, ConnectSchema | None]] = {}
        self._last: tuple[bytes, ConnectSchema | None] | None = None

    def split(self, raw: bytes, given: ConnectSchema | None) -> tuple[Any, Any]:
        """``(payload, schema)`` of JSON bytes, like ``_split_schema(decode_json(raw))``."""
        known = self._find(raw)
        if known is not None:
            payload = _payload_after(raw, len(known[0]))
            if payload is not _MISS:
                return payload, known[1] or given
        value = decode_json(raw, self._what)
        split = _split_schema(value, given, self._what)
        if split[0] is not value:
            self._learn(raw, value["schema"])
        return split

    def known(self, raw: bytes) -> tuple[bytes, ConnectSchema | None] | None:
        """The remembered ``(prefix, schema)`` ``raw`` starts with, or None."""
        return self._find(raw)

    def _find(self, raw: bytes) -> tuple[bytes, ConnectSchema | None] | None:
        last = self._last
        if last is not None and raw.startswith(last[0]):
            return last
        index = raw.find(_PAYLOAD_TOKEN)
        for _ in range(4):  # "payload" may also occur inside S (a column named payload)
            if index < 0:
                return None
            known = self._by_head.get(raw[:index])
            if known is not None and raw.startswith(known[0]):
                self._last = known
                return known
            index = raw.find(_PAYLOAD_TOKEN, index + len(_PAYLOAD_TOKEN))
        return None

    def _learn(self, raw: bytes, block: Any) -> None:
        if json.detect_encoding(raw) != "utf-8":
            return
        text = raw.decode("utf-8", "surrogatepass")
        head = _PAIR_HEAD.match(text)
        if head is None:
            return
        try:
            _, schema_end = _DECIMAL_JSON.raw_decode(text, head.end())
        except ValueError:
            return
        middle = _PAIR_MIDDLE.match(text, schema_end)
        if middle is None:
            return
        prefix = text[: middle.end()].encode("utf-8", "surrogatepass")
        if not raw.startswith(prefix):
            return
        schema = _cached_schema(block, f"{self._what}.schema") if block is not None else None
        if len(self._by_head) >= self._SIZE:
            self._by_head.clear()
        known = (prefix, schema)
        self._by_head[prefix[: prefix.rindex(_PAYLOAD_TOKEN)]] = known
        self._last = known


_MISS = object()


# The same values as _DECIMAL_JSON (non-integral numbers as Decimal from their text), about
# 2.5 times as fast; it refuses what json accepts beyond the standard (NaN, lone surrogates).
_FAST_JSON = msgspec.json.Decoder(float_hook=decimal.Decimal)
_WHITESPACE_BYTES = _JSON_WHITESPACE.encode()


def _payload_after(raw: bytes, start: int) -> Any:
    """The JSON value at ``raw[start:]`` when only ``}`` and whitespace follow it, else _MISS
    (which sends the record down the full path)."""
    close = _payload_close(raw, start)
    if close >= 0:
        # What json's raw_decode below returns for well-formed input (it too refuses
        # whitespace before the value); anything msgspec refuses goes that way.
        try:
            return _FAST_JSON.decode(memoryview(raw)[start:close])
        except Exception:
            pass
    return _payload_after_json(raw, start)


def _payload_close(raw: bytes, start: int) -> int:
    """Where the payload at ``raw[start:]`` ends when it starts with its value and only ``}``
    and whitespace follow it (the index of that ``}``); -1 otherwise."""
    close = len(raw.rstrip(_WHITESPACE_BYTES)) - 1
    if start < close and raw[close] == 0x7D and raw[start] not in _WHITESPACE_BYTES:
        return close
    return -1


def _payload_after_json(raw: bytes, start: int) -> Any:
    try:
        text = raw[start:].decode("utf-8", "surrogatepass")
        payload, end = _DECIMAL_JSON.raw_decode(text)
    except ValueError:  # UnicodeDecodeError and JSONDecodeError: the full path decides
        return _MISS
    tail = text[end:]
    return payload if tail == "}" or tail.strip(_JSON_WHITESPACE) == "}" else _MISS


def _payload_bounds(raw: bytes, prefixes: _SchemaPrefixes) -> tuple[ConnectSchema, int, int] | None:
    known = prefixes.known(raw)
    if known is None or known[1] is None:
        return None
    start = len(known[0])
    close = _payload_close(raw, start)
    return None if close < 0 else (known[1], start, close)


def known_payloads(
    key: bytes, value: bytes
) -> tuple[tuple[ConnectSchema, int, int], tuple[ConnectSchema, int, int]] | None:
    """For JsonConverter key and value bytes that start with remembered schema blocks (not
    null): each one's ``(schema, start, end)``, its payload being ``raw[start:end]`` exactly
    when only ``}`` and whitespace follow it (what :func:`parse_key` and :func:`parse_value`
    would decode). None otherwise."""
    value_part = _payload_bounds(value, _VALUE_PREFIXES)
    if value_part is None:
        return None
    key_part = _payload_bounds(key, _KEY_PREFIXES)
    if key_part is None:
        return None
    return key_part, value_part


_KEY_PREFIXES = _SchemaPrefixes("key")
_VALUE_PREFIXES = _SchemaPrefixes("value")


def parse_key(raw: Any, given_schema: ConnectSchema | None) -> KeyStruct:
    """Read a record key: None, JSON bytes/text, a schema/payload pair or a decoded struct.

    Raises :class:`InvalidJson` for undecodable bytes and :class:`MalformedEnvelope` for a key
    that is not a struct (an object).
    """
    if raw is None:
        return KeyStruct(None, given_schema)
    if isinstance(raw, (bytes, bytearray, memoryview)):
        payload, schema = _KEY_PREFIXES.split(bytes(raw), given_schema)
    else:
        if isinstance(raw, str):
            raw = decode_json(raw, "key")
        payload, schema = _split_schema(raw, given_schema, "key")
    if payload is None:
        return KeyStruct(None, schema)
    if type(payload) is not dict and not isinstance(payload, Mapping):
        raise MalformedEnvelope(f"key must be a struct (JSON object), got {type(payload).__name__}")
    return KeyStruct(payload, schema)


def row_schema_of_envelope(schema: ConnectSchema | None) -> ConnectSchema | None:
    """The row STRUCT (made required) of a full envelope's value schema, one object per
    schema object; None when it has no image struct. Raises :class:`MalformedEnvelope` for a
    value schema that is not a struct."""
    if schema is None:
        return None
    return _ENVELOPE_ROWS.get(schema, _envelope_row)


def _envelope_row(schema: ConnectSchema) -> ConnectSchema | None:
    if schema.kind is not ConnectKind.STRUCT:
        raise MalformedEnvelope(f"value schema must be a struct, got {schema.kind.value}")
    for image in ("after", "before"):
        field = schema.field(image)
        if field is not None and field.schema.kind is ConnectKind.STRUCT:
            return field.schema.as_required()
    return None


def _mapping_or_none(value: Any, what: str) -> Mapping[str, Any] | None:
    if value is None or type(value) is dict or isinstance(value, Mapping):
        return value
    if isinstance(value, str):
        raise UnsupportedEnvelope(
            f"{what} is a string (a MongoDB extended-JSON document?); only row structs are handled"
        )
    raise MalformedEnvelope(f"{what} must be an object, got {type(value).__name__}")


def _full(payload: Mapping[str, Any], schema: ConnectSchema | None) -> Envelope:
    source = _mapping_or_none(payload.get("source"), "source") or {}
    transaction = _mapping_or_none(payload.get("transaction"), "transaction") or {}
    op = payload.get("op")
    tx_id = transaction.get("id")
    return Envelope(
        op=op if isinstance(op, str) else None,
        before=_mapping_or_none(payload.get("before"), "before"),
        after=_mapping_or_none(payload.get("after"), "after"),
        row=None,
        source=source,
        ts_ms=payload.get("ts_ms"),
        transaction_id=None if tx_id is None else str(tx_id),
        row_schema=row_schema_of_envelope(schema),
        flattened=False,
    )


def _flattened_row(schema: ConnectSchema) -> ConnectSchema:
    if schema.kind is not ConnectKind.STRUCT:
        raise MalformedEnvelope(f"value schema must be a struct, got {schema.kind.value}")
    columns = tuple(f for f in schema.fields if not f.name.startswith(METADATA_PREFIX))
    return ConnectSchema(ConnectKind.STRUCT, name=schema.name, fields=columns)


# Derived once per value schema object (see caching.IdentityCache): the same object for every
# record of a table, which is what lets normalize reuse its per-table plan.
_ENVELOPE_ROWS: IdentityCache[ConnectSchema, ConnectSchema | None] = IdentityCache()
_FLATTENED_ROWS: IdentityCache[ConnectSchema, ConnectSchema] = IdentityCache()


def _deleted_flag(value: Any) -> bool | None:
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in ("true", "false"):
        return value.lower() == "true"
    raise MalformedEnvelope(f"__deleted must be true or false, got {value!r}")


def _flattened(payload: Mapping[str, Any], schema: ConnectSchema | None) -> Envelope:
    meta = {k[len(METADATA_PREFIX) :]: v for k, v in payload.items() if k.startswith("__")}
    row = {k: v for k, v in payload.items() if not k.startswith(METADATA_PREFIX)}
    source: dict[str, Any] = {}
    for name, value in meta.items():
        if name not in _ENVELOPE_METADATA:
            source[name.removeprefix("source_")] = value
    row_schema = None if schema is None else _FLATTENED_ROWS.get(schema, _flattened_row)
    op = meta.get("op")
    tx_id = meta.get("transaction_id")
    return Envelope(
        op=op if isinstance(op, str) else None,
        before=None,
        after=None,
        row=row,
        source=source,
        ts_ms=meta.get("ts_ms"),
        transaction_id=None if tx_id is None else str(tx_id),
        row_schema=row_schema,
        flattened=True,
        deleted=_deleted_flag(meta.get("deleted")),
    )


def parse_value(value: Any, given_schema: ConnectSchema | None) -> Envelope | None:
    """Take a record value apart; None means a tombstone (null value or null payload).

    ``value`` is JSON bytes/text, a decoded JSON object or a fastavro-decoded record;
    ``given_schema`` is the value schema known from outside (the Avro writer schema). Raises
    :class:`InvalidJson`, :class:`MalformedEnvelope` or :class:`UnsupportedEnvelope`.
    """
    if value is None:
        return None
    if isinstance(value, (bytes, bytearray, memoryview)):
        payload, schema = _VALUE_PREFIXES.split(bytes(value), given_schema)
    else:
        if isinstance(value, str):
            value = decode_json(value, "value")
        payload, schema = _split_schema(value, given_schema, "value")
    if payload is None:
        return None
    if type(payload) is not dict and not isinstance(payload, Mapping):
        raise MalformedEnvelope(f"value must be a JSON object, got {type(payload).__name__}")
    if "op" in payload and ("before" in payload or "after" in payload or "source" in payload):
        return _full(payload, schema)
    return _flattened(payload, schema)
