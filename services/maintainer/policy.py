"""Maintenance policies: which actions a table's health calls for, and how urgently. Pure.

:func:`evaluate` looks at one :class:`~services.maintainer.health.TableHealth` under one
:class:`MaintenancePolicy` and returns :class:`Candidate` actions. Each carries a
``pressure``: the measured figure over the policy's trigger (1.0 = just due, 3.0 = three
times past it), which is how the planner compares a compaction with an expiry. The reason
text names the figures that fired, so a ``MaintenanceRequest`` explains itself.

Defaults follow the field: compact a partition at 100 small files or a delete ratio of 0.3,
or after 500 commits; rewrite position deletes at 50 delete files in a partition, or, when
the partition's data is no more than one small file's worth, compact it instead (which
applies those deletes and drops them); expire
snapshots older than 7 days, keeping the last 100 and never a snapshot the writer resumes a
partition from (``icefjord.offsets``); remove orphans older than 3 days once a day;
rewrite manifests past 100.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from services.maintainer.health import PartitionHealth, TableHealth
from shared.events import MaintenanceAction, MaintenanceRequest

__all__ = [
    "ACTION_PRIORITY",
    "Candidate",
    "ExpirePlan",
    "MaintenancePolicy",
    "evaluate",
    "expire_plan",
    "with_equality_deletes",
]

DAY_S = 86_400.0

ACTION_PRIORITY: Mapping[MaintenanceAction, int] = {
    MaintenanceAction.COMPACT_DATA_FILES: 0,
    MaintenanceAction.REWRITE_POSITION_DELETES: 1,
    MaintenanceAction.EXPIRE_SNAPSHOTS: 2,
    MaintenanceAction.REWRITE_MANIFESTS: 3,
    MaintenanceAction.REMOVE_ORPHAN_FILES: 4,
}
"""Tie-break between equally pressing candidates: smaller runs first. Compaction comes
first because readers and the file count suffer most from small files."""

DANGLING_DELETES_OPTION = "remove-dangling-deletes"
DELETE_FILE_THRESHOLD_OPTION = "delete-file-threshold"
CACHE_DELETES_OPTION = "cache-delete-files"

COMPACTION_OPTIONS: Mapping[str, str] = {
    # Commit file groups one by one: a group that conflicts with the writer is dropped
    # alone, the others stay committed.
    "partial-progress.enabled": "true",
    "partial-progress.max-commits": "10",
    # ...but raise when one did, so the executor retries instead of reporting nothing done.
    "partial-progress.max-failed-commits": "0",
    # Compaction applies deletes to the files it rewrites; without this the delete files
    # stay live (dangling) until a separate delete rewrite. Not for a v3 table without
    # equality deletes: a deletion vector belongs to one data file and goes with it in the
    # rewrite, so the extra Spark job (a scan of the delete entries) would find nothing,
    # inside the lease. (Iceberg skips it for unpartitioned tables; the executor removes
    # their dangling equality deletes itself.)
    DANGLING_DELETES_OPTION: "true",
}
# All or nothing: delete files are small and quick to rewrite, and without partial progress
# a conflict raises instead of being logged and ignored.
DELETE_REWRITE_OPTIONS: Mapping[str, str] = {}


@dataclass(frozen=True, slots=True)
class MaintenancePolicy:
    """The triggers for one table; :meth:`with_overrides` gives a per-table variant."""

    enabled: bool = True
    compact_min_small_files: int = 100
    compact_delete_ratio: float = 0.3
    compact_after_commits: int = 500
    compact_after_commits_min_small_files: int = 10
    small_file_bytes: int | None = None
    rewrite_deletes_min_files: int = 50
    expire_max_age_s: float = 7 * DAY_S
    expire_retain_last: int = 100
    expire_max_snapshots: int | None = None
    expire_interval_s: float = 3600.0
    orphan_min_age_s: float = 3 * DAY_S
    orphan_interval_s: float = DAY_S
    manifests_max: int = 100

    def __post_init__(self) -> None:
        counts = {
            "compact_min_small_files": self.compact_min_small_files,
            "compact_after_commits": self.compact_after_commits,
            "rewrite_deletes_min_files": self.rewrite_deletes_min_files,
            "expire_retain_last": self.expire_retain_last,
            "manifests_max": self.manifests_max,
            "expire_max_snapshots": self.expire_max_snapshots or 1,
        }
        for name, value in counts.items():
            if value < 1:
                raise ValueError(f"{name} must be at least 1, got {value}")
        if not 0 < self.compact_delete_ratio <= 1:
            raise ValueError(
                f"compact_delete_ratio must be in (0, 1], got {self.compact_delete_ratio}"
            )
        durations = (self.expire_max_age_s, self.expire_interval_s, self.orphan_min_age_s)
        if min(*durations, self.orphan_interval_s) < 0:
            raise ValueError("policy durations must not be negative")

    def with_overrides(self, overrides: Mapping[str, Any]) -> MaintenancePolicy:
        """A copy with the given fields replaced; raises TypeError for an unknown field."""
        known = {f.name for f in dataclasses.fields(self)}
        unknown = sorted(set(overrides) - known)
        if unknown:
            raise TypeError(f"unknown policy fields: {', '.join(unknown)}")
        return dataclasses.replace(self, **dict(overrides))


@dataclass(frozen=True, slots=True)
class Candidate:
    """An action a policy calls for; ``policy`` names the trigger (``small-files``, ...)."""

    table: str
    action: MaintenanceAction
    policy: str
    pressure: float
    reason: str
    partition: str | None = None
    options: Mapping[str, str] = field(default_factory=dict)

    def to_request(self, request_id: str) -> MaintenanceRequest:
        """The ``MaintenanceRequest`` announcing this candidate."""
        return MaintenanceRequest(
            request_id=request_id,
            table=self.table,
            action=self.action,
            partition=self.partition,
            options=dict(self.options),
            reason=self.reason,
            requested_by=f"maintainer/policy:{self.policy}",
        )


@dataclass(frozen=True, slots=True)
class ExpirePlan:
    """Expire snapshots committed before ``older_than_ms``, keeping the newest
    ``retain_last``; ``expirable`` is how many that removes; ``protected_ms`` is the commit
    time of the offsets snapshot the cutoff was held at (None when it did not matter)."""

    older_than_ms: int
    retain_last: int
    expirable: int
    protected_ms: int | None


def expire_plan(health: TableHealth, policy: MaintenancePolicy, now_ms: int) -> ExpirePlan:
    """The expiry cutoff for ``health``: older than ``expire_max_age_s`` (or, past
    ``expire_max_snapshots``, older than the newest that many), but never later than the
    oldest snapshot the writer resumes a partition from (``health.offsets_snapshot_*``: the
    latest carrying ``icefjord.offsets`` with one writer), so those always survive
    (Iceberg expires only snapshots strictly older than the cutoff)."""
    times = health.snapshot_times_ms
    cutoff = now_ms - int(policy.expire_max_age_s * 1000)
    if policy.expire_max_snapshots is not None and len(times) > policy.expire_max_snapshots:
        cutoff = max(cutoff, times[len(times) - policy.expire_max_snapshots])
    protected: int | None = None
    if health.offsets_snapshot_ms is not None and health.offsets_snapshot_ms < cutoff:
        cutoff = health.offsets_snapshot_ms
        protected = health.offsets_snapshot_ms
    retained_from = max(len(times) - policy.expire_retain_last, 0)
    expirable = sum(1 for t in times[:retained_from] if t < cutoff)
    return ExpirePlan(cutoff, policy.expire_retain_last, expirable, protected)


def _scope(partitions: list[PartitionHealth]) -> str | None:
    """One partition's filter when exactly one partition is concerned, else the whole table."""
    return partitions[0].filter if len(partitions) == 1 else None


