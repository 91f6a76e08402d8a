"""Command-line pieces of iceberg-writer, for ``icefjord control``.

``pause``, ``resume`` and ``flush`` publish an operator's ``OperatorCommand`` for one table
(``<namespace>.<table>``) or every table (``'*'``) on the control topic and, with
``--wait`` (the default), wait for the writer's ``OperatorCommandResult``: the writer
answers once the command took effect (after a PAUSE no commit to the table follows; after
a FLUSH the changes it held are committed). A PAUSE or RESUME is kept on the control topic
and rebuilt by every writer start; a FLUSH is one-shot.

Exit codes (``shared.operator``): 0 in effect, or kept for a table the writer has not loaded
yet, or published (``--no-wait``); 1 the writer answered that it did not take effect; 2 a
table name no table can have (nothing published); 3 no answer within ``--timeout`` (the
command is published and takes effect when a writer reads it); 4 Kafka or the registry
unreachable (nothing published).

Settings come from the writer's environment (``ICEFJORD_WRITER_*``: Kafka, registry,
control topic).
"""

from __future__ import annotations

import getpass
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console

from services.iceberg_writer.commands import check_command_table
from shared.events import (
    ALL_TABLES,
    OperatorCommand,
    OperatorCommandKind,
    OperatorCommandResult,
    OperatorCommandStatus,
)
from shared.operator import (
    EXIT_FAILED,
    EXIT_NO_RESULT,
    EXIT_REJECTED,
    EXIT_UNREACHABLE,
    ControlUnreachableError,
)

if TYPE_CHECKING:
    from shared.events import ControlEvent

__all__ = ["flush", "pause", "register_control_commands", "resume"]

DEFAULT_TIMEOUT_S = 60.0


def _console() -> Console:
    return Console()


def _errors() -> Console:
    return Console(stderr=True)


def _user() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return "unknown"


def _scope(table: str) -> str:
    return "every table" if table == ALL_TABLES else table


def _command(
    kind: OperatorCommandKind, table: str, reason: str | None, wait: bool, timeout: float
) -> None:
    """Validate, publish, wait for the answer and exit with its code."""
    try:
        check_command_table(table)
    except ValueError as exc:
        _errors().print(f"[red]rejected:[/] {exc}")
        raise typer.Exit(EXIT_REJECTED) from None
    from services.iceberg_writer.config import WriterSettings
    from shared.events import ControlEvent
    from shared.operator import publish_and_await

    settings = WriterSettings()
    user = _user()
    command = OperatorCommand(
        command=kind, table=table, reason=reason, requested_by=f"operator:{user}"
    )
    event = ControlEvent.new(table, command, producer=f"operator:{user}")

    def answer_to(candidate: ControlEvent) -> ControlEvent | None:
        payload = candidate.payload
        if isinstance(payload, OperatorCommandResult) and payload.command_event_id == (
            event.event_id
        ):
            return candidate
        return None

    wait_s = timeout if wait else 0.0
    doing = f"waiting for iceberg-writer to {kind.value.lower()} {_scope(table)}"
    try:
        with _console().status(doing if wait else f"publishing {kind.value} {_scope(table)}"):
            answered = publish_and_await(
                settings.kafka,
                settings.registry,
                settings.control_topic,
                event,
                answer_to,
                wait_s,
            )
    except ControlUnreachableError as exc:
        _errors().print(f"[red]unreachable:[/] {exc}; nothing was published")
        raise typer.Exit(EXIT_UNREACHABLE) from None
    _console().print(
        f"published {kind.value} {_scope(table)} on {settings.control_topic} "
        f"(event {event.event_id})"
    )
    if not wait:
        return
    if answered is None:
        _errors().print(
            f"[yellow]no answer from iceberg-writer within {timeout:.0f} s[/]: the command is "
            "on the control topic and takes effect when a writer reads it"
            + ("" if kind is OperatorCommandKind.FLUSH else " (also at a writer's next start)")
        )
        raise typer.Exit(EXIT_NO_RESULT)
    result = answered.payload
    assert isinstance(result, OperatorCommandResult)
    line = _outcome(result)
    by = f" [dim]({answered.producer})[/]"
    if result.status is OperatorCommandStatus.FAILED:
        _errors().print(f"[red]not in effect:[/] {line}{by}")
        raise typer.Exit(EXIT_FAILED)
    _console().print(line + by)


def _outcome(result: OperatorCommandResult) -> str:
    """What the writer's answer means, for people."""
    scope, detail = _scope(result.table), result.message or ""
    if result.status is OperatorCommandStatus.FAILED:
        return f"{result.command.value} {scope}: {detail}"
    loaded = (
        f" ({', '.join(result.tables)})" if result.tables and result.table == ALL_TABLES else ""
    )
    if result.command is OperatorCommandKind.FLUSH:
        if result.status is OperatorCommandStatus.NOT_LOADED:
            return f"nothing to flush: iceberg-writer has not loaded {scope}"
        return f"flushed {scope}{loaded}: {result.records or 0} held change(s) committed"
    word = "paused" if result.command is OperatorCommandKind.PAUSE else "resumed"
    if result.status is OperatorCommandStatus.NOT_LOADED:
        return (
            f"{word} {scope}: iceberg-writer has not loaded it yet; "
            f"it is {'paused' if word == 'paused' else 'running'} from its first record"
        )
    if result.command is OperatorCommandKind.PAUSE:
        named = "'*'" if result.table == ALL_TABLES else result.table
        return (
            f"paused {scope}{loaded}: iceberg-writer commits nothing to it until "
            f"`icefjord control resume {named}`; the pause survives writer restarts"
        )
    return f"resumed {scope}{loaded}: iceberg-writer reads and commits it again"


TableArgument = Annotated[
    str, typer.Argument(help="<namespace>.<table>, or '*' (quoted) for every table.")
]
ReasonOption = Annotated[str | None, typer.Option("--reason", help="Why (goes into the event).")]
WaitOption = Annotated[
    bool,
    typer.Option("--wait/--no-wait", help="Wait for the writer's answer that it took effect."),
]
TimeoutOption = Annotated[
    float, typer.Option("--timeout", min=1, help="Seconds to wait for the answer.")
]


def pause(
    table: TableArgument,
    reason: ReasonOption = None,
    wait: WaitOption = True,
    timeout: TimeoutOption = DEFAULT_TIMEOUT_S,
) -> None:
    """Stop iceberg-writer's commits to TABLE, across restarts, loaded yet or not.

    Its changes wait in Kafka until ``resume``."""
    _command(OperatorCommandKind.PAUSE, table, reason, wait, timeout)


def resume(
    table: TableArgument,
    reason: ReasonOption = None,
    wait: WaitOption = True,
    timeout: TimeoutOption = DEFAULT_TIMEOUT_S,
) -> None:
    """Let iceberg-writer read and commit TABLE again (undoes a pause)."""
    _command(OperatorCommandKind.RESUME, table, reason, wait, timeout)


def flush(
    table: TableArgument,
    reason: ReasonOption = None,
    wait: WaitOption = True,
    timeout: TimeoutOption = DEFAULT_TIMEOUT_S,
) -> None:
    """Commit the changes iceberg-writer holds for TABLE now, paused or not (once)."""
    _command(OperatorCommandKind.FLUSH, table, reason, wait, timeout)


def register_control_commands(app: typer.Typer) -> None:
    """Add ``pause``, ``resume`` and ``flush`` to the ``control`` typer app."""
    for name, command in (("pause", pause), ("resume", resume), ("flush", flush)):
        app.command(name)(command)
