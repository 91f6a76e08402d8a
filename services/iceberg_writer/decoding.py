"""Change records off the wire: the registry's schemas by id, and a record's bytes decoded
into a :class:`~services.iceberg_writer.changes.Change` for its table."""

from __future__ import annotations

import io
import json
from typing import Any

import fastavro
from confluent_kafka import Message
from confluent_kafka.schema_registry import SchemaRegistryClient

from services.iceberg_writer.changes import Change
from services.iceberg_writer.records import change_of
from services.iceberg_writer.state import TableState
from shared.avro import AvroCodec, WireFormatError, split_header
from shared.avro_decoder import AvroDecoder
from shared.errors import RetryableError

# The change record's fields decode reads; the others are skipped (AvroDecoder).
DECODED = frozenset({"op", "position", "source_ts_ms", "key", "after", "unchanged"})


class ChangeDecoder:
    """Decodes change records with the registry's writer schemas, cached by id."""

    def __init__(self, registry: SchemaRegistryClient, codec: AvroCodec) -> None:
        self._registry = registry
        self._codec = codec
        self._raw_schemas: dict[int, dict[str, Any]] = {}
        self._decoders: dict[int, AvroDecoder] = {}

    def raw_schema(self, schema_id: int) -> dict[str, Any]:
        """The registered schema ``schema_id`` as JSON; RetryableError if the registry fails."""
        raw = self._raw_schemas.get(schema_id)
        if raw is None:
            try:
                text = self._registry.get_schema(schema_id).schema_str or ""
            except Exception as exc:
                raise RetryableError(f"registry: schema {schema_id}: {exc}") from exc
            raw = json.loads(text)
            self._raw_schemas[schema_id] = raw
        return raw

    def decode(self, state: TableState, message: Message, schema_id: int) -> Change:
        """The change in ``message`` (written with ``schema_id``), read into the table's
        current schema. Raises WireFormatError (or KeyError, ValueError, TypeError from the
        conversion) for a record that will never decode."""
        value = message.value()
        assert value is not None
        writer = self._codec.writer_schema(schema_id)
        _, body = split_header(value)
        # An older version is resolved into the current schema by fastavro.
        decoder = self._decoder(schema_id, writer) if schema_id == state.current_id else None
        try:
            if decoder is not None:
                decoded: Any = decoder.decode(body)
            else:
                decoded = fastavro.schemaless_reader(io.BytesIO(body), writer, state.reader)
        except Exception as exc:  # fastavro raises many kinds on corrupt input
            raise WireFormatError(f"body does not match schema {schema_id}: {exc}") from exc
        return change_of(
            decoded,
            state.name,
            state.keys,
            state.converters,
            message.topic(),
            message.partition(),
            message.offset(),
            schema_id,
        )

    def _decoder(self, schema_id: int, parsed: Any) -> AvroDecoder:
        """The decoder of ``schema_id``'s change records, skipping the fields a commit does
        not use (``source``, ``tx_id``), uuids as text (what the table stores): faster than
        fastavro on the benchmark's records, plain and compiled (HISTORY)."""
        decoder = self._decoders.get(schema_id)
        if decoder is None:
            raw = self.raw_schema(schema_id)
            unused = [str(f["name"]) for f in raw.get("fields", []) if f.get("name") not in DECODED]
            decoder = AvroDecoder(raw, parsed, unused, uuid_text=True)
            self._decoders[schema_id] = decoder
        return decoder
