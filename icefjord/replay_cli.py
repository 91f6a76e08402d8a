"""``icefjord deadletter list|replay`` and ``icefjord quarantine list|replay``: what the
services diverted, and its way back, once each (:mod:`icefjord.replay`,
:mod:`icefjord.quarantine`).

Settings: dead letters from the normalizer's environment (``ICEFJORD_NORMALIZER_*``: Kafka,
the dead-letter topic), quarantined rows from the writer's (``ICEFJORD_WRITER_*``: Kafka,
the registry, the catalog, the quarantine topic).

Exit codes: 0 done; 1 a replay refused or stopped (what it committed before stays, and a new
replay goes on from there); 2 a filter that cannot be read, or no such table (nothing done);
4 Kafka unreachable.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn
from rich.table import Table

from shared.operator import EXIT_FAILED, EXIT_REJECTED, EXIT_UNREACHABLE

if TYPE_CHECKING:
    from confluent_kafka import Message

    from icefjord.quarantine import TableSchemas
    from icefjord.replay import Filter, PutBack, ReplayReport
    from services.cdc_normalizer.config import NormalizerSettings
    from services.iceberg_writer.config import WriterSettings
    from shared.settings import KafkaSettings

deadletter_app = typer.Typer(
    help="Records the services could not process (icefjord.deadletter): list and replay.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)
quarantine_app = typer.Typer(
    help="Rows of schema versions the writer did not apply (icefjord.quarantine): list, replay.",
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
LimitOption = Annotated[int, typer.Option("--limit", min=1, help="Rows shown at most.")]


def _errors() -> Console:
    return Console(stderr=True)


def _normalizer_settings() -> NormalizerSettings:
    from services.cdc_normalizer.config import NormalizerSettings

    return NormalizerSettings()


def _writer_settings() -> WriterSettings:
    from services.iceberg_writer.config import WriterSettings

    return WriterSettings()


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
        f"{reason} (not a record Icefjord diverted)"
    )


def _reachable(kafka: KafkaSettings) -> None:
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    admin = AdminClient(kafka.client_config() | {"log_level": 2})
    try:
        admin.list_topics(timeout=10)
    except KafkaException as exc:
        _errors().print(f"[red]unreachable:[/] Kafka at {kafka.bootstrap_servers}: {exc.args[0]}")
        raise typer.Exit(EXIT_UNREACHABLE) from None


def _when(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S")


def _show(
    title: str, columns: tuple[str, ...], rows: Sequence[tuple[str, ...]], limit: int
) -> None:
    shown = Table(title=f"{title}: {len(rows)} matching")
    for column in columns:
        shown.add_column(column)
    for row in rows[:limit]:
        shown.add_row(*row)
    Console().print(shown)
    if len(rows) > limit:
        Console().print(f"{len(rows) - limit} more; --limit shows more")


def _dry_run(kafka: KafkaSettings, records: Callable[[], Iterable[PutBack]]) -> tuple[int, int]:
    """(to replay, replayed before) of what ``records`` yields."""
    from icefjord.replay import replayed_markers

    done = replayed_markers(kafka)
    found = list(records())
    left = sum(record.coordinates not in done for record in found)
    return left, len(found) - left


def _replay(
    kafka: KafkaSettings,
    records: Callable[[], Iterable[PutBack]],
    stream: str,
    replication_factor: int | None,
) -> ReplayReport:
    """Replay with a progress bar; a ReplayError is one line and exit code 1."""
    from confluent_kafka import KafkaException

    from icefjord.replay import ReplayError, replay
    from shared.errors import RetryableError

    with Progress(
        TextColumn("replaying"), BarColumn(), MofNCompleteColumn(), transient=True
    ) as bar:
        task = bar.add_task("replay", total=None)
        try:
            return replay(
                kafka,
                records,
                stream,
                progress=lambda done, total: bar.update(task, completed=done, total=total),
                replication_factor=replication_factor,
            )
        except ReplayError as exc:
            _errors().print(f"[red]not replayed:[/] {exc}")
            raise typer.Exit(EXIT_FAILED) from None
        except (KafkaException, RetryableError) as exc:
            # Kafka or the registry went away during the replay: what was committed stays.
            _errors().print(f"[red]stopped, a dependency did not answer:[/] {exc}")
            raise typer.Exit(EXIT_FAILED) from None


@deadletter_app.command("list")
def deadletter_list(
    table: TableOption = None,
    reason: ReasonOption = None,
    since: SinceOption = None,
    until: UntilOption = None,
    limit: LimitOption = 50,
) -> None:
    """Show dead letters: where each came from, why, and whether it was replayed."""
    from icefjord.replay import dead_letters, replayed_markers

    keep = _filter(table, reason, since, until)
    settings = _normalizer_settings()
    _reachable(settings.kafka)
    done = replayed_markers(settings.kafka)
    letters = dead_letters(settings.kafka, keep, _unreadable, settings.dead_letter_topic)
    rows = [
        (
            f"{letter.partition}:{letter.offset}",
            _when(letter.failed_at_ms),
            letter.table,
            f"{letter.error_class}: {letter.error_message[:120]}",
            f"{letter.source_topic}:{letter.source_partition}:{letter.source_offset}",
            "yes" if letter.coordinates in done else "-",
        )
        for letter in letters
    ]
    columns = ("record", "failed at (UTC)", "table", "error", "source record", "replayed")
    _show(settings.dead_letter_topic, columns, rows, limit)


@deadletter_app.command("replay")
def deadletter_replay(
    table: TableOption = None,
    reason: ReasonOption = None,
    since: SinceOption = None,
    until: UntilOption = None,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Count what would be replayed; produce nothing.")
    ] = False,
) -> None:
    """Put matching dead letters back where they were consumed, in their order, once each.

    Each goes to its source topic and partition with its key, value and headers; a record
    an earlier replay put back is skipped, also after a replay was killed in the middle."""
    from icefjord.replay import dead_letters

    keep = _filter(table, reason, since, until)
    settings = _normalizer_settings()
    _reachable(settings.kafka)

    def records() -> list[PutBack]:
        found = dead_letters(settings.kafka, keep, _unreadable, settings.dead_letter_topic)
        return [letter.put_back() for letter in found]

    if dry_run:
        left, before = _dry_run(settings.kafka, records)
        Console().print(f"{left} to replay, {before} replayed before (dry run)")
        return
    report = _replay(
        settings.kafka, records, settings.dead_letter_topic, settings.topic_replication_factor
    )
    Console().print(
        f"replayed {report.replayed} record(s) to their source topics; "
        f"{report.already} replayed before, skipped"
    )


def _table_schemas(settings: WriterSettings, table: str) -> TableSchemas:
    from pyiceberg.exceptions import NoSuchTableError

    from icefjord.quarantine import TableSchemas
    from services.iceberg_writer.tables import applied_schema_ids
    from shared.catalog import open_catalog

    try:
        loaded = open_catalog(settings.catalog).load_table(table)
    except (NoSuchTableError, ValueError) as exc:
        _errors().print(f"[red]rejected:[/] no table {table}: {exc}")
        raise typer.Exit(EXIT_REJECTED) from None
    current, ids = applied_schema_ids(loaded)
    return TableSchemas(current, frozenset(ids) | {current})


@quarantine_app.command("list")
def quarantine_list(
    table: Annotated[
        str | None, typer.Argument(help="<namespace>.<table>; * and ? match. All if left out.")
    ] = None,
    limit: LimitOption = 50,
) -> None:
    """Show quarantined rows: table, schema id, why, where from, whether replayed."""
    from icefjord.quarantine import quarantined
    from icefjord.replay import replayed_markers

    settings = _writer_settings()
    _reachable(settings.kafka)
    done = replayed_markers(settings.kafka)
    held = quarantined(settings.kafka, table, _unreadable, settings.quarantine_topic)
    rows = [
        (
            f"{record.partition}:{record.offset}",
            _when(record.quarantined_at_ms),
            record.table,
            str(record.schema_id),
            record.reason[:120],
            f"{record.source_topic}:{record.source_partition}:{record.source_offset}",
            "yes" if record.coordinates in done else "-",
        )
        for record in held
    ]
    columns = ("record", "quarantined at (UTC)", "table", "schema id", "reason", "source")
    _show(settings.quarantine_topic, (*columns, "replayed"), rows, limit)


@quarantine_app.command("replay")
def quarantine_replay(
    table: Annotated[str, typer.Argument(help="<namespace>.<table>, as in Iceberg.")],
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Check every row against the table; produce nothing.")
    ] = False,
) -> None:
    """Put TABLE's quarantined rows back into its changes topic, in their order, once each.

    Only when the table can hold every one of them; else nothing, and why."""
    from icefjord.quarantine import quarantined, resolve
    from icefjord.replay import ReplayError
    from shared.avro import AvroCodec
    from shared.registry import make_registry_client

    settings = _writer_settings()
    _reachable(settings.kafka)
    schemas = _table_schemas(settings, table)
    codec = AvroCodec(make_registry_client(settings.registry))
    rewritten = 0

    def records() -> list[PutBack]:
        nonlocal rewritten
        rewritten = 0
        out: list[PutBack] = []
        for record in quarantined(settings.kafka, table, _unreadable, settings.quarantine_topic):
            if record.table == table:
                value = resolve(record, schemas, codec)
                rewritten += value is not record.value
                out.append(record.put_back(value))
        return out

    if dry_run:
        try:
            left, before = _dry_run(settings.kafka, records)
        except ReplayError as exc:
            _errors().print(f"[red]would not replay:[/] {exc}")
            raise typer.Exit(EXIT_FAILED) from None
        into = f"{rewritten} rewritten into schema id {schemas.current_id}"
        Console().print(
            f"{left} to replay, {before} replayed before; every row fits {table} ({into}) (dry run)"
        )
        return
    report = _replay(
        settings.kafka, records, settings.quarantine_topic, settings.topic_replication_factor
    )
    into = f"{rewritten} rewritten into schema id {schemas.current_id}"
    Console().print(
        f"replayed {report.replayed} row(s) of {table} to its changes topic ({into}); "
        f"{report.already} replayed before, skipped"
    )
