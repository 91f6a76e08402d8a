"""``python -m services.cdc_normalizer``: run cdc-normalizer until SIGTERM.

Exit codes (``shared.service``): 0 after a requested stop, 1 on a fatal error (one log line
says why), 2 when the settings are invalid (one line on stderr), 4 when a batch has not
returned within ``stuck_step_s`` (a wedged client call; the supervisor restarts it). Kafka
or the registry being down is not fatal: the batch is aborted and retried with a growing
delay until they answer.
"""

from __future__ import annotations

import sys
import threading
from contextlib import ExitStack

from prometheus_client import CollectorRegistry

from services.cdc_normalizer.app import NormalizerService
from services.cdc_normalizer.config import NormalizerSettings
from services.cdc_normalizer.metrics import NormalizerMetrics
from shared.endpoint import Health
from shared.loop import run_loop
from shared.service import EXIT_BAD_SETTINGS, EXIT_FATAL, EXIT_OK, serve_metrics
from shared.service import service_main as _service_main

__all__ = ["EXIT_BAD_SETTINGS", "EXIT_FATAL", "EXIT_OK", "main", "run"]


def run(settings: NormalizerSettings, stop: threading.Event) -> None:
    """Serve metrics and process batches until ``stop`` is set; then close the clients.

    The stop event is checked between batches, so a SIGTERM lets the current transaction
    commit (or abort) before the consumer leaves the group.
    """
    health = Health()
    registry = CollectorRegistry()
    metrics = NormalizerMetrics.create(registry)
    with ExitStack() as resources:
        serve_metrics(resources, settings.metrics, registry, health)
        service = NormalizerService(settings, metrics)
        resources.callback(service.close)

        def step() -> None:
            service.step()

        run_loop(step, stop, health, stuck_after_s=settings.stuck_step_s)


def main() -> int:
    """Parse settings once, configure logging, run; return the exit code."""
    return _service_main("cdc-normalizer", NormalizerSettings, run)


if __name__ == "__main__":
    sys.exit(main())
