"""``icefjord deadletter list|replay`` against the real Kafka and a real cdc-normalizer: records
dead-lettered for a cause that is then fixed go back where they came from and through the
pipeline, each exactly once, a replay killed between producing and committing included."""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap
from collections.abc import Callable
from typing import Any

import pytest
from debezium_support import json_envelope, json_key
from harness import Stack
from normalizer_support import COLUMNS, drain, normalizer_settings, row
from prometheus_client import CollectorRegistry
from typer.testing import CliRunner

from icefjord.cli import app
from icefjord.replay import HEADER_REPLAYED_FROM, replayed_markers
from services.cdc_normalizer.app import NormalizerService
from services.cdc_normalizer.config import NormalizerSettings
from services.cdc_normalizer.metrics import NormalizerMetrics
from shared.avro import AvroCodec
from shared.kafka import TopicRequest, ensure_topics, make_admin, make_producer, read_committed
from shared.registry import make_registry_client

pytestmark = pytest.mark.integration

# The kill: the second transaction's records are written to the log, then the process dies
# before committing it.
DYING_REPLAY = textwrap.dedent(
    """
    import os, signal, sys
    from confluent_kafka import Producer
    from icefjord.replay import Filter, dead_letters, replay
    from shared.settings import KafkaSettings

    class Dying(Producer):
        commits = 0

        def commit_transaction(self, *args):
            Dying.commits += 1
            if Dying.commits == 2:
                self.flush(10)
                os.kill(os.getpid(), signal.SIGKILL)
            return super().commit_transaction(*args)

    kafka = KafkaSettings(bootstrap_servers=sys.argv[1])
    topic = sys.argv[2]
    replay(
        kafka,
        lambda: [
            letter.put_back()
            for letter in dead_letters(kafka, Filter(), lambda message, reason: None, topic)
        ],
        topic,
        batch=1,
        producer_factory=Dying,
    )
    """
)


def test_a_fixed_cause_is_replayed_once_through_the_pipeline_after_a_killed_replay(
    stack: Stack, unique: Callable[[str], str]
) -> None:
    if stack.kafka.security_protocol != "PLAINTEXT":
        pytest.skip("the killed replay's script connects without credentials")
    source_topic = f"{unique('shop')}.inventory.customers"
    table = unique("customers")
    dead_letter_topic = unique("deadletter")
    ensure_topics(make_admin(stack.kafka), [TopicRequest(source_topic, 3)])

    def envelope(customer_id: int, email: str) -> bytes:
        after = row(customer_id, email, 100 * customer_id, customer_id)
        lsn = 1000 + customer_id
        return json_envelope("shop.inventory.customers", COLUMNS, table, "c", None, after, lsn)

    # Ids 2, 4 and 6 carry a long email: over the normalizer's first, too small limit.
    records = {
        i: (
            json_key("shop.inventory.customers", i),
            envelope(i, ("x" * 3000 if i % 2 == 0 else "") + f"{i}@example.com"),
        )
        for i in range(1, 7)
    }
    limit = max(len(k) + len(v) for i, (k, v) in records.items() if i % 2) + 100
    producer = make_producer(stack.kafka)
    for i, (k, v) in records.items():
        producer.produce(source_topic, key=k, value=v, partition=i % 3)
    producer.flush(10)

    def settings(**overrides: Any) -> NormalizerSettings:
        return normalizer_settings(stack, source_topic, table, dead_letter_topic, **overrides)

    service = NormalizerService(
        settings(max_record_bytes=limit), NormalizerMetrics.create(CollectorRegistry())
    )
    try:
        assert drain(service, 6) == 6
    finally:
        service.close()

    runner = CliRunner()
    env = {
        "ICEFJORD_NORMALIZER_KAFKA__BOOTSTRAP_SERVERS": stack.kafka.bootstrap_servers,
        "ICEFJORD_NORMALIZER_DEAD_LETTER_TOPIC": dead_letter_topic,
        "ICEFJORD_NORMALIZER_TOPIC_REPLICATION_FACTOR": "1",
        "COLUMNS": "250",
    }
    listed = runner.invoke(app, ["deadletter", "list", "--reason", "max_record_bytes"], env=env)
    assert listed.exit_code == 0, listed.output
    assert "3 matching" in listed.output
    assert listed.output.count("RecordTooLarge") == 3
    none = runner.invoke(app, ["deadletter", "list", "--table", "*.orders"], env=env)
    assert "0 matching" in none.output

    # The cause is fixed (the limit raised); a replay dies after its first transaction.
    killed = subprocess.run(
        [sys.executable, "-c", DYING_REPLAY, stack.kafka.bootstrap_servers, dead_letter_topic],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert killed.returncode == -9, killed.stderr
    marked = {m for m in replayed_markers(stack.kafka) if m.startswith(dead_letter_topic + ":")}
    assert len(marked) == 1
    dry = runner.invoke(app, ["deadletter", "replay", "--dry-run"], env=env)
    assert "2 to replay, 1 replayed before" in dry.output, dry.output

    replayed = runner.invoke(app, ["deadletter", "replay"], env=env)
    assert replayed.exit_code == 0, replayed.output
    assert "replayed 2 record(s)" in replayed.output
    assert "1 replayed before" in replayed.output

    fixed = NormalizerService(settings(), NormalizerMetrics.create(CollectorRegistry()))
    try:
        # The committed replays only: the killed replay's second record was aborted.
        assert drain(fixed, 3) == 3
    finally:
        fixed.close()

    codec = AvroCodec(make_registry_client(stack.registry))
    changes = [
        codec.deserialize(m.value())[1]
        for m in read_committed(stack.kafka, f"icefjord.changes.inventory.{table}")
    ]
    assert sorted(change["key"]["id"] for change in changes) == [1, 2, 3, 4, 5, 6]
    source = list(read_committed(stack.kafka, source_topic))
    back = [m for m in source if HEADER_REPLAYED_FROM in dict(m.headers() or [])]
    assert sorted((m.key(), m.value(), m.partition()) for m in back) == sorted(
        (records[i][0], records[i][1], i % 3) for i in (2, 4, 6)
    )
    assert len(list(read_committed(stack.kafka, dead_letter_topic))) == 3

    again = runner.invoke(app, ["deadletter", "replay"], env=env)
    assert again.exit_code == 0, again.output
    assert "replayed 0 record(s)" in again.output
    assert "3 replayed before" in again.output
    listed = runner.invoke(app, ["deadletter", "list"], env=env)
    assert re.search(r"(?m)\byes\b", listed.output) and listed.output.count("yes") == 3
