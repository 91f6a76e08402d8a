"""``python -m services.schema_watcher``: run schema-watcher until SIGTERM.

Exit codes (``shared.service``): 0 after a requested stop, 1 on a fatal error (one log line
says why), 2 when the settings are invalid (one line on stderr).
"""

from __future__ import annotations

import logging
import sys
import threading
from contextlib import ExitStack

from prometheus_client import CollectorRegistry

from services.schema_watcher.config import WatcherSettings
from services.schema_watcher.metrics import WatcherMetrics
from services.schema_watcher.probe import NewestVersionProbe, PollSchedule, poll_when_due
from services.schema_watcher.watcher import build_watcher
from shared.endpoint import Health
from shared.kafka import make_producer
from shared.loop import run_loop
from shared.registry import make_registry_client
from shared.service import EXIT_BAD_SETTINGS, EXIT_FATAL, EXIT_OK, create_topics, serve_metrics
from shared.service import service_main as _service_main

__all__ = ["EXIT_BAD_SETTINGS", "EXIT_FATAL", "EXIT_OK", "main", "run"]

log = logging.getLogger("services.schema_watcher")


def run(settings: WatcherSettings, stop: threading.Event) -> None:
    """Serve metrics, make sure the control topic exists, then poll until ``stop`` is set:
    at once when the registry's newest version changed, else every ``poll_interval_s``
    (:mod:`services.schema_watcher.probe`).

    Raises FatalError, or RetryableError when the control topic cannot be created in time.
    """
    health = Health()
    registry = CollectorRegistry()
    metrics = WatcherMetrics.create(registry)
    with ExitStack() as resources:
        serve_metrics(resources, settings.metrics, registry, health)
        if settings.create_control_topic:
            requests = [settings.control_topic_request(), settings.control_state_topic_request()]
            create_topics(settings.kafka, requests, "create control topics", stop)
        producer = make_producer(settings.kafka)
        resources.callback(producer.flush, 10.0)
        watcher = build_watcher(
            settings,
            producer=producer,
            registry=make_registry_client(settings.registry),
            metrics=metrics,
        )

        probe = None
        if settings.probe_interval_s > 0:
            probe = NewestVersionProbe.for_registry(settings.registry)
        if probe is not None:
            resources.callback(probe.close)
        schedule = PollSchedule(settings.poll_interval_s)
        pause = settings.probe_interval_s if probe is not None else settings.poll_interval_s

        def answered(answer: str) -> None:
            metrics.probes.labels(answer=answer).inc()

        def step() -> None:
            poll_when_due(watcher.step, probe, schedule, answered=answered)
            stop.wait(pause)

        log.info(
            "schema-watcher polling",
            extra={
                "pattern": settings.subject_pattern,
                "interval_s": settings.poll_interval_s,
                "probe": probe.url if probe is not None else None,
            },
        )
        run_loop(step, stop, health, stuck_after_s=settings.stuck_step_s)


def main() -> int:
    """Parse settings once, configure logging, run; return the exit code."""
    return _service_main("schema-watcher", WatcherSettings, run)


if __name__ == "__main__":
    sys.exit(main())
