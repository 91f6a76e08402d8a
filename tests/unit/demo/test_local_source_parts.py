"""The local CDC source's configuration: PostgreSQL, Connect, the services' environments."""

from __future__ import annotations

import stat
import zipfile
from pathlib import Path

import pytest

from icefjord.demo.source import SourceNames, choose_schema
from icefjord.local.artifacts import (
    CONVERTER_MODULE,
    LEASE_GUARD_MODULE,
    LEASE_GUARD_PREFIX,
    LOCALFS_CLASS,
    LOCALFS_MODULE,
    ArtifactError,
    Dist,
    build_lease_guard_jar,
    build_localfs_jar,
    connect_dist_for,
    dist_for,
    ensure_artifacts,
    localfs_jar_for,
    module_digest,
)
from icefjord.local.connect import (
    JSON_CONVERTER,
    KafkaConnect,
    PostgresSource,
    debezium_postgres_config,
)
from icefjord.local.postgres import PostgresNotInstalled, find_bin_dir, server_config
from icefjord.local.services import SERVICES, service_env, service_processes, service_spec
from icefjord.local.settings import LocalSettings
from services.cdc_normalizer.config import NormalizerSettings
from services.iceberg_writer.config import WriterSettings
from services.maintainer.config import MaintainerSettings

pytestmark = pytest.mark.unit


def settings(tmp_path: Path) -> LocalSettings:
    return LocalSettings(
        state_dir=tmp_path / "state",
        cache_dir=tmp_path / "cache",
        kafka_port=19092,
        registry_port=18081,
        writer_port=19403,
    )


def fake_bin(directory: Path, names: tuple[str, ...]) -> Path:
    directory.mkdir(parents=True)
    for name in names:
        (directory / name).write_text("#!/bin/sh\n")
        (directory / name).chmod(stat.S_IRWXU)
    return directory


def test_find_bin_dir_uses_the_configured_directory(tmp_path: Path) -> None:
    complete = fake_bin(
        tmp_path / "pg" / "bin", ("initdb", "pg_ctl", "postgres", "pg_isready", "psql")
    )
    assert find_bin_dir(complete) == complete
    partial = fake_bin(tmp_path / "partial", ("initdb",))
    with pytest.raises(PostgresNotInstalled, match="apt-get install postgresql-15"):
        find_bin_dir(partial)


def test_server_config_enables_logical_decoding_on_our_port(tmp_path: Path) -> None:
    s = settings(tmp_path).model_copy(update={"postgres_port": 6543})
    text = server_config(s, tmp_path / "run")
    lines = dict(line.split(" = ", 1) for line in text.splitlines() if line)
    assert lines["wal_level"] == "logical"
    assert lines["port"] == "6543"
    assert lines["listen_addresses"] == "'127.0.0.1'"
    assert lines["unix_socket_directories"] == f"'{tmp_path / 'run'}'"
    assert int(lines["max_replication_slots"]) >= 4 and int(lines["max_wal_senders"]) >= 4
    assert lines["track_commit_timestamp"] == "on"


def test_postgres_home_defaults_into_the_state_dir(tmp_path: Path) -> None:
    s = settings(tmp_path)
    assert s.postgres_home == (tmp_path / "state" / "postgres").resolve()
    assert s.postgres_port == 5433


def test_connector_config_has_the_demo_settings() -> None:
    config = debezium_postgres_config(
        PostgresSource("127.0.0.1", 5433, "icefjord", "icefjord", "shop", "demo", "pub", "slot")
    )
    assert config["plugin.name"] == "pgoutput"
    assert config["decimal.handling.mode"] == "precise"
    assert config["time.precision.mode"] == "adaptive_time_microseconds"
    assert config["key.converter.schemas.enable"] == config["value.converter.schemas.enable"]
    assert config["value.converter.schemas.enable"] == "true"
    assert config["key.converter"] == config["value.converter"] == JSON_CONVERTER
    assert config["heartbeat.interval.ms"] == "0"
    assert (config["topic.prefix"], config["schema.include.list"]) == ("demo", "shop")
    assert (config["publication.name"], config["slot.name"]) == ("pub", "slot")


