"""SchemaWatcher's shell with in-memory fakes: polling, restarts, failures, metrics, settings."""

from __future__ import annotations

import json
import re
import threading
from typing import Any

import httpx
import pytest
from confluent_kafka.schema_registry import RegisteredSchema, Schema
from confluent_kafka.schema_registry.error import SchemaRegistryError
from prometheus_client import CollectorRegistry

from services.schema_watcher.__main__ import EXIT_BAD_SETTINGS, main
from services.schema_watcher.config import DEFAULT_SUBJECT_PATTERN, WatcherSettings
from services.schema_watcher.metrics import WatcherMetrics
from services.schema_watcher.watcher import SchemaWatcher
from shared.endpoint import Health
from shared.errors import FatalError, RetryableError
from shared.events import ControlEvent, SchemaChange, Verdict
from shared.loop import run_loop

pytestmark = pytest.mark.unit

NS = "inventory"
SUBJECT = f"icefjord.changes.{NS}.customers-value"
TABLE = f"{NS}.customers"


def customers(*extra: dict[str, Any], visits: str = "long") -> dict[str, Any]:
    """A change-record value schema (change_record.v2.avsc shape) for inventory.customers."""
    row_fields = [{"name": "id", "type": "int"}, {"name": "visits", "type": visits}, *extra]
    return {
        "type": "record",
        "name": "CustomersChange",
        "namespace": f"io.icefjord.changes.{NS}",
        "icefjord.table": TABLE,
        "icefjord.key": ["id"],
        "fields": [
            {
                "name": "op",
                "type": {
                    "type": "enum",
                    "name": "Operation",
                    "namespace": "io.icefjord",
                    "symbols": ["CREATE", "UPDATE", "DELETE", "READ", "TRUNCATE"],
                },
            },
            {"name": "position", "type": "string"},
            {"name": "source_ts_ms", "type": "long"},
            {"name": "tx_id", "type": ["null", "string"], "default": None},
            {"name": "source", "type": {"type": "map", "values": "string"}},
            {
                "name": "key",
                "type": {
                    "type": "record",
                    "name": "CustomersKey",
                    "fields": [{"name": "id", "type": "int"}],
                },
            },
            {
                "name": "after",
                "type": ["null", {"type": "record", "name": "CustomersRow", "fields": row_fields}],
                "default": None,
            },
        ],
    }


NICKNAME = {"name": "nickname", "type": ["null", "string"], "default": None}
EMAIL = {"name": "email", "type": ["null", "string"], "default": None}


class FakeRegistry:
    """The three SchemaRegistryClient calls the watcher makes, over a dict."""

    def __init__(self) -> None:
        self.versions: dict[str, dict[int, RegisteredSchema]] = {}
        self.next_id = 100
        self.last_version: dict[str, int] = {}
        self.failure: Exception | None = None
        self.listed: list[str] = []

    def register(self, subject: str, schema: dict[str, Any] | str) -> int:
        text = schema if isinstance(schema, str) else json.dumps(schema)
        versions = self.versions.setdefault(subject, {})
        # Registries never reuse a version number, not even after a hard delete.
        version = self.last_version.get(subject, 0) + 1
        self.last_version[subject] = version
        self.next_id += 1
        versions[version] = RegisteredSchema(
            schema_id=self.next_id,
            guid=None,
            schema=Schema(text, "AVRO"),
            subject=subject,
            version=version,
        )
        return version

    def _check(self) -> None:
        if self.failure is not None:
            raise self.failure

    def get_subjects(self) -> list[str]:
        self._check()
        return list(self.versions)

    def get_versions(self, subject_name: str) -> list[int]:
        self._check()
        self.listed.append(subject_name)
        return list(self.versions[subject_name])

    def get_version(self, subject_name: str, version: int, deleted: bool = False) -> Any:
        self._check()
        found = self.versions.get(subject_name, {}).get(version)
        if found is None:
            raise SchemaRegistryError(404, 40402, "Version not found")
        return found


