"""The executor with a fake Spark and catalog: rejections, conflict retries, expiry safety."""

from __future__ import annotations

import dataclasses
import re
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from services.maintainer.execute import MaintenanceExecutor, error_summary, is_conflict
from services.maintainer.health import (
    FileContent,
    FileStats,
    PartitionField,
    SnapshotStats,
    TableInspection,
)
from services.maintainer.identifiers import TableId
from services.maintainer.policy import MaintenancePolicy
from services.maintainer.procedures import timestamp_literal
from shared.events import MaintenanceAction as A
from shared.events import MaintenanceRequest, MaintenanceStatus

pytestmark = pytest.mark.unit

NOW_S = 1_000_000.0
NOW_MS = int(NOW_S * 1000)
CONFLICT = RuntimeError(
    "An error occurred while calling o53.sql.\n"
    ": org.apache.iceberg.exceptions.ValidationException: "
    "Cannot commit, found new position delete for replaced data file\n"
    "\tat org.apache.iceberg..."
)


class FakeRunner:
    """Answers statements from a script: each entry is rows or an exception."""

    def __init__(self, *script: list[dict[str, Any]] | Exception) -> None:
        self.script = list(script)
        self.statements: list[str] = []
        self.orphan_calls: list[tuple[str, int]] = []
        self.dangling_calls: list[str] = []

    def sql(self, statement: str) -> list[dict[str, Any]]:
        self.statements.append(statement)
        answer = self.script.pop(0) if self.script else []
        if isinstance(answer, Exception):
            raise answer
        return answer

    def delete_orphans(self, table: str, older_than_ms: int) -> list[str]:
        self.orphan_calls.append((table, older_than_ms))
        return ["file:/w/t/data/orphan.parquet"]

    def drop_dangling_equality_deletes(self, table: str) -> int:
        self.dangling_calls.append(table)
        return 2


def inspection(data_files: int = 3, snapshots: tuple[SnapshotStats, ...] = ()) -> TableInspection:
    files = tuple(FileStats(FileContent.DATA, (), 10, 100) for _ in range(data_files))
    files += (FileStats(FileContent.POSITION_DELETES, (), 1, 50),)
    return TableInspection(
        table="shop.orders",
        inspected_at_ms=NOW_MS,
        files=files,
        snapshots=snapshots,
        current_snapshot_id=snapshots[-1].snapshot_id if snapshots else None,
        manifests=4,
        manifest_bytes=400,
        metadata_file_bytes=100,
    )


class FakeInspector:
    def __init__(
        self, *inspections: TableInspection, tables: tuple[str, ...] = ("shop.orders",)
    ) -> None:
        self.inspections = list(inspections)
        self.tables = tables

    def exists(self, table: TableId) -> bool:
        return str(table) in self.tables

    def columns(self, table: TableId) -> frozenset[str]:
        return frozenset({"id", "region"})

    def inspect(self, table: TableId) -> TableInspection:
        return self.inspections.pop(0) if len(self.inspections) > 1 else self.inspections[0]

    snapshot_ids: list[int | None] = []  # noqa: RUF012 - replaced per instance where used
    polls = 0

    def current_snapshot_id(self, table: TableId) -> int | None:
        self.polls += 1
        if len(self.snapshot_ids) > 1:
            return self.snapshot_ids.pop(0)
        return self.snapshot_ids[0] if self.snapshot_ids else None


def request(
    action: A = A.COMPACT_DATA_FILES,
    table: str = "shop.orders",
    partition: str | None = None,
    **options: str,
) -> MaintenanceRequest:
    return MaintenanceRequest(
        request_id="req-1",
        table=table,
        action=action,
        partition=partition,
        options=options,
        reason="test",
        requested_by="operator:test",
    )


def executor(runner: FakeRunner, inspector: FakeInspector, **kw: Any) -> MaintenanceExecutor:
    clock: Callable[[], float] = lambda: NOW_S  # noqa: E731
    return MaintenanceExecutor(
        runner, inspector, catalog="icefjord", clock=clock, retry_delay_s=0, **kw
    )


