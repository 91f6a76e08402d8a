"""How iceberg-writer's and schema-watcher's start-up grows with the control topic's history:
``icefjord bench control-history``.

It publishes a synthetic history to a control topic of its own (a month of one busy table
committing about once a second, as issue 45 describes it: CommitDone events, with a
compaction request and result now and then and a few schema versions of other tables), then
runs, each in a fresh process, the part of each service's start that reads that history:

- the writer's ``ControlView.replay`` (schema plans, CommitDone ids, bulk loads, operators'
  commands), as ``Writer.start`` runs it before the writer subscribes;
- the watcher's fold of the control topic, as ``SchemaWatcher.recover`` runs it.

Each runs twice: first with no checkpoint (the first start after an upgrade: the whole
history folded, checkpoints saved on the way, to a checkpoints topic of the bench's own), then
after a tail of more events is published (by default one checkpoint interval, the most a
running service leaves unfolded), from the checkpoint. For each it reports the wall and CPU
seconds and the peak resident memory of the process. Nothing else runs in those processes (no
Spark), so the figures are the history's cost.
"""

from __future__ import annotations

import json
import resource
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from shared.events import (
    CommitDone,
    ControlEvent,
    ControlPayload,
    MaintenanceAction,
    MaintenanceRequest,
    MaintenanceResult,
    MaintenanceStatus,
    SchemaChange,
    TopicPartitionOffset,
    Verdict,
)
from shared.settings import KafkaSettings, RegistrySettings

BUSY_TABLE = "bench.busy"
COMPACTION_EVERY = 900  # commits between two compactions (one each 15 minutes)
SCHEMA_TABLES = 20
SCHEMA_VERSIONS = 3


def synthetic_event(index: int, start_ms: int) -> ControlEvent:
    """Event ``index`` of the history: one a second from ``start_ms``."""
    now_ms = start_ms + index * 1000
    payload: ControlPayload
    if index < SCHEMA_TABLES * SCHEMA_VERSIONS:
        table = f"bench.t{index % SCHEMA_TABLES:02d}"
        version = index // SCHEMA_TABLES + 1
        payload = SchemaChange(
            table=table,
            subject=f"icefjord.changes.{table}-value",
            from_version=version - 1 or None,
            to_version=version,
            from_schema_id=1000 + index - SCHEMA_TABLES if version > 1 else None,
            to_schema_id=1000 + index,
            verdict=Verdict.APPLY,
        )
        return ControlEvent.new(table, payload, "schema-watcher", now_ms=now_ms)
    if index % COMPACTION_EVERY == 0:
        request = f"compaction-{index}"
        payload = MaintenanceRequest(
            request_id=request,
            table=BUSY_TABLE,
            action=MaintenanceAction.COMPACT_DATA_FILES,
            reason="small files",
            requested_by="maintainer",
        )
        return ControlEvent.new(BUSY_TABLE, payload, "maintainer", now_ms=now_ms)
    if index % COMPACTION_EVERY == 1:
        payload = MaintenanceResult(
            request_id=f"compaction-{index - 1}",
            table=BUSY_TABLE,
            action=MaintenanceAction.COMPACT_DATA_FILES,
            status=MaintenanceStatus.SUCCEEDED,
            duration_ms=4000,
        )
        return ControlEvent.new(BUSY_TABLE, payload, "maintainer", now_ms=now_ms)
    payload = CommitDone(
        table=BUSY_TABLE,
        commit_id=str(uuid.uuid4()),
        snapshot_id=index,
        writer_epoch=1,
        records=1000,
        inserted=400,
        updated=500,
        deleted=100,
        data_files_added=1,
        delete_files_added=1,
        bytes_added=120_000,
        watermark_ms=now_ms - 1500,
        freshness_ms=1500,
        offsets=tuple(
            TopicPartitionOffset(
                topic=f"icefjord.changes.{BUSY_TABLE}", partition=p, next_offset=index * 170
            )
            for p in range(6)
        ),
        committed_at_ms=now_ms,
        duration_ms=300,
    )
    return ControlEvent.new(BUSY_TABLE, payload, "iceberg-writer", now_ms=now_ms)


