"""The service's per-record routing (decode -> normalize -> route), with plain values only."""

from __future__ import annotations

import io
import json
from datetime import date
from decimal import Decimal
from typing import Any

import fastavro
import pytest
from hypothesis import given
from hypothesis import strategies as st
from normalizer_support import COLUMNS, row

import contracts
from services.cdc_normalizer.config import NormalizerSettings
from services.cdc_normalizer.normalize import Operation
from services.cdc_normalizer.pipeline import (
    AvroWriter,
    DeadLetter,
    Emit,
    Router,
    Skip,
    SourceRecord,
    avro_writer,
    changes_topic,
    first_offsets,
    next_offsets,
    placeholder_datum,
)
from services.cdc_normalizer.table_schema import TableId, key_schema, value_schema
from shared.avro import WireFormatError, encode
from shared.headers import DEAD_LETTER_HEADERS

pytestmark = pytest.mark.unit

TOPIC = "shop.inventory.customers"
NOW_MS = 1_700_000_123_456

ROW = {"type": "struct", "optional": True, "name": "shop.inventory.customers.Value"}
SOURCE_SCHEMA = {
    "type": "struct",
    "optional": False,
    "field": "source",
    "fields": [
        {"type": "string", "optional": False, "field": name}
        for name in ("connector", "name", "db", "schema", "table")
    ]
    + [
        {"type": "int64", "optional": False, "field": "ts_ms"},
        {"type": "int64", "optional": True, "field": "lsn"},
        {"type": "int64", "optional": True, "field": "txId"},
    ],
}


def envelope(
    op: str, before: dict[str, Any] | None, after: dict[str, Any] | None, lsn: int
) -> bytes:
    schema = {
        "type": "struct",
        "optional": False,
        "name": "shop.inventory.customers.Envelope",
        "fields": [
            {**ROW, "field": "before", "fields": COLUMNS},
            {**ROW, "field": "after", "fields": COLUMNS},
            SOURCE_SCHEMA,
            {"type": "string", "optional": False, "field": "op"},
            {"type": "int64", "optional": True, "field": "ts_ms"},
        ],
    }
    payload = {
        "before": before,
        "after": after,
        "source": {
            "connector": "postgresql",
            "name": "shop",
            "db": "shop",
            "schema": "inventory",
            "table": "customers",
            "ts_ms": 1_700_000_000_000,
            "lsn": lsn,
            "txId": 42,
        },
        "op": op,
        "ts_ms": 1_700_000_000_500,
    }
    return json.dumps({"schema": schema, "payload": payload}).encode()


def key_bytes(customer_id: int) -> bytes:
    schema = {
        "type": "struct",
        "optional": False,
        "name": "shop.inventory.customers.Key",
        "fields": [{"type": "int32", "optional": False, "field": "id"}],
    }
    return json.dumps({"schema": schema, "payload": {"id": customer_id}}).encode()


def no_lookup(schema_id: int) -> AvroWriter:
    raise WireFormatError(f"schema id {schema_id} is not registered")


def router(**overrides: Any) -> Router:
    settings = {
        "lookup": no_lookup,
        "clock_ms": lambda: NOW_MS,
        "dead_letter_topic": "icefjord.deadletter",
        "max_record_bytes": 100_000,
    }
    return Router(**(settings | overrides))  # type: ignore[arg-type]


def record(key: bytes | None, value: bytes | None, offset: int = 7, **extra: Any) -> SourceRecord:
    return SourceRecord(TOPIC, 2, offset, key, value, timestamp_ms=NOW_MS - 1000, **extra)


def header_map(dead: DeadLetter) -> dict[str, bytes | None]:
    return dict(dead.headers)


def test_a_create_becomes_one_typed_change_on_the_table_topic() -> None:
    value = envelope("c", None, row(1001, "ann@example.com", 12345, 19000), lsn=500)
    routing = router().route(record(key_bytes(1001), value))
    assert isinstance(routing, Emit)
    (change,) = routing.changes
    assert change.topic == "icefjord.changes.inventory.customers"
    assert change.table == TableId("inventory", "customers")
    assert change.op is Operation.CREATE
    assert change.key == {"id": 1001}
    assert change.value["op"] == "CREATE"
    assert change.value["key"] == {"id": 1001}
    assert change.value["after"] == {
        "id": 1001,
        "email": "ann@example.com",
        "balance": Decimal("123.45"),
        "birth_date": date(2022, 1, 8),
    }
    assert change.value["source"]["origin_offset"] == "7"
    # The datums really fit the schemas the service registers.
    assert change.schema is not None
    fastavro.validation.validate(change.value, fastavro.parse_schema(value_schema(change.schema)))
    fastavro.validation.validate(change.key, fastavro.parse_schema(key_schema(change.schema)))


