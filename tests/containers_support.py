"""Helpers for tests that run the service images with testcontainers against the session's
stack: building the images, a service's settings as a container environment, and a container
on the host network with a read-only root file system."""

from __future__ import annotations

import json
import os
import subprocess
import time
import urllib.request
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from harness import Stack, free_port
from pydantic import BaseModel, SecretStr
from pydantic_core import to_jsonable_python
from pydantic_settings import BaseSettings

from icefjord.local.services import catalog_env

ROOT = Path(__file__).resolve().parents[1]
BUILD = ROOT / "deploy" / "docker" / "build-images.sh"
SERVICES = ("cdc-normalizer", "schema-watcher", "iceberg-writer", "maintainer", "console")
UID = 10001  # the images' user (deploy/docker/*.Dockerfile)

# testcontainers' reaper (Ryuk) is an image of its own, pulled from a registry; these tests
# remove their containers themselves (``running``), also when a test fails.
os.environ.setdefault("TESTCONTAINERS_RYUK_DISABLED", "true")


def docker_problem() -> str | None:
    """Why no Docker engine can be used here, or None when one answers."""
    try:
        import docker

        docker.from_env().ping()
    except Exception as exc:  # any failure means: no engine to test with
        return f"no Docker engine answers ({type(exc).__name__}: {str(exc)[:120]})"
    return None


def build_images() -> dict[str, str]:
    """Build (or bring up to date, from the layer cache) the five images; service -> tag."""
    result = subprocess.run(
        [str(BUILD)], cwd=ROOT, capture_output=True, text=True, timeout=3600, check=False
    )
    if result.returncode != 0:
        pytest.fail(f"make images failed:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}")
    version = next(
        line.split('"')[1]
        for line in (ROOT / "pyproject.toml").read_text().splitlines()
        if line.startswith("version = ")
    )
    return {service: f"icefjord/{service}:{version}" for service in SERVICES}


def _flatten(prefix: str, value: Any, delimiter: str) -> Iterator[tuple[str, str]]:
    if value is None:
        return
    if isinstance(value, BaseModel):
        for name in type(value).model_fields:
            yield from _flatten(
                f"{prefix}{name.upper()}{delimiter}", getattr(value, name), delimiter
            )
        return
    key = prefix.removesuffix(delimiter)
    if isinstance(value, SecretStr):
        yield key, value.get_secret_value()
    elif isinstance(value, bool):
        yield key, "true" if value else "false"
    elif isinstance(value, str | int | float | Path):
        yield key, str(value)
    else:  # lists, tuples and dicts (of models too) as pydantic-settings reads them: JSON
        yield key, json.dumps(to_jsonable_python(value))


def settings_env(settings: BaseSettings, stack: Stack) -> dict[str, str]:
    """A service's settings as the environment its image reads them from, with the stack's
    catalog in pyiceberg's convention (the image has no local state directory)."""
    prefix = str(settings.model_config.get("env_prefix", ""))
    delimiter = str(settings.model_config.get("env_nested_delimiter") or "__")
    env = dict(_flatten(prefix, settings, delimiter))
    env.pop(f"{prefix}CATALOG{delimiter}LOCAL_STATE_DIR", None)
    env.pop(f"{prefix}SPARK{delimiter}JARS", None)  # the images carry theirs
    env.pop(f"{prefix}SPARK{delimiter}CONF", None)
    assert stack.local is not None
    env.update(catalog_env(stack.local.settings))
    return env


def metrics_port(settings: BaseSettings) -> int:
    port: int = settings.metrics.port  # type: ignore[attr-defined]
    return port


def with_free_metrics_port(values: dict[str, Any], settings_class: Any) -> dict[str, Any]:
    """``values`` with a metrics section on 127.0.0.1 and a free port (the host network)."""
    metrics = settings_class.model_fields["metrics"].annotation(host="127.0.0.1", port=free_port())
    return {**values, "metrics": metrics}


class ServiceContainer:
    """One service image running on the host network as the images run in production: its
    own user, a read-only root file system with a tmpfs on /tmp, the given environment."""

    def __init__(self, image: str, env: Mapping[str, str], name: str) -> None:
        from testcontainers.core.container import DockerContainer

        self.name = name
        self.container = (
            DockerContainer(image)
            .with_envs(**env)
            # Spark unpacks native libraries under /tmp and loads them: exec, as an emptyDir.
            .with_tmpfs_mount("/tmp", "rw,exec,size=2g")  # the value is tmpfs options
            .with_kwargs(network_mode="host", read_only=True, labels={"icefjord.test": name})
        )

    def start(self) -> ServiceContainer:
        self.container.start()
        return self

    @property
    def wrapped(self) -> Any:
        return self.container.get_wrapped_container()

    def state(self) -> dict[str, Any]:
        wrapped = self.wrapped
        wrapped.reload()
        state: dict[str, Any] = wrapped.attrs["State"]
        return state

    def logs(self) -> str:
        out, err = self.container.get_logs()
        return (out + err).decode(errors="replace")

    def wait_healthy(self, timeout_s: float = 180.0) -> None:
        """Until Docker's HEALTHCHECK reports healthy; fails with the logs otherwise."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            state = self.state()
            if state.get("Health", {}).get("Status") == "healthy":
                return
            if not state.get("Running"):
                break
            time.sleep(2)
        pytest.fail(f"{self.name} not healthy: {self.state()}\n{self.logs()[-4000:]}")

    def exec(self, *command: str) -> tuple[int, str]:
        code, output = self.wrapped.exec_run(list(command))
        return int(code), output.decode(errors="replace")

    def terminate(self, timeout_s: int = 120) -> int:
        """SIGTERM (``docker stop``), wait, and return the exit code."""
        self.wrapped.stop(timeout=timeout_s)
        return int(self.wrapped.wait(timeout=timeout_s + 30)["StatusCode"])

    def kill(self) -> None:
        """kill -9 of the whole container, as a node loss would."""
        self.wrapped.kill(signal="SIGKILL")
        self.wrapped.wait(timeout=60)

    def remove(self) -> None:
        self.container.stop(force=True, delete_volume=True)


@contextmanager
def running(image: str, env: Mapping[str, str], name: str) -> Iterator[ServiceContainer]:
    """A started :class:`ServiceContainer`, removed afterwards (its logs printed on failure)."""
    service = ServiceContainer(image, env, name).start()
    try:
        yield service
    except BaseException:
        print(f"--- {name} logs\n{service.logs()[-6000:]}")
        raise
    finally:
        service.remove()


def scrape(port: int) -> dict[str, float]:
    """The service's /metrics on the host network: sample name with labels -> value."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        text = response.read().decode()
    samples: dict[str, float] = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            samples[name] = float(value)
    return samples


def storage_problem() -> str | None:
    """The images run the production layout; the session's stack must have it."""
    if os.environ.get("ICEFJORD_TEST_STORAGE") != "s3":
        return "the images run the production layout, S3 and a PostgreSQL catalog: make test-s3"
    return None
