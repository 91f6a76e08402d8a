"""``python -m services.maintainer``: run the maintainer until SIGTERM.

Exit codes (``shared.service``): 0 after a requested stop, 1 on a fatal error (one log line
says why), 2 when the settings are invalid (one line on stderr).
"""

from __future__ import annotations

import logging
import sys
import threading
import time
from contextlib import ExitStack

from prometheus_client import CollectorRegistry, Gauge

from services.maintainer.config import MaintainerSettings
from services.maintainer.inspect import list_tables
from services.maintainer.service import build_service
from services.maintainer.warm import warm_up, warm_up_storage
from shared.catalog import open_catalog
from shared.endpoint import Health
from shared.errors import waiting_for_warehouse
from shared.kafka import make_consumer, make_producer
from shared.loop import run_loop
from shared.registry import make_registry_client
from shared.service import EXIT_BAD_SETTINGS, EXIT_FATAL, EXIT_OK, create_topics, serve_metrics
from shared.service import service_main as _service_main
from shared.spark import LazySparkSession, build_spark_session, spark_jars

__all__ = ["EXIT_BAD_SETTINGS", "EXIT_FATAL", "EXIT_OK", "main", "run"]

log = logging.getLogger("services.maintainer")


def run(settings: MaintainerSettings, stop: threading.Event) -> None:
    """Serve metrics, make sure the control topic exists, then maintain until ``stop`` is
    set (Spark starts before the first action). Raises FatalError, or RetryableError when
    the control topic cannot be created in time."""
    health = Health()
    metrics_registry = CollectorRegistry()
    with ExitStack() as resources:
        # Serve /healthz first: the control topic may take a while, and the process is alive.
        serve_metrics(resources, settings.metrics, metrics_registry, health)
        if settings.create_control_topic:
            request = settings.control_topic_request()
            create_topics(settings.kafka, [request], "create control topic", stop)
        # Spark starts before the first action, not here: inspecting tables needs no JVM,
        # and one that is never used cost about 5.5 CPU s to start (HISTORY, "2026-11-30").
        # The jars are checked now, so a broken installation still fails at start.
        spark_jars(settings.spark)
        spark = LazySparkSession(
            lambda: build_spark_session("icefjord-maintainer", settings.spark, settings.catalog)
        )
        resources.callback(spark.stop)

        ready = Gauge(
            "icefjord_maintainer_spark_ready",
            "1 once the maintainer's Spark session has started and warmed up (warm_up), "
            "before its first action or, with warm_up_at_start, in the background from start",
            registry=metrics_registry,
        )
        preparing = threading.Lock()
        prepared = threading.Event()

        def prepare() -> None:
            """Start Spark and warm it up, once: a second caller waits for the first."""
            with preparing:
                if prepared.is_set():
                    return
                spark.session()
                if settings.warm_up:
                    try:
                        seconds = warm_up(spark.session())
                        log.info("spark warmed up", extra={"seconds": round(seconds, 1)})
                        started = time.monotonic()
                        # Its own catalog client: this may run in the warm-up's thread.
                        names = list_tables(open_catalog(settings.catalog))
                        tables = (t for t in names if settings.maintains(t))
                        read = warm_up_storage(spark.session(), settings.catalog.name, tables)
                        log.info(
                            "storage warmed up",
                            extra={"table": read, "seconds": round(time.monotonic() - started, 1)},
                        )
                    except Exception as exc:  # only the first real actions are slower
                        log.warning(
                            "warm-up failed, the first compaction will be slower",
                            extra={"error": str(exc)},
                        )
                prepared.set()
                ready.set(1)

        def prepare_in_background() -> None:
            try:
                prepare()
            except Exception as exc:  # the first action starts it again, and reports it
                log.warning("spark did not start in the background", extra={"error": str(exc)})

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
            # The warm-up too, outside the first action's lease: at start it took 17 CPU s
            # and two cores for 30 s from a writer catching up (HISTORY, "2026-11-30").
            before_first_action=prepare,
        )
        if settings.warm_up_at_start:
            threading.Thread(
                target=prepare_in_background, name="spark-warm-up", daemon=True
            ).start()
        log.info("maintainer running", extra={"catalog": settings.catalog.name})
        step = waiting_for_warehouse(service.step)
        run_loop(step, stop, health, stuck_after_s=settings.stuck_step_s)


def main() -> int:
    """Parse settings once, configure logging, run; return the exit code."""
    return _service_main("maintainer", MaintainerSettings, run)


if __name__ == "__main__":
    sys.exit(main())
