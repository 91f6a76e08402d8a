"""The demo's CDC source against the real stack: PostgreSQL -> Debezium on Kafka Connect ->
Kafka, then the normalizer and schema-watcher services (as processes) on those events.

Started once per module: a PostgreSQL cluster of our own (skipped where PostgreSQL is not
installed), a Kafka Connect worker with the Debezium Postgres connector, and a short
workload (inserts, updates, key changes, deletes, a table created, columns added, a column
widened). The generator's events are held to what Debezium really emitted.
"""

from __future__ import annotations

import json
import re
import threading
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition
from confluent_kafka.admin import ConfigResource
from harness import Stack, own_pipeline

from icefjord.demo.canonical import canonical
from icefjord.demo.envelopes import encode_row, envelope_schema, key_schema
from icefjord.demo.plan import Planner, WorkloadSpec
from icefjord.demo.progress import scrape_all, total
from icefjord.demo.source import PostgresDemoSource, SourceNames, retire_earlier_runs
from icefjord.demo.workload import WorkloadResult, paced
from icefjord.local.artifacts import ensure_connect_artifacts
from icefjord.local.connect import KafkaConnect
from icefjord.local.postgres import PostgresCluster
from icefjord.local.services import ServiceProcess, service_processes
from icefjord.local.settings import LocalSettings
from services.cdc_normalizer.config import NormalizerSettings
from services.cdc_normalizer.connect_schema import connect_schema_from_json
from services.cdc_normalizer.errors import InvalidSchema
from shared.avro import AvroCodec
from shared.events import ControlEvent, SchemaChange
from shared.kafka import make_admin
from shared.registry import make_registry_client

TABLES = ("customers", "orders", "payments", "shipments")


def _normalizer_float_bug() -> bool:
    """Kafka's JsonConverter spells FLOAT32/FLOAT64 "float"/"double"; True while the
    normalizer refuses those names (payments has real and double precision columns)."""
    try:
        connect_schema_from_json({"type": "float", "optional": True}, "probe")
    except InvalidSchema:
        return True
    return False


@dataclass
class Capture:
    settings: LocalSettings
    names: SourceNames
    planner: Planner
    result: WorkloadResult
    connect_start_s: float
    events: dict[str, list[Any]]
    connect: KafkaConnect
    topics: dict[str, int]  # this run's topics right after capture started -> partitions


def read_topic(
    stack: Stack, topic: str, isolation: str = "read_uncommitted", settle_s: float = 5.0
) -> list[Any]:
    """Every record of ``topic`` (all partitions), read until nothing new for ``settle_s``."""
    consumer = Consumer(
        stack.kafka.client_config()
        | {
            "group.id": f"reader-{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": False,
            "isolation.level": isolation,
        }
    )
    metadata = consumer.list_topics(topic, timeout=10)
    if topic not in metadata.topics or metadata.topics[topic].error is not None:
        consumer.close()
        return []
    partitions = sorted(metadata.topics[topic].partitions)
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in partitions])
    out: list[Any] = []
    quiet_since = time.monotonic()
    while time.monotonic() - quiet_since < settle_s:
        message = consumer.poll(0.5)
        if message is None or message.error() is not None:
            continue
        out.append(message)
        quiet_since = time.monotonic()
    consumer.close()
    return out


@pytest.fixture(scope="module")
def demo_settings(stack: Stack) -> Iterator[LocalSettings]:
    why = "needs the session's own local stack (Connect joins its broker)"
    with own_pipeline(stack, why, needs_postgres=True) as settings:
        yield settings


