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


def test_a_batch_whose_first_change_arrives_long_behind_lingers_longer() -> None:
    c = clock(target_s=5, min_s=0.2)  # commit_s 1 s: linger 0.3 * 5 - 1 = 0.5 s
    c.added(100.0, age_s=30.0)  # six targets behind: the budget is its age, 30 s
    assert c.linger_s() == pytest.approx(0.3 * 30 - 1)
    c.added(101.0, age_s=0.0)  # a later change does not change the batch's wait
    assert not c.should_close(100.0 + 0.3 * 30 - 1 - 0.01, 10)
    assert c.should_close(100.0 + 0.3 * 30 - 1, 10)


def test_the_stretch_is_capped_and_ends_with_the_commit() -> None:
    c = clock(target_s=5, min_s=0.2)
    c.added(0.0, age_s=3_600.0)  # an hour behind: capped at six targets
    assert c.linger_s() == pytest.approx(0.3 * 6 * 5 - 1)
    c.committed(1.0)
    c.added(50.0, age_s=1.0)  # caught up: the plain budget again
    assert c.linger_s() == pytest.approx(0.3 * 5 - 1)


@given(targets, minimums, st.floats(0, 1, allow_nan=False), st.lists(durations, max_size=5))
def test_a_writer_that_keeps_up_never_stretches(
    target: float, min_s: float, share_of_threshold: float, commits: list[float]
) -> None:
    # A first change younger than twice the target: the linger the target alone gives.
    kept_up, plain = clock(target, min_s), clock(target, min_s)
    for seconds in commits:
        kept_up.committed(seconds)
        plain.committed(seconds)
    kept_up.added(0.0, age_s=share_of_threshold * 2 * target)
    plain.added(0.0)
    assert kept_up.linger_s() == plain.linger_s()


@given(targets, minimums, durations, durations)
def test_an_older_first_change_never_lingers_less(
    target: float, min_s: float, a: float, b: float
) -> None:
    young, old = sorted((a, b))
    c_young, c_old = clock(target, min_s), clock(target, min_s)
    c_young.added(0.0, age_s=young)
    c_old.added(0.0, age_s=old)
    assert c_young.linger_s() <= c_old.linger_s() <= max(min_s, 0.3 * 6 * target)
