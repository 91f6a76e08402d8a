"""CommitPool.commit_all: tables committed side by side, errors raised only once all are done."""

from __future__ import annotations

import threading
import time
from types import SimpleNamespace
from typing import Any

import pytest

from services.iceberg_writer.committer import CommitPool
from shared.errors import FatalError, RetryableError

pytestmark = pytest.mark.unit


class Recording:
    """Commits that only record, ``parallelism`` at a time; ``fail`` maps a table to the
    error its commit raises."""

    def __init__(self, parallelism: int, fail: dict[str, Exception] | None = None) -> None:
        self.pool = CommitPool(parallelism)
        self.fail = fail or {}
        self.done: list[str] = []
        self.running = 0
        self.most_at_once = 0
        self._lock = threading.Lock()

    def commit_all(self, states: list[Any]) -> None:
        self.pool.commit_all(self.commit, states)

    def commit(self, state: Any) -> None:
        with self._lock:
            self.running += 1
            self.most_at_once = max(self.most_at_once, self.running)
        time.sleep(0.05)
        with self._lock:
            self.running -= 1
        if state.name in self.fail:
            raise self.fail[state.name]
        self.done.append(state.name)


def states(*names: str, pending: bool = True) -> list[Any]:
    return [SimpleNamespace(name=n, pending=[1] if pending else []) for n in names]


def test_tables_commit_side_by_side_up_to_the_parallelism() -> None:
    writer = Recording(2)
    writer.commit_all(states("a", "b", "c", "d"))
    assert sorted(writer.done) == ["a", "b", "c", "d"]
    assert writer.most_at_once == 2


def test_one_at_a_time_when_parallelism_is_one() -> None:
    writer = Recording(1)
    writer.commit_all(states("a", "b", "c"))
    assert writer.done == ["a", "b", "c"]
    assert writer.most_at_once == 1


def test_tables_without_pending_changes_are_not_committed() -> None:
    writer = Recording(2)
    writer.commit_all(states("a", "b") + states("idle", pending=False))
    assert sorted(writer.done) == ["a", "b"]


def test_an_error_is_raised_after_every_other_commit_finished() -> None:
    writer = Recording(2, fail={"b": RetryableError("registry down")})
    with pytest.raises(RetryableError):
        writer.commit_all(states("a", "b", "c"))
    assert sorted(writer.done) == ["a", "c"]
    assert writer.running == 0


def test_a_fatal_error_wins_over_a_retryable_one() -> None:
    writer = Recording(
        2, fail={"a": RetryableError("broker down"), "c": FatalError("fenced by epoch 9")}
    )
    with pytest.raises(FatalError, match="fenced"):
        writer.commit_all(states("a", "b", "c"))
    assert writer.done == ["b"]