def _describe(partitions: list[PartitionHealth], what: str) -> str:
    shown = ", ".join(p.key or "(unpartitioned)" for p in partitions[:3])
    more = f" and {len(partitions) - 3} more" if len(partitions) > 3 else ""
    return f"{len(partitions)} partition(s) {what}: {shown}{more}"


def with_equality_deletes(options: Mapping[str, str]) -> dict[str, str]:
    """Compaction ``options`` for a table with equality deletes.

    Only the writer's upsert path writes them, and the executor drops the dangling ones
    itself: Iceberg's own removal (1.12) fails when a commit lands
    while it runs, as the writer's upserts do under the lease. And a rewrite reads its data
    files with their deletes applied, while an equality delete file applies to every older
    data file: without the executor cache (off for rewrites by default, as suits
    file-scoped deletes) each delete file is read again for each of them.
    """
    out = {key: value for key, value in options.items() if key != DANGLING_DELETES_OPTION}
    out[CACHE_DELETES_OPTION] = "true"
    return out


def _deletes_to_compact(health: TableHealth, policy: MaintenancePolicy) -> list[PartitionHealth]:
    """The partitions at the delete-file trigger that a compaction serves better than a
    delete rewrite: format v2, with no more data than one small file holds
    (``health.small_file_bytes``), so that the rewrite stays as short as a small file's.

    The writer's position delete files are one per commit and partition, each over many
    data files. ``rewrite_position_delete_files`` turns them into one per data file (51
    into 48 on a benchmark table), so the count hardly falls, while a compaction of so
    little data applies every delete and drops the files, in about the same time under the
    lease (HISTORY, "2026-12-02, noon")."""
    if health.format_version >= 3:
        return []
    return [
        p
        for p in health.partitions
        if p.position_delete_files >= policy.rewrite_deletes_min_files
        and p.data_bytes <= health.small_file_bytes
    ]


