"""Per-record decisions of the service, without Kafka: decode -> normalize -> route.

:class:`Router` turns one consumed :class:`SourceRecord` into exactly one :class:`Routing`:

* :class:`Emit` - the change records to write (topic, Avro key datum, Avro value datum);
* :class:`DeadLetter` - the ORIGINAL key and value bytes with the dead-letter headers;
* :class:`Skip` - nothing to write (a tombstone, or a topic the settings exclude).

It never raises for bad input. Only a registry that cannot be reached (``RetryableError`` from
the schema lookup) escapes, so the service aborts the transaction and retries the batch.
The offset helpers at the end decide what a transaction commits and where a failed batch
resumes.
"""

from __future__ import annotations

import functools
import io
import json
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

import fastavro

from services.cdc_normalizer.connect_schema import ConnectSchema, connect_schema_from_avro
from services.cdc_normalizer.envelope import known_payloads
from services.cdc_normalizer.errors import InvalidSchema, NormalizeError
from services.cdc_normalizer.native_row import RecordProgram, record_program
from services.cdc_normalizer.normalize import (
    DebeziumMessage,
    Normalized,
    NormalizeOptions,
    Operation,
    Origin,
    RejectedRecord,
    TableOverrides,
    Tombstone,
    normalize,
)
from services.cdc_normalizer.plan import table_plan
from services.cdc_normalizer.table_schema import TableId, TableSchema
from shared.avro import MAGIC_BYTE, WireFormatError, split_header
from shared.avro_decoder import AvroDecoder
from shared.headers import (
    HEADER_ERROR_CLASS,
    HEADER_ERROR_MESSAGE,
    HEADER_FAILED_AT_MS,
    HEADER_SOURCE_OFFSET,
    HEADER_SOURCE_PARTITION,
    HEADER_SOURCE_TOPIC,
)
from shared.settings import CHANGES_TOPIC_PREFIX

MAX_ERROR_MESSAGE_BYTES = 1024

Headers = tuple[tuple[str, bytes | None], ...]


