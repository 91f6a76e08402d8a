"""``icefjord demo`` / ``make demo``: from a real PostgreSQL through Debezium to Iceberg,
with live progress, then proof that every Iceberg table equals its source.

:func:`run_demo` brings up what is missing (the local stack, PostgreSQL and Kafka Connect or
the generator, the four services), creates the demo tables and loads them, drives the timed
workload while showing changes/s, freshness, lag, tables, files and compactions, waits
until the writer has caught up, compares every table row by row, and returns a
:class:`DemoResult` whose ``exit_code`` is non-zero when anything failed. With
``faults=True`` (``make test-e2e``) it also kills each service several times and restarts
the broker once during the workload.
"""

from __future__ import annotations

import contextlib
import itertools
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from rich.console import Console
from rich.live import Live
from rich.table import Table

from icefjord.demo.catchup import (
    behind,
    caught_up,
    count_committed,
    end_offsets,
    iceberg_watermarks,
)
from icefjord.demo.engines import DemoEngines, Probe, demo_engines, probe_times, verify_session
from icefjord.demo.faults import FaultInjector, FaultRecord, plan_faults
from icefjord.demo.plan import Planner, WorkloadSpec
from icefjord.demo.progress import ProgressView, render, scrape_all
from icefjord.demo.source import (
    DemoSource,
    GeneratedDemoSource,
    PostgresDemoSource,
    SourceNames,
    choose_schema,
    retire_earlier_runs,
)
from icefjord.demo.stall import describe_connector, stall_report
from icefjord.demo.verify import SourceTable, VerifyReport, spark_reader, verify
from icefjord.demo.workload import WorkloadResult, paced
from icefjord.local.artifacts import dist_for, ensure_connect_artifacts
from icefjord.local.components import KafkaBroker
from icefjord.local.connect import KafkaConnect
from icefjord.local.objectstore import ObjectStore
from icefjord.local.postgres import PostgresCluster, PostgresNotInstalled, find_bin_dir
from icefjord.local.services import SERVICE_NAMES, ServiceProcess, installed, service_processes
from icefjord.local.settings import LocalSettings
from icefjord.local.stack import LocalStack
from shared.errors import IcefjordError
from shared.settings import DEAD_LETTER_TOPIC, CatalogSettings

SourceChoice = Literal["auto", "postgres", "generator"]


class DemoError(IcefjordError, RuntimeError):
    """The demo could not be set up; the message says what to do."""


@dataclass(frozen=True)
class DemoOptions:
    """What the demo runs. ``schema`` None picks the first unused of shop, shop_2, ..."""

    source: SourceChoice = "auto"
    workload: WorkloadSpec = field(default_factory=WorkloadSpec)
    schema: str | None = None
    topic_prefix: str = "demo"
    services: tuple[str, ...] = SERVICE_NAMES
    service_env: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    dead_letter_topic: str = DEAD_LETTER_TOPIC
    faults: bool = False
    kills_per_service: int = 2
    restart_kafka: bool = True
    # Seconds the S3 server is down once mid-run (with faults, a warehouse on S3); 0: never.
    store_outage_s: float = 0.0
    service_start_timeout_s: float = 300.0
    catch_up_timeout_s: float = 600.0
    stall_s: float = 300.0
    refresh_s: float = 2.0
    stop_services: bool = False
    schema_base: str = "shop"
    # PostgreSQL: "bulk" copies the initial tables while Debezium streams
    # (icefjord.bulk.load), with ``during_copy`` DML transactions running meanwhile.
    snapshot: Literal["debezium", "bulk"] = "debezium"
    during_copy: int = 0
    # The engines that read every table after the run (icefjord.demo.engines.ENGINES;
    # Spark always), and how many moments of the run they read at the same snapshots.
    readers: tuple[str, ...] = ("spark",)
    probes: int = 0


@dataclass(frozen=True)
class DemoResult:
    """What happened; ``exit_code`` 0 only if the writer caught up, every table matched and
    valid data produced no dead letter."""

    source: str
    schema: str
    workload: WorkloadResult
    caught_up: bool
    catch_up_seconds: float
    report: VerifyReport
    dead_letters: int
    freshness_p50_s: float | None
    freshness_p99_s: float | None
    faults: tuple[FaultRecord, ...] = ()
    readers: dict[str, VerifyReport] = field(default_factory=dict)
    """Each engine's comparison with the source (Spark's is ``report``)."""
    probes: tuple[Probe, ...] = ()

    @property
    def ok(self) -> bool:
        return (
            self.caught_up
            and self.report.ok
            and self.dead_letters == 0
            and all(r.ok for r in self.readers.values())
            and all(p.ok for p in self.probes)
        )

    @property
    def exit_code(self) -> int:
        return 0 if self.ok else 1


