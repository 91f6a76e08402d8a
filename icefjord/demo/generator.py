"""The demo without PostgreSQL: the same plan, played straight into Kafka as Debezium events.

:class:`GeneratorWorkload` has the shape of :class:`~icefjord.demo.workload.PostgresWorkload`
(``create_schema``, ``run``, ``progress``) but keeps the rows in a
:class:`~icefjord.demo.plan.SourceModel` and produces what the Debezium Postgres connector
would (:mod:`icefjord.demo.envelopes`): a snapshot of the initial rows (op ``r``), then one
event per row change with increasing LSNs, one transaction id and commit time per
transaction, tombstones after deletes. The services downstream cannot tell the difference.

Why not ``icefjord/bench/normalizer.py``'s generator: it emits one fixed table with eight
columns; the demo needs several tables, every column kind and schema changes mid-run.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import Any

from icefjord.demo.envelopes import EnvelopeEncoder, KafkaRecord, SourcePosition
from icefjord.demo.model import TableDef
from icefjord.demo.plan import (
    ChangeKey,
    CreateTable,
    Operation,
    RowChange,
    SourceModel,
    Transaction,
)
from icefjord.demo.workload import WorkloadProgress, WorkloadResult
from shared.kafka import TopicRequest, ensure_topics, make_admin, make_producer
from shared.settings import KafkaSettings

Clock = Callable[[], int]


def _now_us() -> int:
    return time.time_ns() // 1000


def _snapshot_marker(index: int, count: int, first_of_table: bool, last_of_table: bool) -> str:
    """Debezium's ``source.snapshot`` for row ``index`` of ``count`` in an initial snapshot."""
    if index == 0:
        return "first"
    if index == count - 1:
        return "last"
    if first_of_table:
        return "first_in_data_collection"
    if last_of_table:
        return "last_in_data_collection"
    return "true"


class GeneratorWorkload:
    """Emits Debezium change events for the plan; :attr:`model` is the source's state."""

    def __init__(
        self,
        kafka: KafkaSettings,
        encoder: EnvelopeEncoder,
        *,
        topic_partitions: int = 1,
        clock_us: Clock = _now_us,
    ) -> None:
        self.kafka = kafka
        self.encoder = encoder
        self.topic_partitions = topic_partitions
        self.clock_us = clock_us
        self.model = SourceModel()
        self.progress = WorkloadProgress()
        self._lsn = 30_000_000
        self._last_commit: int | None = None
        self._tx_id = 1000
        self._last_change_ms: dict[str, int] = {}
        self._producer: Any = None

    def _produce(self, records: Iterable[KafkaRecord]) -> None:
        if self._producer is None:
            self._producer = make_producer(self.kafka, **{"linger.ms": 20})
        for record in records:
            while True:
                try:
                    self._producer.produce(
                        record.topic,
                        key=record.key,
                        value=record.value,
                        headers=list(record.headers),
                    )
                    break
                except BufferError:
                    self._producer.poll(0.5)
        self._producer.poll(0)

    def flush(self, timeout_s: float = 60.0) -> None:
        """Wait until every record is acknowledged; raises RuntimeError if some are not."""
        if self._producer is not None and self._producer.flush(timeout_s) > 0:
            raise RuntimeError("the generator's records were not all acknowledged by Kafka")

    def _ensure_topic(self, table: str) -> None:
        topic = self.encoder.topic(table)
        ensure_topics(make_admin(self.kafka), [TopicRequest(topic, self.topic_partitions)])

    def create_schema(self, tables: Iterable[TableDef]) -> None:
        """Create the initial tables (in the model) and their topics."""
        for table in tables:
            self.model.apply(CreateTable(table))
            self._ensure_topic(table.name)

    def snapshot(self, seed: Iterable[Transaction]) -> int:
        """Apply the initial load and emit it as Debezium's initial snapshot (op ``r``, one
        LSN and transaction, ``source.snapshot`` markers first/.../last); return the rows."""
        for tx in seed:
            for op in tx.ops:
                self.model.apply(op)
                self.progress.count(op)
            self.progress.transactions += 1
        rows = [
            (name, row)
            for name in self.model.tables
            for row in list(self.model.rows[name].values())
        ]
        now = self.clock_us()
        self._tx_id += 1
        for i, (name, row) in enumerate(rows):
            table = self.model.tables[name]
            first_of_table = i == 0 or rows[i - 1][0] != name
            last_of_table = i == len(rows) - 1 or rows[i + 1][0] != name
            marker = _snapshot_marker(i, len(rows), first_of_table, last_of_table)
            position = SourcePosition(self._lsn, None, self._tx_id, now, snapshot=marker)
            change = RowChange(name, "c", None, row)
            self._produce(self.encoder.records(table, change, position, self.clock_us(), op="r"))
        self.flush()
        return len(rows)

    def run(self, transactions: Iterable[Transaction]) -> WorkloadResult:
        """Emit every transaction's changes (pace them with ``workload.paced``)."""
        began = time.monotonic()
        self.progress = WorkloadProgress(started_at=began)
        try:
            for tx in transactions:
                self.execute(tx)
            self.flush()
        finally:
            self.progress.finished = True
        p = self.progress
        return WorkloadResult(
            transactions=p.transactions,
            inserts=p.inserts,
            updates=p.updates,
            key_changes=p.key_changes,
            deletes=p.deletes,
            schema_changes=p.schema_changes,
            seconds=time.monotonic() - began,
            last_change_ms=dict(self._last_change_ms),
        )

    def execute(self, tx: Transaction) -> None:
        """One source transaction: its events share the transaction id and commit time."""
        commit_us = self.clock_us()
        self._tx_id += 1
        for op in tx.ops:
            self._lsn += 64
            records = self._events(
                op, SourcePosition(self._lsn, self._last_commit, self._tx_id, commit_us)
            )
            self._produce(records)
            self.progress.count(op)
        self._lsn += 64
        self._last_commit = self._lsn
        self.progress.transactions += 1

    def _events(self, op: Operation, position: SourcePosition) -> list[KafkaRecord]:
        before_key = None
        if isinstance(op, ChangeKey):
            before_key = self.model.rows[op.table][op.key]
        changes = self.model.apply(op)
        if isinstance(op, CreateTable):
            self._ensure_topic(op.table.name)
        out: list[KafkaRecord] = []
        for change in changes:
            table = self.model.tables[change.table]
            header = None
            if before_key is not None:
                # A key change: the delete names the new key, the create the old one.
                new_row = changes[-1].after
                assert new_row is not None
                header = (
                    ("__debezium.newkey", self.encoder.key_header(table, new_row))
                    if change.op == "d"
                    else ("__debezium.oldkey", self.encoder.key_header(table, before_key))
                )
            emitted = self.clock_us()
            out.extend(self.encoder.records(table, change, position, emitted, key_change=header))
            self._last_change_ms[f"{self.encoder.schema}.{change.table}"] = (
                position.commit_ts_us // 1000
            )
        return out

    def close(self) -> None:
        if self._producer is not None:
            self._producer.flush(10)
            self._producer = None  # its threads stop once it is collected
