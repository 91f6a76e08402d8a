"""The schema-watcher service: registry versions in, ``SchemaChange`` control events out.

The pure part decides: :func:`recover_state` folds the control log into what was already
announced, :func:`pending_versions` picks the versions still to announce, and
:func:`plan_change` turns one registered version into a :class:`SchemaChange`. The shell,
:class:`SchemaWatcher`, does the I/O: it lists the registry, publishes, flushes, and only then
records a version as announced.

Each new version is planned against the subject's last version with the verdict APPLY (the
schema the Iceberg table has), not merely the version before it: after a quarantined
version, the table still has the older schema, and the next plan must lead from there.
``from_version`` / ``from_schema_id`` name that base.

Restarts need no local state: every announcement is on the control topic, so folding it
back gives the last announced version per subject. The fold (:class:`WatcherFold`) keeps, per
subject, the event that set the announced version and the one that set the applied version,
and saves them with the offsets they cover as a checkpoint on ``icefjord.control-state``
(``shared.control_state``): a start reads the newest checkpoint and the control topic after
it, so it does not grow with history, and a running watcher folds again every
``control_state.interval_s`` to move the checkpoint on. Delivery is at least once: if a flush fails
after the broker stored the event, the retry announces the version again (readers key on
``(subject, to_version)``).
"""

from __future__ import annotations

import json
import logging
import re
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any, Protocol, TypeVar

from confluent_kafka import Producer
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.error import SchemaRegistryError

from services.schema_watcher.config import WatcherSettings
from services.schema_watcher.evolution import plan_evolution
from services.schema_watcher.metrics import WatcherMetrics
from services.schema_watcher.plan import EvolutionPlan
from shared.avro import AvroCodec
from shared.control import ControlPublisher, ControlReader, EventPublisher
from shared.control_state import Origin, Replayed, Retained, StateStore, replay_control
from shared.errors import FatalError, RetryableError
from shared.events import ControlEvent, SchemaChange, Verdict
from shared.kafka import make_consumer
from shared.settings import CHANGES_TOPIC_PREFIX

__all__ = [
    "RegisteredVersion",
    "RegistryClient",
    "SchemaWatcher",
    "SubjectState",
    "WatcherFold",
    "WatcherState",
    "base_missing_change",
    "build_watcher",
    "fold_control_log",
    "pending_versions",
    "plan_change",
    "recover_state",
    "recovery_group_id",
    "table_for",
    "watcher_state_store",
]

log = logging.getLogger(__name__)

FOLD = "schema-watcher.v1"  # the name and version of WatcherFold's rules for what is kept
TABLE_PROPERTY = "icefjord.table"
VALUE_SUFFIX = "-value"

_T = TypeVar("_T")


class RegistryClient(Protocol):
    """The part of ``confluent_kafka``'s ``SchemaRegistryClient`` the watcher uses."""

    def get_subjects(self) -> list[str]: ...

    def get_versions(self, subject_name: str) -> list[int]: ...

    def get_version(self, subject_name: str, version: int, deleted: bool = False) -> Any: ...


@dataclass(frozen=True, slots=True)
class RegisteredVersion:
    """One version of a subject as the registry returns it; ``schema_text`` is unparsed."""

    subject: str
    version: int
    schema_id: int
    schema_text: str
    schema_type: str = "AVRO"


@dataclass(frozen=True, slots=True)
class SubjectState:
    """What was announced for one subject: the highest version, and the last APPLY one."""

    table: str
    announced_version: int
    last_verdict: Verdict
    applied_version: int | None = None
    applied_schema_id: int | None = None


@dataclass(frozen=True, slots=True)
class WatcherState:
    """Announcements per subject, rebuilt from the control log and advanced by each event."""

    subjects: Mapping[str, SubjectState] = field(default_factory=dict)

    def record(self, change: SchemaChange) -> WatcherState:
        """The state after ``change``; a change at or below the announced version is a no-op
        (a duplicate delivery or an old event), so folding is idempotent."""
        current = self.subjects.get(change.subject)
        if current is not None and change.to_version <= current.announced_version:
            return self
        state = current or SubjectState(
            table=change.table, announced_version=change.to_version, last_verdict=change.verdict
        )
        state = replace(
            state,
            table=change.table,
            announced_version=change.to_version,
            last_verdict=change.verdict,
        )
        if change.verdict is Verdict.APPLY:
            state = replace(
                state, applied_version=change.to_version, applied_schema_id=change.to_schema_id
            )
        return WatcherState({**self.subjects, change.subject: state})

    def announced(self, subject: str) -> int | None:
        """The highest announced version of ``subject``, or None."""
        state = self.subjects.get(subject)
        return None if state is None else state.announced_version

    def quarantined_tables(self) -> frozenset[str]:
        """Tables whose latest announced change is a QUARANTINE."""
        return frozenset(
            s.table for s in self.subjects.values() if s.last_verdict is Verdict.QUARANTINE
        )


