"""``icefjord bench`` / ``icefjord bench pipeline``: the whole pipeline's throughput and
freshness, on the demo's machinery (source, services, catch-up, verification).

Phases (each reported, see :mod:`icefjord.bench.report`): *snapshot* (rows loaded before
capture starts, time until Iceberg holds them all), one *rate* phase per offered rate
(source paced), one per set-based rate (source paced, set-based UPDATEs), *max* (source
unpaced). Each phase ends when the writer has caught up with
its last change. Throughout, the services' ``/metrics`` are sampled every ~2 s
(:mod:`icefjord.bench.stats`), and at each phase's start and end the CPU seconds of
every component are read from ``/proc`` (:mod:`icefjord.bench.cpu`). At the end every table
is compared with its source: a benchmark whose output is wrong is not a result.
"""

from __future__ import annotations

import datetime as dt
import math
import os
import platform
import re
import shlex
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from rich.console import Console
from rich.live import Live

from icefjord.bench.cpu import CpuReading, CpuUse, Root, cpu_use, pid_in_file, read_cpu
from icefjord.bench.report import BenchReport, Machine, TableCheck, write_report
from icefjord.bench.stats import Carry, PhaseResult, Sample, reading_of, span
from icefjord.demo.catchup import behind, caught_up, count_committed, end_offsets
from icefjord.demo.catchup import iceberg_watermarks as watermarks_of
from icefjord.demo.plan import Insert, Planner, Transaction, WorkloadSpec, row_operations
from icefjord.demo.progress import ProgressView, render, scrape_all
from icefjord.demo.run import (
    DemoOptions,
    SourceChoice,
    pick_source,
    prepare_source,
    start_services,
    supervise,
    verify_source,
    where_stalled,
)
from icefjord.demo.source import DemoSource, PostgresDemoSource
from icefjord.demo.verify import VerifyReport
from icefjord.demo.workload import PostgresWorkload, WorkloadResult, paced
from icefjord.local.postgres import PostgresCluster
from icefjord.local.processes import ManagedProcess
from icefjord.local.services import SERVICE_NAMES, ServiceProcess, service_processes
from icefjord.local.settings import LocalSettings
from icefjord.local.stack import LocalStack
from shared.settings import CHANGES_TOPIC_PREFIX, DEAD_LETTER_TOPIC, CatalogSettings

SCHEMA_BASE = "bench_e2e"
BENCH_CLIENT = "bench client (workload, sampling)"
STACK_PROCESSES = (
    ("kafka", "Kafka broker"),
    ("registry", "schema registry"),
    ("connect", "Kafka Connect (Debezium)"),
    ("s3", "S3 server (SeaweedFS)"),
)


@dataclass(frozen=True)
class BenchOptions:
    """What the benchmark runs; ``out`` None: ``<state>/bench/<timestamp>``."""

    source: SourceChoice = "auto"
    snapshot_rows: int = 200_000
    # PostgreSQL: "bulk" copies the tables (icefjord.bulk.load) while Debezium streams;
    # "debezium" lets the connector's snapshot send every row through the pipeline.
    snapshot: Literal["bulk", "debezium"] = "bulk"
    rates: tuple[float, ...] = (1_000.0,)
    phase_seconds: float = 120.0
    # A phase at the first rate between the snapshot and the measured phases, reported but
    # judged against no goal: a bulk snapshot leaves the streaming path cold (Connect's JIT,
    # the writer's first MERGEs into each table), a one-off of every new pipeline.
    warm_up_seconds: float = 60.0
    # With a warm-up phase the maintainer starts after the snapshot and warms its Spark up in
    # the background from its start (``warm_up_at_start``); the first measured phase begins
    # once it is done, at most this long after the warm-up phase. Its JVM's start and first
    # compilations (90 CPU s on S3 in one run, a quarter of the machine's in the phase) are
    # a one-off of a new deployment, not a cost of the rates the phases measure.
    maintainer_ready_timeout_s: float = 300.0
    max_seconds: float = 120.0
    out: Path | None = None
    seed: int = 7
    max_ops_per_tx: int = 20
    # Fixed-rate phases whose source sends set-based UPDATEs: one Python client sends about
    # 3,000 row-by-row changes/s, so faster rates need the rows changed in the database.
    set_rates: tuple[float, ...] = (10_000.0,)
    rows_per_statement: int = 100
    refresh_s: float = 2.0
    catch_up_timeout_s: float = 900.0
    service_start_timeout_s: float = 300.0
    # Keep the source's schema after the run. Otherwise it is dropped once every table has
    # been found equal (a failed check keeps it to look into): each run's rows and the WAL
    # they wrote would pile up in the local cluster (HISTORY.md, "2026-11-26, late").
    keep_source: bool = False
    # Writer instances sharing the tables (one consumer group), each a process with its own
    # Spark; the report lists each one's CPU.
    writers: int = 1
    # The writer subscribes to this run's change topics only. A run on another catalog
    # than earlier runs' (``--stores``) would otherwise rebuild each earlier table in it
    # from Kafka (its tables hold their offsets, so a new catalog starts from the earliest)
    # and charge that work to this run's figures.
    own_topics_only: bool = False
    command: str = field(default_factory=lambda: shlex.join(sys.argv))


