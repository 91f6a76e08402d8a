"""``icefjord bench recovery``: how soon a table is fresh again after iceberg-writer is killed.

On the local stack (``icefjord local up``; the benchmark starts the schema-watcher and
iceberg-writer when they are not running, and leaves them running), a generator produces
change records at a fixed rate to a fresh changes topic of one partition, each
stamped with the wall-clock time it was produced. The stack's schema-watcher and
iceberg-writer create and fill its table. After a steady stretch the writer is killed
(``kill -9`` of its process group, its Spark JVM too, as a container crash) and started again
at once, as a supervisor would, ``kills`` times.

The catalog is polled for the table's snapshots. Each writer commit records the next offset
it has not applied (its checkpoint), so for every record the commit that made it visible is
known, and with it the record's freshness: from production to visible. Per kill:

- *first commit*: seconds from the kill to the restarted writer's first commit;
- *fresh again*: seconds from the kill to the first commit whose oldest record was produced
  at most ``fresh_s`` before it;
- *worst*: the largest freshness of any record made visible from the kill until then.
"""

from __future__ import annotations

import datetime as dt
import random
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from icefjord.local.settings import LocalSettings


@dataclass(frozen=True)
class Commit:
    """A writer commit: its snapshot's wall-clock time and the next offset it had not applied."""

    at: float
    next_offset: int


@dataclass(frozen=True)
class KillFigures:
    killed_at: float
    first_commit_s: float | None  # None: no commit after the kill
    fresh_again_s: float | None  # None: never fresh again in the run
    worst_s: float | None


def with_previous(commits: Sequence[Commit]) -> Iterator[tuple[Commit, Commit]]:
    """Each commit with the one before it (before the first: nothing applied yet)."""
    previous = Commit(0.0, 0)
    for commit in commits:
        yield previous, commit
        previous = commit


def commit_freshness(produced: Sequence[float], before: Commit, commit: Commit) -> float | None:
    """The freshness of the oldest record ``commit`` made visible (the first one ``before``
    had not), or None when it made none visible."""
    first = before.next_offset
    if commit.next_offset <= first or first >= len(produced):
        return None
    return commit.at - produced[first]


def kill_figures(
    produced: Sequence[float], commits: Sequence[Commit], killed_at: float, fresh_s: float
) -> KillFigures:
    """The figures of the kill at ``killed_at`` (see the module's description), from every
    record's production time (``produced[offset]``) and the table's writer commits in order."""
    worst: float | None = None
    first_commit: float | None = None
    for previous, commit in with_previous(commits):
        if commit.at <= killed_at:
            continue
        if first_commit is None:
            first_commit = commit.at - killed_at
        freshness = commit_freshness(produced, previous, commit)
        if freshness is None:
            continue
        worst = freshness if worst is None else max(worst, freshness)
        if freshness <= fresh_s:
            return KillFigures(killed_at, first_commit, commit.at - killed_at, worst)
    return KillFigures(killed_at, first_commit, None, worst)


@dataclass(frozen=True)
class RecoveryResult:
    table: str
    rate: int
    kills: tuple[KillFigures, ...]
    steady_p99_s: float  # freshness p99 of the commits before the first kill
    produced_at: tuple[float, ...]  # by offset: when each record was produced
    commits: tuple[Commit, ...]  # the table's writer commits, in order
    fresh_s: float

    @property
    def produced(self) -> int:
        return len(self.produced_at)


def _steady_p99(produced: Sequence[float], commits: Sequence[Commit], until: float) -> float:
    """p99 freshness of the records made visible before ``until``, each weighted as one."""
    from icefjord.bench.writer import quantile

    values: list[float] = []
    for previous, commit in with_previous(commits):
        if commit.at > until:
            break
        end = min(commit.next_offset, len(produced))
        values.extend(commit.at - produced[o] for o in range(previous.next_offset, end))
    return quantile(values, 0.99)


