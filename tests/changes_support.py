"""Change records for writer tests: the normalizer's wire shape, produced to a real topic.

The schema follows the change-record contract (op, position, source_ts_ms, tx_id, source,
key, after, unchanged) exactly as cdc-normalizer registers it; tests produce through the real
registry and Kafka, so the writer reads what it reads in production.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import decimal
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from confluent_kafka import Producer
from harness import Stack

from shared.avro import AvroCodec
from shared.control import ControlReader
from shared.kafka import make_consumer
from shared.registry import make_registry_client

OPS = ("CREATE", "UPDATE", "DELETE", "READ", "TRUNCATE")


def change_schema(
    namespace: str, table: str, extra: Sequence[Mapping[str, Any]] = ()
) -> dict[str, Any]:
    """A change-record schema for a table keyed by ``id`` with a few typed columns."""
    title = table.title().replace("_", "")
    row_fields: list[dict[str, Any]] = [
        {"name": "id", "type": "long"},
        {"name": "name", "type": ["null", "string"], "default": None},
        {
            "name": "amount",
            "type": [
                "null",
                {"type": "bytes", "logicalType": "decimal", "precision": 12, "scale": 2},
            ],
            "default": None,
        },
        {
            "name": "updated_at",
            "type": ["null", {"type": "long", "logicalType": "timestamp-micros"}],
            "default": None,
        },
        {"name": "tags", "type": ["null", {"type": "array", "items": "string"}], "default": None},
        *extra,
    ]
    schema = change_record_schema(
        title, namespace, [{"name": "id", "type": "long"}], row_fields, ["id"]
    )
    return {**schema, "icefjord.table": f"{namespace}.{table}"}


def change_record_schema(
    title: str,
    namespace: str,
    key_fields: Sequence[Mapping[str, Any]],
    row_fields: Sequence[Mapping[str, Any]],
    keys: Sequence[str],
) -> dict[str, Any]:
    """The change-record envelope around a table's key and row fields."""
    row = {"type": "record", "name": f"{title}Row", "fields": list(row_fields)}
    return {
        "type": "record",
        "name": f"{title}Change",
        "namespace": f"io.icefjord.changes.{namespace}",
        "icefjord.key": list(keys),
        "fields": [
            {
                "name": "op",
                "type": {
                    "type": "enum",
                    "name": "Operation",
                    "namespace": "io.icefjord",
                    "symbols": list(OPS),
                },
            },
            {"name": "position", "type": "string"},
            {"name": "source_ts_ms", "type": "long"},
            {"name": "tx_id", "type": ["null", "string"], "default": None},
            {"name": "source", "type": {"type": "map", "values": "string"}},
            {
                "name": "key",
                "type": {"type": "record", "name": f"{title}Key", "fields": list(key_fields)},
            },
            {
                "name": "after",
                "type": ["null", row],
                "default": None,
            },
            {
                "name": "unchanged",
                "type": ["null", {"type": "array", "items": "string"}],
                "default": None,
            },
        ],
    }


@dataclass(frozen=True)
class Event:
    """One change in a test history: ``seq`` orders the changes of the source database."""

    seq: int
    op: str
    key: int
    name: str | None = None
    amount: str | None = None
    unchanged: tuple[str, ...] = ()
    """An UPDATE that leaves these columns as they are (an unchanged TOASTed value): the
    record carries a null stand-in there and names them in ``unchanged``."""

    @property
    def position(self) -> str:
        return f"{self.seq:020d}"

    def row(self, extra: Mapping[str, Any] | None = None) -> dict[str, Any] | None:
        if self.op in ("DELETE", "TRUNCATE"):
            return None
        row = {
            "id": self.key,
            "name": self.name,
            "amount": None if self.amount is None else decimal.Decimal(self.amount),
            "updated_at": dt.datetime(2026, 1, 1, tzinfo=dt.UTC) + dt.timedelta(seconds=self.seq),
            "tags": [f"t{self.seq % 3}", "ü"],
            **(extra or {}),
        }
        for column in self.unchanged:
            row[column] = None
        return row