@dataclass(frozen=True)
class BenchResult:
    report: BenchReport
    path: Path
    chart: Path | None

    @property
    def exit_code(self) -> int:
        return 0 if self.report.verified else 1


class SourceCounter:
    """Row changes the source has executed, over every phase (single writer)."""

    def __init__(self) -> None:
        self.value = 0

    def counted(self, transactions: Iterable[Transaction]) -> Iterator[Transaction]:
        """Pass ``transactions`` through, counting each one's row operations once the
        source asks for the next one (so once it has been executed)."""
        for tx in transactions:
            yield tx
            self.value += sum(row_operations(op) for op in tx.ops)


def until(transactions: Iterable[Transaction], deadline: float) -> Iterator[Transaction]:
    """``transactions`` until the monotonic clock passes ``deadline``."""
    for tx in transactions:
        if time.monotonic() >= deadline:
            return
        yield tx


def copy_load(workload: PostgresWorkload, seed: Iterable[Transaction]) -> int:
    """Load the seed's inserts with COPY, one transaction (so the source is not the
    bottleneck of the snapshot); return the rows loaded."""
    from psycopg import sql

    rows: dict[str, list[Mapping[str, Any]]] = {}
    for tx in seed:
        for op in tx.ops:
            assert isinstance(op, Insert), "the seed holds inserts only"
            rows.setdefault(op.table, []).append(op.row)
    conn = workload.connection()
    loaded = 0
    with conn.transaction():
        for table, table_rows in rows.items():
            names = list(workload.tables[table].names)
            statement = sql.SQL("COPY {}.{} ({}) FROM STDIN").format(
                sql.Identifier(workload.schema),
                sql.Identifier(table),
                sql.SQL(", ").join(map(sql.Identifier, names)),
            )
            with conn.cursor().copy(statement) as copy:
                for row in table_rows:
                    copy.write_row([workload.adapt(table, n, row.get(n)) for n in names])
                    loaded += 1
    return loaded


def iceberg_rows(catalog: Any, expected: Mapping[str, int]) -> tuple[int, float | None]:
    """Rows Iceberg holds of ``expected`` (``<namespace>.<table>`` -> rows; from snapshot
    summaries, capped at the expected count), and when the last table reached its count
    (commit time, Unix seconds; None while one has not)."""
    held, reached = 0, []
    for name, rows in expected.items():
        try:
            snapshots = sorted(catalog.load_table(name).metadata.snapshots, key=_ts)
        except Exception:  # not created yet, or the catalog busy
            continue
        when = None
        count = 0
        for snapshot in snapshots:
            summary = snapshot.summary
            total = summary.additional_properties.get("total-records") if summary else None
            count = int(total or 0)
            if count >= rows:
                when = snapshot.timestamp_ms / 1000
                break
        held += min(count, rows)
        if when is not None:
            reached.append(when)
    done = len(reached) == len(expected)
    return held, (max(reached) if done and reached else None)


def _ts(snapshot: Any) -> int:
    return int(snapshot.timestamp_ms)


