"""The Faust wiring: agents fold the control, dead-letter and quarantine topics into Faust
tables; web views serve them (``/api/tables``, ``/``), take the page's actions, and serve
``/metrics``, ``/healthz`` and ``/readyz``.

Tables (in memory, rebuilt from their changelog topics at start):
``views``: table name -> :class:`~services.console.state.TableView` as JSON, updated from
the control topic (keyed by table, so a table's events arrive in order on one partition);
``dead_letters`` and ``quarantined``: ``<table>|<partition>`` -> records counted, one key per
source partition so that each count has one writer and survives a changelog recovery.
Each table has as many partitions as its source topic, as Faust requires.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import faust
from faust.web import Request, Response, View
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from services.console.actions import Refusal, decide, publish
from services.console.config import ConsoleSettings
from services.console.metrics import ConsoleMetrics
from services.console.page import page
from services.console.state import TableView, fold, render, table_of_diversion
from shared.avro import AvroCodec
from shared.control import ControlReader
from shared.events import ALL_TABLES, ControlEvent
from shared.registry import make_registry_client

__all__ = ["Console", "broker_options", "build_app"]

log = logging.getLogger(__name__)

SEPARATOR = "|"
# aiohttp takes the charset apart from the content type: Prometheus' text format is UTF-8.
METRICS_TYPE = CONTENT_TYPE_LATEST.split(";", 1)[0] + "; version=0.0.4"


@dataclass
class Console:
    """The Faust app and what its views read."""

    app: faust.App
    settings: ConsoleSettings
    metrics: ConsoleMetrics
    registry: CollectorRegistry
    views: Any
    dead_letters: Any
    quarantined: Any
    started: asyncio.Event = field(default_factory=asyncio.Event)

    def tables(self, now_ms: int) -> list[dict[str, Any]]:
        """Every known table rendered at ``now_ms``, sorted by name (``*`` left out)."""
        every = self._view(ALL_TABLES)
        dead = _sum_by_table(self.dead_letters.items())
        held = _sum_by_table(self.quarantined.items())
        names = {str(k) for k in self.views} | set(dead) | set(held)
        names.discard(ALL_TABLES)
        behind = int(self.settings.behind_after_s * 1000)
        return [
            render(
                self._view(name) or TableView(table=name),
                every,
                dead_letters=dead.get(name, 0),
                quarantined=held.get(name, 0),
                now_ms=now_ms,
                behind_after_ms=behind,
            )
            for name in sorted(names)
        ]

    def _view(self, name: str) -> TableView | None:
        value = self.views.get(name)
        return None if value is None else TableView.from_json(value)


def _sum_by_table(items: Iterable[tuple[Any, Any]]) -> dict[str, int]:
    totals: dict[str, int] = {}
    for key, count in items:
        table = str(key).rpartition(SEPARATOR)[0]
        totals[table] = totals.get(table, 0) + int(count or 0)
    return totals


def broker_options(settings: ConsoleSettings) -> dict[str, Any]:
    """Faust's broker URL list and credentials from the shared Kafka settings."""
    kafka = settings.kafka
    brokers = [f"kafka://{host.strip()}" for host in kafka.bootstrap_servers.split(",")]
    options: dict[str, Any] = {"broker": brokers, "broker_client_id": kafka.client_id}
    context: ssl.SSLContext | None = None
    if kafka.security_protocol in ("SSL", "SASL_SSL"):
        context = ssl.create_default_context(cafile=kafka.ssl_ca_location)
        if kafka.ssl_certificate_location is not None:
            password = kafka.ssl_key_password
            context.load_cert_chain(
                kafka.ssl_certificate_location,
                kafka.ssl_key_location,
                password.get_secret_value() if password is not None else None,
            )
    if kafka.security_protocol.startswith("SASL"):
        secret = kafka.sasl_password
        options["broker_credentials"] = faust.SASLCredentials(
            username=kafka.sasl_username,
            password=secret.get_secret_value() if secret is not None else None,
            mechanism=kafka.sasl_mechanism or "PLAIN",
            ssl_context=context,
        )
    elif context is not None:
        options["broker_credentials"] = faust.SSLCredentials(context)
    return options


def build_app(
    settings: ConsoleSettings,
    partitions: Mapping[str, int],
    registry: CollectorRegistry | None = None,
) -> Console:
    """The Faust app with its agents, tables and views; ``partitions`` maps each topic read
    (control, dead-letter, quarantine) to its partition count."""
    registry = registry or CollectorRegistry()
    metrics = ConsoleMetrics.create(registry)
    app = faust.App(
        settings.app_id,
        **broker_options(settings),
        store="memory://",
        datadir=str(settings.data_dir),
        autodiscover=False,
        processing_guarantee=settings.processing_guarantee,
        consumer_auto_offset_reset="earliest",
        topic_replication_factor=settings.topic_replication_factor,
        topic_partitions=partitions[settings.control_topic],
        web_bind=settings.metrics.host,
        web_port=settings.metrics.port,
        web_stats_enabled=False,
        web_graph_enabled=False,
        web_router_enabled=False,
        web_tables_enabled=False,
    )
    # Keys and values of the tables go through Faust's default codec, JSON.
    console = Console(
        app=app,
        settings=settings,
        metrics=metrics,
        registry=registry,
        views=app.Table("views", partitions=partitions[settings.control_topic]),
        dead_letters=app.Table(
            "dead_letters",
            default=int,
            partitions=partitions[settings.dead_letter_topic],
        ),
        quarantined=app.Table(
            "quarantined",
            default=int,
            partitions=partitions[settings.quarantine_topic],
        ),
    )
    _agents(console)
    _views(console)
    return console


