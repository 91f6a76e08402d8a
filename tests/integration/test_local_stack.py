"""The local stack itself: health, idempotent `up`, and durability across down/up."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.schema_registry import Schema
from harness import Stack

from icefjord.local.smoke import iceberg_round_trip, kafka_round_trip, registry_round_trip
from shared.catalog import catalog_properties, is_secret, open_catalog, spark_catalog_conf
from shared.kafka import TopicRequest, ensure_topics, make_admin
from shared.registry import make_registry_client


def _local(stack: Stack) -> Any:
    if stack.local is None:
        pytest.skip("an external stack is under test; its lifecycle is not ours")
    return stack.local


def _components(local: Any) -> set[str]:
    """The stack's components: the S3 server too when the warehouse is there."""
    s3 = {"s3"} if local.settings.warehouse_store == "s3" else set()
    return {"kafka", "registry", "catalog", "spark"} | s3


def test_status_reports_every_component_healthy(stack: Stack) -> None:
    local = _local(stack)
    health = {h.name: h for h in local.status()}
    # The catalog's PostgreSQL is the demo's, shown among the demo's components.
    postgres = {"postgres"} if local.settings.catalog_store == "postgres" else set()
    assert set(health) == _components(local) | postgres
    assert all(h.healthy for h in health.values()), health
    assert health["kafka"].address == stack.kafka.bootstrap_servers
    assert health["registry"].address == stack.registry.url


def test_up_twice_leaves_running_components_alone(stack: Stack) -> None:
    local = _local(stack)
    pids = {c.name: c.process.pid() for c in local.components() if hasattr(c, "process")}
    report = local.up(progress=lambda message: None)
    assert report.started == ()
    assert set(report.already_running) == _components(local)
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
    processes = {"kafka", "registry"} | (_components(local) & {"s3"})
    if local.settings.catalog_store == "postgres":
        processes.add("postgres")
    assert set(stopped) == processes
    assert not any(h.healthy for h in local.status() if h.name in processes)
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


def test_no_secret_reaches_the_spark_jvms_command_line(stack: Stack, spark: Any) -> None:
    """pyspark hands its builder's settings to spark-submit as arguments, which any user can
    read in /proc/<pid>/cmdline: the catalog's secrets are set on the running session."""
    conf = spark_catalog_conf(stack.catalog.name, catalog_properties(stack.catalog))
    secrets = {key: value for key, value in conf.items() if is_secret(key)}
    if not secrets:
        pytest.skip("this catalog's settings carry no secret (the S3 layout's do)")
    jvm = spark.sparkContext._jvm
    pid = jvm.java.lang.management.ManagementFactory.getRuntimeMXBean().getPid()
    command_line = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
    assert "spark.sql.catalog" in command_line  # the right process: the rest of the conf
    for key, value in secrets.items():
        assert f"{key}=" not in command_line, key
        if len(value) >= 12:  # a real secret, not a short word found everywhere
            assert value not in command_line, key
        assert spark.conf.get(key) == value
