"""The Kafka shell: a transactional consume-transform-produce loop around :mod:`.pipeline`.

One :meth:`NormalizerService.step` = one batch = one Kafka transaction: every change record and
dead letter of the batch and the consumer offsets are committed together
(``send_offsets_to_transaction`` with the consumer's group metadata), and the consumer reads
``read_committed``. A failure anywhere aborts the transaction and seeks the consumer back to
the committed offsets, so the batch is processed again from the start: nothing is lost and,
because the aborted writes are invisible to ``read_committed`` readers, nothing is duplicated.
"""

from __future__ import annotations

import json
import logging
import time
from collections import Counter
from typing import Any, NamedTuple

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, Producer, TopicPartition
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.error import SchemaRegistryError

from services.cdc_normalizer.avro_encoder import AvroEncoder
from services.cdc_normalizer.config import NormalizerSettings
from services.cdc_normalizer.metrics import NormalizerMetrics, lag_by_topic, latency_seconds
from services.cdc_normalizer.normalize import Operation
from services.cdc_normalizer.pipeline import (
    AvroWriter,
    ChangeOut,
    DeadLetter,
    Emit,
    EncodedChange,
    Router,
    SourceRecord,
    avro_writer,
    dead_letter,
    first_offsets,
    next_offsets,
    placeholder_datum,
)
from services.cdc_normalizer.table_schema import (
    TableId,
    TableSchema,
    key_schema_text,
    value_schema_text,
)
from shared.avro import AvroCodec, WireFormatError, frame
from shared.errors import FatalError, RetryableError
from shared.histograms import observe_many
from shared.kafka import (
    GroupMembership,
    consume_ready,
    ensure_topics,
    make_admin,
    make_consumer,
    make_producer,
)
from shared.registry import make_registry_client

log = logging.getLogger(__name__)

_IGNORED_CONSUMER_ERRORS = (KafkaError._PARTITION_EOF, KafkaError.UNKNOWN_TOPIC_OR_PART)


