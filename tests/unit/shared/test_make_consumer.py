"""make_consumer: the settings every service's consumer shares."""

from __future__ import annotations

from typing import Any

import pytest

from shared import kafka
from shared.settings import KafkaSettings

pytestmark = pytest.mark.unit


def test_a_killed_member_leaves_its_group_within_ten_seconds(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    made: list[dict[str, Any]] = []
    monkeypatch.setattr(kafka, "Consumer", lambda config: made.append(config) or config)
    kafka.make_consumer(KafkaSettings(), "g", **{"fetch.min.bytes": 1})
    (config,) = made
    assert config["session.timeout.ms"] == 10_000
    assert config["heartbeat.interval.ms"] * 3 <= config["session.timeout.ms"]
    assert config["isolation.level"] == "read_committed"
    assert config["enable.auto.commit"] is False
    assert config["fetch.min.bytes"] == 1


def test_overrides_win(monkeypatch: pytest.MonkeyPatch) -> None:
    made: list[dict[str, Any]] = []
    monkeypatch.setattr(kafka, "Consumer", lambda config: made.append(config) or config)
    kafka.make_consumer(KafkaSettings(), "g", **{"session.timeout.ms": 30_000})
    assert made[0]["session.timeout.ms"] == 30_000
