"""The maintainer service: control events in, maintenance and its results out.

Each :meth:`MaintainerService.step`:

1. reads a batch from the control topic: a ``CommitDone`` advances the table's health (and
   a table it has not seen yet gets inspected); an operator's ``MaintenanceRequest`` runs at
   once (requests the maintainer itself published are skipped; requests older than
   ``request_max_age_s``, as after a consumer-group reset, are logged and skipped);
2. inspects the tables that are due: all of them every ``inspect_interval_s``, a table
   sooner once its commits since the last look may have crossed a trigger (never more often
   than ``inspect_min_interval_s``), and a table right after an action changed it;
3. evaluates the policies of every table, lets the planner pick, and runs at most one
   admitted action: it publishes the ``MaintenanceRequest``, executes, publishes the
   ``MaintenanceResult``;
4. commits the consumer's offsets.

Results are published at least once: an event that could not be flushed stays in the outbox
and goes out with the next step. Run one replica: two would plan the same actions.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer

from services.maintainer.catchup import hold_reason, writer_lag_ms
from services.maintainer.config import MaintainerSettings
from services.maintainer.execute import MaintenanceExecutor
from services.maintainer.health import TableHealth, TableInspection, apply_commit, compute_health
from services.maintainer.identifiers import MalformedIdentifierError, TableId, parse_table
from services.maintainer.inspect import TableInspector, UnknownTableError, list_tables
from services.maintainer.metrics import MaintainerMetrics
from services.maintainer.planner import PlannerLimits, PlannerState, plan
from services.maintainer.policy import Candidate, MaintenancePolicy, evaluate
from services.maintainer.priority import LeaseBoost
from services.maintainer.runner import SparkProcedureRunner
from shared.avro import AvroCodec
from shared.control import ControlPublisher, ControlReader, EventPublisher
from shared.errors import RetryableError
from shared.events import (
    CommitDone,
    ControlEvent,
    MaintenanceAction,
    MaintenanceRequest,
    MaintenanceResult,
    MaintenanceStatus,
)
from shared.lease import holds_writer_back

__all__ = [
    "EventSource",
    "Executor",
    "HealthBoard",
    "KafkaControlSource",
    "MaintainerService",
    "TableSource",
    "WriterSeen",
    "build_service",
]

log = logging.getLogger(__name__)

OWN_REQUEST_PREFIX = "maintainer/"
RECENT_COMMITS = 10
"""Writer commits per table whose durations tell how long one in flight may still take."""
WRITER_IDLE_S = 60.0
"""A table without a CommitDone for this long has no writer commit in flight to wait for."""


@dataclass(slots=True)
class WriterSeen:
    """What the writer's ``CommitDone`` events have said about one table, as this process
    saw them."""

    seen_ms: int
    """When this process last saw one (its own clock)."""
    recent_s: deque[float] = field(default_factory=lambda: deque(maxlen=RECENT_COMMITS))
    """The last commits' durations (``duration_ms``), for the waits around a lease."""
    write_path: str | None = None
    """The last commit's path (``write_path``): whether a rewrite holds the writer back."""
    lag_ms: int | None = None
    """How far behind the last commit that carried a source time was (``catchup.py``)."""

    def idle(self, now_ms: int) -> bool:
        """No CommitDone for :data:`WRITER_IDLE_S`: no writer commit in flight."""
        return now_ms - self.seen_ms > WRITER_IDLE_S * 1000


class EventSource(Protocol):
    """Control events in, offsets committed after they are handled."""

    def poll(self, timeout: float) -> list[ControlEvent]: ...

    def commit(self) -> None: ...


class Executor(Protocol):
    """What :class:`~services.maintainer.execute.MaintenanceExecutor` offers."""

    def execute(
        self,
        request: MaintenanceRequest,
        policy: MaintenancePolicy,
        *,
        writer_commit_s: float | None = None,
        writer_held: bool = True,
    ) -> MaintenanceResult: ...


