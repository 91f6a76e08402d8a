"""When a table's batch closes: size, flush, an adaptive linger, never with nothing in it."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from services.iceberg_writer.batching import BatchClock

pytestmark = pytest.mark.unit

targets = st.floats(0.1, 600, allow_nan=False)
minimums = st.floats(0, 5, allow_nan=False)
durations = st.floats(0, 120, allow_nan=False)


def clock(target_s: float = 10.0, min_s: float = 0.2, max_records: int = 1000) -> BatchClock:
    return BatchClock(target_s=target_s, min_s=min_s, max_records=max_records)


@given(
    targets,
    minimums,
    st.floats(-1e6, 1e6, allow_nan=False),
    st.booleans(),
    st.booleans(),
    st.integers(1, 10),
)
def test_an_empty_batch_never_closes(
    target: float, min_s: float, now: float, flush: bool, started: bool, max_records: int
) -> None:
    c = clock(target, min_s, max_records)
    if started:
        c.added(now - 1e6)
    assert not c.should_close(now, 0, flush)


def test_closes_at_max_records_before_the_linger() -> None:
    c = clock(target_s=100, max_records=5)
    c.added(0.0)
    assert not c.should_close(0.001, 4)
    assert c.should_close(0.001, 5)
    assert c.should_close(0.001, 6)


def test_a_flush_closes_a_batch_with_records_at_once() -> None:
    c = clock(target_s=100)
    c.added(0.0)
    assert not c.should_close(0.0, 1)
    assert c.should_close(0.0, 1, flush=True)


def test_closes_once_the_linger_has_passed_since_the_first_change() -> None:
    c = clock(target_s=10, min_s=0.2)  # commit_s starts at 1 s: linger 0.3 * 10 - 1 = 2 s
    assert c.linger_s() == pytest.approx(2.0)
    c.added(100.0)
    c.added(101.5)  # a later change does not restart the wait
    assert not c.should_close(101.9, 3)
    assert c.should_close(102.0, 3)


def test_a_commit_resets_the_wait_until_the_next_change() -> None:
    c = clock(target_s=10)
    c.added(0.0)
    c.committed(0.5)
    assert not c.should_close(1_000.0, 1)
    c.added(1_000.0)
    assert not c.should_close(1_000.1, 1)
    assert not c.should_close(1_000.0 + c.linger_s() - 0.01, 1)
    assert c.should_close(1_000.0 + c.linger_s() + 1e-9, 1)


@given(targets, minimums, st.lists(durations, max_size=20))
def test_the_linger_never_drops_below_the_minimum(
    target: float, min_s: float, commits: list[float]
) -> None:
    c = clock(target, min_s)
    for seconds in commits:
        c.committed(seconds)
        assert c.linger_s() >= min_s
        assert c.linger_s() <= max(min_s, 0.3 * target)


@given(targets, durations, durations)
def test_the_linger_shrinks_as_commits_get_slower(target: float, a: float, b: float) -> None:
    fast, slow = sorted((a, b))
    c_fast, c_slow = clock(target, 0.0), clock(target, 0.0)
    c_fast.committed(fast)
    c_slow.committed(slow)
    assert c_slow.linger_s() <= c_fast.linger_s()
    before = c_fast.linger_s()
    c_fast.committed(c_fast.commit_s + 1.0)  # a slower commit than the average so far
    assert c_fast.linger_s() <= before
    if before > 0.0:
        assert c_fast.linger_s() < before


def test_the_commit_time_is_a_moving_average_that_follows_the_recent_commits() -> None:
    c = clock(target_s=60, min_s=0.0)
    c.committed(11.0)
    assert 1.0 < c.commit_s < 11.0  # one slow commit moves the average, not all the way
    for _ in range(60):
        c.committed(4.0)
    assert c.commit_s == pytest.approx(4.0, abs=1e-6)
    assert c.linger_s() == pytest.approx(0.3 * 60 - 4.0, abs=1e-5)


def test_a_slow_table_lingers_only_the_minimum() -> None:
    c = clock(target_s=10, min_s=0.5)
    for _ in range(30):
        c.committed(8.0)
    assert c.linger_s() == 0.5
    c.added(0.0)
    assert not c.should_close(0.49, 1)
    assert c.should_close(0.5, 1)
