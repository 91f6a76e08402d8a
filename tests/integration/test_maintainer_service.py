"""The maintainer service against the real Kafka, registry, Spark and Iceberg catalog.

The test plays the writer (small appends, then ``CommitDone`` events on a test control
topic) and an operator (requests, one through the CLI with ``--wait``), steps the service,
and reads the control topic back: every request the maintainer runs is announced before its
result, bad operator requests get REJECTED results with the reason, and the table keeps its
rows while its files shrink.
"""

from __future__ import annotations

import re
import signal
import threading
import time
import urllib.request
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import TopicPartition
from harness import Stack, free_port
from process_support import maintainer_env, ready_process, request_maintenance
from prometheus_client import CollectorRegistry, generate_latest
from typer.testing import CliRunner

from services.maintainer.cli import control_app
from services.maintainer.config import MaintainerSettings, PlannerSettings
from services.maintainer.policy import MaintenancePolicy
from services.maintainer.service import MaintainerService, build_service
from shared.avro import AvroCodec
from shared.catalog import open_catalog
from shared.control import ControlPublisher, ControlReader
from shared.events import (
    CommitDone,
    ControlEvent,
    MaintenanceAction,
    MaintenanceRequest,
    MaintenanceResult,
    MaintenanceStatus,
    TopicPartitionOffset,
)
from shared.kafka import make_consumer, make_producer
from shared.registry import make_registry_client

pytestmark = pytest.mark.timeout(600)


def create_table(spark: Any, table: str) -> None:
    spark.sql(
        f"""CREATE TABLE icefjord.{table} (id BIGINT NOT NULL, region STRING, v STRING)
        USING iceberg PARTITIONED BY (region)
        TBLPROPERTIES ('format-version'='2', 'write.delete.mode'='merge-on-read',
                       'write.update.mode'='merge-on-read', 'write.merge.mode'='merge-on-read')"""
    )
    spark.sql(f"ALTER TABLE icefjord.{table} SET IDENTIFIER FIELDS id")


def control_log(stack: Stack, topic: str) -> list[ControlEvent]:
    """Every event on ``topic`` up to its end, read by an independent consumer."""
    consumer = make_consumer(stack.kafka, f"check-{uuid.uuid4().hex[:8]}")
    try:
        metadata = consumer.list_topics(topic, timeout=10).topics[topic]
        total = sum(
            consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10, cached=False)[1]
            for p in metadata.partitions
        )
        reader = ControlReader(consumer, AvroCodec(make_registry_client(stack.registry)), topic)
        reader.subscribe()
        events: list[ControlEvent] = []
        deadline = time.monotonic() + 30
        while len(events) < total and time.monotonic() < deadline:
            events.extend(reader.poll(timeout=1.0))
        assert len(events) >= total  # the service may publish while we read
        return events
    finally:
        consumer.close()


