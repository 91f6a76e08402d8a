"""The ``normalize`` command: JSON lines in, JSON lines out, rejects on stderr, exit code."""

from __future__ import annotations

import json

import pytest
import typer
from typer.testing import CliRunner

from services.cdc_normalizer.cli import normalize_command

pytestmark = pytest.mark.unit


@pytest.fixture
def run(tmp_path):
    app = typer.Typer()
    app.command("normalize")(normalize_command)
    app.command("noop")(lambda: None)  # two commands, so "normalize" is addressed by name

    def invoke(lines: list[str], *args: str):
        path = tmp_path / "events.jsonl"
        path.write_text("\n".join(lines) + "\n", encoding="utf-8")
        return CliRunner().invoke(app, ["normalize", str(path), *args])

    return invoke


def test_changes_printed_as_json_lines(run, events) -> None:
    line = json.dumps(
        {
            "key": events.pg_key(),
            "value": events.pg_record("c", after=events.pg_after()),
            "topic": "shop.public.orders",
            "partition": 1,
            "offset": 99,
        }
    )
    result = run([line, ""])
    assert result.exit_code == 0, result.output
    (out,) = [json.loads(x) for x in result.stdout.splitlines()]
    assert out["table"] == "public.orders"
    assert out["op"] == "CREATE"
    assert out["key"] == {"id": 1001}
    after = out["after"]
    assert after["total"] == "1234.50"
    assert after["discount"] == "12.345"
    assert after["order_date"] == "2022-01-08"
    assert after["created_at"] == "2022-01-08T10:15:30.123456Z"
    assert after["updated_at"] == "2022-01-08T10:15:30.123456"
    assert after["pickup_time"] == "10:15:30.123456"
    assert after["mask"] == "/w=="
    assert out["source"]["origin_offset"] == "99"
    assert out["source"]["origin_partition"] == "1"


def test_rejected_lines_reported_with_line_number(run, events) -> None:
    good = json.dumps(
        {"key": events.pg_key(), "value": events.pg_record("c", after=events.pg_after())}
    )
    missing_after = json.dumps({"key": events.pg_key(), "value": events.pg_record("u")})
    tombstone = json.dumps({"key": events.pg_key(), "value": None})
    result = run([good, missing_after, "{not json", tombstone])
    assert result.exit_code == 1
    assert len(result.stdout.splitlines()) == 1
    assert "line 2: missing_after:" in result.stderr
    assert "line 3: invalid_json:" in result.stderr
    assert "1 changes, 1 tombstones, 2 rejected" in result.stderr


def test_bare_values_with_key_columns(run, events) -> None:
    bare = json.dumps(events.pg_record("c", after=events.pg_after()))
    assert run([bare]).exit_code == 1  # no key struct
    result = run([bare], "--key-column", "customer_id", "-k", "id")
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["key"] == {"customer_id": 42, "id": 1001}


def test_row_schema_for_schemaless_lines(run, events, tmp_path) -> None:
    schema = tmp_path / "orders.avsc"
    schema.write_text(
        json.dumps(
            {
                "type": "record",
                "name": "OrdersRow",
                "fields": [
                    {"name": "id", "type": "long"},
                    {"name": "order_date", "type": {"type": "int", "logicalType": "date"}},
                ],
            }
        )
    )
    value = events.pg_record("c", after={"id": 5, "order_date": 19000}, with_schema=False)
    line = json.dumps({"key": {"id": 5}, "value": value})
    assert run([line]).exit_code == 1
    result = run([line], "--row-schema", str(schema))
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["after"] == {"id": 5, "order_date": "2022-01-08"}
