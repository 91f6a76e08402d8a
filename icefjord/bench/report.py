"""The end-to-end benchmark's report: ``report.md``, ``bench.png`` and ``series.csv``.

:func:`render_markdown`, :func:`cpu_rows`, :func:`jvm_rows` and :func:`series_csv` are pure;
:func:`plot` draws freshness and throughput over time with the phase boundaries, and data
files, with matplotlib (Agg); :func:`write_report` writes all three, and still writes
``report.md`` (saying how to install the chart dependency) when matplotlib is missing.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from icefjord.bench.cpu import ComponentUse, CpuUse
from icefjord.bench.stats import (
    LOW_RATE_GOAL_P99_S,
    SUSTAINED_GOAL_P99_S,
    PhaseResult,
    Sample,
    Verdict,
    goal_verdicts,
    share_within,
    windows,
)

CHART_INSTALL = "pip install 'matplotlib>=3.11'"
LABEL_GAP = 0.08
"""Phases starting closer than this share of the chart's width apart get stacked labels."""


@dataclass(frozen=True)
class Machine:
    cores: int
    load_start: tuple[float, float, float]
    load_end: tuple[float, float, float]
    platform: str
    python: str
    normalizer: str = ""  # which build the normalizer and the writer ran (compiled or plain, why)


@dataclass(frozen=True)
class TableCheck:
    """One table's verification: rows on each side and whether every row matched."""

    table: str
    source_rows: int
    iceberg_rows: int
    equal: bool


@dataclass(frozen=True)
class BenchReport:
    command: str
    started: str
    source: str
    schema: str
    machine: Machine
    phases: tuple[PhaseResult, ...]
    samples: tuple[Sample, ...]
    tables: tuple[TableCheck, ...]
    dead_letters: int
    verified: bool
    notes: tuple[str, ...] = ()

    @property
    def verdicts(self) -> list[Verdict]:
        return goal_verdicts(self.phases)


def number(value: float | None, spec: str = ",.0f") -> str:
    return "-" if value is None else format(value, spec)


def seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def verdict_mark(met: bool | None) -> str:
    return {True: "**met**", False: "**missed**", None: "not measured"}[met]


def _load(load: tuple[float, float, float]) -> str:
    return " / ".join(f"{v:.2f}" for v in load)


def phase_rows(phases: Sequence[PhaseResult]) -> list[list[str]]:
    """The phase table's rows (see :func:`render_markdown` for the columns)."""
    rows = []
    for p in phases:
        f = p.figures
        within5 = share_within(f.freshness, LOW_RATE_GOAL_P99_S)
        within15 = share_within(f.freshness, SUSTAINED_GOAL_P99_S)
        rows.append(
            [
                p.name,
                number(p.offered_rate)
                if p.kind in ("rate", "warm-up")
                else ("max" if p.kind == "max" else "-"),
                number(p.achieved_source_rate),
                f"{p.snapshot_rows:,}" if p.kind == "snapshot" else f"{f.source_changes:,}",
                number(f.applied_rate),
                number(p.end_to_end_rate),
                number(p.sustained_rate),
                seconds(f.p50_s),
                seconds(f.p99_s),
                "-" if within5 is None else f"{within5:.1%}",
                "-" if within15 is None else f"{within15:.1%}",
                seconds(p.source_seconds),
                seconds(p.drain_seconds),
                "yes" if p.caught_up else "**no**",
            ]
        )
    return rows


def _cpu_cell(use: ComponentUse | None, available: float) -> str:
    if use is None or use.seconds is None:
        return "stopped" if use is not None and use.coverage == "stopped" else "-"
    return _cpu_seconds(use.seconds, available, use.lower_bound)


def _cpu_seconds(seconds: float | None, available: float, lower_bound: bool = False) -> str:
    if seconds is None:
        return "-"
    share = f" ({seconds / available:.0%})" if available > 0 else ""
    return (">= " if lower_bound else "") + f"{seconds:.1f}{share}"


def cpu_rows(phases: Sequence[PhaseResult]) -> tuple[list[str], list[list[str]]]:
    """The CPU table of the phases with CPU figures: header (component, one column per
    phase) and rows (one per component, all listed, whole machine, wall s, available s).
    A cell is CPU seconds and, in brackets, the share of the available CPU."""
    measured = [(p.name, p.cpu) for p in phases if p.cpu is not None]
    names: list[str] = []
    for _, cpu in measured:
        names += [c.name for c in cpu.components if c.name not in names]

    def each(cell: Callable[[CpuUse], str]) -> list[str]:
        return [cell(cpu) for _, cpu in measured]

    def component(name: str) -> Callable[[CpuUse], str]:
        def cell(cpu: CpuUse) -> str:
            use = next((c for c in cpu.components if c.name == name), None)
            return _cpu_cell(use, cpu.available_seconds)

        return cell

    rows = [[name, *each(component(name))] for name in names]
    rows += [
        [
            "**all listed**",
            *each(
                lambda c: _cpu_seconds(c.listed_seconds, c.available_seconds, c.listed_lower_bound)
            ),
        ],
        [
            "whole machine (every process)",
            *each(lambda c: _cpu_seconds(c.machine_seconds, c.available_seconds)),
        ],
        ["wall s", *each(lambda c: f"{c.wall_seconds:.1f}")],
        [
            "available s (cores x wall s)",
            *each(lambda c: f"{c.available_seconds:.1f} ({c.cores} x {c.wall_seconds:.1f})"),
        ],
    ]
    return ["component", *(name for name, _ in measured)], rows


