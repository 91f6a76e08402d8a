"""The demo's change source: PostgreSQL captured by Debezium, or the envelope generator.

Both offer the same steps (:class:`DemoSource`): ``prepare`` creates the tables and loads the
initial rows (captured as Debezium's snapshot), ``run`` plays the timed transactions,
``supervise`` keeps the capture going (a Connect task that failed while Kafka restarted is
restarted), ``tables`` reads back what the source holds for verification.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence, Set
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from icefjord.bulk.load import BulkLoadResult
from icefjord.demo.envelopes import EnvelopeEncoder
from icefjord.demo.generator import GeneratorWorkload
from icefjord.demo.plan import Planner, Transaction
from icefjord.demo.verify import SourceTable, read_postgres, source_from_model
from icefjord.demo.workload import PostgresWorkload, WorkloadProgress, WorkloadResult
from icefjord.local.connect import ConnectError, KafkaConnect, PostgresSource
from icefjord.local.connect import debezium_postgres_config as connector_config
from icefjord.local.postgres import PostgresCluster
from icefjord.local.settings import LocalSettings
from shared.kafka import TopicRequest, ensure_topics, make_admin

if TYPE_CHECKING:
    import psycopg

CONNECTOR_PREFIX = "icefjord-demo-"


@dataclass(frozen=True)
class SourceNames:
    """How one demo run names things: the PostgreSQL schema (= Iceberg namespace), the
    Debezium server name (topic prefix), and the publication, slot and connector."""

    schema: str
    topic_prefix: str = "demo"

    @property
    def publication(self) -> str:
        return f"icefjord_{self.schema}"

    @property
    def slot(self) -> str:
        return f"icefjord_{self.schema}"

    @property
    def connector(self) -> str:
        return f"{CONNECTOR_PREFIX}{self.schema}"

    def topic(self, table: str) -> str:
        return f"{self.topic_prefix}.{self.schema}.{table}"

    def iceberg(self, table: str) -> str:
        """The Iceberg identifier the normalizer derives: ``<schema>.<table>``."""
        return f"{self.schema}.{table}"


def choose_schema(taken: Set[str], base: str = "shop") -> str:
    """``base`` if unused, else ``base_2``, ``base_3``, ...: each run gets fresh tables,
    topics and subjects, and earlier runs' data stay as they were."""
    if not re.fullmatch(r"[a-z_][a-z0-9_]*", base):
        raise ValueError(f"schema name {base!r}: use lower-case letters, digits and _")
    if base not in taken:
        return base
    n = 2
    while f"{base}_{n}" in taken:
        n += 1
    return f"{base}_{n}"


SLOT_PREFIX = "icefjord_"


def retire_earlier_runs(connect: KafkaConnect, cluster: PostgresCluster) -> list[str]:
    """Delete the connectors of earlier demo runs and drop their replication slots, so an
    idle slot does not hold back WAL forever. Their topics and tables stay. Returns the
    connector names removed and the orphaned slots dropped.

    A slot is orphaned when it is named like ours (``icefjord_``), is inactive and no
    connector registered with the worker names it: its connector was forgotten (Kafka's data
    removed, the worker's config topic lost) while PostgreSQL kept the slot, and with it
    every byte of WAL written since. Slots of connectors that are still registered are left
    alone even while inactive: their connector resumes from them."""
    import psycopg

    registered: list[str] = connect.request("GET", "/connectors")
    removed = [c for c in registered if c.startswith(CONNECTOR_PREFIX)]
    claimed = [
        _slot_of(connect, name) for name in registered if not name.startswith(CONNECTOR_PREFIX)
    ]
    for name in removed:
        connect.delete(name)
    slots = [f"{SLOT_PREFIX}{name.removeprefix(CONNECTOR_PREFIX)}" for name in removed]
    dropped: list[str] = []
    with psycopg.connect(cluster.conninfo(), autocommit=True) as conn:
        orphans = [
            row[0]
            for row in conn.execute(
                "SELECT slot_name FROM pg_replication_slots WHERE NOT active"
                " AND starts_with(slot_name, %s) AND NOT slot_name = ANY(%s)",
                (SLOT_PREFIX, [*slots, *(slot for slot in claimed if slot is not None)]),
            ).fetchall()
        ]
        for slot in orphans:
            conn.execute("SELECT pg_drop_replication_slot(%s)", (slot,))
            dropped.append(f"slot {slot}")
        drop_released_slots(conn, slots, wait_s=30.0)
    return removed + dropped


