"""cdc-normalizer against the real local Kafka and registry: routing, dead letters, exactly-once."""

from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
import sys
import threading
import time
import urllib.request
import uuid
from collections.abc import Callable
from datetime import date
from decimal import Decimal
from typing import Any

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition
from debezium_support import json_envelope, json_key, payload
from harness import LostOnce, Stack, free_port
from normalizer_support import COLUMNS, drain, normalizer_settings, row
from prometheus_client import CollectorRegistry

from services.cdc_normalizer.app import NormalizerService
from services.cdc_normalizer.config import NormalizerSettings
from services.cdc_normalizer.metrics import NormalizerMetrics
from shared.avro import AvroCodec
from shared.errors import RetryableError
from shared.kafka import (
    TopicRequest,
    ensure_topics,
    make_admin,
    make_producer,
)
from shared.loop import EXIT_STUCK
from shared.registry import make_registry_client


class Crash(Exception):
    """Stands for the process dying between producing and committing."""


def envelope(
    table: str, op: str, before: dict[str, Any] | None, after: dict[str, Any] | None, lsn: int
) -> bytes:
    return json_envelope("shop.inventory.customers", COLUMNS, table, op, before, after, lsn)


def key(customer_id: int) -> bytes:
    return json_key("shop.inventory.customers", customer_id)


def read_all(stack: Stack, topic: str, isolation: str, settle_s: float = 4.0) -> list[Any]:
    """Every record of ``topic`` (all partitions), read until nothing new for ``settle_s``."""
    consumer = Consumer(
        stack.kafka.client_config()
        | {
            "group.id": f"reader-{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": False,
            "isolation.level": isolation,
        }
    )
    metadata = consumer.list_topics(topic, timeout=10)
    partitions = sorted(metadata.topics[topic].partitions)
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in partitions])
    out: list[Any] = []
    quiet_since = time.monotonic()
    while time.monotonic() - quiet_since < settle_s:
        message = consumer.poll(0.5)
        if message is None or message.error() is not None:
            continue
        out.append(message)
        quiet_since = time.monotonic()
    consumer.close()
    return out


def unwrap(value: Any) -> Any:
    """fastavro's return_record_name gives (name, record) for record union branches."""
    return value[1] if isinstance(value, tuple) else value


@pytest.fixture
def setup(stack: Stack, unique: Callable[[str], str]) -> Any:
    source_topic = f"{unique('shop')}.inventory.customers"
    table = unique("customers")
    dead_letter_topic = unique("deadletter")
    admin = make_admin(stack.kafka)
    ensure_topics(admin, [TopicRequest(source_topic, 1)])

    def settings(**overrides: Any) -> NormalizerSettings:
        return normalizer_settings(
            stack, source_topic, table, dead_letter_topic, **({"batch_size": 3} | overrides)
        )

    yield source_topic, table, dead_letter_topic, settings
    output = f"icefjord.changes.inventory.{table}"
    for future in admin.delete_topics([source_topic, dead_letter_topic, output]).values():
        with contextlib.suppress(Exception):
            future.result()


