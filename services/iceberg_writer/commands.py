"""Operators' PAUSE, RESUME and FLUSH, as the writer keeps and answers them.

- :class:`Pauses` (pure): which tables are paused. PAUSE and RESUME are state, rebuilt from
  the control topic at every start: each table's latest command counts, and the latest for
  ``"*"``. A table's own command and a ``"*"`` command have different keys, so they sit on
  different partitions and Kafka orders them only per key: between the two the later
  ``produced_at_ms`` wins; within one key, the log order. A table no command named is as the
  latest ``"*"`` left it, and a table named before the writer loaded it is paused the
  moment it appears.
- :class:`FlushRequest` (pure): a FLUSH is one-shot. It waits for the changes the writer
  held when it arrived (up to which offset, per partition) to be committed; a replay never
  runs it again.
- :class:`OperatorCommands`: the writer's side. It records the commands (replayed or live),
  tells the loop which tables to pause, resume or flush, answers every live command with an
  :class:`~shared.events.OperatorCommandResult` once it took effect, and keeps the gauge
  ``icefjord_writer_paused_tables`` (loaded tables an operator paused).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from confluent_kafka import KafkaException

from services.iceberg_writer.metrics import WriterMetrics
from services.iceberg_writer.state import TP, TableState
from services.iceberg_writer.table_names import check_command_table
from shared.control import EventPublisher
from shared.errors import RetryableError
from shared.events import (
    ControlEvent,
    OperatorCommand,
    OperatorCommandKind,
    OperatorCommandResult,
    OperatorCommandStatus,
)

__all__ = [
    "FlushRequest",
    "OperatorCommands",
    "Pauses",
    "check_command_table",
    "held_offsets",
]

log = logging.getLogger("services.iceberg_writer")


@dataclass(frozen=True, slots=True)
class _Said:
    paused: bool
    at_ms: int


class Pauses:
    """The operators' pauses: each table's latest PAUSE or RESUME, and the latest for "*"."""

    def __init__(self) -> None:
        self._every: _Said | None = None
        self._own: dict[str, _Said] = {}

    def record(self, command: OperatorCommand, at_ms: int) -> None:
        """``command``, published at ``at_ms``, read after every earlier command of its key.
        A FLUSH changes nothing here."""
        if command.command is OperatorCommandKind.FLUSH:
            return
        said = _Said(command.command is OperatorCommandKind.PAUSE, at_ms)
        if command.all_tables:
            self._every = said
        else:
            self._own[command.table] = said

    def is_paused(self, table: str) -> bool:
        """Whether ``table`` is paused (loaded or not)."""
        own, every = self._own.get(table), self._every
        if own is None:
            return every is not None and every.paused
        if every is None or own.at_ms >= every.at_ms:
            return own.paused
        return every.paused


def held_offsets(state: TableState) -> dict[TP, int]:
    """Per partition, the offset after the last change ``state`` holds uncommitted."""
    held: dict[TP, int] = {}
    for change in state.pending:
        tp = (change.topic, change.partition)
        held[tp] = max(held.get(tp, 0), change.offset + 1)
    return held


@dataclass
class FlushRequest:
    """One FLUSH: the event that carried it and, per table, the offsets its commit must reach."""

    event: ControlEvent
    targets: dict[str, dict[TP, int]]
    records: int
    tables: tuple[str, ...] = ()

    def settle(self, tables: Mapping[str, TableState]) -> bool:
        """Drop the tables committed past their targets (or gone); True when none is left."""
        for name in list(self.targets):
            state = tables.get(name)
            if state is None or all(
                state.committed.get(tp, 0) >= offset for tp, offset in self.targets[name].items()
            ):
                del self.targets[name]
        return not self.targets

    def forget(self, partitions: Iterable[TP]) -> None:
        """Partitions this writer no longer reads: their changes are another writer's now."""
        gone = set(partitions)
        for offsets in self.targets.values():
            for tp in gone & offsets.keys():
                del offsets[tp]


