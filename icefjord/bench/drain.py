"""``icefjord bench drain``: the CPU each service spends per change, draining a backlog from a
cold start.

A data team weighing Icefjord against a Flink SQL job asks what one change costs. This
benchmark answers on the real pipeline:

1. the four services are stopped;
2. a fresh schema in PostgreSQL gets the demo's tables, Debezium captures them, and the
   source makes the backlog: ``rows`` inserts with ``COPY`` (streamed inserts, not a
   snapshot), ``updates`` row updates by set-based ``UPDATE`` statements, and ``dml`` row
   changes one statement each (inserts, updates, key changes, deletes);
3. once Kafka holds every change Debezium made of them, the services start (cold: their
   JVMs, registry lookups and table loads count) and drain it, until every table's writer
   watermark reached its last source change and no service lags;
4. every table is compared with its source; the report gives wall seconds, CPU seconds of
   each service (from ``/proc``, each from its start; a service's Spark JVM counts with it)
   and of the stack, changes per CPU second and microseconds of CPU per change.

The figures measure the services only: the source and Debezium work before the clock starts.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import math
import os
import re
import shlex
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Literal

from rich.console import Console
from rich.live import Live

from icefjord.bench import peer_workload
from icefjord.bench.cpu import CpuUse
from icefjord.bench.pipeline import (
    BENCH_CLIENT,
    Bench,
    BenchOptions,
    copy_load,
    normalizer_build,
    verify_and_settle,
)
from icefjord.demo.catchup import end_offsets
from icefjord.demo.plan import Planner, Transaction, WorkloadSpec, row_operations
from icefjord.demo.run import (
    DemoError,
    DemoOptions,
    pick_source,
    prepare_source,
    start_services,
)
from icefjord.demo.source import PostgresDemoSource
from icefjord.demo.workload import WorkloadResult
from icefjord.local.services import SERVICE_NAMES, service_processes
from icefjord.local.settings import LocalSettings
from icefjord.local.stack import LocalStack
from shared.settings import CHANGES_TOPIC_PREFIX, DEAD_LETTER_TOPIC

SCHEMA_BASE = "bench_drain"
SERVICE_LABEL = re.compile(r"^(normalizer|watcher|writer|maintainer) service")


Workload = Literal["demo", "peer"]


@dataclass(frozen=True)
class DrainOptions:
    """The backlog's make-up and the run's limits; ``out`` None: ``<state>/bench/drain-<ts>``.

    ``workload`` ``demo``: the demo's three tables (every type the normalizer converts), with
    ``rows``, ``updates`` and ``dml`` as below. ``peer``: the one table a Flink SQL job can
    read too (:mod:`icefjord.bench.peer_workload`), ``rows`` inserts, as many updates and a
    quarter as many deletes; ``updates`` and ``dml`` unused."""

    workload: Workload = "demo"
    rows: int = 300_000
    updates: int = 600_000
    dml: int = 100_000
    rows_per_statement: int = 100
    seed: int = 7
    backlog_timeout_s: float = 1800.0
    catch_up_timeout_s: float = 1800.0
    service_start_timeout_s: float = 300.0
    keep_source: bool = False
    out: Path | None = None
    command: str = field(default_factory=lambda: shlex.join(sys.argv))

    def __post_init__(self) -> None:
        if min(self.rows, self.updates, self.dml) < 0 or self.rows_per_statement < 1:
            raise ValueError("rows, updates and dml >= 0; rows per statement >= 1")
        if self.rows + (0 if self.workload == "peer" else self.updates + self.dml) == 0:
            raise ValueError("an empty backlog has nothing to drain")


@dataclass(frozen=True)
class Backlog:
    """What the source did: row changes by kind, and the Kafka records Debezium made of them
    (a delete adds a tombstone, a key change a delete, a tombstone and an insert)."""

    inserts: int
    updates: int
    key_changes: int
    deletes: int
    kafka_records: int
    seconds: float

    @property
    def changes(self) -> int:
        return self.inserts + self.updates + self.key_changes + self.deletes


@dataclass(frozen=True)
class ComponentFigure:
    """One component's CPU seconds over the drain (None: not measured), and per change."""

    name: str
    cpu_seconds: float | None
    service: bool

    def per_change_us(self, changes: int) -> float | None:
        if self.cpu_seconds is None or changes <= 0:
            return None
        return self.cpu_seconds / changes * 1e6


