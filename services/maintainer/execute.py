"""Runs one maintenance request through Spark's Iceberg procedures and reports the outcome.

:class:`MaintenanceExecutor` validates the request (:func:`validate_request`), checks the
table and the scope's columns against the catalog, inspects the table, runs the procedure
and inspects again; it always returns a :class:`MaintenanceResult`, never raises for a
failed action.

Concurrency with the writer: Iceberg commits optimistically and rejects a commit that would
be wrong (a rewrite of a file that just got new position deletes; the writer's deletes
against a file a rewrite just removed). Such a rejection is a *conflict*: the executor
retries the action a bounded number of times, and data rewrites run with partial progress,
so file groups that committed stay committed and only the conflicting ones are redone.
With the compaction lease (``shared.lease``) the executor also keeps the writer's wait short:
it first lets a writer commit already in flight land (:meth:`MaintenanceExecutor._lease`),
so the rewrite does not start from a snapshot that commit is about to invalidate, and it
rewrites a partitioned table one partition per lease, handing the table back to the writer
between two (:meth:`MaintenanceExecutor._hand_over`), so the writer's held commit waits for
one partition instead of the whole table.
Expiry keeps every snapshot the writer resumes from (for each partition, the latest
snapshot carrying its offset in ``icefjord.offsets``; one snapshot with one writer): the
cutoff is clamped to the oldest one's commit time (Iceberg expires only snapshots strictly
older), read from a fresh inspection just before the call, and checked again after it.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass
from functools import partial
from typing import Any, Protocol

from services.maintainer.health import (
    FileContent,
    TableInspection,
    compute_health,
    resume_snapshots,
)
from services.maintainer.identifiers import (
    MalformedFilterError,
    PartitionFilter,
    TableId,
    parse_filter,
)
from services.maintainer.inspect import UnknownTableError
from services.maintainer.policy import MaintenancePolicy
from services.maintainer.procedures import (
    expire_snapshots_sql,
    lease_sql,
    release_lease_sql,
    remove_orphan_files_sql,
    rewrite_data_files_sql,
    rewrite_manifests_sql,
    rewrite_position_deletes_sql,
)
from services.maintainer.requests import Rejection, ValidatedRequest, validate_request
from shared.events import MaintenanceAction, MaintenanceRequest, MaintenanceResult
from shared.events import MaintenanceStatus as Status

__all__ = [
    "CONFLICT_MARKERS",
    "MAX_SLICES",
    "PROCEDURE_ORPHAN_FLOOR_MS",
    "Inspector",
    "MaintenanceExecutor",
    "ProcedureRunner",
    "error_summary",
    "is_conflict",
]

log = logging.getLogger(__name__)

PROCEDURE_ORPHAN_FLOOR_MS = 24 * 3600 * 1000
"""``remove_orphan_files`` refuses younger cutoffs; the action API is used below it."""

MAX_SLICES = 32
"""A compaction of more partitions than this runs as one call under one lease."""

SETTLE_POLL_S = 0.1
"""How often the executor looks for the in-flight writer commit while it settles."""

HAND_OVER_REACTION_S = 0.5
"""How long the writer may take to see a released lease (it looks between two polls)."""

HAND_OVER_MAX_S = 5.0
"""The longest wait between two slices for the writer's held commit to land."""

CONFLICT_MARKERS = (
    "ValidationException",
    "CommitFailedException",
    "Cannot commit rewrite",
    "conflicted with another concurrent",
    "rewrite commits failed",  # partial progress with partial-progress.max-failed-commits
)


def is_conflict(error: BaseException) -> bool:
    """Whether ``error`` is Iceberg rejecting a commit that raced another one (retryable)."""
    text = str(error)
    return any(marker in text for marker in CONFLICT_MARKERS)


def error_summary(error: BaseException, limit: int = 500) -> str:
    """The first meaningful line of ``error`` (Py4J wraps the Java exception in a banner and
    a stack trace), prefixed with the Python class, at most ``limit`` characters."""
    lines = [line.strip(" :\t") for line in str(error).splitlines()]
    meaningful = [
        line for line in lines if line and not line.startswith(("An error occurred", "at "))
    ]
    first = meaningful[0] if meaningful else ""
    return f"{type(error).__name__}: {first}"[:limit]


