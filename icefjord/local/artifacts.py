"""The real components' artifacts, resolved by Maven from ``deploy/local/pom.xml``.

The pom pins the versions; Maven downloads into the cache once, and later runs start from
there. Progress is shown line by line while Maven works.
"""

from __future__ import annotations

import hashlib
import importlib.util
import shutil
import subprocess
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from icefjord.local.settings import LocalSettings
from shared.errors import IcefjordError

POM = Path(__file__).resolve().parents[2] / "deploy" / "local" / "pom.xml"
CONVERTER_MODULE = Path(__file__).resolve().parents[2] / "deploy" / "connect-json"
LOCALFS_MODULE = Path(__file__).resolve().parents[2] / "deploy" / "spark-localfs"
LOCALFS_CLASS = "io.icefjord.hadoop.NioLocalFileSystem"
"""Hadoop's ``file://`` file system with permissions set in the JVM, not by a ``chmod``
process per file (``deploy/spark-localfs``)."""
LEASE_GUARD_MODULE = Path(__file__).resolve().parents[2] / "deploy" / "iceberg-lease-guard"
LEASE_GUARD_PREFIX = "icefjord-lease-guard-"
"""The writer's commits refused, not retried, under the compaction lease
(``deploy/iceberg-lease-guard``); its jar sits beside the Iceberg runtime it is compiled
against, so every Spark the local stack starts has it on its classpath."""


class ArtifactError(IcefjordError, RuntimeError):
    """Maven could not provide an artifact; the message carries the tail of its output."""


@dataclass(frozen=True)
class Dist:
    """Where each component's files are once resolved."""

    kafka_lib: Path
    apicurio_jar: Path
    spark_jars: tuple[Path, ...]
    localfs_jar: Path | None = None
    """Icefjord's local file system for Spark (:func:`localfs_jar_for`); None: none to build."""
    lease_guard_jar: Path | None = None
    """The writer's lease guard, beside the Iceberg runtime (:func:`build_lease_guard_jar`);
    None: none to build."""

    def resolved(self) -> bool:
        """Maven's artifacts are in place (the local file system's jar aside)."""
        return (
            self.kafka_lib.is_dir()
            and any(self.kafka_lib.glob("kafka_*.jar"))
            and self.apicurio_jar.is_file()
            and all(p.is_file() for p in self.spark_jars)
        )

    def complete(self) -> bool:
        return self.resolved() and all(
            jar is None or jar.is_file() for jar in (self.localfs_jar, self.lease_guard_jar)
        )


def dist_for(settings: LocalSettings) -> Dist:
    """The expected locations for the configured versions."""
    root = settings.dist_dir
    spark_dir = root / f"spark-jars-{settings.iceberg_version}"
    av = settings.apicurio_version
    return Dist(
        kafka_lib=root / f"kafka-{settings.kafka_version}" / "lib",
        apicurio_jar=root / f"apicurio-{av}" / f"apicurio-registry-app-{av}-runner.jar",
        spark_jars=(
            spark_dir / f"iceberg-spark-runtime-3.5_2.12-{settings.iceberg_version}.jar",
            *sorted(spark_dir.glob("sqlite-jdbc-*.jar"))[:1],
            *sorted(spark_dir.glob("postgresql-*.jar"))[:1],
            spark_dir / f"iceberg-aws-bundle-{settings.iceberg_version}.jar",
        ),
        localfs_jar=localfs_jar_for(settings),
        lease_guard_jar=spark_dir / f"{LEASE_GUARD_PREFIX}{module_digest(LEASE_GUARD_MODULE)}.jar",
    )


def hadoop_client_jar() -> Path | None:
    """The Hadoop client API jar that pyspark ships (what its JVM runs), if any; found
    without importing pyspark."""
    spec = importlib.util.find_spec("pyspark")
    for directory in (spec.submodule_search_locations or []) if spec is not None else []:
        jars = sorted((Path(directory) / "jars").glob("hadoop-client-api-*.jar"))
        if jars:
            return jars[-1]
    return None


def localfs_jar_for(settings: LocalSettings, module: Path = LOCALFS_MODULE) -> Path | None:
    """Where the local file system's jar goes: named after its sources and the Hadoop jar it
    is compiled against, so a changed source or another pyspark builds anew. None without
    pyspark's Hadoop jar."""
    hadoop = hadoop_client_jar()
    if hadoop is None:
        return None
    name = f"icefjord-spark-localfs-{hadoop.stem}-{module_digest(module)}"
    return settings.dist_dir / name / "icefjord-spark-localfs.jar"


