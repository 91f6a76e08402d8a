"""docker-compose.yml is validated, not run (no Docker engine in CI): the Compose schema,
structure and hygiene, and the contract of the five services."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from deploycheck import compose
from deploycheck.contract import Contract
from deploycheck.findings import Context

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[3]
Edit = Callable[[str, str, str], None]


@pytest.fixture(scope="module")
def compose_file() -> dict[str, Any]:
    return dict(yaml.safe_load((ROOT / "docker-compose.yml").read_text()))


def messages(ctx: Context, contract: Contract) -> list[str]:
    return [str(p) for p in compose.check(ctx, contract)]


def test_every_image_is_pinned(compose_file: dict[str, Any]) -> None:
    for name, service in compose_file["services"].items():
        image = service["image"]
        assert ":" in image, f"{name} has no tag"
        assert not image.endswith(":latest"), f"{name} uses latest"


def test_long_running_services_have_healthchecks(compose_file: dict[str, Any]) -> None:
    for name, service in compose_file["services"].items():
        if service.get("restart") == "no":
            continue  # one-shot jobs
        assert "healthcheck" in service, f"{name} has no healthcheck"


def test_dependencies_exist_and_wait_for_health(compose_file: dict[str, Any]) -> None:
    services = compose_file["services"]
    for name, service in services.items():
        for dependency, rule in service.get("depends_on", {}).items():
            assert dependency in services, f"{name} depends on unknown {dependency}"
            assert rule["condition"] in {"service_healthy", "service_completed_successfully"}


def test_named_volumes_are_declared(compose_file: dict[str, Any]) -> None:
    declared = set(compose_file.get("volumes", {}))
    for name, service in compose_file["services"].items():
        for volume in service.get("volumes", []):
            source = volume.split(":", 1)[0]
            if not source.startswith((".", "/")):
                assert source in declared, f"{name} uses undeclared volume {source}"


def test_no_secret_is_committed(compose_file: dict[str, Any]) -> None:
    for name, service in compose_file["services"].items():
        for key, value in (service.get("environment") or {}).items():
            if re.search(r"PASSWORD|SECRET", key):
                assert str(value).startswith("${"), f"{name}: literal secret in {key}"
            for password in re.findall(r"://[^:/@]+:([^@]+)@", str(value)):
                assert password.startswith("${"), f"{name}: password in the URL of {key}"
    assert ".env" in (ROOT / ".gitignore").read_text().split()
    assert (ROOT / "deploy" / "compose.env.example").is_file()


def test_the_stack_has_every_part_the_deployment_needs(compose_file: dict[str, Any]) -> None:
    services = compose_file["services"]
    for part in (
        "kafka",
        "registry",
        "source-db",
        "connect",
        "connect-register",
        "minio",
        "minio-bucket",
        "postgres",
        "prometheus",
        "grafana",
    ):
        assert part in services, part
    assert "wal_level=logical" in services["source-db"]["command"]
    assert services["connect"]["image"].startswith("quay.io/debezium/connect:")


def test_the_committed_compose_file_passes_every_check(ctx: Context, contract: Contract) -> None:
    assert messages(ctx, contract) == []


def test_schema_violation_names_the_file_and_the_key(
    ctx: Context, contract: Contract, edit: Edit
) -> None:
    edit(
        "docker-compose.yml",
        "    stop_grace_period: 30s\n",
        "    stop_grace_period: 30s\n    colour: blue\n",
    )
    found = messages(ctx, contract)
    assert any(
        m.startswith("docker-compose.yml: compose schema: at services/schema-watcher")
        and "colour" in m
        for m in found
    ), found


def test_literal_secret_is_reported(ctx: Context, contract: Contract, edit: Edit) -> None:
    edit(
        "docker-compose.yml",
        "GF_SECURITY_ADMIN_PASSWORD: ${GRAFANA_ADMIN_PASSWORD:?set GRAFANA_ADMIN_PASSWORD in .env}",
        "GF_SECURITY_ADMIN_PASSWORD: hunter2",
    )
    found = messages(ctx, contract)
    assert (
        "docker-compose.yml: service grafana: GF_SECURITY_ADMIN_PASSWORD is a literal secret"
        in found
    )
    # The variable is no longer used, so the template lists one variable too many.
    assert any("GRAFANA_ADMIN_PASSWORD is listed" in m for m in found)


def test_env_template_must_list_every_interpolated_variable(
    ctx: Context, contract: Contract, edit: Edit
) -> None:
    edit("deploy/compose.env.example", "SOURCE_DB_PASSWORD=change-me-source\n", "")
    assert messages(ctx, contract) == [
        "deploy/compose.env.example: SOURCE_DB_PASSWORD is used by docker-compose.yml "
        "but not listed"
    ]


def test_grace_period_must_outlast_the_longest_flush(
    ctx: Context, contract: Contract, edit: Edit
) -> None:
    edit("docker-compose.yml", "stop_grace_period: 120s", "stop_grace_period: 1m")
    assert messages(ctx, contract) == [
        "docker-compose.yml: service iceberg-writer: stop_grace_period 60 s is not longer than "
        f"its longest flush ({contract.services['iceberg-writer'].longest_flush_s} s)"
    ]


def test_a_setting_with_another_services_prefix_is_reported(
    ctx: Context, contract: Contract, edit: Edit
) -> None:
    edit(
        "docker-compose.yml",
        "ICEFJORD_WATCHER_LOG_FORMAT: json",
        "ICEFJORD_WRITER_LOG_FORMAT: json",
    )
    assert messages(ctx, contract) == [
        "docker-compose.yml: service schema-watcher: ICEFJORD_WRITER_LOG_FORMAT has "
        "iceberg-writer's prefix"
    ]


def test_a_service_prometheus_does_not_scrape_is_reported(
    ctx: Context, contract: Contract, edit: Edit
) -> None:
    edit("deploy/prometheus/prometheus.yml", '"maintainer:9404"', '"maintainer:9999"')
    assert messages(ctx, contract) == [
        "deploy/prometheus/prometheus.yml: no job maintainer scraping maintainer:9404"
    ]


def test_waiting_for_a_long_running_service_to_complete_is_reported(
    ctx: Context, contract: Contract, edit: Edit
) -> None:
    edit(
        "docker-compose.yml",
        "      connect: { condition: service_healthy }\n",
        "      connect: { condition: service_completed_successfully }\n",
    )
    assert messages(ctx, contract) == [
        "docker-compose.yml: service connect-register: connect is not a one-shot job"
    ]


def test_interpolated_variables_skip_escaped_dollars() -> None:
    document = {
        "services": {
            "a": {
                "command": "echo $$HOME ${A} ${B:-x} ${C:?set C}",
                "environment": {"K": "${D-default}"},
            }
        }
    }
    assert compose.interpolated_variables(document) == {"A", "B", "C", "D"}
