"""The console's folding of control events into each table's view, and its health badge."""

from __future__ import annotations

import json

from commands_support import command_event

from services.console.state import TableView, fold, render, table_of_diversion
from shared.events import (
    ALL_TABLES,
    CommitDone,
    ControlEvent,
    MaintenanceAction,
    MaintenanceRequest,
    MaintenanceResult,
    MaintenanceStatus,
    OperatorCommandKind,
    OperatorCommandResult,
    OperatorCommandStatus,
    SchemaChange,
    Verdict,
)
from shared.headers import HEADER_SOURCE_TOPIC, HEADER_TABLE

TABLE = "shop.orders"
BEHIND_MS = 300_000


def commit(snapshot: int, committed_at_ms: int, watermark_ms: int) -> ControlEvent:
    done = CommitDone(
        table=TABLE,
        commit_id=f"c{snapshot}",
        snapshot_id=snapshot,
        writer_epoch=1,
        records=10 * snapshot,
        inserted=10 * snapshot,
        updated=0,
        deleted=0,
        data_files_added=1,
        delete_files_added=0,
        bytes_added=1000,
        watermark_ms=watermark_ms,
        freshness_ms=committed_at_ms - watermark_ms,
        committed_at_ms=committed_at_ms,
        duration_ms=50,
    )
    return ControlEvent.new(TABLE, done, "iceberg-writer", now_ms=committed_at_ms)


def folded(*events: ControlEvent, history: int = 20) -> TableView:
    view: TableView | None = None
    for event in events:
        view = fold(view, event, history)
    assert view is not None
    return view


def shown(view: TableView, every: TableView | None = None, **counts: int) -> dict[str, object]:
    return render(
        view,
        every,
        dead_letters=counts.get("dead_letters", 0),
        quarantined=counts.get("quarantined", 0),
        now_ms=counts.get("now_ms", 20_000),
        behind_after_ms=BEHIND_MS,
    )


def test_the_last_commit_gives_freshness_and_the_history_is_bounded_newest_first() -> None:
    view = folded(*(commit(n, 1_000 * n + 500, 1_000 * n) for n in range(1, 6)), history=3)
    assert view.last_commit is not None and view.last_commit.snapshot_id == 5
    assert [c.snapshot_id for c in view.commits] == [5, 4, 3]
    body = shown(view, now_ms=8_000)
    assert body["freshness_ms"] == 500
    assert body["data_age_ms"] == 3_000
    assert body["last_commit_age_ms"] == 2_500
    assert body["health"] == {"level": "ok", "reasons": []}


def test_a_table_without_commit_is_unknown_and_a_slow_commit_is_behind() -> None:
    request = MaintenanceRequest(
        request_id="r1",
        table=TABLE,
        action=MaintenanceAction.COMPACT_DATA_FILES,
        reason="test",
        requested_by="operator:test",
    )
    alone = folded(ControlEvent.new(TABLE, request, "cli", now_ms=1))
    assert shown(alone)["health"] == {"level": "unknown", "reasons": ["no commit yet"]}
    late = folded(commit(1, 1_000_000, 1_000))
    health = shown(late)["health"]
    assert isinstance(health, dict) and health["level"] == "warn"
    assert "behind" in health["reasons"][0]


def test_a_pause_is_requested_then_confirmed_by_the_writer_and_undone_by_resume() -> None:
    pause = command_event(OperatorCommandKind.PAUSE, TABLE, at_ms=2_000)
    requested = folded(commit(1, 1_000, 900), pause)
    assert requested.pause is not None and not requested.pause.confirmed
    assert shown(requested)["paused"] is True
    assert shown(requested)["health"] == {"level": "paused", "reasons": ["paused"]}
    answer = OperatorCommandResult(
        command_event_id=pause.event_id,
        table=TABLE,
        command=OperatorCommandKind.PAUSE,
        status=OperatorCommandStatus.APPLIED,
    )
    confirmed = fold(requested, ControlEvent.new(TABLE, answer, "iceberg-writer", now_ms=2_100), 20)
    assert confirmed.pause is not None and confirmed.pause.confirmed
    assert confirmed.answer is not None and confirmed.answer.status == "APPLIED"
    resumed = fold(confirmed, command_event(OperatorCommandKind.RESUME, TABLE, at_ms=3_000), 20)
    assert shown(resumed)["paused"] is False
    flushed = fold(resumed, command_event(OperatorCommandKind.FLUSH, TABLE, at_ms=4_000), 20)
    assert flushed.pause == resumed.pause, "a FLUSH changes no pause"


