"""Throughput benchmark of the per-record path, without Kafka or a registry.

:func:`generate_messages` builds N realistic Debezium Postgres change events (c/u/d mix) once,
as JSON-with-schemas bytes or as Avro in the Confluent wire format (Debezium-like writer schemas
carrying ``connect.name``). :func:`run_bench` then times what the service does per record:
:meth:`Router.route` (decode -> normalize) followed by the Avro encoding of the change key and
value. Schema registration is replaced by a fixed id per schema text, and Avro input is decoded
through an in-memory schema lookup: the benchmark measures processing, not the registry.
"""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from services.cdc_normalizer.avro_encoder import AvroEncoder
from services.cdc_normalizer.pipeline import (
    AvroWriter,
    ChangeOut,
    Emit,
    EncodedChange,
    Router,
    SourceRecord,
    avro_writer,
)
from services.cdc_normalizer.table_schema import key_schema_text, value_schema_text
from shared.avro import WireFormatError, encode, frame, parse

InputFormat = Literal["json", "avro"]
TOPIC = "shop.public.orders"
_KEY_ID = 1
_VALUE_ID = 2
_EPOCH_DAY_2024 = 19723
_DEC = "org.apache.kafka.connect.data.Decimal"

# (name, Connect type, Connect name, parameters, optional)
_COLUMNS: tuple[tuple[str, str, str | None, dict[str, str] | None, bool], ...] = (
    ("id", "int64", None, None, False),
    ("customer_id", "int32", None, None, False),
    ("status", "string", None, None, False),
    ("note", "string", None, None, True),
    ("amount", "bytes", _DEC, {"scale": "2", "connect.decimal.precision": "12"}, False),
    ("created_at", "int64", "io.debezium.time.MicroTimestamp", None, False),
    ("ship_date", "int32", "io.debezium.time.Date", None, True),
    ("quantity", "int16", None, None, False),
)


@dataclass(frozen=True, slots=True)
class BenchResult:
    """One timed run: ``records`` source records in, ``changes`` encoded change records out."""

    format: InputFormat
    records: int
    changes: int
    seconds: float
    outputs: tuple[tuple[bytes | None, bytes], ...] = ()
    schemas: tuple[tuple[int, str], ...] = ()
    """The (id, Avro schema text) pairs the outputs were written with."""

    @property
    def changes_per_second(self) -> float:
        """Changes per second of one process (0 when nothing was timed)."""
        return self.changes / self.seconds if self.seconds > 0 else 0.0


def _connect_field(name: str, kind: str, cname: str | None, params: Any, opt: bool) -> Any:
    block: dict[str, Any] = {"type": kind, "optional": opt, "field": name}
    if cname is not None:
        block["name"] = cname
        block["version"] = 1
    if params is not None:
        block["parameters"] = params
    return block


def _json_schema() -> tuple[dict[str, Any], dict[str, Any]]:
    row = [_connect_field(*column) for column in _COLUMNS]
    value_name = "shop.public.orders.Value"
    source_fields = [
        {"type": "string", "optional": False, "field": "connector"},
        {"type": "string", "optional": False, "field": "db"},
        {"type": "string", "optional": False, "field": "schema"},
        {"type": "string", "optional": False, "field": "table"},
        {"type": "int64", "optional": False, "field": "ts_ms"},
        {"type": "string", "optional": True, "field": "sequence"},
        {"type": "int64", "optional": True, "field": "txId"},
        {"type": "int64", "optional": True, "field": "lsn"},
    ]
    value = {
        "type": "struct",
        "optional": False,
        "name": "shop.public.orders.Envelope",
        "fields": [
            {
                "type": "struct",
                "optional": True,
                "name": value_name,
                "field": "before",
                "fields": row,
            },
            {
                "type": "struct",
                "optional": True,
                "name": value_name,
                "field": "after",
                "fields": row,
            },
            {"type": "struct", "optional": False, "field": "source", "fields": source_fields},
            {"type": "string", "optional": False, "field": "op"},
            {"type": "int64", "optional": True, "field": "ts_ms"},
        ],
    }
    key = {
        "type": "struct",
        "optional": False,
        "name": "shop.public.orders.Key",
        "fields": [{"type": "int64", "optional": False, "field": "id"}],
    }
    return key, value


