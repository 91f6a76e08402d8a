"""Choosing the demo's engines and the moments they read at."""

from __future__ import annotations

import pytest

from icefjord.demo.engines import ENGINES, parse_engines, probe_times


def test_spark_always_reads_and_comes_first() -> None:
    assert parse_engines("duckdb,trino") == ("spark", "duckdb", "trino")
    assert parse_engines("trino, spark") == ("spark", "trino")
    assert parse_engines("all") == ENGINES


def test_an_unknown_engine_is_named() -> None:
    with pytest.raises(ValueError, match="unknown engine flink"):
        parse_engines("spark,flink")


def test_probes_fall_inside_the_run_in_order_and_repeat_for_a_seed() -> None:
    times = probe_times(100.0, 4, seed=3)
    assert times == sorted(times)
    assert len(times) == 4
    assert all(20.0 <= t <= 90.0 for t in times)
    assert probe_times(100.0, 4, seed=3) == times
    assert probe_times(100.0, 4, seed=4) != times
    assert probe_times(100.0, 0, seed=3) == []
