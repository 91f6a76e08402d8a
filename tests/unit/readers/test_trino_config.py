"""Trino's etc/ from the settings and the catalog's properties: pure functions."""

from __future__ import annotations

import tarfile
from pathlib import Path

import pytest

from icefjord.local.settings import LocalSettings
from icefjord.readers.trino import (
    TrinoError,
    TrinoServer,
    config_properties,
    find_java_home,
    jvm_config,
    properties_text,
    trino_catalog,
    unpack_server,
)


def test_the_sqlite_catalog_reads_the_local_warehouse(tmp_path: Path) -> None:
    settings = LocalSettings(state_dir=tmp_path)
    conf = trino_catalog("icefjord", settings.catalog_properties())

    assert conf["connector.name"] == "iceberg"
    assert conf["iceberg.catalog.type"] == "jdbc"
    assert conf["iceberg.jdbc-catalog.catalog-name"] == "icefjord"
    assert conf["iceberg.jdbc-catalog.driver-class"] == "org.sqlite.JDBC"
    assert conf["iceberg.jdbc-catalog.connection-url"] == (
        f"jdbc:sqlite:{tmp_path.resolve() / 'catalog' / 'catalog.db'}?busy_timeout=30000"
    )
    assert conf["iceberg.jdbc-catalog.default-warehouse-dir"] == settings.warehouse_uri
    assert conf["fs.native-local.enabled"] == "true"
    assert not any(key.startswith("s3.") for key in conf)


def test_the_postgres_catalog_on_s3_names_endpoint_keys_and_path_style(tmp_path: Path) -> None:
    settings = LocalSettings(
        state_dir=tmp_path, warehouse_store="s3", catalog_store="postgres", s3_port=9100
    )
    conf = trino_catalog("icefjord", settings.catalog_properties())

    assert conf["iceberg.jdbc-catalog.driver-class"] == "org.postgresql.Driver"
    assert conf["iceberg.jdbc-catalog.connection-url"] == (
        "jdbc:postgresql://127.0.0.1:5433/icefjord_catalog"
    )
    assert conf["iceberg.jdbc-catalog.connection-user"] == "icefjord"
    assert "iceberg.jdbc-catalog.connection-password" not in conf
    assert conf["iceberg.jdbc-catalog.default-warehouse-dir"] == "s3://icefjord/warehouse"
    assert conf["fs.native-s3.enabled"] == "true"
    assert conf["s3.endpoint"] == "http://127.0.0.1:9100"
    assert conf["s3.path-style-access"] == "true"
    assert conf["s3.region"] == "us-east-1"
    assert conf["s3.aws-access-key"] == "icefjord"
    assert conf["s3.aws-secret-key"] == "icefjord-local-secret"
    assert "fs.native-local.enabled" not in conf


def test_a_password_in_the_catalog_uri_becomes_the_connection_password() -> None:
    conf = trino_catalog(
        "c",
        {"type": "sql", "uri": "postgresql+psycopg2://u:pw@db:6432/cat", "warehouse": "file:///w"},
    )
    assert conf["iceberg.jdbc-catalog.connection-url"] == "jdbc:postgresql://db:6432/cat"
    assert conf["iceberg.jdbc-catalog.connection-user"] == "u"
    assert conf["iceberg.jdbc-catalog.connection-password"] == "pw"


def test_a_rest_catalog_is_refused() -> None:
    with pytest.raises(ValueError, match="JDBC"):
        trino_catalog("c", {"type": "rest", "uri": "http://catalog"})


def test_one_node_serves_and_query_memory_stays_inside_a_small_heap() -> None:
    config = config_properties("127.0.0.1", 8095, Path("/dist/trino-476/plugin"))
    assert config["coordinator"] == "true"
    assert config["node-scheduler.include-coordinator"] == "true"
    assert config["http-server.http.port"] == "8095"
    assert config["discovery.uri"] == "http://127.0.0.1:8095"
    assert config["plugin.dir"] == "/dist/trino-476/plugin"
    assert config["query.max-memory-per-node"] == "256MB"
    assert "-Xmx1G" in jvm_config("1G")


def test_etc_is_written_under_the_state_directory_with_the_catalog_private(
    tmp_path: Path,
) -> None:
    settings = LocalSettings(state_dir=tmp_path, trino_port=18123)
    server = TrinoServer(settings, "icefjord", settings.catalog_properties())
    etc = server.write_etc(tmp_path / "plugins")

    node = (etc / "node.properties").read_text()
    assert f"node.data-dir={tmp_path.resolve() / 'trino' / 'data'}\n" in node
    assert "http-server.http.port=18123\n" in (etc / "config.properties").read_text()
    catalog = etc / "catalog" / "icefjord.properties"
    assert "connector.name=iceberg\n" in catalog.read_text()
    assert catalog.stat().st_mode & 0o077 == 0
    assert properties_text({"a": "1", "b": "x=y"}) == "a=1\nb=x=y\n"


def test_the_newest_jdk_with_a_java_is_chosen(tmp_path: Path) -> None:
    for name in ("temurin-21-jdk", "temurin-25-jdk", "temurin-26-jdk"):
        (tmp_path / name / "bin").mkdir(parents=True)
    (tmp_path / "temurin-21-jdk" / "bin" / "java").touch()
    (tmp_path / "temurin-25-jdk" / "bin" / "java").touch()  # 26 has no java: skipped

    found = find_java_home(str(p) for p in tmp_path.iterdir())
    assert found == tmp_path / "temurin-25-jdk"
    with pytest.raises(TrinoError, match="Java 24 or newer"):
        find_java_home([])


def test_the_server_archive_unpacks_with_its_hard_links_and_without_its_top_folder(
    tmp_path: Path,
) -> None:
    source = tmp_path / "src" / "trino-server-core-476"
    (source / "lib").mkdir(parents=True)
    (source / "plugin" / "x").mkdir(parents=True)
    (source / "lib" / "guava.jar").write_bytes(b"jar bytes")
    (source / "plugin" / "x" / "guava.jar").hardlink_to(source / "lib" / "guava.jar")
    archive = tmp_path / "server.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(source, arcname="trino-server-core-476")

    unpack_server(archive, tmp_path / "server")

    assert (tmp_path / "server" / "plugin" / "x" / "guava.jar").read_bytes() == b"jar bytes"
    assert not (tmp_path / ".server-partial").exists()
