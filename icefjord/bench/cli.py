"""``icefjord bench``: every benchmark of Icefjord behind one command group.

Without a subcommand it runs ``pipeline``, the end-to-end benchmark (``make bench``). The
others time one part: ``drain`` (CPU per change of a backlog drained from a cold start),
``normalize`` (the normalizer's per-record path, or its whole loop
through Kafka), ``write`` and ``new-tables`` (the writer alone), ``recovery`` (the writer
killed under load) and ``maintain`` (small commits under the maintainer). Reports and charts
of past runs live in ``docs/benchmarks/``.
"""

from __future__ import annotations

import time
from functools import partial
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from icefjord.bench.normalizer import InputFormat, bench, build_kind
from icefjord.bench.pipeline import BenchOptions, BenchResult, run_bench
from icefjord.bench.stores import Store, parse_stores, run_stores, throughput_verdict
from icefjord.demo.cli import EXIT_SETUP_FAILED, checked_source
from icefjord.demo.run import DemoError
from icefjord.local.artifacts import ArtifactError
from icefjord.local.connect import ConnectError
from icefjord.local.postgres import PostgresError
from icefjord.local.settings import LocalSettings
from icefjord.local.stack import StartError

bench_app = typer.Typer(
    help="Benchmarks: the whole pipeline (default), the normalizer's path, the writer, the "
    "maintainer."
)
console = Console()
errors = Console(stderr=True)


@bench_app.callback(invoke_without_command=True)
def bench_default(ctx: typer.Context) -> None:
    """Without a subcommand: `icefjord bench pipeline` with its defaults."""
    if ctx.invoked_subcommand is None:
        pipeline_bench(BenchOptions())


@bench_app.command("maintain")
def bench_maintain_command(
    minutes: Annotated[float, typer.Option(min=0.1, help="How long to stream.")] = 30.0,
    interval: Annotated[float, typer.Option(min=0.1, help="Seconds between commits.")] = 1.0,
    rows: Annotated[int, typer.Option(min=1, help="Changes per commit.")] = 20,
    partitions: Annotated[int, typer.Option(min=1, help="Partitions of the table.")] = 4,
    format_version: Annotated[
        int, typer.Option(min=2, max=3, help="Table format (3: deletion vectors, as written).")
    ] = 3,
    sample_every: Annotated[float, typer.Option(min=1, help="Seconds between samples.")] = 10.0,
    keep: Annotated[bool, typer.Option(help="Keep the table afterwards.")] = False,
    out: Annotated[
        Path | None,
        typer.Option(help="Directory for samples.csv, commits.csv and the chart bench.png."),
    ] = None,
    target: Annotated[
        float, typer.Option(min=0.1, help="Commit latency target drawn on the chart (s).")
    ] = 10.0,
) -> None:
    """Stream small MERGE commits for MINUTES under the maintainer's policies; report files
    per partition over time and commit latency during maintenance (Spark + catalog only)."""
    from icefjord.bench.maintainer import BenchConfig, run_and_render

    config = BenchConfig(
        duration_s=minutes * 60,
        commit_interval_s=interval,
        rows_per_commit=rows,
        partitions=partitions,
        format_version=format_version,
        keys=max(rows * 100, 1000),
        sample_interval_s=sample_every,
    )
    if not run_and_render(config, keep=keep, console=console, out=out, latency_target_s=target):
        raise typer.Exit(1)