@pytest.fixture(scope="module")
def capture(stack: Stack, demo_settings: LocalSettings) -> Iterator[Capture]:
    s = demo_settings
    cluster = PostgresCluster(s)
    cluster.start()
    tag = uuid.uuid4().hex[:8]
    connect = KafkaConnect(
        s, ensure_connect_artifacts(s, lambda m: None), group_id=f"icefjord-connect-{tag}"
    )
    began = time.monotonic()
    connect.start()
    try:
        connect.wait_healthy(240)
        connect_start_s = time.monotonic() - began
        names = SourceNames(f"shop_{tag}", f"it{tag}")
        source = PostgresDemoSource(s, names, cluster, connect)
        planner = Planner(WorkloadSpec(rate=80, duration_s=8, initial_rows=15, seed=5))
        source.prepare(planner)
        topics = {
            name: len(topic.partitions)
            for name, topic in make_admin(stack.kafka).list_topics(timeout=10).topics.items()
            if f".{names.schema}." in name
        }
        result = source.run(paced(planner.changes(), threading.Event()))
        events = {t: read_topic(stack, names.topic(t)) for t in TABLES}
        print(
            f"\nConnect healthy in {connect_start_s:.1f} s; {result.row_changes} changes "
            f"at {result.changes_per_second:.0f}/s"
        )
        yield Capture(s, names, planner, result, connect_start_s, events, connect, topics)
        connect.delete(names.connector)
        source.close()
    finally:
        connect.stop()
        cluster.stop()


def _value(message: Any) -> Any:
    return None if message.value() is None else json.loads(message.value())


def test_debezium_events_have_the_envelope_shape_and_the_generators_values(
    capture: Capture,
) -> None:
    names, model = capture.names, capture.planner.model
    for table in TABLES:
        events = capture.events[table]
        assert events, f"no Debezium events for {table}"
        values = [_value(m) for m in events]
        ops = Counter(v["payload"]["op"] if v else "tombstone" for v in values)
        expected_ops = {"c", "u", "d"} | ({"r"} if table != "shipments" else set())
        assert expected_ops <= set(ops), (table, ops)
        assert ops["tombstone"] == ops["d"]
        previous: dict[str, Any] = {}
        for message, value in zip(events, values, strict=True):
            key = json.loads(message.key())
            assert set(key) == {"schema", "payload"}
            if value is None:
                continue
            key_text = json.dumps(key["payload"], sort_keys=True)
            assert set(value) == {"schema", "payload"}
            payload = value["payload"]
            assert set(payload) == {
                "before",
                "after",
                "source",
                "transaction",
                "op",
                "ts_ms",
                "ts_us",
                "ts_ns",
            }
            source = payload["source"]
            assert (source["connector"], source["schema"], source["table"]) == (
                "postgresql",
                names.schema,
                table,
            )
            # The default replica identity: an update has no before image, a delete's holds
            # the key of the row it removes.
            if payload["op"] == "u":
                assert payload["before"] is None
            if payload["op"] == "d":
                before, last = payload["before"], previous[key_text]
                key_columns = model.tables[table].key
                assert {c: before[c] for c in key_columns} == {c: last[c] for c in key_columns}
            previous[key_text] = payload["after"]
        definition = model.tables[table]
        last = values[-1] if values[-1] is not None else values[-2]
        assert last["schema"] == envelope_schema(names.topic_prefix, names.schema, definition)
        assert json.loads(events[-1].key())["schema"] == key_schema(
            names.topic_prefix, names.schema, definition
        )
        # The stream's final state is the model's rows in the generator's encoding.
        final: dict[str, Any] = {}
        for message, value in zip(events, values, strict=True):
            if value is not None:
                key = json.dumps(json.loads(message.key())["payload"], sort_keys=True)
                final[key] = value["payload"]["after"]
        live = {k: v for k, v in final.items() if v is not None}
        expected = {}
        for row in model.rows[table].values():
            encoded = encode_row(definition, row)
            expected[json.dumps({k: encoded[k] for k in definition.key}, sort_keys=True)] = encoded
        assert live.keys() == expected.keys(), table
        for key, after in live.items():
            assert {c: after.get(c) for c in expected[key]} == expected[key], (table, key)


