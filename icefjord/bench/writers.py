"""``icefjord bench writers``: one table's backlog drained by one writer instance, then by
several sharing it.

For each run (an instance count): a fresh change topic of one table, with ``partitions``
partitions, gets the same backlog of change records while no writer runs: inserts of
``keys`` keys, then updates and deletes of keys drawn at random (seeded). Then the instances
start together as users run them (``python -m services.iceberg_writer`` with the local
stack's settings, one consumer group), and the run ends when the table holds every record
(its offsets reach the topic's end on every partition). The local stack's own services are
stopped first: its writer would take the bench topics too.

Figures per run: seconds from the start and from the table's first commit to the end,
records per second over each, CPU seconds of the instances (their Python and their Spark
JVMs), records per CPU second, commits and commit conflicts. Each table is then read back
with pyiceberg and checked against the backlog's final state: one row per live key, each
with its last change.

Pure: :func:`backlog_changes`, :func:`final_state`, :func:`render`. The shell:
:func:`run_writers`.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import random
import re
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeRemainingColumn

from icefjord.bench.cpu import Root, read_cpu
from icefjord.local.settings import LocalSettings

NAMESPACE = "bench"


@dataclass(frozen=True)
class WritersOptions:
    records: int = 2_000_000
    partitions: int = 6
    keys: int = 500_000
    instances: tuple[int, ...] = (1, 2)
    seed: int = 7
    timeout_s: float = 3600.0
    out: Path | None = None
    command: str = ""
    # The writer's Spark warm-up (each write path once on a throwaway table, beside the
    # loop): it makes a fresh writer's first commits fast, and costs a drain CPU.
    warm_up: bool = True
    # Seconds between the instances' starts (0: together). The later ones then join a table
    # the first is already writing, as an instance added under a backlog does (KEDA's
    # scale-out), and take over partitions the first has committed.
    join_after_s: float = 0.0


@dataclass(frozen=True)
class WritersRun:
    """One drain: ``instances`` writers sharing the table of ``topic``."""

    instances: int
    topic: str
    records: int
    wall_seconds: float  # from the instances' start to the table holding every record
    drain_seconds: float  # from the table's first commit to the end
    cpu_seconds: float | None  # the instances' processes, Spark JVMs included
    cpu_by_instance: tuple[float, ...]
    commits: int
    conflicts: int
    verified: bool
    problem: str = ""

    @property
    def records_per_second(self) -> float:
        return self.records / self.wall_seconds if self.wall_seconds else 0.0

    @property
    def drain_records_per_second(self) -> float:
        """0 when the whole drain was one commit (nothing after the first to time)."""
        return self.records / self.drain_seconds if self.drain_seconds >= 1 else 0.0

    @property
    def records_per_cpu_second(self) -> float | None:
        return self.records / self.cpu_seconds if self.cpu_seconds else None


@dataclass(frozen=True)
class WritersReport:
    command: str
    started: str
    records: int
    partitions: int
    keys: int
    warm_up: bool
    machine: str
    runs: tuple[WritersRun, ...] = field(default_factory=tuple)
    join_after_s: float = 0.0


# -- pure ------------------------------------------------------------------------------------


def backlog_changes(records: int, keys: int, seed: int) -> Iterator[tuple[int, str, int]]:
    """``records`` changes, each (position, operation, key): a CREATE of every key first
    (fewer when ``records`` is smaller), then UPDATEs (85%) and DELETEs of keys drawn at
    random. An UPDATE of a deleted key brings it back, as an upsert does."""
    rng = random.Random(seed)
    created = min(keys, records)
    for seq in range(1, created + 1):
        yield seq, "CREATE", seq - 1
    for seq in range(created + 1, records + 1):
        yield seq, "UPDATE" if rng.random() < 0.85 else "DELETE", rng.randrange(keys)


def final_state(changes: Iterator[tuple[int, str, int]]) -> dict[int, int]:
    """Each live key's last position after ``changes``."""
    rows: dict[int, int] = {}
    for seq, op, key in changes:
        if op == "DELETE":
            rows.pop(key, None)
        else:
            rows[key] = seq
    return rows


