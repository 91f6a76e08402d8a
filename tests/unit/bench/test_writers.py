"""The writer-instances drain benchmark's pure parts: the backlog, its final state, the report."""

from __future__ import annotations

import pytest

from icefjord.bench.writers import (
    WritersReport,
    WritersRun,
    backlog_changes,
    final_state,
    render,
)

pytestmark = pytest.mark.unit


def test_the_backlog_creates_every_key_then_changes_random_ones_the_same_way_each_time() -> None:
    changes = list(backlog_changes(1_000, 100, seed=3))
    assert len(changes) == 1_000
    assert [c[0] for c in changes] == list(range(1, 1_001))
    assert [(op, key) for _, op, key in changes[:100]] == [("CREATE", k) for k in range(100)]
    ops = {op for _, op, _ in changes[100:]}
    assert ops == {"UPDATE", "DELETE"}
    assert changes == list(backlog_changes(1_000, 100, seed=3))
    assert changes != list(backlog_changes(1_000, 100, seed=4))


def test_the_final_state_holds_each_live_keys_last_change() -> None:
    changes = [(1, "CREATE", 1), (2, "CREATE", 2), (3, "DELETE", 1), (4, "UPDATE", 2)]
    assert final_state(iter(changes)) == {2: 4}
    # An update of a deleted key brings it back, as an upsert does.
    assert final_state(iter([*changes, (5, "UPDATE", 1)])) == {2: 4, 1: 5}


def _run(instances: int, wall: float, drain: float, verified: bool = True) -> WritersRun:
    return WritersRun(
        instances,
        "t",
        1_000_000,
        wall,
        drain,
        40.0,
        (40.0,),
        9,
        1,
        verified,
        "" if verified else "2 keys missing",
    )


def test_the_report_compares_each_run_with_one_instance() -> None:
    report = WritersReport(
        "icefjord bench writers", "now", 1_000_000, 6, 1000, False, "2 cores",
        (_run(1, 40.0, 20.0), _run(2, 25.0, 10.0, verified=False)),
    )  # fmt: skip
    text = render(report)
    assert "| 1 | 40.0 | 25,000 | 20.0 | 50,000 |" in text
    assert "NO: 2 keys missing" in text
    assert "1.60 times one instance's records/s from the start, 2.00 times after" in text
    assert "without the writer's Spark warm-up" in text
    assert "started together" in text


def test_the_report_says_how_far_apart_the_instances_started() -> None:
    report = WritersReport(
        "icefjord bench writers --join-after 8", "now", 1_000_000, 6, 1000, True, "2 cores",
        (_run(2, 25.0, 10.0),), join_after_s=8.0,
    )  # fmt: skip
    text = render(report)
    assert "the instances then started 8 s apart in one consumer group." in text
