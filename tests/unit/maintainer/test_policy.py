"""Policies: what fires at which figures, the reasons, the scope, and the expiry cutoff."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from services.maintainer.health import PartitionHealth, TableHealth
from services.maintainer.policy import DAY_S, MaintenancePolicy, evaluate, expire_plan
from shared.events import MaintenanceAction

pytestmark = pytest.mark.unit

NOW = 100 * 86_400_000
POLICY = MaintenancePolicy()
ORPHANS_DONE = {MaintenanceAction.REMOVE_ORPHAN_FILES: NOW}


def part(key: str = "region=eu", **figures: int) -> PartitionHealth:
    return PartitionHealth(key=key, filter=f"region = '{key.split('=')[1]}'", **figures)


def health(*partitions: PartitionHealth, **fields: object) -> TableHealth:
    return TableHealth("shop.orders", NOW, partitions=partitions, **fields)  # type: ignore[arg-type]


def actions(h: TableHealth, policy: MaintenancePolicy = POLICY, **kw: object) -> dict:  # type: ignore[type-arg]
    last = kw.pop("last", ORPHANS_DONE)
    return {c.action: c for c in evaluate(h, policy, NOW, last)}  # type: ignore[arg-type]


def test_a_healthy_table_needs_nothing() -> None:
    assert actions(health(part(data_files=10, small_files=10, data_records=1000))) == {}


def test_compaction_fires_at_100_small_files_in_one_partition_and_scopes_to_it() -> None:
    below = health(
        part(data_files=99, small_files=99), part("region=us", data_files=99, small_files=99)
    )
    assert MaintenanceAction.COMPACT_DATA_FILES not in actions(below)
    at = health(
        part(data_files=120, small_files=100), part("region=us", data_files=3, small_files=3)
    )
    candidate = actions(at)[MaintenanceAction.COMPACT_DATA_FILES]
    assert candidate.policy == "small-files"
    assert candidate.partition == "region = 'eu'"
    assert candidate.pressure == pytest.approx(1.0)
    assert "100 small files" in candidate.reason and "of 120 data files" in candidate.reason
    assert candidate.options["partial-progress.enabled"] == "true"
    request = candidate.to_request("id-1")
    assert request.requested_by == "maintainer/policy:small-files"
    assert (request.partition, request.reason) == (candidate.partition, candidate.reason)


def test_several_partitions_over_the_trigger_compact_the_whole_table() -> None:
    h = health(
        part(data_files=150, small_files=150), part("region=us", data_files=300, small_files=300)
    )
    candidate = actions(h)[MaintenanceAction.COMPACT_DATA_FILES]
    assert candidate.partition is None
    assert candidate.pressure == pytest.approx(3.0)
    assert "2 partition(s)" in candidate.reason and "region=us has 300" in candidate.reason


def test_compaction_fires_at_delete_ratio_0_3() -> None:
    below = health(
        part(data_files=2, data_records=1000, delete_records=299, position_delete_files=1)
    )
    assert actions(below) == {}
    at = health(part(data_files=2, data_records=1000, delete_records=300, position_delete_files=1))
    candidate = actions(at)[MaintenanceAction.COMPACT_DATA_FILES]
    assert candidate.policy == "delete-ratio"
    assert "delete ratio 0.30" in candidate.reason and "300 delete rows / 1000" in candidate.reason
    assert candidate.options["delete-ratio-threshold"] == "0.3"


def test_compaction_fires_after_n_commits_only_with_small_files() -> None:
    few = health(part(data_files=5, small_files=5), commits_since_compaction=600)
    assert actions(few) == {}
    many = health(part(data_files=12, small_files=12), commits_since_compaction=750)
    candidate = actions(many)[MaintenanceAction.COMPACT_DATA_FILES]
    assert candidate.policy == "commits"
    assert candidate.pressure == pytest.approx(1.5)
    assert "750 commits since the last compaction" in candidate.reason


def test_commit_trigger_needs_small_files_binpack_can_combine() -> None:
    spread = health(
        *(part(f"region=r{i}", data_files=1, small_files=1) for i in range(20)),
        commits_since_compaction=900,
    )
    assert actions(spread) == {}, "one small file per partition: nothing to combine"


def test_the_most_pressing_trigger_names_the_policy() -> None:
    h = health(
        part(
            data_files=110,
            small_files=110,
            data_records=100,
            delete_records=90,
            position_delete_files=3,
        )
    )
    candidate = actions(h)[MaintenanceAction.COMPACT_DATA_FILES]
    assert candidate.policy == "delete-ratio"  # 0.9 / 0.3 = 3.0 beats 110 / 100
    assert candidate.pressure == pytest.approx(3.0)
    assert "small-file trigger" in candidate.reason  # both reasons are given


LARGE = 60 * 400 * 2**20
"""60 data files of 400 MiB: more than a small file (under 128 MiB by default) holds."""


def test_position_delete_rewrite_at_50_delete_files() -> None:
    figures = {"data_files": 60, "data_records": 10**6, "delete_records": 10}
    h = health(part(**figures, data_bytes=LARGE, position_delete_files=50))
    candidate = actions(h)[MaintenanceAction.REWRITE_POSITION_DELETES]
    assert candidate.partition == "region = 'eu'"
    assert "50 position delete files" in candidate.reason
    assert MaintenanceAction.REWRITE_POSITION_DELETES not in actions(
        health(part(**figures, data_bytes=LARGE, position_delete_files=49))
    )


def test_delete_files_over_a_small_files_worth_of_data_are_compacted_not_rewritten() -> None:
    small = 128 * 2**20  # a quarter of the default target size
    figures = {"data_files": 52, "small_files": 52, "data_records": 78_000}
    h = health(part(**figures, data_bytes=small, delete_records=9_000, position_delete_files=51))
    found = actions(h)
    assert MaintenanceAction.REWRITE_POSITION_DELETES not in found
    candidate = found[MaintenanceAction.COMPACT_DATA_FILES]
    assert candidate.policy == "delete-files"
    assert candidate.pressure == pytest.approx(51 / 50)
    assert candidate.partition == "region = 'eu'"
    assert (
        "51 position delete files" in candidate.reason and "applied and dropped" in candidate.reason
    )
    # Every data file a delete applies to is rewritten, and the delete files are dropped.
    assert candidate.options["delete-file-threshold"] == "1"
    assert candidate.options["remove-dangling-deletes"] == "true"
    # One byte more than a small file: the deletes are rewritten, the data left alone.
    bigger = actions(
        health(
            part(**figures, data_bytes=small + 1, delete_records=9_000, position_delete_files=51)
        )
    )
    assert MaintenanceAction.COMPACT_DATA_FILES not in bigger
    assert bigger[MaintenanceAction.REWRITE_POSITION_DELETES].policy == "delete-files"


def test_a_compaction_over_v2_position_deletes_reads_each_delete_file_once() -> None:
    figures = {"data_files": 150, "small_files": 150, "data_records": 1000}
    with_deletes = part(**figures, data_bytes=LARGE, position_delete_files=10, delete_records=10)
    v2 = actions(health(with_deletes))[MaintenanceAction.COMPACT_DATA_FILES]
    v3 = actions(health(with_deletes, format_version=3))[MaintenanceAction.COMPACT_DATA_FILES]
    clean = actions(health(part(**figures)))[MaintenanceAction.COMPACT_DATA_FILES]
    # The writer's v2 delete files each cover many data files: cached once per executor.
    assert v2.policy == "small-files"
    assert v2.options["cache-delete-files"] == "true"
    # A deletion vector belongs to one data file; nothing to delete, nothing to cache.
    assert "cache-delete-files" not in v3.options
    assert "cache-delete-files" not in clean.options


def test_no_delete_rewrite_for_deletion_vectors() -> None:
    h = health(
        part(data_files=60, data_records=10**6, delete_records=10, position_delete_files=60),
        format_version=3,
    )
    assert MaintenanceAction.REWRITE_POSITION_DELETES not in actions(h)


def test_manifests_past_the_count() -> None:
    assert MaintenanceAction.REWRITE_MANIFESTS not in actions(health(manifests=99))
    candidate = actions(health(manifests=250))[MaintenanceAction.REWRITE_MANIFESTS]
    assert candidate.pressure == pytest.approx(2.5)
    assert "250 manifests" in candidate.reason


def test_orphans_daily() -> None:
    assert MaintenanceAction.REMOVE_ORPHAN_FILES not in actions(health(), last=ORPHANS_DONE)
    yesterday = {MaintenanceAction.REMOVE_ORPHAN_FILES: NOW - 86_400_000}
    candidate = actions(health(), last=yesterday)[MaintenanceAction.REMOVE_ORPHAN_FILES]
    assert int(candidate.options["older_than_ms"]) == NOW - 3 * 86_400_000
    assert MaintenanceAction.REMOVE_ORPHAN_FILES in actions(health(), last={})


def days_ago(*days: float) -> tuple[int, ...]:
    return tuple(sorted(NOW - int(d * 86_400_000) for d in days))


def test_expiry_keeps_the_last_k_and_the_offsets_snapshot() -> None:
    policy = MaintenancePolicy(expire_retain_last=2)
    times = days_ago(30, 20, 10, 9, 8, 1)
    plain = health(snapshot_times_ms=times)
    plan = expire_plan(plain, policy, NOW)
    assert plan.older_than_ms == NOW - 7 * 86_400_000
    assert plan.expirable == 4 and plan.protected_ms is None
    # The writer's last offsets are in the 20-day-old snapshot: only the 30-day one may go.
    held = health(snapshot_times_ms=times, offsets_snapshot_id=42, offsets_snapshot_ms=times[1])
    plan = expire_plan(held, policy, NOW)
    assert (plan.older_than_ms, plan.expirable, plan.protected_ms) == (times[1], 1, times[1])
    candidate = actions(held, policy)[MaintenanceAction.EXPIRE_SNAPSHOTS]
    assert candidate.options == {"older_than_ms": str(times[1]), "retain_last": "2"}
    assert "cutoff held at the offsets snapshot 42" in candidate.reason
    recently = {**ORPHANS_DONE, MaintenanceAction.EXPIRE_SNAPSHOTS: NOW - 60_000}
    assert MaintenanceAction.EXPIRE_SNAPSHOTS not in actions(held, policy, last=recently)


def test_expiry_by_count() -> None:
    policy = MaintenancePolicy(expire_retain_last=1, expire_max_snapshots=3)
    times = tuple(NOW - i * 1000 for i in range(10, 0, -1))  # ten snapshots, seconds old
    plan = expire_plan(health(snapshot_times_ms=times), policy, NOW)
    assert plan.older_than_ms == times[-3]
    assert plan.expirable == 7


@given(
    st.lists(st.integers(0, 30 * 86_400_000), min_size=1, max_size=30, unique=True),
    st.integers(0, 29),
    st.integers(1, 10),
    st.one_of(st.none(), st.integers(1, 20)),
    st.floats(0, 20 * DAY_S),
)
def test_the_offsets_snapshot_is_never_below_the_cutoff(
    ages: list[int], offsets_index: int, retain: int, max_snapshots: int | None, max_age: float
) -> None:
    times = tuple(sorted(NOW - a for a in ages))
    protected = times[offsets_index % len(times)]
    policy = MaintenancePolicy(
        expire_retain_last=retain, expire_max_snapshots=max_snapshots, expire_max_age_s=max_age
    )
    h = health(snapshot_times_ms=times, offsets_snapshot_id=1, offsets_snapshot_ms=protected)
    plan = expire_plan(h, policy, NOW)
    assert plan.older_than_ms <= protected  # Iceberg expires strictly older snapshots only
    assert plan.expirable <= max(len(times) - retain, 0)
    assert plan.expirable == sum(
        1 for t in times[: max(len(times) - retain, 0)] if t < plan.older_than_ms
    )


def test_disabled_policy_and_overrides() -> None:
    h = health(part(data_files=500, small_files=500), manifests=900)
    assert evaluate(h, MaintenancePolicy(enabled=False), NOW) == []
    stricter = POLICY.with_overrides({"compact_min_small_files": 1000, "manifests_max": 1000})
    assert actions(h, stricter) == {}
    with pytest.raises(TypeError, match="unknown policy fields: nope"):
        POLICY.with_overrides({"nope": 1})
    with pytest.raises(ValueError):
        MaintenancePolicy(compact_delete_ratio=0)
    with pytest.raises(ValueError):
        MaintenancePolicy(expire_retain_last=0)


def test_dangling_deletes_are_removed_only_where_they_can_dangle() -> None:
    figures = {"data_files": 150, "small_files": 150, "data_records": 1000}
    v2 = actions(health(part(**figures)))[MaintenanceAction.COMPACT_DATA_FILES]
    v3 = actions(health(part(**figures), format_version=3))[MaintenanceAction.COMPACT_DATA_FILES]
    # A v3 deletion vector goes with its data file in the rewrite; v2 delete files may not.
    assert v2.options["remove-dangling-deletes"] == "true"
    assert "remove-dangling-deletes" not in v3.options
    assert v3.options["partial-progress.enabled"] == "true"


def test_equality_deletes_make_every_file_they_touch_a_compaction_input() -> None:
    figures = {"data_files": 4, "data_records": 1000, "delete_records": 400}
    plain = actions(health(part(**figures, position_delete_files=2), format_version=3))
    upserted = actions(health(part(**figures, equality_delete_files=2), format_version=3))
    candidate = upserted[MaintenanceAction.COMPACT_DATA_FILES]
    assert candidate.policy == "delete-ratio"
    # Iceberg's delete ratio ignores equality deletes; the file threshold does not.
    assert candidate.options["delete-file-threshold"] == "1"
    # The executor drops the dangling equality deletes itself (Iceberg's removal would
    # fail on a commit landing meanwhile).
    assert "remove-dangling-deletes" not in candidate.options
    assert "delete-file-threshold" not in plain[MaintenanceAction.COMPACT_DATA_FILES].options
    # Every data file reads every newer equality delete file: cached once per executor.
    assert candidate.options["cache-delete-files"] == "true"
    assert "cache-delete-files" not in plain[MaintenanceAction.COMPACT_DATA_FILES].options


def test_small_files_with_equality_deletes_below_the_ratio_rewrite_only_the_small_files() -> None:
    """Every file older than an equality delete is touched by it, so the file threshold
    would rewrite the whole partition; below the delete ratio only small files are due."""
    figures = {"data_files": 150, "small_files": 150, "data_records": 100_000}
    few = part(**figures, delete_records=1_000, equality_delete_files=100)
    many = part(**figures, delete_records=60_000, equality_delete_files=100)
    small = actions(health(few, format_version=3))[MaintenanceAction.COMPACT_DATA_FILES]
    both = actions(health(many, format_version=3))[MaintenanceAction.COMPACT_DATA_FILES]
    assert small.policy == "small-files"
    assert "delete-file-threshold" not in small.options
    # Their deletes still apply to the base file; the executor drops only dangling ones.
    assert "remove-dangling-deletes" not in small.options
    assert both.options["delete-file-threshold"] == "1"
    # The small files are read with the equality deletes applied too.
    assert small.options["cache-delete-files"] == "true"
