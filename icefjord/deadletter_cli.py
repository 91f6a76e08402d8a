"""``icefjord deadletter list|replay``: look at dead letters, and put them back once each.

Settings come from the normalizer's environment (``ICEFJORD_NORMALIZER_*``: Kafka, the
dead-letter topic, the replication factor of topics it creates).

Exit codes: 0 done; 1 the replay stopped (what it committed before stays, and a new replay
goes on from there); 2 a filter that cannot be read (nothing done); 4 Kafka unreachable.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn
from rich.table import Table

from shared.operator import EXIT_FAILED, EXIT_REJECTED, EXIT_UNREACHABLE

if TYPE_CHECKING:
    from confluent_kafka import Message

    from icefjord.replay import DeadLetter, Filter
    from services.cdc_normalizer.config import NormalizerSettings

deadletter_app = typer.Typer(
    help="Records the services could not process (icefjord.deadletter): list and replay.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)

TableOption = Annotated[
    str | None,
    typer.Option("--table", help="<namespace>.<table> of the source topic; * and ? match."),
]
ReasonOption = Annotated[
    str | None,
    typer.Option("--reason", help="Text in the error class or message (any case)."),
]
SinceOption = Annotated[
    str | None,
    typer.Option("--since", help="Failed at or after this ISO 8601 time (UTC if no zone)."),
]
UntilOption = Annotated[
    str | None, typer.Option("--until", help="Failed before this ISO 8601 time.")
]


def _errors() -> Console:
    return Console(stderr=True)


def _settings() -> NormalizerSettings:
    from services.cdc_normalizer.config import NormalizerSettings

    return NormalizerSettings()


def _filter(table: str | None, reason: str | None, since: str | None, until: str | None) -> Filter:
    from icefjord.replay import Filter, parse_time_ms

    try:
        return Filter(
            table=table,
            reason=reason,
            since_ms=parse_time_ms(since) if since else None,
            until_ms=parse_time_ms(until) if until else None,
        )
    except ValueError as exc:
        _errors().print(f"[red]rejected:[/] {exc}")
        raise typer.Exit(EXIT_REJECTED) from None


def _unreadable(message: Message, reason: str) -> None:
    _errors().print(
        f"[yellow]skipped[/] {message.topic()}:{message.partition()}:{message.offset()}: "
        f"{reason} (not a dead letter Icefjord wrote)"
    )


def _reachable(settings: NormalizerSettings) -> None:
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    admin = AdminClient(settings.kafka.client_config() | {"log_level": 2})
    try:
        admin.list_topics(timeout=10)
    except KafkaException as exc:
        _errors().print(
            f"[red]unreachable:[/] Kafka at {settings.kafka.bootstrap_servers}: {exc.args[0]}"
        )
        raise typer.Exit(EXIT_UNREACHABLE) from None


def _when(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S")


@deadletter_app.command("list")
def list_command(
    table: TableOption = None,
    reason: ReasonOption = None,
    since: SinceOption = None,
    until: UntilOption = None,
    limit: Annotated[int, typer.Option("--limit", min=1, help="Rows shown at most.")] = 50,
) -> None:
    """Show dead letters: where each came from, why, and whether it was replayed."""
    from icefjord.replay import dead_letters, replayed_markers

    keep = _filter(table, reason, since, until)
    settings = _settings()
    _reachable(settings)
    done = replayed_markers(settings.kafka)
    letters = list(dead_letters(settings.kafka, keep, _unreadable, settings.dead_letter_topic))
    shown = Table(title=f"{settings.dead_letter_topic}: {len(letters)} matching")
    for column in ("record", "failed at (UTC)", "table", "error", "source record", "replayed"):
        shown.add_column(column)
    for letter in letters[:limit]:
        shown.add_row(
            f"{letter.partition}:{letter.offset}",
            _when(letter.failed_at_ms),
            letter.table,
            f"{letter.error_class}: {letter.error_message[:120]}",
            f"{letter.source_topic}:{letter.source_partition}:{letter.source_offset}",
            "yes" if letter.coordinates in done else "-",
        )
    Console().print(shown)
    if len(letters) > limit:
        Console().print(f"{len(letters) - limit} more; --limit shows more")


@deadletter_app.command("replay")
def replay_command(
    table: TableOption = None,
    reason: ReasonOption = None,
    since: SinceOption = None,
    until: UntilOption = None,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Count what would be replayed; produce nothing.")
    ] = False,
) -> None:
    """Produce each matching dead letter again to the topic and partition it was consumed
    from, in its original order, once: a record an earlier replay put back is skipped, also
    after a replay was killed in the middle."""
    from icefjord.replay import (
        ReplayError,
        dead_letters,
        replay,
        replayed_markers,
    )

    keep = _filter(table, reason, since, until)
    settings = _settings()
    _reachable(settings)

    def letters() -> list[DeadLetter]:
        return list(dead_letters(settings.kafka, keep, _unreadable, settings.dead_letter_topic))

    if dry_run:
        done = replayed_markers(settings.kafka)
        found = letters()
        left = [letter for letter in found if letter.coordinates not in done]
        Console().print(
            f"{len(left)} to replay, {len(found) - len(left)} replayed before (dry run)"
        )
        return
    with Progress(
        TextColumn("replaying"), BarColumn(), MofNCompleteColumn(), transient=True
    ) as bar:
        task = bar.add_task("replay", total=None)
        try:
            report = replay(
                settings.kafka,
                letters,
                progress=lambda done, total: bar.update(task, completed=done, total=total),
                topic=settings.dead_letter_topic,
                replication_factor=settings.topic_replication_factor,
            )
        except ReplayError as exc:
            _errors().print(f"[red]stopped:[/] {exc}")
            raise typer.Exit(EXIT_FAILED) from None
    Console().print(
        f"replayed {report.replayed} record(s) to their source topics; "
        f"{report.already} replayed before, skipped"
    )
