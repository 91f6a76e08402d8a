"""``icefjord normalize``: run the normalizer core over JSON lines, no Kafka needed.

Each input line is one Debezium record: either ``{"key": ..., "value": ...}`` (optionally with
``topic``, ``partition``, ``offset``, ``timestamp``) or a bare value. Normalized changes go to
stdout as JSON lines; each rejected line goes to stderr with its line number and reason.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Annotated, TextIO

import typer

from services.cdc_normalizer.connect_schema import ConnectSchema, connect_schema_from_avro
from services.cdc_normalizer.envelope import decode_json
from services.cdc_normalizer.errors import MalformedEnvelope, NormalizeError
from services.cdc_normalizer.normalize import (
    DebeziumMessage,
    Normalized,
    NormalizeOptions,
    Origin,
    RejectedRecord,
    TableOverrides,
    Tombstone,
    normalize,
)
from services.cdc_normalizer.render import change_to_json

__all__ = ["normalize_command", "normalize_lines"]

_WRAPPER_KEYS = frozenset({"key", "value", "topic", "partition", "offset", "timestamp"})


def _message(line: str, number: int, topic: str) -> DebeziumMessage:
    """The :class:`DebeziumMessage` of one input line (1-based ``number`` is the offset)."""
    record = decode_json(line, f"line {number}")
    is_wrapper = isinstance(record, Mapping) and "value" in record and set(record) <= _WRAPPER_KEYS
    if not is_wrapper:
        return DebeziumMessage(None, record, Origin(topic, 0, number - 1))
    timestamp = record.get("timestamp")
    try:
        origin = Origin(
            str(record.get("topic", topic)),
            int(record.get("partition", 0)),
            int(record.get("offset", number - 1)),
            int(timestamp) if timestamp is not None else None,
        )
    except (TypeError, ValueError) as exc:
        raise MalformedEnvelope(f"bad topic/partition/offset/timestamp: {exc}") from None
    return DebeziumMessage(record.get("key"), record["value"], origin)


def normalize_lines(
    lines: Iterable[str], options: NormalizeOptions, topic: str, out: TextIO, err: TextIO
) -> tuple[int, int, int]:
    """Normalize JSON lines, writing changes to ``out`` and rejects to ``err``.

    Blank lines are skipped. Returns ``(changes, tombstones, rejected)`` counts.
    """
    changes = tombstones = rejected = 0
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            result = normalize(_message(line, number, topic), options)
        except NormalizeError as exc:
            result = RejectedRecord(
                exc.reason, type(exc).__name__, exc.message, Origin(topic, 0, 0)
            )
        if isinstance(result, RejectedRecord):
            rejected += 1
            err.write(f"line {number}: {result.reason}: {result.message}\n")
        elif isinstance(result, Tombstone):
            tombstones += 1
        elif isinstance(result, Normalized):
            for change in result.changes:
                changes += 1
                out.write(json.dumps(change_to_json(change), ensure_ascii=False) + "\n")
    return changes, tombstones, rejected


def _load_row_schema(path: Path | None) -> ConnectSchema | None:
    if path is None:
        return None
    try:
        return connect_schema_from_avro(json.loads(path.read_text(encoding="utf-8")))
    except (OSError, json.JSONDecodeError, NormalizeError) as exc:
        raise typer.BadParameter(f"cannot read row schema {path}: {exc}") from exc


def normalize_command(
    file: Annotated[str, typer.Argument(help="JSON-lines file of Debezium records; - for stdin")],
    key_columns: Annotated[
        list[str] | None,
        typer.Option("--key-column", "-k", help="Key column (repeat for composite keys)."),
    ] = None,
    row_schema: Annotated[
        Path | None,
        typer.Option(help="Avro row schema (.avsc) for records without a JSON schema block."),
    ] = None,
    topic: Annotated[str, typer.Option(help="Topic name to assume for bare values.")] = "stdin",
) -> None:
    """Normalize Debezium records from FILE (one JSON object per line) to JSON lines on stdout.

    Rejected lines are reported on stderr with their line number and reason; the exit code is 1
    if any line was rejected, else 0.
    """
    overrides = TableOverrides(
        key_columns=tuple(key_columns) if key_columns else None,
        row_schema=_load_row_schema(row_schema),
    )
    options = NormalizeOptions(default=overrides)
    if file == "-":
        counts = normalize_lines(sys.stdin, options, topic, sys.stdout, sys.stderr)
    else:
        with open(file, encoding="utf-8") as handle:
            counts = normalize_lines(handle, options, topic, sys.stdout, sys.stderr)
    changes, tombstones, rejected = counts
    sys.stderr.write(f"{changes} changes, {tombstones} tombstones, {rejected} rejected\n")
    if rejected:
        raise typer.Exit(1)