def test_a_delete_keeps_the_key_and_has_no_after() -> None:
    value = envelope("d", row(1001, "ann@example.com", 1, 1), None, lsn=900)
    routing = router().route(record(key_bytes(1001), value))
    assert isinstance(routing, Emit)
    (change,) = routing.changes
    assert change.op is Operation.DELETE
    assert change.key == {"id": 1001}
    assert change.value["after"] is None


def test_a_tombstone_writes_nothing() -> None:
    assert router().route(record(key_bytes(1001), None)) == Skip("tombstone")


def test_an_excluded_topic_is_skipped_before_decoding() -> None:
    settings = NormalizerSettings()
    routing = router(wants_topic=settings.wants_topic).route(
        SourceRecord("__debezium-heartbeat.shop", 0, 1, b"k", b"not json")
    )
    assert routing == Skip("excluded")


@pytest.mark.parametrize(
    ("value", "reason", "error_class"),
    [
        (b"{not json", "invalid_json", "InvalidJson"),
        (envelope("c", None, None, lsn=1), "missing_after", "MissingAfter"),
        (b"\x00\x00\x00\x00\x09garbage", "undecodable", "WireFormatError"),
    ],
)
def test_bad_input_is_dead_lettered_with_original_bytes_and_headers(
    value: bytes, reason: str, error_class: str
) -> None:
    original_headers = (("traceparent", b"00-abc"),)
    source = record(key_bytes(5), value, offset=31, headers=original_headers)
    routing = router().route(source)
    assert isinstance(routing, DeadLetter)
    assert routing.topic == "icefjord.deadletter"
    assert (routing.key, routing.value) == (source.key, source.value)
    assert routing.reason == reason
    headers = header_map(routing)
    assert headers["traceparent"] == b"00-abc"
    assert headers["icefjord.error.class"] == error_class.encode()
    assert headers["icefjord.error.message"]
    assert headers["icefjord.source.topic"] == TOPIC.encode()
    assert headers["icefjord.source.partition"] == b"2"
    assert headers["icefjord.source.offset"] == b"31"
    assert headers["icefjord.failed_at_ms"] == str(NOW_MS).encode()


def test_oversized_records_are_dead_lettered_without_parsing() -> None:
    value = envelope("c", None, row(1, "x" * 500, 1, 1), lsn=1)
    routing = router(max_record_bytes=len(value)).route(record(key_bytes(1), value))
    assert isinstance(routing, DeadLetter)
    assert routing.reason == "oversized"
    assert header_map(routing)["icefjord.error.class"] == b"RecordTooLarge"


def test_long_error_messages_are_cut_to_one_kib_of_utf8() -> None:
    from services.cdc_normalizer.pipeline import dead_letter

    dead = dead_letter(
        record(None, b"x"),
        topic="dl",
        reason="r",
        error_class="E",
        message="é" * 2000,
        failed_at_ms=1,
    )
    message = header_map(dead)["icefjord.error.message"]
    assert message is not None and len(message) <= 1024
    assert message.decode("utf-8") == "é" * 512


def test_header_names_are_the_catalogs() -> None:
    spec = next(t for t in contracts.topic_catalog() if t.name == "icefjord.deadletter")
    assert spec.headers == DEAD_LETTER_HEADERS


AVRO_ROW = {
    "type": "record",
    "name": "Value",
    "namespace": "shop.inventory.customers",
    "fields": [
        {"name": "id", "type": "int"},
        {"name": "email", "type": ["null", "string"], "default": None},
        {
            "name": "birth_date",
            "type": [
                "null",
                {"type": "int", "connect.version": 1, "connect.name": "io.debezium.time.Date"},
            ],
            "default": None,
        },
    ],
}
AVRO_ENVELOPE = {
    "type": "record",
    "name": "Envelope",
    "namespace": "shop.inventory.customers",
    "fields": [
        {"name": "before", "type": ["null", AVRO_ROW], "default": None},
        {"name": "after", "type": ["null", "Value"], "default": None},
        {
            "name": "source",
            "type": {
                "type": "record",
                "name": "Source",
                "namespace": "io.debezium.connector.postgresql",
                "fields": [
                    {"name": "connector", "type": "string"},
                    {"name": "db", "type": "string"},
                    {"name": "schema", "type": "string"},
                    {"name": "table", "type": "string"},
                    {"name": "ts_ms", "type": "long"},
                    {"name": "lsn", "type": ["null", "long"], "default": None},
                ],
            },
        },
        {"name": "op", "type": "string"},
        {"name": "ts_ms", "type": ["null", "long"], "default": None},
    ],
}
AVRO_KEY = {
    "type": "record",
    "name": "Key",
    "namespace": "shop.inventory.customers",
    "fields": [{"name": "id", "type": "int"}],
}


