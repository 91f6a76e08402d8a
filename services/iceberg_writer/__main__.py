"""``python -m services.iceberg_writer``: run iceberg-writer until SIGTERM.

Exit codes (``shared.service``): 0 after a requested stop, 1 on a fatal error (one log line
says why), 2 when the settings are invalid (one line on stderr), 3 when a writer of another consumer
group claimed partitions of a table this one writes (``ownership.py``).
"""

from __future__ import annotations

import logging
import re
import sys
import threading
import time
import uuid
from collections.abc import Callable
from contextlib import ExitStack
from functools import partial

from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient
from confluent_kafka.schema_registry import SchemaRegistryClient
from prometheus_client import CollectorRegistry

from services.iceberg_writer.admission import SchemaAdmission
from services.iceberg_writer.apply import BatchWriter
from services.iceberg_writer.bulk import BulkLoads
from services.iceberg_writer.commands import OperatorCommands
from services.iceberg_writer.committer import CommitObserver, Committer
from services.iceberg_writer.config import WriterSettings
from services.iceberg_writer.control_view import FOLD, ControlView
from services.iceberg_writer.data_consumer import DataConsumer
from services.iceberg_writer.decoding import ChangeDecoder
from services.iceberg_writer.diversions import Diversions
from services.iceberg_writer.metrics import WriterMetrics
from services.iceberg_writer.ownership import Owner
from services.iceberg_writer.state import TableState
from services.iceberg_writer.tables import FencedError, TableStore
from services.iceberg_writer.writer import Writer
from shared.avro import AvroCodec
from shared.catalog import open_catalog
from shared.control import ControlPublisher, ControlReader
from shared.control_state import Checkpoints, StateStore
from shared.endpoint import Health
from shared.errors import Backoff, retry, waiting_for_warehouse
from shared.kafka import make_admin, make_consumer, make_producer, partition_count
from shared.loop import run_loop
from shared.registry import make_registry_client
from shared.service import EXIT_BAD_SETTINGS, EXIT_FATAL, EXIT_OK, create_topics, serve_metrics
from shared.service import service_main as _service_main
from shared.settings import CHANGES_TOPIC_PREFIX
from shared.spark import build_spark_session

__all__ = [
    "EXIT_BAD_SETTINGS",
    "EXIT_FATAL",
    "EXIT_FENCED",
    "EXIT_OK",
    "build_writer",
    "main",
    "wire_writer",
]

log = logging.getLogger("services.iceberg_writer")

EXIT_FENCED = 3


def build_writer(
    settings: WriterSettings,
    registry: CollectorRegistry,
    observer: CommitObserver | None = None,
) -> Writer:
    """Spark, the catalog, the Kafka clients and the registry, wired into a :class:`Writer`.
    ``observer`` is told of each data commit (tests and benchmarks)."""
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

    def new_data() -> Consumer:
        return make_consumer(
            settings.kafka,
            settings.group_id,
            **{"topic.metadata.refresh.interval.ms": settings.metadata_refresh_ms},
        )

    control = make_consumer(settings.kafka, f"{settings.group_id}-control-{uuid.uuid4().hex[:8]}")
    return wire_writer(
        settings,
        data=new_data(),
        control=control,
        new_data=new_data,
        admin=make_admin(settings.kafka),
        producer=make_producer(settings.kafka),
        registry=make_registry_client(settings.registry),
        store=store,
        batch_writer=BatchWriter(spark, settings.staging_dir),
        metrics=WriterMetrics.create(registry),
        epoch=settings.epoch or time.time_ns() // 1_000_000,
        observer=observer,
    )