def render(report: WritersReport) -> str:
    """The report as Markdown."""
    lines = [
        "# One table's backlog drained by writer instances sharing it",
        "",
        f"`{report.command}`, started {report.started}; {report.machine}.",
        "",
        f"{report.records:,} change records of one table on {report.partitions} partitions "
        f"({report.keys:,} keys inserted, then updates and deletes of random keys), made "
        "while no writer ran; the instances then started "
        + (f"{report.join_after_s:g} s apart" if report.join_after_s else "together")
        + " in one consumer group"
        + ("." if report.warm_up else ", without the writer's Spark warm-up."),
        "",
        "| instances | wall s | records/s | after first commit s | records/s | CPU s "
        "| records per CPU s | commits | conflicts | table verified |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for run in report.runs:
        cpu = "-" if run.cpu_seconds is None else f"{run.cpu_seconds:.1f}"
        per_cpu = run.records_per_cpu_second
        shares = " + ".join(f"{c:.1f}" for c in run.cpu_by_instance)
        lines.append(
            f"| {run.instances} | {run.wall_seconds:.1f} | {run.records_per_second:,.0f} "
            f"| {run.drain_seconds:.1f} | {run.drain_records_per_second:,.0f} "
            f"| {cpu} ({shares}) | {'-' if per_cpu is None else f'{per_cpu:,.0f}'} "
            f"| {run.commits} | {run.conflicts} "
            f"| {'yes' if run.verified else 'NO: ' + run.problem} |"
        )
    single = [r for r in report.runs if r.instances == 1 and r.drain_records_per_second]
    for run in report.runs:
        if run.instances > 1 and single and run.records_per_second:
            base = single[0]
            lines += [
                "",
                f"{run.instances} instances: {run.records_per_second / base.records_per_second:.2f}"
                f" times one instance's records/s from the start, "
                f"{run.drain_records_per_second / base.drain_records_per_second:.2f} times "
                "after the first commit.",
            ]
    return "\n".join(lines) + "\n"


# -- the shell -------------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _produce(
    settings: LocalSettings, topic: str, options: WritersOptions, progress: Progress
) -> None:
    from icefjord.bench.writer import BENCH_KEY_SCHEMA, bench_change, bench_schema
    from shared.avro import AvroCodec
    from shared.kafka import make_producer
    from shared.registry import make_registry_client

    codec = AvroCodec(make_registry_client(settings.registry_settings()))
    producer = make_producer(settings.kafka_settings(), **{"linger.ms": 50})
    schema = bench_schema(NAMESPACE, topic.rpartition(".")[2])
    subject = f"{topic}-value"
    now = dt.datetime.now(dt.UTC)
    keys: dict[int, bytes] = {}
    task = progress.add_task(f"backlog of {topic}", total=options.records)
    for done, (seq, op, key) in enumerate(
        backlog_changes(options.records, options.keys, options.seed), 1
    ):
        value = bench_change(op, seq, key, now)
        if op == "DELETE":
            value["after"] = None
        encoded = keys.get(key)
        if encoded is None:
            encoded = codec.serialize(f"{topic}-key", BENCH_KEY_SCHEMA, {"id": key})
            keys[key] = encoded
        while True:
            try:
                producer.produce(topic, key=encoded, value=codec.serialize(subject, schema, value))
                break
            except BufferError:
                producer.poll(0.1)
        if done % 10_000 == 0:
            producer.poll(0)
            progress.update(task, completed=done)
    producer.flush(120)
    progress.update(task, completed=options.records)


def _instance_env(
    settings: LocalSettings, topic: str, group: str, port: int, warm_up: bool
) -> dict[str, str]:
    from icefjord.local.services import WRITER, service_env

    return service_env(
        WRITER,
        settings,
        extra={
            "ICEFJORD_WRITER_TOPIC_PATTERN": f"^{re.escape(topic)}$",
            "ICEFJORD_WRITER_GROUP_ID": group,
            "ICEFJORD_WRITER_CONTROL_TOPIC": f"icefjord.bench.control.{group}",
            "ICEFJORD_WRITER_METRICS__PORT": str(port),
            "ICEFJORD_WRITER_WARM_UP": "true" if warm_up else "false",
        },
    )