def _raw_topic(app: faust.App, name: str) -> Any:
    return app.topic(name, key_serializer="raw", value_serializer="raw", allow_empty=True)


def _agents(console: Console) -> None:
    app, settings, metrics = console.app, console.settings, console.metrics
    # The codec asks the registry once per schema id (then caches it): a short block of the
    # event loop at start and after a new control schema version, not per event.
    reader = ControlReader(
        None,  # decode_value() never touches the consumer: Faust reads the topic
        AvroCodec(make_registry_client(settings.registry)),
        settings.control_topic,
    )
    # Counted when scraped: a count per event would walk every table for every event.
    metrics.tables_known.set_function(lambda: sum(1 for k in console.views if k != ALL_TABLES))

    @app.agent(_raw_topic(app, settings.control_topic), name="fold-control")
    async def fold_control(stream: Any) -> None:
        async for event in stream.events():
            message = event.message
            rejected = reader.rejected
            decoded: ControlEvent | None = None
            if message.value is not None:
                decoded = reader.decode_value(message.value, message.partition, message.offset)
            if decoded is None:
                if reader.rejected > rejected:
                    metrics.events_rejected.labels(topic="control").inc()
                continue
            current = console.views.get(decoded.table)
            before = None if current is None else TableView.from_json(current)
            after = fold(before, decoded, settings.history)
            console.views[decoded.table] = after.to_json()
            metrics.events_consumed.labels(topic="control").inc()

    def counter(topic: str, table: Any, label: str) -> None:
        @app.agent(_raw_topic(app, topic), name=f"count-{label}")
        async def count(stream: Any) -> None:
            async for event in stream.events():
                message = event.message
                headers = {k: bytes(v or b"") for k, v in (message.headers or ())}
                name = table_of_diversion(headers)
                if name is None:
                    metrics.events_rejected.labels(topic=label).inc()
                    continue
                table[f"{name}{SEPARATOR}{message.partition}"] += 1
                metrics.events_consumed.labels(topic=label).inc()

    counter(settings.dead_letter_topic, console.dead_letters, "deadletter")
    counter(settings.quarantine_topic, console.quarantined, "quarantine")

    async def started() -> None:
        console.started.set()
        log.info("icefjord-console serving", extra={"port": settings.metrics.port})

    app.task(started)


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def _views(console: Console) -> None:
    app, settings, metrics = console.app, console.settings, console.metrics
    html = page()

    @app.page("/")
    class Index(View):
        async def get(self, request: Request) -> Response:
            return self.html(html)

    @app.page("/api/config")
    class Config(View):
        async def get(self, request: Request) -> Response:
            return self.json({"actions": settings.actions, "control_topic": settings.control_topic})

    @app.page("/api/tables")
    class Tables(View):
        async def get(self, request: Request) -> Response:
            return self.json({"now_ms": _now_ms(), "tables": console.tables(_now_ms())})

    @app.page("/api/tables/{table}")
    class OneTable(View):
        async def get(self, request: Request, table: str) -> Response:
            for item in console.tables(_now_ms()):
                if item["table"] == table:
                    return self.json(item)
            return self.error(404, f"no event seen for table {table[:200]!r}")

    @app.page("/api/tables/{table}/{action}")
    class Act(View):
        async def post(self, request: Request, table: str, action: str) -> Response:
            decided = decide(
                action,
                table,
                enabled=settings.actions,
                token=settings.token,
                authorization=request.headers.get("Authorization"),
                producer=settings.producer,
            )
            kind = action if action in ("pause", "resume", "flush", "compact") else "other"
            if isinstance(decided, Refusal):
                metrics.actions.labels(kind=kind, outcome=decided.outcome).inc()
                return self.error(decided.status, decided.reason)
            loop = asyncio.get_running_loop()
            refused = await loop.run_in_executor(
                None, publish, settings.kafka, settings.registry, settings.control_topic, decided
            )
            if refused is not None:
                metrics.actions.labels(kind=kind, outcome=refused.outcome).inc()
                return self.error(refused.status, refused.reason)
            metrics.actions.labels(kind=kind, outcome="published").inc()
            log.info(
                "action published",
                extra={"action": action, "table": table, "event_id": decided.event_id},
            )
            return self.json(
                {"published": action, "table": table, "event_id": decided.event_id}, status=202
            )

    @app.page("/metrics")
    class Metrics(View):
        async def get(self, request: Request) -> Response:
            return self.bytes(generate_latest(console.registry), content_type=METRICS_TYPE)

    @app.page("/healthz")
    class Alive(View):
        async def get(self, request: Request) -> Response:
            return self.text("ok")

    @app.page("/readyz")
    class Ready(View):
        async def get(self, request: Request) -> Response:
            if console.started.is_set() and not app.rebalancing:
                return self.text("ready")
            return self.text("starting", status=503)
