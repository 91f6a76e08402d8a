"""`icefjord bench recovery` on the session's stack: the real watcher and writer processes,
a real kill -9 and restart, figures read from the table's commits in the real catalog."""

from __future__ import annotations

from pathlib import Path

from harness import Stack, own_pipeline

from icefjord.bench.recovery import bench_recovery, write_outputs
from icefjord.local.services import service_processes
from services.iceberg_writer.tables import EPOCH, checkpoint_of
from shared.catalog import open_catalog


def test_a_killed_writer_is_restarted_and_its_table_is_fresh_again(
    stack: Stack, tmp_path: Path
) -> None:
    messages: list[str] = []
    # Services on ports of their own, all stopped afterwards.
    with own_pipeline(stack, "needs the session's own stack to run services on") as settings:
        result = bench_recovery(
            settings, rate=200, kills=1, steady_s=5, fresh_s=5, progress=messages.append
        )
        restarted = service_processes(settings, ["writer"])[0].process.pid()
    assert any("writer killed and started again" in m for m in messages), messages
    assert restarted is not None
    (kill,) = result.kills
    assert kill.first_commit_s is not None and kill.fresh_again_s is not None
    assert 0 < kill.first_commit_s <= kill.fresh_again_s
    # The worst record waited at least from the kill to the first commit's batch, less the
    # batch it was produced in; and no record waited longer than the run.
    assert kill.worst_s is not None and 0 < kill.worst_s < 180
    assert result.steady_p99_s < 30
    # The commits after the kill are the new process's (a newer epoch), and they carry on
    # from the killed one's checkpoint up to what was produced.
    table = open_catalog(stack.catalog).load_table(result.table)
    epochs: dict[bool, set[int]] = {False: set(), True: set()}
    for snapshot in table.snapshots():
        summary = snapshot.summary.additional_properties if snapshot.summary else {}
        if EPOCH in summary:
            epochs[snapshot.timestamp_ms / 1000 > kill.killed_at].add(int(summary[EPOCH]))
    assert epochs[False] and epochs[True]
    assert min(epochs[True]) > max(epochs[False])
    checkpoint = checkpoint_of(table)
    assert checkpoint is not None
    topic = f"icefjord.changes.{result.table}"
    assert 0 < checkpoint.offsets[(topic, 0)] <= result.produced
    # The chart and the CSV of this run: a row per commit.
    written = write_outputs(result, tmp_path)
    assert [p.name for p in written] == ["commits.csv", "recovery.png"]
    assert len(written[0].read_text().splitlines()) == len(result.commits) + 1