def recover_state(events: Iterable[ControlEvent]) -> WatcherState:
    """Fold the ``SchemaChange`` payloads of ``events`` (in log order) into a state; other
    payloads are ignored."""
    state = WatcherState()
    for event in events:
        if isinstance(event.payload, SchemaChange):
            state = state.record(event.payload)
    return state


class WatcherFold:
    """:class:`shared.control_state.ControlFold` of the SchemaChange events: the state, and
    per subject the events it rests on (the one that set the announced version, the one that
    set the applied version). Folding those again gives the same state."""

    def __init__(self) -> None:
        self.state = WatcherState()
        self.retained = Retained()

    def apply(self, event: ControlEvent, origin: Origin | None, replay: bool) -> None:
        """Fold ``event`` in; other payloads, and changes the state ignores, are not kept."""
        change = event.payload
        if not isinstance(change, SchemaChange):
            return
        before = self.state
        self.state = before.record(change)
        if self.state is before:
            return
        self.retained.keep(("announced", change.subject), origin)
        if change.verdict is Verdict.APPLY:
            self.retained.keep(("applied", change.subject), origin)


def pending_versions(versions: Iterable[int], announced: int | None) -> list[int]:
    """The versions above ``announced`` (all when None), ascending, without duplicates."""
    return sorted({v for v in versions if announced is None or v > announced})


def table_for(subject: str, schema: Any = None) -> str:
    """The table a subject feeds: the schema's ``icefjord.table`` property when it is a
    non-empty string, else the subject without ``icefjord.changes.`` and ``-value``
    (``icefjord.changes.inventory.customers-value`` -> ``inventory.customers``)."""
    if isinstance(schema, Mapping):
        declared = schema.get(TABLE_PROPERTY)
        if isinstance(declared, str) and declared:
            return declared
    name = subject.removesuffix(VALUE_SUFFIX)
    return name.removeprefix(CHANGES_TOPIC_PREFIX) or name


def _parse(version: RegisteredVersion) -> tuple[Any, str | None]:
    """``(schema dict, None)`` or ``(None, reason)`` when the text is not an Avro JSON schema."""
    if version.schema_type.upper() != "AVRO":
        return None, f"version {version.version} is a {version.schema_type} schema, not Avro"
    try:
        return json.loads(version.schema_text), None
    except json.JSONDecodeError as exc:
        return None, f"version {version.version} is not valid JSON: {exc}"


def plan_change(
    subject: str, base: RegisteredVersion | None, current: RegisteredVersion
) -> SchemaChange:
    """The ``SchemaChange`` that announces ``current``, planned from ``base`` (the last
    applied version; None for the first). Never raises: unreadable schemas give QUARANTINE
    with the reason."""
    new_schema, new_problem = _parse(current)
    old_schema, old_problem = (None, None) if base is None else _parse(base)
    problem = new_problem or old_problem
    if problem is not None:
        plan = EvolutionPlan(Verdict.QUARANTINE, reasons=(problem,))
    else:
        plan = plan_evolution(old_schema, new_schema)
    return SchemaChange(
        table=table_for(subject, new_schema),
        subject=subject,
        from_version=None if base is None else base.version,
        to_version=current.version,
        from_schema_id=None if base is None else base.schema_id,
        to_schema_id=current.schema_id,
        operations=plan.operations,
        verdict=plan.verdict,
        reason=plan.reason,
    )


