"""Debezium Postgres change events, built without Debezium: the generator's wire format.

The records are what Debezium 3.2's Postgres connector writes through Kafka's JsonConverter
with ``schemas.enable=true`` and the demo's settings (``decimal.handling.mode=precise``,
``time.precision.mode=adaptive_time_microseconds``, ``binary.handling.mode=bytes``, tables
with PostgreSQL's default replica identity): the same key and envelope schema blocks, field by
field,
the same value encodings (Decimal as base64 two's complement, ZonedTimestamp text,
MicroTime, ...), the same ``source`` block and headers, a tombstone after every delete, and a
delete plus a create for a primary-key change. The default identity logs an update without its
old row and a delete with only its key (:func:`deleted_image`). The demo's values are never
TOASTed, so no placeholder for an unchanged TOASTed value appears. The integration tests hold
this module to what the real connector emits for the same tables. Pure: the caller supplies
times.
"""

from __future__ import annotations

import base64
import datetime as dt
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from icefjord.demo.model import Column, Kind, TableDef
from icefjord.demo.plan import RowChange

DEBEZIUM_VERSION = "3.2.3.Final"
_SNAPSHOT_MARKERS = (
    "true,first,first_in_data_collection,last_in_data_collection,last,false,incremental"
)
_DECIMAL = "org.apache.kafka.connect.data.Decimal"
_EPOCH = dt.datetime(1970, 1, 1)
_MICRO = dt.timedelta(microseconds=1)


def _plain(kind: str, optional: bool, name: str) -> dict[str, Any]:
    return {"type": kind, "optional": optional, "field": name}


def _named(kind: str, optional: bool, logical: str, name: str, **extra: Any) -> dict[str, Any]:
    return {
        "type": kind,
        "optional": optional,
        "name": logical,
        "version": 1,
        **extra,
        "field": name,
    }


SOURCE_SCHEMA: dict[str, Any] = {
    "type": "struct",
    "fields": [
        _plain("string", False, "version"),
        _plain("string", False, "connector"),
        _plain("string", False, "name"),
        _plain("int64", False, "ts_ms"),
        _named(
            "string",
            True,
            "io.debezium.data.Enum",
            "snapshot",
            parameters={"allowed": _SNAPSHOT_MARKERS},
            default="false",
        ),
        _plain("string", False, "db"),
        _plain("string", True, "sequence"),
        _plain("int64", True, "ts_us"),
        _plain("int64", True, "ts_ns"),
        _plain("string", False, "schema"),
        _plain("string", False, "table"),
        _plain("int64", True, "txId"),
        _plain("int64", True, "lsn"),
        _plain("int64", True, "xmin"),
    ],
    "optional": False,
    "name": "io.debezium.connector.postgresql.Source",
    "version": 1,
    "field": "source",
}
TRANSACTION_SCHEMA: dict[str, Any] = {
    "type": "struct",
    "fields": [
        _plain("string", False, "id"),
        _plain("int64", False, "total_order"),
        _plain("int64", False, "data_collection_order"),
    ],
    "optional": True,
    "name": "event.block",
    "version": 1,
    "field": "transaction",
}


