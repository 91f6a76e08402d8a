"""The four service images (``make images``) run with testcontainers against the session's
stack, on the production layout (S3 on SeaweedFS, the catalog in PostgreSQL): each does its
job inside its container as a non-root user on a read-only root file system, turns healthy
by its own HEALTHCHECK and ends gracefully on SIGTERM; the writer's container survives
kill -9 without losing or duplicating a change. Skipped with one line where no Docker engine
answers (``.ci/run`` installs and starts one)."""

from __future__ import annotations

import json
import re
import subprocess
import time
import tomllib
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from changes_support import Event, assert_equal_to_model, change_schema, control_events
from containers_support import (
    ROOT,
    UID,
    ServiceContainer,
    build_images,
    docker_problem,
    running,
    scrape,
    settings_env,
    storage_problem,
    with_free_metrics_port,
)
from debezium_support import json_envelope, json_key
from harness import Stack
from writer_support import producer_for, writer_settings

from services.cdc_normalizer.config import NormalizerSettings
from services.iceberg_writer.config import WriterSettings
from services.maintainer.config import MaintainerSettings, PlannerSettings
from services.maintainer.policy import MaintenancePolicy
from services.schema_watcher.config import WatcherSettings
from shared.events import SchemaChange
from shared.kafka import TopicRequest, ensure_topics, make_admin, make_consumer, make_producer

pytestmark = [pytest.mark.docker, pytest.mark.timeout(3600)]

# Budgets of deploy/README.md: no JVM in the first two, nor in the console.
BUDGET_MB = {
    "cdc-normalizer": 300,
    "schema-watcher": 300,
    "iceberg-writer": 1500,
    "maintainer": 1500,
    "console": 300,
}
LIST_DISTRIBUTIONS = (
    "import importlib.metadata as m, json, os, sys; "
    "site = next(p for p in sys.path if p.endswith('site-packages')); "
    "print(json.dumps({'dists': sorted({d.metadata['Name'].lower().replace('_', '-') + '==' "
    "+ d.version for d in m.distributions()}), 'packages': sorted("
    "n for n in os.listdir(site) if n in ('icefjord', 'contracts', 'shared')) + sorted("
    "'services.' + n for n in os.listdir(os.path.join(site, 'services')) "
    "if not n.startswith('_'))}))"
)


@pytest.fixture(scope="module")
def images() -> dict[str, str]:
    problem = docker_problem() or storage_problem()
    if problem:
        pytest.skip(problem)
    return build_images()


def assert_production_container(service: ServiceContainer) -> None:
    """The container runs as the images' own user on a read-only root file system."""
    code, uid = service.exec("id", "-u")
    assert (code, uid.strip()) == (0, str(UID))
    code, output = service.exec("touch", "/opt/venv/written")
    assert code != 0 and "Read-only file system" in output
    assert service.state()["Health"]["Status"] == "healthy"


NATIVE_VERSION = tomllib.loads((ROOT / "native" / "pyproject.toml").read_text())["project"][
    "version"
]


def test_each_image_is_within_its_budget_and_carries_only_what_its_service_imports(
    images: dict[str, str],
) -> None:
    import docker

    client = docker.from_env()
    sizes = {}
    for service, tag in images.items():
        image = client.images.get(tag)
        sizes[service] = image.attrs["Size"] / 1e6
        lock = f"{__file__.rsplit('/tests/', 1)[0]}/deploy/docker/requirements/{service}.txt"
        lines = open(lock).read().splitlines()  # noqa: SIM115 - a small file read once
        pins = {line for line in lines if line and not line.startswith("#")}
        modules = next(line for line in lines if line.startswith("# modules: ")).split()[2:]
        output = client.containers.run(
            tag, entrypoint=["python", "-c", LIST_DISTRIBUTIONS], remove=True, read_only=True
        )
        found = json.loads(output)
        installed = {d for d in found["dists"] if not d.startswith("icefjord==")}
        if service in ("cdc-normalizer", "iceberg-writer"):  # their compiled paths (native/)
            pins.add(f"icefjord-native=={NATIVE_VERSION}")
        assert installed == pins, f"{service}: {installed ^ pins}"
        assert sorted(found["packages"]) == sorted(modules), service
    print("image sizes (MB): " + ", ".join(f"{s} {mb:.0f}" for s, mb in sizes.items()))
    for service, megabytes in sizes.items():
        assert megabytes < BUDGET_MB[service], f"{service}: {megabytes:.0f} MB"