def test_service_writes_typed_changes_dead_letters_and_is_exactly_once(
    stack: Stack, setup: Any
) -> None:
    source_topic, table, dead_letter_topic, settings = setup
    inputs: list[tuple[bytes | None, bytes | None]] = [
        (key(1), envelope(table, "r", None, row(1, "ann@example.com", 12345, 19000), 100)),
        (key(2), envelope(table, "c", None, row(2, "bob@example.com", -50, 0), 200)),
        (
            key(1),
            envelope(
                table,
                "u",
                row(1, "ann@example.com", 12345, 19000),
                row(1, "ann@new.example", 99, 19001),
                300,
            ),
        ),
        (key(9), b'{"schema": {"type": "struct"'),  # invalid JSON
        (key(2), envelope(table, "d", row(2, "bob@example.com", -50, 0), None, 400)),
        (key(2), None),  # tombstone after the delete
        (key(3), envelope(table, "c", None, None, 500)),  # op c without after
        (key(3), envelope(table, "c", None, row(3, "cy@example.com", 1, 1), 600)),
    ]
    producer = make_producer(stack.kafka)
    for k, v in inputs:
        producer.produce(source_topic, key=k, value=v, headers=[("origin", b"test")])
    producer.flush(10)

    registry = CollectorRegistry()
    service = NormalizerService(settings(), NormalizerMetrics.create(registry))
    try:
        assert drain(service, len(inputs)) == len(inputs)
    finally:
        service.close()

    output_topic = f"icefjord.changes.inventory.{table}"
    codec = AvroCodec(make_registry_client(stack.registry))
    changes = read_all(stack, output_topic, "read_committed")
    decoded = [(m, codec.deserialize(m.value())[1]) for m in changes]
    decoded.sort(key=lambda pair: int(pair[1]["source"]["origin_offset"]))
    assert [(v["op"], v["key"]["id"], v["source"]["origin_offset"]) for _, v in decoded] == [
        ("READ", 1, "0"),
        ("CREATE", 2, "1"),
        ("UPDATE", 1, "2"),
        ("DELETE", 2, "4"),
        ("CREATE", 3, "7"),
    ]
    after = [unwrap(v["after"]) for _, v in decoded]
    assert after[0] == {
        "id": 1,
        "email": "ann@example.com",
        "balance": Decimal("123.45"),
        "birth_date": date(2022, 1, 8),
    }
    assert after[1] is not None and after[1]["balance"] == Decimal("-0.50")
    assert after[2] is not None and after[2]["birth_date"] == date(2022, 1, 9)
    assert after[3] is None
    for message, value in decoded:
        assert codec.deserialize(message.key())[1] == {"id": value["key"]["id"]}
        assert value["position"] == f"{value['source']['lsn']:0>20}.{value['tx_id']:0>20}"
    # Per-key order holds inside each output partition.
    for partition in {m.partition() for m, _ in decoded}:
        offsets = [
            int(v["source"]["origin_offset"]) for m, v in decoded if m.partition() == partition
        ]
        in_log_order = [
            int(codec.deserialize(m.value())[1]["source"]["origin_offset"])
            for m in changes
            if m.partition() == partition
        ]
        assert in_log_order == sorted(offsets)

    dead = read_all(stack, dead_letter_topic, "read_committed")
    dead.sort(key=lambda m: int(dict(m.headers())["icefjord.source.offset"]))
    assert [(m.key(), m.value()) for m in dead] == [inputs[3], inputs[6]]
    for message, offset, error_class in zip(
        dead, (3, 6), ("InvalidJson", "MissingAfter"), strict=True
    ):
        headers = dict(message.headers())
        assert headers["origin"] == b"test"
        assert headers["icefjord.error.class"] == error_class.encode()
        assert headers["icefjord.source.topic"] == source_topic.encode()
        assert headers["icefjord.source.partition"] == b"0"
        assert headers["icefjord.source.offset"] == str(offset).encode()
        assert abs(int(headers["icefjord.failed_at_ms"]) - time.time() * 1000) < 600_000

    sample = registry.get_sample_value
    assert sample("icefjord_normalizer_records_in_total", {"topic": source_topic}) == 8
    assert sample("icefjord_normalizer_tombstones_total", {"topic": source_topic}) == 1
    assert sample("icefjord_normalizer_dead_letters_total", {"reason": "invalid_json"}) == 1
    assert sample("icefjord_normalizer_dead_letters_total", {"reason": "missing_after"}) == 1
    labels = {"table": f"inventory.{table}", "op": "UPDATE"}
    assert sample("icefjord_normalizer_changes_out_total", labels) == 1

    # A crash between producing and committing: the transaction stays open, the process is gone.
    more = [
        (key(4), envelope(table, "c", None, row(4, "dee@example.com", 400, 4), 700)),
        (key(4), envelope(table, "u", None, row(4, "dee@example.org", 401, 4), 800)),
    ]
    for k, v in more:
        producer.produce(source_topic, key=k, value=v)
    producer.flush(10)
    crashing = NormalizerService(settings(), NormalizerMetrics.create(CollectorRegistry()))

    def crash(_producer: Any) -> None:
        raise Crash

    crashing._commit = crash  # type: ignore[method-assign]
    deadline = time.monotonic() + 60
    with pytest.raises(Crash):
        while time.monotonic() < deadline:
            crashing.step()
    assert crashing._consumer is not None
    crashing._consumer.close()  # leaves the group; its producer's transaction is left open

    # A new instance with the same transactional.id fences the dead one and redoes the batch.
    restarted = NormalizerService(settings(), NormalizerMetrics.create(CollectorRegistry()))
    try:
        assert drain(restarted, len(more)) == len(more)
    finally:
        restarted.close()
    committed = [
        codec.deserialize(m.value())[1] for m in read_all(stack, output_topic, "read_committed")
    ]
    origin_offsets = sorted(int(v["source"]["origin_offset"]) for v in committed)
    assert origin_offsets == [0, 1, 2, 4, 7, 8, 9]  # each change once
    uncommitted = read_all(stack, output_topic, "read_uncommitted")
    assert len(uncommitted) > len(committed)  # the crashed attempt really wrote (aborted) records

    # Running again over the same input (new instance, same group) emits nothing new.
    again = NormalizerService(
        settings(transactional_id=f"tx2-{table}"), NormalizerMetrics.create(CollectorRegistry())
    )
    try:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            assert again.step() == 0
    finally:
        again.close()
    assert len(read_all(stack, output_topic, "read_committed")) == len(committed)
    assert len(read_all(stack, dead_letter_topic, "read_committed")) == 2


