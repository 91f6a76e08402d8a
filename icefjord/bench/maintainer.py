"""``icefjord bench maintain``: a stream of small commits under the maintainer's policies.

A writer thread plays iceberg-writer: every ``commit_interval_s`` it MERGEs a batch of
upserts and deletes (merge-on-read, format v3 like the writer's tables) into a partitioned
table and hands the maintainer a ``CommitDone``. The maintainer is the real service loop
(:class:`~services.maintainer.service.MaintainerService`: health model, policies, planner,
executor on the same SparkSession), fed from memory instead of Kafka. A sampler inspects
the table every ``sample_interval_s``. The report gives files per partition over time,
commit latency and data freshness overall and during maintenance actions, and what
maintenance did.

Needs Spark and the catalog only (``icefjord local up`` provides the local one); no Kafka.
"""

from __future__ import annotations

import bisect
import logging
import math
import queue
import random
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry
from rich.console import Console
from rich.table import Table

from services.maintainer.config import MaintainerSettings
from services.maintainer.execute import MaintenanceExecutor, is_conflict
from services.maintainer.health import compute_health
from services.maintainer.identifiers import TableId
from services.maintainer.inspect import TableInspector
from services.maintainer.metrics import MaintainerMetrics
from services.maintainer.policy import MaintenancePolicy
from services.maintainer.runner import SparkProcedureRunner
from services.maintainer.service import HealthBoard, MaintainerService
from shared.catalog import catalog_properties, open_catalog
from shared.events import (
    CommitDone,
    ControlEvent,
    MaintenanceRequest,
    MaintenanceResult,
    MaintenanceStatus,
)
from shared.lease import leased

__all__ = [
    "BenchConfig",
    "BenchReport",
    "CommitTiming",
    "Sample",
    "freshness_samples",
    "latency_split",
    "overlaps",
    "percentile",
    "render",
    "run_and_render",
    "run_bench",
]

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class BenchConfig:
    """What the benchmark writes: one MERGE of ``rows_per_commit`` changes over ``keys`` keys
    spread across ``partitions`` partitions every ``commit_interval_s`` for ``duration_s``."""

    duration_s: float = 1800.0
    commit_interval_s: float = 1.0
    rows_per_commit: int = 20
    keys: int = 2000
    partitions: int = 4
    delete_share: float = 0.1
    sample_interval_s: float = 10.0
    seed: int = 1
    format_version: int = 3
    """3 is what iceberg-writer creates (deletion vectors); 2 gives position delete files."""


@dataclass(frozen=True, slots=True)
class CommitTiming:
    """One writer commit, wall-clock seconds: ``started`` before it waited for the
    maintainer's lease, ``finished`` once the MERGE committed, ``picked`` when it took its
    rows (after the lease wait, before the MERGE), and the conflicts it retried.

    ``picked`` left out (NaN) means ``started``: no lease wait, rows taken at the start.
    """

    started: float
    finished: float
    conflicts: int = 0
    picked: float = math.nan

    def __post_init__(self) -> None:
        # Constructions from before ``picked`` existed keep working and mean "no wait".
        if math.isnan(self.picked):
            object.__setattr__(self, "picked", self.started)

    @property
    def seconds(self) -> float:
        """Commit latency, the lease wait included."""
        return self.finished - self.started


@dataclass(frozen=True, slots=True)
class Sample:
    """The table at ``elapsed_s``: data files in its fullest partition, in total, delete
    files, snapshots, and whether a maintenance action was running."""

    elapsed_s: float
    partition_files_max: int
    data_files: int
    delete_files: int
    snapshots: int
    maintaining: bool


@dataclass(frozen=True, slots=True)
class BenchReport:
    """Everything measured in one run."""

    config: BenchConfig
    seconds: float
    commits: tuple[CommitTiming, ...]
    actions: tuple[tuple[float, float, MaintenanceResult], ...]
    samples: tuple[Sample, ...]
    errors: tuple[str, ...] = field(default=())
    started: float = 0.0
    """Wall-clock time (s) the stream began; commits and actions are timed on that clock."""

    @property
    def conflicts(self) -> int:
        return sum(c.conflicts for c in self.commits)

    @property
    def files_max(self) -> int:
        return max((s.partition_files_max for s in self.samples), default=0)