def _compaction(health: TableHealth, policy: MaintenancePolicy) -> Candidate | None:
    small = [p for p in health.partitions if p.small_files >= policy.compact_min_small_files]
    deleted = [
        p
        for p in health.partitions
        if p.delete_files > 0 and p.delete_ratio >= policy.compact_delete_ratio
    ]
    pressures: list[tuple[float, str, str]] = []
    if small:
        worst = max(small, key=lambda p: p.small_files)
        pressures.append(
            (
                worst.small_files / policy.compact_min_small_files,
                "small-files",
                f"{_describe(small, 'at or over the small-file trigger')}; worst "
                f"{worst.key or '(unpartitioned)'} has {worst.small_files} small files "
                f"(< {health.small_file_bytes} bytes) of {worst.data_files} data files "
                f"(trigger {policy.compact_min_small_files})",
            )
        )
    if deleted:
        worst = max(deleted, key=lambda p: p.delete_ratio)
        pressures.append(
            (
                worst.delete_ratio / policy.compact_delete_ratio,
                "delete-ratio",
                f"{_describe(deleted, 'at or over the delete-ratio trigger')}; worst "
                f"{worst.key or '(unpartitioned)'} has delete ratio {worst.delete_ratio:.2f} "
                f"({worst.delete_records} delete rows / {worst.data_records} data rows, "
                f"{worst.delete_files} delete files; trigger {policy.compact_delete_ratio})",
            )
        )
    absorbed = _deletes_to_compact(health, policy)
    if absorbed:
        worst = max(absorbed, key=lambda p: p.position_delete_files)
        pressures.append(
            (
                worst.position_delete_files / policy.rewrite_deletes_min_files,
                "delete-files",
                f"{_describe(absorbed, 'at or over the delete-file trigger')}; worst "
                f"{worst.key or '(unpartitioned)'} has {worst.position_delete_files} position "
                f"delete files (trigger {policy.rewrite_deletes_min_files}) over "
                f"{worst.data_files} data files of {worst.data_bytes} bytes (at most "
                f"{health.small_file_bytes}): compacted, so the deletes are applied and dropped",
            )
        )
    # Only when some partition has enough small files for binpack to combine: small files
    # spread one per partition would give a rewrite with nothing to do, again and again.
    fullest = max(health.partitions, key=lambda p: p.small_files, default=None)
    if (
        fullest is not None
        and health.commits_since_compaction >= policy.compact_after_commits
        and fullest.small_files >= policy.compact_after_commits_min_small_files
    ):
        pressures.append(
            (
                health.commits_since_compaction / policy.compact_after_commits,
                "commits",
                f"{health.commits_since_compaction} commits since the last compaction "
                f"(trigger {policy.compact_after_commits}); {fullest.key or '(unpartitioned)'} "
                f"has {fullest.small_files} small files",
            )
        )
    if not pressures:
        return None
    pressure, name, _ = max(pressures)
    concerned = list(dict.fromkeys(small + deleted + absorbed))
    options = dict(COMPACTION_OPTIONS)
    if health.format_version >= 3 and not health.equality_delete_files:
        del options[DANGLING_DELETES_OPTION]
    if deleted:
        options["delete-ratio-threshold"] = str(policy.compact_delete_ratio)
    if absorbed:
        # Every data file a delete applies to, so that no delete file stays live.
        options[DELETE_FILE_THRESHOLD_OPTION] = "1"
    if health.format_version < 3 and any(p.position_delete_files for p in concerned):
        # A rewrite reads each data file with its deletes applied, and each of the
        # writer's position delete files applies to many data files: without the executor
        # cache (off for rewrites by default, as suits Spark's own file-scoped deletes)
        # each is read again for each of them. On S3: 52 files in 2.5-2.6 s instead of
        # 3.7-4.4 s, 103 in 3.2-3.4 s instead of 5.4-5.9 (HISTORY, "2026-12-02, noon").
        options[CACHE_DELETES_OPTION] = "true"
    if health.equality_delete_files and deleted:
        # Iceberg's delete ratio counts only deletes scoped to one file (position deletes,
        # deletion vectors), so a file that equality deletes (the writer's upsert path)
        # make stale would never qualify: rewrite every file that has any to apply. Only
        # for the delete-ratio trigger: equality deletes reach every older file, so this
        # rewrites the whole partition, and a rewrite for small files alone (the base file
        # left as it is, its deletes still applying to it) costs a fraction of that.
        options[DELETE_FILE_THRESHOLD_OPTION] = "1"
    if health.equality_delete_files:
        options = with_equality_deletes(options)
    return Candidate(
        table=health.table,
        action=MaintenanceAction.COMPACT_DATA_FILES,
        policy=name,
        pressure=pressure,
        reason="; ".join(text for _, _, text in sorted(pressures, reverse=True)),
        partition=_scope(concerned) if concerned else None,
        options=options,
    )


