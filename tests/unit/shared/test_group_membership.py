"""GroupMembership: a consumer out of its group is noticed; one that never joined is not."""

from __future__ import annotations

from typing import Any, cast

import pytest
from confluent_kafka import Consumer

from shared.kafka import REJOIN_LIMIT_S, SESSION_TIMEOUT_MS, GroupMembership

pytestmark = pytest.mark.unit


class _Member:
    """Stands in for a consumer: only its member id matters here."""

    def __init__(self) -> None:
        self.member: str | None = None

    def memberid(self) -> str | None:
        return self.member


class _Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _watch(limit_s: float = 30.0) -> tuple[GroupMembership, _Member, _Clock, Any]:
    clock = _Clock()
    member = _Member()
    return GroupMembership(limit_s, clock), member, clock, cast(Consumer, member)


def test_the_limit_outlasts_a_rebalance_after_a_session_timeout() -> None:
    assert REJOIN_LIMIT_S >= 2 * SESSION_TIMEOUT_MS / 1000


def test_a_consumer_that_never_joined_is_never_lost() -> None:
    watch, _, clock, consumer = _watch()
    for _ in range(10):
        clock.now += 60
        assert not watch.lost(consumer)


def _joins_then_leaves(watch: GroupMembership, member: _Member, consumer: Any) -> None:
    member.member = "m-1"
    assert not watch.lost(consumer)
    member.member = None
    assert not watch.lost(consumer)  # the clock starts here


def test_a_member_that_leaves_is_lost_only_after_the_limit() -> None:
    watch, member, clock, consumer = _watch(30)
    _joins_then_leaves(watch, member, consumer)
    clock.now += 29.9
    assert not watch.lost(consumer)
    clock.now += 0.1
    assert watch.lost(consumer)


def test_rejoining_in_time_restarts_the_count() -> None:
    watch, member, clock, consumer = _watch(30)
    _joins_then_leaves(watch, member, consumer)
    clock.now += 25
    member.member = "m-2"  # back in, with a new member id
    assert not watch.lost(consumer)
    member.member = None
    clock.now += 25
    assert not watch.lost(consumer)
    clock.now += 25
    assert not watch.lost(consumer)
    clock.now += 5
    assert watch.lost(consumer)


def test_reset_forgets_the_old_consumer() -> None:
    watch, member, clock, consumer = _watch(30)
    _joins_then_leaves(watch, member, consumer)
    clock.now += 31
    assert watch.lost(consumer)
    watch.reset()
    # the new consumer has not joined yet (its topics may not exist): not lost
    clock.now += 100
    assert not watch.lost(consumer)
