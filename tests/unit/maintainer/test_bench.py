"""The benchmark's arithmetic: percentiles and commit latency split by maintenance overlap."""

from __future__ import annotations

import csv
import io
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from services.maintainer.bench import (
    BenchConfig,
    BenchReport,
    CommitTiming,
    Sample,
    latency_split,
    percentile,
)
from services.maintainer.bench_chart import commits_csv, write_outputs
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
        commits=(CommitTiming(1001, 1002), CommitTiming(1004, 1007, 2), CommitTiming(1010, 1011)),
        actions=((1005.0, 1008.0, compaction),),
        samples=(Sample(10.0, 40, 60, 12, 15, True), Sample(20.0, 8, 20, 0, 18, False)),
        started=1000.0,
    )


def test_commits_csv_marks_the_commits_that_ran_beside_maintenance() -> None:
    rows = list(csv.DictReader(io.StringIO(commits_csv(_report()))))
    assert [(r["t_s"], r["latency_s"], r["conflicts"]) for r in rows] == [
        ("1.00", "1.000", "0"),
        ("4.00", "3.000", "2"),
        ("10.00", "1.000", "0"),
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
