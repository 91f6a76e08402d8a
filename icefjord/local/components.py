"""The components of the local stack: how each starts and how its health is judged."""

from __future__ import annotations

import base64
import http.client
import json
import shutil
import socket
import subprocess
import urllib.error
import urllib.request
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from icefjord.local.artifacts import Dist
from icefjord.local.processes import ManagedProcess
from icefjord.local.security import SecurityError, jaas_plain
from icefjord.local.settings import LocalSettings
from shared.settings import RegistrySettings

KAFKA_LOG4J = """\
log4j.rootLogger=INFO, stdout
log4j.appender.stdout=org.apache.log4j.ConsoleAppender
log4j.appender.stdout.layout=org.apache.log4j.PatternLayout
log4j.appender.stdout.layout.ConversionPattern=[%d] %p %m (%c)%n
log4j.logger.kafka=INFO
log4j.logger.org.apache.kafka=INFO
log4j.logger.state.change.logger=WARN
log4j.logger.kafka.log.LogCleaner=WARN
"""


@dataclass(frozen=True)
class Health:
    """A component's state as ``local status`` shows it."""

    name: str
    address: str
    healthy: bool
    detail: str


class Component(Protocol):
    name: str

    def address(self) -> str: ...

    def start(self) -> None: ...

    def stop(self) -> bool: ...

    def check(self) -> Health: ...

    def log_tail(self) -> str: ...


def port_open(host: str, port: int, timeout: float = 0.5) -> bool:
    """True when something accepts TCP connections on ``host:port``."""
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def _java() -> str:
    java = shutil.which("java")
    if java is None:
        raise RuntimeError("Java is not on PATH; install Java 17")
    return java


class KafkaBroker:
    """Apache Kafka in KRaft mode, one combined broker+controller node, logs under state."""

    name = "kafka"

    def __init__(self, settings: LocalSettings, dist: Dist | None) -> None:
        self.settings = settings
        self.dist = dist
        self.home = settings.state / "kafka"
        self.process = ManagedProcess("kafka", settings.state / "run")

    def address(self) -> str:
        return self.settings.bootstrap_servers

    def _write_config(self) -> Path:
        self.home.mkdir(parents=True, exist_ok=True)
        config = self.home / "server.properties"
        # Mode 600 before anything is written: with security on it holds the passwords.
        config.touch(mode=0o600, exist_ok=True)
        config.chmod(0o600)
        config.write_text(
            "".join(f"{key}={value}\n" for key, value in broker_properties(self.settings).items())
        )
        (self.home / "log4j.properties").write_text(KAFKA_LOG4J)
        return config

    def _classpath(self) -> str:
        assert self.dist is not None, "artifacts not resolved"
        return f"{self.dist.kafka_lib}/*"

    def start(self) -> None:
        config = self._write_config()
        data = self.home / "data"
        java = _java()
        if not (data / "meta.properties").exists():
            # KRaft log dirs are formatted once; the cluster id then lives on disk.
            formatted = subprocess.run(
                [java, "-cp", self._classpath(), "kafka.tools.StorageTool", "format",
                 f"--cluster-id={_new_cluster_id()}", "-c", str(config)],
                capture_output=True, text=True,
            )  # fmt: skip
            if formatted.returncode != 0:
                raise RuntimeError(
                    f"kafka-storage format exited {formatted.returncode}: "
                    f"{(formatted.stderr or formatted.stdout).strip()[-2000:]}"
                )
        self.process.start(
            [
                java,
                f"-Xmx{self.settings.kafka_heap}",
                f"-Xms{self.settings.kafka_heap}",
                f"-Dlog4j.configuration=file:{self.home / 'log4j.properties'}",
                "-cp",
                self._classpath(),
                "kafka.Kafka",
                str(config),
            ]
        )

    def stop(self) -> bool:
        return self.process.stop()

    def check(self) -> Health:
        s = self.settings
        if not port_open(s.host, s.kafka_port):
            running = self.process.pid() is not None
            return Health(self.name, self.address(), False, "starting" if running else "stopped")
        from confluent_kafka.admin import AdminClient

        try:
            client = AdminClient(s.kafka_settings("icefjord-local-check").client_config())
            metadata = client.list_topics(timeout=3)
        except SecurityError as exc:
            return Health(self.name, self.address(), False, f"stopped ({exc})")
        except Exception as exc:  # any client error means not healthy yet
            return Health(self.name, self.address(), False, f"no metadata: {exc}")
        topics = [t for t in metadata.topics if not t.startswith("__")]
        return Health(self.name, self.address(), True, f"KRaft broker, {len(topics)} topics")

    def log_tail(self) -> str:
        return self.process.tail()


