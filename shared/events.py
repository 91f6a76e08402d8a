"""Control events: frozen dataclasses mirroring ``contracts/avro/control_event.v<N>.avsc``.

:meth:`ControlEvent.to_record` gives exactly the value fastavro writes with the control schema;
the payload union branch is chosen by fastavro's tuple notation ``(full name, record)``.
:meth:`ControlEvent.from_record` takes what fastavro reads back with
``return_record_name=True`` (so the payload arrives as ``(full name, record)`` too, as
``shared.avro.decode`` does). No Kafka here: publishing and consuming live elsewhere.

Unknown input follows ``contracts/COMPATIBILITY.md``: a payload type or an enum symbol this
code does not know raises :class:`UnknownEventError` (the consumer skips the event), except for
enums whose schema declares a default, which map an unknown symbol to that default just as
Avro schema resolution would.
"""

from __future__ import annotations

import enum
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Self, TypeAlias, TypeVar

from shared.errors import IcefjordError

__all__ = [
    "ALL_TABLES",
    "CONTROL_NAMESPACE",
    "ENUM_FALLBACKS",
    "PAYLOAD_TYPES",
    "BulkLoad",
    "BulkLoadStatus",
    "CommitDone",
    "ControlEvent",
    "ControlPayload",
    "MaintenanceAction",
    "MaintenanceRequest",
    "MaintenanceResult",
    "MaintenanceStatus",
    "OperatorCommand",
    "OperatorCommandKind",
    "OperatorCommandResult",
    "OperatorCommandStatus",
    "SchemaChange",
    "SchemaOperation",
    "SchemaOperationKind",
    "TopicPartitionOffset",
    "UnknownEventError",
    "Verdict",
]

CONTROL_NAMESPACE = "io.icefjord.control"
ALL_TABLES = "*"


class UnknownEventError(IcefjordError, ValueError):
    """A control record this code cannot interpret: an unknown payload type, or an unknown
    symbol of an enum without a default. Consumers skip such events (and count them)."""


class SchemaOperationKind(enum.StrEnum):
    """One step of an Iceberg schema evolution plan. No default: see the schema's doc."""

    ADD_COLUMN = "ADD_COLUMN"
    WIDEN_TYPE = "WIDEN_TYPE"
    MAKE_OPTIONAL = "MAKE_OPTIONAL"
    RENAME_COLUMN = "RENAME_COLUMN"
    SOFT_DROP_COLUMN = "SOFT_DROP_COLUMN"


class Verdict(enum.StrEnum):
    """Whether a schema change may be applied. Unknown symbols read as QUARANTINE."""

    APPLY = "APPLY"
    QUARANTINE = "QUARANTINE"


class MaintenanceAction(enum.StrEnum):
    """A table maintenance action. No default: a stand-in would run an unrequested action."""

    COMPACT_DATA_FILES = "COMPACT_DATA_FILES"
    REWRITE_POSITION_DELETES = "REWRITE_POSITION_DELETES"
    EXPIRE_SNAPSHOTS = "EXPIRE_SNAPSHOTS"
    REMOVE_ORPHAN_FILES = "REMOVE_ORPHAN_FILES"
    REWRITE_MANIFESTS = "REWRITE_MANIFESTS"


class MaintenanceStatus(enum.StrEnum):
    """Outcome of a maintenance request. Unknown symbols read as FAILED (never as success)."""

    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    REJECTED = "REJECTED"
    SKIPPED = "SKIPPED"


class OperatorCommandKind(enum.StrEnum):
    """An operator's instruction. No default: an unknown command is ignored, not guessed."""

    PAUSE = "PAUSE"
    RESUME = "RESUME"
    FLUSH = "FLUSH"


class OperatorCommandStatus(enum.StrEnum):
    """How iceberg-writer answered an operator's command (``control_event`` v5). Unknown
    symbols read as FAILED: never taken for success."""

    APPLIED = "APPLIED"
    NOT_LOADED = "NOT_LOADED"
    FAILED = "FAILED"