CUSTOMER_COLUMNS = [
    {"type": "int32", "optional": False, "field": "id"},
    {"type": "string", "optional": True, "field": "email"},
]


def debezium_change(table: str, op: str, key: int, email: str | None, lsn: int) -> bytes:
    """A Debezium PostgreSQL change event through Kafka Connect's JsonConverter."""
    row = {"id": key, "email": email}
    before, after = (row, None) if op == "d" else (None, row)
    return json_envelope(f"shop.inventory.{table}", CUSTOMER_COLUMNS, table, op, before, after, lsn)


def debezium_key(table: str, key: int) -> bytes:
    return json_key(f"shop.inventory.{table}", key)


def count_committed(stack: Stack, topic: str, expected: int, timeout_s: float) -> int:
    """Records on ``topic`` visible to a read_committed consumer, read until ``expected``."""
    consumer = make_consumer(stack.kafka, f"check-{uuid.uuid4().hex[:8]}")  # read_committed
    seen = 0
    deadline = time.monotonic() + timeout_s
    try:
        # Subscribed before it exists, a consumer would see the topic only at its next
        # metadata refresh (minutes): wait for the service to create it.
        while topic not in consumer.list_topics(timeout=10).topics:
            assert time.monotonic() < deadline, f"{topic} was never created"
            time.sleep(1)
        consumer.subscribe([topic])
        while seen < expected and time.monotonic() < deadline:
            message = consumer.poll(1.0)
            if message is not None and message.error() is None:
                seen += 1
        return seen
    finally:
        consumer.close()


def test_the_normalizer_image_turns_a_debezium_topic_into_change_records(
    stack: Stack, images: dict[str, str], unique: Callable[[str], str]
) -> None:
    table = unique("customers")
    source = f"{unique('shop')}.inventory.{table}"
    output = f"icefjord.changes.inventory.{table}"
    admin = make_admin(stack.kafka)
    ensure_topics(admin, [TopicRequest(source, 1)])
    producer = make_producer(stack.kafka)
    events = [(k, debezium_change(table, "c", k, f"u{k}@example.com", k)) for k in range(1, 41)]
    events += [(k, debezium_change(table, "u", k, f"v{k}@e.com", 100 + k)) for k in range(1, 11)]
    events += [(k, debezium_change(table, "d", k, None, 200 + k)) for k in range(11, 16)]
    for key, value in events:
        producer.produce(source, value=value, key=debezium_key(table, key))
    producer.flush(30)
    values = with_free_metrics_port(
        {
            "kafka": stack.kafka,
            "registry": stack.registry,
            "include_pattern": f"^{re.escape(source)}$",
            "group_id": f"normalizer-{table}",
            "transactional_id": f"tx-{table}",
            "dead_letter_topic": unique("deadletter"),
            "topic_replication_factor": 1,
        },
        NormalizerSettings,
    )
    settings = NormalizerSettings(**values)
    with running(images["cdc-normalizer"], settings_env(settings, stack), "normalizer") as service:
        service.wait_healthy()
        assert count_committed(stack, output, len(events), timeout_s=120) == len(events)
        assert_production_container(service)
        assert service.terminate() == 0
    for future in admin.delete_topics([source, output]).values():
        future.result()


def test_the_watcher_image_announces_a_schema(
    stack: Stack, images: dict[str, str], topic_factory: Callable[..., str], namespace: str
) -> None:
    control = topic_factory("control", partitions=1)
    table = f"{namespace}.accounts"
    topic = f"icefjord.changes.{table}"
    ensure_topics(make_admin(stack.kafka), [TopicRequest(topic, 1)])
    producer = producer_for(stack, topic)  # registers the change schema as it sends
    producer.send(change_schema(namespace, "accounts"), [Event(1, "CREATE", 1, name="a")])
    values = with_free_metrics_port(
        {
            "kafka": stack.kafka,
            "registry": stack.registry,
            "control_topic": control,
            "subject_pattern": rf"^icefjord\.changes\.{re.escape(namespace)}\..+-value$",
        },
        WatcherSettings,
    )
    settings = WatcherSettings(**values)
    with running(images["schema-watcher"], settings_env(settings, stack), "watcher") as service:
        service.wait_healthy()
        deadline = time.monotonic() + 120
        changes: list[SchemaChange] = []
        while not changes and time.monotonic() < deadline:
            changes = [e for e in control_events(stack, control) if isinstance(e, SchemaChange)]
            time.sleep(2)
        assert [(c.table, c.to_version) for c in changes] == [(table, 1)]
        assert_production_container(service)
        assert service.terminate() == 0