@pytest.mark.parametrize(
    ("req", "reason"),
    [
        (request(table="orders"), "malformed table identifier"),
        (request(table="shop.o'; DROP"), "malformed table identifier"),
        (request(table="shop.missing"), "unknown table shop.missing"),
        (request(partition="nope = 1"), "names columns not in shop.orders: nope"),
        (request(partition="region = 'eu' OR 1 = 1"), "bad partition filter"),
        (request(**{"spark.anything": "1"}), "bad option"),
        (request(A.REMOVE_ORPHAN_FILES, older_than_ms=str(NOW_MS - 60_000)), "younger than"),
        (
            request(A.REMOVE_ORPHAN_FILES, older_than_ms=str(NOW_MS - 7_200_000), dry_run="true"),
            "dry_run needs",
        ),
    ],
)
def test_rejections_run_nothing(req: MaintenanceRequest, reason: str) -> None:
    runner = FakeRunner()
    result = executor(runner, FakeInspector(inspection())).execute(req, MaintenancePolicy())
    assert result.status is MaintenanceStatus.REJECTED
    assert result.error is not None and reason in result.error
    assert (result.request_id, result.action) == ("req-1", req.action)
    assert runner.statements == [] and runner.orphan_calls == []


def test_compaction_reports_files_before_and_after() -> None:
    runner = FakeRunner(
        [
            {
                "rewritten_data_files_count": 3,
                "added_data_files_count": 1,
                "failed_data_files_count": 0,
                "removed_delete_files_count": 1,
            }
        ]
    )
    result = executor(runner, FakeInspector(inspection(3), inspection(1))).execute(
        request(partition="region = 'eu'", **{"min-input-files": "2"}), MaintenancePolicy()
    )
    assert result.status is MaintenanceStatus.SUCCEEDED
    assert (result.files_before, result.files_after, result.bytes_before, result.bytes_after) == (
        3,
        1,
        300,
        100,
    )
    assert result.message == "rewrote 3 data files into 1, removed 1 delete files"
    assert runner.statements == [
        "CALL `icefjord`.system.rewrite_data_files(table => '`shop`.`orders`', "
        "strategy => 'binpack', options => map('min-input-files', '2'), "
        "where => '`region` = \\'eu\\'')"
    ]


def test_nothing_to_compact_is_skipped() -> None:
    runner = FakeRunner([{"rewritten_data_files_count": 0, "added_data_files_count": 0}])
    result = executor(runner, FakeInspector(inspection())).execute(request(), MaintenancePolicy())
    assert result.status is MaintenanceStatus.SKIPPED


def test_conflicts_are_retried_then_succeed() -> None:
    runner = FakeRunner(
        CONFLICT, [{"rewritten_delete_files_count": 4, "added_delete_files_count": 1}]
    )
    result = executor(runner, FakeInspector(inspection())).execute(
        request(A.REWRITE_POSITION_DELETES), MaintenancePolicy()
    )
    assert result.status is MaintenanceStatus.SUCCEEDED
    assert len(runner.statements) == 2
    assert result.message == "rewrote 4 position delete files into 1 (2 attempts, 1 conflicts)"


def test_conflicts_are_retried_a_bounded_number_of_times() -> None:
    runner = FakeRunner(CONFLICT, CONFLICT, CONFLICT, [{"rewritten_data_files_count": 9}])
    result = executor(runner, FakeInspector(inspection()), max_attempts=3).execute(
        request(), MaintenancePolicy()
    )
    assert result.status is MaintenanceStatus.FAILED
    assert len(runner.statements) == 3
    assert result.error == (
        "gave up after 3 attempts: RuntimeError: org.apache.iceberg.exceptions."
        "ValidationException: Cannot commit, found new position delete for replaced data file"
    )
    assert (result.files_before, result.files_after) == (3, 3)  # what it saw is reported


def test_other_errors_fail_at_once() -> None:
    runner = FakeRunner(RuntimeError("AnalysisException: no such procedure"))
    result = executor(runner, FakeInspector(inspection())).execute(request(), MaintenancePolicy())
    assert result.status is MaintenanceStatus.FAILED and len(runner.statements) == 1


def test_partial_progress_with_conflicting_groups_runs_again() -> None:
    runner = FakeRunner(
        [
            {
                "rewritten_data_files_count": 6,
                "added_data_files_count": 1,
                "failed_data_files_count": 4,
            }
        ],
        [
            {
                "rewritten_data_files_count": 4,
                "added_data_files_count": 1,
                "failed_data_files_count": 0,
            }
        ],
    )
    result = executor(runner, FakeInspector(inspection())).execute(request(), MaintenancePolicy())
    assert result.status is MaintenanceStatus.SUCCEEDED
    assert len(runner.statements) == 2
    assert result.message is not None and result.message.startswith("rewrote 10 data files into 2,")
    assert "left for next time" not in result.message