def state_topic(topic: str) -> str:
    """The bench's own checkpoints topic beside its control topic ``topic``."""
    return f"{topic}-state"


def publish_history(
    kafka: KafkaSettings,
    registry: RegistrySettings,
    topic: str,
    events: int,
    progress: Callable[[int], None],
    first: int = 0,
) -> float:
    """Create ``topic`` (the control topic's settings, one replica) and its checkpoints
    topic, and publish ``events`` synthetic events to it, from event number ``first`` on;
    the seconds it took."""
    from shared.avro import AvroCodec
    from shared.control import ControlPublisher
    from shared.kafka import ensure_topics, make_admin, make_producer
    from shared.registry import make_registry_client
    from shared.settings import CONTROL_STATE_TOPIC, CONTROL_TOPIC
    from shared.topics import catalog_topic_request

    ensure_topics(
        make_admin(kafka),
        [
            catalog_topic_request(topic, CONTROL_TOPIC, replication_factor=1),
            catalog_topic_request(state_topic(topic), CONTROL_STATE_TOPIC, replication_factor=1),
        ],
    )
    publisher = ControlPublisher(
        make_producer(kafka, **{"linger.ms": 50, "compression.type": "lz4"}),
        AvroCodec(make_registry_client(registry)),
        topic,
    )
    started = time.monotonic()
    start_ms = int(time.time() * 1000) - (first + events) * 1000
    for n in range(events):
        publisher.publish(synthetic_event(first + n, start_ms))
        if n % 50_000 == 49_999:
            publisher.flush(120)
            progress(n + 1)
    publisher.flush(120)
    progress(events)
    return time.monotonic() - started


@dataclass(frozen=True)
class StartCost:
    """One service's read of the history, measured in a process of its own."""

    service: str
    start: str
    wall_s: float
    cpu_s: float
    peak_rss_mib: float
    detail: str


def _measure_writer(kafka: KafkaSettings, registry: RegistrySettings, topic: str) -> str:
    from prometheus_client import CollectorRegistry

    from services.iceberg_writer.commands import OperatorCommands
    from services.iceberg_writer.control_view import FOLD, ControlView
    from services.iceberg_writer.metrics import WriterMetrics
    from services.iceberg_writer.state import TableState
    from shared.avro import AvroCodec
    from shared.control import ControlPublisher, ControlReader
    from shared.control_state import Checkpoints, StateStore
    from shared.kafka import make_admin, make_consumer, make_producer
    from shared.registry import make_registry_client

    codec = AvroCodec(make_registry_client(registry))
    consumer = make_consumer(kafka, f"bench-history-{uuid.uuid4().hex[:8]}")
    metrics = WriterMetrics.create(CollectorRegistry())
    tables: dict[str, TableState] = {}
    commands = OperatorCommands(
        tables,
        ControlPublisher(make_producer(kafka), codec, topic),
        producer="bench",
        covers=lambda table: True,
        metrics=metrics,
    )
    store = StateStore(
        kafka,
        codec,
        control_topic=topic,
        fold=FOLD,
        producer="bench",
        state_topic=state_topic(topic),
    )
    view = ControlView(
        consumer,
        ControlReader(consumer, codec, topic),
        make_admin(kafka),
        topic,
        tables,
        metrics,
        commands,
        Checkpoints(store),
    )
    view.replay(timeout_s=3600)
    view.close()
    replayed = view.last_replay
    assert replayed is not None
    return (
        f"{replayed.from_checkpoint:,} from the checkpoint, {replayed.from_topic:,} from the "
        f"topic; kept {len(view.retained):,} events, {len(view.commits_seen):,} commit ids"
    )