class FlakyRegistry:
    """A registry client that fails like an unreachable registry while ``down`` is set,
    after a second, as a registry that does not answer does: by then the records produced
    before the call are on the broker, in the transaction the failure aborts."""

    def __init__(self, real: Any) -> None:
        self.real = real
        self.down = True

    def __getattr__(self, name: str) -> Any:
        if self.down:
            time.sleep(1.0)
            raise ConnectionError("registry unreachable (simulated)")
        return getattr(self.real, name)


def test_registry_outage_aborts_the_batch_and_the_retry_writes_it_once(
    stack: Stack, setup: Any
) -> None:
    source_topic, table, dead_letter_topic, settings = setup
    inputs = [
        (key(7), b"not json at all"),
        (key(7), envelope(table, "c", None, row(7, "eve@example.com", 700, 7), 100)),
    ]
    producer = make_producer(stack.kafka)
    for k, v in inputs:
        producer.produce(source_topic, key=k, value=v)
    producer.flush(10)

    registry = FlakyRegistry(make_registry_client(stack.registry))
    service = NormalizerService(
        settings(batch_size=10), NormalizerMetrics.create(CollectorRegistry()), registry=registry
    )
    try:
        deadline = time.monotonic() + 60
        failures = 0
        while failures == 0 and time.monotonic() < deadline:
            try:
                assert service.step() == 0  # nothing can commit while the registry is down
            except RetryableError:
                failures += 1
        assert failures == 1
        registry.down = False  # the registry is back: the same batch is redone
        assert drain(service, len(inputs)) == len(inputs)
    finally:
        service.close()

    output_topic = f"icefjord.changes.inventory.{table}"
    codec = AvroCodec(make_registry_client(stack.registry))
    changes = [
        codec.deserialize(m.value())[1] for m in read_all(stack, output_topic, "read_committed")
    ]
    assert [(c["op"], c["key"]) for c in changes] == [("CREATE", {"id": 7})]
    committed_dead = read_all(stack, dead_letter_topic, "read_committed")
    assert [(m.key(), m.value()) for m in committed_dead] == [inputs[0]]
    # The aborted attempt had already written the dead letter; readers never see that copy.
    assert len(read_all(stack, dead_letter_topic, "read_uncommitted")) == 2


def truncate_event(table: str, lsn: int) -> bytes:
    # Schemaless: a truncate carries no row schema.
    return json.dumps(payload(table, "t", None, None, lsn)).encode()


def test_a_consumer_out_of_its_group_is_replaced_and_nothing_is_lost_or_repeated(
    stack: Stack, setup: Any
) -> None:
    source_topic, table, _, settings = setup
    producer = make_producer(stack.kafka)

    def send(ids: range) -> None:
        for i in ids:
            email = f"c{i}@example.com"
            producer.produce(
                source_topic, key=key(i), value=envelope(table, "c", None, row(i, email, i, 1), i)
            )
        producer.flush(10)

    send(range(1, 4))
    service = NormalizerService(settings(), NormalizerMetrics.create(CollectorRegistry()))
    watch = LostOnce()
    service._membership = watch
    try:
        assert drain(service, 3) == 3
        first = service._consumer
        watch.armed = True
        send(range(4, 10))
        assert drain(service, 6) == 6
        assert watch.fired
        assert service._consumer is not None and service._consumer is not first
    finally:
        service.close()

    codec = AvroCodec(make_registry_client(stack.registry))
    changes = read_all(stack, f"icefjord.changes.inventory.{table}", "read_committed")
    ids = sorted(codec.deserialize(m.value())[1]["key"]["id"] for m in changes)
    assert ids == list(range(1, 10))