class TableSource(Protocol):
    """The catalog as the service sees it."""

    def list_tables(self) -> list[str]: ...

    def inspect(self, table: TableId) -> TableInspection: ...


def _addressable(table: str) -> bool:
    """Whether ``table`` is a ``<namespace>.<table>`` the maintainer can name safely in SQL;
    others (nested namespaces, unusual characters) are left alone, with a log line."""
    try:
        parse_table(table)
    except MalformedIdentifierError:
        log.debug("table skipped: not a plain <namespace>.<table>", extra={"table": table})
        return False
    return True


def _version(health: TableHealth) -> tuple[int | None, int]:
    """What identifies the table's state: its snapshot and the commits seen since."""
    return (health.current_snapshot_id, health.commits_since_inspection)


class HealthBoard:
    """The current health of every table, shared by the service loop (writes) and the
    metrics endpoint (reads at scrape time)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._healths: dict[str, TableHealth] = {}

    def snapshot(self) -> dict[str, TableHealth]:
        with self._lock:
            return dict(self._healths)

    def get(self, table: str) -> TableHealth | None:
        with self._lock:
            return self._healths.get(table)

    def set(self, table: str, health: TableHealth) -> None:
        with self._lock:
            self._healths[table] = health

    def remove(self, table: str) -> None:
        with self._lock:
            self._healths.pop(table, None)


class KafkaControlSource:
    """The control topic through a group consumer; offsets committed by :meth:`commit`."""

    def __init__(self, consumer: Consumer, reader: ControlReader, max_events: int = 200) -> None:
        self._consumer = consumer
        self._reader = reader
        self._max_events = max_events
        reader.subscribe()

    def poll(self, timeout: float) -> list[ControlEvent]:
        return self._reader.poll(timeout=timeout, max_events=self._max_events)

    def commit(self) -> None:
        try:
            self._consumer.commit(asynchronous=False)
        except KafkaException as exc:
            error = exc.args[0] if exc.args else None
            if isinstance(error, KafkaError) and error.code() == KafkaError._NO_OFFSET:
                return
            raise RetryableError(f"cannot commit control topic offsets: {exc}") from exc


class _CatalogTables:
    """:class:`TableSource` over a :class:`TableInspector`."""

    def __init__(self, catalog: Any, inspector: TableInspector) -> None:
        self._catalog = catalog
        self._inspector = inspector

    def list_tables(self) -> list[str]:
        return list_tables(self._catalog)

    def inspect(self, table: TableId) -> TableInspection:
        return self._inspector.inspect(table)


class MaintainerService:
    """See the module doc. ``clock`` gives Unix time in seconds."""

    def __init__(
        self,
        settings: MaintainerSettings,
        *,
        source: EventSource,
        publisher: EventPublisher,
        executor: Executor,
        tables: TableSource,
        metrics: MaintainerMetrics,
        board: HealthBoard,
        clock: Callable[[], float] = time.time,
        before_first_action: Callable[[], None] | None = None,
    ) -> None:
        self._settings = settings
        self._before_first_action = before_first_action
        """Run once, before the first action is announced (the JVM's warm-up,
        ``services.maintainer.warm``): a maintainer that never acts never pays for it."""
        self._source = source
        self._publisher = publisher
        self._executor = executor
        self._tables = tables
        self._metrics = metrics
        self._clock = clock
        self._limits: PlannerLimits = settings.planner.limits()
        self._catch_up = settings.catch_up
        self._board = board
        self._planner = PlannerState()
        self._last_run: dict[tuple[str, MaintenanceAction], int] = {}
        self._wanted: set[str] = set()
        self._last_full_inspection_ms: int | None = None
        self._started_ms = self._now_ms()
        self._outbox: list[ControlEvent] = []
        self._skipped: dict[tuple[str, MaintenanceAction], tuple[int | None, int]] = {}
        self._writer: dict[str, WriterSeen] = {}
        """The writer's commits per table, from its ``CommitDone`` events."""
        self._waiting_since_ms: dict[str, int] = {}
        """Since when each table's rewrites wait for the writer to catch up."""
        self.results: list[MaintenanceResult] = []
        """Results of this process, newest last (bounded; for tests and the benchmark)."""

    def _now_ms(self) -> int:
        return int(self._clock() * 1000)

    def healths(self) -> dict[str, TableHealth]:
        """A copy of the current health model."""
        return self._board.snapshot()

    def step(self) -> None:
        """One round (see the module doc). Raises RetryableError when Kafka or the catalog
        fails; the next step picks up where this one stopped."""
        self._flush_outbox()
        for event in self._source.poll(self._settings.poll_timeout_s):
            self.handle(event)
        self.inspect_due()
        self.maintain_once()
        self._source.commit()

    def _writer_commit_s(self, table: str) -> float | None:
        """How long a writer commit to ``table`` in flight may take, for the executor's
        waits around its lease: the slowest recent one; 0 when the writer has been quiet on
        the table for :data:`WRITER_IDLE_S` (nothing to wait for); None before any was seen."""
        seen = self._writer.get(table)
        if seen is None:
            return None
        return 0.0 if seen.idle(self._now_ms()) else max(seen.recent_s)

    # -- events ------------------------------------------------------------------------

    def handle(self, event: ControlEvent) -> None:
        """Apply one control event (see the module doc); other payloads are ignored."""
        payload = event.payload
        if isinstance(payload, CommitDone):
            self._on_commit(payload)
        elif isinstance(payload, MaintenanceRequest):
            if payload.requested_by.startswith(OWN_REQUEST_PREFIX):
                return
            age_ms = self._now_ms() - event.produced_at_ms
            if age_ms > self._settings.request_max_age_s * 1000:
                log.warning(
                    "stale maintenance request skipped",
                    extra={
                        "request_id": payload.request_id,
                        "table": payload.table,
                        "age_s": age_ms / 1000,
                    },
                )
                return
            self.run_request(payload, announce=False)

    def _on_commit(self, commit: CommitDone) -> None:
        try:
            table = str(parse_table(commit.table))
        except MalformedIdentifierError:
            return
        if not self._settings.maintains(table):
            return
        now_ms = self._now_ms()
        seen = self._writer.get(table)
        if seen is None:
            seen = self._writer[table] = WriterSeen(now_ms)
        seen.seen_ms = now_ms
        seen.recent_s.append(commit.duration_ms / 1000)
        seen.write_path = commit.write_path
        lag_ms = writer_lag_ms(commit)
        if lag_ms is not None:
            seen.lag_ms = lag_ms
        health = self._board.get(table)
        if health is None:
            self._wanted.add(table)
        else:
            self._board.set(table, apply_commit(health, commit))

    # -- inspection --------------------------------------------------------------------

    def _needs_look(self, health: TableHealth, now_ms: int) -> bool:
        if now_ms - health.inspected_at_ms < self._settings.inspect_min_interval_s * 1000:
            return False
        if health.commits_since_inspection >= self._settings.inspect_after_commits:
            return True
        policy = self.policy_for(health.table)
        crossed_files = (
            health.data_files_since_inspection > 0
            and health.partition_files_max >= policy.compact_min_small_files
        )
        crossed_deletes = (
            health.delete_files_since_inspection > 0
            and health.position_delete_files >= policy.rewrite_deletes_min_files
        )
        return crossed_files or crossed_deletes

    def inspect_due(self) -> list[str]:
        """Inspect the tables that are due; returns their names. A table whose inspection
        fails keeps its last health (logged); listing the catalog failing raises."""
        now_ms = self._now_ms()
        full = self._last_full_inspection_ms
        due = set(self._wanted)
        if full is None or now_ms - full >= self._settings.inspect_interval_s * 1000:
            listed = {
                t
                for t in self._tables.list_tables()
                if _addressable(t) and self._settings.maintains(t)
            }
            for gone in set(self.healths()) - listed:
                self._board.remove(gone)
            due |= listed
            self._last_full_inspection_ms = now_ms
        due |= {t for t, h in self.healths().items() if self._needs_look(h, now_ms)}
        inspected: list[str] = []
        for table in sorted(due):
            self._wanted.discard(table)
            try:
                inspection = self._tables.inspect(parse_table(table))
            except UnknownTableError:
                self._board.remove(table)
                continue
            except RetryableError as exc:
                log.warning("inspection failed", extra={"table": table, "error": str(exc)})
                continue
            policy = self.policy_for(table)
            self._board.set(
                table, compute_health(inspection, small_file_bytes=policy.small_file_bytes)
            )
            inspected.append(table)
        return inspected

    # -- maintenance -------------------------------------------------------------------

    def policy_for(self, table: str) -> MaintenancePolicy:
        return self._settings.policy_for(table)

    def _last_runs(self, table: str, policy: MaintenancePolicy) -> dict[MaintenanceAction, int]:
        runs = {action: ms for (name, action), ms in self._last_run.items() if name == table}
        if MaintenanceAction.REMOVE_ORPHAN_FILES not in runs:
            # Unknown after a restart: due orphan_initial_delay_s after the start.
            runs[MaintenanceAction.REMOVE_ORPHAN_FILES] = self._started_ms + int(
                (self._settings.orphan_initial_delay_s - policy.orphan_interval_s) * 1000
            )
        return runs

    def maintain_once(self) -> MaintenanceResult | None:
        """Evaluate every table's policies, plan, and run the first admitted action."""
        now_ms = self._now_ms()
        candidates: list[Candidate] = []
        for table, health in sorted(self.healths().items()):
            policy = self.policy_for(table)
            found = evaluate(health, policy, now_ms, self._last_runs(table, policy))
            # An action that found nothing to do waits until the table changes.
            candidates.extend(
                c for c in found if self._skipped.get((table, c.action)) != _version(health)
            )
        candidates = self._catching_up(candidates, now_ms)
        if not candidates:
            return None
        self._planner = self._planner.pruned(now_ms, int(self._limits.window_s * 1000))
        outcome = plan(candidates, self._planner, self._limits, now_ms)
        for candidate, why in outcome.deferred:
            log.debug(
                "maintenance deferred",
                extra={"table": candidate.table, "action": candidate.action.value, "why": why},
            )
        if not outcome.admitted:
            return None
        chosen = outcome.admitted[0]
        return self.run_request(chosen.to_request(str(uuid.uuid4())), announce=True)

    def _catching_up(self, candidates: list[Candidate], now_ms: int) -> list[Candidate]:
        """``candidates`` without the rewrites that wait for the writer to catch up
        (``catchup.py``); logs when a table's rewrites begin and stop waiting."""
        kept: list[Candidate] = []
        waiting: dict[str, str] = {}
        for candidate in candidates:
            table = candidate.table
            seen = self._writer.get(table)
            lag_ms = None if seen is None or seen.idle(now_ms) else seen.lag_ms
            why = hold_reason(
                candidate, lag_ms, self._waiting_since_ms.get(table), self._catch_up, now_ms
            )
            if why is None:
                kept.append(candidate)
            else:
                waiting.setdefault(candidate.table, why)
        for table, why in waiting.items():
            if table not in self._waiting_since_ms:
                self._waiting_since_ms[table] = now_ms
                self._metrics.catch_up_waits.labels(table=table).inc()
                log.info("maintenance waits for the writer", extra={"table": table, "why": why})
        for table in set(self._waiting_since_ms) - set(waiting):
            waited_s = (now_ms - self._waiting_since_ms.pop(table)) / 1000
            log.info(
                "maintenance stops waiting for the writer",
                extra={"table": table, "waited_s": round(waited_s, 1)},
            )
        return kept

    def run_request(self, request: MaintenanceRequest, *, announce: bool) -> MaintenanceResult:
        """Execute ``request`` (publishing it first when ``announce``), publish its result.

        Raises RetryableError only when the announcement cannot be delivered (then nothing
        ran); a result that cannot be delivered stays in the outbox.
        """
        if self._before_first_action is not None:
            self._before_first_action()  # raises: tried again before the next action
            self._before_first_action = None
        if announce:
            self._publisher.publish(
                ControlEvent.new(request.table, request, producer=self._settings.producer)
            )
            self._publisher.flush()
        started_ms = self._now_ms()
        self._planner = self._planner.started(
            request.request_id, request.table, request.action, started_ms
        )
        self._last_run[(request.table, request.action)] = started_ms
        try:
            canonical = str(parse_table(request.table))
            policy = self.policy_for(canonical)
        except MalformedIdentifierError:
            canonical = request.table
            policy = self._settings.policy
        log.info(
            "maintenance started",
            extra={
                "request_id": request.request_id,
                "table": request.table,
                "action": request.action.value,
                "partition": request.partition,
                "reason": request.reason,
                "requested_by": request.requested_by,
            },
        )
        seen = self._writer.get(canonical)
        result = self._executor.execute(
            request,
            policy,
            writer_commit_s=self._writer_commit_s(canonical),
            writer_held=holds_writer_back(seen.write_path if seen else None),
        )
        self._planner = self._planner.finished(request.request_id, self._now_ms())
        self._metrics.record(result)
        self.results = [*self.results[-99:], result]
        log.info(
            "maintenance finished",
            extra={
                "request_id": result.request_id,
                "table": result.table,
                "action": result.action.value,
                "status": result.status.value,
                "files_before": result.files_before,
                "files_after": result.files_after,
                "duration_ms": result.duration_ms,
                "error": result.error,
            },
        )
        health = self._board.get(result.table)
        if health is not None:
            self._wanted.add(result.table)
            key = (result.table, result.action)
            if result.status is MaintenanceStatus.SKIPPED:
                self._skipped[key] = _version(health)
            else:
                self._skipped.pop(key, None)
        self._outbox.append(
            ControlEvent.new(result.table, result, producer=self._settings.producer)
        )
        self._flush_outbox()
        return result

    def _flush_outbox(self) -> None:
        if not self._outbox:
            return
        pending, self._outbox = self._outbox, []
        try:
            for event in pending:
                self._publisher.publish(event)
            self._publisher.flush()
        except Exception:
            self._outbox = pending + self._outbox
            raise


