"""What the console knows of each table, folded from control events: pure, no Kafka.

:func:`fold` takes a table's :class:`TableView` (or None) and one :class:`ControlEvent` and
returns the next view; :func:`render` turns a view into the JSON the API serves, with the
freshness and the health badge judged at a given time. Views travel through Faust tables as
JSON (:meth:`TableView.to_json`, :meth:`TableView.from_json`).

A PAUSE or RESUME for every table (``table="*"``) is folded into the view of ``"*"``; a
table's pause is then whichever of its own and ``"*"``'s commands came last, as the writer
keeps them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, replace
from typing import Any, Literal, Self

from shared.events import (
    CommitDone,
    ControlEvent,
    MaintenanceRequest,
    MaintenanceResult,
    MaintenanceStatus,
    OperatorCommand,
    OperatorCommandKind,
    OperatorCommandResult,
    OperatorCommandStatus,
    SchemaChange,
    Verdict,
)
from shared.headers import HEADER_SOURCE_TOPIC, HEADER_TABLE
from shared.settings import CHANGES_TOPIC_PREFIX

__all__ = [
    "CommandAnswer",
    "CommitSummary",
    "Health",
    "MaintenanceSummary",
    "PauseState",
    "SchemaVerdict",
    "TableView",
    "effective_pause",
    "fold",
    "judge",
    "render",
    "table_of_diversion",
]

Level = Literal["ok", "warn", "bad", "paused", "unknown"]


@dataclass(frozen=True, slots=True, kw_only=True)
class CommitSummary:
    """One CommitDone, as much of it as the page shows."""

    snapshot_id: int
    records: int
    committed_at_ms: int
    watermark_ms: int | None
    freshness_ms: int | None
    duration_ms: int
    write_path: str | None

    @classmethod
    def of(cls, done: CommitDone) -> Self:
        return cls(
            snapshot_id=done.snapshot_id,
            records=done.records,
            committed_at_ms=done.committed_at_ms,
            watermark_ms=done.watermark_ms,
            freshness_ms=done.freshness_ms,
            duration_ms=done.duration_ms,
            write_path=done.write_path,
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class MaintenanceSummary:
    """One MaintenanceResult (or a request still waiting for it: ``status`` None)."""

    request_id: str
    action: str
    status: str | None
    at_ms: int
    requested_by: str | None = None
    duration_ms: int | None = None
    files_before: int | None = None
    files_after: int | None = None
    detail: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class PauseState:
    """The last PAUSE or RESUME for a table, and whether the writer answered that it holds."""

    command: str
    at_ms: int
    requested_by: str
    event_id: str
    confirmed: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class SchemaVerdict:
    """schema-watcher's verdict on the table's newest schema version."""

    verdict: str
    to_version: int
    at_ms: int
    reason: str | None


@dataclass(frozen=True, slots=True, kw_only=True)
class CommandAnswer:
    """The writer's last OperatorCommandResult for the table."""

    command: str
    status: str
    at_ms: int
    records: int | None
    message: str | None


@dataclass(frozen=True, slots=True, kw_only=True)
class TableView:
    """Everything folded for one table; ``commits`` and ``maintenance`` newest first."""

    table: str
    last_event_ms: int = 0
    last_commit: CommitSummary | None = None
    commits: tuple[CommitSummary, ...] = ()
    pause: PauseState | None = None
    schema: SchemaVerdict | None = None
    answer: CommandAnswer | None = None
    maintenance: tuple[MaintenanceSummary, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, value: Mapping[str, Any]) -> Self:
        def one(kind: Any, item: Mapping[str, Any] | None) -> Any:
            return None if item is None else kind(**item)

        return cls(
            table=value["table"],
            last_event_ms=value.get("last_event_ms", 0),
            last_commit=one(CommitSummary, value.get("last_commit")),
            commits=tuple(CommitSummary(**c) for c in value.get("commits") or ()),
            pause=one(PauseState, value.get("pause")),
            schema=one(SchemaVerdict, value.get("schema")),
            answer=one(CommandAnswer, value.get("answer")),
            maintenance=tuple(MaintenanceSummary(**m) for m in value.get("maintenance") or ()),
        )


def fold(view: TableView | None, event: ControlEvent, history: int) -> TableView:
    """The view of ``event.table`` after ``event``; at most ``history`` commits and
    maintenance entries are kept. Events the console does not show only stamp the time."""
    current = view or TableView(table=event.table)
    at_ms = event.produced_at_ms
    current = replace(current, last_event_ms=max(current.last_event_ms, at_ms))
    payload = event.payload
    if isinstance(payload, CommitDone):
        commit = CommitSummary.of(payload)
        return replace(current, last_commit=commit, commits=(commit, *current.commits)[:history])
    if isinstance(payload, OperatorCommand):
        return _command(current, event, payload)
    if isinstance(payload, OperatorCommandResult):
        return _answer(current, at_ms, payload)
    if isinstance(payload, SchemaChange):
        verdict = SchemaVerdict(
            verdict=payload.verdict.value,
            to_version=payload.to_version,
            at_ms=at_ms,
            reason=payload.reason,
        )
        return replace(current, schema=verdict)
    if isinstance(payload, MaintenanceRequest):
        waiting = MaintenanceSummary(
            request_id=payload.request_id,
            action=payload.action.value,
            status=None,
            at_ms=at_ms,
            requested_by=payload.requested_by,
        )
        return replace(current, maintenance=(waiting, *current.maintenance)[:history])
    if isinstance(payload, MaintenanceResult):
        return _maintained(current, at_ms, payload, history)
    return current


