"""MaintainerService with in-memory fakes: events in, requests and results out, in order."""

from __future__ import annotations

from typing import Any

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from services.maintainer.__main__ import EXIT_BAD_SETTINGS, main
from services.maintainer.catchup import CatchUpRule
from services.maintainer.config import MaintainerSettings
from services.maintainer.execute import MaintenanceExecutor
from services.maintainer.health import FileContent, FileStats, PartitionField, TableInspection
from services.maintainer.identifiers import TableId
from services.maintainer.inspect import UnknownTableError
from services.maintainer.metrics import MaintainerMetrics
from services.maintainer.policy import MaintenancePolicy
from services.maintainer.service import HealthBoard, MaintainerService
from shared.errors import RetryableError
from shared.events import (
    CommitDone,
    ControlEvent,
    MaintenanceAction,
    MaintenanceRequest,
    MaintenanceResult,
    MaintenanceStatus,
)

pytestmark = pytest.mark.unit

T0 = 1_700_000_000.0
TABLE = "shop.orders"
ORPHANS_LATER = 10 * 86_400.0


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> float:
        return self.now


class FakeSource:
    def __init__(self) -> None:
        self.batches: list[list[ControlEvent]] = []
        self.commits = 0

    def poll(self, timeout: float) -> list[ControlEvent]:
        return self.batches.pop(0) if self.batches else []

    def commit(self) -> None:
        self.commits += 1


class FakePublisher:
    def __init__(self) -> None:
        self.sent: list[ControlEvent] = []
        self.queued: list[ControlEvent] = []
        self.failures = 0

    def publish(self, event: ControlEvent) -> None:
        self.queued.append(event)

    def flush(self, timeout: float = 30.0) -> None:
        if self.failures:
            self.failures -= 1
            self.queued.clear()
            raise RetryableError("broker down")
        self.sent.extend(self.queued)
        self.queued.clear()


class FakeExecutor:
    def __init__(self, clock: Clock) -> None:
        self.requests: list[MaintenanceRequest] = []
        self.writer_commit_s: list[float | None] = []
        self.writer_held: list[bool] = []
        self.clock = clock

    def execute(
        self,
        request: MaintenanceRequest,
        policy: MaintenancePolicy,
        *,
        writer_commit_s: float | None = None,
        writer_held: bool = True,
    ) -> MaintenanceResult:
        self.requests.append(request)
        self.writer_commit_s.append(writer_commit_s)
        self.writer_held.append(writer_held)
        self.clock.now += 5
        return MaintenanceResult(
            request_id=request.request_id,
            table=request.table,
            action=request.action,
            status=MaintenanceStatus.SUCCEEDED,
            duration_ms=5000,
        )


def small_files(count: int, clock: Clock) -> TableInspection:
    return TableInspection(
        table=TABLE,
        inspected_at_ms=int(clock() * 1000),
        files=tuple(FileStats(FileContent.DATA, (("region", "eu"),), 1, 10) for _ in range(count)),
        snapshots=(),
        current_snapshot_id=None,
        manifests=1,
        manifest_bytes=10,
        metadata_file_bytes=10,
        partition_fields=(PartitionField("region", "region", "identity"),),
    )


class FakeTables:
    def __init__(self, clock: Clock, files: int = 5) -> None:
        self.clock = clock
        self.files = files
        self.inspected: list[str] = []
        self.names = [TABLE]

    def list_tables(self) -> list[str]:
        return list(self.names)

    def inspect(self, table: TableId) -> TableInspection:
        if str(table) not in self.names:
            raise UnknownTableError(str(table))
        self.inspected.append(str(table))
        return small_files(self.files, self.clock)

    def exists(self, table: TableId) -> bool:
        return str(table) in self.names

    def columns(self, table: TableId) -> frozenset[str]:
        return frozenset({"region"})


def make(
    executor: Any = None, before_first_action: Any = None, **settings: Any
) -> tuple[MaintainerService, FakeSource, FakePublisher, FakeTables, Clock, CollectorRegistry]:
    clock = Clock()
    source, publisher, tables = FakeSource(), FakePublisher(), FakeTables(clock)
    registry = CollectorRegistry()
    board = HealthBoard()
    settings.setdefault("orphan_initial_delay_s", ORPHANS_LATER)
    service = MaintainerService(
        MaintainerSettings(**settings),
        source=source,
        publisher=publisher,
        executor=executor or FakeExecutor(clock),
        tables=tables,
        metrics=MaintainerMetrics.create(registry, board.snapshot, clock),
        board=board,
        clock=clock,
        before_first_action=before_first_action,
    )
    return service, source, publisher, tables, clock, registry