def test_avro_input_is_decoded_with_its_writer_schema_and_typed() -> None:
    writers = {11: avro_writer(json.dumps(AVRO_KEY)), 12: avro_writer(AVRO_ENVELOPE)}
    source = {
        "connector": "postgresql",
        "db": "shop",
        "schema": "inventory",
        "table": "customers",
        "ts_ms": 1_700_000_000_000,
        "lsn": 77,
    }
    value = encode(
        12,
        writers[12].parsed,
        {
            "before": None,
            "after": {"id": 9, "email": None, "birth_date": 19000},
            "source": source,
            "op": "u",
            "ts_ms": None,
        },
    )
    key = encode(11, writers[11].parsed, {"id": 9})
    routing = router(lookup=writers.__getitem__).route(record(key, value))
    assert isinstance(routing, Emit)
    (change,) = routing.changes
    assert change.op is Operation.UPDATE
    assert change.key == {"id": 9}
    assert change.value["after"] == {"id": 9, "email": None, "birth_date": date(2022, 1, 8)}


def test_an_unusable_writer_schema_dead_letters_its_records() -> None:
    broken = avro_writer('{"type": "record", "name": "X", "fields": [{"name": "a"}]}')
    assert broken.error is not None
    value = b"\x00\x00\x00\x00\x05" + b"\x02"
    routing = router(lookup=lambda _id: broken).route(record(None, value))
    assert isinstance(routing, DeadLetter)
    assert routing.reason == broken.error.reason


def test_a_truncate_has_a_null_kafka_key_and_a_placeholder_fits_its_key_record() -> None:
    value = json.dumps(
        {
            "schema": None,
            "payload": {
                "before": None,
                "after": None,
                "source": {
                    "connector": "postgresql",
                    "db": "shop",
                    "schema": "inventory",
                    "table": "customers",
                    "ts_ms": 1_700_000_000_000,
                    "lsn": 5,
                },
                "op": "t",
                "ts_ms": 1_700_000_000_001,
            },
        }
    ).encode()
    routing = router().route(record(None, value))
    assert isinstance(routing, Emit)
    (change,) = routing.changes
    assert change.op is Operation.TRUNCATE
    assert change.key is None
    # The service fills the value's required key record with type defaults.
    create = router().route(record(key_bytes(1), envelope("c", None, row(1, "a", 1, 1), lsn=1)))
    assert isinstance(create, Emit) and create.changes[0].schema is not None
    schema = value_schema(create.changes[0].schema)
    key_type = next(f["type"] for f in schema["fields"] if f["name"] == "key")
    filled = change.value | {"key": placeholder_datum(key_type)}
    assert filled["key"] == {"id": 0}
    buffer = io.BytesIO()
    fastavro.schemaless_writer(buffer, fastavro.parse_schema(schema), filled)


def test_placeholders_cover_logical_and_named_types() -> None:
    record_type = {
        "type": "record",
        "name": "K",
        "fields": [
            {"name": "d", "type": {"type": "bytes", "logicalType": "decimal", "precision": 4}},
            {"name": "u", "type": {"type": "string", "logicalType": "uuid"}},
            {"name": "e", "type": {"type": "enum", "name": "E", "symbols": ["B", "A"]}},
            {"name": "again", "type": ["null", "E"]},
            {"name": "f", "type": {"type": "fixed", "name": "F", "size": 3}},
            {"name": "when", "type": {"type": "long", "logicalType": "timestamp-micros"}},
        ],
    }
    datum = placeholder_datum(record_type)
    assert datum == {
        "d": Decimal(0),
        "u": "00000000-0000-0000-0000-000000000000",
        "e": "B",
        "again": None,
        "f": b"\x00\x00\x00",
        "when": 0,
    }
    fastavro.schemaless_writer(io.BytesIO(), fastavro.parse_schema(record_type), datum)


