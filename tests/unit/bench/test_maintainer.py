"""The benchmark's arithmetic: percentiles, commit latency split by maintenance overlap, and
the freshness of changes arriving evenly."""

from __future__ import annotations

import csv
import io
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from icefjord.bench.maintainer import (
    BenchConfig,
    BenchReport,
    CommitTiming,
    Sample,
    freshness_samples,
    latency_split,
    percentile,
)
from icefjord.bench.maintainer_chart import commits_csv, write_outputs
from shared.events import MaintenanceAction, MaintenanceResult, MaintenanceStatus

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


def test_picked_defaults_to_started() -> None:
    assert CommitTiming(1.0, 3.0).picked == 1.0
    held = CommitTiming(1.0, 3.0, 0, picked=2.5)
    assert (held.picked, held.seconds) == (2.5, 2.0)


def _three_commits() -> list[CommitTiming]:
    # The last commit is held by a compaction: it picks at 2 and lands only at 9.
    return [
        CommitTiming(0.0, 0.5, picked=0.0),
        CommitTiming(1.0, 1.5, picked=1.0),
        CommitTiming(2.0, 9.0, picked=2.0),
    ]


def test_freshness_by_hand() -> None:
    # Quarter-second steps are exact in binary: every value below is exact.
    during, outside = freshness_samples(_three_commits(), [(1.6, 8.0)], step_s=0.25)
    # t = 0 rides the first commit; t in (0, 1] the second, which finished before the
    # compaction began; t in (1, 2] the held third commit, visible at 9.
    assert outside == [0.5, 1.25, 1.0, 0.75, 0.5]
    assert during == [7.75, 7.5, 7.25, 7.0]


def test_freshness_during_a_compaction_is_the_held_commits_wait() -> None:
    step = 0.05
    during, outside = freshness_samples(_three_commits(), [(1.6, 8.0)], step_s=step)
    # The change that arrived just after the second commit picked waits until 9.
    assert 9.0 - 1.0 - step - 1e-9 <= max(during) <= 9.0 - 1.0
    assert min(during) == pytest.approx(7.0)
    # Every change arriving up to t = 1 was visible by 1.5, before the compaction began.
    assert len(outside) == 21
    assert max(outside) < 1.5
    assert len(during) + len(outside) == 41


def test_freshness_of_nothing_and_order_of_commits() -> None:
    assert freshness_samples([], [(0.0, 1.0)]) == ([], [])
    one = freshness_samples([CommitTiming(5.0, 6.0, picked=5.5)], [])
    assert one == ([], [0.5])
    commits = _three_commits()
    assert freshness_samples(reversed(commits), []) == freshness_samples(commits, [])
    with pytest.raises(ValueError):
        freshness_samples(commits, [], step_s=0.0)


@st.composite
def _commit_streams(draw: st.DrawFn) -> list[CommitTiming]:
    gaps = draw(st.lists(st.floats(0.0, 5.0), min_size=1, max_size=20))
    waits = draw(st.lists(st.floats(0.0, 20.0), min_size=len(gaps), max_size=len(gaps)))
    commits: list[CommitTiming] = []
    picked = draw(st.floats(0.0, 1e4))
    for gap, wait in zip(gaps, waits, strict=True):
        picked += gap
        commits.append(CommitTiming(picked, picked + wait, picked=picked))
    return commits


@given(
    _commit_streams(),
    st.lists(st.tuples(st.floats(0.0, 1e4), st.floats(0.0, 30.0)), max_size=5),
    st.sampled_from([0.05, 0.1, 0.25, 0.3, 1.0]),
)
def test_freshness_is_bounded_by_the_commits(
    commits: list[CommitTiming], spans: list[tuple[float, float]], step: float
) -> None:
    busy = [(start, start + length) for start, length in spans]
    during, outside = freshness_samples(commits, busy, step_s=step)
    values = during + outside
    assert all(v >= 0 for v in values)
    # A change waits at most from just after one commit picked until the next one lands.
    previous = [commits[0].picked, *(c.picked for c in commits[:-1])]
    bound = max(c.finished - p for c, p in zip(commits, previous, strict=True))
    assert max(values) <= bound + 1e-9
    # One sample every step from the first pick through the last, none beyond.
    span = commits[-1].picked - commits[0].picked
    assert (len(values) - 1) * step <= span + 1e-6
    assert len(values) * step > span - 1e-6
    # Maintenance only labels the samples; it changes none of them.
    quiet, calm = freshness_samples(commits, [], step_s=step)
    assert quiet == [] and sorted(calm) == sorted(values)


def _report() -> BenchReport:
    compaction = MaintenanceResult(
        request_id="r1",
        table="bench.t",
        action=MaintenanceAction.COMPACT_DATA_FILES,
        status=MaintenanceStatus.SUCCEEDED,
        duration_ms=3000,
    )
    return BenchReport(
        config=BenchConfig(duration_s=20),
        seconds=20.0,
        commits=(
            CommitTiming(1001, 1002),
            CommitTiming(1004, 1007, 2, picked=1006.5),
            CommitTiming(1010, 1011),
        ),
        actions=((1005.0, 1008.0, compaction),),
        samples=(Sample(10.0, 40, 60, 12, 15, True), Sample(20.0, 8, 20, 0, 18, False)),
        started=1000.0,
    )


def test_commits_csv_marks_the_commits_that_ran_beside_maintenance() -> None:
    rows = list(csv.DictReader(io.StringIO(commits_csv(_report()))))
    assert [(r["t_s"], r["picked_s"], r["latency_s"], r["conflicts"]) for r in rows] == [
        ("1.00", "1.00", "1.000", "0"),
        ("4.00", "6.50", "3.000", "2"),
        ("10.00", "10.00", "1.000", "0"),
    ]
    assert [r["during_maintenance"] for r in rows] == ["0", "1", "0"]


def test_outputs_hold_every_sample_and_a_chart(tmp_path: Path) -> None:
    written = write_outputs(_report(), tmp_path / "out", latency_target_s=10.0)
    assert {p.name for p in written} == {"samples.csv", "commits.csv", "bench.png"}
    rows = list(csv.DictReader(io.StringIO((tmp_path / "out" / "samples.csv").read_text())))
    assert [(r["t_s"], r["partition_files_max"], r["maintaining"]) for r in rows] == [
        ("10.0", "40", "1"),
        ("20.0", "8", "0"),
    ]
    assert (tmp_path / "out" / "bench.png").read_bytes().startswith(b"\x89PNG")