def cpu_roots(
    settings: LocalSettings, services: Sequence[ServiceProcess]
) -> dict[str, Root | None]:
    """Each component's root pid now (None: no pid file), in the report's order."""

    def session(pid_file: Path) -> Root | None:
        pid = pid_in_file(pid_file)
        return None if pid is None else Root(pid, "session")

    # Every postmaster child leads its own session: count the postmaster's tree.
    postmaster = pid_in_file(PostgresCluster(settings).data / "postmaster.pid")
    roots = {"PostgreSQL": None if postmaster is None else Root(postmaster, "tree")}
    run = settings.state / "run"
    for name, label in STACK_PROCESSES:
        roots[label] = session(ManagedProcess(name, run).pid_file)
    for service in services:
        label = f"{service.name} service" + (" + Spark JVM" if service.spec.uses_spark else "")
        roots[label] = session(service.process.pid_file)
    roots[BENCH_CLIENT] = Root(os.getpid(), "process")
    return roots


class Bench:
    """One run: samples, live display, phases."""

    def __init__(
        self,
        settings: LocalSettings,
        options: BenchOptions,
        source: DemoSource,
        services: list[ServiceProcess],
        live: Live,
    ) -> None:
        from shared.catalog import open_catalog

        self.settings = settings
        self.options = options
        self.source = source
        self.services = services
        self.live = live
        self.catalog = open_catalog(
            CatalogSettings(name=settings.catalog_name, local_state_dir=settings.state)
        )
        self.endpoints = {s.name: s.address() for s in services}
        self.counter = SourceCounter()
        self.view = ProgressView()
        self.wall0 = time.time()
        self.carry = Carry(started_at=time.monotonic())
        self.samples: list[Sample] = []
        self.phase = "setup"
        self.last_change_ms: dict[str, int] = {}
        self.cores = os.cpu_count() or 1

    def sample(self, extra: Sequence[tuple[str, str]] = ()) -> Sample:
        scrape = scrape_all(self.endpoints, self.counter.value)
        self.view.add(scrape)
        reading = reading_of(scrape, self.source.names.schema, self.counter.value)
        sample = self.carry.add(reading, self.phase)
        self.samples.append(sample)
        rows = [("phase", self.phase), ("elapsed", f"{sample.t:.0f} s"), *extra]
        self.live.update(render(self.view, f"bench ({self.source.kind} -> Iceberg)", rows))
        return sample

    def tick(self) -> None:
        supervise(self.source, self.services, self.live)
        time.sleep(self.options.refresh_s)

    def relative(self, unix: float | None) -> float | None:
        return None if unix is None else unix - self.wall0

    def cpu_reading(self) -> CpuReading | None:
        """Every component's CPU seconds so far (None: no ``/proc`` here)."""
        return read_cpu(cpu_roots(self.settings, self.services))

    def cpu_since(self, start: CpuReading | None) -> CpuUse | None:
        """The CPU each component used since ``start`` (None: not measured)."""
        end = self.cpu_reading()
        return None if start is None or end is None else cpu_use(start, end, self.cores)

    def start_later(self, services: Sequence[ServiceProcess]) -> None:
        """Start ``services`` now and count them from here on (samples, CPU, supervision)."""
        start_services(list(services), self.options.service_start_timeout_s, self.live.console.log)
        self.services.extend(services)
        self.endpoints.update({s.name: s.address() for s in services})

    def await_spark_ready(self, service: str) -> float | None:
        """Wait, sampling, until ``service`` reports ``icefjord_maintainer_spark_ready`` 1;
        the seconds waited, or None after ``maintainer_ready_timeout_s``."""
        started = time.monotonic()
        deadline = started + self.options.maintainer_ready_timeout_s
        self.phase = f"waiting for the {service}'s Spark"
        while True:
            self.sample()
            last = self.view.latest()
            metrics = last.get(service) if last is not None else {}
            if any(value >= 1 for _, value in metrics.get("icefjord_maintainer_spark_ready", [])):
                return time.monotonic() - started
            if time.monotonic() > deadline:
                return None
            self.tick()

    # -- phases ----------------------------------------------------------------------------

    def snapshot(self, planner: Planner) -> PhaseResult:
        """Load the rows, start capture, wait until Iceberg holds every row."""
        log = self.live.console.log
        self.phase = "snapshot"
        names = self.source.names
        if isinstance(self.source, PostgresDemoSource):
            workload = self.source.workload
            workload.create_schema(planner.initial_tables, names.publication)
            began = time.monotonic()
            loaded = copy_load(workload, planner.seed(batch=1000))
            log(f"COPY loaded {loaded:,} rows in {time.monotonic() - began:.1f} s")
        first = self.sample()
        cpu_start = self.cpu_reading()
        start_t = first.t
        if isinstance(self.source, PostgresDemoSource) and self.options.snapshot == "bulk":
            tables = [t.name for t in planner.initial_tables]
            self.source.bulk_snapshot(tables, progress=self.live.console.log)
        elif isinstance(self.source, PostgresDemoSource):
            tables = [t.name for t in planner.initial_tables]
            self.source.start_capture(tables, self.source.connector_config())
        else:
            self.source.prepare(planner)  # the generator emits the snapshot right away
        expected = {
            names.iceberg(table): len(planner.model.rows[table])
            for table in (t.name for t in planner.initial_tables)
        }
        total = sum(expected.values())
        deadline = time.monotonic() + self.options.catch_up_timeout_s
        reached: float | None = time.time() if total == 0 else None
        last = first
        while reached is None and time.monotonic() < deadline:
            held, reached = iceberg_rows(self.catalog, expected)
            last = self.sample([("rows in Iceberg", f"{held:,} of {total:,}")])
            if reached is not None:
                break
            self.tick()
        cpu = self.cpu_since(cpu_start)
        end_t = self.relative(reached) if reached is not None else last.t
        assert end_t is not None
        log(f"snapshot: {total:,} rows in Iceberg {end_t - start_t:.1f} s after capture start")
        return PhaseResult(
            name="snapshot",
            kind="snapshot",
            offered_rate=None,
            source_seconds=0.0,
            drain_seconds=max(0.0, end_t - start_t),
            caught_up=reached is not None,
            figures=span(first, last),
            snapshot_rows=total,
            cpu=cpu,
        )

    def stream(
        self,
        planner: Planner,
        rate: float | None,
        rows_per_statement: int = 1,
        warm_up_s: float | None = None,
    ) -> PhaseResult:
        """One streaming phase: paced at ``rate`` for ``phase_seconds``, or unpaced for
        ``max_seconds`` (``rate`` None); then wait for the writer to catch up.
        ``rows_per_statement`` above 1: set-based updates (see ``Planner.steady``).
        ``warm_up_s``: a warm-up phase of that many seconds at ``rate`` (kind "warm-up")."""
        o = self.options
        name = "max" if rate is None else f"{rate:,.0f}/s"
        if rows_per_statement > 1:
            name += " set-based"
        if warm_up_s is not None:
            name = f"warm-up {name}"
        self.phase = name
        stop = threading.Event()
        plan: Iterable[Transaction]
        if rate is None:
            deadline = time.monotonic() + o.max_seconds
            plan = until(planner.steady(None, ops_per_tx=o.max_ops_per_tx), deadline)
        else:
            seconds = o.phase_seconds if warm_up_s is None else warm_up_s
            steady = planner.steady(rate, seconds, rows_per_statement=rows_per_statement)
            plan = paced(steady, stop)
        outcome: dict[str, WorkloadResult | BaseException] = {}

        def work() -> None:
            try:
                outcome["result"] = self.source.run(self.counter.counted(plan))
            except BaseException as exc:  # handed to the main thread
                outcome["error"] = exc

        first = self.sample()
        cpu_start = self.cpu_reading()
        worker = threading.Thread(target=work, name=f"bench-{name}", daemon=True)
        worker.start()
        try:
            while worker.is_alive():
                self.tick()
                self.sample()
        except BaseException:
            stop.set()
            raise
        error = outcome.get("error")
        if isinstance(error, BaseException):
            raise error
        result = outcome["result"]
        assert isinstance(result, WorkloadResult)
        self.last_change_ms.update(result.last_change_ms)
        stopped = self.sample()
        done, last = self.catch_up()
        cpu = self.cpu_since(cpu_start)
        end = self.relative(last.last_commit_unix) if done else None
        end_t = max(stopped.t, end if end is not None else last.t)
        return PhaseResult(
            name=name,
            kind="max" if rate is None else ("rate" if warm_up_s is None else "warm-up"),
            offered_rate=rate,
            source_seconds=result.seconds,
            drain_seconds=max(0.0, end_t - first.t - result.seconds),
            caught_up=done,
            figures=span(first, last),
            cpu=cpu,
        )

    def catch_up(self) -> tuple[bool, Sample]:
        """Wait until every table's watermark reached its last source change and nothing
        lags, twice in a row; (False, last sample) after the timeout."""
        deadline = time.monotonic() + self.options.catch_up_timeout_s
        in_a_row = 0
        while True:
            marks = watermarks_of(self.catalog, self.last_change_ms)
            late = behind(self.last_change_ms, marks)
            extra = [("tables behind the source", ", ".join(sorted(late)) or "none")]
            last = self.sample(extra)
            lags = (self.view.normalizer_lag(), self.view.writer_lag())
            in_a_row = in_a_row + 1 if caught_up(self.last_change_ms, marks, *lags) else 0
            if in_a_row >= 2:
                return True, last
            if time.monotonic() > deadline:
                self.live.console.log(f"not caught up: {', '.join(sorted(late))}")
                stalled = where_stalled(
                    self.settings, self.source, self.services, self.last_change_ms, self.catalog
                )
                for line in stalled:
                    self.live.console.log(line)
                return False, last
            self.tick()


