"""``icefjord bench write``: the writer's throughput and freshness on a running stack.

A generator produces change records at a fixed rate (or as fast as it can) to a fresh change
topic, each stamped with its production time as the source commit time; a writer in this
process applies them to a fresh table. The figures are the writer's own: changes/s applied,
and freshness (source commit to visible in Iceberg) p50/p99 from its histogram samples.
Needs `icefjord local up` (or settings pointing at another stack).
"""

from __future__ import annotations

import datetime as dt
import random
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from prometheus_client import CollectorRegistry

from services.iceberg_writer.config import WriterSettings
from shared.avro import AvroCodec
from shared.kafka import TopicRequest, ensure_topics, make_admin, make_producer
from shared.registry import make_registry_client


@dataclass(frozen=True)
class WriteBenchResult:
    rate: int | None
    seconds: float
    produced: int
    applied: int
    commits: int
    freshness_p50_s: float
    freshness_p99_s: float
    steady_p50_s: float
    steady_p99_s: float

    @property
    def changes_per_second(self) -> float:
        return self.applied / self.seconds if self.seconds else 0.0


def bench_schema(namespace: str, table: str) -> dict[str, Any]:
    row = [
        {"name": "id", "type": "long"},
        {"name": "customer", "type": ["null", "string"], "default": None},
        {
            "name": "amount",
            "type": [
                "null",
                {"type": "bytes", "logicalType": "decimal", "precision": 12, "scale": 2},
            ],
            "default": None,
        },
        {
            "name": "updated_at",
            "type": ["null", {"type": "long", "logicalType": "timestamp-micros"}],
            "default": None,
        },
    ]
    operation = {
        "type": "enum",
        "name": "Operation",
        "namespace": "io.icefjord",
        "symbols": ["CREATE", "UPDATE", "DELETE", "READ", "TRUNCATE"],
    }
    key = {"type": "record", "name": "BenchKey", "fields": [{"name": "id", "type": "long"}]}
    return {
        "type": "record",
        "name": "BenchChange",
        "namespace": f"io.icefjord.changes.{namespace}",
        "icefjord.table": f"{namespace}.{table}",
        "icefjord.key": ["id"],
        "fields": [
            {"name": "op", "type": operation},
            {"name": "position", "type": "string"},
            {"name": "source_ts_ms", "type": "long"},
            {"name": "tx_id", "type": ["null", "string"], "default": None},
            {"name": "source", "type": {"type": "map", "values": "string"}},
            {"name": "key", "type": key},
            {
                "name": "after",
                "type": ["null", {"type": "record", "name": "BenchRow", "fields": row}],
                "default": None,
            },
        ],
    }


BENCH_KEY_SCHEMA = {"type": "record", "name": "K", "fields": [{"name": "id", "type": "long"}]}


def bench_change(op: str, seq: int, key: int, now: dt.datetime) -> dict[str, Any]:
    """A change record of :func:`bench_schema`, at position ``seq``, sourced ``now``."""
    return {
        "op": op,
        "position": f"{seq:020d}",
        "source_ts_ms": int(now.timestamp() * 1000),
        "tx_id": None,
        "source": {"connector": "bench"},
        "key": {"id": key},
        "after": {"id": key, "customer": f"c{seq}", "amount": None, "updated_at": now},
    }


class FreshnessSamples:
    """Each applied change's freshness in seconds (source commit to visible), as the
    writer's commits report it (``committer.CommitObserver``); the latest 200,000."""

    def __init__(self) -> None:
        self.samples: deque[float] = deque(maxlen=200_000)

    def committed(self, table: str, freshness_s: Sequence[float], commits: int) -> None:
        self.samples.extend(freshness_s)