def commit_done(
    snapshot_id: int,
    clock: Clock,
    files: int = 10,
    duration_ms: int = 1,
    lag_s: float | None = None,
    write_path: str | None = None,
) -> ControlEvent:
    """A writer commit now; ``lag_s``: its newest change was that old (None: no watermark);
    ``write_path``: how the writer committed (None: not reported)."""
    committed_ms = int(clock() * 1000)
    commit = CommitDone(
        table=TABLE,
        commit_id=str(snapshot_id),
        snapshot_id=snapshot_id,
        writer_epoch=1,
        records=1,
        inserted=1,
        updated=0,
        deleted=0,
        data_files_added=files,
        delete_files_added=0,
        bytes_added=1,
        watermark_ms=None if lag_s is None else committed_ms - int(lag_s * 1000),
        committed_at_ms=committed_ms,
        duration_ms=duration_ms,
        write_path=write_path,
    )
    return ControlEvent.new(TABLE, commit, "writer", now_ms=committed_ms)


def operator(
    table: str = TABLE, by: str = "operator:ann", age_s: float = 0, **kw: Any
) -> ControlEvent:
    request = MaintenanceRequest(
        request_id=kw.pop("request_id", "op-1"),
        table=table,
        action=kw.pop("action", MaintenanceAction.COMPACT_DATA_FILES),
        reason="by hand",
        requested_by=by,
        **kw,
    )
    return ControlEvent.new(table, request, "cli", now_ms=int((T0 - age_s) * 1000))


def test_a_fragmented_table_is_compacted_request_first_result_after() -> None:
    service, source, publisher, tables, clock, _ = make()
    tables.files = 150
    service.step()
    kinds = [type(e.payload).__name__ for e in publisher.sent]
    assert kinds == ["MaintenanceRequest", "MaintenanceResult"]
    request, result = (e.payload for e in publisher.sent)
    assert isinstance(request, MaintenanceRequest) and isinstance(result, MaintenanceResult)
    assert request.action is MaintenanceAction.COMPACT_DATA_FILES
    assert request.partition == "region = 'eu'"
    assert request.requested_by == "maintainer/policy:small-files"
    assert "150 small files" in request.reason
    assert result.request_id == request.request_id
    assert all(e.producer == "maintainer" and e.table == TABLE for e in publisher.sent)
    assert source.commits == 1
    # Right after, the table is re-inspected; the same action waits for the minimum interval.
    service.step()
    assert len(publisher.sent) == 2
    assert tables.inspected == [TABLE, TABLE]
    clock.now += 61
    service.step()
    assert len(publisher.sent) == 4


def test_the_warm_up_runs_once_before_the_first_action_and_never_without_one() -> None:
    calls: list[int] = []
    service, _, publisher, tables, clock, _ = make(
        before_first_action=lambda: calls.append(len(publisher.sent))
    )
    tables.files = 5  # healthy: nothing to do
    for _ in range(3):
        service.step()
        clock.now += 120
    assert calls == [] and publisher.sent == []
    tables.files = 150
    service.step()
    assert calls == [0]  # before the request was announced
    assert len(publisher.sent) == 2
    clock.now += 120
    service.step()
    assert len(publisher.sent) == 4 and calls == [0]


def test_commit_events_trigger_an_early_look_once_a_trigger_may_be_crossed() -> None:
    service, source, publisher, tables, clock, _ = make(inspect_min_interval_s=10)
    service.step()
    assert tables.inspected == [TABLE] and publisher.sent == []
    clock.now += 20
    source.batches.append([commit_done(1, clock, files=50)])
    service.step()
    assert tables.inspected == [TABLE]  # 55 files at most: no trigger crossed yet
    assert service.healths()[TABLE].partition_files_max == 55
    clock.now += 1
    source.batches.append([commit_done(2, clock, files=50)])
    tables.files = 105
    service.step()  # 105 may be over 100: look again, and compact
    assert tables.inspected == [TABLE, TABLE]
    assert [type(e.payload).__name__ for e in publisher.sent] == [
        "MaintenanceRequest",
        "MaintenanceResult",
    ]


