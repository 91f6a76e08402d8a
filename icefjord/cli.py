"""The ``icefjord`` command line."""

from __future__ import annotations

import time
from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table

from icefjord.demo.bench import BenchOptions
from icefjord.demo.cli import bench_pipeline_command, demo_command, pipeline_bench
from icefjord.local.components import Health
from icefjord.local.settings import LocalSettings
from icefjord.local.stack import LocalStack, StartError
from services.cdc_normalizer.bench import InputFormat, bench, build_kind
from services.cdc_normalizer.cli import normalize_command
from services.maintainer.cli import (
    bench_maintain_command,
    control_app,
    table_app,
    tables_command,
)
from services.schema_watcher.cli import schema_app

app = typer.Typer(help="Icefjord: Debezium change streams into fresh Apache Iceberg tables.")
local_app = typer.Typer(help="The local stack: real Kafka, Apicurio Registry, Spark + Iceberg.")
app.add_typer(local_app, name="local")
app.add_typer(schema_app, name="schema")
bench_app = typer.Typer(
    help="Benchmarks: the whole pipeline (default), the normalizer's path, the writer, the "
    "maintainer."
)
app.add_typer(bench_app, name="bench")
app.command("normalize")(normalize_command)
app.add_typer(control_app, name="control")
app.command("tables")(tables_command)
app.add_typer(table_app, name="table")
bench_app.command("maintain")(bench_maintain_command)
bench_app.command("pipeline")(bench_pipeline_command)


@bench_app.callback(invoke_without_command=True)
def bench_default(ctx: typer.Context) -> None:
    """Without a subcommand: `icefjord bench pipeline` with its defaults."""
    if ctx.invoked_subcommand is None:
        pipeline_bench(BenchOptions())


app.command("demo")(demo_command)

console = Console()
errors = Console(stderr=True)


def _health_table(rows: list[Health]) -> Table:
    table = Table(title="Icefjord local stack")
    for column in ("component", "address", "health", "detail"):
        table.add_column(column)
    for row in rows:
        mark = "[green]healthy[/]" if row.healthy else "[red]down[/]"
        table.add_row(row.name, row.address, mark, row.detail)
    return table


@local_app.command("up")
def local_up() -> None:
    """Start every component (downloading on first run) and wait until all are healthy."""
    settings = LocalSettings()
    stack = LocalStack(settings)
    with console.status("starting the local stack") as status:

        def progress(message: str) -> None:
            status.update(message)
            console.log(message)

        try:
            report = stack.up(progress)
        except StartError as exc:
            errors.print(f"[red]local stack failed to start:[/] {exc}")
            raise typer.Exit(1) from exc
    console.print(_health_table(list(report.health)))
    if report.already_running:
        console.print(f"already running: {', '.join(report.already_running)}")
    console.print(f"all healthy in {report.seconds:.1f} s (state in {settings.state})")


@local_app.command("down")
def local_down() -> None:
    """Stop every process the local stack started (data stays on disk)."""
    stopped = LocalStack(LocalSettings()).down()
    console.print(f"stopped: {', '.join(stopped) if stopped else 'nothing was running'}")


@local_app.command("status")
def local_status() -> None:
    """Show each component, its address and whether it is healthy; exit 1 if any is not."""
    rows = LocalStack(LocalSettings()).status()
    console.print(_health_table(rows))
    if not all(r.healthy for r in rows):
        raise typer.Exit(1)


@local_app.command("smoke")
def local_smoke() -> None:
    """Prove each component: Kafka, the registry, and Iceberg from Spark and pyiceberg."""
    from icefjord.local.smoke import Check, run_smoke

    def report(check: Check) -> None:
        mark = "[green]ok[/]" if check.ok else "[red]FAILED[/]"
        console.print(
            f"{mark} {check.component}: {check.what} ({check.seconds:.1f} s) {check.detail}"
        )

    checks = run_smoke(LocalSettings(), report)
    if not all(c.ok for c in checks):
        raise typer.Exit(1)


@bench_app.command("normalize")
def bench_normalize(
    records: int = typer.Option(50_000, "--records", min=1, help="Messages to generate."),
    fmt: str = typer.Option("both", "--format", help="Input format: json, avro or both."),
    kafka: bool = typer.Option(
        False,
        "--kafka",
        help="Time the whole service loop on the running stack (consume, normalize, register, "
        "produce, transactional commit) instead of the per-record path alone.",
    ),
) -> None:
    """Time decode -> normalize -> Avro encode of Debezium Postgres changes, per process."""
    if fmt not in ("json", "avro", "both"):
        errors.print(f"[red]--format must be json, avro or both, not {fmt!r}[/]")
        raise typer.Exit(2)
    formats: list[InputFormat] = ["json", "avro"] if fmt == "both" else [fmt]  # type: ignore[list-item]
    if kafka:
        _bench_normalize_service(records, formats)
        return
    table = Table(
        title=f"cdc-normalizer: {records} Debezium Postgres changes, one process, {build_kind()}"
    )
    for column in ("input", "records", "changes", "seconds", "changes/s"):
        table.add_column(column, justify="right")
    for one in formats:
        with console.status(f"generating and routing {records} {one} messages"):
            result = bench(records, one)
        table.add_row(
            one,
            str(result.records),
            str(result.changes),
            f"{result.seconds:.2f}",
            f"{result.changes_per_second:,.0f}",
        )
    console.print(table)


