"""``icefjord bench pipeline --stores file,s3``: the same phases on each warehouse store, one
after the other in one run, and a report that sets their figures side by side.

*file* is the warehouse on local disk with the catalog on SQLite (the laptop default); *s3*
is the warehouse on the stack's S3 server with the catalog in its PostgreSQL (the
production layout, docs/object-storage.md). Both share one state directory: Kafka, the
registry and PostgreSQL stay up, and between the runs the services are restarted with the
next store's catalog (``LocalStack.up`` rewrites the catalog's properties file). Each store
keeps its own full report in ``<out>/<store>/``; ``<out>/report.md`` and ``stores.png``
compare them. :func:`comparison_rows`, :func:`throughput_verdict` and :func:`render` are pure.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from rich.console import Console

from icefjord.bench.pipeline import BenchOptions, BenchResult, run_bench
from icefjord.bench.report import BenchReport, markdown_table, number, seconds, verdict_mark
from icefjord.bench.stats import PhaseResult, Verdict
from icefjord.local.objectstore import ObjectStore
from icefjord.local.services import service_processes
from icefjord.local.settings import LocalSettings
from icefjord.local.stack import LocalStack

Store = Literal["file", "s3"]
STORES: tuple[Store, ...] = ("file", "s3")
THROUGHPUT_SHARE_GOAL = 0.8
"""S3's throughput at least this share of local disk's, measured in the same run."""

LABELS: Mapping[Store, str] = {
    "file": "local disk + SQLite catalog",
    "s3": "S3 (SeaweedFS) + PostgreSQL catalog",
}


def store_settings(settings: LocalSettings, store: Store) -> LocalSettings:
    """``settings`` with the warehouse and the catalog of ``store``."""
    catalog = "sqlite" if store == "file" else "postgres"
    return settings.model_copy(update={"warehouse_store": store, "catalog_store": catalog})


def parse_stores(text: str) -> tuple[Store, ...]:
    """``file,s3`` -> the stores in that order; raises ValueError on anything else."""
    names = [name.strip() for name in text.split(",") if name.strip()]
    unknown = [name for name in names if name not in STORES]
    if unknown or not names or len(set(names)) != len(names):
        raise ValueError(f"--stores takes file and/or s3 once each, not {text!r}")
    return tuple(name for store in names for name in STORES if name == store)


def _per_change(phase: PhaseResult) -> float | None:
    """CPU milliseconds of every listed component per source change (None: not measured)."""
    changes = phase.snapshot_rows if phase.kind == "snapshot" else phase.figures.source_changes
    if phase.cpu is None or changes <= 0:
        return None
    return phase.cpu.listed_seconds * 1000 / changes


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def comparison_rows(reports: Mapping[Store, BenchReport]) -> tuple[list[str], list[list[str]]]:
    """Header and rows: one row per phase (in the first store's order), for each store its
    end-to-end changes/s, sustained changes/s, p99 freshness and CPU ms per change."""
    stores = list(reports)
    header = ["phase"]
    for store in stores:
        header += [f"{store} e2e/s", f"{store} sustained/s", f"{store} p99 s", f"{store} CPU ms"]
    names = [p.name for p in next(iter(reports.values())).phases] if reports else []
    rows = []
    for name in names:
        row = [name]
        for store in stores:
            phase = next((p for p in reports[store].phases if p.name == name), None)
            if phase is None:
                row += ["-"] * 4
                continue
            row += [
                number(phase.end_to_end_rate),
                number(phase.sustained_rate),
                seconds(phase.figures.p99_s),
                _ms(_per_change(phase)),
            ]
        rows.append(row)
    return header, rows


def throughput_verdict(reports: Mapping[Store, BenchReport]) -> Verdict:
    """S3's end-to-end changes/s in the unpaced phase against local disk's in the same run."""
    goal = f"S3 throughput >= {THROUGHPUT_SHARE_GOAL:.0%} of local disk's in the same run"

    def max_rate(store: Store) -> float | None:
        report = reports.get(store)
        phase = next((p for p in report.phases if p.kind == "max"), None) if report else None
        return phase.end_to_end_rate if phase else None

    file_rate, s3_rate = max_rate("file"), max_rate("s3")
    if file_rate is None or s3_rate is None or file_rate <= 0:
        return Verdict(goal, "not measured (both stores need a max phase that caught up)", None)
    share = s3_rate / file_rate
    return Verdict(
        goal,
        f"max phase: S3 {s3_rate:,.0f}/s, local disk {file_rate:,.0f}/s ({share:.0%})",
        share >= THROUGHPUT_SHARE_GOAL,
    )


def render(reports: Mapping[Store, BenchReport], chart: str | None, command: str) -> str:
    """``report.md`` of a comparison: every store's goals, the phases side by side, and
    the share of S3's throughput; links to each store's full report."""
    verified = all(r.verified for r in reports.values())
    started = min((r.started for r in reports.values()), default="")
    lines = [
        f"# Icefjord end to end on each warehouse store, {started}",
        "",
        "Verification: "
        + (
            "every Iceberg table equals its source, on every store"
            if verified
            else "**FAILED on a store: its figures are not a result**"
        )
        + ".",
        "",
        "## Goals",
        "",
    ]
    goals: list[list[str]] = []
    for store, report in reports.items():
        goals += [[f"{v.goal} ({store})", v.measured, verdict_mark(v.met)] for v in report.verdicts]
    if "file" in reports and "s3" in reports:
        verdict = throughput_verdict(reports)
        goals.append([verdict.goal, verdict.measured, verdict_mark(verdict.met)])
    header, rows = comparison_rows(reports)
    lines += [
        *markdown_table(["goal", "measured", "verdict"], goals),
        "",
        "## Phases side by side",
        "",
        *markdown_table(header, rows),
        "",
        "- *e2e/s*: source changes over the phase's source and drain seconds (snapshot: rows "
        "over the time until Iceberg held them); *sustained/s*: the offered rate when the "
        "backlog was gone within 15 s; *p99 s*: freshness; *CPU ms*: CPU of every listed "
        "component (Kafka, registry, Connect, PostgreSQL, the services with their Spark JVMs, "
        "the S3 server where it runs) per source change.",
        "",
        "## Stores",
        "",
        *(f"- **{s}**: {LABELS[s]}; full report [{s}/report.md]({s}/report.md)" for s in reports),
        "",
        f"![throughput and freshness per store]({chart})" if chart else "No chart drawn.",
        "",
        f"Command: `{command}`. The stores ran one after the other on one machine, in the "
        "order listed, each with the same seed and phases.",
        "",
    ]
    return "\n".join(lines)


def plot(reports: Mapping[Store, BenchReport], path: Path) -> None:
    """``stores.png``: end-to-end changes/s and p99 freshness per phase, a bar per store.
    Raises ImportError without matplotlib."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    stores = list(reports)
    names = [p.name for p in next(iter(reports.values())).phases]
    fig, (rates, fresh) = plt.subplots(2, 1, figsize=(10, 7), sharex=True)
    width = 0.8 / max(len(stores), 1)
    for i, store in enumerate(stores):
        phases = {p.name: p for p in reports[store].phases}
        xs = [n + (i - (len(stores) - 1) / 2) * width for n in range(len(names))]
        rate = [phases[n].end_to_end_rate if n in phases else None for n in names]
        p99 = [phases[n].figures.p99_s if n in phases else None for n in names]
        rates.bar(xs, [v or 0.0 for v in rate], width, label=LABELS[store])
        fresh.bar(xs, [v or 0.0 for v in p99], width, label=LABELS[store])
    rates.set_ylabel("end-to-end changes/s")
    rates.legend(fontsize=8)
    fresh.set_ylabel("p99 freshness s")
    fresh.axhline(5, color="green", linestyle=":", label="5 s goal (1,000/s)")
    fresh.axhline(15, color="red", linestyle=":", label="15 s goal (10,000/s)")
    fresh.legend(fontsize=8)
    fresh.set_xticks(range(len(names)), names, rotation=15, fontsize=8)
    fig.suptitle("Icefjord end to end, per warehouse store (one run)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


@dataclass(frozen=True)
class Comparison:
    results: Mapping[Store, BenchResult]
    path: Path
    chart: Path | None

    @property
    def exit_code(self) -> int:
        return max((r.exit_code for r in self.results.values()), default=0)


def _stop_services(settings: LocalSettings) -> None:
    """Services left running hold the previous store's catalog in their environment."""
    for service in service_processes(settings):
        if service.running():
            service.stop()


def _stop_spark() -> None:
    """The verification's Spark session holds the store's catalog for the life of its
    context: the next store's verification would read the old catalog through it."""
    from pyspark.sql import SparkSession

    session = SparkSession.getActiveSession()
    if session is not None:
        session.stop()


def run_stores(
    settings: LocalSettings, options: BenchOptions, stores: Sequence[Store], console: Console
) -> Comparison:
    """Run the benchmark on each of ``stores`` in turn and write the comparison; the stack
    is left on ``settings``' own store, with the services stopped."""
    started = dt.datetime.now().astimezone()
    out = options.out or settings.state / "bench" / f"stores-{started:%Y%m%d-%H%M%S}"
    results: dict[Store, BenchResult] = {}
    try:
        for store in stores:
            console.rule(f"{store}: {LABELS[store]}")
            _stop_services(settings)
            if store == "file":
                # Idle, it still takes CPU the local disk's figures would be charged with.
                ObjectStore(settings).stop()
            run = dataclasses.replace(options, out=out / store, own_topics_only=True)
            results[store] = run_bench(store_settings(settings, store), run, console)
            _stop_spark()
    finally:
        _stop_services(settings)
        LocalStack(settings).up(console.log)
    reports = {store: result.report for store, result in results.items()}
    chart: Path | None = out / "stores.png"
    try:
        assert chart is not None
        plot(reports, chart)
    except ImportError:
        chart = None
    path = out / "report.md"
    path.write_text(render(reports, chart.name if chart else None, options.command))
    return Comparison(results, path, chart)
