"""Icefjord's local file system for Spark (``deploy/spark-localfs``): the same files, modes
and checksums as Hadoop's own, without a ``chmod`` process per file. Each run is a JVM of its
own (``spark_localfs_probe.py``), recorded by Java Flight Recorder."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from harness import Stack

from icefjord.local.artifacts import LOCALFS_CLASS, localfs_jar_for
from icefjord.local.services import WRITER, localfs_env

PROBE = Path(__file__).with_name("spark_localfs_probe.py")
ROOT = Path(__file__).resolve().parents[2]


def _probe(stack: Stack, tmp_path: Path, name: str, *localfs: str) -> dict[str, Any]:
    assert stack.local is not None
    settings = stack.local.settings
    jars = settings.dist_dir / f"spark-jars-{settings.iceberg_version}" / "*.jar"
    warehouse, recording = tmp_path / name, tmp_path / f"{name}.jfr"
    done = subprocess.run(
        [sys.executable, str(PROBE), str(warehouse), str(recording), str(jars), *localfs],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


@pytest.fixture(scope="module")
def localfs_jar(stack: Stack) -> Path:
    if stack.local is None:
        pytest.skip("needs the local stack, which builds the jar")
    jar = localfs_jar_for(stack.local.settings)
    assert jar is not None and jar.is_file(), "icefjord local up builds it"
    return jar


def test_spark_writes_iceberg_without_a_chmod_process(
    localfs_jar: Path, stack: Stack, tmp_path: Path
) -> None:
    hadoop = _probe(stack, tmp_path, "hadoop")
    ours = _probe(stack, tmp_path, "icefjord", str(localfs_jar), LOCALFS_CLASS)

    assert hadoop["file_system"] != LOCALFS_CLASS
    assert ours["file_system"] == LOCALFS_CLASS
    # Hadoop's own starts a chmod for every file and checksum it writes; ours none.
    assert sum(c.startswith("chmod ") for c in hadoop["commands"]) >= hadoop["files"]
    assert [c for c in ours["commands"] if c.startswith("chmod ")] == []
    # Everything else is the same: the table, its files, their checksums and modes.
    assert ours["rows"] == hadoop["rows"] == [[i, f"row {i}"] for i in (0, 1, 2, 4)]
    assert (ours["files"], ours["checksums"]) == (hadoop["files"], hadoop["checksums"])
    assert ours["checksums"] == ours["files"] > 0
    assert ours["modes"] == hadoop["modes"] == ["0o640"]
    assert ours["dir_modes"] == hadoop["dir_modes"] == ["0o750"]


def test_the_local_services_run_spark_on_it(localfs_jar: Path, stack: Stack) -> None:
    assert stack.local is not None
    env = localfs_env(WRITER, stack.local.settings)
    conf = json.loads(env["ICEFJORD_WRITER_SPARK__CONF"])
    assert conf == {
        "spark.driver.extraClassPath": str(localfs_jar),
        "spark.hadoop.fs.file.impl": LOCALFS_CLASS,
    }
