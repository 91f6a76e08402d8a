"""Pure tests of the shared runtime: wire format, settings, retry, loop, endpoints, catalog."""

from __future__ import annotations

import threading
import urllib.error
import urllib.request
from decimal import Decimal
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry, Counter
from pydantic import SecretStr

from shared.avro import WireFormatError, decode, encode, parse, split_header
from shared.catalog import is_secret, spark_catalog_conf
from shared.endpoint import Health, MetricsServer
from shared.errors import Backoff, FatalError, RetryableError, retry
from shared.loop import run_loop
from shared.settings import KafkaSettings, RegistrySettings, ServiceSettings, masked

pytestmark = pytest.mark.unit

ROW = parse(
    {
        "type": "record",
        "name": "Row",
        "fields": [
            {"name": "id", "type": "long"},
            {"name": "amount", "type": {"type": "bytes", "logicalType": "decimal",
                                        "precision": 12, "scale": 2}},
            {"name": "note", "type": ["null", "string"], "default": None},
        ],
    }
)  # fmt: skip


@given(
    schema_id=st.integers(min_value=0, max_value=2**31 - 1),
    row_id=st.integers(min_value=-(2**63), max_value=2**63 - 1),
    cents=st.integers(min_value=-(10**11), max_value=10**11),
    note=st.none() | st.text(),
)
def test_wire_format_round_trips(schema_id: int, row_id: int, cents: int, note: str | None) -> None:
    record = {"id": row_id, "amount": Decimal(cents).scaleb(-2), "note": note}
    data = encode(schema_id, ROW, record)
    assert data[0] == 0
    assert int.from_bytes(data[1:5], "big") == schema_id
    assert split_header(data)[0] == schema_id
    assert decode(data, ROW) == record


def test_wire_format_rejects_bad_frames() -> None:
    with pytest.raises(WireFormatError, match="shorter"):
        split_header(b"\x00\x01")
    with pytest.raises(WireFormatError, match="magic"):
        split_header(b"\x01\x00\x00\x00\x01rest")
    with pytest.raises(WireFormatError, match="does not match"):
        decode(b"\x00\x00\x00\x00\x01\xff", ROW)


def test_kafka_security_settings_pass_through_and_secrets_stay_masked() -> None:
    kafka = KafkaSettings(
        bootstrap_servers="broker:9093",
        security_protocol="SASL_SSL",
        sasl_mechanism="SCRAM-SHA-512",
        sasl_username="icefjord",
        sasl_password=SecretStr("hunter2"),
        ssl_ca_location="/etc/ca.pem",
        extra={"socket.keepalive.enable": "true"},
    )
    config = kafka.client_config()
    assert config["security.protocol"] == "SASL_SSL"
    assert config["sasl.mechanism"] == "SCRAM-SHA-512"
    assert config["sasl.password"] == "hunter2"
    assert config["ssl.ca.location"] == "/etc/ca.pem"
    assert config["socket.keepalive.enable"] == "true"
    assert "ssl.key.password" not in config
    settings = ServiceSettings(kafka=kafka)
    assert "hunter2" not in str(masked(settings))
    registry = RegistrySettings(basic_auth_user_info=SecretStr("u:p"))
    assert registry.client_config()["basic.auth.user.info"] == "u:p"


def test_service_settings_read_nested_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ICEFJORD_KAFKA__BOOTSTRAP_SERVERS", "k1:9092,k2:9092")
    monkeypatch.setenv("ICEFJORD_METRICS__PORT", "9555")
    settings = ServiceSettings()
    assert settings.kafka.bootstrap_servers == "k1:9092,k2:9092"
    assert settings.metrics.port == 9555


def test_retry_retries_retryable_errors_then_gives_up() -> None:
    calls: list[int] = []

    def flaky() -> str:
        calls.append(1)
        if len(calls) < 3:
            raise RetryableError("down")
        return "up"

    assert retry(flaky, what="flaky", backoff=Backoff(initial=0.001, attempts=5)) == "up"
    assert len(calls) == 3

    def always_down() -> None:
        raise RetryableError("still down")

    with pytest.raises(RetryableError, match="still down"):
        retry(always_down, what="down", backoff=Backoff(initial=0.001, attempts=3))

    fatal_calls: list[int] = []

    def fatal() -> None:
        fatal_calls.append(1)
        raise FatalError("bad config")

    with pytest.raises(FatalError):
        retry(fatal, what="fatal", backoff=Backoff(initial=0.001))
    assert len(fatal_calls) == 1


def test_backoff_is_bounded() -> None:
    delays = Backoff(initial=1, maximum=4, factor=2, attempts=6).delays()
    assert delays == [1, 2, 4, 4, 4]


def test_loop_marks_not_ready_while_a_dependency_is_down_and_recovers() -> None:
    stop = threading.Event()
    health = Health()
    seen: list[bool] = []
    steps = iter([RetryableError("registry down"), None, "stop"])

    def step() -> None:
        seen.append(health.is_ready)
        outcome = next(steps)
        if isinstance(outcome, Exception):
            raise outcome
        if outcome == "stop":
            stop.set()

    run_loop(step, stop, health, retry_delay=0.001)
    assert seen == [False, False, True]
    assert health.is_ready


