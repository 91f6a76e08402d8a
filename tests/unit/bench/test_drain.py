"""The drain benchmark's arithmetic: the records Debezium makes of a workload, the workload cut
at a number of changes, the services told from the stack, and the report."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from icefjord.bench.cpu import ComponentUse, CpuUse
from icefjord.bench.drain import (
    Backlog,
    DrainOptions,
    DrainReport,
    figures_of,
    kafka_records,
    limited,
    write,
)
from icefjord.demo.plan import Planner, WorkloadSpec, row_operations
from icefjord.demo.workload import WorkloadResult

pytestmark = pytest.mark.unit


def _result(inserts: int, updates: int, key_changes: int, deletes: int) -> WorkloadResult:
    return WorkloadResult(
        transactions=1,
        inserts=inserts,
        updates=updates,
        key_changes=key_changes,
        deletes=deletes,
        schema_changes=0,
        seconds=1.0,
        last_change_ms={},
    )


def test_debezium_adds_a_tombstone_per_delete_and_three_records_per_key_change() -> None:
    assert kafka_records(_result(10, 20, 0, 0)) == 30
    assert kafka_records(_result(0, 0, 0, 5)) == 10
    assert kafka_records(_result(1, 2, 3, 4)) == 1 + 2 + 9 + 8


@pytest.mark.parametrize("rows_per_statement", [1, 50])
def test_the_workload_stops_at_the_first_transaction_reaching_the_changes(
    rows_per_statement: int,
) -> None:
    planner = Planner(WorkloadSpec(initial_rows=500, seed=3))
    list(planner.seed())
    plan = planner.steady(None, ops_per_tx=5, rows_per_statement=rows_per_statement)
    txs = list(limited(plan, 1_000))
    counts = [sum(row_operations(op) for op in tx.ops) for tx in txs]
    assert sum(counts) >= 1_000
    assert sum(counts[:-1]) < 1_000  # not one transaction more than needed


def test_options_refuse_an_empty_or_negative_backlog() -> None:
    with pytest.raises(ValueError, match="empty backlog"):
        DrainOptions(rows=0, updates=0, dml=0)
    with pytest.raises(ValueError):
        DrainOptions(rows=-1)
    with pytest.raises(ValueError):
        DrainOptions(rows_per_statement=0)


def _cpu() -> CpuUse:
    components = (
        ComponentUse("PostgreSQL", 1.0, "whole"),
        ComponentUse("Kafka broker", 8.0, "whole"),
        ComponentUse("normalizer service", 30.0, "partial"),
        ComponentUse("watcher service", 1.0, "partial"),
        ComponentUse("writer service + Spark JVM", 25.0, "partial"),
        ComponentUse("maintainer service + Spark JVM", 4.0, "partial"),
    )
    return CpuUse(50.0, 2, components, 90.0)


def _report(tables_ok: bool = True, dead: int = 0) -> DrainReport:
    backlog = Backlog(
        inserts=400_000,
        updates=500_000,
        key_changes=20_000,
        deletes=80_000,
        kafka_records=1_240_000,
        seconds=120.0,
    )
    return DrainReport(
        command="icefjord bench drain",
        started="2026-11-29T03:00:00+00:00",
        schema="bench_drain",
        workload="demo",
        backlog=backlog,
        wall_seconds=48.5,
        caught_up=True,
        components=figures_of(_cpu()),
        tables=(("bench_drain.orders", 10, 10, tables_ok),),
        dead_letters=dead,
        normalizer_build="compiled",
        machine="2 cores",
    )


def test_only_the_four_services_count_as_the_pipelines_cpu() -> None:
    report = _report()
    services = [c.name for c in report.components if c.service]
    assert services == [
        "normalizer service",
        "watcher service",
        "writer service + Spark JVM",
        "maintainer service + Spark JVM",
    ]
    assert report.service_cpu_seconds == pytest.approx(60.0)
    assert report.backlog.changes == 1_000_000
    assert report.changes_per_cpu_second == pytest.approx(1_000_000 / 60.0)
    normalizer = report.components[2]
    assert normalizer.per_change_us(report.backlog.changes) == pytest.approx(30.0)


@pytest.mark.parametrize(("tables_ok", "dead"), [(True, 0), (False, 0), (True, 1)])
def test_a_report_is_verified_only_with_equal_tables_and_no_dead_letter(
    tables_ok: bool, dead: int
) -> None:
    assert _report(tables_ok, dead).verified is (tables_ok and dead == 0)


def test_the_report_is_written_as_markdown_and_json(tmp_path: Path) -> None:
    path = write(_report(), tmp_path)
    text = path.read_text()
    assert "**1,000,000 row changes**" in text
    assert "**60.0 CPU s, 16,667 changes per CPU second**" in text
    assert "| **normalizer service** | 30.0 | 30.0 |" in text
    assert "| Kafka broker | 8.0 | 8.0 |" in text
    assert "every Iceberg table equals its source" in text
    data = json.loads((tmp_path / "report.json").read_text())
    assert data["backlog"]["kafka_records"] == 1_240_000
    assert "NOT VERIFIED" in write(_report(tables_ok=False), tmp_path / "bad").read_text()
