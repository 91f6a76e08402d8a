"""When a table's batch closes: on size, on an operator's flush, or on a time that adapts.

The wait is what the freshness budget leaves after the expected commit time: a change waits
in the batch, then through the commit, so with a p99 target T and commits taking C seconds
(an exponentially weighted mean of the last ones) the batch lingers ``SHARE * T - C``, never
less than the minimum. Quiet tables therefore commit small batches soon after their first
change; under load commits get slower, the linger shrinks, and batches grow with the
arrival rate instead of with the clock.
"""

from __future__ import annotations

from dataclasses import dataclass

SHARE = 0.3  # of the target spent lingering; the rest absorbs commit time and other tables
EWMA_WEIGHT = 0.3


@dataclass
class BatchClock:
    """One table's batch timing."""

    target_s: float
    min_s: float
    max_records: int
    first_at: float | None = None
    commit_s: float = 1.0

    def linger_s(self) -> float:
        return max(self.min_s, SHARE * self.target_s - self.commit_s)

    def added(self, now: float) -> None:
        if self.first_at is None:
            self.first_at = now

    def should_close(self, now: float, records: int, flush: bool = False) -> bool:
        if records == 0 or self.first_at is None:
            return False
        if flush or records >= self.max_records:
            return True
        return now - self.first_at >= self.linger_s()

    def committed(self, seconds: float) -> None:
        self.commit_s = (1 - EWMA_WEIGHT) * self.commit_s + EWMA_WEIGHT * seconds
        self.first_at = None
