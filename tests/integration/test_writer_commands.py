"""Operators' PAUSE, RESUME and FLUSH against the real Kafka, registry, Spark and catalog:
``icefjord control`` publishes them, a real writer (in process) keeps them, answers them,
and they hold across a writer restart and for a table that does not exist yet."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from changes_support import Event, assert_equal_to_model, change_schema, table_rows
from harness import Stack
from typer.testing import CliRunner, Result
from writer_support import (
    change_topic_in,
    producer_for,
    run_until_caught_up,
    start_writer,
    stepping,
    writer_settings,
)

from icefjord.cli import app
from services.iceberg_writer.config import WriterSettings
from services.iceberg_writer.writer import Writer
from shared.avro import AvroCodec
from shared.catalog import open_catalog
from shared.control import ControlPublisher
from shared.events import ControlEvent, OperatorCommand, OperatorCommandKind
from shared.kafka import TopicRequest, ensure_topics, make_admin, make_producer
from shared.registry import make_registry_client
from shared.settings import CHANGES_TOPIC_PREFIX

QUIET_S = 6.0  # three freshness targets (2 s): time enough for commits that should not come


@pytest.fixture
def change_topic(stack: Stack, namespace: str) -> Iterator[str]:
    with change_topic_in(stack, namespace, "held") as name:
        yield name


def control(
    monkeypatch: pytest.MonkeyPatch, stack: Stack, settings: WriterSettings, *args: str
) -> Result:
    """``icefjord control ARGS`` with the writer's settings in the environment."""
    for name, value in {
        "ICEFJORD_WRITER_KAFKA__BOOTSTRAP_SERVERS": stack.kafka.bootstrap_servers,
        "ICEFJORD_WRITER_REGISTRY__URL": stack.registry.url,
        "ICEFJORD_WRITER_CONTROL_TOPIC": settings.control_topic,
    }.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("COLUMNS", "250")
    return CliRunner().invoke(app, ["control", *args])


def data_commits(stack: Stack, table: str) -> int:
    """Snapshots of ``table`` that a writer's data commit made (0 when there is no table)."""
    catalog = open_catalog(stack.catalog)
    if not catalog.table_exists(table):
        return 0
    snapshots = catalog.load_table(table).snapshots()
    return sum(1 for s in snapshots if s.summary and "icefjord.offsets" in s.summary)


def received(writer: Writer, table: str) -> float:
    """Change records of ``table`` the writer consumed."""
    return sum(
        sample.value
        for metric in writer.metrics.changes_received.collect()
        for sample in metric.samples
        if sample.name.endswith("_total") and sample.labels["table"] == table
    )


def paused_gauge(writer: Writer) -> float:
    (metric,) = writer.metrics.paused_tables.collect()
    return float(metric.samples[0].value)


def steps_for(writer: Writer, seconds: float, until: Callable[[], bool] = lambda: False) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and not until():
        writer.step()


def publish(stack: Stack, settings: WriterSettings, kind: OperatorCommandKind, table: str) -> None:
    command = OperatorCommand(command=kind, table=table, requested_by="operator:test")
    publisher = ControlPublisher(
        make_producer(stack.kafka),
        AvroCodec(make_registry_client(stack.registry)),
        settings.control_topic,
    )
    publisher.publish(ControlEvent.new(table, command, "operator:test"))
    publisher.flush()


