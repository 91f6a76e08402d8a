"""The planner: most pressing first, one per table, and a budget that leaves room to ingest."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from services.maintainer.planner import PlannerLimits, PlannerState, order, plan
from services.maintainer.policy import Candidate
from shared.events import MaintenanceAction as A

pytestmark = pytest.mark.unit

NOW = 10_000_000


def cand(table: str, action: A = A.COMPACT_DATA_FILES, pressure: float = 1.0) -> Candidate:
    return Candidate(table=table, action=action, policy="p", pressure=pressure, reason="r")


def test_most_pressing_first_then_action_priority() -> None:
    ordered = order(
        [
            cand("a", A.REMOVE_ORPHAN_FILES, 1.0),
            cand("b", A.COMPACT_DATA_FILES, 1.0),
            cand("c", A.EXPIRE_SNAPSHOTS, 5.0),
            cand("d", A.REWRITE_POSITION_DELETES, 1.0),
        ]
    )
    assert [c.table for c in ordered] == ["c", "b", "d", "a"]


def test_one_at_a_time_by_default() -> None:
    outcome = plan(
        [cand("a", pressure=2), cand("b", pressure=3)], PlannerState(), PlannerLimits(), NOW
    )
    assert [c.table for c in outcome.admitted] == ["b"]
    assert [(c.table, why) for c, why in outcome.deferred] == [("a", "waiting for a free slot")]


def test_nothing_starts_while_an_action_runs() -> None:
    running = PlannerState().started("r1", "x", A.EXPIRE_SNAPSHOTS, NOW - 1000)
    outcome = plan([cand("a")], running, PlannerLimits(), NOW)
    assert outcome.admitted == ()
    assert "1 action(s) running" in outcome.deferred[0][1]
    finished = running.finished("r1", NOW)
    assert [c.table for c in plan([cand("a")], finished, PlannerLimits(), NOW).admitted] == ["a"]


def test_same_action_on_same_table_waits_for_the_minimum_interval() -> None:
    state = (
        PlannerState()
        .started("r1", "a", A.COMPACT_DATA_FILES, NOW - 30_000)
        .finished("r1", NOW - 20_000)
    )
    limits = PlannerLimits(min_interval_s=60)
    outcome = plan(
        [cand("a"), cand("a", A.EXPIRE_SNAPSHOTS, 0.5), cand("b", pressure=0.1)], state, limits, NOW
    )
    assert [(c.table, c.action) for c in outcome.admitted] == [("a", A.EXPIRE_SNAPSHOTS)]
    later = plan([cand("a")], state, limits, NOW + 31_000)
    assert [c.table for c in later.admitted] == ["a"]


def test_never_two_actions_on_one_table() -> None:
    limits = PlannerLimits(max_running=3)
    outcome = plan(
        [cand("a", pressure=3), cand("a", A.EXPIRE_SNAPSHOTS, 2), cand("b", pressure=1)],
        PlannerState(),
        limits,
        NOW,
    )
    assert [(c.table, c.action) for c in outcome.admitted] == [
        ("a", A.COMPACT_DATA_FILES),
        ("b", A.COMPACT_DATA_FILES),
    ]


def test_window_budget_of_actions() -> None:
    state = PlannerState()
    for i in range(3):
        state = state.started(
            f"r{i}", f"t{i}", A.COMPACT_DATA_FILES, NOW - 1000 * (i + 1)
        ).finished(f"r{i}", NOW - 1000 * i - 500)
    limits = PlannerLimits(max_actions_per_window=3, window_s=60, min_interval_s=0)
    outcome = plan([cand("z")], state, limits, NOW)
    assert outcome.admitted == () and "3 actions already started" in outcome.deferred[0][1]
    assert plan([cand("z")], state, limits, NOW + 60_000).admitted != ()


def test_busy_fraction_budget() -> None:
    # Busy 40 s of the last 60 s: over a 50 % budget.
    state = (
        PlannerState()
        .started("r", "t", A.COMPACT_DATA_FILES, NOW - 45_000)
        .finished("r", NOW - 5_000)
    )
    limits = PlannerLimits(window_s=60, max_busy_fraction=0.5, min_interval_s=0)
    assert state.busy_ms(NOW, 60_000) == 40_000
    assert plan([cand("z")], state, limits, NOW).admitted == ()
    # 30 s later, only 25 s of the window were busy.
    assert [c.table for c in plan([cand("z")], state, limits, NOW + 30_000).admitted] == ["z"]


def test_pruning_keeps_running_and_recent_records() -> None:
    state = (
        PlannerState()
        .started("old", "a", A.COMPACT_DATA_FILES, 0)
        .finished("old", 1)
        .started("run", "b", A.COMPACT_DATA_FILES, 5)
        .started("new", "c", A.COMPACT_DATA_FILES, NOW - 10)
        .finished("new", NOW - 5)
    )
    assert [r.request_id for r in state.pruned(NOW, 1000).records] == ["run", "new"]
    assert state.last_started("a", A.COMPACT_DATA_FILES) == 0
    assert state.last_started("a", A.EXPIRE_SNAPSHOTS) is None


candidates = st.lists(
    st.builds(
        cand,
        st.sampled_from(["a", "b", "c", "d"]),
        st.sampled_from(list(A)),
        st.floats(0.5, 10),
    ),
    max_size=12,
)
records = st.lists(
    st.tuples(
        st.sampled_from(["a", "b", "c"]),
        st.sampled_from(list(A)),
        st.integers(0, 120_000),
        st.booleans(),
    ),
    max_size=6,
)


@given(candidates, records, st.integers(1, 3), st.floats(0, 100), st.floats(0.1, 1))
def test_plan_invariants(
    found: list[Candidate],
    history: list[tuple[str, A, int, bool]],
    max_running: int,
    min_interval: float,
    busy: float,
) -> None:
    state = PlannerState()
    for i, (table, action, ago, done) in enumerate(history):
        state = state.started(str(i), table, action, NOW - ago)
        if done:
            state = state.finished(str(i), NOW - ago // 2)
    limits = PlannerLimits(
        max_running=max_running, min_interval_s=min_interval, window_s=120, max_busy_fraction=busy
    )
    outcome = plan(found, state, limits, NOW)
    admitted = list(outcome.admitted)
    assert len(admitted) + len(outcome.deferred) == len(found)
    assert len(admitted) <= max(max_running - len(state.running), 0)
    tables = [c.table for c in admitted]
    assert len(tables) == len(set(tables))
    assert not set(tables) & {r.table for r in state.running}
    assert [c.pressure for c in admitted] == sorted((c.pressure for c in admitted), reverse=True)
    for c in admitted:
        last = state.last_started(c.table, c.action)
        assert last is None or NOW - last >= min_interval * 1000
    if admitted:
        assert state.busy_ms(NOW, 120_000) < busy * 120_000