def test_partial_progress_reports_what_stayed_behind() -> None:
    partial = [
        {"rewritten_data_files_count": 6, "added_data_files_count": 1, "failed_data_files_count": 4}
    ]
    runner = FakeRunner(partial, partial)
    result = executor(runner, FakeInspector(inspection()), max_attempts=2).execute(
        request(), MaintenancePolicy()
    )
    assert result.status is MaintenanceStatus.SUCCEEDED
    assert result.message is not None
    assert "4 files in groups that failed were left for next time" in result.message


def test_every_group_failing_is_a_failure() -> None:
    nothing = [{"rewritten_data_files_count": 0, "failed_data_files_count": 12}]
    runner = FakeRunner(nothing, nothing)
    result = executor(runner, FakeInspector(inspection()), max_attempts=2).execute(
        request(), MaintenancePolicy()
    )
    assert result.status is MaintenanceStatus.FAILED
    assert result.error == "every file group (12 files) failed to rewrite"


def test_partial_progress_raises_on_conflicting_groups_and_is_retried() -> None:
    lost = RuntimeError(
        "java.lang.RuntimeException: partial-progress.enabled is true but 2 rewrite commits "
        "failed. This is more than the maximum allowed failures of 0."
    )
    runner = FakeRunner(lost, [{"rewritten_data_files_count": 5, "added_data_files_count": 1}])
    result = executor(runner, FakeInspector(inspection())).execute(
        request(**{"partial-progress.enabled": "true"}), MaintenancePolicy()
    )
    assert result.status is MaintenanceStatus.SUCCEEDED
    assert len(runner.statements) == 2
    assert all(
        "'partial-progress.max-failed-commits', '0'" in statement for statement in runner.statements
    )
    # An operator's own choice stays.
    runner = FakeRunner([])
    executor(runner, FakeInspector(inspection())).execute(
        request(**{"partial-progress.enabled": "true", "partial-progress.max-failed-commits": "3"}),
        MaintenancePolicy(),
    )
    assert "'partial-progress.max-failed-commits', '3'" in runner.statements[0]


def snaps(*specs: tuple[int, int, bool]) -> tuple[SnapshotStats, ...]:
    return tuple(SnapshotStats(sid, ms, "overwrite", offsets) for sid, ms, offsets in specs)


def test_expiry_cutoff_is_held_at_the_latest_offsets_snapshot() -> None:
    history = snaps((1, 1000, True), (2, 2000, True), (3, 3000, False), (4, 4000, False))
    after = snaps((2, 2000, True), (3, 3000, False), (4, 4000, False))
    runner = FakeRunner([{"deleted_data_files_count": 2, "deleted_manifest_lists_count": 1}])
    result = executor(
        runner, FakeInspector(inspection(snapshots=history), inspection(snapshots=after))
    ).execute(
        request(A.EXPIRE_SNAPSHOTS, older_than_ms=str(NOW_MS), retain_last="1"), MaintenancePolicy()
    )
    assert result.status is MaintenanceStatus.SUCCEEDED
    (statement,) = runner.statements
    assert f"older_than => {timestamp_literal(2000)}" in statement
    assert "retain_last => 1" in statement
    assert (result.files_before, result.files_after) == (4, 3)
    assert result.message is not None and "cutoff held at offsets snapshot 2" in result.message


def test_expiry_defaults_come_from_the_policy() -> None:
    runner = FakeRunner([])
    policy = MaintenancePolicy(expire_max_age_s=3600, expire_retain_last=7)
    history = snaps((1, NOW_MS - 10, True))
    result = executor(runner, FakeInspector(inspection(snapshots=history))).execute(
        request(A.EXPIRE_SNAPSHOTS), policy
    )
    assert result.status is MaintenanceStatus.SKIPPED
    assert f"older_than => {timestamp_literal(NOW_MS - 3_600_000)}" in runner.statements[0]
    assert "retain_last => 7" in runner.statements[0]


