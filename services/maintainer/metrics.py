"""The maintainer's metrics: the health model as per-table gauges, plus actions and durations.

The table gauges are produced at scrape time from the service's current health model
(:class:`TableHealthCollector`), so a dropped table disappears from ``/metrics`` and
snapshot ages are as of the scrape. Names are fixed by the writer contract; alert rules for
the field's thresholds:

- ``icefjord_table_partition_files_max > 500``
- ``icefjord_table_snapshots > 1000``
- ``icefjord_table_metadata_bytes > 10e9``
- ``time() - icefjord_table_last_compaction_timestamp_seconds > 86400``
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from services.maintainer.health import TableHealth
from services.maintainer.identifiers import MalformedIdentifierError, parse_table
from shared.events import MaintenanceResult

__all__ = ["MaintainerMetrics", "TableHealthCollector"]

INVALID_TABLE_LABEL = "<invalid>"
DURATION_BUCKETS = (0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, float("inf"))


class TableHealthCollector(Collector):
    """Yields the ``icefjord_table_*`` gauges from ``source()`` at each scrape."""

    def __init__(
        self, source: Callable[[], Mapping[str, TableHealth]], clock: Callable[[], float]
    ) -> None:
        self._source = source
        self._clock = clock

    def collect(self) -> Iterator[GaugeMetricFamily]:
        healths = dict(self._source())
        now_ms = int(self._clock() * 1000)

        def family(
            name: str, doc: str, value: Callable[[TableHealth], float | None]
        ) -> GaugeMetricFamily:
            metric = GaugeMetricFamily(name, doc, labels=["table"])
            for table, health in sorted(healths.items()):
                measured = value(health)
                if measured is not None:
                    metric.add_metric([table], measured)
            return metric

        yield family("icefjord_table_data_files", "Live data files.", lambda h: float(h.data_files))
        yield family(
            "icefjord_table_partition_files_max",
            "Data files in the table's fullest partition.",
            lambda h: float(h.partition_files_max),
        )
        yield family(
            "icefjord_table_small_files",
            "Live data files under the small-file threshold.",
            lambda h: float(h.small_files),
        )
        yield family(
            "icefjord_table_small_file_ratio",
            "Small data files over all data files.",
            lambda h: h.small_file_ratio,
        )
        deletes = GaugeMetricFamily(
            "icefjord_table_delete_files", "Live delete files by kind.", labels=["table", "kind"]
        )
        for table, health in sorted(healths.items()):
            deletes.add_metric([table, "position"], float(health.position_delete_files))
            deletes.add_metric([table, "equality"], float(health.equality_delete_files))
        yield deletes
        yield family(
            "icefjord_table_delete_ratio",
            "Delete records over data records (rows read and then discarded).",
            lambda h: h.delete_ratio,
        )
        yield family(
            "icefjord_table_snapshots", "Snapshots in the metadata.", lambda h: h.snapshots
        )
        yield family(
            "icefjord_table_oldest_snapshot_age_seconds",
            "Age of the oldest snapshot.",
            lambda h: h.oldest_snapshot_age_s(now_ms),
        )
        yield family(
            "icefjord_table_manifests", "Manifests of the current snapshot.", lambda h: h.manifests
        )
        yield family(
            "icefjord_table_metadata_bytes",
            "Bytes of the current metadata file plus the current snapshot's manifests.",
            lambda h: h.metadata_bytes,
        )
        yield family(
            "icefjord_table_last_compaction_timestamp_seconds",
            "Unix time of the newest compaction (replace) snapshot; absent when none is known.",
            lambda h: None if h.last_compaction_ms is None else h.last_compaction_ms / 1000,
        )
        yield family(
            "icefjord_table_commits_since_compaction",
            "Commits (non-replace snapshots) since the newest compaction.",
            lambda h: h.commits_since_compaction,
        )


@dataclass(frozen=True)
class MaintainerMetrics:
    """Counters and histograms the maintainer updates; build with :meth:`create`."""

    actions: Counter
    duration: Histogram
    catch_up_waits: Counter

    @classmethod
    def create(
        cls,
        registry: CollectorRegistry,
        healths: Callable[[], Mapping[str, TableHealth]],
        clock: Callable[[], float] = time.time,
    ) -> MaintainerMetrics:
        """Register the metrics on ``registry``; ``healths`` feeds the table gauges."""
        registry.register(TableHealthCollector(healths, clock))
        return cls(
            actions=Counter(
                "icefjord_maintenance_actions_total",
                "Maintenance requests answered, by table, action and result status.",
                ["table", "action", "status"],
                registry=registry,
            ),
            duration=Histogram(
                "icefjord_maintenance_duration_seconds",
                "Wall time of maintenance actions, by action.",
                ["action"],
                buckets=DURATION_BUCKETS,
                registry=registry,
            ),
            catch_up_waits=Counter(
                "icefjord_maintenance_catch_up_waits_total",
                "Times a table's rewrites began to wait for the writer to catch up "
                "(services/maintainer/catchup.py).",
                ["table"],
                registry=registry,
            ),
        )

    def record(self, result: MaintenanceResult) -> None:
        """Count one answered request and time it. A table name that is not a valid
        identifier is counted as ``<invalid>``: labels stay bounded whatever requests say."""
        try:
            table = str(parse_table(result.table))
        except MalformedIdentifierError:
            table = INVALID_TABLE_LABEL
        self.actions.labels(
            table=table, action=result.action.value, status=result.status.value
        ).inc()
        self.duration.labels(action=result.action.value).observe(result.duration_ms / 1000)