def test_a_paused_table_takes_no_commit_while_changes_arrive_and_all_of_them_after_resume(
    stack: Stack, spark: Any, change_topic: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    table = change_topic.removeprefix(CHANGES_TOPIC_PREFIX)
    schema = change_schema(*table.split("."))
    settings = writer_settings(stack, change_topic)
    writer = start_writer(settings)
    producer = producer_for(stack, change_topic)
    first = [Event(i, "CREATE", i, name=f"c{i}", amount="1.00") for i in range(1, 51)]
    producer.send(schema, first)
    run_until_caught_up(writer)
    try:
        with stepping(writer):
            paused = control(monkeypatch, stack, settings, "pause", table, "--reason", "test")
        assert paused.exit_code == 0, paused.output
        assert f"paused {table}" in paused.output
        assert paused_gauge(writer) == 1
        commits = data_commits(stack, table)
        later = [Event(100 + i, "UPDATE", i, name=f"u{i}") for i in range(1, 31)]
        later += [Event(200 + i, "DELETE", i) for i in range(31, 41)]
        later += [Event(300 + i, "CREATE", i, name=f"n{i}") for i in range(51, 71)]
        producer.send(schema, later)
        steps_for(writer, QUIET_S)
        assert data_commits(stack, table) == commits, "a paused table took a commit"
        assert_equal_to_model(spark, table, first)
        with stepping(writer):
            resumed = control(monkeypatch, stack, settings, "resume", table)
        assert resumed.exit_code == 0, resumed.output
        assert f"resumed {table}" in resumed.output
        run_until_caught_up(writer)
        assert_equal_to_model(spark, table, first + later)  # nothing lost, no key twice
        assert received(writer, table) == len(first) + len(later), "a change was read twice"
        assert paused_gauge(writer) == 0
    finally:
        writer.close()


def test_a_pause_survives_a_writer_restart_and_a_flush_before_it_is_not_run_again(
    stack: Stack, spark: Any, change_topic: str
) -> None:
    table = change_topic.removeprefix(CHANGES_TOPIC_PREFIX)
    schema = change_schema(*table.split("."))
    settings = writer_settings(stack, change_topic)
    producer = producer_for(stack, change_topic)
    first = [Event(i, "CREATE", i, name=f"c{i}") for i in range(1, 21)]
    producer.send(schema, first)
    writer = start_writer(settings)
    run_until_caught_up(writer)
    publish(stack, settings, OperatorCommandKind.PAUSE, table)
    publish(stack, settings, OperatorCommandKind.FLUSH, table)
    steps_for(writer, 3.0)
    writer.close()
    commits = data_commits(stack, table)
    later = [Event(100 + i, "UPDATE", i, name=f"u{i}") for i in range(1, 21)]
    producer.send(schema, later)

    restarted = start_writer(settings)
    try:
        steps_for(restarted, QUIET_S)
        assert table in restarted.tables, "the restarted writer never took the table"
        assert restarted.control.is_paused(restarted.tables[table])
        assert paused_gauge(restarted) == 1
        assert data_commits(stack, table) == commits, "the pause did not outlive the restart"
        assert_equal_to_model(spark, table, first)
        publish(stack, settings, OperatorCommandKind.RESUME, table)
        run_until_caught_up(restarted)
        assert_equal_to_model(spark, table, first + later)
    finally:
        restarted.close()


def test_a_pause_of_a_table_that_does_not_exist_yet_holds_its_first_rows(
    stack: Stack, spark: Any, namespace: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    table = f"{namespace}.later_{uuid.uuid4().hex[:6]}"
    topic = f"{CHANGES_TOPIC_PREFIX}{table}"
    settings = writer_settings(
        stack,
        "unused",
        topic_pattern=f"^icefjord[.]changes[.]{namespace}[.].*",
    )
    writer = start_writer(settings)
    try:
        with stepping(writer):
            paused = control(monkeypatch, stack, settings, "pause", table)
        assert paused.exit_code == 0, paused.output
        assert "has not loaded it yet" in paused.output
        ensure_topics(make_admin(stack.kafka), [TopicRequest(topic, 3)])
        schema = change_schema(*table.split("."))
        rows = [Event(i, "CREATE", i, name=f"first{i}") for i in range(1, 31)]
        producer_for(stack, topic).send(schema, rows)
        steps_for(writer, 60, until=lambda: table in writer.tables)
        assert table in writer.tables, "the writer never found the new table's topic"
        steps_for(writer, QUIET_S)
        assert data_commits(stack, table) == 0, "the first rows were committed while paused"
        assert paused_gauge(writer) == 1
        with stepping(writer):
            resumed = control(monkeypatch, stack, settings, "resume", table)
        assert resumed.exit_code == 0, resumed.output
        run_until_caught_up(writer)
        assert_equal_to_model(spark, table, rows)
    finally:
        writer.close()
        make_admin(stack.kafka).delete_topics([topic])


def test_a_flush_commits_the_held_changes_before_it_answers(
    stack: Stack, spark: Any, change_topic: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    table = change_topic.removeprefix(CHANGES_TOPIC_PREFIX)
    schema = change_schema(*table.split("."))
    # Batches would linger for minutes: only a flush commits them in this test's time.
    settings = writer_settings(stack, change_topic, min_batch_s=300.0, freshness_target_s=3600.0)
    writer = start_writer(settings)
    rows = [Event(i, "CREATE", i, name=f"c{i}", amount="3.50") for i in range(1, 41)]
    producer_for(stack, change_topic).send(schema, rows)
    try:
        steps_for(writer, 60, until=lambda: received(writer, table) == len(rows))
        assert received(writer, table) == len(rows)
        steps_for(writer, 2.0)
        assert data_commits(stack, table) == 0, "the batch closed by itself"
        with stepping(writer):
            flushed = control(monkeypatch, stack, settings, "flush", table, "--timeout", "120")
        assert flushed.exit_code == 0, flushed.output
        assert f"{len(rows)} held change(s) committed" in flushed.output
        # The answer comes after the commit: the rows are in the table already.
        assert data_commits(stack, table) == 1
        assert_equal_to_model(spark, table, rows)
        assert len(table_rows(spark, table)) == len(rows)
    finally:
        writer.close()


def test_the_command_line_refuses_a_bad_name_and_waits_in_vain_for_no_writer(
    stack: Stack, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = writer_settings(stack, "unused")
    ensure_topics(make_admin(stack.kafka), settings.topic_requests())
    refused = control(monkeypatch, stack, settings, "pause", "orders")
    assert refused.exit_code == 2 and "not <namespace>.<table>" in refused.output
    quoted = control(monkeypatch, stack, settings, "pause", "'*'")
    assert quoted.exit_code == 2, "quotes that reach the command are not every table"
    unanswered = control(monkeypatch, stack, settings, "flush", "*", "--timeout", "3")
    assert unanswered.exit_code == 3, unanswered.output
    assert "no answer from iceberg-writer within 3 s" in unanswered.output
    published = control(monkeypatch, stack, settings, "resume", "*", "--no-wait")
    assert published.exit_code == 0 and "published RESUME every table" in published.output