def _measure_watcher(kafka: KafkaSettings, registry: RegistrySettings, topic: str) -> str:
    from services.schema_watcher.config import WatcherSettings
    from services.schema_watcher.watcher import (
        fold_control_log,
        recover_state,
        watcher_state_store,
    )
    from shared.avro import AvroCodec
    from shared.registry import make_registry_client
    from shared.settings import ControlStateSettings

    settings = WatcherSettings(
        kafka=kafka,
        registry=registry,
        control_topic=topic,
        control_state=ControlStateSettings(topic=state_topic(topic)),
        recovery_timeout_s=3600,
    )
    codec = AvroCodec(make_registry_client(registry))
    events, replayed = fold_control_log(settings, codec, watcher_state_store(settings, codec))
    state = recover_state(events)
    return (
        f"{replayed.from_checkpoint:,} from the checkpoint, {replayed.from_topic:,} from the "
        f"topic; {len(state.subjects)} subjects, kept {len(events)} events"
    )


MEASURES = {"iceberg-writer": _measure_writer, "schema-watcher": _measure_watcher}


def measure(
    service: str, kafka: KafkaSettings, registry: RegistrySettings, topic: str, start: str
) -> StartCost:
    """Run ``service``'s read of ``topic`` in a fresh Python process and measure it;
    ``start`` says which start it is, for the report."""
    arguments = json.dumps(
        {
            "service": service,
            "start": start,
            "kafka": kafka.model_dump(mode="json"),
            "registry": registry.model_dump(mode="json"),
            "topic": topic,
        }
    )
    done = subprocess.run(
        [sys.executable, "-m", "icefjord.bench.control_history", arguments],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"{service}: {done.stderr.strip()[-2000:]}")
    return StartCost(**json.loads(done.stdout.strip().splitlines()[-1]))


def _child(arguments: str) -> None:
    given: dict[str, Any] = json.loads(arguments)
    service = given["service"]
    kafka = KafkaSettings(**given["kafka"])
    registry = RegistrySettings(**given["registry"])
    wall, cpu = time.monotonic(), time.process_time()
    detail = MEASURES[service](kafka, registry, given["topic"])
    peak_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    result = StartCost(
        service=service,
        start=given["start"],
        wall_s=round(time.monotonic() - wall, 2),
        cpu_s=round(time.process_time() - cpu, 2),
        peak_rss_mib=round(peak_kib / 1024, 1),
        detail=detail,
    )
    print(json.dumps(result.__dict__))


def report(events: int, tail: int, publish_s: float, costs: list[StartCost], out: Path) -> Path:
    """Write ``report.md`` and ``report.json`` under ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    lines = [
        f"# Start-up against {events:,} control events",
        "",
        f"History published in {publish_s:.1f} s: a busy table's CommitDone about once a "
        f"second, a compaction request and result every {COMPACTION_EVERY} commits, "
        f"{SCHEMA_VERSIONS} schema versions of {SCHEMA_TABLES} tables. Each service started "
        f"first with no checkpoint (folding the whole history and saving checkpoints), then "
        f"again after {tail:,} more events, from its checkpoint.",
        "",
        "| service | start | wall s | CPU s | peak RSS MiB | what it read and kept |",
        "|---|---|---|---|---|---|",
        *(
            f"| {c.service} | {c.start} | {c.wall_s:.2f} | {c.cpu_s:.2f} | "
            f"{c.peak_rss_mib:,.1f} | {c.detail} |"
            for c in costs
        ),
        "",
        "Each service's read of the history ran alone in a fresh process (no Spark); peak RSS "
        "is that process's, the interpreter and its imports included.",
        "",
    ]
    (out / "report.md").write_text("\n".join(lines))
    (out / "report.json").write_text(
        json.dumps(
            {
                "events": events,
                "tail": tail,
                "publish_s": publish_s,
                "costs": [c.__dict__ for c in costs],
            },
            indent=2,
        )
    )
    return out / "report.md"


if __name__ == "__main__":
    _child(sys.argv[1])
