"""The metrics and health endpoint every service serves: /metrics, /healthz, /readyz."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

log = logging.getLogger(__name__)


class Health:
    """Liveness and readiness, set by the service loop and read by the HTTP handler.

    Ready means "doing its job now" (its dependencies answer); alive means "not wedged".
    A :meth:`hold` keeps a service that already works from reporting ready until it is
    released (the writer commits while its Spark warms up, but is not ready at full speed).
    """

    def __init__(self) -> None:
        self._ready = threading.Event()
        self._reason = "starting"
        self._alive = True
        self._holds: list[str] = []
        self._lock = threading.Lock()

    def hold(self, reason: str) -> None:
        """Not ready, for ``reason``, until :meth:`release` of it, whatever the loop reports."""
        with self._lock:
            self._holds.append(reason)

    def release(self, reason: str) -> None:
        with self._lock:
            if reason in self._holds:
                self._holds.remove(reason)

    def ready(self) -> None:
        self._ready.set()
        self._reason = "ok"

    def not_ready(self, reason: str) -> None:
        self._ready.clear()
        self._reason = reason

    def dead(self, reason: str) -> None:
        self._alive = False
        self._reason = reason

    @property
    def is_ready(self) -> bool:
        return self._ready.is_set() and not self._holds

    @property
    def is_alive(self) -> bool:
        return self._alive

    @property
    def reason(self) -> str:
        holds = self._holds
        return holds[0] if holds and self._alive and self._ready.is_set() else self._reason


def _handler(registry: CollectorRegistry, health: Health) -> type[BaseHTTPRequestHandler]:
    routes: dict[str, Callable[[], tuple[int, str, bytes]]] = {
        "/metrics": lambda: (200, CONTENT_TYPE_LATEST, generate_latest(registry)),
        "/healthz": lambda: (
            (200 if health.is_alive else 503),
            "text/plain",
            (b"ok\n" if health.is_alive else health.reason.encode() + b"\n"),
        ),
        "/readyz": lambda: (
            (200 if health.is_ready else 503),
            "text/plain",
            health.reason.encode() + b"\n",
        ),
    }

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            route = routes.get(self.path.split("?", 1)[0])
            status, content_type, body = route() if route else (404, "text/plain", b"not found\n")
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            log.debug("http " + format, *args)

    return Handler


class MetricsServer:
    """Serves the endpoints from a daemon thread; ``close()`` stops it."""

    def __init__(self, host: str, port: int, registry: CollectorRegistry, health: Health) -> None:
        self._server = ThreadingHTTPServer((host, port), _handler(registry, health))
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="metrics-http", daemon=True
        )

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    def start(self) -> MetricsServer:
        self._thread.start()
        log.info("metrics endpoint up", extra={"port": self.port})
        return self

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