@dataclass(frozen=True)
class DrainReport:
    command: str
    started: str
    schema: str
    workload: str
    backlog: Backlog
    wall_seconds: float
    caught_up: bool
    components: tuple[ComponentFigure, ...]
    tables: tuple[tuple[str, int, int, bool], ...]
    dead_letters: int
    normalizer_build: str
    machine: str

    @property
    def service_cpu_seconds(self) -> float:
        return sum(c.cpu_seconds or 0.0 for c in self.components if c.service)

    @property
    def changes_per_cpu_second(self) -> float | None:
        cpu = self.service_cpu_seconds
        return self.backlog.changes / cpu if cpu > 0 else None

    @property
    def verified(self) -> bool:
        return self.caught_up and self.dead_letters == 0 and all(ok for *_, ok in self.tables)


def figures_of(cpu: CpuUse | None) -> tuple[ComponentFigure, ...]:
    """The components of ``cpu`` as figures; the four services marked (their label starts
    with the service's name, see :func:`icefjord.bench.pipeline.cpu_roots`)."""
    if cpu is None:
        return ()
    return tuple(
        ComponentFigure(c.name, c.seconds, bool(SERVICE_LABEL.match(c.name)))
        for c in cpu.components
    )


def kafka_records(result: WorkloadResult) -> int:
    """Kafka records Debezium writes for ``result``'s changes with its default
    ``tombstones.on.delete``: one per insert and update, two per delete, three per key change."""
    return result.inserts + result.updates + 2 * result.deletes + 3 * result.key_changes


def limited(transactions: Iterable[Transaction], changes: int) -> Iterator[Transaction]:
    """``transactions`` until they hold at least ``changes`` row changes."""
    done = 0
    for tx in transactions:
        if done >= changes:
            return
        yield tx
        done += sum(row_operations(op) for op in tx.ops)


def _us(value: float | None) -> str:
    return "-" if value is None else f"{value:,.1f}"


def render(report: DrainReport) -> str:
    """The report as Markdown."""
    b = report.backlog
    n = b.changes
    rate = report.changes_per_cpu_second
    lines = [
        "# Drain benchmark: CPU per change from a cold start",
        "",
        f"- command: `{report.command}`",
        f"- started {report.started}; source schema `{report.schema}` ({report.workload} "
        f"workload); {report.machine}",
        f"- normalizer and writer build: {report.normalizer_build}",
        f"- backlog: **{n:,} row changes** ({b.inserts:,} inserts, {b.updates:,} updates, "
        f"{b.key_changes:,} key changes, {b.deletes:,} deletes) in {b.kafka_records:,} "
        f"Debezium records (JSON with schemas), made in {b.seconds:.0f} s before the clock",
        f"- drained in **{report.wall_seconds:.1f} s** wall from the services' start"
        + ("" if report.caught_up else " (NOT caught up within the timeout: partial)"),
        f"- the four services: **{report.service_cpu_seconds:.1f} CPU s, "
        + (f"{rate:,.0f} changes per CPU second**" if rate else "-**")
        + f", {_us(report.service_cpu_seconds / n * 1e6 if n else None)} us per change",
        "",
        "| component | CPU s | us per change |",
        "|---|---:|---:|",
    ]
    for c in report.components:
        name = f"**{c.name}**" if c.service else c.name
        seconds = "-" if c.cpu_seconds is None else f"{c.cpu_seconds:.1f}"
        lines.append(f"| {name} | {seconds} | {_us(c.per_change_us(n))} |")
    lines += ["", "| table | source rows | Iceberg rows | equal |", "|---|---:|---:|---|"]
    for table, source_rows, iceberg_rows, ok in report.tables:
        lines.append(f"| {table} | {source_rows:,} | {iceberg_rows:,} | {'yes' if ok else 'NO'} |")
    verdict = (
        "every Iceberg table equals its source"
        if report.verified
        else "NOT VERIFIED: a table differs, a record was dead-lettered or the drain timed out"
    )
    lines += ["", f"Dead letters: {report.dead_letters}. Result: **{verdict}**.", ""]
    return "\n".join(lines)