def build_service(
    settings: MaintainerSettings,
    *,
    spark: Any,
    catalog: Any,
    producer: Producer,
    consumer: Consumer,
    registry: Any,
    metrics_registry: Any,
    stop: threading.Event,
    clock: Callable[[], float] = time.time,
    before_first_action: Callable[[], None] | None = None,
) -> MaintainerService:
    """Wire a :class:`MaintainerService` to Kafka, the catalog and Spark.

    ``registry`` is the schema registry client; ``metrics_registry`` the Prometheus
    registry the metrics go on; ``before_first_action`` runs once before the first action.
    The caller owns (and closes) the clients.
    """
    codec = AvroCodec(registry)
    topic = settings.control_topic
    inspector = TableInspector(catalog, clock)
    executor = MaintenanceExecutor(
        SparkProcedureRunner(spark),
        inspector,
        catalog=settings.catalog.name,
        max_attempts=settings.max_attempts,
        retry_delay_s=settings.retry_delay_s,
        orphan_floor_ms=int(settings.orphan_floor_s * 1000),
        lease_s=settings.compaction_lease_s,
        lease_settle_s=settings.compaction_lease_settle_s,
        clock=clock,
        stop=stop,
        boost=LeaseBoost(settings.compaction_lease_nice).boosted,
    )
    board = HealthBoard()
    metrics = MaintainerMetrics.create(metrics_registry, board.snapshot, clock)
    return MaintainerService(
        settings,
        source=KafkaControlSource(consumer, ControlReader(consumer, codec, topic)),
        publisher=ControlPublisher(producer, codec, topic),
        executor=executor,
        tables=_CatalogTables(catalog, inspector),
        metrics=metrics,
        board=board,
        clock=clock,
        before_first_action=before_first_action,
    )