def test_changes_topic_names_are_kafka_legal() -> None:
    assert (
        changes_topic(TableId("inventory", "customers")) == "icefjord.changes.inventory.customers"
    )
    assert changes_topic(TableId("my schema", "a.b$c")) == "icefjord.changes.my_schema.a_b_c"


@given(
    st.lists(
        st.tuples(st.sampled_from(["a", "b"]), st.integers(0, 2), st.integers(0, 10_000)),
        min_size=1,
        max_size=40,
    )
)
def test_offsets_commit_after_the_last_and_resume_at_the_first(
    coordinates: list[tuple[str, int, int]],
) -> None:
    records = [SourceRecord(t, p, o, None, None) for t, p, o in coordinates]
    committed = next_offsets(records)
    resume = first_offsets(records)
    assert set(committed) == set(resume) == {(t, p) for t, p, _ in coordinates}
    for position in committed:
        offsets = [o for t, p, o in coordinates if (t, p) == position]
        assert committed[position] == max(offsets) + 1
        assert resume[position] == min(offsets)


def test_settings_select_debezium_topics_only() -> None:
    settings = NormalizerSettings()
    assert settings.wants_topic("shop.inventory.customers")
    assert not settings.wants_topic("icefjord.changes.inventory.customers")
    assert not settings.wants_topic("shop.transaction")
    assert not settings.wants_topic("__debezium-heartbeat.shop")
    assert not settings.wants_topic("shop.schema-changes.inventory")
    assert not settings.wants_topic("icefjord.x.y")
    with pytest.raises(ValueError, match="start with"):
        NormalizerSettings(include_pattern="shop\\..*")


_TOPIC_PARTS = st.sampled_from(
    ["shop", "icefjord", "changes", "inventory", "transaction", "__debezium-heartbeat", "x"]
)


@given(st.lists(st.lists(_TOPIC_PARTS, min_size=1, max_size=4).map(".".join), max_size=30))
def test_topic_filter_decides_like_the_settings(topics: list[str]) -> None:
    settings = NormalizerSettings(exclude_patterns=("^shop\\.inventory\\.x$", "\\.changes\\."))
    wanted = settings.topic_filter()
    wanted.SIZE = 3  # the memo is cleared along the way, and asked again after
    for topic in topics + topics:
        assert wanted(topic) == settings.wants_topic(topic), topic


def test_invalid_settings_exit_2_before_touching_kafka(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from services.cdc_normalizer.__main__ import EXIT_BAD_SETTINGS, main

    monkeypatch.setenv("ICEFJORD_NORMALIZER_INCLUDE_PATTERN", "no-caret")
    monkeypatch.setenv("ICEFJORD_NORMALIZER_KAFKA__BOOTSTRAP_SERVERS", "127.0.0.1:1")
    assert main() == EXIT_BAD_SETTINGS
    assert "include_pattern" in capsys.readouterr().err


def test_nested_settings_come_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ICEFJORD_NORMALIZER_KAFKA__BOOTSTRAP_SERVERS", "kafka:9092")
    monkeypatch.setenv("ICEFJORD_NORMALIZER_OUTPUT_PARTITIONS", "6")
    settings = NormalizerSettings()
    assert settings.kafka.bootstrap_servers == "kafka:9092"
    assert settings.metrics.port == 9401
    request = settings.changes_request("icefjord.changes.a.b")
    assert (request.partitions, request.replication_factor) == (6, 3)
    assert request.config["min.insync.replicas"] == "2"
    single = NormalizerSettings(topic_replication_factor=1).dead_letter_request()
    assert (single.name, single.replication_factor) == ("icefjord.deadletter", 1)
    assert single.config["min.insync.replicas"] == "1"


def test_metrics_bundle_registers_the_documented_series() -> None:
    from prometheus_client import CollectorRegistry

    from services.cdc_normalizer.metrics import NormalizerMetrics

    registry = CollectorRegistry()
    metrics = NormalizerMetrics.create(registry)
    metrics.dead_letters.labels(reason="invalid_json").inc()
    metrics.batch_seconds.observe(0.2)
    sample = registry.get_sample_value
    assert sample("icefjord_normalizer_dead_letters_total", {"reason": "invalid_json"}) == 1
    assert sample("icefjord_normalizer_batch_seconds_count") == 1
    with pytest.raises(ValueError, match="Duplicated"):
        NormalizerMetrics.create(registry)