def pick_source(settings: LocalSettings, wanted: SourceChoice, console: Console) -> str:
    """``postgres`` when its binaries are found (or asked for: then missing is an error),
    else ``generator`` after saying how to install PostgreSQL."""
    if wanted == "generator":
        return "generator"
    try:
        find_bin_dir(settings.postgres_bin_dir)
        return "postgres"
    except PostgresNotInstalled as exc:
        if wanted == "postgres":
            raise DemoError(str(exc)) from exc
        console.print(f"[yellow]{exc}[/]")
        console.print("[yellow]Continuing with the generator (same Debezium events).[/]")
        return "generator"


def _taken_schemas(
    settings: LocalSettings, cluster: PostgresCluster | None, topic_prefix: str
) -> set[str]:
    """Names used by earlier runs: PostgreSQL schemas, Iceberg namespaces, topics."""
    from shared.catalog import open_catalog
    from shared.kafka import make_admin

    taken: set[str] = set()
    if cluster is not None:
        import psycopg

        with psycopg.connect(cluster.conninfo()) as conn:
            taken |= {row[0] for row in conn.execute("SELECT nspname FROM pg_namespace")}
    catalog = open_catalog(
        CatalogSettings(name=settings.catalog_name, local_state_dir=settings.state)
    )
    taken |= {ns[0] for ns in catalog.list_namespaces() if ns}
    topics = make_admin(settings.kafka_settings()).list_topics(timeout=10).topics
    for topic in topics:
        parts = topic.split(".")
        if len(parts) == 3 and parts[0] == topic_prefix:
            taken.add(parts[1])
        if len(parts) == 4 and topic.startswith("icefjord.changes."):
            taken.add(parts[2])
    return taken


def start_services(
    services: list[ServiceProcess], timeout_s: float, log: Callable[[str], None]
) -> None:
    """Start each service that is not ready and wait until all answer ``/readyz``; raises
    :class:`DemoError` (with the log tail) when one is missing, exits or times out."""
    missing = [s.spec.module for s in services if not installed(s.spec)]
    if missing:
        raise DemoError(
            f"not installed in this environment: {', '.join(missing)}; "
            "run `make install` (or pass services=... without them)"
        )
    for service in services:
        if not service.check().healthy:
            build = f", {service.build}" if service.build else ""
            log(f"starting {service.name} ({service.spec.module}{build})")
            service.start()
    deadline = time.monotonic() + timeout_s
    for service in services:
        while not (health := service.check()).healthy:
            if health.detail.startswith("stopped") or time.monotonic() > deadline:
                raise DemoError(
                    f"{service.name} did not become ready ({health.detail})\n--- log tail ---\n"
                    f"{service.log_tail()}"
                )
            time.sleep(1)
        log(f"{service.name} ready at {service.address()}")


def prepare_source(
    settings: LocalSettings, options: DemoOptions, kind: str, log: Callable[[str], None]
) -> DemoSource:
    """The source of ``kind`` under a fresh schema (``options.schema`` or the first unused
    of ``<schema_base>``, ``<schema_base>_2``, ...): for PostgreSQL the cluster and Kafka
    Connect are started if needed and earlier runs' connectors retired. Nothing is created
    in the source yet."""
    if kind == "generator":
        taken = _taken_schemas(settings, None, options.topic_prefix)
        names = SourceNames(
            options.schema or choose_schema(taken, options.schema_base), options.topic_prefix
        )
        return GeneratedDemoSource(settings, names)
    connect_dist = ensure_connect_artifacts(settings, log)
    cluster = PostgresCluster(settings)
    log(f"starting PostgreSQL at {cluster.address()}")
    cluster.start()
    connect = KafkaConnect(settings, connect_dist)
    if not connect.check().healthy:
        log(f"starting Kafka Connect at {connect.address()}")
        began = time.monotonic()
        connect.start()
        connect.wait_healthy(settings.start_timeout_s)
        log(f"Kafka Connect healthy in {time.monotonic() - began:.1f} s")
    retired = retire_earlier_runs(connect, cluster)
    if retired:
        log(f"removed what earlier runs left: {', '.join(retired)}")
    taken = _taken_schemas(settings, cluster, options.topic_prefix)
    names = SourceNames(
        options.schema or choose_schema(taken, options.schema_base), options.topic_prefix
    )
    return PostgresDemoSource(settings, names, cluster, connect)


