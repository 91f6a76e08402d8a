"""Command-line pieces of the maintainer, for ``icefjord``'s typer app.

- ``control_app`` (mount as ``control``): ``compact``, ``rewrite-deletes``, ``expire``,
  ``remove-orphans``, ``rewrite-manifests`` publish an operator ``MaintenanceRequest`` on the
  control topic and, with ``--wait``, print its ``MaintenanceResult``. Exit codes
  (``shared.operator``): 0 the action succeeded or had nothing to do (or was only
  published), 1 it failed, 2 it was rejected (locally, before publishing, or by the
  service), 3 no result within ``--wait``, 4 Kafka or the registry unreachable.
- ``tables_command`` (register as ``tables``): the health of every table, one line each.
- ``table_app`` (mount as ``table``): ``table health <table>``, the full health model of
  one table and what the policies would do now.

Settings come from the maintainer's environment (``ICEFJORD_MAINTAINER_*``: Kafka, registry,
control topic, catalog, policies). ``tables`` and ``table health`` read the catalog with
pyiceberg only: no Spark, no Kafka.
"""

from __future__ import annotations

import dataclasses
import getpass
import json
import time
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from services.maintainer.health import TableHealth, compute_health
from services.maintainer.identifiers import MalformedIdentifierError, parse_table
from services.maintainer.policy import evaluate, expire_plan
from services.maintainer.requests import Rejection, build_request, validate_request
from shared.events import MaintenanceAction, MaintenanceRequest, MaintenanceResult
from shared.events import MaintenanceStatus as Status
from shared.operator import (
    EXIT_FAILED,
    EXIT_NO_RESULT,
    EXIT_OK,
    EXIT_REJECTED,
    EXIT_UNREACHABLE,
    ControlUnreachableError,
)

if TYPE_CHECKING:
    from services.maintainer.config import MaintainerSettings

# Settings, pyiceberg, Spark and Kafka are imported inside the commands: importing this
# module (to build ``icefjord``'s app) must stay cheap.

__all__ = [
    "EXIT_FAILED",
    "EXIT_NO_RESULT",
    "EXIT_OK",
    "EXIT_REJECTED",
    "EXIT_UNREACHABLE",
    "build_request",
    "control_app",
    "health_rows",
    "register_control_commands",
    "table_app",
    "tables_command",
]


def _console() -> Console:
    """Built per call, so the terminal width is read when the command runs."""
    return Console()


def _errors() -> Console:
    return Console(stderr=True)


