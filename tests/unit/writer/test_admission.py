"""SchemaAdmission: a typed answer for rows of each schema id, and evolution before rows."""

from __future__ import annotations

from typing import Any

import pytest
from commands_support import operator_commands
from prometheus_client import CollectorRegistry

from services.iceberg_writer.admission import WAIT, WRITE, Admission, Decision, SchemaAdmission
from services.iceberg_writer.batching import BatchClock
from services.iceberg_writer.config import WriterSettings
from services.iceberg_writer.control_view import ControlView
from services.iceberg_writer.metrics import WriterMetrics
from services.iceberg_writer.ownership import Owner
from services.iceberg_writer.state import TableState
from shared.events import ControlEvent, SchemaChange, Verdict

pytestmark = pytest.mark.unit

TABLE = "shop.orders"
TOPIC = "icefjord.changes.shop.orders"


class Calls:
    """A stand-in committer and store that record the calls they get, in order."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def commit(self, state: TableState) -> None:
        self.calls.append(f"commit {len(state.pending)}")
        state.pending = []

    owner = Owner.new("writers", 1)

    def claim(self, state: TableState, partitions: list[tuple[str, int]]) -> None:
        self.calls.append("claim")

    def republish_if_missing(self, state: TableState, table: Any, checkpoint: Any) -> None: ...

    def apply_schema_change(self, table: str, plan: SchemaChange) -> None:
        self.calls.append(f"evolve to v{plan.to_version}")

    def load(self, table: str) -> None:
        return None


def plan(to_version: int, to_schema_id: int, verdict: Verdict = Verdict.APPLY) -> SchemaChange:
    return SchemaChange(
        table=TABLE,
        subject=f"{TOPIC}-value",
        from_version=to_version - 1,
        to_version=to_version,
        to_schema_id=to_schema_id,
        verdict=verdict,
        reason="a column became required" if verdict is Verdict.QUARANTINE else None,
    )


def admission(*plans: SchemaChange) -> tuple[SchemaAdmission, Calls]:
    settings = WriterSettings(schema_wait_s=300)
    metrics = WriterMetrics.create(CollectorRegistry())
    commands, _ = operator_commands({}, metrics=metrics)
    view = ControlView(None, None, None, "control", {}, metrics, commands)  # type: ignore[arg-type]
    for change in plans:
        view.handle(ControlEvent.new(TABLE, change, "test"), replay=True)
    calls = Calls()
    admit = SchemaAdmission(
        settings,
        control=view,
        partitions=None,  # type: ignore[arg-type]
        committer=calls,
        decoder=None,  # type: ignore[arg-type]
        registry=None,  # type: ignore[arg-type]
        codec=None,  # type: ignore[arg-type]
        store=calls,  # type: ignore[arg-type]
        metrics=metrics,
    )
    return admit, calls


def table_state(current_version: int = 2, applied: set[int] | None = None) -> TableState:
    state = TableState(name=TABLE, topic=TOPIC, clock=BatchClock(5.0, 0.2, 1000))
    state.table = object()  # type: ignore[assignment]
    state.current_version = current_version
    state.applied_ids = applied if applied is not None else {10, 11}
    return state


def test_rows_of_an_applied_schema_are_written() -> None:
    admit, _ = admission()
    assert admit.admit(table_state(), 11, TOPIC) == WRITE


def test_rows_of_an_unannounced_schema_wait_for_its_plan() -> None:
    admit, _ = admission()
    assert admit.admit(table_state(), 12, TOPIC) == WAIT


def test_rows_whose_plan_never_came_are_quarantined_with_the_reason() -> None:
    admit, _ = admission()
    state = table_state()
    state.expired_ids.add(12)
    assert admit.admit(state, 12, TOPIC) == Admission(
        Decision.QUARANTINE, "no SchemaChange for schema id 12 within 300 s"
    )


def test_rows_of_a_quarantined_version_are_quarantined_with_the_plans_reason() -> None:
    admit, _ = admission(plan(3, 12, Verdict.QUARANTINE))
    assert admit.admit(table_state(), 12, TOPIC) == Admission.quarantine(
        "schema version 3 quarantined: a column became required"
    )


def test_rows_of_an_older_version_are_written_into_the_current_schema() -> None:
    admit, calls = admission(plan(2, 9))
    assert admit.admit(table_state(current_version=2), 9, TOPIC) == WRITE
    assert calls.calls == []


def test_a_newer_version_commits_the_old_rows_then_evolves_the_table() -> None:
    admit, calls = admission(plan(3, 12))
    state = table_state()
    state.pending = [object(), object()]  # type: ignore[list-item]
    assert admit.admit(state, 12, TOPIC) == WRITE
    assert calls.calls == ["commit 2", "evolve to v3"]