def run_demo(settings: LocalSettings, options: DemoOptions, console: Console) -> DemoResult:
    """The whole demo; see the module docstring. Raises :class:`DemoError` (setup),
    ``StartError`` (local stack), ``ArtifactError`` (Maven)."""
    log = console.log
    LocalStack(settings).up(log)
    kind = pick_source(settings, options.source, console)
    source = prepare_source(settings, options, kind, log)
    kafka = settings.kafka_settings()
    dead_letters_before = end_offsets(kafka, options.dead_letter_topic)
    services = service_processes(
        settings,
        options.services,
        source_topic_prefix=options.topic_prefix,
        extra_env=options.service_env,
    )
    stack = contextlib.ExitStack()
    try:
        start_services(services, options.service_start_timeout_s, log)
        planner = Planner(options.workload)
        log(f"creating {kind} tables in schema {source.names.schema} and loading initial rows")
        if options.snapshot == "bulk" and isinstance(source, PostgresDemoSource):
            source.workload.create_schema(planner.initial_tables, source.names.publication)
            source.workload.run(planner.seed())
            during = itertools.islice(planner.steady(None), options.during_copy)
            tables = [t.name for t in planner.initial_tables]
            result = source.bulk_snapshot(tables, during, progress=log)
            log(f"bulk load: {result.rows:,} rows copied in {result.copy_s:.1f} s")
            source.connect.wait_running(source.names.connector)
        else:
            source.prepare(planner)
        view = ProgressView()
        engines = None
        if options.readers != ("spark",) or options.probes:
            engines = stack.enter_context(demo_engines(settings, options.readers, log))
        with Live(console=console, refresh_per_second=1) as live:
            workload, faults, probes = _drive(
                settings, options, source, planner, services, view, live, engines
            )
            began = time.monotonic()
            done = _catch_up(settings, options, source, services, workload, view, live)
            catch_up_seconds = time.monotonic() - began
        readers: dict[str, VerifyReport] = {}
        if engines is None:
            log("verifying every table against its source (Spark reads Iceberg)")
            report = verify_source(settings, source)
        else:
            log(f"verifying every table against its source, read by {', '.join(engines.engines)}")
            readers = engines.verify(source.tables())
            report = readers.pop("spark")
        dead = count_committed(
            kafka,
            options.dead_letter_topic,
            dead_letters_before,
            source_prefix=f"{source.names.topic_prefix}.{source.names.schema}.",
        )
        return DemoResult(
            source=kind,
            schema=source.names.schema,
            workload=workload,
            caught_up=done,
            catch_up_seconds=catch_up_seconds,
            report=report,
            dead_letters=dead,
            freshness_p50_s=view.freshness_overall(0.5),
            freshness_p99_s=view.freshness_overall(0.99),
            faults=faults,
            readers=readers,
            probes=probes,
        )
    finally:
        stack.close()
        source.close()
        if options.stop_services:
            for service in services:
                service.stop()


def _drive(
    settings: LocalSettings,
    options: DemoOptions,
    source: DemoSource,
    planner: Planner,
    services: list[ServiceProcess],
    view: ProgressView,
    live: Live,
    engines: DemoEngines | None = None,
) -> tuple[WorkloadResult, tuple[FaultRecord, ...], tuple[Probe, ...]]:
    """Run the timed workload in a thread (and the fault injector, if asked) while the live
    table refreshes; with ``engines``, read every table with each of them at
    ``options.probes`` moments. Return the workload's result, the faults injected and the
    probes."""
    stop = threading.Event()
    outcome: dict[str, WorkloadResult | BaseException] = {}

    def work() -> None:
        try:
            outcome["result"] = source.run(paced(planner.changes(), stop))
        except BaseException as exc:  # handed to the main thread
            outcome["error"] = exc

    worker = threading.Thread(target=work, name="workload", daemon=True)
    injector = None
    if options.faults:
        faults = plan_faults(
            options.workload.duration_s,
            [s.name for s in services],
            seed=options.workload.seed,
            kills_per_service=options.kills_per_service,
            restart_kafka=options.restart_kafka,
            store_outage_s=options.store_outage_s if settings.warehouse_store == "s3" else 0.0,
        )
        kafka = KafkaBroker(settings, dist_for(settings))
        store = ObjectStore(settings) if settings.warehouse_store == "s3" else None
        injector = FaultInjector(
            faults, {s.name: s for s in services}, kafka, store=store, on_event=live.console.log
        )
    endpoints = {s.name: s.address() for s in services}
    moments = probe_times(options.workload.duration_s, options.probes, options.workload.seed)
    probes: list[Probe] = []
    started = time.monotonic()
    worker.start()
    if injector is not None:
        injector.start()
    try:
        while worker.is_alive() or (injector is not None and injector.is_alive()):
            view.add(scrape_all(endpoints, source.progress.row_changes))
            supervise(source, services, live)
            live.update(render(view, f"workload ({source.kind} -> Iceberg)"))
            elapsed = time.monotonic() - started
            if engines is not None and moments and elapsed >= moments[0]:
                moments.pop(0)
                probe = engines.probe(_source_tables(source), elapsed)
                probes.append(probe)
                live.console.log(probe.describe())
            worker.join(options.refresh_s)
    except BaseException:
        stop.set()
        if injector is not None:
            injector.stop_event.set()
        raise
    error = outcome.get("error")
    if isinstance(error, BaseException):
        raise error
    while engines is not None and moments:  # due while a probe ran: still mid-pipeline
        probe = engines.probe(_source_tables(source), time.monotonic() - started)
        moments.pop(0)
        probes.append(probe)
        live.console.log(probe.describe())
    result = outcome["result"]
    assert isinstance(result, WorkloadResult)
    return result, tuple(injector.records) if injector is not None else (), tuple(probes)