def test_the_console_image_serves_its_page_and_folds_the_control_topic(
    stack: Stack, images: dict[str, str], topic_factory: Callable[..., str], namespace: str
) -> None:
    from services.console.config import ConsoleSettings
    from shared.avro import AvroCodec
    from shared.control import ControlPublisher
    from shared.events import ControlEvent, OperatorCommand, OperatorCommandKind
    from shared.registry import make_registry_client

    control = topic_factory("control", partitions=2)
    table = f"{namespace}.orders"
    publisher = ControlPublisher(
        make_producer(stack.kafka), AvroCodec(make_registry_client(stack.registry)), control
    )
    command = OperatorCommand(command=OperatorCommandKind.PAUSE, table=table, requested_by="t")
    publisher.publish(ControlEvent.new(table, command, "test"))
    publisher.flush()
    values = with_free_metrics_port(
        {
            "kafka": stack.kafka,
            "registry": stack.registry,
            "control_topic": control,
            "dead_letter_topic": topic_factory("deadletter"),
            "quarantine_topic": topic_factory("quarantine"),
            "app_id": f"console-{uuid.uuid4().hex[:8]}",
            "topic_replication_factor": 1,
        },
        ConsoleSettings,
    )
    settings = ConsoleSettings(**values)
    with running(images["console"], settings_env(settings, stack), "console") as service:
        service.wait_healthy()
        base = f"http://127.0.0.1:{settings.metrics.port}"
        deadline = time.monotonic() + 60
        tables: list[dict[str, Any]] = []
        while not tables and time.monotonic() < deadline:
            with urllib.request.urlopen(f"{base}/api/tables", timeout=5) as response:
                tables = json.loads(response.read())["tables"]
            time.sleep(1)
        assert [(t["table"], t["paused"]) for t in tables] == [(table, True)]
        with urllib.request.urlopen(base, timeout=5) as response:
            assert b"Icefjord console" in response.read()
        assert_production_container(service)
        assert service.terminate() == 0


def writer_container_settings(stack: Stack, topic: str, **overrides: Any) -> WriterSettings:
    base = writer_settings(stack, topic, **overrides)
    values = with_free_metrics_port(
        {name: getattr(base, name) for name in type(base).model_fields}, WriterSettings
    )
    values["spark"] = type(base.spark)(master="local[2]")
    return WriterSettings(**values)


@pytest.fixture
def change_topic(stack: Stack, namespace: str) -> Iterator[str]:
    topic = f"icefjord.changes.{namespace}.orders"
    admin = make_admin(stack.kafka)
    ensure_topics(admin, [TopicRequest(topic, 3)])
    yield topic
    for future in admin.delete_topics([topic]).values():
        future.result()