def base_missing_change(
    subject: str, previous: SubjectState, current: RegisteredVersion
) -> SchemaChange:
    """A QUARANTINE for ``current`` when the last applied version is gone from the registry:
    without it no plan can be trusted."""
    schema, _ = _parse(current)
    return SchemaChange(
        table=table_for(subject, schema) if schema is not None else previous.table,
        subject=subject,
        from_version=previous.applied_version,
        to_version=current.version,
        from_schema_id=previous.applied_schema_id,
        to_schema_id=current.schema_id,
        verdict=Verdict.QUARANTINE,
        reason=f"applied version {previous.applied_version} of {subject} is no longer in the "
        "registry, so no evolution plan can be made",
    )


def _registered(subject: str, response: Any) -> RegisteredVersion:
    """Convert a ``RegisteredSchema``; raises RetryableError when fields are missing."""
    schema = getattr(response, "schema", None)
    version, schema_id = getattr(response, "version", None), getattr(response, "schema_id", None)
    if not isinstance(version, int) or not isinstance(schema_id, int) or schema is None:
        raise RetryableError(f"registry returned an incomplete version of {subject}")
    return RegisteredVersion(
        subject=subject,
        version=version,
        schema_id=schema_id,
        schema_text=schema.schema_str or "",
        schema_type=schema.schema_type or "AVRO",
    )


