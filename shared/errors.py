"""Retryable or fatal: the one place that decides, and the bounded retry that honours it."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from threading import Event
from typing import TypeVar

log = logging.getLogger(__name__)

T = TypeVar("T")


class IcefjordError(Exception):
    """Base of every error Icefjord raises on purpose."""


class RetryableError(IcefjordError):
    """A failure that may pass: a component down, a commit conflict, a timeout."""


class FatalError(IcefjordError):
    """A failure that retrying cannot fix: stop the service with this message."""


@dataclass(frozen=True)
class Backoff:
    """Exponential backoff bounded by ``maximum`` seconds; ``attempts`` of 0 means no bound."""

    initial: float = 0.5
    maximum: float = 10.0
    factor: float = 2.0
    attempts: int = 8

    def delays(self) -> list[float]:
        """The waits between attempts (one fewer than the attempts)."""
        out: list[float] = []
        delay = self.initial
        for _ in range(max(self.attempts - 1, 0)):
            out.append(min(delay, self.maximum))
            delay *= self.factor
        return out


def retry(
    action: Callable[[], T],
    *,
    what: str,
    backoff: Backoff = Backoff(),
    stop: Event | None = None,
) -> T:
    """Run ``action``, retrying on :class:`RetryableError` with ``backoff``.

    Returns the action's result. Raises the last :class:`RetryableError` when the attempts
    are used up, and :class:`FatalError` (or any other error) at once. A set ``stop`` event
    ends the waiting early and re-raises the last error.
    """
    delays = iter(backoff.delays())
    attempt = 1
    while True:
        try:
            return action()
        except RetryableError as exc:
            delay = next(delays, None)
            if delay is None:
                raise
            log.warning(
                "retrying",
                extra={"what": what, "attempt": attempt, "delay_s": delay, "error": str(exc)},
            )
            attempt += 1
            if stop is not None:
                if stop.wait(delay):
                    raise
            else:
                time.sleep(delay)


# What an unreachable object store or catalog database looks like from the JVM (S3FileIO,
# Hadoop, Iceberg's JDBC catalog) when py4j hands the failure back: the Java exception's
# class names and messages, in its text.
_OUTAGE_SIGNS = (
    "SdkClientException",
    "Unable to execute HTTP request",
    "java.net.ConnectException",
    "java.net.SocketTimeoutException",
    "RuntimeIOException",
    "UncheckedIOException",
    "UncheckedSQLException",
    "SQLTransientConnectionException",
    "SQLNonTransientConnectionException",
    "PSQLException",
)


def warehouse_unavailable(exc: BaseException) -> bool:
    """Whether ``exc`` says the warehouse (its object store, or its catalog's database)
    could not be reached, or read or written for a reason that may pass: an ``OSError``
    from pyarrow's file systems (what pyiceberg reads table metadata with), or a Java I/O,
    S3 client or JDBC failure through py4j. A retry later finds each table as its last
    successful commit left it."""
    if isinstance(exc, OSError):
        return True
    text = str(exc)
    return type(exc).__name__ == "Py4JJavaError" and any(sign in text for sign in _OUTAGE_SIGNS)


def waiting_for_warehouse(step: Callable[[], T]) -> Callable[[], T]:
    """``step`` with warehouse outages (:func:`warehouse_unavailable`) raised as
    :class:`RetryableError`: a service then waits for the store and tries again instead of
    exiting."""

    def wrapped() -> T:
        try:
            return step()
        except RetryableError:
            raise
        except Exception as exc:
            if warehouse_unavailable(exc):
                raise RetryableError(f"warehouse unavailable: {str(exc)[:500]}") from exc
            raise

    return wrapped
