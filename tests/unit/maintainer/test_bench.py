"""The benchmark's arithmetic: percentiles and commit latency split by maintenance overlap."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from services.maintainer.bench import CommitTiming, latency_split, percentile

pytestmark = pytest.mark.unit


def test_percentile_by_nearest_rank() -> None:
    values = [float(v) for v in range(1, 101)]
    assert percentile(values, 50) == 50.0
    assert percentile(values, 99) == 99.0
    assert percentile(values, 100) == 100.0
    assert percentile([3.0], 99) == 3.0
    assert percentile([], 50) is None


@given(st.lists(st.floats(0, 1e6), min_size=1, max_size=50), st.floats(0, 100))
def test_percentile_is_a_member_within_bounds(values: list[float], q: float) -> None:
    result = percentile(values, q)
    assert result in values
    assert min(values) <= result <= max(values)
    assert percentile(values, 100) == max(values)


def test_latency_split_by_overlap() -> None:
    commits = [CommitTiming(0, 1), CommitTiming(2, 4), CommitTiming(5, 6), CommitTiming(9, 10)]
    during, outside = latency_split(commits, [(3, 5.5)])
    assert during == [2, 1]
    assert outside == [1, 1]
    assert latency_split(commits, []) == ([], [1, 2, 1, 1])