def test_key_changes_and_schema_changes_reach_kafka(capture: Capture) -> None:
    customers = [_value(m) for m in capture.events["customers"]]
    headers = [dict(m.headers() or []) for m in capture.events["customers"]]
    assert any("__debezium.newkey" in h for h in headers)
    assert any("__debezium.oldkey" in h for h in headers)
    fields = [[f["field"] for f in v["schema"]["fields"][1]["fields"]] for v in customers if v]
    assert "loyalty_points" not in fields[0] and "loyalty_points" in fields[-1]
    orders = [_value(m) for m in capture.events["orders"] if m.value() is not None]
    quantity_types = [
        next(f["type"] for f in v["schema"]["fields"][1]["fields"] if f["field"] == "quantity")
        for v in orders
    ]
    assert quantity_types[0] == "int32" and quantity_types[-1] == "int64"
    assert capture.connect_start_s < 240


def test_capture_starts_with_the_tables_topics_made_as_their_owners_would(
    stack: Stack, capture: Capture
) -> None:
    """Created before the connector, not found later by the normalizer's and the writer's
    topic discovery; no normalizer runs for this schema while the fixture starts capture."""
    normalizer = NormalizerSettings(topic_replication_factor=1)
    admin = make_admin(stack.kafka)
    for table in (t.name for t in capture.planner.initial_tables):
        assert capture.topics[capture.names.topic(table)] == 1  # Connect's default here
        changes = f"icefjord.changes.{capture.names.schema}.{table}"
        assert capture.topics[changes] == normalizer.output_partitions
        wanted = normalizer.changes_request(changes).config
        resource = ConfigResource("topic", changes)
        described = admin.describe_configs([resource])[resource].result(timeout=10)
        assert wanted and {k: described[k].value for k in wanted} == wanted


def _wait_normalized(service: ServiceProcess, expected: int, timeout_s: float = 180) -> float:
    deadline = time.monotonic() + timeout_s
    seen = 0.0
    while time.monotonic() < deadline:
        samples = scrape_all({"n": service.address()}, 0).get("n")
        seen = total(samples, "icefjord_normalizer_records_in_total") or 0.0
        lag = total(samples, "icefjord_normalizer_consumer_lag")
        if seen >= expected and lag == 0:
            return seen
        time.sleep(1)
    return seen


def _unwrap(value: Any) -> Any:
    return value[1] if isinstance(value, tuple) else value


