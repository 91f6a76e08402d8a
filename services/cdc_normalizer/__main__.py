"""``python -m services.cdc_normalizer``: run cdc-normalizer until SIGTERM.

Exit codes: 0 after a requested stop, 1 on a fatal error (one log line says why), 2 when the
settings are invalid (one line on stderr). Kafka or the registry being down is not fatal: the
batch is aborted and retried with a growing delay until they answer.
"""

from __future__ import annotations

import logging
import sys
import threading
from contextlib import ExitStack

from prometheus_client import CollectorRegistry
from pydantic import ValidationError

from services.cdc_normalizer.app import NormalizerService
from services.cdc_normalizer.config import NormalizerSettings
from services.cdc_normalizer.metrics import NormalizerMetrics
from shared.endpoint import Health, MetricsServer
from shared.errors import FatalError
from shared.logs import configure_logging
from shared.loop import install_stop_handlers, run_loop
from shared.settings import masked

log = logging.getLogger("services.cdc_normalizer")

EXIT_OK = 0
EXIT_FATAL = 1
EXIT_BAD_SETTINGS = 2


def run(settings: NormalizerSettings, stop: threading.Event) -> None:
    """Serve metrics and process batches until ``stop`` is set; then close the clients.

    The stop event is checked between batches, so a SIGTERM lets the current transaction
    commit (or abort) before the consumer leaves the group.
    """
    health = Health()
    registry = CollectorRegistry()
    metrics = NormalizerMetrics.create(registry)
    with ExitStack() as resources:
        server = MetricsServer(settings.metrics.host, settings.metrics.port, registry, health)
        resources.callback(server.close)
        server.start()
        service = NormalizerService(settings, metrics)
        resources.callback(service.close)

        def step() -> None:
            service.step()

        run_loop(step, stop, health)
    log.info("cdc-normalizer stopped")


def main() -> int:
    """Parse settings once, configure logging, run; return the exit code."""
    try:
        settings = NormalizerSettings()
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
        print(f"cdc-normalizer: invalid settings: {problems}", file=sys.stderr)
        return EXIT_BAD_SETTINGS
    configure_logging(settings.log_level, settings.log_format)
    log.info("cdc-normalizer starting", extra={"settings": masked(settings)})
    stop = threading.Event()
    install_stop_handlers(stop)
    try:
        run(settings, stop)
    except (FatalError, OSError) as exc:
        log.error("cdc-normalizer failed", extra={"error": f"{type(exc).__name__}: {exc}"})
        return EXIT_FATAL
    except Exception:
        log.exception("cdc-normalizer crashed")
        return EXIT_FATAL
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
