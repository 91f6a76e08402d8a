"""Prometheus: promtool on the config, the rules and their unit tests; metric names against the
contract; the Prometheus Operator copy of the rules kept in sync."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import yaml

from deploycheck.contract import Contract
from deploycheck.findings import Context, Problem, ToolMissing
from deploycheck.promql import check_expr

CONFIG = "deploy/prometheus/prometheus.yml"
RULES_DIR = "deploy/prometheus/rules"
TESTS_DIR = "deploy/prometheus/tests"
OPERATOR_RULE = "deploy/k8s/base/monitoring/prometheusrule.yaml"
PROMTOOL_HINT = "apt-get install --no-install-recommends prometheus (Debian ships promtool in it)"

OPERATOR_HEADER = """\
# GENERATED from deploy/prometheus/rules/*.yml by `deploy/validate/run.sh --write`;
# do not edit. The same rules for the Prometheus Operator; the validator fails when stale.
"""
REQUIRED_ANNOTATIONS = ("summary", "description")


class _BlockDumper(yaml.SafeDumper):
    """Writes multi-line strings (PromQL, descriptions) as literal blocks, as people do."""


def _represent_str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_BlockDumper.add_representer(str, _represent_str)


def rule_files(ctx: Context) -> list[Path]:
    return sorted(ctx.path(RULES_DIR).glob("*.yml"))


def _groups(path: Path) -> list[dict[str, Any]]:
    data = yaml.safe_load(path.read_text()) or {}
    return list(data.get("groups", []))


def recorded_names(ctx: Context) -> frozenset[str]:
    """Names defined by the recording rules (usable in rules and dashboards)."""
    return frozenset(
        str(rule["record"])
        for path in rule_files(ctx)
        for group in _groups(path)
        for rule in group.get("rules", [])
        if "record" in rule
    )


def render_operator_rule(ctx: Context) -> str:
    """The PrometheusRule manifest carrying every group of the rule files, in file order."""
    groups = [group for path in rule_files(ctx) for group in _groups(path)]
    manifest = {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PrometheusRule",
        "metadata": {"name": "icefjord"},
        "spec": {"groups": groups},
    }
    return OPERATOR_HEADER + yaml.dump(manifest, Dumper=_BlockDumper, sort_keys=False, width=100)


def _promtool(ctx: Context) -> list[Problem]:
    try:
        promtool = ctx.tool("promtool", "PROMTOOL", PROMTOOL_HINT)
    except ToolMissing as exc:
        return ctx.missing("promtool", exc, RULES_DIR)
    problems: list[Problem] = []
    runs: list[tuple[str, list[str]]] = [(CONFIG, ["check", "config", str(ctx.path(CONFIG))])]
    runs += [(ctx.rel(p), ["check", "rules", str(p)]) for p in rule_files(ctx)]
    runs += [
        (ctx.rel(p), ["test", "rules", p.name]) for p in sorted(ctx.path(TESTS_DIR).glob("*.yml"))
    ]
    for label, args in runs:
        cwd = ctx.path(TESTS_DIR) if args[0] == "test" else ctx.root
        result = subprocess.run(
            [promtool, *args], cwd=cwd, capture_output=True, text=True, timeout=120, check=False
        )
        if result.returncode != 0:
            output = (result.stdout + result.stderr).strip()
            problems.append(Problem(label, f"promtool {' '.join(args[:2])} failed:\n{output}"))
    return problems


def _rules_content(ctx: Context, contract: Contract) -> list[Problem]:
    problems: list[Problem] = []
    recorded = recorded_names(ctx)
    for path in rule_files(ctx):
        label = ctx.rel(path)
        for group in _groups(path):
            for rule in group.get("rules", []):
                name = rule.get("alert") or rule.get("record")
                for message in check_expr(str(rule.get("expr", "")), contract, recorded):
                    problems.append(Problem(label, f"rule {name}: {message}"))
                if "alert" not in rule:
                    continue
                if "severity" not in (rule.get("labels") or {}):
                    problems.append(Problem(label, f"alert {name}: no severity label"))
                for key in REQUIRED_ANNOTATIONS:
                    if key not in (rule.get("annotations") or {}):
                        problems.append(Problem(label, f"alert {name}: no {key} annotation"))
    return problems


def _operator_copy(ctx: Context) -> list[Problem]:
    target = ctx.path(OPERATOR_RULE)
    if not target.is_file() or target.read_text() != render_operator_rule(ctx):
        return [Problem(OPERATOR_RULE, "stale: run deploy/validate/run.sh --write")]
    return []


def check(ctx: Context, contract: Contract) -> list[Problem]:
    """promtool checks (config, rules, rule tests), rule content, the operator copy."""
    return _promtool(ctx) + _rules_content(ctx, contract) + _operator_copy(ctx)


def write(ctx: Context) -> Path:
    """Regenerate the PrometheusRule manifest; returns its path."""
    target = ctx.path(OPERATOR_RULE)
    target.write_text(render_operator_rule(ctx))
    return target