control_app = typer.Typer(
    help="Publish maintenance requests on the control topic.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)
table_app = typer.Typer(
    help="Inspect one Iceberg table.", no_args_is_help=True, pretty_exceptions_enable=False
)


@table_app.callback()
def _table() -> None:
    """Inspect one Iceberg table."""


def _user() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return "unknown"


def _await_result(
    settings: MaintainerSettings, request: MaintenanceRequest, wait_s: float
) -> MaintenanceResult | None:
    """Publish ``request`` and, when ``wait_s`` > 0, read the control topic for its result.
    Raises ControlUnreachableError (``shared.operator``)."""
    from shared.events import ControlEvent
    from shared.operator import publish_and_await

    def result_of(event: ControlEvent) -> MaintenanceResult | None:
        payload = event.payload
        if isinstance(payload, MaintenanceResult) and payload.request_id == request.request_id:
            return payload
        return None

    return publish_and_await(
        settings.kafka,
        settings.registry,
        settings.control_topic,
        ControlEvent.new(request.table, request, producer="icefjord-cli"),
        result_of,
        wait_s,
    )


def _publish(
    table: str,
    action: MaintenanceAction,
    *,
    partition: str | None,
    options: list[str],
    reason: str | None,
    wait_s: float,
) -> None:
    try:
        request = build_request(
            table, action, partition=partition, options=options, reason=reason, user=_user()
        )
    except ValueError as exc:
        _errors().print(f"[red]rejected:[/] {exc}")
        raise typer.Exit(EXIT_REJECTED) from None
    checked = validate_request(request)
    if isinstance(checked, Rejection):
        _errors().print(f"[red]rejected:[/] {checked.reason}")
        raise typer.Exit(EXIT_REJECTED)
    from services.maintainer.config import MaintainerSettings

    settings = MaintainerSettings()
    try:
        with _console().status(f"publishing {action.value} for {table}"):
            result = _await_result(settings, request, wait_s)
    except ControlUnreachableError as exc:
        _errors().print(f"[red]unreachable:[/] {exc}")
        raise typer.Exit(EXIT_UNREACHABLE) from None
    _console().print(f"published request {request.request_id} ({action.value} {table})")
    if wait_s <= 0:
        return
    if result is None:
        _errors().print(f"[yellow]no result within {wait_s:.0f} s[/]")
        raise typer.Exit(EXIT_NO_RESULT)
    _console().print(_result_table(result))
    if result.status is Status.REJECTED:
        raise typer.Exit(EXIT_REJECTED)
    if result.status is Status.FAILED:
        raise typer.Exit(EXIT_FAILED)


def _result_table(result: MaintenanceResult) -> Table:
    table = Table(title=f"{result.action.value} {result.table}: {result.status.value}")
    table.add_column("field")
    table.add_column("value")
    for name in ("files_before", "files_after", "bytes_before", "bytes_after", "duration_ms"):
        value = getattr(result, name)
        table.add_row(name, "-" if value is None else f"{value:,}")
    table.add_row("message", result.message or "")
    if result.error:
        table.add_row("error", f"[red]{result.error}[/]")
    return table


PartitionOption = Annotated[
    str | None,
    typer.Option("--partition", help="Iceberg filter, e.g. \"region = 'eu'\" (ANDed terms)."),
]
OptionsOption = Annotated[
    list[str] | None,
    typer.Option("--option", "-o", help="Iceberg option KEY=VALUE (repeatable)."),
]
ReasonOption = Annotated[str | None, typer.Option("--reason", help="Why (goes into the event).")]
WaitOption = Annotated[
    float, typer.Option("--wait", min=0, help="Seconds to wait for the result (0: do not).")
]
TableArgument = Annotated[str, typer.Argument(help="<namespace>.<table>")]


@control_app.command("compact")
def compact(
    table: TableArgument,
    partition: PartitionOption = None,
    option: OptionsOption = None,
    reason: ReasonOption = None,
    wait: WaitOption = 0.0,
) -> None:
    """Compact data files (rewrite_data_files, binpack to the table's target size)."""
    _publish(
        table,
        MaintenanceAction.COMPACT_DATA_FILES,
        partition=partition,
        options=option or [],
        reason=reason,
        wait_s=wait,
    )


@control_app.command("rewrite-deletes")
def rewrite_deletes(
    table: TableArgument,
    partition: PartitionOption = None,
    option: OptionsOption = None,
    reason: ReasonOption = None,
    wait: WaitOption = 0.0,
) -> None:
    """Rewrite position delete files (rewrite_position_delete_files)."""
    _publish(
        table,
        MaintenanceAction.REWRITE_POSITION_DELETES,
        partition=partition,
        options=option or [],
        reason=reason,
        wait_s=wait,
    )


@control_app.command("expire")
def expire(
    table: TableArgument,
    older_than_days: Annotated[
        float | None, typer.Option(min=0, help="Expire snapshots older than this many days.")
    ] = None,
    retain_last: Annotated[int | None, typer.Option(min=1, help="Always keep this many.")] = None,
    reason: ReasonOption = None,
    wait: WaitOption = 0.0,
) -> None:
    """Expire snapshots (never the latest one carrying the writer's offsets)."""
    options = []
    if older_than_days is not None:
        options.append(f"older_than_ms={int((time.time() - older_than_days * 86400) * 1000)}")
    if retain_last is not None:
        options.append(f"retain_last={retain_last}")
    _publish(
        table,
        MaintenanceAction.EXPIRE_SNAPSHOTS,
        partition=None,
        options=options,
        reason=reason,
        wait_s=wait,
    )


@control_app.command("remove-orphans")
def remove_orphans(
    table: TableArgument,
    older_than_hours: Annotated[
        float | None, typer.Option(min=0, help="Only files older than this many hours.")
    ] = None,
    dry_run: Annotated[bool, typer.Option(help="List, do not delete (>= 24 h only).")] = False,
    reason: ReasonOption = None,
    wait: WaitOption = 0.0,
) -> None:
    """Remove files no snapshot references (remove_orphan_files)."""
    options = []
    if older_than_hours is not None:
        options.append(f"older_than_ms={int((time.time() - older_than_hours * 3600) * 1000)}")
    if dry_run:
        options.append("dry_run=true")
    _publish(
        table,
        MaintenanceAction.REMOVE_ORPHAN_FILES,
        partition=None,
        options=options,
        reason=reason,
        wait_s=wait,
    )


@control_app.command("rewrite-manifests")
def rewrite_manifests(
    table: TableArgument, reason: ReasonOption = None, wait: WaitOption = 0.0
) -> None:
    """Rewrite manifests, grouping entries by partition (rewrite_manifests)."""
    _publish(
        table,
        MaintenanceAction.REWRITE_MANIFESTS,
        partition=None,
        options=[],
        reason=reason,
        wait_s=wait,
    )


def register_control_commands(app: typer.Typer) -> None:
    """Add the maintenance commands to an existing ``control`` typer app (for when another
    service contributes control commands too)."""
    for name, command in (
        ("compact", compact),
        ("rewrite-deletes", rewrite_deletes),
        ("expire", expire),
        ("remove-orphans", remove_orphans),
        ("rewrite-manifests", rewrite_manifests),
    ):
        app.command(name)(command)


# -- health views ---------------------------------------------------------------------


def _ago(ms: int | None, now_ms: int) -> str:
    if ms is None:
        return "never"
    seconds = max(now_ms - ms, 0) / 1000
    if seconds < 120:
        return f"{seconds:.0f} s ago"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min ago"
    if seconds < 172800:
        return f"{seconds / 3600:.1f} h ago"
    return f"{seconds / 86400:.1f} d ago"


def _size(count: int) -> str:
    value = float(count)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} GiB"  # pragma: no cover