def percentile(values: Sequence[float], q: float) -> float | None:
    """The ``q``-th percentile (0-100) by nearest rank; None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, min(len(ordered), math.ceil(q / 100 * len(ordered))))
    return ordered[rank - 1]


def overlaps(commit: CommitTiming, intervals: Sequence[tuple[float, float]]) -> bool:
    """Whether ``commit`` ran while any of the (start, end) ``intervals`` did."""
    return any(commit.started < end and start < commit.finished for start, end in intervals)


def latency_split(
    commits: Iterable[CommitTiming], busy: Iterable[tuple[float, float]]
) -> tuple[list[float], list[float]]:
    """Commit latencies split into (overlapping a maintenance interval, not overlapping)."""
    intervals = list(busy)
    during: list[float] = []
    outside: list[float] = []
    for commit in commits:
        (during if overlaps(commit, intervals) else outside).append(commit.seconds)
    return during, outside


def freshness_samples(
    commits: Iterable[CommitTiming],
    busy: Iterable[tuple[float, float]],
    step_s: float = 0.05,
) -> tuple[list[float], list[float]]:
    """Freshness (s) of a stream of changes arriving evenly, split into (the change's wait
    overlapped a maintenance interval in ``busy``, it did not).

    Why: freshness is what a reader of the table sees, and commit latency understates it. A
    commit held back by the maintainer's lease delays every change that arrived since the
    previous commit picked its rows, not only its own MERGE.

    Model: changes arrive at every ``t = first + k * step_s`` (k = 0, 1, ...) with
    ``first``/``last`` the earliest and latest ``picked`` among ``commits``, up to ``last``
    inclusive. The change at ``t`` is committed by the first commit ``i`` in order of
    ``picked`` with ``picked_i >= t`` and becomes visible at ``finished_i``; its freshness
    is ``finished_i - t``. It counts as during maintenance when ``[t, finished_i]`` overlaps
    an interval ``(start, end)`` of ``busy`` (``t < end`` and ``start < finished_i``, the
    same test as :func:`overlaps`). Values come in order of ``t``. No commits: two empty
    lists. Raises ValueError unless ``step_s > 0``.
    """
    if not step_s > 0:
        raise ValueError(f"step_s must be positive, not {step_s}")
    ordered = sorted(commits, key=lambda c: c.picked)
    during: list[float] = []
    outside: list[float] = []
    if not ordered:
        return during, outside
    picked = [c.picked for c in ordered]
    first, last = picked[0], picked[-1]
    # For each commit the latest end among the intervals that began before it finished: a
    # change's wait overlaps maintenance exactly when it arrived before that end. Sorting
    # the intervals by start with a running max keeps this O(log n) per sample.
    spans = sorted(busy)
    starts = [start for start, _ in spans]
    reach: list[float] = []
    for _, end in spans:
        reach.append(max(end, reach[-1]) if reach else end)
    latest_end: list[float] = []
    for commit in ordered:
        began = bisect.bisect_left(starts, commit.finished)
        latest_end.append(reach[began - 1] if began else -math.inf)
    # The epsilon keeps a ``last`` that is a whole number of steps away from being dropped
    # to rounding; t is clamped so that sample still finds its commit.
    count = math.floor((last - first) / step_s + 1e-9) + 1
    for k in range(count):
        t = min(first + k * step_s, last)
        i = bisect.bisect_left(picked, t)
        freshness = ordered[i].finished - t
        (during if t < latest_end[i] else outside).append(freshness)
    return during, outside


class _MemorySource:
    """The control topic replaced by a queue the writer thread fills."""

    def __init__(self) -> None:
        self.events: queue.Queue[ControlEvent] = queue.Queue()

    def poll(self, timeout: float) -> list[ControlEvent]:
        try:
            first = self.events.get(timeout=timeout)
        except queue.Empty:
            return []
        batch = [first]
        while not self.events.empty():
            batch.append(self.events.get_nowait())
        return batch

    def commit(self) -> None:
        """Nothing to commit in memory."""


class _TimedExecutor:
    """Runs the real executor and records when each action ran."""

    def __init__(self, inner: MaintenanceExecutor) -> None:
        self._inner = inner
        self.busy = threading.Event()
        self.actions: list[tuple[float, float, MaintenanceResult]] = []

    def execute(
        self,
        request: MaintenanceRequest,
        policy: MaintenancePolicy,
        *,
        writer_commit_s: float | None = None,
        writer_held: bool = True,
    ) -> MaintenanceResult:
        begin = time.time()
        self.busy.set()
        try:
            result = self._inner.execute(
                request, policy, writer_commit_s=writer_commit_s, writer_held=writer_held
            )
        finally:
            self.busy.clear()
        self.actions.append((begin, time.time(), result))
        return result


class _DiscardPublisher:
    def publish(self, event: ControlEvent) -> None:
        """Events stay in the service's results; nothing to send."""

    def flush(self, timeout: float = 30.0) -> None:
        """Nothing queued."""


