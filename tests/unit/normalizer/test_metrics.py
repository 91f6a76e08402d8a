"""The normalizer's metrics bundle: latency histogram and per-topic consumer lag."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry

from services.cdc_normalizer.metrics import NormalizerMetrics, lag_by_topic, latency_seconds

pytestmark = pytest.mark.unit


def test_bundle_registers_latency_and_lag() -> None:
    registry = CollectorRegistry()
    metrics = NormalizerMetrics.create(registry)
    for seconds in latency_seconds([1_000, 2_500, None], now_ms=3_000):
        metrics.processing_latency_seconds.observe(seconds)
    metrics.consumer_lag.labels(topic="shop.public.orders").set(42)
    sample = registry.get_sample_value
    assert sample("icefjord_normalizer_processing_latency_seconds_count") == 2
    assert sample("icefjord_normalizer_processing_latency_seconds_sum") == pytest.approx(2.5)
    assert sample("icefjord_normalizer_consumer_lag", {"topic": "shop.public.orders"}) == 42
    with pytest.raises(ValueError):  # only the topic label: bounded cardinality
        metrics.consumer_lag.labels(topic="t", partition="0")


def test_latency_skips_missing_and_clamps_future_timestamps() -> None:
    assert latency_seconds([None, -1, 5_000, 9_000], now_ms=6_000) == [1.0, 0.0]


def test_lag_sums_partitions_per_topic_and_skips_unknown() -> None:
    rows = [("a", 10, 15), ("a", 3, 3), ("b", 7, 20), ("b", -1001, 50), ("c", 5, -1001)]
    assert lag_by_topic(rows) == {"a": 5, "b": 13}


@given(
    st.lists(st.tuples(st.sampled_from(["x", "y"]), st.integers(0, 10**6), st.integers(0, 10**6)))
)
def test_lag_is_total_and_never_negative(rows: list[tuple[str, int, int]]) -> None:
    lag = lag_by_topic(rows)
    assert set(lag) == {topic for topic, _, _ in rows}
    assert all(value >= 0 for value in lag.values())
    assert sum(lag.values()) == sum(max(0, high - pos) for _, pos, high in rows)
