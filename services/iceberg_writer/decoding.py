"""Change records off the wire: the registry's schemas by id, and a record's bytes decoded
into a :class:`~services.iceberg_writer.changes.Change` for its table."""

from __future__ import annotations

import io
import json
from typing import Any

import fastavro
from confluent_kafka import Message
from confluent_kafka.schema_registry import SchemaRegistryClient

from services.iceberg_writer.changes import Change, Op
from services.iceberg_writer.native_changes import EncodedRow, change_program
from services.iceberg_writer.records import change_of
from services.iceberg_writer.state import TableState
from shared.avro import AvroCodec, WireFormatError, split_header
from shared.avro_decoder import AvroDecoder
from shared.errors import RetryableError

_OPS = (Op.CREATE, Op.UPDATE, Op.DELETE, Op.READ, Op.TRUNCATE)  # the program's op indexes
HEADER_SIZE = 5  # Confluent's wire format: magic byte and schema id

# The change record's fields decode reads; the others are skipped (AvroDecoder).
DECODED = frozenset({"op", "position", "source_ts_ms", "key", "after", "unchanged"})


class ChangeDecoder:
    """Decodes change records with the registry's writer schemas, cached by id."""

    def __init__(self, registry: SchemaRegistryClient, codec: AvroCodec) -> None:
        self._registry = registry
        self._codec = codec
        self._raw_schemas: dict[int, dict[str, Any]] = {}
        self._decoders: dict[int, AvroDecoder] = {}
        self._programs: dict[tuple[int, tuple[str, ...]], Any] = {}
        """The compiled program per (schema id, key columns); None: that schema has none."""

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
        current = schema_id == state.current_id
        if current:
            change = self._compiled(state, message, value, schema_id, writer)
            if change is not None:
                return change
        _, body = split_header(value)
        # An older version is resolved into the current schema by fastavro.
        decoder = self._decoder(schema_id, writer) if current else None
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

    def _compiled(
        self, state: TableState, message: Message, value: bytes, schema_id: int, parsed: Any
    ) -> Change | None:
        """The change through the compiled path (``native_changes``), its row left encoded;
        None when the schema or this body does not take it."""
        slot = (schema_id, state.keys)
        if slot in self._programs:
            program = self._programs[slot]
        else:
            program = change_program(self.raw_schema(schema_id), state.keys)
            self._programs[slot] = program
        if program is None:
            return None
        decoded = program.decode(value, HEADER_SIZE)
        if decoded is None:
            return None
        op, position, source_ts_ms, key, start, unchanged = decoded
        row = None
        if start >= 0:
            decoder = self._decoder(schema_id, parsed)

            def after() -> Any:
                return decoder.decode(value[HEADER_SIZE:])["after"]

            row = EncodedRow(program, value, start, after)
        return Change(
            state.name,
            _OPS[op],
            position,
            source_ts_ms,
            key,
            row,
            message.topic(),
            message.partition(),
            message.offset(),
            schema_id,
            unchanged,
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
