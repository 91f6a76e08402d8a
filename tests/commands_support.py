"""Operator commands in memory: the writer's OperatorCommands with a list for a publisher."""

from __future__ import annotations

from collections.abc import Mapping

from prometheus_client import CollectorRegistry

from services.iceberg_writer.commands import OperatorCommands
from services.iceberg_writer.metrics import WriterMetrics
from services.iceberg_writer.state import TableState
from shared.events import (
    ControlEvent,
    OperatorCommand,
    OperatorCommandKind,
    OperatorCommandResult,
)


class Published:
    """An EventPublisher that keeps what it is given; ``down`` makes it fail like Kafka."""

    def __init__(self) -> None:
        self.events: list[ControlEvent] = []
        self.down = False

    def publish(self, event: ControlEvent) -> None:
        if self.down:
            raise BufferError("Local: Queue full")
        self.events.append(event)

    def flush(self, timeout: float = 30.0) -> None: ...

    @property
    def results(self) -> list[OperatorCommandResult]:
        return [e.payload for e in self.events if isinstance(e.payload, OperatorCommandResult)]


def operator_commands(
    tables: Mapping[str, TableState],
    covers: str = "",
    metrics: WriterMetrics | None = None,
) -> tuple[OperatorCommands, Published]:
    """Commands for ``tables``, covering the tables whose name starts with ``covers``."""
    published = Published()
    commands = OperatorCommands(
        tables,
        published,
        producer="iceberg-writer/test",
        covers=lambda table: table.startswith(covers),
        metrics=metrics or WriterMetrics.create(CollectorRegistry()),
    )
    return commands, published


def command_event(
    kind: OperatorCommandKind, table: str, at_ms: int = 1_000, by: str = "operator:test"
) -> ControlEvent:
    """An OperatorCommand in its envelope, published at ``at_ms``."""
    command = OperatorCommand(command=kind, table=table, reason="test", requested_by=by)
    return ControlEvent.new(table, command, "icefjord-cli", now_ms=at_ms)
