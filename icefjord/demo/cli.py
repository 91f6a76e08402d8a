"""``icefjord demo``: the command the CLI registers (``app.command("demo")(demo_command)``).
``icefjord bench pipeline`` lives with the other benchmarks in :mod:`icefjord.bench.cli`."""

from __future__ import annotations

import typer
from rich.console import Console

from icefjord.demo.engines import parse_engines
from icefjord.demo.plan import WorkloadSpec
from icefjord.demo.run import DemoError, DemoOptions, SourceChoice, print_summary, run_demo
from icefjord.local.artifacts import ArtifactError
from icefjord.local.connect import ConnectError
from icefjord.local.postgres import PostgresError
from icefjord.local.settings import LocalSettings
from icefjord.local.stack import StartError
from icefjord.readers.trino import TrinoError

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
    readers: str = typer.Option(
        "spark",
        "--readers",
        help="Engines that read every table at the end, comma-separated, or all: "
        "spark, pyiceberg, pyiceberg-pandas, pyiceberg-duckdb, duckdb, trino.",
    ),
    probes: int = typer.Option(
        0,
        "--probes",
        min=0,
        help="Moments of the run at which every engine reads the same snapshots.",
    ),
) -> None:
    """From PostgreSQL through Debezium to Iceberg with live progress; then prove every
    Iceberg table equals its source. Exit 1 if not, 2 if the demo could not be set up."""
    console = Console()
    choice = checked_source(source, snapshot, console)
    try:
        engines = parse_engines(readers)
    except ValueError as exc:
        console.print(f"[red]--readers:[/] {exc}")
        raise typer.Exit(EXIT_SETUP_FAILED) from exc
    options = DemoOptions(
        source=choice,
        workload=WorkloadSpec(rate=rate, duration_s=duration, initial_rows=initial_rows, seed=seed),
        schema=schema,
        snapshot="bulk" if snapshot == "bulk" else "debezium",
        during_copy=200,
        faults=faults,
        catch_up_timeout_s=catch_up_timeout,
        stop_services=stop_services,
        readers=engines,
        probes=probes,
    )
    try:
        result = run_demo(LocalSettings(), options, console)
    except (DemoError, StartError, ArtifactError, PostgresError, ConnectError, TrinoError) as exc:
        console.print(f"[red]demo could not start:[/] {exc}")
        raise typer.Exit(EXIT_SETUP_FAILED) from exc
    print_summary(result, console)
    raise typer.Exit(result.exit_code)


def checked_source(source: str, snapshot: str, console: Console) -> SourceChoice:
    """``--source`` once it and ``--snapshot`` hold one of their choices; otherwise says
    which does not and exits with :data:`EXIT_SETUP_FAILED` (the demo's and the benchmark's
    options alike)."""
    if source not in ("auto", "postgres", "generator"):
        console.print(f"[red]--source must be auto, postgres or generator, not {source!r}[/]")
        raise typer.Exit(EXIT_SETUP_FAILED)
    if snapshot not in ("bulk", "debezium"):
        console.print(f"[red]--snapshot must be bulk or debezium, not {snapshot!r}[/]")
        raise typer.Exit(EXIT_SETUP_FAILED)
    return source  # type: ignore[return-value]  # checked just above
