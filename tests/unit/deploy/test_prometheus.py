"""Alert rules: promtool accepts the config, the rules and their unit tests; every rule uses
contract metrics with their real labels; the Prometheus Operator copy stays in sync."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
import yaml
from deploycheck import prometheus
from deploycheck.contract import Contract
from deploycheck.findings import Context

pytestmark = pytest.mark.unit

Edit = Callable[[str, str, str], None]
RULES = "deploy/prometheus/rules/icefjord.rules.yml"


def messages(ctx: Context, contract: Contract) -> list[str]:
    return [str(p) for p in prometheus.check(ctx, contract)]


def test_config_rules_and_rule_tests_pass(ctx: Context, contract: Contract, promtool: str) -> None:
    assert messages(ctx, contract) == []


def test_the_alerts_the_issue_asks_for_exist(root: Path) -> None:
    rules = yaml.safe_load((root / RULES).read_text())
    alerts = {r["alert"]: r for g in rules["groups"] for r in g["rules"] if "alert" in r}
    expected = {
        "IcefjordFreshnessTargetMissed": "icefjord:writer_freshness_seconds:p99_5m > 10",
        "IcefjordTooManyFilesInPartition": "icefjord_table_partition_files_max > 500",
        "IcefjordTooManySnapshots": "icefjord_table_snapshots > 1000",
        "IcefjordMetadataTooLarge": "icefjord_table_metadata_bytes > 10e9",
        "IcefjordSchemaQuarantined": "icefjord_watcher_quarantined_tables > 0",
    }
    for name, expr in expected.items():
        assert alerts[name]["expr"] == expr
    for name in (
        "IcefjordNoCompaction24h",
        "IcefjordMaintenanceFailed",
        "IcefjordDeadLetters",
        "IcefjordWriterConsumerLagHigh",
        "IcefjordNormalizerConsumerLagHigh",
    ):
        assert name in alerts


def test_a_threshold_change_breaks_the_rule_unit_tests(
    ctx: Context, contract: Contract, edit: Edit, promtool: str
) -> None:
    edit(
        RULES,
        "expr: icefjord_table_partition_files_max > 500",
        "expr: icefjord_table_partition_files_max > 5000",
    )
    found = messages(ctx, contract)
    assert found[0].startswith(
        "deploy/prometheus/tests/icefjord.rules.test.yml: promtool test rules failed"
    )
    assert "IcefjordTooManyFilesInPartition" in found[0]
    # The operator copy no longer matches the rule file either.
    assert (
        found[-1] == "deploy/k8s/base/monitoring/prometheusrule.yaml: stale: run "
        "deploy/validate/run.sh --write"
    )


def test_a_broken_expression_is_reported_by_promtool(
    ctx: Context, contract: Contract, edit: Edit, promtool: str
) -> None:
    edit(RULES, "expr: icefjord_table_snapshots > 1000", "expr: icefjord_table_snapshots >> 1000")
    found = messages(ctx, contract)
    assert any(m.startswith(f"{RULES}: promtool check rules failed") for m in found), found
    assert any(
        m.startswith("deploy/prometheus/prometheus.yml: promtool check config failed")
        for m in found
    )


def test_unknown_metrics_and_labels_are_reported(
    ctx: Context, contract: Contract, edit: Edit
) -> None:
    edit(
        RULES, "expr: icefjord_table_snapshots > 1000", "expr: icefjord_table_snapshot_count > 1000"
    )
    edit(
        RULES,
        "expr: icefjord_watcher_quarantined_tables > 0",
        'expr: icefjord_watcher_quarantined_tables{table="x"} > 0',
    )
    assert [str(p) for p in prometheus._rules_content(ctx, contract)] == [
        f"{RULES}: rule IcefjordSchemaQuarantined: metric icefjord_watcher_quarantined_tables has "
        "no label 'table' (has ['instance', 'job'])",
        f"{RULES}: rule IcefjordTooManySnapshots: metric icefjord_table_snapshot_count is not in "
        "the contract",
    ]


def test_alerts_need_a_severity_and_a_summary(ctx: Context, contract: Contract, edit: Edit) -> None:
    edit(
        RULES,
        "        for: 1h\n        labels:\n          severity: warning\n        annotations:\n"
        '          summary: "Delete files',
        '        for: 1h\n        annotations:\n          title: "Delete files',
    )
    assert [str(p) for p in prometheus._rules_content(ctx, contract)] == [
        f"{RULES}: alert IcefjordDeleteRatioHigh: no severity label",
        f"{RULES}: alert IcefjordDeleteRatioHigh: no summary annotation",
    ]


def test_write_regenerates_the_operator_rule(ctx: Context, contract: Contract, edit: Edit) -> None:
    edit(
        RULES,
        "for: 30m\n        labels:\n          severity: warning\n        annotations:\n"
        '          summary: "{{ $labels.table }} has',
        "for: 45m\n        labels:\n"
        "          severity: warning\n        annotations:\n"
        '          summary: "{{ $labels.table }} has',
    )
    assert prometheus._operator_copy(ctx) != []
    written = prometheus.write(ctx)
    assert prometheus._operator_copy(ctx) == []
    rule = yaml.safe_load(written.read_text())
    alerts = {r.get("alert"): r for g in rule["spec"]["groups"] for r in g["rules"]}
    assert alerts["IcefjordTooManySnapshots"]["for"] == "45m"
    assert rule["kind"] == "PrometheusRule"