def test_a_hold_keeps_a_working_service_not_ready_until_released() -> None:
    stop = threading.Event()
    health = Health()
    health.hold("warming up Spark")
    steps = iter([None, None, "release", None, "stop"])
    seen: list[tuple[bool, str]] = []

    def step() -> None:
        outcome = next(steps)
        if outcome == "release":
            health.release("warming up Spark")
        if outcome == "stop":
            stop.set()
        seen.append((health.is_ready, health.reason))

    run_loop(step, stop, health, retry_delay=0.001)
    # Before the first step ends, the loop's own reason; then the hold's; then ready.
    assert seen[0] == (False, "starting")
    assert seen[1] == (False, "warming up Spark")
    assert seen[2] == (True, "ok")
    assert health.is_ready
    health.release("never held")  # harmless
    health.dead("wedged")
    health.hold("again")
    assert not health.is_ready and health.reason == "wedged"


def _get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def test_metrics_server_serves_metrics_and_health() -> None:
    registry = CollectorRegistry()
    counter = Counter("icefjord_test_events_total", "events", ["topic"], registry=registry)
    counter.labels("a").inc(3)
    health = Health()
    server = MetricsServer("127.0.0.1", 0, registry, health).start()
    try:
        base = f"http://127.0.0.1:{server.port}"
        status, body = _get(f"{base}/metrics")
        assert status == 200
        assert 'icefjord_test_events_total{topic="a"} 3.0' in body
        assert _get(f"{base}/readyz")[0] == 503
        health.ready()
        assert _get(f"{base}/readyz") == (200, "ok\n")
        assert _get(f"{base}/healthz")[0] == 200
        health.dead("wedged")
        assert _get(f"{base}/healthz") == (503, "wedged\n")
        assert _get(f"{base}/nope")[0] == 404
    finally:
        server.close()


def test_spark_catalog_conf_translates_pyiceberg_properties(tmp_path: Path) -> None:
    conf = spark_catalog_conf(
        "lake",
        {"type": "sql", "uri": f"sqlite:///{tmp_path}/c.db?timeout=30", "warehouse": "file:/w"},
    )
    assert conf["spark.sql.catalog.lake"] == "org.apache.iceberg.spark.SparkCatalog"
    assert conf["spark.sql.catalog.lake.type"] == "jdbc"
    assert conf["spark.sql.catalog.lake.uri"].startswith(f"jdbc:sqlite:{tmp_path}/c.db?")
    assert conf["spark.sql.catalog.lake.warehouse"] == "file:/w"
    pg = spark_catalog_conf(
        "lake",
        {"type": "sql", "uri": "postgresql+psycopg2://ice:pw@db:5433/cat", "s3.endpoint": "x"},
    )
    assert pg["spark.sql.catalog.lake.uri"] == "jdbc:postgresql://db:5433/cat"
    assert pg["spark.sql.catalog.lake.jdbc.user"] == "ice"
    assert pg["spark.sql.catalog.lake.jdbc.password"] == "pw"
    assert pg["spark.sql.catalog.lake.s3.endpoint"] == "x"
    rest = spark_catalog_conf("lake", {"type": "rest", "uri": "http://rest:8181"})
    assert rest["spark.sql.catalog.lake.type"] == "rest"
    with pytest.raises(ValueError, match="glue"):
        spark_catalog_conf("lake", {"type": "glue"})


def test_an_authenticated_rest_catalog_reaches_spark_whole() -> None:
    properties = {
        "type": "rest",
        "uri": "https://rest:8181",
        "credential": "client:secret",
        "token": "t0k",
        "oauth2-server-uri": "https://idp/token",
        "scope": "catalog",
        "header.X-Iceberg-Access-Delegation": "vended-credentials",
        "warehouse": "lake",
        "py-io-impl": "pyiceberg.io.fsspec.FsspecFileIO",
    }
    conf = spark_catalog_conf("lake", properties)
    for key, value in properties.items():
        if key not in ("type", "py-io-impl"):
            assert conf[f"spark.sql.catalog.lake.{key}"] == value
    assert "spark.sql.catalog.lake.py-io-impl" not in conf
    secret = {k for k in conf if is_secret(k)}
    assert secret == {
        "spark.sql.catalog.lake.credential",
        "spark.sql.catalog.lake.token",
        "spark.sql.catalog.lake.header.X-Iceberg-Access-Delegation",
    }


def test_an_s3_warehouse_uses_s3fileio_and_its_keys_are_secret() -> None:
    conf = spark_catalog_conf(
        "lake",
        {
            "type": "sql",
            "uri": "postgresql+psycopg2://ice:pw@db:5433/cat",
            "warehouse": "s3://bucket/warehouse",
            "s3.endpoint": "http://s3:8333",
            "s3.access-key-id": "AK",
            "s3.secret-access-key": "SK",
            "client.region": "us-east-1",
        },
    )
    assert conf["spark.sql.catalog.lake.io-impl"] == "org.apache.iceberg.aws.s3.S3FileIO"
    assert conf["spark.sql.catalog.lake.client.region"] == "us-east-1"
    assert {k.rsplit(".", 1)[-1] for k in conf if is_secret(k)} == {
        "password",
        "access-key-id",
        "secret-access-key",
    }
    assert not is_secret("spark.sql.catalog.lake.s3.endpoint")
    assert not is_secret("spark.sql.catalog.lake.oauth2-server-uri")
