"""Fault injection for the end-to-end proof: ``kill -9`` services, restart Kafka and take the
object store away, mid-run.

:func:`plan_faults` is pure: it spreads ``kills_per_service`` kills of every service, one
broker restart and, where asked, one outage of the S3 server over the middle of the run,
one fault per slot at a random moment inside it (seeded), so faults never pile up and every
run with the same seed injects the same ones.
:class:`FaultInjector` carries them out in a thread: a killed service is started again after
a short random pause (as a supervisor would), the broker is stopped and started again and
awaited until healthy, and so is the S3 server after its outage.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal, Protocol

from icefjord.local.components import Health

FaultKind = Literal["kill", "restart_kafka", "store_outage"]


@dataclass(frozen=True)
class Fault:
    """Kill ``target`` (a service name), restart the broker or stop the object store for
    ``pause_s``, ``at_s`` into the run."""

    at_s: float
    kind: FaultKind
    target: str
    pause_s: float


@dataclass(frozen=True)
class FaultRecord:
    """A fault as it happened; ``detail`` says what the restart found."""

    fault: Fault
    happened_at_s: float
    done: bool
    detail: str


def plan_faults(
    duration_s: float,
    services: Sequence[str],
    *,
    seed: int = 7,
    kills_per_service: int = 2,
    restart_kafka: bool = True,
    store_outage_s: float = 0.0,
    window: tuple[float, float] = (0.1, 0.85),
    pause_s: tuple[float, float] = (1.0, 5.0),
) -> tuple[Fault, ...]:
    """The faults of one run, in time order, inside ``window`` (fractions of the run).

    Every service is killed ``kills_per_service`` times; the broker restarts once if
    ``restart_kafka``; the object store is down once for ``store_outage_s`` if positive.
    Raises ValueError for an empty or inverted window.
    """
    start, end = window[0] * duration_s, window[1] * duration_s
    if not 0 <= start < end:
        raise ValueError(f"fault window {window} of a {duration_s}s run is empty")
    rng = random.Random(seed)
    targets: list[tuple[FaultKind, str]] = [
        ("kill", name) for name in services for _ in range(kills_per_service)
    ]
    if restart_kafka:
        targets.append(("restart_kafka", "kafka"))
    if store_outage_s > 0:
        targets.append(("store_outage", "s3"))
    rng.shuffle(targets)
    slot = (end - start) / max(1, len(targets))
    return tuple(
        Fault(
            at_s=start + i * slot + rng.uniform(0, slot * 0.8),
            kind=kind,
            target=target,
            pause_s=store_outage_s if kind == "store_outage" else rng.uniform(*pause_s),
        )
        for i, (kind, target) in enumerate(targets)
    )


class Restartable(Protocol):
    """What the injector needs of a service or the broker."""

    @property
    def name(self) -> str: ...

    def start(self) -> None: ...

    def stop(self) -> bool: ...

    def check(self) -> Health: ...


class Killable(Restartable, Protocol):
    def kill(self) -> bool: ...


class FaultInjector(threading.Thread):
    """Carries out ``faults`` from :meth:`start` on; :attr:`records` lists what happened."""

    def __init__(
        self,
        faults: Sequence[Fault],
        services: Mapping[str, Killable],
        kafka: Restartable | None,
        *,
        store: Restartable | None = None,
        on_event: Callable[[str], None] = lambda message: None,
        kafka_timeout_s: float = 180.0,
    ) -> None:
        super().__init__(name="fault-injector", daemon=True)
        self.faults = tuple(faults)
        self.services = services
        self.kafka = kafka
        self.store = store
        self.on_event = on_event
        self.kafka_timeout_s = kafka_timeout_s
        self.stop_event = threading.Event()
        self.records: list[FaultRecord] = []

    def run(self) -> None:
        began = time.monotonic()
        for fault in self.faults:
            if self.stop_event.wait(max(0.0, began + fault.at_s - time.monotonic())):
                return
            happened = time.monotonic() - began
            try:
                detail = self._inject(fault)
                done = True
            except Exception as exc:  # a failed fault is reported, it must not end the run
                detail, done = f"{type(exc).__name__}: {exc}", False
            self.records.append(FaultRecord(fault, happened, done, detail))
            self.on_event(f"fault at {happened:.0f}s: {fault.kind} {fault.target}: {detail}")

    def _inject(self, fault: Fault) -> str:
        if fault.kind == "kill":
            service = self.services[fault.target]
            killed = service.kill()
            self.stop_event.wait(fault.pause_s)
            service.start()
            return (
                f"{'killed' if killed else 'was not running'}, restarted after {fault.pause_s:.1f}s"
            )
        if fault.kind == "store_outage":
            if self.store is None:
                return "skipped: the object store is not ours to stop"
            return self._outage(self.store, fault.pause_s, "object store")
        if self.kafka is None:
            return "skipped: the broker is not ours to restart"
        return self._outage(self.kafka, fault.pause_s, "broker")

    def _outage(self, component: Restartable, pause_s: float, what: str) -> str:
        """Stop ``component``, wait ``pause_s``, start it and wait until it is healthy."""
        began = time.monotonic()
        component.stop()
        self.stop_event.wait(pause_s)
        component.start()
        while not component.check().healthy:
            if time.monotonic() - began > pause_s + self.kafka_timeout_s:
                raise RuntimeError(f"{what} not healthy {self.kafka_timeout_s:.0f}s after restart")
            time.sleep(1)
        return f"{what} back after {time.monotonic() - began:.1f}s"