def write(report: DrainReport, out: Path) -> Path:
    """``report.md`` and ``report.json`` in ``out``; the Markdown's path."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "report.json").write_text(json.dumps(asdict(report), indent=2) + "\n")
    path = out / "report.md"
    path.write_text(render(report))
    return path


# -- the shell -------------------------------------------------------------------------------


def _stop_services(settings: LocalSettings, log: Callable[[str], None], why: str) -> None:
    for service in service_processes(settings):
        if service.running():
            log(f"stopping {service.name} ({why})")
            service.stop()


def _source_records(settings: LocalSettings, topics: Sequence[str]) -> int:
    kafka = settings.kafka_settings()
    return sum(sum(end_offsets(kafka, topic).values()) for topic in topics)


def make_backlog(
    source: PostgresDemoSource, planner: Planner, options: DrainOptions, log: Callable[[str], None]
) -> tuple[Backlog, dict[str, int]]:
    """Create the tables, start capture, run the workload; return what it did and each
    table's last change (ms) once Kafka holds every record Debezium makes of it."""
    began = time.monotonic()
    if options.workload == "peer":
        backlog, last, tables = _peer_backlog(source, options, log)
    else:
        backlog, last, tables = _demo_backlog(source, planner, options, log)
    topics = [source.names.topic(t) for t in tables]
    deadline = time.monotonic() + options.backlog_timeout_s
    expected = backlog.kafka_records
    while (have := _source_records(source.settings, topics)) < expected:
        if time.monotonic() > deadline:
            raise DemoError(f"Debezium wrote {have:,} of {expected:,} records in time")
        log(f"Debezium has written {have:,} of {expected:,} records")
        time.sleep(5)
    return dataclasses.replace(backlog, seconds=time.monotonic() - began), last


def _capture(source: PostgresDemoSource, tables: list[str]) -> None:
    source.start_capture(tables, source.connector_config())
    source.connect.wait_running(source.names.connector)


def _peer_backlog(
    source: PostgresDemoSource, options: DrainOptions, log: Callable[[str], None]
) -> tuple[Backlog, dict[str, int], list[str]]:
    names = source.names
    conn = source.workload.connection()
    peer_workload.create(conn, names.schema, names.publication)
    _capture(source, [peer_workload.TABLE])
    done = peer_workload.run(conn, names.schema, options.rows, progress=log)
    backlog = Backlog(
        inserts=done.inserts,
        updates=done.updates,
        key_changes=0,
        deletes=done.deletes,
        kafka_records=done.inserts + done.updates + 2 * done.deletes,
        seconds=0.0,
    )
    return backlog, {names.iceberg(peer_workload.TABLE): done.last_change_ms}, [peer_workload.TABLE]


def _demo_backlog(
    source: PostgresDemoSource, planner: Planner, options: DrainOptions, log: Callable[[str], None]
) -> tuple[Backlog, dict[str, int], list[str]]:
    names = source.names
    workload = source.workload
    tables = [t.name for t in planner.initial_tables]
    workload.create_schema(planner.initial_tables, names.publication)
    _capture(source, tables)
    loaded = copy_load(workload, planner.seed(batch=1000)) if options.rows else 0
    log(f"COPY inserted {loaded:,} rows")
    last: dict[str, int] = {}
    totals = [loaded, 0, 0, 0]
    expected = loaded
    for what, changes, plan in (
        (
            "set-based updates",
            options.updates,
            planner.steady(None, ops_per_tx=4, rows_per_statement=options.rows_per_statement),
        ),
        ("row-by-row changes", options.dml, planner.steady(None, ops_per_tx=20)),
    ):
        if changes == 0:
            continue
        result = source.run(limited(plan, changes))
        log(f"{what}: {result.row_changes:,} row changes in {result.seconds:.0f} s")
        for i, count in enumerate((result.inserts, result.updates, result.key_changes)):
            totals[i] += count
        totals[3] += result.deletes
        expected += kafka_records(result)
        for table, ms in result.last_change_ms.items():
            last[table] = max(ms, last.get(table, 0))
    missing = [t for t in tables if names.iceberg(t) not in last]
    if missing:
        raise DemoError(f"no streamed change touched {', '.join(missing)}: raise --dml")
    backlog = Backlog(
        inserts=totals[0],
        updates=totals[1],
        key_changes=totals[2],
        deletes=totals[3],
        kafka_records=expected,
        seconds=0.0,
    )
    return backlog, last, tables


