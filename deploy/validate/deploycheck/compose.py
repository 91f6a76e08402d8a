"""docker-compose.yml: the Compose Specification schema, then Icefjord's own rules."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import jsonschema
import yaml

from deploycheck.contract import Contract
from deploycheck.findings import Context, Problem

COMPOSE = "docker-compose.yml"
ENV_EXAMPLE = "deploy/compose.env.example"
PROMETHEUS_CONFIG = "deploy/prometheus/prometheus.yml"
SCHEMA = "deploy/validate/schemas/compose-spec.json"

_INTERPOLATION = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?:[:?\-+][^}]*)?\}")
_SECRET_NAME = re.compile(r"PASSWORD|SECRET|TOKEN|USER_INFO|ACCESS_KEY")
_ONE_SHOT = "no"


def schema_problems(document: Any, schema_path: Path, label: str) -> list[Problem]:
    """Validate ``document`` against the JSON schema at ``schema_path`` (its own draft)."""
    schema = json.loads(schema_path.read_text())
    validator_class = jsonschema.validators.validator_for(schema)
    validator = validator_class(schema)
    problems = []
    for error in sorted(validator.iter_errors(document), key=lambda e: list(e.absolute_path)):
        where = "/".join(str(part) for part in error.absolute_path) or "(top level)"
        problems.append(Problem(label, f"compose schema: at {where}: {error.message}"))
    return problems


def _environment(service: dict[str, Any]) -> dict[str, str]:
    env = service.get("environment") or {}
    if isinstance(env, list):
        return dict(item.split("=", 1) if "=" in item else (item, "") for item in env)
    return {str(k): "" if v is None else str(v) for k, v in env.items()}


def _hygiene(compose: dict[str, Any], ctx: Context) -> list[Problem]:
    problems: list[Problem] = []
    services: dict[str, Any] = compose.get("services", {})
    declared = set(compose.get("volumes") or {})
    for name, service in services.items():
        where = f"service {name}"
        image = str(service.get("image", ""))
        if not image:
            problems.append(Problem(COMPOSE, f"{where}: no image (tag the built image too)"))
        elif "@" not in image and (
            ":" not in image.rsplit("/", 1)[-1] or image.endswith(":latest")
        ):
            problems.append(Problem(COMPOSE, f"{where}: image {image} is not pinned to a version"))
        build = service.get("build")
        if isinstance(build, dict) and not (ctx.root / str(build.get("dockerfile", ""))).is_file():
            problems.append(
                Problem(COMPOSE, f"{where}: Dockerfile {build.get('dockerfile')} missing")
            )
        if service.get("restart") != _ONE_SHOT and "healthcheck" not in service:
            problems.append(Problem(COMPOSE, f"{where}: long-running but no healthcheck"))
        for dependency, rule in (service.get("depends_on") or {}).items():
            if dependency not in services:
                problems.append(Problem(COMPOSE, f"{where}: depends on unknown {dependency}"))
            elif rule.get("condition") not in {"service_healthy", "service_completed_successfully"}:
                problems.append(
                    Problem(COMPOSE, f"{where}: waits for {dependency} without a condition")
                )
            elif (
                rule.get("condition") == "service_completed_successfully"
                and services[dependency].get("restart") != _ONE_SHOT
            ):
                problems.append(Problem(COMPOSE, f"{where}: {dependency} is not a one-shot job"))
        for volume in service.get("volumes") or []:
            source = str(volume).split(":", 1)[0] if isinstance(volume, str) else ""
            if source.startswith((".", "/")):
                if source.startswith(".") and not (ctx.root / source).exists():
                    problems.append(
                        Problem(COMPOSE, f"{where}: bind mount {source} does not exist")
                    )
            elif source and source not in declared:
                problems.append(Problem(COMPOSE, f"{where}: undeclared volume {source}"))
        for key, value in _environment(service).items():
            if _SECRET_NAME.search(key) and value and not value.startswith("${"):
                problems.append(Problem(COMPOSE, f"{where}: {key} is a literal secret"))
    return problems


def _strings(node: Any) -> list[str]:
    if isinstance(node, dict):
        return [s for key, value in node.items() for s in _strings(key) + _strings(value)]
    if isinstance(node, list):
        return [s for item in node for s in _strings(item)]
    return [node] if isinstance(node, str) else []


def interpolated_variables(compose: dict[str, Any]) -> set[str]:
    """Names of the ``${VAR}`` interpolations in the compose file's values (not ``$$``)."""
    return {
        name
        for text in _strings(compose)
        for name in _INTERPOLATION.findall(text.replace("$$", ""))
    }


