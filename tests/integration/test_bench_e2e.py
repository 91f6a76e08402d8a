"""`icefjord bench` (`make bench`) end to end, small: every phase on the real pipeline, the
report written, every table verified, and the source dropped afterwards.

The figures of so short a run mean nothing; what is checked is that the benchmark runs,
measures what it says (the paced phases offer their rate exactly) and leaves nothing behind
in PostgreSQL.
"""

from __future__ import annotations

import io
from collections.abc import Iterator
from pathlib import Path

import pytest
from harness import Stack, own_pipeline
from rich.console import Console

from icefjord.bench.pipeline import BenchOptions, run_bench
from icefjord.local.connect import KafkaConnect
from icefjord.local.postgres import PostgresCluster
from icefjord.local.settings import LocalSettings

pytestmark = pytest.mark.e2e


@pytest.fixture
def bench_settings(stack: Stack) -> Iterator[LocalSettings]:
    why = "needs the session's own local stack (Connect joins its broker)"
    with own_pipeline(stack, why, needs_postgres=True) as settings:
        yield settings


@pytest.mark.timeout(1200)
def test_a_short_benchmark_runs_every_phase_verifies_and_drops_its_source(
    bench_settings: LocalSettings, tmp_path: Path
) -> None:
    import psycopg

    out = io.StringIO()
    console = Console(file=out, width=140, force_terminal=False)
    options = BenchOptions(
        source="postgres",
        snapshot_rows=3_000,
        rates=(200.0,),
        phase_seconds=8.0,
        warm_up_seconds=0.0,
        set_rates=(2_000.0,),
        rows_per_statement=20,
        max_seconds=4.0,
        out=tmp_path / "report",
    )
    try:
        result = run_bench(bench_settings, options, console)
    finally:
        print(out.getvalue()[-20_000:])  # shown by pytest when the test fails
    report = result.report

    assert result.exit_code == 0 and report.verified, out.getvalue()[-4000:]
    assert report.dead_letters == 0
    assert [t.table.split(".")[-1] for t in report.tables] == ["customers", "orders", "payments"]
    assert all(t.equal and t.iceberg_rows == t.source_rows > 0 for t in report.tables)
    snapshot, paced, set_based, unpaced = report.phases
    assert (snapshot.kind, snapshot.snapshot_rows) == ("snapshot", 3_000)
    assert (paced.offered_rate, set_based.offered_rate, unpaced.kind) == (200.0, 2_000.0, "max")
    assert all(p.caught_up for p in report.phases)
    # Paced phases offer their rate exactly: every transaction is due when the rows planned
    # before it are, so the source changed the rate's rows, plus at most one transaction
    # (up to 7 operations, of up to 20 rows in the set-based phase).
    assert 200 * 8 <= paced.figures.source_changes < 200 * 8 + 7
    assert 2_000 * 8 <= set_based.figures.source_changes < 2_000 * 8 + 7 * 20
    assert result.path.is_file() and (result.path.parent / "series.csv").is_file()
    assert "every Iceberg table equals its source" in result.path.read_text()

    # Verified, so the source is gone from PostgreSQL and from the worker.
    cluster = PostgresCluster(bench_settings)
    with psycopg.connect(cluster.conninfo(), autocommit=True) as conn:
        schema = "SELECT 1 FROM pg_namespace WHERE nspname = %s"
        assert conn.execute(schema, (report.schema,)).fetchone() is None
        slots = conn.execute("SELECT slot_name FROM pg_replication_slots").fetchall()
        assert not [s for (s,) in slots if report.schema in s]
    connect = KafkaConnect(bench_settings, None)
    assert not [c for c in connect.request("GET", "/connectors") if report.schema in c]


@pytest.mark.timeout(1200)
@pytest.mark.parametrize("workload", ["demo", "peer"])
def test_a_small_drain_measures_each_service_from_a_cold_start_and_verifies(
    bench_settings: LocalSettings, tmp_path: Path, workload: str
) -> None:
    from icefjord.bench.drain import DrainOptions, run_drain
    from icefjord.local.services import service_processes

    out = io.StringIO()
    console = Console(file=out, width=140, force_terminal=False)
    if workload == "demo":
        options = DrainOptions(rows=3_000, updates=4_000, dml=1_500, out=tmp_path / "drain")
    else:
        options = DrainOptions(workload="peer", rows=2_000, out=tmp_path / "drain")
    try:
        report, path = run_drain(bench_settings, options, console)
    finally:
        print(out.getvalue()[-20_000:])  # shown by pytest when the test fails
    assert report.verified, out.getvalue()[-4000:]
    backlog = report.backlog
    if workload == "demo":
        # What was asked for, cut at the first transaction reaching each count.
        assert backlog.inserts >= 3_000 and backlog.changes >= 3_000 + 4_000 + 1_500
        tables = ["customers", "orders", "payments"]
    else:
        # Every row inserted, updated once, every fourth deleted.
        assert (backlog.inserts, backlog.updates, backlog.deletes) == (2_000, 2_000, 500)
        tables = ["items"]
    assert backlog.deletes > 0 and backlog.kafka_records > backlog.changes
    assert [t[0].split(".")[-1] for t in report.tables] == tables
    # Every service was started by the run, so each was measured from its start.
    measured = {c.name.split()[0]: c.cpu_seconds for c in report.components if c.service}
    assert set(measured) == {"normalizer", "watcher", "writer", "maintainer"}
    assert all(seconds is not None and seconds > 0 for seconds in measured.values())
    assert 0 < report.wall_seconds < 1200
    assert report.changes_per_cpu_second is not None
    assert path.is_file() and (path.parent / "report.json").is_file()
    # Stopped at the end: they read only this run's topics and tables.
    assert not any(s.running() for s in service_processes(bench_settings))