def test_operator_requests_run_at_once_and_own_or_stale_ones_do_not() -> None:
    executor = FakeExecutor(Clock())
    service, source, publisher, _, _, registry = make(executor)
    source.batches.append(
        [
            operator(),
            operator(by="maintainer/policy:small-files", request_id="mine"),
            operator(age_s=7200, request_id="stale"),
        ]
    )
    service.step()
    assert [r.request_id for r in executor.requests] == ["op-1"]
    results = [e.payload for e in publisher.sent]
    assert [type(p).__name__ for p in results] == ["MaintenanceResult"]
    text = generate_latest(registry).decode()
    assert (
        'icefjord_maintenance_actions_total{action="COMPACT_DATA_FILES",status="SUCCEEDED",'
        'table="shop.orders"} 1.0' in text
    )


class Runner:
    def __init__(self) -> None:
        self.statements: list[str] = []

    def sql(self, statement: str) -> list[dict[str, Any]]:
        self.statements.append(statement)
        return []

    def delete_orphans(self, table: str, older_than_ms: int) -> list[str]:
        raise AssertionError("not expected")

    def drop_dangling_equality_deletes(self, table: str) -> int:
        raise AssertionError("not expected")


def test_bad_operator_requests_get_rejected_results() -> None:
    clock = Clock()
    runner = Runner()
    tables = FakeTables(clock)
    executor = MaintenanceExecutor(runner, tables, catalog="icefjord", clock=clock)
    service, source, publisher, _, _, registry = make(executor)
    source.batches.append(
        [
            operator(table="shop.nope", request_id="unknown"),
            operator(table="shop.x'; DROP TABLE y; --", request_id="malformed"),
            operator(request_id="option", options={"rewrite-everything": "true"}),
        ]
    )
    service.step()
    results = {e.payload.request_id: e.payload for e in publisher.sent}
    assert all(isinstance(r, MaintenanceResult) for r in results.values())
    assert {k: r.status for k, r in results.items()} == {
        "unknown": MaintenanceStatus.REJECTED,
        "malformed": MaintenanceStatus.REJECTED,
        "option": MaintenanceStatus.REJECTED,
    }
    assert results["unknown"].error == "unknown table shop.nope"
    assert "malformed table identifier" in (results["malformed"].error or "")
    assert "bad option 'rewrite-everything'" in (results["option"].error or "")
    assert runner.statements == []
    text = generate_latest(registry).decode()
    assert 'table="<invalid>"' in text and "DROP" not in text


def test_results_that_could_not_be_delivered_go_out_with_the_next_step() -> None:
    service, source, publisher, _, _, _ = make()
    source.batches.append([operator()])
    publisher.failures = 1
    with pytest.raises(RetryableError):
        service.step()
    assert publisher.sent == []
    service.step()
    assert [e.payload.request_id for e in publisher.sent] == ["op-1"]


def test_dropped_tables_leave_the_model_and_the_metrics() -> None:
    service, _, _, tables, clock, registry = make(inspect_interval_s=60)
    service.step()
    text = generate_latest(registry).decode()
    assert 'icefjord_table_data_files{table="shop.orders"} 5.0' in text
    assert 'icefjord_table_partition_files_max{table="shop.orders"} 5.0' in text
    assert 'icefjord_table_delete_files{kind="position",table="shop.orders"} 0.0' in text
    tables.names = []
    clock.now += 61
    service.step()
    assert service.healths() == {}
    assert "shop.orders" not in generate_latest(registry).decode()


def test_orphan_cleanup_waits_for_the_initial_delay() -> None:
    service, _, publisher, _, clock, _ = make(orphan_initial_delay_s=100)
    service.step()
    assert publisher.sent == []
    clock.now += 101
    service.step()
    request = publisher.sent[0].payload
    assert isinstance(request, MaintenanceRequest)
    assert request.action is MaintenanceAction.REMOVE_ORPHAN_FILES


class SkippingExecutor(FakeExecutor):
    def execute(
        self,
        request: MaintenanceRequest,
        policy: MaintenancePolicy,
        *,
        writer_commit_s: float | None = None,
        writer_held: bool = True,
    ) -> MaintenanceResult:
        self.requests.append(request)
        return MaintenanceResult(
            request_id=request.request_id,
            table=request.table,
            action=request.action,
            status=MaintenanceStatus.SKIPPED,
            duration_ms=1,
        )


