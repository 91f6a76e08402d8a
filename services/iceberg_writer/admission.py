"""Schema admission: whether rows of a writer schema id may be written now.

A table is created by its first record's schema. Rows of a schema the table has applied go
in; rows of a newer version go in once schema-watcher's SchemaChange for it is on the
control topic (the table evolves first), wait (their partition paused) until it is, and go
to quarantine when the plan says so or does not come within ``schema_wait_s``.
"""

from __future__ import annotations

import enum
import logging
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Protocol

from confluent_kafka import Message, TopicPartition
from confluent_kafka.schema_registry import SchemaRegistryClient
from pyiceberg.table import Table

from services.iceberg_writer.config import WriterSettings
from services.iceberg_writer.control_view import ControlView
from services.iceberg_writer.data_consumer import DataConsumer
from services.iceberg_writer.decoding import ChangeDecoder
from services.iceberg_writer.metrics import WriterMetrics
from services.iceberg_writer.ownership import Owner, owner_key
from services.iceberg_writer.state import TP, TableState
from services.iceberg_writer.tables import (
    SCHEMA_ID_PROPERTY,
    SCHEMA_VERSION_PROPERTY,
    Checkpoint,
    TableStore,
    applied_schema_ids,
    checkpoint_of,
)
from services.iceberg_writer.types import row_converters, row_record
from shared.avro import AvroCodec
from shared.events import SchemaChange, Verdict

log = logging.getLogger("services.iceberg_writer")


class Decision(enum.Enum):
    WRITE = "write"  # the rows go in now
    WAIT = "wait"  # no plan for the version yet: the partition waits for it
    QUARANTINE = "quarantine"  # the rows go to the quarantine topic, with the reason


@dataclass(frozen=True, slots=True)
class Admission:
    """What to do with rows of one schema id; ``reason`` says why they are quarantined."""

    decision: Decision
    reason: str = ""

    @classmethod
    def quarantine(cls, reason: str) -> Admission:
        return cls(Decision.QUARANTINE, reason)


WRITE = Admission(Decision.WRITE)
WAIT = Admission(Decision.WAIT)


class TableCommits(Protocol):
    """What admission needs of the committer (:class:`~.committer.Committer`)."""

    def commit(self, state: TableState) -> None: ...

    owner: Owner

    def claim(self, state: TableState, partitions: list[TP]) -> None: ...

    def republish_if_missing(
        self, state: TableState, table: Table, checkpoint: Checkpoint
    ) -> None: ...


