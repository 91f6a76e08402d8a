"""Kafka Connect (distributed worker, Kafka's own jars) with Debezium's Postgres connector.

One worker, its configuration, offsets and status in Kafka topics (so a restarted worker, or
a restarted broker, resumes where it was), REST API on ``connect_port``. Connectors are
registered with ``PUT /connectors/<name>/config``, which creates or updates: registering
twice is harmless.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from icefjord.local.artifacts import ConnectDist
from icefjord.local.components import Health, _java
from icefjord.local.processes import ManagedProcess
from icefjord.local.settings import LocalSettings
from shared.errors import IcefjordError

CONNECT_LOG4J = """\
log4j.rootLogger=INFO, stdout
log4j.appender.stdout=org.apache.log4j.ConsoleAppender
log4j.appender.stdout.layout=org.apache.log4j.PatternLayout
log4j.appender.stdout.layout.ConversionPattern=[%d] %p %m (%c)%n
log4j.logger.org.apache.kafka.clients=WARN
log4j.logger.org.reflections=ERROR
log4j.logger.org.eclipse.jetty=WARN
log4j.logger.io.debezium=INFO
"""
# Kafka's JsonConverter, byte for byte, with each schema serialized once per schema instead
# of once per record (deploy/connect-json). In a set-based benchmark phase it took Connect
# from 43.0 to 35.0 CPU s for the same 598,230 changes. Compose and Kubernetes run Kafka's
# own JsonConverter; the records are the same.
JSON_CONVERTER = "io.icefjord.connect.SchemaCachingJsonConverter"
POSTGRES_CONNECTOR = "io.debezium.connector.postgresql.PostgresConnector"


class ConnectError(IcefjordError, RuntimeError):
    """The worker's REST API refused a request, or a connector or task failed."""


@dataclass(frozen=True)
class PostgresSource:
    """What the Debezium Postgres connector captures and how it names its topics.

    Topics are ``<topic_prefix>.<schema>.<table>`` for every table of ``schema`` in the
    publication ``publication`` (created by the workload, ``FOR TABLES IN SCHEMA``, so
    tables created later are captured without touching the connector).
    """

    host: str
    port: int
    user: str
    database: str
    schema: str
    topic_prefix: str = "demo"
    publication: str = "icefjord_demo"
    slot: str = "icefjord_demo"
    topic_partitions: int = 1


def debezium_postgres_config(source: PostgresSource) -> dict[str, str]:
    """The connector configuration: pgoutput, JSON with schemas for key and value (Kafka's
    JsonConverter's bytes, written by :data:`JSON_CONVERTER`), exact decimals, microsecond
    times, no heartbeats, topics created by Connect."""
    return {
        "connector.class": POSTGRES_CONNECTOR,
        "tasks.max": "1",
        "plugin.name": "pgoutput",
        "database.hostname": source.host,
        "database.port": str(source.port),
        "database.user": source.user,
        # Trust authentication: the password is not checked, but the connector wants one.
        "database.password": "icefjord",
        "database.dbname": source.database,
        "topic.prefix": source.topic_prefix,
        "schema.include.list": source.schema,
        "publication.name": source.publication,
        "publication.autocreate.mode": "disabled",
        "slot.name": source.slot,
        "snapshot.mode": "initial",
        "key.converter": JSON_CONVERTER,
        "key.converter.schemas.enable": "true",
        "value.converter": JSON_CONVERTER,
        "value.converter.schemas.enable": "true",
        "decimal.handling.mode": "precise",
        "time.precision.mode": "adaptive_time_microseconds",
        "binary.handling.mode": "bytes",
        "heartbeat.interval.ms": "0",
        # How long the task waits for WAL events before it looks again (Debezium's default
        # is 500 ms): a tenth of a second off every change's freshness at low rates.
        "poll.interval.ms": "100",
        # Larger hand-offs from the snapshot reader and the WAL stream to Connect (defaults
        # 2048 and 8192): fewer, fuller poll() batches while a backlog lasts.
        "max.batch.size": "8192",
        "max.queue.size": "32768",
        "tombstones.on.delete": "true",
        "topic.creation.default.replication.factor": "1",
        "topic.creation.default.partitions": str(source.topic_partitions),
    }


