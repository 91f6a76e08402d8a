"""Trino for the readers: fetched from Maven Central, configured from the catalog's
properties, started as one local process (coordinator and worker in one).

:func:`ensure_trino` resolves ``trino-server-core`` and the ``trino-iceberg`` plugin
(Maven profile ``trino`` of ``deploy/local/pom.xml``) into the download cache once.
:class:`TrinoServer` writes Trino's ``etc/`` under the state directory from pure functions
(:func:`node_properties`, :func:`jvm_config`, :func:`config_properties`,
:func:`trino_catalog`), starts it with a JDK 24+, waits for ``/v1/info`` to say it is no
longer starting, and stops it.
"""

from __future__ import annotations

import glob
import json
import shutil
import tarfile
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

from icefjord.local.artifacts import ArtifactError, resolve_with_maven
from icefjord.local.processes import ManagedProcess
from icefjord.local.settings import LocalSettings
from shared.catalog import spark_catalog_conf
from shared.errors import IcefjordError

JAVA_GLOB = "/usr/lib/jvm/temurin-2*"
"""Where a JDK new enough for Trino (24+) is looked for: Debian's Java is 17."""

_DRIVERS = {"jdbc:sqlite:": "org.sqlite.JDBC", "jdbc:postgresql:": "org.postgresql.Driver"}


class TrinoError(IcefjordError, RuntimeError):
    """Trino could not be fetched or started; the message says why (and the log's tail)."""


@dataclass(frozen=True)
class TrinoDist:
    """Trino ``version`` under ``root``: the server in ``server/``, and ``plugin/`` holding
    only the Iceberg connector with SQLite's JDBC driver (the server's own plugins, for
    exchanges, spooling and the like, are not loaded)."""

    root: Path
    version: str

    @property
    def server(self) -> Path:
        return self.root / "server"

    @property
    def launcher(self) -> Path:
        return self.server / "bin" / "launcher"

    @property
    def archive(self) -> Path:
        return self.root / f"trino-server-core-{self.version}.tar.gz"

    @property
    def plugin_dir(self) -> Path:
        return self.root / "plugin"

    def plugin_complete(self) -> bool:
        iceberg = self.plugin_dir / "iceberg"
        return any(iceberg.glob("*trino-iceberg-*.jar")) and any(iceberg.glob("sqlite-jdbc-*.jar"))

    def server_complete(self) -> bool:
        return self.launcher.is_file() and any((self.server / "lib").glob("*trino-main-*.jar"))

    def complete(self) -> bool:
        return self.server_complete() and self.plugin_complete()


def trino_dist_for(settings: LocalSettings) -> TrinoDist:
    return TrinoDist(settings.dist_dir / f"trino-{settings.trino_version}", settings.trino_version)


def ensure_trino(settings: LocalSettings, progress: Callable[[str], None]) -> TrinoDist:
    """Trino's server and Iceberg plugin in the download cache, fetched when missing
    (about 540 MB the first time). Raises :class:`TrinoError` when Maven fails."""
    dist = trino_dist_for(settings)
    if dist.complete():
        return dist
    if not dist.plugin_complete() or not (dist.server_complete() or dist.archive.is_file()):
        progress(f"fetching Trino {dist.version} with Maven (first run: about 540 MB)")
        try:
            resolve_with_maven(settings, progress, profiles=("trino",))
        except ArtifactError as exc:
            raise TrinoError(f"Trino {dist.version} could not be fetched: {exc}") from exc
    if not dist.server_complete():
        if not dist.archive.is_file():
            raise TrinoError(f"Maven finished but {dist.archive} is missing")
        progress(f"unpacking {dist.archive.name}")
        unpack_server(dist.archive, dist.server)
        dist.archive.unlink()
    if not dist.complete():
        raise TrinoError(f"Maven finished but Trino is incomplete under {dist.root}")
    return dist


def unpack_server(archive: Path, target: Path) -> None:
    """Unpack Trino's server archive (one top folder, hard links between its plugins and
    ``lib/``) to ``target``; moved in whole, so a half unpacked server is never used."""
    staging = target.with_name(f".{target.name}-partial")
    shutil.rmtree(staging, ignore_errors=True)
    with tarfile.open(archive) as tar:
        tops = {name.split("/", 1)[0] for name in tar.getnames()}
        if len(tops) != 1:
            raise TrinoError(f"{archive.name} should hold one top folder, holds {sorted(tops)}")
        tar.extractall(staging, filter="data")
    (staging / tops.pop()).rename(target)
    staging.rmdir()