def drop_released_slots(
    conn: psycopg.Connection[Any], slots: Sequence[str], wait_s: float
) -> list[str]:
    """Drop the replication slots ``slots`` as their walsenders let go of them (a deleted
    connector's task does shortly), waiting at most ``wait_s``. A slot that does not exist
    counts as dropped. Returns the slots still held at the deadline."""
    deadline = time.monotonic() + wait_s
    held = list(slots)
    while held:
        conn.execute(
            "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots"
            " WHERE slot_name = ANY(%s) AND NOT active",
            (held,),
        )
        rows = conn.execute(
            "SELECT slot_name FROM pg_replication_slots WHERE slot_name = ANY(%s)", (held,)
        ).fetchall()
        held = [row[0] for row in rows]
        if held and time.monotonic() < deadline:
            time.sleep(0.5)
        else:
            break
    return held


def _slot_of(connect: KafkaConnect, name: str) -> str | None:
    """The replication slot connector ``name`` reads (Debezium's default when unset)."""
    config: dict[str, str] = connect.request("GET", f"/connectors/{name}/config")
    if "slot.name" in config:
        return config["slot.name"]
    return "debezium" if "postgres" in config.get("connector.class", "").lower() else None


class DemoSource(Protocol):
    kind: str
    names: SourceNames

    @property
    def progress(self) -> WorkloadProgress: ...

    def prepare(self, planner: Planner) -> None: ...

    def run(self, transactions: Iterable[Transaction]) -> WorkloadResult: ...

    def supervise(self) -> str | None: ...

    def tables(self) -> list[SourceTable]: ...

    def discard(self) -> None: ...

    def close(self) -> None: ...


