"""iceberg-writer's metrics, one typed bundle registered on a given registry.

Labels stay bounded: a table, an operation, a topic-partition; never a key or an offset.
"""

from __future__ import annotations

from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

PREFIX = "icefjord_writer"
FRESHNESS_BUCKETS = (0.25, 0.5, 1, 2, 3, 5, 7.5, 10, 15, 20, 30, 60, 120, 300, 900)


@dataclass(frozen=True)
class WriterMetrics:
    """The counters, gauges and histograms iceberg-writer updates; build with :meth:`create`."""

    changes_received: Counter
    changes_applied: Counter
    batch_records: Histogram
    commit_duration: Histogram
    commits: Counter
    freshness: Histogram
    consumer_lag: Gauge
    commit_conflicts: Counter
    lease_deferrals: Counter
    commit_retries: Counter
    quarantined_rows: Counter
    dead_letters: Counter
    schema_wait: Histogram
    paused_tables: Gauge
    held_tables: Gauge
    bulk_rows: Counter
    last_commit: Gauge

    @classmethod
    def create(cls, registry: CollectorRegistry) -> WriterMetrics:
        """Register the metrics on ``registry`` (one bundle per registry)."""
        return cls(
            changes_received=Counter(
                f"{PREFIX}_changes_received_total",
                "Change records consumed, by table and operation.",
                ["table", "op"],
                registry=registry,
            ),
            changes_applied=Counter(
                f"{PREFIX}_changes_applied_total",
                "Changes committed to Iceberg after per-key dedup, by table and operation.",
                ["table", "op"],
                registry=registry,
            ),
            batch_records=Histogram(
                f"{PREFIX}_batch_records",
                "Change records in one committed batch.",
                ["table"],
                buckets=(1, 10, 100, 1_000, 5_000, 10_000, 50_000, 100_000, 500_000),
                registry=registry,
            ),
            commits=Counter(
                f"{PREFIX}_commits_total",
                "Commits by table and write path (append, insert, merge, replace).",
                ["table", "path"],
                registry=registry,
            ),
            commit_duration=Histogram(
                f"{PREFIX}_commit_duration_seconds",
                "Time to stage and commit one batch (including retries).",
                ["table"],
                buckets=(0.1, 0.25, 0.5, 1, 2, 3, 5, 10, 20, 60),
                registry=registry,
            ),
            freshness=Histogram(
                f"{PREFIX}_freshness_seconds",
                "Source commit to visible in Iceberg, per change record.",
                ["table"],
                buckets=FRESHNESS_BUCKETS,
                registry=registry,
            ),
            consumer_lag=Gauge(
                f"{PREFIX}_consumer_lag",
                "Records not yet consumed (high watermark minus position) per partition.",
                ["topic", "partition"],
                registry=registry,
            ),
            commit_conflicts=Counter(
                f"{PREFIX}_commit_conflicts_total",
                "Commits Iceberg refused because of a concurrent commit.",
                ["table"],
                registry=registry,
            ),
            lease_deferrals=Counter(
                f"{PREFIX}_lease_deferrals_total",
                "Commits held back because the maintainer held the table's compaction lease.",
                ["table"],
                registry=registry,
            ),
            commit_retries=Counter(
                f"{PREFIX}_commit_retries_total",
                "Re-planned commit attempts after a conflict.",
                ["table"],
                registry=registry,
            ),
            quarantined_rows=Counter(
                f"{PREFIX}_quarantined_rows_total",
                "Change records diverted to the quarantine topic, by table.",
                ["table"],
                registry=registry,
            ),
            dead_letters=Counter(
                f"{PREFIX}_dead_letters_total",
                "Change records that could not be decoded, sent to the dead-letter topic.",
                ["table"],
                registry=registry,
            ),
            schema_wait=Histogram(
                f"{PREFIX}_schema_wait_seconds",
                "How long rows of a new schema version waited for its SchemaChange.",
                ["table"],
                buckets=(0.1, 0.5, 1, 2, 5, 10, 30, 60, 300, 900),
                registry=registry,
            ),
            paused_tables=Gauge(
                f"{PREFIX}_paused_tables", "Tables paused by an operator.", registry=registry
            ),
            held_tables=Gauge(
                f"{PREFIX}_bulk_held_tables",
                "Tables whose changes wait for a bulk load's copy (BulkLoad PLANNED or READY).",
                registry=registry,
            ),
            bulk_rows=Counter(
                f"{PREFIX}_bulk_rows",
                "Rows appended from bulk loads' copies.",
                ["table"],
                registry=registry,
            ),
            last_commit=Gauge(
                f"{PREFIX}_last_commit_timestamp_seconds",
                "Unix time of the table's last commit.",
                ["table"],
                registry=registry,
            ),
        )