class _Unwritable(Exception):
    """A change that cannot be serialized; its source record is dead-lettered instead."""

    def __init__(self, reason: str, error_class: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.error_class = error_class
        self.message = message


class _Tally:
    """What a batch wrote, for the metrics once it is committed: changes per (changes topic,
    operation) with each topic's table label, and dead letters and skips by reason."""

    __slots__ = ("changes", "other", "tables")

    def __init__(self) -> None:
        self.changes: dict[tuple[str, Operation], int] = {}
        self.tables: dict[str, str] = {}
        self.other: Counter[tuple[str, str]] = Counter()

    def count(self, topic: str, op: Operation, table: TableId) -> None:
        """One change written to ``topic``."""
        counted = (topic, op)
        self.changes[counted] = self.changes.get(counted, 0) + 1
        if topic not in self.tables:
            self.tables[topic] = str(table)


class _Encoding(NamedTuple):
    """How a changes topic's records were last serialized: for changes whose TableSchema is
    built from the same ``row`` and ``key`` objects, the same encoders and schema ids."""

    row: object
    key: object
    table: TableId
    value_text: str
    value_id: int
    value: AvroEncoder
    key_id: int
    key_encoder: AvroEncoder


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def _source_record(message: Message) -> SourceRecord:
    timestamp_type, timestamp = message.timestamp()
    return SourceRecord(
        topic=str(message.topic()),
        partition=int(message.partition() or 0),
        offset=int(message.offset() or 0),
        key=message.key(),
        value=message.value(),
        timestamp_ms=timestamp if timestamp_type != 0 else None,
        headers=tuple(message.headers() or ()),
    )


class NormalizerService:
    """Owns the clients; :meth:`step` processes one batch in one transaction."""

    def __init__(
        self,
        settings: NormalizerSettings,
        metrics: NormalizerMetrics,
        registry: SchemaRegistryClient | None = None,
    ) -> None:
        self._settings = settings
        self._metrics = metrics
        self._registry = registry or make_registry_client(settings.registry)
        self._codec = AvroCodec(self._registry)
        self._admin = make_admin(settings.kafka)
        self._consumer: Consumer | None = None
        self._producer: Producer | None = None
        self._writers: dict[int, AvroWriter] = {}
        self._topics_ready: set[str] = set()
        self._subjects_configured: set[str] = set()
        self._schema_ids: set[tuple[str, int]] = set()
        self._latest_value_schema: dict[str, str] = {}
        self._lag_topics: set[str] = set()
        self._encoders: dict[str, AvroEncoder] = {}
        self._encodings: dict[str, _Encoding] = {}
        self._key_texts: dict[str, str] = {}
        self._membership = GroupMembership()
        self._router = Router(
            lookup=self._writer,
            clock_ms=_now_ms,
            dead_letter_topic=settings.dead_letter_topic,
            max_record_bytes=settings.max_record_bytes,
            wants_topic=settings.topic_filter(),
            compiled_records=True,
        )

    # -- lifecycle -------------------------------------------------------------------------

    def _start(self) -> tuple[Consumer, Producer]:
        settings = self._settings
        if settings.dead_letter_topic not in self._topics_ready:
            ensure_topics(self._admin, [settings.dead_letter_request()])
            self._topics_ready.add(settings.dead_letter_topic)
        if self._producer is None:
            producer = make_producer(
                settings.kafka,
                **{
                    "transactional.id": settings.effective_transactional_id(),
                    "transaction.timeout.ms": settings.transaction_timeout_ms,
                    "partitioner": "murmur2_random",  # the Java client's key -> partition
                },
            )
            try:
                producer.init_transactions(30)
            except KafkaException as exc:
                raise RetryableError(f"cannot initialise transactions: {exc}") from exc
            self._producer = producer
            if self._consumer is not None:  # recreated after a fatal producer error
                self._rewind([])
        if self._consumer is None:
            consumer = make_consumer(
                settings.kafka,
                settings.group_id,
                **{"topic.metadata.refresh.interval.ms": settings.metadata_refresh_ms},
            )
            consumer.subscribe([settings.include_pattern])
            self._consumer = consumer
            log.info("subscribed", extra={"pattern": settings.include_pattern})
        return self._consumer, self._producer

    def close(self) -> None:
        """Leave the group and close the clients (no transaction is open between steps)."""
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None
        if self._producer is not None:
            self._producer.flush(10)
            self._producer = None

    # -- the loop body ---------------------------------------------------------------------

    def step(self) -> int:
        """Consume up to ``batch_size`` records and process them in one transaction.

        Returns the number of records committed. Raises RetryableError after aborting and
        rewinding when Kafka or the registry fails; the next call redoes the batch.
        """
        consumer, producer = self._start()
        try:
            messages = consume_ready(
                consumer, self._settings.batch_size, self._settings.poll_timeout_s
            )
        except KafkaException as exc:
            raise RetryableError(f"consume failed: {exc}") from exc
        if self._membership.lost(consumer):
            # Out of the group and not rejoining (shared.kafka.GroupMembership): a new
            # consumer starts from the committed offsets. No transaction is open here.
            log.warning(
                "consumer out of its group, subscribing a new one",
                extra={"after_s": self._membership.limit_s},
            )
            self._membership.reset()
            consumer.close()
            self._consumer = None
            return 0
        records: list[SourceRecord] = []
        for message in messages:
            error = message.error()
            if error is None:
                records.append(_source_record(message))
            elif error.fatal():
                raise FatalError(f"consumer failed: {error}")
            elif error.code() not in _IGNORED_CONSUMER_ERRORS:
                log.warning("consumer error", extra={"error": str(error)})
        if not records:
            return 0
        started = time.monotonic()
        try:
            tally = self._transact(consumer, producer, records)
        except (RetryableError, KafkaException, BufferError) as exc:
            self._abort(producer)
            self._rewind(records)
            raise RetryableError(f"batch aborted, will redo it: {exc}") from exc
        self._metrics.batch_seconds.observe(time.monotonic() - started)
        self._count(records, tally)
        observe_many(
            self._metrics.processing_latency_seconds,
            latency_seconds((r.timestamp_ms for r in records), _now_ms()),
        )
        self._update_lag(consumer)
        return len(records)

    def _update_lag(self, consumer: Consumer) -> None:
        """Set ``consumer_lag`` per topic from the positions and cached high watermarks of the
        assigned partitions; topics no longer assigned are dropped. Never fails the batch."""
        try:
            rows: list[tuple[str, int, int]] = []
            for tp in consumer.position(consumer.assignment()):
                watermarks = consumer.get_watermark_offsets(tp, cached=True)
                high = watermarks[1] if watermarks is not None else -1
                rows.append((str(tp.topic), int(tp.offset), int(high)))
        except KafkaException as exc:
            log.debug("consumer lag not updated", extra={"error": str(exc)})
            return
        lag = lag_by_topic(rows)
        for topic in self._lag_topics - set(lag):
            self._metrics.consumer_lag.remove(topic)
        for topic, value in lag.items():
            self._metrics.consumer_lag.labels(topic=topic).set(value)
        self._lag_topics = set(lag)

    def _transact(
        self, consumer: Consumer, producer: Producer, records: list[SourceRecord]
    ) -> _Tally:
        tally = _Tally()
        producer.begin_transaction()
        routed = [(record, self._router.route(record)) for record in records]
        # New tables' topics in one request: a snapshot starts many tables in one batch.
        self._ensure_topics(
            {c.topic for _, r in routed if isinstance(r, Emit) for c in r.changes}
            | {r.topic for _, r in routed if isinstance(r, EncodedChange)}
        )
        for record, routing in routed:
            if isinstance(routing, EncodedChange):
                framed = self._framed(routing)
                if framed is not None:
                    self._produce(producer, routing.topic, framed[0], framed[1], None)
                    tally.count(routing.topic, routing.op, routing.table)
                    continue
                # Its schemas not registered yet in this process: the datum path does that.
                routing = self._router.route(record, compiled=False)
                assert not isinstance(routing, EncodedChange)
            if isinstance(routing, Emit):
                try:
                    encoded = [self._encode(change) for change in routing.changes]
                except _Unwritable as exc:
                    routing = dead_letter(
                        record,
                        topic=self._settings.dead_letter_topic,
                        reason=exc.reason,
                        error_class=exc.error_class,
                        message=exc.message,
                        failed_at_ms=_now_ms(),
                    )
                else:
                    for change, (key, value) in zip(routing.changes, encoded, strict=True):
                        self._produce(producer, change.topic, key, value, None)
                        tally.count(change.topic, change.op, change.table)
                    continue
            if isinstance(routing, DeadLetter):
                self._produce(producer, routing.topic, routing.key, routing.value, routing.headers)
                tally.other[("dead", routing.reason)] += 1
            else:
                tally.other[(routing.reason, record.topic)] += 1
        offsets = [
            TopicPartition(topic, partition, offset)
            for (topic, partition), offset in next_offsets(records).items()
        ]
        producer.send_offsets_to_transaction(offsets, consumer.consumer_group_metadata(), 30)
        self._commit(producer)
        return tally

    def _commit(self, producer: Producer) -> None:
        for _ in range(3):
            try:
                producer.commit_transaction(60)
                return
            except KafkaException as exc:
                error = exc.args[0]
                if not (isinstance(error, KafkaError) and error.retriable()):
                    raise
                log.warning("commit retriable failure, retrying", extra={"error": str(error)})
        producer.commit_transaction(60)

    def _produce(
        self,
        producer: Producer,
        topic: str,
        key: bytes | None,
        value: bytes | None,
        headers: Any,
    ) -> None:
        while True:
            try:
                if headers:
                    producer.produce(topic, value=value, key=key, headers=list(headers))
                else:
                    producer.produce(topic, value=value, key=key)
                return
            except BufferError:
                producer.poll(0.5)

    def _abort(self, producer: Producer) -> None:
        try:
            producer.abort_transaction(30)
        except KafkaException as exc:
            # Fatal or state error: drop the producer; init_transactions on the same
            # transactional.id fences it and settles its open transaction.
            log.warning("abort failed, recreating producer", extra={"error": str(exc)})
            self._producer = None

    def _rewind(self, records: list[SourceRecord]) -> None:
        """Seek every assigned partition back to its committed offset (batch start if none)."""
        consumer = self._consumer
        if consumer is None:
            return
        fallback = first_offsets(records)
        try:
            assigned = consumer.assignment()
            committed = consumer.committed(assigned, timeout=30) if assigned else []
            for partition in committed:
                offset = partition.offset
                if offset < 0:
                    offset = fallback.get((partition.topic, partition.partition), -1)
                if offset >= 0:
                    consumer.seek(TopicPartition(partition.topic, partition.partition, offset))
        except KafkaException as exc:
            # Cannot learn the committed offsets: rejoin the group, which restarts from them.
            log.warning("rewind failed, resubscribing", extra={"error": str(exc)})
            consumer.close()
            self._consumer = None

    def _count(self, records: list[SourceRecord], tally: _Tally) -> None:
        for topic, count in Counter(record.topic for record in records).items():
            self._metrics.records_in.labels(topic=topic).inc(count)
        for (topic, op), count in tally.changes.items():
            self._metrics.changes_out.labels(table=tally.tables[topic], op=op.value).inc(count)
        for labels, count in tally.other.items():
            if labels[0] == "dead":
                self._metrics.dead_letters.labels(reason=labels[1]).inc(count)
            elif labels[0] == "tombstone":
                self._metrics.tombstones.labels(topic=labels[1]).inc(count)

    # -- registry and topics ---------------------------------------------------------------

    def _writer(self, schema_id: int) -> AvroWriter:
        writer = self._writers.get(schema_id)
        if writer is None:
            try:
                text = self._registry.get_schema(schema_id).schema_str
            except SchemaRegistryError as exc:
                if exc.http_status_code == 404:
                    raise WireFormatError(f"schema id {schema_id} is not registered") from exc
                raise RetryableError(f"registry error for id {schema_id}: {exc}") from exc
            except Exception as exc:  # connection errors
                raise RetryableError(f"registry unreachable: {exc}") from exc
            writer = avro_writer(text or "")
            self._writers[schema_id] = writer
        return writer

    def _latest_schema_text(self, topic: str) -> str:
        cached = self._latest_value_schema.get(topic)
        if cached is not None:
            return cached
        subject = f"{topic}-value"
        try:
            text = self._registry.get_latest_version(subject).schema.schema_str
        except SchemaRegistryError as exc:
            if exc.http_status_code == 404:
                raise _Unwritable(
                    "truncate_without_schema",
                    "MissingSchema",
                    f"TRUNCATE for {topic} before any row of the table: no schema to write it",
                ) from exc
            raise RetryableError(f"registry error for {subject}: {exc}") from exc
        except Exception as exc:
            raise RetryableError(f"registry unreachable: {exc}") from exc
        self._latest_value_schema[topic] = text or ""
        return text or ""

    def _ensure_topics(self, topics: set[str]) -> None:
        missing = topics - self._topics_ready
        if missing:
            ensure_topics(self._admin, [self._settings.changes_request(t) for t in sorted(missing)])
            self._topics_ready |= missing

    def _register(self, subject: str, schema: Any, table: str | None) -> int:
        try:
            schema_id = self._codec.register(subject, schema)
        except FatalError as exc:  # the registry refused it (incompatible)
            raise _Unwritable("schema_rejected", "IncompatibleSchema", str(exc)) from exc
        if (subject, schema_id) not in self._schema_ids:
            self._schema_ids.add((subject, schema_id))
            if table is not None:
                self._metrics.schema_versions_registered.labels(table=table).inc()
        level = self._settings.set_compatibility
        if level is not None and subject not in self._subjects_configured:
            try:
                self._registry.set_compatibility(subject_name=subject, level=level)
            except Exception as exc:  # unsupported by this registry: keep its default
                log.info("compatibility not set", extra={"subject": subject, "error": str(exc)})
            self._subjects_configured.add(subject)
        return schema_id

    def _encoder(self, schema_text: str) -> AvroEncoder:
        encoder = self._encoders.get(schema_text)
        if encoder is None:
            encoder = AvroEncoder(schema_text)
            self._encoders[schema_text] = encoder
        return encoder

    def _key_text(self, schema: TableSchema) -> str:
        """The key schema text as registered: sorted keys, what the codec writes for a dict."""
        text = key_schema_text(schema)
        registered = self._key_texts.get(text)
        if registered is None:
            registered = json.dumps(json.loads(text), sort_keys=True)
            self._key_texts[text] = registered
        return registered

    def _current(self, topic: str, schema: TableSchema | None) -> _Encoding | None:
        """The topic's last encoding when ``schema`` is built from the same parts (a
        TableSchema per record): what ``_register`` and ``_key_text`` decided still holds."""
        known = self._encodings.get(topic)
        if (
            known is None
            or schema is None
            or known.row is not schema.row
            or known.key is not schema.key
            or known.table.name != schema.table.name
            or known.table.namespace != schema.table.namespace
        ):
            return None
        self._latest_value_schema[topic] = known.value_text
        return known

    def _framed(self, change: EncodedChange) -> tuple[bytes, bytes] | None:
        """The Kafka key and value of a change the compiled record path wrote, when the
        topic's schemas are registered already (see ``_current``); else None."""
        known = self._current(change.topic, change.schema)
        if known is None:
            return None
        return frame(known.key_id, change.key), frame(known.value_id, change.value)

    def _encode(self, change: ChangeOut) -> tuple[bytes | None, bytes]:
        """Register the schemas if needed and serialize one change (key, value); its topic
        exists already (``_transact`` creates a batch's new topics first)."""
        known = self._current(change.topic, change.schema) if change.key is not None else None
        if known is not None:
            try:
                return (
                    known.key_encoder.frame(known.key_id, change.key),
                    known.value.frame(known.value_id, change.value),
                )
            except (ValueError, TypeError, KeyError) as exc:
                raise _Unwritable("unserializable", type(exc).__name__, str(exc)) from exc
        value = dict(change.value)
        if change.schema is not None:
            value_text = value_schema_text(change.schema)
        else:
            value_text = self._latest_schema_text(change.topic)
        if change.op is Operation.TRUNCATE:
            parsed = json.loads(value_text)
            key_field = next(f for f in parsed["fields"] if f["name"] == "key")
            value["key"] = placeholder_datum(key_field["type"])
        value_subject = f"{change.topic}-value"
        value_id = self._register(value_subject, value_text, str(change.table))
        self._latest_value_schema[change.topic] = value_text
        try:
            value_bytes = self._encoder(value_text).frame(value_id, value)
            key_bytes = None
            if change.key is not None and change.schema is not None:
                key_text = self._key_text(change.schema)
                key_id = self._register(f"{change.topic}-key", key_text, None)
                key_bytes = self._encoder(key_text).frame(key_id, change.key)
                if change.op is not Operation.TRUNCATE:
                    self._encodings[change.topic] = _Encoding(
                        change.schema.row,
                        change.schema.key,
                        change.schema.table,
                        value_text,
                        value_id,
                        self._encoder(value_text),
                        key_id,
                        self._encoder(key_text),
                    )
        except (ValueError, TypeError, KeyError) as exc:  # a datum its schema does not accept
            raise _Unwritable("unserializable", type(exc).__name__, str(exc)) from exc
        return key_bytes, value_bytes