def _jvm_cell(use: ComponentUse | None) -> str:
    if use is None or use.jit_seconds is None or use.gc_seconds is None:
        return "-"
    prefix = ">= " if use.lower_bound else ""
    return f"{prefix}JIT {use.jit_seconds:.1f}, GC {use.gc_seconds:.1f}"


def jvm_rows(phases: Sequence[PhaseResult]) -> tuple[list[str], list[list[str]]]:
    """The JVM table of the phases with CPU figures: header (component, one column per
    phase) and one row per component whose JIT compiler or garbage collector threads used
    CPU in any of them (none: no rows). A cell is ``JIT s, GC s`` (``>=``: a lower bound, as
    in :func:`cpu_rows`); ``-``: unknown."""
    measured = [(p.name, p.cpu) for p in phases if p.cpu is not None]
    names: list[str] = []
    for _, cpu in measured:
        names += [
            c.name
            for c in cpu.components
            if (c.jit_seconds or c.gc_seconds) and c.name not in names
        ]

    def use(cpu: CpuUse, name: str) -> ComponentUse | None:
        return next((c for c in cpu.components if c.name == name), None)

    rows = [[name, *(_jvm_cell(use(cpu, name)) for _, cpu in measured)] for name in names]
    return ["component", *(name for name, _ in measured)], rows


def _jvm_section(phases: Sequence[PhaseResult]) -> list[str]:
    header, rows = jvm_rows(phases)
    if not rows:
        return []
    return [
        "### Of which JVM JIT compilers and garbage collectors",
        "",
        "CPU seconds of the components' JVMs' JIT compiler threads and garbage collector "
        "threads in each phase.",
        "",
        *markdown_table(header, rows),
        "",
        "- *JIT*: HotSpot's C1 and C2 compiler threads, turning hot Java code into machine "
        "code; *GC*: the garbage collector's worker threads (and G1's concurrent ones). "
        "Compiling is mostly warm-up: a JVM compiles its hot code in its first minutes, so a "
        "phase soon after the stack started pays more than a later one. These seconds are "
        "inside the component's figure above, not in addition. Each thread counts what it "
        "did in the phase; a thread that exited before the phase ended (HotSpot stops "
        "compiler threads it no longer needs) took its part along, so a figure can be low. "
        "`>=`: as above; `-`: not running or stopped.",
        "",
    ]


def _cpu_section(phases: Sequence[PhaseResult]) -> list[str]:
    lines = ["## CPU seconds by component", ""]
    if not any(p.cpu is not None for p in phases):
        return [
            *lines,
            "CPU accounting is unavailable: it reads Linux's `/proc`, which this system does "
            "not have.",
            "",
        ]
    header, rows = cpu_rows(phases)
    return [
        *lines,
        "CPU seconds (user + system) each component used from the phase's first sample to "
        "its end, and in brackets its share of the CPU the machine had (cores x wall seconds).",
        "",
        *markdown_table(header, rows),
        "",
        "- A stack process or a service counts with every process of its session (a "
        "service's Spark JVM included); PostgreSQL is the postmaster and all its descendants "
        "(each backend leads a session of its own); the bench client is this CLI's own "
        "process (it drives the workload through psycopg and samples `/metrics` and the "
        "catalog; the backend serving the workload counts under PostgreSQL). A process that "
        "exited counts once a process of its component reaped it.",
        "- `>=`: restarted in the phase (a new pid), counted from the new process's start: a "
        "lower bound. *stopped*: running at the phase's start, not at its end: unknown. "
        "`-`: not running.",
        "- *whole machine*: busy CPU of every process on the machine (`/proc/stat`), this "
        "benchmark's and any other's; well above *all listed* means something else took CPU.",
        "",
        *_jvm_section(phases),
    ]


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return lines


