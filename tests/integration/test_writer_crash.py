"""kill -9 of the real writer process, many times, while changes keep arriving.

The writer runs as ``python -m services.iceberg_writer`` (its own Spark JVM) and is killed
with SIGKILL at random moments, and once on purpose between an Iceberg commit and its
CommitDone. At the end the table must equal the model, with no duplicate key, and every
writer commit in the table's history must have its CommitDone on the control topic.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from changes_support import (
    ChangeProducer,
    Event,
    assert_equal_to_model,
    change_schema,
    control_events,
)
from confluent_kafka import TopicPartition
from harness import Stack
from writer_support import change_topic_in

from services.iceberg_writer.tables import checkpoint_of
from shared.avro import AvroCodec
from shared.catalog import open_catalog
from shared.events import CommitDone
from shared.kafka import make_consumer, make_producer
from shared.registry import make_registry_client

REPO = Path(__file__).resolve().parents[2]


def writer_env(stack: Stack, topic: str, suffix: str, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ICEFJORD_WRITER_")}
    env.update(
        {
            "ICEFJORD_WRITER_KAFKA__BOOTSTRAP_SERVERS": stack.kafka.bootstrap_servers,
            "ICEFJORD_WRITER_REGISTRY__URL": stack.registry.url,
            "ICEFJORD_WRITER_CATALOG__NAME": stack.catalog.name,
            "ICEFJORD_WRITER_CATALOG__LOCAL_STATE_DIR": str(stack.catalog.local_state_dir),
            "ICEFJORD_WRITER_SPARK__MASTER": "local[1]",
            "ICEFJORD_WRITER_SPARK__DRIVER_MEMORY": "1g",
            "ICEFJORD_WRITER_TOPIC_PATTERN": f"^{topic.replace('.', '[.]')}$",
            "ICEFJORD_WRITER_GROUP_ID": f"writer-{suffix}",
            "ICEFJORD_WRITER_CONTROL_TOPIC": f"control-{suffix}",
            "ICEFJORD_WRITER_DEAD_LETTER_TOPIC": f"dlq-{suffix}",
            "ICEFJORD_WRITER_QUARANTINE_TOPIC": f"quarantine-{suffix}",
            "ICEFJORD_WRITER_TOPIC_REPLICATION_FACTOR": "1",
            "ICEFJORD_WRITER_FRESHNESS_TARGET_S": "3",
            "ICEFJORD_WRITER_METRICS__PORT": "0",
            "ICEFJORD_WRITER_LOG_FORMAT": "console",
            **extra,
        }
    )
    return env


def start(env: dict[str, str], log: Path, crash: bool = False) -> subprocess.Popen[bytes]:
    """The writer process; ``crash``: one that exits right after its first commit, before
    its CommitDone (``tests/crashing_writer.py``)."""
    handle = log.open("ab")
    entry = (
        [str(REPO / "tests" / "crashing_writer.py")] if crash else ["-m", "services.iceberg_writer"]
    )
    return subprocess.Popen(
        [sys.executable, *entry],
        cwd=REPO,
        env=env,
        stdout=handle,
        stderr=subprocess.STDOUT,
    )


def history_for(keys: int, steps: int, seed: int) -> list[Event]:
    rng = random.Random(seed)
    live: set[int] = set()
    out: list[Event] = []
    for seq in range(1, steps + 1):
        key = rng.randrange(keys)
        op = ("DELETE" if rng.random() < 0.2 else "UPDATE") if key in live else "CREATE"
        out.append(Event(seq, op, key, name=f"v{seq}", amount=f"{rng.randint(0, 99999) / 100:.2f}"))
        if op == "DELETE":
            live.discard(key)
        else:
            live.add(key)
    return out


@pytest.fixture
def crash_topic(stack: Stack, namespace: str) -> Iterator[str]:
    with change_topic_in(stack, namespace, "crash") as name:
        yield name


def end_offsets(stack: Stack, topic: str) -> dict[tuple[str, int], int]:
    consumer = make_consumer(stack.kafka, f"ends-{uuid.uuid4().hex[:6]}")
    try:
        partitions = consumer.list_topics(topic, timeout=10).topics[topic].partitions
        return {
            (topic, p): consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
            for p in partitions
        }
    finally:
        consumer.close()


@pytest.mark.timeout(2400)
@pytest.mark.production_layout
def test_kill_minus_nine_many_times_loses_and_duplicates_nothing(
    stack: Stack, spark: Any, crash_topic: str, tmp_path: Path
) -> None:
    table = crash_topic.removeprefix("icefjord.changes.")
    schema = change_schema(*table.split("."))
    history = history_for(keys=300, steps=4000, seed=7)
    producer = ChangeProducer(
        make_producer(stack.kafka), AvroCodec(make_registry_client(stack.registry)), crash_topic
    )
    producer.send(schema, history[:1000])
    done = threading.Event()

    def trickle() -> None:
        for start_at in range(1000, len(history), 100):
            producer.send(schema, history[start_at : start_at + 100])
            time.sleep(3)
        done.set()

    feeder = threading.Thread(target=trickle, daemon=True)
    suffix = uuid.uuid4().hex[:8]
    log = tmp_path / "writer.log"
    rng = random.Random(11)
    began = time.monotonic()
    kills = 0
    processes: list[subprocess.Popen[bytes]] = []
    try:
        # The first run dies on purpose right after its first commit, before its CommitDone.
        first = start(writer_env(stack, crash_topic, suffix), log, crash=True)
        processes.append(first)
        assert first.wait(timeout=900) == 137, log.read_text()[-3000:]
        print(f"first writer exited after its commit, {time.monotonic() - began:.0f} s")
        feeder.start()  # the rest arrives while the writer is killed again and again
        for _ in range(4):
            process = start(writer_env(stack, crash_topic, suffix), log)
            processes.append(process)
            time.sleep(rng.uniform(15, 40))
            assert process.poll() is None, log.read_text()[-3000:]
            process.send_signal(signal.SIGKILL)
            process.wait(timeout=30)
            kills += 1
            print(f"kill -9 number {kills} at {time.monotonic() - began:.0f} s")
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
    feeder.join(timeout=600)
    assert done.is_set()
    process = start(writer_env(stack, crash_topic, suffix), log)
    try:
        catalog = open_catalog(stack.catalog)
        ends = end_offsets(stack, crash_topic)
        deadline = time.monotonic() + 600
        while True:
            assert process.poll() is None, log.read_text()[-3000:]
            loaded = catalog.load_table(table)
            checkpoint = checkpoint_of(loaded)
            if checkpoint is not None and all(
                checkpoint.offsets.get(tp, 0) >= n for tp, n in ends.items()
            ):
                break
            assert time.monotonic() < deadline, "writer did not catch up after the crashes"
            time.sleep(2)
        # Give the last CommitDone a moment, then stop cleanly.
        time.sleep(3)
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=60)
    assert_equal_to_model(spark, table, history)
    snapshots = spark.sql(f"SELECT summary FROM icefjord.{table}.snapshots").collect()
    commit_ids = {
        s["summary"]["icefjord.commit-id"]
        for s in snapshots
        if "icefjord.commit-id" in s["summary"]
    }
    published = {
        e.commit_id for e in control_events(stack, f"control-{suffix}") if isinstance(e, CommitDone)
    }
    assert commit_ids and commit_ids <= published, commit_ids - published