def health_rows(health: TableHealth, now_ms: int) -> list[tuple[str, str]]:
    """The table-level figures of ``health`` as (label, value) rows for people."""
    offsets = (
        "none"
        if health.offsets_snapshot_id is None
        else f"{health.offsets_snapshot_id} ({_ago(health.offsets_snapshot_ms, now_ms)})"
    )
    return [
        ("data files", f"{health.data_files:,}"),
        ("partitions", f"{len(health.partitions):,}"),
        ("files in the fullest partition", f"{health.partition_files_max:,}"),
        (
            "small files",
            f"{health.small_files:,} ({health.small_file_ratio:.0%}; "
            f"< {_size(health.small_file_bytes)})",
        ),
        ("position delete files", f"{health.position_delete_files:,}"),
        ("equality delete files", f"{health.equality_delete_files:,}"),
        ("delete ratio (rows)", f"{health.delete_ratio:.3f}"),
        ("snapshots", f"{health.snapshots:,}"),
        (
            "oldest snapshot",
            _ago(health.snapshot_times_ms[0] if health.snapshot_times_ms else None, now_ms),
        ),
        ("latest offsets snapshot", offsets),
        ("manifests", f"{health.manifests:,}"),
        ("metadata size", _size(health.metadata_bytes)),
        ("last compaction", _ago(health.last_compaction_ms, now_ms)),
        ("commits since compaction", f"{health.commits_since_compaction:,}"),
        ("target file size", _size(health.target_file_size_bytes)),
    ]


def _inspect_all(
    settings: MaintainerSettings, names: Sequence[str] | None
) -> Mapping[str, TableHealth]:
    from services.maintainer.inspect import TableInspector, list_tables
    from shared.catalog import open_catalog

    catalog = open_catalog(settings.catalog)
    inspector = TableInspector(catalog)
    out: dict[str, TableHealth] = {}
    for name in names if names is not None else list_tables(catalog):
        try:
            table = parse_table(name)
        except MalformedIdentifierError:
            continue  # not a plain <namespace>.<table>: the maintainer does not handle it
        policy = settings.policy_for(name)
        inspection = inspector.inspect(table)
        out[name] = compute_health(inspection, small_file_bytes=policy.small_file_bytes)
    return out