@bench_app.command("pipeline")
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
    writers: int = typer.Option(
        1, "--writers", min=1, help="Writer instances sharing the tables (one consumer group)."
    ),
    stores: str = typer.Option(
        "",
        "--stores",
        help="Run the phases on each of these warehouse stores in turn and compare them, "
        "e.g. file,s3 (file: local disk + SQLite catalog; s3: the local S3 server + "
        "PostgreSQL catalog). Empty: the stack's own store only.",
    ),
) -> None:
    """The whole pipeline: snapshot load, fixed rates, maximum; throughput, freshness and
    files over time; then every table verified. Writes report.md and bench.png (with
    --stores: one report per store and a comparison, stores.png)."""
    console = Console()
    choice = checked_source(source, snapshot, console)
    offered = _rates(rates, "--rates", console)
    set_offered = _rates(set_rates, "--set-rates", console)
    try:
        chosen = parse_stores(stores) if stores else ()
    except ValueError as exc:
        console.print(f"[red]{exc}[/]")
        raise typer.Exit(EXIT_SETUP_FAILED) from exc
    run = pipeline_bench if not chosen else partial(stores_bench, stores=chosen)
    run(
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
            writers=writers,
        )
    )


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


def stores_bench(options: BenchOptions, stores: tuple[Store, ...]) -> None:
    """Run the end-to-end benchmark on each store and exit as :func:`pipeline_bench`
    (1: a store's verification failed)."""
    console = Console()
    try:
        comparison = run_stores(LocalSettings(), options, stores, console)
    except (DemoError, StartError, ArtifactError, PostgresError, ConnectError) as exc:
        console.print(f"[red]bench could not start:[/] {exc}")
        raise typer.Exit(EXIT_SETUP_FAILED) from exc
    for store, result in comparison.results.items():
        console.rule(store)
        print_bench(result, console)
    reports = {store: result.report for store, result in comparison.results.items()}
    if len(reports) > 1:
        verdict = throughput_verdict(reports)
        mark = {True: "[green]met[/]", False: "[red]missed[/]", None: "not measured"}
        console.print(f"{mark[verdict.met]}  {verdict.goal}: {verdict.measured}")
    console.print(f"comparison: {comparison.path}")
    raise typer.Exit(comparison.exit_code)


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
    from icefjord.bench.report import phase_rows

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
    from icefjord.bench.normalizer_service import bench_service
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
    from icefjord.bench.writer import bench_write
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
    from icefjord.bench.writer import bench_new_tables
    from services.iceberg_writer.config import WriterSettings

    settings = WriterSettings(topic_replication_factor=1, metrics={"port": 0})
    table = Table(title=f"iceberg-writer: {tables} new tables of {rows} changes each")
    for column in ("run", "seconds", "tables/s"):
        table.add_column(column, justify="right")
    for run in range(1, runs + 1):
        result = bench_new_tables(settings, tables=tables, rows=rows, progress=console.log)
        table.add_row(str(run), f"{result.seconds:.1f}", f"{result.tables_per_second:.1f}")
    console.print(table)


@bench_app.command("commit-cost")
def bench_commit_cost_command(
    sizes: str = typer.Option(
        "100000,10000000", "--rows", help="Table sizes to compare, comma-separated."
    ),
    batch: int = typer.Option(3000, "--batch", min=1, help="Upserts per commit."),
    commits: int = typer.Option(7, "--commits", min=1, help="Commits timed per size."),
    keep: bool = typer.Option(False, "--keep", help="Keep the tables afterwards."),
) -> None:
    """What one upsert commit costs (wall and CPU) as its table grows, on the running
    stack's catalog and warehouse (local disk, or S3 with ICEFJORD_LOCAL_WAREHOUSE_STORE=s3)."""
    from icefjord.bench.commit_cost import bench_commit_cost

    settings = LocalSettings()
    rows = [int(part.replace("_", "")) for part in sizes.split(",") if part.strip()]
    results = bench_commit_cost(
        settings, rows, batch=batch, commits=commits, keep=keep, progress=console.log
    )
    table = Table(
        title=f"{batch:,} upserts per commit, median of {commits} commits, "
        f"warehouse {settings.warehouse_uri}, catalog {settings.catalog_store}"
    )
    columns = (
        "table rows",
        "wall s",
        "CPU s",
        "wall vs smallest",
        "CPU vs smallest",
        "first commit s (key index read)",
    )
    for column in columns:
        table.add_column(column, justify="right")
    first = results[0]
    for result in results:
        table.add_row(
            f"{result.rows:,}",
            f"{result.wall_s:.3f}",
            f"{result.cpu_s:.3f}",
            f"{result.wall_s / first.wall_s:.2f}",
            f"{result.cpu_s / first.cpu_s:.2f}" if first.cpu_s else "-",
            f"{result.first_s:.2f}",
        )
    console.print(table)


