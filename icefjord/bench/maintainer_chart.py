"""What ``icefjord bench maintain --out DIR`` writes: the run as CSV and as a chart.

``samples.csv`` holds the table's shape every sample, ``commits.csv`` every writer commit with
when it took its rows, its latency and whether a maintenance action ran meanwhile, and
``bench.png`` draws both over time with the actions shaded, so the effect of each compaction
on files and on commit latency can be seen at a glance.
"""

from __future__ import annotations

import csv
import io
from pathlib import Path

from icefjord.bench.maintainer import BenchReport, overlaps

__all__ = ["commits_csv", "plot", "samples_csv", "write_outputs"]

FILES_GOAL = 100
"""Files in the fullest partition the policies must stay at or under (issue's goal)."""


def samples_csv(report: BenchReport) -> str:
    """One row per sample: seconds since start, the table's shape, whether maintaining."""
    buffer = io.StringIO()
    out = csv.writer(buffer, lineterminator="\n")
    out.writerow(
        ["t_s", "partition_files_max", "data_files", "delete_files", "snapshots", "maintaining"]
    )
    for s in report.samples:
        out.writerow(
            [
                f"{s.elapsed_s:.1f}",
                s.partition_files_max,
                s.data_files,
                s.delete_files,
                s.snapshots,
                int(s.maintaining),
            ]
        )
    return buffer.getvalue()


def commits_csv(report: BenchReport) -> str:
    """One row per writer commit: start and the moment it picked its rows (after any lease
    wait), both in s since the run began, latency, conflicts retried, and whether a
    maintenance action overlapped it."""
    spans = [(start, end) for start, end, _ in report.actions]
    buffer = io.StringIO()
    out = csv.writer(buffer, lineterminator="\n")
    out.writerow(["t_s", "picked_s", "latency_s", "conflicts", "during_maintenance"])
    for c in report.commits:
        out.writerow(
            [
                f"{c.started - report.started:.2f}",
                f"{c.picked - report.started:.2f}",
                f"{c.seconds:.3f}",
                c.conflicts,
                int(overlaps(c, spans)),
            ]
        )
    return buffer.getvalue()


def plot(report: BenchReport, path: Path, latency_target_s: float) -> None:
    """Draw files per partition and commit latency over time, maintenance actions shaded.

    Raises ImportError without matplotlib (the ``bench`` extra).
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    t0 = report.started
    fig, (files, latency) = plt.subplots(2, 1, figsize=(11, 7), sharex=True)
    t = [s.elapsed_s for s in report.samples]
    files.step(
        t,
        [s.partition_files_max for s in report.samples],
        where="post",
        label="data files, fullest partition",
    )
    files.step(
        t,
        [s.delete_files for s in report.samples],
        where="post",
        color="tab:orange",
        label="delete files, whole table",
    )
    files.axhline(FILES_GOAL, color="red", linestyle=":", label=f"{FILES_GOAL} files goal")
    files.set_ylabel("files")
    files.legend(loc="upper left", fontsize=8)
    latency.plot(
        [c.started - t0 for c in report.commits],
        [c.seconds for c in report.commits],
        ".",
        markersize=3,
        label="commit latency",
    )
    latency.axhline(
        latency_target_s, color="red", linestyle=":", label=f"{latency_target_s:g} s target"
    )
    latency.set_ylabel("seconds")
    latency.set_xlabel("seconds since the benchmark started")
    kinds = sorted({result.action.value for _, _, result in report.actions})
    palette = ("tab:green", "tab:purple", "tab:olive", "tab:brown", "tab:gray", "tab:pink")
    colours = {kind: palette[i % len(palette)] for i, kind in enumerate(kinds)}
    for start, end, result in report.actions:
        for axis in (files, latency):
            axis.axvspan(start - t0, end - t0, color=colours[result.action.value], alpha=0.25)
    handles, labels = latency.get_legend_handles_labels()
    handles += [Patch(color=colours[kind], alpha=0.25) for kind in kinds]
    latency.legend(handles, [*labels, *kinds], loc="upper right", fontsize=8)
    config = report.config
    fig.suptitle(
        f"maintainer bench: MERGE of {config.rows_per_commit} changes every "
        f"{config.commit_interval_s:g} s into {config.partitions} partitions, "
        f"{report.seconds / 60:.1f} min"
    )
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write_outputs(report: BenchReport, out_dir: Path, latency_target_s: float) -> list[Path]:
    """Write ``samples.csv``, ``commits.csv`` and (with matplotlib) ``bench.png`` into
    ``out_dir``; return the paths written."""
    out_dir.mkdir(parents=True, exist_ok=True)
    written = [out_dir / "samples.csv", out_dir / "commits.csv"]
    written[0].write_text(samples_csv(report))
    written[1].write_text(commits_csv(report))
    try:
        plot(report, out_dir / "bench.png", latency_target_s)
    except ImportError:
        return written
    return [*written, out_dir / "bench.png"]
