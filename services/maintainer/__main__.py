"""``python -m services.maintainer``: run the maintainer until SIGTERM.

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

from services.maintainer.config import MaintainerSettings
from services.maintainer.service import build_service
from shared.catalog import open_catalog
from shared.endpoint import Health, MetricsServer
from shared.errors import Backoff, FatalError, RetryableError, retry
from shared.kafka import ensure_topics, make_admin, make_consumer, make_producer
from shared.logs import configure_logging
from shared.loop import install_stop_handlers, run_loop
from shared.registry import make_registry_client
from shared.settings import masked
from shared.spark import build_spark_session

log = logging.getLogger("services.maintainer")

EXIT_OK = 0
EXIT_FATAL = 1
EXIT_BAD_SETTINGS = 2


def run(settings: MaintainerSettings, stop: threading.Event) -> None:
    """Serve metrics, make sure the control topic exists, start Spark, then maintain until
    ``stop`` is set. Raises FatalError, or RetryableError when the control topic cannot be
    created in time."""
    health = Health()
    metrics_registry = CollectorRegistry()
    with ExitStack() as resources:
        # Serve /healthz first: starting Spark takes a while, and the process is alive.
        server = MetricsServer(
            settings.metrics.host, settings.metrics.port, metrics_registry, health
        )
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
        spark = build_spark_session("icefjord-maintainer", settings.spark, settings.catalog)
        resources.callback(spark.stop)
        producer = make_producer(settings.kafka)
        resources.callback(producer.flush, 10.0)
        consumer = make_consumer(
            settings.kafka,
            settings.group_id,
            **{"max.poll.interval.ms": settings.max_poll_interval_ms},
        )
        resources.callback(consumer.close)
        service = build_service(
            settings,
            spark=spark,
            catalog=open_catalog(settings.catalog),
            producer=producer,
            consumer=consumer,
            registry=make_registry_client(settings.registry),
            metrics_registry=metrics_registry,
            stop=stop,
        )
        log.info("maintainer running", extra={"catalog": settings.catalog.name})
        run_loop(service.step, stop, health)
    log.info("maintainer stopped")


def main() -> int:
    """Parse settings once, configure logging, run; return the exit code."""
    try:
        settings = MaintainerSettings()
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
        print(f"maintainer: invalid settings: {problems}", file=sys.stderr)
        return EXIT_BAD_SETTINGS
    configure_logging(settings.log_level, settings.log_format)
    log.info("maintainer starting", extra={"settings": masked(settings)})
    stop = threading.Event()
    install_stop_handlers(stop)
    try:
        run(settings, stop)
    except RetryableError as exc:
        if stop.is_set():
            return EXIT_OK
        log.error("maintainer failed", extra={"error": f"{type(exc).__name__}: {exc}"})
        return EXIT_FATAL
    except (FatalError, OSError) as exc:
        log.error("maintainer failed", extra={"error": f"{type(exc).__name__}: {exc}"})
        return EXIT_FATAL
    except Exception:
        log.exception("maintainer crashed")
        return EXIT_FATAL
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
