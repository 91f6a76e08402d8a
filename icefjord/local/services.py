"""The Icefjord services as local processes, configured for the local stack: the four of the
pipeline, which the demo and the benchmarks run, and icefjord-console, started by name
(``service_processes(settings, ["console"])``).

Each runs as ``python -m services.<package>`` (detached, pid and log under
``<state_dir>/run``), reads its settings from environment variables with its own prefix
(writer contract: ``ICEFJORD_<SERVICE>_KAFKA__BOOTSTRAP_SERVERS``, ``..._REGISTRY__URL``,
``..._METRICS__PORT``; the catalog the pyiceberg way, ``PYICEBERG_CATALOG__<NAME>__*``), and
serves ``/metrics``, ``/healthz`` and ``/readyz`` on its port.
"""

from __future__ import annotations

import http.client
import importlib.util
import json
import os
import signal
import sys
import threading
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import SecretStr

from icefjord.local.artifacts import LOCALFS_CLASS, localfs_jar_for
from icefjord.local.compiled import checkout_root, compiled_build
from icefjord.local.components import Health
from icefjord.local.processes import ManagedProcess
from icefjord.local.settings import LocalSettings


@dataclass(frozen=True)
class ServiceSpec:
    """One service: its short name, module, env prefix and which LocalSettings port."""

    name: str
    module: str
    env_prefix: str
    port_setting: str
    topic_replication: bool = True
    uses_spark: bool = False


NORMALIZER = ServiceSpec(
    "normalizer", "services.cdc_normalizer", "ICEFJORD_NORMALIZER_", "normalizer_port"
)
WATCHER = ServiceSpec("watcher", "services.schema_watcher", "ICEFJORD_WATCHER_", "watcher_port")
WRITER = ServiceSpec(
    "writer", "services.iceberg_writer", "ICEFJORD_WRITER_", "writer_port", uses_spark=True
)
MAINTAINER = ServiceSpec(
    "maintainer",
    "services.maintainer",
    "ICEFJORD_MAINTAINER_",
    "maintainer_port",
    uses_spark=True,
)
CONSOLE = ServiceSpec("console", "services.console", "ICEFJORD_CONSOLE_", "console_port")
PIPELINE = (NORMALIZER, WATCHER, WRITER, MAINTAINER)
SERVICES = (*PIPELINE, CONSOLE)
# The services with per-record code in the mypyc build (setup.py): the normalizer's modules,
# and the Avro decoder the writer reads every change record with.
COMPILED_SERVICES = (NORMALIZER, WRITER)
# Metrics port of a writer instance beside the first: the first's plus this, times its number.
INSTANCE_PORT_STEP = 100
# What runs by default (the demo, the benchmarks): the pipeline, not the console.
SERVICE_NAMES = tuple(s.name for s in PIPELINE)


def service_spec(name: str) -> ServiceSpec:
    for spec in SERVICES:
        if spec.name == name:
            return spec
    raise KeyError(f"no service {name!r}; known: {', '.join(s.name for s in SERVICES)}")


def installed(spec: ServiceSpec) -> bool:
    """True when the service's package can be imported (the writer and maintainer may not
    exist yet in a checkout)."""
    return importlib.util.find_spec(spec.module) is not None


def catalog_env(settings: LocalSettings) -> dict[str, str]:
    """The local stack's catalog in pyiceberg's environment convention
    (``s3.access-key-id`` is ``..._S3__ACCESS_KEY_ID``). An environment, not arguments:
    a process's command line is readable by every user, its environment only by its own."""
    prefix = f"PYICEBERG_CATALOG__{settings.catalog_name.upper()}__"
    return {
        prefix + key.replace(".", "__", 1).replace("-", "_").upper(): value
        for key, value in settings.running_catalog_properties().items()
    }


