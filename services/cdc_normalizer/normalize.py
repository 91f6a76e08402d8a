"""The pure core: one consumed Debezium record in, normalized changes (or a verdict) out.

``normalize(message)`` never raises for bad input: it returns a :class:`Normalized` (one
:class:`Change`, none for nothing), a :class:`Tombstone` marker, or a :class:`RejectedRecord`
naming the reason, for the service to route to its dead-letter topic. ``normalize_or_raise`` is
the same with the :class:`~services.cdc_normalizer.errors.NormalizeError` raised instead.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from services.cdc_normalizer.connect_schema import ConnectKind, ConnectSchema
from services.cdc_normalizer.envelope import Envelope, KeyStruct, parse_key, parse_value
from services.cdc_normalizer.errors import (
    MalformedEnvelope,
    MissingAfter,
    MissingKey,
    MissingSchema,
    MissingTimestamp,
    NormalizeError,
    UnknownOperation,
)
from services.cdc_normalizer.logical_types import avro_name
from services.cdc_normalizer.plan import table_plan
from services.cdc_normalizer.position import PositionKind, detect_kind, source_position
from services.cdc_normalizer.table_schema import (
    TableId,
    TableSchema,
    key_struct,
    value_schema_text,
)

__all__ = [
    "DEFAULT_UNAVAILABLE_VALUE",
    "Change",
    "DebeziumMessage",
    "NormalizeOptions",
    "NormalizeResult",
    "Normalized",
    "Operation",
    "Origin",
    "RejectedRecord",
    "TableOverrides",
    "Tombstone",
    "normalize",
    "normalize_or_raise",
    "table_from_topic",
]

DEFAULT_UNAVAILABLE_VALUE = "__debezium_unavailable_value"


class Operation(StrEnum):
    """The normalized operation; values are the Avro ``Operation`` enum symbols."""

    CREATE = "CREATE"
    UPDATE = "UPDATE"
    DELETE = "DELETE"
    READ = "READ"
    TRUNCATE = "TRUNCATE"


# Plain-str values of the enums, looked up per record (a StrEnum's .value is a slow property).
_OP_SYMBOLS = {op: op.value for op in Operation}
_KIND_NAMES = {kind: kind.value for kind in PositionKind}

_OPS = {
    "c": Operation.CREATE,
    "u": Operation.UPDATE,
    "d": Operation.DELETE,
    "r": Operation.READ,
    "t": Operation.TRUNCATE,
}


@dataclass(frozen=True, slots=True, init=False)
class Origin:
    """Where a consumed record came from (Kafka coordinates and record timestamp)."""

    topic: str
    partition: int
    offset: int
    timestamp_ms: int | None = None

    # Written out: mypyc compiles it; the one dataclass generates stays interpreted.
    def __init__(
        self, topic: str, partition: int, offset: int, timestamp_ms: int | None = None
    ) -> None:
        object.__setattr__(self, "topic", topic)
        object.__setattr__(self, "partition", partition)
        object.__setattr__(self, "offset", offset)
        object.__setattr__(self, "timestamp_ms", timestamp_ms)


@dataclass(frozen=True, slots=True, init=False)
class DebeziumMessage:
    """One consumed Debezium record.

    ``key`` and ``value`` are JSON bytes/text, decoded JSON (with or without a
    ``schema``/``payload`` pair) or fastavro-decoded Avro; a None value is a tombstone.
    ``key_schema``/``value_schema`` are the Connect schemas known from outside the record (from
    :func:`~services.cdc_normalizer.connect_schema.connect_schema_from_avro` of the Avro writer
    schemas); a JSON ``schema`` block in the record wins over them.
    """

    key: Any
    value: Any
    origin: Origin
    key_schema: ConnectSchema | None = None
    value_schema: ConnectSchema | None = None

    # Written out: mypyc compiles it; the one dataclass generates stays interpreted.
    def __init__(
        self,
        key: Any,
        value: Any,
        origin: Origin,
        key_schema: ConnectSchema | None = None,
        value_schema: ConnectSchema | None = None,
    ) -> None:
        object.__setattr__(self, "key", key)
        object.__setattr__(self, "value", value)
        object.__setattr__(self, "origin", origin)
        object.__setattr__(self, "key_schema", key_schema)
        object.__setattr__(self, "value_schema", value_schema)


@dataclass(frozen=True, slots=True)
class TableOverrides:
    """Per-table configuration: key columns, declared row schema, target table name.

    ``key_columns`` replaces the Debezium key struct (for tables without a primary key, or to
    key by other columns); their values come from the key struct when it has them, else from the
    row image. ``row_schema`` types schemaless records (never used when the record has its own
    schema). ``table`` renames the target table.
    """

    key_columns: tuple[str, ...] | None = None
    row_schema: ConnectSchema | None = None
    table: TableId | None = None


@dataclass(frozen=True, slots=True)
class NormalizeOptions:
    """Configuration of :func:`normalize`.

    ``tables`` is looked up by the consumed topic first, then by ``"<namespace>.<table>"``;
    ``default`` applies otherwise. ``unavailable_value`` is the connector's
    ``unavailable.value.placeholder``.
    """

    tables: Mapping[str, TableOverrides] = field(default_factory=dict)
    default: TableOverrides = TableOverrides()
    unavailable_value: str = DEFAULT_UNAVAILABLE_VALUE

    def overrides_for(self, topic: str, table: TableId) -> TableOverrides:
        """The overrides for a record of ``table`` read from ``topic``."""
        return self.tables.get(topic) or self.tables.get(str(table)) or self.default


@dataclass(frozen=True, slots=True, init=False)
class Change:
    """One normalized change, the Python form of a ``<TableName>Change`` record.

    ``key`` and ``after`` hold Avro-ready Python values keyed by Avro field name (see
    ``logical_types``). ``key`` is empty for TRUNCATE; ``after`` is None for DELETE and TRUNCATE.
    ``unchanged`` names (Avro field names) the columns of an UPDATE whose values the source
    did not send (Debezium's unavailable-value placeholder: an unchanged TOASTed value);
    ``after`` holds stand-ins there and the stored values stay. None: ``after`` is whole.
    """

    table: TableId
    op: Operation
    position: str
    source_ts_ms: int
    tx_id: str | None
    source: Mapping[str, str]
    key: Mapping[str, Any]
    after: Mapping[str, Any] | None
    unchanged: tuple[str, ...] | None = None

    # Written out: mypyc compiles it; the one dataclass generates stays interpreted.
    def __init__(
        self,
        table: TableId,
        op: Operation,
        position: str,
        source_ts_ms: int,
        tx_id: str | None,
        source: Mapping[str, str],
        key: Mapping[str, Any],
        after: Mapping[str, Any] | None,
        unchanged: tuple[str, ...] | None = None,
    ) -> None:
        object.__setattr__(self, "table", table)
        object.__setattr__(self, "op", op)
        object.__setattr__(self, "position", position)
        object.__setattr__(self, "source_ts_ms", source_ts_ms)
        object.__setattr__(self, "tx_id", tx_id)
        object.__setattr__(self, "source", source)
        object.__setattr__(self, "key", key)
        object.__setattr__(self, "after", after)
        object.__setattr__(self, "unchanged", unchanged)

    def to_record(self) -> dict[str, Any]:
        """The Avro datum for :func:`~services.cdc_normalizer.table_schema.value_schema`."""
        return {
            "op": _OP_SYMBOLS[self.op],
            "position": self.position,
            "source_ts_ms": self.source_ts_ms,
            "tx_id": self.tx_id,
            "source": dict(self.source),
            "key": dict(self.key),
            "after": None if self.after is None else dict(self.after),
            "unchanged": None if self.unchanged is None else list(self.unchanged),
        }


@dataclass(frozen=True, slots=True, init=False)
class Normalized:
    """The changes of one record and the table schema they were typed with.

    ``schema`` is None only for a TRUNCATE that carries no row schema and no key: the service
    then serializes with the table's latest registered schema.
    """

    table: TableId
    schema: TableSchema | None
    changes: tuple[Change, ...]

    # Written out: mypyc compiles it; the one dataclass generates stays interpreted.
    def __init__(
        self, table: TableId, schema: TableSchema | None, changes: tuple[Change, ...]
    ) -> None:
        object.__setattr__(self, "table", table)
        object.__setattr__(self, "schema", schema)
        object.__setattr__(self, "changes", changes)


@dataclass(frozen=True, slots=True)
class Tombstone:
    """A null-valued record (log-compaction marker after a delete). Carries nothing to apply."""

    table: TableId
    key: Mapping[str, Any] | None
    origin: Origin


@dataclass(frozen=True, slots=True)
class RejectedRecord:
    """A record that can never be normalized: ``reason`` (stable), ``error_class``, ``message``."""

    reason: str
    error_class: str
    message: str
    origin: Origin


NormalizeResult = Normalized | Tombstone | RejectedRecord


@functools.lru_cache(maxsize=4096)
def table_from_topic(topic: str) -> TableId:
    """``<prefix>.<namespace>.<table>`` -> TableId(namespace, table); shorter topics degrade."""
    parts = topic.split(".")
    if len(parts) >= 2:
        return TableId(parts[-2], parts[-1])
    return TableId("default", topic)


# TableIds are frozen: one shared instance per name saves building one per record.
_table_id = functools.lru_cache(maxsize=4096)(TableId)


def _table_of(source: Mapping[str, Any], topic: str) -> TableId:
    """The source table: ``schema`` (Postgres, SQL Server) or ``db`` (MySQL, MongoDB) + table.

    A Postgres ``db`` is the database, not the namespace, so when ``schema`` is missing (a
    flattened record without ``__schema``) the namespace comes from the topic instead.
    """
    from_topic = table_from_topic(topic)
    name = source.get("table") or source.get("collection")
    name = name if isinstance(name, str) and name else from_topic.name
    namespace = source.get("schema")
    if not namespace and detect_kind(source) in (PositionKind.MYSQL, PositionKind.MONGODB):
        namespace = source.get("db")
    if isinstance(namespace, str) and namespace:
        return _table_id(namespace, name)
    return _table_id(from_topic.namespace, name)


def _operation(envelope: Envelope) -> Operation:
    if envelope.flattened:
        if envelope.deleted:
            return Operation.DELETE
        if envelope.op is None:
            # Without add.fields=op a flattened row is an upsert; the sink treats both alike.
            return Operation.UPDATE
    op = _OPS.get(envelope.op or "")
    if op is None:
        raise UnknownOperation(f"op {envelope.op!r} is not one of c, u, d, r, t")
    return op


def _timestamp(envelope: Envelope, origin: Origin) -> int:
    for candidate in (envelope.source.get("ts_ms"), envelope.ts_ms, origin.timestamp_ms):
        if candidate is None:
            continue
        if isinstance(candidate, bool) or not isinstance(candidate, int):
            raise MalformedEnvelope(f"ts_ms must be an integer, got {candidate!r}")
        return candidate
    raise MissingTimestamp("no source.ts_ms, envelope ts_ms or Kafka timestamp")


def _source_text(value: Any) -> str:
    if type(value) is str:
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (str, int, float)):
        return str(value)
    return json.dumps(value, separators=(",", ":"), sort_keys=True, default=str)


def _source_map(envelope: Envelope, origin: Origin, kind: str) -> dict[str, str]:
    """Every non-null source field as text plus the origin coordinates, sorted by name (an
    origin coordinate wins over a source field of the same name)."""
    source = envelope.source
    stamped = origin.timestamp_ms is not None
    names = tuple(source)
    order = _SOURCE_ORDERS.get((names, stamped))
    if order is None:
        order = _source_order(names, stamped)
    coordinates = (
        kind,
        origin.topic,
        str(origin.partition),
        str(origin.offset),
        str(origin.timestamp_ms) if stamped else "",
    )
    mapped: dict[str, str] = {}
    for name, coordinate in order:
        if coordinate >= 0:
            mapped[name] = coordinates[coordinate]
        else:
            value = source[name]
            if value is not None:
                mapped[name] = value if type(value) is str else _source_text(value)
    return mapped


_ORIGIN_NAMES = (
    "position_kind",
    "origin_topic",
    "origin_partition",
    "origin_offset",
    "origin_timestamp_ms",
)
# (source field names in their order, origin timestamp present) -> every name of the map in
# sorted order, each with its coordinate's index (-1: the source field). The source blocks
# of one connector repeat the same few name sets.
_SOURCE_ORDERS: dict[tuple[tuple[str, ...], bool], tuple[tuple[str, int], ...]] = {}


def _source_order(names: tuple[str, ...], stamped: bool) -> tuple[tuple[str, int], ...]:
    where = dict.fromkeys(names, -1)
    for index, name in enumerate(_ORIGIN_NAMES if stamped else _ORIGIN_NAMES[:-1]):
        where[name] = index
    order = tuple(sorted(where.items()))
    if len(_SOURCE_ORDERS) >= 1024:
        _SOURCE_ORDERS.clear()
    _SOURCE_ORDERS[(names, stamped)] = order
    return order


def _tx_id(envelope: Envelope) -> str | None:
    if envelope.transaction_id is not None:
        return envelope.transaction_id
    for name in ("txId", "gtid", "commit_lsn"):
        value = envelope.source.get(name)
        if value is not None:
            return str(value)
    return None


def _key_values(
    columns: tuple[str, ...], key: KeyStruct, image: Mapping[str, Any] | None
) -> dict[str, Any]:
    values: dict[str, Any] = {}
    for column in columns:
        if key.payload is not None and column in key.payload:
            value = key.payload[column]
        elif image is not None:
            value = image.get(column)
        else:
            value = None
        if value is None:
            raise MissingKey(f"key column {column!r} has no value")
        values[column] = value
    return values


def _key_columns(overrides: TableOverrides, key: KeyStruct) -> tuple[str, ...]:
    if overrides.key_columns:
        return overrides.key_columns
    if key.schema is not None and key.schema.kind is ConnectKind.STRUCT and key.schema.fields:
        return tuple(f.name for f in key.schema.fields)
    if key.payload:
        return tuple(key.payload)
    raise MissingKey("no Debezium key struct and no configured key columns")


def normalize_or_raise(
    message: DebeziumMessage, options: NormalizeOptions | None = None
) -> Normalized | Tombstone:
    """Normalize one record; raise a :class:`NormalizeError` subclass if it cannot be.

    Tombstones (null value) give a :class:`Tombstone`. Everything else gives a
    :class:`Normalized` with exactly one :class:`Change`.
    """
    options = options or NormalizeOptions()
    origin = message.origin
    envelope = parse_value(message.value, message.value_schema)
    if envelope is None:
        table = table_from_topic(origin.topic)
        overrides = options.overrides_for(origin.topic, table)
        try:
            key_payload = parse_key(message.key, message.key_schema).payload
        except NormalizeError:
            key_payload = None
        return Tombstone(overrides.table or table, key_payload, origin)

    table = _table_of(envelope.source, origin.topic)
    overrides = options.overrides_for(origin.topic, table)
    table = overrides.table or table
    op = _operation(envelope)
    ts_ms = _timestamp(envelope, origin)
    position = source_position(
        envelope.source, ts_ms=ts_ms, partition=origin.partition, offset=origin.offset
    )
    tx_id = _tx_id(envelope)
    source = _source_map(envelope, origin, _KIND_NAMES[position.kind])

    def change(
        key_values: Mapping[str, Any],
        after: Mapping[str, Any] | None,
        unchanged: tuple[str, ...] | None = None,
    ) -> Change:
        return Change(table, op, position.text, ts_ms, tx_id, source, key_values, after, unchanged)

    row_schema = envelope.row_schema or overrides.row_schema
    key = parse_key(message.key, message.key_schema)

    if op is Operation.TRUNCATE:
        schema = None
        if row_schema is not None and (overrides.key_columns or key.schema is not None):
            columns = _key_columns(overrides, key)
            schema = TableSchema(table, row_schema, key_struct(row_schema, columns, key.schema))
            value_schema_text(schema)
        return Normalized(table, schema, (change({}, None),))

    if envelope.flattened:
        image = envelope.row
    else:
        image = envelope.before if op is Operation.DELETE else envelope.after
    if op is not Operation.DELETE and image is None:
        raise MissingAfter(f"{op.value} event without an 'after' row image")
    if row_schema is None:
        raise MissingSchema(f"{table}: schemaless record and no declared row schema")

    columns = _key_columns(overrides, key)
    plan = table_plan(table, row_schema, columns, key.schema)
    raw_key = _key_values(columns, key, image)
    key_values = {
        name_out: convert(raw_key[column], where)
        for column, name_out, convert, where in plan.key_fields
    }
    after = None
    unchanged = None
    if op is not Operation.DELETE:
        assert image is not None
        if op is Operation.UPDATE:
            missing = plan.unavailable(image, options.unavailable_value)
            if missing:
                image = plan.with_stand_ins(image, missing)
                unchanged = tuple(avro_name(column) for column in missing)
        else:
            plan.check_available(image, options.unavailable_value)
        after = plan.row(image, "after")
    return Normalized(table, plan.schema, (change(key_values, after, unchanged),))


def normalize(message: DebeziumMessage, options: NormalizeOptions | None = None) -> NormalizeResult:
    """Normalize one record; bad input becomes a :class:`RejectedRecord`, never an exception.

    Only :class:`NormalizeError` (permanent, input-caused) is caught: a bug in this code still
    raises, so it is fixed rather than dead-lettered.
    """
    try:
        return normalize_or_raise(message, options)
    except NormalizeError as exc:
        return RejectedRecord(exc.reason, type(exc).__name__, exc.message, message.origin)
