"""End to end (``make test-e2e``): the demo under faults, Iceberg proven equal to the source.

The whole pipeline runs as processes against the session's local stack: PostgreSQL (or the
generator where PostgreSQL is not installed), Debezium on Kafka Connect, and the four
services. During the workload each service is killed with SIGKILL at random moments several
times and the broker is restarted once. At the end every Iceberg table must equal its source
(counts, checksums, then every row and column), no key may appear twice, and valid data must
have produced no dead letter. Needs the iceberg-writer and maintainer packages.
"""

from __future__ import annotations

import importlib.util
import io
import re
import uuid
from collections.abc import Iterator

import pytest
from harness import Stack, command_lines_with, own_pipeline, stack_secrets
from rich.console import Console

from icefjord.demo.engines import ENGINES
from icefjord.demo.plan import WorkloadSpec
from icefjord.demo.run import DemoOptions, DemoResult, print_summary, run_demo
from icefjord.local.connect import KafkaConnect
from icefjord.local.services import service_processes
from icefjord.local.settings import LocalSettings

PIPELINE = (
    "services.cdc_normalizer",
    "services.schema_watcher",
    "services.iceberg_writer",
    "services.maintainer",
)


MISSING = [m for m in PIPELINE if importlib.util.find_spec(m) is None]
pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(bool(MISSING), reason=f"not written yet: {', '.join(MISSING)}"),
]


@pytest.fixture
def e2e_settings(stack: Stack) -> Iterator[LocalSettings]:
    why = "the fault injection restarts the broker: needs the session's own stack"
    with own_pipeline(stack, why) as settings:
        yield settings


def _run(settings: LocalSettings, options: DemoOptions) -> tuple[DemoResult, str]:
    out = io.StringIO()
    console = Console(file=out, width=140, force_terminal=False)
    try:
        result = run_demo(settings, options, console)
        print_summary(result, console)
    finally:
        print(out.getvalue()[-20_000:])  # shown by pytest when the test fails
    return result, out.getvalue()


def _service_warnings(settings: LocalSettings, per_log: int = 12) -> str:
    """The last warnings and errors of each service's log (JSON lines, and librdkafka's
    ``%3|``/``%4|`` lines): what a failed catch-up shows first."""
    out = []
    for path in sorted((settings.state / "run").glob("service-*.log")):
        lines = path.read_text(errors="replace").splitlines()
        picked = [
            line[:400]
            for line in lines
            if '"level": "WARNING"' in line
            or '"level": "ERROR"' in line
            or line.startswith(("%3|", "%4|", "==="))
        ]
        out.append(f"--- {path.name}: {len(lines)} lines, the last warnings:")
        out.extend(picked[-per_log:])
    return "\n".join(out)


def _own_exits(settings: LocalSettings) -> list[str]:
    """The log lines in which a service ended by itself (``<service> failed|crashed``)."""
    ended = re.compile(r'"level": "ERROR".*"msg": "[a-z-]+ (failed|crashed)"')
    return [
        line[:4000]
        for path in sorted((settings.state / "run").glob("service-*.log"))
        for line in path.read_text(errors="replace").splitlines()
        if ended.search(line)
    ]


def _stall_lines(transcript: str) -> str:
    """The demo's own account of a stall: from ``not caught up`` to the verification."""
    start = transcript.find("not caught up")
    end = transcript.find("verifying every table", start)
    return transcript[start:end] if start >= 0 else ""


def _assert_proven(
    result: DemoResult, transcript: str, settings: LocalSettings | None = None
) -> None:
    assert result.caught_up, "\n".join(
        [
            _stall_lines(transcript),
            _service_warnings(settings) if settings is not None else "",
            transcript[-3000:],
        ]
    )
    assert {t.table.split(".")[-1] for t in result.report.tables} >= {
        "customers",
        "orders",
        "payments",
        "shipments",
    }
    assert result.report.duplicate_keys == 0, transcript[-4000:]
    assert result.dead_letters == 0, transcript[-4000:]
    for table in result.report.tables:
        assert table.ok, (table, transcript[-4000:])
    assert result.exit_code == 0