def avro_schemas() -> tuple[dict[str, Any], dict[str, Any]]:
    def avro_type(kind: str, cname: str | None, params: Any) -> Any:
        physical = {"int8": "int", "int16": "int", "int32": "int", "int64": "long"}.get(kind, kind)
        if cname is None and kind in ("int8", "int16"):
            return {"type": "int", "connect.type": kind}
        if cname is None:
            return physical
        out: dict[str, Any] = {"type": physical, "connect.version": 1, "connect.name": cname}
        if params is not None:
            out["connect.parameters"] = params
            out["logicalType"] = "decimal"
            out["precision"] = int(params["connect.decimal.precision"])
            out["scale"] = int(params["scale"])
        return out

    fields: list[dict[str, Any]] = []
    for name, kind, cname, params, opt in _COLUMNS:
        t = avro_type(kind, cname, params)
        fields.append(
            {"name": name, "type": ["null", t], "default": None}
            if opt
            else {"name": name, "type": t}
        )
    row = {"type": "record", "name": "Value", "namespace": "shop.public.orders", "fields": fields}
    source = {
        "type": "record",
        "name": "Source",
        "namespace": "io.debezium.connector.postgresql",
        "fields": [
            {"name": "connector", "type": "string"},
            {"name": "db", "type": "string"},
            {"name": "schema", "type": "string"},
            {"name": "table", "type": "string"},
            {"name": "ts_ms", "type": "long"},
            {"name": "sequence", "type": ["null", "string"], "default": None},
            {"name": "txId", "type": ["null", "long"], "default": None},
            {"name": "lsn", "type": ["null", "long"], "default": None},
        ],
    }
    value = {
        "type": "record",
        "name": "Envelope",
        "namespace": "shop.public.orders",
        "connect.name": "shop.public.orders.Envelope",
        "fields": [
            {"name": "before", "type": ["null", row], "default": None},
            {"name": "after", "type": ["null", "shop.public.orders.Value"], "default": None},
            {"name": "source", "type": source},
            {"name": "op", "type": "string"},
            {"name": "ts_ms", "type": ["null", "long"], "default": None},
        ],
    }
    key = {
        "type": "record",
        "name": "Key",
        "namespace": "shop.public.orders",
        "connect.name": "shop.public.orders.Key",
        "fields": [{"name": "id", "type": "long"}],
    }
    return key, value


