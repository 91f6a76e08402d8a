"""``icefjord bench peer``: one Debezium backlog drained by Icefjord and by a Flink SQL job.

The pipeline a data team would pick instead of Icefjord is a Flink SQL job: a Kafka source in
the ``debezium-json`` format and an Iceberg sink in upsert mode. This benchmark runs both on
the same work, on the same machine, one after the other:

1. ``icefjord bench drain --workload peer`` (:mod:`icefjord.bench.drain`): the peer table's
   backlog is made through PostgreSQL and Debezium while the services are stopped, then the
   four services drain it from a cold start; CPU per service, tables verified.
2. The Flink job (``deploy/peer-flink/job.py``, PyFlink from PyPI in a virtual environment
   of its own, the jars from Maven Central built by ``deploy/peer-flink/pom.xml``) reads the
   same topic from the earliest offset with a group of its own and writes its own table in
   the same catalog. Its wall time runs from its process's start until its group's committed
   offsets reach the topic's end (Flink commits them at the checkpoint that commits to
   Iceberg) and its table has the commit; its CPU is its whole process session (the Python
   client, the JVM with the job's mini-cluster). Its table is verified against the source
   like Icefjord's.

The report puts the two side by side, with what the Flink job needed that Icefjord does not.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console

from icefjord.bench import peer_workload
from icefjord.bench.cpu import Root, read_cpu
from icefjord.bench.drain import DrainOptions, DrainReport, run_drain
from icefjord.demo.catchup import end_offsets
from icefjord.demo.run import DemoError, DemoOptions
from icefjord.demo.source import PostgresDemoSource, SourceNames
from icefjord.local.artifacts import ArtifactError, module_digest, run_maven
from icefjord.local.connect import KafkaConnect
from icefjord.local.postgres import PostgresCluster
from icefjord.local.settings import LocalSettings

ROOT = Path(__file__).resolve().parents[2]
MODULE = ROOT / "deploy" / "peer-flink"
JOB = MODULE / "job.py"
REQUIREMENTS = MODULE / "requirements.txt"
FLINK_LABEL = "Flink 1.20 SQL job (PyFlink, one JVM)"

# What the Flink job needed that Icefjord does not, each seen while setting it up.
FLINK_NEEDS = (
    "the source table at REPLICA IDENTITY FULL: `debezium-json` fails on an update without "
    "its before image (Icefjord takes PostgreSQL's default replica identity)",
    "three Java scalar functions (deploy/peer-flink/src): Debezium's decimal (base64 "
    "unscaled bytes, the scale in the schema), date (days since the epoch) and zoned "
    "timestamp (ISO text) have no cast in Flink SQL; Icefjord converts every Debezium "
    "logical type itself",
    "the table's columns, key and types written out by hand in two DDL statements, and "
    "again at every schema change: the job does not follow the source's schema (Icefjord "
    "evolves the table from the registry)",
    "its own Hadoop client jars for Iceberg's Flink module, even on a local file system",
    "equality deletes in the table (upsert mode): pyiceberg and DuckDB cannot read it until "
    "it is compacted (Icefjord writes position deletes every engine reads)",
)


@dataclass(frozen=True)
class PeerOptions:
    rows: int = 600_000
    parallelism: int = 2
    checkpoint_seconds: int = 10
    timeout_s: float = 1800.0
    out: Path | None = None


@dataclass(frozen=True)
class FlinkRun:
    """The Flink job's figures: wall seconds from its start to its last commit of the
    backlog, CPU seconds of its process session (None without ``/proc``), of which in its
    JVM's JIT compiler and collector threads, and whether its table equals the source."""

    wall_seconds: float
    cpu_seconds: float | None
    jit_seconds: float | None
    gc_seconds: float | None
    caught_up: bool
    table: str
    source_rows: int
    iceberg_rows: int
    equal: bool