def _machine(load_start: tuple[float, float, float], normalizer: str) -> Machine:
    return Machine(
        cores=os.cpu_count() or 0,
        load_start=load_start,
        load_end=os.getloadavg(),
        platform=platform.platform(),
        python=platform.python_version(),
        normalizer=normalizer,
    )


def _maintainer_note(waited_s: float | None, timeout_s: float) -> str:
    """The report's line on when the maintainer's Spark was ready, ``waited_s`` after the
    warm-up phase (None: not within ``timeout_s``)."""
    start = (
        "The maintainer started after the snapshot and warmed its Spark up in the "
        "background (`ICEFJORD_MAINTAINER_WARM_UP_AT_START`); its CPU is in the warm-up "
        "phase's figures. "
    )
    if waited_s is None:
        return start + f"It was not ready {timeout_s:.0f} s after the warm-up phase."
    if waited_s < 1:
        return start + "It was ready by the warm-up phase's end."
    return (
        start + f"It was ready {waited_s:.0f} s after the warm-up phase; the next phase began then."
    )


def normalizer_build(services: Sequence[ServiceProcess]) -> str:
    """Which build the normalizer (and with it the writer) runs, decided before the services
    start: the figures of a plain CPython run (a build older than the checkout) are not the
    images'."""
    for service in services:
        if service.name != "normalizer":
            continue
        if service.check().healthy:
            return "already running when the benchmark started (build unknown)"
        return service.build or "plain CPython"
    return ""