@pytest.mark.timeout(2700)
@pytest.mark.production_layout  # the S3 run adds a 60 s outage of the store to the faults
def test_iceberg_equals_the_source_after_kills_and_a_broker_restart(
    e2e_settings: LocalSettings,
) -> None:
    tag = uuid.uuid4().hex[:6]
    options = DemoOptions(
        workload=WorkloadSpec(rate=100, duration_s=150, initial_rows=300, seed=17),
        schema=f"e2e_{tag}",
        topic_prefix=f"e2e{tag}",
        dead_letter_topic=f"deadletter_{tag}",
        service_env={"normalizer": {"ICEFJORD_NORMALIZER_DEAD_LETTER_TOPIC": f"deadletter_{tag}"}},
        faults=True,
        kills_per_service=2,
        restart_kafka=True,
        store_outage_s=60.0,  # with the warehouse on S3 (ICEFJORD_TEST_STORAGE=s3)
        catch_up_timeout_s=900,
        stop_services=True,
    )
    result, transcript = _run(e2e_settings, options)
    assert [r for r in result.faults if not r.done] == []
    kills = [r for r in result.faults if r.fault.kind == "kill"]
    assert {r.fault.target for r in kills} == {"normalizer", "watcher", "writer", "maintainer"}
    assert len(kills) == 8
    assert any(r.fault.kind == "restart_kafka" for r in result.faults)
    outages = [r for r in result.faults if r.fault.kind == "store_outage"]
    assert len(outages) == (1 if e2e_settings.warehouse_store == "s3" else 0)
    # Killed services are restarted by the demo; none may have ended by itself (a store or
    # broker outage makes a service wait and retry).
    assert _own_exits(e2e_settings) == []
    _assert_proven(result, transcript, e2e_settings)


@pytest.mark.trino
@pytest.mark.timeout(1500)
def test_every_engine_reads_every_table_during_and_after_the_demo(
    e2e_settings: LocalSettings,
) -> None:
    """While the demo runs, at three random moments, every engine (Spark, pyiceberg to
    Arrow, pandas and DuckDB, DuckDB's iceberg extension, Trino) reads every table at the
    same pinned snapshots and each read equals Spark's; after it, each equals the source.
    The tables are the writer's own, with its deletes among them."""
    from shared.catalog import open_catalog
    from shared.settings import CatalogSettings

    tag = uuid.uuid4().hex[:6]
    options = DemoOptions(
        workload=WorkloadSpec(rate=100, duration_s=90, initial_rows=300, seed=23),
        schema=f"readers_{tag}",
        topic_prefix=f"readers{tag}",
        readers=ENGINES,
        probes=3,
        stop_services=True,
    )
    result, transcript = _run(e2e_settings, options)
    _assert_proven(result, transcript, e2e_settings)
    assert set(result.readers) == set(ENGINES) - {"spark"}
    for engine, report in result.readers.items():
        assert report.ok, (engine, [t.samples for t in report.tables])
        assert {t.table.split(".")[-1] for t in report.tables} >= {"customers", "orders"}
    assert len(result.probes) == 3
    catalog = open_catalog(
        CatalogSettings(name=e2e_settings.catalog_name, local_state_dir=e2e_settings.state)
    )
    deletes = 0
    for probe in result.probes:
        assert probe.ok, probe.describe()
        assert len(probe.snapshots) >= 4
        assert set(probe.reports) == set(ENGINES) - {"spark"}
        for identifier, snapshot in probe.snapshots.items():
            files = catalog.load_table(identifier).inspect.files(snapshot_id=snapshot)
            deletes += sum(1 for content in files.column("content").to_pylist() if content == 1)
    assert deletes > 0, "no probe met a delete file: the engines applied no deletes"