def test_main_run_serves_metrics_writes_a_truncate_and_stops_on_request(
    stack: Stack, setup: Any
) -> None:
    from services.cdc_normalizer.__main__ import run

    source_topic, table, _dead_letter_topic, settings = setup
    producer = make_producer(stack.kafka)
    producer.produce(
        source_topic,
        key=key(5),
        value=envelope(table, "c", None, row(5, "fay@example.com", 5, 5), 100),
    )
    producer.produce(source_topic, key=None, value=truncate_event(table, 200))
    producer.flush(10)

    port = free_port()
    values = settings().model_dump()
    values["metrics"] = {"host": "127.0.0.1", "port": port}
    stop = threading.Event()
    runner = threading.Thread(target=run, args=(NormalizerSettings(**values), stop), daemon=True)
    runner.start()
    try:
        deadline = time.monotonic() + 60
        body = ""
        while time.monotonic() < deadline and "records_in_total{" not in body:
            time.sleep(0.5)
            with contextlib.suppress(OSError):
                body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics").read().decode()
        assert f'icefjord_normalizer_records_in_total{{topic="{source_topic}"}} 2.0' in body
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz") as response:
            assert response.status == 200
    finally:
        stop.set()
        runner.join(15)
    assert not runner.is_alive()

    output_topic = f"icefjord.changes.inventory.{table}"
    codec = AvroCodec(make_registry_client(stack.registry))
    messages = read_all(stack, output_topic, "read_committed")
    decoded = sorted(
        ((m, codec.deserialize(m.value())[1]) for m in messages),
        key=lambda pair: pair[1]["position"],
    )
    assert [v["op"] for _, v in decoded] == ["CREATE", "TRUNCATE"]
    truncate_message, truncate = decoded[1]
    assert truncate_message.key() is None
    assert truncate["after"] is None
    assert truncate["key"] == {"id": 0}  # the documented placeholder


@pytest.mark.parametrize("fmt", ["json", "avro"])
def test_the_service_benchmark_drains_every_record_through_kafka(stack: Stack, fmt: str) -> None:
    from icefjord.bench.normalizer_service import bench_service

    settings = NormalizerSettings(
        kafka=stack.kafka, registry=stack.registry, topic_replication_factor=1, batch_size=200
    )
    seen: list[str] = []
    result = bench_service(settings, 1000, fmt, progress=seen.append)  # type: ignore[arg-type]
    # The first batch waits for the group assignment and is not timed; the rest is.
    assert result.untimed > 0
    assert result.changes + result.untimed == 1000
    assert result.batches >= 5
    assert result.seconds > 0 and result.cpu_s > 0
    assert any("1,000 committed changes" in line for line in seen)
    assert len(result.topics) == 2
    admin = make_admin(stack.kafka)
    deadline = time.monotonic() + 30  # deletion reaches the metadata shortly after
    while set(result.topics) & set(admin.list_topics(timeout=10).topics):
        assert time.monotonic() < deadline, f"{result.topics} were not deleted"
        time.sleep(0.5)


def test_a_step_that_does_not_return_in_time_ends_the_process_with_code_4(
    stack: Stack, setup: Any
) -> None:
    """The watchdog wired into the real service: with a limit below its first step's waits
    (starting transactions, a 2 s poll), the step overruns it, and the process exits 4 with
    the stack in its log (a librdkafka call that never returns looks the same)."""
    source_topic, table, dead_letter_topic, _settings = setup
    env = os.environ | {
        "ICEFJORD_NORMALIZER_KAFKA__BOOTSTRAP_SERVERS": stack.kafka.bootstrap_servers,
        "ICEFJORD_NORMALIZER_REGISTRY__URL": stack.registry.url,
        "ICEFJORD_NORMALIZER_METRICS__PORT": str(free_port()),
        "ICEFJORD_NORMALIZER_INCLUDE_PATTERN": f"^{re.escape(source_topic)}$",
        "ICEFJORD_NORMALIZER_GROUP_ID": f"normalizer-{table}",
        "ICEFJORD_NORMALIZER_TRANSACTIONAL_ID": f"tx-{table}",
        "ICEFJORD_NORMALIZER_DEAD_LETTER_TOPIC": dead_letter_topic,
        "ICEFJORD_NORMALIZER_TOPIC_REPLICATION_FACTOR": "1",
        "ICEFJORD_NORMALIZER_POLL_TIMEOUT_S": "2",
        "ICEFJORD_NORMALIZER_STUCK_STEP_S": "0.5",
    }
    done = subprocess.run(
        [sys.executable, "-m", "services.cdc_normalizer"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == EXIT_STUCK, done.stdout[-2000:] + done.stderr[-2000:]
    records = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    stuck = [r for r in records if r["msg"].startswith("step stuck")]
    assert len(stuck) == 1, done.stdout[-2000:]
    # Where it waits (starting transactions, or polling) depends on timing; it is the step.
    assert "cdc_normalizer/app.py" in stuck[0]["stack"], stuck[0]["stack"]
    assert ", in step\n" in stuck[0]["stack"], stuck[0]["stack"]
