from __future__ import annotations

from icefjord.demo.stall import describe_connector, describe_unread, unread


def test_unread_sums_each_topic_from_its_positions() -> None:
    ends = {("a", 0): 10, ("a", 1): 4, ("b", 0): 7, ("c", 0): 3}
    positions = {("a", 0): 6, ("b", 0): 7, ("c", 0): -1001}  # -1001: no offset committed
    assert unread(ends, positions) == {"a": 4 + 4, "c": 3}


def test_a_position_past_the_end_counts_nothing() -> None:
    assert unread({("a", 0): 5}, {("a", 0): 9}) == {}


def test_describe_unread() -> None:
    assert describe_unread({}, "unread") == "nothing unread"
    assert describe_unread({"b": 1200, "a": 3}, "unread") == "unread: a 3, b 1,200"


def test_describe_connector_shows_a_failed_task_with_its_trace() -> None:
    status = {
        "connector": {"state": "RUNNING"},
        "tasks": [{"id": 0, "state": "FAILED", "trace": "org.Boom: slot gone\n\tat x.y"}],
    }
    assert describe_connector("c", status) == (
        "connector c: RUNNING; task 0 FAILED (org.Boom: slot gone)"
    )
