"""``python -m services.schema_watcher``: run schema-watcher until SIGTERM.

Exit codes: 0 after a requested stop, 1 on a fatal error (one log line says why), 2 when the
settings are invalid (one line on stderr).
"""

from __future__ import annotations

import logging
import sys
import threading
from contextlib import ExitStack

from prometheus_client import CollectorRegistry
from pydantic import ValidationError

from services.schema_watcher.config import WatcherSettings
from services.schema_watcher.metrics import WatcherMetrics
from services.schema_watcher.watcher import build_watcher
from shared.endpoint import Health, MetricsServer
from shared.errors import Backoff, FatalError, RetryableError, retry
from shared.kafka import ensure_topics, make_admin, make_producer
from shared.logs import configure_logging
from shared.loop import install_stop_handlers, run_loop
from shared.registry import make_registry_client
from shared.settings import masked

log = logging.getLogger("services.schema_watcher")

EXIT_OK = 0
EXIT_FATAL = 1
EXIT_BAD_SETTINGS = 2


def run(settings: WatcherSettings, stop: threading.Event) -> None:
    """Serve metrics, make sure the control topic exists, then poll until ``stop`` is set.

    Raises FatalError, or RetryableError when the control topic cannot be created in time.
    """
    health = Health()
    registry = CollectorRegistry()
    metrics = WatcherMetrics.create(registry)
    with ExitStack() as resources:
        server = MetricsServer(settings.metrics.host, settings.metrics.port, registry, health)
        resources.callback(server.close)
        server.start()
        if settings.create_control_topic:
            request = settings.control_topic_request()
            admin = make_admin(settings.kafka)
            retry(
                lambda: ensure_topics(admin, [request]),
                what="create control topic",
                backoff=Backoff(attempts=10),
                stop=stop,
            )
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
    log.info("schema-watcher stopped")


def main() -> int:
    """Parse settings once, configure logging, run; return the exit code."""
    try:
        settings = WatcherSettings()
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
        print(f"schema-watcher: invalid settings: {problems}", file=sys.stderr)
        return EXIT_BAD_SETTINGS
    configure_logging(settings.log_level, settings.log_format)
    log.info("schema-watcher starting", extra={"settings": masked(settings)})
    stop = threading.Event()
    install_stop_handlers(stop)
    try:
        run(settings, stop)
    except RetryableError as exc:
        if stop.is_set():
            return EXIT_OK
        log.error("schema-watcher failed", extra={"error": f"{type(exc).__name__}: {exc}"})
        return EXIT_FATAL
    except (FatalError, OSError) as exc:
        log.error("schema-watcher failed", extra={"error": f"{type(exc).__name__}: {exc}"})
        return EXIT_FATAL
    except Exception:
        log.exception("schema-watcher crashed")
        return EXIT_FATAL
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