def _delete_rewrite(health: TableHealth, policy: MaintenancePolicy) -> Candidate | None:
    if health.format_version >= 3:
        # Deletion vectors: one per data file, kept merged by the writer; there is nothing
        # for rewrite_position_delete_files to do (compaction applies them).
        return None
    absorbed = _deletes_to_compact(health, policy)
    many = [
        p
        for p in health.partitions
        if p.position_delete_files >= policy.rewrite_deletes_min_files and p not in absorbed
    ]
    if not many:
        return None
    worst = max(many, key=lambda p: p.position_delete_files)
    return Candidate(
        table=health.table,
        action=MaintenanceAction.REWRITE_POSITION_DELETES,
        policy="delete-files",
        pressure=worst.position_delete_files / policy.rewrite_deletes_min_files,
        reason=f"{_describe(many, 'at or over the delete-file trigger')}; worst "
        f"{worst.key or '(unpartitioned)'} has {worst.position_delete_files} position delete "
        f"files (trigger {policy.rewrite_deletes_min_files})",
        partition=_scope(many),
        options=dict(DELETE_REWRITE_OPTIONS),
    )


def _due(last_ms: int | None, interval_s: float, now_ms: int) -> float | None:
    """Elapsed over interval when due (>= 1.0), None when not yet due."""
    if last_ms is None:
        return 1.0
    ratio = (now_ms - last_ms) / (interval_s * 1000) if interval_s > 0 else float("inf")
    return ratio if ratio >= 1.0 else None


