"""The figures of `icefjord bench recovery`, from production times and commits alone."""

from __future__ import annotations

import math
from pathlib import Path

from icefjord.bench.recovery import (
    Commit,
    RecoveryResult,
    _steady_p99,
    commit_freshness,
    commits_csv,
    kill_figures,
    staleness,
    write_outputs,
)

# One record every 0.1 s from t=100: offset o was produced at 100 + o / 10.
PRODUCED = [100 + o / 10 for o in range(1000)]


def test_a_commits_freshness_is_that_of_the_oldest_record_it_made_visible() -> None:
    assert commit_freshness(PRODUCED, Commit(101.5, 10), Commit(103.0, 25)) == 2.0
    # A commit that made nothing new visible (a maintenance-like no-op) has none.
    assert commit_freshness(PRODUCED, Commit(101.5, 10), Commit(103.0, 10)) is None


def test_kill_figures_follow_the_commits_after_the_kill() -> None:
    commits = [
        Commit(101.2, 10),  # before the kill: records 0-9
        Commit(102.1, 19),
        # killed at 102.5; the restarted writer commits at 110.0 what piled up since 103.9
        Commit(110.0, 99),  # oldest record: offset 19, produced 101.9: 8.1 s old
        Commit(112.0, 118),  # oldest: offset 99, produced 109.9: 2.1 s old: fresh again
        Commit(114.0, 138),
    ]
    figures = kill_figures(PRODUCED, commits, killed_at=102.5, fresh_s=5.0)
    assert math.isclose(figures.first_commit_s or 0, 7.5)
    assert math.isclose(figures.fresh_again_s or 0, 9.5)
    assert math.isclose(figures.worst_s or 0, 8.1)


def test_a_kill_with_no_fresh_commit_after_it_reports_what_it_saw() -> None:
    commits = [Commit(101.2, 10), Commit(120.0, 50)]  # offset 10: 19.0 s old, never fresh again
    figures = kill_figures(PRODUCED, commits, killed_at=105.0, fresh_s=5.0)
    assert figures.first_commit_s == 15.0
    assert figures.fresh_again_s is None
    assert math.isclose(figures.worst_s or 0, 19.0)
    nothing = kill_figures(PRODUCED, commits, killed_at=130.0, fresh_s=5.0)
    assert (nothing.first_commit_s, nothing.fresh_again_s, nothing.worst_s) == (None, None, None)


def test_the_steady_p99_counts_every_record_before_the_cut() -> None:
    # Records 0-9 made visible at 101.0 (1.0 s down to 0.1 s old), 10-19 at 105.0.
    commits = [Commit(101.0, 10), Commit(105.0, 20)]
    assert math.isclose(_steady_p99(PRODUCED, commits, until=102.0), 1.0)
    assert math.isclose(_steady_p99(PRODUCED, commits, until=106.0), 4.0)
    assert math.isnan(_steady_p99(PRODUCED, commits, until=100.0))


def _result() -> RecoveryResult:
    commits = (Commit(101.2, 10), Commit(102.1, 19), Commit(110.0, 99), Commit(112.0, 118))
    kill = kill_figures(PRODUCED, commits, killed_at=102.5, fresh_s=5.0)
    return RecoveryResult("bench.r", 10, (kill,), 1.0, tuple(PRODUCED), commits, 5.0)


def test_the_csv_has_a_row_per_commit_with_its_oldest_records_freshness() -> None:
    lines = commits_csv(_result()).splitlines()
    assert lines[0] == "t_s,next_offset,oldest_record_s"
    assert lines[1:] == ["1.20,10,1.20", "2.10,19,1.10", "10.00,99,8.10", "12.00,118,2.10"]


def test_the_outputs_are_the_csv_and_a_chart(tmp_path: Path) -> None:
    written = write_outputs(_result(), tmp_path / "out")
    assert [p.name for p in written] == ["commits.csv", "recovery.png"]
    assert (tmp_path / "out" / "recovery.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_staleness_is_a_sawtooth_that_falls_at_each_commit() -> None:
    # Records every 0.1 s from 100.0; commits make records visible up to their offsets.
    commits = [Commit(101.0, 10), Commit(105.0, 20), Commit(106.0, 60)]
    points = staleness(PRODUCED, commits)
    expected = [
        (101.0, 1.0),  # record 0 (100.0) waited 1.0 s, then 10 (101.0) is the oldest: 0
        (101.0, 0.0),
        (105.0, 4.0),  # record 10 (101.0) waited until 105.0; then 20 (102.0): 3.0 s
        (105.0, 3.0),
        (106.0, 4.0),  # record 20 waited 4.0 s; record 60 (106.0) is not produced before
        (106.0, 0.0),
    ]
    assert [(t, round(age, 6)) for t, age in points] == expected
