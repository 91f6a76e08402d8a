"""The end-to-end benchmark's figures: readings per namespace, counters across restarts,
window and phase statistics, quantile verdicts, goals; the plan's steady stream."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from icefjord.bench.pipeline import SourceCounter, until
from icefjord.bench.stats import (
    Carry,
    PhaseResult,
    Reading,
    Sample,
    Span,
    goal_verdicts,
    p99_at_most,
    reading_of,
    share_within,
    span,
    windows,
)
from icefjord.demo.plan import DDL, Planner, UpdateMany, WorkloadSpec
from icefjord.demo.progress import Scrape, histogram_quantile, parse_metrics

pytestmark = pytest.mark.unit

BOUNDS = (0.25, 0.5, 1.0, 2.0, 3.0, 5.0, 7.5, 10.0, 15.0, 20.0, 30.0, 60.0, float("inf"))


def writer_text(namespace_counts: dict[str, tuple[float, float]]) -> str:
    """applied and a 2-bucket freshness histogram (le=5: first, +Inf: second) per table."""
    lines = [
        "# TYPE icefjord_writer_changes_applied_total counter",
        "# TYPE icefjord_writer_freshness_seconds histogram",
    ]
    for table, (applied, slow) in namespace_counts.items():
        lines.append(
            f'icefjord_writer_changes_applied_total{{table="{table}",op="CREATE"}} {applied}'
        )
        lines.append(
            f'icefjord_writer_freshness_seconds_bucket{{table="{table}",le="5.0"}} {applied}'
        )
        lines.append(
            f'icefjord_writer_freshness_seconds_bucket{{table="{table}",le="+Inf"}} '
            f"{applied + slow}"
        )
        lines.append(f'icefjord_writer_freshness_seconds_count{{table="{table}"}} {applied + slow}')
        lines.append(f'icefjord_writer_freshness_seconds_sum{{table="{table}"}} 1.0')
    return "\n".join(lines) + "\n"


def maintainer_text(files: dict[str, float], compactions: dict[str, float]) -> str:
    lines = ["# TYPE icefjord_table_data_files gauge"]
    lines += [f'icefjord_table_data_files{{table="{t}"}} {n}' for t, n in files.items()]
    lines.append("# TYPE icefjord_maintenance_actions_total counter")
    for t, n in compactions.items():
        lines.append(
            "icefjord_maintenance_actions_total"
            f'{{table="{t}",action="COMPACT_DATA_FILES",status="SUCCEEDED"}} {n}'
        )
        lines.append(
            "icefjord_maintenance_actions_total"
            f'{{table="{t}",action="COMPACT_DATA_FILES",status="FAILED"}} 7'
        )
        lines.append(
            "icefjord_maintenance_actions_total"
            f'{{table="{t}",action="EXPIRE_SNAPSHOTS",status="SUCCEEDED"}} 5'
        )
    return "\n".join(lines) + "\n"


def test_reading_counts_only_the_namespace_tables() -> None:
    scrape = Scrape(
        at=10.0,
        services={
            "writer": parse_metrics(
                writer_text({"b.x": (10, 1), "b.y": (5, 0), "b_2.x": (100, 100), "shop.x": (9, 9)})
            ),
            "maintainer": parse_metrics(
                maintainer_text({"b.x": 3, "b.y": 4, "other.z": 50}, {"b.x": 2, "other.z": 9})
            ),
        },
        source_changes=42,
    )
    reading = reading_of(scrape, "b", 42)
    assert reading.applied == 15
    assert reading.freshness == ((5.0, 15.0), (float("inf"), 16.0))
    assert reading.data_files == 7
    # failed compactions, other actions and other namespaces not counted
    assert reading.compactions == 2
    assert reading.source_changes == 42


def test_reading_of_a_service_not_answering_is_none() -> None:
    reading = reading_of(Scrape(1.0, {"writer": None, "maintainer": None}, 0), "b", 0)
    assert reading.applied is None and reading.freshness is None and reading.data_files is None


def _reading(at: float, applied: float | None, source: int = 0) -> Reading:
    return Reading(at, source, applied, applied, None, None, None, None)


@given(st.lists(st.tuples(st.integers(0, 1000), st.booleans()), min_size=1, max_size=30))
def test_carried_counters_survive_restarts(steps: list[tuple[int, bool]]) -> None:
    """A restart (the counter starts again from 0, then counts the new increment) between
    any two scrapes: the carried total is the sum of the increments after the first
    reading, as long as the restarted counter shows a lower value than before."""
    carry = Carry(started_at=0.0)
    raw = 50.0
    carry.add(_reading(0.0, raw), "p")
    expected = 0.0
    sample = None
    for i, (increment, restart) in enumerate(steps, start=1):
        raw = increment if restart and increment < raw else raw + increment
        expected += increment
        sample = carry.add(_reading(float(i), raw), "p")
    assert sample is not None
    assert sample.applied == expected


def test_carry_counts_across_one_restart_exactly() -> None:
    carry = Carry(started_at=100.0)
    values = [10.0, 25.0, 40.0, 5.0, 12.0]  # restarted after 40: 5 and 7 more
    samples = [carry.add(_reading(100.0 + i, v, source=i), "p") for i, v in enumerate(values)]
    assert [s.applied for s in samples] == [0.0, 15.0, 30.0, 35.0, 42.0]
    silent = carry.add(_reading(106.0, None), "p")  # the writer did not answer
    assert silent.applied == 42.0
    assert carry.add(_reading(107.0, 20.0), "p").applied == 50.0
    assert samples[-1].t == 4.0
    assert span(samples[1], samples[4]).applied == 27.0


def _sample(t: float, applied: float, source: int, fresh: dict[float, float]) -> Sample:
    cumulative, running = [], 0.0
    for bound in BOUNDS:
        running += fresh.get(bound, 0.0)
        cumulative.append((bound, running))
    return Sample(t, "p", source, applied, applied, tuple(cumulative), None, 0.0, None)


def test_span_rates_and_quantiles_of_the_increase_only() -> None:
    before = _sample(10.0, 100.0, 1000, {30.0: 500})  # old, slow observations
    after = _sample(20.0, 600.0, 6000, {30.0: 500, 1.0: 50, 2.0: 50})
    s = span(before, after)
    assert s.seconds == 10.0
    assert s.source_rate == 500.0 and s.applied_rate == 50.0
    assert s.observations == 100.0
    assert s.p50_s is not None and 0.5 < s.p50_s <= 1.0
    assert s.p99_s is not None and 1.0 < s.p99_s <= 2.0


def test_windows_pair_consecutive_samples() -> None:
    samples = [_sample(float(t), 10.0 * t, 100 * t, {1.0: t}) for t in range(5)]
    series = windows(samples)
    assert [s.t for s, _ in series] == [1.0, 2.0, 3.0, 4.0]
    assert all(w.source_rate == 100.0 and w.applied_rate == 10.0 for _, w in series)


@given(st.lists(st.integers(0, 200), min_size=len(BOUNDS), max_size=len(BOUNDS)))
def test_p99_verdict_at_a_bucket_bound_agrees_with_the_quantile(counts: list[int]) -> None:
    cumulative, running = [], 0.0
    for bound, count in zip(BOUNDS, counts, strict=True):
        running += count
        cumulative.append((bound, running))
    buckets = tuple(cumulative)
    for bound in (5.0, 15.0):
        verdict = p99_at_most(buckets, bound)
        q = histogram_quantile(0.99, buckets)
        if running == 0:
            assert verdict is None and q is None
        else:
            assert q is not None
            assert verdict == (q <= bound)


def test_share_within() -> None:
    buckets = ((5.0, 99.0), (15.0, 100.0), (float("inf"), 100.0))
    assert share_within(buckets, 5.0) == 0.99
    assert share_within(buckets, 4.0) == 0.0
    assert share_within((), 5.0) is None
    assert p99_at_most(buckets, 5.0) is True
    assert p99_at_most(((5.0, 98.0), (float("inf"), 100.0)), 5.0) is False


def _phase(
    kind: str,
    *,
    rate: float | None = None,
    changes: int = 0,
    source_s: float = 60.0,
    drain_s: float = 2.0,
    fresh: dict[float, float] | None = None,
    rows: int = 0,
    caught_up: bool = True,
) -> PhaseResult:
    buckets = _sample(0, 0, 0, fresh or {1.0: 100}).freshness
    figures = Span(0.0, source_s + drain_s, changes, changes, changes, 100.0, 1.0, 2.0, buckets)
    return PhaseResult(kind, kind, rate, source_s, drain_s, caught_up, figures, rows)


def test_goals_met() -> None:
    verdicts = goal_verdicts(
        [
            _phase("snapshot", source_s=0.0, drain_s=1.5, rows=200_000),
            _phase("rate", rate=1000.0, changes=60_000),
            _phase("max", changes=12_000 * 62, fresh={10.0: 99, 20.0: 1}),
        ]
    )
    assert [v.met for v in verdicts] == [True, True, True]


def test_goals_missed_and_not_measured() -> None:
    verdicts = goal_verdicts(
        [
            _phase("snapshot", source_s=0.0, drain_s=10.0, rows=200_000),  # 20,000 rows/s
            _phase("rate", rate=1000.0, changes=60_000, fresh={7.5: 2, 1.0: 98}),
            # fast, but p99 above 15 s: does not count for the sustained goal
            _phase("max", changes=20_000 * 62, fresh={20.0: 5, 1.0: 95}),
        ]
    )
    assert [v.met for v in verdicts] == [False, False, False]
    assert "in rate" in verdicts[1].measured  # max is faster, but its p99 is above 15 s
    slow_only = goal_verdicts([_phase("max", changes=1000, fresh={20.0: 5})])
    assert "no phase kept p99" in slow_only[1].measured
    short = goal_verdicts([_phase("rate", rate=1000.0, changes=30_000)])  # 500/s achieved
    assert short[0].met is None and short[1].met is False and short[2].met is None
    assert goal_verdicts([])[2].met is None


def test_a_phase_that_did_not_catch_up_has_no_end_to_end_rate() -> None:
    phase = _phase("max", changes=1000, caught_up=False)
    assert phase.end_to_end_rate is None
    assert goal_verdicts([phase])[1].met is None


def test_the_sustained_rate_is_the_source_rate_the_pipeline_kept_pace_with() -> None:
    # 10,000/s offered for 120 s and drained in 1.5 s: end to end below 10,000/s, as it
    # would be for any pipeline with a latency, but the load was carried.
    kept = _phase("rate", rate=10_000.0, changes=1_200_000, source_s=120.0, drain_s=1.5)
    assert kept.end_to_end_rate == pytest.approx(1_200_000 / 121.5)
    assert kept.sustained_rate == pytest.approx(10_000.0)
    verdict = goal_verdicts([kept])[1]
    assert verdict.met is True
    assert "10,000 changes/s sustained in rate" in verdict.measured
    assert "end to end 9,877/s" in verdict.measured
    # A backlog that outlasts the 15 s bound was not kept pace with, whatever its p99.
    behind = _phase("rate", rate=10_000.0, changes=1_200_000, source_s=120.0, drain_s=15.5)
    assert behind.sustained_rate is None
    verdict = goal_verdicts([behind])[1]
    assert verdict.met is False
    assert "no phase with p99 <= 15 s drained within 15 s" in verdict.measured
    # Kept pace, but below the goal's rate.
    slow = _phase("rate", rate=9_000.0, changes=1_080_000, source_s=120.0, drain_s=1.0)
    assert goal_verdicts([slow])[1].met is False
    # A phase that did not catch up, or a snapshot, has none.
    assert _phase("rate", rate=10.0, changes=600, caught_up=False).sustained_rate is None
    assert _phase("snapshot", source_s=0.0, rows=10).sustained_rate is None


def test_source_counter_counts_executed_transactions() -> None:
    planner = Planner(WorkloadSpec(initial_rows=0, seed=3))
    plan = list(planner.steady(1000.0, 1.0))
    counter = SourceCounter()
    seen = 0
    for tx in counter.counted(plan):
        assert counter.value == seen  # not counted before it ran
        seen += len(tx.ops)
    assert counter.value == seen == sum(len(tx.ops) for tx in plan)
    # A set-based statement counts every row it changes.
    planner = Planner(WorkloadSpec(initial_rows=200, seed=3))
    list(planner.seed())
    set_based = list(planner.steady(5000.0, 0.5, rows_per_statement=20))
    counter = SourceCounter()
    list(counter.counted(set_based))
    rows = sum(len(op.keys) for tx in set_based for op in tx.ops if isinstance(op, UpdateMany))
    assert counter.value == rows > len([op for tx in set_based for op in tx.ops])


def test_until_stops_at_the_deadline() -> None:
    planner = Planner(WorkloadSpec(initial_rows=0, seed=3))
    assert list(until(planner.steady(None), 0.0)) == []


def test_steady_stream_is_paced_dml() -> None:
    planner = Planner(WorkloadSpec(initial_rows=0, seed=5, ops_per_tx=4))
    plan = list(planner.steady(2000.0, 5.0))
    ops = sum(len(tx.ops) for tx in plan)
    assert not any(isinstance(op, DDL) for tx in plan for op in tx.ops)
    assert all(tx.at_s < 5.0 for tx in plan)
    assert plan[1].at_s == pytest.approx(len(plan[0].ops) / 2000.0)
    # Offered exactly: the last transaction starts before 5 s, with the 10,000th row or
    # fewer due before it (a transaction holds at most 2 * 4 - 1 operations).
    assert 10_000 <= ops < 10_000 + 7
    unpaced = planner.steady(None, ops_per_tx=20)
    first = [next(unpaced) for _ in range(50)]
    assert all(tx.at_s == 0.0 for tx in first)
    assert 10 < sum(len(tx.ops) for tx in first) / 50 < 30
    with pytest.raises(ValueError):
        next(planner.steady(None, 10.0))


def test_a_warm_up_phase_is_judged_against_no_goal() -> None:
    # A cold start right after the snapshot (p99 above 5 s), then a steady phase within it.
    warm_up = _phase("warm-up", rate=1000.0, changes=60_000, fresh={10.0: 5, 1.0: 95})
    steady = _phase("rate", rate=1000.0, changes=60_000)
    verdicts = goal_verdicts([warm_up, steady])
    assert verdicts[2].met is True
    assert "sustained in rate " in verdicts[1].measured
    assert verdicts[1].measured.endswith(f"p99 {steady.figures.p99_s:.1f} s")
    # Without the steady phase the 1,000/s goal is not measured, never taken from the warm-up.
    alone = goal_verdicts([warm_up])
    assert alone[1].met is None and alone[2].met is None
