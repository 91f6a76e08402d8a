"""The local stack itself: health, idempotent `up`, and durability across down/up."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from confluent_kafka.schema_registry import Schema
from harness import Stack

from icefjord.local.smoke import iceberg_round_trip, kafka_round_trip, registry_round_trip
from shared.catalog import open_catalog
from shared.kafka import TopicRequest, ensure_topics, make_admin
from shared.registry import make_registry_client


def _local(stack: Stack) -> Any:
    if stack.local is None:
        pytest.skip("an external stack is under test; its lifecycle is not ours")
    return stack.local


def test_status_reports_every_component_healthy(stack: Stack) -> None:
    local = _local(stack)
    health = {h.name: h for h in local.status()}
    assert set(health) == {"kafka", "registry", "catalog", "spark"}
    assert all(h.healthy for h in health.values()), health
    assert health["kafka"].address == stack.kafka.bootstrap_servers
    assert health["registry"].address == stack.registry.url


def test_up_twice_leaves_running_components_alone(stack: Stack) -> None:
    local = _local(stack)
    pids = {c.name: c.process.pid() for c in local.components() if hasattr(c, "process")}
    report = local.up(progress=lambda message: None)
    assert report.started == ()
    assert set(report.already_running) == {"kafka", "registry", "catalog", "spark"}
    assert {c.name: c.process.pid() for c in local.components() if hasattr(c, "process")} == pids


def test_smoke_checks_pass(stack: Stack, spark: Any) -> None:
    assert "consumed 3 records" in kafka_round_trip(stack.kafka)
    assert "fetched schema id" in registry_round_trip(stack.registry)
    assert "Spark read 3" in iceberg_round_trip(stack.catalog)


def test_topics_schemas_and_tables_survive_down_and_up(
    stack: Stack, unique: Callable[[str], str]
) -> None:
    local = _local(stack)
    topic = unique("durable")
    ensure_topics(make_admin(stack.kafka), [TopicRequest(topic)])
    catalog = open_catalog(stack.catalog)
    namespace = unique("durable_ns")
    catalog.create_namespace(namespace)
    import pyarrow as pa

    table = catalog.create_table(f"{namespace}.t", pa.schema([pa.field("id", pa.int64())]))
    table.append(pa.table({"id": pa.array([1, 2, 3], pa.int64())}))
    # Registered last, right before `down`: a write the registry has not flushed is lost.
    subject = f"{topic}-value"
    schema = {"type": "record", "name": "D", "fields": [{"name": "id", "type": "long"}]}
    schema_id = make_registry_client(stack.registry).register_schema(
        subject, Schema(json.dumps(schema), "AVRO")
    )

    stopped = local.down()
    assert set(stopped) == {"kafka", "registry"}
    assert not any(h.healthy for h in local.status() if h.name in ("kafka", "registry"))
    local.up(progress=lambda message: None)

    assert topic in make_admin(stack.kafka).list_topics(timeout=10).topics
    fetched = make_registry_client(stack.registry).get_schema(schema_id)
    assert json.loads(fetched.schema_str or "{}") == schema
    reloaded = open_catalog(stack.catalog).load_table(f"{namespace}.t")
    assert sorted(reloaded.scan().to_arrow()["id"].to_pylist()) == [1, 2, 3]


def test_the_spark_jvm_runs_the_throughput_collector(spark: Any) -> None:
    """SparkSettings.java_options reach the driver JVM (pyspark starts it through
    spark-submit): its collectors are ParallelGC's, not G1's (Java 17's default)."""
    beans = spark.sparkContext._jvm.java.lang.management.ManagementFactory
    names = sorted(str(bean.getName()) for bean in beans.getGarbageCollectorMXBeans())
    assert names == ["PS MarkSweep", "PS Scavenge"]
