"""The per-store comparison: choosing stores, their settings, the side-by-side rows, the
throughput verdict and the comparison report."""

from __future__ import annotations

from pathlib import Path

import pytest

from icefjord.bench.cpu import ComponentUse, CpuUse
from icefjord.bench.report import BenchReport, Machine
from icefjord.bench.stats import PhaseResult, Sample, span
from icefjord.bench.stores import (
    comparison_rows,
    parse_stores,
    plot,
    render,
    store_settings,
    throughput_verdict,
)
from icefjord.local.settings import LocalSettings

pytestmark = pytest.mark.unit


def _phase(
    name: str, kind: str, changes: int, source_s: float, drain_s: float, slow: int
) -> PhaseResult:
    """A phase of ``changes`` changes, ``slow`` of them fresh only after 15-30 s."""
    fast = changes - slow
    buckets = ((1.0, 0.0), (5.0, float(fast)), (15.0, float(fast)), (30.0, float(changes)),
               (float("inf"), float(changes)))  # fmt: skip
    zero = tuple((bound, 0.0) for bound, _ in buckets)
    first = Sample(0.0, name, 0, 0.0, 0.0, zero, None, 0.0, None)
    last = Sample(source_s + drain_s, name, changes, changes, changes, buckets, 4.0, 0.0, None)
    cpu = CpuUse(source_s + drain_s, 2, (ComponentUse("writer", changes / 1000, "whole"),), None)
    return PhaseResult(
        name, kind, 1000.0 if kind == "rate" else None, source_s, drain_s, True,
        span(first, last), cpu=cpu,
    )  # fmt: skip


def _report(max_drain_s: float, slow: int = 0, verified: bool = True) -> BenchReport:
    phases = (
        _phase("1,000/s", "rate", 60_000, 60.0, 2.0, 0),
        _phase("max", "max", 600_000, 60.0, max_drain_s, slow),
    )
    machine = Machine(2, (1.0, 1.0, 1.0), (2.0, 2.0, 2.0), "Linux", "3.11")
    return BenchReport(
        "icefjord bench pipeline --stores file,s3", "2026-11-28T17:00:00+00:00", "postgres",
        "bench_e2e", machine, phases, (), (), 0, verified,
    )  # fmt: skip


def test_stores_are_parsed_in_the_users_order_once_each() -> None:
    assert parse_stores("s3, file") == ("s3", "file")
    assert parse_stores("file") == ("file",)
    for bad in ("", "gcs", "file,file", "file,,nfs"):
        with pytest.raises(ValueError, match="--stores"):
            parse_stores(bad)


def test_each_store_has_its_warehouse_and_catalog(tmp_path: Path) -> None:
    base = LocalSettings(state_dir=tmp_path)
    s3 = store_settings(base, "s3")
    assert (s3.warehouse_store, s3.catalog_store) == ("s3", "postgres")
    assert s3.catalog_properties()["warehouse"].startswith("s3://")
    local = store_settings(s3, "file")
    assert (local.warehouse_store, local.catalog_store) == ("file", "sqlite")
    assert local.state == base.state and local.kafka_port == base.kafka_port


def test_rows_put_each_stores_figures_side_by_side() -> None:
    header, rows = comparison_rows({"file": _report(0.0), "s3": _report(60.0, slow=60_000)})
    assert header[0] == "phase" and header[1:5] == [
        "file e2e/s", "file sustained/s", "file p99 s", "file CPU ms",
    ]  # fmt: skip
    by_phase = {row[0]: row[1:] for row in rows}
    assert by_phase["max"][0] == "10,000"  # 600,000 changes in 60 s, no drain
    assert by_phase["max"][4] == "5,000"  # the same in 60 + 60 s
    assert by_phase["max"][5] == "-"  # a 60 s drain is no sustained rate
    assert float(by_phase["max"][6]) > 15.0 > float(by_phase["max"][2])
    assert by_phase["1,000/s"][3] == "1.00"  # 60 CPU s for 60,000 changes


def test_s3_throughput_is_judged_against_local_disk_in_the_same_run() -> None:
    close = throughput_verdict({"file": _report(0.0), "s3": _report(10.0)})
    assert close.met is True and "(86%)" in close.measured
    far = throughput_verdict({"file": _report(0.0), "s3": _report(60.0)})
    assert far.met is False and "(50%)" in far.measured
    assert throughput_verdict({"s3": _report(0.0)}).met is None


def test_the_comparison_links_each_store_and_says_when_one_failed(tmp_path: Path) -> None:
    good = render({"file": _report(0.0), "s3": _report(10.0)}, "stores.png", "cmd")
    assert "[file/report.md](file/report.md)" in good and "[s3/report.md]" in good
    assert "every Iceberg table equals its source, on every store" in good
    assert "S3 throughput >= 80%" in good and "**met**" in good
    bad = render({"file": _report(0.0), "s3": _report(10.0, verified=False)}, None, "cmd")
    assert "FAILED on a store" in bad and "No chart drawn." in bad
    chart = tmp_path / "stores.png"
    plot({"file": _report(0.0), "s3": _report(10.0)}, chart)
    assert chart.read_bytes().startswith(b"\x89PNG")