def build_localfs_jar(target: Path, module: Path = LOCALFS_MODULE) -> None:
    """Compile ``module``'s sources against pyspark's Hadoop jar into ``target`` with the
    JDK's ``javac`` and ``jar`` (no download). Raises :class:`ArtifactError` on failure."""
    hadoop = hadoop_client_jar()
    if hadoop is None:
        raise ArtifactError("building the Spark local file system needs pyspark")
    build_jar(target, module, hadoop)


def build_lease_guard_jar(target: Path, iceberg_jar: Path) -> None:
    """Compile the lease guard against ``iceberg_jar`` (Iceberg's Spark runtime) into
    ``target``, and remove the guard's jars of earlier sources beside it: two on one
    classpath would be one too many. Raises :class:`ArtifactError` on failure."""
    build_jar(target, LEASE_GUARD_MODULE, iceberg_jar)
    for old in target.parent.glob(f"{LEASE_GUARD_PREFIX}*.jar"):
        if old != target:
            old.unlink(missing_ok=True)


def build_jar(target: Path, module: Path, classpath: Path) -> None:
    """Compile ``module``'s sources against ``classpath`` into the jar ``target`` with the
    JDK's ``javac`` and ``jar`` (no download). Raises :class:`ArtifactError` on failure."""
    javac, jar = shutil.which("javac"), shutil.which("jar")
    if javac is None or jar is None:
        raise ArtifactError(f"building {module.name} needs a JDK 17 (javac and jar)")
    sources = sorted(str(p) for p in (module / "src" / "main" / "java").rglob("*.java"))
    with tempfile.TemporaryDirectory(prefix=f"{module.name}-") as scratch:
        classes = Path(scratch) / "classes"
        partial = Path(scratch) / target.name
        for command in (
            [javac, "--release", "11", "-cp", str(classpath), "-d", str(classes), *sources],
            [jar, "--create", "--file", str(partial), "-C", str(classes), "."],
        ):
            done = subprocess.run(command, capture_output=True, text=True, check=False)
            if done.returncode != 0:
                raise ArtifactError(f"{Path(command[0]).name} failed:\n{done.stderr[-4000:]}")
        target.parent.mkdir(parents=True, exist_ok=True)
        # Moved in whole: a Spark JVM starting meanwhile never sees half a jar.
        shutil.copyfile(partial, target.with_suffix(".partial"))
        target.with_suffix(".partial").replace(target)


def ensure_artifacts(settings: LocalSettings, progress: Callable[[str], None]) -> Dist:
    """Resolve every artifact (downloading only what the cache lacks) and return the paths.

    Raises :class:`ArtifactError` when Maven is missing or fails.
    """
    dist = dist_for(settings)
    if dist.complete():
        return dist
    if not dist.resolved():
        progress("resolving components with Maven (first run downloads about 250 MB)")
        resolve_with_maven(settings, progress, profiles=())
        dist = dist_for(settings)
        if not dist.resolved():
            raise ArtifactError(
                f"Maven finished but artifacts are missing under {settings.dist_dir}"
            )
    if dist.localfs_jar is not None and not dist.localfs_jar.is_file():
        progress("compiling Spark's local file system (deploy/spark-localfs)")
        try:
            build_localfs_jar(dist.localfs_jar)
        except ArtifactError as exc:
            # Only a saving: the services run on Hadoop's own; the next start tries again.
            progress(f"not built, Spark keeps Hadoop's local file system: {exc}")
    if dist.lease_guard_jar is not None and not dist.lease_guard_jar.is_file():
        progress("compiling the writer's lease guard (deploy/iceberg-lease-guard)")
        try:
            build_lease_guard_jar(dist.lease_guard_jar, dist.spark_jars[0])
        except ArtifactError as exc:
            # The writer then looks at the lease once more before each commit instead.
            progress(f"not built, the writer keeps its own look at the lease: {exc}")
    return dist


@dataclass(frozen=True)
class ConnectDist:
    """The demo's CDC source: Kafka Connect's runtime jars and Debezium's Postgres plugin.

    The worker's classpath is the broker's lib plus :attr:`connect_lib`; :attr:`plugin_path`
    is Connect's ``plugin.path`` (one directory per plugin inside it).
    """

    kafka_lib: Path
    connect_lib: Path
    plugin_path: Path
    converter_jar: Path

    @property
    def debezium_postgres(self) -> Path:
        return self.plugin_path / "debezium-connector-postgres"

    @property
    def classpath(self) -> str:
        """The worker's classpath: Kafka's jars, Connect's, and Icefjord's converter."""
        return f"{self.kafka_lib}/*:{self.connect_lib}/*:{self.converter_jar}"

    def resolved(self) -> bool:
        """Kafka Connect's and Debezium's jars are in place (the converter aside)."""
        return (
            any(self.kafka_lib.glob("kafka-clients-*.jar"))
            and any(self.connect_lib.glob("connect-runtime-*.jar"))
            and any(self.debezium_postgres.glob("debezium-connector-postgres-*.jar"))
        )

    def complete(self) -> bool:
        return self.resolved() and self.converter_jar.is_file()