class PostgresDemoSource:
    """Tables in PostgreSQL, captured by the Debezium connector on Kafka Connect."""

    kind = "postgres"

    def __init__(
        self,
        settings: LocalSettings,
        names: SourceNames,
        cluster: PostgresCluster,
        connect: KafkaConnect,
    ) -> None:
        self.settings = settings
        self.names = names
        self.cluster = cluster
        self.connect = connect
        self.workload = PostgresWorkload(cluster.conninfo(), names.schema)

    @property
    def progress(self) -> WorkloadProgress:
        return self.workload.progress

    def connector_config(self) -> dict[str, str]:
        s = self.settings
        return connector_config(
            PostgresSource(
                host=s.host,
                port=s.postgres_port,
                user=s.postgres_user,
                database=s.postgres_database,
                schema=self.names.schema,
                topic_prefix=self.names.topic_prefix,
                publication=self.names.publication,
                slot=self.names.slot,
            )
        )

    def capture_topics(
        self, tables: Iterable[str], config: Mapping[str, str]
    ) -> list[TopicRequest]:
        """The topics the changes of ``tables`` flow through, each as its creator would make
        it: Debezium's (``topic.creation.default.*`` of the connector's ``config``) and the
        normalizer's changes topic (its settings, the topic catalog)."""
        from services.cdc_normalizer.config import NormalizerSettings
        from services.cdc_normalizer.pipeline import changes_topic
        from services.cdc_normalizer.table_schema import TableId

        partitions = int(config["topic.creation.default.partitions"])
        replication = int(config["topic.creation.default.replication.factor"])
        # The services inherit this process's environment, so these are their settings.
        normalizer = NormalizerSettings(topic_replication_factor=1, metrics={"port": 0})
        requests: list[TopicRequest] = []
        for table in tables:
            requests.append(TopicRequest(self.names.topic(table), partitions, replication))
            changes = changes_topic(TableId(self.names.schema, table))
            requests.append(normalizer.changes_request(changes))
        return requests

    def start_capture(self, tables: Iterable[str], config: Mapping[str, str]) -> None:
        """Create the topics of ``tables`` (:meth:`capture_topics`), then register the
        connector with ``config``.

        The normalizer and the writer subscribe to topic patterns and find a new topic at
        their next metadata refresh (``METADATA_REFRESH_MS``, 1 s). Created before the
        connector starts, the topics are in both subscriptions when the first change
        arrives; otherwise each table's first change waits for two refreshes and two
        rebalances in a row (Connect creates the topic, the normalizer finds it and creates
        the changes topic, the writer finds that)."""
        ensure_topics(
            make_admin(self.settings.kafka_settings()),
            self.capture_topics(tables, config),
        )
        self.connect.register(self.names.connector, dict(config))

    def prepare(self, planner: Planner) -> None:
        """Create the schema, load the initial rows, then register the connector (its
        snapshot captures them) and wait until it streams."""
        self.workload.create_schema(planner.initial_tables, self.names.publication)
        self.workload.run(planner.seed())
        tables = [t.name for t in planner.initial_tables]
        self.start_capture(tables, self.connector_config())
        self.connect.wait_running(self.names.connector)

    def run(self, transactions: Iterable[Transaction]) -> WorkloadResult:
        return self.workload.run(transactions)

    def bulk_snapshot(
        self,
        tables: Sequence[str],
        during: Iterable[Transaction] = (),
        progress: Callable[[str], None] = lambda message: None,
    ) -> BulkLoadResult:
        """Start capture with a bulk load of ``tables`` (:mod:`icefjord.bulk.load`): the
        connector snapshots one row of each and streams, the tables are copied and handed
        to iceberg-writer. ``during`` runs on the workload's connection from the moment the
        connector is registered until the copy is done (changes before, around and after
        the copy's snapshot); it must hold DML only."""
        from icefjord.bulk.load import bulk_load, snapshot_overrides
        from shared.avro import AvroCodec
        from shared.control import ControlPublisher
        from shared.kafka import make_producer
        from shared.registry import make_registry_client
        from shared.settings import CONTROL_TOPIC

        names = self.names
        config = {**self.connector_config(), **snapshot_overrides(names.schema, tables)}
        kafka = self.settings.kafka_settings()
        registry = make_registry_client(self.settings.registry_settings())
        publisher = ControlPublisher(make_producer(kafka), AvroCodec(registry), CONTROL_TOPIC)
        errors: list[BaseException] = []
        worker: threading.Thread | None = None

        def concurrently() -> None:
            try:
                self.workload.run(during)
            except BaseException as exc:  # handed to the caller
                errors.append(exc)

        def start_capture() -> None:
            nonlocal worker
            self.start_capture(tables, config)
            worker = threading.Thread(target=concurrently, name="during-copy", daemon=True)
            worker.start()

        try:
            result = bulk_load(
                self.cluster.conninfo(),
                names.schema,
                {table: names.iceberg(table) for table in tables},
                names.slot,
                publisher,
                self.settings.state / "bulk",
                start_capture,
                progress=progress,
            )
        finally:
            if worker is not None:
                worker.join()
        if errors:
            raise errors[0]
        return result

    def supervise(self) -> str | None:
        """Restart the connector's failed tasks; return what was done, if anything.

        A task that failed because "replication slot ... is active" lost the slot to a
        predecessor whose connection outlived it: with no task of ours running, whoever holds
        the slot is stale, so its walsender is terminated before the restart."""
        try:
            status = self.connect.status(self.names.connector)
        except (ConnectError, OSError) as exc:
            return f"Connect not answering: {exc}"
        states = [status["connector"]["state"], *(t["state"] for t in status.get("tasks", []))]
        if "FAILED" not in states:
            return None
        released = self._release_slot()
        self.connect.restart_failed(self.names.connector)
        return "restarted failed Debezium task" + (
            f" (terminated stale walsender {released})" if released else ""
        )

    def _release_slot(self) -> int | None:
        import psycopg

        with psycopg.connect(self.cluster.conninfo(), autocommit=True) as conn:
            row = conn.execute(
                "SELECT active_pid, pg_terminate_backend(active_pid) FROM pg_replication_slots "
                "WHERE slot_name = %s AND active",
                (self.names.slot,),
            ).fetchone()
        return None if row is None else int(row[0])

    def tables(self) -> list[SourceTable]:
        return read_postgres(self.cluster.conninfo(), self.names.schema)

    def discard(self, wait_s: float = 10.0) -> None:
        """Stop capturing and drop what this run made in PostgreSQL: the connector, then the
        schema with its tables, the publication and the replication slot. Kafka's topics and
        Iceberg's tables stay. A slot whose walsender has not let go within ``wait_s`` is
        left to the next run's :func:`retire_earlier_runs` (it is inactive by then)."""
        self.connect.delete(self.names.connector)
        drop_released_slots(self.workload.connection(), [self.names.slot], wait_s)
        self.workload.drop(self.names.publication, self.names.slot)

    def close(self) -> None:
        self.workload.close()


class GeneratedDemoSource:
    """No database: the plan is played into Kafka as Debezium events."""

    kind = "generator"

    def __init__(self, settings: LocalSettings, names: SourceNames) -> None:
        self.names = names
        encoder = EnvelopeEncoder(names.topic_prefix, settings.postgres_database, names.schema)
        self.workload = GeneratorWorkload(settings.kafka_settings(), encoder)

    @property
    def progress(self) -> WorkloadProgress:
        return self.workload.progress

    def prepare(self, planner: Planner) -> None:
        self.workload.create_schema(planner.initial_tables)
        self.workload.snapshot(planner.seed())

    def run(self, transactions: Iterable[Transaction]) -> WorkloadResult:
        return self.workload.run(transactions)

    def supervise(self) -> str | None:
        return None

    def tables(self) -> list[SourceTable]:
        return source_from_model(self.workload.model, self.names.schema)

    def discard(self) -> None:
        """Nothing to drop: the generator keeps its rows in memory, and Kafka's topics stay
        (as they do for PostgreSQL)."""

    def close(self) -> None:
        self.workload.close()