@pytest.mark.timeout(1500)
def test_a_bulk_snapshot_with_changes_around_the_copy_ends_equal(
    e2e_settings: LocalSettings,
) -> None:
    """The initial rows are copied in bulk (icefjord.bulk) while 400 transactions run from
    the connector's registration until the copy is done: changes before the slot, between
    the slot and the copy's snapshot (in both the copy and the stream) and after it. Then
    the timed workload with its schema changes."""
    tag = uuid.uuid4().hex[:6]
    options = DemoOptions(
        workload=WorkloadSpec(rate=200, duration_s=60, initial_rows=20_000, seed=29),
        schema=f"bulk_{tag}",
        topic_prefix=f"bulk{tag}",
        dead_letter_topic=f"deadletter_{tag}",
        service_env={"normalizer": {"ICEFJORD_NORMALIZER_DEAD_LETTER_TOPIC": f"deadletter_{tag}"}},
        snapshot="bulk",
        during_copy=400,
        catch_up_timeout_s=600,
        stop_services=True,
    )
    result, transcript = _run(e2e_settings, options)
    if result.source != "postgres":
        pytest.skip("a bulk snapshot needs PostgreSQL")
    copied = re.search(r"bulk load: ([\d,]+) rows copied", transcript)
    assert copied is not None, transcript[-4000:]
    assert int(copied.group(1).replace(",", "")) >= 50_000  # 60,000 seeded, some deleted
    _assert_proven(result, transcript, e2e_settings)


@pytest.mark.timeout(1500)
def test_the_generator_source_gives_the_same_proof(e2e_settings: LocalSettings) -> None:
    tag = uuid.uuid4().hex[:6]
    options = DemoOptions(
        source="generator",
        workload=WorkloadSpec(rate=200, duration_s=60, initial_rows=500, seed=23),
        schema=f"gen_{tag}",
        topic_prefix=f"gen{tag}",
        dead_letter_topic=f"deadletter_{tag}",
        service_env={"normalizer": {"ICEFJORD_NORMALIZER_DEAD_LETTER_TOPIC": f"deadletter_{tag}"}},
        catch_up_timeout_s=600,
        stop_services=True,
    )
    result, transcript = _run(e2e_settings, options)
    assert result.source == "generator"
    _assert_proven(result, transcript, e2e_settings)


@pytest.mark.timeout(1500)
def test_the_secured_stack_gives_the_same_proof(e2e_settings: LocalSettings) -> None:
    """Through SASL_SSL and the registry's HTTPS with basic auth (``make test-secure``):
    Debezium's Connect worker, the four services and the demo's own clients. While they all
    run, no password of the stack is on any process's command line."""
    if not e2e_settings.secured:
        pytest.skip("needs ICEFJORD_TEST_SECURITY=sasl_ssl (make test-secure)")
    tag = uuid.uuid4().hex[:6]
    options = DemoOptions(
        workload=WorkloadSpec(rate=100, duration_s=40, initial_rows=300, seed=31),
        schema=f"sec_{tag}",
        topic_prefix=f"sec{tag}",
        dead_letter_topic=f"deadletter_{tag}",
        service_env={"normalizer": {"ICEFJORD_NORMALIZER_DEAD_LETTER_TOPIC": f"deadletter_{tag}"}},
        catch_up_timeout_s=600,
        stop_services=False,  # still running for the command lines below (own_pipeline stops them)
    )
    result, transcript = _run(e2e_settings, options)
    running = [s.name for s in service_processes(e2e_settings) if s.running()]
    assert running == ["normalizer", "watcher", "writer", "maintainer"]
    if result.source == "postgres":
        assert KafkaConnect(e2e_settings, None).running()
    assert command_lines_with(stack_secrets(e2e_settings)) == []
    _assert_proven(result, transcript, e2e_settings)
