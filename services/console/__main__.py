"""``python -m services.console``: run icefjord-console (a Faust worker) until SIGTERM.

Exit codes (``shared.service``): 0 after a requested stop, 1 on a fatal error (one log line
says why), 2 when the settings are invalid (one line on stderr).
"""

from __future__ import annotations

import logging
import sys
import threading

import faust
from pydantic import ValidationError

from services.console.app import build_app
from services.console.config import ConsoleSettings
from shared.errors import RetryableError
from shared.kafka import make_admin
from shared.logs import configure_logging
from shared.service import EXIT_BAD_SETTINGS, EXIT_FATAL, create_topics, settings_problems
from shared.settings import masked

__all__ = ["main", "topic_partitions"]

log = logging.getLogger("services.console")


def topic_partitions(settings: ConsoleSettings, stop: threading.Event) -> dict[str, int]:
    """Create the topics the console reads when missing (as the catalog declares them), and
    return each one's partition count: Faust's tables need their source's count."""
    requests = settings.topic_requests()
    create_topics(settings.kafka, requests, "create the console's topics", stop)
    metadata = make_admin(settings.kafka).list_topics(timeout=15)
    counts: dict[str, int] = {}
    for request in requests:
        found = metadata.topics.get(request.name)
        if found is None or not found.partitions:
            raise RetryableError(f"topic {request.name} has no partitions")
        counts[request.name] = len(found.partitions)
    return counts


def main() -> int:
    """Parse settings once, configure logging, run the Faust worker; return the exit code."""
    try:
        settings = ConsoleSettings()
    except ValidationError as exc:
        print(f"icefjord-console: invalid settings: {settings_problems(exc)}", file=sys.stderr)
        return EXIT_BAD_SETTINGS
    configure_logging(settings.log_level, settings.log_format)
    log.info("icefjord-console starting", extra={"settings": masked(settings)})
    try:
        partitions = topic_partitions(settings, threading.Event())
    except RetryableError as exc:
        log.error("icefjord-console failed", extra={"error": str(exc)})
        return EXIT_FATAL
    console = build_app(settings, partitions)
    # Faust's worker installs its own SIGTERM/SIGINT handlers and stops the app cleanly.
    worker = faust.Worker(console.app, loglevel=settings.log_level, override_logging=False)
    try:
        worker.execute_from_commandline()
    except SystemExit as exc:
        return int(exc.code or 0)
    return 0


if __name__ == "__main__":
    sys.exit(main())