def test_a_failed_answer_leaves_the_pause_unconfirmed() -> None:
    pause = command_event(OperatorCommandKind.PAUSE, TABLE)
    failed = OperatorCommandResult(
        command_event_id=pause.event_id,
        table=TABLE,
        command=OperatorCommandKind.PAUSE,
        status=OperatorCommandStatus.FAILED,
        message="boom",
    )
    view = folded(pause, ControlEvent.new(TABLE, failed, "iceberg-writer"))
    assert view.pause is not None and not view.pause.confirmed


def test_the_later_of_the_tables_own_and_the_all_tables_command_holds() -> None:
    own = folded(commit(1, 1_000, 900), command_event(OperatorCommandKind.RESUME, TABLE, 5_000))
    every_early = folded(command_event(OperatorCommandKind.PAUSE, ALL_TABLES, 4_000))
    every_late = folded(command_event(OperatorCommandKind.PAUSE, ALL_TABLES, 6_000))
    assert shown(own, every_early)["paused"] is False
    assert shown(own, every_late)["paused"] is True


def test_a_quarantined_schema_and_a_failed_maintenance_are_bad_diversions_warn() -> None:
    change = SchemaChange(
        table=TABLE,
        subject=f"icefjord.changes.{TABLE}-value",
        to_version=3,
        to_schema_id=7,
        verdict=Verdict.QUARANTINE,
        reason="narrowing",
    )
    refused = folded(commit(1, 1_000, 900), ControlEvent.new(TABLE, change, "schema-watcher"))
    assert refused.schema is not None and refused.schema.to_version == 3
    assert shown(refused)["health"] == {
        "level": "bad",
        "reasons": ["schema version 3 quarantined"],
    }
    diverted = shown(folded(commit(1, 1_000, 900)), dead_letters=2, quarantined=1)
    assert diverted["health"] == {
        "level": "warn",
        "reasons": ["1 record(s) quarantined", "2 dead letter(s)"],
    }
    result = MaintenanceResult(
        request_id="r1",
        table=TABLE,
        action=MaintenanceAction.COMPACT_DATA_FILES,
        status=MaintenanceStatus.FAILED,
        duration_ms=10,
        error="no space",
    )
    failed = folded(commit(1, 1_000, 900), ControlEvent.new(TABLE, result, "maintainer"))
    health = shown(failed)["health"]
    assert isinstance(health, dict) and health["level"] == "bad"


def test_a_maintenance_result_replaces_its_request_in_the_history() -> None:
    request = MaintenanceRequest(
        request_id="r1",
        table=TABLE,
        action=MaintenanceAction.COMPACT_DATA_FILES,
        reason="test",
        requested_by="operator:console",
    )
    result = MaintenanceResult(
        request_id="r1",
        table=TABLE,
        action=MaintenanceAction.COMPACT_DATA_FILES,
        status=MaintenanceStatus.SUCCEEDED,
        files_before=12,
        files_after=2,
        duration_ms=900,
    )
    view = folded(
        ControlEvent.new(TABLE, request, "icefjord-console", now_ms=1),
        ControlEvent.new(TABLE, result, "maintainer", now_ms=2),
    )
    (only,) = view.maintenance
    assert (only.status, only.files_after, only.requested_by) == (
        "SUCCEEDED",
        2,
        "operator:console",
    )


def test_a_view_survives_its_trip_through_a_faust_table_as_json() -> None:
    pause = command_event(OperatorCommandKind.PAUSE, TABLE)
    view = folded(commit(1, 1_000, 900), commit(2, 2_000, 1_900), pause)
    assert TableView.from_json(json.loads(json.dumps(view.to_json()))) == view


def test_a_diverted_record_belongs_to_its_table_header_or_its_change_topic() -> None:
    assert table_of_diversion({HEADER_TABLE: b"a.b"}) == "a.b"
    assert table_of_diversion({HEADER_SOURCE_TOPIC: b"icefjord.changes.a.c"}) == "a.c"
    assert table_of_diversion({HEADER_SOURCE_TOPIC: b"dbserver.public.x"}) is None


def test_snapshot_ids_go_out_as_strings_that_javascript_cannot_round() -> None:
    big = 6_037_717_963_158_806_017
    body = shown(folded(commit(big, 1_000, 900)))
    assert body["last_commit"]["snapshot_id"] == str(big)  # type: ignore[index]
    assert body["commits"][0]["snapshot_id"] == str(big)  # type: ignore[index]