def run_drain(
    settings: LocalSettings, options: DrainOptions, console: Console
) -> tuple[DrainReport, Path]:
    """The whole benchmark (see the module docstring): the report and where it was written.
    Raises ``DemoError`` when it cannot be set up (no PostgreSQL, a service that does not
    start, Debezium too slow)."""
    log = console.log
    started = dt.datetime.now().astimezone()
    out = options.out or settings.state / "bench" / f"drain-{started:%Y%m%d-%H%M%S}"
    LocalStack(settings).up(log)
    pick_source(settings, "postgres", console)  # raises DemoError without PostgreSQL
    _stop_services(settings, log, "the backlog is made while the services are stopped")
    demo = DemoOptions(source="postgres", schema_base=SCHEMA_BASE)
    source = prepare_source(settings, demo, "postgres", log)
    assert isinstance(source, PostgresDemoSource)
    # Only this run's change topics: earlier runs' tables must not be charged to this one.
    own = re.escape(f"{CHANGES_TOPIC_PREFIX}{source.names.schema}.")
    namespace = re.escape(source.names.schema)
    services = service_processes(
        settings,
        SERVICE_NAMES,
        source_topic_prefix=demo.topic_prefix,
        extra_env={
            "writer": {"ICEFJORD_WRITER_TOPIC_PATTERN": rf"^{own}[^.]+$"},
            # Nor their maintenance: a compaction of an earlier run's table is not this drain's.
            "maintainer": {"ICEFJORD_MAINTAINER_INCLUDE": rf"{namespace}\.[^.]+"},
        },
    )
    build = normalizer_build(services)
    kafka = settings.kafka_settings()
    dead_before = end_offsets(kafka, DEAD_LETTER_TOPIC)
    per_table = 0 if options.workload == "peer" else math.ceil(options.rows / 3)
    planner = Planner(WorkloadSpec(initial_rows=per_table, seed=options.seed))
    try:
        backlog, last_change_ms = make_backlog(source, planner, options, log)
        log(f"backlog ready: {backlog.changes:,} changes; starting the services")
        bench_options = BenchOptions(
            catch_up_timeout_s=options.catch_up_timeout_s, command=options.command
        )
        with Live(console=console, refresh_per_second=1) as live:
            bench = Bench(settings, bench_options, source, services, live)
            bench.phase = "drain"
            cpu_start = bench.cpu_reading()
            wall_start = time.time()
            start_services(services, options.service_start_timeout_s, live.console.log)
            bench.last_change_ms.update(last_change_ms)
            done, last = bench.catch_up()
            cpu = bench.cpu_since(cpu_start)
        end = last.last_commit_unix if done and last.last_commit_unix else time.time()
        checked, dead = verify_and_settle(settings, source, dead_before, options.keep_source, log)
    finally:
        source.close()
        # They read only this run's topics and tables: left running, the next `make demo`
        # or benchmark would find them ready and wait for changes they never read.
        _stop_services(settings, log, "started for this drain's tables only")
    report = DrainReport(
        command=options.command,
        started=started.isoformat(timespec="seconds"),
        schema=source.names.schema,
        workload=options.workload,
        backlog=backlog,
        wall_seconds=max(0.0, end - wall_start),
        caught_up=done,
        components=tuple(c for c in figures_of(cpu) if c.name != BENCH_CLIENT),
        tables=tuple((t.table, t.source_rows, t.iceberg_rows, t.ok) for t in checked.tables),
        dead_letters=dead,
        normalizer_build=build or "plain CPython",
        machine=f"{os.cpu_count()} cores, load at end {os.getloadavg()[0]:.1f}",
    )
    return report, write(report, out)