def tables_command(
    as_json: Annotated[bool, typer.Option("--json", help="JSON lines instead of a table.")] = False,
) -> None:
    """The health of every table in the catalog, one line each."""
    from services.maintainer.config import MaintainerSettings

    settings = MaintainerSettings()
    healths = _inspect_all(settings, None)
    now_ms = int(time.time() * 1000)
    if as_json:
        for health in healths.values():
            typer.echo(json.dumps(_health_json(health, now_ms)))
        return
    view = Table(title=f"Iceberg tables in catalog {settings.catalog.name}")
    for column in (
        "table",
        "data files",
        "max/partition",
        "small",
        "deletes (pos/eq)",
        "delete ratio",
        "snapshots",
        "oldest",
        "manifests",
        "metadata",
        "last compaction",
        "commits since",
    ):
        view.add_column(column, justify="left" if column == "table" else "right")
    for name, health in healths.items():
        view.add_row(
            name,
            f"{health.data_files:,}",
            f"{health.partition_files_max:,}",
            f"{health.small_file_ratio:.0%}",
            f"{health.position_delete_files}/{health.equality_delete_files}",
            f"{health.delete_ratio:.2f}",
            f"{health.snapshots:,}",
            _ago(health.snapshot_times_ms[0] if health.snapshot_times_ms else None, now_ms),
            f"{health.manifests:,}",
            _size(health.metadata_bytes),
            _ago(health.last_compaction_ms, now_ms),
            f"{health.commits_since_compaction:,}",
        )
    _console().print(view)
    if not healths:
        _console().print("no tables")


def _health_json(health: TableHealth, now_ms: int) -> dict[str, Any]:
    data = dataclasses.asdict(health)
    data.pop("snapshot_times_ms")
    data.update(
        snapshots=health.snapshots,
        data_files=health.data_files,
        partition_files_max=health.partition_files_max,
        small_files=health.small_files,
        small_file_ratio=health.small_file_ratio,
        delete_ratio=health.delete_ratio,
        oldest_snapshot_age_s=health.oldest_snapshot_age_s(now_ms),
    )
    return data


@table_app.command("health")
def table_health(
    table: TableArgument,
    as_json: Annotated[bool, typer.Option("--json", help="JSON instead of tables.")] = False,
    partitions: Annotated[int, typer.Option(min=0, help="Partitions to list (fullest).")] = 20,
) -> None:
    """The health model of TABLE and what the policies would do now. Exit 2 when the
    identifier is malformed or the table does not exist."""
    try:
        parse_table(table)
    except MalformedIdentifierError as exc:
        _errors().print(f"[red]{exc}[/]")
        raise typer.Exit(2) from None
    from services.maintainer.config import MaintainerSettings
    from services.maintainer.inspect import UnknownTableError

    settings = MaintainerSettings()
    try:
        health = _inspect_all(settings, [table])[table]
    except UnknownTableError as exc:
        _errors().print(f"[red]{exc}[/]")
        raise typer.Exit(2) from None
    now_ms = int(time.time() * 1000)
    if as_json:
        typer.echo(json.dumps(_health_json(health, now_ms), indent=2))
        return
    inspected = datetime.fromtimestamp(health.inspected_at_ms / 1000, UTC)
    summary = Table(title=f"{table} at {inspected:%Y-%m-%d %H:%M:%S} UTC")
    summary.add_column("figure")
    summary.add_column("value", justify="right")
    for label, value in health_rows(health, now_ms):
        summary.add_row(label, value)
    _console().print(summary)
    if health.partitions and partitions:
        view = Table(title="partitions (fullest first)")
        for column in (
            "partition",
            "data files",
            "small",
            "bytes",
            "pos deletes",
            "eq deletes",
            "delete ratio",
        ):
            view.add_column(column, justify="left" if column == "partition" else "right")
        fullest = sorted(health.partitions, key=lambda p: (-p.data_files, p.key))[:partitions]
        for part in fullest:
            view.add_row(
                part.key or "(unpartitioned)",
                f"{part.data_files:,}",
                f"{part.small_files:,}",
                _size(part.data_bytes),
                f"{part.position_delete_files:,}",
                f"{part.equality_delete_files:,}",
                f"{part.delete_ratio:.3f}",
            )
        _console().print(view)
    policy = settings.policy_for(table)
    # Interval-driven orphan cleanup depends on the service's history: not shown here.
    wanted = [
        c
        for c in evaluate(health, policy, now_ms)
        if c.action is not MaintenanceAction.REMOVE_ORPHAN_FILES
    ]
    plan = expire_plan(health, policy, now_ms)
    _console().print(
        f"expiry: {plan.expirable} snapshot(s) expirable under the policy"
        + (" (cutoff held at the offsets snapshot)" if plan.protected_ms is not None else "")
    )
    if not wanted:
        _console().print("policies: nothing to do")
    for candidate in wanted:
        scope = f" [{candidate.partition}]" if candidate.partition else ""
        _console().print(
            f"policy {candidate.policy}: {candidate.action.value}{scope} "
            f"(pressure {candidate.pressure:.2f}): {candidate.reason}"
        )
