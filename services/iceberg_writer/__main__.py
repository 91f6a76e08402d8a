"""``python -m services.iceberg_writer``: run iceberg-writer until SIGTERM.

Exit codes: 0 after a requested stop, 1 on a fatal error (one log line says why), 2 when the
settings are invalid (one line on stderr), 3 when a writer with a newer epoch took over.
"""

from __future__ import annotations

import logging
import sys
import threading
import time
import uuid
from contextlib import ExitStack

from prometheus_client import CollectorRegistry
from pydantic import ValidationError

from services.iceberg_writer.apply import BatchWriter
from services.iceberg_writer.config import WriterSettings
from services.iceberg_writer.metrics import WriterMetrics
from services.iceberg_writer.tables import FencedError, TableStore
from services.iceberg_writer.writer import Writer
from shared.catalog import open_catalog
from shared.endpoint import Health, MetricsServer
from shared.errors import Backoff, FatalError, RetryableError, retry
from shared.kafka import ensure_topics, make_admin, make_consumer, make_producer
from shared.logs import configure_logging
from shared.loop import install_stop_handlers, run_loop
from shared.registry import make_registry_client
from shared.settings import masked
from shared.spark import build_spark_session

log = logging.getLogger("services.iceberg_writer")

EXIT_OK = 0
EXIT_FATAL = 1
EXIT_BAD_SETTINGS = 2
EXIT_FENCED = 3


def build_writer(settings: WriterSettings, registry: CollectorRegistry) -> Writer:
    """Spark, the catalog, the Kafka clients and the registry, wired into a :class:`Writer`."""
    spark_settings = settings.spark.model_copy(
        update={"conf": {"spark.sql.iceberg.check-nullability": "false", **settings.spark.conf}}
    )
    spark = build_spark_session("icefjord-iceberg-writer", spark_settings, settings.catalog)
    store = TableStore(
        spark,
        open_catalog(settings.catalog),
        settings.catalog.name,
        settings.metadata_columns.columns(),
        {name: table.table_config() for name, table in settings.tables.items()},
    )
    data = make_consumer(
        settings.kafka,
        settings.group_id,
        **{"topic.metadata.refresh.interval.ms": settings.metadata_refresh_ms},
    )
    control = make_consumer(settings.kafka, f"{settings.group_id}-control-{uuid.uuid4().hex[:8]}")
    return Writer(
        settings,
        data=data,
        control=control,
        producer=make_producer(settings.kafka),
        registry=make_registry_client(settings.registry),
        store=store,
        batch_writer=BatchWriter(spark, settings.staging_dir),
        metrics=WriterMetrics.create(registry),
        epoch=settings.epoch or time.time_ns() // 1_000_000,
    )


def run(settings: WriterSettings, stop: threading.Event) -> None:
    """Serve metrics, create topics, start Spark, then write until ``stop`` is set."""
    health = Health()
    registry = CollectorRegistry()
    with ExitStack() as resources:
        server = MetricsServer(settings.metrics.host, settings.metrics.port, registry, health)
        resources.callback(server.close)
        server.start()
        if settings.create_topics:
            admin = make_admin(settings.kafka)
            retry(
                lambda: ensure_topics(admin, settings.topic_requests()),
                what="create writer topics",
                backoff=Backoff(attempts=10),
                stop=stop,
            )
        writer = build_writer(settings, registry)
        retry(
            lambda: writer.start(),
            what="read the control topic",
            backoff=Backoff(attempts=10),
            stop=stop,
        )
        log.info("iceberg-writer running", extra={"epoch": writer.epoch})
        run_loop(writer.step, stop, health)
        writer.flush_all()
    log.info("iceberg-writer stopped")


def main() -> int:
    """Parse settings once, configure logging, run; return the exit code."""
    try:
        settings = WriterSettings()
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
        print(f"iceberg-writer: invalid settings: {problems}", file=sys.stderr)
        return EXIT_BAD_SETTINGS
    configure_logging(settings.log_level, settings.log_format)
    log.info("iceberg-writer starting", extra={"settings": masked(settings)})
    stop = threading.Event()
    install_stop_handlers(stop)
    try:
        run(settings, stop)
    except FencedError as exc:
        log.error("iceberg-writer fenced", extra={"error": str(exc)})
        return EXIT_FENCED
    except RetryableError as exc:
        if stop.is_set():
            return EXIT_OK
        log.error("iceberg-writer failed", extra={"error": f"{type(exc).__name__}: {exc}"})
        return EXIT_FATAL
    except (FatalError, OSError) as exc:
        log.error("iceberg-writer failed", extra={"error": f"{type(exc).__name__}: {exc}"})
        return EXIT_FATAL
    except Exception:
        log.exception("iceberg-writer crashed")
        return EXIT_FATAL
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