def module_digest(module: Path) -> str:
    """A digest of a Java module's pom and sources: a changed source builds anew."""
    digest = hashlib.sha256()
    for path in sorted(module.rglob("*")):
        relative = path.relative_to(module)
        if path.is_file() and relative.parts[0] != "target":  # not a build's output
            digest.update(str(relative).encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()[:12]


def connect_dist_for(settings: LocalSettings) -> ConnectDist:
    """The expected locations for the configured Kafka and Debezium versions."""
    root = settings.dist_dir
    converter = (
        root / f"icefjord-connect-json-{settings.kafka_version}-{module_digest(CONVERTER_MODULE)}"
    )
    return ConnectDist(
        kafka_lib=root / f"kafka-{settings.kafka_version}" / "lib",
        connect_lib=root / f"connect-{settings.kafka_version}" / "lib",
        plugin_path=root / f"debezium-{settings.debezium_version}",
        converter_jar=converter / "icefjord-connect-json.jar",
    )


def ensure_connect_artifacts(
    settings: LocalSettings, progress: Callable[[str], None]
) -> ConnectDist:
    """Resolve Kafka Connect and the Debezium Postgres connector (Maven profile ``connect``)
    on top of the stack's own artifacts, and build Icefjord's converter
    (``deploy/connect-json``, its tests included); download only what the cache lacks.

    Raises :class:`ArtifactError` when Maven is missing or fails.
    """
    connect = connect_dist_for(settings)
    if connect.complete() and dist_for(settings).resolved():
        return connect
    if not (connect.resolved() and dist_for(settings).resolved()):
        progress("resolving Kafka Connect and Debezium with Maven (first run: about 15 MB more)")
        resolve_with_maven(settings, progress, profiles=("connect",))
    if not connect.converter_jar.is_file():
        progress("building and testing the Connect converter (deploy/connect-json)")
        build = connect.converter_jar.parent
        run_maven(
            [
                "-f",
                str(CONVERTER_MODULE / "pom.xml"),
                f"-Dmaven.repo.local={settings.maven_repo}",
                f"-Dkafka.version={settings.kafka_version}",
                f"-Dicefjord.build={build / 'build'}",
                "package",
            ],
            progress,
        )
        # Copied, then renamed: a worker starting meanwhile never sees half a jar.
        partial = connect.converter_jar.with_suffix(".partial")
        shutil.copyfile(build / "build" / "icefjord-connect-json.jar", partial)
        partial.replace(connect.converter_jar)
    connect = connect_dist_for(settings)
    if not connect.complete():
        raise ArtifactError(
            f"Maven finished but Connect/Debezium jars are missing under {settings.dist_dir}"
        )
    return connect


def resolve_with_maven(
    settings: LocalSettings, progress: Callable[[str], None], profiles: tuple[str, ...]
) -> None:
    """Run ``deploy/local/pom.xml`` with the configured versions and ``profiles`` (the
    default profile's artifacts always come along); raise :class:`ArtifactError` on failure."""
    run_maven(
        [
            "-f",
            str(POM),
            f"-Dmaven.repo.local={settings.maven_repo}",
            f"-Dicefjord.dist={settings.dist_dir}",
            f"-Dkafka.version={settings.kafka_version}",
            f"-Dapicurio.version={settings.apicurio_version}",
            f"-Diceberg.version={settings.iceberg_version}",
            f"-Ddebezium.version={settings.debezium_version}",
            f"-Dtrino.version={settings.trino_version}",
            *([f"-P{','.join(profiles)}"] if profiles else []),
            "process-resources",
        ],
        progress,
    )


def run_maven(arguments: list[str], progress: Callable[[str], None]) -> None:
    """Run Maven in batch mode, showing downloads as they go; raise with its output's tail."""
    mvn = shutil.which("mvn")
    if mvn is None:
        raise ArtifactError("Maven (mvn) is not on PATH; install Maven 3.8+ and Java 17")
    command = [mvn, "-B", *arguments]
    tail: list[str] = []
    with subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    ) as proc:
        assert proc.stdout is not None
        for line in proc.stdout:
            line = line.rstrip()
            tail = [*tail[-39:], line]
            if "Downloaded from" in line or "Downloading " in line or "Unpack" in line:
                progress(line.split("] ", 1)[-1])
        code = proc.wait()
    if code != 0:
        raise ArtifactError("Maven failed:\n" + "\n".join(tail))
