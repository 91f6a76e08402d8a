"""One compaction, repeated from the same table state: the figures of HISTORY's "2026-11-27, night".

Run from the repository root on a local state a benchmark left behind, with the services
stopped (nothing else may commit to the table):

    .venv/bin/python icefjord/bench/experiments/rewrite_ab.py \
        bench_e2e.orders base base cache-delete-files=true base cache-delete-files=true

Each variant is ``base`` (the maintainer's options for a delete-ratio compaction of a table
with equality deletes, as of 82fa45b without ``cache-delete-files``), comma-separated
``key=value`` changes to them (``spark.*`` keys go to the session), or ``positions`` (the
maintainer's delete rewrite: ``rewrite_position_delete_files`` without options; added for
HISTORY's "2026-12-02, noon"). Each runs its procedure and prints its wall seconds, the
Spark JVM's CPU seconds (from ``/proc``) and, of them, its JIT compiler threads' (``JIT``,
added for HISTORY's "2026-11-27, afternoon"; threads matched by id as in the benchmark's
report), the files left live by content, then rolls the table back to the snapshot it started
from. ``START=<snapshot
id>`` rolls back to that snapshot first (after a run that stopped half way). The first run
or two are the JVM's warm-up: compare the later ones, alternating. The services' settings
(catalog, storage) come from the environment, as the maintainer's do.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path.cwd()))

from icefjord.bench.cpu import read_processes
from services.maintainer.config import MaintainerSettings
from shared.spark import build_spark_session

BASE = {
    "partial-progress.enabled": "true",
    "partial-progress.max-commits": "10",
    "partial-progress.max-failed-commits": "0",
    "remove-dangling-deletes": "true",
    "delete-ratio-threshold": "0.3",
    "delete-file-threshold": "1",
}


def child_jvm() -> int:
    """The pid of this process's child (pyspark's JVM)."""
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == os.getpid():
                return int(entry)
    raise RuntimeError("no JVM child")


def cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def jit_ticks(pid: int) -> dict[int, float]:
    """The JVM's JIT compiler threads: clock ticks so far by thread id."""
    for process in read_processes():
        if process.pid == pid:
            return {t.tid: t.time for t in process.jvm_threads if t.kind == "jit"}
    return {}


def jit_s(before: dict[int, float], after: dict[int, float]) -> float:
    """What the compiler threads alive at the end did since ``before`` (HotSpot stops idle
    compiler threads; one that exited in between took its part along)."""
    grown = sum(max(0.0, ticks - before.get(tid, 0.0)) for tid, ticks in after.items())
    return grown / os.sysconf("SC_CLK_TCK")


def main(table: str, variants: list[str]) -> None:
    settings = MaintainerSettings()
    spark = build_spark_session("rewrite-ab", settings.spark, settings.catalog)
    jvm = child_jvm()
    if os.environ.get("START"):
        spark.sql(
            f"CALL icefjord.system.rollback_to_snapshot('{table}', {int(os.environ['START'])})"
        ).collect()
    refs = f"SELECT snapshot_id FROM icefjord.{table}.refs WHERE name = 'main'"
    start = spark.sql(refs).collect()[0][0]
    files = spark.sql(
        f"SELECT content, count(*) AS n, sum(record_count) AS rows"
        f" FROM icefjord.{table}.files GROUP BY content ORDER BY content"
    ).collect()
    print(
        f"{table} at snapshot {start}: "
        + ", ".join(f"content {r.content}: {r.n} files, {r.rows} rows" for r in files)
    )
    for variant in variants:
        options = dict(BASE)
        session: dict[str, str] = {}
        for pair in [] if variant in ("base", "positions") else variant.split(","):
            key, value = pair.split("=", 1)
            (session if key.startswith("spark.") else options)[key] = value
        for key, value in session.items():
            spark.conf.set(key, value)
        rendered = ", ".join(f"'{k}', '{v}'" for k, v in sorted(options.items()))
        call = (
            f"CALL icefjord.system.rewrite_position_delete_files(table => '{table}')"
            if variant == "positions"
            else f"CALL icefjord.system.rewrite_data_files(table => '{table}',"
            f" strategy => 'binpack', options => map({rendered}))"
        )
        cpu0, wall0, jit0 = cpu_s(jvm), time.monotonic(), jit_ticks(jvm)
        row = spark.sql(call).collect()[0]
        wall, cpu = time.monotonic() - wall0, cpu_s(jvm) - cpu0
        jit = jit_s(jit0, jit_ticks(jvm))
        live = spark.sql(
            f"SELECT content, count(*) AS n FROM icefjord.{table}.files GROUP BY content"
        ).collect()
        left = ", ".join(f"content {r.content}: {r.n}" for r in sorted(live))
        print(
            f"{variant}: wall {wall:.2f} s, JVM CPU {cpu:.2f} s, JIT {jit:.2f} s, {row.asDict()};"
            f" files left {left}",
            flush=True,
        )
        for key in session:
            spark.conf.unset(key)
        spark.sql(f"CALL icefjord.system.rollback_to_snapshot('{table}', {start})").collect()
    spark.stop()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])