def find_java_home(candidates: Iterable[str] | None = None) -> Path:
    """The newest JDK among ``candidates`` (default: :data:`JAVA_GLOB`) that has
    ``bin/java``. Raises :class:`TrinoError` when there is none."""
    found = sorted(
        (Path(c) for c in (glob.glob(JAVA_GLOB) if candidates is None else candidates)),
        key=lambda p: p.name,
    )
    usable = [p for p in found if (p / "bin" / "java").is_file()]
    if not usable:
        raise TrinoError(
            f"Trino needs Java 24 or newer and none was found at {JAVA_GLOB} "
            "(install a Temurin 25 JDK there)"
        )
    return usable[-1]


def properties_text(values: Mapping[str, str]) -> str:
    """Java properties, one ``key=value`` a line, in the order given."""
    return "".join(f"{key}={value}\n" for key, value in values.items())


def node_properties(node_id: str, data_dir: Path) -> dict[str, str]:
    return {"node.environment": "icefjord", "node.id": node_id, "node.data-dir": str(data_dir)}


def jvm_config(heap: str) -> list[str]:
    """JVM options: a small fixed heap, and what Trino's launcher checks for."""
    return [
        "-server",
        f"-Xmx{heap}",
        "-XX:+UseG1GC",
        "-XX:+ExitOnOutOfMemoryError",
        "-XX:ReservedCodeCacheSize=256M",
        "-XX:+EnableDynamicAgentLoading",
        "-Djdk.attach.allowAttachSelf=true",
        "-Dfile.encoding=UTF-8",
    ]


def config_properties(host: str, port: int, plugin_dir: Path) -> dict[str, str]:
    """One node that is coordinator and worker, with query memory well inside its heap
    (Trino's defaults assume a machine of its own), loading the plugins of ``plugin_dir``."""
    return {
        "plugin.dir": str(plugin_dir),
        "coordinator": "true",
        "node-scheduler.include-coordinator": "true",
        "http-server.http.port": str(port),
        "discovery.uri": f"http://{host}:{port}",
        "query.max-memory": "256MB",
        "query.max-memory-per-node": "256MB",
        "catalog.management": "static",
    }


def trino_catalog(name: str, properties: Mapping[str, str]) -> dict[str, str]:
    """Trino's Iceberg catalog file for pyiceberg's catalog ``properties`` named ``name``.

    The JDBC URL, user and password are the same translation Spark's side uses
    (:func:`shared.catalog.spark_catalog_conf`); the warehouse is read through Trino's
    native S3 file system (``s3.*`` properties) or its local one. Raises ValueError for a
    catalog that is not a JDBC (``sql``) catalog.
    """
    if properties.get("type") != "sql":
        raise ValueError(f"Trino reads Icefjord's JDBC catalog; got type {properties.get('type')}")
    spark = spark_catalog_conf(name, dict(properties))
    prefix = f"spark.sql.catalog.{name}"
    url = spark[f"{prefix}.uri"]
    driver = next((d for start, d in _DRIVERS.items() if url.startswith(start)), None)
    if driver is None:
        raise ValueError(f"no JDBC driver known for {url}")
    warehouse = properties["warehouse"]
    conf = {
        "connector.name": "iceberg",
        "iceberg.catalog.type": "jdbc",
        "iceberg.jdbc-catalog.catalog-name": name,
        "iceberg.jdbc-catalog.driver-class": driver,
        "iceberg.jdbc-catalog.connection-url": url,
        "iceberg.jdbc-catalog.default-warehouse-dir": warehouse,
        # The catalog tables carry iceberg_type (pyiceberg creates them; Spark uses V1 too).
        "iceberg.jdbc-catalog.schema-version": "V1",
    }
    if f"{prefix}.jdbc.user" in spark:
        conf["iceberg.jdbc-catalog.connection-user"] = spark[f"{prefix}.jdbc.user"]
    if f"{prefix}.jdbc.password" in spark:
        conf["iceberg.jdbc-catalog.connection-password"] = spark[f"{prefix}.jdbc.password"]
    if warehouse.startswith(("s3://", "s3a://")):
        conf.update(
            {
                "fs.native-s3.enabled": "true",
                "s3.endpoint": properties["s3.endpoint"],
                "s3.path-style-access": properties.get("s3.path-style-access", "false"),
                "s3.region": properties.get("client.region")
                or properties.get("s3.region", "us-east-1"),
                "s3.aws-access-key": properties["s3.access-key-id"],
                "s3.aws-secret-key": properties["s3.secret-access-key"],
            }
        )
    else:
        # Table locations are absolute file: URIs; Trino resolves them under this root.
        conf.update({"fs.native-local.enabled": "true", "local.location": "/"})
    return conf