def test_expiry_that_lost_the_offsets_snapshot_fails_loudly() -> None:
    history = snaps((1, 1000, True), (2, 2000, False))
    runner = FakeRunner([])
    result = executor(
        runner, FakeInspector(inspection(snapshots=history), inspection(snapshots=history[1:]))
    ).execute(request(A.EXPIRE_SNAPSHOTS), MaintenancePolicy())
    assert result.status is MaintenanceStatus.FAILED
    assert result.error == "the offsets snapshot 1 is gone after expiry"


def test_orphans_under_24_hours_use_the_action_api() -> None:
    runner = FakeRunner()
    cutoff = NOW_MS - 2 * 3_600_000
    result = executor(runner, FakeInspector(inspection())).execute(
        request(A.REMOVE_ORPHAN_FILES, older_than_ms=str(cutoff)), MaintenancePolicy()
    )
    assert result.status is MaintenanceStatus.SUCCEEDED
    assert runner.orphan_calls == [("`icefjord`.`shop`.`orders`", cutoff)]
    assert runner.statements == []
    assert (result.files_before, result.files_after) == (1, 0)


def test_orphans_over_24_hours_use_the_procedure() -> None:
    runner = FakeRunner([{"orphan_file_location": "file:/a"}, {"orphan_file_location": "file:/b"}])
    result = executor(runner, FakeInspector(inspection())).execute(
        request(A.REMOVE_ORPHAN_FILES, dry_run="true"), MaintenancePolicy()
    )
    (statement,) = runner.statements
    cutoff = NOW_MS - 3 * 86_400_000
    assert re.search(
        rf"older_than => {re.escape(timestamp_literal(cutoff))}, dry_run => true, "
        r"prefix_listing => true",
        statement,
    )
    assert (result.status, result.files_before, result.files_after) == (
        MaintenanceStatus.SUCCEEDED,
        2,
        2,
    )


def test_rewrite_manifests() -> None:
    runner = FakeRunner([{"rewritten_manifests_count": 4, "added_manifests_count": 1}])
    result = executor(runner, FakeInspector(inspection())).execute(
        request(A.REWRITE_MANIFESTS), MaintenancePolicy()
    )
    assert result.status is MaintenanceStatus.SUCCEEDED
    assert result.message == "rewrote 4 manifests into 1"


def test_conflict_classification_and_summary() -> None:
    assert is_conflict(CONFLICT)
    assert is_conflict(RuntimeError("org.apache.iceberg.exceptions.CommitFailedException: x"))
    assert is_conflict(
        RuntimeError("java.lang.RuntimeException: Cannot commit rewrite because of ...")
    )
    assert not is_conflict(RuntimeError("AnalysisException: table not found"))
    assert error_summary(ValueError("plain")) == "ValueError: plain"
    assert len(error_summary(ValueError("x" * 1000))) == 500


# -- the compaction lease ---------------------------------------------------------------------

LEASE_SET = (
    "ALTER TABLE `icefjord`.`shop`.`orders` SET TBLPROPERTIES "
    f"('icefjord.maintenance.lease-until-ms' = '{NOW_MS + 30_000}')"
)
LEASE_UNSET = (
    "ALTER TABLE `icefjord`.`shop`.`orders` UNSET TBLPROPERTIES IF EXISTS "
    "('icefjord.maintenance.lease-until-ms')"
)


@pytest.mark.parametrize(
    "action", [A.COMPACT_DATA_FILES, A.REWRITE_POSITION_DELETES, A.REWRITE_MANIFESTS]
)
def test_a_rewrite_holds_the_lease_around_every_attempt(action: A) -> None:
    runner = FakeRunner([], CONFLICT, [{"rewritten_data_files_count": 3}], [])
    result = executor(runner, FakeInspector(inspection()), lease_s=30).execute(
        request(action), MaintenancePolicy()
    )
    assert result.status is not MaintenanceStatus.FAILED, result
    assert runner.statements[0] == LEASE_SET
    assert runner.statements[-1] == LEASE_UNSET
    assert len(runner.statements) == 4  # lease, conflict, retry, release
    assert all("CALL" in s for s in runner.statements[1:3])


def test_the_lease_is_released_when_the_rewrite_fails() -> None:
    runner = FakeRunner([], RuntimeError("AnalysisException: no such procedure"), [])
    result = executor(runner, FakeInspector(inspection()), lease_s=30).execute(
        request(), MaintenancePolicy()
    )
    assert result.status is MaintenanceStatus.FAILED
    assert runner.statements[-1] == LEASE_UNSET