class OperatorCommands:
    """Keeps the operators' commands for the writer and answers them.

    ``tables`` is the writer's own map of table states (shared). ``covers(table)`` says
    whether this writer's topic pattern takes the table: commands for other tables belong
    to another writer and are neither kept nor answered. ``publisher`` carries the answers
    (best effort: an answer that cannot be published is logged; the command still holds).
    """

    def __init__(
        self,
        tables: Mapping[str, TableState],
        publisher: EventPublisher,
        *,
        producer: str,
        covers: Callable[[str], bool],
        metrics: WriterMetrics,
    ) -> None:
        self._tables = tables
        self._publisher = publisher
        self._producer = producer
        self._covers = covers
        self._metrics = metrics
        self.pauses = Pauses()
        self.flushes: list[FlushRequest] = []

    def is_paused(self, table: str) -> bool:
        return self.pauses.is_paused(table)

    def replayed(self, event: ControlEvent, command: OperatorCommand) -> None:
        """A command read back at start: PAUSE and RESUME rebuild the pauses; a FLUSH is
        not run again (it was one-shot), and nothing is answered."""
        if command.all_tables or self._covers(command.table):
            self.pauses.record(command, event.produced_at_ms)

    def received(
        self, event: ControlEvent, command: OperatorCommand, apply: Callable[[TableState], None]
    ) -> None:
        """A live command: keep it, ``apply`` it to each loaded table it changes (pause or
        resume its partitions), then answer it, or for a FLUSH register what it waits for."""
        if not (command.all_tables or self._covers(command.table)):
            return
        log.info(
            "operator command",
            extra={
                "command": command.command.value,
                "table": command.table,
                "by": command.requested_by,
                "reason": command.reason,
            },
        )
        targets = self._targets(command)
        if command.command is OperatorCommandKind.FLUSH:
            self._flush(event, command, targets)
            return
        self.pauses.record(command, event.produced_at_ms)
        for state in targets:
            apply(state)
        self.count_paused()
        self._answer_pause(event, command, targets)

    def _targets(self, command: OperatorCommand) -> list[TableState]:
        if command.all_tables:
            return [s for s in self._tables.values() if self._covers(s.name)]
        state = self._tables.get(command.table)
        return [state] if state is not None else []

    def _answer_pause(
        self, event: ControlEvent, command: OperatorCommand, targets: list[TableState]
    ) -> None:
        wanted = command.command is OperatorCommandKind.PAUSE
        word = "paused" if wanted else "running"
        if not targets and not command.all_tables:
            self._answer(
                event,
                command,
                OperatorCommandStatus.NOT_LOADED,
                message=f"{command.table} is not loaded yet; it will be {word} when it appears",
            )
            return
        took = tuple(sorted(s.name for s in targets if self.is_paused(s.name) == wanted))
        missed = sorted(s.name for s in targets if self.is_paused(s.name) != wanted)
        if missed:
            # A "*" command published later than this one (by its clock) says otherwise.
            self._answer(
                event,
                command,
                OperatorCommandStatus.FAILED,
                took,
                message=f"not {word}: {', '.join(missed)} (a later command for '*' holds)",
            )
            return
        scope = " and every table loaded later" if command.all_tables else ""
        self._answer(
            event,
            command,
            OperatorCommandStatus.APPLIED,
            took,
            message=f"{len(took)} table(s) {word}{scope}",
        )

    def _flush(
        self, event: ControlEvent, command: OperatorCommand, targets: list[TableState]
    ) -> None:
        if not targets and not command.all_tables:
            self._answer(
                event,
                command,
                OperatorCommandStatus.NOT_LOADED,
                records=0,
                message=f"{command.table} is not loaded: nothing to flush",
            )
            return
        request = FlushRequest(event, {}, 0, tuple(sorted(s.name for s in targets)))
        for state in targets:
            held = held_offsets(state)
            if held:
                request.targets[state.name] = held
                request.records += len(state.pending)
                state.flush = True
        if not request.targets:
            self._answer(
                event,
                command,
                OperatorCommandStatus.APPLIED,
                request.tables,
                records=0,
                message="nothing held: every change read is committed",
            )
            return
        self.flushes.append(request)

    def loaded(self, state: TableState) -> None:
        """A table appeared: a pause that names it, or every table, holds from now."""
        if self.is_paused(state.name):
            log.info(
                "table paused by an operator from its first record", extra={"table": state.name}
            )
        self.count_paused()

    def flushed(self) -> None:
        """After a round's commits: answer every FLUSH whose held changes are committed, and
        keep the flush flag only on tables a FLUSH still waits for."""
        waiting: list[FlushRequest] = []
        for request in self.flushes:
            if request.settle(self._tables):
                command = request.event.payload
                assert isinstance(command, OperatorCommand)
                self._answer(
                    request.event,
                    command,
                    OperatorCommandStatus.APPLIED,
                    request.tables,
                    records=request.records,
                    message=f"{request.records} held change(s) committed",
                )
            else:
                waiting.append(request)
        self.flushes = waiting
        wanted = {name for request in waiting for name in request.targets}
        for state in self._tables.values():
            state.flush = state.name in wanted

    def revoked(self, partitions: Iterable[TP]) -> None:
        """Partitions taken from this writer: a FLUSH no longer waits for their changes."""
        gone = list(partitions)
        for request in self.flushes:
            request.forget(gone)

    def stopped(self) -> None:
        """The writer stops: every FLUSH still waiting is answered FAILED."""
        for request in self.flushes:
            command = request.event.payload
            assert isinstance(command, OperatorCommand)
            self._answer(
                request.event,
                command,
                OperatorCommandStatus.FAILED,
                request.tables,
                message="the writer stopped before committing the held changes; "
                "the next writer reads them again",
            )
        self.flushes = []

    def count_paused(self) -> None:
        """Set the gauge: loaded tables an operator paused."""
        self._metrics.paused_tables.set(sum(1 for name in self._tables if self.is_paused(name)))

    def _answer(
        self,
        event: ControlEvent,
        command: OperatorCommand,
        status: OperatorCommandStatus,
        tables: tuple[str, ...] = (),
        *,
        records: int | None = None,
        message: str | None = None,
    ) -> None:
        result = OperatorCommandResult(
            command_event_id=event.event_id,
            table=command.table,
            command=command.command,
            status=status,
            tables=tables,
            records=records,
            message=message,
        )
        try:
            self._publisher.publish(ControlEvent.new(command.table, result, self._producer))
            self._publisher.flush(10)
        except (RetryableError, KafkaException, BufferError) as exc:
            log.warning(
                "operator command answer not published",
                extra={"command": command.command.value, "table": command.table, "error": str(exc)},
            )