class ProcedureRunner(Protocol):
    """Runs Iceberg procedures; :class:`SparkProcedureRunner` on a SparkSession."""

    def sql(self, statement: str) -> list[dict[str, Any]]: ...

    def delete_orphans(self, table: str, older_than_ms: int) -> list[str]: ...

    def drop_dangling_equality_deletes(self, table: str) -> int: ...


class Inspector(Protocol):
    """What :class:`~services.maintainer.inspect.TableInspector` offers."""

    def exists(self, table: TableId) -> bool: ...

    def columns(self, table: TableId) -> frozenset[str]: ...

    def inspect(self, table: TableId) -> TableInspection: ...

    def current_snapshot_id(self, table: TableId) -> int | None: ...


@dataclass(frozen=True, slots=True)
class _Outcome:
    """What one action did: counters summed over attempts, the attempts it took, and the
    last conflict when it gave up (what committed before stays committed)."""

    counters: Mapping[str, int]
    attempts: int
    conflicts: int
    error: str | None = None

    def then(self, other: _Outcome) -> _Outcome:
        """This outcome and a later one of the same action (the next partition): counters
        and conflicts summed, the most attempts any took, the first error."""
        totals = dict(self.counters)
        _add(totals, [dict(other.counters)])
        return _Outcome(
            totals,
            max(self.attempts, other.attempts),
            self.conflicts + other.conflicts,
            self.error if self.error is not None else other.error,
        )


@dataclass(frozen=True, slots=True)
class _LeaseTerms:
    """How one request's leases run: ``settle_s``, the longest wait for a writer commit in
    flight once the lease is held; ``writer_held``, whether the lease holds the writer's
    commits back, and so whether the priority boost runs while it is held."""

    settle_s: float
    writer_held: bool


class _ActionRejected(Exception):
    """A request that is valid in form but must not run (unsafe now)."""


def _add(total: dict[str, int], rows: list[dict[str, Any]]) -> None:
    for row in rows:
        for key, value in row.items():
            if isinstance(value, int) and not isinstance(value, bool):
                total[key] = total.get(key, 0) + value


def _equality_deletes(inspection: TableInspection) -> bool:
    return any(f.content is FileContent.EQUALITY_DELETES for f in inspection.files)


def _files(inspection: TableInspection, content: FileContent) -> tuple[int, int]:
    chosen = [f for f in inspection.files if f.content is content]
    return len(chosen), sum(f.size_bytes for f in chosen)


