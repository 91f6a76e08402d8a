"""When a table's batch closes: on size, on an operator's flush, or on a time that adapts.

The wait is what the freshness budget leaves after the expected commit time: a change waits
in the batch, then through the commit, so with a p99 target T and commits taking C seconds
(an exponentially weighted mean of the last ones) the batch lingers ``SHARE * T - C``, never
less than the minimum. Quiet tables therefore commit small batches soon after their first
change; under load commits get slower, the linger shrinks, and batches grow with the
arrival rate instead of with the clock.

A writer that has fallen behind stretches the wait. When a batch's first change is already
older than ``STRETCH_AFTER`` times the target as it arrives (the source outran the pipeline,
or the writer is reading a backlog), the budget becomes that age, up to ``MAX_STRETCH``
times the target. Every commit costs about the same fixed work whatever its size (planning,
the catalog, a data file and a delete file, and the maintainer's compaction of those files
later), so at 10,000 changes/s on 2 cores commits every second or so took CPU the source's
path needed, and the backlog grew. A change that old has missed the target already; a
longer wait costs it a fraction of its age and lets the pipeline catch up. A writer that
keeps up never stretches.
"""

from __future__ import annotations

from dataclasses import dataclass

SHARE = 0.3  # of the target spent lingering; the rest absorbs commit time and other tables
EWMA_WEIGHT = 0.3
STRETCH_AFTER = 2.0  # first change older than this many targets: the writer is behind
MAX_STRETCH = 6.0  # the stretched budget's ceiling, in targets


@dataclass
class BatchClock:
    """One table's batch timing."""

    target_s: float
    min_s: float
    max_records: int
    first_at: float | None = None
    commit_s: float = 1.0
    first_age_s: float = 0.0  # how old the batch's first change was when it arrived

    def linger_s(self) -> float:
        budget = self.target_s
        if self.first_age_s > STRETCH_AFTER * self.target_s:
            budget = min(self.first_age_s, MAX_STRETCH * self.target_s)
        return max(self.min_s, SHARE * budget - self.commit_s)

    def added(self, now: float, age_s: float = 0.0) -> None:
        """A change arrived at ``now``, ``age_s`` after its source committed it."""
        if self.first_at is None:
            self.first_at = now
            self.first_age_s = age_s

    def should_close(self, now: float, records: int, flush: bool = False) -> bool:
        if records == 0 or self.first_at is None:
            return False
        if flush or records >= self.max_records:
            return True
        return now - self.first_at >= self.linger_s()

    def committed(self, seconds: float) -> None:
        self.commit_s = (1 - EWMA_WEIGHT) * self.commit_s + EWMA_WEIGHT * seconds
        self.first_at = None
        self.first_age_s = 0.0