def test_a_lease_that_cannot_be_released_runs_out_by_itself() -> None:
    runner = FakeRunner(
        [], [{"rewritten_data_files_count": 3}], RuntimeError("catalog unreachable")
    )
    result = executor(runner, FakeInspector(inspection()), lease_s=30).execute(
        request(), MaintenancePolicy()
    )
    assert result.status is MaintenanceStatus.SUCCEEDED  # the rewrite itself committed
    assert runner.statements[-1] == LEASE_UNSET


@pytest.mark.parametrize("action", [A.EXPIRE_SNAPSHOTS, A.REMOVE_ORPHAN_FILES])
def test_actions_that_only_remove_take_no_lease(action: A) -> None:
    runner = FakeRunner()
    executor(runner, FakeInspector(inspection()), lease_s=30).execute(
        request(action), MaintenancePolicy()
    )
    assert not any("TBLPROPERTIES" in s for s in runner.statements)


def test_no_lease_when_it_is_switched_off() -> None:
    runner = FakeRunner([{"rewritten_data_files_count": 3}])
    executor(runner, FakeInspector(inspection()), lease_s=0).execute(request(), MaintenancePolicy())
    assert len(runner.statements) == 1 and "CALL" in runner.statements[0]


def test_the_rewrite_waits_for_a_writer_commit_in_flight_once_it_holds_the_lease() -> None:
    runner = FakeRunner([], [{"rewritten_data_files_count": 3}], [])
    inspector = FakeInspector(inspection())
    inspector.snapshot_ids = [1, 1, 1, 2]  # the in-flight commit lands on the third look
    result = executor(runner, inspector, lease_s=30, lease_settle_s=5).execute(
        request(), MaintenancePolicy()
    )
    assert result.status is MaintenanceStatus.SUCCEEDED
    assert inspector.polls == 4  # the baseline, then until the new snapshot: not the 5 s
    assert runner.statements[0] == LEASE_SET and "CALL" in runner.statements[1]


def test_the_settle_is_bounded_by_the_writers_recent_commit_time() -> None:
    runner = FakeRunner([], [{"rewritten_data_files_count": 3}], [])
    inspector = FakeInspector(inspection())
    inspector.snapshot_ids = [7]  # nothing in flight: the table never moves
    began = time.monotonic()
    executor(runner, inspector, lease_s=30, lease_settle_s=5).execute(
        request(), MaintenancePolicy(), writer_commit_s=0.2
    )
    # 1.5 x 0.2 s + one poll = 0.4 s: four polls after the baseline.
    assert inspector.polls == 5
    assert time.monotonic() - began < 2


def test_no_settle_without_a_lease_or_a_budget() -> None:
    for kw in ({"lease_s": 0, "lease_settle_s": 5}, {"lease_s": 30, "lease_settle_s": 0}):
        inspector = FakeInspector(inspection())
        executor(FakeRunner(), inspector, **kw).execute(request(), MaintenancePolicy())
        assert inspector.polls == 0


def test_a_retry_under_the_lease_does_not_pause() -> None:
    runner = FakeRunner([], CONFLICT, [{"rewritten_data_files_count": 3}], [])
    began = time.monotonic()
    result = executor(runner, FakeInspector(inspection()), lease_s=30).execute(
        request(), MaintenancePolicy()
    )
    # executor() sets retry_delay_s=0; build one with a long pause to see it is skipped.
    slow = MaintenanceExecutor(
        FakeRunner([], CONFLICT, [{"rewritten_data_files_count": 3}], []),
        FakeInspector(inspection()),
        catalog="icefjord",
        clock=lambda: NOW_S,
        retry_delay_s=30,
        lease_s=30,
    )
    assert slow.execute(request(), MaintenancePolicy()).status is MaintenanceStatus.SUCCEEDED
    assert result.status is MaintenanceStatus.SUCCEEDED
    assert time.monotonic() - began < 5


def partitioned(*files: tuple[str, FileContent], transform: str = "identity") -> TableInspection:
    return TableInspection(
        table="shop.orders",
        inspected_at_ms=NOW_MS,
        files=tuple(FileStats(kind, (("region", key),), 10, 100) for key, kind in files),
        snapshots=(),
        current_snapshot_id=None,
        manifests=1,
        manifest_bytes=10,
        metadata_file_bytes=10,
        partition_fields=(PartitionField("region", "region", transform),),
        format_version=3,
    )