class MaintenanceExecutor:
    """Executes requests one at a time (see the module doc).

    ``max_attempts`` bounds the runs of one action when Iceberg reports conflicts;
    ``retry_delay_s`` is the pause between them (doubling). ``orphan_floor_ms`` is the
    youngest age an orphan may have to be deleted: files younger than that may belong to a
    commit in flight. ``lease_s`` is the longest the compaction lease holds the writer back
    (0: no lease); ``lease_settle_s`` the longest the executor waits, once it holds the
    lease, for a writer commit that was already in flight (0: no wait). ``boost``, if
    given, is entered for each lease's duration (``services.maintainer.priority``) unless
    the request's writer goes ahead under the lease (``execute``'s ``writer_held``).
    """

    def __init__(
        self,
        runner: ProcedureRunner,
        inspector: Inspector,
        *,
        catalog: str,
        max_attempts: int = 3,
        retry_delay_s: float = 2.0,
        orphan_floor_ms: int = 3600 * 1000,
        lease_s: float = 0.0,
        lease_settle_s: float = 0.0,
        clock: Callable[[], float] = time.time,
        stop: threading.Event | None = None,
        boost: Callable[[], AbstractContextManager[None]] | None = None,
    ) -> None:
        self._runner = runner
        self._boost = boost or nullcontext
        self._inspector = inspector
        self._catalog = catalog
        self._max_attempts = max(max_attempts, 1)
        self._retry_delay_s = retry_delay_s
        self._orphan_floor_ms = orphan_floor_ms
        self._lease_s = lease_s
        self._lease_settle_s = lease_settle_s
        self._clock = clock
        self._stop = stop or threading.Event()

    def _now_ms(self) -> int:
        return int(self._clock() * 1000)

    def execute(
        self,
        request: MaintenanceRequest,
        policy: MaintenancePolicy,
        *,
        writer_commit_s: float | None = None,
        writer_held: bool = True,
    ) -> MaintenanceResult:
        """Run ``request``; ``policy`` supplies defaults for options the request leaves out
        (retention, orphan age). ``writer_commit_s`` is how long the writer's recent commits
        to the table took (from ``CommitDone``), if known: the lease waits that long at most
        for a commit in flight. ``writer_held``: whether the lease holds the writer's
        commits to the table back (``shared.lease.holds_writer_back``); when it does not,
        the lease runs without the priority boost, which would only take the CPU the
        writer's commits need meanwhile. Never raises for the action's own failures."""
        started = self._clock()
        terms = _LeaseTerms(self._settle_budget(writer_commit_s), writer_held)
        hand_over_s = self._hand_over_budget(writer_commit_s)

        def result(status: Status, **fields: Any) -> MaintenanceResult:
            return MaintenanceResult(
                request_id=request.request_id,
                table=request.table,
                action=request.action,
                status=status,
                duration_ms=int((self._clock() - started) * 1000),
                **fields,
            )

        checked = validate_request(request)
        if isinstance(checked, Rejection):
            return result(Status.REJECTED, message="request rejected", error=checked.reason)
        try:
            self._check_catalog(checked)
            return self._run(checked, policy, result, terms, hand_over_s)
        except (_ActionRejected, UnknownTableError) as exc:
            return result(Status.REJECTED, message="request rejected", error=str(exc))
        except Exception as exc:  # the action failed; report it, never crash the service
            log.warning(
                "maintenance action failed",
                extra={"table": request.table, "action": request.action.value},
                exc_info=True,
            )
            return result(Status.FAILED, message="action failed", error=error_summary(exc))

    def _settle_budget(self, writer_commit_s: float | None) -> float:
        return _commit_budget(writer_commit_s, self._lease_settle_s)

    @staticmethod
    def _hand_over_budget(writer_commit_s: float | None) -> float:
        """Between two slices: time for the writer's held commit (as slow as its recent
        ones) to land, plus its reaction to the release."""
        return _commit_budget(writer_commit_s, HAND_OVER_MAX_S) + HAND_OVER_REACTION_S

    def _check_catalog(self, checked: ValidatedRequest) -> None:
        if not self._inspector.exists(checked.table):
            raise _ActionRejected(f"unknown table {checked.table}")
        if checked.scope is not None:
            missing = sorted(checked.scope.columns - self._inspector.columns(checked.table))
            if missing:
                raise _ActionRejected(
                    f"partition filter names columns not in {checked.table}: {', '.join(missing)}"
                )

    def _run(
        self,
        checked: ValidatedRequest,
        policy: MaintenancePolicy,
        result: Callable[..., MaintenanceResult],
        terms: _LeaseTerms,
        hand_over_s: float,
    ) -> MaintenanceResult:
        action = checked.request.action
        before = self._inspector.inspect(checked.table)
        if action is MaintenanceAction.EXPIRE_SNAPSHOTS:
            return self._expire(checked, policy, before, result)
        if action is MaintenanceAction.REMOVE_ORPHAN_FILES:
            return self._orphans(checked, policy, result)
        if action is MaintenanceAction.REWRITE_MANIFESTS:
            # The writer's commits merge manifests too, so a manifest rewrite also needs
            # the table to itself for a moment.
            with self._lease(checked.table, terms):
                outcome = self._attempts(
                    lambda: rewrite_manifests_sql(self._catalog, checked.table)
                )
            after = self._inspector.inspect(checked.table)
            done = outcome.counters.get("rewritten_manifests_count", 0)
            return result(
                _status(outcome, done),
                files_before=before.manifests,
                files_after=after.manifests,
                bytes_before=before.manifest_bytes,
                bytes_after=after.manifest_bytes,
                message=f"rewrote {done} manifests into "
                f"{outcome.counters.get('added_manifests_count', 0)}{_retries(outcome)}",
                error=_gave_up(outcome),
            )
        is_compaction = action is MaintenanceAction.COMPACT_DATA_FILES
        render = rewrite_data_files_sql if is_compaction else rewrite_position_deletes_sql
        content = FileContent.DATA if is_compaction else FileContent.POSITION_DELETES
        options = dict(checked.options)
        if is_compaction and options.get("partial-progress.enabled") is True:
            # Raise when a group's commit conflicts, after the others committed: without
            # this Iceberg only logs it, and a rewrite that lost every race looks like one
            # that had nothing to do.
            options.setdefault("partial-progress.max-failed-commits", 0)
        slices = self._slices(checked, before) if is_compaction else [checked.scope]
        total: _Outcome | None = None
        for scope in slices:
            if total is not None:
                if self._stop.is_set():
                    break
                self._hand_over(checked.table, hand_over_s)
            # One lease per slice: the writer's held-back commit goes in between two.
            with self._lease(checked.table, terms):
                part = self._attempts(
                    partial(render, self._catalog, checked.table, scope, options),
                    failed_key="failed_data_files_count" if is_compaction else None,
                )
            total = part if total is None else total.then(part)
        assert total is not None  # at least one slice
        outcome = total
        dangling = 0
        if is_compaction and _equality_deletes(before) and total.error is None:
            dangling = self._runner.drop_dangling_equality_deletes(
                checked.table.quoted(self._catalog)
            )
        after = self._inspector.inspect(checked.table)
        files_before, bytes_before = _files(before, content)
        files_after, bytes_after = _files(after, content)
        counters = outcome.counters
        error = _gave_up(outcome)
        if is_compaction:
            done = counters.get("rewritten_data_files_count", 0)
            message = (
                f"rewrote {done} data files into {counters.get('added_data_files_count', 0)}, "
                f"removed {counters.get('removed_delete_files_count', 0) + dangling} "
                "delete files"
            )
            if len(slices) > 1:
                message += f" in {len(slices)} partitions, one lease each"
            failed = counters.get("failed_data_files_count", 0)
            if failed and not done and error is None:
                error = f"every file group ({failed} files) failed to rewrite"
            elif failed:
                message += f"; {failed} files in groups that failed were left for next time"
        else:
            done = counters.get("rewritten_delete_files_count", 0)
            message = (
                f"rewrote {done} position delete files into "
                f"{counters.get('added_delete_files_count', 0)}"
            )
        return result(
            Status.FAILED if error is not None else _status(outcome, done),
            files_before=files_before,
            files_after=files_after,
            bytes_before=bytes_before,
            bytes_after=bytes_after,
            message=message + _retries(outcome),
            error=error,
        )

    def _slices(
        self, checked: ValidatedRequest, before: TableInspection
    ) -> list[PartitionFilter | None]:
        """The scopes a compaction runs in, one lease each: the request's own scope, or,
        for a whole-table compaction under a lease, every partition with something to
        combine (two or more data files, or delete files to apply), fullest first. The
        whole table in one call when there is no lease, when some partition cannot be
        written as a filter (a non-identity transform), or past :data:`MAX_SLICES`."""
        if checked.scope is not None or self._lease_s <= 0:
            return [checked.scope]
        partitions = compute_health(before).partitions
        if not partitions or any(p.filter is None for p in partitions):
            return [None]
        busy = [p for p in partitions if p.data_files >= 2 or p.delete_files > 0]
        if not busy or len(busy) > MAX_SLICES:
            return [None]
        busy.sort(key=lambda p: (-p.data_files, -p.delete_files, p.key))
        try:
            return [parse_filter(p.filter or "") for p in busy]
        except MalformedFilterError:  # cannot happen for filters health renders; be safe
            return [None]

    def _hand_over(self, table: TableId, budget_s: float) -> None:
        """Between two slices of a compaction: let the commit the writer held back go in
        before the next lease, for at most ``budget_s`` (:meth:`_hand_over_budget`). Without
        this the next lease follows the release within milliseconds and the writer, which
        looks at the lease between its polls, never gets a turn."""
        self._await_commit(table, budget_s)

    def _await_commit(self, table: TableId, budget_s: float) -> None:
        """Poll ``table``'s current snapshot until it changes or ``budget_s`` runs out."""
        polls = int(budget_s / SETTLE_POLL_S)
        if polls <= 0:
            return
        baseline = self._inspector.current_snapshot_id(table)
        for _ in range(polls):
            if self._stop.wait(SETTLE_POLL_S):
                return
            if self._inspector.current_snapshot_id(table) != baseline:
                return

    @contextmanager
    def _lease(self, table: TableId, terms: _LeaseTerms) -> Iterator[None]:
        """Hold the compaction lease (``shared.lease``) around a rewrite, if configured: the
        writer holds back its commits to ``table`` until it is released or runs out. The
        rewrite starts once a writer commit that passed its lease check before the lease was
        taken has landed, or after ``terms.settle_s`` when none was in flight: a rewrite started
        before it lands would lose to it ("found new position delete for replaced data
        file") and keep the lease through a second attempt."""
        if self._lease_s <= 0:
            yield
            return
        with self._boost() if terms.writer_held else nullcontext(), self._leased(table, terms):
            yield

    @contextmanager
    def _leased(self, table: TableId, terms: _LeaseTerms) -> Iterator[None]:
        taking = time.monotonic()
        until = self._now_ms() + int(self._lease_s * 1000)
        self._runner.sql(lease_sql(self._catalog, table, until))
        taken = time.monotonic()
        settled = taken
        try:
            self._await_commit(table, terms.settle_s)
            settled = time.monotonic()
            yield
        finally:
            working = time.monotonic()
            try:
                self._runner.sql(release_lease_sql(self._catalog, table))
            except Exception:  # it runs out by itself at `until`
                log.warning("could not release the compaction lease", exc_info=True)
            released = time.monotonic()
            # Where the writer's wait went: the lease's own commits, the settle, the work.
            log.info(
                "compaction lease released",
                extra={
                    "table": str(table),
                    "writer_held": terms.writer_held,
                    "held_ms": round((released - taking) * 1000),
                    "take_ms": round((taken - taking) * 1000),
                    "settle_ms": round((settled - taken) * 1000),
                    "work_ms": round((working - settled) * 1000),
                    "release_ms": round((released - working) * 1000),
                },
            )

    def _attempts(self, statement: Callable[[], str], failed_key: str | None = None) -> _Outcome:
        """Run the statement up to ``max_attempts`` times: again after a conflict, and again
        after a result with groups that failed (``failed_key`` > 0). A conflict on the last
        attempt ends in an outcome with ``error``; any other error is raised.

        Under the lease the retry follows at once: the writer is held back, so the commit
        that won has landed and nothing else is coming; a pause would only lengthen the
        writer's wait. Without it the pause (doubling) leaves room for the writer."""
        totals: dict[str, int] = {}
        conflicts = 0
        delay = 0.0 if self._lease_s > 0 else self._retry_delay_s
        for attempt in range(1, self._max_attempts + 1):
            last = attempt == self._max_attempts or self._stop.is_set()
            try:
                rows = self._runner.sql(statement())
            except Exception as exc:
                if not is_conflict(exc):
                    raise
                conflicts += 1
                if last:
                    return _Outcome(totals, attempt, conflicts, error_summary(exc))
                log.info(
                    "maintenance commit conflicted, retrying",
                    extra={"attempt": attempt, "error": error_summary(exc)},
                )
            else:
                _add(totals, rows)
                failed = sum(int(row.get(failed_key) or 0) for row in rows) if failed_key else 0
                if failed_key:
                    # Only the last run's failures are left over.
                    totals[failed_key] = failed
                if failed == 0 or last:
                    return _Outcome(totals, attempt, conflicts)
            if self._stop.wait(delay):
                return _Outcome(totals, attempt, conflicts, "stopped before the retry")
            delay *= 2
        raise AssertionError("unreachable: the last attempt returns")  # pragma: no cover

    def _expire(
        self,
        checked: ValidatedRequest,
        policy: MaintenancePolicy,
        before: TableInspection,
        result: Callable[..., MaintenanceResult],
    ) -> MaintenanceResult:
        now_ms = self._now_ms()
        requested = checked.options.get("older_than_ms")
        cutoff = (
            int(requested)
            if requested is not None
            else now_ms - int(policy.expire_max_age_s * 1000)
        )
        retain_last = int(checked.options.get("retain_last", policy.expire_retain_last))
        protected = resume_snapshots(before.snapshots)
        oldest = protected[0] if protected else None
        note = ""
        if oldest is not None and oldest.committed_at_ms < cutoff:
            cutoff = oldest.committed_at_ms
            note = f"; cutoff held at offsets snapshot {oldest.snapshot_id}"
        outcome = self._attempts(
            lambda: expire_snapshots_sql(self._catalog, checked.table, cutoff, retain_last)
        )
        after = self._inspector.inspect(checked.table)
        survivors = {s.snapshot_id for s in after.snapshots}
        gone = [s.snapshot_id for s in protected if s.snapshot_id not in survivors]
        if gone:
            log.error(
                "ALERT offsets snapshot expired",
                extra={"table": str(checked.table), "snapshot_id": gone[0]},
            )
            return result(
                Status.FAILED,
                files_before=len(before.snapshots),
                files_after=len(after.snapshots),
                error=f"the offsets snapshot {gone[0]} is gone after expiry",
            )
        removed = len(before.snapshots) - len(after.snapshots)
        deleted = sum(v for k, v in outcome.counters.items() if k.startswith("deleted_"))
        return result(
            _status(outcome, removed + deleted),
            error=_gave_up(outcome),
            files_before=len(before.snapshots),
            files_after=len(after.snapshots),
            bytes_before=before.metadata_file_bytes + before.manifest_bytes,
            bytes_after=after.metadata_file_bytes + after.manifest_bytes,
            message=f"expired {removed} snapshots older than {cutoff} ms, kept the last "
            f"{retain_last}; deleted {deleted} unreachable files{note}{_retries(outcome)}",
        )

    def _orphans(
        self,
        checked: ValidatedRequest,
        policy: MaintenancePolicy,
        result: Callable[..., MaintenanceResult],
    ) -> MaintenanceResult:
        now_ms = self._now_ms()
        requested = checked.options.get("older_than_ms")
        cutoff = (
            int(requested)
            if requested is not None
            else now_ms - int(policy.orphan_min_age_s * 1000)
        )
        if cutoff > now_ms - self._orphan_floor_ms:
            raise _ActionRejected(
                f"older_than_ms {cutoff} is younger than the {self._orphan_floor_ms} ms floor: "
                "such files may belong to a commit in flight"
            )
        dry_run = bool(checked.options.get("dry_run", False))
        if now_ms - cutoff >= PROCEDURE_ORPHAN_FLOOR_MS:
            statement = remove_orphan_files_sql(
                self._catalog, checked.table, cutoff, dry_run=dry_run
            )
            rows = self._runner.sql(statement)
            found = [str(row.get("orphan_file_location")) for row in rows]
        elif dry_run:
            raise _ActionRejected("dry_run needs older_than_ms at least 24 h in the past")
        else:
            found = self._runner.delete_orphans(checked.table.quoted(self._catalog), cutoff)
        return result(
            Status.SUCCEEDED if found else Status.SKIPPED,
            files_before=len(found),
            files_after=len(found) if dry_run else 0,
            message=f"{'found' if dry_run else 'deleted'} {len(found)} orphan files older than "
            f"{cutoff} ms" + (f", e.g. {found[0]}" if found else ""),
        )


def _commit_budget(writer_commit_s: float | None, cap_s: float) -> float:
    """How long a writer commit in flight may still take, at most ``cap_s`` (all of it when
    the writer's commit time is unknown): half again the slowest recent commit, plus a poll,
    because such a commit started at most that long ago."""
    if writer_commit_s is None:
        return cap_s
    return min(cap_s, 1.5 * writer_commit_s + SETTLE_POLL_S)


def _status(outcome: _Outcome, done: int) -> Status:
    if outcome.error is not None:
        return Status.FAILED
    return Status.SUCCEEDED if done else Status.SKIPPED


def _gave_up(outcome: _Outcome) -> str | None:
    if outcome.error is None:
        return None
    return f"gave up after {outcome.attempts} attempts: {outcome.error}"


def _retries(outcome: _Outcome) -> str:
    if outcome.attempts <= 1:
        return ""
    return f" ({outcome.attempts} attempts, {outcome.conflicts} conflicts)"