def _row(i: int, version: int, avro: bool) -> dict[str, Any]:
    cents = 1999 + i * 37 + version
    amount = cents.to_bytes((cents.bit_length() + 8) // 8, "big", signed=True)
    return {
        "id": i,
        "customer_id": 1000 + i % 977,
        "status": ("new", "paid", "shipped")[version % 3],
        "note": None if i % 4 == 0 else f"order {i} note {version}",
        "amount": amount if avro else base64.b64encode(amount).decode("ascii"),
        "created_at": 1_704_067_200_000_000 + i * 1_000_003,
        "ship_date": None if version == 0 else _EPOCH_DAY_2024 + i % 365,
        "quantity": 1 + i % 50,
    }


def _event(i: int, avro: bool, namespace: str = "public") -> tuple[dict[str, Any], dict[str, Any]]:
    """Event i: every 10th a delete, every 3rd an update, the rest creates."""
    op = "d" if i % 10 == 9 else "u" if i % 3 == 1 else "c"
    lsn = 23_456_789 + i * 64
    payload = {
        "before": _row(i, 0, avro) if op != "c" else None,
        "after": _row(i, 1, avro) if op != "d" else None,
        "source": {
            "connector": "postgresql",
            "db": "shop",
            "schema": namespace,
            "table": "orders",
            "ts_ms": 1_704_067_200_000 + i,
            "sequence": json.dumps([str(lsn - 64), str(lsn)]),
            "txId": 5000 + i // 4,
            "lsn": lsn,
        },
        "op": op,
        "ts_ms": 1_704_067_200_050 + i,
    }
    return {"id": i}, payload


def generate_messages(
    count: int,
    fmt: InputFormat,
    *,
    topic: str = TOPIC,
    namespace: str = "public",
    ids: tuple[int | None, int | None] = (None, None),
) -> tuple[SourceRecord, ...]:
    """``count`` Debezium Postgres change records of ``<namespace>.orders`` on ``topic``,
    encoded once.

    JSON: ``{"schema", "payload"}`` bytes (key and value). Avro: Confluent wire format with the
    schema ids ``ids`` (key, value) of :func:`avro_schemas`, by default 1 and 2 of
    :func:`writer_schemas`.
    """
    key_id, value_id = ids[0] or _KEY_ID, ids[1] or _VALUE_ID
    out: list[SourceRecord] = []
    if fmt == "json":
        key_block, value_block = _json_schema()
        for i in range(count):
            key, value = _event(i, False, namespace)
            out.append(
                SourceRecord(
                    topic,
                    0,
                    i,
                    json.dumps({"schema": key_block, "payload": key}).encode(),
                    json.dumps({"schema": value_block, "payload": value}).encode(),
                    1_704_067_200_100 + i,
                )
            )
        return tuple(out)
    key_avro, value_avro = avro_schemas()
    key_parsed, value_parsed = parse(key_avro), parse(value_avro)
    for i in range(count):
        key, value = _event(i, True, namespace)
        out.append(
            SourceRecord(
                topic,
                0,
                i,
                encode(key_id, key_parsed, key),
                encode(value_id, value_parsed, value),
                1_704_067_200_100 + i,
            )
        )
    return tuple(out)


def writer_schemas() -> dict[int, AvroWriter]:
    """The in-memory registry of the Avro input: schema id -> writer."""
    key_avro, value_avro = avro_schemas()
    return {_KEY_ID: avro_writer(key_avro), _VALUE_ID: avro_writer(value_avro)}


class _Encoder:
    """Key and value serialization as the service does it, with ids in place of the registry."""

    def __init__(self) -> None:
        self._known: dict[str, tuple[int, AvroEncoder]] = {}

    def _schema(self, text: str) -> tuple[int, AvroEncoder]:
        known = self._known.get(text)
        if known is None:
            known = (100 + len(self._known), AvroEncoder(text))
            self._known[text] = known
        return known

    def schemas(self) -> tuple[tuple[int, str], ...]:
        """Every (id, schema text) used so far."""
        return tuple((schema_id, text) for text, (schema_id, _) in self._known.items())

    def __call__(self, change: ChangeOut) -> tuple[bytes | None, bytes]:
        if change.schema is None:
            raise ValueError("the benchmark has no TRUNCATE")
        value_id, value_encoder = self._schema(value_schema_text(change.schema))
        key_bytes = None
        if change.key is not None:
            key_id, key_encoder = self._schema(key_schema_text(change.schema))
            key_bytes = key_encoder.frame(key_id, change.key)
        return key_bytes, value_encoder.frame(value_id, change.value)

    def framed(self, change: EncodedChange) -> tuple[bytes, bytes]:
        """A change the compiled record path wrote, framed as the service frames it."""
        value_id, _ = self._schema(value_schema_text(change.schema))
        key_id, _ = self._schema(key_schema_text(change.schema))
        return frame(key_id, change.key), frame(value_id, change.value)


def run_bench(
    records: tuple[SourceRecord, ...],
    fmt: InputFormat,
    *,
    keep_outputs: bool = False,
    clock: Callable[[], float] = time.perf_counter,
) -> BenchResult:
    """Route and encode every record once, timed. Raises RuntimeError if any record is not
    emitted (a benchmark that dead-letters measures the wrong path)."""
    writers = writer_schemas()

    def lookup(schema_id: int) -> AvroWriter:
        if schema_id not in writers:
            raise WireFormatError(f"schema id {schema_id} is not registered")
        return writers[schema_id]

    router = Router(
        lookup=lookup,
        clock_ms=lambda: 0,
        dead_letter_topic="dlq",
        max_record_bytes=1 << 20,
        compiled_records=True,
    )
    encoder = _Encoder()
    outputs: list[tuple[bytes | None, bytes]] = []
    changes = 0
    started = clock()
    for record in records:
        routing = router.route(record)
        if isinstance(routing, EncodedChange):
            framed = encoder.framed(routing)
            changes += 1
            if keep_outputs:
                outputs.append(framed)
            continue
        if not isinstance(routing, Emit):
            raise RuntimeError(f"record {record.offset} was not emitted: {routing}")
        for change in routing.changes:
            encoded = encoder(change)
            changes += 1
            if keep_outputs:
                outputs.append(encoded)
    seconds = clock() - started
    return BenchResult(fmt, len(records), changes, seconds, tuple(outputs), encoder.schemas())


def build_kind() -> str:
    """Whether the per-record modules run compiled (``make compiled``, see setup.py)."""
    from services.cdc_normalizer import normalize

    compiled = not (normalize.__file__ or "").endswith(".py")
    return "compiled with mypyc" if compiled else "plain CPython"


def bench(count: int, fmt: InputFormat, *, keep_outputs: bool = False) -> BenchResult:
    """Generate ``count`` messages of ``fmt`` (untimed), then :func:`run_bench` them."""
    return run_bench(generate_messages(count, fmt), fmt, keep_outputs=keep_outputs)