D, P = FileContent.DATA, FileContent.POSITION_DELETES
SPREAD = (
    *[("us", D)] * 3,
    ("us", P),
    *[("eu", D)] * 5,
    ("ap", D),  # one file and no deletes: nothing to combine
)


def test_a_whole_table_compaction_under_the_lease_runs_one_partition_per_lease() -> None:
    rows = {"rewritten_data_files_count": 4, "added_data_files_count": 1}
    runner = FakeRunner([], [rows], [], [], [rows], [])
    result = executor(runner, FakeInspector(partitioned(*SPREAD)), lease_s=30).execute(
        request(), MaintenancePolicy()
    )
    calls = [s for s in runner.statements if "CALL" in s]
    # Fullest first; each between its own lease and release.
    assert [re.search(r"where => '(.*)'", c).group(1) for c in calls] == [  # type: ignore[union-attr]
        r"`region` = \'eu\'",
        r"`region` = \'us\'",
    ]
    assert runner.statements == [LEASE_SET, calls[0], LEASE_UNSET, LEASE_SET, calls[1], LEASE_UNSET]
    assert result.status is MaintenanceStatus.SUCCEEDED
    assert result.message is not None
    assert "rewrote 8 data files into 2" in result.message
    assert "in 2 partitions" in result.message


@pytest.mark.parametrize(
    ("kw", "inspected", "req"),
    [
        ({"lease_s": 0}, partitioned(*SPREAD), request()),  # no lease: nothing to keep short
        ({"lease_s": 30}, partitioned(*SPREAD), request(partition="region = 'eu'")),
        ({"lease_s": 30}, partitioned(*SPREAD, transform="bucket[4]"), request()),
    ],
)
def test_one_call_when_slicing_is_not_needed_or_not_possible(
    kw: dict[str, Any], inspected: TableInspection, req: MaintenanceRequest
) -> None:
    runner = FakeRunner()
    executor(runner, FakeInspector(inspected), **kw).execute(req, MaintenancePolicy())
    calls = [s for s in runner.statements if "CALL" in s]
    assert len(calls) == 1
    assert ("where" in calls[0]) == (req.partition is not None)


def test_a_slice_that_gives_up_leaves_the_others_done_and_reports_it() -> None:
    rows = {"rewritten_data_files_count": 5, "added_data_files_count": 1}
    runner = FakeRunner([], CONFLICT, CONFLICT, CONFLICT, [], [], [rows], [])
    result = executor(runner, FakeInspector(partitioned(*SPREAD)), lease_s=30).execute(
        request(), MaintenancePolicy()
    )
    assert result.status is MaintenanceStatus.FAILED
    assert result.error is not None and "gave up after 3 attempts" in result.error
    assert result.message is not None and "rewrote 5 data files" in result.message


def test_between_two_partitions_the_held_back_writer_commit_goes_in() -> None:
    rows = {"rewritten_data_files_count": 4, "added_data_files_count": 1}
    runner = FakeRunner([], [rows], [], [], [rows], [])

    class Watching(FakeInspector):
        def current_snapshot_id(self, table: TableId) -> int | None:
            runner.statements.append("look")
            return super().current_snapshot_id(table)

    inspector = Watching(partitioned(*SPREAD))
    # Each wait ends at its second look: the snapshot moved (a writer commit landed).
    inspector.snapshot_ids = [1, 2, 2, 3, 3, 4]
    executor(runner, inspector, lease_s=30, lease_settle_s=2).execute(
        request(), MaintenancePolicy()
    )
    shape = ["CALL" if "CALL" in s else s for s in runner.statements]
    assert shape == [
        LEASE_SET, "look", "look", "CALL", LEASE_UNSET,  # settle, first partition
        "look", "look",  # hand-over: the writer's held commit lands between the leases
        LEASE_SET, "look", "look", "CALL", LEASE_UNSET,  # settle, second partition
    ]  # fmt: skip


