"""The position bounds each commit records for its partitions, and the walk that reads them."""

from __future__ import annotations

import json

import pytest
from history_support import FakeTable
from hypothesis import given
from hypothesis import strategies as st

from services.iceberg_writer.bounds import (
    PARTITION_COUNT,
    POSITION_BOUNDS,
    bound_summary,
    decode_bounds,
    encode_bounds,
    recorded_bounds,
)
from services.iceberg_writer.tables import BULK_LOAD_ID, OFFSETS, encode_offsets

pytestmark = pytest.mark.unit

T = "icefjord.changes.shop.orders"


def commit(
    offsets: dict[int, int], bounds: dict[int, str] | None, count: int = 3, topic: str = T
) -> dict[str, str]:
    """A writer commit recording ``offsets`` and, unless None, ``bounds`` of ``topic``."""
    summary = {
        "operation": "overwrite",
        OFFSETS: encode_offsets({(topic, p): n for p, n in offsets.items()}),
    }
    if bounds is not None:
        summary |= bound_summary(topic, count, bounds)
    return summary


COMPACTION = {"operation": "replace", "added-data-files": "1", "deleted-data-files": "4"}
BULK_COPY = {"operation": "append", BULK_LOAD_ID: "l1", OFFSETS: encode_offsets({(T, 0): 0})}
FOREIGN_APPEND = {"operation": "append", "added-records": "10"}


def walk(history: FakeTable, count: int = 3) -> dict[int, str]:
    return recorded_bounds(history, T, count)  # type: ignore[arg-type]


@given(st.dictionaries(st.integers(0, 63), st.text(min_size=1, max_size=40), max_size=8))
def test_bounds_round_trip_through_the_summary_text(bounds: dict[int, str]) -> None:
    text = encode_bounds(T, bounds)
    assert decode_bounds(text, T) == bounds
    assert decode_bounds(text, "icefjord.changes.other.table") == {}


def test_the_summary_names_each_partition_by_topic_and_records_the_count() -> None:
    summary = bound_summary(T, 6, {0: "00000000000000000042", 5: "7"})
    assert json.loads(summary[POSITION_BOUNDS]) == {f"{T}:0": "00000000000000000042", f"{T}:5": "7"}
    assert summary[PARTITION_COUNT] == "6"


def test_each_partition_takes_the_bound_of_its_newest_commit() -> None:
    # Two instances share the table: each commit records its own partitions only.
    history = FakeTable.of(
        commit({0: 5, 1: 5, 2: 5}, {0: "a", 1: "b", 2: "c"}),
        commit({0: 9}, {0: "d"}),
        COMPACTION,
        commit({1: 8, 2: 7}, {1: "e", 2: "f"}),
        BULK_COPY,  # its rows sit below every change
    )
    assert walk(history) == {0: "d", 1: "e", 2: "f"}


def test_a_partitions_newest_commit_without_a_bound_leaves_it_unknown() -> None:
    # The newest commit of partition 1 was made with the upsert path off (or by an older
    # writer): the older bound no longer covers what it committed.
    history = FakeTable.of(commit({0: 5, 1: 5}, {0: "a", 1: "b"}), commit({1: 9}, None))
    assert walk(history) == {0: "a"}


def test_bounds_recorded_under_another_partition_count_are_not_used() -> None:
    # A topic that gained partitions moved keys between them.
    history = FakeTable.of(
        commit({0: 5, 1: 5}, {0: "a", 1: "b"}, count=2), commit({0: 9}, {0: "c"})
    )
    assert walk(history) == {0: "c"}
    assert walk(history, count=2) == {1: "b"}


def test_rows_added_outside_the_writer_end_the_walk() -> None:
    # Another program's append: its rows' positions are unknown, so every partition not met
    # above it is unknown too; a partition committed since is known again.
    history = FakeTable.of(
        commit({0: 5, 1: 5, 2: 5}, {0: "a", 1: "b", 2: "c"}),
        FOREIGN_APPEND,
        commit({2: 9}, {2: "d"}),
    )
    assert walk(history) == {2: "d"}


def test_a_history_cut_by_expiry_ends_the_walk_and_other_topics_are_ignored() -> None:
    history = FakeTable.of(
        commit({0: 5}, {0: "a"}),
        commit({1: 5}, {1: "b"}),
        commit({0: 1}, {0: "x"}, topic="icefjord.changes.other.t"),
        expired=(102,),
    )
    assert walk(history) == {}
    assert walk(FakeTable.of()) == {}