def broker_properties(settings: LocalSettings) -> dict[str, str]:
    """The broker's ``server.properties``. The controller listener stays PLAINTEXT on the
    stack's host (only the node itself speaks to it); with security on, the client listener
    on ``kafka_port`` is SASL_SSL with PLAIN, and the broker talks to itself through it.

    PLAIN rather than SCRAM: its users are part of this file (mode 600), while a SCRAM user
    of KRaft is created by ``kafka-storage format --add-scram`` with the password as an
    argument, readable in /proc by every user while it runs; under TLS, PLAIN sends
    nothing readable either."""
    s = settings
    client = "SASL_SSL" if s.secured else "PLAINTEXT"
    properties = {
        "process.roles": "broker,controller",
        "node.id": "1",
        "controller.quorum.voters": f"1@{s.host}:{s.kafka_controller_port}",
        "listeners": f"{client}://{s.host}:{s.kafka_port},"
        f"CONTROLLER://{s.host}:{s.kafka_controller_port}",
        "advertised.listeners": f"{client}://{s.host}:{s.kafka_port}",
        "controller.listener.names": "CONTROLLER",
        "listener.security.protocol.map": f"{client}:{client},CONTROLLER:PLAINTEXT",
        "inter.broker.listener.name": client,
        "log.dirs": str(s.state / "kafka" / "data"),
        "num.partitions": "1",
        "offsets.topic.replication.factor": "1",
        "transaction.state.log.replication.factor": "1",
        "transaction.state.log.min.isr": "1",
        "group.initial.rebalance.delay.ms": "0",
        "auto.create.topics.enable": "false",
    }
    if s.secured:
        files = s.security_files
        secrets = files.secrets()
        store_password = secrets.store_password.get_secret_value()
        properties |= {
            "sasl.enabled.mechanisms": "PLAIN",
            "sasl.mechanism.inter.broker.protocol": "PLAIN",
            "listener.name.sasl_ssl.plain.sasl.jaas.config": jaas_plain(
                s.kafka_user, secrets.kafka_password, server=True
            ),
            "ssl.keystore.type": "PKCS12",
            "ssl.keystore.location": str(files.keystore),
            "ssl.keystore.password": store_password,
            "ssl.key.password": store_password,
            "ssl.truststore.type": "PEM",
            "ssl.truststore.location": str(files.ca_pem),
        }
    return properties


def _new_cluster_id() -> str:
    """A Kafka cluster id: 16 random bytes in URL-safe base64 without padding.

    Like Kafka's own ``Uuid.randomUuid``, never one that starts with ``-``: the storage
    tool's argument parser would read it as an option (one start in 64 failed so).
    """
    while True:
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not cluster_id.startswith("-"):
            return cluster_id