def bench_recovery(
    local: LocalSettings,
    *,
    rate: int,
    kills: int,
    steady_s: float,
    fresh_s: float,
    timeout_s: float = 180.0,
    progress: Callable[[str], None] = lambda _message: None,
) -> RecoveryResult:
    """Run the benchmark on ``local``'s stack (see the module's description)."""
    # Late imports: they load Kafka, the registry client and the catalog.
    from confluent_kafka import KafkaError, Message

    from icefjord.bench.writer import BENCH_KEY_SCHEMA, bench_change, bench_schema
    from icefjord.demo.run import start_services
    from icefjord.local.services import service_processes
    from services.iceberg_writer.config import WriterSettings
    from services.iceberg_writer.tables import OFFSETS, decode_offsets
    from shared.avro import AvroCodec
    from shared.catalog import open_catalog
    from shared.kafka import TopicRequest, ensure_topics, make_admin, make_producer
    from shared.registry import make_registry_client
    from shared.settings import CatalogSettings

    watcher, writer = service_processes(local, ["watcher", "writer"])
    start_services([watcher, writer], local.start_timeout_s, progress)
    settings = WriterSettings(
        kafka=local.kafka_settings(),
        registry=local.registry_settings(),
        catalog=CatalogSettings(name=local.catalog_name, local_state_dir=local.state),
        topic_replication_factor=1,
        metrics={"port": 0},
    )
    namespace, name = "bench", f"r_{uuid.uuid4().hex[:8]}"
    table = f"{namespace}.{name}"
    topic = f"icefjord.changes.{namespace}.{name}"
    ensure_topics(make_admin(settings.kafka), [TopicRequest(topic, 1)])
    codec = AvroCodec(make_registry_client(settings.registry))
    producer = make_producer(settings.kafka, **{"linger.ms": 20})
    schema = bench_schema(namespace, name)
    produced: list[float] = []  # by offset: when the record was produced (wall clock)
    stop = threading.Event()
    failures: list[str] = []

    def delivered(at: float) -> Callable[[KafkaError | None, Message], None]:
        def record(err: KafkaError | None, message: Message) -> None:
            if err is not None:
                failures.append(str(err))
                return
            offset = message.offset()
            assert offset is not None
            produced.extend([float("nan")] * (offset + 1 - len(produced)))
            produced[offset] = at

        return record

    def produce() -> None:
        rng = random.Random(1)
        began = time.monotonic()
        seq = 0
        while not stop.is_set():
            due = int((time.monotonic() - began) * rate)
            while seq < due:
                seq += 1
                key = rng.randrange(100_000)
                now = dt.datetime.now(dt.UTC)
                producer.produce(
                    topic,
                    key=codec.serialize(f"{topic}-key", BENCH_KEY_SCHEMA, {"id": key}),
                    value=codec.serialize(
                        f"{topic}-value", schema, bench_change("UPDATE", seq, key, now)
                    ),
                    on_delivery=delivered(now.timestamp()),
                )
            producer.poll(0.01)
        producer.flush(30)

    catalog = open_catalog(settings.catalog)
    commits: list[Commit] = []
    seen: set[int] = set()

    def poll_commits() -> None:
        try:
            loaded: Any = catalog.load_table(table)
        except Exception:  # not created yet, or the catalog is busy: next poll
            return
        for snapshot in loaded.snapshots():
            summary = snapshot.summary.additional_properties if snapshot.summary else {}
            if snapshot.snapshot_id in seen or OFFSETS not in summary:
                continue
            seen.add(snapshot.snapshot_id)
            offsets = decode_offsets(summary[OFFSETS])
            if (topic, 0) in offsets:
                commits.append(Commit(snapshot.timestamp_ms / 1000, offsets[(topic, 0)]))
        commits.sort(key=lambda c: (c.at, c.next_offset))

    def wait_until(done: Callable[[], bool], limit_s: float, what: str) -> None:
        deadline = time.monotonic() + limit_s
        while not done():
            if time.monotonic() > deadline:
                raise TimeoutError(f"{what} not within {limit_s:.0f} s")
            time.sleep(0.25)
            poll_commits()

    def steady(seconds: float) -> None:
        until = time.time() + seconds
        wait_until(lambda: time.time() >= until, seconds + 5, "the steady stretch")

    def fresh_after(killed_at: float) -> Callable[[], bool]:
        return lambda: kill_figures(produced, commits, killed_at, fresh_s).fresh_again_s is not None

    feeder = threading.Thread(target=produce, name="recovery-feed", daemon=True)
    feeder.start()
    figures: list[KillFigures] = []
    try:
        progress(f"producing {rate:,} changes/s to {topic}; waiting for table {table}")
        wait_until(lambda: bool(commits), timeout_s, f"the first commit to {table}")
        steady(steady_s)
        steady_p99 = _steady_p99(produced, commits, time.time())
        progress(f"steady: {len(commits)} commits, freshness p99 {steady_p99:.1f} s")
        for number in range(1, kills + 1):
            killed_at = time.time()
            writer.kill()
            while writer.running():
                time.sleep(0.05)
            writer.start()
            progress(f"kill {number}: writer killed and started again")

            wait_until(fresh_after(killed_at), timeout_s, f"fresh again after kill {number}")
            figure = kill_figures(produced, commits, killed_at, fresh_s)
            figures.append(figure)
            progress(
                f"kill {number}: first commit after {figure.first_commit_s:.1f} s, fresh "
                f"again after {figure.fresh_again_s:.1f} s, worst freshness "
                f"{figure.worst_s:.1f} s"
            )
            if number < kills:
                steady(steady_s)
    finally:
        stop.set()
        feeder.join(60)
    if failures:
        raise RuntimeError(f"{len(failures)} records were not produced: {failures[0]}")
    return RecoveryResult(
        table, rate, tuple(figures), steady_p99, tuple(produced), tuple(commits), fresh_s
    )