class BulkLoadStatus(enum.StrEnum):
    """Where one table's bulk load stands. No default: a stand-in would hold a table or
    release it without being asked."""

    PLANNED = "PLANNED"
    READY = "READY"
    ABANDONED = "ABANDONED"


_E = TypeVar("_E", bound=enum.StrEnum)

# The Avro enum defaults of the control schema; a test holds these equal to the .avsc.
ENUM_FALLBACKS: Mapping[type[enum.StrEnum], enum.StrEnum] = {
    Verdict: Verdict.QUARANTINE,
    MaintenanceStatus: MaintenanceStatus.FAILED,
    OperatorCommandStatus: OperatorCommandStatus.FAILED,
}


def _symbol(enum_type: type[_E], value: Any) -> _E:
    """Parse an enum symbol; unknown ones map to the enum's fallback or raise UnknownEventError."""
    try:
        return enum_type(value)
    except ValueError:
        fallback = ENUM_FALLBACKS.get(enum_type)
        if isinstance(fallback, enum_type):
            return fallback
        raise UnknownEventError(f"unknown {enum_type.__name__} symbol {value!r}") from None


@dataclass(frozen=True, slots=True, kw_only=True)
class SchemaOperation:
    """One step of a :class:`SchemaChange`.

    ``path`` names the column in the OLD row schema, parents first. For ADD_COLUMN it is the
    old path of the parent plus the new field's name. A list element is reached through the
    component "element" and a map value through "value" (Iceberg's own names), e.g.
    ``("lines", "element", "sku")``.

    ``type_json`` is ``json.dumps(avro_type, sort_keys=True)`` of the NEW-side type, with named
    types inlined so it stands alone: for ADD_COLUMN the field's whole type as declared (a
    nullable column stays ``["null", T]``), for WIDEN_TYPE the non-null type only (optionality
    is carried by MAKE_OPTIONAL). ``new_name`` is set for RENAME_COLUMN only. ``doc`` is the
    new field's doc, when it has one.
    """

    kind: SchemaOperationKind
    path: tuple[str, ...]
    type_json: str | None = None
    new_name: str | None = None
    doc: str | None = None

    def to_record(self) -> dict[str, Any]:
        return {
            "kind": self.kind.value,
            "path": list(self.path),
            "type_json": self.type_json,
            "new_name": self.new_name,
            "doc": self.doc,
        }

    @classmethod
    def from_record(cls, record: Mapping[str, Any]) -> Self:
        return cls(
            kind=_symbol(SchemaOperationKind, record["kind"]),
            path=tuple(record["path"]),
            type_json=record.get("type_json"),
            new_name=record.get("new_name"),
            doc=record.get("doc"),
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class SchemaChange:
    """schema-watcher's evolution plan for one new registry version of a table's subject."""

    AVRO_NAME: ClassVar[str] = f"{CONTROL_NAMESPACE}.SchemaChange"

    table: str
    subject: str
    from_version: int | None = None
    to_version: int
    from_schema_id: int | None = None
    to_schema_id: int
    operations: tuple[SchemaOperation, ...] = ()
    verdict: Verdict
    reason: str | None = None

    def to_record(self) -> dict[str, Any]:
        return {
            "table": self.table,
            "subject": self.subject,
            "from_version": self.from_version,
            "to_version": self.to_version,
            "from_schema_id": self.from_schema_id,
            "to_schema_id": self.to_schema_id,
            "operations": [operation.to_record() for operation in self.operations],
            "verdict": self.verdict.value,
            "reason": self.reason,
        }

    @classmethod
    def from_record(cls, record: Mapping[str, Any]) -> Self:
        return cls(
            table=record["table"],
            subject=record["subject"],
            from_version=record.get("from_version"),
            to_version=record["to_version"],
            from_schema_id=record.get("from_schema_id"),
            to_schema_id=record["to_schema_id"],
            operations=tuple(SchemaOperation.from_record(op) for op in record["operations"]),
            verdict=_symbol(Verdict, record["verdict"]),
            reason=record.get("reason"),
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class TopicPartitionOffset:
    """The next offset to consume (last applied + 1) in one source partition."""

    topic: str
    partition: int
    next_offset: int

    def to_record(self) -> dict[str, Any]:
        return {"topic": self.topic, "partition": self.partition, "next_offset": self.next_offset}

    @classmethod
    def from_record(cls, record: Mapping[str, Any]) -> Self:
        return cls(
            topic=record["topic"], partition=record["partition"], next_offset=record["next_offset"]
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class CommitDone:
    """iceberg-writer's report of one successful Iceberg commit (field docs: the .avsc)."""

    AVRO_NAME: ClassVar[str] = f"{CONTROL_NAMESPACE}.CommitDone"

    table: str
    commit_id: str
    snapshot_id: int
    writer_epoch: int
    records: int
    inserted: int
    updated: int
    deleted: int
    data_files_added: int
    delete_files_added: int
    bytes_added: int
    watermark_ms: int | None = None
    freshness_ms: int | None = None
    offsets: tuple[TopicPartitionOffset, ...] = ()
    committed_at_ms: int
    duration_ms: int
    sequence_number: int | None = None
    freshness_p50_ms: int | None = None
    total_records: int | None = None
    total_data_files: int | None = None
    total_delete_files: int | None = None
    write_path: str | None = None

    _OPTIONAL: ClassVar[tuple[str, ...]] = (
        "watermark_ms",
        "freshness_ms",
        "sequence_number",
        "freshness_p50_ms",
        "total_records",
        "total_data_files",
        "total_delete_files",
        "write_path",
    )
    _SCALARS: ClassVar[tuple[str, ...]] = (
        "table",
        "commit_id",
        "snapshot_id",
        "writer_epoch",
        "records",
        "inserted",
        "updated",
        "deleted",
        "data_files_added",
        "delete_files_added",
        "bytes_added",
        "watermark_ms",
        "freshness_ms",
        "committed_at_ms",
        "duration_ms",
        "sequence_number",
        "freshness_p50_ms",
        "total_records",
        "total_data_files",
        "total_delete_files",
        "write_path",
    )

    def to_record(self) -> dict[str, Any]:
        record = {name: getattr(self, name) for name in self._SCALARS}
        record["offsets"] = [offset.to_record() for offset in self.offsets]
        return record

    @classmethod
    def from_record(cls, record: Mapping[str, Any]) -> Self:
        scalars: dict[str, Any] = {
            name: record.get(name) if name in cls._OPTIONAL else record[name]
            for name in cls._SCALARS
        }
        offsets = tuple(TopicPartitionOffset.from_record(o) for o in record["offsets"])
        return cls(offsets=offsets, **scalars)


@dataclass(frozen=True, slots=True, kw_only=True)
class MaintenanceRequest:
    """A request for one maintenance action; ``options`` use Iceberg's procedure option names.

    Not hashable (``options`` is a mapping); compare with ``==``.
    """

    AVRO_NAME: ClassVar[str] = f"{CONTROL_NAMESPACE}.MaintenanceRequest"

    request_id: str
    table: str
    action: MaintenanceAction
    partition: str | None = None
    options: Mapping[str, str] = field(default_factory=dict)
    reason: str
    requested_by: str

    def to_record(self) -> dict[str, Any]:
        return {
            "request_id": self.request_id,
            "table": self.table,
            "action": self.action.value,
            "partition": self.partition,
            "options": dict(self.options),
            "reason": self.reason,
            "requested_by": self.requested_by,
        }

    @classmethod
    def from_record(cls, record: Mapping[str, Any]) -> Self:
        return cls(
            request_id=record["request_id"],
            table=record["table"],
            action=_symbol(MaintenanceAction, record["action"]),
            partition=record.get("partition"),
            options=dict(record.get("options") or {}),
            reason=record["reason"],
            requested_by=record["requested_by"],
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class MaintenanceResult:
    """The outcome of the :class:`MaintenanceRequest` with the same ``request_id``."""

    AVRO_NAME: ClassVar[str] = f"{CONTROL_NAMESPACE}.MaintenanceResult"

    request_id: str
    table: str
    action: MaintenanceAction
    status: MaintenanceStatus
    files_before: int | None = None
    files_after: int | None = None
    bytes_before: int | None = None
    bytes_after: int | None = None
    duration_ms: int
    message: str | None = None
    error: str | None = None

    _OPTIONAL: ClassVar[tuple[str, ...]] = (
        "files_before",
        "files_after",
        "bytes_before",
        "bytes_after",
        "message",
        "error",
    )

    def to_record(self) -> dict[str, Any]:
        record: dict[str, Any] = {
            "request_id": self.request_id,
            "table": self.table,
            "action": self.action.value,
            "status": self.status.value,
            "duration_ms": self.duration_ms,
        }
        record.update({name: getattr(self, name) for name in self._OPTIONAL})
        return record

    @classmethod
    def from_record(cls, record: Mapping[str, Any]) -> Self:
        return cls(
            request_id=record["request_id"],
            table=record["table"],
            action=_symbol(MaintenanceAction, record["action"]),
            status=_symbol(MaintenanceStatus, record["status"]),
            duration_ms=record["duration_ms"],
            **{name: record.get(name) for name in cls._OPTIONAL},
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class OperatorCommand:
    """An operator's PAUSE / RESUME / FLUSH for one table, or for all with ``table="*"``."""

    AVRO_NAME: ClassVar[str] = f"{CONTROL_NAMESPACE}.OperatorCommand"

    command: OperatorCommandKind
    table: str
    reason: str | None = None
    requested_by: str

    @property
    def all_tables(self) -> bool:
        return self.table == ALL_TABLES

    def to_record(self) -> dict[str, Any]:
        return {
            "command": self.command.value,
            "table": self.table,
            "reason": self.reason,
            "requested_by": self.requested_by,
        }

    @classmethod
    def from_record(cls, record: Mapping[str, Any]) -> Self:
        return cls(
            command=_symbol(OperatorCommandKind, record["command"]),
            table=record["table"],
            reason=record.get("reason"),
            requested_by=record["requested_by"],
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class OperatorCommandResult:
    """iceberg-writer's answer to the :class:`OperatorCommand` carried by the event
    ``command_event_id`` (``control_event`` v5), published once the command took effect."""

    AVRO_NAME: ClassVar[str] = f"{CONTROL_NAMESPACE}.OperatorCommandResult"

    command_event_id: str
    table: str
    command: OperatorCommandKind
    status: OperatorCommandStatus
    tables: tuple[str, ...] = ()
    records: int | None = None
    message: str | None = None

    def to_record(self) -> dict[str, Any]:
        return {
            "command_event_id": self.command_event_id,
            "table": self.table,
            "command": self.command.value,
            "status": self.status.value,
            "tables": list(self.tables),
            "records": self.records,
            "message": self.message,
        }

    @classmethod
    def from_record(cls, record: Mapping[str, Any]) -> Self:
        return cls(
            command_event_id=record["command_event_id"],
            table=record["table"],
            command=_symbol(OperatorCommandKind, record["command"]),
            status=_symbol(OperatorCommandStatus, record["status"]),
            tables=tuple(record.get("tables") or ()),
            records=record.get("records"),
            message=record.get("message"),
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class BulkLoad:
    """One table's part of a bulk initial load (``control_event`` v3).

    PLANNED is published before change capture of the table starts; iceberg-writer then holds
    the table's changes until it has appended the READY copy (``files``, Parquet), and records
    ``load_id`` in that commit's summary so the copy goes in once. ABANDONED releases the hold.
    """

    AVRO_NAME: ClassVar[str] = f"{CONTROL_NAMESPACE}.BulkLoad"

    load_id: str
    table: str
    status: BulkLoadStatus
    files: tuple[str, ...] = ()
    rows: int | None = None
    snapshot_ts_ms: int | None = None
    reason: str | None = None
    requested_by: str

    def to_record(self) -> dict[str, Any]:
        return {
            "load_id": self.load_id,
            "table": self.table,
            "status": self.status.value,
            "files": list(self.files),
            "rows": self.rows,
            "snapshot_ts_ms": self.snapshot_ts_ms,
            "reason": self.reason,
            "requested_by": self.requested_by,
        }

    @classmethod
    def from_record(cls, record: Mapping[str, Any]) -> Self:
        return cls(
            load_id=record["load_id"],
            table=record["table"],
            status=_symbol(BulkLoadStatus, record["status"]),
            files=tuple(record.get("files") or ()),
            rows=record.get("rows"),
            snapshot_ts_ms=record.get("snapshot_ts_ms"),
            reason=record.get("reason"),
            requested_by=record["requested_by"],
        )


ControlPayload: TypeAlias = (
    SchemaChange
    | CommitDone
    | MaintenanceRequest
    | MaintenanceResult
    | OperatorCommand
    | BulkLoad
    | OperatorCommandResult
)

PAYLOAD_TYPES: Mapping[str, type[ControlPayload]] = {
    payload_type.AVRO_NAME: payload_type
    for payload_type in (
        SchemaChange,
        CommitDone,
        MaintenanceRequest,
        MaintenanceResult,
        OperatorCommand,
        BulkLoad,
        OperatorCommandResult,
    )
}


@dataclass(frozen=True, slots=True, kw_only=True)
class ControlEvent:
    """The envelope on ``icefjord.control``; its ``table`` is the Kafka key.

    Raises ValueError when ``table`` differs from the payload's table: the key must route the
    event to the partition that orders that table's events.
    """

    event_id: str
    table: str
    produced_at_ms: int
    producer: str
    payload: ControlPayload

    def __post_init__(self) -> None:
        if self.table != self.payload.table:
            raise ValueError(
                f"event table {self.table!r} differs from payload table {self.payload.table!r}"
            )

    @classmethod
    def new(
        cls, table: str, payload: ControlPayload, producer: str, *, now_ms: int | None = None
    ) -> Self:
        """An event with a fresh uuid4 ``event_id``, stamped now (or at ``now_ms``)."""
        return cls(
            event_id=str(uuid.uuid4()),
            table=table,
            produced_at_ms=time.time_ns() // 1_000_000 if now_ms is None else now_ms,
            producer=producer,
            payload=payload,
        )

    def to_record(self) -> dict[str, Any]:
        """The value to hand fastavro's writer with the control_event schema."""
        return {
            "event_id": self.event_id,
            "table": self.table,
            "produced_at_ms": self.produced_at_ms,
            "producer": self.producer,
            "payload": (self.payload.AVRO_NAME, self.payload.to_record()),
        }

    @classmethod
    def from_record(cls, record: Mapping[str, Any]) -> Self:
        """Build from a record read by fastavro with ``return_record_name=True``.

        Raises :class:`UnknownEventError` for a payload type or enum symbol this code does not
        know, ValueError for a payload that is not a ``(name, record)`` pair.
        """
        payload = record["payload"]
        if not (isinstance(payload, tuple | list) and len(payload) == 2):
            raise ValueError("payload must be (record name, record): read with return_record_name")
        name, body = payload
        full_name = name if "." in name else f"{CONTROL_NAMESPACE}.{name}"
        payload_type = PAYLOAD_TYPES.get(full_name)
        if payload_type is None:
            raise UnknownEventError(f"unknown control payload type {name!r}")
        return cls(
            event_id=record["event_id"],
            table=record["table"],
            produced_at_ms=record["produced_at_ms"],
            producer=record["producer"],
            payload=payload_type.from_record(body),
        )
