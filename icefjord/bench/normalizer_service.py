"""``icefjord bench normalize --kafka``: the whole service loop on a running stack.

:mod:`.bench` times the per-record path alone. This one times what a deployed process does:
N Debezium messages are produced (untimed) to a fresh source topic, then one
:class:`NormalizerService` in this process drains them in its real loop: consume, decode,
normalize, register the schema in the registry, Avro-encode, produce to the change topic and
commit each batch in a Kafka transaction with its offsets. The figures are the drain's wall
time and this process's CPU time (librdkafka's threads included). The change topic is then
read back ``read_committed`` and must hold exactly one record per change; at the end the
run's topics and subjects are deleted.
Needs `icefjord local up` (or settings pointing at another stack).
"""

from __future__ import annotations

import contextlib
import json
import logging
import re
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass

from confluent_kafka.schema_registry import Schema
from prometheus_client import CollectorRegistry

from icefjord.bench.normalizer import InputFormat, avro_schemas, generate_messages
from services.cdc_normalizer.app import NormalizerService
from services.cdc_normalizer.config import NormalizerSettings
from services.cdc_normalizer.metrics import NormalizerMetrics
from services.cdc_normalizer.pipeline import changes_topic
from services.cdc_normalizer.table_schema import TableId
from shared.kafka import TopicRequest, ensure_topics, make_admin, make_producer, read_committed
from shared.registry import make_registry_client

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class ServiceBenchResult:
    """One drain: ``records`` in, ``changes`` committed, in ``seconds`` wall and ``cpu_s``
    (all after the first batch)."""

    format: InputFormat
    records: int
    changes: int
    seconds: float
    cpu_s: float
    batches: int
    untimed: int
    """Records of the first batch, which waits for the group assignment and is not timed."""
    topics: tuple[str, ...] = ()
    """The run's source and change topics (deleted at the end)."""

    @property
    def changes_per_second(self) -> float:
        """Changes per wall-clock second of the drain."""
        return self.changes / self.seconds if self.seconds > 0 else 0.0

    @property
    def changes_per_cpu_second(self) -> float:
        """Changes per CPU second of this process: its rate with a core to itself."""
        return self.changes / self.cpu_s if self.cpu_s > 0 else 0.0


def _produce_input(
    settings: NormalizerSettings, topic: str, namespace: str, count: int, fmt: InputFormat
) -> None:
    key_id = value_id = None
    if fmt == "avro":
        registry = make_registry_client(settings.registry)
        key_schema, value_schema = (json.dumps(s) for s in avro_schemas())
        key_id = registry.register_schema(f"{topic}-key", Schema(key_schema, "AVRO"))
        value_id = registry.register_schema(f"{topic}-value", Schema(value_schema, "AVRO"))
    producer = make_producer(settings.kafka, **{"linger.ms": 20})
    for record in generate_messages(
        count, fmt, topic=topic, namespace=namespace, ids=(key_id, value_id)
    ):
        while True:
            try:
                producer.produce(topic, record.value, record.key)
                break
            except BufferError:
                producer.poll(0.1)
        producer.poll(0)
    if producer.flush(60) != 0:
        raise RuntimeError("the input records were not all delivered")


def _remove(settings: NormalizerSettings, topics: list[str]) -> None:
    """Delete the run's topics and subjects, so a writer running on the same stack does not
    load the benchmark's changes into a table."""
    admin = make_admin(settings.kafka)  # held: a collected client cancels its futures
    for topic, future in admin.delete_topics(topics).items():
        try:
            future.result(30)
        except Exception as exc:
            log.warning("benchmark topic not deleted", extra={"topic": topic, "error": str(exc)})
    registry = make_registry_client(settings.registry)
    for topic in topics:
        for subject in (f"{topic}-key", f"{topic}-value"):
            with contextlib.suppress(Exception):
                registry.delete_subject(subject)


def bench_service(
    settings: NormalizerSettings,
    count: int,
    fmt: InputFormat,
    progress: Callable[[str], None] = lambda _m: None,
) -> ServiceBenchResult:
    """Produce ``count`` messages to a fresh topic, then time one service draining them."""
    tag = uuid.uuid4().hex[:8]
    namespace = f"bench_{tag}"
    topic = f"benchnorm{tag}.{namespace}.orders"
    ensure_topics(make_admin(settings.kafka), [TopicRequest(topic, 1)])
    progress(f"producing {count:,} {fmt} messages to {topic}")
    _produce_input(settings, topic, namespace, count, fmt)
    run_settings = settings.model_copy(
        update={
            "include_pattern": f"^{re.escape(topic)}$",
            "group_id": f"bench-normalizer-{tag}",
            "transactional_id": f"bench-normalizer-{tag}",
        }
    )
    service = NormalizerService(run_settings, NormalizerMetrics.create(CollectorRegistry()))
    progress(f"draining with batches of up to {settings.batch_size} records per transaction")
    done = batches = 0
    try:
        while done == 0:  # the first batch waits for the group assignment: not timed
            done = service.step()
        batches = 1
        started, cpu_started = time.perf_counter(), time.process_time()
        timed = 0
        idle_since = time.monotonic()
        while done + timed < count:
            got = service.step()
            if got:
                timed += got
                batches += 1
                idle_since = time.monotonic()
            elif time.monotonic() - idle_since > 30:
                raise RuntimeError(f"the service stopped at {done + timed} of {count} records")
        seconds, cpu_s = time.perf_counter() - started, time.process_time() - cpu_started
    finally:
        service.close()
    output = changes_topic(TableId(namespace, "orders"))
    try:
        committed = sum(1 for _ in read_committed(settings.kafka, output, timeout_s=120))
        if committed != count:
            raise RuntimeError(f"{output} holds {committed} committed changes, expected {count}")
        progress(f"{output}: {committed:,} committed changes, one per record")
    finally:
        _remove(settings, [topic, output])
    return ServiceBenchResult(fmt, timed, timed, seconds, cpu_s, batches, done, (topic, output))