def render_markdown(report: BenchReport, chart: str | None, chart_problem: str | None) -> str:
    """``report.md``: goals with met/missed, phases, CPU by component, files, verification,
    machine, method.
    ``chart`` is the PNG's file name (None: not drawn, ``chart_problem`` says why)."""
    m = report.machine
    verdict = (
        "every Iceberg table equals its source"
        if report.verified
        else "**VERIFICATION FAILED: these figures are not a result**"
    )
    lines = [
        f"# Icefjord end-to-end benchmark, {report.started}",
        "",
        f"Source: **{report.source}**; schema/namespace `{report.schema}`. Verification: "
        f"{verdict}.",
        "",
        "## Goals",
        "",
        *markdown_table(
            ["goal", "measured", "verdict"],
            [[v.goal, v.measured, verdict_mark(v.met)] for v in report.verdicts],
        ),
        "",
        "## Phases",
        "",
        *markdown_table(
            [
                "phase",
                "offered/s",
                "source/s",
                "changes",
                "applied/s",
                "end to end/s",
                "sustained/s",
                "p50 s",
                "p99 s",
                "<= 5 s",
                "<= 15 s",
                "source s",
                "drain s",
                "caught up",
            ],
            phase_rows(report.phases),
        ),
        "",
        *_cpu_section(report.phases),
    ]
    last = report.samples[-1] if report.samples else None
    files = [s.data_files for s in report.samples if s.data_files is not None]
    lines += [
        "## Files",
        "",
        f"Data files (the maintainer's `icefjord_table_data_files`, this namespace): "
        f"at most {number(max(files) if files else None)}, at the end "
        f"{number(files[-1] if files else None)}; compactions: "
        f"{number(last.compactions if last else None)}.",
        "",
        "## Verification",
        "",
        *markdown_table(
            ["table", "source rows", "iceberg rows", "result"],
            [
                [
                    t.table,
                    f"{t.source_rows:,}",
                    f"{t.iceberg_rows:,}",
                    "equal" if t.equal else "**DIFFERENT**",
                ]
                for t in report.tables
            ],
        ),
        "",
        f"Dead letters: {report.dead_letters}.",
        "",
        "## Chart",
        "",
        f"![freshness and throughput over time]({chart})"
        if chart
        else f"No chart: {chart_problem}. Install it with `{CHART_INSTALL}`.",
        "",
        "The time series (one row per ~2 s sample) is in `series.csv`.",
        "",
        "## Machine and command",
        "",
        f"- cores: {m.cores}; load average (1/5/15 min) at the start {_load(m.load_start)}, "
        f"at the end {_load(m.load_end)}",
        f"- {m.platform}; Python {m.python}",
        *([f"- normalizer and writer: {m.normalizer}"] if m.normalizer else []),
        f"- command: `{report.command}`",
        "",
        "## How it is measured",
        "",
        "- *snapshot*: the rows are in the source before capture starts (PostgreSQL: COPY). "
        "Bulk (the default): the connector is registered to snapshot one row per table and "
        "stream, and once its replication slot exists the tables are copied to Parquet from "
        "one REPEATABLE READ snapshot, several at a time; iceberg-writer appends the copies "
        "and then applies the changes it held (`icefjord.bulk`). Debezium "
        "(`--snapshot debezium`): the connector's own snapshot sends every row through the "
        "pipeline. Generator: Debezium snapshot "
        "events. Time from capture start until Iceberg's snapshot summaries hold every row "
        "(the commit time of the last commit needed).",
        "- *warm-up*: the first rate, right after the snapshot, judged against no goal: after "
        "a bulk snapshot the streaming path is cold (Kafka Connect compiles Debezium's "
        "streaming code, the writer runs its first MERGEs into each table).",
        "- *rate*: the source is paced to the offered row changes/s for the phase's seconds; "
        "*max*: the source runs unpaced. After the source stops, the phase lasts until every "
        "table's writer watermark has reached the source commit time of its last change and "
        "no service reports consumer lag (drain). *end to end/s* = source changes / (source + "
        "drain seconds); *sustained/s* = the source's rate if the pipeline kept pace with it "
        "(its backlog was gone within 15 s of the source stopping), the load it carries "
        "without a growing backlog; the 10,000/s goal is judged on it together with p99. "
        "*end to end/s* also charges the last changes' latency, so it stays below the "
        "offered rate however fast the pipeline is. *applied/s* = the writer's "
        "`icefjord_writer_changes_applied_total` "
        "(after per-key deduplication within a batch, so it can be lower than the source's "
        "changes) over the same time.",
        "- *freshness*: the writer's histogram `icefjord_writer_freshness_seconds` (per change "
        "record: commit wall time minus source commit time), its increase over the phase. "
        "Quantiles are interpolated inside buckets; 5 s and 15 s are bucket bounds, so the "
        "*<= 5 s* / *<= 15 s* shares, and the p99 verdicts, are exact.",
        "- Schema changes are not part of the benchmark's workload (the demo covers them).",
    ]
    if report.notes:
        lines += ["", "## Notes", "", *(f"- {note}" for note in report.notes)]
    return "\n".join(lines) + "\n"


