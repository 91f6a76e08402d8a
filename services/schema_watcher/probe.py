"""When to poll the registry: at once after something was registered, else every interval.

A full poll lists every subject and asks each matching one for its versions: one request per
table. Doing that every few seconds keeps the registry's load flat, but a new table's first
changes, or a changed table's, wait in the writer for their ``SchemaChange`` until the next
poll (up to ``POLL_INTERVAL_S``, 2 s by default).

Apicurio Registry answers one cheap question in one request: the global id of the newest
version of any artifact (:class:`NewestVersionProbe`; ids only grow). The watcher asks it
every ``PROBE_INTERVAL_S`` and polls in full when the answer changed, or when the interval
has passed anyway (:class:`PollSchedule`). A Confluent Schema Registry has no such request;
there the watcher polls every interval, as before.
"""

from __future__ import annotations

import re
import ssl
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import httpx

from shared.settings import RegistrySettings

__all__ = ["NewestVersionProbe", "PollSchedule", "Probe", "poll_when_due"]

_CCOMPAT = re.compile(r"(?P<base>.*)/apis/ccompat/v\d+")


class NewestVersionProbe:
    """Apicurio Registry's newest global id, from its core API next to the ccompat one."""

    def __init__(
        self,
        url: str,
        auth: tuple[str, str] | None = None,
        timeout_s: float = 2.0,
        transport: httpx.BaseTransport | None = None,
        verify: ssl.SSLContext | bool = True,
    ):
        self.url = url
        self._client = httpx.Client(
            auth=auth, timeout=timeout_s, transport=transport, verify=verify
        )

    @classmethod
    def for_registry(
        cls, settings: RegistrySettings, transport: httpx.BaseTransport | None = None
    ) -> NewestVersionProbe | None:
        """The probe for Apicurio's ``.../apis/ccompat/v7``; None for any other URL."""
        match = _CCOMPAT.fullmatch(settings.url.rstrip("/"))
        if match is None:
            return None
        url = f"{match['base']}/apis/registry/v3/search/versions"
        return cls(url, settings.basic_auth(), transport=transport, verify=settings.ssl_context())

    def newest(self) -> int | None:
        """The newest version's global id (0 while there is none); None when the registry
        did not answer, or not as Apicurio does: the caller then keeps to its interval."""
        try:
            response = self._client.get(
                self.url, params={"orderby": "globalId", "order": "desc", "limit": 1}
            )
            if response.status_code != 200:
                return None
            versions = response.json()["versions"]
            return int(versions[0]["globalId"]) if versions else 0
        except (httpx.HTTPError, ValueError, KeyError, IndexError, TypeError):
            return None

    def close(self) -> None:
        self._client.close()


@dataclass
class PollSchedule:
    """Whether a full poll is due: never polled yet, ``interval_s`` since the last one, or
    the probe's answer (``mark``) differs from the one taken before the last poll. Pure.

    Take the mark before polling and hand it to :meth:`polled` only once the poll
    succeeded: a version registered while polling then changes the next answer, and a
    failed poll leaves the old mark, so the next probe asks for a poll again."""

    interval_s: float
    last_poll: float | None = None
    last_mark: int | None = None

    def due(self, mark: int | None, now: float) -> bool:
        if self.last_poll is None or now - self.last_poll >= self.interval_s:
            return True
        return mark is not None and mark != self.last_mark

    def polled(self, mark: int | None, now: float) -> None:
        self.last_poll = now
        self.last_mark = mark


class Probe(Protocol):
    def newest(self) -> int | None: ...


def poll_when_due(
    poll: Callable[[], object],
    probe: Probe | None,
    schedule: PollSchedule,
    clock: Callable[[], float] = time.monotonic,
    answered: Callable[[str], None] = lambda answer: None,
) -> bool:
    """Ask ``probe`` (if any; ``answered`` hears ``new``, ``same`` or ``none``), then
    ``poll`` when ``schedule`` says so; return whether it polled. An exception from
    ``poll`` propagates and leaves the schedule as it was."""
    mark = probe.newest() if probe is not None else None
    if probe is not None:
        answered("none" if mark is None else "same" if mark == schedule.last_mark else "new")
    if not schedule.due(mark, clock()):
        return False
    poll()
    schedule.polled(mark, clock())
    return True
