"""The real components' artifacts, resolved by Maven from ``deploy/local/pom.xml``.

The pom pins the versions; Maven downloads into the cache once, and later runs start from
there. Progress is shown line by line while Maven works.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from icefjord.local.settings import LocalSettings

POM = Path(__file__).resolve().parents[2] / "deploy" / "local" / "pom.xml"


class ArtifactError(RuntimeError):
    """Maven could not provide an artifact; the message carries the tail of its output."""


@dataclass(frozen=True)
class Dist:
    """Where each component's files are once resolved."""

    kafka_lib: Path
    apicurio_jar: Path
    spark_jars: tuple[Path, ...]

    def complete(self) -> bool:
        return (
            self.kafka_lib.is_dir()
            and any(self.kafka_lib.glob("kafka_*.jar"))
            and self.apicurio_jar.is_file()
            and all(p.is_file() for p in self.spark_jars)
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
        ),
    )


def ensure_artifacts(settings: LocalSettings, progress: Callable[[str], None]) -> Dist:
    """Resolve every artifact (downloading only what the cache lacks) and return the paths.

    Raises :class:`ArtifactError` when Maven is missing or fails.
    """
    dist = dist_for(settings)
    if dist.complete():
        return dist
    mvn = shutil.which("mvn")
    if mvn is None:
        raise ArtifactError("Maven (mvn) is not on PATH; install Maven 3.8+ and Java 17")
    command = [
        mvn,
        "-B",
        "-f",
        str(POM),
        f"-Dmaven.repo.local={settings.maven_repo}",
        f"-Dicefjord.dist={settings.dist_dir}",
        f"-Dkafka.version={settings.kafka_version}",
        f"-Dapicurio.version={settings.apicurio_version}",
        f"-Diceberg.version={settings.iceberg_version}",
        "process-resources",
    ]
    progress("resolving components with Maven (first run downloads about 250 MB)")
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
    dist = dist_for(settings)
    if not dist.complete():
        raise ArtifactError(f"Maven finished but artifacts are missing under {settings.dist_dir}")
    return dist