def quantile(samples: Sequence[float], q: float) -> float:
    """The ``q`` quantile (0-1) of ``samples`` by rank; NaN for none."""
    if not samples:
        return float("nan")
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def bench_write(
    settings: WriterSettings,
    *,
    seconds: float,
    rate: int | None,
    keys: int = 100_000,
    progress: Callable[[str], None] = lambda _message: None,
) -> WriteBenchResult:
    """Produce for ``seconds`` at ``rate`` changes/s (None: as fast as possible) and write."""
    from services.iceberg_writer.__main__ import build_writer  # starts Spark: import late

    namespace = "bench"
    table = f"w_{uuid.uuid4().hex[:8]}"
    topic = f"icefjord.changes.{namespace}.{table}"
    admin = make_admin(settings.kafka)
    ensure_topics(admin, [TopicRequest(topic, 6)])
    run_settings = settings.model_copy(
        update={"topic_pattern": f"^{topic.replace('.', '[.]')}$", "group_id": f"bench-{table}"}
    )
    ensure_topics(admin, run_settings.topic_requests())
    registry = CollectorRegistry()
    freshness = FreshnessSamples()
    writer = build_writer(run_settings, registry, freshness)
    writer.start()
    codec = AvroCodec(make_registry_client(settings.registry))
    producer = make_producer(settings.kafka, **{"linger.ms": 20})
    schema = bench_schema(namespace, table)
    subject = f"{topic}-value"
    produced = 0
    stop = threading.Event()

    def produce() -> None:
        nonlocal produced
        rng = random.Random(1)
        started = time.monotonic()
        seq = 0
        while not stop.is_set():
            elapsed = time.monotonic() - started
            if elapsed >= seconds:
                break
            due = int(elapsed * rate) if rate else produced + 1000
            while produced < due:
                seq += 1
                key = rng.randrange(keys)
                value = bench_change(
                    "UPDATE" if seq > keys else "CREATE", seq, key, dt.datetime.now(dt.UTC)
                )
                producer.produce(
                    topic,
                    key=codec.serialize(f"{topic}-key", BENCH_KEY_SCHEMA, {"id": key}),
                    value=codec.serialize(subject, schema, value),
                )
                produced += 1
                if produced % 1000 == 0:
                    producer.poll(0)
            time.sleep(0.01)
        producer.flush(30)

    feeder = threading.Thread(target=produce, daemon=True)
    began = time.monotonic()
    feeder.start()
    last_report = began
    while feeder.is_alive() or not writer.caught_up():
        writer.step()
        if time.monotonic() - last_report > 5:
            last_report = time.monotonic()
            progress(
                f"{time.monotonic() - began:.0f} s: {produced} produced, {writer.commits} commits"
            )
        if time.monotonic() - began > seconds + 600:
            stop.set()
            break
    elapsed = time.monotonic() - began
    samples = list(freshness.samples)
    applied = len(samples)
    return WriteBenchResult(
        rate=rate,
        seconds=elapsed,
        produced=produced,
        applied=applied,
        commits=writer.commits,
        freshness_p50_s=quantile(samples, 0.5),
        freshness_p99_s=quantile(samples, 0.99),
        # The second half of the changes: after the JVM has warmed up and the backlog of the
        # first, slow commits is gone.
        steady_p50_s=quantile(samples[len(samples) // 2 :], 0.5),
        steady_p99_s=quantile(samples[len(samples) // 2 :], 0.99),
    )


@dataclass(frozen=True)
class NewTablesResult:
    tables: int
    rows: int  # per table
    seconds: float  # from the writer's first step until every table holds its rows

    @property
    def tables_per_second(self) -> float:
        return self.tables / self.seconds if self.seconds else 0.0


def bench_new_tables(
    settings: WriterSettings,
    *,
    tables: int,
    rows: int = 100,
    progress: Callable[[str], None] = lambda _message: None,
) -> NewTablesResult:
    """``tables`` fresh change topics, ``rows`` changes each, all waiting before a warmed-up
    writer starts (a snapshot of many tables): the time until every table exists and holds
    its rows, each table's row count checked in the catalog afterwards."""
    from services.iceberg_writer.__main__ import build_writer  # starts Spark: import late

    namespace = "bench"
    prefix = f"n{uuid.uuid4().hex[:8]}"
    names = [f"{prefix}_{i:03d}" for i in range(tables)]
    topics = [f"icefjord.changes.{namespace}.{name}" for name in names]
    admin = make_admin(settings.kafka)
    ensure_topics(admin, [TopicRequest(topic, 3) for topic in topics])
    run_settings = settings.model_copy(
        update={
            "topic_pattern": f"^icefjord[.]changes[.]{namespace}[.]{prefix}_[0-9]+$",
            "group_id": f"bench-{prefix}",
        }
    )
    ensure_topics(admin, run_settings.topic_requests())
    codec = AvroCodec(make_registry_client(settings.registry))
    producer = make_producer(settings.kafka, **{"linger.ms": 20})
    now = dt.datetime.now(dt.UTC)
    for name, topic in zip(names, topics, strict=True):
        schema = bench_schema(namespace, name)
        for key in range(rows):
            value = bench_change("CREATE", key + 1, key, now)
            producer.produce(
                topic,
                key=codec.serialize(f"{topic}-key", BENCH_KEY_SCHEMA, {"id": key}),
                value=codec.serialize(f"{topic}-value", schema, value),
            )
    producer.flush(30)
    writer = build_writer(run_settings, CollectorRegistry())
    writer.warm_up()
    writer.start()
    progress(f"{tables} topics of {rows} changes each waiting; writer warmed up")
    began = time.monotonic()
    last_report = began
    wanted = {f"{namespace}.{name}" for name in names}
    try:
        while True:
            writer.step()
            held = [s for n, s in writer.tables.items() if n in wanted and s.committed]
            if len(held) == tables and writer.caught_up():
                break
            if time.monotonic() - last_report > 2:
                last_report = time.monotonic()
                made = sum(1 for n, s in writer.tables.items() if n in wanted and s.table)
                progress(
                    f"{time.monotonic() - began:.1f} s: {made} of {tables} tables created, "
                    f"{len(held)} hold their first rows"
                )
            if time.monotonic() - began > 300:
                raise RuntimeError(f"only {len(held)} of {tables} tables committed in 300 s")
        seconds = time.monotonic() - began
        for name in sorted(wanted):
            table = writer._store.load(name)
            snapshot = table.current_snapshot() if table is not None else None
            summary = snapshot.summary if snapshot is not None else None
            total = summary.additional_properties.get("total-records") if summary else 0
            if int(total or 0) != rows:
                raise RuntimeError(f"{name} holds {total} rows, expected {rows}")
    finally:
        writer.close()
    return NewTablesResult(tables=tables, rows=rows, seconds=seconds)