def test_the_priority_boost_spans_each_lease_from_taking_to_release() -> None:
    runner = FakeRunner([], [{"rewritten_data_files_count": 3}], [])
    seen: list[str] = []

    @contextmanager
    def boost() -> Iterator[None]:
        seen.append(f"boost after {len(runner.statements)} statements")
        yield
        seen.append(f"normal after {len(runner.statements)} statements")

    result = executor(runner, FakeInspector(inspection()), lease_s=30, boost=boost).execute(
        request(), MaintenancePolicy()
    )
    assert result.status is MaintenanceStatus.SUCCEEDED
    # Boosted before the lease is taken, back to normal only once it is released.
    assert seen == ["boost after 0 statements", "normal after 3 statements"]
    assert runner.statements[0] == LEASE_SET and runner.statements[-1] == LEASE_UNSET


def test_no_boost_without_a_lease() -> None:
    entered: list[bool] = []

    @contextmanager
    def boost() -> Iterator[None]:
        entered.append(True)
        yield

    executor(FakeRunner(), FakeInspector(inspection()), lease_s=0, boost=boost).execute(
        request(), MaintenancePolicy()
    )
    assert entered == []


def test_a_lease_the_writer_goes_ahead_under_runs_without_the_boost() -> None:
    runner = FakeRunner([], [{"rewritten_data_files_count": 3}], [])
    entered: list[bool] = []

    @contextmanager
    def boost() -> Iterator[None]:
        entered.append(True)
        yield

    result = executor(runner, FakeInspector(inspection()), lease_s=30, boost=boost).execute(
        request(), MaintenancePolicy(), writer_held=False
    )
    assert result.status is MaintenanceStatus.SUCCEEDED
    assert entered == []
    # The lease itself is still taken and released around the rewrite.
    assert runner.statements[0] == LEASE_SET and runner.statements[-1] == LEASE_UNSET


def test_a_compaction_of_a_table_with_equality_deletes_drops_the_dangling_ones() -> None:
    files = (*inspection(3).files, FileStats(FileContent.EQUALITY_DELETES, (), 5, 40))
    before = dataclasses.replace(inspection(3), files=files)
    runner = FakeRunner(
        [{"rewritten_data_files_count": 3, "added_data_files_count": 1}],
    )
    result = executor(runner, FakeInspector(before, inspection(1))).execute(
        request(), MaintenancePolicy()
    )
    assert result.status is MaintenanceStatus.SUCCEEDED
    assert runner.dangling_calls == ["`icefjord`.`shop`.`orders`"]
    assert result.message == "rewrote 3 data files into 1, removed 2 delete files"


def test_a_compaction_without_equality_deletes_looks_for_no_dangling_ones() -> None:
    runner = FakeRunner([{"rewritten_data_files_count": 3, "added_data_files_count": 1}])
    executor(runner, FakeInspector(inspection(3), inspection(1))).execute(
        request(), MaintenancePolicy()
    )
    assert runner.dangling_calls == []


def test_expiry_keeps_every_snapshot_a_sharing_writer_resumes_from() -> None:
    """Two writer instances share the table, each recording its own partitions: the older
    instance's last commit (snapshot 2) still holds partitions 0-2's offsets when the other
    instance has committed since, and the cutoff is held there, not at the newest."""

    def carrier(sid: int, ms: int, partitions: str) -> SnapshotStats:
        names = frozenset(f"icefjord.changes.shop.orders:{p}" for p in partitions)
        return SnapshotStats(sid, ms, "overwrite", True, names)

    history = (
        carrier(1, 1000, "012"),
        carrier(2, 2000, "012"),
        carrier(3, 3000, "345"),
        carrier(4, 4000, "345"),
        SnapshotStats(5, 5000, "replace", False, frozenset()),
    )
    runner = FakeRunner([])
    result = executor(
        runner, FakeInspector(inspection(snapshots=history), inspection(snapshots=history[1:]))
    ).execute(
        request(A.EXPIRE_SNAPSHOTS, older_than_ms=str(NOW_MS), retain_last="1"), MaintenancePolicy()
    )
    assert result.status is MaintenanceStatus.SUCCEEDED, result.error
    assert f"older_than => {timestamp_literal(2000)}" in runner.statements[0]
    # Had snapshot 2 gone, partitions 0-2 would have lost their offsets: a failure.
    runner = FakeRunner([])
    result = executor(
        runner, FakeInspector(inspection(snapshots=history), inspection(snapshots=history[2:]))
    ).execute(request(A.EXPIRE_SNAPSHOTS, older_than_ms=str(NOW_MS)), MaintenancePolicy())
    assert result.status is MaintenanceStatus.FAILED
    assert result.error == "the offsets snapshot 2 is gone after expiry"
