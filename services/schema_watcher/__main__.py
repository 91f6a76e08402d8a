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
    """Serve metrics, make sure the control topic exists, then poll until ``stop`` is set.

    Raises FatalError, or RetryableError when the control topic cannot be created in time.
    """
    health = Health()
    registry = CollectorRegistry()
    metrics = WatcherMetrics.create(registry)
    with ExitStack() as resources:
        serve_metrics(resources, settings.metrics, registry, health)
        if settings.create_control_topic:
            request = settings.control_topic_request()
            create_topics(settings.kafka, [request], "create control topic", stop)
        producer = make_producer(settings.kafka)
        resources.callback(producer.flush, 10.0)
        watcher = build_watcher(
            settings,
            producer=producer,
            registry=make_registry_client(settings.registry),
            metrics=metrics,
        )

        def step() -> None:
            watcher.step()
            stop.wait(settings.poll_interval_s)

        log.info("schema-watcher polling", extra={"pattern": settings.subject_pattern})
        run_loop(step, stop, health)


def main() -> int:
    """Parse settings once, configure logging, run; return the exit code."""
    return _service_main("schema-watcher", WatcherSettings, run)


if __name__ == "__main__":
    sys.exit(main())