def verify_and_settle(
    settings: LocalSettings,
    source: DemoSource,
    dead_before: Mapping[int, int],
    keep_source: bool,
    log: Callable[[str], None],
) -> tuple[VerifyReport, int]:
    """After a benchmark: every table compared with its source, the dead letters its source
    topics got since ``dead_before``, and the source dropped once every table is equal
    (unless ``keep_source``)."""
    log("verifying every table against its source (Spark reads Iceberg)")
    checked = verify_source(settings, source)
    dead = count_committed(
        settings.kafka_settings(),
        DEAD_LETTER_TOPIC,
        dead_before,
        source_prefix=f"{source.names.topic_prefix}.{source.names.schema}.",
    )
    if checked.ok and not keep_source:
        log(f"dropping the source schema {source.names.schema} (--keep-source keeps it)")
        source.discard()
    return checked, dead


def run_bench(settings: LocalSettings, options: BenchOptions, console: Console) -> BenchResult:
    """The whole benchmark; see the module docstring. Raises ``DemoError``, ``StartError``,
    ``ArtifactError``, ``PostgresError``, ``ConnectError`` when it cannot be set up."""
    if (
        options.snapshot_rows < 0
        or options.phase_seconds <= 0
        or options.max_seconds < 0
        or options.warm_up_seconds < 0
    ):
        raise ValueError("snapshot rows >= 0, phase seconds > 0, max and warm-up seconds >= 0")
    load_start = os.getloadavg()
    started = dt.datetime.now().astimezone()
    out = options.out or settings.state / "bench" / started.strftime("%Y%m%d-%H%M%S")
    log = console.log
    LocalStack(settings).up(log)
    kind = pick_source(settings, options.source, console)
    demo = DemoOptions(source=options.source, schema_base=SCHEMA_BASE)
    source = prepare_source(settings, demo, kind, log)
    kafka = settings.kafka_settings()
    dead_before = end_offsets(kafka, DEAD_LETTER_TOPIC)
    extra_env: dict[str, dict[str, str]] = {}
    if options.own_topics_only:
        escaped = re.escape(f"{CHANGES_TOPIC_PREFIX}{source.names.schema}.")
        extra_env["writer"] = {"ICEFJORD_WRITER_TOPIC_PATTERN": rf"^{escaped}[^.]+$"}
    warm_up = options.warm_up_seconds > 0 and bool(options.rates)
    if warm_up:
        extra_env["maintainer"] = {"ICEFJORD_MAINTAINER_WARM_UP_AT_START": "true"}
    services = service_processes(
        settings,
        SERVICE_NAMES,
        source_topic_prefix=demo.topic_prefix,
        extra_env=extra_env,
        writers=options.writers,
    )
    notes: list[str] = []
    build = normalizer_build(services)
    if build.startswith("plain CPython"):
        log(f"the normalizer and the writer run {build}; the images ship the compiled build")
    later = [s for s in services if s.name == "maintainer"] if warm_up else []
    early = [s for s in services if s not in later]
    try:
        start_services(early, options.service_start_timeout_s, log)
        per_table = math.ceil(options.snapshot_rows / 3)
        planner = Planner(WorkloadSpec(initial_rows=per_table, seed=options.seed))
        phases: list[PhaseResult] = []
        with Live(console=console, refresh_per_second=1) as live:
            bench = Bench(settings, options, source, early, live)
            phases.append(bench.snapshot(planner))
            if warm_up:
                warm = options.rates[0]
                bench.start_later(later)
                phases.append(bench.stream(planner, warm, warm_up_s=options.warm_up_seconds))
                if later:
                    waited = bench.await_spark_ready(later[0].name)
                    notes.append(_maintainer_note(waited, options.maintainer_ready_timeout_s))
            for rate in options.rates:
                phases.append(bench.stream(planner, rate))
            for rate in options.set_rates:
                phases.append(bench.stream(planner, rate, options.rows_per_statement))
            if options.max_seconds > 0:
                phases.append(bench.stream(planner, None))
            bench.phase = "verify"
            bench.sample()
        checked, dead = verify_and_settle(settings, source, dead_before, options.keep_source, log)
    finally:
        source.close()
    if kind == "postgres":
        notes.append(
            "PostgreSQL source: one connection executes the workload (psycopg, pipelined "
            f"statements); the max phase uses transactions of ~{options.max_ops_per_tx} row "
            "changes."
        )
        if options.set_rates:
            notes.append(
                "Set-based phases: every statement updates up to "
                f"{options.rows_per_statement} random live rows of one table "
                "(`UPDATE ... FROM unnest(<keys>)`), a few statements per transaction; "
                "Debezium emits one change per row."
            )
    caught = all(p.caught_up for p in phases)
    if not caught:
        notes.append("a phase did not catch up within the timeout: its figures are partial")
    report = BenchReport(
        command=options.command,
        started=started.isoformat(timespec="seconds"),
        source=kind,
        schema=source.names.schema,
        machine=_machine(load_start, build),
        phases=tuple(phases),
        samples=tuple(bench.samples),
        tables=tuple(
            TableCheck(t.table, t.source_rows, t.iceberg_rows, t.ok) for t in checked.tables
        ),
        dead_letters=dead,
        verified=checked.ok and dead == 0 and caught,
        notes=tuple(notes),
    )
    path, chart = write_report(report, out)
    return BenchResult(report, path, chart)
