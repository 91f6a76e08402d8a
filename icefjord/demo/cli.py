"""``icefjord demo`` and ``icefjord bench pipeline``: the commands the CLI registers
(``app.command("demo")(demo_command)``, ``bench_app.command("pipeline")(...)``)."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.console import Console

from icefjord.demo.bench import BenchOptions, BenchResult, run_bench
from icefjord.demo.plan import WorkloadSpec
from icefjord.demo.run import DemoError, DemoOptions, SourceChoice, print_summary, run_demo
from icefjord.local.artifacts import ArtifactError
from icefjord.local.connect import ConnectError
from icefjord.local.postgres import PostgresError
from icefjord.local.settings import LocalSettings
from icefjord.local.stack import StartError

EXIT_SETUP_FAILED = 2


def demo_command(
    source: str = typer.Option(
        "auto", "--source", help="auto (PostgreSQL if installed), postgres or generator."
    ),
    rate: float = typer.Option(200.0, "--rate", min=1, help="Row changes per second."),
    duration: float = typer.Option(60.0, "--duration", min=1, help="Seconds of workload."),
    initial_rows: int = typer.Option(1000, "--initial-rows", min=0, help="Rows per table."),
    seed: int = typer.Option(7, "--seed", help="Seed of the workload (and of the faults)."),
    schema: str | None = typer.Option(
        None, "--schema", help="Source schema = Iceberg namespace (default: shop, shop_2, ...)."
    ),
    snapshot: str = typer.Option(
        "debezium",
        "--snapshot",
        help="PostgreSQL: debezium (the connector's snapshot sends every initial row) or "
        "bulk (the tables are copied to Parquet and appended while Debezium streams).",
    ),
    faults: bool = typer.Option(
        False, "--faults", help="kill -9 every service twice and restart Kafka once."
    ),
    catch_up_timeout: float = typer.Option(
        600.0, "--catch-up-timeout", help="Seconds to wait for Iceberg after the workload."
    ),
    stop_services: bool = typer.Option(
        False, "--stop-services/--keep-services", help="Stop the four services at the end."
    ),
) -> None:
    """From PostgreSQL through Debezium to Iceberg with live progress; then prove every
    Iceberg table equals its source. Exit 1 if not, 2 if the demo could not be set up."""
    console = Console()
    if source not in ("auto", "postgres", "generator"):
        console.print(f"[red]--source must be auto, postgres or generator, not {source!r}[/]")
        raise typer.Exit(EXIT_SETUP_FAILED)
    if snapshot not in ("bulk", "debezium"):
        console.print(f"[red]--snapshot must be bulk or debezium, not {snapshot!r}[/]")
        raise typer.Exit(EXIT_SETUP_FAILED)
    choice: SourceChoice = source  # type: ignore[assignment]  # checked just above
    options = DemoOptions(
        source=choice,
        workload=WorkloadSpec(rate=rate, duration_s=duration, initial_rows=initial_rows, seed=seed),
        schema=schema,
        snapshot="bulk" if snapshot == "bulk" else "debezium",
        during_copy=200,
        faults=faults,
        catch_up_timeout_s=catch_up_timeout,
        stop_services=stop_services,
    )
    try:
        result = run_demo(LocalSettings(), options, console)
    except (DemoError, StartError, ArtifactError, PostgresError, ConnectError) as exc:
        console.print(f"[red]demo could not start:[/] {exc}")
        raise typer.Exit(EXIT_SETUP_FAILED) from exc
    print_summary(result, console)
    raise typer.Exit(result.exit_code)


def pipeline_bench(options: BenchOptions) -> None:
    """Run the end-to-end benchmark and exit: 0 ran and verified (goals missed are reported,
    not an error), 1 verification failed, 2 it could not be set up."""
    console = Console()
    try:
        result = run_bench(LocalSettings(), options, console)
    except (DemoError, StartError, ArtifactError, PostgresError, ConnectError) as exc:
        console.print(f"[red]bench could not start:[/] {exc}")
        raise typer.Exit(EXIT_SETUP_FAILED) from exc
    print_bench(result, console)
    raise typer.Exit(result.exit_code)


def bench_pipeline_command(
    source: str = typer.Option(
        "auto", "--source", help="auto (PostgreSQL if installed), postgres or generator."
    ),
    snapshot_rows: int = typer.Option(
        200_000, "--snapshot-rows", min=0, help="Rows in the source before capture starts."
    ),
    snapshot: str = typer.Option(
        "bulk",
        "--snapshot",
        help="PostgreSQL: bulk (copy the tables while Debezium streams) or debezium (the "
        "connector's own snapshot).",
    ),
    rates: str = typer.Option(
        "1000", "--rates", help="Offered changes/s of the fixed-rate phases, comma-separated."
    ),
    phase_seconds: float = typer.Option(
        120.0, "--phase-seconds", min=1, help="Seconds of each fixed-rate phase."
    ),
    warm_up_seconds: float = typer.Option(
        60.0,
        "--warm-up-seconds",
        min=0,
        help="Seconds at the first --rates rate after the snapshot, reported but judged "
        "against no goal (0: none).",
    ),
    max_seconds: float = typer.Option(
        120.0, "--max-seconds", min=0, help="Seconds of the unpaced phase (0: none)."
    ),
    set_rates: str = typer.Option(
        "10000",
        "--set-rates",
        help="Offered changes/s of fixed-rate phases whose source sends set-based UPDATEs "
        "(--rows-per-statement rows each), comma-separated; empty: none.",
    ),
    rows_per_statement: int = typer.Option(
        100, "--rows-per-statement", min=2, help="Rows each set-based UPDATE changes."
    ),
    out: Path | None = typer.Option(  # noqa: B008 (typer's idiom)
        None, "--out", help="Report directory (default <state>/bench/<timestamp>)."
    ),
    keep_source: bool = typer.Option(
        False,
        "--keep-source",
        help="Keep the source's PostgreSQL schema (by default dropped once every table "
        "equals its source; kept when one does not).",
    ),
) -> None:
    """The whole pipeline: snapshot load, fixed rates, maximum; throughput, freshness and
    files over time; then every table verified. Writes report.md and bench.png."""
    console = Console()
    if source not in ("auto", "postgres", "generator"):
        console.print(f"[red]--source must be auto, postgres or generator, not {source!r}[/]")
        raise typer.Exit(EXIT_SETUP_FAILED)
    if snapshot not in ("bulk", "debezium"):
        console.print(f"[red]--snapshot must be bulk or debezium, not {snapshot!r}[/]")
        raise typer.Exit(EXIT_SETUP_FAILED)
    offered = _rates(rates, "--rates", console)
    set_offered = _rates(set_rates, "--set-rates", console)
    choice: SourceChoice = source  # type: ignore[assignment]  # checked just above
    pipeline_bench(
        BenchOptions(
            source=choice,
            snapshot_rows=snapshot_rows,
            snapshot="bulk" if snapshot == "bulk" else "debezium",
            rates=offered,
            phase_seconds=phase_seconds,
            warm_up_seconds=warm_up_seconds,
            max_seconds=max_seconds,
            set_rates=set_offered,
            rows_per_statement=rows_per_statement,
            out=out,
            keep_source=keep_source,
        )
    )


def _rates(text: str, option: str, console: Console) -> tuple[float, ...]:
    """Comma-separated positive numbers; exits with a message on anything else."""
    try:
        offered = tuple(float(r) for r in text.split(",") if r.strip())
    except ValueError:
        offered = (-1.0,)
    if any(r <= 0 for r in offered):
        console.print(f"[red]{option} takes positive numbers separated by commas, not {text!r}[/]")
        raise typer.Exit(EXIT_SETUP_FAILED)
    return offered


def print_bench(result: BenchResult, console: Console) -> None:
    """Goals, phases and where the report is."""
    from rich.table import Table

    from icefjord.demo.report import phase_rows

    report = result.report
    phases = Table(title=f"Icefjord end to end ({report.source}, schema {report.schema})")
    for column in (
        "phase",
        "offered/s",
        "source/s",
        "changes",
        "applied/s",
        "e2e/s",
        "sustained/s",
        "p50 s",
        "p99 s",
        "<=5 s",
        "<=15 s",
        "source s",
        "drain s",
        "caught up",
    ):
        phases.add_column(column, justify="left" if column == "phase" else "right")
    for row in phase_rows(report.phases):
        phases.add_row(*(cell.replace("*", "") for cell in row))
    console.print(phases)
    marks = {True: "[green]met[/]", False: "[red]missed[/]", None: "not measured"}
    for verdict in report.verdicts:
        console.print(f"{marks[verdict.met]}  {verdict.goal}: {verdict.measured}")
    if report.verified:
        console.print("[green]Every Iceberg table equals its source.[/]")
    else:
        console.print("[red]Verification failed: these figures are not a result.[/]")
    console.print(f"report: {result.path}")
    console.print(
        f"chart: {result.chart}" if result.chart else "chart: not drawn (matplotlib missing)"
    )
