"""`icefjord schema diff`: JSON plan on stdout, exit code by verdict, clean errors."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from services.schema_watcher.cli import schema_app

pytestmark = pytest.mark.unit

runner = CliRunner()


def write(path: Path, schema: Any) -> Path:
    path.write_text(json.dumps(schema), encoding="utf-8")
    return path


def row(*fields: dict[str, Any]) -> dict[str, Any]:
    return {"type": "record", "name": "Row", "fields": list(fields)}


@pytest.fixture
def old_file(tmp_path: Path) -> Path:
    return write(tmp_path / "old.avsc", row({"name": "n", "type": "int"}))


def test_safe_diff_prints_the_plan_and_exits_0(tmp_path: Path, old_file: Path) -> None:
    new_file = write(tmp_path / "new.avsc", row({"name": "n", "type": "long"}))

    result = runner.invoke(schema_app, ["diff", str(old_file), str(new_file)])

    assert result.exit_code == 0, result.output
    printed = json.loads(result.stdout)
    assert printed["verdict"] == "APPLY"
    assert printed["operations"][0]["kind"] == "WIDEN_TYPE"
    assert printed["operations"][0]["path"] == ["n"]
    assert result.stdout.startswith('{\n  "verdict"')


def test_unsafe_diff_prints_the_reason_and_exits_3(tmp_path: Path) -> None:
    old_file = write(tmp_path / "old.avsc", row({"name": "n", "type": "long"}))
    new_file = write(tmp_path / "new.avsc", row({"name": "n", "type": "int"}))

    result = runner.invoke(schema_app, ["diff", str(old_file), str(new_file)])

    assert result.exit_code == 3
    printed = json.loads(result.stdout)
    assert printed["verdict"] == "QUARANTINE"
    assert "long -> int" in printed["reasons"][0]


def test_json_that_is_not_a_schema_is_a_quarantine_not_a_crash(
    tmp_path: Path, old_file: Path
) -> None:
    new_file = write(tmp_path / "new.avsc", [1, 2, 3])

    result = runner.invoke(schema_app, ["diff", str(old_file), str(new_file)])

    assert result.exit_code == 3
    assert json.loads(result.stdout)["verdict"] == "QUARANTINE"


def test_missing_file_exits_2_with_a_message(tmp_path: Path, old_file: Path) -> None:
    result = runner.invoke(schema_app, ["diff", str(old_file), str(tmp_path / "nope.avsc")])

    assert result.exit_code == 2
    assert "cannot read" in result.stderr
    assert "nope.avsc" in result.stderr
    assert "Traceback" not in result.output
    assert result.stdout == ""


def test_file_that_is_not_json_exits_2_with_a_message(tmp_path: Path, old_file: Path) -> None:
    broken = tmp_path / "broken.avsc"
    broken.write_text('{"type": "record",', encoding="utf-8")

    result = runner.invoke(schema_app, ["diff", str(broken), str(old_file)])

    assert result.exit_code == 2
    assert "broken.avsc is not JSON" in result.stderr
    assert "Traceback" not in result.output


def test_file_that_is_not_utf8_exits_2(tmp_path: Path, old_file: Path) -> None:
    binary = tmp_path / "binary.avsc"
    binary.write_bytes(b"\xff\xfe\x00garbage")

    result = runner.invoke(schema_app, ["diff", str(old_file), str(binary)])

    assert result.exit_code == 2
    assert "cannot read" in result.stderr


def test_help_documents_the_exit_codes() -> None:
    result = runner.invoke(schema_app, ["diff", "--help"])

    assert result.exit_code == 0
    assert "QUARANTINE" in result.stdout
    assert "3" in result.stdout