def _expiry(
    health: TableHealth, policy: MaintenancePolicy, last_ms: int | None, now_ms: int
) -> Candidate | None:
    if _due(last_ms, policy.expire_interval_s, now_ms) is None:
        return None
    plan = expire_plan(health, policy, now_ms)
    if plan.expirable == 0:
        return None
    age_s = health.oldest_snapshot_age_s(now_ms)
    pressure = age_s / policy.expire_max_age_s if policy.expire_max_age_s > 0 else 1.0
    if policy.expire_max_snapshots is not None:
        pressure = max(pressure, len(health.snapshot_times_ms) / policy.expire_max_snapshots)
    held = (
        f"; cutoff held at the offsets snapshot {health.offsets_snapshot_id}"
        if plan.protected_ms is not None
        else ""
    )
    return Candidate(
        table=health.table,
        action=MaintenanceAction.EXPIRE_SNAPSHOTS,
        policy="snapshot-retention",
        pressure=max(pressure, 1.0),
        reason=f"{plan.expirable} of {len(health.snapshot_times_ms)} snapshots expirable "
        f"(oldest {age_s / 3600:.1f} h old; retention {policy.expire_max_age_s / 3600:.0f} h, "
        f"keep last {policy.expire_retain_last}){held}",
        options={"older_than_ms": str(plan.older_than_ms), "retain_last": str(plan.retain_last)},
    )


def _orphans(
    health: TableHealth, policy: MaintenancePolicy, last_ms: int | None, now_ms: int
) -> Candidate | None:
    due = _due(last_ms, policy.orphan_interval_s, now_ms)
    if due is None:
        return None
    since = (
        "never run" if last_ms is None else f"last run {(now_ms - last_ms) / 3600_000:.1f} h ago"
    )
    return Candidate(
        table=health.table,
        action=MaintenanceAction.REMOVE_ORPHAN_FILES,
        policy="orphan-files",
        pressure=due,
        reason=f"orphan cleanup due every {policy.orphan_interval_s / 3600:.0f} h ({since}); "
        f"files older than {policy.orphan_min_age_s / 3600:.0f} h",
        options={"older_than_ms": str(now_ms - int(policy.orphan_min_age_s * 1000))},
    )


def _manifests(health: TableHealth, policy: MaintenancePolicy) -> Candidate | None:
    if health.manifests < policy.manifests_max:
        return None
    return Candidate(
        table=health.table,
        action=MaintenanceAction.REWRITE_MANIFESTS,
        policy="manifests",
        pressure=health.manifests / policy.manifests_max,
        reason=f"{health.manifests} manifests (trigger {policy.manifests_max})",
    )


def evaluate(
    health: TableHealth,
    policy: MaintenancePolicy,
    now_ms: int,
    last_run_ms: Mapping[MaintenanceAction, int] | None = None,
) -> list[Candidate]:
    """The actions ``policy`` calls for on ``health`` at ``now_ms`` (none when disabled).

    ``last_run_ms`` gives when each action last started on this table; it gates the
    interval-driven actions (expiry, orphans). At most one candidate per action; order is
    unspecified (the planner orders).
    """
    if not policy.enabled:
        return []
    last = last_run_ms or {}
    found = [
        _compaction(health, policy),
        _delete_rewrite(health, policy),
        _expiry(health, policy, last.get(MaintenanceAction.EXPIRE_SNAPSHOTS), now_ms),
        _orphans(health, policy, last.get(MaintenanceAction.REMOVE_ORPHAN_FILES), now_ms),
        _manifests(health, policy),
    ]
    return [candidate for candidate in found if candidate is not None]
