"""What every service's ``python -m services.<name>`` shares: start-up and exit codes.

:func:`service_main` parses the settings once, configures logging, installs the SIGTERM and
SIGINT handlers, runs the service and maps how it ended to an exit code. The service's own
``run(settings, stop)`` only builds its clients and loops; :func:`serve_metrics` and
:func:`create_topics` are the two steps most of them begin with.

Exit codes (the same for all four services, as their READMEs and the Kubernetes probes expect):
0 after a requested stop, 1 on a fatal error (one log line says why), 2 when the settings are
invalid (one line on stderr), 4 when a step did not return in time (``shared.loop``,
``stuck_step_s``); a service may add its own, like the writer's 3 (fenced).
"""

from __future__ import annotations

import gc
import logging
import sys
import threading
from collections.abc import Callable, Sequence
from contextlib import ExitStack
from typing import TypeVar

from prometheus_client import CollectorRegistry
from pydantic import ValidationError

from shared.endpoint import Health, MetricsServer
from shared.errors import Backoff, FatalError, RetryableError, retry
from shared.kafka import TopicRequest, ensure_topics, make_admin
from shared.logs import configure_logging
from shared.loop import install_stop_handlers
from shared.settings import KafkaSettings, MetricsSettings, ServiceSettings, masked

EXIT_OK = 0
EXIT_FATAL = 1
EXIT_BAD_SETTINGS = 2

S = TypeVar("S", bound=ServiceSettings)

Run = Callable[[S, threading.Event], None]
"""A service body: run until the event is set; raise FatalError or RetryableError."""

ExitRule = tuple[type[BaseException], int, str]
"""An exception the service ends with on purpose, its exit code, and the log message."""

GC_YOUNG_THRESHOLD = 50_000
"""Container objects a service allocates (net) before the cyclic collector runs (CPython: 700)."""


def settle_collector(young: int = GC_YOUNG_THRESHOLD) -> None:
    """Tune the cyclic garbage collector for a batch loop; :func:`service_main` calls it.

    A batch keeps thousands of containers alive (decoded records, Avro datums) until it
    commits. At CPython's default threshold the collector ran every 700 of them, promoted
    them, and walked them again with every long-lived object of the process: 10% of the
    normalizer's CPU under load. Now what exists at start-up (modules, settings) is frozen
    out of every collection, and a young generation of ``young`` objects outlives a batch, so
    a batch's objects die of their reference count before a collection sees them. Cycles are
    still collected, only later.
    """
    gc.collect()
    gc.freeze()
    gc.set_threshold(young, 10, 10)


def settings_problems(exc: ValidationError) -> str:
    """Every problem of invalid settings on one line: ``field.path: message; ...``."""
    return "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())


def service_main(
    name: str,
    load: Callable[[], S],
    run: Run[S],
    *,
    exits: Sequence[ExitRule] = (),
    stop: threading.Event | None = None,
) -> int:
    """Parse settings with ``load``, configure logging, run, return the exit code.

    A RetryableError that ends the run after a stop was requested is a clean stop (the
    component that is down may be why the stop took long); otherwise it is fatal. An
    unexpected exception is logged with its traceback once, then exit 1.
    """
    log = logging.getLogger(f"services.{name.replace('-', '_')}")
    try:
        settings = load()
    except ValidationError as exc:
        print(f"{name}: invalid settings: {settings_problems(exc)}", file=sys.stderr)
        return EXIT_BAD_SETTINGS
    configure_logging(settings.log_level, settings.log_format)
    log.info(f"{name} starting", extra={"settings": masked(settings)})
    settle_collector()
    if stop is None:
        stop = threading.Event()
        install_stop_handlers(stop)
    try:
        run(settings, stop)
    except Exception as exc:
        return _exit_code(name, log, exc, stop, exits)
    log.info(f"{name} stopped")
    return EXIT_OK


def _exit_code(
    name: str,
    log: logging.Logger,
    exc: Exception,
    stop: threading.Event,
    exits: Sequence[ExitRule],
) -> int:
    for kind, code, message in exits:
        if isinstance(exc, kind):
            log.error(f"{name} {message}", extra={"error": str(exc)})
            return code
    if isinstance(exc, RetryableError) and stop.is_set():
        log.info(f"{name} stopped")
        return EXIT_OK
    if isinstance(exc, RetryableError | FatalError | OSError):
        log.error(f"{name} failed", extra={"error": f"{type(exc).__name__}: {exc}"})
        return EXIT_FATAL
    log.exception(f"{name} crashed", exc_info=exc)
    return EXIT_FATAL


def serve_metrics(
    resources: ExitStack, settings: MetricsSettings, registry: CollectorRegistry, health: Health
) -> MetricsServer:
    """Serve ``/metrics``, ``/healthz`` and ``/readyz`` until ``resources`` closes.

    Started first, before Spark or Kafka, so a slow start is alive and merely not ready.
    """
    server = MetricsServer(settings.host, settings.port, registry, health)
    resources.callback(server.close)
    server.start()
    return server


def create_topics(
    kafka: KafkaSettings, requests: Sequence[TopicRequest], what: str, stop: threading.Event
) -> None:
    """Create the topics that are missing, retrying while the broker is unreachable.

    Raises RetryableError when it still cannot after the backoff's attempts, or on stop.
    """
    admin = make_admin(kafka)
    retry(
        lambda: ensure_topics(admin, requests), what=what, backoff=Backoff(attempts=10), stop=stop
    )
