"""Grafana: dashboards parse, are provisioned where compose mounts them, query only contract
metrics with their real labels, and together show every metric of the contract."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

from deploycheck.contract import Contract
from deploycheck.findings import Context, Problem
from deploycheck.prometheus import recorded_names
from deploycheck.promql import check_expr, metric_families

DASHBOARDS = "deploy/grafana/dashboards"
PROVISIONING = "deploy/grafana/provisioning"
COMPOSE = "docker-compose.yml"
DATASOURCE_VARIABLE = "${datasource}"


def _panels(panels: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    for panel in panels:
        yield panel
        yield from _panels(panel.get("panels") or [])


def dashboard_exprs(dashboard: dict[str, Any]) -> list[tuple[str, str]]:
    """(where, PromQL) for every panel target and query variable of a dashboard."""
    found = []
    for panel in _panels(dashboard.get("panels") or []):
        for target in panel.get("targets") or []:
            if target.get("expr"):
                found.append((f"panel {panel.get('title')!r}", str(target["expr"])))
    for variable in (dashboard.get("templating") or {}).get("list") or []:
        query = variable.get("query")
        text = query.get("query") if isinstance(query, dict) else query
        if variable.get("type") == "query" and text:
            found.append((f"variable {variable.get('name')!r}", str(text)))
    return found


def _dashboard_problems(
    path: Path, dashboard: dict[str, Any], contract: Contract, recorded: frozenset[str]
) -> Iterator[str]:
    for key in ("uid", "title", "panels"):
        if not dashboard.get(key):
            yield f"no {key}"
    variables = {v.get("name") for v in (dashboard.get("templating") or {}).get("list") or []}
    if "datasource" not in variables:
        yield "no `datasource` variable (dashboards must not pin a datasource uid)"
    ids = [p.get("id") for p in _panels(dashboard.get("panels") or [])]
    if len(ids) != len(set(ids)):
        yield "panel ids are not unique"
    for panel in _panels(dashboard.get("panels") or []):
        if panel.get("type") == "row":
            continue
        datasource = (panel.get("datasource") or {}).get("uid")
        if datasource != DATASOURCE_VARIABLE:
            yield f"panel {panel.get('title')!r}: datasource uid {datasource!r}, not the variable"
    for where, expr in dashboard_exprs(dashboard):
        for message in check_expr(expr, contract, recorded):
            yield f"{where}: {message}"


def _provisioning(ctx: Context) -> list[Problem]:
    """The dashboard provider reads the folder compose mounts the dashboards into."""
    problems = []
    compose = yaml.safe_load(ctx.path(COMPOSE).read_text()) or {}
    grafana = (compose.get("services") or {}).get("grafana") or {}
    mounts = {
        str(v).split(":")[1]: str(v).split(":")[0]
        for v in grafana.get("volumes") or []
        if str(v).startswith("./")
    }
    for path in sorted(ctx.path(f"{PROVISIONING}/dashboards").glob("*.yml")):
        for provider in (yaml.safe_load(path.read_text()) or {}).get("providers") or []:
            folder = str((provider.get("options") or {}).get("path"))
            if mounts.get(folder) != f"./{DASHBOARDS}":
                problems.append(
                    Problem(
                        ctx.rel(path),
                        f"provider path {folder} is not where {COMPOSE} mounts ./{DASHBOARDS}",
                    )
                )
    for path in sorted(ctx.path(f"{PROVISIONING}/datasources").glob("*.yml")):
        sources = (yaml.safe_load(path.read_text()) or {}).get("datasources") or []
        if not any(s.get("type") == "prometheus" for s in sources):
            problems.append(Problem(ctx.rel(path), "no prometheus datasource"))
    return problems


def check(ctx: Context, contract: Contract) -> list[Problem]:
    """Every dashboard JSON, the provisioning files, and coverage of the contract's metrics."""
    problems: list[Problem] = []
    recorded = recorded_names(ctx)
    uids: dict[str, str] = {}
    all_exprs: list[str] = []
    paths = sorted(ctx.path(DASHBOARDS).glob("*.json"))
    if not paths:
        return [Problem(DASHBOARDS, "no dashboards")]
    for path in paths:
        label = ctx.rel(path)
        try:
            dashboard = json.loads(path.read_text())
        except json.JSONDecodeError as exc:
            problems.append(Problem(label, f"not JSON: {exc}"))
            continue
        problems += [
            Problem(label, m) for m in _dashboard_problems(path, dashboard, contract, recorded)
        ]
        uid = str(dashboard.get("uid"))
        if uid in uids:
            problems.append(Problem(label, f"uid {uid} is also used by {uids[uid]}"))
        uids[uid] = label
        all_exprs += [expr for _, expr in dashboard_exprs(dashboard)]
    shown = metric_families(all_exprs, contract)
    for name in sorted(set(contract.metrics) - shown):
        problems.append(Problem(DASHBOARDS, f"no dashboard shows {name}"))
    return problems + _provisioning(ctx)
