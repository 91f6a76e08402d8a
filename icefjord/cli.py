"""The ``icefjord`` command line."""

from __future__ import annotations

import typer
from rich.console import Console
from rich.table import Table

from icefjord.bench.cli import bench_app
from icefjord.demo.cli import demo_command
from icefjord.local.components import Health
from icefjord.local.settings import LocalSettings
from icefjord.local.stack import LocalStack, StartError
from icefjord.replay_cli import deadletter_app, quarantine_app
from services.cdc_normalizer.cli import normalize_command
from services.iceberg_writer.cli import register_control_commands as register_writer_commands
from services.maintainer.cli import register_control_commands as register_maintainer_commands
from services.maintainer.cli import table_app, tables_command
from services.schema_watcher.cli import schema_app

app = typer.Typer(help="Icefjord: Debezium change streams into fresh Apache Iceberg tables.")
local_app = typer.Typer(help="The local stack: real Kafka, Apicurio Registry, Spark + Iceberg.")
control_app = typer.Typer(
    help="Publish operator commands and maintenance requests on the control topic.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)
register_writer_commands(control_app)
register_maintainer_commands(control_app)
app.add_typer(local_app, name="local")
app.add_typer(schema_app, name="schema")
app.add_typer(bench_app, name="bench")
app.command("normalize")(normalize_command)
app.add_typer(control_app, name="control")
app.command("tables")(tables_command)
app.add_typer(table_app, name="table")
app.add_typer(deadletter_app, name="deadletter")
app.add_typer(quarantine_app, name="quarantine")


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


if __name__ == "__main__":
    app()