def wait_until_equal(spark: Any, table: str, history: list[Event], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            assert_equal_to_model(spark, table, history)
            return
        except Exception:
            if time.monotonic() > deadline:
                raise
            time.sleep(3)


def test_the_writer_image_commits_survives_kill_minus_nine_and_flushes_on_sigterm(
    stack: Stack, spark: Any, images: dict[str, str], change_topic: str
) -> None:
    namespace = change_topic.split(".")[2]
    table = f"{namespace}.orders"
    schema = change_schema(namespace, "orders")
    producer = producer_for(stack, change_topic)
    settings = writer_container_settings(stack, change_topic)
    env = settings_env(settings, stack)
    history = [Event(i, "CREATE", i, name=f"a{i}", amount="1.00") for i in range(1, 201)]
    producer.send(schema, history)
    with running(images["iceberg-writer"], env, "writer") as first:
        first.wait_healthy(timeout_s=300)
        wait_until_equal(spark, table, history, timeout_s=240)
        assert_production_container(first)
        # kill -9 while changes arrive: whatever was committed stays, the rest is replayed.
        later = [Event(300 + i, "UPDATE", i, name=f"b{i}", amount="2.00") for i in range(1, 201)]
        later += [Event(600 + i, "DELETE", i) for i in range(1, 41)]
        producer.send(schema, later[:120])
        time.sleep(3)
        first.kill()
        producer.send(schema, later[120:])
        history += later
    with running(images["iceberg-writer"], env, "writer-restarted") as second:
        second.wait_healthy(timeout_s=300)
        wait_until_equal(spark, table, history, timeout_s=300)
    # SIGTERM with changes received and not committed yet (a commit at most every 10 min):
    # the writer commits them before it exits.
    patient = writer_container_settings(
        stack,
        change_topic,
        group_id=settings.group_id,
        control_topic=settings.control_topic,
        dead_letter_topic=settings.dead_letter_topic,
        quarantine_topic=settings.quarantine_topic,
        min_batch_s=600.0,
        freshness_target_s=600.0,
    )
    with running(images["iceberg-writer"], settings_env(patient, stack), "writer-sigterm") as third:
        third.wait_healthy(timeout_s=300)
        last = [Event(900 + i, "UPDATE", i, name=f"c{i}", amount="3.00") for i in range(41, 61)]
        producer.send(schema, last)
        history += last
        deadline = time.monotonic() + 120
        while received(scrape(patient.metrics.port), table) < len(last):
            assert time.monotonic() < deadline, "the writer did not receive the changes"
            time.sleep(1)
        assert third.terminate() == 0
    assert_equal_to_model(spark, table, history)


def received(samples: dict[str, float], table: str) -> float:
    """The writer's changes received for ``table``, every operation."""
    return sum(
        value
        for name, value in samples.items()
        if name.startswith("icefjord_writer_changes_received_total{") and f'table="{table}"' in name
    )


def test_the_maintainer_image_compacts_a_table(
    stack: Stack,
    spark: Any,
    images: dict[str, str],
    namespace: str,
    topic_factory: Callable[..., str],
) -> None:
    table = f"{namespace}.events"
    spark.sql(f"CREATE TABLE icefjord.{table} (id bigint, v string) USING iceberg")
    for batch in range(6):
        rows = [(batch * 10 + k, f"v{batch}") for k in range(4)]
        spark.createDataFrame(rows, "id long, v string").writeTo(f"icefjord.{table}").append()
    expected = sorted(tuple(r) for r in spark.sql(f"SELECT * FROM icefjord.{table}").collect())

    def data_files() -> int:
        return int(spark.sql(f"SELECT count(*) FROM icefjord.{table}.files").collect()[0][0])

    assert data_files() >= 6
    values = with_free_metrics_port(
        {
            "kafka": stack.kafka,
            "registry": stack.registry,
            "catalog": stack.catalog,
            "control_topic": topic_factory("control", partitions=1),
            "group_id": f"maintainer-{uuid.uuid4().hex[:8]}",
            "include": rf"{re.escape(namespace)}\..+",
            "policy": MaintenancePolicy(compact_min_small_files=5, orphan_interval_s=1e9),
            "planner": PlannerSettings(min_interval_s=0),
            "inspect_interval_s": 5,
            "inspect_min_interval_s": 0,
            "orphan_initial_delay_s": 1e9,
            "retry_delay_s": 0.5,
        },
        MaintainerSettings,
    )
    settings = MaintainerSettings(**values)
    with running(images["maintainer"], settings_env(settings, stack), "maintainer") as service:
        service.wait_healthy(timeout_s=300)
        deadline = time.monotonic() + 300
        while data_files() >= 6:
            assert time.monotonic() < deadline, "the maintainer did not compact the table"
            time.sleep(5)
        assert_production_container(service)
        assert service.terminate() == 0
    operations = [
        r[0] for r in spark.sql(f"SELECT operation FROM icefjord.{table}.snapshots").collect()
    ]
    assert "replace" in operations
    assert (
        sorted(tuple(r) for r in spark.sql(f"SELECT * FROM icefjord.{table}").collect()) == expected
    )


def compose_problem() -> str | None:
    """Why ``docker compose`` cannot run here, or None."""
    result = subprocess.run(
        ["docker", "compose", "version"], capture_output=True, text=True, check=False
    )
    if result.returncode != 0:
        return "docker compose is not installed (deploy/docker/base/build-compose.sh installs it)"
    return None


def test_the_compose_files_four_services_run_the_pipeline_against_the_stack(
    stack: Stack, spark: Any, images: dict[str, str], unique: Callable[[str], str], tmp_path: Path
) -> None:
    """docker-compose.yml is valid, and its four Icefjord services, pointed at the session's
    stack by deploy/compose/external-stack.yml (host network; the file's own Kafka, registry,
    PostgreSQL and MinIO are not started, because their images cannot be pulled here), turn a
    Debezium topic into an Iceberg table equal to the changes."""
    from testcontainers.compose import DockerCompose

    problem = compose_problem()
    if problem:
        pytest.skip(problem)
    assert stack.local is not None
    local = stack.local.settings
    catalog = local.running_catalog_properties()
    table = unique("customers")
    source = f"{unique('shop')}.inventory.{table}"
    control = unique("control")
    env_file = tmp_path / "compose.env"
    env_file.write_text(
        (ROOT / "deploy/compose.env.example").read_text()
        + "\n".join(
            f"{key}={value}"
            for key, value in {
                "EXTERNAL_KAFKA": stack.kafka.bootstrap_servers,
                "EXTERNAL_REGISTRY": stack.registry.url,
                "EXTERNAL_CATALOG_URI": catalog["uri"],
                "EXTERNAL_WAREHOUSE": catalog["warehouse"],
                "EXTERNAL_S3_ENDPOINT": catalog["s3.endpoint"],
                "EXTERNAL_S3_ACCESS_KEY": catalog["s3.access-key-id"],
                "EXTERNAL_S3_SECRET_KEY": catalog["s3.secret-access-key"],
                "EXTERNAL_SOURCE_PATTERN": f"^{re.escape(source)}$",
                "EXTERNAL_SUBJECT_PATTERN": rf"^icefjord\.changes\.inventory\.{table}-value$",
                "EXTERNAL_CHANGES_PATTERN": rf"^icefjord\.changes\.inventory\.{table}$",
                "EXTERNAL_TABLES_PATTERN": rf"inventory\.{table}",
                "EXTERNAL_CONTROL_TOPIC": control,
            }.items()
        )
        + "\n"
    )
    files = ["docker-compose.yml", "deploy/compose/external-stack.yml"]
    for chosen in (files[:1], files):
        command = ["docker", "compose", *[a for f in chosen for a in ("-f", f)]]
        config = subprocess.run(
            [*command, "--env-file", str(env_file), "config", "--quiet"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=False,
        )
        assert config.returncode == 0, config.stderr
    ensure_topics(make_admin(stack.kafka), [TopicRequest(source, 1)])
    producer = make_producer(stack.kafka)
    for k in range(1, 31):
        change = debezium_change(table, "c", k, f"u{k}@example.com", k)
        producer.produce(source, value=change, key=debezium_key(table, k))
    for k in range(1, 11):
        change = debezium_change(table, "u", k, f"v{k}@example.com", 50 + k)
        producer.produce(source, value=change, key=debezium_key(table, k))
    for k in range(21, 26):
        change = debezium_change(table, "d", k, None, 100 + k)
        producer.produce(source, value=change, key=debezium_key(table, k))
    producer.flush(30)
    expected = {k: f"{'v' if k <= 10 else 'u'}{k}@example.com" for k in range(1, 31)}
    for k in range(21, 26):
        del expected[k]
    services = ["cdc-normalizer", "schema-watcher", "iceberg-writer", "maintainer"]
    compose = DockerCompose(
        ROOT, compose_file_name=files, env_file=str(env_file), services=services, wait=True
    )
    with compose:
        deadline = time.monotonic() + 300
        while True:
            try:
                rows = spark.sql(f"SELECT id, email FROM icefjord.inventory.{table}").collect()
                if {r["id"]: r["email"] for r in rows} == expected:
                    break
            except Exception as exc:  # the table does not exist yet
                rows = [exc]
            if time.monotonic() > deadline:
                out, _err = compose.get_logs()
                pytest.fail(f"the table is not equal to the changes: {rows[:5]}\n{out[-5000:]}")
            time.sleep(3)
        announced = [e for e in control_events(stack, control) if isinstance(e, SchemaChange)]
        assert [c.table for c in announced] == [f"inventory.{table}"]
        compose.stop(down=False)  # SIGTERM to each, then their exit codes
        exits = {c.Service: c.ExitCode for c in compose.get_containers(include_all=True)}
        assert exits == dict.fromkeys(services, 0), compose.get_logs()
    spark.sql(f"DROP TABLE IF EXISTS icefjord.inventory.{table} PURGE")