def _source_tables(source: DemoSource) -> list[SourceTable]:
    """The source's tables while the workload changes them (the generator's model may
    change size under a read: read again)."""
    for _attempt in range(5):
        try:
            return source.tables()
        except RuntimeError:  # a dict changed size during iteration
            time.sleep(0.05)
    return source.tables()


def supervise(source: DemoSource, services: list[ServiceProcess], live: Live) -> None:
    """What Kubernetes would do: start a service whose process exited (the fault injector's
    kills included, if its pause is still running), restart a failed Debezium task."""
    for service in services:
        if not service.running():
            live.console.log(f"{service.name} is not running: starting it again")
            service.start()
    note = source.supervise()
    if note:
        live.console.log(note)


def _catch_up(
    settings: LocalSettings,
    options: DemoOptions,
    source: DemoSource,
    services: list[ServiceProcess],
    workload: WorkloadResult,
    view: ProgressView,
    live: Live,
) -> bool:
    """Wait until the writer has caught up (twice in a row, so a lag of 0 between two
    batches does not count). False after ``catch_up_timeout_s``, or once nothing has moved
    for ``stall_s`` while no service reports lag (a table that cannot catch up, e.g. its
    changes went to the dead-letter topic: verification will say which)."""
    from shared.catalog import open_catalog

    catalog = open_catalog(
        CatalogSettings(name=settings.catalog_name, local_state_dir=settings.state)
    )
    targets = dict(workload.last_change_ms)
    endpoints = {s.name: s.address() for s in services}
    deadline = time.monotonic() + options.catch_up_timeout_s
    in_a_row = 0
    last_state: tuple[object, ...] = ()
    still_since = time.monotonic()
    while True:
        view.add(scrape_all(endpoints, source.progress.row_changes))
        marks = iceberg_watermarks(catalog, targets)
        late = behind(targets, marks)
        lags = (view.normalizer_lag(), view.writer_lag())
        if caught_up(targets, marks, *lags):
            in_a_row += 1
        else:
            in_a_row = 0
        extra = [("tables behind the source", ", ".join(sorted(late)) or "none")]
        live.update(render(view, "waiting for Iceberg to catch up", extra))
        if in_a_row >= 2:
            return True
        now = time.monotonic()
        state = (tuple(sorted(marks.items())), view.count("applied"), view.count("normalized"))
        answering = all(v is not None for v in view.latest_services().values())
        if state != last_state or not answering or any(lag and lag > 0 for lag in lags):
            last_state, still_since = state, now
        if now > deadline or now - still_since > options.stall_s:
            live.console.log(f"not caught up: {', '.join(sorted(late))} behind the source")
            for line in where_stalled(settings, source, services, targets, catalog):
                live.console.log(line)
            return False
        supervise(source, services, live)
        time.sleep(options.refresh_s)


