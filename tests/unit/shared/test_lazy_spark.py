"""shared.spark.LazySparkSession and spark_jars, without a JVM."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from shared.spark import LazySparkSession, SparkSettings, spark_jars


class FakeSession:
    def __init__(self) -> None:
        self.stopped = 0

    def sql(self, statement: str) -> str:
        return f"ran {statement}"

    def stop(self) -> None:
        self.stopped += 1


def test_the_session_starts_on_first_use_once_and_stops_only_if_started() -> None:
    built: list[FakeSession] = []

    def build() -> Any:
        built.append(FakeSession())
        return built[-1]

    lazy = LazySparkSession(build)
    lazy.stop()  # never started: nothing to stop, nothing started
    assert built == [] and not lazy.started
    assert lazy.sql("SELECT 1") == "ran SELECT 1"
    assert lazy.sql("SELECT 2") == "ran SELECT 2"
    assert len(built) == 1 and lazy.started
    lazy.stop()
    assert built[0].stopped == 1 and not lazy.started


def test_a_failed_start_is_tried_again_on_the_next_use() -> None:
    attempts: list[int] = []

    def build() -> Any:
        attempts.append(1)
        if len(attempts) == 1:
            raise RuntimeError("Java gateway process exited")
        return FakeSession()

    lazy = LazySparkSession(build)
    with pytest.raises(RuntimeError, match="gateway"):
        lazy.session()
    assert lazy.sql("SELECT 1") == "ran SELECT 1"
    assert len(attempts) == 2


def test_missing_jars_are_found_without_starting_spark(tmp_path: Path) -> None:
    (tmp_path / "a.jar").write_bytes(b"")
    assert spark_jars(SparkSettings(jars=str(tmp_path / "*.jar"))) == [str(tmp_path / "a.jar")]
    with pytest.raises(FileNotFoundError, match="icefjord local up"):
        spark_jars(SparkSettings(jars=str(tmp_path / "none" / "*.jar")))