def series_csv(samples: Sequence[Sample]) -> str:
    """One line per window: time, phase, rates, freshness quantiles, files, compactions."""
    buffer = io.StringIO()
    out = csv.writer(buffer, lineterminator="\n")
    out.writerow(
        [
            "t_s",
            "phase",
            "source_changes",
            "source_per_s",
            "applied_per_s",
            "received_per_s",
            "freshness_p50_s",
            "freshness_p99_s",
            "records_committed",
            "data_files",
            "compactions",
        ]
    )
    for sample, w in windows(samples):
        values = [
            f"{sample.t:.1f}",
            sample.phase,
            str(sample.source_changes),
            number(w.source_rate, ".1f"),
            number(w.applied_rate, ".1f"),
            number(w.received_rate, ".1f"),
            number(w.p50_s, ".2f"),
            number(w.p99_s, ".2f"),
            number(w.observations, ".0f"),
            number(sample.data_files, ".0f"),
            number(sample.compactions, ".0f"),
        ]
        out.writerow(["" if v == "-" else v for v in values])
    return buffer.getvalue()


def plot(report: BenchReport, path: Path) -> None:
    """Draw ``bench.png``: throughput, freshness p50/p99 (with the goals) and data files over
    time, phase boundaries marked. Raises ImportError without matplotlib."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    series = windows(report.samples)
    t = [s.t for s, _ in series]
    fig, (rates, fresh, files) = plt.subplots(3, 1, figsize=(11, 9), sharex=True)
    for label, values in (
        ("source changes/s", [w.source_rate for _, w in series]),
        ("writer received/s", [w.received_rate for _, w in series]),
        ("applied to Iceberg/s", [w.applied_rate for _, w in series]),
    ):
        rates.plot(t, [float("nan") if v is None else v for v in values], label=label)
    rates.set_ylabel("changes/s")
    rates.legend(loc="upper left", fontsize=8)
    for label, values, style in (
        ("p50", [w.p50_s for _, w in series], "o-"),
        ("p99", [w.p99_s for _, w in series], "s-"),
    ):
        points = [(x, v) for x, v in zip(t, values, strict=True) if v is not None]
        fresh.plot([x for x, _ in points], [v for _, v in points], style, markersize=3, label=label)
    fresh.axhline(LOW_RATE_GOAL_P99_S, color="green", linestyle=":", label="5 s goal (1,000/s)")
    fresh.axhline(SUSTAINED_GOAL_P99_S, color="red", linestyle=":", label="15 s goal (10,000/s)")
    fresh.set_ylabel("freshness s (per ~2 s window)")
    fresh.legend(loc="upper left", fontsize=8)
    points = [(s.t, s.data_files) for s in report.samples if s.data_files is not None]
    files.step([x for x, _ in points], [v for _, v in points], where="post", label="data files")
    compactions = [(s.t, s.compactions) for s in report.samples]
    twin = files.twinx()
    twin.step(
        [x for x, _ in compactions],
        [v for _, v in compactions],
        where="post",
        color="gray",
        label="compactions",
    )
    twin.set_ylabel("compactions")
    files.set_ylabel("data files")
    files.set_xlabel("seconds since the benchmark started")
    files.legend(loc="upper left", fontsize=8)
    twin.legend(loc="upper right", fontsize=8)
    span = max((s.t for s in report.samples), default=0.0) or 1.0
    previous: float | None = None
    level = 0
    for phase in report.phases:
        start = phase.figures.start
        for axis in (rates, fresh, files):
            axis.axvline(start, color="black", linewidth=0.6, alpha=0.5)
        # A phase that starts close after the last one (the warm-up after a short
        # snapshot) gets its name a line higher, not printed over the other.
        close = previous is not None and start - previous < LABEL_GAP * span
        level = level + 1 if close else 0
        rates.annotate(
            phase.name,
            (start, 1.0),
            xycoords=("data", "axes fraction"),
            xytext=(1, 9 * level),
            textcoords="offset points",
            fontsize=8,
            va="bottom",
        )
        previous = start
    fig.suptitle(f"Icefjord end to end ({report.source}), {report.started}")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write_report(report: BenchReport, out_dir: Path) -> tuple[Path, Path | None]:
    """Write ``report.md``, ``series.csv`` and (with matplotlib) ``bench.png`` into
    ``out_dir``; return the report's path and the chart's (None if not drawn)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    chart: Path | None = out_dir / "bench.png"
    problem = None
    try:
        assert chart is not None
        plot(report, chart)
    except ImportError as exc:
        chart, problem = None, f"matplotlib is not installed ({exc})"
    (out_dir / "series.csv").write_text(series_csv(report.samples))
    markdown = render_markdown(report, chart.name if chart else None, problem)
    path = out_dir / "report.md"
    path.write_text(markdown)
    return path, chart