def _env_file(compose: dict[str, Any], ctx: Context) -> list[Problem]:
    """Every ${VAR} the compose file uses is in compose.env.example, and nothing else is."""
    used = interpolated_variables(compose)
    example = ctx.path(ENV_EXAMPLE)
    if not example.is_file():
        return [Problem(ENV_EXAMPLE, "missing: the committed template of .env")]
    listed = {
        line.split("=", 1)[0].strip()
        for line in example.read_text().splitlines()
        if line.strip() and not line.lstrip().startswith("#") and "=" in line
    }
    problems = [
        Problem(ENV_EXAMPLE, f"{name} is used by {COMPOSE} but not listed")
        for name in sorted(used - listed)
    ]
    problems += [
        Problem(ENV_EXAMPLE, f"{name} is listed but {COMPOSE} does not use it")
        for name in sorted(listed - used)
    ]
    gitignore = ctx.path(".gitignore")
    if not gitignore.is_file() or ".env" not in gitignore.read_text().split():
        problems.append(Problem(".gitignore", ".env must be ignored (it holds the secrets)"))
    return problems


def _seconds(duration: str) -> float:
    """Compose durations such as ``90s``, ``2m``, ``1m30s``."""
    units = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 0.001}
    total = 0.0
    for amount, unit in re.findall(r"(\d+(?:\.\d+)?)(ms|h|m|s)", duration):
        total += float(amount) * units[unit]
    return total


def _services(compose: dict[str, Any], contract: Contract) -> list[Problem]:
    problems: list[Problem] = []
    services: dict[str, Any] = compose.get("services", {})
    for svc in contract.services.values():
        service = services.get(svc.name)
        if service is None:
            problems.append(Problem(COMPOSE, f"service {svc.name} is missing"))
            continue
        where = f"service {svc.name}"
        build = service.get("build") or {}
        expected = f"deploy/docker/{svc.name}.Dockerfile"
        if not isinstance(build, dict) or build.get("dockerfile") != expected:
            problems.append(Problem(COMPOSE, f"{where}: build must use {expected}"))
        for key in _environment(service):
            owner = contract.service_for_prefix(key)
            if owner is not None and owner.name != svc.name:
                problems.append(Problem(COMPOSE, f"{where}: {key} has {owner.name}'s prefix"))
            elif owner is None and not key.startswith(("PYICEBERG_", "SPARK_", "JAVA_")):
                problems.append(Problem(COMPOSE, f"{where}: {key} is not an Icefjord setting"))
        probe = json.dumps(service.get("healthcheck", {}).get("test", ""))
        if f":{svc.port}/readyz" not in probe and f":{svc.port}/healthz" not in probe:
            problems.append(Problem(COMPOSE, f"{where}: healthcheck must call port {svc.port}"))
        grace = _seconds(str(service.get("stop_grace_period", "10s")))
        if grace <= svc.longest_flush_s:
            problems.append(
                Problem(
                    COMPOSE,
                    f"{where}: stop_grace_period {grace:.0f} s is not longer than "
                    f"its longest flush ({svc.longest_flush_s} s)",
                )
            )
    return problems


def _scrape_targets(ctx: Context, contract: Contract) -> list[Problem]:
    """prometheus.yml scrapes every service, with the service name as the job."""
    config = yaml.safe_load(ctx.path(PROMETHEUS_CONFIG).read_text()) or {}
    jobs: dict[str, set[str]] = {}
    for job in config.get("scrape_configs", []):
        targets = {t for static in job.get("static_configs", []) for t in static.get("targets", [])}
        jobs[str(job.get("job_name"))] = targets
    problems = []
    for svc in contract.services.values():
        target = f"{svc.name}:{svc.port}"
        if target not in jobs.get(svc.name, set()):
            problems.append(Problem(PROMETHEUS_CONFIG, f"no job {svc.name} scraping {target}"))
    return problems


def check(ctx: Context, contract: Contract) -> list[Problem]:
    """All compose problems; the schema first, then hygiene, services, env file, scraping."""
    text = ctx.path(COMPOSE).read_text()
    try:
        compose = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        return [Problem(COMPOSE, f"not YAML: {exc}")]
    if not isinstance(compose, dict):
        return [Problem(COMPOSE, "not a mapping")]
    problems = schema_problems(compose, ctx.path(SCHEMA), COMPOSE)
    problems += _hygiene(compose, ctx)
    problems += _services(compose, contract)
    problems += _env_file(compose, ctx)
    problems += _scrape_targets(ctx, contract)
    return problems