class KafkaConnect:
    """A distributed Kafka Connect worker of the local stack."""

    name = "connect"

    def __init__(
        self,
        settings: LocalSettings,
        dist: ConnectDist | None,
        *,
        group_id: str = "icefjord-connect",
    ) -> None:
        self.settings = settings
        self.dist = dist
        self.group_id = group_id
        self.home = settings.state / "connect"
        self.process = ManagedProcess("connect", settings.state / "run")

    def address(self) -> str:
        return self.settings.connect_url

    def worker_properties(self) -> dict[str, str]:
        """The worker configuration (internal topics named after the group id)."""
        s = self.settings
        assert self.dist is not None, "Connect artifacts not resolved"
        # The worker's own clients take the unprefixed settings; the connectors' producers
        # and consumers, and their admin clients, only the prefixed ones.
        security = s.kafka_java_client_properties()
        prefixed = {
            f"{prefix}{key}": value
            for prefix in ("producer.", "consumer.", "admin.")
            for key, value in security.items()
        }
        return {
            **security,
            **prefixed,
            "bootstrap.servers": s.bootstrap_servers,
            "group.id": self.group_id,
            "config.storage.topic": f"{self.group_id}-configs",
            "offset.storage.topic": f"{self.group_id}-offsets",
            "status.storage.topic": f"{self.group_id}-status",
            "config.storage.replication.factor": "1",
            "offset.storage.replication.factor": "1",
            "status.storage.replication.factor": "1",
            "offset.storage.partitions": "1",
            "status.storage.partitions": "1",
            "key.converter": JSON_CONVERTER,
            "value.converter": JSON_CONVERTER,
            "key.converter.schemas.enable": "true",
            "value.converter.schemas.enable": "true",
            # Debezium confirms an LSN to PostgreSQL only after its offset is flushed.
            "offset.flush.interval.ms": "1000",
            # A worker that cannot reach the group coordinator for heartbeat.interval.ms
            # revokes its own tasks (KAFKA-9184). At the default 3 s, a broker restart
            # stopped the Debezium task; the stopped task's replication connection outlived
            # it and held the slot against its successor. One minute rides out a restart.
            "heartbeat.interval.ms": "60000",
            "session.timeout.ms": "180000",
            "task.shutdown.graceful.timeout.ms": "15000",
            "listeners": f"http://{s.host}:{s.connect_port}",
            "rest.advertised.host.name": s.host,
            "rest.advertised.port": str(s.connect_port),
            "plugin.path": str(self.dist.plugin_path),
            "topic.creation.enable": "true",
            # Debezium's records (JSON with schemas) are ~2.5 KB: at the producer's default
            # 16 KB batches a snapshot went out a handful of records per request.
            "producer.batch.size": "262144",
            "producer.linger.ms": "5",
            # Every record repeats its schema: after the same benchmark run (snapshot of
            # 200,000 rows, 5 s at 1,000/s), the three topics held 67 MB with lz4 instead of
            # 954 MB. The broker's CPU stayed the same.
            "producer.compression.type": "lz4",
        }

    def start(self) -> None:
        assert self.dist is not None, "Connect artifacts not resolved"
        self.home.mkdir(parents=True, exist_ok=True)
        config = self.home / "connect-distributed.properties"
        # Mode 600 before anything is written: with security on it holds the Kafka password.
        config.touch(mode=0o600, exist_ok=True)
        config.chmod(0o600)
        config.write_text(
            "".join(f"{key}={value}\n" for key, value in self.worker_properties().items())
        )
        (self.home / "log4j.properties").write_text(CONNECT_LOG4J)
        self.process.start(
            [
                _java(),
                f"-Xmx{self.settings.connect_heap}",
                # The throughput collector: with G1 (the JVM's default here) Connect used
                # 53 CPU s for 598,230 changes of a set-based benchmark phase, with this 43-46.
                "-XX:+UseParallelGC",
                f"-Dlog4j.configuration=file:{self.home / 'log4j.properties'}",
                "-cp",
                self.dist.classpath,
                "org.apache.kafka.connect.cli.ConnectDistributed",
                str(config),
            ]
        )

    def stop(self) -> bool:
        return self.process.stop()

    def running(self) -> bool:
        return self.process.pid() is not None

    def check(self) -> Health:
        """Healthy once ``GET /health`` says the worker has completed startup: joined its
        group and read its internal topics to the end (KIP-1017). Before that, ``GET
        /connectors`` can already answer, with an empty list, so the connectors of earlier
        runs would not be seen yet, and would start a moment later."""
        try:
            self.request("GET", "/health")
            connectors = self.request("GET", "/connectors")
        except (ConnectError, OSError) as exc:
            running = self.process.pid() is not None
            detail = "starting" if running else f"stopped ({exc})"
            return Health(self.name, self.address(), False, detail)
        names = ", ".join(connectors) if connectors else "none"
        return Health(self.name, self.address(), True, f"distributed worker, connectors: {names}")

    def log_tail(self) -> str:
        return self.process.tail()

    def wait_healthy(self, timeout_s: float) -> Health:
        """Poll :meth:`check` until healthy; raises ConnectError with the log tail."""
        deadline = time.monotonic() + timeout_s
        while True:
            health = self.check()
            if health.healthy:
                return health
            if health.detail.startswith("stopped") or time.monotonic() > deadline:
                raise ConnectError(
                    f"Kafka Connect not healthy ({health.detail})\n--- log tail ---\n"
                    f"{self.log_tail()}"
                )
            time.sleep(0.5)

    # -- REST ------------------------------------------------------------------------------

    def request(self, method: str, path: str, body: Mapping[str, Any] | None = None) -> Any:
        """One REST call; returns the decoded JSON (None for an empty body).
        Raises ConnectError for an HTTP error status, OSError when unreachable."""
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(
            f"{self.address()}{path}",
            data=data,
            method=method,
            headers={"Content-Type": "application/json", "Accept": "application/json"},
        )
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                raw = response.read()
        except urllib.error.HTTPError as exc:
            detail = exc.read().decode(errors="replace")
            raise ConnectError(f"{method} {path}: HTTP {exc.code}: {detail}") from exc
        return json.loads(raw) if raw else None

    def register(self, name: str, config: Mapping[str, str]) -> None:
        """Create or update connector ``name``. Retries while the worker rebalances."""
        deadline = time.monotonic() + 60
        while True:
            try:
                self.request("PUT", f"/connectors/{name}/config", dict(config))
                return
            except ConnectError as exc:
                # 409: rebalance in progress; the worker answers once it has settled.
                if "HTTP 409" not in str(exc) or time.monotonic() > deadline:
                    raise
                time.sleep(1)

    def delete(self, name: str) -> bool:
        """Delete connector ``name``; False if it did not exist."""
        try:
            self.request("DELETE", f"/connectors/{name}")
        except ConnectError as exc:
            if "HTTP 404" in str(exc):
                return False
            raise
        return True

    def status(self, name: str) -> dict[str, Any]:
        """``GET /connectors/<name>/status``."""
        result: dict[str, Any] = self.request("GET", f"/connectors/{name}/status")
        return result

    def restart_failed(self, name: str) -> None:
        """Restart the connector and whichever of its tasks failed."""
        self.request("POST", f"/connectors/{name}/restart?includeTasks=true&onlyFailed=true")

    def wait_running(self, name: str, timeout_s: float = 120.0) -> dict[str, Any]:
        """Wait until the connector and all its tasks run; raises ConnectError with the
        failure trace if one fails, or after ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        last: dict[str, Any] = {}
        while time.monotonic() < deadline:
            try:
                last = self.status(name)
            except ConnectError as exc:
                if "HTTP 404" not in str(exc):
                    raise
                time.sleep(0.5)
                continue
            states = [last["connector"]["state"], *(t["state"] for t in last.get("tasks", []))]
            if "FAILED" in states:
                traces = [last["connector"].get("trace", "")] + [
                    t.get("trace", "") for t in last.get("tasks", [])
                ]
                raise ConnectError(f"connector {name} failed:\n" + "\n".join(filter(None, traces)))
            if last.get("tasks") and all(state == "RUNNING" for state in states):
                return last
            time.sleep(0.5)
        raise ConnectError(f"connector {name} not running after {timeout_s:.0f}s: {last}")
