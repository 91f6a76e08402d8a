"""The side-by-side with Flink: when the Flink job has drained its topic, and the report."""

from __future__ import annotations

import pytest

from icefjord.bench.drain import Backlog, ComponentFigure, DrainReport
from icefjord.bench.peer import FLINK_NEEDS, FlinkRun, PeerReport, reached, render

pytestmark = pytest.mark.unit


def test_the_job_has_drained_when_its_committed_offsets_reach_every_partitions_end() -> None:
    ends = {0: 100, 1: 0, 2: 50}
    assert reached(ends, {0: 100, 2: 50})  # an empty partition needs no commit
    assert not reached(ends, {0: 100})
    assert not reached(ends, {0: 99, 2: 50})
    assert reached({}, {})


def _report(flink_equal: bool = True, caught_up: bool = True) -> PeerReport:
    backlog = Backlog(600_000, 600_000, 0, 150_000, 1_500_000, 90.0)
    icefjord = DrainReport(
        command="icefjord bench peer",
        started="2026-11-29T03:00:00+00:00",
        schema="bench_drain",
        workload="peer",
        backlog=backlog,
        wall_seconds=100.0,
        caught_up=True,
        components=(
            ComponentFigure("Kafka broker", 10.0, False),
            ComponentFigure("normalizer service", 60.0, True),
            ComponentFigure("watcher service", 1.0, True),
            ComponentFigure("writer service + Spark JVM", 50.0, True),
            ComponentFigure("maintainer service + Spark JVM", 24.0, True),
        ),
        tables=(("bench_drain.items", 450_000, 450_000, True),),
        dead_letters=0,
        normalizer_build="compiled with mypyc",
        machine="2 cores",
    )
    flink = FlinkRun(60.0, 81.0, 20.0, 5.0, caught_up, "flink_bench_drain.items", 450_000,
                     450_000, flink_equal)  # fmt: skip
    return PeerReport("icefjord bench peer", "2026-11-29T03:00:00+00:00", icefjord, flink)


def test_the_report_puts_both_pipelines_side_by_side_with_what_flink_needed() -> None:
    report = _report()
    assert report.flink_changes_per_cpu_second == pytest.approx(1_350_000 / 81.0)
    text = render(report)
    assert "**1,350,000 row changes**" in text
    assert "| Icefjord, its four services | 100.0 | 135.0 | 10,000 | yes |" in text
    assert "| 60.0 | 81.0 | 16,667 | yes |" in text
    assert "- normalizer service: 60.0 s (44.4 us)" in text
    assert "- Kafka broker" not in text  # the stack is not the pipeline's
    assert all(f"- {need}" in text for need in FLINK_NEEDS)
    assert "did not finish" not in text


def test_a_flink_table_that_differs_or_a_job_that_did_not_finish_shows() -> None:
    assert "| NO |" in render(_report(flink_equal=False))
    assert "did not finish in time" in render(_report(caught_up=False))
