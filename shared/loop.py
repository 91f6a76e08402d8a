"""The stop-aware service loop: ``while not stop.is_set(): poll -> handle -> commit``.

Signal handlers only set the stop event; the loop finishes its current step, then the
caller's ``finally`` flushes and closes (resources live in an ``ExitStack``).
"""

from __future__ import annotations

import logging
import signal
import threading
from collections.abc import Callable
from types import FrameType

from shared.endpoint import Health
from shared.errors import RetryableError

log = logging.getLogger(__name__)


def install_stop_handlers(stop: threading.Event) -> None:
    """Make SIGTERM and SIGINT set ``stop`` (the second SIGINT still interrupts)."""

    def _on_signal(signum: int, _frame: FrameType | None) -> None:
        log.info("stop requested", extra={"signal": signal.Signals(signum).name})
        if stop.is_set() and signum == signal.SIGINT:
            raise KeyboardInterrupt
        stop.set()

    signal.signal(signal.SIGTERM, _on_signal)
    signal.signal(signal.SIGINT, _on_signal)


def run_loop(
    step: Callable[[], None],
    stop: threading.Event,
    health: Health,
    *,
    retry_delay: float = 1.0,
    max_retry_delay: float = 30.0,
) -> None:
    """Call ``step`` until ``stop`` is set.

    A :class:`RetryableError` marks the service not ready and retries after a growing delay
    (a dependency is down: wait, do not die). Any other exception propagates to ``__main__``,
    which logs it once and exits non-zero.
    """
    delay = retry_delay
    while not stop.is_set():
        try:
            step()
        except RetryableError as exc:
            health.not_ready(str(exc))
            log.warning("step failed, will retry", extra={"error": str(exc), "delay_s": delay})
            stop.wait(delay)
            delay = min(delay * 2, max_retry_delay)
            continue
        if not health.is_ready:
            health.ready()
        delay = retry_delay