def _create_table(spark: Any, name: str, format_version: int) -> None:
    if format_version not in (2, 3):
        raise ValueError(f"format version must be 2 or 3, not {format_version}")
    spark.sql(
        f"""CREATE TABLE icefjord.{name} (id BIGINT NOT NULL, part INT NOT NULL, v STRING,
        updated_at TIMESTAMP) USING iceberg PARTITIONED BY (part)
        TBLPROPERTIES ('format-version'='{format_version}', 'write.delete.mode'='merge-on-read',
                       'write.update.mode'='merge-on-read', 'write.merge.mode'='merge-on-read')"""
    )
    spark.sql(f"ALTER TABLE icefjord.{name} SET IDENTIFIER FIELDS id")


def _merge(spark: Any, name: str, rows: list[tuple[int, int, str, bool]]) -> None:
    view = f"bench_{uuid.uuid4().hex[:8]}"
    frame = spark.createDataFrame(rows, "id long, part int, v string, del boolean")
    frame.createOrReplaceTempView(view)
    try:
        spark.sql(
            f"""MERGE INTO icefjord.{name} t USING {view} s ON t.id = s.id
            WHEN MATCHED AND s.del THEN DELETE
            WHEN MATCHED THEN UPDATE SET t.v = s.v, t.updated_at = current_timestamp()
            WHEN NOT MATCHED AND NOT s.del THEN INSERT (id, part, v, updated_at)
                VALUES (s.id, s.part, s.v, current_timestamp())"""
        )
    finally:
        spark.catalog.dropTempView(view)