def field_schema(column: Column, optional: bool | None = None) -> dict[str, Any]:
    """Debezium's Connect schema for one column (``optional`` overrides, for key fields)."""
    opt = column.nullable if optional is None else optional
    name = column.name
    match column.kind:
        case Kind.SMALLINT:
            return _plain("int16", opt, name)
        case Kind.INTEGER:
            return _plain("int32", opt, name)
        case Kind.BIGINT:
            return _plain("int64", opt, name)
        case Kind.NUMERIC:
            parameters = {
                "scale": str(column.scale),
                "connect.decimal.precision": str(column.precision),
            }
            return _named("bytes", opt, _DECIMAL, name, parameters=parameters)
        case Kind.MONEY:
            # Debezium gives money a scale (money.fraction.digits) but no precision.
            return _named("bytes", opt, _DECIMAL, name, parameters={"scale": "2"})
        case Kind.NUMERIC_ANY:
            return {
                "type": "struct",
                "fields": [_plain("int32", False, "scale"), _plain("bytes", False, "value")],
                "optional": opt,
                "name": "io.debezium.data.VariableScaleDecimal",
                "version": 1,
                "doc": "Variable scaled decimal",
                "field": name,
            }
        case Kind.REAL:
            return _plain("float", opt, name)
        case Kind.DOUBLE:
            return _plain("double", opt, name)
        case Kind.BOOLEAN:
            return _plain("boolean", opt, name)
        case Kind.TEXT:
            return _plain("string", opt, name)
        case Kind.TIMESTAMPTZ:
            return _named("string", opt, "io.debezium.time.ZonedTimestamp", name)
        case Kind.TIMESTAMP:
            if column.precision is not None and column.precision <= 3:
                return _named("int64", opt, "io.debezium.time.Timestamp", name)
            return _named("int64", opt, "io.debezium.time.MicroTimestamp", name)
        case Kind.DATE:
            return _named("int32", opt, "io.debezium.time.Date", name)
        case Kind.TIME:
            return _named("int64", opt, "io.debezium.time.MicroTime", name)
        case Kind.JSON | Kind.JSONB:
            return _named("string", opt, "io.debezium.data.Json", name)
        case Kind.UUID:
            return _named("string", opt, "io.debezium.data.Uuid", name)
        case Kind.ENUM:
            assert column.enum is not None
            allowed = {"allowed": ",".join(column.enum.labels)}
            return _named("string", opt, "io.debezium.data.Enum", name, parameters=allowed)
        case Kind.INT_ARRAY:
            return {
                "type": "array",
                "items": {"type": "int32", "optional": True},
                "optional": opt,
                "field": name,
            }
        case Kind.BYTEA:
            return _plain("bytes", opt, name)
    raise ValueError(f"no Connect schema for {column.kind}")


def key_schema(server: str, schema: str, table: TableDef) -> dict[str, Any]:
    """The Kafka key's schema block."""
    return {
        "type": "struct",
        "fields": [field_schema(table.column(name), optional=False) for name in table.key],
        "optional": False,
        "name": f"{server}.{schema}.{table.name}.Key",
    }


def envelope_schema(server: str, schema: str, table: TableDef) -> dict[str, Any]:
    """The Kafka value's schema block (the change event envelope)."""
    fields = [field_schema(c) for c in table.columns]
    value_name = f"{server}.{schema}.{table.name}.Value"

    def image(field: str) -> dict[str, Any]:
        return {
            "type": "struct",
            "fields": fields,
            "optional": True,
            "name": value_name,
            "field": field,
        }

    return {
        "type": "struct",
        "fields": [
            image("before"),
            image("after"),
            SOURCE_SCHEMA,
            TRANSACTION_SCHEMA,
            _plain("string", False, "op"),
            _plain("int64", True, "ts_ms"),
            _plain("int64", True, "ts_us"),
            _plain("int64", True, "ts_ns"),
        ],
        "optional": False,
        "name": f"{server}.{schema}.{table.name}.Envelope",
        "version": 2,
    }