def service_env(
    spec: ServiceSpec,
    settings: LocalSettings,
    *,
    source_topic_prefix: str | None = None,
    extra: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """The environment of one service on the local stack.

    ``source_topic_prefix`` narrows the normalizer to ``<prefix>.<schema>.<table>`` topics
    (the demo's Debezium server name). ``extra`` entries win (keys with or without the
    service's prefix are taken as given).
    """
    p = spec.env_prefix
    env = {
        **client_env(p, settings),
        f"{p}METRICS__HOST": settings.host,
        f"{p}METRICS__PORT": str(getattr(settings, spec.port_setting)),
        f"{p}LOG_FORMAT": "json",
        f"{p}CATALOG__NAME": settings.catalog_name,
        f"{p}CATALOG__LOCAL_STATE_DIR": str(settings.state),
        **catalog_env(settings),
    }
    if spec.uses_spark:
        jars = settings.dist_dir / f"spark-jars-{settings.iceberg_version}" / "*.jar"
        env[f"{p}SPARK__JARS"] = str(jars)
        # Two cores are shared with Kafka, the registry and the other services.
        env[f"{p}SPARK__MASTER"] = "local[2]"
        env.update(localfs_env(spec, settings))
    if spec.topic_replication:
        # One broker: topics a service creates get one replica.
        env[f"{p}TOPIC_REPLICATION_FACTOR"] = "1"
    if spec is NORMALIZER and source_topic_prefix is not None:
        escaped = source_topic_prefix.replace(".", r"\.")
        env[f"{p}INCLUDE_PATTERN"] = rf"^{escaped}\.[^.]+\.[^.]+$"
    env.update(extra or {})
    return env


def client_env(prefix: str, settings: LocalSettings) -> dict[str, str]:
    """The stack's Kafka and registry as a service's settings (``<prefix>KAFKA__*``,
    ``<prefix>REGISTRY__*``), passwords included: in its environment, which only its own
    user can read, never in its arguments."""
    kafka = settings.kafka_settings()
    registry = settings.registry_settings()
    values: dict[str, str | SecretStr | None] = {
        "KAFKA__BOOTSTRAP_SERVERS": kafka.bootstrap_servers,
        "KAFKA__SECURITY_PROTOCOL": kafka.security_protocol,
        "KAFKA__SASL_MECHANISM": kafka.sasl_mechanism,
        "KAFKA__SASL_USERNAME": kafka.sasl_username,
        "KAFKA__SASL_PASSWORD": kafka.sasl_password,
        "KAFKA__SSL_CA_LOCATION": kafka.ssl_ca_location,
        "REGISTRY__URL": registry.url,
        "REGISTRY__BASIC_AUTH_USER_INFO": registry.basic_auth_user_info,
        "REGISTRY__SSL_CA_LOCATION": registry.ssl_ca_location,
    }
    return {
        prefix + key: value.get_secret_value() if isinstance(value, SecretStr) else value
        for key, value in values.items()
        if value is not None
    }


def localfs_env(spec: ServiceSpec, settings: LocalSettings) -> dict[str, str]:
    """Spark's ``file://`` as Icefjord's local file system, when its jar is built (``icefjord
    local up`` builds it): Hadoop's own starts a ``chmod`` process for every file it creates,
    about eight per Iceberg commit on the local warehouse (``deploy/spark-localfs``). On the
    JVM's own classpath, because Spark reads local files before it loads ``spark.jars``."""
    jar = localfs_jar_for(settings)
    if jar is None or not jar.is_file():
        return {}
    conf = {"spark.driver.extraClassPath": str(jar), "spark.hadoop.fs.file.impl": LOCALFS_CLASS}
    return {f"{spec.env_prefix}SPARK__CONF": json.dumps(conf)}


@dataclass
class ServiceProcess:
    """One service process of the local stack (a :class:`Component` for status tables)."""

    spec: ServiceSpec
    settings: LocalSettings
    env: dict[str, str] = field(default_factory=dict)
    python: str = sys.executable
    cwd: Path | None = None
    build: str = ""  # which build runs, when there is a choice (the normalizer's)
    instance: int = 1  # writer instances sharing the tables: 2, 3, ... beside the first

    def __post_init__(self) -> None:
        self.process = ManagedProcess(f"service-{self.name}", self.settings.state / "run")
        # A supervisor and a fault injector may both start the service: one start at a time.
        self._starting = threading.Lock()

    @property
    def name(self) -> str:
        return self.spec.name if self.instance == 1 else f"{self.spec.name}-{self.instance}"

    @property
    def port(self) -> int:
        port: int = getattr(self.settings, self.spec.port_setting)
        return port + INSTANCE_PORT_STEP * (self.instance - 1)

    def address(self) -> str:
        return f"http://{self.settings.host}:{self.port}"

    def start(self) -> None:
        """Start the process unless it runs; raises RuntimeError if the module is missing."""
        if not installed(self.spec):
            raise RuntimeError(f"{self.spec.module} is not installed in this environment")
        with self._starting:
            if self.process.pid() is not None:
                return
            self.process.start([self.python, "-m", self.spec.module], env=self.env, cwd=self.cwd)

    def stop(self) -> bool:
        """SIGTERM the service alone: it stops its Spark JVM itself, then the rest of its
        process group is killed."""
        return self.process.stop(leader_first=True)

    def running(self) -> bool:
        return self.process.pid() is not None

    def kill(self) -> bool:
        """``kill -9`` the service's process group (its JVM children too, as a container
        crash would); True if it was running."""
        pid = self.process.pid()
        if pid is None:
            return False
        try:
            os.killpg(pid, signal.SIGKILL)
        except ProcessLookupError:
            return False
        except PermissionError:
            os.kill(pid, signal.SIGKILL)
        return True

    def check(self) -> Health:
        """Healthy when ``/readyz`` answers 200."""
        url = f"{self.address()}/readyz"
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                return Health(self.name, self.address(), response.status == 200, "ready")
        except urllib.error.HTTPError as exc:
            reason = exc.read().decode(errors="replace").strip()
            return Health(self.name, self.address(), False, f"not ready: {reason}")
        except (OSError, http.client.HTTPException) as exc:
            running = self.process.pid() is not None
            detail = "starting" if running else f"stopped ({getattr(exc, 'reason', exc)})"
            return Health(self.name, self.address(), False, detail)

    def log_tail(self) -> str:
        return self.process.tail()


def service_processes(
    settings: LocalSettings,
    names: Sequence[str] = SERVICE_NAMES,
    *,
    source_topic_prefix: str | None = None,
    extra_env: Mapping[str, Mapping[str, str]] | None = None,
    writers: int = 1,
) -> list[ServiceProcess]:
    """The named services, configured for ``settings``' stack, in start order; ``writers``
    instances of the writer, sharing the tables in its consumer group (the second one's
    metrics ``INSTANCE_PORT_STEP`` above the first's, and so on)."""
    out = []
    for name in names:
        spec = service_spec(name)
        for instance in range(1, (writers if spec is WRITER else 1) + 1):
            env = service_env(
                spec,
                settings,
                source_topic_prefix=source_topic_prefix,
                extra=(extra_env or {}).get(name),
            )
            process = ServiceProcess(spec, settings, env, instance=instance)
            env[f"{spec.env_prefix}METRICS__PORT"] = str(process.port)
            if spec in COMPILED_SERVICES:
                choose_build(process, settings)
            out.append(process)
    return out


def choose_build(process: ServiceProcess, settings: LocalSettings) -> None:
    """Run ``process`` (one of :data:`COMPILED_SERVICES`) from the mypyc build when it is
    fresh, else plain.

    The build directory goes first on ``PYTHONPATH`` and is the working directory too:
    ``python -m`` puts the working directory first on ``sys.path``, and from the checkout
    that would be the plain sources.
    """
    if not settings.compiled_services:
        process.build = "plain CPython (compiled_services is off)"
        return
    build = compiled_build(settings.state / "compiled", checkout_root())
    if not build.fresh:
        process.build = f"plain CPython: {build.reason}"
        return
    inherited = process.env.get("PYTHONPATH") or os.environ.get("PYTHONPATH")
    process.env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(build.path), inherited]))
    process.cwd = build.path
    process.build = build.reason
