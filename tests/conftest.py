"""Test harness: the real local stack, started once per test session.

By default the session starts its own stack (Kafka, Apicurio, Iceberg JDBC catalog) in a
temporary state directory on free ports, reusing the download cache, and stops it at the
end. ``ICEFJORD_TEST_STORAGE=s3`` makes it the production layout instead: the warehouse on
the stack's S3 server (SeaweedFS) and the catalog in its PostgreSQL. To test against an
existing stack instead, set ``ICEFJORD_TEST_BOOTSTRAP_SERVERS`` and
``ICEFJORD_TEST_REGISTRY_URL`` (and pyiceberg's ``PYICEBERG_CATALOG__ICEFJORD__*``).
Each test gets its own topics, subjects and tables from the factory fixtures.
"""

from __future__ import annotations

import os
import tempfile
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Literal

import pytest
from harness import Stack, free_port
from hypothesis import HealthCheck
from hypothesis import settings as hypothesis_settings

from icefjord.local.settings import LocalSettings
from icefjord.local.stack import LocalStack
from shared.settings import CatalogSettings, KafkaSettings, RegistrySettings

# The test machine has 2 cores shared with Kafka, the registry and Spark: per-example
# deadlines would make property tests fail on load, not on behaviour.
hypothesis_settings.register_profile(
    "icefjord", deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
hypothesis_settings.load_profile("icefjord")


@pytest.fixture(scope="session")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    bootstrap = os.environ.get("ICEFJORD_TEST_BOOTSTRAP_SERVERS")
    if bootstrap:
        yield Stack(
            kafka=KafkaSettings(bootstrap_servers=bootstrap),
            registry=RegistrySettings(url=os.environ["ICEFJORD_TEST_REGISTRY_URL"]),
            catalog=CatalogSettings(),
            local=None,
        )
        return
    state = tmp_path_factory.mktemp("stack")
    settings = LocalSettings(
        state_dir=state,
        kafka_port=free_port(),
        kafka_controller_port=free_port(),
        registry_port=free_port(),
        **_storage_settings(os.environ.get("ICEFJORD_TEST_STORAGE", "file")),
        security=_security_setting(os.environ.get("ICEFJORD_TEST_SECURITY", "none")),
    )
    local = LocalStack(settings)
    try:
        report = local.up(progress=lambda message: None)
        print(f"\nlocal stack healthy in {report.seconds:.1f} s under {state}")
        yield Stack(
            kafka=settings.kafka_settings(),
            registry=settings.registry_settings(),
            catalog=CatalogSettings(name=settings.catalog_name, local_state_dir=state),
            local=local,
        )
    finally:
        local.down()


def _security_setting(security: str) -> Literal["none", "sasl_ssl"]:
    """``ICEFJORD_TEST_SECURITY=sasl_ssl``: Kafka's client listener SASL_SSL, the registry
    behind HTTPS with basic auth (``make test-secure``)."""
    if security == "none" or security == "sasl_ssl":
        return security
    raise pytest.UsageError(f"ICEFJORD_TEST_SECURITY={security!r}: use none or sasl_ssl")


def _storage_settings(storage: str) -> dict[str, Any]:
    """LocalSettings for the warehouse and catalog under test, on free ports."""
    if storage == "file":
        return {}
    if storage != "s3":
        raise pytest.UsageError(f"ICEFJORD_TEST_STORAGE={storage!r}: use file or s3")
    ports = (
        "s3_port s3_master_port s3_volume_port s3_filer_port s3_grpc_port "
        "s3_master_grpc_port s3_volume_grpc_port s3_filer_grpc_port postgres_port"
    )
    # Under /tmp, open to others: started by root, PostgreSQL runs as `postgres` and must
    # reach its directory (pytest's own tmp dirs are 0700).
    home = Path(tempfile.mkdtemp(prefix="icefjord-catalog-"))
    home.chmod(0o755)
    return {
        "warehouse_store": "s3",
        "catalog_store": "postgres",
        "postgres_dir": home / "pg",
        **{name: free_port() for name in ports.split()},
    }


@pytest.fixture
def unique() -> Callable[[str], str]:
    """``unique("orders")`` -> ``orders_3f2a9c1b``: names no other test uses."""
    return lambda prefix: f"{prefix}_{uuid.uuid4().hex[:8]}"


@pytest.fixture
def topic_factory(stack: Stack, unique: Callable[[str], str]) -> Iterator[Callable[..., str]]:
    """Create topics for one test; they are deleted afterwards."""
    from shared.kafka import TopicRequest, ensure_topics, make_admin

    admin = make_admin(stack.kafka)
    created: list[str] = []

    def create(prefix: str = "test", partitions: int = 1, **config: str) -> str:
        name = unique(prefix)
        ensure_topics(admin, [TopicRequest(name, partitions, config=dict(config))])
        created.append(name)
        return name

    yield create
    if created:
        for future in admin.delete_topics(created).values():
            future.result()


@pytest.fixture(scope="session")
def spark(stack: Stack) -> Iterator[Any]:
    """One SparkSession for the whole test session (a cold start costs 5-9 s)."""
    from shared.spark import SparkSettings, build_spark_session

    session = build_spark_session("icefjord-tests", SparkSettings(master="local[2]"), stack.catalog)
    yield session
    session.stop()


@pytest.fixture
def namespace(stack: Stack, unique: Callable[[str], str]) -> Iterator[str]:
    """A fresh Iceberg namespace for one test, dropped with its tables afterwards."""
    from shared.catalog import open_catalog

    catalog = open_catalog(stack.catalog)
    name = unique("ns")
    catalog.create_namespace(name)
    yield name
    for identifier in catalog.list_tables(name):
        catalog.purge_table(identifier)
    catalog.drop_namespace(name)


PRODUCTION_LAYOUT_ONLY = (
    "storage makes no difference to what this proves, and the production layout's run (make "
    "test-s3, S3 and a PostgreSQL catalog) is the one users deploy: it runs there"
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark tests by their folder, so no test depends on a module remembering its marker:
    tests under tests/unit are ``unit``, those under tests/integration ``integration``
    unless marked ``e2e``. A test under tests/unit that asks for the stack is an error.
    A ``production_layout`` test is skipped unless the session runs that layout."""
    tests = Path(__file__).parent
    on_s3 = os.environ.get("ICEFJORD_TEST_STORAGE") == "s3"
    for item in items:
        path = Path(str(item.fspath))
        folder = path.relative_to(tests).parts[0] if path.is_relative_to(tests) else ""
        if folder == "unit":
            if "stack" in getattr(item, "fixturenames", ()):
                raise pytest.UsageError(f"{item.nodeid} needs the stack: move it to integration")
            item.add_marker(pytest.mark.unit)
        elif folder == "integration" and not item.get_closest_marker("e2e"):
            item.add_marker(pytest.mark.integration)
        if item.get_closest_marker("production_layout") and not on_s3:
            item.add_marker(pytest.mark.skip(reason=PRODUCTION_LAYOUT_ONLY))
