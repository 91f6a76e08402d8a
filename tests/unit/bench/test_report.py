"""The end-to-end benchmark's report from fake samples: markdown, CSV series, PNG chart."""

from __future__ import annotations

import csv
import dataclasses
import io
from pathlib import Path

import pytest

import icefjord.bench.report as report_module
from icefjord.bench.cpu import ComponentUse, Coverage, CpuUse
from icefjord.bench.report import (
    BenchReport,
    Machine,
    TableCheck,
    cpu_rows,
    jvm_rows,
    render_markdown,
    series_csv,
    write_report,
)
from icefjord.bench.stats import PhaseResult, Sample, span

pytestmark = pytest.mark.unit

BOUNDS = (1.0, 5.0, 15.0, 30.0, float("inf"))


def _samples() -> list[Sample]:
    """A snapshot (0-10 s), a 1000/s phase (10-70 s) and a max phase (70-130 s)."""
    out = []
    applied = fresh_fast = fresh_slow = 0.0
    source = 0
    for step in range(66):
        t = 2.0 * step
        phase = "snapshot" if t < 10 else ("1,000/s" if t < 70 else "max")
        if phase == "1,000/s":
            source += 2000
            applied += 1900
            fresh_fast += 1900
        elif phase == "max":
            source += 9000
            applied += 8000
            fresh_slow += 8000
        cumulative = (
            (1.0, fresh_fast),
            (5.0, fresh_fast),
            (15.0, fresh_fast),
            (30.0, fresh_fast + fresh_slow),
            (float("inf"), fresh_fast + fresh_slow),
        )
        files = 3.0 + step % 7
        out.append(
            Sample(t, phase, source, applied, applied, cumulative, files, float(step // 20), None)
        )
    return out


def _report(verified: bool = True) -> BenchReport:
    samples = _samples()

    def at(t: float) -> Sample:
        return next(s for s in samples if s.t == t)

    phases = (
        PhaseResult("snapshot", "snapshot", None, 0.0, 10.0, True, span(at(0), at(10)), 50_000),
        PhaseResult("1,000/s", "rate", 1000.0, 56.0, 2.0, True, span(at(10), at(68))),
        PhaseResult("max", "max", None, 56.0, 4.0, True, span(at(70), at(130))),
    )
    return BenchReport(
        command="icefjord bench pipeline --rates 1000",
        started="2025-01-01T12:00:00+00:00",
        source="postgres",
        schema="bench_e2e",
        machine=Machine(
            2, (1.5, 1.0, 0.5), (3.25, 2.0, 1.0), "Linux-test", "3.11.9", "compiled with mypyc"
        ),
        phases=phases,
        samples=tuple(samples),
        tables=(
            TableCheck("bench_e2e.customers", 100, 100, True),
            TableCheck("bench_e2e.orders", 10, 9 if not verified else 10, verified),
        ),
        dead_letters=0,
        verified=verified,
        notes=("a note",),
    )


def test_markdown_has_goals_phases_machine_and_verdict() -> None:
    report = _report()
    text = render_markdown(report, "bench.png", None)
    goals = text.split("## Goals")[1].split("## Phases")[0]
    # 50,000 rows in 10 s: missed; the max phase is all above 15 s, so the 1000/s phase is
    # the fastest within 15 s: missed; 1000/s with every record within 1 s: met.
    rows = [line for line in goals.splitlines() if line.startswith("| ") and "goal" not in line]
    assert len(rows) == 3
    assert "5,000 rows/s" in rows[0] and rows[0].endswith("**missed** |")
    assert rows[1].endswith("**missed** |") and "in 1,000/s" in rows[1]
    assert rows[2].endswith("**met** |")
    assert "| max | max |" in text
    # Both phases drained within 15 s: each sustained its source's rate.
    header = next(line for line in text.splitlines() if line.startswith("| phase |"))
    rate_row = next(line for line in text.splitlines() if line.startswith("| 1,000/s |"))
    columns = [c.strip() for c in header.split("|")]
    cells = dict(zip(columns, (c.strip() for c in rate_row.split("|")), strict=True))
    assert cells["sustained/s"] == cells["source/s"] == "1,036"
    assert cells["end to end/s"] == "1,000"
    assert "cores: 2" in text and "3.25 / 2.00 / 1.00" in text
    assert "- normalizer and writer: compiled with mypyc" in text
    assert "`icefjord bench pipeline --rates 1000`" in text
    assert "every Iceberg table equals its source" in text
    assert "![freshness and throughput over time](bench.png)" in text
    assert "- a note" in text


def test_markdown_says_when_the_output_is_wrong() -> None:
    text = render_markdown(_report(verified=False), None, "matplotlib is not installed")
    assert "VERIFICATION FAILED" in text
    assert "**DIFFERENT**" in text
    assert "No chart: matplotlib is not installed" in text and "pip install" in text


def test_markdown_leaves_out_an_unknown_normalizer_build() -> None:
    report = _report()
    machine = Machine(2, (1.5, 1.0, 0.5), (3.25, 2.0, 1.0), "Linux-test", "3.11.9")
    text = render_markdown(dataclasses.replace(report, machine=machine), None, "no chart")
    assert "normalizer:" not in text.split("## Machine and command")[1].split("##")[0]


def test_series_csv_has_one_line_per_window() -> None:
    samples = _samples()
    lines = series_csv(samples).splitlines()
    rows = list(csv.DictReader(io.StringIO(series_csv(samples))))
    assert len(lines) == len(samples) == len(rows) + 1  # header + one per window
    row = rows[9]  # the window ending at 20 s, in the 1000/s phase
    assert row["t_s"] == "20.0" and row["phase"] == "1,000/s"
    assert float(row["source_per_s"]) == 1000.0 and float(row["applied_per_s"]) == 950.0
    assert float(row["freshness_p99_s"]) <= 1.0
    assert rows[0]["freshness_p99_s"] == ""  # no commit in the snapshot's fake windows


def test_write_report_draws_a_png(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    path, chart = write_report(_report(), tmp_path / "out")
    assert path == tmp_path / "out" / "report.md"
    assert chart is not None and chart.stat().st_size > 1000
    assert chart.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert (tmp_path / "out" / "series.csv").stat().st_size > 0
    assert "(bench.png)" in path.read_text()


def test_write_report_without_matplotlib(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def no_matplotlib(report: BenchReport, path: Path) -> None:
        raise ImportError("No module named 'matplotlib'")

    monkeypatch.setattr(report_module, "plot", no_matplotlib)
    path, chart = write_report(_report(), tmp_path)
    assert chart is None and not (tmp_path / "bench.png").exists()
    assert "pip install 'matplotlib" in path.read_text()


def _cpu(wall: float, *uses: tuple[str, float | None, Coverage]) -> CpuUse:
    components = tuple(ComponentUse(name, seconds, coverage) for name, seconds, coverage in uses)
    return CpuUse(wall, 2, components, machine_seconds=1.9 * wall)


def _report_with_cpu() -> BenchReport:
    report = _report()
    cpus = (
        _cpu(
            10.0,
            ("PostgreSQL", 2.0, "whole"),
            ("writer service + Spark JVM", 9.0, "whole"),
            ("bench client (workload, sampling)", 1.0, "whole"),
        ),
        _cpu(
            60.0,
            ("PostgreSQL", 15.0, "whole"),
            ("writer service + Spark JVM", 30.0, "partial"),
            ("bench client (workload, sampling)", 12.0, "whole"),
        ),
        _cpu(
            60.0,
            ("PostgreSQL", 40.0, "whole"),
            ("writer service + Spark JVM", None, "stopped"),
            ("bench client (workload, sampling)", 20.0, "whole"),
            ("maintainer service + Spark JVM", None, "absent"),
        ),
    )
    phases = tuple(dataclasses.replace(p, cpu=c) for p, c in zip(report.phases, cpus, strict=True))
    return dataclasses.replace(report, phases=phases)


def test_cpu_rows_one_column_per_phase_with_shares() -> None:
    header, rows = cpu_rows(_report_with_cpu().phases)
    assert header == ["component", "snapshot", "1,000/s", "max"]
    by_name = {row[0]: row[1:] for row in rows}
    assert by_name["PostgreSQL"] == ["2.0 (10%)", "15.0 (12%)", "40.0 (33%)"]
    assert by_name["writer service + Spark JVM"] == ["9.0 (45%)", ">= 30.0 (25%)", "stopped"]
    assert by_name["maintainer service + Spark JVM"] == ["-", "-", "-"]
    assert by_name["**all listed**"] == ["12.0 (60%)", ">= 57.0 (48%)", ">= 60.0 (50%)"]
    assert by_name["whole machine (every process)"] == ["19.0 (95%)", "114.0 (95%)", "114.0 (95%)"]
    assert by_name["wall s"] == ["10.0", "60.0", "60.0"]
    assert by_name["available s (cores x wall s)"] == [
        "20.0 (2 x 10.0)",
        "120.0 (2 x 60.0)",
        "120.0 (2 x 60.0)",
    ]
    assert [row[0] for row in rows][:4] == [
        "PostgreSQL",
        "writer service + Spark JVM",
        "bench client (workload, sampling)",
        "maintainer service + Spark JVM",
    ]


def test_markdown_has_the_cpu_table_between_phases_and_files() -> None:
    text = render_markdown(_report_with_cpu(), "bench.png", None)
    cpu = text.split("## CPU seconds by component")[1].split("## Files")[0]
    assert "## Phases" in text.split("## CPU seconds by component")[0]
    assert "| component | snapshot | 1,000/s | max |" in cpu
    assert "| PostgreSQL | 2.0 (10%) | 15.0 (12%) | 40.0 (33%) |" in cpu
    assert "lower bound" in cpu
    assert "| max | max |" in text and "## Verification" in text  # the rest stays


def test_markdown_without_cpu_figures_says_unavailable() -> None:
    text = render_markdown(_report(), "bench.png", None)
    cpu = text.split("## CPU seconds by component")[1].split("## Files")[0]
    assert "CPU accounting is unavailable" in cpu
    assert "| component |" not in cpu


JVM_TITLE = "### Of which JVM JIT compilers and garbage collectors"


def _report_with_jvm_cpu() -> BenchReport:
    """The CPU report, with JVM figures for the broker (its JIT falling as it warms up) and
    the writer (restarted, then stopped); PostgreSQL has none (no JVM)."""
    report = _report()

    def cpu(wall: float, *uses: ComponentUse) -> CpuUse:
        return CpuUse(wall, 2, uses, machine_seconds=1.9 * wall)

    broker, writer = "Kafka broker", "writer service + Spark JVM"
    cpus = (
        cpu(
            10.0,
            ComponentUse("PostgreSQL", 2.0, "whole", 0.0, 0.0),
            ComponentUse(broker, 6.0, "whole", 4.0, 0.25),
            ComponentUse(writer, 9.0, "whole", 3.0, 1.0),
        ),
        cpu(
            60.0,
            ComponentUse("PostgreSQL", 15.0, "whole", 0.0, 0.0),
            ComponentUse(broker, 21.0, "whole", 11.6, 1.2),
            ComponentUse(writer, 30.0, "partial", 8.0, 2.5),
        ),
        cpu(
            60.0,
            ComponentUse("PostgreSQL", 40.0, "whole", 0.0, 0.0),
            ComponentUse(broker, 12.0, "whole", 1.0, 0.75),
            ComponentUse(writer, None, "stopped"),
            ComponentUse("maintainer service + Spark JVM", None, "absent"),
        ),
    )
    phases = tuple(dataclasses.replace(p, cpu=c) for p, c in zip(report.phases, cpus, strict=True))
    return dataclasses.replace(report, phases=phases)


def test_jvm_rows_only_components_with_jit_or_gc_seconds() -> None:
    header, rows = jvm_rows(_report_with_jvm_cpu().phases)
    assert header == ["component", "snapshot", "1,000/s", "max"]
    assert rows == [
        ["Kafka broker", "JIT 4.0, GC 0.2", "JIT 11.6, GC 1.2", "JIT 1.0, GC 0.8"],
        ["writer service + Spark JVM", "JIT 3.0, GC 1.0", ">= JIT 8.0, GC 2.5", "-"],
    ]


def test_jvm_rows_none_without_jvm_figures() -> None:
    # ComponentUse's defaults: no JVM figures (as from a reading without JVMs).
    assert jvm_rows(_report_with_cpu().phases)[1] == []
    assert jvm_rows(_report().phases) == (["component"], [])


def test_markdown_has_the_jvm_table_after_the_cpu_table() -> None:
    text = render_markdown(_report_with_jvm_cpu(), "bench.png", None)
    cpu = text.split("## CPU seconds by component")[1].split("## Files")[0]
    main, jvm = cpu.split(JVM_TITLE)
    assert "| PostgreSQL | 2.0 (10%) | 15.0 (12%) | 40.0 (33%) |" in main
    assert "| Kafka broker | JIT 4.0, GC 0.2 | JIT 11.6, GC 1.2 | JIT 1.0, GC 0.8 |" in jvm
    assert "PostgreSQL" not in jvm
    assert "warm-up" in jvm and "not in addition" in jvm


def test_markdown_without_jvm_figures_has_no_jvm_table() -> None:
    text = render_markdown(_report_with_cpu(), "bench.png", None)
    assert "| component | snapshot | 1,000/s | max |" in text
    assert JVM_TITLE not in text and "JIT" not in text
    assert JVM_TITLE not in render_markdown(_report(), "bench.png", None)
