"""Which dead letters a list or a replay takes, and where a replay puts them."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from icefjord.replay import DeadLetter, Filter, parse_time_ms

pytestmark = pytest.mark.unit


def letter(
    source_topic: str = "shop.inventory.customers",
    error_class: str = "InvalidJson",
    message: str = "Expecting value: line 1 column 1",
    failed_at_ms: int = 1_795_900_000_000,
) -> DeadLetter:
    return DeadLetter(
        partition=2,
        offset=41,
        key=b"k",
        value=b"v",
        headers=(("origin", b"x"),),
        error_class=error_class,
        error_message=message,
        source_topic=source_topic,
        source_partition=1,
        source_offset=7,
        failed_at_ms=failed_at_ms,
    )


def test_the_table_is_the_source_topics_last_two_segments() -> None:
    assert letter("shop.inventory.customers").table == "inventory.customers"
    assert letter("icefjord.changes.inventory.orders").table == "inventory.orders"


def test_the_marker_key_names_the_dead_letters_own_coordinates() -> None:
    assert letter().coordinates == "icefjord.deadletter:2:41"


def test_no_condition_takes_everything() -> None:
    assert Filter()(letter())


@pytest.mark.parametrize(
    ("pattern", "taken"),
    [
        ("inventory.customers", True),
        ("inventory.*", True),
        ("*.orders", False),
        ("customers", False),
    ],
)
def test_table_patterns_match_the_whole_name(pattern: str, taken: bool) -> None:
    assert Filter(table=pattern)(letter()) is taken


def test_the_reason_is_found_in_the_class_or_the_message_in_any_case() -> None:
    assert Filter(reason="invalidjson")(letter())
    assert Filter(reason="LINE 1")(letter())
    assert not Filter(reason="oversized")(letter())


def test_the_time_window_includes_its_start_and_excludes_its_end() -> None:
    at = 1_795_900_000_000
    assert Filter(since_ms=at, until_ms=at + 1)(letter(failed_at_ms=at))
    assert not Filter(since_ms=at + 1)(letter(failed_at_ms=at))
    assert not Filter(until_ms=at)(letter(failed_at_ms=at))


def test_times_without_a_zone_are_utc() -> None:
    expected = int(datetime(2026, 11, 29, 6, 0, tzinfo=UTC).timestamp() * 1000)
    assert parse_time_ms("2026-11-29T06:00") == expected
    assert parse_time_ms("2026-11-29T07:00+01:00") == expected
    with pytest.raises(ValueError):
        parse_time_ms("yesterday")
