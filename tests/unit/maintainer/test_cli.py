"""The CLI pieces: operator requests checked before publishing, and the health views over a
pyiceberg SQL catalog in a temporary directory (no Spark, no Kafka)."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest
import typer
from typer.testing import CliRunner

from services.maintainer.cli import (
    EXIT_REJECTED,
    build_request,
    control_app,
    health_rows,
    register_control_commands,
    table_app,
    tables_command,
)
from services.maintainer.health import TableHealth
from shared.catalog import open_catalog
from shared.events import MaintenanceAction
from shared.settings import CatalogSettings

pytestmark = pytest.mark.unit

app = typer.Typer()
app.add_typer(control_app, name="control")
app.add_typer(table_app, name="table")
app.command("tables")(tables_command)
runner = CliRunner()


def test_build_request_parses_options() -> None:
    request = build_request(
        "shop.orders",
        MaintenanceAction.COMPACT_DATA_FILES,
        partition="region = 'eu'",
        options=["min-input-files=2", " rewrite-all = true"],
        user="ann",
    )
    assert request.options == {"min-input-files": "2", "rewrite-all": "true"}
    assert request.requested_by == "operator:ann"
    assert request.partition == "region = 'eu'"
    with pytest.raises(ValueError, match="KEY=VALUE"):
        build_request("a.b", MaintenanceAction.COMPACT_DATA_FILES, options=["novalue"])


@pytest.mark.parametrize(
    "args",
    [
        ["control", "compact", "not-a-table"],
        ["control", "compact", "shop.orders", "--partition", "region = 'eu' OR 1 = 1"],
        ["control", "compact", "shop.orders", "--option", "bogus=1"],
        ["control", "compact", "shop.orders", "--option", "novalue"],
        ["control", "rewrite-manifests", "shop.orders;"],
    ],
)
def test_bad_requests_are_refused_before_anything_is_published(args: list[str]) -> None:
    # No Kafka runs here: reaching the publisher would fail differently.
    result = runner.invoke(app, args)
    assert result.exit_code == EXIT_REJECTED, result.output
    assert "rejected" in result.output


def test_importing_the_cli_does_not_load_spark_or_pyiceberg() -> None:
    import subprocess
    import sys

    code = (
        "import sys, services.maintainer.cli; "
        "print(sorted(m for m in ('pyspark', 'pyiceberg') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_control_commands_can_join_another_app() -> None:
    other = typer.Typer()
    register_control_commands(other)
    names = {command.name for command in other.registered_commands}
    assert names == {"compact", "rewrite-deletes", "expire", "remove-orphans", "rewrite-manifests"}


def test_health_rows() -> None:
    health = TableHealth(
        "shop.orders",
        10_000,
        snapshot_times_ms=(4_000,),
        offsets_snapshot_id=9,
        offsets_snapshot_ms=4_000,
        last_compaction_ms=None,
    )
    rows = dict(health_rows(health, now_ms=10_000))
    assert rows["oldest snapshot"] == "6 s ago"
    assert rows["latest offsets snapshot"] == "9 (6 s ago)"
    assert rows["last compaction"] == "never"
    assert rows["small files"].endswith("< 128.0 MiB)")


@pytest.fixture
def catalog_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    (tmp_path / "catalog").mkdir()
    monkeypatch.setenv("ICEFJORD_MAINTAINER_CATALOG__LOCAL_STATE_DIR", str(tmp_path))
    monkeypatch.setenv("COLUMNS", "250")
    catalog = open_catalog(CatalogSettings(local_state_dir=tmp_path))
    catalog.create_namespace("shop")
    schema = pa.schema(
        [pa.field("id", pa.int64(), nullable=False), pa.field("region", pa.string())]
    )
    table = catalog.create_table("shop.orders", schema=schema)
    for i in range(3):
        table.append(pa.table({"id": [i], "region": ["eu"]}, schema=schema))
    table.append(
        pa.table({"id": [9]}, schema=schema.remove(1)).append_column("region", pa.array(["us"])),
        snapshot_properties={"icefjord.offsets": '{"t:0": 4}'},
    )
    return tmp_path


def test_table_health_reads_the_catalog(catalog_dir: Path) -> None:
    result = runner.invoke(app, ["table", "health", "shop.orders", "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert data["data_files"] == 4
    assert data["snapshots"] == 4
    assert data["small_files"] == 4
    assert data["offsets_snapshot_id"] is not None
    assert data["last_compaction_ms"] is None
    assert data["commits_since_compaction"] == 4
    human = runner.invoke(app, ["table", "health", "shop.orders"])
    assert human.exit_code == 0, human.output
    assert "data files" in human.output and "policies: nothing to do" in human.output


def test_tables_lists_every_table(catalog_dir: Path) -> None:
    result = runner.invoke(app, ["tables", "--json"])
    assert result.exit_code == 0, result.output
    (line,) = result.output.strip().splitlines()
    assert json.loads(line)["table"] == "shop.orders"
    view = runner.invoke(app, ["tables"])
    assert "shop.orders" in view.output


def test_table_health_of_a_missing_or_malformed_table(catalog_dir: Path) -> None:
    assert runner.invoke(app, ["table", "health", "shop.nope"]).exit_code == 2
    assert runner.invoke(app, ["table", "health", "nope"]).exit_code == 2