def _bench_normalize_service(records: int, formats: list[InputFormat]) -> None:
    from services.cdc_normalizer.bench_service import bench_service
    from services.cdc_normalizer.config import NormalizerSettings

    settings = NormalizerSettings(topic_replication_factor=1, metrics={"port": 0})
    table = Table(
        title=f"cdc-normalizer service loop on the local stack: {records} Debezium Postgres "
        f"changes, one process, {build_kind()}, transactions of up to {settings.batch_size}"
    )
    columns = ("input", "changes", "batches", "wall s", "CPU s", "changes/s", "changes/CPU s")
    for column in columns:
        table.add_column(column, justify="right")
    for one in formats:
        result = bench_service(settings, records, one, progress=lambda m: console.log(m))
        table.add_row(
            one,
            f"{result.changes:,}",
            str(result.batches),
            f"{result.seconds:.2f}",
            f"{result.cpu_s:.2f}",
            f"{result.changes_per_second:,.0f}",
            f"{result.changes_per_cpu_second:,.0f}",
        )
    console.print(table)


@bench_app.command("write")
def bench_write_command(
    seconds: float = typer.Option(60.0, "--seconds", min=1, help="How long to produce."),
    rates: list[int] | None = typer.Option(  # noqa: B008 (typer's idiom)
        None, "--rate", help="Changes/s to produce, repeatable; 0 = as fast as possible."
    ),
) -> None:
    """iceberg-writer alone on the running stack: changes/s applied and freshness p50/p99."""
    from services.iceberg_writer.bench import bench_write
    from services.iceberg_writer.config import WriterSettings

    settings = WriterSettings(topic_replication_factor=1, metrics={"port": 0})
    table = Table(title=f"iceberg-writer on the local stack, {seconds:.0f} s per rate")
    columns = ("rate", "produced", "applied", "commits", "changes/s", "p50 s", "p99 s")
    for column in (*columns, "2nd half p50 s", "2nd half p99 s"):
        table.add_column(column, justify="right")
    for rate in rates or [1000]:
        result = bench_write(
            settings, seconds=seconds, rate=rate or None, progress=lambda m: console.log(m)
        )
        table.add_row(
            str(rate or "max"),
            str(result.produced),
            str(result.applied),
            str(result.commits),
            f"{result.changes_per_second:,.0f}",
            f"{result.freshness_p50_s:.1f}",
            f"{result.freshness_p99_s:.1f}",
            f"{result.steady_p50_s:.1f}",
            f"{result.steady_p99_s:.1f}",
        )
    console.print(table)


@bench_app.command("new-tables")
def bench_new_tables_command(
    tables: int = typer.Option(30, "--tables", min=1, help="New tables, all waiting at once."),
    rows: int = typer.Option(100, "--rows", min=1, help="Changes per table."),
    runs: int = typer.Option(3, "--runs", min=1, help="Runs, each with fresh tables."),
) -> None:
    """iceberg-writer alone on the running stack: how long a burst of new tables (a
    snapshot of many tables) takes until every one exists and holds its first rows."""
    from services.iceberg_writer.bench import bench_new_tables
    from services.iceberg_writer.config import WriterSettings

    settings = WriterSettings(topic_replication_factor=1, metrics={"port": 0})
    table = Table(title=f"iceberg-writer: {tables} new tables of {rows} changes each")
    for column in ("run", "seconds", "tables/s"):
        table.add_column(column, justify="right")
    for run in range(1, runs + 1):
        result = bench_new_tables(settings, tables=tables, rows=rows, progress=console.log)
        table.add_row(str(run), f"{result.seconds:.1f}", f"{result.tables_per_second:.1f}")
    console.print(table)


@bench_app.command("recovery")
def bench_recovery_command(
    rate: int = typer.Option(1000, "--rate", min=1, help="Changes/s to produce."),
    kills: int = typer.Option(3, "--kills", min=1, help="Times the writer is killed."),
    steady_s: float = typer.Option(
        30.0, "--steady-seconds", min=1, help="Seconds of steady writing before each kill."
    ),
    fresh_s: float = typer.Option(
        5.0, "--fresh-seconds", min=0.1, help="Freshness that counts as fresh again."
    ),
    out: Path | None = typer.Option(  # noqa: B008 (typer's idiom)
        None,
        "--out",
        help="Directory for commits.csv and recovery.png "
        "(default <state>/bench/recovery-<timestamp>).",
    ),
) -> None:
    """iceberg-writer killed (`kill -9`) and started again on the local stack (`icefjord
    local up`; the watcher and the writer are started if not running): seconds until its
    first commit and until the table is fresh again, per kill."""
    from icefjord.demo.recovery import bench_recovery, write_outputs

    settings = LocalSettings()
    result = bench_recovery(
        settings,
        rate=rate,
        kills=kills,
        steady_s=steady_s,
        fresh_s=fresh_s,
        progress=console.log,
    )
    table = Table(
        title=f"iceberg-writer killed and restarted, {rate:,} changes/s to {result.table} "
        f"(steady freshness p99 {result.steady_p99_s:.1f} s)"
    )
    for column in ("kill", "first commit s", f"fresh (<= {fresh_s:g} s) again s", "worst s"):
        table.add_column(column, justify="right")
    for number, figure in enumerate(result.kills, 1):
        table.add_row(
            str(number),
            *(
                f"{v:.1f}" if v is not None else "-"
                for v in (figure.first_commit_s, figure.fresh_again_s, figure.worst_s)
            ),
        )
    console.print(table)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    for path in write_outputs(result, out or settings.state / "bench" / f"recovery-{stamp}"):
        console.print(f"wrote {path}")


if __name__ == "__main__":
    app()