class ApicurioRegistry:
    """Apicurio Registry 3 with SQL storage in an H2 file under state (durable)."""

    name = "registry"

    def __init__(self, settings: LocalSettings, dist: Dist | None) -> None:
        self.settings = settings
        self.dist = dist
        self.home = settings.state / "registry"
        self.process = ManagedProcess("registry", settings.state / "run")

    def address(self) -> str:
        return self.settings.registry_url

    def start(self) -> None:
        assert self.dist is not None, "artifacts not resolved"
        s = self.settings
        self.home.mkdir(parents=True, exist_ok=True)
        # WRITE_DELAY=0: every registry commit reaches the file at once, and H2's own exit
        # hook closes the store. A schema registered just before `down` was lost once (CI,
        # under load) with H2's default of batching writes for up to a second.
        db_url = f"jdbc:h2:file:{self.home / 'registry'};WRITE_DELAY=0"
        # Quarkus reads config/application.properties in the working directory: the
        # settings that carry secrets go there (mode 600), never on the command line.
        config = self.home / "config" / "application.properties"
        config.parent.mkdir(exist_ok=True)
        config.touch(mode=0o600, exist_ok=True)
        config.chmod(0o600)
        config.write_text(
            "".join(f"{key}={value}\n" for key, value in registry_properties(s).items())
        )
        port = "ssl-port" if s.secured else "port"
        self.process.start(
            [
                _java(),
                f"-Xmx{s.registry_heap}",
                f"-Dquarkus.http.host={s.host}",
                f"-Dquarkus.http.{port}={s.registry_port}",
                "-Dquarkus.http.access-log.enabled=false",
                "-Dapicurio.storage.kind=sql",
                "-Dapicurio.storage.sql.kind=h2",
                f"-Dapicurio.datasource.url={db_url}",
                "-Dapicurio.datasource.username=sa",
                "-Dapicurio.datasource.password=sa",
                "-jar",
                str(self.dist.apicurio_jar),
            ],
            cwd=self.home,
        )

    def stop(self) -> bool:
        return self.process.stop()

    def check(self) -> Health:
        url = f"{self.address()}/subjects"
        try:
            registry = self.settings.registry_settings()
            request = urllib.request.Request(url, headers=basic_auth_header(registry))
            context = registry.ssl_context() if self.settings.secured else None
            with urllib.request.urlopen(request, timeout=3, context=context) as response:
                body = response.read().decode()
        except SecurityError as exc:
            return Health(self.name, self.address(), False, f"stopped ({exc})")
        except urllib.error.HTTPError as exc:
            # Credentials refused: the stack's secrets changed under a running registry.
            return Health(self.name, self.address(), False, f"HTTP {exc.code} {exc.reason}")
        except (OSError, http.client.HTTPException) as exc:
            running = self.process.pid() is not None
            detail = "starting" if running else f"stopped ({getattr(exc, 'reason', exc)})"
            return Health(self.name, self.address(), False, detail)
        subjects = len(json.loads(body))
        return Health(self.name, self.address(), True, f"Apicurio ccompat API, {subjects} subjects")

    def log_tail(self) -> str:
        return self.process.tail()


def registry_properties(settings: LocalSettings) -> dict[str, str]:
    """The registry's ``config/application.properties``: nothing without security; with
    it, HTTPS only, on ``registry_port``, with the stack's certificate, and HTTP basic auth
    against Quarkus' embedded users realm (one user, the stack's) for every path.

    Apicurio's own authentication (``apicurio.authn.*``) needs an OpenID Connect server
    even for basic auth (it trades the credentials for a token); Quarkus' properties-file
    realm is part of Apicurio's build and its users are runtime settings."""
    if not settings.secured:
        return {}
    files = settings.security_files
    secrets = files.secrets()
    user = settings.registry_user
    store_password = secrets.store_password.get_secret_value()
    return {
        "quarkus.http.insecure-requests": "disabled",
        "quarkus.http.ssl.certificate.key-store-file": str(files.keystore),
        "quarkus.http.ssl.certificate.key-store-file-type": "PKCS12",
        "quarkus.http.ssl.certificate.key-store-password": store_password,
        "quarkus.http.auth.basic": "true",
        "quarkus.security.users.embedded.enabled": "true",
        "quarkus.security.users.embedded.plain-text": "true",
        f"quarkus.security.users.embedded.users.{user}": (
            secrets.registry_password.get_secret_value()
        ),
        f"quarkus.security.users.embedded.roles.{user}": "sr-admin",
        "quarkus.http.auth.permission.authenticated.paths": "/*",
        "quarkus.http.auth.permission.authenticated.policy": "authenticated",
    }