def test_normalizer_and_watcher_services_turn_the_events_into_changes(
    stack: Stack, capture: Capture
) -> None:
    names, model = capture.names, capture.planner.model
    tag = uuid.uuid4().hex[:8]
    dead_letter_topic, control_topic = f"deadletter_{tag}", f"control_{tag}"
    schema_re = re.escape(names.schema)
    services = service_processes(
        capture.settings,
        ["normalizer", "watcher"],
        source_topic_prefix=names.topic_prefix,
        extra_env={
            "normalizer": {
                "ICEFJORD_NORMALIZER_DEAD_LETTER_TOPIC": dead_letter_topic,
                "ICEFJORD_NORMALIZER_GROUP_ID": f"normalizer-{tag}",
                "ICEFJORD_NORMALIZER_TRANSACTIONAL_ID": f"normalizer-{tag}",
            },
            "watcher": {
                "ICEFJORD_WATCHER_CONTROL_TOPIC": control_topic,
                "ICEFJORD_WATCHER_SUBJECT_PATTERN": rf"^icefjord\.changes\.{schema_re}\..+-value$",
                "ICEFJORD_WATCHER_POLL_INTERVAL_S": "1",
            },
        },
    )
    normalizer, watcher = services
    for service in services:
        service.start()
    try:
        source_records = sum(len(capture.events[t]) for t in TABLES)
        seen = _wait_normalized(normalizer, source_records)
        assert seen == source_records, normalizer.log_tail()
        time.sleep(3)  # the watcher polls every second
        watcher_samples = scrape_all({"w": watcher.address()}, 0).get("w")
        assert watcher.check().healthy, watcher.log_tail()
    finally:
        for service in services:
            service.stop()

    codec = AvroCodec(make_registry_client(stack.registry))
    for table in TABLES:
        definition = model.tables[table]
        upstream = [m for m in capture.events[table] if m.value() is not None]
        messages = read_topic(stack, f"icefjord.changes.{names.schema}.{table}", "read_committed")
        if table == "payments" and not messages and _normalizer_float_bug():
            continue  # checked last, below
        changes = [codec.deserialize(m.value())[1] for m in messages]
        assert len(changes) == len(upstream), table  # one change per Debezium event
        state: dict[Any, Any] = {}
        for change in sorted(changes, key=lambda c: c["position"]):
            key = tuple(change["key"][k] for k in definition.key)
            after = _unwrap(change["after"])
            if change["op"] == "DELETE":
                state.pop(key, None)
            else:
                state[key] = after
        expected = {
            tuple(canonical(definition.column(k).kind, row[k]) for k in definition.key): row
            for row in model.rows[table].values()
        }
        got = {
            tuple(
                canonical(definition.column(k).kind, v)
                for k, v in zip(definition.key, key, strict=True)
            ): row
            for key, row in state.items()
        }
        assert got.keys() == expected.keys(), table
        for key, row in expected.items():
            for column in definition.columns:
                assert canonical(column.kind, got[key].get(column.name)) == canonical(
                    column.kind, row[column.name]
                ), (table, key, column.name)

    plans = total(
        watcher_samples,
        "icefjord_watcher_plans_total",
        lambda labels: labels.get("verdict") == "APPLY",
    )
    assert plans is not None and plans >= 2
    events = [codec.deserialize(m.value())[1] for m in read_topic(stack, control_topic)]
    changes_seen = [ControlEvent.from_record(e) for e in events]
    operations = {
        (event.table.split(".")[-1], op.kind.value, tuple(op.path))
        for event in changes_seen
        if isinstance(event.payload, SchemaChange)
        for op in event.payload.operations
    }
    assert ("customers", "ADD_COLUMN", ("loyalty_points",)) in operations
    assert ("customers", "ADD_COLUMN", ("nickname",)) in operations
    assert ("orders", "WIDEN_TYPE", ("quantity",)) in operations

    dead = read_topic(stack, dead_letter_topic, "read_committed")
    by_topic: dict[str, list[str]] = defaultdict(list)
    for message in dead:
        headers = dict(message.headers() or [])
        topic = headers.get("icefjord.source.topic", b"?").decode()
        by_topic[topic].append(headers.get("icefjord.error.message", b"").decode()[:200])
    others = {t: v for t, v in by_topic.items() if t != names.topic("payments")}
    assert others == {}, "valid data produced dead letters"
    if by_topic and _normalizer_float_bug():
        pytest.xfail("cdc-normalizer rejects JsonConverter's 'float'/'double' type names")
    assert by_topic == {}, "valid data produced dead letters"


def _comparable(message: Any, server: str) -> tuple[Any, ...]:
    """An event without what differs by nature (LSNs, times, the server name)."""
    key = json.loads(message.key())
    value = _value(message)
    headers = sorted(
        (k, v)
        for k, v in (message.headers() or [])
        if k.startswith("__debezium.") and k != "__debezium.context.connectorLogicalName"
    )
    if value is None:
        return ("tombstone", json.dumps(key["payload"], sort_keys=True), headers)
    payload = value["payload"]
    schema = json.loads(json.dumps(value["schema"]).replace(f'"{server}.', '"SERVER.'))
    source = {k: type(v).__name__ for k, v in payload["source"].items()}
    return (
        payload["op"],
        json.dumps(key["payload"], sort_keys=True),
        json.dumps(payload["before"], sort_keys=True),
        json.dumps(payload["after"], sort_keys=True),
        schema,
        source,
        headers,
    )


def test_the_generator_emits_what_debezium_emitted(stack: Stack, capture: Capture) -> None:
    """The same plan (same seed) played by the generator gives, table by table, the same
    events as Debezium: ops, keys, before and after images, schemas, headers."""
    from icefjord.demo.source import GeneratedDemoSource

    names = SourceNames(capture.names.schema, f"gen{uuid.uuid4().hex[:8]}")
    generated = GeneratedDemoSource(capture.settings, names)
    planner = Planner(capture.planner.spec)
    generated.prepare(planner)
    generated.run(planner.changes())  # unpaced: as fast as Kafka takes it
    generated.close()
    for table in TABLES:
        ours = [_comparable(m, names.topic_prefix) for m in read_topic(stack, names.topic(table))]
        theirs = [_comparable(m, capture.names.topic_prefix) for m in capture.events[table]]
        # The snapshot's row order is the database's; compare it as a set.
        assert sorted(map(repr, (e for e in ours if e[0] == "r"))) == sorted(
            map(repr, (e for e in theirs if e[0] == "r"))
        ), table
        assert [e for e in ours if e[0] != "r"] == [e for e in theirs if e[0] != "r"], table