@dataclass(frozen=True)
class PeerReport:
    command: str
    started: str
    icefjord: DrainReport
    flink: FlinkRun

    @property
    def flink_changes_per_cpu_second(self) -> float | None:
        cpu = self.flink.cpu_seconds
        return self.icefjord.backlog.changes / cpu if cpu else None


# -- Flink's environment ---------------------------------------------------------------------


@dataclass(frozen=True)
class FlinkDist:
    python: Path
    jars: tuple[Path, ...]


def flink_dist_for(settings: LocalSettings) -> tuple[Path, Path]:
    """Where PyFlink's virtual environment and the job's jars go, in the stack's dist
    directory: the venv by the pinned requirements, the jars by the module's digest."""
    pins = module_digest(MODULE)
    root = settings.dist_dir / "flink-peer"
    return root / "venv", root / f"jars-{pins}"


def ensure_flink(settings: LocalSettings, progress: Callable[[str], None]) -> FlinkDist:
    """PyFlink (``deploy/peer-flink/requirements.txt``) in a virtual environment of its own
    (its pins of numpy, pandas and pyarrow are older than Icefjord's), and the job's jars
    built with Maven; each only when the cache lacks it. Raises :class:`ArtifactError`."""
    venv, jars = flink_dist_for(settings)
    python = venv / "bin" / "python"
    marker = venv / "icefjord-requirements.txt"
    if not (
        python.is_file() and marker.is_file() and marker.read_text() == REQUIREMENTS.read_text()
    ):
        progress("installing PyFlink into its own virtual environment (about 700 MB, once)")
        shutil.rmtree(venv, ignore_errors=True)
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        pip = [str(python), "-m", "pip", "install", "--quiet", "-r", str(REQUIREMENTS)]
        done = subprocess.run(pip, capture_output=True, text=True)
        if done.returncode != 0:
            raise ArtifactError(f"pip could not install PyFlink:\n{done.stderr[-3000:]}")
        marker.write_text(REQUIREMENTS.read_text())
    lib = jars / "lib"
    if not (lib / "icefjord-flink-peer.jar").is_file():
        progress("building the Flink job's functions and fetching its jars with Maven (once)")
        shutil.rmtree(jars, ignore_errors=True)
        run_maven(
            [
                "-f",
                str(MODULE / "pom.xml"),
                f"-Dmaven.repo.local={settings.maven_repo}",
                f"-Dicefjord.build={jars}",
                "package",
            ],
            progress,
        )
    return FlinkDist(python, tuple(sorted(lib.glob("*.jar"))))


# -- the Flink run ---------------------------------------------------------------------------


def committed(settings: LocalSettings, group: str, topic: str) -> dict[int, int]:
    """The offsets ``group`` has committed on ``topic``'s partitions (absent: none yet)."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(settings.kafka_settings().client_config() | {"group.id": group})
    try:
        partitions = list(end_offsets(settings.kafka_settings(), topic))
        found = consumer.committed([TopicPartition(topic, p) for p in partitions], timeout=10)
        return {tp.partition: tp.offset for tp in found if tp.offset >= 0}
    finally:
        consumer.close()


def reached(ends: Mapping[int, int], offsets: Mapping[int, int]) -> bool:
    """Whether ``offsets`` reach every partition's end (an empty partition needs none)."""
    return all(end == 0 or offsets.get(p, -1) >= end for p, end in ends.items())


def last_data_commit_ms(catalog: Any, table: str) -> int | None:
    """The commit time of ``table``'s newest snapshot that added files (Flink's committer
    also commits empty snapshots now and then), None before its first."""
    try:
        snapshots = catalog.load_table(table).metadata.snapshots
    except Exception:  # not created yet, or the catalog busy
        return None
    times = [
        s.timestamp_ms
        for s in snapshots
        if s.summary is not None
        and int(s.summary.additional_properties.get("added-data-files", 0) or 0)
        + int(s.summary.additional_properties.get("added-delete-files", 0) or 0)
        > 0
    ]
    return max(times) if times else None


def _stop(process: subprocess.Popen[bytes]) -> None:
    try:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(timeout=20)
    except (ProcessLookupError, subprocess.TimeoutExpired):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()


