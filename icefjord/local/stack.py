"""``icefjord local up | down | status``: the real components as local processes."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from icefjord.local.artifacts import Dist, dist_for, ensure_artifacts
from icefjord.local.components import (
    ApicurioRegistry,
    Component,
    Health,
    IcebergCatalog,
    KafkaBroker,
    SparkRuntime,
    port_open,
)
from icefjord.local.connect import KafkaConnect
from icefjord.local.objectstore import ObjectStore, ObjectStoreError, ensure_weed
from icefjord.local.postgres import PostgresCluster
from icefjord.local.security import SecurityError
from icefjord.local.services import service_processes
from icefjord.local.settings import LocalSettings
from shared.errors import IcefjordError


class OptionalComponent(Protocol):
    """A component the demo starts on top of the stack (PostgreSQL, Connect, a service)."""

    @property
    def name(self) -> str: ...

    def stop(self) -> bool: ...

    def check(self) -> Health: ...

    def running(self) -> bool: ...


class StartError(IcefjordError, RuntimeError):
    """A component did not become healthy; the message names it and ends with its log."""


@dataclass(frozen=True)
class UpReport:
    """What ``up`` did: components started, already running, and seconds to all healthy."""

    started: tuple[str, ...]
    already_running: tuple[str, ...]
    seconds: float
    health: tuple[Health, ...]


class LocalStack:
    """The local stack for one state directory."""

    def __init__(self, settings: LocalSettings) -> None:
        self.settings = settings

    def components(self, dist: Dist | None = None) -> list[Component]:
        """In start order: the broker first (the registry does not need it, but users do);
        the S3 server, when the warehouse is there, before the catalog that points at it."""
        d = dist if dist is not None else dist_for(self.settings)
        store: list[Component] = []
        if self.settings.warehouse_store == "s3":
            store.append(ObjectStore(self.settings))
        return [
            KafkaBroker(self.settings, d),
            ApicurioRegistry(self.settings, d),
            *store,
            IcebergCatalog(self.settings, d),
            SparkRuntime(self.settings, d),
        ]

    def up(self, progress: Callable[[str], None]) -> UpReport:
        """Start every component that is not running and wait until all are healthy.

        Running twice is harmless: healthy components are left alone. Raises
        :class:`StartError` with the log tail of the first component that fails.
        """
        began = time.monotonic()
        dist = ensure_artifacts(self.settings, progress)
        if self.settings.warehouse_store == "s3":
            try:
                ensure_weed(self.settings, progress)
            except ObjectStoreError as exc:
                raise StartError(f"s3 could not be built: {exc}") from exc
        if self.settings.secured:
            files = self.settings.security_files
            try:
                if files.ensure(self.settings.host):
                    progress(f"made a CA, a certificate and passwords in {files.home}")
            except SecurityError as exc:
                raise StartError(f"security: {exc}") from exc
        started: list[str] = []
        already: list[str] = []
        components = self.components(dist)
        for component in components:
            if component.check().healthy:
                already.append(component.name)
                continue
            self._refuse_foreign_port(component)
            progress(f"starting {component.name}")
            try:
                component.start()
            except Exception as exc:
                raise StartError(
                    f"{component.name} failed to start: {exc}\n--- log tail ---\n"
                    f"{component.log_tail()}"
                ) from exc
            started.append(component.name)
        deadline = began + self.settings.start_timeout_s
        health = self._wait_healthy(components, deadline, progress)
        return UpReport(tuple(started), tuple(already), time.monotonic() - began, health)

    def _refuse_foreign_port(self, component: Component) -> None:
        """A port held by something we did not start would make the start fail obscurely."""
        s = self.settings
        ports = {
            "kafka": [s.kafka_port, s.kafka_controller_port],
            "registry": [s.registry_port],
            "s3": [s.s3_port, s.s3_master_port, s.s3_volume_port, s.s3_filer_port],
        }
        for port in ports.get(component.name, []):
            if port_open(s.host, port):
                raise StartError(
                    f"{component.name}: port {port} on {s.host} is taken by another process; "
                    f"stop it or set ICEFJORD_LOCAL_{component.name.upper()}_PORT"
                )

    def _wait_healthy(
        self, components: list[Component], deadline: float, progress: Callable[[str], None]
    ) -> tuple[Health, ...]:
        pending = {c.name: c for c in components}
        results: dict[str, Health] = {}
        while pending:
            for name, component in list(pending.items()):
                health = component.check()
                if health.healthy:
                    results[name] = health
                    progress(f"{name} healthy at {health.address}")
                    del pending[name]
                elif health.detail.startswith("stopped"):
                    raise StartError(
                        f"{name} exited during start-up ({health.detail})\n--- log tail ---\n"
                        f"{component.log_tail()}"
                    )
            if not pending:
                break
            if time.monotonic() > deadline:
                name, component = next(iter(pending.items()))
                raise StartError(
                    f"{name} not healthy after {self.settings.start_timeout_s:.0f}s "
                    f"({component.check().detail})\n--- log tail ---\n{component.log_tail()}"
                )
            time.sleep(0.5)
        return tuple(results[c.name] for c in components)

    def extras(self) -> list[OptionalComponent]:
        """The demo's components (``icefjord demo`` starts them), in start order."""
        return [
            PostgresCluster(self.settings),
            KafkaConnect(self.settings, None),
            *service_processes(self.settings),
        ]

    def down(self) -> list[str]:
        """Stop every process this state directory's stack started (the demo's services,
        Kafka Connect and PostgreSQL first, if running); return their names."""
        stopped = []
        for extra in reversed(self.extras()):
            if extra.running() and extra.stop():
                stopped.append(extra.name)
        for component in reversed(self.components()):
            if component.stop():
                stopped.append(component.name)
        # An S3 server started under another store setting (``bench --stores`` switches them)
        # is this state directory's too.
        if self.settings.warehouse_store != "s3" and ObjectStore(self.settings).stop():
            stopped.append("s3")
        return stopped

    def status(self) -> list[Health]:
        """Each component's health, without starting anything; the demo's components only
        while they run."""
        base = [component.check() for component in self.components()]
        return base + [extra.check() for extra in self.extras() if extra.running()]
