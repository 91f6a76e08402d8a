"""cdc-normalizer's metrics, one typed bundle registered on a given registry.

Labels stay bounded: a source topic, a table, an operation, a reject reason; never a key,
an offset or a schema id.
"""

from __future__ import annotations

from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter, Histogram

PREFIX = "icefjord_normalizer"


@dataclass(frozen=True)
class NormalizerMetrics:
    """The counters and histograms cdc-normalizer updates; build with :meth:`create`."""

    records_in: Counter
    changes_out: Counter
    dead_letters: Counter
    tombstones: Counter
    batch_seconds: Histogram
    schema_versions_registered: Counter

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
        )