@dataclass(frozen=True, slots=True, init=False)
class SourceRecord:
    """One consumed record, as plain values."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    timestamp_ms: int | None = None
    headers: Headers = ()

    # Written out: mypyc compiles it; the one dataclass generates stays interpreted.
    def __init__(
        self,
        topic: str,
        partition: int,
        offset: int,
        key: bytes | None,
        value: bytes | None,
        timestamp_ms: int | None = None,
        headers: Headers = (),
    ) -> None:
        object.__setattr__(self, "topic", topic)
        object.__setattr__(self, "partition", partition)
        object.__setattr__(self, "offset", offset)
        object.__setattr__(self, "key", key)
        object.__setattr__(self, "value", value)
        object.__setattr__(self, "timestamp_ms", timestamp_ms)
        object.__setattr__(self, "headers", headers)


@dataclass(frozen=True, slots=True)
class AvroWriter:
    """A writer schema of Avro input: parsed for fastavro, and as the core's ConnectSchema.

    ``error`` is set (and the others None) when the schema cannot be used: every record
    written with it is dead-lettered with that error.
    """

    parsed: Any
    connect: ConnectSchema | None
    error: NormalizeError | None = None
    decoder: AvroDecoder | None = None
    """Reads bodies written with this schema (fastavro's result, compiled once)."""


def avro_writer(schema: Any) -> AvroWriter:
    """Build an :class:`AvroWriter` from an Avro schema (JSON text or parsed JSON)."""
    try:
        raw = json.loads(schema) if isinstance(schema, str) else schema
        parsed = fastavro.parse_schema(raw)
        connect = connect_schema_from_avro(raw)
        return AvroWriter(parsed, connect, None, AvroDecoder(raw, parsed))
    except NormalizeError as exc:
        return AvroWriter(None, None, exc)
    except Exception as exc:  # fastavro / json raise many kinds on a malformed schema
        return AvroWriter(None, None, InvalidSchema(f"unreadable Avro writer schema: {exc}"))


SchemaLookup = Callable[[int], AvroWriter]
"""Schema id -> writer; raises WireFormatError for an unknown id, RetryableError if unreachable."""


@dataclass(frozen=True, slots=True, init=False)
class ChangeOut:
    """One change record to write. ``key`` is None for TRUNCATE (null Kafka key).

    ``schema`` is None only for a TRUNCATE without a row schema; the service then writes with
    the table's latest value schema and fills the value's ``key`` with :func:`placeholder_datum`.
    """

    topic: str
    table: TableId
    op: Operation
    schema: TableSchema | None
    key: dict[str, Any] | None
    value: dict[str, Any]

    # Written out: mypyc compiles it; the one dataclass generates stays interpreted.
    def __init__(
        self,
        topic: str,
        table: TableId,
        op: Operation,
        schema: TableSchema | None,
        key: dict[str, Any] | None,
        value: dict[str, Any],
    ) -> None:
        object.__setattr__(self, "topic", topic)
        object.__setattr__(self, "table", table)
        object.__setattr__(self, "op", op)
        object.__setattr__(self, "schema", schema)
        object.__setattr__(self, "key", key)
        object.__setattr__(self, "value", value)


@dataclass(frozen=True, slots=True, init=False)
class Emit:
    """Write these change records (one per source record today)."""

    changes: tuple[ChangeOut, ...]

    # Written out: mypyc compiles it; the one dataclass generates stays interpreted.
    def __init__(self, changes: tuple[ChangeOut, ...]) -> None:
        object.__setattr__(self, "changes", changes)


@dataclass(frozen=True, slots=True)
class DeadLetter:
    """Write the original bytes to ``topic`` with ``headers``; ``reason`` labels the metric."""

    topic: str
    key: bytes | None
    value: bytes | None
    headers: Headers
    reason: str


@dataclass(frozen=True, slots=True)
class Skip:
    """Nothing to write: ``reason`` is ``tombstone`` or ``excluded``."""

    reason: str


@dataclass(frozen=True, slots=True, init=False)
class EncodedChange:
    """A change record the compiled record path wrote whole (``native_row``): where it goes,
    its table schema, and the Avro bodies of its Kafka key and value, without the wire format's
    header (the service puts the registered ids there)."""

    topic: str
    table: TableId
    op: Operation
    schema: TableSchema
    key: bytes
    value: bytes

    # Written out: mypyc compiles it; the one dataclass generates stays interpreted.
    def __init__(
        self,
        topic: str,
        table: TableId,
        op: Operation,
        schema: TableSchema,
        key: bytes,
        value: bytes,
    ) -> None:
        object.__setattr__(self, "topic", topic)
        object.__setattr__(self, "table", table)
        object.__setattr__(self, "op", op)
        object.__setattr__(self, "schema", schema)
        object.__setattr__(self, "key", key)
        object.__setattr__(self, "value", value)


Routing = Emit | EncodedChange | DeadLetter | Skip

_TOPIC_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")


@functools.lru_cache(maxsize=4096)
def changes_topic(table: TableId) -> str:
    """``icefjord.changes.<namespace>.<table>``; characters Kafka forbids (and dots) become _."""
    namespace = _TOPIC_UNSAFE.sub("_", table.namespace)
    name = _TOPIC_UNSAFE.sub("_", table.name)
    return f"{CHANGES_TOPIC_PREFIX}{namespace}.{name}"


def _truncate_utf8(text: str, limit: int) -> bytes:
    data = text.encode("utf-8")
    if len(data) <= limit:
        return data
    return data[:limit].decode("utf-8", errors="ignore").encode("utf-8")


def dead_letter(
    record: SourceRecord,
    *,
    topic: str,
    reason: str,
    error_class: str,
    message: str,
    failed_at_ms: int,
) -> DeadLetter:
    """The dead letter of ``record``: original key, value and headers plus ours."""
    ours: Headers = (
        (HEADER_ERROR_CLASS, error_class.encode("utf-8")),
        (HEADER_ERROR_MESSAGE, _truncate_utf8(message, MAX_ERROR_MESSAGE_BYTES)),
        (HEADER_SOURCE_TOPIC, record.topic.encode("utf-8")),
        (HEADER_SOURCE_PARTITION, str(record.partition).encode("ascii")),
        (HEADER_SOURCE_OFFSET, str(record.offset).encode("ascii")),
        (HEADER_FAILED_AT_MS, str(failed_at_ms).encode("ascii")),
    )
    return DeadLetter(topic, record.key, record.value, record.headers + ours, reason)


def decode_side(data: bytes | None, lookup: SchemaLookup) -> tuple[Any, ConnectSchema | None]:
    """Key or value as the core takes it: JSON bytes pass through; Avro (first byte 0) is
    decoded with its writer schema, which is returned as a ConnectSchema.

    Raises WireFormatError for a bad frame or body, NormalizeError for an unusable schema.
    """
    if not data or data[0] != MAGIC_BYTE:
        return data, None
    schema_id, body = split_header(data)
    writer = lookup(schema_id)
    if writer.error is not None:
        raise writer.error
    try:
        if writer.decoder is not None:
            datum = writer.decoder.decode(body)
        else:
            datum = fastavro.schemaless_reader(io.BytesIO(body), writer.parsed, None)
    except Exception as exc:  # fastavro raises many kinds on corrupt input
        raise WireFormatError(f"Avro body does not match schema {schema_id}: {exc}") from exc
    return datum, writer.connect


@dataclass(frozen=True)
class Router:
    """Decides what one source record becomes; see the module docstring."""

    lookup: SchemaLookup
    clock_ms: Callable[[], int]
    dead_letter_topic: str
    max_record_bytes: int
    wants_topic: Callable[[str], bool] = field(default=lambda topic: True)
    options: NormalizeOptions = field(default_factory=NormalizeOptions)
    compiled_records: bool = False
    """Whether :meth:`route` may give an :class:`EncodedChange` (its caller frames it)."""

    def _dead(self, record: SourceRecord, reason: str, error_class: str, message: str) -> Routing:
        return dead_letter(
            record,
            topic=self.dead_letter_topic,
            reason=reason,
            error_class=error_class,
            message=message,
            failed_at_ms=self.clock_ms(),
        )

    def route(self, record: SourceRecord, compiled: bool = True) -> Routing:
        """Route one record. Raises only RetryableError (from ``lookup``).

        With ``compiled_records`` (and ``compiled``), a record the compiled record path writes
        comes back as an :class:`EncodedChange`; ``compiled=False`` gives its :class:`Emit`.
        """
        if not self.wants_topic(record.topic):
            return Skip("excluded")
        size = len(record.key or b"") + len(record.value or b"")
        if size > self.max_record_bytes:
            message = f"record of {size} bytes exceeds max_record_bytes={self.max_record_bytes}"
            return self._dead(record, "oversized", "RecordTooLarge", message)
        if compiled and self.compiled_records and _without_overrides(self.options):
            encoded = _encoded(record, self.options.unavailable_value)
            if encoded is not None:
                return encoded
        try:
            key, key_schema = decode_side(record.key, self.lookup)
            value, value_schema = decode_side(record.value, self.lookup)
        except WireFormatError as exc:
            return self._dead(record, "undecodable", type(exc).__name__, str(exc))
        except NormalizeError as exc:
            return self._dead(record, exc.reason, type(exc).__name__, exc.message)
        origin = Origin(record.topic, record.partition, record.offset, record.timestamp_ms)
        result = normalize(
            DebeziumMessage(key, value, origin, key_schema, value_schema), self.options
        )
        if isinstance(result, RejectedRecord):
            return self._dead(record, result.reason, result.error_class, result.message)
        if isinstance(result, Tombstone):
            return Skip("tombstone")
        return Emit(tuple(_change_out(result, i) for i in range(len(result.changes))))


_NO_OVERRIDES = TableOverrides()
_OPERATIONS = (Operation.CREATE, Operation.UPDATE, Operation.DELETE, Operation.READ)
# (namespace, table, program) -> (program, table, its schema, its changes topic)
_TARGETS: dict[tuple[str, str, int], tuple[RecordProgram, TableId, TableSchema, str]] = {}


def _without_overrides(options: NormalizeOptions) -> bool:
    """Whether ``options`` leave every table as its records say (no key columns, table or
    row schema from the settings): the compiled record path knows nothing of overrides."""
    return not options.tables and options.default == _NO_OVERRIDES


def _encoded(record: SourceRecord, placeholder: str) -> EncodedChange | None:
    key, value = record.key, record.value
    if type(key) is not bytes or type(value) is not bytes:
        return None
    payloads = known_payloads(key, value)
    if payloads is None:
        return None
    (key_schema, key_start, key_end), (value_schema, value_start, value_end) = payloads
    program = record_program(value_schema, key_schema, placeholder)
    if program is None:
        return None
    written = program.compiled.record(
        value,
        value_start,
        value_end,
        key,
        key_start,
        key_end,
        record.topic,
        record.partition,
        record.offset,
        record.timestamp_ms,
    )
    if written is None:
        return None
    namespace, name, op, key_body, value_body = written
    target = _TARGETS.get((namespace, name, id(program)))
    if target is None or target[0] is not program:
        target = _target(namespace, name, program)
        if target is None:
            return None
    _, table, schema, topic = target
    return EncodedChange(topic, table, _OPERATIONS[op], schema, key_body, value_body)


def _target(
    namespace: str, name: str, program: RecordProgram
) -> tuple[RecordProgram, TableId, TableSchema, str] | None:
    table = TableId(namespace, name)
    try:
        plan = table_plan(table, program.row, program.columns, program.key_schema)
    except NormalizeError:
        return None  # the Python path reports it, record by record
    target = (program, table, plan.schema, changes_topic(table))
    if len(_TARGETS) >= 4096:
        _TARGETS.clear()
    _TARGETS[(namespace, name, id(program))] = target
    return target


def _change_out(result: Normalized, index: int) -> ChangeOut:
    change = result.changes[index]
    key = None if change.op is Operation.TRUNCATE else dict(change.key)
    return ChangeOut(
        topic=changes_topic(change.table),
        table=change.table,
        op=change.op,
        schema=result.schema,
        key=key,
        value=change.to_record(),
    )


_PLACEHOLDER_LOGICAL: Mapping[str, Any] = {
    "decimal": Decimal(0),
    "uuid": "00000000-0000-0000-0000-000000000000",
}
_PLACEHOLDER_PRIMITIVE: Mapping[str, Any] = {
    "null": None,
    "boolean": False,
    "int": 0,
    "long": 0,
    "float": 0.0,
    "double": 0.0,
    "string": "",
    "bytes": b"",
}


def placeholder_datum(avro_type: Any, names: dict[str, Any] | None = None) -> Any:
    """The "type default" datum of an Avro type: 0, "", b"", False, epoch, first enum symbol,
    empty array/map, a record of placeholders, the first branch of a union.

    TRUNCATE has no key, but the ``key`` field of the value is a required record; the service
    fills it with this (its Kafka key is null). Raises ValueError for an unknown named type.
    """
    names = {} if names is None else names
    if isinstance(avro_type, list):
        return placeholder_datum(avro_type[0], names)
    if isinstance(avro_type, str):
        if avro_type in _PLACEHOLDER_PRIMITIVE:
            return _PLACEHOLDER_PRIMITIVE[avro_type]
        if avro_type in names:
            return placeholder_datum(names[avro_type], names)
        raise ValueError(f"unknown Avro type {avro_type!r}")
    kind = avro_type.get("type")
    logical = avro_type.get("logicalType")
    if logical in _PLACEHOLDER_LOGICAL:
        return _PLACEHOLDER_LOGICAL[logical]
    if kind in ("record", "enum", "fixed"):
        names[avro_type["name"]] = avro_type
        namespace = avro_type.get("namespace")
        if namespace:
            names[f"{namespace}.{avro_type['name']}"] = avro_type
    if kind == "record":
        return {f["name"]: placeholder_datum(f["type"], names) for f in avro_type["fields"]}
    if kind == "enum":
        return avro_type["symbols"][0]
    if kind == "fixed":
        return bytes(avro_type["size"])
    if kind == "array":
        return []
    if kind == "map":
        return {}
    return placeholder_datum(kind, names)


def next_offsets(records: Iterable[SourceRecord]) -> dict[tuple[str, int], int]:
    """The offsets a transaction commits: per partition, the last consumed offset + 1."""
    out: dict[tuple[str, int], int] = {}
    for record in records:
        position = (record.topic, record.partition)
        out[position] = max(out.get(position, 0), record.offset + 1)
    return out


def first_offsets(records: Iterable[SourceRecord]) -> dict[tuple[str, int], int]:
    """Where a failed batch resumes when a partition has no committed offset yet."""
    out: dict[tuple[str, int], int] = {}
    for record in records:
        position = (record.topic, record.partition)
        out[position] = min(out.get(position, record.offset), record.offset)
    return out
