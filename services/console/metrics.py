"""icefjord-console's metrics, one typed bundle registered on a given registry.

Labels stay bounded: a topic, an action kind and its outcome; never a table or an event id.
"""

from __future__ import annotations

from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter, Gauge

PREFIX = "icefjord_console"


@dataclass(frozen=True)
class ConsoleMetrics:
    """The counters and gauges icefjord-console updates; build with :meth:`create`."""

    events_consumed: Counter
    events_rejected: Counter
    tables_known: Gauge
    actions: Counter

    @classmethod
    def create(cls, registry: CollectorRegistry) -> ConsoleMetrics:
        """Register the metrics on ``registry`` (one bundle per registry)."""
        return cls(
            events_consumed=Counter(
                f"{PREFIX}_events_consumed_total",
                "Records folded into the tables' state, by topic (control, dead letters, "
                "quarantine).",
                ["topic"],
                registry=registry,
            ),
            events_rejected=Counter(
                f"{PREFIX}_events_rejected_total",
                "Records that could not be read (undecodable control events, diverted records "
                "naming no table), by topic.",
                ["topic"],
                registry=registry,
            ),
            tables_known=Gauge(
                f"{PREFIX}_tables_known",
                "Tables the console has seen an event for.",
                registry=registry,
            ),
            actions=Counter(
                f"{PREFIX}_actions_total",
                "Actions asked of the console, by kind (pause, resume, flush, compact) and "
                "outcome (published, disabled, unauthorized, rejected, unreachable).",
                ["kind", "outcome"],
                registry=registry,
            ),
        )
