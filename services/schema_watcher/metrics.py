"""schema-watcher's metrics, one typed bundle registered on a given registry.

Labels stay bounded: a subject, a verdict; never a version or a schema id. Staleness is
alerted on from ``last_successful_poll_timestamp_seconds`` (``time() - gauge``);
``seconds_since_last_successful_poll`` computes the same at scrape time for convenience.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from prometheus_client import CollectorRegistry, Counter, Gauge

PREFIX = "icefjord_watcher"


class _Stamp:
    """A mutable time shared by the frozen bundle and the scrape-time callback."""

    def __init__(self, value: float) -> None:
        self.value = value


@dataclass(frozen=True)
class WatcherMetrics:
    """The counters and gauges schema-watcher updates; build with :meth:`create`."""

    versions_seen: Counter
    plans: Counter
    quarantined_tables: Gauge
    last_successful_poll: Gauge
    seconds_since_last_successful_poll: Gauge
    registry_errors: Counter
    probes: Counter
    clock: Callable[[], float] = field(default=time.time, repr=False)
    _last_stamp: _Stamp = field(default_factory=lambda: _Stamp(0.0), repr=False)

    @classmethod
    def create(
        cls, registry: CollectorRegistry, clock: Callable[[], float] = time.time
    ) -> WatcherMetrics:
        """Register the metrics on ``registry`` (one bundle per registry)."""
        started = clock()
        last_poll = Gauge(
            f"{PREFIX}_last_successful_poll_timestamp_seconds",
            "Unix time of the last registry poll that completed (0 before the first).",
            registry=registry,
        )
        since = Gauge(
            f"{PREFIX}_seconds_since_last_successful_poll",
            "Seconds since the last completed registry poll (since start before the first).",
            registry=registry,
        )

        last_stamp = _Stamp(started)
        since.set_function(lambda: clock() - last_stamp.value)
        return cls(
            versions_seen=Counter(
                f"{PREFIX}_versions_seen_total",
                "New registry schema versions processed (announced), by subject.",
                ["subject"],
                registry=registry,
            ),
            plans=Counter(
                f"{PREFIX}_plans_total",
                "SchemaChange events published, by verdict.",
                ["verdict"],
                registry=registry,
            ),
            quarantined_tables=Gauge(
                f"{PREFIX}_quarantined_tables",
                "Tables whose latest announced schema change has the verdict QUARANTINE.",
                registry=registry,
            ),
            last_successful_poll=last_poll,
            seconds_since_last_successful_poll=since,
            registry_errors=Counter(
                f"{PREFIX}_registry_errors_total",
                "Schema registry calls that failed (unreachable or an error status).",
                registry=registry,
            ),
            probes=Counter(
                f"{PREFIX}_probes_total",
                "Questions for the registry's newest version (probe.py), by answer: new (a "
                "poll follows), same, none (no answer: polls keep to their interval).",
                ["answer"],
                registry=registry,
            ),
            clock=clock,
            _last_stamp=last_stamp,
        )

    def poll_succeeded(self) -> None:
        """Stamp the current time as the last successful poll."""
        now = self.clock()
        self._last_stamp.value = now
        self.last_successful_poll.set(now)
