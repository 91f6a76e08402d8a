"""Rewrites wait while the writer catches up on a table. Pure.

A rewrite (compaction, position-delete rewrite) runs at a raised CPU priority and holds the
table's commits back under its lease (``shared/lease.py``). That is right while the writer
keeps up: the rewrite is short and the held commit follows. While the writer is behind on
the table, the rewrite takes CPU it needs to catch up and makes its commits wait as well, so
the backlog, and every reader's staleness, grows. The writer says how far behind it is in
each ``CommitDone``: ``committed_at_ms - watermark_ms`` is the age of the newest change the
commit applied.

:func:`hold_reason` holds a rewrite back while that lag is over ``lag_s``, but never past
``max_pressure`` (the table that far over its trigger is compacted anyway) or ``max_wait_s``
of waiting, so a writer that stays behind does not leave the table to decay.

Off by default (``lag_s`` 0). Measured end to end, the wait moves the compactions to the
moment the writer has caught up, where they are bigger and hold the lease several times
longer, and the throughput gained while behind was within the noise (figures:
docs/benchmarks/HISTORY.md, "Figures moved out of code comments"). It is there for an
operator who wants a backlog drained before anything else, e.g. while a writer catches up
after an outage.
"""

from __future__ import annotations

from dataclasses import dataclass

from services.maintainer.policy import Candidate
from shared.events import CommitDone, MaintenanceAction

__all__ = ["REWRITES", "CatchUpRule", "hold_reason", "writer_lag_ms"]

REWRITES = frozenset(
    {MaintenanceAction.COMPACT_DATA_FILES, MaintenanceAction.REWRITE_POSITION_DELETES}
)
"""The actions that take the table's lease for a rewrite; expiry and the others do not wait."""


@dataclass(frozen=True, slots=True)
class CatchUpRule:
    """When a rewrite waits: writer lag over ``lag_s`` (0, the default: never), for at most
    ``max_wait_s`` and only below ``max_pressure`` (the candidate's figure over its trigger:
    3.0 is three times the small-file count or delete ratio). The maintainer's settings
    ``CATCH_UP__LAG_S``, ``CATCH_UP__MAX_PRESSURE``, ``CATCH_UP__MAX_WAIT_S``."""

    lag_s: float = 0.0
    max_pressure: float = 3.0
    max_wait_s: float = 300.0

    def __post_init__(self) -> None:
        if self.lag_s < 0 or self.max_wait_s < 0:
            raise ValueError("lag_s and max_wait_s must not be negative")
        if self.max_pressure < 1:
            raise ValueError(f"max_pressure must be at least 1, got {self.max_pressure}")


def writer_lag_ms(commit: CommitDone) -> int | None:
    """How far behind ``commit`` says the writer is; None when it carried no source time."""
    if commit.watermark_ms is None:
        return None
    return max(0, commit.committed_at_ms - commit.watermark_ms)


def hold_reason(
    candidate: Candidate,
    lag_ms: int | None,
    waiting_since_ms: int | None,
    rule: CatchUpRule,
    now_ms: int,
) -> str | None:
    """Why ``candidate`` waits now, or None when it may run.

    ``lag_ms`` is the writer's last reported lag on the table (None: unknown, or the writer
    has stopped committing to it, so there is nothing to catch up with the CPU);
    ``waiting_since_ms`` when the table's rewrites began to wait (None: they are not).
    """
    if rule.lag_s <= 0 or candidate.action not in REWRITES or lag_ms is None:
        return None
    if lag_ms < rule.lag_s * 1000:
        return None
    if candidate.pressure >= rule.max_pressure:
        return None
    if waiting_since_ms is not None and now_ms - waiting_since_ms >= rule.max_wait_s * 1000:
        return None
    return (
        f"the writer is {lag_ms / 1000:.0f} s behind on the table (over "
        f"{rule.lag_s:g} s): the rewrite waits until it catches up, at most "
        f"{rule.max_wait_s:g} s or until pressure {rule.max_pressure:g} "
        f"(now {candidate.pressure:.2f})"
    )