def test_an_action_that_found_nothing_to_do_waits_until_the_table_changes() -> None:
    executor = SkippingExecutor(Clock())
    service, source, _, tables, clock, _ = make(executor, planner={"min_interval_s": 0})
    tables.files = 150
    service.step()
    assert len(executor.requests) == 1
    for _ in range(3):
        clock.now += 120
        service.step()
    assert len(executor.requests) == 1, "the same state is not compacted again"
    clock.now += 1
    source.batches.append([commit_done(5, clock, files=1)])
    service.step()
    assert len(executor.requests) == 2


def test_tables_the_maintainer_cannot_name_safely_are_left_alone() -> None:
    service, _, _, tables, _, _ = make()
    tables.names = [TABLE, "a.b.c", "my-ns.orders"]
    service.step()
    assert tables.inspected == [TABLE]
    assert set(service.healths()) == {TABLE}


def test_tables_outside_the_include_pattern_are_left_alone() -> None:
    service, source, publisher, tables, clock, _ = make(include=r"other\..+")
    tables.files = 500
    source.batches.append([commit_done(1, clock)])
    service.step()
    assert tables.inspected == [] and publisher.sent == [] and service.healths() == {}


def test_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    defaults = MaintainerSettings()
    assert (defaults.metrics.port, defaults.spark.master, defaults.producer) == (
        9404,
        "local[2]",
        "maintainer",
    )
    monkeypatch.setenv("ICEFJORD_MAINTAINER_POLICY__COMPACT_MIN_SMALL_FILES", "40")
    monkeypatch.setenv("ICEFJORD_MAINTAINER_TABLES", '{"shop.orders": {"manifests_max": 7}}')
    monkeypatch.setenv("ICEFJORD_MAINTAINER_PLANNER__MAX_BUSY_FRACTION", "0.25")
    monkeypatch.setenv("ICEFJORD_MAINTAINER_CATCH_UP__LAG_S", "30")
    settings = MaintainerSettings()
    assert defaults.catch_up.lag_s == 0 and settings.catch_up == CatchUpRule(lag_s=30)
    assert settings.policy_for("shop.orders").manifests_max == 7
    assert settings.policy_for("shop.orders").compact_min_small_files == 40
    assert settings.policy_for("shop.other").manifests_max == 100
    assert settings.planner.limits().max_busy_fraction == 0.25


@pytest.mark.parametrize(
    ("name", "value", "mentions"),
    [
        ("ICEFJORD_MAINTAINER_TABLES", '{"bad name": {}}', "tables"),
        ("ICEFJORD_MAINTAINER_TABLES", '{"a.b": {"nope": 1}}', "tables"),
        ("ICEFJORD_MAINTAINER_TABLES", '{"a.b": {"manifests_max": 0}}', "tables"),
        ("ICEFJORD_MAINTAINER_POLICY__COMPACT_DELETE_RATIO", "2", "policy"),
        ("ICEFJORD_MAINTAINER_CATCH_UP__MAX_PRESSURE", "0.5", "catch_up"),
        ("ICEFJORD_MAINTAINER_INCLUDE", "([unclosed", "include"),
    ],
)
def test_invalid_settings_exit_with_one_line(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    name: str,
    value: str,
    mentions: str,
) -> None:
    monkeypatch.setenv(name, value)
    assert main() == EXIT_BAD_SETTINGS
    err = capsys.readouterr().err.strip()
    assert mentions in err and len(err.splitlines()) == 1


def test_the_executor_learns_how_long_the_writers_commits_take() -> None:
    executor = FakeExecutor(Clock())
    service, source, _, tables, clock, _ = make(executor, inspect_min_interval_s=10)
    executor.clock = clock
    service.step()
    clock.now += 20
    # The slowest of the recent commits is what one in flight may still take.
    source.batches.append(
        [
            commit_done(1, clock, files=50, duration_ms=800),
            commit_done(2, clock, files=50, duration_ms=2300),
        ]
    )
    tables.files = 105
    service.step()
    assert executor.requests, "the fragmented table was not compacted"
    assert executor.writer_commit_s == [pytest.approx(2.3)]


def test_a_quiet_writer_has_no_commit_in_flight_to_wait_for() -> None:
    executor = FakeExecutor(Clock())
    service, source, _, _, clock, _ = make(executor)
    executor.clock = clock
    service.step()
    source.batches.append([commit_done(1, clock, files=1, duration_ms=2000)])
    service.step()
    clock.now += 61
    source.batches.append([operator(action=MaintenanceAction.COMPACT_DATA_FILES)])
    service.step()
    assert executor.writer_commit_s == [0.0]