def _verify(catalog: Any, table: str, expected: dict[int, int]) -> str:
    """ "" when the table holds one row per live key with its last change, else what differs."""
    rows = catalog.load_table(table).scan(selected_fields=("id", "customer")).to_arrow()
    ids = rows.column("id").to_pylist()
    if len(ids) != len(set(ids)):
        return f"{len(ids) - len(set(ids))} duplicate rows"
    held = dict(zip(ids, rows.column("customer").to_pylist(), strict=True))
    if set(held) != set(expected):
        return (
            f"{len(set(expected) - set(held))} keys missing, {len(set(held) - set(expected))} extra"
        )
    wrong = sum(1 for key, seq in expected.items() if held[key] != f"c{seq}")
    return f"{wrong} rows not at their last change" if wrong else ""


def _drain(
    settings: LocalSettings,
    options: WritersOptions,
    instances: int,
    expected: dict[int, int],
    console: Console,
) -> WritersRun:
    from icefjord.demo.catchup import end_offsets
    from icefjord.demo.progress import scrape_all, total
    from services.iceberg_writer.tables import checkpoint_of
    from shared.catalog import open_catalog
    from shared.kafka import TopicRequest, ensure_topics, make_admin
    from shared.settings import CatalogSettings

    name = f"drain_{uuid.uuid4().hex[:6]}_{instances}"
    table = f"{NAMESPACE}.{name}"
    topic = f"icefjord.changes.{table}"
    kafka = settings.kafka_settings()
    ensure_topics(make_admin(kafka), [TopicRequest(topic, options.partitions, 1)])
    with Progress(
        *Progress.get_default_columns()[:-1],
        MofNCompleteColumn(),
        TimeRemainingColumn(),
        console=console,
    ) as progress:
        _produce(settings, topic, options, progress)
    ends = end_offsets(kafka, topic)
    catalog = open_catalog(
        CatalogSettings(name=settings.catalog_name, local_state_dir=settings.state)
    )
    group = f"bench-writers-{name}"
    logs = settings.state / "bench" / "writers-logs"
    logs.mkdir(parents=True, exist_ok=True)
    processes: list[tuple[subprocess.Popen[bytes], int]] = []
    console.log(f"{instances} instance(s) start on {topic}")
    began = time.monotonic()
    first_commit: float | None = None
    done_at: float | None = None
    cpu_seconds: float | None = None
    by_instance: tuple[float, ...] = ()
    commits = conflicts = 0
    try:
        for i in range(instances):
            if i and options.join_after_s:
                time.sleep(options.join_after_s)
            port = _free_port()
            with (logs / f"{name}-{i}.log").open("wb") as out:
                process = subprocess.Popen(
                    [sys.executable, "-m", "services.iceberg_writer"],
                    env={
                        **os.environ,
                        **_instance_env(settings, topic, group, port, options.warm_up),
                    },
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            processes.append((process, port))
        with Progress(
            "drain",
            BarColumn(),
            MofNCompleteColumn(),
            TimeRemainingColumn(),
            console=console,
        ) as progress:
            task = progress.add_task("drain", total=options.records)
            while time.monotonic() - began < options.timeout_s:
                for process, _ in processes:
                    if process.poll() is not None:
                        raise RuntimeError(
                            f"a writer instance exited with {process.returncode}; logs in {logs}"
                        )
                try:
                    checkpoint = checkpoint_of(catalog.load_table(table))
                except Exception:  # not made yet
                    checkpoint = None
                if checkpoint is not None:
                    if first_commit is None:
                        first_commit = time.monotonic()
                    held = sum(checkpoint.offsets.get((topic, p), 0) for p in ends)
                    progress.update(task, completed=held)
                    if all(checkpoint.offsets.get((topic, p), 0) >= n for p, n in ends.items()):
                        done_at = time.monotonic()
                        break
                time.sleep(0.5)
        reading = read_cpu({f"w{i}": Root(p.pid) for i, (p, _) in enumerate(processes)})
        if reading is not None:
            by_instance = tuple(c.seconds for c in reading.components)
            cpu_seconds = sum(by_instance)
        scrape = scrape_all(
            {f"w{i}": f"http://127.0.0.1:{port}" for i, (_, port) in enumerate(processes)}, 0
        )
        for name in scrape.services:
            samples = scrape.get(name)
            commits += int(total(samples, "icefjord_writer_commits_total") or 0)
            conflicts += int(total(samples, "icefjord_writer_commit_conflicts_total") or 0)
    finally:
        for process, _ in processes:
            if process.poll() is None:
                process.terminate()
        for process, _ in processes:
            try:
                process.wait(timeout=120)
            except subprocess.TimeoutExpired:
                process.kill()
    if done_at is None or first_commit is None:
        return WritersRun(
            instances, topic, options.records, options.timeout_s, 0.0, cpu_seconds,
            by_instance, commits, conflicts, False, "did not drain in time",
        )  # fmt: skip
    problem = _verify(catalog, table, expected)
    return WritersRun(
        instances=instances,
        topic=topic,
        records=options.records,
        wall_seconds=done_at - began,
        drain_seconds=done_at - first_commit,
        cpu_seconds=cpu_seconds,
        cpu_by_instance=by_instance,
        commits=commits,
        conflicts=conflicts,
        verified=not problem,
        problem=problem,
    )


def plot(report: WritersReport, path: Path) -> None:
    """Records per second of each run, from the start and after the first commit."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = [f"{r.instances} instance{'s' if r.instances > 1 else ''}" for r in report.runs]
    xs = range(len(report.runs))
    fig, ax = plt.subplots(figsize=(7, 4))
    ax.bar([x - 0.2 for x in xs], [r.records_per_second for r in report.runs], 0.4,
           label="from the start")  # fmt: skip
    ax.bar([x + 0.2 for x in xs], [r.drain_records_per_second for r in report.runs], 0.4,
           label="after the first commit")  # fmt: skip
    ax.set_xticks(list(xs), labels)
    ax.set_ylabel("change records per second")
    ax.set_title(f"{report.records:,} records of one table, {report.partitions} partitions")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def run_writers(
    settings: LocalSettings, options: WritersOptions, console: Console
) -> tuple[WritersReport, Path]:
    """The whole benchmark (see the module docstring): the report and its directory."""
    from icefjord.bench.drain import _stop_services
    from icefjord.local.stack import LocalStack

    started = dt.datetime.now().astimezone()
    out = options.out or settings.state / "bench" / f"writers-{started:%Y%m%d-%H%M%S}"
    LocalStack(settings).up(console.log)
    _stop_services(settings, console.log, "the writers are started by this benchmark")
    expected = final_state(backlog_changes(options.records, options.keys, options.seed))
    runs = []
    for instances in options.instances:
        run = _drain(settings, options, instances, expected, console)
        console.log(
            f"{instances} instance(s): {run.wall_seconds:.1f} s, {run.records_per_second:,.0f}"
            f" records/s ({run.drain_records_per_second:,.0f} after the first commit), CPU "
            f"{run.cpu_seconds or 0:.1f} s, verified: {run.verified} {run.problem}"
        )
        runs.append(run)
    report = WritersReport(
        command=options.command,
        started=started.isoformat(timespec="seconds"),
        records=options.records,
        partitions=options.partitions,
        keys=options.keys,
        warm_up=options.warm_up,
        join_after_s=options.join_after_s,
        machine=f"{os.cpu_count()} cores, load at end {os.getloadavg()[0]:.1f}",
        runs=tuple(runs),
    )
    out.mkdir(parents=True, exist_ok=True)
    (out / "report.md").write_text(render(report))
    (out / "report.json").write_text(json.dumps(asdict(report), indent=2, default=str))
    plot(report, out / "writers.png")
    return report, out
