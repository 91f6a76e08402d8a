"""Avro in the Confluent wire format: magic byte 0, 4-byte big-endian schema id, body.

The pure functions (:func:`encode`, :func:`decode`, :func:`split_header`) need no registry;
:class:`AvroCodec` adds registration and schema lookup through the registry, with caches,
so one schema is registered once per process and looked up once per id.
"""

from __future__ import annotations

import io
import json
import struct
from collections.abc import Mapping
from typing import Any

import fastavro
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.error import SchemaRegistryError

from shared.errors import FatalError, IcefjordError, RetryableError

MAGIC_BYTE = 0
_HEADER = struct.Struct(">bI")


class WireFormatError(IcefjordError, ValueError):
    """Bytes that are not Avro in the Confluent wire format, or do not match their schema."""


def parse(schema: Mapping[str, Any] | str) -> Any:
    """Parse an Avro schema (JSON text or dict) with fastavro."""
    raw = json.loads(schema) if isinstance(schema, str) else dict(schema)
    return fastavro.parse_schema(raw)


def frame(schema_id: int, body: bytes) -> bytes:
    """An Avro ``body`` already written, framed under ``schema_id``."""
    return _HEADER.pack(MAGIC_BYTE, schema_id) + body


def encode(schema_id: int, parsed_schema: Any, record: Any) -> bytes:
    """Frame ``record`` written with ``parsed_schema`` under ``schema_id``."""
    body = io.BytesIO()
    body.write(_HEADER.pack(MAGIC_BYTE, schema_id))
    fastavro.schemaless_writer(body, parsed_schema, record)
    return body.getvalue()


def split_header(data: bytes) -> tuple[int, memoryview]:
    """Return ``(schema_id, body)``; raises :class:`WireFormatError` on a bad frame."""
    if len(data) < _HEADER.size:
        raise WireFormatError(f"{len(data)} bytes is shorter than the 5-byte header")
    magic, schema_id = _HEADER.unpack_from(data)
    if magic != MAGIC_BYTE:
        raise WireFormatError(f"unknown magic byte {magic}")
    return schema_id, memoryview(data)[_HEADER.size :]


def decode(data: bytes, writer_schema: Any, reader_schema: Any | None = None) -> Any:
    """Read a framed record with its writer schema (and an optional reader schema)."""
    _, body = split_header(data)
    try:
        return fastavro.schemaless_reader(
            io.BytesIO(body), writer_schema, reader_schema, return_record_name=True
        )
    except Exception as exc:  # fastavro raises many kinds on corrupt input
        raise WireFormatError(f"body does not match its schema: {exc}") from exc


class AvroCodec:
    """Registry-backed encoder and decoder with per-process caches."""

    def __init__(self, client: SchemaRegistryClient) -> None:
        self._client = client
        self._ids: dict[tuple[str, str], int] = {}
        self._parsed_by_id: dict[int, Any] = {}
        # The same schema object registered again (a publisher's, every event): no JSON text
        # to build. The object is kept, so its id is never reused for another one.
        self._ids_by_object: dict[tuple[str, int], tuple[Mapping[str, Any], int]] = {}

    def register(self, subject: str, schema: Mapping[str, Any] | str) -> int:
        """Register ``schema`` under ``subject`` (a no-op if already there); return its id.
        A schema given as a mapping must not change after it is first registered."""
        if not isinstance(schema, str):
            seen = self._ids_by_object.get((subject, id(schema)))
            if seen is not None and seen[0] is schema:
                return seen[1]
            schema_id = self._register_text(subject, json.dumps(schema, sort_keys=True))
            if len(self._ids_by_object) >= 1024:  # a caller passing a new dict each time
                self._ids_by_object.clear()
            self._ids_by_object[(subject, id(schema))] = (schema, schema_id)
            return schema_id
        return self._register_text(subject, schema)

    def _register_text(self, subject: str, text: str) -> int:
        cached = self._ids.get((subject, text))
        if cached is not None:
            return cached
        try:
            schema_id = int(self._client.register_schema(subject, Schema(text, "AVRO")))
        except SchemaRegistryError as exc:
            if exc.http_status_code in (409, 422):
                raise FatalError(f"registry refused schema for {subject}: {exc}") from exc
            raise RetryableError(f"registry error for {subject}: {exc}") from exc
        except Exception as exc:  # connection errors surface as httpx/requests errors
            raise RetryableError(f"registry unreachable: {exc}") from exc
        self._ids[(subject, text)] = schema_id
        self._parsed_by_id[schema_id] = parse(text)
        return schema_id

    def writer_schema(self, schema_id: int) -> Any:
        """The parsed schema behind ``schema_id``, fetched once."""
        parsed = self._parsed_by_id.get(schema_id)
        if parsed is None:
            try:
                text = self._client.get_schema(schema_id).schema_str
            except SchemaRegistryError as exc:
                if exc.http_status_code == 404:
                    raise WireFormatError(f"schema id {schema_id} is not registered") from exc
                raise RetryableError(f"registry error for id {schema_id}: {exc}") from exc
            except Exception as exc:
                raise RetryableError(f"registry unreachable: {exc}") from exc
            parsed = parse(text or "")
            self._parsed_by_id[schema_id] = parsed
        return parsed

    def serialize(self, subject: str, schema: Mapping[str, Any] | str, record: Any) -> bytes:
        """Register if needed, then encode ``record`` in the wire format."""
        schema_id = self.register(subject, schema)
        return encode(schema_id, self._parsed_by_id[schema_id], record)

    def deserialize(self, data: bytes, reader_schema: Any | None = None) -> tuple[int, Any]:
        """Decode wire-format bytes; return ``(schema_id, record)``."""
        schema_id, _ = split_header(data)
        return schema_id, decode(data, self.writer_schema(schema_id), reader_schema)