def canonical_rows(table: Any) -> list[str]:
    return sorted(
        repr([canonical(c.kind, row.get(c.name)) for c in table.columns]) for row in table.rows
    )


def test_set_based_updates_change_exactly_the_planned_rows(capture: Capture) -> None:
    """The benchmark's set-based statements (``UPDATE ... FROM unnest(<keys>)``) on bigint,
    uuid and composite (uuid, integer) keys leave PostgreSQL equal to the planner's model."""
    from icefjord.demo.plan import UpdateMany
    from icefjord.demo.verify import read_postgres, source_from_model
    from icefjord.demo.workload import PostgresWorkload

    schema = f"set_{uuid.uuid4().hex[:8]}"
    planner = Planner(WorkloadSpec(initial_rows=120, seed=9))
    workload = PostgresWorkload(PostgresCluster(capture.settings).conninfo(), schema)
    try:
        workload.create_schema(planner.initial_tables, f"pub_{schema}")
        workload.run(planner.seed())
        set_based = list(planner.steady(20_000.0, 0.5, rows_per_statement=40))
        ops = [op for tx in set_based for op in tx.ops]
        assert ops and all(isinstance(op, UpdateMany) for op in ops)
        result = workload.run(set_based)
        assert result.updates == sum(len(op.keys) for op in ops if isinstance(op, UpdateMany))
        expected = {t.name: t for t in source_from_model(planner.model, schema)}
        actual = {t.name: t for t in read_postgres(workload.conninfo, schema)}
        assert set(actual) == set(expected) == {"customers", "orders", "payments"}
        for name, table in expected.items():
            assert canonical_rows(actual[name]) == canonical_rows(table), name
    finally:
        workload.drop(f"pub_{schema}", f"slot_{schema}")
        workload.close()


def test_unchanged_toasted_values_under_the_default_identity_become_unchanged_columns(
    stack: Stack, capture: Capture
) -> None:
    """PostgreSQL's default replica identity logs no unchanged TOASTed value: Debezium sends
    its placeholder instead, in each column type's own form. The normalizer turns an update
    carrying it into a change that names the columns ``unchanged`` (the writer keeps the
    stored values); an insert always carries the values themselves."""
    import os

    import psycopg

    from services.cdc_normalizer.normalize import DebeziumMessage, Normalized, Origin, normalize

    table = f"docs_{uuid.uuid4().hex[:6]}"
    qualified = f'"{capture.names.schema}"."{table}"'
    body, blob = os.urandom(6000).hex(), os.urandom(9000)
    with psycopg.connect(PostgresCluster(capture.settings).conninfo(), autocommit=True) as conn:
        conn.execute(
            f"CREATE TABLE {qualified} (id bigint PRIMARY KEY, n integer NOT NULL,"
            " body text, blob bytea, doc jsonb)"
        )
        for column in ("body", "blob", "doc"):  # out of line, uncompressed: always TOASTed
            conn.execute(f"ALTER TABLE {qualified} ALTER COLUMN {column} SET STORAGE EXTERNAL")
        conn.execute(
            f"INSERT INTO {qualified} VALUES (1, 0, %s, %s, %s::jsonb)",
            (body, blob, json.dumps({"pad": body})),
        )
        conn.execute(f"UPDATE {qualified} SET n = 1 WHERE id = 1")
        conn.execute(f"UPDATE {qualified} SET n = 2, body = 'short' WHERE id = 1")
    topic = capture.names.topic(table)
    deadline = time.monotonic() + 60
    messages: list[Any] = []
    while len(messages) < 3 and time.monotonic() < deadline:
        messages = [m for m in read_topic(stack, topic, settle_s=2.0) if m.value() is not None]
    assert len(messages) == 3, f"{len(messages)} events on {topic}"
    changes = []
    for m in sorted(messages, key=lambda m: m.offset()):
        result = normalize(
            DebeziumMessage(m.key(), m.value(), Origin(m.topic(), m.partition(), m.offset()))
        )
        assert isinstance(result, Normalized), result
        changes.append(result.changes[0])
    inserted, untouched, partly = changes
    assert inserted.unchanged is None and inserted.after is not None
    assert (inserted.after["body"], inserted.after["blob"]) == (body, blob)
    assert untouched.unchanged == ("body", "blob", "doc")
    assert untouched.after is not None and untouched.after["n"] == 1
    assert untouched.after["body"] is None and untouched.after["blob"] is None
    assert partly.unchanged == ("blob", "doc")
    assert partly.after is not None and partly.after["body"] == "short"


