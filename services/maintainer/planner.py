"""The planner: most valuable maintenance first, within a budget that leaves room for
ingestion. Pure.

:func:`plan` takes every table's candidates and the recent history of actions
(:class:`PlannerState`) and admits what may start now under :class:`PlannerLimits`:

- at most ``max_running`` actions at once (default 1: maintenance and the writer share a
  Spark cluster; one rewrite at a time keeps the writer's commits from queueing behind
  several);
- never two actions on one table at once, and the same action on the same table not again
  within ``min_interval_s`` (a table the writer keeps fragmenting is compacted at a steady
  pace, not in a loop);
- a global budget over a sliding ``window_s``: at most ``max_actions_per_window`` actions,
  and maintenance busy at most ``max_busy_fraction`` of the window's wall time.

Admitted candidates come in order of ``pressure`` (how far past its trigger), ties broken by
action priority, then table name. Operator requests bypass the budget (a person asked) but
are recorded in the same history, so they count against it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace

from services.maintainer.policy import ACTION_PRIORITY, Candidate
from shared.events import MaintenanceAction

__all__ = ["ActionRecord", "PlanOutcome", "PlannerLimits", "PlannerState", "order", "plan"]


@dataclass(frozen=True, slots=True)
class PlannerLimits:
    """How much maintenance may run; see the module doc."""

    max_running: int = 1
    min_interval_s: float = 60.0
    window_s: float = 3600.0
    max_actions_per_window: int = 120
    max_busy_fraction: float = 0.5


@dataclass(frozen=True, slots=True)
class ActionRecord:
    """One action that started (``finished_ms`` None while it runs)."""

    request_id: str
    table: str
    action: MaintenanceAction
    started_ms: int
    finished_ms: int | None = None


@dataclass(frozen=True, slots=True)
class PlannerState:
    """The actions of the recent past (and the running ones), oldest first."""

    records: tuple[ActionRecord, ...] = ()

    def started(
        self, request_id: str, table: str, action: MaintenanceAction, now_ms: int
    ) -> PlannerState:
        """The state with a new running action."""
        record = ActionRecord(request_id, table, action, now_ms)
        return PlannerState((*self.records, record))

    def finished(self, request_id: str, now_ms: int) -> PlannerState:
        """The state with ``request_id`` marked finished (unknown ids change nothing)."""
        return PlannerState(
            tuple(
                replace(r, finished_ms=now_ms)
                if r.request_id == request_id and r.finished_ms is None
                else r
                for r in self.records
            )
        )

    def pruned(self, now_ms: int, keep_ms: int) -> PlannerState:
        """Without finished records older than ``keep_ms`` (running ones always stay)."""
        return PlannerState(
            tuple(
                r
                for r in self.records
                if r.finished_ms is None or r.finished_ms >= now_ms - keep_ms
            )
        )

    @property
    def running(self) -> tuple[ActionRecord, ...]:
        return tuple(r for r in self.records if r.finished_ms is None)

    def last_started(self, table: str, action: MaintenanceAction) -> int | None:
        """When ``action`` last started on ``table``, or None."""
        times = [r.started_ms for r in self.records if r.table == table and r.action == action]
        return max(times) if times else None

    def started_in_window(self, now_ms: int, window_ms: int) -> int:
        return sum(1 for r in self.records if r.started_ms > now_ms - window_ms)

    def busy_ms(self, now_ms: int, window_ms: int) -> int:
        """Milliseconds of the window ``(now - window, now]`` during which an action ran
        (overlapping actions count once each: busy time is action time)."""
        start = now_ms - window_ms
        total = 0
        for record in self.records:
            end = now_ms if record.finished_ms is None else min(record.finished_ms, now_ms)
            total += max(end - max(record.started_ms, start), 0)
        return total


@dataclass(frozen=True, slots=True)
class PlanOutcome:
    """What may start now, in order, and why each other candidate waits."""

    admitted: tuple[Candidate, ...]
    deferred: tuple[tuple[Candidate, str], ...]


def order(candidates: Iterable[Candidate]) -> list[Candidate]:
    """Most pressing first; ties by action priority, then table, then partition."""
    return sorted(
        candidates,
        key=lambda c: (-c.pressure, ACTION_PRIORITY[c.action], c.table, c.partition or ""),
    )


def plan(
    candidates: Iterable[Candidate], state: PlannerState, limits: PlannerLimits, now_ms: int
) -> PlanOutcome:
    """The candidates that may start at ``now_ms`` (see the module doc)."""
    ordered = order(candidates)
    window_ms = int(limits.window_s * 1000)
    free = limits.max_running - len(state.running)
    budget_reason: str | None = None
    if free <= 0:
        budget_reason = f"{len(state.running)} action(s) running (limit {limits.max_running})"
    elif state.started_in_window(now_ms, window_ms) >= limits.max_actions_per_window:
        budget_reason = (
            f"{limits.max_actions_per_window} actions already started in the last "
            f"{limits.window_s:.0f} s"
        )
    elif state.busy_ms(now_ms, window_ms) >= limits.max_busy_fraction * window_ms:
        budget_reason = (
            f"maintenance busy {state.busy_ms(now_ms, window_ms) / 1000:.0f} s of the last "
            f"{limits.window_s:.0f} s (limit {limits.max_busy_fraction:.0%})"
        )
    if budget_reason is not None:
        return PlanOutcome((), tuple((c, budget_reason) for c in ordered))
    busy_tables = {r.table for r in state.running}
    admitted: list[Candidate] = []
    deferred: list[tuple[Candidate, str]] = []
    for candidate in ordered:
        last = state.last_started(candidate.table, candidate.action)
        if candidate.table in busy_tables:
            deferred.append((candidate, "another action on this table is running or admitted"))
        elif last is not None and now_ms - last < limits.min_interval_s * 1000:
            deferred.append(
                (
                    candidate,
                    f"{candidate.action.value} ran on this table "
                    f"{(now_ms - last) / 1000:.0f} s ago (minimum {limits.min_interval_s:.0f} s)",
                )
            )
        elif len(admitted) >= free:
            deferred.append((candidate, "waiting for a free slot"))
        else:
            admitted.append(candidate)
            busy_tables.add(candidate.table)
    return PlanOutcome(tuple(admitted), tuple(deferred))