def _unscaled_b64(unscaled: int) -> str:
    """Java ``BigInteger.toByteArray``: minimal big-endian two's complement, base64."""
    bits = unscaled.bit_length() if unscaled >= 0 else (~unscaled).bit_length()
    return base64.b64encode(unscaled.to_bytes(bits // 8 + 1, "big", signed=True)).decode()


def _scaled(value: Decimal, scale: int) -> int:
    return int(value.scaleb(scale))


def _jsonb_text(value: Any) -> str:
    """jsonb's output form: keys ordered by length then bytes, ``", "`` and ``": "``."""

    def order(node: Any) -> Any:
        if isinstance(node, dict):
            keys = sorted(node, key=lambda k: (len(k.encode()), k.encode()))
            return {k: order(node[k]) for k in keys}
        if isinstance(node, list):
            return [order(v) for v in node]
        return node

    return json.dumps(order(value), ensure_ascii=False)


def encode_value(column: Column, value: Any) -> Any:
    """One column value in Debezium's JSON encoding (None stays None)."""
    if value is None:
        return None
    match column.kind:
        case Kind.NUMERIC:
            assert column.scale is not None
            return _unscaled_b64(_scaled(value, column.scale))
        case Kind.MONEY:
            return _unscaled_b64(_scaled(value, 2))
        case Kind.NUMERIC_ANY:
            exponent = value.as_tuple().exponent
            scale = -exponent if isinstance(exponent, int) and exponent < 0 else 0
            unscaled = _scaled(value, scale)
            # Debezium strips trailing fraction zeros (12.50 -> scale 1), never below scale 0.
            while scale > 0 and unscaled % 10 == 0:
                unscaled, scale = unscaled // 10, scale - 1
            return {"scale": scale, "value": _unscaled_b64(unscaled)}
        case Kind.TIMESTAMPTZ:
            utc = value.astimezone(dt.UTC)
            return utc.strftime("%Y-%m-%dT%H:%M:%S.") + f"{utc.microsecond:06d}Z"
        case Kind.TIMESTAMP:
            micros = (value - _EPOCH) // _MICRO
            if column.precision is not None and column.precision <= 3:
                return micros // 1000
            return micros
        case Kind.DATE:
            return (value - dt.date(1970, 1, 1)).days
        case Kind.TIME:
            seconds = value.hour * 3600 + value.minute * 60 + value.second
            return seconds * 10**6 + value.microsecond
        case Kind.JSON:
            return json.dumps(value)
        case Kind.JSONB:
            return _jsonb_text(value)
        case Kind.UUID:
            return str(value)
        case Kind.BYTEA:
            return base64.b64encode(value).decode()
        case Kind.INT_ARRAY:
            return list(value)
    return value


def encode_row(table: TableDef, row: Mapping[str, Any]) -> dict[str, Any]:
    return {c.name: encode_value(c, row.get(c.name)) for c in table.columns}


# What Debezium puts in a delete's before-image for a NOT NULL column the WAL did not carry
# (the default replica identity logs the key only): its converters' fallback for the type.
_ZERO_B64 = _unscaled_b64(0)  # "AA==": the unscaled zero
_FALLBACKS: dict[Kind, Any] = {
    Kind.SMALLINT: 0,
    Kind.INTEGER: 0,
    Kind.BIGINT: 0,
    Kind.NUMERIC: _ZERO_B64,
    Kind.MONEY: _ZERO_B64,
    Kind.NUMERIC_ANY: {"scale": 0, "value": _ZERO_B64},
    Kind.REAL: 0.0,
    Kind.DOUBLE: 0.0,
    Kind.BOOLEAN: False,
    Kind.TEXT: "",
    Kind.ENUM: "",
    Kind.UUID: "",
    Kind.JSON: "",
    Kind.JSONB: "",
    Kind.TIMESTAMPTZ: "1970-01-01T00:00:00Z",
    Kind.TIMESTAMP: 0,
    Kind.DATE: 0,
    Kind.TIME: 0,
    Kind.BYTEA: "",
    Kind.INT_ARRAY: [],
}


def deleted_image(table: TableDef, row: Mapping[str, Any]) -> dict[str, Any]:
    """A delete's before-image under the default replica identity: the key's values; every
    other column null, or its type's fallback where it is NOT NULL."""
    keys = set(table.key)
    return {
        c.name: encode_value(c, row.get(c.name))
        if c.name in keys
        else (None if c.nullable else _FALLBACKS[c.kind])
        for c in table.columns
    }


@dataclass(frozen=True)
class KafkaRecord:
    """One record to produce; ``value`` None is a tombstone."""

    topic: str
    key: bytes
    value: bytes | None
    headers: tuple[tuple[str, bytes], ...]


@dataclass(frozen=True)
class SourcePosition:
    """Where in the source log an event is: Postgres LSNs and the transaction."""

    lsn: int
    last_commit_lsn: int | None
    tx_id: int
    commit_ts_us: int
    snapshot: str = "false"


def _compact(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()


class EnvelopeEncoder:
    """Builds the Kafka records of row changes for server ``server`` (the topic prefix)."""

    def __init__(self, server: str, database: str, schema: str) -> None:
        self.server = server
        self.database = database
        self.schema = schema
        self._schemas: dict[TableDef, tuple[bytes, bytes]] = {}

    def topic(self, table: str) -> str:
        return f"{self.server}.{self.schema}.{table}"

    def _schema_texts(self, table: TableDef) -> tuple[bytes, bytes]:
        """The key and value schema blocks as compact JSON, built once per table version."""
        texts = self._schemas.get(table)
        if texts is None:
            texts = (
                _compact(key_schema(self.server, self.schema, table)),
                _compact(envelope_schema(self.server, self.schema, table)),
            )
            self._schemas[table] = texts
        return texts

    def _headers(self, extra: Sequence[tuple[str, bytes]] = ()) -> tuple[tuple[str, bytes], ...]:
        return (
            *extra,
            ("__debezium.context.connectorLogicalName", self.server.encode()),
            ("__debezium.context.taskId", b"0"),
            ("__debezium.context.connectorName", b"postgresql"),
        )

    def records(
        self,
        table: TableDef,
        change: RowChange,
        position: SourcePosition,
        emitted_us: int,
        op: str | None = None,
        key_change: tuple[str, bytes] | None = None,
    ) -> list[KafkaRecord]:
        """The records of one row change: the event, plus a tombstone after a delete.
        ``op`` overrides the change's op (``r`` for snapshot reads); ``key_change`` is the
        ``__debezium.newkey``/``oldkey`` header of a primary-key change."""
        image = change.after if change.after is not None else change.before
        assert image is not None
        key_payload = {name: encode_value(table.column(name), image[name]) for name in table.key}
        key_text, value_text = self._schema_texts(table)
        key = b'{"schema":' + key_text + b',"payload":' + _compact(key_payload) + b"}"
        sequence = json.dumps(
            [
                None if position.last_commit_lsn is None else str(position.last_commit_lsn),
                str(position.lsn),
            ],
            separators=(",", ":"),
        )
        ts_us = position.commit_ts_us
        source = {
            "version": DEBEZIUM_VERSION,
            "connector": "postgresql",
            "name": self.server,
            "ts_ms": ts_us // 1000,
            "snapshot": position.snapshot,
            "db": self.database,
            "sequence": sequence,
            "ts_us": ts_us,
            "ts_ns": ts_us * 1000,
            "schema": self.schema,
            "table": table.name,
            "txId": position.tx_id,
            "lsn": position.lsn,
            "xmin": None,
        }
        payload = {
            # The default replica identity: no old row for an update, the key for a delete.
            "before": (
                deleted_image(table, change.before)
                if change.op == "d" and change.before is not None
                else None
            ),
            "after": None if change.after is None else encode_row(table, change.after),
            "source": source,
            "transaction": None,
            "op": op or change.op,
            "ts_ms": emitted_us // 1000,
            "ts_us": emitted_us,
            "ts_ns": emitted_us * 1000,
        }
        value = b'{"schema":' + value_text + b',"payload":' + _compact(payload) + b"}"
        headers = self._headers([key_change] if key_change is not None else [])
        topic = self.topic(table.name)
        out = [KafkaRecord(topic, key, value, headers)]
        if change.op == "d":
            out.append(KafkaRecord(topic, key, None, headers))
        return out

    def key_header(self, table: TableDef, row: Mapping[str, Any]) -> bytes:
        """The compact key payload Debezium puts in ``__debezium.newkey``/``oldkey``."""
        return _compact({name: encode_value(table.column(name), row[name]) for name in table.key})