class FakePublisher:
    """Queues on publish, delivers on flush (or fails the flush when told to)."""

    def __init__(self, delivered: list[ControlEvent] | None = None) -> None:
        self.delivered = delivered if delivered is not None else []
        self.queued: list[ControlEvent] = []
        self.fail_flush = False

    def publish(self, event: ControlEvent) -> None:
        self.queued.append(event)

    def flush(self, timeout: float = 30.0) -> None:
        if self.fail_flush:
            self.queued.clear()
            raise RetryableError("broker down")
        self.delivered.extend(self.queued)
        self.queued.clear()

    def changes(self) -> list[SchemaChange]:
        return [e.payload for e in self.delivered if isinstance(e.payload, SchemaChange)]


class Clock:
    def __init__(self, now: float = 1_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def make_watcher(
    registry: FakeRegistry,
    log: list[ControlEvent],
    *,
    pattern: str = DEFAULT_SUBJECT_PATTERN,
    metrics: WatcherMetrics | None = None,
) -> tuple[SchemaWatcher, FakePublisher, WatcherMetrics]:
    """A watcher whose control log is ``log`` (shared between 'restarts')."""
    publisher = FakePublisher(log)
    metrics = metrics or WatcherMetrics.create(CollectorRegistry())
    watcher = SchemaWatcher(
        registry=registry,
        publisher=publisher,
        history=lambda: list(log),
        subject_pattern=re.compile(pattern),
        producer="schema-watcher-test",
        metrics=metrics,
    )
    return watcher, publisher, metrics


def value(registry: CollectorRegistry, name: str, **labels: str) -> float:
    found = registry.get_sample_value(f"icefjord_watcher_{name}", labels)
    return 0.0 if found is None else found


# --- announcing -------------------------------------------------------------------------


def test_each_version_is_announced_once_in_order_and_survives_a_restart() -> None:
    registry = FakeRegistry()
    registry.register(SUBJECT, customers())
    registry.register(SUBJECT, customers(NICKNAME))
    registry.register(SUBJECT, customers(NICKNAME, visits="int"))
    log: list[ControlEvent] = []
    watcher, publisher, _ = make_watcher(registry, log)

    watcher.step()
    changes = publisher.changes()
    assert [(c.from_version, c.to_version, c.verdict) for c in changes] == [
        (None, 1, Verdict.APPLY),
        (1, 2, Verdict.APPLY),
        (2, 3, Verdict.QUARANTINE),
    ]
    assert all(e.table == TABLE and e.producer == "schema-watcher-test" for e in log)
    assert [c.to_schema_id for c in changes] == [
        registry.versions[SUBJECT][v].schema_id for v in (1, 2, 3)
    ]

    watcher.step()
    assert len(log) == 3

    restarted, _, _ = make_watcher(registry, log)
    restarted.step()
    assert len(log) == 3

    registry.register(SUBJECT, customers(NICKNAME, EMAIL))
    restarted.step()
    assert len(log) == 4
    latest = publisher.changes()[-1]
    # v4 is planned from v2, the last applied version, not from the quarantined v3.
    assert (latest.from_version, latest.to_version, latest.verdict) == (2, 4, Verdict.APPLY)
    assert [op.path for op in latest.operations] == [("email",)]


def test_events_carry_the_plan_operations() -> None:
    registry = FakeRegistry()
    registry.register(SUBJECT, customers())
    registry.register(SUBJECT, customers(NICKNAME))
    watcher, publisher, _ = make_watcher(registry, [])
    watcher.step()
    second = publisher.changes()[1]
    assert [(op.kind.value, op.path) for op in second.operations] == [("ADD_COLUMN", ("nickname",))]


def test_only_subjects_matching_the_pattern_are_read() -> None:
    registry = FakeRegistry()
    registry.register(SUBJECT, customers())
    registry.register("icefjord.changes.inventory.customers-key", '{"type": "int"}')
    registry.register("icefjord.control-value", '{"type": "string"}')
    watcher, publisher, _ = make_watcher(registry, [])
    watcher.step()
    assert registry.listed == [SUBJECT]
    assert [c.subject for c in publisher.changes()] == [SUBJECT]


def test_malformed_schema_text_is_announced_as_quarantine() -> None:
    registry = FakeRegistry()
    registry.register(SUBJECT, customers())
    registry.register(SUBJECT, "{ this is not json")
    watcher, publisher, _ = make_watcher(registry, [])
    watcher.step()
    bad = publisher.changes()[1]
    assert bad.verdict is Verdict.QUARANTINE
    assert bad.reason is not None and "JSON" in bad.reason


def test_a_failed_flush_does_not_record_the_version() -> None:
    registry = FakeRegistry()
    registry.register(SUBJECT, customers())
    log: list[ControlEvent] = []
    watcher, publisher, _ = make_watcher(registry, log)
    publisher.fail_flush = True
    with pytest.raises(RetryableError):
        watcher.step()
    assert watcher.state is not None and watcher.state.announced(SUBJECT) is None
    publisher.fail_flush = False
    watcher.step()
    assert [c.to_version for c in publisher.changes()] == [1]


def test_a_deleted_applied_base_quarantines_the_next_version() -> None:
    registry = FakeRegistry()
    registry.register(SUBJECT, customers())
    watcher, publisher, _ = make_watcher(registry, [])
    watcher.step()
    del registry.versions[SUBJECT][1]  # hard-deleted
    registry.register(SUBJECT, customers(NICKNAME))
    watcher.step()
    latest = publisher.changes()[-1]
    assert (latest.from_version, latest.to_version, latest.verdict) == (1, 2, Verdict.QUARANTINE)
    assert latest.reason is not None and "no longer in the registry" in latest.reason


# --- registry failures ------------------------------------------------------------------


def test_registry_down_is_retryable_counted_and_marks_not_ready() -> None:
    registry = FakeRegistry()
    registry.register(SUBJECT, customers())
    registry.failure = httpx.ConnectError("connection refused")
    prometheus = CollectorRegistry()
    metrics = WatcherMetrics.create(prometheus)
    watcher, publisher, _ = make_watcher(registry, [], metrics=metrics)

    with pytest.raises(RetryableError, match="registry unreachable"):
        watcher.step()
    assert value(prometheus, "registry_errors_total") == 1

    stop = threading.Event()
    health = Health()
    health.ready()
    calls = 0

    def step() -> None:
        nonlocal calls
        calls += 1
        if calls == 2:
            stop.set()  # stop after the retry that follows the first failure
        watcher.step()

    run_loop(step, stop, health, retry_delay=0.01)
    assert calls == 2
    assert not health.is_ready
    assert "registry unreachable" in health.reason
    assert publisher.changes() == []
    assert value(prometheus, "last_successful_poll_timestamp_seconds") == 0

    registry.failure = None  # back: the watcher catches up
    watcher.step()
    assert [c.to_version for c in publisher.changes()] == [1]


@pytest.mark.parametrize(
    ("status", "expected"),
    [(500, RetryableError), (503, RetryableError), (401, FatalError), (403, FatalError)],
)
def test_registry_error_statuses_map_to_retryable_or_fatal(
    status: int, expected: type[Exception]
) -> None:
    registry = FakeRegistry()
    registry.failure = SchemaRegistryError(status, -1, "nope")
    watcher, _, _ = make_watcher(registry, [])
    with pytest.raises(expected, match="nope"):
        watcher.step()


def test_recovery_failure_is_retried_on_the_next_step() -> None:
    registry = FakeRegistry()
    registry.register(SUBJECT, customers())
    attempts: list[int] = []
    log: list[ControlEvent] = []

    def history() -> list[ControlEvent]:
        attempts.append(1)
        if len(attempts) == 1:
            raise RetryableError("kafka down")
        return list(log)

    publisher = FakePublisher(log)
    watcher = SchemaWatcher(
        registry=registry,
        publisher=publisher,
        history=history,
        subject_pattern=re.compile(DEFAULT_SUBJECT_PATTERN),
        producer="t",
        metrics=WatcherMetrics.create(CollectorRegistry()),
    )
    with pytest.raises(RetryableError):
        watcher.step()
    assert publisher.changes() == []  # nothing announced before the log was read back
    watcher.step()
    watcher.step()
    assert len(attempts) == 2
    assert [c.to_version for c in publisher.changes()] == [1]


# --- metrics ----------------------------------------------------------------------------


def test_metrics_follow_the_announcements() -> None:
    prometheus = CollectorRegistry()
    clock = Clock(1_000.0)
    metrics = WatcherMetrics.create(prometheus, clock=clock)
    registry = FakeRegistry()
    registry.register(SUBJECT, customers())
    registry.register(SUBJECT, customers(visits="int"))
    log: list[ControlEvent] = []
    watcher, _, _ = make_watcher(registry, log, metrics=metrics)

    clock.now = 1_030.0
    assert value(prometheus, "seconds_since_last_successful_poll") == 30.0
    watcher.step()
    assert value(prometheus, "versions_seen_total", subject=SUBJECT) == 2
    assert value(prometheus, "plans_total", verdict="APPLY") == 1
    assert value(prometheus, "plans_total", verdict="QUARANTINE") == 1
    assert value(prometheus, "quarantined_tables") == 1
    assert value(prometheus, "last_successful_poll_timestamp_seconds") == 1_030.0
    clock.now = 1_045.5
    assert value(prometheus, "seconds_since_last_successful_poll") == 15.5

    # A restarted watcher knows the table is still quarantined before it announces anything.
    restarted_metrics = CollectorRegistry()
    restarted, _, _ = make_watcher(registry, log, metrics=WatcherMetrics.create(restarted_metrics))
    restarted.step()
    assert value(restarted_metrics, "quarantined_tables") == 1
    assert value(restarted_metrics, "versions_seen_total", subject=SUBJECT) == 0

    registry.register(SUBJECT, customers(NICKNAME))
    restarted.step()
    assert value(restarted_metrics, "quarantined_tables") == 0


# --- settings and entry point -----------------------------------------------------------


def test_settings_defaults_and_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    defaults = WatcherSettings()
    assert defaults.subject_regex.search(SUBJECT)
    assert not defaults.subject_regex.search("icefjord.changes.inventory.customers-key")
    assert not defaults.subject_regex.search("icefjord.control-value")
    assert (defaults.poll_interval_s, defaults.metrics.port) == (2.0, 9402)
    monkeypatch.setenv("ICEFJORD_WATCHER_POLL_INTERVAL_S", "0.5")
    monkeypatch.setenv("ICEFJORD_WATCHER_METRICS__HOST", "127.0.0.1")
    monkeypatch.setenv("ICEFJORD_WATCHER_KAFKA__BOOTSTRAP_SERVERS", "broker:9093")
    monkeypatch.setenv("ICEFJORD_WATCHER_TOPIC_REPLICATION_FACTOR", "1")
    settings = WatcherSettings()
    assert settings.poll_interval_s == 0.5
    assert (settings.metrics.host, settings.metrics.port) == ("127.0.0.1", 9402)
    assert settings.kafka.bootstrap_servers == "broker:9093"
    request = settings.control_topic_request()
    assert (request.name, request.replication_factor) == ("icefjord.control", 1)
    assert request.config["min.insync.replicas"] == "1"
    assert request.partitions >= 1


def test_invalid_settings_exit_with_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("ICEFJORD_WATCHER_SUBJECT_PATTERN", "([unclosed")
    assert main() == EXIT_BAD_SETTINGS
    err = capsys.readouterr().err.strip()
    assert "subject_pattern" in err
    assert len(err.splitlines()) == 1