@bench_app.command("drain")
def bench_drain_command(
    workload: str = typer.Option(
        "demo",
        "--workload",
        help="demo: the demo's three tables, every type; peer: the one table a Flink SQL job "
        "reads too (--rows inserts, as many updates, a quarter as many deletes).",
    ),
    rows: int = typer.Option(300_000, "--rows", min=0, help="Rows inserted."),
    updates: int = typer.Option(
        600_000, "--updates", min=0, help="Rows updated by set-based UPDATE statements."
    ),
    dml: int = typer.Option(
        100_000,
        "--dml",
        min=0,
        help="Row changes one statement each (inserts, updates, key changes, deletes).",
    ),
    keep_source: bool = typer.Option(
        False, "--keep-source", help="Keep the source schema after a verified run."
    ),
    out: Path | None = typer.Option(  # noqa: B008 (typer's idiom)
        None, "--out", help="Report directory (default <state>/bench/drain-<timestamp>)."
    ),
) -> None:
    """CPU per change: stop the services, make a backlog through PostgreSQL and Debezium,
    start the services cold and time them until every table holds every change; verify."""
    from icefjord.bench.drain import DrainOptions, render, run_drain

    if workload not in ("demo", "peer"):
        errors.print(f"--workload is demo or peer, not {workload!r}")
        raise typer.Exit(2)
    options = DrainOptions(
        workload="peer" if workload == "peer" else "demo",
        rows=rows,
        updates=updates,
        dml=dml,
        keep_source=keep_source,
        out=out,
    )
    settings = LocalSettings()
    try:
        report, path = run_drain(settings, options, console)
    except (DemoError, StartError, ArtifactError, PostgresError, ConnectError) as exc:
        errors.print(f"[red]{exc}[/red]")
        raise typer.Exit(EXIT_SETUP_FAILED) from exc
    console.print(render(report))
    console.print(f"wrote {path}")
    if not report.verified:
        raise typer.Exit(1)