def run_bench(
    spark: Any,
    settings: MaintainerSettings,
    config: BenchConfig,
    *,
    namespace: str | None = None,
    keep: bool = False,
    progress: Callable[[str], None] = lambda message: None,
) -> BenchReport:
    """Run the benchmark on a fresh table ``<namespace>.stream_<id>`` (namespace created if
    missing, default ``bench``), dropped afterwards unless ``keep``."""
    catalog = open_catalog(settings.catalog)
    ns = namespace or "bench"
    if (ns,) not in catalog.list_namespaces():
        catalog.create_namespace(ns)
    table = f"{ns}.stream_{uuid.uuid4().hex[:8]}"
    _create_table(spark, table, config.format_version)
    progress(f"loading {config.keys} rows into {table} and warming up")
    load = [(k, k % config.partitions, "v0", False) for k in range(config.keys)]
    spark.createDataFrame(load, "id long, part int, v string, del boolean").drop("del").selectExpr(
        "id", "part", "v", "current_timestamp() AS updated_at"
    ).writeTo(f"icefjord.{table}").append()
    _merge(spark, table, load[:1])  # the first MERGE compiles and loads classes: not timed
    table_id = TableId(ns, table.split(".", 1)[1])
    stop = threading.Event()
    source = _MemorySource()
    inspector = TableInspector(catalog)
    board = HealthBoard()
    executor = _TimedExecutor(
        MaintenanceExecutor(
            SparkProcedureRunner(spark),
            inspector,
            catalog=settings.catalog.name,
            max_attempts=settings.max_attempts,
            retry_delay_s=settings.retry_delay_s,
            lease_s=settings.compaction_lease_s,
            lease_settle_s=settings.compaction_lease_settle_s,
            stop=stop,
        )
    )
    service = MaintainerService(
        settings.model_copy(update={"include": rf"{ns}\.{table_id.name}"}),
        source=source,
        publisher=_DiscardPublisher(),
        executor=executor,
        tables=_SingleTable(table, inspector),
        metrics=MaintainerMetrics.create(CollectorRegistry(), board.snapshot),
        board=board,
    )
    commits: list[CommitTiming] = []
    samples: list[Sample] = []
    errors: list[str] = []
    started = time.time()

    def writer() -> None:
        rng = random.Random(config.seed)
        sequence = 0
        next_at = time.time()
        while not stop.is_set() and time.time() - started < config.duration_s:
            sequence += 1
            begin, conflicts = time.time(), 0
            # Like iceberg-writer: no commit while the maintainer holds the lease (the wait
            # counts in this commit's latency).
            while leased(catalog.load_table(table).properties, int(time.time() * 1000)):
                if stop.wait(0.2):
                    return
            # iceberg-writer keeps reading while held back, so the held commit takes the
            # changes that arrived meanwhile: its rows are picked now, after the wait. The RNG
            # calls keep their order, so a seed still gives the same batches.
            picked = time.time()
            keys = rng.sample(range(config.keys), config.rows_per_commit)
            rows = [
                (k, k % config.partitions, f"v{sequence}", rng.random() < config.delete_share)
                for k in keys
            ]
            while True:
                try:
                    _merge(spark, table, rows)
                    break
                except Exception as exc:
                    if not is_conflict(exc) or conflicts >= 20:
                        errors.append(f"writer: {exc}"[:300])
                        stop.set()
                        return
                    conflicts += 1
                    # Like iceberg-writer: a commit that lost to a rewrite holds back while
                    # the lease is on, then goes again with everything that arrived meanwhile.
                    if leased(catalog.load_table(table).properties, int(time.time() * 1000)):
                        while leased(catalog.load_table(table).properties, int(time.time() * 1000)):
                            if stop.wait(0.2):
                                return
                        picked = time.time()
            end = time.time()
            commits.append(CommitTiming(begin, end, conflicts, picked=picked))
            touched = len({row[1] for row in rows})
            commit = CommitDone(
                table=table,
                commit_id=str(uuid.uuid4()),
                snapshot_id=sequence,
                writer_epoch=1,
                records=len(rows),
                inserted=0,
                updated=len(rows),
                deleted=0,
                data_files_added=touched,
                delete_files_added=touched,
                bytes_added=0,
                committed_at_ms=int(end * 1000),
                # What iceberg-writer reports: the commit itself, not the wait for a lease.
                duration_ms=int((end - picked) * 1000),
            )
            source.events.put(ControlEvent.new(table, commit, producer="bench"))
            next_at = max(next_at + config.commit_interval_s, time.time())
            stop.wait(max(next_at - time.time(), 0))

    def maintainer() -> None:
        while not stop.is_set():
            try:
                service.step()
            except Exception as exc:  # keep maintaining; the report lists what went wrong
                errors.append(f"maintainer: {exc}"[:300])
                stop.wait(1.0)

    def sampler() -> None:
        while not stop.wait(config.sample_interval_s):
            try:
                health = compute_health(inspector.inspect(table_id))
            except Exception as exc:
                errors.append(f"sampler: {exc}"[:300])
                continue
            samples.append(
                Sample(
                    elapsed_s=time.time() - started,
                    partition_files_max=health.partition_files_max,
                    data_files=health.data_files,
                    delete_files=health.position_delete_files + health.equality_delete_files,
                    snapshots=health.snapshots,
                    maintaining=executor.busy.is_set(),
                )
            )
            progress(
                f"{samples[-1].elapsed_s:.0f} s: {len(commits)} commits, "
                f"{health.partition_files_max} files in the fullest partition, "
                f"{len(executor.actions)} maintenance actions"
            )

    threads = [
        threading.Thread(target=writer, name="bench-writer", daemon=True),
        threading.Thread(target=maintainer, name="bench-maintainer", daemon=True),
        threading.Thread(target=sampler, name="bench-sampler", daemon=True),
    ]
    for thread in threads:
        thread.start()
    try:
        threads[0].join()
    finally:
        stop.set()
        for thread in threads[1:]:
            thread.join(timeout=600)
        if not keep:
            catalog.purge_table(table)
    return BenchReport(
        config=config,
        seconds=time.time() - started,
        commits=tuple(commits),
        actions=tuple(executor.actions),
        samples=tuple(samples),
        errors=tuple(errors),
        started=started,
    )


class _SingleTable:
    """The catalog narrowed to the benchmark's table."""

    def __init__(self, table: str, inspector: TableInspector) -> None:
        self._table = table
        self._inspector = inspector

    def list_tables(self) -> list[str]:
        return [self._table]

    def inspect(self, table: TableId) -> Any:
        return self._inspector.inspect(table)


def _fmt(value: float | None, unit: str = "s") -> str:
    return "-" if value is None else f"{value:.2f} {unit}"


