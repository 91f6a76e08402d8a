"""Kafka header names of records diverted from the stream, as ``contracts/topics.toml``
lists them: what failed, why, and where the record came from."""

from __future__ import annotations

HEADER_ERROR_CLASS = "icefjord.error.class"
HEADER_ERROR_MESSAGE = "icefjord.error.message"
HEADER_SOURCE_TOPIC = "icefjord.source.topic"
HEADER_SOURCE_PARTITION = "icefjord.source.partition"
HEADER_SOURCE_OFFSET = "icefjord.source.offset"
HEADER_FAILED_AT_MS = "icefjord.failed_at_ms"
DEAD_LETTER_HEADERS = (
    HEADER_ERROR_CLASS,
    HEADER_ERROR_MESSAGE,
    HEADER_SOURCE_TOPIC,
    HEADER_SOURCE_PARTITION,
    HEADER_SOURCE_OFFSET,
    HEADER_FAILED_AT_MS,
)
"""Every dead letter's headers (``icefjord.deadletter``), from any service."""

# The quarantine's own headers beside the source's (``icefjord.quarantine``): iceberg-writer
# writes them, ``icefjord quarantine`` reads them.
HEADER_TABLE = "icefjord.table"
HEADER_SCHEMA_ID = "icefjord.schema_id"
HEADER_QUARANTINED_AT_MS = "icefjord.quarantined_at_ms"
HEADER_REASON = "icefjord.reason"