def test_connect_worker_uses_both_libs_and_the_plugin_path(tmp_path: Path) -> None:
    s = settings(tmp_path)
    dist = connect_dist_for(s)
    worker = KafkaConnect(s, dist).worker_properties()
    assert worker["bootstrap.servers"] == "127.0.0.1:19092"
    assert worker["plugin.path"] == str(dist.plugin_path)
    assert worker["listeners"] == "http://127.0.0.1:8083"
    assert worker["config.storage.replication.factor"] == "1"
    # Tasks survive a broker restart: revocation waits for the heartbeat interval.
    assert int(worker["heartbeat.interval.ms"]) >= 45_000
    assert int(worker["heartbeat.interval.ms"]) < int(worker["session.timeout.ms"])
    assert dist.connect_lib.parts[-2] == "connect-3.9.1"
    assert not dist.complete()
    assert worker["value.converter"] == JSON_CONVERTER
    # The converter's jar is on the worker's classpath, after Kafka's and Connect's jars.
    assert dist.classpath.split(":") == [
        f"{dist.kafka_lib}/*",
        f"{dist.connect_lib}/*",
        str(dist.converter_jar),
    ]


def test_the_converter_is_rebuilt_when_its_sources_change(tmp_path: Path) -> None:
    module = tmp_path / "connect-json"
    source = module / "src" / "main" / "java" / "Converter.java"
    source.parent.mkdir(parents=True)
    (module / "pom.xml").write_text("<project/>")
    source.write_text("class Converter {}")
    first = module_digest(module)
    (module / "target").mkdir()
    (module / "target" / "out.jar").write_bytes(b"built")
    assert module_digest(module) == first  # build output does not count
    source.write_text("class Converter { int x; }")
    assert module_digest(module) != first
    # The real module: the jar's directory is named after its digest.
    assert module_digest(CONVERTER_MODULE) in str(
        connect_dist_for(settings(tmp_path)).converter_jar
    )


def test_service_env_points_every_service_at_the_stack(tmp_path: Path) -> None:
    s = settings(tmp_path)
    for spec in SERVICES:
        env = service_env(spec, s)
        p = spec.env_prefix
        assert env[f"{p}KAFKA__BOOTSTRAP_SERVERS"] == "127.0.0.1:19092"
        assert env[f"{p}REGISTRY__URL"] == "http://127.0.0.1:18081/apis/ccompat/v7"
        assert env["PYICEBERG_CATALOG__ICEFJORD__TYPE"] == "sql"
        assert env["PYICEBERG_CATALOG__ICEFJORD__URI"].startswith("sqlite:////")
        assert env["PYICEBERG_CATALOG__ICEFJORD__WAREHOUSE"].startswith("file:///")
    writer = service_env(service_spec("writer"), s)
    assert writer["ICEFJORD_WRITER_METRICS__PORT"] == "19403"
    # A table created mid-run: both pattern subscribers must find its topic within seconds
    # (librdkafka's own default is 5 minutes).
    assert NormalizerSettings().metadata_refresh_ms <= 10_000
    assert WriterSettings().metadata_refresh_ms <= 10_000
    assert writer["ICEFJORD_WRITER_SPARK__JARS"].endswith("spark-jars-1.12.0/*.jar")


