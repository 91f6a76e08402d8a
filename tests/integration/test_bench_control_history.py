"""``icefjord bench control-history`` against the real Kafka and registry, on a short history."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from harness import Stack

from icefjord.bench.control_history import MEASURES, measure, publish_history, report

pytestmark = pytest.mark.integration


def test_each_service_reads_the_whole_history_in_a_process_of_its_own(
    stack: Stack, tmp_path: Path
) -> None:
    topic = f"control-history-{uuid.uuid4().hex[:8]}"
    seen: list[int] = []
    publish_history(stack.kafka, stack.registry, topic, 3_000, seen.append)
    assert seen[-1] == 3_000
    costs = {service: measure(service, stack.kafka, stack.registry, topic) for service in MEASURES}
    writer, watcher = costs["iceberg-writer"], costs["schema-watcher"]
    # Every CommitDone was read: the history's 3,000 events less 60 schema versions and the
    # three compaction requests and three results among them.
    assert writer.detail == "2,934 CommitDone ids kept"
    assert watcher.detail == "20 subjects recovered"
    for cost in costs.values():
        assert cost.cpu_s > 0 and cost.wall_s > 0 and cost.peak_rss_mib > 20
    assert "| schema-watcher |" in report(3_000, 1.0, list(costs.values()), tmp_path).read_text()