class SchemaWatcher:
    """Announces each new registry version of the watched subjects once (see module doc).

    ``history`` reads the control log back (see :func:`read_control_log`); it runs on the
    first :meth:`step` and again after a failed recovery.
    """

    def __init__(
        self,
        *,
        registry: RegistryClient,
        publisher: EventPublisher,
        history: Callable[[], Iterable[ControlEvent]],
        subject_pattern: re.Pattern[str],
        producer: str,
        metrics: WatcherMetrics,
        refold_interval_s: float | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._registry = registry
        self._publisher = publisher
        self._history = history
        self._pattern = subject_pattern
        self._producer = producer
        self._metrics = metrics
        self._refold_interval_s = refold_interval_s
        self._clock = clock
        self._recovered_at = 0.0
        self._state: WatcherState | None = None

    @property
    def state(self) -> WatcherState | None:
        """The current state; None until recovered."""
        return self._state

    def recover(self) -> WatcherState:
        """Rebuild the state from the control log. Raises RetryableError when Kafka fails."""
        state = recover_state(self._history())
        self._state = state
        self._recovered_at = self._clock()
        self._metrics.quarantined_tables.set(len(state.quarantined_tables()))
        log.info(
            "recovered announced versions",
            extra={"subjects": len(state.subjects), "quarantined": len(state.quarantined_tables())},
        )
        return state

    def step(self) -> None:
        """Recover if needed (or fold the control topic again when ``refold_interval_s`` has
        passed, which moves the checkpoint on), then poll once. Raises RetryableError when a
        dependency fails."""
        interval = self._refold_interval_s
        if self._state is None or (
            interval is not None and self._clock() - self._recovered_at >= interval
        ):
            self.recover()
        self.poll()

    def poll(self) -> list[SchemaChange]:
        """Announce every version newer than the last announced one; return what was sent.

        Raises RetryableError when the registry or Kafka fails (what was flushed before stays
        recorded), FatalError when the registry refuses our credentials.
        """
        state = self._state if self._state is not None else self.recover()
        subjects = self._call("list subjects", self._registry.get_subjects)
        announced: list[SchemaChange] = []
        for subject in sorted(s for s in subjects if self._pattern.search(s)):
            versions = self._call(subject, partial(self._registry.get_versions, subject))
            for version in pending_versions(versions, state.announced(subject)):
                change = self._announce(state.subjects.get(subject), subject, version)
                state = state.record(change)
                self._state = state
                self._metrics.quarantined_tables.set(len(state.quarantined_tables()))
                announced.append(change)
        self._metrics.poll_succeeded()
        return announced

    def _announce(self, previous: SubjectState | None, subject: str, version: int) -> SchemaChange:
        """Plan, publish and flush the change for ``version``; record nothing (the caller does)."""
        current = _registered(
            subject, self._call(subject, lambda: self._registry.get_version(subject, version))
        )
        try:
            base = self._base(previous, subject)
        except _NotFound:
            assert previous is not None  # only a known applied version can go missing
            change = base_missing_change(subject, previous, current)
        else:
            change = plan_change(subject, base, current)
        self._publisher.publish(ControlEvent.new(change.table, change, producer=self._producer))
        self._publisher.flush()
        self._metrics.versions_seen.labels(subject=subject).inc()
        self._metrics.plans.labels(verdict=change.verdict.value).inc()
        context = {
            "subject": subject,
            "table": change.table,
            "from_version": change.from_version,
            "to_version": change.to_version,
            "operations": len(change.operations),
        }
        if change.verdict is Verdict.QUARANTINE:
            log.warning(
                "ALERT schema change quarantined", extra=context | {"reason": change.reason}
            )
        else:
            log.info("schema change announced", extra=context)
        return change

    def _base(self, previous: SubjectState | None, subject: str) -> RegisteredVersion | None:
        """The last applied version of ``subject`` (soft-deleted ones included), or None.
        Raises _NotFound when the registry no longer has it."""
        if previous is None or previous.applied_version is None:
            return None
        applied = previous.applied_version
        response = self._call(
            subject, lambda: self._registry.get_version(subject, applied, deleted=True)
        )
        return _registered(subject, response)

    def _call(self, what: str, action: Callable[[], _T]) -> _T:
        """Run a registry call, mapping failures: 401/403 -> FatalError, 404 -> _NotFound
        (a RetryableError), anything else -> RetryableError; every failure is counted."""
        try:
            return action()
        except SchemaRegistryError as exc:
            self._metrics.registry_errors.inc()
            if exc.http_status_code in (401, 403):
                raise FatalError(f"registry refused access ({what}): {exc}") from exc
            if exc.http_status_code == 404:
                raise _NotFound(f"registry has no {what}: {exc}") from exc
            raise RetryableError(f"registry error ({what}): {exc}") from exc
        except Exception as exc:  # httpx connection errors, timeouts, bad JSON
            self._metrics.registry_errors.inc()
            raise RetryableError(f"registry unreachable ({what}): {exc}") from exc


class _NotFound(RetryableError):
    """A 404 from the registry: usually a subject or version deleted while we looked."""


def watcher_state_store(settings: WatcherSettings, codec: AvroCodec) -> StateStore:
    """Where the watcher's checkpoints of the control topic go."""
    return StateStore.of(settings, codec, FOLD)


def fold_control_log(
    settings: WatcherSettings, codec: AvroCodec, store: StateStore
) -> tuple[list[ControlEvent], Replayed]:
    """The events the watcher's state rests on: the newest checkpoint's and the control
    topic's after it, folded with :class:`WatcherFold` (a new checkpoint saved); and what the
    fold read. Raises RetryableError when Kafka fails or the fold takes over
    ``recovery_timeout_s``."""
    consumer = make_consumer(
        settings.kafka, recovery_group_id(settings.producer), **{"enable.partition.eof": True}
    )
    try:
        reader = ControlReader(consumer, codec, settings.control_topic)
        fold = WatcherFold()
        replayed = replay_control(
            consumer, reader, fold, store=store, timeout_s=settings.recovery_timeout_s
        )
        kept = fold.retained.events()
        events = (reader.decode_value(o.value, o.partition, o.offset) for o in kept)
        return [e for e in events if e is not None], replayed
    finally:
        consumer.close()


def recovery_group_id(producer: str) -> str:
    """A group id no other consumer uses (the recovery consumer never commits)."""
    return f"{producer}-recovery-{uuid.uuid4().hex[:12]}"


def build_watcher(
    settings: WatcherSettings,
    *,
    producer: Producer,
    registry: SchemaRegistryClient,
    metrics: WatcherMetrics,
) -> SchemaWatcher:
    """Wire a :class:`SchemaWatcher` to Kafka and the registry as ``settings`` say.

    The caller owns ``producer`` (flush and close it); each recovery opens and closes its own
    short-lived consumer.
    """
    codec = AvroCodec(registry)
    topic = settings.control_topic
    store = watcher_state_store(settings, codec)

    def history() -> list[ControlEvent]:
        return fold_control_log(settings, codec, store)[0]

    return SchemaWatcher(
        registry=registry,
        publisher=ControlPublisher(producer, codec, topic),
        history=history,
        subject_pattern=settings.subject_regex,
        producer=settings.producer,
        metrics=metrics,
        refold_interval_s=settings.control_state.interval_s,
    )
