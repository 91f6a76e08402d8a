"""Proves each real component works: Kafka round trip, registry round trip, Iceberg from
Spark and from pyiceberg. Used by ``make demo`` and ``icefjord local smoke``."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass

from icefjord.local.settings import LocalSettings
from shared.settings import CatalogSettings, KafkaSettings, RegistrySettings


@dataclass(frozen=True)
class Check:
    """One smoke check's outcome."""

    component: str
    what: str
    ok: bool
    detail: str
    seconds: float


def _timed(component: str, what: str, action: Callable[[], str]) -> Check:
    began = time.monotonic()
    try:
        detail = action()
        ok = True
    except Exception as exc:
        detail, ok = f"{type(exc).__name__}: {exc}", False
    return Check(component, what, ok, detail, time.monotonic() - began)


def kafka_round_trip(kafka: KafkaSettings) -> str:
    """Create a topic, produce three records, consume them back."""
    from shared.kafka import TopicRequest, ensure_topics, make_admin, make_consumer, make_producer

    topic = f"icefjord.smoke.{uuid.uuid4().hex[:8]}"
    admin = make_admin(kafka)
    ensure_topics(admin, [TopicRequest(topic)])
    producer = make_producer(kafka)
    sent = [f"hello-{i}".encode() for i in range(3)]
    for value in sent:
        producer.produce(topic, key=b"k", value=value)
    if producer.flush(15):
        raise RuntimeError("records not acknowledged")
    consumer = make_consumer(kafka, f"smoke-{uuid.uuid4().hex[:8]}")
    consumer.subscribe([topic])
    got: list[bytes] = []
    deadline = time.monotonic() + 20
    while len(got) < len(sent) and time.monotonic() < deadline:
        message = consumer.poll(1.0)
        if message is not None and message.error() is None and message.value() is not None:
            got.append(message.value())
    consumer.close()
    admin.delete_topics([topic])
    if got != sent:
        raise RuntimeError(f"sent {sent}, consumed {got}")
    return f"produced and consumed {len(got)} records on {topic}"


def registry_round_trip(registry: RegistrySettings) -> str:
    """Register a schema under a fresh subject and fetch it back by id and by version."""
    from confluent_kafka.schema_registry import Schema

    from shared.registry import make_registry_client

    client = make_registry_client(registry)
    subject = f"icefjord.smoke.{uuid.uuid4().hex[:8]}-value"
    schema = {"type": "record", "name": "Smoke", "fields": [{"name": "id", "type": "long"}]}
    schema_id = client.register_schema(subject, Schema(json.dumps(schema), "AVRO"))
    by_id = json.loads(client.get_schema(schema_id).schema_str or "{}")
    latest = client.get_latest_version(subject)
    client.delete_subject(subject, permanent=False)
    if by_id != schema or latest.schema_id != schema_id:
        raise RuntimeError(f"registered {schema}, fetched {by_id}")
    return f"registered and fetched schema id {schema_id} (subject {subject})"


def iceberg_round_trip(catalog: CatalogSettings) -> str:
    """Create a table and write rows with Spark, read them with pyiceberg, append with
    pyiceberg, and read everything back with Spark."""
    import pyarrow as pa

    from shared.catalog import open_catalog
    from shared.spark import SparkSettings, build_spark_session

    spark = build_spark_session("icefjord-smoke", SparkSettings(master="local[2]"), catalog)
    name = f"smoke_{uuid.uuid4().hex[:8]}"
    spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {catalog.name}.icefjord_smoke")
    full = f"{catalog.name}.icefjord_smoke.{name}"
    spark.sql(f"CREATE TABLE {full} (id BIGINT, label STRING) USING iceberg")
    spark.sql(f"INSERT INTO {full} VALUES (1, 'from spark'), (2, 'from spark')")
    table = open_catalog(catalog).load_table(f"icefjord_smoke.{name}")
    seen_by_pyiceberg = table.scan().to_arrow().num_rows
    table.append(
        pa.table(
            {"id": pa.array([3], pa.int64()), "label": pa.array(["from pyiceberg"], pa.string())}
        )
    )
    rows = spark.sql(f"SELECT id, label FROM {full} ORDER BY id").collect()
    spark.sql(f"DROP TABLE {full} PURGE")
    if seen_by_pyiceberg != 2 or [r["id"] for r in rows] != [1, 2, 3]:
        raise RuntimeError(f"pyiceberg saw {seen_by_pyiceberg} rows, Spark read {rows}")
    return f"Spark wrote 2 rows, pyiceberg read 2 and appended 1, Spark read {len(rows)}"


def run_smoke(settings: LocalSettings, report: Callable[[Check], None]) -> list[Check]:
    """Run every check against the local stack of ``settings``; report each as it ends."""
    kafka = settings.kafka_settings()
    registry = settings.registry_settings()
    catalog = CatalogSettings(name=settings.catalog_name, local_state_dir=settings.state)
    checks = []
    for component, what, action in (
        ("kafka", "produce and consume", lambda: kafka_round_trip(kafka)),
        ("registry", "register and fetch a schema", lambda: registry_round_trip(registry)),
        ("iceberg", "Spark and pyiceberg on one table", lambda: iceberg_round_trip(catalog)),
    ):
        check = _timed(component, what, action)
        report(check)
        checks.append(check)
    return checks
