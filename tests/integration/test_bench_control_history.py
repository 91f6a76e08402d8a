"""``icefjord bench control-history`` against the real Kafka and registry, on a short history."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from harness import Stack

from icefjord.bench.control_history import MEASURES, measure, publish_history, report

pytestmark = pytest.mark.integration


def test_each_service_folds_the_whole_history_then_starts_from_its_checkpoint(
    stack: Stack, tmp_path: Path
) -> None:
    topic = f"control-history-{uuid.uuid4().hex[:8]}"
    seen: list[int] = []
    publish_history(stack.kafka, stack.registry, topic, 3_000, seen.append)
    assert seen[-1] == 3_000
    first = {s: measure(s, stack.kafka, stack.registry, topic, "no checkpoint") for s in MEASURES}
    publish_history(stack.kafka, stack.registry, topic, 500, seen.append, first=3_000)
    again = {s: measure(s, stack.kafka, stack.registry, topic, "checkpoint") for s in MEASURES}
    # The first start reads every event and keeps what the state rests on: the 60 schema
    # versions, the busy table's newest CommitDone; the watcher the newest and the applied
    # version of each of the 20 subjects (both the same event here).
    assert first["iceberg-writer"].detail == (
        "0 from the checkpoint, 3,000 from the topic; kept 61 events, 8 commit ids"
    )
    assert first["schema-watcher"].detail == (
        "0 from the checkpoint, 3,000 from the topic; 20 subjects, kept 20 events"
    )
    # The second reads the checkpoint's events and only the 500 published after it.
    assert again["iceberg-writer"].detail == (
        "61 from the checkpoint, 500 from the topic; kept 61 events, 8 commit ids"
    )
    assert again["schema-watcher"].detail == (
        "20 from the checkpoint, 500 from the topic; 20 subjects, kept 20 events"
    )
    costs = [*first.values(), *again.values()]
    for cost in costs:
        assert cost.cpu_s > 0 and cost.wall_s > 0 and cost.peak_rss_mib > 20
    text = report(3_000, 500, 1.0, costs, tmp_path).read_text()
    assert "| schema-watcher | checkpoint |" in text