def _command(view: TableView, event: ControlEvent, command: OperatorCommand) -> TableView:
    if command.command is OperatorCommandKind.FLUSH:
        return view
    pause = PauseState(
        command=command.command.value,
        at_ms=event.produced_at_ms,
        requested_by=command.requested_by,
        event_id=event.event_id,
    )
    return replace(view, pause=pause)


def _answer(view: TableView, at_ms: int, result: OperatorCommandResult) -> TableView:
    answer = CommandAnswer(
        command=result.command.value,
        status=result.status.value,
        at_ms=at_ms,
        records=result.records,
        message=result.message,
    )
    pause = view.pause
    if (
        pause is not None
        and pause.event_id == result.command_event_id
        and result.status is not OperatorCommandStatus.FAILED
    ):
        pause = replace(pause, confirmed=True)
    return replace(view, answer=answer, pause=pause)


def _maintained(view: TableView, at_ms: int, result: MaintenanceResult, history: int) -> TableView:
    detail = result.error or result.message
    earlier = [m for m in view.maintenance if m.request_id == result.request_id]
    done = MaintenanceSummary(
        request_id=result.request_id,
        action=result.action.value,
        status=result.status.value,
        at_ms=at_ms,
        requested_by=earlier[0].requested_by if earlier else None,
        duration_ms=result.duration_ms,
        files_before=result.files_before,
        files_after=result.files_after,
        detail=detail,
    )
    others = tuple(m for m in view.maintenance if m.request_id != result.request_id)
    return replace(view, maintenance=(done, *others)[:history])


def effective_pause(view: TableView, every: TableView | None) -> PauseState | None:
    """The command in force for the table: its own or the all-tables one, whichever is later."""
    candidates = [p for p in (view.pause, every.pause if every else None) if p is not None]
    return max(candidates, key=lambda p: p.at_ms) if candidates else None


@dataclass(frozen=True, slots=True)
class Health:
    """The badge: a level and the reasons for it, most serious first."""

    level: Level
    reasons: tuple[str, ...]


def judge(
    view: TableView,
    pause: PauseState | None,
    *,
    dead_letters: int,
    quarantined: int,
    behind_after_ms: int,
) -> Health:
    """The table's health: paused, bad (refused schema, failed maintenance), warn (behind
    its freshness bound, diverted records), ok; unknown before its first commit."""
    bad: list[str] = []
    warn: list[str] = []
    if view.schema is not None and view.schema.verdict == Verdict.QUARANTINE.value:
        bad.append(f"schema version {view.schema.to_version} quarantined")
    finished = [m for m in view.maintenance if m.status is not None]
    if finished and finished[0].status == MaintenanceStatus.FAILED.value:
        bad.append(f"{finished[0].action} failed")
    commit = view.last_commit
    if commit is not None and (commit.freshness_ms or 0) > behind_after_ms:
        warn.append(f"behind: last commit {commit.freshness_ms} ms after its data")
    if quarantined:
        warn.append(f"{quarantined} record(s) quarantined")
    if dead_letters:
        warn.append(f"{dead_letters} dead letter(s)")
    reasons = tuple(bad + warn)
    if pause is not None and pause.command == OperatorCommandKind.PAUSE.value:
        return Health("paused", ("paused", *reasons))
    if bad:
        return Health("bad", reasons)
    if warn:
        return Health("warn", reasons)
    if commit is None:
        return Health("unknown", ("no commit yet",))
    return Health("ok", ())


def render(
    view: TableView,
    every: TableView | None,
    *,
    dead_letters: int,
    quarantined: int,
    now_ms: int,
    behind_after_ms: int,
) -> dict[str, Any]:
    """The API's JSON for one table, judged at ``now_ms``, snapshot ids as strings:
    ``freshness_ms`` is the last commit's (commit time less the data's watermark),
    ``data_age_ms`` how old the newest committed data is now, ``last_commit_age_ms`` how
    long ago the last commit was."""
    pause = effective_pause(view, every)
    health = judge(
        view,
        pause,
        dead_letters=dead_letters,
        quarantined=quarantined,
        behind_after_ms=behind_after_ms,
    )
    commit = view.last_commit
    body = view.to_json()
    # Snapshot ids are 64-bit: as JSON numbers, JavaScript would round them.
    for shown in (body["last_commit"], *body["commits"]):
        if shown is not None:
            shown["snapshot_id"] = str(shown["snapshot_id"])
    body.update(
        {
            "pause": None if pause is None else asdict(pause),
            "paused": pause is not None and pause.command == OperatorCommandKind.PAUSE.value,
            "freshness_ms": None if commit is None else commit.freshness_ms,
            "data_age_ms": (
                None
                if commit is None or commit.watermark_ms is None
                else max(0, now_ms - commit.watermark_ms)
            ),
            "last_commit_age_ms": None
            if commit is None
            else max(0, now_ms - commit.committed_at_ms),
            "dead_letters": dead_letters,
            "quarantined": quarantined,
            "health": {"level": health.level, "reasons": list(health.reasons)},
        }
    )
    return body


def table_of_diversion(headers: Mapping[str, bytes]) -> str | None:
    """The table a dead-lettered or quarantined record belongs to: its ``icefjord.table``
    header, else its source topic when that is a change topic; None when neither says."""
    table = headers.get(HEADER_TABLE)
    if table:
        return table.decode(errors="replace")
    source = headers.get(HEADER_SOURCE_TOPIC, b"").decode(errors="replace")
    if source.startswith(CHANGES_TOPIC_PREFIX):
        return source.removeprefix(CHANGES_TOPIC_PREFIX)
    return None