def where_stalled(
    settings: LocalSettings,
    source: DemoSource,
    services: list[ServiceProcess],
    tables: Iterable[str],
    catalog: Any,
) -> list[str]:
    """Which stage holds what Iceberg is missing (:mod:`icefjord.demo.stall`)."""
    from services.cdc_normalizer.config import NormalizerSettings
    from services.cdc_normalizer.pipeline import changes_topic
    from services.cdc_normalizer.table_schema import TableId
    from services.iceberg_writer.config import WriterSettings

    env = {s.name: s.env for s in services}

    def setting(service: str, prefix: str, name: str, default: Any) -> str:
        return str(env.get(service, {}).get(f"{prefix}{name.upper()}", default))

    normalizer = NormalizerSettings.model_fields
    lines = []
    if isinstance(source, PostgresDemoSource):
        try:
            status = source.connect.status(source.names.connector)
            lines.append(describe_connector(source.names.connector, status))
        except Exception as exc:
            lines.append(f"connector {source.names.connector}: no status: {exc}")
    changes = {}
    for table in tables:
        namespace, _, name = table.rpartition(".")
        changes[table] = changes_topic(TableId(namespace, name))
    lines += stall_report(
        settings.kafka_settings(),
        catalog,
        source_pattern=setting(
            "normalizer",
            "ICEFJORD_NORMALIZER_",
            "include_pattern",
            normalizer["include_pattern"].default,
        ),
        normalizer_group=setting(
            "normalizer", "ICEFJORD_NORMALIZER_", "group_id", normalizer["group_id"].default
        ),
        writer_group=setting(
            "writer",
            "ICEFJORD_WRITER_",
            "group_id",
            WriterSettings.model_fields["group_id"].default,
        ),
        tables=changes,
    )
    return lines


def verify_source(settings: LocalSettings, source: DemoSource) -> VerifyReport:
    """Compare every table of ``source`` with its Iceberg table (Spark reads Iceberg)."""
    return verify(source.tables(), spark_reader(verify_session(settings), settings.catalog_name))


def summary_table(result: DemoResult) -> Table:
    """Per table: rows on each side, checksums, differences, verdict."""
    table = Table(title=f"Iceberg vs {result.source} (schema {result.schema})")
    for column in (
        "table",
        "source rows",
        "iceberg rows",
        "checksum",
        "missing",
        "extra",
        "differing",
        "duplicates",
        "result",
    ):
        table.add_column(column, justify="left" if column == "table" else "right")
    for t in result.report.tables:
        same = "equal" if t.source_checksum == t.iceberg_checksum else "differs"
        table.add_row(
            t.table,
            f"{t.source_rows:,}",
            f"{t.iceberg_rows:,}",
            same,
            str(t.missing_keys),
            str(t.extra_keys),
            str(t.differing_keys),
            str(t.duplicate_keys),
            "[green]equal[/]" if t.ok else "[red]DIFFERENT[/]",
        )
    return table


def print_summary(result: DemoResult, console: Console) -> None:
    """The end of the demo: per-table comparison, figures, faults, verdict."""
    console.print(summary_table(result))
    for t in result.report.tables:
        for sample in t.samples:
            console.print(f"  [red]{t.table}[/]: {sample}")
    w = result.workload
    p50, p99 = result.freshness_p50_s, result.freshness_p99_s
    console.print(
        f"workload: {w.row_changes:,} row changes ({w.inserts:,} inserts, {w.updates:,} updates, "
        f"{w.key_changes:,} key changes, {w.deletes:,} deletes, {w.schema_changes} schema "
        f"changes) in {w.seconds:.0f} s = {w.changes_per_second:,.0f}/s"
    )
    console.print(
        f"freshness p50 {'-' if p50 is None else f'{p50:.1f} s'}, "
        f"p99 {'-' if p99 is None else f'{p99:.1f} s'}; caught up "
        f"{'in' if result.caught_up else 'NOT within'} {result.catch_up_seconds:.0f} s; "
        f"dead letters: {result.dead_letters}"
    )
    for record in result.faults:
        mark = "ok" if record.done else "FAILED"
        console.print(
            f"fault {mark} at {record.happened_at_s:.0f}s: {record.fault.kind} "
            f"{record.fault.target} ({record.detail})"
        )
    for engine, report in result.readers.items():
        verdict = "[green]equal[/]" if report.ok else "[red]DIFFERENT[/]"
        console.print(f"read by {engine}: every table {verdict} to its source")
        for t in report.tables:
            for sample in t.samples:
                console.print(f"  [red]{engine} {t.table}[/]: {sample}")
    for probe in result.probes:
        console.print(probe.describe())
        for engine, report in probe.reports.items():
            for t in report.tables:
                for sample in t.samples:
                    console.print(f"  [red]{engine} {t.table}[/]: {sample}")
    if result.ok:
        console.print("[green]Every Iceberg table equals its source.[/]")
    else:
        console.print("[red]Verification failed.[/]")
