"""``icefjord quarantine list|replay`` against the real stack and a real iceberg-writer: rows of
a quarantined schema version stay out while the table cannot hold them, and go in once each
after the schema was fixed forward."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from changes_support import Event, change_schema, table_rows
from harness import Stack
from typer.testing import CliRunner
from writer_support import (
    change_topic_in,
    producer_for,
    publish_schema_change,
    run_until_caught_up,
    start_writer,
    writer_settings,
)

from icefjord import replay_cli
from icefjord.cli import app
from shared.avro import AvroCodec
from shared.events import SchemaChange, SchemaOperation, SchemaOperationKind, Verdict
from shared.registry import make_registry_client

pytestmark = pytest.mark.integration

NOTE = {"name": "note", "type": ["null", "string"], "default": None}
LABEL = {"name": "label", "type": ["null", "string"], "default": None}


def add_columns(*names: str) -> tuple[SchemaOperation, ...]:
    return tuple(
        SchemaOperation(
            kind=SchemaOperationKind.ADD_COLUMN, path=(name,), type_json='["null", "string"]'
        )
        for name in names
    )


@pytest.fixture
def change_topic(stack: Stack, namespace: str) -> Iterator[str]:
    with change_topic_in(stack, namespace, "held") as name:
        yield name


def test_quarantined_rows_wait_for_a_schema_that_holds_them_then_go_in_once(
    stack: Stack, spark: Any, change_topic: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    ns, name = change_topic.removeprefix("icefjord.changes.").split(".")
    table = f"{ns}.{name}"
    subject = f"{change_topic}-value"
    v1 = change_schema(ns, name)
    v2 = change_schema(ns, name, [NOTE])  # quarantined below
    v3 = change_schema(ns, name, [NOTE, LABEL])  # the fix forward
    codec = AvroCodec(make_registry_client(stack.registry))
    ids = {n: codec.register(subject, schema) for n, schema in enumerate((v1, v2, v3), 1)}
    settings = writer_settings(stack, change_topic, schema_wait_s=60)
    monkeypatch.setattr(replay_cli, "_writer_settings", lambda: settings)
    writer = start_writer(settings)
    producer = producer_for(stack, change_topic)
    producer.send(v1, [Event(i, "CREATE", i, name=f"v1-{i}") for i in range(1, 6)])
    run_until_caught_up(writer)

    publish_schema_change(
        stack,
        settings.control_topic,
        SchemaChange(
            table=table,
            subject=subject,
            from_version=1,
            to_version=2,
            from_schema_id=ids[1],
            to_schema_id=ids[2],
            operations=add_columns("note"),
            verdict=Verdict.QUARANTINE,
            reason="an operator said no",
        ),
    )
    producer.send(
        v2, [Event(10 + i, "UPDATE", i, name=f"v2-{i}") for i in range(1, 4)], extra={"note": "hi"}
    )
    run_until_caught_up(writer)
    assert {k: r["name"] for k, r in table_rows(spark, table).items()} == {
        i: f"v1-{i}" for i in range(1, 6)
    }

    runner = CliRunner()

    def cli(args: list[str]) -> Any:
        return runner.invoke(app, args, env={"COLUMNS": "250"})

    listed = cli(["quarantine", "list", table])
    assert listed.exit_code == 0, listed.output
    assert "3 matching" in listed.output and "an operator said no" in listed.output

    # The table cannot hold the rows yet: refused, nothing produced.
    refused = cli(["quarantine", "replay", table])
    assert refused.exit_code == 1, refused.output
    assert ".note, which the table's schema" in refused.output

    # Fixed forward at the source: a version with the column, applied on its first row.
    publish_schema_change(
        stack,
        settings.control_topic,
        SchemaChange(
            table=table,
            subject=subject,
            from_version=1,
            to_version=3,
            from_schema_id=ids[1],
            to_schema_id=ids[3],
            operations=add_columns("note", "label"),
            verdict=Verdict.APPLY,
        ),
    )
    producer.send(v3, [Event(20, "CREATE", 9, name="v3-9")], extra={"note": None, "label": "l"})
    run_until_caught_up(writer)

    dry = cli(["quarantine", "replay", table, "--dry-run"])
    assert "3 to replay, 0 replayed before" in dry.output, dry.output
    replayed = cli(["quarantine", "replay", table])
    assert replayed.exit_code == 0, replayed.output
    assert f"replayed 3 row(s) of {table}" in replayed.output
    assert f"3 rewritten into schema id {ids[3]}" in replayed.output
    run_until_caught_up(writer)
    rows = table_rows(spark, table)
    assert {k: (r["name"], r["note"]) for k, r in rows.items()} == {
        1: ("v2-1", "hi"),
        2: ("v2-2", "hi"),
        3: ("v2-3", "hi"),
        4: ("v1-4", None),
        5: ("v1-5", None),
        9: ("v3-9", None),
    }

    again = cli(["quarantine", "replay", table])
    assert again.exit_code == 0, again.output
    assert "replayed 0 row(s)" in again.output and "3 replayed before" in again.output
    run_until_caught_up(writer)
    assert table_rows(spark, table) == rows
    listed = cli(["quarantine", "list", table])
    assert listed.output.count(" yes ") == 3, listed.output