def test_a_restarted_worker_is_healthy_once_it_knows_its_connectors(capture: Capture) -> None:
    """Healthy means the worker has read its config topic: a check that only saw the REST
    port answer could list no connectors, and the demo would miss the earlier runs' ones
    it retires, which then started a moment later and ran beside the new one."""
    connect = capture.connect
    connect.stop()
    connect.start()
    connect.wait_healthy(240)
    assert capture.names.connector in connect.request("GET", "/connectors")


def test_discarding_a_source_drops_its_connector_slot_publication_and_schema(
    capture: Capture,
) -> None:
    """What a benchmark does once its tables are verified: nothing of the run is left in
    PostgreSQL or on the worker, and the capture of another run goes on."""
    import psycopg

    cluster = PostgresCluster(capture.settings)
    tag = uuid.uuid4().hex[:8]
    names = SourceNames(f"gone_{tag}", capture.names.topic_prefix)
    source = PostgresDemoSource(capture.settings, names, cluster, capture.connect)
    try:
        source.prepare(Planner(WorkloadSpec(initial_rows=5, seed=2)))
        with psycopg.connect(cluster.conninfo(), autocommit=True) as conn:
            slot = "SELECT 1 FROM pg_replication_slots WHERE slot_name = %s"
            assert conn.execute(slot, (names.slot,)).fetchone() is not None
            source.discard()
            assert conn.execute(slot, (names.slot,)).fetchone() is None
            publication = "SELECT 1 FROM pg_publication WHERE pubname = %s"
            assert conn.execute(publication, (names.publication,)).fetchone() is None
            schema = "SELECT 1 FROM pg_namespace WHERE nspname = %s"
            assert conn.execute(schema, (names.schema,)).fetchone() is None
            assert conn.execute(schema, (capture.names.schema,)).fetchone() is not None
        registered = capture.connect.request("GET", "/connectors")
        assert names.connector not in registered and capture.names.connector in registered
    finally:
        source.close()


def test_retiring_earlier_runs_drops_their_slots_and_orphaned_ones(capture: Capture) -> None:
    """The module's last test: it removes the module's connector. An inactive slot named
    like ours that no registered connector reads (its connector was forgotten with Kafka's
    data) holds WAL forever, so it goes too; a slot not named like ours stays."""
    import psycopg

    cluster = PostgresCluster(capture.settings)
    tag = uuid.uuid4().hex[:8]
    orphan, foreign = f"icefjord_orphan_{tag}", f"other_{tag}"
    with psycopg.connect(cluster.conninfo(), autocommit=True) as conn:
        for slot in (orphan, foreign):
            conn.execute("SELECT pg_create_logical_replication_slot(%s, 'pgoutput')", (slot,))
        try:
            retired = retire_earlier_runs(capture.connect, cluster)
            slots = {row[0] for row in conn.execute("SELECT slot_name FROM pg_replication_slots")}
            assert capture.names.connector in retired and f"slot {orphan}" in retired
            assert capture.names.connector not in capture.connect.request("GET", "/connectors")
            assert capture.names.slot not in slots and orphan not in slots
            assert foreign in slots
        finally:
            conn.execute(
                "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots"
                " WHERE slot_name = %s",
                (foreign,),
            )