def basic_auth_header(registry: RegistrySettings) -> dict[str, str]:
    """The ``Authorization`` header for ``registry``'s basic auth; empty without."""
    if registry.basic_auth_user_info is None:
        return {}
    token = base64.b64encode(registry.basic_auth_user_info.get_secret_value().encode())
    return {"Authorization": f"Basic {token.decode()}"}


class IcebergCatalog:
    """The JDBC catalog shared by Spark's JdbcCatalog and pyiceberg's SqlCatalog: on SQLite
    under the state directory, or on the stack's PostgreSQL (``catalog_store``).

    Its properties are written to ``<state_dir>/catalog/properties.json`` (mode 600), where
    ``shared.catalog`` finds them for any process given the state directory, so the
    services, the CLI and other engines see one catalog however it is configured."""

    name = "catalog"

    def __init__(self, settings: LocalSettings, dist: Dist | None) -> None:
        self.settings = settings
        self.dist = dist

    def address(self) -> str:
        return self.settings.catalog_uri

    def properties(self) -> dict[str, str]:
        return self.settings.catalog_properties()

    def start(self) -> None:
        s = self.settings
        s.catalog_db.parent.mkdir(parents=True, exist_ok=True)
        if s.warehouse_store == "file":
            s.warehouse.mkdir(parents=True, exist_ok=True)
        if s.catalog_store == "postgres":
            from icefjord.local.postgres import PostgresCluster

            cluster = PostgresCluster(s)
            if not cluster.running():
                cluster.start()
            cluster.ensure_database(s.catalog_database)
        s.catalog_file.touch(mode=0o600, exist_ok=True)
        s.catalog_file.write_text(json.dumps(self.properties(), indent=2))
        from pyiceberg.catalog.sql import SqlCatalog

        # Creating the catalog creates its tables (the JDBC catalog's V1 layout) if missing.
        SqlCatalog(s.catalog_name, **self.properties())

    def stop(self) -> bool:
        """Nothing of its own to stop (PostgreSQL stops with the demo's components)."""
        return False

    def check(self) -> Health:
        """Healthy when the catalog answers and ``catalog_file`` holds these settings'
        properties: a stack started with another store (``--stores`` of the benchmark
        switches them) is not healthy until ``up`` has rewritten the file."""
        s = self.settings
        if s.catalog_store == "sqlite" and not s.catalog_db.exists():
            return Health(self.name, self.address(), False, "not created")
        if s.running_catalog_properties() != self.properties():
            return Health(self.name, self.address(), False, "started with other settings")
        from pyiceberg.catalog.sql import SqlCatalog

        try:
            catalog = SqlCatalog(s.catalog_name, **self.properties())
            namespaces = catalog.list_namespaces()
            tables = sum(len(catalog.list_tables(ns)) for ns in namespaces)
        except Exception as exc:
            return Health(self.name, self.address(), False, f"unreadable: {exc}")
        where = "PostgreSQL" if s.catalog_store == "postgres" else "SQLite"
        return Health(
            self.name,
            self.address(),
            True,
            f"JDBC on {where}, {len(namespaces)} namespaces, {tables} tables, "
            f"warehouse {s.warehouse_uri}",
        )

    def log_tail(self) -> str:
        return ""


class SparkRuntime:
    """Spark from the pyspark wheel plus the Iceberg runtime jar: no process until used."""

    name = "spark"

    def __init__(self, settings: LocalSettings, dist: Dist | None) -> None:
        self.settings = settings
        self.dist = dist

    def address(self) -> str:
        return "local[*]"

    def start(self) -> None:
        return None

    def stop(self) -> bool:
        return False

    def check(self) -> Health:
        try:
            import pyspark
        except ImportError:
            return Health(self.name, self.address(), False, "pyspark is not installed")
        if shutil.which("java") is None:
            return Health(self.name, self.address(), False, "java is not on PATH")
        if self.dist is None or not all(p.is_file() for p in self.dist.spark_jars):
            return Health(self.name, self.address(), False, "Iceberg runtime jar missing")
        jar = self.dist.spark_jars[0].name
        return Health(self.name, self.address(), True, f"pyspark {pyspark.__version__}, {jar}")

    def log_tail(self) -> str:
        return ""
