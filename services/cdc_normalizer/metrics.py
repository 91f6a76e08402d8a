"""cdc-normalizer's metrics, one typed bundle registered on a given registry.

Labels stay bounded: a source topic, a table, an operation, a reject reason; never a key,
an offset or a schema id.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

PREFIX = "icefjord_normalizer"


@dataclass(frozen=True)
class NormalizerMetrics:
    """The counters, gauges and histograms cdc-normalizer updates; build with :meth:`create`."""

    records_in: Counter
    changes_out: Counter
    dead_letters: Counter
    tombstones: Counter
    batch_seconds: Histogram
    schema_versions_registered: Counter
    processing_latency_seconds: Histogram
    consumer_lag: Gauge

    @classmethod
    def create(cls, registry: CollectorRegistry) -> NormalizerMetrics:
        """Register the metrics on ``registry`` (one bundle per registry)."""
        return cls(
            records_in=Counter(
                f"{PREFIX}_records_in_total",
                "Source records consumed and committed, by source topic.",
                ["topic"],
                registry=registry,
            ),
            changes_out=Counter(
                f"{PREFIX}_changes_out_total",
                "Change records written in committed transactions, by table and operation.",
                ["table", "op"],
                registry=registry,
            ),
            dead_letters=Counter(
                f"{PREFIX}_dead_letters_total",
                "Source records sent to the dead-letter topic, by reason.",
                ["reason"],
                registry=registry,
            ),
            tombstones=Counter(
                f"{PREFIX}_tombstones_total",
                "Tombstones (null values) skipped, by source topic.",
                ["topic"],
                registry=registry,
            ),
            batch_seconds=Histogram(
                f"{PREFIX}_batch_seconds",
                "Time to process and commit one transaction.",
                buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
                registry=registry,
            ),
            schema_versions_registered=Counter(
                f"{PREFIX}_schema_versions_registered_total",
                "Distinct value schema ids this process registered (or found) per table.",
                ["table"],
                registry=registry,
            ),
            processing_latency_seconds=Histogram(
                f"{PREFIX}_processing_latency_seconds",
                "Commit time minus the source record's Kafka timestamp, per committed record.",
                buckets=(0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600),
                registry=registry,
            ),
            consumer_lag=Gauge(
                f"{PREFIX}_consumer_lag",
                "Records not yet consumed (high watermark minus position), summed per topic "
                "over the assigned partitions; updated after each committed batch.",
                ["topic"],
                registry=registry,
            ),
        )


def latency_seconds(timestamps_ms: Iterable[int | None], now_ms: int) -> list[float]:
    """Per record, ``now_ms`` minus its Kafka timestamp in seconds; records without a timestamp
    are left out, and a timestamp in the future (clock skew) counts as 0."""
    return [max(0, now_ms - ts) / 1000 for ts in timestamps_ms if ts is not None and ts >= 0]


def lag_by_topic(partitions: Iterable[tuple[str, int, int]]) -> dict[str, int]:
    """Sum per topic of ``high - position`` over ``(topic, position, high_watermark)``.

    A partition whose position or watermark is not known yet (negative, e.g. librdkafka's
    OFFSET_INVALID) is left out; a position past the cached watermark counts as 0.
    """
    out: dict[str, int] = {}
    for topic, position, high in partitions:
        if position < 0 or high < 0:
            continue
        out[topic] = out.get(topic, 0) + max(0, high - position)
    return out