def test_spark_services_use_the_local_file_system_once_its_jar_is_built(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    s = settings(tmp_path)
    jar = localfs_jar_for(s)
    assert jar is not None  # pyspark ships its Hadoop jar
    assert module_digest(LOCALFS_MODULE) in str(jar) and "hadoop-client-api" in str(jar)
    # Not built: Hadoop's own file system, and `local up` has the jar to build.
    assert "ICEFJORD_WRITER_SPARK__CONF" not in service_env(service_spec("writer"), s)
    resolved = Dist(
        kafka_lib=fake_bin(tmp_path / "kafka", ("kafka_2.13-3.9.1.jar",)),
        apicurio_jar=fake_bin(tmp_path / "apicurio", ("app.jar",)) / "app.jar",
        spark_jars=(),
        localfs_jar=jar,
    )
    assert resolved.resolved() and not resolved.complete()
    assert dist_for(s).localfs_jar == jar
    jar.parent.mkdir(parents=True)
    jar.write_bytes(b"built")
    assert resolved.complete()
    for name in ("writer", "maintainer"):
        key = f"ICEFJORD_{name.upper()}_SPARK__CONF"
        monkeypatch.setenv(key, service_env(service_spec(name), s)[key])
    conf = {"spark.driver.extraClassPath": str(jar), "spark.hadoop.fs.file.impl": LOCALFS_CLASS}
    # What each service's settings read from its environment.
    assert WriterSettings().spark.conf == conf
    assert MaintainerSettings().spark.conf == conf
    for name in ("normalizer", "watcher"):
        assert not any("SPARK" in key for key in service_env(service_spec(name), s))


def test_a_local_file_system_that_does_not_compile_is_an_artifact_error(tmp_path: Path) -> None:
    module = tmp_path / "spark-localfs"
    source = module / "src" / "main" / "java" / "Broken.java"
    source.parent.mkdir(parents=True)
    source.write_text("class Broken { int x = ; }")
    target = tmp_path / "out" / "localfs.jar"
    with pytest.raises(ArtifactError, match="javac failed"):
        build_localfs_jar(target, module)
    assert not target.exists()
    source.write_text("public class Broken { }")
    build_localfs_jar(target, module)
    assert target.is_file() and not target.with_suffix(".partial").exists()


def test_the_stack_starts_without_the_local_file_system_if_it_does_not_build(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import icefjord.local.artifacts as artifacts

    s = settings(tmp_path)
    resolved = dist_for(s)  # Maven's artifacts in place, as fakes: no Maven runs
    fake_bin(resolved.kafka_lib, ("kafka_2.13-3.9.1.jar",))
    for jar in (resolved.apicurio_jar, *resolved.spark_jars):
        jar.parent.mkdir(parents=True, exist_ok=True)
        jar.write_bytes(b"jar")

    def broken(target: Path) -> None:
        raise ArtifactError("javac failed: no JDK here")

    def guard_broken(target: Path, iceberg_jar: Path) -> None:
        assert iceberg_jar == resolved.spark_jars[0]
        raise ArtifactError("javac failed: no JDK here")

    monkeypatch.setattr(artifacts, "build_localfs_jar", broken)
    monkeypatch.setattr(artifacts, "build_lease_guard_jar", guard_broken)
    said: list[str] = []
    dist = ensure_artifacts(s, said.append)
    assert dist.resolved() and not dist.complete()
    assert said[-3:] == [
        "not built, Spark keeps Hadoop's local file system: javac failed: no JDK here",
        "compiling the writer's lease guard (deploy/iceberg-lease-guard)",
        "not built, the writer keeps its own look at the lease: javac failed: no JDK here",
    ]
    assert "ICEFJORD_WRITER_SPARK__CONF" not in service_env(service_spec("writer"), s)


def test_the_lease_guard_builds_beside_the_iceberg_runtime_and_replaces_older_builds(
    tmp_path: Path,
) -> None:
    """Compiled against the real runtime jar (``.ci/run`` fetches it before the tests)."""
    runtime = dist_for(LocalSettings()).spark_jars[0]
    if not runtime.is_file():
        pytest.skip(f"no Iceberg runtime at {runtime}: run `icefjord local up` once")
    jars = tmp_path / "spark-jars"
    older = jars / f"{LEASE_GUARD_PREFIX}000000000000.jar"
    older.parent.mkdir()
    older.write_bytes(b"an older build")
    target = dist_for(settings(tmp_path)).lease_guard_jar
    assert target is not None and module_digest(LEASE_GUARD_MODULE) in target.name
    target = jars / target.name
    build_lease_guard_jar(target, runtime)
    assert sorted(jars.iterdir()) == [target]
    with zipfile.ZipFile(target) as jar:
        assert "io/icefjord/iceberg/LeaseGuard.class" in jar.namelist()


def test_normalizer_reads_only_the_demo_topics(tmp_path: Path) -> None:
    import re

    env = service_env(service_spec("normalizer"), settings(tmp_path), source_topic_prefix="demo")
    pattern = re.compile(env["ICEFJORD_NORMALIZER_INCLUDE_PATTERN"])
    assert pattern.search("demo.shop.customers")
    assert not pattern.search("other.shop.customers")
    assert not pattern.search("demoX.shop.customers")
    extra = service_processes(
        settings(tmp_path),
        ["normalizer"],
        extra_env={"normalizer": {"ICEFJORD_NORMALIZER_GROUP_ID": "g"}},
    )
    assert extra[0].env["ICEFJORD_NORMALIZER_GROUP_ID"] == "g"
    with pytest.raises(KeyError):
        service_spec("nope")


def test_schema_names_for_repeated_runs() -> None:
    assert choose_schema(set()) == "shop"
    assert choose_schema({"shop", "shop_2"}) == "shop_3"
    names = SourceNames("shop_2", "demo")
    assert names.topic("orders") == "demo.shop_2.orders"
    assert names.iceberg("orders") == "shop_2.orders"
    assert names.slot == names.publication == "icefjord_shop_2"
    with pytest.raises(ValueError):
        choose_schema(set(), "Bad-Name")
