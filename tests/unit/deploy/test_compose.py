"""docker-compose.yml is validated, not run (no Docker engine in CI): structure and hygiene."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    return dict(yaml.safe_load((ROOT / "docker-compose.yml").read_text()))


def test_every_image_is_pinned(compose: dict[str, Any]) -> None:
    for name, service in compose["services"].items():
        image = service["image"]
        assert ":" in image, f"{name} has no tag"
        assert not image.endswith(":latest"), f"{name} uses latest"


def test_long_running_services_have_healthchecks(compose: dict[str, Any]) -> None:
    for name, service in compose["services"].items():
        if service.get("restart") == "no":
            continue  # one-shot jobs
        assert "healthcheck" in service, f"{name} has no healthcheck"


def test_dependencies_exist_and_wait_for_health(compose: dict[str, Any]) -> None:
    services = compose["services"]
    for name, service in services.items():
        for dependency, rule in service.get("depends_on", {}).items():
            assert dependency in services, f"{name} depends on unknown {dependency}"
            assert rule["condition"] in {"service_healthy", "service_completed_successfully"}


def test_named_volumes_are_declared(compose: dict[str, Any]) -> None:
    declared = set(compose.get("volumes", {}))
    for name, service in compose["services"].items():
        for volume in service.get("volumes", []):
            source = volume.split(":", 1)[0]
            if not source.startswith((".", "/")):
                assert source in declared, f"{name} uses undeclared volume {source}"


def test_no_secret_is_committed(compose: dict[str, Any]) -> None:
    text = (ROOT / "docker-compose.yml").read_text()
    for match in re.finditer(r"(PASSWORD|SECRET)[A-Z_]*:\s*(\S+)", text):
        assert match.group(2).startswith("${"), f"literal secret in {match.group(0)}"
    assert ".env" in (ROOT / ".gitignore").read_text().split()
    assert (ROOT / "deploy" / "compose.env.example").is_file()
