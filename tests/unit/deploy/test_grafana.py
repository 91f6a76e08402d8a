"""Grafana dashboards: they parse, query only contract metrics with real labels, use the
datasource variable, and together show every metric of the contract."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from deploycheck import grafana
from deploycheck.contract import Contract
from deploycheck.findings import Context

pytestmark = pytest.mark.unit

PIPELINE = "deploy/grafana/dashboards/icefjord-pipeline.json"


def load(repo: Path, relative: str) -> dict[str, Any]:
    return dict(json.loads((repo / relative).read_text()))


def save(repo: Path, relative: str, board: dict[str, Any]) -> None:
    (repo / relative).write_text(json.dumps(board))


def test_the_committed_dashboards_pass(ctx: Context, contract: Contract) -> None:
    assert grafana.check(ctx, contract) == []


def test_dashboards_cover_the_issue_topics(root: Path) -> None:
    titles = " ".join(
        panel["title"].lower()
        for path in (root / grafana.DASHBOARDS).glob("*.json")
        for panel in json.loads(path.read_text())["panels"]
    )
    for topic in ("freshness", "lag", "throughput", "dead letters", "table health", "actions"):
        assert topic in titles, topic


def test_an_unknown_metric_names_dashboard_and_panel(
    repo: Path, ctx: Context, contract: Contract
) -> None:
    board = load(repo, PIPELINE)
    panel = next(p for p in board["panels"] if p.get("title") == "Paused tables")
    panel["targets"][0]["expr"] = "icefjord_writer_tables_paused"
    save(repo, PIPELINE, board)
    assert [str(p) for p in grafana.check(ctx, contract)] == [
        f"{PIPELINE}: panel 'Paused tables': metric icefjord_writer_tables_paused is not in "
        "the contract",
        "deploy/grafana/dashboards: no dashboard shows icefjord_writer_paused_tables",
    ]


def test_a_pinned_datasource_and_a_duplicate_uid_are_reported(
    repo: Path, ctx: Context, contract: Contract
) -> None:
    board = load(repo, PIPELINE)
    board["uid"] = "icefjord-tables"
    panel = next(p for p in board["panels"] if p.get("type") != "row")
    panel["datasource"] = {"type": "prometheus", "uid": "prom-1"}
    save(repo, PIPELINE, board)
    found = [str(p) for p in grafana.check(ctx, contract)]
    assert (
        f"{PIPELINE}: panel {panel['title']!r}: datasource uid 'prom-1', not the variable" in found
    )
    assert any(
        m.startswith(
            "deploy/grafana/dashboards/icefjord-tables.json: uid icefjord-tables is also used"
        )
        for m in found
    )


def test_a_label_the_metric_lacks_is_reported(repo: Path, ctx: Context, contract: Contract) -> None:
    board = load(repo, PIPELINE)
    panel = next(p for p in board["panels"] if p.get("title") == "Paused tables")
    panel["targets"][0]["expr"] = 'icefjord_writer_paused_tables{table=~"$table"}'
    save(repo, PIPELINE, board)
    assert [str(p) for p in grafana.check(ctx, contract)] == [
        f"{PIPELINE}: panel 'Paused tables': metric icefjord_writer_paused_tables has no label "
        "'table' (has ['instance', 'job'])"
    ]


def test_provisioning_must_read_the_mounted_folder(
    repo: Path, ctx: Context, contract: Contract
) -> None:
    provider = repo / "deploy/grafana/provisioning/dashboards/icefjord.yml"
    provider.write_text(
        provider.read_text().replace("path: /etc/grafana/dashboards", "path: /dashboards")
    )
    assert [str(p) for p in grafana.check(ctx, contract)] == [
        "deploy/grafana/provisioning/dashboards/icefjord.yml: provider path /dashboards is not "
        "where docker-compose.yml mounts ./deploy/grafana/dashboards"
    ]