def connect(host: str, port: int, catalog: str | None = None, user: str = "icefjord") -> Any:
    """A DB-API connection to the Trino at ``host:port`` (plain HTTP, no password: the
    local server has no authentication)."""
    import trino

    return trino.dbapi.connect(  # type: ignore[no-untyped-call]  # the client is unannotated
        host=host, port=port, user=user, catalog=catalog
    )


class TrinoServer:
    """One local Trino serving ``catalog_name`` from pyiceberg's ``catalog`` properties.

    Its configuration, data and log live under ``<state>/trino``. Use as a context
    manager, or :meth:`start` and :meth:`stop`.
    """

    def __init__(
        self, settings: LocalSettings, catalog_name: str, catalog: Mapping[str, str]
    ) -> None:
        self.settings = settings
        self.catalog_name = catalog_name
        self.catalog = dict(catalog)
        self.home = settings.state / "trino"
        self.process = ManagedProcess("trino", self.home / "run")

    @property
    def url(self) -> str:
        return f"http://{self.settings.host}:{self.settings.trino_port}"

    def write_etc(self, plugin_dir: Path) -> Path:
        """Write ``etc/`` (the catalog file readable by its owner only: it may hold keys)."""
        etc = self.home / "etc"
        (etc / "catalog").mkdir(parents=True, exist_ok=True)
        data = self.home / "data"
        data.mkdir(parents=True, exist_ok=True)
        node = node_properties(f"icefjord-{uuid.uuid4().hex[:12]}", data)
        (etc / "node.properties").write_text(properties_text(node))
        (etc / "jvm.config").write_text("\n".join(jvm_config(self.settings.trino_heap)) + "\n")
        config = config_properties(self.settings.host, self.settings.trino_port, plugin_dir)
        (etc / "config.properties").write_text(properties_text(config))
        (etc / "log.properties").write_text("io.trino=INFO\n")
        catalog_file = etc / "catalog" / f"{self.catalog_name}.properties"
        catalog_file.touch(mode=0o600)
        catalog_file.chmod(0o600)
        catalog_file.write_text(properties_text(trino_catalog(self.catalog_name, self.catalog)))
        return etc

    def start(self, progress: Callable[[str], None], timeout_s: float = 180.0) -> float:
        """Fetch Trino if needed, start it and wait until it serves queries; return the
        seconds the start took (the fetch not counted). Raises :class:`TrinoError`."""
        dist = ensure_trino(self.settings, progress)
        java_home = find_java_home()
        if self.process.pid() is not None:
            raise TrinoError(f"a Trino of this state directory already runs ({self.url})")
        etc = self.write_etc(dist.plugin_dir)
        began = time.monotonic()
        progress(f"starting Trino {self.settings.trino_version} on {self.url}")
        self.process.start(
            [str(dist.launcher), "run", f"--etc-dir={etc}"],
            env={"JAVA_HOME": str(java_home), "PATH": f"{java_home / 'bin'}:/usr/bin:/bin"},
            cwd=dist.server,
        )
        try:
            self._wait_ready(timeout_s)
        except TrinoError:
            self.process.stop()
            raise
        return time.monotonic() - began

    def _wait_ready(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process.pid() is None:
                raise TrinoError(f"Trino exited while starting:\n{self.process.tail(40)}")
            if self.ready():
                return
            time.sleep(1.0)
        raise TrinoError(
            f"Trino did not become ready within {timeout_s:.0f} s:\n{self.process.tail(40)}"
        )

    def ready(self) -> bool:
        """Whether ``/v1/info`` says started and a query runs: the coordinator reports
        started a moment before it lists itself as a worker ("No nodes available")."""
        try:
            with urllib.request.urlopen(f"{self.url}/v1/info", timeout=2) as response:
                info = json.loads(response.read())
        except (OSError, urllib.error.URLError, ValueError):
            return False
        if info.get("starting") is not False:
            return False
        from trino.exceptions import TrinoQueryError

        try:
            with connect(self.settings.host, self.settings.trino_port) as connection:
                cursor = connection.cursor()
                cursor.execute("SELECT count(*) FROM system.runtime.nodes WHERE state = 'active'")
                return bool(cursor.fetchone()[0])
        except (OSError, TrinoQueryError):
            return False

    def stop(self) -> bool:
        """Stop Trino (SIGTERM, then SIGKILL after 30 s); True if it was running."""
        return self.process.stop(timeout=30.0)

    def __enter__(self) -> TrinoServer:
        self.start(progress=lambda message: None)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()