def step_until(service: MaintainerService, done: Callable[[], bool], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not done():
        assert time.monotonic() < deadline, [r for r in service.results]
        service.step()


def test_service_compacts_on_commit_events_and_answers_operators(
    stack: Stack,
    spark: Any,
    namespace: str,
    topic_factory: Callable[..., str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    table = f"{namespace}.orders"
    create_table(spark, table)
    for batch in range(6):
        rows = [(batch * 10 + k, "eu" if k % 2 else "us", f"v{batch}") for k in range(4)]
        spark.createDataFrame(rows, "id long, region string, v string").writeTo(
            f"icefjord.{table}"
        ).append()
    expected = sorted(
        (r.id, r.region, r.v) for r in spark.sql(f"SELECT * FROM icefjord.{table}").collect()
    )
    control = topic_factory("control", partitions=3)
    settings = MaintainerSettings(
        kafka=stack.kafka,
        registry=stack.registry,
        catalog=stack.catalog,
        control_topic=control,
        group_id=f"maintainer-{uuid.uuid4().hex[:8]}",
        include=rf"{re.escape(namespace)}\..+",
        policy=MaintenancePolicy(compact_min_small_files=5, orphan_interval_s=1e9),
        planner=PlannerSettings(min_interval_s=0),
        inspect_interval_s=3600,
        inspect_min_interval_s=0,
        inspect_after_commits=3,
        orphan_initial_delay_s=1e9,
        retry_delay_s=0.5,
    )
    registry = make_registry_client(stack.registry)
    producer = make_producer(stack.kafka)
    consumer = make_consumer(stack.kafka, settings.group_id)
    metrics = CollectorRegistry()
    stop = threading.Event()
    service = build_service(
        settings,
        spark=spark,
        catalog=open_catalog(stack.catalog),
        producer=producer,
        consumer=consumer,
        registry=registry,
        metrics_registry=metrics,
        stop=stop,
    )
    try:
        publisher = ControlPublisher(make_producer(stack.kafka), AvroCodec(registry), control)

        def operator(target: str, request_id: str, **options: str) -> None:
            request = MaintenanceRequest(
                request_id=request_id,
                table=target,
                action=MaintenanceAction.COMPACT_DATA_FILES,
                options=options,
                reason="integration test",
                requested_by="operator:test",
            )
            publisher.publish(ControlEvent.new(target, request, producer="test"))

        now_ms = int(time.time() * 1000)
        for i in range(3):
            commit = CommitDone(
                table=table,
                commit_id=str(uuid.uuid4()),
                snapshot_id=i + 1,
                writer_epoch=1,
                records=4,
                inserted=4,
                updated=0,
                deleted=0,
                data_files_added=2,
                delete_files_added=0,
                bytes_added=2000,
                offsets=(TopicPartitionOffset(topic="t", partition=0, next_offset=4 * (i + 1)),),
                committed_at_ms=now_ms + i,
                duration_ms=100,
            )
            publisher.publish(ControlEvent.new(table, commit, producer="writer"))
        operator(f"{namespace}.missing", "unknown-table")
        operator(f"{namespace}.orders; DROP TABLE x", "malformed")
        operator(table, "bad-option", **{"rewrite-everything": "true"})
        publisher.flush()

        def answered(*ids: str) -> Callable[[], bool]:
            return lambda: {r.request_id for r in service.results} >= set(ids)

        step_until(service, answered("unknown-table", "malformed", "bad-option"), 120)
        step_until(
            service,
            lambda: any(
                r.action is MaintenanceAction.COMPACT_DATA_FILES
                and r.status is MaintenanceStatus.SUCCEEDED
                for r in service.results
            ),
            240,
        )

        # An operator compaction through the CLI, waiting for its result.
        for name, value in {
            "ICEFJORD_MAINTAINER_KAFKA__BOOTSTRAP_SERVERS": stack.kafka.bootstrap_servers,
            "ICEFJORD_MAINTAINER_REGISTRY__URL": stack.registry.url,
            "ICEFJORD_MAINTAINER_CONTROL_TOPIC": control,
        }.items():
            monkeypatch.setenv(name, value)
        outcome: list[Any] = []
        cli = threading.Thread(
            target=lambda: outcome.append(
                CliRunner().invoke(
                    control_app,
                    ["compact", table, "--partition", "region = 'us'", "--wait", "180"],
                )
            ),
            daemon=True,
        )
        cli.start()
        step_until(service, lambda: not cli.is_alive(), 200)
        (cli_result,) = outcome
        assert cli_result.exit_code == 0, cli_result.output
        assert "COMPACT_DATA_FILES" in cli_result.output
    finally:
        stop.set()
        consumer.close()
        producer.flush(10)

    events = control_log(stack, control)
    position = {id(e.payload): i for i, e in enumerate(events)}
    requests = {
        e.payload.request_id: e.payload for e in events if isinstance(e.payload, MaintenanceRequest)
    }
    results = {
        e.payload.request_id: e.payload for e in events if isinstance(e.payload, MaintenanceResult)
    }
    for request_id in ("unknown-table", "malformed", "bad-option"):
        assert results[request_id].status is MaintenanceStatus.REJECTED
    assert results["unknown-table"].error == f"unknown table {namespace}.missing"
    assert "malformed table identifier" in (results["malformed"].error or "")
    assert "bad option 'rewrite-everything'" in (results["bad-option"].error or "")
    assert sum(r.status is MaintenanceStatus.REJECTED for r in results.values()) == 3
    own = [r for r in requests.values() if r.requested_by.startswith("maintainer/policy:")]
    assert own, "the policy announced its compaction"
    for request in own:
        assert request.table == table and "small files" in request.reason
        result = results[request.request_id]
        assert position[id(request)] < position[id(result)], "announced before the result"
    compacted = [
        results[r.request_id]
        for r in own
        if results[r.request_id].status is MaintenanceStatus.SUCCEEDED
    ]
    assert compacted
    assert compacted[0].files_before == 12 and compacted[0].files_after == 2
    (from_cli,) = [r for r in requests.values() if r.partition == "region = 'us'"]
    assert from_cli.requested_by.startswith("operator:")
    assert results[from_cli.request_id].status in (
        MaintenanceStatus.SUCCEEDED,
        MaintenanceStatus.SKIPPED,
    )
    after = sorted(
        (r.id, r.region, r.v) for r in spark.sql(f"SELECT * FROM icefjord.{table}").collect()
    )
    assert after == expected
    text = generate_latest(metrics).decode()
    assert f'icefjord_table_data_files{{table="{table}"}} 2.0' in text
    assert (
        f'icefjord_maintenance_actions_total{{action="COMPACT_DATA_FILES",status="REJECTED",'
        f'table="{namespace}.missing"}} 1.0'
    ) in text


def test_the_service_process_answers_and_stops_on_sigterm(
    stack: Stack,
    spark: Any,
    namespace: str,
    topic_factory: Callable[..., str],
    tmp_path: Path,
) -> None:
    """``python -m services.maintainer`` end to end: ready, answers a request, exits 0."""
    table = f"{namespace}.small"
    create_table(spark, table)
    for k in range(3):
        spark.createDataFrame([(k, "eu", "v")], "id long, region string, v string").writeTo(
            f"icefjord.{table}"
        ).append()
    control = topic_factory("control", partitions=1)
    port = free_port()
    env = maintainer_env(stack, control, port, namespace, "local[1]")
    with ready_process("services.maintainer", env, tmp_path / "maintainer.log", port) as process:
        # Spark waits for the first action (warm_up_at_start is off by default).
        assert "icefjord_maintainer_spark_ready 0.0" in _metrics(port)
        request_maintenance(stack, control, table, MaintenanceAction.REWRITE_MANIFESTS, "by-hand")
        deadline = time.monotonic() + 180
        answer: MaintenanceResult | None = None
        while answer is None:
            assert time.monotonic() < deadline, "no result"
            time.sleep(2)
            answer = next(
                (
                    e.payload
                    for e in control_log(stack, control)
                    if isinstance(e.payload, MaintenanceResult)
                    and e.payload.request_id == "by-hand"
                ),
                None,
            )
        assert answer.status is MaintenanceStatus.SUCCEEDED, answer
        text = _metrics(port)
        assert f'icefjord_table_snapshots{{table="{table}"}}' in text
        assert "icefjord_maintainer_spark_ready 1.0" in text
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=120) == 0


def test_with_warm_up_at_start_spark_is_ready_before_any_action(
    stack: Stack, namespace: str, topic_factory: Callable[..., str], tmp_path: Path
) -> None:
    """``warm_up_at_start``: Spark starts and warms up in the background from the start,
    with nothing to do, while the service loop answers; SIGTERM still stops it cleanly."""
    control = topic_factory("control", partitions=1)
    port = free_port()
    env = maintainer_env(stack, control, port, namespace, "local[1]")
    env["ICEFJORD_MAINTAINER_WARM_UP_AT_START"] = "true"
    log_path = tmp_path / "maintainer.log"
    with ready_process("services.maintainer", env, log_path, port) as process:
        deadline = time.monotonic() + 240
        while "icefjord_maintainer_spark_ready 1.0" not in _metrics(port):
            assert time.monotonic() < deadline, "Spark not ready in the background"
            time.sleep(2)
        assert "spark warmed up" in log_path.read_text()
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=120) == 0


def _metrics(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
        return str(r.read().decode())