@pytest.mark.parametrize(
    ("paths", "held"),
    [
        ((), True),  # no commit seen: the writer may be waiting
        ((None,), True),  # a writer that does not say how it commits
        (("upsert",), True),  # deletion vectors in stored files
        (("append",), False),
        (("merge",), True),
        (("insert",), True),
        (("replace",), True),
        (("merge", "append"), False),  # the last commit counts
        (("append", "merge"), True),
    ],
)
def test_the_executor_learns_whether_the_lease_holds_the_writer_back(
    paths: tuple[str | None, ...], held: bool
) -> None:
    executor = FakeExecutor(Clock())
    service, source, _, _, clock, _ = make(executor)
    executor.clock = clock
    service.step()
    source.batches.append(
        [commit_done(n, clock, files=1, write_path=path) for n, path in enumerate(paths, 1)]
    )
    service.step()
    source.batches.append([operator(action=MaintenanceAction.COMPACT_DATA_FILES)])
    service.step()
    assert executor.writer_held == [held]


def _compactions(publisher: FakePublisher) -> int:
    return sum(
        1
        for e in publisher.sent
        if isinstance(e.payload, MaintenanceRequest)
        and e.payload.action is MaintenanceAction.COMPACT_DATA_FILES
    )


def _waits(registry: CollectorRegistry) -> float | None:
    return registry.get_sample_value("icefjord_maintenance_catch_up_waits_total", {"table": TABLE})


def test_compaction_waits_while_the_writer_is_behind_and_runs_once_it_caught_up() -> None:
    service, source, publisher, tables, clock, registry = make(catch_up=CatchUpRule(lag_s=30))
    tables.files = 150  # pressure 1.5: due, well under the catch-up limit of 3
    source.batches.append([commit_done(1, clock, files=1, lag_s=45)])
    service.step()
    clock.now += 30
    source.batches.append([commit_done(2, clock, files=1, lag_s=40)])
    service.step()
    assert _compactions(publisher) == 0
    assert _waits(registry) == 1  # counted once per wait, not per step
    clock.now += 5
    source.batches.append([commit_done(3, clock, files=1, lag_s=2)])
    service.step()
    assert _compactions(publisher) == 1


def test_a_writer_that_stays_behind_gets_the_compaction_after_the_longest_wait() -> None:
    service, source, publisher, tables, clock, _ = make(
        catch_up=CatchUpRule(lag_s=30, max_wait_s=120)
    )
    tables.files = 150
    for n in range(6):  # a commit every 20 s, each 50 s behind
        source.batches.append([commit_done(n + 1, clock, files=1, lag_s=50)])
        service.step()
        clock.now += 20
    assert _compactions(publisher) == 0  # 100 s of waiting
    source.batches.append([commit_done(7, clock, files=1, lag_s=50)])
    service.step()  # 120 s
    assert _compactions(publisher) == 1


def test_a_table_far_over_its_trigger_is_compacted_even_while_the_writer_is_behind() -> None:
    service, source, publisher, tables, clock, _ = make(catch_up=CatchUpRule(lag_s=30))
    tables.files = 300  # pressure 3.0
    source.batches.append([commit_done(1, clock, files=1, lag_s=90)])
    service.step()
    assert _compactions(publisher) == 1


def test_a_writer_that_stopped_committing_holds_nothing_back() -> None:
    service, source, publisher, tables, clock, _ = make(catch_up=CatchUpRule(lag_s=30))
    tables.files = 150
    source.batches.append([commit_done(1, clock, files=1, lag_s=90)])
    service.step()
    assert _compactions(publisher) == 0
    clock.now += 61  # no commit since: nothing is catching up
    service.step()
    assert _compactions(publisher) == 1


def test_catch_up_off_by_default_and_operator_requests_never_wait() -> None:
    service, source, publisher, tables, clock, _ = make()
    tables.files = 150
    source.batches.append([commit_done(1, clock, files=1, lag_s=90)])
    service.step()
    assert _compactions(publisher) == 1
    service, source, publisher, tables, clock, _ = make(catch_up=CatchUpRule(lag_s=30))
    source.batches.append([commit_done(1, clock, files=1, lag_s=90), operator()])
    service.step()
    assert _compactions(publisher) == 0  # the operator's request ran; it was not ours
    assert [type(e.payload).__name__ for e in publisher.sent] == ["MaintenanceResult"]