def wire_writer(
    settings: WriterSettings,
    *,
    data: Consumer,
    control: Consumer,
    new_data: Callable[[], Consumer] | None = None,
    admin: AdminClient,
    producer: Producer,
    registry: SchemaRegistryClient,
    store: TableStore,
    batch_writer: BatchWriter,
    metrics: WriterMetrics,
    epoch: int,
    observer: CommitObserver | None = None,
) -> Writer:
    """The writer's parts around these clients, sharing one map of table states.
    ``observer`` is told of each data commit (:class:`~.committer.CommitObserver`)."""
    codec = AvroCodec(registry)
    tables: dict[str, TableState] = {}
    reader = ControlReader(control, codec, settings.control_topic)
    publisher = ControlPublisher(producer, codec, settings.control_topic)
    pattern = re.compile(settings.topic_pattern)
    commands = OperatorCommands(
        tables,
        publisher,
        producer=settings.producer,
        covers=lambda table: pattern.match(f"{CHANGES_TOPIC_PREFIX}{table}") is not None,
        metrics=metrics,
    )
    state_store = StateStore.of(settings, codec, FOLD)
    view = ControlView(
        control,
        reader,
        admin,
        settings.control_topic,
        tables,
        metrics,
        commands,
        Checkpoints.of(state_store, settings.control_state),
    )
    partitions = DataConsumer(data, view.is_paused, new_data)
    diversions = Diversions(producer, settings, metrics)
    committer = Committer(
        settings,
        store=store,
        batch_writer=batch_writer,
        publisher=publisher,
        flush_diversions=diversions.flush,
        published=view.commits_seen,
        metrics=metrics,
        epoch=epoch,
        owner=Owner.new(settings.group_id, epoch),
        observer=observer,
        partition_count=partial(partition_count, admin),
    )
    decoder = ChangeDecoder(registry, codec)
    admission = SchemaAdmission(
        settings,
        control=view,
        partitions=partitions,
        committer=committer,
        decoder=decoder,
        registry=registry,
        codec=codec,
        store=store,
        metrics=metrics,
    )
    bulk = BulkLoads(
        tables=tables,
        control=view,
        partitions=partitions,
        committer=committer,
        store=store,
        batch_writer=batch_writer,
        metrics=metrics,
        epoch=epoch,
    )
    return Writer(
        settings,
        tables=tables,
        partitions=partitions,
        control=view,
        commands=commands,
        admission=admission,
        decoder=decoder,
        diversions=diversions,
        bulk=bulk,
        committer=committer,
        admin=admin,
        store=store,
        batch_writer=batch_writer,
        metrics=metrics,
        epoch=epoch,
    )


def run(
    settings: WriterSettings, stop: threading.Event, observer: CommitObserver | None = None
) -> None:
    """Serve metrics, create topics, start Spark, then write until ``stop`` is set.
    ``observer``: see :func:`build_writer`."""
    health = Health()
    registry = CollectorRegistry()
    with ExitStack() as resources:
        serve_metrics(resources, settings.metrics, registry, health)
        if settings.create_topics:
            create_topics(settings.kafka, settings.topic_requests(), "create writer topics", stop)
        writer = build_writer(settings, registry, observer)
        resources.callback(writer.close)
        if settings.warm_up:
            # The loop starts at once; ready (full speed) once Spark is warm.
            health.hold("warming up Spark")
            writer.warm_up_in_background(lambda: health.release("warming up Spark"))
        retry(
            waiting_for_warehouse(writer.start),
            what="read the control topic and the tables",
            backoff=Backoff(attempts=10),
            stop=stop,
        )
        log.info("iceberg-writer running", extra={"epoch": writer.epoch})
        step = waiting_for_warehouse(writer.step)
        run_loop(step, stop, health, stuck_after_s=settings.stuck_step_s)
        writer.flush_all()


def main(observer: CommitObserver | None = None) -> int:
    """Parse settings once, configure logging, run; return the exit code. ``observer``: see
    :func:`build_writer` (tests run the writer process with one)."""

    def run_observed(settings: WriterSettings, stop: threading.Event) -> None:
        run(settings, stop, observer)

    return _service_main(
        "iceberg-writer",
        WriterSettings,
        run_observed,
        exits=[(FencedError, EXIT_FENCED, "fenced")],
    )


if __name__ == "__main__":
    sys.exit(main())
