"""What the writer's Avro decoding spends on two things it could avoid: building ``datetime``
and ``Decimal`` objects, and reading past the ``source`` map.

50,000 synthetic change records shaped like the pipeline benchmark's ``orders`` are written
with fastavro, then decoded with the writer's ``AvroDecoder`` (``source`` and ``tx_id``
skipped, uuids as text) under two schemas with the same binary encoding: as registered, and
with the ``timestamp-micros`` and ``decimal`` logical types dropped (their values stay
integers and bytes). Each is timed with a 17-entry ``source`` map, as Debezium's, and an
empty one. Prints microseconds of process CPU per record, three rounds:

    PYTHONPATH=.icefjord/compiled .venv/bin/python \\
        icefjord/bench/experiments/decode_variants.py
"""

from __future__ import annotations

import copy
import datetime as dt
import decimal
import io
import random
import time
import uuid
from typing import Any

import fastavro

from services.iceberg_writer.writer import DECODED
from shared.avro_decoder import AvroDecoder

AFTER: dict[str, Any] = {
    "type": "record",
    "name": "Orders",
    "fields": [
        {"name": "id", "type": {"type": "string", "logicalType": "uuid"}},
        {"name": "customer_id", "type": "long"},
        {"name": "status", "type": "string"},
        {
            "name": "amount",
            "type": {"type": "bytes", "logicalType": "decimal", "precision": 14, "scale": 4},
        },
        {"name": "quantity", "type": "int"},
        {"name": "tags", "type": ["null", {"type": "array", "items": ["null", "int"]}]},
        {"name": "note", "type": ["null", "string"]},
        {"name": "ordered_at", "type": {"type": "long", "logicalType": "timestamp-micros"}},
        {
            "name": "delivery_window",
            "type": ["null", {"type": "long", "logicalType": "time-micros"}],
        },
        {"name": "attrs", "type": ["null", "string"]},
    ],
}
OPERATIONS = ["CREATE", "UPDATE", "DELETE", "READ", "TRUNCATE"]
SCHEMA: dict[str, Any] = {
    "type": "record",
    "name": "Change",
    "namespace": "io.icefjord",
    "fields": [
        {"name": "op", "type": {"type": "enum", "name": "Operation", "symbols": OPERATIONS}},
        {"name": "position", "type": "string"},
        {"name": "source_ts_ms", "type": "long"},
        {"name": "tx_id", "type": ["null", "string"]},
        {"name": "source", "type": {"type": "map", "values": "string"}},
        {
            "name": "key",
            "type": {
                "type": "record",
                "name": "OrdersKey",
                "fields": [{"name": "id", "type": {"type": "string", "logicalType": "uuid"}}],
            },
        },
        {"name": "after", "type": ["null", AFTER]},
        {"name": "unchanged", "type": ["null", {"type": "array", "items": "string"}]},
    ],
}


def record(source: dict[str, str]) -> dict[str, Any]:
    key = str(uuid.uuid4())
    return {
        "op": "UPDATE",
        "position": f"{random.randrange(10**12):016d}",
        "source_ts_ms": 1_795_816_054_249,
        "tx_id": "123",
        "source": source,
        "key": {"id": key},
        "after": {
            "id": key,
            "customer_id": 42,
            "status": "shipped",
            "amount": decimal.Decimal("123.4500"),
            "quantity": 3,
            "tags": [1, 2, None],
            "note": "Grüße",
            "ordered_at": dt.datetime(2026, 11, 27, 12, 0, tzinfo=dt.UTC),
            "delivery_window": dt.time(10, 30),
            "attrs": '{"a": 1}',
        },
        "unchanged": None,
    }


def without_logical_types(schema: dict[str, Any]) -> dict[str, Any]:
    plain = copy.deepcopy(schema)
    for field in plain["fields"][6]["type"][1]["fields"]:
        kind = field["type"]
        if isinstance(kind, dict) and kind.get("logicalType") in ("timestamp-micros", "decimal"):
            field["type"] = {"type": kind["type"]}
    return plain


def main() -> None:
    parsed = fastavro.parse_schema(copy.deepcopy(SCHEMA))
    unused = [f["name"] for f in SCHEMA["fields"] if f["name"] not in DECODED]
    decoders = {
        name: AvroDecoder(
            schema, fastavro.parse_schema(copy.deepcopy(schema)), unused, uuid_text=True
        )
        for name, schema in (
            ("as registered", SCHEMA),
            ("no timestamp/decimal types", without_logical_types(SCHEMA)),
        )
    }
    sources = {"17-entry source": {f"k{j}": f"value-{j}" for j in range(17)}, "empty source": {}}
    for source_name, source in sources.items():
        bodies = []
        for _ in range(50_000):
            out = io.BytesIO()
            fastavro.schemaless_writer(out, parsed, record(source))
            bodies.append(out.getvalue())
        for round_ in range(3):
            for name, decoder in decoders.items():
                started = time.process_time()
                for body in bodies:
                    decoder.decode(body)
                per = (time.process_time() - started) / len(bodies) * 1e6
                print(f"{source_name}, {name}, round {round_ + 1}: {per:.2f} us per record")


if __name__ == "__main__":
    main()
