"""Debezium PostgreSQL change events as Kafka Connect's JsonConverter writes them (schema and
payload), for tests that feed the normalizer a topic of their own."""

from __future__ import annotations

import json
from typing import Any

SOURCE_FIELDS: list[dict[str, Any]] = [
    {"type": "string", "optional": False, "field": name}
    for name in ("version", "connector", "name", "db", "schema", "table")
] + [
    {"type": "int64", "optional": False, "field": "ts_ms"},
    {"type": "int64", "optional": True, "field": "txId"},
    {"type": "int64", "optional": True, "field": "lsn"},
]


def payload(
    table: str, op: str, before: dict[str, Any] | None, after: dict[str, Any] | None, lsn: int
) -> dict[str, Any]:
    """The envelope's payload: the rows, Debezium's ``source`` block and the operation."""
    return {
        "before": before,
        "after": after,
        "source": {
            "version": "2.7.0.Final",
            "connector": "postgresql",
            "name": "shop",
            "db": "shop",
            "schema": "inventory",
            "table": table,
            "ts_ms": 1_700_000_000_000 + lsn,
            "txId": 700 + lsn,
            "lsn": lsn,
        },
        "op": op,
        "ts_ms": 1_700_000_000_500 + lsn,
    }


def json_envelope(
    record: str,
    columns: list[dict[str, Any]],
    table: str,
    op: str,
    before: dict[str, Any] | None,
    after: dict[str, Any] | None,
    lsn: int,
) -> bytes:
    """One change of ``shop.inventory.<table>``; ``record`` names the Connect structs
    (``shop.inventory.customers``), ``columns`` are the row's Connect fields."""
    row_struct = {"type": "struct", "optional": True, "name": f"{record}.Value"}
    schema = {
        "type": "struct",
        "optional": False,
        "name": f"{record}.Envelope",
        "fields": [
            {**row_struct, "field": "before", "fields": columns},
            {**row_struct, "field": "after", "fields": columns},
            {
                "type": "struct",
                "optional": False,
                "field": "source",
                "name": "io.debezium.connector.postgresql.Source",
                "fields": SOURCE_FIELDS,
            },
            {"type": "string", "optional": False, "field": "op"},
            {"type": "int64", "optional": True, "field": "ts_ms"},
        ],
    }
    body = {"schema": schema, "payload": payload(table, op, before, after, lsn)}
    return json.dumps(body).encode()


def json_key(record: str, key: int) -> bytes:
    """The key of row ``key`` (an ``int32`` id)."""
    schema = {
        "type": "struct",
        "optional": False,
        "name": f"{record}.Key",
        "fields": [{"type": "int32", "optional": False, "field": "id"}],
    }
    return json.dumps({"schema": schema, "payload": {"id": key}}).encode()
