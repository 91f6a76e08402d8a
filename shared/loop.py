"""The stop-aware service loop: ``while not stop.is_set(): poll -> handle -> commit``.

Signal handlers only set the stop event; the loop finishes its current step, then the
caller's ``finally`` flushes and closes (resources live in an ``ExitStack``).

A step that never returns is watched for (:class:`StepWatchdog`). After a broker restart the
fault test's normalizer sat inside a librdkafka call for five minutes (no Python line ran,
not even the SIGTERM handler) while its metrics endpoint answered; librdkafka's open issues
#5456 and #5511 describe ``send_offsets_to_transaction`` blocking past its timeout, for
good, once a restarted broker was briefly missing from the metadata. Such a call cannot be
interrupted, and a signal handler does not run while the main thread is inside it, so the
watchdog logs where the step is stuck and exits the process with :data:`EXIT_STUCK`; its
supervisor (Kubernetes, compose's ``restart``, the demo) starts it again, and a new process
resumes from committed state as after any crash.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import sys
import threading
import time
import traceback
from collections.abc import Callable
from types import FrameType

from shared.endpoint import Health
from shared.errors import RetryableError

log = logging.getLogger(__name__)

EXIT_STUCK = 4
"""The exit code of a service whose step did not return within its ``stuck_step_s``."""


class StepWatchdog:
    """Exits the process when one step has run longer than ``limit_s``.

    :meth:`started` and :meth:`finished` bracket each step; a daemon thread checks every
    ``limit_s / 10`` (at most every 5 s). On expiry it logs the stuck thread's stack, marks
    ``health`` dead and calls ``exit(EXIT_STUCK)`` (``os._exit``: a stuck main thread would
    never let a normal exit finish). ``limit_s`` 0 turns it off.
    """

    def __init__(
        self,
        limit_s: float,
        health: Health,
        *,
        exit: Callable[[int], object] = os._exit,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.limit_s = limit_s
        self._health = health
        self._exit = exit
        self._clock = clock
        self._lock = threading.Lock()
        self._since: float | None = None
        self._thread_id: int | None = None
        self._closed = threading.Event()
        self._fired = False
        if limit_s > 0:
            threading.Thread(target=self._watch, name="step-watchdog", daemon=True).start()

    def started(self) -> None:
        with self._lock:
            self._since = self._clock()
            self._thread_id = threading.get_ident()

    def finished(self) -> None:
        with self._lock:
            self._since = None

    def close(self) -> None:
        self._closed.set()

    def check(self) -> bool:
        """Exit if the current step is overdue; True if it did (once)."""
        with self._lock:
            since, thread_id = self._since, self._thread_id
        if self.limit_s <= 0 or self._fired or since is None:
            return False
        if self._clock() - since < self.limit_s:
            return False
        self._fired = True
        frame = sys._current_frames().get(thread_id) if thread_id is not None else None
        stack = "".join(traceback.format_stack(frame)) if frame is not None else "(unknown)"
        reason = f"a step has not returned for {self.limit_s:.0f} s"
        log.error(
            "step stuck, exiting so that the service is restarted",
            extra={"limit_s": self.limit_s, "exit_code": EXIT_STUCK, "stack": stack},
        )
        self._health.dead(reason)
        for handler in logging.getLogger().handlers:
            with contextlib.suppress(OSError, ValueError):  # a closed stream: exit anyway
                handler.flush()
        self._exit(EXIT_STUCK)
        return True

    def _watch(self) -> None:
        interval = min(self.limit_s / 10, 5.0)
        while not self._closed.wait(interval):
            if self.check():
                return


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
    stuck_after_s: float = 0.0,
) -> None:
    """Call ``step`` until ``stop`` is set.

    A :class:`RetryableError` marks the service not ready and retries after a growing delay
    (a dependency is down: wait, do not die). Any other exception propagates to ``__main__``,
    which logs it once and exits non-zero. A step running longer than ``stuck_after_s``
    (0: no limit) ends the process (:class:`StepWatchdog`).
    """
    watchdog = StepWatchdog(stuck_after_s, health)
    try:
        _loop(step, stop, health, watchdog, retry_delay, max_retry_delay)
    finally:
        watchdog.close()


def _loop(
    step: Callable[[], None],
    stop: threading.Event,
    health: Health,
    watchdog: StepWatchdog,
    retry_delay: float,
    max_retry_delay: float,
) -> None:
    delay = retry_delay
    while not stop.is_set():
        watchdog.started()
        failure: RetryableError | None = None
        try:
            step()
        except RetryableError as exc:
            failure = exc
        finally:
            watchdog.finished()
        if failure is not None:
            health.not_ready(str(failure))
            log.warning("step failed, will retry", extra={"error": str(failure), "delay_s": delay})
            stop.wait(delay)
            delay = min(delay * 2, max_retry_delay)
            continue
        if not health.is_ready:
            health.ready()
        delay = retry_delay
