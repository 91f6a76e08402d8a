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
from collections.abc import Callable
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


def _schema(namespace: str, table: str) -> dict[str, Any]:
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


def _quantile(samples: list[float], q: float) -> float:
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
    writer = build_writer(run_settings, registry)
    writer.start()
    codec = AvroCodec(make_registry_client(settings.registry))
    producer = make_producer(settings.kafka, **{"linger.ms": 20})
    schema = _schema(namespace, table)
    subject = f"{topic}-value"
    key_schema = {"type": "record", "name": "K", "fields": [{"name": "id", "type": "long"}]}
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
                now = dt.datetime.now(dt.UTC)
                value = {
                    "op": "UPDATE" if seq > keys else "CREATE",
                    "position": f"{seq:020d}",
                    "source_ts_ms": int(now.timestamp() * 1000),
                    "tx_id": None,
                    "source": {"connector": "bench"},
                    "key": {"id": key},
                    "after": {"id": key, "customer": f"c{seq}", "amount": None, "updated_at": now},
                }
                producer.produce(
                    topic,
                    key=codec.serialize(f"{topic}-key", key_schema, {"id": key}),
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
    samples = list(writer.freshness_samples)
    applied = len(samples)
    return WriteBenchResult(
        rate=rate,
        seconds=elapsed,
        produced=produced,
        applied=applied,
        commits=writer.commits,
        freshness_p50_s=_quantile(samples, 0.5),
        freshness_p99_s=_quantile(samples, 0.99),
        # The second half of the changes: after the JVM has warmed up and the backlog of the
        # first, slow commits is gone.
        steady_p50_s=_quantile(samples[len(samples) // 2 :], 0.5),
        steady_p99_s=_quantile(samples[len(samples) // 2 :], 0.99),
    )
