"""The pure parts of schema-watcher's service: state recovery, version selection, planning."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from services.schema_watcher.watcher import (
    RegisteredVersion,
    SubjectState,
    WatcherState,
    base_missing_change,
    pending_versions,
    plan_change,
    recover_state,
    table_for,
)
from shared.events import (
    ControlEvent,
    OperatorCommand,
    OperatorCommandKind,
    SchemaChange,
    SchemaOperationKind,
    Verdict,
)

pytestmark = pytest.mark.unit

SUBJECT = "icefjord.changes.inventory.customers-value"
TABLE = "inventory.customers"


def change(
    to_version: int, verdict: Verdict = Verdict.APPLY, subject: str = SUBJECT, table: str = TABLE
) -> SchemaChange:
    return SchemaChange(
        table=table,
        subject=subject,
        from_version=None,
        to_version=to_version,
        to_schema_id=1000 + to_version,
        verdict=verdict,
        reason=None if verdict is Verdict.APPLY else "unsafe",
    )


def event(payload: SchemaChange | OperatorCommand) -> ControlEvent:
    return ControlEvent.new(payload.table, payload, producer="test")


def change_record(*row_fields: dict[str, Any], table: str | None = TABLE) -> dict[str, Any]:
    schema: dict[str, Any] = {
        "type": "record",
        "name": "CustomersChange",
        "namespace": "io.icefjord.changes.inventory",
        "icefjord.key": ["id"],
        "fields": [
            {
                "name": "op",
                "type": {
                    "type": "enum",
                    "name": "Operation",
                    "namespace": "io.icefjord",
                    "symbols": ["CREATE", "UPDATE", "DELETE", "READ", "TRUNCATE"],
                },
            },
            {"name": "position", "type": "string"},
            {"name": "source_ts_ms", "type": "long"},
            {"name": "tx_id", "type": ["null", "string"], "default": None},
            {"name": "source", "type": {"type": "map", "values": "string"}},
            {
                "name": "key",
                "type": {
                    "type": "record",
                    "name": "CustomersKey",
                    "fields": [{"name": "id", "type": "int"}],
                },
            },
            {
                "name": "after",
                "type": [
                    "null",
                    {
                        "type": "record",
                        "name": "CustomersRow",
                        "fields": [{"name": "id", "type": "int"}, *row_fields],
                    },
                ],
                "default": None,
            },
        ],
    }
    if table is not None:
        schema["icefjord.table"] = table
    return schema


def registered(
    version: int, schema: dict[str, Any] | str, schema_type: str = "AVRO"
) -> RegisteredVersion:
    text = schema if isinstance(schema, str) else json.dumps(schema)
    return RegisteredVersion(SUBJECT, version, 1000 + version, text, schema_type)


VISITS_LONG = {"name": "visits", "type": "long"}
VISITS_INT = {"name": "visits", "type": "int"}
NICKNAME = {"name": "nickname", "type": ["null", "string"], "default": None}


# --- recovery ---------------------------------------------------------------------------


def test_recovery_keeps_highest_announced_and_last_applied_version() -> None:
    other = "icefjord.changes.inventory.orders-value"
    events = [
        event(change(1)),
        event(change(1, subject=other, table="inventory.orders")),
        event(change(2)),
        event(OperatorCommand(command=OperatorCommandKind.PAUSE, table=TABLE, requested_by="op")),
        event(change(3, Verdict.QUARANTINE)),
    ]
    state = recover_state(events)
    assert state.announced(SUBJECT) == 3
    assert state.announced(other) == 1
    assert state.announced("icefjord.changes.x.y-value") is None
    customers = state.subjects[SUBJECT]
    assert (customers.applied_version, customers.applied_schema_id) == (2, 1002)
    assert customers.last_verdict is Verdict.QUARANTINE
    assert state.quarantined_tables() == {TABLE}


def test_a_later_apply_lifts_the_quarantine() -> None:
    state = recover_state([event(change(1)), event(change(2, Verdict.QUARANTINE))])
    assert state.quarantined_tables() == {TABLE}
    state = state.record(change(3))
    assert state.quarantined_tables() == frozenset()
    assert state.subjects[SUBJECT].applied_version == 3


def test_old_and_duplicate_events_do_not_move_the_state_back() -> None:
    state = recover_state(
        [event(change(1)), event(change(2)), event(change(3, Verdict.QUARANTINE))]
    )
    # A redelivered v2 APPLY must neither lower the announced version nor the applied base.
    assert state.record(change(2)) is state
    assert state.record(change(3)) is state


@st.composite
def change_logs(draw: st.DrawFn) -> list[SchemaChange]:
    """Increasing versions with random verdicts, some events delivered twice."""
    versions = sorted(draw(st.sets(st.integers(1, 50), min_size=1, max_size=15)))
    log: list[SchemaChange] = []
    for version in versions:
        item = change(version, draw(st.sampled_from(list(Verdict))))
        log.extend([item] * draw(st.integers(1, 2)))
    return log


@given(change_logs())
def test_recovery_matches_the_log(log: list[SchemaChange]) -> None:
    state = recover_state(event(c) for c in log)
    assert state.announced(SUBJECT) == max(c.to_version for c in log)
    applied = [c.to_version for c in log if c.verdict is Verdict.APPLY]
    assert state.subjects[SUBJECT].applied_version == (max(applied) if applied else None)
    assert state.subjects[SUBJECT].last_verdict is log[-1].verdict
    # Reading the log twice (a restart after a restart) changes nothing.
    assert recover_state(event(c) for c in log + log) == state


# --- version selection ------------------------------------------------------------------


@given(st.lists(st.integers(1, 100)), st.none() | st.integers(0, 100))
def test_pending_versions_are_exactly_the_newer_ones_in_order(
    versions: list[int], announced: int | None
) -> None:
    pending = pending_versions(versions, announced)
    assert pending == sorted(set(pending))
    floor = 0 if announced is None else announced
    assert set(pending) == {v for v in versions if v > floor}


def test_after_a_restart_nothing_is_pending_until_a_new_version() -> None:
    state = recover_state([event(change(1)), event(change(2)), event(change(3))])
    assert pending_versions([1, 2, 3], state.announced(SUBJECT)) == []
    assert pending_versions([1, 2, 3, 4], state.announced(SUBJECT)) == [4]


# --- table names ------------------------------------------------------------------------


@given(st.from_regex(r"[a-z][a-z0-9_]{0,8}\.[a-z][a-z0-9_]{0,8}", fullmatch=True))
def test_table_is_derived_from_the_subject(table: str) -> None:
    assert table_for(f"icefjord.changes.{table}-value") == table
    assert table_for(f"icefjord.changes.{table}-value", {"type": "record"}) == table


def test_table_property_wins_and_bad_properties_are_ignored() -> None:
    assert table_for(SUBJECT, {"icefjord.table": "crm.clients"}) == "crm.clients"
    assert table_for(SUBJECT, {"icefjord.table": ""}) == TABLE
    assert table_for(SUBJECT, {"icefjord.table": 7}) == TABLE
    assert table_for("other-value") == "other"


# --- planning ---------------------------------------------------------------------------


def test_first_version_is_applied_without_operations() -> None:
    result = plan_change(SUBJECT, None, registered(1, change_record(VISITS_LONG)))
    assert result.verdict is Verdict.APPLY
    assert (result.from_version, result.from_schema_id) == (None, None)
    assert (result.to_version, result.to_schema_id) == (1, 1001)
    assert result.operations == ()
    assert result.table == TABLE


def test_added_optional_column_becomes_an_add_column_operation() -> None:
    base = registered(1, change_record(VISITS_LONG))
    result = plan_change(SUBJECT, base, registered(2, change_record(VISITS_LONG, NICKNAME)))
    assert result.verdict is Verdict.APPLY
    assert (result.from_version, result.from_schema_id) == (1, 1001)
    assert [(op.kind, op.path) for op in result.operations] == [
        (SchemaOperationKind.ADD_COLUMN, ("nickname",))
    ]
    assert json.loads(result.operations[0].type_json or "null") == ["null", "string"]
    assert result.reason is None


def test_narrowing_is_quarantined_with_a_reason() -> None:
    base = registered(2, change_record(VISITS_LONG))
    result = plan_change(SUBJECT, base, registered(3, change_record(VISITS_INT)))
    assert result.verdict is Verdict.QUARANTINE
    assert result.reason is not None and "visits" in result.reason


def test_schema_text_that_is_not_json_is_quarantined_not_raised() -> None:
    base = registered(1, change_record(VISITS_LONG))
    result = plan_change(SUBJECT, base, registered(2, '{"type": "record", "name": '))
    assert result.verdict is Verdict.QUARANTINE
    assert result.reason is not None and "not valid JSON" in result.reason
    assert result.table == TABLE  # from the subject, as the schema cannot be read


def test_json_that_is_not_an_avro_record_is_quarantined() -> None:
    result = plan_change(SUBJECT, None, registered(1, "[1, 2]"))
    assert result.verdict is Verdict.QUARANTINE
    assert result.reason


def test_non_avro_schemas_are_quarantined() -> None:
    result = plan_change(SUBJECT, None, registered(1, '{"type": "object"}', "JSON"))
    assert result.verdict is Verdict.QUARANTINE
    assert result.reason is not None and "not Avro" in result.reason


def test_missing_base_gives_a_quarantine_naming_it() -> None:
    previous = SubjectState(
        table=TABLE,
        announced_version=2,
        last_verdict=Verdict.APPLY,
        applied_version=2,
        applied_schema_id=1002,
    )
    result = base_missing_change(SUBJECT, previous, registered(3, change_record(NICKNAME)))
    assert result.verdict is Verdict.QUARANTINE
    assert (result.from_version, result.from_schema_id, result.to_version) == (2, 1002, 3)
    assert result.reason is not None and "version 2" in result.reason


def test_state_is_empty_without_events() -> None:
    assert recover_state([]) == WatcherState()