def record(
    event: Event, source_ts_ms: int, extra: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    return {
        "op": event.op,
        "position": event.position,
        "source_ts_ms": source_ts_ms,
        "tx_id": None,
        "source": {"connector": "test"},
        "key": {"id": event.key if event.op != "TRUNCATE" else 0},
        "after": event.row(extra),
        "unchanged": list(event.unchanged) or None,
    }


class ChangeProducer:
    """Produces change records keyed by primary key, as the normalizer does."""

    def __init__(self, producer: Producer, codec: AvroCodec, topic: str) -> None:
        self.producer = producer
        self.codec = codec
        self.topic = topic
        self.key_schema = {
            "type": "record",
            "name": "Key",
            "namespace": "io.icefjord.test",
            "fields": [{"name": "id", "type": "long"}],
        }

    def send(
        self,
        schema: Mapping[str, Any],
        events: Iterable[Event],
        *,
        source_ts_ms: int | None = None,
        extra: Mapping[str, Any] | None = None,
        partition: int | None = None,
    ) -> int:
        """Produce ``events`` in order; to ``partition`` when given (a test that needs to
        know where each key travels keeps a key in one partition), else by key."""
        count = 0
        for event in events:
            now_ms = (
                source_ts_ms
                if source_ts_ms is not None
                else int(dt.datetime.now(dt.UTC).timestamp() * 1000)
            )
            value = self.codec.serialize(
                f"{self.topic}-value", schema, record(event, now_ms, extra)
            )
            key = None
            if event.op != "TRUNCATE":
                key = self.codec.serialize(f"{self.topic}-key", self.key_schema, {"id": event.key})
            if partition is None:
                self.producer.produce(self.topic, key=key, value=value)
            else:
                self.producer.produce(self.topic, key=key, value=value, partition=partition)
            count += 1
            if count % 1000 == 0:
                self.producer.poll(0)
        assert self.producer.flush(30) == 0
        return count


def final_state(history: Iterable[Event]) -> dict[int, Event]:
    """The source table after ``history`` in source order: the plain model. A partial update
    keeps the earlier values of its unchanged columns."""
    table: dict[int, Event] = {}
    for event in sorted(history, key=lambda e: e.seq):
        if event.op == "TRUNCATE":
            table.clear()
        elif event.op == "DELETE":
            table.pop(event.key, None)
        else:
            held = table.get(event.key)
            kept = {c: getattr(held, c) for c in event.unchanged} if held is not None else {}
            table[event.key] = dataclasses.replace(event, unchanged=(), **kept)
    return table


POSITION = "_icefjord_position"


def table_rows(spark: Any, table: str) -> dict[int, dict[str, Any]]:
    rows = spark.sql(f"SELECT * FROM icefjord.{table}").collect()
    ids = [row["id"] for row in rows]
    assert len(ids) == len(set(ids)), f"duplicate keys in {table}"
    return {row["id"]: row.asDict() for row in rows}


def assert_equal_to_model(spark: Any, table: str, history: list[Event]) -> None:
    model = final_state(history)
    rows = table_rows(spark, table)
    assert set(rows) == set(model), (
        f"keys differ: missing {set(model) - set(rows)}, extra {set(rows) - set(model)}"
    )
    for key, event in model.items():
        row = rows[key]
        assert row[POSITION] == event.position, key
        assert row["name"] == event.name
        assert row["amount"] == (None if event.amount is None else Decimal(event.amount))
        assert row["tags"] == [f"t{event.seq % 3}", "ü"]


def equal_to_model(spark: Any, table: str, history: list[Event]) -> bool:
    """Whether ``table`` exists and equals ``history``'s final state (for waits)."""
    try:
        assert_equal_to_model(spark, table, history)
    except AssertionError:
        return False
    except Exception:  # the table not made yet
        return False
    return True


def assert_readable_by_pyiceberg(stack: Stack, spark: Any, table: str) -> None:
    """pyiceberg scans ``table`` to the rows Spark reads (it refuses equality deletes, and
    applies deletion vectors)."""
    from shared.catalog import open_catalog

    columns = ("id", POSITION, "name", "amount", "tags")
    scanned = open_catalog(stack.catalog).load_table(table).scan().to_arrow().to_pylist()
    read = {r["id"]: tuple(r[c] for c in columns) for r in scanned}
    assert len(read) == len(scanned), f"duplicate keys in {table} as pyiceberg reads it"
    expected = {k: tuple(r[c] for c in columns) for k, r in table_rows(spark, table).items()}
    assert read == expected


def control_events(stack: Stack, topic: str) -> list[Any]:
    consumer = make_consumer(stack.kafka, f"check-{uuid.uuid4().hex[:8]}")
    reader = ControlReader(consumer, AvroCodec(make_registry_client(stack.registry)), topic)
    reader.subscribe()
    out: list[Any] = []
    idle = 0
    while idle < 3:
        events = reader.poll(timeout=2.0)
        idle = 0 if events else idle + 1
        out.extend(e.payload for e in events)
    consumer.close()
    return out