class SchemaAdmission:
    """Admits rows by schema id; creates and evolves tables; keeps the waits for plans."""

    def __init__(
        self,
        settings: WriterSettings,
        *,
        control: ControlView,
        partitions: DataConsumer,
        committer: TableCommits,
        decoder: ChangeDecoder,
        registry: SchemaRegistryClient,
        codec: AvroCodec,
        store: TableStore,
        metrics: WriterMetrics,
    ) -> None:
        self._settings = settings
        self._control = control
        self._partitions = partitions
        self._committer = committer
        self._decoder = decoder
        self._registry = registry
        self._codec = codec
        self._store = store
        self._metrics = metrics

    def admit(self, state: TableState, schema_id: int, topic: str) -> Admission:
        """Whether rows of ``schema_id`` are written now, wait, or go to quarantine. Creates
        the table on its first record and evolves it when a plan allows the version."""
        if state.table is None:
            self._create(state, schema_id, topic)
            # Else the table was there already, made by another writer or by this one before
            # a failure: rows of another version are admitted as every record is.
        if schema_id in state.applied_ids:
            return WRITE
        plan = self._control.plan(state.name, schema_id)
        if plan is None:
            if schema_id in state.expired_ids:
                return Admission.quarantine(
                    f"no SchemaChange for schema id {schema_id} within "
                    f"{self._settings.schema_wait_s:.0f} s"
                )
            return WAIT
        if plan.verdict is Verdict.QUARANTINE:
            return Admission.quarantine(
                f"schema version {plan.to_version} quarantined: {plan.reason or 'no reason'}"
            )
        if plan.to_version <= state.current_version:
            return WRITE  # an older version, read into the current schema
        self._evolve(state, plan)
        return WRITE

    def load(self, state: TableState) -> None:
        """Read the table (if it exists) into ``state``: columns, keys, applied schema ids,
        the current schema's reader and converters, and the checkpoint. Publishes the
        checkpoint's CommitDone if the control topic lacks it."""
        table = self._store.load(state.name)
        state.table = table
        if table is None:
            return
        schema = table.schema()
        identifiers = schema.identifier_field_names()
        state.columns = tuple(f.name for f in schema.fields)
        state.keys = tuple(name for name in state.columns if name in identifiers)
        current, ids = applied_schema_ids(table)
        state.current_id = current
        state.applied_ids = set(ids)
        state.current_version = int(table.properties.get("icefjord.schema.version", "0"))
        raw = self._decoder.raw_schema(current)
        state.reader = self._codec.writer_schema(current)
        state.converters = row_converters(row_record(raw))
        state.checkpoint = checkpoint_of(table)
        if state.checkpoint is not None:
            state.committed = dict(state.checkpoint.offsets)
            state.truncated_at = state.checkpoint.truncated_at
            self._committer.republish_if_missing(state, table, state.checkpoint)

    def _create(self, state: TableState, schema_id: int, topic: str) -> None:
        started = time.monotonic()
        raw = self._decoder.raw_schema(schema_id)
        version = 0
        try:
            version = self._version_of(f"{topic}-value", schema_id)
        except Exception as exc:
            log.warning("schema version lookup failed", extra={"error": str(exc)})
        # The version and this instance's claims go into the CREATE: two metadata commits
        # fewer on the way to a new table's first rows.
        owner = self._committer.owner
        properties = owner.claims(p for _, p in state.owned)
        if version:
            properties[SCHEMA_VERSION_PROPERTY] = str(version)
        created = self._store.create(state.name, raw, schema_id, properties)
        made_with_it = created.properties.get(SCHEMA_ID_PROPERTY) == str(schema_id)
        if (
            version
            and made_with_it
            and created.properties.get(SCHEMA_VERSION_PROPERTY) != str(version)
        ):
            # Made in between with this schema by a writer whose version lookup failed. A table
            # made with another schema keeps its version: stamping this record's on it would
            # pass a newer version for applied without its columns.
            self._store.set_properties(state.name, {SCHEMA_VERSION_PROPERTY: str(version)})
        log.info(
            "table created",
            extra={
                "table": state.name,
                "schema_id": schema_id,
                "seconds": round(time.monotonic() - started, 3),
            },
        )
        committed = dict(state.committed)
        self.load(state)
        state.committed = committed or state.committed
        mine = {tp for tp in state.owned if created.properties.get(owner_key(tp[1])) == owner.token}
        state.claimed.update(mine)
        # Made by another instance sharing the table: claimed now, offsets read after.
        self._committer.claim(state, sorted(state.owned - mine))

    def _version_of(self, subject: str, schema_id: int) -> int:
        """The version of ``subject`` registered with ``schema_id`` (0: none has it).

        By id, not by the schema's text: a lookup by text (``lookup_schema``) never matched
        on Apicurio, whose comparison is stricter than the Avro canonical form. A new table's
        first schema is nearly always the subject's latest version: one request."""
        latest = self._registry.get_latest_version(subject)
        if latest.schema_id == schema_id:
            return int(latest.version or 0)
        for version in sorted(self._registry.get_versions(subject), reverse=True):
            if self._registry.get_version(subject, version).schema_id == schema_id:
                return int(version)
        return 0

    def _evolve(self, state: TableState, plan: SchemaChange) -> None:
        if state.pending:
            self._committer.commit(state)  # rows of the old schema go in under the old schema
        self._store.apply_schema_change(state.name, plan)
        committed = dict(state.committed)
        self.load(state)
        state.committed = committed
        log.info(
            "schema change applied",
            extra={"table": state.name, "to_version": plan.to_version, "ops": len(plan.operations)},
        )

    def wait(self, state: TableState, message: Message, schema_id: int, now: float) -> None:
        """Pause ``message``'s partition at its offset until a plan for ``schema_id``
        arrives (:meth:`wake_waits`) or the wait expires (:meth:`expire_waits`)."""
        topic, partition, offset = message.topic(), message.partition(), message.offset()
        state.waits[(topic, partition)] = (offset, schema_id, now)
        self._partitions.pause([TopicPartition(topic, partition)])
        self._partitions.seek(TopicPartition(topic, partition, offset))
        log.info(
            "rows wait for a schema plan",
            extra={"table": state.name, "schema_id": schema_id, "partition": partition},
        )

    def wake_waits(self, state: TableState) -> None:
        """Resume the table's partitions whose rows waited for a plan that has arrived."""
        now = time.monotonic()
        for tp, (_offset, schema_id, since) in list(state.waits.items()):
            if self._control.plan(state.name, schema_id) is not None:
                self._metrics.schema_wait.labels(state.name).observe(now - since)
                del state.waits[tp]
                if not self._control.is_paused(state):
                    self._partitions.resume([TopicPartition(tp[0], tp[1])])

    def expire_waits(self, tables: Iterable[TableState], now: float) -> None:
        """Give up waiting after ``schema_wait_s``: those rows go to quarantine when read
        again."""
        for state in tables:
            for tp, (_offset, schema_id, since) in list(state.waits.items()):
                if now - since >= self._settings.schema_wait_s:
                    self._metrics.schema_wait.labels(state.name).observe(now - since)
                    state.expired_ids.add(schema_id)
                    del state.waits[tp]
                    if not self._control.is_paused(state):
                        self._partitions.resume([TopicPartition(tp[0], tp[1])])
                    log.warning(
                        "schema plan did not arrive; rows go to quarantine",
                        extra={"table": state.name, "schema_id": schema_id},
                    )