def commits_csv(result: RecoveryResult) -> str:
    """One row per writer commit: seconds since the first record was produced, the next
    offset it had not applied, and the freshness of the oldest record it made visible."""
    start = result.produced_at[0] if result.produced_at else 0.0
    rows = ["t_s,next_offset,oldest_record_s"]
    for previous, commit in with_previous(result.commits):
        age = commit_freshness(result.produced_at, previous, commit)
        rows.append(
            f"{commit.at - start:.2f},{commit.next_offset},{'' if age is None else f'{age:.2f}'}"
        )
    return "\n".join(rows) + "\n"


def staleness(produced: Sequence[float], commits: Sequence[Commit]) -> list[tuple[float, float]]:
    """How stale the table was over time: at each commit, the age of the oldest record not
    yet visible just before it and just after it (0 when every record produced by then is
    visible). Between commits the age grows with the clock, so these points, joined, are
    the whole curve."""

    def age(at: float, waiting: int) -> tuple[float, float]:
        """At ``at``, the age of record ``waiting`` (the first not visible), if produced."""
        produced_before = waiting < len(produced) and produced[waiting] < at
        return (at, at - produced[waiting] if produced_before else 0.0)

    points: list[tuple[float, float]] = []
    waiting = 0
    for commit in commits:
        points.append(age(commit.at, waiting))
        waiting = max(waiting, commit.next_offset)
        points.append(age(commit.at, waiting))
    return points


def plot(result: RecoveryResult, path: Path) -> None:
    """Draw how stale the table was over time (:func:`staleness`), the kills as lines.
    Raises ImportError without matplotlib (the ``bench`` extra)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    start = result.produced_at[0] if result.produced_at else 0.0
    points = staleness(result.produced_at, result.commits)
    fig, axis = plt.subplots(figsize=(11, 4.5))
    axis.plot(
        [t - start for t, _ in points],
        [age for _, age in points],
        linewidth=1,
        label="age of the oldest change not yet in the table",
    )
    axis.plot(
        [c.at - start for c in result.commits],
        [0] * len(result.commits),
        "|",
        color="tab:green",
        markersize=8,
        label="writer commits",
    )
    axis.axhline(result.fresh_s, color="red", linestyle=":", label=f"{result.fresh_s:g} s")
    for number, kill in enumerate(result.kills, 1):
        axis.axvline(kill.killed_at - start, color="black", linestyle="--", linewidth=1)
        axis.annotate(
            f"kill {number}",
            (kill.killed_at - start, 1),
            xycoords=("data", "axes fraction"),
            textcoords="offset points",
            xytext=(3, -12),
            fontsize=8,
        )
    axis.set_xlabel("seconds since the first change was produced")
    axis.set_ylabel("seconds")
    axis.legend(loc="upper center", bbox_to_anchor=(0.5, -0.15), ncol=3, fontsize=8)
    fig.suptitle(
        f"iceberg-writer killed (kill -9) and started again, {result.rate:,} changes/s "
        f"to {result.table}"
    )
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write_outputs(result: RecoveryResult, out_dir: Path) -> list[Path]:
    """Write ``commits.csv`` and (with matplotlib) ``recovery.png`` into ``out_dir``;
    return the paths written."""
    out_dir.mkdir(parents=True, exist_ok=True)
    written = [out_dir / "commits.csv"]
    written[0].write_text(commits_csv(result))
    try:
        plot(result, out_dir / "recovery.png")
    except ImportError:
        return written
    return [*written, out_dir / "recovery.png"]