@bench_app.command("control-history")
def bench_control_history_command(
    events: int = typer.Option(
        3_000_000, "--events", min=1, help="Control events in the synthetic history."
    ),
    tail: int = typer.Option(
        20_000,
        "--tail",
        min=1,
        help="Events published after the first start, before the start from the checkpoint "
        "(default: one checkpoint interval, the most a running service leaves unfolded).",
    ),
    out: Path | None = typer.Option(  # noqa: B008 (typer's idiom)
        None, "--out", help="Report directory (default <state>/bench/control-history-<time>)."
    ),
) -> None:
    """Start-up against a long control history: publish EVENTS synthetic control events (a
    busy table committing once a second) to a topic of their own, then time the writer's and
    the watcher's start, each alone in a fresh process, with its peak memory: first with no
    checkpoint, then after TAIL more events from the checkpoint. Needs the stack's Kafka and
    registry (`icefjord local up`)."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

    from icefjord.bench.control_history import MEASURES, measure, publish_history, report

    settings = LocalSettings()
    kafka, registry = settings.kafka_settings(), settings.registry_settings()
    topic = f"icefjord.bench.control-history-{int(time.time())}"

    def publish(count: int, first: int, what: str) -> float:
        with Progress(TextColumn(what), BarColumn(), MofNCompleteColumn(), transient=True) as bar:
            task = bar.add_task("publish", total=count)
            return publish_history(
                kafka, registry, topic, count, lambda n: bar.update(task, completed=n), first
            )

    publish_s = publish(events, 0, "publishing the history")
    console.print(f"published {events:,} control events to {topic} in {publish_s:.1f} s")
    costs = []
    for start, label in (("no checkpoint", "reads the history"), ("checkpoint", "restarts")):
        if start == "checkpoint":
            publish(tail, events, f"publishing {tail:,} more")
        for service in MEASURES:
            with console.status(f"{service} {label}"):
                costs.append(measure(service, kafka, registry, topic, start))
            console.print(costs[-1])
    stamp = time.strftime("%Y%m%d-%H%M%S")
    path = report(
        events,
        tail,
        publish_s,
        costs,
        out or settings.state / "bench" / f"control-history-{stamp}",
    )
    console.print(f"wrote {path}")


@bench_app.command("peer")
def bench_peer_command(
    rows: int = typer.Option(
        600_000,
        "--rows",
        min=1,
        help="Rows of the peer table: as many inserts and updates, a quarter as many deletes.",
    ),
    parallelism: int = typer.Option(2, "--parallelism", min=1, help="The Flink job's."),
    out: Path | None = typer.Option(  # noqa: B008 (typer's idiom)
        None, "--out", help="Report directory (default <state>/bench/peer-<timestamp>)."
    ),
) -> None:
    """Icefjord beside a Flink SQL job (PyFlink, Kafka connector, Iceberg's Flink runtime) on
    one Debezium backlog: wall time, CPU and changes per CPU second of each; both verified."""
    import shlex
    import sys

    from icefjord.bench.peer import PeerOptions, render, run_peer

    settings = LocalSettings()
    options = PeerOptions(rows=rows, parallelism=parallelism, out=out)
    try:
        report, path = run_peer(settings, options, shlex.join(sys.argv), console)
    except (DemoError, StartError, ArtifactError, PostgresError, ConnectError) as exc:
        errors.print(f"[red]{exc}[/red]")
        raise typer.Exit(EXIT_SETUP_FAILED) from exc
    console.print(render(report))
    console.print(f"wrote {path}")
    if not (report.icefjord.verified and report.flink.equal and report.flink.caught_up):
        raise typer.Exit(1)


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
    from icefjord.bench.recovery import bench_recovery, write_outputs

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


@bench_app.command("writers")
def bench_writers_command(
    records: Annotated[
        int, typer.Option(min=1000, help="Change records of the backlog.")
    ] = 2_000_000,
    partitions: Annotated[int, typer.Option(min=1, help="Partitions of the table's topic.")] = 6,
    keys: Annotated[int, typer.Option(min=1, help="Keys inserted before the updates.")] = 500_000,
    instances: Annotated[
        list[int] | None,
        typer.Option(
            "--instances", min=1, help="Writer instances of a run; repeat for several runs."
        ),
    ] = None,
    warm_up: Annotated[
        bool, typer.Option(help="The writers' Spark warm-up beside the loop (their default).")
    ] = True,
    join_after: Annotated[
        float,
        typer.Option(
            min=0,
            help="Seconds between the instances' starts (0: together): the later ones join a "
            "table the first is writing, as an added instance does.",
        ),
    ] = 0.0,
    out: Annotated[
        Path | None,
        typer.Option(help="Directory of the report (default <state>/bench/writers-<time>)."),
    ] = None,
) -> None:
    """One table's backlog drained by one writer instance, then by several sharing it (one
    consumer group): records/s, CPU and a check of every table, on the local stack."""
    import sys

    from icefjord.bench.writers import WritersOptions, run_writers

    options = WritersOptions(
        records=records,
        partitions=partitions,
        keys=keys,
        instances=tuple(instances or (1, 2)),
        warm_up=warm_up,
        join_after_s=join_after,
        out=out,
        command="icefjord bench writers " + " ".join(sys.argv[3:]),
    )
    report, where = run_writers(LocalSettings(), options, console)
    console.print((where / "report.md").read_text())
    console.print(f"wrote {where}")
    if not all(run.verified for run in report.runs):
        raise typer.Exit(1)