def render(report: BenchReport, console: Console) -> None:
    """Print ``report`` as tables."""
    config = report.config
    busy = [(start, end) for start, end, _ in report.actions]
    during, outside = latency_split(report.commits, busy)
    every = [c.seconds for c in report.commits]
    fresh_during, fresh_outside = freshness_samples(report.commits, busy)
    fresh = fresh_during + fresh_outside
    summary = Table(
        title=f"maintainer bench: MERGE of {config.rows_per_commit} changes every "
        f"{config.commit_interval_s:g} s into {config.partitions} partitions"
    )
    summary.add_column("figure")
    summary.add_column("value", justify="right")
    rate = len(report.commits) / report.seconds if report.seconds else 0.0
    rows = [
        ("run time", _fmt(report.seconds)),
        ("commits (per s)", f"{len(report.commits)} ({rate:.2f}/s)"),
        ("writer conflicts retried", str(report.conflicts)),
        (
            "commit latency p50 / p99",
            f"{_fmt(percentile(every, 50))} / {_fmt(percentile(every, 99))}",
        ),
        (
            "  during maintenance p50 / p99",
            f"{_fmt(percentile(during, 50))} / {_fmt(percentile(during, 99))} ({len(during)})",
        ),
        (
            "  otherwise p50 / p99",
            f"{_fmt(percentile(outside, 50))} / {_fmt(percentile(outside, 99))} ({len(outside)})",
        ),
        (
            "freshness p50 / p99 (changes arriving evenly)",
            f"{_fmt(percentile(fresh, 50))} / {_fmt(percentile(fresh, 99))}",
        ),
        (
            "  during maintenance p50 / p99",
            f"{_fmt(percentile(fresh_during, 50))} / {_fmt(percentile(fresh_during, 99))}"
            f" ({len(fresh_during)})",
        ),
        (
            "  otherwise p50 / p99",
            f"{_fmt(percentile(fresh_outside, 50))} / {_fmt(percentile(fresh_outside, 99))}"
            f" ({len(fresh_outside)})",
        ),
        ("files in the fullest partition, max", str(report.files_max)),
        ("maintenance actions", str(len(report.actions))),
    ]
    by_kind: dict[str, list[float]] = {}
    for start, end, result in report.actions:
        by_kind.setdefault(f"{result.action.value} {result.status.value}", []).append(end - start)
    for kind, durations in sorted(by_kind.items()):
        rows.append((f"  {kind}", f"{len(durations)} x, p50 {_fmt(percentile(durations, 50))}"))
    for label, value in rows:
        summary.add_row(label, value)
    console.print(summary)
    failures: dict[str, int] = {}
    for _, _, result in report.actions:
        if result.status is MaintenanceStatus.FAILED:
            why = f"{result.action.value}: {(result.error or result.message or '?')[:240]}"
            failures[why] = failures.get(why, 0) + 1
    for why, count in sorted(failures.items()):
        console.print(f"[yellow]{count} x {why}[/]")
    timeline = Table(title="the table over time")
    for column in ("t (s)", "max files/partition", "data files", "delete files", "snapshots"):
        timeline.add_column(column, justify="right")
    timeline.add_column("maintaining")
    for sample in report.samples:
        timeline.add_row(
            f"{sample.elapsed_s:.0f}",
            str(sample.partition_files_max),
            str(sample.data_files),
            str(sample.delete_files),
            str(sample.snapshots),
            "yes" if sample.maintaining else "",
        )
    console.print(timeline)
    for error in report.errors:
        console.print(f"[red]{error}[/]")


def run_and_render(
    config: BenchConfig,
    *,
    keep: bool,
    console: Console,
    out: Path | None = None,
    latency_target_s: float = 10.0,
) -> bool:
    """Start Spark with the maintainer's settings, run the benchmark, print the report and,
    with ``out``, write its CSV files and chart there; return False when something went
    wrong (listed in the report)."""
    from shared.spark import build_spark_session

    settings = MaintainerSettings()
    uri = catalog_properties(settings.catalog).get("uri", "")
    if uri.startswith("sqlite:///"):
        # The local stack creates this directory; a fresh state directory needs it too.
        Path(uri.removeprefix("sqlite:///").split("?", 1)[0]).parent.mkdir(
            parents=True, exist_ok=True
        )
    spark = build_spark_session("icefjord-bench-maintain", settings.spark, settings.catalog)
    try:
        report = run_bench(spark, settings, config, keep=keep, progress=console.log)
    finally:
        spark.stop()
    render(report, console)
    if out is not None:
        from icefjord.bench.maintainer_chart import write_outputs

        written = write_outputs(report, out, latency_target_s)
        for path in written:
            console.print(f"wrote {path}")
        if out / "bench.png" not in written:
            console.print("[yellow]no chart: matplotlib is missing (pip install -e '.[bench]')[/]")
    return not report.errors
