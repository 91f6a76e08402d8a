"""Quarantined rows back into their table once it can hold them: ``icefjord quarantine``.

iceberg-writer diverts the change records of a schema version it must not apply to
``icefjord.quarantine``, as they were (schema id in the bytes), with headers naming the
table, the schema id and where they were consumed (``contracts/topics.toml``). Once an
operator resolved the schema, a replay puts them back into the changes topic and partition
they came from, once each (:func:`icefjord.replay.replay`), so the writer applies them like
any other change (an older position never overwrites a newer row).

Resolved means the table can hold the rows, decided per record against what the table
records in its properties (the schema ids the writer applied, and the current one):

- a record whose schema id the table has applied since (a version that waited for its
  ``SchemaChange`` and timed out, then was announced) goes back as it is;
- any other record is rewritten into the table's current schema by Avro's schema
  resolution, if every field it has is in that schema (no value is dropped) and each value
  resolves (a promotion such as int to long, a nullable column for a required one). The
  usual way there: fix forward at the source, so that the table gets a version that holds
  what the quarantined one had.

A replay takes every record of the table or none: one that cannot be resolved stops it
before anything is produced, with the reason.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Protocol

from confluent_kafka import Message

from icefjord.replay import HEADER_REPLAYED_FROM, PutBack, ReplayError
from shared.headers import (
    HEADER_QUARANTINED_AT_MS,
    HEADER_REASON,
    HEADER_SCHEMA_ID,
    HEADER_SOURCE_OFFSET,
    HEADER_SOURCE_PARTITION,
    HEADER_SOURCE_TOPIC,
    HEADER_TABLE,
)
from shared.kafka import read_committed
from shared.settings import QUARANTINE_TOPIC, KafkaSettings


@dataclass(frozen=True)
class Quarantined:
    """One record of the quarantine topic, its headers read."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    table: str
    schema_id: int
    reason: str
    quarantined_at_ms: int
    source_topic: str
    source_partition: int
    source_offset: int

    @property
    def coordinates(self) -> str:
        return f"{self.topic}:{self.partition}:{self.offset}"

    def put_back(self, value: bytes | None) -> PutBack:
        """``value`` (this record's, or it rewritten) to the changes topic and partition the
        record was consumed from."""
        return PutBack(
            coordinates=self.coordinates,
            topic=self.source_topic,
            partition=self.source_partition,
            key=self.key,
            value=value,
            headers=((HEADER_REPLAYED_FROM, self.coordinates.encode()),),
        )


def parse_quarantined(message: Message) -> Quarantined:
    """``message`` of the quarantine topic; ValueError when a header is missing."""
    found = {name: (raw or b"").decode("utf-8", "replace") for name, raw in message.headers() or []}
    needed = (
        HEADER_TABLE,
        HEADER_SCHEMA_ID,
        HEADER_SOURCE_TOPIC,
        HEADER_SOURCE_PARTITION,
        HEADER_SOURCE_OFFSET,
    )
    missing = [name for name in needed if name not in found]
    if missing:
        raise ValueError(f"no {', '.join(missing)} header")
    topic, partition, offset = message.topic(), message.partition(), message.offset()
    assert topic is not None and partition is not None and offset is not None
    return Quarantined(
        topic=topic,
        partition=partition,
        offset=offset,
        key=message.key(),
        value=message.value(),
        table=found[HEADER_TABLE],
        schema_id=int(found[HEADER_SCHEMA_ID]),
        reason=found.get(HEADER_REASON, ""),
        quarantined_at_ms=int(found.get(HEADER_QUARANTINED_AT_MS) or 0),
        source_topic=found[HEADER_SOURCE_TOPIC],
        source_partition=int(found[HEADER_SOURCE_PARTITION]),
        source_offset=int(found[HEADER_SOURCE_OFFSET]),
    )


def quarantined(
    settings: KafkaSettings,
    table: str | None,
    unreadable: Callable[[Message, str], None],
    topic: str = QUARANTINE_TOPIC,
    timeout_s: float = 60.0,
) -> Iterator[Quarantined]:
    """Every committed record of ``topic`` whose table matches ``table`` (fnmatch; None:
    all), partition by partition in offset order."""
    for message in read_committed(settings, topic, timeout_s=timeout_s):
        try:
            record = parse_quarantined(message)
        except ValueError as exc:
            unreadable(message, str(exc))
            continue
        if table is None or fnmatch.fnmatchcase(record.table, table):
            yield record


def record_fields(schema: Any) -> dict[str, set[str]]:
    """Every named record of a parsed Avro schema: its full name and field names."""
    found: dict[str, set[str]] = {}

    def walk(node: Any) -> None:
        if isinstance(node, list):
            for branch in node:
                walk(branch)
        elif isinstance(node, dict):
            kind = node.get("type")
            if kind == "record" and isinstance(node.get("name"), str):
                found[node["name"]] = {field["name"] for field in node.get("fields", [])}
                for field in node.get("fields", []):
                    walk(field["type"])
            elif kind == "array":
                walk(node.get("items"))
            elif kind == "map":
                walk(node.get("values"))
            elif isinstance(kind, dict | list):
                walk(kind)

    walk(schema)
    return found


def dropped_fields(writer: Any, reader: Any) -> list[str]:
    """Fields of ``writer``'s records that the same-named records of ``reader`` lack:
    values a schema resolution from ``writer`` to ``reader`` would silently drop."""
    readers = record_fields(reader)
    dropped: list[str] = []
    for name, fields in record_fields(writer).items():
        if name in readers:
            dropped.extend(f"{name}.{field}" for field in sorted(fields - readers[name]))
    return dropped


class Schemas(Protocol):
    """Parsed schemas by registry id (:class:`shared.avro.AvroCodec` is one)."""

    def writer_schema(self, schema_id: int) -> Any: ...


@dataclass(frozen=True)
class TableSchemas:
    """What the table records of the schemas the writer applied to it."""

    current_id: int
    applied_ids: frozenset[int]


def resolve(record: Quarantined, table: TableSchemas, schemas: Schemas) -> bytes | None:
    """The value to replay for ``record``: as it is when the table applied its schema since,
    else rewritten into the table's current schema. Raises ReplayError when the table cannot
    hold it (a field it lacks, a value that does not resolve)."""
    from fastavro.read import SchemaResolutionError

    from shared.avro import WireFormatError, decode, encode

    if record.value is None or record.schema_id in table.applied_ids:
        return record.value
    try:
        writer = schemas.writer_schema(record.schema_id)
        reader = schemas.writer_schema(table.current_id)
    except WireFormatError as exc:  # an id the registry does not have (any more)
        raise ReplayError(f"{record.coordinates}: {exc}") from None
    dropped = dropped_fields(writer, reader)
    if dropped:
        raise ReplayError(
            f"{record.coordinates}: schema id {record.schema_id} has "
            f"{', '.join(dropped)}, which the table's schema (id {table.current_id}) lacks; "
            "fix forward at the source so the table gets them"
        )
    try:
        value = decode(record.value, writer, reader)
        return encode(table.current_id, reader, value)
    except (SchemaResolutionError, WireFormatError, ValueError, TypeError, KeyError) as exc:
        raise ReplayError(
            f"{record.coordinates}: does not resolve from schema id {record.schema_id} to the "
            f"table's (id {table.current_id}): {type(exc).__name__}: {exc}"
        ) from None
