"""The synthetic control history of ``icefjord bench control-history``, and its report."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from icefjord.bench.control_history import (
    COMPACTION_EVERY,
    SCHEMA_TABLES,
    SCHEMA_VERSIONS,
    StartCost,
    report,
    synthetic_event,
)
from shared.control import control_schema
from shared.events import ControlEvent, SchemaChange

pytestmark = pytest.mark.unit


def test_the_history_is_mostly_one_tables_commits_one_a_second() -> None:
    start_ms = 1_700_000_000_000
    events = [synthetic_event(i, start_ms) for i in range(3 * COMPACTION_EVERY)]
    kinds = Counter(type(e.payload).__name__ for e in events)
    assert kinds["SchemaChange"] == SCHEMA_TABLES * SCHEMA_VERSIONS
    assert kinds["MaintenanceRequest"] == kinds["MaintenanceResult"] == 2
    assert set(kinds) == {"SchemaChange", "MaintenanceRequest", "MaintenanceResult", "CommitDone"}
    assert kinds["CommitDone"] == len(events) - SCHEMA_TABLES * SCHEMA_VERSIONS - 4
    assert [e.produced_at_ms - start_ms for e in events[:3]] == [0, 1000, 2000]
    assert len({e.event_id for e in events}) == len(events)


def test_schema_versions_chain_per_table() -> None:
    changes = [synthetic_event(i, 0).payload for i in range(SCHEMA_TABLES * SCHEMA_VERSIONS)]
    first = [c for c in changes if isinstance(c, SchemaChange) and c.table == "bench.t03"]
    assert [(c.from_version, c.to_version) for c in first] == [(None, 1), (1, 2), (2, 3)]
    assert [c.from_schema_id for c in first[1:]] == [c.to_schema_id for c in first[:-1]]


def test_every_kind_encodes_with_the_control_schema_and_reads_back() -> None:
    from shared.avro import decode, encode, parse

    schema = parse(control_schema())
    for index in (0, COMPACTION_EVERY, COMPACTION_EVERY + 1, COMPACTION_EVERY + 2):
        event = synthetic_event(index, 0)
        record = decode(encode(1, schema, event.to_record()), schema)
        assert ControlEvent.from_record(record) == event


def test_the_report_has_a_row_per_service_and_start(tmp_path: Path) -> None:
    costs = [
        StartCost("iceberg-writer", "no checkpoint", 12.5, 11.0, 900.0, "3 ids"),
        StartCost("schema-watcher", "checkpoint", 2.0, 1.5, 80.0, "20 subjects"),
    ]
    path = report(3_000_000, 20_000, 95.0, costs, tmp_path)
    text = path.read_text()
    assert "| iceberg-writer | no checkpoint | 12.50 | 11.00 | 900.0 | 3 ids |" in text
    assert "| schema-watcher | checkpoint | 2.00 | 1.50 | 80.0 |" in text
    assert "again after 20,000 more events" in text
    saved = json.loads((tmp_path / "report.json").read_text())
    assert (saved["events"], saved["tail"]) == (3_000_000, 20_000)