def run_flink(
    settings: LocalSettings,
    dist: FlinkDist,
    drained: DrainReport,
    options: PeerOptions,
    out: Path,
    log: Callable[[str], None],
) -> FlinkRun:
    """Drain ``drained``'s topic with the Flink job and verify its table."""
    from shared.catalog import open_catalog
    from shared.settings import CatalogSettings

    prefix = DemoOptions().topic_prefix
    names = SourceNames(drained.schema, prefix)
    topic = names.topic(peer_workload.TABLE)
    namespace = f"flink_{drained.schema}"
    group = f"icefjord-bench-flink-{uuid.uuid4().hex[:8]}"
    config = {
        "topic": topic,
        "bootstrap": settings.kafka_settings().bootstrap_servers,
        "group": group,
        "catalog_name": settings.catalog_name,
        "uri": f"jdbc:sqlite:{settings.catalog_db}?busy_timeout=30000",
        "warehouse": settings.warehouse_uri,
        "namespace": namespace,
        "table": peer_workload.TABLE,
        "jars": [str(j) for j in dist.jars],
        "parallelism": options.parallelism,
        "checkpoint_seconds": options.checkpoint_seconds,
        "amount_scale": 2,
    }
    out.mkdir(parents=True, exist_ok=True)
    config_path = out / "flink-job.json"
    config_path.write_text(json.dumps(config, indent=2))
    catalog = open_catalog(
        CatalogSettings(name=settings.catalog_name, local_state_dir=settings.state)
    )
    ends = end_offsets(settings.kafka_settings(), topic)
    log(f"starting the Flink job on {topic} (group {group})")
    with (out / "flink-job.log").open("wb") as job_log:
        began = time.time()
        process = subprocess.Popen(
            [str(dist.python), str(JOB), "--config", str(config_path)],
            stdout=job_log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            roots = {FLINK_LABEL: Root(process.pid, "session")}
            deadline = time.monotonic() + options.timeout_s
            done = False
            reading = read_cpu(roots)
            while time.monotonic() < deadline:
                if process.poll() is not None:
                    raise DemoError(f"the Flink job exited ({process.returncode}); see {out}")
                offsets = committed(settings, group, topic)
                commit_ms = last_data_commit_ms(catalog, f"{namespace}.{peer_workload.TABLE}")
                behind = sum(ends.values()) - sum(offsets.values())
                if reached(ends, offsets) and commit_ms is not None:
                    reading = read_cpu(roots)
                    done = True
                    break
                reading = read_cpu(roots)
                log(f"Flink: {behind:,} records to go")
                time.sleep(2)
            end_ms = commit_ms if done and commit_ms is not None else int(time.time() * 1000)
        finally:
            _stop(process)
    component = reading.components[0] if reading is not None else None
    log("verifying the Flink job's table against the source (Spark reads Iceberg)")
    source, equal, iceberg_rows = _verify_flink(settings, names, namespace)
    return FlinkRun(
        wall_seconds=max(0.0, end_ms / 1000 - began),
        cpu_seconds=None if component is None else component.seconds,
        jit_seconds=None if component is None else component.jit_seconds,
        gc_seconds=None if component is None else component.gc_seconds,
        caught_up=done,
        table=f"{namespace}.{peer_workload.TABLE}",
        source_rows=source,
        iceberg_rows=iceberg_rows,
        equal=equal,
    )


def _verify_flink(
    settings: LocalSettings, names: SourceNames, namespace: str
) -> tuple[int, bool, int]:
    from icefjord.demo.engines import verify_session
    from icefjord.demo.verify import read_postgres, spark_reader, verify

    cluster = PostgresCluster(settings)
    tables = [
        dataclasses.replace(t, namespace=namespace)
        for t in read_postgres(cluster.conninfo(), names.schema)
    ]
    report = verify(tables, spark_reader(verify_session(settings), settings.catalog_name))
    (check,) = report.tables
    return check.source_rows, check.ok, check.iceberg_rows


def _discard(settings: LocalSettings, names: SourceNames) -> None:
    cluster = PostgresCluster(settings)
    source = PostgresDemoSource(settings, names, cluster, KafkaConnect(settings, None))
    try:
        source.discard()
    finally:
        source.close()


# -- the report ------------------------------------------------------------------------------


def _rate(value: float | None) -> str:
    return "-" if value is None else f"{value:,.0f}"


def render(report: PeerReport) -> str:
    ice = report.icefjord
    flink = report.flink
    n = ice.backlog.changes
    cpu = ice.service_cpu_seconds
    lines = [
        "# Icefjord beside a Flink SQL job: one Debezium backlog, drained from a cold start",
        "",
        f"- command: `{report.command}`; started {report.started}; {ice.machine}",
        f"- backlog: **{n:,} row changes** of one table ({ice.backlog.inserts:,} inserts, "
        f"{ice.backlog.updates:,} updates, {ice.backlog.deletes:,} deletes) in "
        f"{ice.backlog.kafka_records:,} Debezium records (tombstones included), JSON with "
        "schemas, made once through PostgreSQL and Debezium; each pipeline read all of it "
        "from the earliest offset",
        f"- Icefjord's normalizer and writer build: {ice.normalizer_build}",
        "",
        "| pipeline | wall s | CPU s | changes per CPU second | table equals the source |",
        "|---|---:|---:|---:|---|",
        f"| Icefjord, its four services | {ice.wall_seconds:.1f} | {cpu:.1f} | "
        f"{_rate(ice.changes_per_cpu_second)} | {'yes' if ice.verified else 'NO'} |",
        f"| {FLINK_LABEL} | {flink.wall_seconds:.1f} | "
        f"{'-' if flink.cpu_seconds is None else f'{flink.cpu_seconds:.1f}'} | "
        f"{_rate(report.flink_changes_per_cpu_second)} | {'yes' if flink.equal else 'NO'} |",
        "",
        "Icefjord's CPU by service (us per change):",
        "",
    ]
    for c in ice.components:
        if c.service and c.cpu_seconds is not None:
            lines.append(f"- {c.name}: {c.cpu_seconds:.1f} s ({c.per_change_us(n) or 0:,.1f} us)")
    if flink.cpu_seconds is not None:
        lines.append(
            f"\nFlink's CPU includes its JVM's JIT compiler ({flink.jit_seconds or 0:.1f} s) "
            f"and garbage collector ({flink.gc_seconds or 0:.1f} s) threads."
        )
    if not flink.caught_up:
        lines.append("\n**The Flink job did not finish in time: its figures are partial.**")
    lines += ["", "What the Flink job needed that Icefjord does not:", ""]
    lines += [f"- {need}" for need in FLINK_NEEDS]
    lines.append("")
    return "\n".join(lines)


def run_peer(
    settings: LocalSettings, options: PeerOptions, command: str, console: Console
) -> tuple[PeerReport, Path]:
    """Both pipelines on one backlog (see the module docstring); the report and its path."""
    log = console.log
    started = dt.datetime.now().astimezone()
    out = options.out or settings.state / "bench" / f"peer-{started:%Y%m%d-%H%M%S}"
    dist = ensure_flink(settings, log)
    drain = DrainOptions(
        workload="peer", rows=options.rows, keep_source=True, out=out / "icefjord", command=command
    )
    drained, _ = run_drain(settings, drain, console)
    names = SourceNames(drained.schema, DemoOptions().topic_prefix)
    try:
        flink = run_flink(settings, dist, drained, options, out / "flink", log)
    finally:
        if drained.verified:
            _discard(settings, names)
    report = PeerReport(command, started.isoformat(timespec="seconds"), drained, flink)
    out.mkdir(parents=True, exist_ok=True)
    path = out / "report.md"
    path.write_text(render(report))
    (out / "report.json").write_text(json.dumps(dataclasses.asdict(report), indent=2) + "\n")
    return report, path
